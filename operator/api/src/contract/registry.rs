//! `GET /v1/registry` and `/v1/registry/head`: what a broker holds and whether it takes
//! publishes and deliveries. Discovery polls the head and fetches the full registry only when
//! `revision` changes.

use serde::{Deserialize, Serialize};

use super::Capabilities;

/// `GET /v1/registry/head`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegistryHead {
    /// Registry format (equals the data format, 7).
    pub format: u32,
    /// Changes whenever a topic or channel is created, deleted, paused or unpaused.
    pub revision: u64,
    /// The broker's node id.
    pub node_id: u32,
    /// Delivering ∧ storage healthy ∧ fences ready (equals `consume_ready` on the full body).
    pub ready: bool,
    /// Accepting publishes ∧ storage healthy ∧ fences ready ∧ disk admission ok.
    pub publish_ready: bool,
    /// Delivering ∧ fences ∧ storage ∧ (accepting ∨ backlog/in-flight remains).
    pub consume_ready: bool,
}

/// One topic in the registry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegistryTopic {
    /// Topic name.
    pub name: String,
    /// Whether the topic is paused.
    pub paused: bool,
    /// Channel names.
    pub channels: Vec<String>,
    /// Messages stored for this topic.
    pub stored_messages: u64,
}

/// `GET /v1/registry`: the head plus addresses, counts, topics and compatibility.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Registry {
    /// The head fields, inline.
    #[serde(flatten)]
    pub head: RegistryHead,
    /// Address clients should dial.
    pub broadcast_address: String,
    /// Advertised NSQ TCP port.
    pub tcp_port: u16,
    /// Advertised HTTP port.
    pub http_port: u16,
    /// Messages stored over all topics.
    pub stored_messages: u64,
    /// Messages waiting for delivery over all channels.
    pub depth: u64,
    /// Messages in flight over all channels.
    pub in_flight: u64,
    /// Topics, sorted by name.
    pub topics: Vec<RegistryTopic>,
    /// Same as `GET /v1/capabilities`.
    pub compatibility: Capabilities,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_full_registry_carries_head_fields_inline() {
        let json = r#"{"format":7,"revision":4,"node_id":1,"ready":true,"publish_ready":false,
            "consume_ready":true,"broadcast_address":"q-0.q-brokers.ns.svc","tcp_port":4150,
            "http_port":4151,"stored_messages":2,"depth":2,"in_flight":0,
            "topics":[{"name":"t","paused":false,"channels":["c"],"stored_messages":2}],
            "compatibility":{"binary":{"binary_version":"0.1.0","data_format":7,
              "minimum_reader_feature_level":1,"maximum_reader_feature_level":2,
              "maximum_writer_feature_level":2,"maximum_message_bytes":104857600,
              "maximum_batch_bytes":134217728},
             "storage":{"data_format":7,"active_writer_feature_level":1,
              "minimum_reader_feature_level":1,"generation":1}}}"#;
        let r: Registry = serde_json::from_str(json).unwrap();
        assert_eq!(r.head.revision, 4);
        assert!(!r.head.publish_ready);
        assert_eq!(r.topics[0].channels, vec!["c".to_string()]);
        let back = serde_json::to_value(&r).unwrap();
        assert_eq!(back["revision"], 4, "head is flattened, not nested");
        assert!(back.get("head").is_none());
    }
}
