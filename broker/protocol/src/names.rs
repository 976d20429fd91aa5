//! Topic and channel names: `^[.a-zA-Z0-9_-]+(#ephemeral)?$`, 1..=64 bytes in total
//! (nsqd `internal/protocol/names.go`).

/// The suffix that marks an ephemeral topic or channel.
pub const EPHEMERAL_SUFFIX: &str = "#ephemeral";
/// Longest valid name, suffix included.
pub const MAX_NAME_LEN: usize = 64;

/// Whether `name` is a valid topic or channel name.
pub fn is_valid_name(name: &str) -> bool {
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return false;
    }
    let base = name.strip_suffix(EPHEMERAL_SUFFIX).unwrap_or(name);
    !base.is_empty()
        && base
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// Whether `name` is a valid topic name.
pub fn is_valid_topic_name(name: &str) -> bool {
    is_valid_name(name)
}

/// Whether `name` is a valid channel name.
pub fn is_valid_channel_name(name: &str) -> bool {
    is_valid_name(name)
}

/// Whether the name carries the `#ephemeral` suffix.
pub fn is_ephemeral(name: &str) -> bool {
    name.ends_with(EPHEMERAL_SUFFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_and_rejects_names_like_nsqd() {
        let table: &[(&str, bool)] = &[
            ("test", true),
            ("a.b_c-D9", true),
            ("t#ephemeral", true),
            ("#ephemeral", false),
            ("", false),
            ("has space", false),
            ("slash/x", false),
            ("t#ephemeralx", false),
            ("t#other", false),
            ("ünicode", false),
            (&"x".repeat(64), true),
            (&"x".repeat(65), false),
            (&format!("{}#ephemeral", "x".repeat(54)), true),
            (&format!("{}#ephemeral", "x".repeat(55)), false),
        ];
        for (name, ok) in table {
            assert_eq!(is_valid_name(name), *ok, "{name:?}");
        }
    }

    #[test]
    fn recognises_the_ephemeral_suffix() {
        assert!(is_ephemeral("c#ephemeral"));
        assert!(!is_ephemeral("c"));
    }
}
