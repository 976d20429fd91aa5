//! rustqueue-operator: reconciles `RustQueue` resources into running broker clusters.
//!
//! ```text
//!   observe (cluster + broker /v1/health) ──► Observed
//!   plan(spec, Observed)        [pure]    ──► Plan { phase, conditions, actions }
//!   render(spec, inputs)        [pure]    ──► ConfigMap, Secret, Service, StatefulSet, PDB, RBAC
//!   apply (server-side apply, one field manager) + status + Events
//! ```
//!
//! Only the Lease holder runs the controller ([`leader`]); losing the Lease drops the
//! controller future and with it any reconcile in flight.

pub mod apply;
pub mod calls;
pub mod controller;
pub mod crdgen;
pub mod leader;
pub mod metrics;
pub mod observe;
pub mod plan;
pub mod render;
pub mod status;

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
}
