//! The catalog objects (RustQueueTopic, RustQueueChannel) of one queue: listing them, the
//! fence snapshot they imply, their management fields merged into the snapshot's views, and
//! their reconcile from what the brokers hold (new topics and channels get an `ACTIVE`
//! object; settled objects follow owner and pause drift; gone ephemeral channels lose theirs).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Resource as _;
use rustqueue_api::contract::{ChannelFence, FenceSync};
use rustqueue_api::crd::{
    CatalogPhase, QUEUE_LABEL, RustQueue, RustQueueChannel, RustQueueChannelSpec, RustQueueTopic,
    RustQueueTopicSpec, channel_object_name, topic_object_name,
};

use crate::cluster::{CatalogStore, StoreError};
use crate::snapshot::{ChannelView, ClusterView, ManagedFields, Snapshot, TopicView};

/// The queue's catalog objects, as listed.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    /// Topic objects.
    pub topics: Vec<RustQueueTopic>,
    /// Channel objects.
    pub channels: Vec<RustQueueChannel>,
}

impl Catalog {
    /// Lists both kinds.
    pub async fn list(store: &dyn CatalogStore) -> Result<Catalog, String> {
        let (t, c) = futures::join!(store.topics(), store.channels());
        Ok(Catalog {
            topics: t.map_err(|e| e.to_string())?,
            channels: c.map_err(|e| e.to_string())?,
        })
    }

    /// The topic object of `topic`.
    pub fn topic(&self, topic: &str) -> Option<&RustQueueTopic> {
        self.topics.iter().find(|t| t.spec.topic == topic)
    }

    /// The channel object of `topic`/`channel`.
    pub fn channel(&self, topic: &str, channel: &str) -> Option<&RustQueueChannel> {
        self.channels
            .iter()
            .find(|c| c.spec.topic == topic && c.spec.channel == channel)
    }

    /// CRC-32C (hex) over the sorted resourceVersions of every object: changes whenever any
    /// object does.
    pub fn revision(&self) -> String {
        let mut versions: Vec<&str> = self
            .topics
            .iter()
            .map(|t| t.metadata.resource_version.as_deref().unwrap_or(""))
            .chain(
                self.channels
                    .iter()
                    .map(|c| c.metadata.resource_version.as_deref().unwrap_or("")),
            )
            .collect();
        versions.sort_unstable();
        format!("{:08x}", crc32c::crc32c(versions.join("\n").as_bytes()))
    }

    /// The fence snapshot sent to brokers: every unexpired tombstone.
    pub fn fences(&self, now_ms: u64) -> FenceSync {
        let live = |until: Option<i64>| {
            until
                .and_then(|u| u64::try_from(u).ok())
                .filter(|u| *u > now_ms)
        };
        let topics = self
            .topics
            .iter()
            .filter_map(|t| live(t.spec.tombstone_until_ms).map(|u| (t.spec.topic.clone(), u)))
            .collect();
        let mut channels: Vec<ChannelFence> = self
            .channels
            .iter()
            .filter_map(|c| {
                live(c.spec.tombstone_until_ms).map(|until_ms| ChannelFence {
                    topic: c.spec.topic.clone(),
                    channel: c.spec.channel.clone(),
                    until_ms,
                })
            })
            .collect();
        channels.sort();
        FenceSync {
            revision: self.revision(),
            topics,
            channels,
        }
    }

