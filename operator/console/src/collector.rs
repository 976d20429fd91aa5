//! The collection loop: every poll it reads the RustQueue, its broker Pods, PVCs and Events,
//! the head of every broker (32 at once) and a full observation only when the head or the Pod
//! says something changed; then builds the snapshot, its trend and anomalies, and (management
//! on) reconciles the catalog objects from what the brokers hold.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use rustqueue_api::contract::{FenceSync, Observation};

use crate::broker::{BrokerClient, OBSERVE_PARALLELISM};
use crate::cluster::{BrokerPod, BrokerPvc, CatalogStore, ClusterSource};
use crate::config::Config;
use crate::manage::catalog::{self, Catalog};
use crate::snapshot::{self, BrokerState, Collected, Counters, Snapshot, Trend};

/// What the HTTP server and the reconciler share with the loop.
#[derive(Default)]
pub struct Shared {
    snapshot: RwLock<Option<Arc<Snapshot>>>,
    last_success: RwLock<Option<Instant>>,
    /// Held by every catalog write (apply, the reconciler, the collector's catalog reconcile).
    pub mutation: tokio::sync::Mutex<()>,
}

impl Shared {
    /// The latest snapshot.
    pub fn snapshot(&self) -> Option<Arc<Snapshot>> {
        self.snapshot
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// When the last collection succeeded.
    pub fn last_success(&self) -> Option<Instant> {
        *self
            .last_success
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn publish(&self, s: Snapshot, success: bool) {
        *self
            .snapshot
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Arc::new(s));
        if success {
            *self
                .last_success
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Instant::now());
        }
    }

    /// Marks the current snapshot incomplete with `error` (a collection that failed early).
    fn fail(&self, error: String) {
        let Some(prev) = self.snapshot() else { return };
        let mut s = (*prev).clone();
        s.complete = false;
        s.errors.push(error);
        s.anomalies = snapshot::anomalies(&s);
        self.publish(s, false);
    }
}

/// The last full observation of a broker.
#[derive(Clone)]
struct Cached {
    uid: String,
    ip: String,
    observation: Observation,
    fetched: Instant,
}

/// The collection loop's state.
pub struct Collector {
    config: Config,
    cluster: Arc<dyn ClusterSource>,
    catalog: Arc<dyn CatalogStore>,
    client: BrokerClient,
    shared: Arc<Shared>,
    cache: HashMap<String, Cached>,
    trend: Trend,
    discovery: reqwest::Client,
}

impl Collector {
    /// A collector publishing into `shared`.
    pub fn new(
        config: Config,
        cluster: Arc<dyn ClusterSource>,
        catalog: Arc<dyn CatalogStore>,
        shared: Arc<Shared>,
    ) -> Self {
        let client = BrokerClient::new(config.token_file.clone(), config.broker_http_port);
        let discovery = rustqueue_api::http_client::builder()
            .connect_timeout(Duration::from_millis(500))
            .timeout(Duration::from_millis(1500))
            .build()
            .expect("static reqwest settings are valid");
        Self {
            trend: Trend::new(config.history_samples()),
            config,
            cluster,
            catalog,
            client,
            shared,
            cache: HashMap::new(),
            discovery,
        }
    }

