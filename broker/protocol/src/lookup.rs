//! nsqlookupd-compatible JSON shapes (`/lookup`, `/topics`, `/channels`, `/nodes`).
//!
//! The broker serves a single-node view of these on its own HTTP port so clients that only
//! know how to discover through lookupd (go-nsq `ConnectToNSQLookupd`) work unchanged.

use serde::{Deserialize, Serialize};

/// One broker as lookupd describes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Producer {
    /// Address the peer connected from (lookupd) or the broker's own address.
    pub remote_address: String,
    /// Host name.
    pub hostname: String,
    /// Address clients should dial.
    pub broadcast_address: String,
    /// TCP (V2) port.
    pub tcp_port: u16,
    /// HTTP port.
    pub http_port: u16,
    /// Broker version.
    pub version: String,
    /// Topology zone: a broker's own lookup answers `""` like nsqd; discovery leaves it out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_zone: Option<String>,
    /// Topology region: as [`Producer::topology_zone`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_region: Option<String>,
    /// The broker's node id: discovery's answers carry it (the gateway keys its pools by
    /// it); a broker's own single-node lookup does not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_id: Option<u32>,
}

/// `GET /lookup?topic=`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LookupResponse {
    /// Channels of the topic.
    pub channels: Vec<String>,
    /// Brokers holding the topic.
    pub producers: Vec<Producer>,
}

/// `GET /topics`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicsResponse {
    /// All topic names.
    pub topics: Vec<String>,
}

/// `GET /channels?topic=`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelsResponse {
    /// Channel names of the topic.
    pub channels: Vec<String>,
}

/// One entry of `GET /nodes`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    /// The peer fields.
    #[serde(flatten)]
    pub producer: Producer,
    /// One flag per topic: tombstoned or not.
    pub tombstones: Vec<bool>,
    /// Topics the node holds.
    pub topics: Vec<String>,
}

/// `GET /nodes`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodesResponse {
    /// All nodes.
    pub producers: Vec<Node>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_flatten_the_producer_fields_like_lookupd() {
        let node = Node {
            producer: Producer {
                remote_address: "127.0.0.1:4150".into(),
                hostname: "h".into(),
                broadcast_address: "127.0.0.1".into(),
                tcp_port: 4150,
                http_port: 4151,
                version: "0.1.0".into(),
                topology_zone: Some(String::new()),
                topology_region: Some(String::new()),
                node_id: None,
            },
            tombstones: vec![false],
            topics: vec!["t".into()],
        };
        let v = serde_json::to_value(NodesResponse {
            producers: vec![node],
        })
        .unwrap();
        assert_eq!(v["producers"][0]["tcp_port"], 4150);
        assert_eq!(v["producers"][0]["topics"][0], "t");
        assert_eq!(v["producers"][0]["tombstones"][0], false);
        assert_eq!(v["producers"][0]["topology_zone"], "");
        assert!(v["producers"][0].get("node_id").is_none());
    }

    #[test]
    fn discoverys_producers_carry_the_node_id_and_no_topology() {
        let p = Producer {
            remote_address: "b-0:4150".into(),
            hostname: "b-0".into(),
            broadcast_address: "b-0".into(),
            tcp_port: 4150,
            http_port: 4151,
            version: "0.1.0".into(),
            topology_zone: None,
            topology_region: None,
            node_id: Some(3),
        };
        let text = serde_json::to_string(&p).unwrap();
        assert_eq!(
            text,
            r#"{"remote_address":"b-0:4150","hostname":"b-0","broadcast_address":"b-0","tcp_port":4150,"http_port":4151,"version":"0.1.0","node_id":3}"#
        );
        assert_eq!(serde_json::from_str::<Producer>(&text).unwrap(), p);
    }
}
