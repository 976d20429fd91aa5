//! rustqueue-operator: reconciles `RustQueue` resources into running broker clusters.
//!
//! ```text
//!   observe (cluster + broker /v1/health) ──► Observed
//!   plan(spec, Observed)        [pure]    ──► Plan { phase, conditions, actions }
//!   render(spec, inputs)        [pure]    ──► ConfigMap, Secret, Service, StatefulSet, PDB, RBAC
//!   apply (server-side apply, one field manager) + status + Events
//! ```
//!
//! Only the Lease holder runs the controller (`leader`); losing the Lease drops the
//! controller future and with it any reconcile in flight.
//!
//! The face below is what the binary (`main.rs`) and the integration tests use; every module
//! behind it is private. Tests that reach further (the planner's fixtures, `reconcile` and the
//! `Applier` against a scripted API) get `testing`, with the `test-support` feature.

mod apply;
// Public as a whole: the table of API calls that config/rbac must grant (tests compare them).
pub mod calls;
mod controller;
mod crdgen;
mod leader;
mod metrics;
mod observe;
mod plan;
mod render;
mod spans;
mod status;

pub use apply::{KodoObjectKind, kodo_gateway_objects};
pub use controller::{Context, Scope, run};
pub use crdgen::{crd_files, crd_stream};
pub use leader::{release as release_lease, run as campaign};
pub use metrics::{Metrics, serve as serve_metrics};
pub use observe::broker_http_client;

/// The operator's insides that tests drive or build fixtures from (feature `test-support`).
#[cfg(any(test, feature = "test-support"))]
pub mod testing {
    pub use crate::controller::{Applier, error_policy, reconcile};
    pub use crate::plan::builder::{CAPABLE, LEVEL_ONE, ObservedBuilder, RETAINING};
    pub use crate::plan::{Action, AuthState, Observed, plan, validate};
    pub use crate::render::{AuthTokens, ConsoleObjects, Desired, DesiredInputs, Owner, role};
    pub use crate::status::{error_status, next_status};
}

/// A reconcile failure, naming the operation that failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Kubernetes API call failed.
    #[error("{action}: {source}")]
    Kube {
        /// What we were doing.
        action: String,
        /// The client error.
        #[source]
        source: kube::Error,
    },
    /// A broker's control endpoint refused or failed a request.
    #[error("broker {pod}: {detail}")]
    Broker {
        /// Broker Pod.
        pod: String,
        /// What failed.
        detail: String,
    },
    /// The RustQueue object lacks a namespace or UID (not from the API server).
    #[error("RustQueue {0} has no namespace or uid")]
    MissingMetadata(String),
}

impl Error {
    /// Wrap a kube error with the action that failed.
    pub fn kube(action: &str, source: kube::Error) -> Self {
        Self::Kube {
            action: action.to_string(),
            source,
        }
    }

    /// What kind of failure this is: the `reason` of
    /// `rustqueue_operator_reconcile_errors_total` and what [`Error::retry_after`] decides by.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::Kube {
                source: kube::Error::Api(e),
                ..
            } => match e.code {
                409 => "api_conflict",
                429 => "api_throttled",
                500.. => "api_unavailable",
                _ => "api_refused",
            },
            Self::Kube { .. } => "api_unreachable",
            Self::Broker { .. } => "broker",
            Self::MissingMetadata(_) => "missing_metadata",
        }
    }

    /// How long to wait before reconciling again after this failure: at once for a write that
    /// lost a race, soon for a broker (they restart in seconds and a rollout waits on them),
    /// longer for an API server that is unavailable or throttles us, and a minute for a
    /// refusal (RBAC, an invalid object) that only a person fixes.
    pub fn retry_after(&self) -> std::time::Duration {
        std::time::Duration::from_secs(match self.metric_label() {
            "api_conflict" => 1,
            "broker" => 5,
            "api_unreachable" | "api_unavailable" => 10,
            "api_throttled" => 20,
            "api_refused" => 60,
            _ => 300,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16) -> Error {
        Error::kube(
            "apply StatefulSet q",
            kube::Error::Api(
                kube::core::Status::failure("no", "Reason")
                    .with_code(code)
                    .boxed(),
            ),
        )
    }

    #[test]
    fn each_kind_of_failure_has_its_label_and_back_off() {
        let broker = Error::Broker {
            pod: "q-0".into(),
            detail: "connection refused".into(),
        };
        let cases = [
            (api(409), "api_conflict", 1),
            (broker, "broker", 5),
            (api(503), "api_unavailable", 10),
            (api(429), "api_throttled", 20),
            (api(403), "api_refused", 60),
            (Error::MissingMetadata("q".into()), "missing_metadata", 300),
        ];
        for (e, label, secs) in cases {
            assert_eq!(e.metric_label(), label, "{e}");
            assert_eq!(e.retry_after().as_secs(), secs, "{e}");
        }
    }
}
