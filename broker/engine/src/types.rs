//! Plain values crossing the engine API: ids, deliveries, consumer options, stats, health.

use std::time::Duration;

use bytes::Bytes;
use serde::Serialize;

/// A 16-byte NSQ message id (ASCII hex of `node_id << 48 | sequence`). Never reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MessageId(pub [u8; 16]);

impl MessageId {
    /// The id of a stored message number: 16 lowercase hex digits, most significant first.
    /// Every delivery makes one, so it is encoded in place, without `format!`'s allocation.
    pub fn from_u64(v: u64) -> MessageId {
        let mut out = [0u8; 16];
        // Eight bytes always fill sixteen digits exactly.
        let _ = hex::encode_to_slice(v.to_be_bytes(), &mut out);
        MessageId(out)
    }

    /// The stored number, if the id is 16 lowercase/uppercase hex digits (nothing else: no
    /// sign, no spaces).
    pub fn to_u64(&self) -> Option<u64> {
        let mut raw = [0u8; 8];
        hex::decode_to_slice(self.0, &mut raw).ok()?;
        Some(u64::from_be_bytes(raw))
    }
}

impl std::fmt::Display for MessageId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&String::from_utf8_lossy(&self.0))
    }
}

/// One delivery of a message to a consumer.
#[derive(Clone, Debug)]
pub struct Delivery {
    /// Message id.
    pub id: MessageId,
    /// Publish time (ns since the epoch).
    pub timestamp_ns: i64,
    /// This delivery's attempt number (1 for the first).
    pub attempts: u16,
    /// Body.
    pub body: Bytes,
}

/// How a consumer subscribes.
#[derive(Clone, Debug, Default)]
pub struct ConsumerOptions {
    /// In-flight timeout; `None` = configured default.
    pub msg_timeout: Option<Duration>,
    /// 0 = off; 1..=99 = percent of messages delivered (the rest are auto-finished).
    pub sample_rate: u8,
    /// Who the consumer is (stats only).
    pub client: ClientInfo,
}

/// A client's identity, reported in stats.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ClientInfo {
    /// IDENTIFY client_id.
    pub client_id: String,
    /// IDENTIFY hostname.
    pub hostname: String,
    /// IDENTIFY user_agent.
    pub user_agent: String,
    /// Peer address.
    pub remote_address: String,
    /// TLS negotiated.
    pub tls: bool,
    /// Snappy negotiated.
    pub snappy: bool,
    /// Deflate negotiated.
    pub deflate: bool,
}

/// `/stats` document (nsqd shape).
#[derive(Clone, Debug, Serialize)]
pub struct EngineStats {
    /// Always "OK" while storage is healthy, otherwise the fault.
    pub health: String,
    /// Unix seconds when the engine opened.
    pub start_time: u64,
    /// Topics in name order.
    pub topics: Vec<TopicStats>,
}

/// One topic in `/stats`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct TopicStats {
    /// Topic name.
    pub topic_name: String,
    /// Alias of `topic_name`.
    pub name: String,
    /// Always 0 (no intermediate topic queue).
    pub depth: u64,
    /// Always 0.
    pub memory_depth: u64,
    /// Always 0.
    pub backend_depth: u64,
    /// Monotonic published count.
    pub message_count: u64,
    /// Paused.
    pub paused: bool,
    /// Channels in name order.
    pub channels: Vec<ChannelStats>,
    /// Appended but not yet fsynced messages (relaxed modes).
    pub unsynced_messages: u64,
    /// Appended but not yet fsynced bytes.
    pub unsynced_bytes: u64,
    /// Highest position on stable storage.
    pub last_durable_position: u64,
    /// Segment files (native stats only; not in nsqd's `/stats`).
    #[serde(skip)]
    pub segment_count: u64,
    /// Bytes of records in those segment files (native stats only).
    #[serde(skip)]
    pub segment_bytes: u64,
    /// Age of the oldest appended-but-unsynced message, ms; 0 when all is synced (native
    /// stats only).
    #[serde(skip)]
    pub sync_lag_ms: u64,
}

