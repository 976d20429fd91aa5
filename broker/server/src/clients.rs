//! Live TCP clients, for `/stats` (clients under their channel, and `producers`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};

/// Counters and facts of one connection.
#[derive(Debug, Default)]
pub struct ClientStats {
    /// Connection id.
    pub id: u64,
    /// Peer address.
    pub remote_address: String,
    /// Unix seconds.
    pub connect_ts: u64,
    /// Mutable facts.
    pub facts: Mutex<ClientFacts>,
    /// Messages sent.
    pub message_count: AtomicU64,
    /// FINs.
    pub finish_count: AtomicU64,
    /// REQs.
    pub requeue_count: AtomicU64,
    /// Current RDY.
    pub ready_count: AtomicU64,
    /// Messages in flight (as far as the session knows).
    pub in_flight_count: AtomicU64,
}

/// The state of a V2 session, shared by the session loop and its `/stats` entry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SessionState {
    /// Connected; IDENTIFY, AUTH, SUB and publishes allowed.
    #[default]
    Init,
    /// SUB succeeded; RDY, FIN, REQ and TOUCH allowed.
    Subscribed,
    /// CLS received; the session drains and closes.
    Closing,
}

impl SessionState {
    /// nsqd's number for the state in `/stats` (`stateInit` 1, `stateSubscribed` 3,
    /// `stateClosing` 4).
    pub fn code(self) -> u8 {
        match self {
            SessionState::Init => 1,
            SessionState::Subscribed => 3,
            SessionState::Closing => 4,
        }
    }
}

/// Facts that change after IDENTIFY/SUB/AUTH/PUB.
#[derive(Clone, Debug, Default)]
pub struct ClientFacts {
    /// From IDENTIFY.
    pub client_id: String,
    /// From IDENTIFY.
    pub hostname: String,
    /// From IDENTIFY.
    pub user_agent: String,
    /// Negotiated.
    pub tls: bool,
    /// Negotiated.
    pub snappy: bool,
    /// Negotiated.
    pub deflate: bool,
    /// Negotiated.
    pub sample_rate: u8,
    /// AUTH succeeded.
    pub authed: bool,
    /// AUTH identity.
    pub auth_identity: String,
    /// Where the session is; `/stats` shows its nsqd number.
    pub state: SessionState,
    /// Subscription.
    pub subscription: Option<(String, String)>,
    /// Publishes per topic.
    pub pub_counts: BTreeMap<String, u64>,
}

impl ClientStats {
    /// Whether this client is subscribed to `topic`/`channel`.
    pub fn subscribed_to(&self, topic: &str, channel: &str) -> bool {
        self.facts
            .lock()
            .map(|f| {
                f.subscription
                    .as_ref()
                    .is_some_and(|(t, ch)| t == topic && ch == channel)
            })
            .unwrap_or(false)
    }

    /// Updates the facts under the lock.
    pub fn update(&self, f: impl FnOnce(&mut ClientFacts)) {
        if let Ok(mut facts) = self.facts.lock() {
            f(&mut facts);
        }
    }

    fn to_json(&self) -> Value {
        let f = self.facts.lock().map(|f| f.clone()).unwrap_or_default();
        json!({
            "client_id": f.client_id,
            "hostname": f.hostname,
            "version": "V2",
            "remote_address": self.remote_address,
            "state": f.state.code(),
            "ready_count": self.ready_count.load(Ordering::Relaxed),
            "in_flight_count": self.in_flight_count.load(Ordering::Relaxed),
            "message_count": self.message_count.load(Ordering::Relaxed),
            "finish_count": self.finish_count.load(Ordering::Relaxed),
            "requeue_count": self.requeue_count.load(Ordering::Relaxed),
            "connect_ts": self.connect_ts,
            "sample_rate": f.sample_rate,
            "deflate": f.deflate,
            "snappy": f.snappy,
            "user_agent": f.user_agent,
            "tls": f.tls,
            "authed": f.authed,
            "auth_identity": f.auth_identity,
            "pub_counts": f.pub_counts.iter().map(|(t, c)| json!({"topic": t, "count": c})).collect::<Vec<_>>(),
        })
    }
}

/// All live clients.
#[derive(Default)]
pub struct ClientRegistry {
    next_id: AtomicU64,
    clients: Mutex<HashMap<u64, Arc<ClientStats>>>,
}

impl ClientRegistry {
    /// Registers a new connection.
    pub fn register(&self, peer: std::net::SocketAddr) -> Arc<ClientStats> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let connect_ts = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let c = Arc::new(ClientStats {
            id,
            remote_address: peer.to_string(),
            connect_ts,
            ..ClientStats::default()
        });
        // Like nsqd, a client is known by its remote host until IDENTIFY names it.
        let host = peer.ip().to_string();
        c.update(|f| {
            f.state = SessionState::Init;
            f.client_id = host.clone();
            f.hostname = host;
        });
        if let Ok(mut map) = self.clients.lock() {
            map.insert(id, c.clone());
        }
        c
    }

    /// Removes a closed connection.
    pub fn remove(&self, id: u64) {
        if let Ok(mut map) = self.clients.lock() {
            map.remove(&id);
        }
    }

    /// Subscribes `client` to `topic`/`channel` unless the channel already has `max` other
    /// subscribers (0 = no limit), counting and claiming under one lock so that concurrent SUBs
    /// cannot overshoot the limit. Returns the limit when it is reached.
    pub fn claim_subscription(
        &self,
        client: &ClientStats,
        topic: &str,
        channel: &str,
        max: usize,
    ) -> Result<(), usize> {
        let Ok(map) = self.clients.lock() else {
            return Ok(());
        };
        if max != 0 {
            let others = map
                .values()
                .filter(|c| c.id != client.id && c.subscribed_to(topic, channel))
                .count();
            if others >= max {
                return Err(max);
            }
        }
        client.update(|f| f.subscription = Some((topic.to_owned(), channel.to_owned())));
        Ok(())
    }

    fn snapshot(&self) -> Vec<Arc<ClientStats>> {
        let mut v: Vec<_> = self
            .clients
            .lock()
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default();
        v.sort_by_key(|c| c.id);
        v
    }

    /// Clients subscribed to `topic`/`channel`, as nsqd `/stats` client objects.
    pub fn subscribers_json(&self, topic: &str, channel: &str) -> Vec<Value> {
        self.snapshot()
            .into_iter()
            .filter(|c| c.subscribed_to(topic, channel))
            .map(|c| c.to_json())
            .collect()
    }

    /// Clients that published at least once (nsqd `/stats` `producers`).
    pub fn producers_json(&self) -> Vec<Value> {
        self.snapshot()
            .into_iter()
            .filter(|c| {
                c.facts
                    .lock()
                    .map(|f| !f.pub_counts.is_empty())
                    .unwrap_or(false)
            })
            .map(|c| c.to_json())
            .collect()
    }
}
