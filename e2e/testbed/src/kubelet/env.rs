//! Container environment: `envFrom`, `env` (value with `$(VAR)` expansion, fieldRef,
//! resourceFieldRef, secretKeyRef, configMapKeyRef) and the variables a kubelet always sets.
//! The `KUBERNETES_SERVICE_*` variables point at the real apiserver address, because Service
//! ClusterIPs are not routed on the testbed.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Container, ObjectFieldSelector, Pod, Secret};
use kube::Client;
use kube::api::Api;

/// Resolves a downward-API field path of `pod`.
pub(crate) fn field(pod: &Pod, ip: &str, sel: &ObjectFieldSelector) -> Result<String, String> {
    let m = &pod.metadata;
    let path = sel.field_path.as_str();
    let map_key = |prefix: &str| {
        path.strip_prefix(prefix)
            .and_then(|r| r.strip_prefix("['").or_else(|| r.strip_prefix("[\"")))
            .and_then(|r| r.strip_suffix("']").or_else(|| r.strip_suffix("\"]")))
            .map(str::to_string)
    };
    let spec = pod.spec.as_ref();
    Ok(match path {
        "metadata.name" => m.name.clone().unwrap_or_default(),
        "metadata.namespace" => m.namespace.clone().unwrap_or_default(),
        "metadata.uid" => m.uid.clone().unwrap_or_default(),
        "metadata.labels" => format_map(m.labels.as_ref()),
        "metadata.annotations" => format_map(m.annotations.as_ref()),
        "spec.nodeName" => spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
        "spec.serviceAccountName" => spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_default(),
        "status.podIP" | "status.podIPs" => ip.to_string(),
        "status.hostIP" | "status.hostIPs" => "127.0.0.1".to_string(),
        _ => {
            if let Some(k) = map_key("metadata.labels") {
                m.labels
                    .as_ref()
                    .and_then(|l| l.get(&k))
                    .cloned()
                    .unwrap_or_default()
            } else if let Some(k) = map_key("metadata.annotations") {
                m.annotations
                    .as_ref()
                    .and_then(|l| l.get(&k))
                    .cloned()
                    .unwrap_or_default()
            } else {
                return Err(format!("unsupported fieldRef {path:?}"));
            }
        }
    })
}

/// `key="value"` lines, the downward API's format for label and annotation maps.
pub(crate) fn format_map(map: Option<&BTreeMap<String, String>>) -> String {
    map.map(|m| {
        m.iter()
            .map(|(k, v)| format!("{k}={v:?}\n"))
            .collect::<String>()
    })
    .unwrap_or_default()
}

