//! Apply a kustomize base from `config/` the way `kubectl apply -k` would for our simple
//! bases (a `resources` list, an optional `namespace`), with server-side apply.

use std::path::Path;

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::discovery::{Discovery, Scope};
use serde::Deserialize;

/// Why an install failed.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// Reading a file failed.
    #[error("read {0}: {1}")]
    Read(String, std::io::Error),
    /// A YAML document did not parse.
    #[error("parse {0}: {1}")]
    Parse(String, serde_yaml::Error),
    /// The API server refused an object.
    #[error("apply {0}: {1}")]
    Apply(String, kube::Error),
    /// The kind is unknown to the API server.
    #[error("unknown kind {0}")]
    UnknownKind(String),
}

/// All objects of kustomize base `dir` (recursing into referenced bases), in order.
pub fn objects(dir: &Path) -> Result<Vec<serde_json::Value>, InstallError> {
    let kpath = dir.join("kustomization.yaml");
    let text = std::fs::read_to_string(&kpath)
        .map_err(|e| InstallError::Read(kpath.display().to_string(), e))?;
    let k: serde_yaml::Value =
        serde_yaml::from_str(&text).map_err(|e| InstallError::Parse(kpath.display().to_string(), e))?;
    let mut out = Vec::new();
    for r in k["resources"].as_sequence().into_iter().flatten() {
        let p = dir.join(r.as_str().unwrap_or_default());
        if p.is_dir() {
            out.extend(objects(&p)?);
            continue;
        }
        let text = std::fs::read_to_string(&p)
            .map_err(|e| InstallError::Read(p.display().to_string(), e))?;
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let v = serde_json::Value::deserialize(doc)
                .map_err(|e| InstallError::Parse(p.display().to_string(), e))?;
            if !v.is_null() {
                out.push(v);
            }
        }
    }
    if let Some(ns) = k["namespace"].as_str() {
        for o in &mut out {
            o["metadata"]["namespace"] = ns.into();
        }
    }
    Ok(out)
}

/// Server-side apply `objects`, putting namespaced ones into `namespace` (and fixing
/// ServiceAccount subjects of bindings to it). Cluster-scoped kinds ignore the namespace.
pub async fn apply(
    client: &kube::Client,
    namespace: &str,
    objects: &[serde_json::Value],
) -> Result<(), InstallError> {
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .map_err(|e| InstallError::Apply("discovery".into(), e))?;
    for o in objects {
        let mut o = o.clone();
        let kind = o["kind"].as_str().unwrap_or_default().to_string();
        let api_version = o["apiVersion"].as_str().unwrap_or_default().to_string();
        let (group, version) = api_version.split_once('/').unwrap_or(("", &api_version));
        let (ar, caps) = discovery
            .resolve_gvk(&kube::api::GroupVersionKind::gvk(group, version, &kind))
            .ok_or_else(|| InstallError::UnknownKind(format!("{api_version}/{kind}")))?;
        if let Some(subjects) = o["subjects"].as_array_mut() {
            for s in subjects {
                if s["kind"] == "ServiceAccount" {
                    s["namespace"] = namespace.into();
                }
            }
        }
        let api: Api<DynamicObject> = if caps.scope == Scope::Namespaced {
            o["metadata"]["namespace"] = namespace.into();
            Api::namespaced_with(client.clone(), namespace, &ar)
        } else {
            if let Some(m) = o["metadata"].as_object_mut() {
                m.remove("namespace");
            }
            Api::all_with(client.clone(), &ar)
        };
        let name = o["metadata"]["name"].as_str().unwrap_or_default().to_string();
        api.patch(&name, &PatchParams::apply("rustqueue-e2e").force(), &Patch::Apply(&o))
            .await
            .map_err(|e| InstallError::Apply(format!("{kind} {name}"), e))?;
    }
    Ok(())
}
