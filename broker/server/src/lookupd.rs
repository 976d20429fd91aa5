//! Registration with nsqlookupd, as nsqd does it, so a broker can join an existing NSQ fleet:
//! consumers that ask an official nsqlookupd for a topic find this broker.
//!
//! One task per address in `network.lookupd_tcp_addresses` keeps a connection open: the
//! `"  V1"` magic, `IDENTIFY` with the advertised address and ports, then one `REGISTER` per
//! topic and channel this broker holds. While connected it follows the topic registry (a
//! topic or channel created or deleted sends `REGISTER`/`UNREGISTER` within a fraction of a
//! second) and sends `PING` every 15 s, as nsqd does; nsqlookupd forgets a producer whose
//! connection closes. A lost or refused connection (noticed at once, where nsqd waits for its
//! next heartbeat) is retried with a back-off of 1 s doubling to 15 s, and everything is
//! registered again on the new one. See docs/compatibility.md.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

use crate::state::{Shared, VERSION};

/// nsqlookupd's protocol magic.
const MAGIC: &[u8] = b"  V1";
/// Per-operation deadline (nsqd uses one second for dial, read and write).
const IO_TIMEOUT: Duration = Duration::from_secs(1);
/// Heartbeat period (nsqd's).
const PING_EVERY: Duration = Duration::from_secs(15);
/// How often the registry revision is compared.
const FOLLOW_EVERY: Duration = Duration::from_millis(200);
/// Largest response accepted from nsqlookupd (its IDENTIFY answer is a few hundred bytes).
const MAX_RESPONSE: usize = 1 << 20;
/// Back-off bounds between connection attempts.
const BACKOFF_MIN: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(15);

/// One registration: a topic (`channel` `None`) or a channel of a topic.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Registration {
    /// Topic name.
    pub topic: String,
    /// Channel name, for a channel registration.
    pub channel: Option<String>,
}

/// A command to nsqlookupd.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// `REGISTER topic [channel]`.
    Register(Registration),
    /// `UNREGISTER topic [channel]`; a topic's also drops its channels on nsqlookupd.
    Unregister(Registration),
    /// `PING`.
    Ping,
}

impl Command {
    /// The command line, newline included.
    pub fn line(&self) -> String {
        let reg = |verb: &str, r: &Registration| match &r.channel {
            Some(c) => format!("{verb} {} {c}\n", r.topic),
            None => format!("{verb} {}\n", r.topic),
        };
        match self {
            Command::Register(r) => reg("REGISTER", r),
            Command::Unregister(r) => reg("UNREGISTER", r),
            Command::Ping => "PING\n".into(),
        }
    }
}

/// What to send to go from `registered` to `desired`: channel removals first (a topic's
/// removal covers its own channels), then topic removals, then additions, each in name order.
pub fn diff(registered: &BTreeSet<Registration>, desired: &BTreeSet<Registration>) -> Vec<Command> {
    let gone_topics: BTreeSet<&str> = registered
        .difference(desired)
        .filter(|r| r.channel.is_none())
        .map(|r| r.topic.as_str())
        .collect();
    let (gone_topic_regs, gone_channels): (Vec<&Registration>, Vec<&Registration>) = registered
        .difference(desired)
        .partition(|r| r.channel.is_none());
    gone_channels
        .into_iter()
        .filter(|r| !gone_topics.contains(r.topic.as_str()))
        .chain(gone_topic_regs)
        .map(|r| Command::Unregister(r.clone()))
        .chain(
            desired
                .difference(registered)
                .map(|r| Command::Register(r.clone())),
        )
        .collect()
}

/// Every topic and channel the broker holds, as registrations.
fn desired(shared: &Shared) -> BTreeSet<Registration> {
    let mut out = BTreeSet::new();
    for topic in shared.engine.topics() {
        // a topic deleted between the two calls has no channels to list: it goes next round
        for channel in shared.engine.channels(&topic).unwrap_or_default() {
            out.insert(Registration {
                topic: topic.clone(),
                channel: Some(channel),
            });
        }
        out.insert(Registration {
            topic,
            channel: None,
        });
    }
    out
}

/// The IDENTIFY body (the fields nsqlookupd requires and nsqd sends).
#[derive(Serialize)]
struct Identify<'a> {
    version: &'a str,
    tcp_port: u16,
    http_port: u16,
    hostname: &'a str,
    broadcast_address: &'a str,
}

