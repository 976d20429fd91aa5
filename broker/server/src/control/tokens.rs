//! Scoped bearer tokens for the control endpoints (docs/api.md, "Tokens").
//!
//! Each scope's token lives in a file that is re-read on every check, so a rotated Secret
//! takes effect without a restart. A token is presented as `Authorization: Bearer <t>` or
//! `X-RustQueue-Token: <t>` and compared in constant time. A scope without a configured file
//! is open; a configured file that is unreadable or empty makes the scope fail closed.

use std::collections::BTreeMap;
use std::path::PathBuf;

use axum::http::HeaderMap;
use rustqueue_api::contract::TokenScope;

/// Outcome of checking a request against one or more scopes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthOutcome {
    /// No scope in the accepted set is configured: the endpoint is open.
    Open,
    /// The presented token matched an accepted scope.
    Granted,
    /// Missing or wrong token (401 `E_UNAUTHORIZED`).
    Unauthorized,
    /// A configured token file could not be read and nothing matched (503 `E_AUTH_UNAVAILABLE`).
    Unavailable,
}

/// The configured token files, by scope.
#[derive(Debug, Clone, Default)]
pub struct TokenFiles {
    files: BTreeMap<ScopeKey, PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct ScopeKey(u8);

fn key(scope: TokenScope) -> ScopeKey {
    ScopeKey(match scope {
        TokenScope::Admin => 0,
        TokenScope::Publish => 1,
        TokenScope::Registry => 2,
        TokenScope::Console => 3,
    })
}

impl TokenFiles {
    /// No scope configured: everything open.
    pub fn new() -> Self {
        Self::default()
    }

    /// Configures (or, with `None`, leaves open) the token file of `scope`.
    pub fn with(mut self, scope: TokenScope, file: Option<PathBuf>) -> Self {
        match file {
            Some(f) => {
                self.files.insert(key(scope), f);
            }
            None => {
                self.files.remove(&key(scope));
            }
        }
        self
    }

    /// Reads the current token of `scope`: `None` if not configured, `Some(Err)` if the
    /// file is unreadable or holds only whitespace.
    fn current(&self, scope: TokenScope) -> Option<Result<String, ()>> {
        let path = self.files.get(&key(scope))?;
        Some(match std::fs::read_to_string(path) {
            Ok(s) if !s.trim().is_empty() => Ok(s.trim().to_owned()),
            _ => Err(()),
        })
    }

