//! `/stats` shards (docs/kodo.md, "Stats shards"): shard k answers for the brokers whose
//! `(node_id - 1) mod 3 = k`, merged into one nsqd-shaped document.
//!
//! Topics and channels are matched by name (`topic_name`/`name`, `channel_name`/`name`,
//! both spellings written back); their counters are summed, clients concatenated, `paused`
//! OR-ed; `start_time` is the earliest; `health` is `OK` only when every broker says so.

use serde_json::{Map, Value, json};

use crate::pool::Backend;

/// Most brokers one shard may aggregate (more: 503).
pub const MAX_SHARD_BROKERS: usize = 16;
/// Largest `/stats` answer read from one broker.
pub const MAX_BACKEND_BYTES: usize = 16 * 1024 * 1024;
/// Largest sum of the answers of one shard.
pub const MAX_AGGREGATE_BYTES: usize = 32 * 1024 * 1024;
/// Reserved from the in-flight budget for one `/stats` call.
pub const STATS_RESERVATION_BYTES: u32 = 96 * 1024 * 1024;

/// The counters summed across brokers, for topics and channels alike.
pub const SUMMED: [&str; 9] = [
    "depth",
    "memory_depth",
    "backend_depth",
    "message_count",
    "in_flight_count",
    "deferred_count",
    "requeue_count",
    "timeout_count",
    "client_count",
];

/// The shard a broker node id belongs to.
pub fn shard_of(node_id: u32) -> usize {
    (i64::from(node_id) - 1).rem_euclid(3) as usize
}

/// The brokers of shard `k`, in node-id order.
pub fn shard_members(brokers: &[Backend], k: usize) -> Vec<Backend> {
    let mut out: Vec<Backend> = brokers
        .iter()
        .filter(|b| shard_of(b.node_id) == k)
        .cloned()
        .collect();
    out.sort_by_key(|b| b.node_id);
    out
}

/// The query sent to brokers: the producer's filters with `format=json` forced.
pub fn broker_query(pairs: &[(String, String)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .filter(|(k, _)| k != "format")
        .cloned()
        .chain(std::iter::once(("format".to_string(), "json".to_string())))
        .collect()
}

/// Merge the brokers' `/stats?format=json` documents.
pub fn merge(docs: &[Value]) -> Value {
    let mut topics: Vec<Value> = Vec::new();
    let mut producers: Vec<Value> = Vec::new();
    let mut start_time: Option<u64> = None;
    let mut health = "OK".to_string();
    for doc in docs {
        if let Some(t) = doc.get("start_time").and_then(Value::as_u64) {
            start_time = Some(start_time.map_or(t, |s| s.min(t)));
        }
        match doc.get("health").and_then(Value::as_str) {
            Some("OK") | None => {}
            Some(h) if health == "OK" => health = h.to_string(),
            Some(_) => {}
        }
        for p in doc
            .get("producers")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            producers.push(p.clone());
        }
        for t in doc
            .get("topics")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            merge_into(&mut topics, t, "topic_name", Some("channels"));
        }
    }
    json!({
        "version": docs.first().and_then(|d| d.get("version")).cloned().unwrap_or(json!(env!("CARGO_PKG_VERSION"))),
        "health": health,
        "start_time": start_time.unwrap_or(0),
        "topics": topics,
        "producers": producers,
    })
}

