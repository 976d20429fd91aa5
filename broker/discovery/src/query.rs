//! Query strings parsed the way nsqlookupd v1.3.0 parses them (Go's `url.ParseQuery`): pairs
//! split on `&`, a pair holding `;` is an error, `%XX` escapes must be two hex digits, `+` is a
//! space, the first value of a repeated key wins. Any error makes the request
//! `400 INVALID_REQUEST` (docs/discovery.md), exactly where nsqlookupd answers it.

use std::collections::HashMap;

/// Longest query string accepted; a longer one is answered `414 URI_TOO_LONG`.
pub const MAX_QUERY_BYTES: usize = 64 * 1024;

/// Why a query string was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueryError {
    /// A pair contained `;` (Go refuses the old separator).
    Semicolon,
    /// A `%` not followed by two hex digits.
    BadEscape,
    /// Longer than [`MAX_QUERY_BYTES`].
    TooLong,
}

/// Parsed query: the first value of every key.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Query {
    first: HashMap<String, String>,
}

impl Query {
    /// The first value given for `key`, `None` when the key is absent (`?topic=` is `Some("")`).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.first.get(key).map(String::as_str)
    }
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Go's `url.QueryUnescape`. Bytes that are not UTF-8 are replaced (such a name never matches a
/// topic, which is what nsqlookupd answers for it too).
pub fn unescape(s: &str) -> Result<String, QueryError> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hi = b.get(i + 1).copied().and_then(hex);
                let lo = b.get(i + 2).copied().and_then(hex);
                match (hi, lo) {
                    (Some(h), Some(l)) => out.push(h << 4 | l),
                    _ => return Err(QueryError::BadEscape),
                }
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// Parse a raw query string (without the `?`). Like Go, every pair is looked at and the first
/// error is returned.
pub fn parse(raw: &str) -> Result<Query, QueryError> {
    if raw.len() > MAX_QUERY_BYTES {
        return Err(QueryError::TooLong);
    }
    let mut q = Query::default();
    let mut err = None;
    for pair in raw.split('&') {
        if pair.contains(';') {
            err.get_or_insert(QueryError::Semicolon);
            continue;
        }
        if pair.is_empty() {
            continue;
        }
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        match (unescape(k), unescape(v)) {
            (Ok(k), Ok(v)) => {
                q.first.entry(k).or_insert(v);
            }
            (Err(e), _) | (_, Err(e)) => {
                err.get_or_insert(e);
            }
        }
    }
    match err {
        Some(e) => Err(e),
        None => Ok(q),
    }
}

/// Percent-encode `s` for a query value (used by tests and by nothing on the request path).
#[cfg(test)]
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn go_parse_query_cases() {
        let q = parse("topic=a&topic=b&x").unwrap();
        assert_eq!(q.get("topic"), Some("a"));
        assert_eq!(q.get("x"), Some(""));
        assert_eq!(q.get("y"), None);
        assert_eq!(parse("topic=a%20b+c").unwrap().get("topic"), Some("a b c"));
        assert_eq!(parse("topic=%zz"), Err(QueryError::BadEscape));
        assert_eq!(parse("topic=%4"), Err(QueryError::BadEscape));
        assert_eq!(parse("topic=a;b=c"), Err(QueryError::Semicolon));
        assert_eq!(parse("&&topic=t&&").unwrap().get("topic"), Some("t"));
        assert_eq!(parse("").unwrap(), Query::default());
        assert_eq!(
            parse(&"a".repeat(MAX_QUERY_BYTES + 1)),
            Err(QueryError::TooLong)
        );
    }

    proptest! {
        #[test]
        fn never_panics_on_any_input(s in ".{0,300}") {
            let _ = parse(&s);
        }

        #[test]
        fn never_panics_on_escape_heavy_input(s in "[%a-f0-9+&=;]{0,200}") {
            let _ = parse(&s);
        }

        #[test]
        fn escaped_pairs_round_trip(k in "[a-z]{1,8}", v in "\\PC{0,40}") {
            let raw = format!("{}={}&other=1", escape(&k), escape(&v));
            let q = parse(&raw).unwrap();
            prop_assert_eq!(q.get(&k), Some(v.as_str()));
        }
    }
}
