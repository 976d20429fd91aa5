//! An in-memory [`ClusterSource`] and [`CatalogStore`] (feature `test-support`): a RustQueue,
//! its broker Pods and the catalog objects, with resourceVersions and UIDs assigned as an API
//! server would, so tests drive the real collection loop and management flow without a cluster.

use std::sync::{Arc, Mutex, MutexGuard};

use futures::FutureExt as _;
use futures::future::BoxFuture;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use rustqueue_api::crd::{RustQueue, RustQueueChannel, RustQueueTopic};

use crate::cluster::{
    BrokerPod, BrokerPvc, CatalogStore, ClusterEvent, ClusterSource, NewEvent, StoreError,
};

#[derive(Default)]
struct State {
    rustqueue: Option<RustQueue>,
    pods: Vec<BrokerPod>,
    pvcs: Vec<BrokerPvc>,
    events: Vec<ClusterEvent>,
    event_keys: Vec<String>,
    event_faults: Vec<(&'static str, EventFault)>,
    hung: Vec<&'static str>,
    topics: Vec<RustQueueTopic>,
    channels: Vec<RustQueueChannel>,
    next_version: u64,
    fail_lists: bool,
}

/// How recording an Event of one reason goes wrong (see [`MemoryCluster::fault_events`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventFault {
    /// The call never returns: the console stops right there (as if killed).
    Hang,
    /// Nothing is recorded; the call answers this error.
    Fail(StoreError),
    /// The Event is recorded, but the reply is lost (an error, as a timeout would be).
    LoseReply,
}

/// The in-memory cluster. Clones share one state.
#[derive(Clone, Default)]
pub struct MemoryCluster {
    state: Arc<Mutex<State>>,
}

impl MemoryCluster {
    /// A cluster holding `rq`.
    pub fn new(rq: RustQueue) -> Self {
        let c = Self::default();
        c.lock().rustqueue = Some(rq);
        c
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Replaces the broker Pods.
    pub fn set_pods(&self, pods: Vec<BrokerPod>) {
        self.lock().pods = pods;
    }

    /// Replaces the RustQueue.
    pub fn set_rustqueue(&self, rq: RustQueue) {
        self.lock().rustqueue = Some(rq);
    }

    /// Makes every catalog list fail (an API server outage) or work again.
    pub fn fail_catalog_lists(&self, fail: bool) {
        self.lock().fail_lists = fail;
    }

    /// From now on, recording an Event with `reason` goes wrong as `fault` says (`None`: it
    /// works again).
    pub fn fault_events(&self, reason: &'static str, fault: Option<EventFault>) {
        let mut s = self.lock();
        s.event_faults.retain(|(r, _)| *r != reason);
        if let Some(f) = fault {
            s.event_faults.push((reason, f));
        }
    }

    /// Whether a record of an Event with `reason` has hung ([`EventFault::Hang`]).
    pub fn hung_at(&self, reason: &str) -> bool {
        self.lock().hung.contains(&reason)
    }

    /// Events recorded so far.
    pub fn recorded_events(&self) -> Vec<ClusterEvent> {
        self.lock().events.clone()
    }

    /// The topic object for `topic`, if any.
    pub fn topic(&self, topic: &str) -> Option<RustQueueTopic> {
        self.lock()
            .topics
            .iter()
            .find(|t| t.spec.topic == topic)
            .cloned()
    }

    /// The channel object for `topic`/`channel`, if any.
    pub fn channel(&self, topic: &str, channel: &str) -> Option<RustQueueChannel> {
        self.lock()
            .channels
            .iter()
            .find(|c| c.spec.topic == topic && c.spec.channel == channel)
            .cloned()
    }

    /// Changes a topic object behind the console's back (as `kubectl edit` would).
    pub fn edit_topic(&self, topic: &str, edit: impl FnOnce(&mut RustQueueTopic)) {
        let mut s = self.lock();
        let version = bump(&mut s);
        if let Some(t) = s.topics.iter_mut().find(|t| t.spec.topic == topic) {
            edit(t);
            t.metadata.resource_version = Some(version);
        }
    }
}

fn bump(s: &mut State) -> String {
    s.next_version += 1;
    s.next_version.to_string()
}

fn stamp(s: &mut State, meta: &mut ObjectMeta) {
    meta.resource_version = Some(bump(s));
    if meta.uid.is_none() {
        meta.uid = Some(format!("uid-{}", s.next_version));
    }
}

fn ready<T: Send + 'static>(v: T) -> BoxFuture<'static, T> {
    futures::future::ready(v).boxed()
}

fn name_of<K: Resource>(k: &K) -> String {
    k.meta().name.clone().unwrap_or_default()
}

fn create<K: Resource + Clone>(
    s: &mut State,
    list: fn(&mut State) -> &mut Vec<K>,
    mut k: K,
) -> Result<K, StoreError> {
    let name = name_of(&k);
    if list(s).iter().any(|o| name_of(o) == name) {
        return Err(StoreError::Conflict(format!("{name} already exists")));
    }
    stamp(s, k.meta_mut());
    list(s).push(k.clone());
    Ok(k)
}

fn replace<K: Resource + Clone>(
    s: &mut State,
    list: fn(&mut State) -> &mut Vec<K>,
    mut k: K,
) -> Result<K, StoreError> {
    let name = name_of(&k);
    let version = bump(s);
    let slot = list(s)
        .iter_mut()
        .find(|o| name_of(*o) == name)
        .ok_or_else(|| StoreError::NotFound(name.clone()))?;
    if slot.meta().resource_version != k.meta().resource_version {
        return Err(StoreError::Conflict(format!("{name} changed")));
    }
    k.meta_mut().resource_version = Some(version);
    k.meta_mut().uid.clone_from(&slot.meta().uid);
    *slot = k.clone();
    Ok(k)
}

fn remove<K: Resource>(list: &mut Vec<K>, name: &str) -> Result<(), StoreError> {
    let before = list.len();
    list.retain(|o| name_of(o) != name);
    if list.len() == before {
        return Err(StoreError::NotFound(name.to_string()));
    }
    Ok(())
}

impl ClusterSource for MemoryCluster {
    fn rustqueue(&self) -> BoxFuture<'_, Result<RustQueue, StoreError>> {
        ready(
            self.lock()
                .rustqueue
                .clone()
                .ok_or_else(|| StoreError::NotFound("rustqueue".into())),
        )
    }
    fn broker_pods(&self) -> BoxFuture<'_, Result<Vec<BrokerPod>, StoreError>> {
        ready(Ok(self.lock().pods.clone()))
    }
    fn broker_pvcs(&self) -> BoxFuture<'_, Result<Vec<BrokerPvc>, StoreError>> {
        ready(Ok(self.lock().pvcs.clone()))
    }
    fn events(&self) -> BoxFuture<'_, Result<Vec<ClusterEvent>, StoreError>> {
        ready(Ok(self.lock().events.clone()))
    }
}

