//! The `RustQueue` custom resource (`rustqueue.io/v1alpha1`, namespaced, short name `rq`).
//!
//! Every spec field with its serde default (which schemars copies into
//! the OpenAPI `default`), OpenAPI bounds, and CEL `x-kubernetes-validations` for the
//! cross-field rules, so the API server refuses an inconsistent spec before the operator sees
//! it. The same rules run client-side in tests (`kube/cel`). The generated YAML is checked in
//! under `crds/`.

mod catalog;
mod console;
mod defaults;
mod spec;
mod status;
mod tiering;
mod tracing;

pub use catalog::{
    CatalogAction, CatalogOperation, CatalogPhase, QUEUE_LABEL, RustQueueChannel,
    RustQueueChannelSpec, RustQueueTopic, RustQueueTopicSpec, channel_object_name,
    topic_object_name,
};
pub use console::{Console, ConsoleManagement, ConsoleResources};
pub use spec::{
    BrokerResources, BrokerScheduling, KodoCompatibility, Maintenance, PublishAckMode, Rollout,
    RustQueue, RustQueueSpec, Toleration,
};
pub use status::{
    BrokerRestore, Condition, ConditionStatus, OperationKind, OperationPhase, OperationStatus,
    RustQueueStatus,
};
pub use tiering::{MAX_LOCAL_RETENTION_SECONDS, Tiering, TieringCredentials};
pub use tracing::{TraceSampler, Tracing};

/// Largest `maxMessageBytes` that fits the legacy 72 MiB v7 record bound; above it the
/// storage feature level must be at least 2 (docs/operator.md, "Preflight and feature levels").
pub const LEGACY_MAX_MESSAGE_BYTES: u64 = 71 * 1024 * 1024;
/// Hard ceiling of `maxMessageBytes` (100 MiB).
pub const MAX_MESSAGE_BYTES_CEILING: u64 = 100 * 1024 * 1024;