/// One channel in `/stats`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ChannelStats {
    /// Channel name.
    pub channel_name: String,
    /// Alias.
    pub name: String,
    /// Backlog minus in-flight minus deferred.
    pub depth: u64,
    /// Always 0.
    pub memory_depth: u64,
    /// Same as depth.
    pub backend_depth: u64,
    /// Monotonic count of messages that reached this channel.
    pub message_count: u64,
    /// In flight.
    pub in_flight_count: u64,
    /// Deferred (DPUB or REQ with delay).
    pub deferred_count: u64,
    /// Monotonic REQ count.
    pub requeue_count: u64,
    /// Monotonic timeout count.
    pub timeout_count: u64,
    /// Connected consumers.
    pub client_count: u64,
    /// Consumers.
    pub clients: Vec<ClientStats>,
    /// Paused.
    pub paused: bool,
    /// Kept in memory only (native stats only; not in nsqd's `/stats`).
    #[serde(skip)]
    pub ephemeral: bool,
    /// Every position at or below is finished (native stats only).
    #[serde(skip)]
    pub ack_cursor: u64,
    /// Finished positions above the cursor (native stats only).
    #[serde(skip)]
    pub ack_gap: u64,
}

/// One consumer in `/stats`.
#[derive(Clone, Debug, Serialize)]
pub struct ClientStats {
    /// IDENTIFY client_id.
    pub client_id: String,
    /// IDENTIFY hostname.
    pub hostname: String,
    /// Peer address.
    pub remote_address: String,
    /// IDENTIFY user_agent.
    pub user_agent: String,
    /// Always 3 (subscribed).
    pub state: u8,
    /// Current RDY.
    pub ready_count: u64,
    /// In flight.
    pub in_flight_count: u64,
    /// Delivered.
    pub message_count: u64,
    /// Finished.
    pub finish_count: u64,
    /// Requeued.
    pub requeue_count: u64,
    /// Unix seconds at subscribe.
    pub connect_ts: u64,
    /// Sample rate.
    pub sample_rate: u8,
    /// TLS.
    pub tls: bool,
    /// Deflate.
    pub deflate: bool,
    /// Snappy.
    pub snappy: bool,
    /// Authenticated (set by the server).
    pub authed: bool,
}

/// Facts for health probes and the control contract.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct EngineHealth {
    /// Set once storage is isolated: the broker must report unhealthy and restart.
    pub storage_fault: Option<String>,
    /// Deliveries frozen by the control API.
    pub deliveries_frozen: bool,
    /// Set while the data disk is under pressure (publishes are throttled: 429/E_THROTTLED).
    pub disk_pressure: Option<String>,
    /// Shutdown started.
    pub shutting_down: bool,
    /// Number of topics.
    pub topics: usize,
}

/// Suffix marking ephemeral topics and channels.
pub const EPHEMERAL_SUFFIX: &str = "#ephemeral";

/// Validates a topic or channel name (1..=64 bytes, `[A-Za-z0-9._-]`, optional `#ephemeral`).
pub fn valid_name(name: &str) -> bool {
    let base = name.strip_suffix(EPHEMERAL_SUFFIX).unwrap_or(name);
    !name.is_empty()
        && name.len() <= 64
        && !base.is_empty()
        && base
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
}

/// Whether a name is ephemeral.
pub fn is_ephemeral(name: &str) -> bool {
    name.ends_with(EPHEMERAL_SUFFIX)
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Nanoseconds since the Unix epoch.
pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_ids_are_sixteen_hex_digits_and_round_trip() {
        for (v, hex) in [
            ((41 << 48) | 7, b"0029000000000007"),
            (0, b"0000000000000000"),
            (1, b"0000000000000001"),
            (0xdead_beef, b"00000000deadbeef"),
            (u64::MAX, b"ffffffffffffffff"),
            (0x0123_4567_89ab_cdef, b"0123456789abcdef"),
        ] {
            let id = MessageId::from_u64(v);
            assert_eq!(&id.0, hex, "{v:#x}");
            assert_eq!(id.to_u64(), Some(v), "{v:#x}");
            // What `format!` wrote before, for every digit position.
            assert_eq!(id.0, *format!("{v:016x}").as_bytes(), "{v:#x}");
        }
        assert_eq!(MessageId(*b"00000000DEADBEEF").to_u64(), Some(0xdead_beef));
        for bad in [
            b"zzzzzzzzzzzzzzzz",
            b"000000000000000g",
            b"+000000000000001",
            b"-000000000000001",
            b" 000000000000001",
            b"000000000000001\0",
        ] {
            assert_eq!(
                MessageId(*bad).to_u64(),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn names_follow_nsq_rules() {
        for ok in ["a", "a.b_c-d", "x#ephemeral", &"a".repeat(64)] {
            assert!(valid_name(ok), "{ok}");
        }
        for bad in ["", "#ephemeral", "a b", "a/b", &"a".repeat(65), "a#eph"] {
            assert!(!valid_name(bad), "{bad}");
        }
    }
}
