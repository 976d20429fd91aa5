//! Optional per-topic and per-channel series (docs/api.md, "Other endpoints"), on with
//! `metrics.detailed_queue_metrics`. A topic contributes 5 series, a channel 4; groups are
//! emitted whole in name order while they fit in `metrics.max_detailed_series`, and the series
//! of every group that does not fit are counted as omitted.

use std::collections::BTreeMap;

use prometheus::proto::{self, LabelPair, MetricFamily, MetricType};
use rustqueue_engine::{EngineStats, QueueGauges};

use super::drain::topic_stored;

const TOPIC_SERIES: [(&str, &str); 5] = [
    ("rustqueue_topic_messages", "Messages a topic still holds"),
    (
        "rustqueue_topic_last_durable_position",
        "Highest position on stable storage",
    ),
    (
        "rustqueue_topic_publish_unsynced_messages",
        "Appended, not fsynced",
    ),
    (
        "rustqueue_topic_publish_unsynced_bytes",
        "Appended bytes, not fsynced",
    ),
    (
        "rustqueue_topic_publish_sync_lag_seconds",
        "Age of the oldest unsynced message",
    ),
];

const CHANNEL_SERIES: [(&str, &str); 4] = [
    ("rustqueue_channel_depth", "Ready backlog"),
    ("rustqueue_channel_in_flight", "In flight"),
    ("rustqueue_channel_deferred", "Deferred"),
    (
        "rustqueue_channel_ack_gap",
        "Finished positions above the ack floor",
    ),
];

/// The detailed families plus `(emitted, omitted)` series counts.
pub struct Detailed {
    /// Families with at least one series.
    pub families: Vec<MetricFamily>,
    /// Series emitted.
    pub emitted: u64,
    /// Series skipped for the budget.
    pub omitted: u64,
}

fn label(name: &str, value: &str) -> LabelPair {
    let mut l = LabelPair::default();
    l.set_name(name.to_owned());
    l.set_value(value.to_owned());
    l
}

fn gauge(labels: Vec<LabelPair>, value: f64) -> proto::Metric {
    let mut g = proto::Gauge::default();
    g.set_value(value);
    let mut m = proto::Metric::default();
    m.set_label(labels);
    m.set_gauge(g);
    m
}

/// Builds the per-topic and per-channel series within `budget`.
pub fn families(stats: &EngineStats, q: &QueueGauges, budget: usize) -> Detailed {
    let mut series: BTreeMap<&'static str, Vec<proto::Metric>> = BTreeMap::new();
    let (mut emitted, mut omitted) = (0u64, 0u64);
    let budget = budget as u64;
    for t in &stats.topics {
        let gauges = q.topics.iter().find(|g| g.name == t.topic_name);
        let values = [
            topic_stored(t) as f64,
            t.last_durable_position as f64,
            t.unsynced_messages as f64,
            t.unsynced_bytes as f64,
            gauges.map_or(0.0, |g| g.sync_lag_seconds),
        ];
        if emitted + 5 <= budget {
            for ((name, _), v) in TOPIC_SERIES.iter().zip(values) {
                let labels = vec![label("topic", &t.topic_name)];
                series.entry(name).or_default().push(gauge(labels, v));
            }
            emitted += 5;
        } else {
            omitted += 5;
        }
        for ch in &t.channels {
            let gap = gauges
                .and_then(|g| g.channel_ack_gaps.iter().find(|(n, _)| *n == ch.name))
                .map_or(0, |(_, gap)| *gap);
            let values = [ch.depth, ch.in_flight_count, ch.deferred_count, gap];
            if emitted + 4 <= budget {
                for ((name, _), v) in CHANNEL_SERIES.iter().zip(values) {
                    let labels = vec![label("topic", &t.topic_name), label("channel", &ch.name)];
                    series
                        .entry(name)
                        .or_default()
                        .push(gauge(labels, v as f64));
                }
                emitted += 4;
            } else {
                omitted += 4;
            }
        }
    }
    let help: BTreeMap<&str, &str> = TOPIC_SERIES
        .iter()
        .chain(&CHANNEL_SERIES)
        .copied()
        .collect();
    let families = series
        .into_iter()
        .map(|(name, metrics)| {
            let mut f = MetricFamily::default();
            f.set_name(name.to_owned());
            f.set_help(help.get(name).copied().unwrap_or_default().to_owned());
            f.set_field_type(MetricType::GAUGE);
            f.set_metric(metrics);
            f
        })
        .collect();
    Detailed {
        families,
        emitted,
        omitted,
    }
}

