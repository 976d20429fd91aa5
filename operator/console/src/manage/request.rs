//! The bodies of `preview` and `apply`, and the checks on their names.

use rustqueue_api::contract::ManageKind;
use rustqueue_api::crd::CatalogAction;
use serde::{Deserialize, Serialize};

use super::error::{ApiError, codes};

/// Suffix of ephemeral topics and channels.
pub const EPHEMERAL_SUFFIX: &str = "#ephemeral";

/// What the user asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum UiAction {
    /// Create.
    #[default]
    Create,
    /// Pause deliveries.
    Pause,
    /// Resume deliveries.
    Unpause,
    /// Drop the stored messages.
    Empty,
    /// Delete and fence.
    Delete,
    /// Resume a FAILED operation.
    Retry,
}

impl UiAction {
    /// The catalog action (None for retry, which resumes the recorded one).
    pub fn catalog(self) -> Option<CatalogAction> {
        match self {
            Self::Create => Some(CatalogAction::Create),
            Self::Pause => Some(CatalogAction::Pause),
            Self::Unpause => Some(CatalogAction::Unpause),
            Self::Empty => Some(CatalogAction::Empty),
            Self::Delete => Some(CatalogAction::Delete),
            Self::Retry => None,
        }
    }

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Create => "create",
            Self::Pause => "pause",
            Self::Unpause => "unpause",
            Self::Empty => "empty",
            Self::Delete => "delete",
            Self::Retry => "retry",
        }
    }
}

/// `POST /api/v1/management/preview` and (with the token and confirmation) `apply`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ActionRequest {
    /// `topic` or `channel`.
    pub kind: ManageKind,
    /// What to do.
    pub action: UiAction,
    /// Topic name.
    pub topic: String,
    /// Channel name (channel actions only).
    #[serde(default)]
    pub channel: Option<String>,
    /// The action token (apply).
    #[serde(default)]
    pub action_token: Option<String>,
    /// The typed confirmation (apply of empty, delete, retry).
    #[serde(default)]
    pub confirmation: Option<String>,
}

/// What an action token is bound to of its request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Fingerprint {
    /// `topic` or `channel`.
    pub kind: Option<ManageKind>,
    /// The action.
    pub action: UiAction,
    /// Topic.
    pub topic: String,
    /// Channel.
    pub channel: Option<String>,
}

impl ActionRequest {
    /// The part of the request a token binds.
    pub fn fingerprint(&self) -> Fingerprint {
        Fingerprint {
            kind: Some(self.kind),
            action: self.action,
            topic: self.topic.clone(),
            channel: self.channel.clone(),
        }
    }

    /// `topic.create`, `channel.pause`, ... (audit).
    pub fn audit_action(&self) -> String {
        let kind = match self.kind {
            ManageKind::Topic => "topic",
            ManageKind::Channel => "channel",
        };
        format!("{kind}.{}", self.action.as_str())
    }

    /// Names valid (NSQ rules), a channel exactly for channel actions, nothing ephemeral.
    pub fn validate(&self) -> Result<(), ApiError> {
        check_name("topic", &self.topic)?;
        match (self.kind, self.channel.as_deref()) {
            (ManageKind::Topic, Some(_)) => Err(ApiError::new(
                codes::BAD_REQUEST,
                "a topic action may not name a channel (set channel to null)",
            )),
            (ManageKind::Channel, None) => Err(ApiError::new(
                codes::BAD_REQUEST,
                "a channel action needs a channel",
            )),
            (ManageKind::Channel, Some(c)) => check_name("channel", c),
            (ManageKind::Topic, None) => Ok(()),
        }
    }
}

/// Whether `name` is a valid NSQ name: 1..=64 bytes of `[.a-zA-Z0-9_-]`, optionally followed
/// by `#ephemeral`.
pub fn valid_name(name: &str) -> bool {
    let base = name.strip_suffix(EPHEMERAL_SUFFIX).unwrap_or(name);
    !name.is_empty()
        && name.len() <= 64
        && !base.is_empty()
        && base
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

fn check_name(what: &str, name: &str) -> Result<(), ApiError> {
    if !valid_name(name) {
        return Err(ApiError::new(
            codes::BAD_REQUEST,
            format!(
                "{what} name {name:?} is invalid: use 1 to 64 characters of letters, digits, '.', '_' and '-'"
            ),
        ));
    }
    if name.ends_with(EPHEMERAL_SUFFIX) {
        return Err(ApiError::new(
            codes::EPHEMERAL_UNMANAGED,
            format!("{what} {name:?} is ephemeral: it is observed, never managed"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(kind: ManageKind, topic: &str, channel: Option<&str>) -> ActionRequest {
        ActionRequest {
            kind,
            action: UiAction::Pause,
            topic: topic.into(),
            channel: channel.map(Into::into),
            action_token: None,
            confirmation: None,
        }
    }

    #[test]
    fn requests_are_checked_by_nsq_name_rules_and_shape() {
        let table: &[(ManageKind, &str, Option<&str>, Option<&str>)] = &[
            (ManageKind::Topic, "orders", None, None),
            (ManageKind::Channel, "orders", Some("billing"), None),
            (
                ManageKind::Topic,
                "orders",
                Some("billing"),
                Some(codes::BAD_REQUEST),
            ),
            (
                ManageKind::Channel,
                "orders",
                None,
                Some(codes::BAD_REQUEST),
            ),
            (
                ManageKind::Topic,
                "bad name",
                None,
                Some(codes::BAD_REQUEST),
            ),
            (ManageKind::Topic, "", None, Some(codes::BAD_REQUEST)),
            (
                ManageKind::Topic,
                &"x".repeat(65),
                None,
                Some(codes::BAD_REQUEST),
            ),
            (
                ManageKind::Topic,
                "t#ephemeral",
                None,
                Some(codes::EPHEMERAL_UNMANAGED),
            ),
            (
                ManageKind::Channel,
                "t",
                Some("c#ephemeral"),
                Some(codes::EPHEMERAL_UNMANAGED),
            ),
            (
                ManageKind::Channel,
                "t",
                Some("#ephemeral"),
                Some(codes::BAD_REQUEST),
            ),
        ];
        for (kind, topic, channel, want) in table {
            let got = req(*kind, topic, *channel).validate().err().map(|e| e.code);
            assert_eq!(got, *want, "{kind:?} {topic:?} {channel:?}");
        }
    }

    #[test]
    fn requests_parse_from_the_documented_json() {
        let r: ActionRequest = serde_json::from_str(
            r#"{"kind":"channel","action":"retry","topic":"t","channel":"c","action_token":"x","confirmation":"c"}"#,
        )
        .unwrap();
        assert_eq!((r.kind, r.action), (ManageKind::Channel, UiAction::Retry));
        assert_eq!(r.audit_action(), "channel.retry");
    }
}