    /// Puts each object's phase, revision, tombstone, error, uid and resourceVersion on its
    /// view; objects no broker holds get a view of their own.
    pub fn merge_into(&self, s: &mut Snapshot) {
        let mut topics: BTreeMap<String, TopicView> =
            s.topics.drain(..).map(|t| (t.name.clone(), t)).collect();
        for t in &self.topics {
            let v = topics
                .entry(t.spec.topic.clone())
                .or_insert_with(|| TopicView {
                    name: t.spec.topic.clone(),
                    owners: t.spec.owners.clone(),
                    paused: t.spec.paused,
                    ..TopicView::default()
                });
            v.managed = ManagedFields {
                managed_phase: Some(t.spec.phase),
                management_revision: Some(t.spec.revision),
                tombstone_until_ms: t.spec.tombstone_until_ms,
                management_error: t.spec.last_error.clone(),
                resource_uid: t.metadata.uid.clone(),
                resource_version: t.metadata.resource_version.clone(),
            };
        }
        for c in &self.channels {
            let Some(t) = topics.get_mut(&c.spec.topic) else {
                continue;
            };
            let idx = match t.channels.iter().position(|v| v.name == c.spec.channel) {
                Some(i) => i,
                None => {
                    t.channels.push(ChannelView {
                        name: c.spec.channel.clone(),
                        owners: c.spec.owners.clone(),
                        paused: c.spec.paused,
                        ephemeral: c.spec.ephemeral,
                        ..ChannelView::default()
                    });
                    t.channels.len() - 1
                }
            };
            if let Some(v) = t.channels.get_mut(idx) {
                v.managed = ManagedFields {
                    managed_phase: Some(c.spec.phase),
                    management_revision: Some(c.spec.revision),
                    tombstone_until_ms: c.spec.tombstone_until_ms,
                    management_error: c.spec.last_error.clone(),
                    resource_uid: c.metadata.uid.clone(),
                    resource_version: c.metadata.resource_version.clone(),
                };
            }
        }
        for t in topics.values_mut() {
            t.channels.sort_by(|a, b| a.name.cmp(&b.name));
        }
        s.topics = topics.into_values().collect();
    }
}

/// Metadata of a new catalog object of the queue in `cluster`: derived name, namespace, the
/// queue label and a controller reference to the RustQueue.
pub fn object_meta(cluster: &ClusterView, name: String) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: Some(cluster.namespace.clone()),
        labels: Some(BTreeMap::from([(
            QUEUE_LABEL.to_string(),
            cluster.name.clone(),
        )])),
        owner_references: Some(vec![OwnerReference {
            api_version: RustQueue::api_version(&()).into_owned(),
            kind: RustQueue::kind(&()).into_owned(),
            name: cluster.name.clone(),
            uid: cluster.uid.clone(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }]),
        ..ObjectMeta::default()
    }
}

/// A new topic object.
pub fn new_topic(cluster: &ClusterView, spec: RustQueueTopicSpec) -> RustQueueTopic {
    let name = topic_object_name(&cluster.name, &spec.topic);
    RustQueueTopic {
        metadata: object_meta(cluster, name),
        spec,
    }
}

/// A new channel object.
pub fn new_channel(cluster: &ClusterView, spec: RustQueueChannelSpec) -> RustQueueChannel {
    let name = channel_object_name(&cluster.name, &spec.topic, &spec.channel);
    RustQueueChannel {
        metadata: object_meta(cluster, name),
        spec,
    }
}

/// One write of the observed-catalog reconcile.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// A topic no object knows.
    CreateTopic(Box<RustQueueTopic>),
    /// A settled topic whose owners or pause drifted.
    ReplaceTopic(Box<RustQueueTopic>),
    /// A channel no object knows.
    CreateChannel(Box<RustQueueChannel>),
    /// A settled channel whose owners, pause or ephemerality drifted.
    ReplaceChannel(Box<RustQueueChannel>),
    /// The object of an ephemeral channel no broker holds any more.
    DeleteChannel(String),
}

fn settled(phase: CatalogPhase, tombstone: Option<i64>, now_ms: u64) -> bool {
    match phase {
        CatalogPhase::Active => true,
        CatalogPhase::Tombstoned => {
            tombstone.is_none_or(|u| u64::try_from(u).unwrap_or(0) <= now_ms)
        }
        _ => false,
    }
}

fn sorted(v: &[String]) -> Vec<String> {
    let mut v = v.to_vec();
    v.sort();
    v
}

/// The writes that make the catalog follow what the brokers hold (pure).
pub fn plan_observed(
    cluster: &ClusterView,
    topics: &[TopicView],
    catalog: &Catalog,
    now_ms: u64,
) -> Vec<Change> {
    let mut out = Vec::new();
    for t in topics.iter().filter(|t| !t.owners.is_empty()) {
        plan_topic(cluster, t, catalog, now_ms, &mut out);
        for c in t.channels.iter().filter(|c| !c.owners.is_empty()) {
            plan_channel(cluster, &t.name, c, catalog, now_ms, &mut out);
        }
    }
    for c in catalog.channels.iter().filter(|c| c.spec.ephemeral) {
        let held = topics
            .iter()
            .filter(|t| t.name == c.spec.topic)
            .flat_map(|t| &t.channels)
            .any(|v| v.name == c.spec.channel && !v.owners.is_empty());
        if !held {
            out.push(Change::DeleteChannel(
                c.metadata.name.clone().unwrap_or_default(),
            ));
        }
    }
    out
}

