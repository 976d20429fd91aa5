//! `Observed::test()`: a readable way to build the cluster a table row starts from, e.g.
//! `Observed::test().brokers(3).at_revision("a").quiesced(2)`. Test support only (compiled
//! for this crate's tests and under the `test-support` feature, which the integration tests
//! such as the Argo CD health check turn on), never part of the operator binary.

use rustqueue_api::contract::{DrainStatus, NotReadyReason};

use super::model::{
    AuthState, BrokerPod, Claim, Health, KodoObserved, Observed, ProbePod, RestoreRun,
    StorageClassState, TieringSecret, Workload,
};

/// What the probe of a current binary reports: levels 1 and 2, 100 MiB messages.
pub const CAPABLE: &str = r#"{"binary_version":"0.2.0","data_format":7,"minimum_reader_feature_level":1,"maximum_reader_feature_level":2,"maximum_writer_feature_level":2,"maximum_message_bytes":104857600,"maximum_batch_bytes":134217728}"#;
/// What the probe of a binary with local retention's fence reports: levels 1 to 3.
pub const RETAINING: &str = r#"{"binary_version":"0.3.0","data_format":7,"minimum_reader_feature_level":1,"maximum_reader_feature_level":3,"maximum_writer_feature_level":3,"maximum_message_bytes":104857600,"maximum_batch_bytes":134217728}"#;
/// What the probe of an old binary reports: level 1 only.
pub const LEVEL_ONE: &str = r#"{"binary_version":"0.1.0","data_format":7,"minimum_reader_feature_level":1,"maximum_reader_feature_level":1,"maximum_writer_feature_level":1,"maximum_message_bytes":104857600,"maximum_batch_bytes":134217728}"#;

/// Builds an [`Observed`] for RustQueue `q`.
#[derive(Debug, Clone)]
pub struct ObservedBuilder(Observed);

impl Observed {
    /// An empty cluster with three eligible Nodes and a valid auth Secret.
    pub fn test() -> ObservedBuilder {
        ObservedBuilder(Observed {
            eligible_nodes: 3,
            statefulset_replicas: None,
            brokers: Vec::new(),
            claims: Vec::new(),
            storage_class: StorageClassState::Present {
                allow_expansion: true,
            },
            config_maps: Vec::new(),
            probes: vec![ProbePod {
                name: "q-preflight-target".into(),
                phase: "Succeeded".into(),
                waiting: None,
                message: Some(CAPABLE.into()),
            }],
            auth: AuthState::Valid {
                revision: "7".into(),
            },
            tiering_secret: TieringSecret::Unused,
            claim_template_size: None,
            discovery: Some(Workload::available(2)),
            gateway: Some(Workload::available(3)),
            console: Some(Workload::available(1)),
            kodo: KodoObserved::default(),
        })
    }
}

fn ready_broker(ordinal: usize) -> BrokerPod {
    BrokerPod {
        name: format!("q-{ordinal}"),
        ip: Some(format!("10.244.0.{}", ordinal + 10)),
        pod_ready: true,
        terminating: false,
        revision: Some("a".into()),
        image: Some("rustqueue:a".into()),
        waiting: None,
        health: Health::Ready,
        drain: Some(DrainStatus::default()),
        capabilities: None,
        config_map: Some("q-config-a".into()),
        damage: None,
        uid: format!("uid-{ordinal}"),
        restore: None,
    }
}

impl ObservedBuilder {
    /// `n` Ready brokers `q-0..q-<n-1>` at revision `a`, a StatefulSet of `n`, `n` Nodes.
    pub fn brokers(mut self, n: usize) -> Self {
        self.0.brokers = (0..n).map(ready_broker).collect();
        let n = i32::try_from(n).expect("small");
        self.0.statefulset_replicas = Some(n);
        self.0.eligible_nodes = n;
        self
    }

    /// Every broker carries `revision`.
    pub fn at_revision(mut self, revision: &str) -> Self {
        for b in &mut self.0.brokers {
            b.revision = Some(revision.into());
        }
        self
    }

    /// Eligible Nodes.
    pub fn nodes(mut self, n: i32) -> Self {
        self.0.eligible_nodes = n;
        self
    }

    /// StatefulSet replicas (`None`: no StatefulSet).
    pub fn replicas(mut self, n: Option<i32>) -> Self {
        self.0.statefulset_replicas = n;
        self
    }

    /// Change broker `ordinal`.
    pub fn broker(mut self, ordinal: usize, f: impl FnOnce(&mut BrokerPod)) -> Self {
        let b = self
            .0
            .brokers
            .iter_mut()
            .find(|b| b.name == format!("q-{ordinal}"))
            .expect("broker exists");
        f(b);
        self
    }

    /// Broker `ordinal` runs `revision`.
    pub fn revision_of(self, ordinal: usize, revision: &str) -> Self {
        self.broker(ordinal, |b| b.revision = Some(revision.into()))
    }

    /// Broker `ordinal` is down (Pod not Ready, connection refused).
    pub fn unready(self, ordinal: usize) -> Self {
        self.broker(ordinal, |b| {
            b.pod_ready = false;
            b.health = Health::Unreachable("connection refused".into());
            b.drain = None;
        })
    }

    /// Broker `ordinal` drains (publishes refused) with messages still in flight.
    pub fn draining(self, ordinal: usize) -> Self {
        self.broker(ordinal, |b| {
            b.health = Health::NotReady(NotReadyReason::Draining);
            b.drain = Some(DrainStatus {
                draining: true,
                delivery_frozen: true,
                in_flight: 4,
                stored_messages: 10,
                depth: 6,
                ..DrainStatus::default()
            });
        })
    }

