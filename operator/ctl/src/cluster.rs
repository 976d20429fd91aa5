//! The cluster side: a kube client from the kubeconfig the way kubectl picks it, the RustQueue
//! named on the command line, its broker Pods and the tokens of its auth Secret.

use std::path::Path;

use anyhow::{Context as _, anyhow, bail};
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{ListParams, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use rustqueue_api::contract::TokenScope;
use rustqueue_api::crd::RustQueue;
use rustqueue_api::labels;

/// Field manager of every patch the tool sends.
pub const FIELD_MANAGER: &str = "rustqueuectl";

/// The RustQueue the command line names, and a client to reach it.
#[derive(Clone)]
pub struct Target {
    /// Client of the chosen context.
    pub client: Client,
    /// Namespace of the RustQueue.
    pub namespace: String,
    /// Name of the RustQueue.
    pub name: String,
}

/// A client for `--kubeconfig`/`--context` (else `$KUBECONFIG`, `~/.kube/config`, in-cluster),
/// and the namespace: `-n`, else the context's.
pub async fn connect(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
    namespace: Option<&str>,
    name: &str,
) -> anyhow::Result<Target> {
    let options = KubeConfigOptions {
        context: context.map(str::to_string),
        ..KubeConfigOptions::default()
    };
    let config = match (kubeconfig, context) {
        (Some(path), _) => {
            if let Err(e) = std::fs::metadata(path) {
                bail!("cannot read kubeconfig {}: {e}", path.display());
            }
            let kc = Kubeconfig::read_from(path)
                .map_err(|e| anyhow!("cannot read kubeconfig {}: {e}", path.display()))?;
            Config::from_custom_kubeconfig(kc, &options)
                .await
                .map_err(|e| anyhow!("kubeconfig {}: {e}", path.display()))?
        }
        (None, Some(ctx)) => Config::from_kubeconfig(&options)
            .await
            .map_err(|e| anyhow!("kubeconfig context {ctx}: {e}"))?,
        (None, None) => Config::infer()
            .await
            .map_err(|e| anyhow!("no kubeconfig: {e} (set KUBECONFIG or pass --kubeconfig)"))?,
    };
    let namespace = namespace.map_or_else(|| config.default_namespace.clone(), str::to_string);
    let client = Client::try_from(config).context("building the Kubernetes client")?;
    Ok(Target {
        client,
        namespace,
        name: name.to_string(),
    })
}

impl Target {
    /// The RustQueue API in the namespace.
    pub fn queues(&self) -> Api<RustQueue> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// `<namespace>/<name>`.
    pub fn what(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The RustQueue, or a one-line error naming what was looked for.
    pub async fn queue(&self) -> anyhow::Result<RustQueue> {
        match self.queues().get_opt(&self.name).await {
            Ok(Some(rq)) => Ok(rq),
            Ok(None) => bail!(
                "no RustQueue {} (choose one with --name and -n; `kubectl get rustqueues -A` lists them)",
                self.what()
            ),
            Err(e) => Err(anyhow!(
                "reading RustQueue {}: {}",
                self.what(),
                one_line(&e)
            )),
        }
    }

    /// Merge-patches the RustQueue (which must exist).
    pub async fn patch(&self, body: &serde_json::Value) -> anyhow::Result<RustQueue> {
        self.queue().await?;
        self.queues()
            .patch(
                &self.name,
                &PatchParams::apply(FIELD_MANAGER),
                &Patch::Merge(body),
            )
            .await
            .map_err(|e| anyhow!("patching RustQueue {}: {}", self.what(), one_line(&e)))
    }

    /// `app.kubernetes.io/name=rustqueue,app.kubernetes.io/instance=<name>[,component=..]`.
    pub fn selector(&self, component: Option<&str>) -> String {
        let mut s = format!(
            "{}={},{}={}",
            labels::NAME,
            labels::APP_NAME,
            labels::INSTANCE,
            self.name
        );
        if let Some(c) = component {
            s.push_str(&format!(",{}={c}", labels::COMPONENT));
        }
        s
    }

    /// Pods of one component, by name.
    pub async fn pods(&self, component: &str) -> anyhow::Result<Vec<Pod>> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        let mut pods = api
            .list(&ListParams::default().labels(&self.selector(Some(component))))
            .await
            .map_err(|e| {
                anyhow!(
                    "listing {component} Pods of {}: {}",
                    self.what(),
                    one_line(&e)
                )
            })?
            .items;
        pods.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        Ok(pods)
    }

    /// Every Pod of the instance (brokers, discovery, gateways), by name.
    pub async fn pods_of_instance(&self) -> anyhow::Result<Vec<Pod>> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        let mut pods = api
            .list(&ListParams::default().labels(&self.selector(None)))
            .await
            .map_err(|e| anyhow!("listing the Pods of {}: {}", self.what(), one_line(&e)))?
            .items;
        pods.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        Ok(pods)
    }

    /// The broker Pods; an error when there are none.
    pub async fn brokers(&self) -> anyhow::Result<Vec<Pod>> {
        let pods = self.pods(labels::COMPONENT_BROKER).await?;
        if pods.is_empty() {
            bail!("RustQueue {} has no broker Pods", self.what());
        }
        Ok(pods)
    }

    /// Name of the auth Secret: `spec.registrySecretName`, else `<name>-auth`.
    pub fn secret_name(rq: &RustQueue, name: &str) -> String {
        rq.spec
            .registry_secret_name
            .clone()
            .filter(|s| !s.trim().is_empty())
            .unwrap_or_else(|| format!("{name}-auth"))
    }

    /// The auth Secret's data (every token), for requests and for redaction.
    pub async fn secret(&self, rq: &RustQueue) -> anyhow::Result<Secret> {
        let name = Self::secret_name(rq, &self.name);
        let api: Api<Secret> = Api::namespaced(self.client.clone(), &self.namespace);
        api.get(&name).await.map_err(|e| {
            anyhow!(
                "reading Secret {}/{name} (the RustQueue's tokens): {}",
                self.namespace,
                one_line(&e)
            )
        })
    }

    /// The token of `scope` from the auth Secret.
    pub async fn token(&self, rq: &RustQueue, scope: TokenScope) -> anyhow::Result<String> {
        let secret = self.secret(rq).await?;
        token_of(&secret, scope).with_context(|| {
            format!(
                "Secret {} has no {}",
                Self::secret_name(rq, &self.name),
                scope.secret_key()
            )
        })
    }
}

