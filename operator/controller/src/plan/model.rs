//! What `plan` reads ([`Observed`]) and what it decides ([`Action`], [`Plan`]).

use std::time::Duration;

use rustqueue_api::contract::{Capabilities, DrainStatus, NotReadyReason, RestoreSummary};
use rustqueue_api::crd::{BrokerRestore, OperationStatus};

use super::conditions::{ConditionSpec, Phase};
use crate::render::{DiscoveryMode, KodoLayout};

/// The state of the auth Secret the brokers mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthState {
    /// Present with three distinct tokens; `revision` is its resourceVersion.
    Valid {
        /// Secret resourceVersion (part of the pod-template revision).
        revision: String,
    },
    /// The operator-generated Secret does not exist yet.
    GeneratedMissing,
    /// The user-named Secret does not exist.
    UserMissing,
    /// Present but its tokens are missing, blank or shared.
    Invalid(String),
}

/// What the broker's `/v1/health` said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    /// 200 ready.
    Ready,
    /// 503 with a reason.
    NotReady(NotReadyReason),
    /// Pod has no IP yet, or the request failed.
    Unreachable(String),
}

/// One broker Pod as observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerPod {
    /// Pod name.
    pub name: String,
    /// Pod IP, once assigned.
    pub ip: Option<String>,
    /// Kubelet readiness (condition Ready=True).
    pub pod_ready: bool,
    /// Has a deletionTimestamp.
    pub terminating: bool,
    /// Value of the revision annotation.
    pub revision: Option<String>,
    /// Image of the broker container.
    pub image: Option<String>,
    /// Why the container is not running, if the kubelet says (`ImagePullBackOff`, ...), or
    /// the Pod phase when unscheduled.
    pub waiting: Option<String>,
    /// The broker's own readiness.
    pub health: Health,
    /// `GET /v1/drain`, when the broker answered.
    pub drain: Option<DrainStatus>,
    /// `GET /v1/capabilities`, when the broker answered.
    pub capabilities: Option<Capabilities>,
    /// The ConfigMap its config volume mounts.
    pub config_map: Option<String>,
    /// Damage at rest the broker quarantined (`storage_damage` of `/v1/health`), when it
    /// reported any.
    pub damage: Option<StorageDamage>,
    /// The Pod's uid (a new Pod is a new restore).
    pub uid: String,
    /// Its restore init container (with tiering), as the kubelet reports it.
    pub restore: Option<RestoreRun>,
}

/// The restore init container of a broker Pod (docs/tiering.md, "The operator's restore").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestoreRun {
    /// Not started yet (the Pod is being scheduled, its image pulled, ...).
    Pending,
    /// Running: an empty volume is being rebuilt from the bucket (or a volume with data is
    /// being looked at, which takes a moment).
    Running {
        /// RFC 3339 start.
        started_at: Option<String>,
    },
    /// Ended with exit status 0 and its summary.
    Done {
        /// What it did.
        summary: RestoreSummary,
        /// RFC 3339 start.
        started_at: Option<String>,
        /// RFC 3339 end.
        finished_at: Option<String>,
    },
    /// Ended otherwise (or its summary was unreadable): the broker does not start.
    Failed {
        /// Its termination message (the log's tail).
        message: String,
        /// RFC 3339 end.
        finished_at: Option<String>,
    },
}

/// The Secret `spec.tiering.credentialsSecret` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TieringSecret {
    /// No `spec.tiering`.
    Unused,
    /// Present with both keys; `revision` is its resourceVersion.
    Valid {
        /// resourceVersion (part of the pod-template revision).
        revision: String,
    },
    /// It does not exist.
    Missing {
        /// Its name.
        name: String,
    },
    /// It lacks keys (or they are empty).
    MissingKeys {
        /// Its name.
        name: String,
        /// The keys it lacks.
        keys: Vec<String>,
    },
}

impl TieringSecret {
    /// Its resourceVersion when usable.
    pub fn revision(&self) -> Option<String> {
        match self {
            Self::Valid { revision } => Some(revision.clone()),
            _ => None,
        }
    }
}

