//! Preflight: before any broker is touched, the target image (through its probe Pod) and
//! every running broker (through `/v1/capabilities`) must support the effective storage
//! feature level and the message limits. A target that cannot read what the PVCs have
//! activated (a rollback behind the reader fence) or a level no binary can write is blocked
//! here and never reaches a Pod.

use rustqueue_api::contract::{BinaryCapabilities, DATA_FORMAT};

use super::model::{Action, Observed};
use crate::render::{Desired, probe_prefix};

/// The verdict of preflight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Preflight {
    /// Both the target and the running brokers support the desired set.
    Passed,
    /// Still probing (the probe Pod is being created or runs).
    Pending(String),
    /// A limit stops the change; the message names it.
    Blocked(String),
}

const PULL_FAILURES: [&str; 3] = ["ImagePullBackOff", "ErrImagePull", "InvalidImageName"];

/// Why `b` cannot run the desired set, if it cannot.
fn limit(b: &BinaryCapabilities, level: u32, d: &Desired) -> Option<String> {
    if b.data_format != DATA_FORMAT {
        return Some(format!(
            "it writes data format {}, not {DATA_FORMAT}",
            b.data_format
        ));
    }
    let max = b
        .maximum_reader_feature_level
        .min(b.maximum_writer_feature_level);
    if level < b.minimum_reader_feature_level || level > max {
        let why = if level > d.inputs.feature_level_floor {
            "requested by spec.storageFeatureLevel: roll a capable image first, then raise the level"
        } else {
            "the PVCs have activated it: the binary is behind the PVC reader fence"
        };
        return Some(format!(
            "it supports storage feature levels {}..={max}, level {level} is needed ({why})",
            b.minimum_reader_feature_level
        ));
    }
    if d.spec.max_message_bytes > b.maximum_message_bytes {
        return Some(format!(
            "it accepts messages up to {} bytes, spec.maxMessageBytes is {}",
            b.maximum_message_bytes, d.spec.max_message_bytes
        ));
    }
    None
}

/// Preflight of the target image and the running brokers.
pub fn check(obs: &Observed, d: &Desired) -> Preflight {
    let image = &d.spec.image;
    let Some(probe) = obs.probes.iter().find(|p| p.name == d.probe_pod) else {
        return Preflight::Pending(format!("probing image {image} (creating {})", d.probe_pod));
    };
    if let Some(w) = probe
        .waiting
        .as_deref()
        .filter(|w| PULL_FAILURES.contains(w))
    {
        return Preflight::Blocked(format!(
            "image {image} cannot be pulled ({w}): no broker was touched; fix spec.image (or rollbackToImage)"
        ));
    }
    let target = match probe.phase.as_str() {
        "Failed" => {
            return Preflight::Blocked(format!(
                "image {image} failed its capability probe ({}): no broker was touched",
                probe.message.as_deref().unwrap_or("no message").trim()
            ));
        }
        "Succeeded" => probe
            .message
            .as_deref()
            .and_then(|m| serde_json::from_str::<BinaryCapabilities>(m.trim()).ok()),
        _ => return Preflight::Pending(format!("probing image {image} ({})", probe.phase)),
    };
    let Some(target) = target else {
        return Preflight::Blocked(format!(
            "image {image} did not report its capabilities: it is not a rustqueued that supports --capabilities-output"
        ));
    };
    if let Some(why) = limit(&target, d.feature_level, d) {
        return Preflight::Blocked(format!("image {image} cannot run this cluster: {why}"));
    }
    for b in &obs.brokers {
        let Some(caps) = &b.capabilities else {
            continue;
        };
        let level = d
            .feature_level
            .max(caps.storage.active_writer_feature_level);
        if caps.storage.minimum_reader_feature_level > target.maximum_reader_feature_level {
            return Preflight::Blocked(format!(
                "image {image} reads storage feature levels up to {}, the PVC of {} needs at least {} (binary is behind the PVC reader fence)",
                target.maximum_reader_feature_level,
                b.name,
                caps.storage.minimum_reader_feature_level
            ));
        }
        if b.runs(&d.revision) {
            continue;
        }
        if level > caps.binary.maximum_writer_feature_level {
            return Preflight::Blocked(format!(
                "running broker {} (binary {}) writes storage feature levels up to {}, level {level} is requested: roll a capable image first, then raise storageFeatureLevel",
                b.name, caps.binary.binary_version, caps.binary.maximum_writer_feature_level
            ));
        }
    }
    Preflight::Passed
}

/// Create the target's probe when missing; delete probes of older contracts.
pub fn probe_actions(obs: &Observed, d: &Desired) -> Vec<Action> {
    let prefix = probe_prefix(&d.name);
    let mut out: Vec<Action> = obs
        .probes
        .iter()
        .filter(|p| p.name != d.probe_pod && p.name.starts_with(&prefix))
        .map(|p| Action::DeleteProbePod {
            name: p.name.clone(),
        })
        .collect();
    if !obs.probes.iter().any(|p| p.name == d.probe_pod) {
        out.push(Action::CreateProbePod {
            name: d.probe_pod.clone(),
        });
    }
    out
}