/// Why a connection to nsqlookupd ended.
#[derive(Debug, thiserror::Error)]
enum PeerError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("timed out after {IO_TIMEOUT:?}")]
    Timeout,
    #[error("nsqlookupd refused {command:?}: {answer}")]
    Refused { command: String, answer: String },
    #[error("response of {0} bytes is larger than {MAX_RESPONSE}")]
    TooLarge(usize),
    #[error("nsqlookupd closed the connection")]
    Closed,
    #[error("nsqlookupd sent data nobody asked for")]
    Unsolicited,
}

async fn timed<T>(
    f: impl std::future::Future<Output = std::io::Result<T>>,
) -> Result<T, PeerError> {
    tokio::time::timeout(IO_TIMEOUT, f)
        .await
        .map_err(|_| PeerError::Timeout)?
        .map_err(PeerError::Io)
}

/// One connected nsqlookupd.
struct Peer {
    stream: TcpStream,
    registered: BTreeSet<Registration>,
}

impl Peer {
    async fn connect(addr: &str, shared: &Shared) -> Result<Peer, PeerError> {
        let stream = timed(TcpStream::connect(addr)).await?;
        let mut peer = Peer {
            stream,
            registered: BTreeSet::new(),
        };
        timed(peer.stream.write_all(MAGIC)).await?;
        let body = serde_json::to_vec(&Identify {
            version: VERSION,
            tcp_port: shared.tcp_port(),
            http_port: shared.http_port(),
            hostname: &shared.hostname,
            broadcast_address: &shared.control.node.broadcast_address,
        })
        .expect("the IDENTIFY body serializes");
        let mut frame = b"IDENTIFY\n".to_vec();
        frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
        frame.extend_from_slice(&body);
        let answer = peer.round_trip("IDENTIFY", &frame).await?;
        // nsqlookupd answers IDENTIFY with its own info as JSON, or an error code
        if answer.starts_with("E_") {
            return Err(PeerError::Refused {
                command: "IDENTIFY".into(),
                answer,
            });
        }
        Ok(peer)
    }

    /// Writes `frame`, reads one size-prefixed response.
    async fn round_trip(&mut self, what: &str, frame: &[u8]) -> Result<String, PeerError> {
        timed(self.stream.write_all(frame)).await?;
        let mut size = [0u8; 4];
        timed(self.stream.read_exact(&mut size)).await?;
        let size = u32::from_be_bytes(size) as usize;
        if size > MAX_RESPONSE {
            return Err(PeerError::TooLarge(size));
        }
        let mut body = vec![0u8; size];
        timed(self.stream.read_exact(&mut body)).await?;
        let answer = String::from_utf8_lossy(&body).into_owned();
        if what != "IDENTIFY" && answer != "OK" {
            return Err(PeerError::Refused {
                command: what.trim_end().to_string(),
                answer,
            });
        }
        Ok(answer)
    }

    async fn send(&mut self, command: &Command) -> Result<(), PeerError> {
        let line = command.line();
        self.round_trip(&line, line.as_bytes()).await?;
        match command {
            Command::Register(r) => {
                self.registered.insert(r.clone());
            }
            Command::Unregister(r) => {
                // nsqlookupd drops a topic's channels with the topic
                self.registered
                    .retain(|x| x != r && !(r.channel.is_none() && x.topic == r.topic));
            }
            Command::Ping => {}
        }
        Ok(())
    }

    /// Resolves when nsqlookupd closes the connection (it never speaks unasked), so a
    /// restarted nsqlookupd gets this broker's registrations back within the back-off, not at
    /// the next heartbeat.
    async fn closed(&self) -> PeerError {
        loop {
            if let Err(e) = self.stream.readable().await {
                return PeerError::Io(e);
            }
            let mut byte = [0u8; 1];
            match self.stream.try_read(&mut byte) {
                Ok(0) => return PeerError::Closed,
                Ok(_) => return PeerError::Unsolicited,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(e) => return PeerError::Io(e),
            }
        }
    }

    /// Registers what changed since the last sync.
    async fn sync(&mut self, desired: &BTreeSet<Registration>) -> Result<(), PeerError> {
        for command in diff(&self.registered, desired) {
            tracing::debug!(command = %command.line().trim_end(), "nsqlookupd");
            self.send(&command).await?;
        }
        Ok(())
    }
}

