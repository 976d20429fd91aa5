//! The broker PodDisruptionBudget: voluntary evictions (node drains) may take at most one
//! broker at a time, and never the only one.

use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use rustqueue_api::labels;

use super::{Owner, match_labels, names, selector_labels};

/// `<n>-brokers` with minAvailable max(replicas − 1, 1).
pub fn pod_disruption_budget(owner: &Owner<'_>, replicas: i32) -> PodDisruptionBudget {
    pdb(
        owner,
        &names::pdb(owner.name),
        labels::COMPONENT_BROKER,
        (replicas - 1).max(1),
    )
}

/// A PDB keeping `min_available` Pods of `component` through voluntary evictions.
pub(super) fn pdb(
    owner: &Owner<'_>,
    name: &str,
    component: &str,
    min_available: i32,
) -> PodDisruptionBudget {
    PodDisruptionBudget {
        metadata: owner.metadata(name, component),
        spec: Some(PodDisruptionBudgetSpec {
            min_available: Some(IntOrString::Int(min_available)),
            selector: Some(match_labels(selector_labels(owner.name, component))),
            ..PodDisruptionBudgetSpec::default()
        }),
        ..PodDisruptionBudget::default()
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::owner;
    use super::*;

    #[test]
    fn min_available_leaves_room_for_one_disruption_but_never_zero() {
        for (replicas, min) in [(0, 1), (1, 1), (2, 1), (3, 2), (5, 4)] {
            let pdb = pod_disruption_budget(&owner(), replicas);
            assert_eq!(
                pdb.spec.unwrap().min_available,
                Some(IntOrString::Int(min)),
                "{replicas}"
            );
        }
    }
}
