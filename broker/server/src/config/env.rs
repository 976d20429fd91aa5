//! Environment overrides (docs/configuration.md, "Environment variables"), applied after the
//! file: the table is [`ENV_OVERRIDES`] in the shared config schema.

use rustqueue_api::broker_config::{ENV_OVERRIDES, EnvOverride, LIST_KEYS};
use serde_json::Value;

use super::{Config, ConfigError};

/// Applies every `RUSTQUEUE_*` override present in `env`, then the `POD_NAME` node id.
pub fn apply_env(
    cfg: &mut Config,
    env: impl Fn(&str) -> Option<String>,
) -> Result<(), ConfigError> {
    for o in ENV_OVERRIDES {
        if let Some(v) = env(o.var) {
            set(cfg, o, v)?;
        }
    }
    if env("RUSTQUEUE_NODE_ID").is_none()
        && let Some(ordinal) = env("POD_NAME").and_then(|pod| {
            pod.rsplit_once('-')
                .and_then(|(_, o)| o.parse::<u32>().ok())
        })
    {
        cfg.node.id = ordinal + 1;
    }
    Ok(())
}

/// Sets the key of `o` to `value`, read as the key's type.
fn set(cfg: &mut Config, o: &EnvOverride, value: String) -> Result<(), ConfigError> {
    let invalid = |reason: String, value: &str| ConfigError::Env {
        name: o.var,
        value: value.to_owned(),
        reason,
    };
    let mut doc = serde_json::to_value(&*cfg).map_err(|e| invalid(e.to_string(), &value))?;
    let (path, last) = o.key.rsplit_once('.').unwrap_or(("", o.key));
    // An unset optional key is absent from the document: it is a string slot.
    let slot = path
        .split('.')
        .filter(|p| !p.is_empty())
        .try_fold(&mut doc, |at, part| at.get_mut(part))
        .and_then(Value::as_object_mut)
        .map(|table| table.entry(last).or_insert(Value::Null))
        .ok_or_else(|| invalid(format!("no key {}", o.key), &value))?;
    *slot = match slot {
        Value::Number(_) => value
            .trim()
            .parse::<u64>()
            .map(Value::from)
            .map_err(|e| invalid(e.to_string(), &value))?,
        Value::Bool(_) => value
            .trim()
            .parse::<bool>()
            .map(Value::from)
            .map_err(|e| invalid(e.to_string(), &value))?,
        // a list key (absent while empty) takes comma-separated values
        _ if LIST_KEYS.contains(&o.key) => Value::Array(
            value
                .split(',')
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .map(|v| Value::String(v.to_string()))
                .collect(),
        ),
        _ => Value::String(value.clone()),
    };
    *cfg = serde_json::from_value(doc).map_err(|e| invalid(e.to_string(), &value))?;
    Ok(())
}
