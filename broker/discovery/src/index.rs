//! The lookup indexes, updated incrementally as broker observations arrive and expire, so a
//! query never scans the fleet: `/lookup` reads one topic entry, `/topics` one ordered map,
//! `/v1/publishers` a cached list and revision.
//!
//! A broker is keyed by the endpoint it was polled at (`host:port` of its HTTP listener). Output
//! lists are deduplicated by `node_id` (a broker seen at two addresses is listed once).

use std::collections::{BTreeMap, BTreeSet};

use rustqueue_api::contract::Registry;
pub use rustqueue_protocol::lookup::Producer;
use sha2::{Digest, Sha256};

/// What the discovery service keeps of one broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Broker {
    /// Node id (unique in a cluster).
    pub node_id: u32,
    /// Registry revision this observation was built from.
    pub revision: u64,
    /// Address clients dial.
    pub broadcast_address: String,
    /// NSQ TCP port.
    pub tcp_port: u16,
    /// NSQ HTTP port.
    pub http_port: u16,
    /// Binary version, reported as the nsqlookupd `version`.
    pub version: String,
    /// Accepts publishes.
    pub publish_ready: bool,
    /// Serves consumers.
    pub consume_ready: bool,
    /// Topic name -> channel names.
    pub topics: BTreeMap<String, Vec<String>>,
}

impl Broker {
    /// Build from a full `/v1/registry` body.
    pub fn from_registry(r: &Registry) -> Self {
        Broker {
            node_id: r.head.node_id,
            revision: r.head.revision,
            broadcast_address: r.broadcast_address.clone(),
            tcp_port: r.tcp_port,
            http_port: r.http_port,
            version: r.compatibility.binary.binary_version.clone(),
            publish_ready: r.head.publish_ready,
            consume_ready: r.head.consume_ready,
            topics: r
                .topics
                .iter()
                .map(|t| (t.name.clone(), t.channels.clone()))
                .collect(),
        }
    }

    /// The nsqlookupd peer shape of this broker, with its node id and no topology.
    pub fn producer(&self) -> Producer {
        Producer {
            remote_address: format!("{}:{}", self.broadcast_address, self.tcp_port),
            hostname: self.broadcast_address.clone(),
            broadcast_address: self.broadcast_address.clone(),
            tcp_port: self.tcp_port,
            http_port: self.http_port,
            version: self.version.clone(),
            topology_zone: None,
            topology_region: None,
            node_id: Some(self.node_id),
        }
    }
}

#[derive(Debug, Default)]
struct TopicEntry {
    /// Every observed broker holding the topic (the topic is "registered" while non-empty).
    owners: BTreeSet<String>,
    /// The consume-ready subset: the `/lookup` producers.
    consumers: BTreeSet<String>,
    /// Channel name -> number of owners holding it.
    channels: BTreeMap<String, usize>,
}

/// All indexes. Not thread-safe by itself; the service wraps it in a lock.
#[derive(Debug, Default)]
pub struct Index {
    brokers: BTreeMap<String, Broker>,
    topics: BTreeMap<String, TopicEntry>,
    publishers: BTreeSet<String>,
    revision: u64,
    publisher_list: Vec<Producer>,
    broker_list: Vec<Producer>,
    consume_ready_nodes: BTreeSet<u32>,
    /// node_id -> the key its listed producer came from (the first key in order).
    node_keys: BTreeMap<u32, String>,
}

impl Index {
    /// Insert or replace the observation of the broker polled at `key`.
    pub fn upsert(&mut self, key: &str, b: Broker) {
        if self.brokers.get(key) == Some(&b) {
            return;
        }
        self.unlink(key);
        for (topic, channels) in &b.topics {
            let e = self.topics.entry(topic.clone()).or_default();
            e.owners.insert(key.to_string());
            if b.consume_ready {
                e.consumers.insert(key.to_string());
            }
            for c in channels {
                *e.channels.entry(c.clone()).or_default() += 1;
            }
        }
        if b.publish_ready {
            self.publishers.insert(key.to_string());
        }
        self.brokers.insert(key.to_string(), b);
        self.rebuild_lists();
    }