/// Follows the registry on one connection until it fails or shutdown starts.
async fn serve(
    addr: &str,
    shared: &Shared,
    stop: &mut watch::Receiver<bool>,
) -> Result<(), PeerError> {
    let mut peer = Peer::connect(addr, shared).await?;
    let mut revision = shared.engine.registry_revision();
    peer.sync(&desired(shared)).await?;
    tracing::info!(%addr, topics = peer.registered.len(), "registered with nsqlookupd");
    let mut follow = tokio::time::interval(FOLLOW_EVERY);
    let mut ping = tokio::time::interval_at(tokio::time::Instant::now() + PING_EVERY, PING_EVERY);
    loop {
        tokio::select! {
            changed = stop.changed() => {
                if changed.is_err() || *stop.borrow_and_update() {
                    return Ok(());
                }
            }
            closed = peer.closed() => return Err(closed),
            _ = ping.tick() => peer.send(&Command::Ping).await?,
            _ = follow.tick() => {
                let now = shared.engine.registry_revision();
                if now != revision {
                    revision = now;
                    peer.sync(&desired(shared)).await?;
                }
            }
        }
    }
}

/// Keeps this broker registered with the nsqlookupd at `addr` until shutdown.
pub async fn run(shared: Arc<Shared>, addr: String) {
    let mut stop = shared.shutdown.clone();
    let mut backoff = BACKOFF_MIN;
    loop {
        let stopping = *stop.borrow();
        if stopping {
            return;
        }
        match serve(&addr, &shared, &mut stop).await {
            Ok(()) => return,
            Err(e) => tracing::warn!(%addr, "nsqlookupd connection: {e}; retrying in {backoff:?}"),
        }
        if tokio::time::timeout(backoff, stop.wait_for(|v| *v))
            .await
            .is_ok()
        {
            return;
        }
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reg(topic: &str, channel: Option<&str>) -> Registration {
        Registration {
            topic: topic.into(),
            channel: channel.map(str::to_string),
        }
    }

    fn set(items: &[(&str, Option<&str>)]) -> BTreeSet<Registration> {
        items.iter().map(|(t, c)| reg(t, *c)).collect()
    }

    fn lines(commands: &[Command]) -> Vec<String> {
        commands
            .iter()
            .map(|c| c.line().trim_end().to_string())
            .collect()
    }

    #[test]
    fn the_diff_sends_what_changed_and_lets_a_topic_take_its_channels_along() {
        type Regs<'a> = &'a [(&'a str, Option<&'a str>)];
        let cases: &[(Regs, Regs, &[&str])] = &[
            // first connection: everything
            (
                &[],
                &[("a", None), ("a", Some("c1")), ("b", None)],
                &["REGISTER a", "REGISTER a c1", "REGISTER b"],
            ),
            // nothing changed
            (&[("a", None)], &[("a", None)], &[]),
            // a channel deleted, the topic stays
            (
                &[("a", None), ("a", Some("c1")), ("a", Some("c2"))],
                &[("a", None), ("a", Some("c2"))],
                &["UNREGISTER a c1"],
            ),
            // a topic deleted: one UNREGISTER covers its channels
            (
                &[("a", None), ("a", Some("c1")), ("b", None)],
                &[("b", None)],
                &["UNREGISTER a"],
            ),
            // removals before additions
            (
                &[("a", None), ("a", Some("old"))],
                &[("a", None), ("a", Some("new")), ("z#ephemeral", None)],
                &["UNREGISTER a old", "REGISTER a new", "REGISTER z#ephemeral"],
            ),
        ];
        for (registered, desired, want) in cases {
            assert_eq!(
                lines(&diff(&set(registered), &set(desired))),
                *want,
                "{registered:?} -> {desired:?}"
            );
        }
    }

    #[test]
    fn command_lines_are_nsqlookupd_v1() {
        assert_eq!(Command::Ping.line(), "PING\n");
        assert_eq!(
            Command::Register(reg("t", Some("c"))).line(),
            "REGISTER t c\n"
        );
        assert_eq!(Command::Unregister(reg("t", None)).line(), "UNREGISTER t\n");
    }
}