impl CatalogStore for MemoryCluster {
    fn topics(&self) -> BoxFuture<'_, Result<Vec<RustQueueTopic>, StoreError>> {
        let s = self.lock();
        ready(if s.fail_lists {
            Err(StoreError::Other("catalog list refused".into()))
        } else {
            Ok(s.topics.clone())
        })
    }
    fn channels(&self) -> BoxFuture<'_, Result<Vec<RustQueueChannel>, StoreError>> {
        let s = self.lock();
        ready(if s.fail_lists {
            Err(StoreError::Other("catalog list refused".into()))
        } else {
            Ok(s.channels.clone())
        })
    }
    fn create_topic(&self, t: RustQueueTopic) -> BoxFuture<'_, Result<RustQueueTopic, StoreError>> {
        ready(create(&mut self.lock(), |s| &mut s.topics, t))
    }
    fn replace_topic(
        &self,
        t: RustQueueTopic,
    ) -> BoxFuture<'_, Result<RustQueueTopic, StoreError>> {
        ready(replace(&mut self.lock(), |s| &mut s.topics, t))
    }
    fn delete_topic(&self, name: String) -> BoxFuture<'_, Result<(), StoreError>> {
        ready(remove(&mut self.lock().topics, &name))
    }
    fn create_channel(
        &self,
        c: RustQueueChannel,
    ) -> BoxFuture<'_, Result<RustQueueChannel, StoreError>> {
        ready(create(&mut self.lock(), |s| &mut s.channels, c))
    }
    fn replace_channel(
        &self,
        c: RustQueueChannel,
    ) -> BoxFuture<'_, Result<RustQueueChannel, StoreError>> {
        ready(replace(&mut self.lock(), |s| &mut s.channels, c))
    }
    fn delete_channel(&self, name: String) -> BoxFuture<'_, Result<(), StoreError>> {
        ready(remove(&mut self.lock().channels, &name))
    }
    fn record_event(&self, e: NewEvent) -> BoxFuture<'_, Result<(), StoreError>> {
        let mut s = self.lock();
        let fault = s
            .event_faults
            .iter()
            .find(|(r, _)| *r == e.reason)
            .map(|(_, f)| f.clone());
        match fault {
            Some(EventFault::Hang) => {
                s.hung.push(e.reason);
                return futures::future::pending().boxed();
            }
            Some(EventFault::Fail(err)) => return ready(Err(err)),
            Some(EventFault::LoseReply) | None => {}
        }
        if s.event_keys.contains(&e.key) {
            return ready(Err(StoreError::Conflict(format!(
                "the Event {} already exists",
                e.key
            ))));
        }
        s.event_keys.push(e.key);
        let (name, uid) = s
            .rustqueue
            .as_ref()
            .map(|q| (name_of(q), q.metadata.uid.clone().unwrap_or_default()))
            .unwrap_or_default();
        s.events.push(ClusterEvent {
            type_: e.type_.into(),
            reason: e.reason.into(),
            message: e.message,
            object_kind: "RustQueue".into(),
            object_name: name,
            object_uid: uid,
            count: 1,
            last_seen_ms: crate::now_ms(),
        });
        ready(match fault {
            Some(_) => Err(StoreError::Other("the reply was lost".into())),
            None => Ok(()),
        })
    }
}
