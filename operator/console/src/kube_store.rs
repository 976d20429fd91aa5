//! [`ClusterSource`] and [`CatalogStore`] against the Kubernetes API server, scoped to one
//! RustQueue in one namespace.

use futures::FutureExt as _;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Event, ObjectReference, PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client, Resource};
use rustqueue_api::crd::{QUEUE_LABEL, RustQueue, RustQueueChannel, RustQueueTopic};
use rustqueue_api::labels;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::cluster::{
    BrokerPod, BrokerPvc, CatalogStore, ClusterEvent, ClusterSource, NewEvent, StoreError,
};

/// The component name on Events the console records.
pub const COMPONENT: &str = "rustqueue-console";

/// The API server, for one RustQueue.
#[derive(Clone)]
pub struct KubeCluster {
    client: Client,
    namespace: String,
    name: String,
}

impl KubeCluster {
    /// The RustQueue `name` in `namespace`.
    pub fn new(client: Client, namespace: String, name: String) -> Self {
        Self {
            client,
            namespace,
            name,
        }
    }

    fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    fn broker_selector(&self) -> ListParams {
        ListParams::default().labels(&format!(
            "{}={},{}={},{}={}",
            labels::NAME,
            labels::APP_NAME,
            labels::INSTANCE,
            self.name,
            labels::COMPONENT,
            labels::COMPONENT_BROKER
        ))
    }

    fn queue_selector(&self) -> ListParams {
        ListParams::default().labels(&format!("{QUEUE_LABEL}={}", self.name))
    }

    async fn list<K>(&self, lp: ListParams) -> Result<Vec<K>, StoreError>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        Ok(self.api::<K>().list(&lp).await.map_err(store_error)?.items)
    }

    async fn create<K>(&self, k: K) -> Result<K, StoreError>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + Serialize
            + DeserializeOwned
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        self.api::<K>()
            .create(&PostParams::default(), &k)
            .await
            .map_err(store_error)
    }

    async fn replace<K>(&self, k: K) -> Result<K, StoreError>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + Serialize
            + DeserializeOwned
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        let name = k.meta().name.clone().unwrap_or_default();
        self.api::<K>()
            .replace(&name, &PostParams::default(), &k)
            .await
            .map_err(store_error)
    }

    async fn delete<K>(&self, name: String) -> Result<(), StoreError>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        self.api::<K>()
            .delete(&name, &DeleteParams::default())
            .await
            .map(drop)
            .map_err(store_error)
    }

    async fn event(&self, e: NewEvent) -> Result<(), StoreError> {
        let rq: RustQueue = self.api().get(&self.name).await.map_err(store_error)?;
        let now = jiff::Timestamp::now();
        let event = Event {
            metadata: ObjectMeta {
                name: Some(event_name(&self.name, &e.key)),
                namespace: Some(self.namespace.clone()),
                ..ObjectMeta::default()
            },
            involved_object: ObjectReference {
                api_version: Some(RustQueue::api_version(&()).into_owned()),
                kind: Some(RustQueue::kind(&()).into_owned()),
                name: Some(self.name.clone()),
                namespace: Some(self.namespace.clone()),
                uid: rq.metadata.uid.clone(),
                resource_version: rq.metadata.resource_version.clone(),
                ..ObjectReference::default()
            },
            reason: Some(e.reason.into()),
            message: Some(e.message.chars().take(1024).collect()),
            type_: Some(e.type_.into()),
            count: Some(1),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            event_time: Some(MicroTime(now)),
            action: Some("ConsoleManagement".into()),
            reporting_component: Some(COMPONENT.into()),
            reporting_instance: Some(
                std::env::var("POD_NAME").unwrap_or_else(|_| COMPONENT.into()),
            ),
            source: Some(k8s_openapi::api::core::v1::EventSource {
                component: Some(COMPONENT.into()),
                host: None,
            }),
            ..Event::default()
        };
        self.create(event).await.map(drop)
    }
}

/// `<name>-console-<key>`: an Event's name follows from what it is about, so the API server
/// answers a second record of it with AlreadyExists (409).
pub fn event_name(rustqueue: &str, key: &str) -> String {
    format!("{rustqueue}-console-{key}")
}

/// 409 and 404 by name; any other 4xx but 401 (credentials are re-read), 408 and 429 (try
/// later) is the request's own fault: `Refused`.
fn store_error(e: kube::Error) -> StoreError {
    match &e {
        kube::Error::Api(s) if s.code == 409 => StoreError::Conflict(s.message.clone()),
        kube::Error::Api(s) if s.code == 404 => StoreError::NotFound(s.message.clone()),
        kube::Error::Api(s)
            if (400..500).contains(&s.code) && !matches!(s.code, 401 | 408 | 429) =>
        {
            StoreError::Refused(s.message.clone())
        }
        _ => StoreError::Other(e.to_string()),
    }
}