/// What a broker reports of the damage at rest it found and quarantined (docs/api.md).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StorageDamage {
    /// Audit records across restarts.
    pub findings: u64,
    /// Messages those records lost (never delivered).
    pub messages: u64,
    /// The newest record, in words: kind, topic, file and who found it.
    pub latest: Option<String>,
}

impl BrokerPod {
    /// Ready for traffic: Pod Ready, not terminating, and the broker says ready.
    pub fn is_ready(&self) -> bool {
        self.pod_ready && !self.terminating && self.health == Health::Ready
    }

    /// The broker reports a drain (publishes refused).
    pub fn is_draining(&self) -> bool {
        self.drain.is_some_and(|d| d.draining)
    }

    /// What its drain still waits for, for messages (`12 stored, 3 in flight`).
    pub fn drain_progress(&self) -> String {
        match &self.drain {
            Some(d) => format!(
                "{} stored, {} waiting, {} in flight",
                d.stored_messages, d.depth, d.in_flight
            ),
            None => "drain status unknown".into(),
        }
    }

    /// Runs `revision`.
    pub fn runs(&self, revision: &str) -> bool {
        self.revision.as_deref() == Some(revision)
    }

    /// Why it is not ready, for messages.
    pub fn why_not_ready(&self) -> String {
        if self.terminating {
            return "terminating".into();
        }
        match &self.restore {
            Some(RestoreRun::Running { .. }) => return RESTORING.into(),
            Some(RestoreRun::Failed { message, .. }) => {
                return format!("RestoreFromBucketFailed ({})", last_line(message));
            }
            _ => {}
        }
        if let Some(w) = &self.waiting {
            return w.clone();
        }
        match &self.health {
            Health::NotReady(r) => r.as_str().into(),
            Health::Unreachable(e) if !self.pod_ready => format!("PodNotReady ({e})"),
            Health::Unreachable(e) => e.clone(),
            Health::Ready => "PodNotReady".into(),
        }
    }
}

/// The reason a broker whose restore init container runs is not Ready.
pub const RESTORING: &str = "RestoringFromBucket";

/// The last non-empty line of `text`, at most 300 characters (a log tail's error).
pub(crate) fn last_line(text: &str) -> String {
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .chars()
        .take(300)
        .collect()
}

/// One broker PVC as observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// PVC name (`data-<n>-<ordinal>`).
    pub name: String,
    /// `spec.storageClassName`.
    pub storage_class: Option<String>,
    /// `spec.resources.requests.storage`.
    pub requested: Option<String>,
    /// `status.capacity.storage`.
    pub capacity: Option<String>,
    /// `status.phase == Bound`.
    pub bound: bool,
}

/// A capability probe Pod as observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbePod {
    /// Pod name (carries the contract fingerprint).
    pub name: String,
    /// `status.phase`.
    pub phase: String,
    /// Waiting reason of the probe container (`ImagePullBackOff`, ...).
    pub waiting: Option<String>,
    /// Termination message of the probe container (the capabilities JSON on success).
    pub message: Option<String>,
}

/// The StorageClass named by the spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StorageClassState {
    /// It does not exist.
    Missing,
    /// It exists; whether claims of it may grow.
    Present {
        /// `allowVolumeExpansion`.
        allow_expansion: bool,
    },
}