    /// Forget the broker polled at `key`.
    pub fn remove(&mut self, key: &str) {
        if self.unlink(key) {
            self.rebuild_lists();
        }
    }

    /// The observation at `key`.
    pub fn get(&self, key: &str) -> Option<&Broker> {
        self.brokers.get(key)
    }

    /// Keys of every observed broker.
    pub fn keys(&self) -> impl Iterator<Item = &String> {
        self.brokers.keys()
    }

    fn unlink(&mut self, key: &str) -> bool {
        let Some(old) = self.brokers.remove(key) else {
            return false;
        };
        for (topic, channels) in &old.topics {
            let Some(e) = self.topics.get_mut(topic) else {
                continue;
            };
            e.owners.remove(key);
            e.consumers.remove(key);
            for c in channels {
                if let Some(n) = e.channels.get_mut(c) {
                    *n -= 1;
                    if *n == 0 {
                        e.channels.remove(c);
                    }
                }
            }
            if e.owners.is_empty() {
                self.topics.remove(topic);
            }
        }
        self.publishers.remove(key);
        true
    }

    /// Rebuild the cached broker-level lists and the routing revision. Cost is the number of
    /// brokers (not topics), paid once per change, never per query.
    fn rebuild_lists(&mut self) {
        self.publisher_list = dedup(self.publishers.iter().filter_map(|k| self.brokers.get(k)));
        self.broker_list = dedup(self.brokers.values());
        self.consume_ready_nodes = self
            .brokers
            .values()
            .filter(|b| b.consume_ready)
            .map(|b| b.node_id)
            .collect();
        self.node_keys.clear();
        for (k, b) in &self.brokers {
            self.node_keys.entry(b.node_id).or_insert_with(|| k.clone());
        }
        self.revision = routing_revision(&self.publisher_list, &self.broker_list);
    }

    /// `/lookup`: `None` when no observed broker holds the topic (`TOPIC_NOT_FOUND`).
    pub fn lookup(&self, topic: &str) -> Option<(Vec<String>, Vec<Producer>)> {
        let e = self.topics.get(topic)?;
        let channels = e.channels.keys().cloned().collect();
        let producers = dedup(e.consumers.iter().filter_map(|k| self.brokers.get(k)));
        Some((channels, producers))
    }

    /// `/topics`: every topic some observed broker holds, in name order.
    pub fn topics(&self) -> Vec<String> {
        self.topics.keys().cloned().collect()
    }

