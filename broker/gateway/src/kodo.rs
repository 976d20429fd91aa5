//! The Kodo gateway mode's place: the same binary terminating the producer protocol for
//! Kodo-compatible clients. It is not built yet; asking for it stops the gateway at startup
//! with [`ConfigError::KodoNotBuilt`] instead of silently running the standard proxy.

use crate::config::ConfigError;

/// The startup error for `RUSTQUEUE_KODO_COMPATIBILITY_ENABLED=true`.
pub fn refuse() -> ConfigError {
    ConfigError::KodoNotBuilt
}