/// Everything `plan` needs to know about the cluster, read fresh on every reconcile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    /// Nodes carrying the eligible label (readiness ignored: the label is membership intent).
    pub eligible_nodes: i32,
    /// `spec.replicas` of the broker StatefulSet; `None` when it does not exist.
    pub statefulset_replicas: Option<i32>,
    /// Broker Pods of this RustQueue.
    pub brokers: Vec<BrokerPod>,
    /// Broker PVCs of this RustQueue.
    pub claims: Vec<Claim>,
    /// The StorageClass of `spec.storageClassName`.
    pub storage_class: StorageClassState,
    /// Broker ConfigMaps of this RustQueue (names).
    pub config_maps: Vec<String>,
    /// Capability probe Pods of this RustQueue.
    pub probes: Vec<ProbePod>,
    /// The auth Secret.
    pub auth: AuthState,
    /// The bucket credentials Secret of `spec.tiering`.
    pub tiering_secret: TieringSecret,
    /// Storage request of the existing StatefulSet's claim template (immutable once created).
    pub claim_template_size: Option<String>,
    /// The discovery Deployment; `None` when it does not exist.
    pub discovery: Option<Workload>,
    /// The producer gateway DaemonSet; `None` when it does not exist.
    pub gateway: Option<Workload>,
    /// The console Deployment `<n>-console` (`None`: absent).
    pub console: Option<Workload>,
    /// The Kodo Gateways and the discovery publisher mode.
    pub kodo: KodoObserved,
}

/// The Kodo profile's objects as observed (docs/kodo.md).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KodoObserved {
    /// The Gateway StatefulSet `<n>-kodo-gateway`; `None` when it does not exist.
    pub gateways: Option<GatewaySet>,
    /// The mode label of the discovery Deployment's Pod template (`None`: unlabeled).
    pub discovery_template_mode: Option<DiscoveryMode>,
    /// The mode in the discovery Service's selector (`None`: no mode, or no Service).
    pub discovery_route: Option<DiscoveryMode>,
    /// Discovery Pods (old ones included).
    pub discovery_pods: Vec<DiscoveryPod>,
}

/// The Gateway StatefulSet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewaySet {
    /// `spec.replicas`.
    pub replicas: i32,
    /// `status.updateRevision` (the controller revision of the latest template).
    pub update_revision: Option<String>,
    /// Controller-owned by this RustQueue (only then is it ever deleted).
    pub owned: bool,
    /// Its Pods.
    pub pods: Vec<GatewayPod>,
}

/// One Gateway Pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayPod {
    /// Pod name.
    pub name: String,
    /// Condition Ready=True and not terminating.
    pub ready: bool,
    /// Label `controller-revision-hash`.
    pub controller_revision: Option<String>,
    /// Annotation `rustqueue.io/revision` (what the operator rendered).
    pub revision: Option<String>,
}

/// One discovery Pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscoveryPod {
    /// Its mode label.
    pub mode: Option<DiscoveryMode>,
    /// Condition Ready=True and not terminating.
    pub ready: bool,
}

impl Observed {
    /// This reading with the runtime workloads replaced, e.g. by what applying their new
    /// template returned.
    pub fn with_runtime(
        mut self,
        discovery: Workload,
        gateway: Workload,
        console: Option<Workload>,
    ) -> Self {
        self.discovery = Some(discovery);
        self.gateway = Some(gateway);
        if console.is_some() {
            self.console = console;
        }
        self
    }
}

/// A runtime workload (the discovery Deployment, the gateway DaemonSet) as its controller
/// reports it in `status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Workload {
    /// Its controller has seen the latest spec (`status.observedGeneration >= generation`).
    pub observed: bool,
    /// Pods it should run: a Deployment's `spec.replicas`, a DaemonSet's
    /// `desiredNumberScheduled`.
    pub desired: i32,
    /// Of those, how many run the latest Pod template.
    pub updated: i32,
    /// Pods (a DaemonSet: Nodes) that are Ready.
    pub ready: i32,
    /// Pods that exist, old ones included (a DaemonSet: Nodes with a Pod).
    pub total: i32,
}

impl Workload {
    /// `None` when every Pod runs the latest template and is Ready and no old Pod is left;
    /// else what is missing, for a condition message.
    pub fn unavailable(&self) -> Option<String> {
        if !self.observed {
            return Some("its controller has not seen the latest spec yet".into());
        }
        if self.desired == 0 {
            return Some("no Pod is scheduled (does any Node match the selector?)".into());
        }
        if self.updated < self.desired || self.ready < self.total || self.total > self.desired {
            return Some(format!(
                "{} of {} Pods updated, {} of {} Ready",
                self.updated, self.desired, self.ready, self.total
            ));
        }
        None
    }

