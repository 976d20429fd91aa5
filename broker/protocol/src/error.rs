//! NSQ error codes and the fatal/non-fatal split.
//!
//! nsqd closes the connection after every error except `E_FIN_FAILED`, `E_REQ_FAILED` and
//! `E_TOUCH_FAILED`. RustQueue additionally keeps the connection open for the retriable
//! publish refusals (`E_THROTTLED`, `E_DRAINING`, `E_PUB_RETRY`) so a producer can retry.

use std::fmt;

/// Every error code the broker sends in an error frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// Wrong magic.
    BadProtocol,
    /// Malformed command or a command not allowed in the current state.
    Invalid,
    /// Bad topic name.
    BadTopic,
    /// Bad channel name.
    BadChannel,
    /// Bad body (size, JSON, MPUB framing, IDENTIFY values).
    BadBody,
    /// Bad message (size 0 or above the maximum).
    BadMessage,
    /// IDENTIFY negotiation failed (snappy + deflate, TLS handshake).
    IdentifyFailed,
    /// TLS is required and the connection is not encrypted.
    TlsRequired,
    /// AUTH sent but no auth server configured.
    AuthDisabled,
    /// A command needs AUTH first.
    AuthFirst,
    /// The auth server could not be used.
    AuthFailed,
    /// The auth server denied, or no grant matches.
    Unauthorized,
    /// SUB failed.
    SubFailed,
    /// PUB failed.
    PubFailed,
    /// MPUB failed.
    MpubFailed,
    /// DPUB failed.
    DpubFailed,
    /// Publish refused before commit; safe to retry.
    PubRetry,
    /// Publish refused for pressure (budget, disk); retry later.
    Throttled,
    /// The broker is draining.
    Draining,
    /// FIN of a message not in flight.
    FinFailed,
    /// REQ of a message not in flight.
    ReqFailed,
    /// TOUCH of a message not in flight.
    TouchFailed,
    /// Command not accepted after CLS.
    Closing,
    /// Delivery failed inside the broker.
    DeliveryFailed,
    /// The topic is tombstoned by console management until its fence expires.
    TopicTombstoned,
    /// The channel is tombstoned by console management until its fence expires.
    ChannelTombstoned,
    /// Console management fences are not synced yet; retry later.
    ManagementUnavailable,
}

impl ErrorCode {
    /// The wire spelling, e.g. `E_INVALID`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::BadProtocol => "E_BAD_PROTOCOL",
            Self::Invalid => "E_INVALID",
            Self::BadTopic => "E_BAD_TOPIC",
            Self::BadChannel => "E_BAD_CHANNEL",
            Self::BadBody => "E_BAD_BODY",
            Self::BadMessage => "E_BAD_MESSAGE",
            Self::IdentifyFailed => "E_IDENTIFY_FAILED",
            Self::TlsRequired => "E_TLS_REQUIRED",
            Self::AuthDisabled => "E_AUTH_DISABLED",
            Self::AuthFirst => "E_AUTH_FIRST",
            Self::AuthFailed => "E_AUTH_FAILED",
            Self::Unauthorized => "E_UNAUTHORIZED",
            Self::SubFailed => "E_SUB_FAILED",
            Self::PubFailed => "E_PUB_FAILED",
            Self::MpubFailed => "E_MPUB_FAILED",
            Self::DpubFailed => "E_DPUB_FAILED",
            Self::PubRetry => "E_PUB_RETRY",
            Self::Throttled => "E_THROTTLED",
            Self::Draining => "E_DRAINING",
            Self::FinFailed => "E_FIN_FAILED",
            Self::ReqFailed => "E_REQ_FAILED",
            Self::TouchFailed => "E_TOUCH_FAILED",
            Self::Closing => "E_CLOSING",
            Self::DeliveryFailed => "E_DELIVERY_FAILED",
            Self::TopicTombstoned => "E_TOPIC_TOMBSTONED",
            Self::ChannelTombstoned => "E_CHANNEL_TOMBSTONED",
            Self::ManagementUnavailable => "E_MANAGEMENT_UNAVAILABLE",
        }
    }

    /// Whether the server closes the connection after sending this error.
    pub fn is_fatal(self) -> bool {
        !matches!(
            self,
            Self::FinFailed
                | Self::ReqFailed
                | Self::TouchFailed
                | Self::Throttled
                | Self::Draining
                | Self::PubRetry
                | Self::Closing
                | Self::TopicTombstoned
                | Self::ChannelTombstoned
                | Self::ManagementUnavailable
        )
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An error to send to the client: code plus human-readable detail.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{code} {detail}")]
pub struct ProtocolError {
    /// The NSQ error code.
    pub code: ErrorCode,
    /// Free text after the code.
    pub detail: String,
}

impl ProtocolError {
    /// Builds an error from a code and detail text.
    pub fn new(code: ErrorCode, detail: impl Into<String>) -> Self {
        Self {
            code,
            detail: detail.into(),
        }
    }

    /// Shorthand for `E_INVALID`.
    pub fn invalid(detail: impl Into<String>) -> Self {
        Self::new(ErrorCode::Invalid, detail)
    }

    /// Whether the connection closes after this error.
    pub fn is_fatal(&self) -> bool {
        self.code.is_fatal()
    }

    /// The error frame payload: `"<CODE> <detail>"`, CR/LF in the detail replaced by spaces.
    pub fn frame_text(&self) -> String {
        let detail: String = self
            .detail
            .chars()
            .map(|c| if c == '\r' || c == '\n' { ' ' } else { c })
            .collect();
        if detail.is_empty() {
            self.code.as_str().to_owned()
        } else {
            format!("{} {}", self.code.as_str(), detail)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_ack_failures_and_retriable_refusals_keep_the_connection() {
        let kept = [
            ErrorCode::FinFailed,
            ErrorCode::ReqFailed,
            ErrorCode::TouchFailed,
            ErrorCode::Throttled,
            ErrorCode::Draining,
            ErrorCode::PubRetry,
            ErrorCode::Closing,
        ];
        for code in kept {
            assert!(!code.is_fatal(), "{code}");
        }
        for code in [
            ErrorCode::Invalid,
            ErrorCode::BadBody,
            ErrorCode::BadProtocol,
        ] {
            assert!(code.is_fatal(), "{code}");
        }
    }

    #[test]
    fn frame_text_replaces_line_breaks_in_the_detail() {
        let e = ProtocolError::invalid("a\r\nb");
        assert_eq!(e.frame_text(), "E_INVALID a  b");
        assert_eq!(
            ProtocolError::new(ErrorCode::Invalid, "").frame_text(),
            "E_INVALID"
        );
    }
}
