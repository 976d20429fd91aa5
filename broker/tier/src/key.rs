//! Object keys: the names the tiering layer gives objects, and how a key becomes a path in
//! the bucket (`<prefix>/<key>`).
//!
//! The alphabet is deliberately narrow (ASCII letters, digits, `.`, `_`, `-`, segments joined
//! by `/`): the keys are ours to choose (topic names are already `[.a-zA-Z0-9_-]`), and a key
//! that needs no percent-encoding is the same string in the bucket, in object_store's `Path`
//! and on a posix-backed server's disk.

use std::fmt;

use crate::error::Error;

/// The longest key or prefix accepted, in bytes. S3 allows 1,024 for the whole object name;
/// a prefix and a key of at most 512 each always fit together.
pub const MAX_KEY_BYTES: usize = 512;

/// A validated object key, relative to the bucket's prefix: `topics/orders/00000000000000000042.seg`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey(String);

impl ObjectKey {
    /// Checks `key` against the key rules (see the module doc): non-empty `/`-separated
    /// segments of `[A-Za-z0-9._-]`, none of them `.` or `..`, at most [`MAX_KEY_BYTES`].
    pub fn new(key: impl Into<String>) -> Result<Self, Error> {
        let key = key.into();
        match key_problem(&key) {
            None => Ok(Self(key)),
            Some(reason) => Err(Error::InvalidKey { key, reason }),
        }
    }

    /// The key as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why `key` is not a valid key or prefix, or `None` when it is.
pub(crate) fn key_problem(key: &str) -> Option<&'static str> {
    if key.is_empty() {
        return Some("it is empty");
    }
    if key.len() > MAX_KEY_BYTES {
        return Some("it is longer than 512 bytes");
    }
    for segment in key.split('/') {
        if segment.is_empty() {
            return Some("it has an empty segment (a leading, trailing or doubled '/')");
        }
        if segment == "." || segment == ".." {
            return Some("a segment is '.' or '..'");
        }
        if !segment
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        {
            return Some("only ASCII letters, digits, '.', '_', '-' and '/' are allowed");
        }
    }
    None
}

/// The bucket path of `key` under `prefix` (`None`: the bucket's root).
pub(crate) fn bucket_path(prefix: Option<&ObjectKey>, key: &ObjectKey) -> object_store::path::Path {
    // Every segment is in the safe alphabet, so `from` percent-encodes nothing.
    match prefix {
        Some(prefix) => object_store::path::Path::from(format!("{prefix}/{key}")),
        None => object_store::path::Path::from(key.as_str()),
    }
}

/// The key of a listed bucket path, relative to `prefix`; `None` for an object outside the
/// prefix or whose name is not a valid key (written by something else).
pub(crate) fn key_of(
    prefix: Option<&ObjectKey>,
    path: &object_store::path::Path,
) -> Option<ObjectKey> {
    let full = path.as_ref();
    let relative = match prefix {
        Some(prefix) => full.strip_prefix(prefix.as_str())?.strip_prefix('/')?,
        None => full,
    };
    ObjectKey::new(relative).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_checked_against_the_narrow_alphabet() {
        let long = "a".repeat(MAX_KEY_BYTES + 1);
        let cases: &[(&str, Option<&str>)] = &[
            ("topics/orders/00000000000000000042.seg", None),
            ("a", None),
            ("a-b_c.d/E9", None),
            (&long[..MAX_KEY_BYTES], None),
            ("", Some("it is empty")),
            (&long, Some("it is longer than 512 bytes")),
            (
                "/a",
                Some("it has an empty segment (a leading, trailing or doubled '/')"),
            ),
            (
                "a/",
                Some("it has an empty segment (a leading, trailing or doubled '/')"),
            ),
            (
                "a//b",
                Some("it has an empty segment (a leading, trailing or doubled '/')"),
            ),
            ("a/../b", Some("a segment is '.' or '..'")),
            (".", Some("a segment is '.' or '..'")),
            (
                "a b",
                Some("only ASCII letters, digits, '.', '_', '-' and '/' are allowed"),
            ),
            (
                "a%2F",
                Some("only ASCII letters, digits, '.', '_', '-' and '/' are allowed"),
            ),
            (
                "é",
                Some("only ASCII letters, digits, '.', '_', '-' and '/' are allowed"),
            ),
        ];
        for (key, want) in cases {
            assert_eq!(key_problem(key), *want, "key {key:?}");
            assert_eq!(ObjectKey::new(*key).is_ok(), want.is_none(), "key {key:?}");
        }
    }

    #[test]
    fn a_key_lives_under_the_prefix_and_lists_back_as_itself() {
        let key = ObjectKey::new("topics/t/1.seg").unwrap();
        let prefix = ObjectKey::new("cluster-a/broker-0").unwrap();
        let cases = [
            (Some(&prefix), "cluster-a/broker-0/topics/t/1.seg"),
            (None, "topics/t/1.seg"),
        ];
        for (prefix, want) in cases {
            let path = bucket_path(prefix, &key);
            assert_eq!(path.as_ref(), want);
            assert_eq!(key_of(prefix, &path), Some(key.clone()));
        }
    }

    #[test]
    fn listed_names_outside_the_prefix_or_the_alphabet_are_not_keys() {
        let prefix = ObjectKey::new("p").unwrap();
        let cases = [
            ("q/topics/1.seg", Some(&prefix)),
            ("pp/topics/1.seg", Some(&prefix)),
            ("p", Some(&prefix)),
            ("p/with space", Some(&prefix)),
        ];
        for (name, prefix) in cases {
            let path = object_store::path::Path::from(name);
            assert_eq!(key_of(prefix, &path), None, "{name}");
        }
    }
}