    /// `/channels?topic=`: empty for an unknown topic (as nsqlookupd answers).
    pub fn channels(&self, topic: &str) -> Vec<String> {
        self.topics
            .get(topic)
            .map(|e| e.channels.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Publish-ready brokers, deduplicated by node id, in node id order.
    pub fn publishers(&self) -> &[Producer] {
        &self.publisher_list
    }

    /// Every observed broker, deduplicated by node id, in node id order.
    pub fn brokers(&self) -> &[Producer] {
        &self.broker_list
    }

    /// Topics of the broker with this node id (for `/nodes`): two map lookups, no scan.
    pub fn topics_of(&self, node_id: u32) -> Vec<String> {
        self.node_keys
            .get(&node_id)
            .and_then(|k| self.brokers.get(k))
            .map(|b| b.topics.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Content-based routing revision (see [`routing_revision`]).
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// Distinct consume-ready node ids.
    pub fn consume_ready_count(&self) -> usize {
        self.consume_ready_nodes.len()
    }

    /// The distinct consume-ready node ids (Kodo mode's `lookup_ready` checks their shards).
    pub fn consume_ready_nodes(&self) -> &BTreeSet<u32> {
        &self.consume_ready_nodes
    }

    /// Observed broker endpoints.
    pub fn len(&self) -> usize {
        self.brokers.len()
    }

    /// No broker observed.
    pub fn is_empty(&self) -> bool {
        self.brokers.is_empty()
    }
}

/// One producer per node id (the first in key order wins), sorted by node id.
fn dedup<'a>(it: impl Iterator<Item = &'a Broker>) -> Vec<Producer> {
    let mut by_node: BTreeMap<u32, Producer> = BTreeMap::new();
    for b in it {
        by_node.entry(b.node_id).or_insert_with(|| b.producer());
    }
    by_node.into_values().collect()
}

/// First 8 bytes (big-endian, at least 1) of SHA-256 over the publishers (tag `P`) then all
/// brokers (tag `B`), each as node_id, length-prefixed broadcast address, tcp and http port.
/// Only content goes in, so every replica watching the same brokers computes the same value.
pub fn routing_revision(publishers: &[Producer], brokers: &[Producer]) -> u64 {
    let mut h = Sha256::new();
    for (tag, list) in [(b'P', publishers), (b'B', brokers)] {
        h.update([tag]);
        h.update((list.len() as u64).to_be_bytes());
        for p in list {
            h.update(p.node_id.unwrap_or_default().to_be_bytes());
            h.update((p.broadcast_address.len() as u64).to_be_bytes());
            h.update(p.broadcast_address.as_bytes());
            h.update(p.tcp_port.to_be_bytes());
            h.update(p.http_port.to_be_bytes());
        }
    }
    let d = h.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&d[..8]);
    u64::from_be_bytes(first).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn broker(node_id: u32, topics: &[(&str, &[&str])], publish: bool, consume: bool) -> Broker {
        Broker {
            node_id,
            revision: 1,
            broadcast_address: format!("b{node_id}"),
            tcp_port: 4150,
            http_port: 4151,
            version: "0.1.0".into(),
            publish_ready: publish,
            consume_ready: consume,
            topics: topics
                .iter()
                .map(|(t, cs)| (t.to_string(), cs.iter().map(|c| c.to_string()).collect()))
                .collect(),
        }
    }

    #[test]
    fn lookup_follows_upserts_and_removals() {
        let mut ix = Index::default();
        ix.upsert("a:1", broker(1, &[("t", &["c1"])], true, true));
        ix.upsert(
            "b:1",
            broker(2, &[("t", &["c1", "c2"]), ("u", &[])], true, false),
        );
        let (ch, prods) = ix.lookup("t").unwrap();
        assert_eq!(ch, vec!["c1", "c2"]);
        assert_eq!(
            prods.iter().map(|p| p.node_id).collect::<Vec<_>>(),
            vec![Some(1)]
        );
        assert_eq!(ix.topics(), vec!["t", "u"]);
        // u is registered (held by broker 2) but nobody consume-ready serves it.
        assert_eq!(ix.lookup("u").unwrap().1, vec![]);
        ix.remove("b:1");
        assert_eq!(ix.lookup("t").unwrap().0, vec!["c1"]);
        assert!(ix.lookup("u").is_none());
        assert_eq!(ix.channels("u"), Vec::<String>::new());
        // A topic that goes away on the broker leaves the index.
        ix.upsert("a:1", broker(1, &[], true, true));
        assert!(ix.lookup("t").is_none());
        assert!(ix.topics().is_empty());
    }

    #[test]
    fn lists_dedupe_by_node_id_and_revision_is_content_based() {
        let mut a = Index::default();
        a.upsert("x:1", broker(2, &[], true, true));
        a.upsert("y:1", broker(1, &[], false, true));
        a.upsert("z:1", broker(1, &[], false, true));
        let mut b = Index::default();
        b.upsert("y:1", broker(1, &[], false, true));
        b.upsert("x:1", broker(2, &[], true, true));
        assert_eq!(a.brokers().len(), 2);
        assert_eq!(a.publishers().len(), 1);
        assert_eq!(a.revision(), b.revision());
        assert_eq!(a.consume_ready_count(), 2);
        a.upsert("x:1", broker(2, &[("t", &[])], true, true));
        assert_eq!(a.topics_of(2), vec!["t"]);
        assert!(a.topics_of(1).is_empty());
        assert!(a.topics_of(9).is_empty());
        a.upsert("x:1", broker(2, &[], true, true));
        b.upsert("x:1", broker(2, &[], false, true));
        assert_ne!(a.revision(), b.revision());
        assert!(b.publishers().is_empty());
    }

    /// What the indexes must answer, computed by scanning every broker (the model).
    fn model_lookup(
        brokers: &BTreeMap<String, Broker>,
        topic: &str,
    ) -> Option<(Vec<String>, Vec<u32>)> {
        let holders: Vec<&Broker> = brokers
            .values()
            .filter(|b| b.topics.contains_key(topic))
            .collect();
        if holders.is_empty() {
            return None;
        }
        let channels: BTreeSet<String> = holders
            .iter()
            .flat_map(|b| b.topics[topic].iter().cloned())
            .collect();
        let nodes: BTreeSet<u32> = holders
            .iter()
            .filter(|b| b.consume_ready)
            .map(|b| b.node_id)
            .collect();
        Some((channels.into_iter().collect(), nodes.into_iter().collect()))
    }

    proptest::proptest! {
        #[test]
        fn incremental_indexes_match_a_full_scan(
            ops in proptest::collection::vec(
                (0u8..6, 1u32..5, proptest::collection::btree_set(0u8..5, 0..4),
                 proptest::collection::btree_set(0u8..3, 0..3), proptest::bool::ANY,
                 proptest::bool::ANY, proptest::bool::ANY),
                1..60,
            )
        ) {
            let mut ix = Index::default();
            let mut model: BTreeMap<String, Broker> = BTreeMap::new();
            for (key, node, topics, chans, publish, consume, remove) in ops {
                let key = format!("k{key}");
                if remove {
                    ix.remove(&key);
                    model.remove(&key);
                } else {
                    let chans: Vec<String> = chans.iter().map(|c| format!("c{c}")).collect();
                    let b = Broker {
                        topics: topics
                            .iter()
                            .map(|t| (format!("t{t}"), chans.clone()))
                            .collect(),
                        ..broker(node, &[], publish, consume)
                    };
                    ix.upsert(&key, b.clone());
                    model.insert(key, b);
                }
                for t in 0..5 {
                    let topic = format!("t{t}");
                    let got = ix
                        .lookup(&topic)
                        .map(|(c, p)| (c, p.iter().filter_map(|p| p.node_id).collect::<Vec<_>>()));
                    proptest::prop_assert_eq!(got, model_lookup(&model, &topic));
                }
                let topics: BTreeSet<String> =
                    model.values().flat_map(|b| b.topics.keys().cloned()).collect();
                proptest::prop_assert_eq!(ix.topics(), topics.into_iter().collect::<Vec<_>>());
                let pubs: BTreeSet<u32> =
                    model.values().filter(|b| b.publish_ready).map(|b| b.node_id).collect();
                let got: Vec<u32> = ix.publishers().iter().filter_map(|p| p.node_id).collect();
                proptest::prop_assert_eq!(got, pubs.into_iter().collect::<Vec<_>>());
                let all: BTreeSet<u32> = model.values().map(|b| b.node_id).collect();
                proptest::prop_assert_eq!(ix.brokers().len(), all.len());
            }
        }
    }

    #[test]
    fn five_hundred_brokers_index_and_unindex() {
        let mut ix = Index::default();
        let names: Vec<String> = (0..50).map(|i| format!("t{i}")).collect();
        for n in 1..=500u32 {
            let topics: Vec<(&str, &[&str])> = names
                .iter()
                .skip((n % 10) as usize)
                .step_by(5)
                .map(|t| (t.as_str(), &["ch"][..]))
                .collect();
            ix.upsert(
                &format!("10.0.{}.{}:4151", n / 256, n % 256),
                broker(n, &topics, true, true),
            );
        }
        assert_eq!(ix.brokers().len(), 500);
        assert_eq!(ix.publishers().len(), 500);
        let (ch, prods) = ix.lookup("t10").unwrap();
        assert_eq!(ch, vec!["ch"]);
        assert!(prods.len() >= 50, "{}", prods.len());
        let keys: Vec<String> = ix.keys().cloned().collect();
        for k in keys {
            ix.remove(&k);
        }
        assert!(ix.is_empty());
        assert!(ix.topics().is_empty());
        assert!(ix.brokers().is_empty());
    }
}