#[cfg(test)]
mod tests {
    use rustqueue_engine::{ChannelStats, TopicGauges, TopicStats};

    use super::*;

    fn channel(name: &str, depth: u64) -> ChannelStats {
        ChannelStats {
            channel_name: name.into(),
            name: name.into(),
            depth,
            memory_depth: 0,
            backend_depth: depth,
            message_count: 0,
            in_flight_count: 1,
            deferred_count: 2,
            requeue_count: 0,
            timeout_count: 0,
            client_count: 0,
            clients: Vec::new(),
            paused: false,
            ..ChannelStats::default()
        }
    }

    fn stats() -> (EngineStats, QueueGauges) {
        let topic = |name: &str, channels: Vec<ChannelStats>| TopicStats {
            topic_name: name.into(),
            name: name.into(),
            depth: 0,
            memory_depth: 0,
            backend_depth: 0,
            message_count: 9,
            paused: false,
            channels,
            unsynced_messages: 0,
            unsynced_bytes: 0,
            last_durable_position: 9,
            ..TopicStats::default()
        };
        let stats = EngineStats {
            health: "OK".into(),
            start_time: 0,
            topics: vec![
                topic("a", vec![channel("c1", 3), channel("c2", 4)]),
                topic("b\"q", vec![]),
            ],
        };
        let q = QueueGauges {
            topics: vec![TopicGauges {
                name: "a".into(),
                sync_lag_seconds: 0.5,
                channel_ack_gaps: vec![("c1".into(), 7), ("c2".into(), 0)],
            }],
            ..QueueGauges::default()
        };
        (stats, q)
    }

    fn value(d: &Detailed, name: &str, labels: &[&str]) -> Option<f64> {
        let f = d.families.iter().find(|f| f.name() == name)?;
        f.get_metric()
            .iter()
            .find(|m| {
                m.get_label()
                    .iter()
                    .map(|l| l.value())
                    .eq(labels.iter().copied())
            })
            .map(|m| m.get_gauge().get_value())
    }

    #[test]
    fn every_topic_and_channel_gets_its_series_within_the_budget() {
        let (s, q) = stats();
        let d = families(&s, &q, 1_000);
        assert_eq!((d.emitted, d.omitted), (5 + 4 + 4 + 5, 0));
        assert_eq!(
            value(&d, "rustqueue_channel_depth", &["a", "c2"]),
            Some(4.0)
        );
        assert_eq!(
            value(&d, "rustqueue_channel_ack_gap", &["a", "c1"]),
            Some(7.0)
        );
        assert_eq!(
            value(&d, "rustqueue_topic_publish_sync_lag_seconds", &["a"]),
            Some(0.5)
        );
        assert_eq!(
            value(&d, "rustqueue_topic_messages", &["b\"q"]),
            Some(9.0),
            "a topic without channels holds everything published"
        );
    }

    #[test]
    fn groups_that_do_not_fit_the_budget_are_skipped_whole_and_counted() {
        let (s, q) = stats();
        let d = families(&s, &q, 11);
        assert_eq!((d.emitted, d.omitted), (9, 9));
        assert!(value(&d, "rustqueue_channel_depth", &["a", "c1"]).is_some());
        assert!(value(&d, "rustqueue_channel_depth", &["a", "c2"]).is_none());
        assert!(value(&d, "rustqueue_topic_messages", &["b\"q"]).is_none());
        let d = families(&s, &q, 0);
        assert_eq!((d.emitted, d.omitted, d.families.len()), (0, 18, 0));
    }
}