fn name_of(v: &Value, key: &str) -> String {
    v.get(key)
        .or_else(|| v.get("name"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// Merge one topic (or channel) into `list` by name; `children` names the nested list
/// merged the same way (a topic's channels).
fn merge_into(list: &mut Vec<Value>, item: &Value, key: &str, children: Option<&str>) {
    let Value::Object(incoming) = item else {
        return;
    };
    let name = name_of(item, key);
    let Some(Value::Object(target)) = list.iter_mut().find(|v| name_of(v, key) == name) else {
        let mut fresh = incoming.clone();
        fresh.insert(key.to_string(), json!(name));
        fresh.insert("name".to_string(), json!(name));
        if let Some(c) = children {
            fresh.insert(c.to_string(), json!([]));
            merge_children(&mut fresh, incoming, c);
        }
        list.push(Value::Object(fresh));
        return;
    };
    for field in SUMMED {
        if let Some(add) = incoming.get(field).and_then(Value::as_u64) {
            let sum = target.get(field).and_then(Value::as_u64).unwrap_or(0) + add;
            target.insert(field.to_string(), json!(sum));
        }
    }
    let paused = target
        .get("paused")
        .and_then(Value::as_bool)
        .unwrap_or(false)
        || incoming
            .get("paused")
            .and_then(Value::as_bool)
            .unwrap_or(false);
    target.insert("paused".to_string(), json!(paused));
    if let Some(Value::Array(more)) = incoming.get("clients") {
        let clients = target.entry("clients").or_insert(json!([]));
        if let Value::Array(all) = clients {
            all.extend(more.iter().cloned());
        }
    }
    if let Some(c) = children {
        merge_children(target, incoming, c);
    }
}

fn merge_children(target: &mut Map<String, Value>, incoming: &Map<String, Value>, key: &str) {
    let mut list = match target.remove(key) {
        Some(Value::Array(l)) => l,
        _ => Vec::new(),
    };
    for ch in incoming
        .get(key)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        merge_into(&mut list, ch, "channel_name", None);
    }
    target.insert(key.to_string(), Value::Array(list));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(id: u32) -> Backend {
        Backend {
            node_id: id,
            host: "h".into(),
            tcp_port: 1,
            http_port: 2,
        }
    }

    #[test]
    fn shards_split_node_ids_by_node_id_minus_one_mod_three() {
        let cases = [
            (1, 0),
            (2, 1),
            (3, 2),
            (4, 0),
            (5, 1),
            (6, 2),
            (1_000_000, 0),
            (0, 2),
        ];
        for (id, k) in cases {
            assert_eq!(shard_of(id), k, "{id}");
        }
        let all: Vec<Backend> = [7, 1, 2, 4, 3].into_iter().map(b).collect();
        let ids = |k| {
            shard_members(&all, k)
                .iter()
                .map(|b| b.node_id)
                .collect::<Vec<_>>()
        };
        assert_eq!(ids(0), [1, 4, 7]);
        assert_eq!(ids(1), [2]);
        assert_eq!(ids(2), [3]);
    }

    #[test]
    fn the_broker_query_keeps_filters_and_forces_json() {
        let q = |pairs: &[(&str, &str)]| {
            let owned: Vec<(String, String)> = pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            broker_query(&owned)
        };
        let s = |k: &str, v: &str| (k.to_string(), v.to_string());
        assert_eq!(q(&[]), [s("format", "json")]);
        assert_eq!(
            q(&[
                ("topic", "t"),
                ("format", "text"),
                ("include_clients", "false")
            ]),
            [
                s("topic", "t"),
                s("include_clients", "false"),
                s("format", "json")
            ]
        );
    }

    #[test]
    fn merging_sums_counters_concatenates_clients_ors_paused_and_takes_the_earliest_start() {
        let a = json!({"version":"1","health":"OK","start_time":200,"producers":[{"client_id":"p1"}],"topics":[
            {"topic_name":"t","name":"t","depth":1,"memory_depth":0,"backend_depth":1,"message_count":10,"paused":false,
             "unsynced_messages":3,
             "channels":[{"channel_name":"c","name":"c","depth":2,"memory_depth":0,"backend_depth":2,"message_count":10,
                "in_flight_count":1,"deferred_count":0,"requeue_count":4,"timeout_count":1,"client_count":1,
                "clients":[{"client_id":"a"}],"paused":false}]}]});
        let b = json!({"version":"1","health":"OK","start_time":100,"producers":[],"topics":[
            {"name":"t","depth":5,"message_count":7,"paused":true,
             "channels":[{"name":"c","depth":3,"message_count":7,"in_flight_count":2,"deferred_count":1,
                "requeue_count":0,"timeout_count":0,"client_count":2,"clients":[{"client_id":"b"},{"client_id":"c"}],"paused":true},
                {"channel_name":"d","message_count":7,"clients":[]}]},
            {"topic_name":"u","message_count":1,"channels":[]}]});
        let m = merge(&[a, b]);
        assert_eq!(m["start_time"], 100);
        assert_eq!(m["health"], "OK");
        assert_eq!(m["producers"].as_array().unwrap().len(), 1);
        let topics = m["topics"].as_array().unwrap();
        assert_eq!(topics.len(), 2);
        let t = &topics[0];
        assert_eq!(
            (t["topic_name"].clone(), t["name"].clone()),
            (json!("t"), json!("t"))
        );
        assert_eq!(
            (t["depth"].clone(), t["message_count"].clone()),
            (json!(6), json!(17))
        );
        assert_eq!(t["paused"], true);
        assert_eq!(
            t["unsynced_messages"], 3,
            "fields not summed are kept from the first broker"
        );
        let chs = t["channels"].as_array().unwrap();
        assert_eq!(chs.len(), 2);
        let c = &chs[0];
        assert_eq!(
            (c["channel_name"].clone(), c["name"].clone()),
            (json!("c"), json!("c"))
        );
        assert_eq!(c["depth"], 5);
        assert_eq!(c["message_count"], 17);
        assert_eq!(c["in_flight_count"], 3);
        assert_eq!(c["deferred_count"], 1);
        assert_eq!(c["requeue_count"], 4);
        assert_eq!(c["timeout_count"], 1);
        assert_eq!(c["client_count"], 3);
        assert_eq!(c["paused"], true);
        let ids: Vec<&str> = c["clients"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["client_id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, ["a", "b", "c"]);
        assert_eq!(chs[1]["channel_name"], "d");
        assert_eq!(chs[1]["name"], "d");
        assert_eq!(topics[1]["name"], "u");
    }

    #[test]
    fn health_is_the_first_failure_and_no_brokers_is_an_empty_document() {
        let m = merge(&[
            json!({"health":"OK"}),
            json!({"health":"NOK - disk"}),
            json!({"health":"NOK - x"}),
        ]);
        assert_eq!(m["health"], "NOK - disk");
        let empty = merge(&[]);
        assert_eq!(empty["topics"], json!([]));
        assert_eq!(empty["health"], "OK");
    }
}