    /// Collects every poll, forever.
    pub async fn run(mut self) {
        let mut tick = tokio::time::interval(self.config.poll);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            self.collect_once().await;
        }
    }

    /// One collection.
    pub async fn collect_once(&mut self) {
        let now_ms = crate::now_ms();
        let rustqueue = match self.cluster.rustqueue().await {
            Ok(rq) => rq,
            Err(e) => return self.failed(format!("reading the RustQueue: {e}")),
        };
        let (pods, pvcs, events) = futures::join!(
            self.cluster.broker_pods(),
            self.cluster.broker_pvcs(),
            self.cluster.events()
        );
        let pods = match pods {
            Ok(p) => p,
            Err(e) => return self.failed(format!("listing broker Pods: {e}")),
        };
        let mut errors = Vec::new();
        let pvcs = pvcs.unwrap_or_else(|e| {
            errors.push(format!("listing broker PVCs: {e}"));
            Vec::new()
        });
        let events = events.unwrap_or_else(|e| {
            errors.push(format!("listing Events: {e}"));
            Vec::new()
        });
        let listed = self.list_catalog().await;
        let fences = match (&listed, self.config.management_enabled) {
            (Ok(c), true) => Some(c.fences(now_ms)),
            _ => None,
        };
        let brokers = self.observe_all(pods, &pvcs, fences.as_ref()).await;
        let mut s = snapshot::build(Collected {
            now_ms,
            rustqueue,
            brokers,
            events,
            errors,
        });
        self.add_trend(&mut s);
        if self.config.management_enabled {
            self.manage_catalog(&mut s, listed).await;
        }
        s.anomalies = snapshot::anomalies(&s);
        self.shared.publish(s, true);
    }

    fn failed(&self, error: String) {
        tracing::warn!(%error, "collection failed");
        self.shared.fail(error);
    }

    async fn list_catalog(&self) -> Result<Catalog, String> {
        if !self.config.management_enabled {
            return Err("management is off".into());
        }
        Catalog::list(self.catalog.as_ref()).await
    }

    async fn observe_all(
        &mut self,
        pods: Vec<BrokerPod>,
        pvcs: &[BrokerPvc],
        fences: Option<&FenceSync>,
    ) -> Vec<BrokerState> {
        let refresh = self.config.catalog_refresh;
        let client = &self.client;
        let cache = &self.cache;
        let results: Vec<(BrokerPod, Result<Cached, String>)> =
            futures::stream::iter(pods.into_iter().map(|pod| {
                let cached = cache.get(&pod.name).cloned();
                async move {
                    let r = observe_one(client, &pod, cached, fences, refresh).await;
                    (pod, r)
                }
            }))
            .buffer_unordered(OBSERVE_PARALLELISM)
            .collect()
            .await;
        let mut next = HashMap::new();
        let mut brokers = Vec::new();
        for (pod, r) in results {
            let pvc = pod
                .pvc_name
                .as_ref()
                .and_then(|n| pvcs.iter().find(|p| &p.name == n))
                .cloned();
            let (observation, error) = match r {
                Ok(c) => {
                    let o = c.observation.clone();
                    next.insert(pod.name.clone(), c);
                    (Some(o), None)
                }
                Err(e) => {
                    let stale = self.cache.get(&pod.name).map(|c| c.observation.clone());
                    (stale, Some(e))
                }
            };
            brokers.push(BrokerState {
                pod,
                pvc,
                observation,
                error,
            });
        }
        self.cache = next;
        brokers
    }

    fn add_trend(&mut self, s: &mut Snapshot) {
        let m = snapshot::membership_hash(&s.brokers);
        let gauges = (s.summary.depth, s.summary.in_flight, s.storage.used_percent);
        let sample = self
            .trend
            .record(s.collected_at_ms, m, Counters::of(&s.brokers), gauges);
        s.summary.publish_per_second = sample.publish_per_second;
        s.summary.deliver_per_second = sample.deliver_per_second;
        s.summary.finish_per_second = sample.finish_per_second;
        s.summary.publish_bytes_per_second = sample.publish_bytes_per_second;
        s.history = self.trend.samples();
    }

    /// Management on: reconcile the catalog objects from the observed topics, merge them into
    /// the views, and check discovery.
    async fn manage_catalog(&self, s: &mut Snapshot, listed: Result<Catalog, String>) {
        s.management.enabled = true;
        let mut catalog = match listed {
            Ok(c) => c,
            Err(e) => {
                s.errors.push(format!("listing the catalog: {e}"));
                s.complete = false;
                return self.check_discovery(s).await;
            }
        };
        s.management.crd_fresh = true;
        if s.complete {
            let _guard = self.shared.mutation.lock().await;
            match catalog::reconcile_observed(self.catalog.as_ref(), s, &catalog).await {
                Ok(true) => match Catalog::list(self.catalog.as_ref()).await {
                    Ok(c) => catalog = c,
                    Err(e) => s.errors.push(format!("listing the catalog: {e}")),
                },
                Ok(false) => {}
                Err(e) => s.errors.push(format!("reconciling the catalog: {e}")),
            }
        }
        catalog.merge_into(s);
        self.check_discovery(s).await;
    }

    async fn check_discovery(&self, s: &mut Snapshot) {
        let url = format!(
            "{}/v1/health",
            self.config.discovery_url.trim_end_matches('/')
        );
        let ok = self
            .discovery
            .get(&url)
            .send()
            .await
            .is_ok_and(|r| r.status().is_success());
        s.management.registry_available = ok;
        if !ok {
            s.complete = false;
            s.errors
                .push(format!("discovery health check failed: {url}"));
        }
    }
}

/// Observes one broker: the head always; fences synced first when management needs it; the
/// full observation when nothing is cached, the Pod changed, fences were synced, the registry
/// revision or version changed, or the cached one is older than `refresh`.
async fn observe_one(
    client: &BrokerClient,
    pod: &BrokerPod,
    cached: Option<Cached>,
    fences: Option<&FenceSync>,
    refresh: Duration,
) -> Result<Cached, String> {
    let ip = pod.pod_ip.clone().ok_or("no Pod IP yet")?;
    let head = client.head(&ip).await.map_err(|e| e.to_string())?;
    let cached = cached.filter(|c| c.uid == pod.uid && c.ip == ip);
    let fence = fences.filter(|f| {
        head.management.enabled
            && (cached.is_none() || head.management.fence_revision != f.revision)
    });
    if let Some(f) = fence {
        client
            .sync_fences(&ip, f)
            .await
            .map_err(|e| format!("syncing fences: {e}"))?;
    }
    let reuse = cached.filter(|c| {
        fence.is_none()
            && c.observation.head.registry_revision == head.registry_revision
            && c.observation.head.node.version == head.node.version
            && c.fetched.elapsed() < refresh
    });
    if let Some(mut c) = reuse {
        c.observation.head = head;
        return Ok(c);
    }
    let observation = client.observe(&ip).await.map_err(|e| e.to_string())?;
    Ok(Cached {
        uid: pod.uid.clone(),
        ip,
        observation,
        fetched: Instant::now(),
    })
}
