//! The plain-text `/stats` page, laid out line for line like nsqd v1.3's `printStats`, so
//! people (and scripts) that read nsqd's page can read ours.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

/// Renders the `/stats` JSON document (as built by `stats_json`) as nsqd's text page.
pub(super) fn render(doc: &Value, now: SystemTime) -> String {
    let now_s = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let start = doc["start_time"].as_u64().unwrap_or(0);
    let mut s = format!(
        "rustqueued v{}\nstart_time {}\nuptime {}\n\nHealth: {}\n",
        doc["version"].as_str().unwrap_or(""),
        rfc3339(start),
        go_duration(now_s.saturating_sub(Duration::from_secs(start))),
        doc["health"].as_str().unwrap_or("OK")
    );
    if let Some(mem) = doc.get("memory").and_then(Value::as_object) {
        s.push_str("\nMemory:\n");
        for key in MEMORY_KEYS {
            let v = mem.get(key).and_then(Value::as_u64).unwrap_or(0);
            let _ = writeln!(s, "   {key:<25}\t{v}");
        }
    }
    let empty = Vec::new();
    let topics = doc["topics"].as_array().unwrap_or(&empty);
    s.push_str(if topics.is_empty() {
        "\nTopics: None\n"
    } else {
        "\nTopics:"
    });
    for t in topics {
        let _ = writeln!(
            s,
            "\n{}[{:<15}] depth: {:<5} be-depth: {:<5} msgs: {:<8} e2e%: ",
            if t["paused"] == true { "*P " } else { "   " },
            t["topic_name"].as_str().unwrap_or(""),
            n(&t["depth"]),
            n(&t["backend_depth"]),
            n(&t["message_count"]),
        );
        for c in t["channels"].as_array().unwrap_or(&empty) {
            let _ = writeln!(
                s,
                "{}[{:<25}] depth: {:<5} be-depth: {:<5} inflt: {:<4} def: {:<4} re-q: {:<5} timeout: {:<5} msgs: {:<8} e2e%: ",
                if c["paused"] == true {
                    "   *P "
                } else {
                    "      "
                },
                c["channel_name"].as_str().unwrap_or(""),
                n(&c["depth"]),
                n(&c["backend_depth"]),
                n(&c["in_flight_count"]),
                n(&c["deferred_count"]),
                n(&c["requeue_count"]),
                n(&c["timeout_count"]),
                n(&c["message_count"]),
            );
            for cl in c["clients"].as_array().unwrap_or(&empty) {
                let _ = writeln!(
                    s,
                    "        [V2 {:<21}] state: {} inflt: {:<4} rdy: {:<4} fin: {:<8} re-q: {:<8} msgs: {:<8} connected: {}",
                    client_id(cl),
                    n(&cl["state"]),
                    n(&cl["in_flight_count"]),
                    n(&cl["ready_count"]),
                    n(&cl["finish_count"]),
                    n(&cl["requeue_count"]),
                    n(&cl["message_count"]),
                    connected(cl, now_s)
                );
            }
        }
    }
    let producers = doc["producers"].as_array().unwrap_or(&empty);
    if producers.is_empty() {
        s.push_str("\nProducers: None\n");
    } else {
        s.push_str("\nProducers:\n");
        for p in producers {
            let counts = p["pub_counts"].as_array().unwrap_or(&empty);
            let total: u64 = counts.iter().filter_map(|c| c["count"].as_u64()).sum();
            let topics: Vec<String> = counts
                .iter()
                .map(|c| format!("{}={}", c["topic"].as_str().unwrap_or(""), n(&c["count"])))
                .collect();
            let _ = writeln!(
                s,
                "   [V2 {:<21}] msgs: {:<8} topics: {} connected: {}",
                client_id(p),
                total,
                topics.join(","),
                connected(p, now_s)
            );
        }
    }
    s
}

const MEMORY_KEYS: [&str; 9] = [
    "heap_objects",
    "heap_idle_bytes",
    "heap_in_use_bytes",
    "heap_released_bytes",
    "gc_pause_usec_100",
    "gc_pause_usec_99",
    "gc_pause_usec_95",
    "next_gc_bytes",
    "gc_total_runs",
];

/// A counter from the JSON document (a plain number, so the column widths apply).
fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// nsqd's `hostname:port user_agent` for a client line.
fn client_id(c: &Value) -> String {
    let addr = c["remote_address"].as_str().unwrap_or("");
    let port = addr.rsplit_once(':').map_or("", |(_, p)| p);
    format!(
        "{}:{} {}",
        c["hostname"].as_str().unwrap_or(""),
        port,
        c["user_agent"].as_str().unwrap_or("")
    )
}

/// Time since the client connected, whole seconds, as Go prints a duration.
fn connected(c: &Value, now: Duration) -> String {
    let since = c["connect_ts"].as_u64().unwrap_or(0);
    go_duration(Duration::from_secs(now.as_secs().saturating_sub(since)))
}