    /// A workload whose `desired` Pods all run the latest template and are Ready.
    #[cfg(any(test, feature = "test-support"))]
    pub fn available(desired: i32) -> Self {
        Self {
            observed: true,
            desired,
            updated: desired,
            ready: desired,
            total: desired,
        }
    }
}

impl Observed {
    /// The broker Pod `name`.
    pub fn broker(&self, name: &str) -> Option<&BrokerPod> {
        self.brokers.iter().find(|b| b.name == name)
    }

    /// Highest storage feature level any running broker reports as active.
    pub fn active_feature_level(&self) -> Option<u32> {
        self.brokers
            .iter()
            .filter_map(|b| b.capabilities.as_ref())
            .map(|c| c.storage.active_writer_feature_level)
            .max()
    }
}

/// How far a drain must go before the broker may be disrupted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrainGoal {
    /// Publishes refused and deliveries frozen with nothing in flight; the backlog stays on
    /// the PVC (rollout: the Pod comes back on the same PVC).
    Quiesced,
    /// Publishes refused, consumers keep draining until nothing is stored (scale-down,
    /// maintenance).
    Empty,
}

impl DrainGoal {
    /// Whether `status` satisfies the goal. A broker that does not report the freeze must be
    /// fully drained.
    pub fn reached(self, status: &DrainStatus) -> bool {
        let empty = status.empty || status.drained;
        match self {
            Self::Quiesced => {
                status.draining && ((status.delivery_frozen && status.quiesced) || empty)
            }
            Self::Empty => status.draining && empty,
        }
    }

    /// `freeze_deliveries` of the drain request.
    pub fn freezes(self) -> bool {
        self == Self::Quiesced
    }
}

/// A change the applier must make. The applier decides nothing: every name and number is here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Create the operator-generated auth Secret with fresh tokens (never overwrite).
    CreateAuthSecret {
        /// Secret name.
        name: String,
    },
    /// Apply what keeps clients working with the running brokers: ServiceAccount, Role,
    /// RoleBinding, the internal NetworkPolicy, the broker and discovery Services, and the
    /// discovery Deployment and PDB, its Pods running `image`; and the console's objects
    /// while `spec.console.enabled` (its Pod running `image` too).
    ApplyRuntime {
        /// The image the brokers run: the target's only once every broker runs the target
        /// revision, so a blocked or unfinished rollout cannot take discovery down with it.
        image: String,
        /// The Kodo Gateways and the discovery mode and route (docs/kodo.md).
        kodo: KodoLayout,
    },
    /// Remove the Kodo Gateways: delete their Services, PDB and NetworkPolicy, then their
    /// StatefulSet — each only when controller-owned by this RustQueue.
    DeleteKodoGateways,
    /// Remove the console (`spec.console.enabled: false`): delete its Service,
    /// NetworkPolicy, RoleBinding, Role and ServiceAccount, then its Deployment — each only
    /// when controller-owned by this RustQueue.
    DeleteConsole,
    /// Apply the target ConfigMap, the broker StatefulSet with `replicas` (OnDelete: no Pod
    /// is replaced by this; the drained scale-down lowers `replicas` here) and the PDB.
    ApplyBrokerSet {
        /// StatefulSet replicas.
        replicas: i32,
    },
    /// `POST /v1/drain {enabled: true, freeze_deliveries: goal == Quiesced}`.
    Drain {
        /// Broker Pod.
        pod: String,
        /// What the drain waits for.
        goal: DrainGoal,
    },
    /// `POST /v1/drain {enabled: false}`.
    Resume {
        /// Broker Pod.
        pod: String,
    },
    /// Delete a drained broker Pod; the StatefulSet recreates it from the target template on
    /// the same PVC.
    DeletePod {
        /// Broker Pod.
        pod: String,
    },
    /// Grow a claim's `spec.resources.requests.storage`.
    PatchClaim {
        /// PVC name.
        name: String,
        /// New request.
        size: String,
    },
    /// Apply the target ConfigMap and create the capability probe Pod of the target.
    CreateProbePod {
        /// Pod name.
        name: String,
    },
    /// Delete a probe Pod of an older contract.
    DeleteProbePod {
        /// Pod name.
        name: String,
    },
    /// Delete a broker ConfigMap no Pod mounts and the target does not use.
    DeleteConfigMap {
        /// ConfigMap name.
        name: String,
    },
}