    /// Checks the request headers against any of `accepted` scopes.
    pub fn check(&self, headers: &HeaderMap, accepted: &[TokenScope]) -> AuthOutcome {
        let presented = presented_token(headers);
        let mut configured = false;
        let mut unavailable = false;
        let mut granted = false;
        for &scope in accepted {
            match self.current(scope) {
                None => {}
                Some(Err(())) => {
                    configured = true;
                    unavailable = true;
                }
                Some(Ok(token)) => {
                    configured = true;
                    // Evaluate every scope (no early return) so timing does not reveal which
                    // scope matched.
                    if let Some(p) = presented {
                        granted |= constant_time_eq(p.as_bytes(), token.as_bytes());
                    }
                }
            }
        }
        if !configured {
            AuthOutcome::Open
        } else if granted {
            AuthOutcome::Granted
        } else if unavailable {
            AuthOutcome::Unavailable
        } else {
            AuthOutcome::Unauthorized
        }
    }
}

/// The token from `Authorization: Bearer <t>` or `X-RustQueue-Token: <t>`.
pub fn presented_token(headers: &HeaderMap) -> Option<&str> {
    if let Some(v) = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    {
        let v = v.trim();
        if v.len() > 7 && v[..7].eq_ignore_ascii_case("bearer ") {
            return Some(v[7..].trim());
        }
    }
    headers
        .get(rustqueue_api::contract::headers::TOKEN)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
}

/// Compares two byte strings in time that depends only on their lengths, not on where they
/// first differ.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = u64::from(a.len() != b.len());
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= u64::from(x ^ y);
    }
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(name: &'static str, value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(name, HeaderValue::from_str(value).unwrap());
        h
    }

    #[test]
    fn constant_time_eq_matches_only_identical_strings() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
        assert!(!constant_time_eq(b"", b"x"));
        assert!(constant_time_eq(b"", b""));
    }

    #[test]
    fn both_header_forms_present_a_token() {
        assert_eq!(
            presented_token(&headers("authorization", "Bearer abc")),
            Some("abc")
        );
        assert_eq!(
            presented_token(&headers("authorization", "bearer  abc ")),
            Some("abc")
        );
        assert_eq!(
            presented_token(&headers("x-rustqueue-token", "abc")),
            Some("abc")
        );
        assert_eq!(
            presented_token(&headers("authorization", "Basic abc")),
            None
        );
    }

    #[test]
    fn unconfigured_scopes_are_open_and_configured_ones_need_the_token() {
        let dir = tempfile::tempdir().unwrap();
        let admin = dir.path().join("admin");
        std::fs::write(&admin, "a-token\n").unwrap();
        let t = TokenFiles::new().with(TokenScope::Admin, Some(admin.clone()));
        assert_eq!(
            t.check(&HeaderMap::new(), &[TokenScope::Registry]),
            AuthOutcome::Open
        );
        assert_eq!(
            t.check(&HeaderMap::new(), &[TokenScope::Admin]),
            AuthOutcome::Unauthorized
        );
        assert_eq!(
            t.check(
                &headers("x-rustqueue-token", "a-token"),
                &[TokenScope::Admin]
            ),
            AuthOutcome::Granted
        );
        assert_eq!(
            t.check(&headers("x-rustqueue-token", "wrong"), &[TokenScope::Admin]),
            AuthOutcome::Unauthorized
        );
    }

    #[test]
    fn a_rotated_file_takes_effect_at_once_and_an_unreadable_one_fails_closed() {
        let dir = tempfile::tempdir().unwrap();
        let reg = dir.path().join("registry");
        std::fs::write(&reg, "old").unwrap();
        let t = TokenFiles::new().with(TokenScope::Registry, Some(reg.clone()));
        let old = headers("authorization", "Bearer old");
        let new = headers("authorization", "Bearer new");
        assert_eq!(t.check(&old, &[TokenScope::Registry]), AuthOutcome::Granted);
        std::fs::write(&reg, "new").unwrap();
        assert_eq!(
            t.check(&old, &[TokenScope::Registry]),
            AuthOutcome::Unauthorized
        );
        assert_eq!(t.check(&new, &[TokenScope::Registry]), AuthOutcome::Granted);
        std::fs::write(&reg, "  \n").unwrap();
        assert_eq!(
            t.check(&new, &[TokenScope::Registry]),
            AuthOutcome::Unavailable
        );
        std::fs::remove_file(&reg).unwrap();
        assert_eq!(
            t.check(&new, &[TokenScope::Registry]),
            AuthOutcome::Unavailable
        );
    }

    #[test]
    fn any_accepted_scope_grants_and_a_broken_other_scope_does_not_block_a_match() {
        let dir = tempfile::tempdir().unwrap();
        let reg = dir.path().join("registry");
        let con = dir.path().join("console");
        std::fs::write(&reg, "r").unwrap();
        std::fs::write(&con, "c").unwrap();
        let t = TokenFiles::new()
            .with(TokenScope::Registry, Some(reg.clone()))
            .with(TokenScope::Console, Some(con));
        let both = [TokenScope::Registry, TokenScope::Console];
        assert_eq!(
            t.check(&headers("x-rustqueue-token", "c"), &both),
            AuthOutcome::Granted
        );
        assert_eq!(
            t.check(&headers("x-rustqueue-token", "r"), &both),
            AuthOutcome::Granted
        );
        assert_eq!(
            t.check(&headers("x-rustqueue-token", "c"), &[TokenScope::Registry]),
            AuthOutcome::Unauthorized
        );
        std::fs::remove_file(&reg).unwrap();
        assert_eq!(
            t.check(&headers("x-rustqueue-token", "c"), &both),
            AuthOutcome::Granted
        );
        assert_eq!(
            t.check(&headers("x-rustqueue-token", "r"), &both),
            AuthOutcome::Unavailable
        );
    }
}