/// Kubernetes `$(VAR)` expansion: known variables are replaced, `$$` escapes, unknown
/// references stay as written.
pub(crate) fn expand(input: &str, vars: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = input;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(stripped) = after.strip_prefix('$') {
            out.push('$');
            rest = stripped;
        } else if let Some(inner) = after.strip_prefix('(')
            && let Some(end) = inner.find(')')
        {
            let name = &inner[..end];
            match vars.get(name) {
                Some(v) => out.push_str(v),
                None => {
                    out.push_str("$(");
                    out.push_str(name);
                    out.push(')');
                }
            }
            rest = &inner[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

async fn config_map(client: &Client, ns: &str, name: &str) -> Result<Option<ConfigMap>, String> {
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .map_err(|e| format!("configmap {ns}/{name}: {e}"))
}

async fn secret(client: &Client, ns: &str, name: &str) -> Result<Option<Secret>, String> {
    Api::<Secret>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .map_err(|e| format!("secret {ns}/{name}: {e}"))
}

fn secret_value(s: &Secret, key: &str) -> Option<String> {
    s.data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
        .or_else(|| s.string_data.as_ref().and_then(|d| d.get(key)).cloned())
}

/// The container's environment in order (later entries win), or the CreateContainerConfigError
/// message.
pub(crate) async fn resolve(
    client: &Client,
    pod: &Pod,
    ip: &str,
    container: &Container,
    apiserver_port: u16,
) -> Result<BTreeMap<String, String>, String> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let mut vars = BTreeMap::new();
    let hostname = pod
        .spec
        .as_ref()
        .and_then(|s| s.hostname.clone())
        .or_else(|| pod.metadata.name.clone())
        .unwrap_or_default();
    for (k, v) in [
        (
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_string(),
        ),
        ("HOME", "/root".to_string()),
        ("HOSTNAME", hostname),
        ("KUBERNETES_SERVICE_HOST", "127.0.0.1".to_string()),
        ("KUBERNETES_SERVICE_PORT", apiserver_port.to_string()),
        ("KUBERNETES_SERVICE_PORT_HTTPS", apiserver_port.to_string()),
        (
            "KUBERNETES_PORT",
            format!("tcp://127.0.0.1:{apiserver_port}"),
        ),
    ] {
        vars.insert(k.to_string(), v);
    }
    for from in container.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        if let Some(r) = &from.config_map_ref {
            match config_map(client, &ns, &r.name).await? {
                Some(cm) => {
                    for (k, v) in cm.data.unwrap_or_default() {
                        vars.insert(format!("{prefix}{k}"), v);
                    }
                }
                None if r.optional == Some(true) => {}
                None => return Err(format!("configmap {:?} not found", r.name)),
            }
        }
        if let Some(r) = &from.secret_ref {
            match secret(client, &ns, &r.name).await? {
                Some(s) => {
                    for (k, v) in s.data.unwrap_or_default() {
                        vars.insert(format!("{prefix}{k}"), String::from_utf8_lossy(&v.0).into());
                    }
                }
                None if r.optional == Some(true) => {}
                None => return Err(format!("secret {:?} not found", r.name)),
            }
        }
    }
    for e in container.env.iter().flatten() {
        let value = if let Some(v) = &e.value {
            Some(expand(v, &vars))
        } else if let Some(from) = &e.value_from {
            if let Some(f) = &from.field_ref {
                Some(field(pod, ip, f)?)
            } else if let Some(r) = &from.resource_field_ref {
                Some(resource_field(container, &r.resource))
            } else if let Some(r) = &from.config_map_key_ref {
                let v = config_map(client, &ns, &r.name)
                    .await?
                    .and_then(|cm| cm.data.and_then(|d| d.get(&r.key).cloned()));
                match v {
                    Some(v) => Some(v),
                    None if r.optional == Some(true) => None,
                    None => return Err(format!("configmap key {}/{} not found", r.name, r.key)),
                }
            } else if let Some(r) = &from.secret_key_ref {
                let v = secret(client, &ns, &r.name)
                    .await?
                    .and_then(|s| secret_value(&s, &r.key));
                match v {
                    Some(v) => Some(v),
                    None if r.optional == Some(true) => None,
                    None => return Err(format!("secret key {}/{} not found", r.name, r.key)),
                }
            } else {
                None
            }
        } else {
            Some(String::new())
        };
        if let Some(v) = value {
            vars.insert(e.name.clone(), v);
        }
    }
    Ok(vars)
}

/// `resourceFieldRef`: the container's limit, else its request, else the node's capacity.
fn resource_field(container: &Container, resource: &str) -> String {
    let res = container.resources.as_ref();
    let (kind, name) = resource.split_once('.').unwrap_or(("limits", resource));
    let pick = |m: Option<
        &BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    >| { m.and_then(|m| m.get(name)).map(|q| q.0.clone()) };
    let v = match kind {
        "requests" => pick(res.and_then(|r| r.requests.as_ref())),
        _ => pick(res.and_then(|r| r.limits.as_ref())),
    };
    match (v, name) {
        (Some(q), "cpu") => crate::storage::parse_quantity(&q)
            .map(|n| n.max(1).to_string())
            .unwrap_or(q),
        (Some(q), _) => crate::storage::parse_quantity(&q)
            .map(|n| n.to_string())
            .unwrap_or(q),
        (None, "cpu") => "8".into(),
        (None, _) => (32u64 << 30).to_string(),
    }
}

/// An OCI image's `ENV` (`KEY=value` entries) as a map; the container's own env is applied
/// over it.
pub(crate) fn image_env(config: &crate::oci::RuntimeConfig) -> BTreeMap<String, String> {
    config
        .env
        .iter()
        .flatten()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expansion_replaces_known_keeps_unknown_and_unescapes_dollars() {
        let vars = BTreeMap::from([("A".to_string(), "x".to_string())]);
        assert_eq!(expand("$(A)-$(B)-$$(A)-$", &vars), "x-$(B)-$(A)-$");
    }

    #[test]
    fn label_field_paths_are_resolved() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "n", "labels": {"app": "q"}}
        }))
        .unwrap();
        let sel = |p: &str| ObjectFieldSelector {
            field_path: p.into(),
            ..Default::default()
        };
        assert_eq!(
            field(&pod, "10.244.0.2", &sel("metadata.labels['app']")).unwrap(),
            "q"
        );
        assert_eq!(
            field(&pod, "10.244.0.2", &sel("status.podIP")).unwrap(),
            "10.244.0.2"
        );
        assert_eq!(
            field(&pod, "", &sel("metadata.labels")).unwrap(),
            "app=\"q\"\n"
        );
        assert!(field(&pod, "", &sel("spec.nope")).is_err());
    }
}
