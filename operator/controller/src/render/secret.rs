//! The auth Secret: three distinct tokens (admin, registry, console) the brokers read from
//! files. The operator generates `<n>-auth` once when the user names no Secret, and never
//! rewrites an existing one (rotation is the user's call; it rolls the Pods).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use rand::distr::Alphanumeric;
use rand::{Rng, RngExt};
use rustqueue_api::labels;

use super::Owner;

/// Length of a generated token.
pub const TOKEN_LEN: usize = 48;
const KEYS: [&str; 3] = ["admin-token", "registry-token", "console-token"];

/// The tokens of one RustQueue.
#[derive(Clone, PartialEq, Eq)]
pub struct AuthTokens {
    /// Drain, scrub, topic/channel administration.
    pub admin: String,
    /// Registry, capabilities and drain-status reads (what the operator uses).
    pub registry: String,
    /// Console observation.
    pub console: String,
}

impl std::fmt::Debug for AuthTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AuthTokens(<redacted>)")
    }
}

/// What is wrong with a Secret's tokens.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// A key is missing or blank.
    #[error("Secret {secret} has no non-empty key {key}: add it or delete the Secret")]
    Missing {
        /// Secret name.
        secret: String,
        /// Missing key.
        key: &'static str,
    },
    /// Two roles share a token, which would let one role act as the other.
    #[error("Secret {secret}: {first} and {second} must differ: give each role its own token")]
    Duplicate {
        /// Secret name.
        secret: String,
        /// First key.
        first: &'static str,
        /// Second key.
        second: &'static str,
    },
}

/// Fresh random tokens, pairwise distinct.
pub fn generate_tokens(rng: &mut impl Rng) -> AuthTokens {
    let mut token = || -> String {
        (&mut *rng)
            .sample_iter(Alphanumeric)
            .take(TOKEN_LEN)
            .map(char::from)
            .collect()
    };
    loop {
        let t = AuthTokens {
            admin: token(),
            registry: token(),
            console: token(),
        };
        if t.admin != t.registry && t.admin != t.console && t.registry != t.console {
            return t;
        }
    }
}

/// Read and check the tokens of an existing Secret (`data` already decoded).
pub fn tokens_from_secret(
    secret: &str,
    data: &BTreeMap<String, Vec<u8>>,
) -> Result<AuthTokens, TokenError> {
    let get = |key: &'static str| -> Result<String, TokenError> {
        data.get(key)
            .map(|v| String::from_utf8_lossy(v).trim().to_string())
            .filter(|v| !v.is_empty())
            .ok_or(TokenError::Missing {
                secret: secret.into(),
                key,
            })
    };
    let values = [get(KEYS[0])?, get(KEYS[1])?, get(KEYS[2])?];
    for (i, a) in values.iter().enumerate() {
        for (j, b) in values.iter().enumerate().skip(i + 1) {
            if a == b {
                return Err(TokenError::Duplicate {
                    secret: secret.into(),
                    first: KEYS[i],
                    second: KEYS[j],
                });
            }
        }
    }
    let [admin, registry, console] = values;
    Ok(AuthTokens {
        admin,
        registry,
        console,
    })
}

/// The generated `<n>-auth` Secret.
pub fn auth_secret(owner: &Owner<'_>, name: &str, tokens: &AuthTokens) -> Secret {
    let values = [&tokens.admin, &tokens.registry, &tokens.console];
    Secret {
        metadata: owner.metadata(name, labels::COMPONENT_BROKER),
        type_: Some("Opaque".into()),
        string_data: Some(
            KEYS.iter()
                .zip(values)
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        ),
        ..Secret::default()
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::owner;
    use super::*;
    use rand::SeedableRng;

    fn data(a: &str, r: &str, c: &str) -> BTreeMap<String, Vec<u8>> {
        [
            ("admin-token", a),
            ("registry-token", r),
            ("console-token", c),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
        .collect()
    }

    #[test]
    fn generated_tokens_are_long_alphanumeric_and_distinct() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let t = generate_tokens(&mut rng);
        for v in [&t.admin, &t.registry, &t.console] {
            assert_eq!(v.len(), TOKEN_LEN);
            assert!(v.chars().all(|c| c.is_ascii_alphanumeric()));
        }
        assert!(tokens_from_secret("s", &data(&t.admin, &t.registry, &t.console)).is_ok());
    }

    #[test]
    fn the_generated_secret_carries_the_three_keys_and_an_owner() {
        let t = generate_tokens(&mut rand::rngs::StdRng::seed_from_u64(1));
        let s = auth_secret(&owner(), "queue-auth", &t);
        let sd = s.string_data.unwrap();
        assert_eq!(sd.len(), 3);
        assert_eq!(sd["registry-token"], t.registry);
        assert_eq!(s.metadata.owner_references.unwrap()[0].name, "queue");
        assert_eq!(s.type_.as_deref(), Some("Opaque"));
    }

    #[test]
    fn tokens_are_trimmed_and_blank_or_shared_tokens_are_refused() {
        let ok = tokens_from_secret("s", &data(" a\n", "b", "c")).unwrap();
        assert_eq!(ok.admin, "a");
        assert_eq!(
            tokens_from_secret("s", &data("a", "  ", "c")).unwrap_err(),
            TokenError::Missing {
                secret: "s".into(),
                key: "registry-token"
            }
        );
        let dup = tokens_from_secret("s", &data("a", "b", "a")).unwrap_err();
        assert_eq!(
            dup.to_string(),
            "Secret s: admin-token and console-token must differ: give each role its own token"
        );
    }

    #[test]
    fn debug_output_never_shows_tokens() {
        let t = generate_tokens(&mut rand::rngs::StdRng::seed_from_u64(2));
        assert!(!format!("{t:?}").contains(&t.admin));
    }
}