    /// Broker `ordinal` drains with deliveries frozen and nothing in flight.
    pub fn quiesced(self, ordinal: usize) -> Self {
        self.draining(ordinal).broker(ordinal, |b| {
            b.drain = Some(DrainStatus {
                draining: true,
                delivery_frozen: true,
                quiesced: true,
                stored_messages: 10,
                depth: 10,
                ..DrainStatus::default()
            });
        })
    }

    /// Broker `ordinal` drains and holds nothing.
    pub fn empty(self, ordinal: usize) -> Self {
        self.draining(ordinal).broker(ordinal, |b| {
            b.drain = Some(DrainStatus {
                draining: true,
                empty: true,
                drained: true,
                ..DrainStatus::default()
            });
        })
    }

    /// Broker `ordinal`'s Pod is being deleted.
    pub fn terminating(self, ordinal: usize) -> Self {
        self.broker(ordinal, |b| {
            b.terminating = true;
            b.pod_ready = false;
        })
    }

    /// Broker `ordinal`'s Pod does not exist.
    pub fn missing(mut self, ordinal: usize) -> Self {
        self.0.brokers.retain(|b| b.name != format!("q-{ordinal}"));
        self
    }

    /// Broker `ordinal`'s restore init container is in `run` (the broker is down meanwhile).
    pub fn restore(self, ordinal: usize, run: RestoreRun) -> Self {
        self.broker(ordinal, |b| {
            if !matches!(run, RestoreRun::Done { .. }) {
                b.pod_ready = false;
                b.ip = None;
                b.health = Health::Unreachable("no Pod IP".into());
                b.drain = None;
            }
            b.restore = Some(run);
        })
    }

    /// Broker `ordinal`'s Pod has uid `uid` (a Pod created again).
    pub fn broker_uid(self, ordinal: usize, uid: &str) -> Self {
        self.broker(ordinal, |b| b.uid = uid.into())
    }

    /// The tiering credentials Secret state.
    pub fn tiering_secret(mut self, secret: TieringSecret) -> Self {
        self.0.tiering_secret = secret;
        self
    }

    /// The auth Secret state.
    pub fn auth(mut self, auth: AuthState) -> Self {
        self.0.auth = auth;
        self
    }

    /// One bound claim per broker of `class`, requesting and holding `size`.
    pub fn claims(mut self, class: &str, size: &str) -> Self {
        self.0.claims = (0..self.0.brokers.len())
            .map(|o| Claim {
                name: format!("data-q-{o}"),
                storage_class: Some(class.into()),
                requested: Some(size.into()),
                capacity: Some(size.into()),
                bound: true,
            })
            .collect();
        self
    }

    /// Change claim `ordinal`.
    pub fn claim(mut self, ordinal: usize, f: impl FnOnce(&mut Claim)) -> Self {
        let c = self
            .0
            .claims
            .iter_mut()
            .find(|c| c.name == format!("data-q-{ordinal}"))
            .expect("claim exists");
        f(c);
        self
    }

    /// The StorageClass of the spec.
    pub fn storage_class(mut self, state: StorageClassState) -> Self {
        self.0.storage_class = state;
        self
    }

    /// Broker ConfigMaps that exist.
    pub fn config_maps(mut self, names: &[&str]) -> Self {
        self.0.config_maps = names.iter().map(|n| n.to_string()).collect();
        self
    }

    /// The target's probe Pod (named `q-preflight-target` in tests) is in `phase`, with this
    /// waiting reason and termination message; `None` removes it.
    pub fn probe(mut self, probe: Option<(&str, Option<&str>, Option<&str>)>) -> Self {
        self.0.probes = probe
            .map(|(phase, waiting, message)| ProbePod {
                name: "q-preflight-target".into(),
                phase: phase.into(),
                waiting: waiting.map(str::to_string),
                message: message.map(str::to_string),
            })
            .into_iter()
            .collect();
        self
    }

    /// Every running broker reports capabilities: binary `binary` (JSON) and storage at
    /// `active` level.
    pub fn capabilities(mut self, binary: &str, active: u32) -> Self {
        let binary: rustqueue_api::contract::BinaryCapabilities =
            serde_json::from_str(binary).expect("binary capabilities JSON");
        for b in &mut self.0.brokers {
            b.capabilities = Some(rustqueue_api::contract::Capabilities {
                binary: binary.clone(),
                storage: rustqueue_api::contract::StorageCapabilities {
                    data_format: 7,
                    active_writer_feature_level: active,
                    minimum_reader_feature_level: active,
                    generation: 1,
                },
            });
        }
        self
    }

    /// The discovery Deployment as observed (`None`: absent).
    pub fn discovery(mut self, w: Option<Workload>) -> Self {
        self.0.discovery = w;
        self
    }

    /// The gateway DaemonSet as observed (`None`: absent).
    pub fn gateway(mut self, w: Option<Workload>) -> Self {
        self.0.gateway = w;
        self
    }

    /// The console Deployment as observed (`None`: absent).
    pub fn console(mut self, w: Option<Workload>) -> Self {
        self.0.console = w;
        self
    }

    /// The Kodo Gateways and discovery Pods as observed.
    pub fn kodo(mut self, k: KodoObserved) -> Self {
        self.0.kodo = k;
        self
    }

    /// The observation.
    pub fn build(self) -> Observed {
        self.0
    }
}