fn ms(t: &Time) -> u64 {
    u64::try_from(t.0.as_millisecond()).unwrap_or(0)
}

fn broker_pod(p: Pod) -> BrokerPod {
    let status = p.status.unwrap_or_default();
    let spec = p.spec.unwrap_or_default();
    let containers = status.container_statuses.unwrap_or_default();
    let first = containers.first();
    BrokerPod {
        uid: p.metadata.uid.unwrap_or_default(),
        name: p.metadata.name.unwrap_or_default(),
        node_name: spec.node_name,
        pod_ip: status.pod_ip,
        phase: status.phase.unwrap_or_default(),
        ready: status
            .conditions
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True"),
        restarts: containers.iter().map(|c| c.restart_count).sum(),
        image: spec
            .containers
            .first()
            .and_then(|c| c.image.clone())
            .unwrap_or_default(),
        image_id: first.map(|c| c.image_id.clone()).unwrap_or_default(),
        started_at: status.start_time.map(|t| t.0.to_string()),
        pvc_name: spec
            .volumes
            .unwrap_or_default()
            .into_iter()
            .find_map(|v| v.persistent_volume_claim.map(|c| c.claim_name)),
    }
}

fn broker_pvc(p: PersistentVolumeClaim) -> BrokerPvc {
    let spec = p.spec.unwrap_or_default();
    let status = p.status.unwrap_or_default();
    BrokerPvc {
        name: p.metadata.name.unwrap_or_default(),
        phase: status.phase.unwrap_or_default(),
        requested: spec
            .resources
            .and_then(|r| r.requests)
            .and_then(|r| r.get("storage").map(|q| q.0.clone())),
        capacity: status
            .capacity
            .and_then(|c| c.get("storage").map(|q| q.0.clone())),
        storage_class: spec.storage_class_name,
    }
}

fn cluster_event(e: Event) -> ClusterEvent {
    let last = e
        .last_timestamp
        .as_ref()
        .map(ms)
        .or_else(|| {
            e.event_time
                .as_ref()
                .map(|t| u64::try_from(t.0.as_millisecond()).unwrap_or(0))
        })
        .or_else(|| e.metadata.creation_timestamp.as_ref().map(ms))
        .unwrap_or(0);
    ClusterEvent {
        type_: e.type_.unwrap_or_default(),
        reason: e.reason.unwrap_or_default(),
        message: e.message.unwrap_or_default(),
        object_kind: e.involved_object.kind.unwrap_or_default(),
        object_name: e.involved_object.name.unwrap_or_default(),
        object_uid: e.involved_object.uid.unwrap_or_default(),
        count: e.count.unwrap_or(1),
        last_seen_ms: last,
    }
}

impl ClusterSource for KubeCluster {
    fn rustqueue(&self) -> BoxFuture<'_, Result<RustQueue, StoreError>> {
        async move { self.api().get(&self.name).await.map_err(store_error) }.boxed()
    }
    fn broker_pods(&self) -> BoxFuture<'_, Result<Vec<BrokerPod>, StoreError>> {
        async move {
            let pods: Vec<Pod> = self.list(self.broker_selector()).await?;
            Ok(pods.into_iter().map(broker_pod).collect())
        }
        .boxed()
    }
    fn broker_pvcs(&self) -> BoxFuture<'_, Result<Vec<BrokerPvc>, StoreError>> {
        async move {
            let pvcs: Vec<PersistentVolumeClaim> = self.list(self.broker_selector()).await?;
            Ok(pvcs.into_iter().map(broker_pvc).collect())
        }
        .boxed()
    }
    fn events(&self) -> BoxFuture<'_, Result<Vec<ClusterEvent>, StoreError>> {
        async move {
            let events: Vec<Event> = self.list(ListParams::default().limit(500)).await?;
            Ok(events.into_iter().map(cluster_event).collect())
        }
        .boxed()
    }
}

