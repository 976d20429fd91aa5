//! The applier: carries out a [`Plan`]'s actions with server-side apply (one field manager),
//! patches status, and records Events. The only module besides `observe` that writes to the
//! API server.

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{
    ConfigMap, PersistentVolumeClaim, Pod, Secret, Service, ServiceAccount,
};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Resource, ResourceExt};
use rustqueue_api::contract::{DrainRequest, headers, paths};
use rustqueue_api::crd::{RustQueue, RustQueueStatus};
use rustqueue_api::labels::FIELD_MANAGER;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::Error;
use crate::observe::{RuntimeWorkloads, daemon_set_workload, deployment_workload};
use crate::plan::Workload;
use crate::render::{Children, ConsoleObjects, auth_secret, generate_tokens};
use crate::status::Transition;

/// A namespaced object the applier can server-side apply.
trait Applied:
    Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
    + Serialize
    + DeserializeOwned
    + Clone
    + std::fmt::Debug
{
}

impl<K> Applied for K where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Serialize
        + DeserializeOwned
        + Clone
        + std::fmt::Debug
{
}

/// Server-side apply one object, forcing ownership of the fields we set.
async fn ssa<K: Applied>(client: &kube::Client, ns: &str, obj: &K) -> Result<(), Error> {
    ssa_returning(client, ns, obj).await.map(drop)
}

/// [`ssa`], returning the object as the API server now holds it (its new
/// `metadata.generation` beside the `status` its controller last wrote).
async fn ssa_returning<K: Applied>(client: &kube::Client, ns: &str, obj: &K) -> Result<K, Error> {
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    let name = obj.meta().name.clone().unwrap_or_default();
    let params = PatchParams::apply(FIELD_MANAGER).force();
    api.patch(&name, &params, &Patch::Apply(obj))
        .await
        .map_err(|e| Error::kube(&format!("apply {} {name}", K::kind(&())), e))
}

/// Apply the runtime objects: what keeps clients working with the running brokers. Returns
/// the discovery Deployment and the gateway DaemonSet as read from the apply responses: a
/// template change shows there as a generation their controllers have not observed yet, which
/// the reconcile's earlier reading (taken before this apply) cannot show.
pub async fn apply_runtime(
    client: &kube::Client,
    ns: &str,
    c: &Children,
) -> Result<RuntimeWorkloads, Error> {
    ssa::<ServiceAccount>(client, ns, &c.service_account).await?;
    ssa::<Role>(client, ns, &c.role).await?;
    ssa::<RoleBinding>(client, ns, &c.role_binding).await?;
    ssa::<NetworkPolicy>(client, ns, &c.internal_network_policy).await?;
    ssa::<Service>(client, ns, &c.service).await?;
    ssa::<Service>(client, ns, &c.discovery_service).await?;
    ssa::<Service>(client, ns, &c.gateway_service).await?;
    // the Gateways before discovery, which may advertise them
    if let Some(k) = &c.kodo {
        ssa::<NetworkPolicy>(client, ns, &k.network_policy).await?;
        ssa::<Service>(client, ns, &k.headless_service).await?;
        ssa::<Service>(client, ns, &k.publish_service).await?;
        ssa::<StatefulSet>(client, ns, &k.stateful_set).await?;
        ssa::<PodDisruptionBudget>(client, ns, &k.pdb).await?;
    }
    let discovery = ssa_returning::<Deployment>(client, ns, &c.discovery).await?;
    let gateway = ssa_returning::<DaemonSet>(client, ns, &c.gateway).await?;
    ssa::<PodDisruptionBudget>(client, ns, &c.discovery_pdb).await?;
    let console = match &c.console {
        Some(objects) => Some(apply_console(client, ns, objects).await?),
        None => None,
    };
    Ok(RuntimeWorkloads {
        discovery: deployment_workload(&discovery),
        gateway: daemon_set_workload(&gateway),
        console,
    })
}

/// Apply the console: its identity and Role before the Pod that uses them, its
/// NetworkPolicy before it listens, the Deployment last (returned as the apply left it).
async fn apply_console(
    client: &kube::Client,
    ns: &str,
    c: &ConsoleObjects,
) -> Result<Workload, Error> {
    ssa::<ServiceAccount>(client, ns, &c.service_account).await?;
    ssa::<Role>(client, ns, &c.role).await?;
    ssa::<RoleBinding>(client, ns, &c.role_binding).await?;
    ssa::<NetworkPolicy>(client, ns, &c.network_policy).await?;
    ssa::<Service>(client, ns, &c.service).await?;
    let deployment = ssa_returning::<Deployment>(client, ns, &c.deployment).await?;
    Ok(deployment_workload(&deployment))
}