fn plan_topic(
    cluster: &ClusterView,
    t: &TopicView,
    catalog: &Catalog,
    now_ms: u64,
    out: &mut Vec<Change>,
) {
    let owners = sorted(&t.owners);
    match catalog.topic(&t.name) {
        None => out.push(Change::CreateTopic(Box::new(new_topic(
            cluster,
            RustQueueTopicSpec {
                queue: cluster.name.clone(),
                topic: t.name.clone(),
                owners,
                phase: CatalogPhase::Active,
                revision: 1,
                paused: t.paused,
                tombstone_until_ms: None,
                last_error: None,
                operation: None,
            },
        )))),
        Some(cr) if settled(cr.spec.phase, cr.spec.tombstone_until_ms, now_ms) => {
            let drift = sorted(&cr.spec.owners) != owners
                || cr.spec.paused != t.paused
                || cr.spec.phase != CatalogPhase::Active;
            if drift {
                let mut cr = cr.clone();
                cr.spec.owners = owners;
                cr.spec.paused = t.paused;
                cr.spec.phase = CatalogPhase::Active;
                cr.spec.tombstone_until_ms = None;
                cr.spec.revision += 1;
                out.push(Change::ReplaceTopic(Box::new(cr)));
            }
        }
        Some(_) => {}
    }
}

fn plan_channel(
    cluster: &ClusterView,
    topic: &str,
    c: &ChannelView,
    catalog: &Catalog,
    now_ms: u64,
    out: &mut Vec<Change>,
) {
    let owners = sorted(&c.owners);
    match catalog.channel(topic, &c.name) {
        None => out.push(Change::CreateChannel(Box::new(new_channel(
            cluster,
            RustQueueChannelSpec {
                queue: cluster.name.clone(),
                topic: topic.to_string(),
                channel: c.name.clone(),
                owners,
                phase: CatalogPhase::Active,
                revision: 1,
                paused: c.paused,
                ephemeral: c.ephemeral,
                tombstone_until_ms: None,
                last_error: None,
                operation: None,
            },
        )))),
        Some(cr) if settled(cr.spec.phase, cr.spec.tombstone_until_ms, now_ms) => {
            let drift = sorted(&cr.spec.owners) != owners
                || cr.spec.paused != c.paused
                || cr.spec.ephemeral != c.ephemeral
                || cr.spec.phase != CatalogPhase::Active;
            if drift {
                let mut cr = cr.clone();
                cr.spec.owners = owners;
                cr.spec.paused = c.paused;
                cr.spec.ephemeral = c.ephemeral;
                cr.spec.phase = CatalogPhase::Active;
                cr.spec.tombstone_until_ms = None;
                cr.spec.revision += 1;
                out.push(Change::ReplaceChannel(Box::new(cr)));
            }
        }
        Some(_) => {}
    }
}

/// Applies [`plan_observed`] for the snapshot; returns whether anything was written. A
/// conflict (someone wrote first) is left for the next collection.
pub async fn reconcile_observed(
    store: &dyn CatalogStore,
    s: &Snapshot,
    catalog: &Catalog,
) -> Result<bool, StoreError> {
    let changes = plan_observed(&s.cluster, &s.topics, catalog, s.collected_at_ms);
    let wrote = !changes.is_empty();
    for change in changes {
        let r = match change {
            Change::CreateTopic(t) => store.create_topic(*t).await.map(drop),
            Change::ReplaceTopic(t) => store.replace_topic(*t).await.map(drop),
            Change::CreateChannel(c) => store.create_channel(*c).await.map(drop),
            Change::ReplaceChannel(c) => store.replace_channel(*c).await.map(drop),
            Change::DeleteChannel(n) => store.delete_channel(n).await,
        };
        match r {
            Ok(()) | Err(StoreError::Conflict(_) | StoreError::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(wrote)
}

#[cfg(test)]
mod tests;