impl CatalogStore for KubeCluster {
    fn topics(&self) -> BoxFuture<'_, Result<Vec<RustQueueTopic>, StoreError>> {
        async move { self.list(self.queue_selector()).await }.boxed()
    }
    fn channels(&self) -> BoxFuture<'_, Result<Vec<RustQueueChannel>, StoreError>> {
        async move { self.list(self.queue_selector()).await }.boxed()
    }
    fn create_topic(&self, t: RustQueueTopic) -> BoxFuture<'_, Result<RustQueueTopic, StoreError>> {
        self.create(t).boxed()
    }
    fn replace_topic(
        &self,
        t: RustQueueTopic,
    ) -> BoxFuture<'_, Result<RustQueueTopic, StoreError>> {
        self.replace(t).boxed()
    }
    fn delete_topic(&self, name: String) -> BoxFuture<'_, Result<(), StoreError>> {
        self.delete::<RustQueueTopic>(name).boxed()
    }
    fn create_channel(
        &self,
        c: RustQueueChannel,
    ) -> BoxFuture<'_, Result<RustQueueChannel, StoreError>> {
        self.create(c).boxed()
    }
    fn replace_channel(
        &self,
        c: RustQueueChannel,
    ) -> BoxFuture<'_, Result<RustQueueChannel, StoreError>> {
        self.replace(c).boxed()
    }
    fn delete_channel(&self, name: String) -> BoxFuture<'_, Result<(), StoreError>> {
        self.delete::<RustQueueChannel>(name).boxed()
    }
    fn record_event(&self, e: NewEvent) -> BoxFuture<'_, Result<(), StoreError>> {
        self.event(e).boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broker_pod_reads_its_ready_condition_restarts_image_and_claim() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "q-1", "uid": "u1"},
            "spec": {
                "nodeName": "n1",
                "containers": [{"name": "broker", "image": "rustqueue:1"}],
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data-q-1"}}]
            },
            "status": {
                "phase": "Running",
                "podIP": "10.244.0.7",
                "startTime": "2026-01-02T03:04:05Z",
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [{"name": "broker", "image": "rustqueue:1", "imageID": "sha256:ab",
                    "restartCount": 2, "ready": true}]
            }
        }))
        .unwrap();
        let b = broker_pod(pod);
        assert_eq!((b.name.as_str(), b.uid.as_str()), ("q-1", "u1"));
        assert_eq!(b.pod_ip.as_deref(), Some("10.244.0.7"));
        assert!(b.ready);
        assert_eq!((b.restarts, b.image_id.as_str()), (2, "sha256:ab"));
        assert_eq!(b.pvc_name.as_deref(), Some("data-q-1"));
        assert_eq!(b.started_at.as_deref(), Some("2026-01-02T03:04:05Z"));
        let unready = broker_pod(
            serde_json::from_value(serde_json::json!({"metadata": {"name": "q-2"}})).unwrap(),
        );
        assert!(!unready.ready && unready.pod_ip.is_none());
    }

    #[test]
    fn a_claim_and_an_event_read_their_sizes_and_times() {
        let pvc: PersistentVolumeClaim = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "data-q-0"},
            "spec": {"storageClassName": "fast", "resources": {"requests": {"storage": "1Gi"}}},
            "status": {"phase": "Bound", "capacity": {"storage": "2Gi"}}
        }))
        .unwrap();
        let p = broker_pvc(pvc);
        assert_eq!(
            (p.requested.as_deref(), p.capacity.as_deref()),
            (Some("1Gi"), Some("2Gi"))
        );
        assert_eq!(
            (p.phase.as_str(), p.storage_class.as_deref()),
            ("Bound", Some("fast"))
        );
        let e: Event = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "x"},
            "involvedObject": {"kind": "Pod", "name": "q-0", "uid": "u"},
            "reason": "Started", "type": "Normal", "message": "ok", "count": 3,
            "lastTimestamp": "1970-01-01T00:00:02Z"
        }))
        .unwrap();
        let c = cluster_event(e);
        assert_eq!(
            (c.object_name.as_str(), c.count, c.last_seen_ms),
            ("q-0", 3, 2_000)
        );
    }

    #[test]
    fn api_errors_map_to_conflict_and_not_found() {
        let api = |code| {
            kube::Error::Api(
                serde_json::from_value(serde_json::json!({"status": "Failure", "message": "m", "reason": "r", "code": code}))
                    .unwrap(),
            )
        };
        assert_eq!(store_error(api(409)), StoreError::Conflict("m".into()));
        assert_eq!(store_error(api(404)), StoreError::NotFound("m".into()));
        for refused in [400, 403, 422] {
            assert_eq!(store_error(api(refused)), StoreError::Refused("m".into()));
        }
        for later in [401, 408, 429, 500, 503] {
            assert!(
                matches!(store_error(api(later)), StoreError::Other(_)),
                "{later}"
            );
        }
    }

    #[test]
    fn an_events_name_is_its_queue_and_key() {
        let key = "0123456789abcdef0123456789abcdef";
        assert_eq!(
            event_name("q", key),
            "q-console-0123456789abcdef0123456789abcdef"
        );
    }
}