/// The token of `scope` in `secret` (`data` or `stringData`).
pub fn token_of(secret: &Secret, scope: TokenScope) -> Option<String> {
    let key = scope.secret_key();
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| String::from_utf8_lossy(&b.0).trim().to_string())
        .or_else(|| {
            secret
                .string_data
                .as_ref()
                .and_then(|d| d.get(key))
                .map(|s| s.trim().to_string())
        })
        .filter(|t| !t.is_empty())
}

/// Every value in `secret`, for redaction.
pub fn secret_values(secret: &Secret) -> Vec<String> {
    let mut v: Vec<String> = secret
        .data
        .iter()
        .flat_map(|d| d.values())
        .map(|b| String::from_utf8_lossy(&b.0).trim().to_string())
        .chain(
            secret
                .string_data
                .iter()
                .flat_map(|d| d.values())
                .map(|s| s.trim().to_string()),
        )
        .filter(|s| s.len() >= 4)
        .collect();
    v.sort_by_key(|s| std::cmp::Reverse(s.len()));
    v
}

/// A kube error on one line: the API server's message rather than the debug form.
pub fn one_line(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} ({})", s.message, s.reason),
        other => other.to_string().replace('\n', " "),
    }
}

/// The Pod's IP, if it has one.
pub fn pod_ip(p: &Pod) -> Option<&str> {
    p.status.as_ref()?.pod_ip.as_deref()
}

/// Whether the Pod's Ready condition is True.
pub fn pod_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The Pod's name.
pub fn pod_name(p: &Pod) -> &str {
    p.metadata.name.as_deref().unwrap_or("?")
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use std::collections::BTreeMap;

    #[test]
    fn the_secret_is_the_named_one_or_the_generated_one() {
        let mut rq = crate::fixture::queue();
        assert_eq!(Target::secret_name(&rq, "queue"), "queue-auth");
        rq.spec.registry_secret_name = Some("mine".into());
        assert_eq!(Target::secret_name(&rq, "queue"), "mine");
    }

    #[test]
    fn tokens_come_from_the_scope_key_and_every_value_is_redactable() {
        let secret = Secret {
            data: Some(BTreeMap::from([
                (
                    "registry-token".into(),
                    ByteString(b"reg-secret\n".to_vec()),
                ),
                (
                    "admin-token".into(),
                    ByteString(b"admin-secret-longer".to_vec()),
                ),
            ])),
            ..Secret::default()
        };
        assert_eq!(
            token_of(&secret, TokenScope::Registry).as_deref(),
            Some("reg-secret")
        );
        assert_eq!(token_of(&secret, TokenScope::Console), None);
        assert_eq!(
            secret_values(&secret),
            ["admin-secret-longer", "reg-secret"],
            "longest first, so no value is redacted only in part"
        );
    }
}
