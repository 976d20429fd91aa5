//! `rustqueued` configuration: TOML file (unknown keys rejected), then environment overrides
//! (docs/configuration.md names), then validation. Every key has a default, so no file at all
//! gives a working broker (data in `./data`, TCP 0.0.0.0:4150, HTTP 0.0.0.0:4151).

use std::path::{Path, PathBuf};

mod env;
pub mod tiering;
mod validate;

pub use env::apply_env;

/// Why a configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The TOML is malformed or has unknown keys.
    #[error("invalid config file {path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message (names the key).
        message: String,
    },
    /// An environment variable has a value of the wrong type.
    #[error("environment variable {name}={value:?} is invalid: {reason}")]
    Env {
        /// Variable name.
        name: &'static str,
        /// Its value.
        value: String,
        /// What was expected.
        reason: String,
    },
    /// A value is out of range or inconsistent with another.
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

pub use rustqueue_api::broker_config::{
    BrokerConfig as Config, LimitsConfig, LogFormat, QueueConfig, SecurityConfig, StorageConfig,
    TlsConfig,
};

/// Reading and checking a [`Config`]: the schema lives in `rustqueue-api`, its loading here.
pub trait ConfigFile: Sized {
    /// Parses TOML text (unknown keys rejected).
    fn from_toml(text: &str, path: &Path) -> Result<Self, ConfigError>;
    /// Loads the file (if any), applies `env` overrides and validates (the credentials of
    /// `[tiering]` are read from their files or `env` to check they are there).
    fn load(path: Option<&Path>, env: impl Fn(&str) -> Option<String>)
    -> Result<Self, ConfigError>;
    /// Checks ranges and cross-field rules.
    fn validate(&self) -> Result<(), ConfigError>;
}

impl ConfigFile for Config {
    fn from_toml(text: &str, path: &Path) -> Result<Self, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_owned(),
            message: e.to_string(),
        })
    }

    fn load(
        path: Option<&Path>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let mut cfg = match path {
            Some(p) => {
                let text = std::fs::read_to_string(p).map_err(|source| ConfigError::Read {
                    path: p.to_owned(),
                    source,
                })?;
                Self::from_toml(&text, p)?
            }
            None => Self::default(),
        };
        apply_env(&mut cfg, &env)?;
        cfg.validate()?;
        // The credentials of `[tiering]` must be there now, not at the first upload.
        tiering::options(cfg.tiering.as_ref(), &env)?;
        Ok(cfg)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        validate::validate(self)
    }
}
