//! How one publish attempt on one broker ended, read from the broker's answer (docs/kodo.md,
//! "Publishing"): the leaf that the broker session (`backend.rs`) and the publish algorithm
//! (`publish.rs`) share.

use bytes::Bytes;
use rustqueue_protocol::Frame;

/// Broker refusals that come before anything is stored: safe to send elsewhere.
pub const PRE_COMMIT_CODES: [&str; 4] = ["E_DRAINING", "E_CLOSING", "E_THROTTLED", "E_PUB_RETRY"];

/// How one attempt on one broker ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// `OK`: stored.
    Committed,
    /// Provably not applied; the next broker may be tried.
    PreCommit(String),
    /// A final broker error frame (its text), passed to the producer.
    Final(Bytes),
    /// Perhaps applied, perhaps not.
    Ambiguous(String),
}

/// Classify a broker's answer to a publish.
pub fn classify(frame: &Frame) -> Verdict {
    match frame {
        Frame::Response(r) if &r[..] == rustqueue_protocol::frame::OK => Verdict::Committed,
        Frame::Error(text) if is_pre_commit(text) => {
            Verdict::PreCommit(String::from_utf8_lossy(text).into_owned())
        }
        Frame::Error(text) => Verdict::Final(text.clone()),
        other => Verdict::Ambiguous(format!("unexpected answer {other:?}")),
    }
}

/// Whether an error frame's code (its first word) is one of [`PRE_COMMIT_CODES`].
pub fn is_pre_commit(text: &[u8]) -> bool {
    let code = text.split(|b| *b == b' ').next().unwrap_or_default();
    PRE_COMMIT_CODES.iter().any(|c| c.as_bytes() == code)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &'static str) -> Frame {
        Frame::Error(Bytes::from_static(text.as_bytes()))
    }

    #[test]
    fn every_broker_answer_is_classified() {
        let pre = |t: &str| Verdict::PreCommit(t.to_string());
        let fin = |t: &'static str| Verdict::Final(Bytes::from_static(t.as_bytes()));
        // The texts rustqueued sends (broker/server: tcp/session.rs, tcp/errors.rs).
        let cases = [
            (
                Frame::Response(Bytes::from_static(b"OK")),
                Verdict::Committed,
            ),
            (
                err("E_DRAINING PUB failed: draining"),
                pre("E_DRAINING PUB failed: draining"),
            ),
            (
                err("E_CLOSING cannot PUB while closing"),
                pre("E_CLOSING cannot PUB while closing"),
            ),
            (
                err("E_CLOSING MPUB failed: shutting down"),
                pre("E_CLOSING MPUB failed: shutting down"),
            ),
            (
                err("E_THROTTLED PUB failed: throttled"),
                pre("E_THROTTLED PUB failed: throttled"),
            ),
            (
                err("E_PUB_RETRY DPUB failed: storage"),
                pre("E_PUB_RETRY DPUB failed: storage"),
            ),
            (err("E_DRAINING"), pre("E_DRAINING")),
            (
                err("E_BAD_TOPIC PUB topic name \"x\" is not valid"),
                fin("E_BAD_TOPIC PUB topic name \"x\" is not valid"),
            ),
            (
                err("E_BAD_MESSAGE PUB failed: too big"),
                fin("E_BAD_MESSAGE PUB failed: too big"),
            ),
            (
                err("E_PUB_FAILED PUB failed"),
                fin("E_PUB_FAILED PUB failed"),
            ),
            (
                err("E_INVALID DPUB timeout out of range"),
                fin("E_INVALID DPUB timeout out of range"),
            ),
            (
                err("E_UNAUTHORIZED AUTH first"),
                fin("E_UNAUTHORIZED AUTH first"),
            ),
            (err("E_DRAINING_SOON x"), fin("E_DRAINING_SOON x")),
            (err("e_draining x"), fin("e_draining x")),
            (err(" E_DRAINING x"), fin(" E_DRAINING x")),
        ];
        for (frame, want) in cases {
            assert_eq!(classify(&frame), want, "{frame:?}");
        }
        for odd in [
            Frame::Response(Bytes::from_static(b"_heartbeat_")),
            Frame::Response(Bytes::from_static(b"")),
            Frame::Message {
                timestamp_ns: 0,
                attempts: 1,
                id: [b'0'; 16],
                body: Bytes::new(),
            },
        ] {
            assert!(matches!(classify(&odd), Verdict::Ambiguous(_)), "{odd:?}");
        }
    }
}