/// Remove the console of RustQueue `n` (`spec.console.enabled: false`): every object named
/// `<n>-console` this RustQueue controls, the Deployment last, so while it exists the next
/// reconcile sees the console and finishes.
pub async fn delete_console(
    client: &kube::Client,
    ns: &str,
    n: &str,
    uid: &str,
) -> Result<(), Error> {
    let name = crate::render::names::console(n);
    delete_owned::<Service>(client, ns, &name, uid).await?;
    delete_owned::<NetworkPolicy>(client, ns, &name, uid).await?;
    delete_owned::<RoleBinding>(client, ns, &name, uid).await?;
    delete_owned::<Role>(client, ns, &name, uid).await?;
    delete_owned::<ServiceAccount>(client, ns, &name, uid).await?;
    delete_owned::<Deployment>(client, ns, &name, uid).await
}

/// Delete `name` of kind `K` if it exists and is controller-owned by the RustQueue `uid` (a
/// precondition on its own UID, so a replacement created meanwhile is not deleted).
async fn delete_owned<K>(
    client: &kube::Client,
    ns: &str,
    name: &str,
    uid: &str,
) -> Result<(), Error>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Serialize
        + DeserializeOwned
        + Clone
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    let what = format!("{} {name}", K::kind(&()));
    let Some(obj) = api
        .get_opt(name)
        .await
        .map_err(|e| Error::kube(&format!("get {what}"), e))?
    else {
        return Ok(());
    };
    if !controlled_by(obj.meta(), uid) {
        tracing::warn!(object = %what, "not deleted: not controlled by this RustQueue");
        return Ok(());
    }
    let params = DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: obj.meta().uid.clone(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(name, &params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(()),
        Err(e) => Err(Error::kube(&format!("delete {what}"), e)),
    }
}

/// A kind of object `delete_kodo_gateways` removes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KodoObjectKind {
    /// A Service.
    Service,
    /// A PodDisruptionBudget.
    Pdb,
    /// A NetworkPolicy.
    NetworkPolicy,
    /// A StatefulSet.
    StatefulSet,
}

/// What `delete_kodo_gateways` deletes for RustQueue `n`, in order: the Services, the PDB
/// and the NetworkPolicy, then the Gateway StatefulSet last, so while it exists the next
/// reconcile sees what is left and finishes. Never a broker object.
pub fn kodo_gateway_objects(n: &str) -> [(KodoObjectKind, String); 5] {
    use crate::render::kodo::names;
    [
        (KodoObjectKind::Service, names::publish(n)),
        (KodoObjectKind::Pdb, names::pdb(n)),
        (KodoObjectKind::NetworkPolicy, names::network_policy(n)),
        (KodoObjectKind::Service, names::gateways(n)),
        (KodoObjectKind::StatefulSet, names::gateway(n)),
    ]
}

/// Remove the Kodo Gateways of RustQueue `n`: delete each of [`kodo_gateway_objects`] that
/// this RustQueue controls (the StatefulSet's Pods go with it).
pub async fn delete_kodo_gateways(
    client: &kube::Client,
    ns: &str,
    n: &str,
    uid: &str,
) -> Result<(), Error> {
    for (kind, name) in kodo_gateway_objects(n) {
        match kind {
            KodoObjectKind::Service => delete_owned::<Service>(client, ns, &name, uid).await?,
            KodoObjectKind::Pdb => {
                delete_owned::<PodDisruptionBudget>(client, ns, &name, uid).await?;
            }
            KodoObjectKind::NetworkPolicy => {
                delete_owned::<NetworkPolicy>(client, ns, &name, uid).await?;
            }
            KodoObjectKind::StatefulSet => {
                delete_owned::<StatefulSet>(client, ns, &name, uid).await?;
            }
        }
    }
    Ok(())
}

/// Controller-owned by the RustQueue `uid`.
fn controlled_by(meta: &kube::api::ObjectMeta, uid: &str) -> bool {
    meta.owner_references
        .iter()
        .flatten()
        .any(|r| r.controller == Some(true) && r.uid == uid)
}

/// Apply the broker set: its ConfigMap first (Pods mount it), the brokers' NetworkPolicy
/// (before a Pod can listen), the StatefulSet, the PDB.
pub async fn apply_broker_set(client: &kube::Client, ns: &str, c: &Children) -> Result<(), Error> {
    ssa::<ConfigMap>(client, ns, &c.config_map).await?;
    ssa::<NetworkPolicy>(client, ns, &c.broker_network_policy).await?;
    ssa::<StatefulSet>(client, ns, &c.stateful_set).await?;
    ssa::<PodDisruptionBudget>(client, ns, &c.pdb).await?;
    Ok(())
}