/// A duration the way Go's `time.Duration.String` prints it ("0s", "1.5s", "2m3s", "1h0m4s").
fn go_duration(d: Duration) -> String {
    if d.is_zero() {
        return "0s".into();
    }
    if d < Duration::from_secs(1) {
        let ns = d.as_nanos();
        return match ns {
            n if n < 1_000 => format!("{n}ns"),
            n if n < 1_000_000 => format!("{}µs", trim_fraction(n, 1_000)),
            n => format!("{}ms", trim_fraction(n, 1_000_000)),
        };
    }
    let total = d.as_secs();
    let (h, m) = (total / 3600, (total / 60) % 60);
    let secs = trim_fraction(
        u128::from(total % 60) * 1_000_000_000 + u128::from(d.subsec_nanos()),
        1_000_000_000,
    );
    match (h, m) {
        (0, 0) => format!("{secs}s"),
        (0, m) => format!("{m}m{secs}s"),
        (h, m) => format!("{h}h{m}m{secs}s"),
    }
}

/// `n / unit` with the fraction's trailing zeros dropped ("1.5", "3").
fn trim_fraction(n: u128, unit: u128) -> String {
    let (whole, frac) = (n / unit, n % unit);
    if frac == 0 {
        return whole.to_string();
    }
    let width = unit.ilog10() as usize;
    let digits = format!("{frac:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

/// Seconds since the epoch as an RFC 3339 UTC timestamp (what nsqd prints for start_time).
fn rfc3339(secs: u64) -> String {
    jiff::Timestamp::from_second(secs as i64).map_or_else(|_| secs.to_string(), |t| t.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn durations_print_like_go() {
        for (d, want) in [
            (Duration::ZERO, "0s"),
            (Duration::from_millis(1500), "1.5s"),
            (Duration::from_secs(2), "2s"),
            (Duration::from_secs(123), "2m3s"),
            (Duration::from_secs(3604), "1h0m4s"),
            (Duration::from_nanos(3_559_441_363), "3.559441363s"),
            (Duration::from_micros(1500), "1.5ms"),
            (Duration::from_nanos(250), "250ns"),
        ] {
            assert_eq!(go_duration(d), want, "{d:?}");
        }
    }

    #[test]
    fn start_time_is_rfc3339_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_796_048_425), "2026-11-30T14:20:25Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
    }

    #[test]
    fn the_page_has_nsqds_sections_and_lines() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000);
        let doc = json!({
            "version": "0.1.0", "health": "OK", "start_time": 990,
            "memory": {"heap_in_use_bytes": 4096},
            "topics": [{
                "topic_name": "t1", "depth": 0, "backend_depth": 0, "message_count": 1, "paused": true,
                "channels": [{
                    "channel_name": "ch", "depth": 0, "backend_depth": 0, "in_flight_count": 1,
                    "deferred_count": 0, "requeue_count": 0, "timeout_count": 0, "message_count": 1,
                    "paused": false,
                    "clients": [{"hostname": "127.0.0.1", "remote_address": "127.0.0.1:47090",
                        "user_agent": "", "state": 3, "in_flight_count": 1, "ready_count": 1,
                        "finish_count": 0, "requeue_count": 0, "message_count": 1, "connect_ts": 998}]
                }]
            }],
            "producers": [{"hostname": "h1", "remote_address": "127.0.0.1:47082", "user_agent": "ua/1",
                "connect_ts": 998, "pub_counts": [{"topic": "t1", "count": 1}]}]
        });
        let text = render(&doc, now);
        // nsqd v1.3.0's page for the same state, line for line.
        let want = [
            "rustqueued v0.1.0",
            "start_time 1970-01-01T00:16:30Z",
            "uptime 10s",
            "",
            "Health: OK",
            "",
            "Memory:",
            "   heap_objects             \t0",
            "   heap_idle_bytes          \t0",
            "   heap_in_use_bytes        \t4096",
            "   heap_released_bytes      \t0",
            "   gc_pause_usec_100        \t0",
            "   gc_pause_usec_99         \t0",
            "   gc_pause_usec_95         \t0",
            "   next_gc_bytes            \t0",
            "   gc_total_runs            \t0",
            "",
            "Topics:",
            "*P [t1             ] depth: 0     be-depth: 0     msgs: 1        e2e%: ",
            "      [ch                       ] depth: 0     be-depth: 0     inflt: 1    def: 0    re-q: 0     timeout: 0     msgs: 1        e2e%: ",
            "        [V2 127.0.0.1:47090      ] state: 3 inflt: 1    rdy: 1    fin: 0        re-q: 0        msgs: 1        connected: 2s",
            "",
            "Producers:",
            "   [V2 h1:47082 ua/1        ] msgs: 1        topics: t1=1 connected: 2s",
            "",
        ]
        .join("\n");
        assert_eq!(text, want);
        let none = render(&json!({"version": "0.1.0", "start_time": 990}), now);
        assert!(
            none.ends_with("\nTopics: None\n\nProducers: None\n"),
            "{none}"
        );
    }
}
