//! Unlocked management sessions and the action tokens (challenges) issued in them.
//!
//! A session has a fixed expiry (reads do not extend it) and a CSRF token; at most
//! [`MAX_SESSIONS`] exist (the oldest is evicted) and each holds at most [`MAX_CHALLENGES`]
//! action tokens (the oldest is evicted). A token is single-use: taking it removes it.

use std::collections::{HashMap, VecDeque};

use super::decide::Subject;
use super::request::Fingerprint;

/// Most sessions at once.
pub const MAX_SESSIONS: usize = 1024;
/// Most outstanding action tokens per session.
pub const MAX_CHALLENGES: usize = 64;
/// Lifetime of an action token, ms.
pub const CHALLENGE_TTL_MS: u64 = 60_000;

/// An issued action token and what it is bound to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Challenge {
    /// The token.
    pub token: String,
    /// The request it was issued for.
    pub request: Fingerprint,
    /// The owners the preview named.
    pub owners: Vec<String>,
    /// The object (or catalog) the preview saw.
    pub subject: Subject,
    /// Typed confirmation the apply must carry, if any.
    pub confirmation: Option<String>,
    /// Expiry, ms since the Unix epoch.
    pub expires_at_ms: u64,
}

/// One unlocked session.
#[derive(Debug, Clone)]
pub struct Session {
    /// The CSRF token the `X-RustQueue-CSRF` header must carry.
    pub csrf: String,
    /// Fixed expiry, ms since the Unix epoch.
    pub expires_at_ms: u64,
    challenges: VecDeque<Challenge>,
}

/// Every session.
#[derive(Debug, Default)]
pub struct Sessions {
    by_id: HashMap<String, Session>,
    order: VecDeque<String>,
}

/// A random 256-bit token, hex.
pub fn random_token() -> String {
    let bytes: [u8; 32] = rand::random();
    hex::encode(bytes)
}

impl Sessions {
    /// Opens a session until `now + ttl_ms`; returns its id.
    pub fn unlock(&mut self, now_ms: u64, ttl_ms: u64) -> (String, Session) {
        self.expire(now_ms);
        while self.by_id.len() >= MAX_SESSIONS {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            self.by_id.remove(&oldest);
        }
        let id = random_token();
        let s = Session {
            csrf: random_token(),
            expires_at_ms: now_ms + ttl_ms,
            challenges: VecDeque::new(),
        };
        self.by_id.insert(id.clone(), s.clone());
        self.order.push_back(id.clone());
        (id, s)
    }

    fn expire(&mut self, now_ms: u64) {
        self.by_id.retain(|_, s| s.expires_at_ms > now_ms);
        let live = &self.by_id;
        self.order.retain(|id| live.contains_key(id));
    }

    /// The unexpired session `id`.
    pub fn get(&mut self, id: &str, now_ms: u64) -> Option<&mut Session> {
        self.expire(now_ms);
        self.by_id.get_mut(id)
    }

    /// The unexpired session `id` whose CSRF token is `csrf`.
    pub fn authorized(&mut self, id: &str, csrf: &str, now_ms: u64) -> Option<&mut Session> {
        self.get(id, now_ms).filter(|s| constant_eq(&s.csrf, csrf))
    }

    /// Ends session `id`.
    pub fn lock(&mut self, id: &str) {
        self.by_id.remove(id);
        self.order.retain(|o| o != id);
    }

    /// How many sessions are open.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Whether none is open.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }
}

impl Session {
    /// Adds an action token, evicting the oldest beyond [`MAX_CHALLENGES`].
    pub fn add(&mut self, c: Challenge) {
        while self.challenges.len() >= MAX_CHALLENGES {
            self.challenges.pop_front();
        }
        self.challenges.push_back(c);
    }

    /// Takes (removes) the action token `token` if it has not expired.
    pub fn take(&mut self, token: &str, now_ms: u64) -> Option<Challenge> {
        let i = self
            .challenges
            .iter()
            .position(|c| constant_eq(&c.token, token))?;
        self.challenges
            .remove(i)
            .filter(|c| c.expires_at_ms > now_ms)
    }
}

/// Equality whose time does not depend on where the strings differ.
pub fn constant_eq(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manage::decide::SubjectKind;

    fn challenge(token: &str, expires_at_ms: u64) -> Challenge {
        Challenge {
            token: token.into(),
            request: Fingerprint::default(),
            owners: Vec::new(),
            subject: Subject {
                kind: SubjectKind::Catalog,
                uid: String::new(),
                resource_version: String::new(),
            },
            confirmation: None,
            expires_at_ms,
        }
    }

    #[test]
    fn a_session_expires_at_its_fixed_time_and_reads_do_not_extend_it() {
        let mut s = Sessions::default();
        let (id, session) = s.unlock(1_000, 60_000);
        assert_eq!(session.expires_at_ms, 61_000);
        assert!(s.authorized(&id, &session.csrf, 60_999).is_some());
        assert!(s.authorized(&id, "wrong", 2_000).is_none());
        assert!(s.get(&id, 61_000).is_none());
        assert!(s.is_empty());
    }

    #[test]
    fn the_oldest_session_is_evicted_beyond_the_limit() {
        let mut s = Sessions::default();
        let (first, _) = s.unlock(0, 60_000);
        for _ in 1..MAX_SESSIONS {
            s.unlock(0, 60_000);
        }
        assert!(s.get(&first, 1).is_some());
        s.unlock(0, 60_000);
        assert_eq!(s.len(), MAX_SESSIONS);
        assert!(s.get(&first, 1).is_none());
    }

    #[test]
    fn action_tokens_are_single_use_expire_and_the_oldest_is_evicted() {
        let mut sessions = Sessions::default();
        let (id, _) = sessions.unlock(0, 600_000);
        let s = sessions.get(&id, 0).unwrap();
        s.add(challenge("a", 1_000));
        assert!(s.take("a", 999).is_some());
        assert!(s.take("a", 999).is_none(), "single use");
        s.add(challenge("b", 1_000));
        assert!(s.take("b", 1_000).is_none(), "expired");
        for i in 0..=MAX_CHALLENGES {
            s.add(challenge(&format!("t{i}"), 1_000));
        }
        assert!(s.take("t0", 0).is_none(), "evicted");
        assert!(s.take(&format!("t{MAX_CHALLENGES}"), 0).is_some());
    }

    #[test]
    fn lock_ends_the_session() {
        let mut s = Sessions::default();
        let (id, _) = s.unlock(0, 60_000);
        s.lock(&id);
        assert!(s.get(&id, 1).is_none());
    }
}