/// Apply the target ConfigMap (the probe mounts it) and create the probe Pod (409: it
/// exists already, which is the cache).
pub async fn create_probe(
    client: &kube::Client,
    ns: &str,
    config_map: &ConfigMap,
    probe: &Pod,
) -> Result<(), Error> {
    ssa::<ConfigMap>(client, ns, config_map).await?;
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    match api.create(&PostParams::default(), probe).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(Error::kube("create capability probe Pod", e)),
    }
}

/// Delete a broker Pod (404 is fine: it is already gone).
pub async fn delete_pod(client: &kube::Client, ns: &str, name: &str) -> Result<(), Error> {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(Error::kube(&format!("delete Pod {name}"), e)),
    }
}

/// Delete a broker ConfigMap no Pod mounts (404 is fine).
pub async fn delete_config_map(client: &kube::Client, ns: &str, name: &str) -> Result<(), Error> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(Error::kube(&format!("delete ConfigMap {name}"), e)),
    }
}

/// Grow a claim's storage request (merge patch; the API server refuses a shrink anyway).
pub async fn patch_claim(
    client: &kube::Client,
    ns: &str,
    name: &str,
    size: &str,
) -> Result<(), Error> {
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let body = serde_json::json!({"spec": {"resources": {"requests": {"storage": size}}}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(body))
        .await
        .map_err(|e| Error::kube(&format!("grow PVC {name} to {size}"), e))?;
    Ok(())
}

/// `POST /v1/drain` on the broker at `base` with the admin token.
pub async fn post_drain(
    http: &reqwest::Client,
    pod: &str,
    base: &str,
    admin_token: &str,
    request: DrainRequest,
) -> Result<(), Error> {
    let url = format!("{base}{}", paths::DRAIN);
    let resp = http
        .post(&url)
        .header(headers::TOKEN, admin_token)
        .json(&request)
        .send()
        .await
        .map_err(|e| Error::Broker {
            pod: pod.to_string(),
            detail: format!("POST /v1/drain: {e}"),
        })?;
    if !resp.status().is_success() {
        return Err(Error::Broker {
            pod: pod.to_string(),
            detail: format!("POST /v1/drain answered {}", resp.status()),
        });
    }
    Ok(())
}

/// Create the generated auth Secret. An existing Secret (409) is left untouched: tokens are
/// never overwritten.
pub async fn create_auth_secret(
    client: &kube::Client,
    owner: &crate::render::Owner<'_>,
    name: &str,
) -> Result<(), Error> {
    let tokens = generate_tokens(&mut rand::rng());
    let secret = auth_secret(owner, name, &tokens);
    let api: Api<Secret> = Api::namespaced(client.clone(), owner.namespace);
    match api.create(&PostParams::default(), &secret).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(Error::kube("create auth Secret", e)),
    }
}

/// Write the status subresource (server-side apply, same field manager).
pub async fn write_status(
    client: &kube::Client,
    rq: &RustQueue,
    status: &RustQueueStatus,
) -> Result<(), Error> {
    let ns = rq.namespace().unwrap_or_default();
    let api: Api<RustQueue> = Api::namespaced(client.clone(), &ns);
    let body = serde_json::json!({
        "apiVersion": "rustqueue.io/v1alpha1",
        "kind": "RustQueue",
        "status": status,
    });
    api.patch_status(
        &rq.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(body),
    )
    .await
    .map_err(|e| Error::kube("write status", e))?;
    Ok(())
}

/// Record a phase transition as an Event on the RustQueue (best effort).
pub async fn record_transition(recorder: &Recorder, rq: &RustQueue, t: &Transition) {
    let event = Event {
        type_: if t.warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: t.reason.clone(),
        note: Some(t.note.chars().take(1000).collect()),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&event, &rq.object_ref(&())).await {
        tracing::warn!(error = %e, "could not record event");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removing_the_kodo_gateways_deletes_only_their_objects_and_the_statefulset_last() {
        let objects = kodo_gateway_objects("q");
        let names: Vec<&str> = objects.iter().map(|(_, n)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "q-kodo-publish",
                "q-kodo-gateway-pdb",
                "q-kodo-gateway-ingress",
                "q-kodo-gateways",
                "q-kodo-gateway"
            ]
        );
        let sets: Vec<&str> = objects
            .iter()
            .filter(|(k, _)| *k == KodoObjectKind::StatefulSet)
            .map(|(_, n)| n.as_str())
            .collect();
        assert_eq!(sets, ["q-kodo-gateway"], "the only StatefulSet deleted");
        assert!(!names.contains(&crate::render::names::stateful_set("q").as_str()));
        assert!(!names.contains(&crate::render::names::pdb("q").as_str()));
    }
}
