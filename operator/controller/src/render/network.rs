//! NetworkPolicies: on a cluster that enforces them, only the NSQ ports of a broker are
//! reachable (`<n>-broker-ingress`: TCP 4150 and HTTP 4151, from any namespace), and the
//! instance's other Pods (discovery, the gateway, the probe) take ingress from any
//! namespace (`<n>-internal`). A port a broker opens later is closed until listed here. The
//! console has a policy of its own (`render/console.rs`).

use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use rustqueue_api::labels;

use super::{Owner, match_labels, names, selector_labels};

/// Pods of any namespace (an empty namespace selector).
fn any_namespace() -> Vec<NetworkPolicyPeer> {
    vec![NetworkPolicyPeer {
        namespace_selector: Some(LabelSelector::default()),
        ..NetworkPolicyPeer::default()
    }]
}

fn ingress_policy(
    owner: &Owner<'_>,
    name: &str,
    component: &str,
    pods: LabelSelector,
    rule: NetworkPolicyIngressRule,
) -> NetworkPolicy {
    NetworkPolicy {
        metadata: owner.metadata(name, component),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(pods),
            policy_types: Some(vec!["Ingress".into()]),
            ingress: Some(vec![rule]),
            ..NetworkPolicySpec::default()
        }),
    }
}

/// `<n>-broker-ingress`: broker Pods accept the NSQ TCP and HTTP ports, nothing else.
pub fn broker_network_policy(owner: &Owner<'_>) -> NetworkPolicy {
    let port = |p: u16| NetworkPolicyPort {
        protocol: Some("TCP".into()),
        port: Some(IntOrString::Int(p.into())),
        ..NetworkPolicyPort::default()
    };
    ingress_policy(
        owner,
        &names::broker_network_policy(owner.name),
        labels::COMPONENT_BROKER,
        match_labels(selector_labels(owner.name, labels::COMPONENT_BROKER)),
        NetworkPolicyIngressRule {
            from: Some(any_namespace()),
            ports: Some(vec![
                port(labels::BROKER_TCP_PORT),
                port(labels::BROKER_HTTP_PORT),
            ]),
        },
    )
}

/// `<n>-internal`: every Pod of the instance except brokers (and the Kodo gateway and the
/// console, which have policies of their own) accepts ingress from any namespace.
pub fn internal_network_policy(owner: &Owner<'_>) -> NetworkPolicy {
    let mut instance = selector_labels(owner.name, labels::COMPONENT_BROKER);
    instance.remove(labels::COMPONENT);
    let pods = LabelSelector {
        match_labels: Some(instance),
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: labels::COMPONENT.into(),
            operator: "NotIn".into(),
            values: Some(vec![
                labels::COMPONENT_BROKER.into(),
                labels::COMPONENT_KODO_GATEWAY.into(),
                labels::COMPONENT_CONSOLE.into(),
            ]),
        }]),
    };
    ingress_policy(
        owner,
        &names::internal_network_policy(owner.name),
        labels::COMPONENT_RUNTIME,
        pods,
        NetworkPolicyIngressRule {
            from: Some(any_namespace()),
            ports: None,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::owner;
    use super::*;
    use std::collections::BTreeMap;

    /// What a NetworkPolicy's pod selector selects, for a Pod with `pod_labels`.
    fn selects(policy: &NetworkPolicy, pod_labels: &BTreeMap<String, String>) -> bool {
        let sel = policy.spec.as_ref().unwrap().pod_selector.clone().unwrap();
        let labels_match = sel
            .match_labels
            .unwrap_or_default()
            .iter()
            .all(|(k, v)| pod_labels.get(k) == Some(v));
        let expressions_match = sel.match_expressions.unwrap_or_default().iter().all(|e| {
            let values = e.values.clone().unwrap_or_default();
            match e.operator.as_str() {
                "NotIn" => pod_labels.get(&e.key).is_none_or(|v| !values.contains(v)),
                "In" => pod_labels.get(&e.key).is_some_and(|v| values.contains(v)),
                other => panic!("operator {other} not modelled"),
            }
        });
        labels_match && expressions_match
    }

    #[test]
    fn brokers_open_only_the_nsq_ports_to_every_namespace() {
        let p = broker_network_policy(&owner());
        assert_eq!(p.metadata.name.as_deref(), Some("queue-broker-ingress"));
        let spec = p.spec.clone().unwrap();
        assert_eq!(spec.policy_types, Some(vec!["Ingress".to_string()]));
        let rule = &spec.ingress.unwrap()[0];
        let ports: Vec<IntOrString> = rule
            .ports
            .clone()
            .unwrap()
            .into_iter()
            .map(|p| p.port.unwrap())
            .collect();
        assert_eq!(ports, [IntOrString::Int(4150), IntOrString::Int(4151)]);
        assert_eq!(
            rule.from.clone().unwrap()[0].namespace_selector,
            Some(LabelSelector::default())
        );
    }

    #[test]
    fn each_pod_of_the_instance_is_guarded_by_exactly_one_policy() {
        let broker = broker_network_policy(&owner());
        let internal = internal_network_policy(&owner());
        for (component, by_broker) in [
            (labels::COMPONENT_BROKER, true),
            (super::super::COMPONENT_PROBE, false),
            (labels::COMPONENT_DISCOVERY, false),
            (labels::COMPONENT_GATEWAY, false),
        ] {
            let pod = super::super::object_labels("queue", component);
            assert_eq!(selects(&broker, &pod), by_broker, "{component}");
            assert_eq!(selects(&internal, &pod), !by_broker, "{component}");
        }
        let other_instance = super::super::object_labels("other", "discovery");
        assert!(!selects(&internal, &other_instance));
        let gateway = super::super::object_labels("queue", labels::COMPONENT_KODO_GATEWAY);
        assert!(!selects(&internal, &gateway) && !selects(&broker, &gateway));
        let console = super::super::object_labels("queue", labels::COMPONENT_CONSOLE);
        assert!(!selects(&internal, &console) && !selects(&broker, &console));
    }
}