impl Action {
    /// The action's name, as its span and logs show it: the variant.
    pub fn kind(&self) -> &'static str {
        match self {
            Action::CreateAuthSecret { .. } => "CreateAuthSecret",
            Action::ApplyRuntime { .. } => "ApplyRuntime",
            Action::DeleteKodoGateways => "DeleteKodoGateways",
            Action::DeleteConsole => "DeleteConsole",
            Action::ApplyBrokerSet { .. } => "ApplyBrokerSet",
            Action::Drain { .. } => "Drain",
            Action::Resume { .. } => "Resume",
            Action::DeletePod { .. } => "DeletePod",
            Action::PatchClaim { .. } => "PatchClaim",
            Action::CreateProbePod { .. } => "CreateProbePod",
            Action::DeleteProbePod { .. } => "DeleteProbePod",
            Action::DeleteConfigMap { .. } => "DeleteConfigMap",
        }
    }

    /// The object the action is about, when it names one (a Pod, a claim, a Secret, ...).
    pub fn target(&self) -> Option<&str> {
        match self {
            Action::CreateAuthSecret { name }
            | Action::PatchClaim { name, .. }
            | Action::CreateProbePod { name }
            | Action::DeleteProbePod { name }
            | Action::DeleteConfigMap { name } => Some(name),
            Action::Drain { pod, .. } | Action::Resume { pod } | Action::DeletePod { pod } => {
                Some(pod)
            }
            Action::ApplyRuntime { .. }
            | Action::DeleteKodoGateways
            | Action::DeleteConsole
            | Action::ApplyBrokerSet { .. } => None,
        }
    }
}

/// What one reconcile does to `status.currentOperation`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum OperationChange {
    /// Keep the previous one as it is (this reconcile decided no operation).
    #[default]
    Keep,
    /// The operation after this reconcile.
    Set(Box<OperationStatus>),
    /// The spec withdrew the previous one: it is in the history now, nothing is current.
    Clear,
}

impl OperationChange {
    /// The operation this reconcile set, if it set one.
    #[cfg(test)]
    pub fn set(&self) -> Option<&OperationStatus> {
        match self {
            Self::Set(op) => Some(op.as_ref()),
            Self::Keep | Self::Clear => None,
        }
    }
}

/// The decision of one reconcile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Summary phase.
    pub phase: Phase,
    /// Human-readable summary.
    pub message: String,
    /// Broker target.
    pub desired_brokers: i32,
    /// Ready brokers of the target set.
    pub ready_brokers: i32,
    /// Conditions to write (merged with the previous ones by the status writer).
    pub conditions: Vec<ConditionSpec>,
    /// Changes to make, in order.
    pub actions: Vec<Action>,
    /// What becomes of `status.currentOperation`.
    pub operation: OperationChange,
    /// Earlier operations, newest last (at most 20).
    pub operation_history: Vec<OperationStatus>,
    /// Storage feature level floor after this reconcile.
    pub active_feature_level: u32,
    /// PVCs of ordinals at or above the desired count.
    pub orphaned_pvcs: Vec<String>,
    /// The size broker claims should have (`spec.storageSize`).
    pub desired_storage_size: Option<String>,
    /// When to look again if nothing changes.
    pub requeue: Duration,
    /// `status.kodoProducerRestartBaselineNonce` after this reconcile.
    pub kodo_baseline_nonce: Option<String>,
    /// `status.restores`: the latest restore of each broker.
    pub restores: Vec<BrokerRestore>,
    /// `status.tieringLocalRetentionUsed`.
    pub tiering_local_retention_used: bool,
}
