//! Engine errors → NSQ error frames (docs/architecture.md, "Errors on the wire").

use rustqueue_engine::{DeliveryError, EngineError, PublishError};
use rustqueue_protocol::{ErrorCode, ProtocolError};

use crate::control::manage::Refusal;

/// A failed PUB/MPUB/DPUB. Pre-commit refusals are retriable and keep the connection.
pub fn publish(e: &PublishError, cmd: &str) -> ProtocolError {
    let code = match e {
        PublishError::TooBig { .. } | PublishError::EmptyBody => ErrorCode::BadMessage,
        PublishError::BadBatch(_) => ErrorCode::BadBody,
        PublishError::BadTopic(_) => ErrorCode::BadTopic,
        PublishError::InvalidDefer => ErrorCode::Invalid,
        PublishError::Throttled => ErrorCode::Throttled,
        PublishError::TopicLimit | PublishError::StorageFault(_) => ErrorCode::PubRetry,
        PublishError::ShuttingDown => ErrorCode::Closing,
    };
    ProtocolError::new(code, format!("{cmd} failed: {e}"))
}

/// A failed SUB.
pub fn subscribe(e: &EngineError, topic: &str, channel: &str) -> ProtocolError {
    match e {
        EngineError::BadName(_) => ProtocolError::new(
            ErrorCode::BadTopic,
            format!("SUB topic {topic:?} / channel {channel:?} is not valid"),
        ),
        other => ProtocolError::new(ErrorCode::SubFailed, format!("SUB failed {other}")),
    }
}

/// A failed FIN/REQ/TOUCH: non-fatal, like nsqd.
pub fn delivery(e: &DeliveryError, cmd: &str, id: &str) -> ProtocolError {
    let code = match cmd {
        "FIN" => ErrorCode::FinFailed,
        "REQ" => ErrorCode::ReqFailed,
        _ => ErrorCode::TouchFailed,
    };
    ProtocolError::new(code, format!("{cmd} {id} failed {e}"))
}

/// A PUB/MPUB/DPUB or SUB refused by a management fence: non-fatal, the connection stays open
/// (a publisher may go on publishing to other topics).
pub fn fenced(r: Refusal, cmd: &str, topic: &str) -> ProtocolError {
    let code = match r {
        Refusal::Unavailable => ErrorCode::ManagementUnavailable,
        Refusal::TopicTombstoned => ErrorCode::TopicTombstoned,
        Refusal::ChannelTombstoned => ErrorCode::ChannelTombstoned,
    };
    ProtocolError::new(code, format!("{cmd} {topic} refused: {}", r.detail()))
}
