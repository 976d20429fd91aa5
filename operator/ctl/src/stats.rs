//! What the tool reads of a broker's `GET /v1/stats` (only the fields it shows), and `topics`:
//! topics and channels summed over the brokers that own them. The aggregation is pure.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `GET /v1/stats`.
#[derive(Debug, Clone, Deserialize, Default)]
pub struct BrokerStats {
    /// Topics in name order.
    #[serde(default)]
    pub topics: Vec<TopicStats>,
}

/// One topic of `/v1/stats`.
#[derive(Debug, Clone, Deserialize)]
pub struct TopicStats {
    /// Topic name.
    pub name: String,
    /// Whether the topic is paused.
    #[serde(default)]
    pub paused: bool,
    /// Messages stored for the topic.
    #[serde(default)]
    pub message_count: u64,
    /// Its channels.
    #[serde(default)]
    pub channels: Vec<ChannelStats>,
}

/// One channel of `/v1/stats`.
#[derive(Debug, Clone, Deserialize)]
pub struct ChannelStats {
    /// Channel name.
    pub name: String,
    /// Messages waiting.
    #[serde(default)]
    pub depth: u64,
    /// Delivered, not finished.
    #[serde(default)]
    pub in_flight_count: u64,
    /// Deferred (DPUB, REQ with delay).
    #[serde(default)]
    pub deferred_count: u64,
    /// Whether the channel is paused.
    #[serde(default)]
    pub paused: bool,
}

impl BrokerStats {
    /// Messages waiting over every channel.
    pub fn depth(&self) -> u64 {
        self.topics
            .iter()
            .flat_map(|t| &t.channels)
            .map(|c| c.depth)
            .sum()
    }
}

/// A topic over all its owners.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct Topic {
    /// Topic name.
    pub name: String,
    /// Brokers holding it.
    pub owners: Vec<String>,
    /// Paused on any owner.
    pub paused: bool,
    /// Messages stored over the owners.
    pub stored_messages: u64,
    /// Its channels over the owners.
    pub channels: Vec<Channel>,
}

/// A channel over all its owners.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct Channel {
    /// Channel name.
    pub name: String,
    /// Brokers holding it.
    pub owners: Vec<String>,
    /// Messages waiting.
    pub depth: u64,
    /// Delivered, not finished.
    pub in_flight: u64,
    /// Deferred.
    pub deferred: u64,
    /// Paused on any owner.
    pub paused: bool,
    /// An `#ephemeral` channel.
    pub ephemeral: bool,
}

/// Sums `(broker, stats)` per topic and channel, optionally only `only`; name order.
pub fn aggregate(per_broker: &[(String, BrokerStats)], only: Option<&str>) -> Vec<Topic> {
    let mut topics: BTreeMap<&str, Topic> = BTreeMap::new();
    let mut channels: BTreeMap<(&str, &str), Channel> = BTreeMap::new();
    for (broker, stats) in per_broker {
        for t in stats
            .topics
            .iter()
            .filter(|t| only.is_none_or(|o| o == t.name))
        {
            let agg = topics.entry(&t.name).or_insert_with(|| Topic {
                name: t.name.clone(),
                ..Topic::default()
            });
            agg.owners.push(broker.clone());
            agg.paused |= t.paused;
            agg.stored_messages += t.message_count;
            for c in &t.channels {
                let ch = channels
                    .entry((&t.name, &c.name))
                    .or_insert_with(|| Channel {
                        name: c.name.clone(),
                        ephemeral: c.name.ends_with("#ephemeral"),
                        ..Channel::default()
                    });
                ch.owners.push(broker.clone());
                ch.depth += c.depth;
                ch.in_flight += c.in_flight_count;
                ch.deferred += c.deferred_count;
                ch.paused |= c.paused;
            }
        }
    }
    for ((topic, _), ch) in channels {
        if let Some(t) = topics.get_mut(topic) {
            t.channels.push(ch);
        }
    }
    topics.into_values().collect()
}

/// The `topics` table: a row per topic, then one per channel under it.
pub fn render(topics: &[Topic]) -> String {
    let mut t = crate::table::Table::new([
        "TOPIC",
        "CHANNEL",
        "OWNERS",
        "STORED",
        "DEPTH",
        "IN-FLIGHT",
        "DEFERRED",
        "PAUSED",
    ]);
    for topic in topics {
        let depth: u64 = topic.channels.iter().map(|c| c.depth).sum();
        let in_flight: u64 = topic.channels.iter().map(|c| c.in_flight).sum();
        let deferred: u64 = topic.channels.iter().map(|c| c.deferred).sum();
        t.row([
            topic.name.clone(),
            "-".into(),
            topic.owners.join(","),
            topic.stored_messages.to_string(),
            depth.to_string(),
            in_flight.to_string(),
            deferred.to_string(),
            topic.paused.to_string(),
        ]);
        for c in &topic.channels {
            t.row([
                String::new(),
                c.name.clone(),
                c.owners.join(","),
                String::new(),
                c.depth.to_string(),
                c.in_flight.to_string(),
                c.deferred.to_string(),
                c.paused.to_string(),
            ]);
        }
    }
    t.render()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(json: serde_json::Value) -> BrokerStats {
        serde_json::from_value(json).unwrap()
    }

    fn two_brokers() -> Vec<(String, BrokerStats)> {
        vec![
            (
                "queue-0".into(),
                stats(
                    serde_json::json!({"complete":true,"node_id":1,"collected_at_ms":1,
                "topics":[{"name":"orders","paused":false,"published_count":9,"message_count":5,
                  "channels":[{"name":"billing","depth":3,"message_count":5,"in_flight_count":1,
                    "deferred_count":0,"requeue_count":0,"timeout_count":0,"paused":false}]},
                  {"name":"audit","paused":true,"message_count":1,"channels":[]}]}),
                ),
            ),
            (
                "queue-1".into(),
                stats(
                    serde_json::json!({"topics":[{"name":"orders","paused":false,
                "message_count":2,"channels":[
                  {"name":"billing","depth":2,"in_flight_count":0,"deferred_count":4,"paused":true},
                  {"name":"tail#ephemeral","depth":0,"in_flight_count":0,"deferred_count":0}]}]}),
                ),
            ),
        ]
    }

    #[test]
    fn topics_and_channels_sum_over_their_owners() {
        let topics = aggregate(&two_brokers(), None);
        assert_eq!(topics.len(), 2);
        assert_eq!(topics[0].name, "audit");
        assert!(topics[0].paused);
        let orders = &topics[1];
        assert_eq!(orders.owners, ["queue-0", "queue-1"]);
        assert_eq!(orders.stored_messages, 7);
        assert_eq!(
            orders.channels[0],
            Channel {
                name: "billing".into(),
                owners: vec!["queue-0".into(), "queue-1".into()],
                depth: 5,
                in_flight: 1,
                deferred: 4,
                paused: true,
                ephemeral: false,
            }
        );
        assert!(orders.channels[1].ephemeral);
        assert_eq!(two_brokers()[0].1.depth(), 3);
    }

    #[test]
    fn one_topic_can_be_asked_for() {
        let topics = aggregate(&two_brokers(), Some("orders"));
        assert_eq!(topics.len(), 1);
        assert!(aggregate(&two_brokers(), Some("nope")).is_empty());
    }

    #[test]
    fn the_table_has_a_topic_row_then_its_channels() {
        let text = render(&aggregate(&two_brokers(), Some("orders")));
        let lines: Vec<Vec<&str>> = text
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(
            lines[0],
            [
                "TOPIC",
                "CHANNEL",
                "OWNERS",
                "STORED",
                "DEPTH",
                "IN-FLIGHT",
                "DEFERRED",
                "PAUSED"
            ]
        );
        assert_eq!(
            lines[1],
            [
                "orders",
                "-",
                "queue-0,queue-1",
                "7",
                "5",
                "1",
                "4",
                "false"
            ]
        );
        assert_eq!(
            lines[2],
            ["billing", "queue-0,queue-1", "5", "1", "4", "true"]
        );
    }
}
