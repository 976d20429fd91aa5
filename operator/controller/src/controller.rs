//! Wiring: the kube-runtime Controller and the reconcile function that runs
//! observe → plan → render → apply for one RustQueue.

use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::runtime::controller::Action as Requeue;
use kube::runtime::events::Recorder;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{Controller, watcher};
use kube::{Api, ResourceExt};
use rustqueue_api::contract::DrainRequest;
use rustqueue_api::crd::RustQueue;
use rustqueue_api::labels;

use crate::Error;
use crate::apply;
use crate::metrics::Metrics;
use crate::observe::{Observer, RuntimeWorkloads, base_url};
use crate::plan::{Action, AuthState, Observed, Plan, auth_secret_name, feature_floor, plan};
use crate::render::{AuthTokens, Desired, DesiredInputs, KodoLayout, Owner};
use crate::spans::{self, ReconcileSpan};
use crate::status::{error_status, next_status, now_rfc3339, restore_events};

/// Shared state of all reconciles.
pub struct Context {
    /// Kubernetes client.
    pub client: kube::Client,
    /// Broker HTTP client.
    pub http: reqwest::Client,
    /// Event recorder.
    pub recorder: Recorder,
    /// Metrics.
    pub metrics: Metrics,
    /// Testing only: the most Kodo cutover grace to honour (docs/kodo.md).
    pub kodo_max_grace_seconds: Option<u64>,
}

/// Which namespaces the operator manages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Every namespace (the default).
    All,
    /// These namespaces only.
    Namespaces(Vec<String>),
}

impl Scope {
    /// From a comma-separated list; empty means every namespace.
    pub fn from_list(list: &str) -> Self {
        let ns: Vec<String> = list
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        if ns.is_empty() {
            Self::All
        } else {
            Self::Namespaces(ns)
        }
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::All => f.write_str("all namespaces"),
            Self::Namespaces(ns) => f.write_str(&ns.join(",")),
        }
    }
}

fn api<K>(client: &kube::Client, ns: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    <K as kube::Resource>::DynamicType: Default,
{
    match ns {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// Run the controller over `scope` until the stream ends (it does not, normally). Dropping
/// this future abandons every reconcile in flight.
pub async fn run(ctx: Arc<Context>, scope: Scope) {
    match scope {
        Scope::All => run_in(ctx, None).await,
        Scope::Namespaces(ns) => {
            futures::future::join_all(ns.iter().map(|n| run_in(ctx.clone(), Some(n.as_str()))))
                .await;
        }
    }
}

async fn run_in(ctx: Arc<Context>, namespace: Option<&str>) {
    let client = ctx.client.clone();
    let broker_pods = watcher::Config::default().labels(&format!(
        "{}={},{}={}",
        labels::NAME,
        labels::APP_NAME,
        labels::COMPONENT,
        labels::COMPONENT_BROKER
    ));
    Controller::new(
        api::<RustQueue>(&client, namespace),
        watcher::Config::default(),
    )
    .owns(
        api::<StatefulSet>(&client, namespace),
        watcher::Config::default(),
    )
    .owns(
        api::<Service>(&client, namespace),
        watcher::Config::default(),
    )
    // the runtime workloads' readiness is part of Ready: reconcile when it changes
    .owns(
        api::<Deployment>(&client, namespace),
        watcher::Config::default(),
    )
    .owns(
        api::<DaemonSet>(&client, namespace),
        watcher::Config::default(),
    )
    .watches(api::<Pod>(&client, namespace), broker_pods, |pod| {
        let ns = pod.namespace()?;
        pod.labels()
            .get(labels::INSTANCE)
            .map(|n| ObjectRef::<RustQueue>::new(n).within(&ns))
    })
    .run(reconcile, error_policy, ctx.clone())
    .for_each(|r| {
        // A requeue of a deleted RustQueue finds no object: drop its status series.
        if let Err(kube::runtime::controller::Error::ObjectNotFound(gone)) = &r {
            ctx.metrics
                .forget(gone.namespace.as_deref().unwrap_or_default(), &gone.name);
        }
        if let Err(e) = r {
            tracing::debug!(error = %e, "controller event");
        }
        std::future::ready(())
    })
    .await;
}

/// Back off by what failed (`Error::retry_after`), not by a flat interval.
pub fn error_policy(_rq: Arc<RustQueue>, e: &Error, _ctx: Arc<Context>) -> Requeue {
    Requeue::requeue(e.retry_after())
}

/// Observe, plan and apply one RustQueue; on failure, write the error into its status.
pub async fn reconcile(rq: Arc<RustQueue>, ctx: Arc<Context>) -> Result<Requeue, Error> {
    let started = Instant::now();
    let span = ReconcileSpan::start(
        rq.namespace().as_deref().unwrap_or_default(),
        &rq.name_any(),
    );
    let result = reconcile_inner(&rq, &ctx, span.as_ref()).await;
    ctx.metrics.observe_reconcile(
        result.as_ref().err().map(Error::metric_label),
        started.elapsed(),
    );
    if let Err(e) = &result {
        tracing::warn!(rustqueue = %rq.name_any(), error = %e, "reconcile failed");
        let previous = rq.status.clone().unwrap_or_default();
        let (status, transition) = error_status(
            &previous,
            &e.to_string(),
            rq.metadata.generation,
            &now_rfc3339(),
        );
        if apply::write_status(&ctx.client, &rq, &status).await.is_ok() {
            ctx.metrics.observe_status(
                rq.namespace().as_deref().unwrap_or_default(),
                &rq.name_any(),
                &status,
            );
            if let Some(t) = transition {
                apply::record_transition(&ctx.recorder, &rq, &t).await;
            }
        }
    }
    if let Some(span) = span {
        span.end(result.as_ref().err());
    }
    result
}

async fn reconcile_inner(
    rq: &RustQueue,
    ctx: &Context,
    span: Option<&ReconcileSpan>,
) -> Result<Requeue, Error> {
    let name = rq.name_any();
    let (Some(ns), Some(uid)) = (rq.namespace(), rq.uid()) else {
        return Err(Error::MissingMetadata(name));
    };
    let owner = Owner {
        name: &name,
        namespace: &ns,
        uid: &uid,
    };
    let observer = Observer {
        client: &ctx.client,
        http: &ctx.http,
        namespace: &ns,
    };
    let observing = spans::step(span, "observe", Vec::new());
    let observation = observer.observe(&name, &rq.spec).await;
    spans::finish(observing, &observation);
    let (observed, tokens) = observation?;
    let previous = rq.status.clone().unwrap_or_default();
    let desired = Desired::render(
        &owner,
        &rq.spec,
        &DesiredInputs {
            tiering_secret_revision: observed.tiering_secret.revision(),
            auth_secret_name: auth_secret_name(&name, &rq.spec),
            auth_secret_revision: match &observed.auth {
                AuthState::Valid { revision } => revision.clone(),
                _ => String::new(),
            },
            claim_template_size: observed.claim_template_size.clone(),
            feature_level_floor: feature_floor(&observed, &previous),
        },
    );
    let mut desired = desired;
    if let Some(cap) = ctx.kodo_max_grace_seconds {
        desired.kodo_grace_seconds = desired.kodo_grace_seconds.min(cap);
    }
    let now = unix_now();
    let decided = plan(&rq.spec, &observed, &desired, &previous, now);
    let applier = Applier {
        ctx,
        owner: &owner,
        desired: &desired,
        observed: &observed,
        tokens: tokens.as_ref(),
    };
    let mut applied_runtime = None;
    for action in &decided.actions {
        let step = spans::action(span, action);
        let done = applier.carry_out(action).await;
        spans::finish(step, &done);
        match done {
            Ok(runtime) => applied_runtime = runtime.or(applied_runtime),
            Err(e) => {
                applier.resume_all().await;
                return Err(e);
            }
        }
    }
    // The runtime workloads were read before this reconcile applied their new template; a
    // status written from that reading would call them available while they roll. Decide
    // the status again from what the apply left (the actions are not repeated).
    let status = match applied_runtime {
        Some(rt)
            if (
                Some(rt.discovery),
                Some(rt.gateway),
                rt.console.or(observed.console),
            ) != (observed.discovery, observed.gateway, observed.console) =>
        {
            let after = observed
                .clone()
                .with_runtime(rt.discovery, rt.gateway, rt.console);
            plan(&rq.spec, &after, &desired, &previous, now)
        }
        _ => decided,
    };
    let writing = spans::step(span, "status", Vec::new());
    let written = write_outcome(ctx, rq, &status).await;
    spans::finish(writing, &written);
    written?;
    Ok(Requeue::requeue(status.requeue))
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Carries out actions exactly as planned: renders what they name and applies it.
pub struct Applier<'a> {
    /// The clients.
    pub ctx: &'a Context,
    /// The RustQueue whose actions these are.
    pub owner: &'a Owner<'a>,
    /// What the plan was decided against: the objects the actions name are rendered from it.
    pub desired: &'a Desired,
    /// The reading the plan was decided from (where a drain request goes).
    pub observed: &'a Observed,
    /// The auth Secret's tokens (the admin token authorises drains).
    pub tokens: Option<&'a AuthTokens>,
}

impl Applier<'_> {
    /// Returns the runtime workloads as the apply left them when the action applied them.
    pub async fn carry_out(&self, action: &Action) -> Result<Option<RuntimeWorkloads>, Error> {
        let client = &self.ctx.client;
        let ns = self.owner.namespace;
        let done = match action {
            Action::CreateAuthSecret { name } => {
                apply::create_auth_secret(client, self.owner, name).await
            }
            Action::ApplyRuntime { image, kodo } => {
                // Replicas only size the brokers' PDB, which the runtime subset does not apply.
                let c = self.desired.children(self.owner, 0, image, kodo);
                return apply::apply_runtime(client, ns, &c).await.map(Some);
            }
            Action::ApplyBrokerSet { replicas } => {
                // The broker set holds no Kodo or discovery object.
                let c = self.desired.children(
                    self.owner,
                    *replicas,
                    &self.desired.spec.image,
                    &KodoLayout::default(),
                );
                apply::apply_broker_set(client, ns, &c).await
            }
            Action::DeleteKodoGateways => {
                apply::delete_kodo_gateways(client, ns, self.owner.name, self.owner.uid).await
            }
            Action::DeleteConsole => {
                apply::delete_console(client, ns, self.owner.name, self.owner.uid).await
            }
            Action::Drain { pod, goal } => {
                let req = DrainRequest {
                    enabled: true,
                    freeze_deliveries: goal.freezes(),
                };
                self.drain(pod, req).await
            }
            Action::Resume { pod } => self.drain(pod, DrainRequest::resume()).await,
            Action::DeletePod { pod } => apply::delete_pod(client, ns, pod).await,
            Action::CreateProbePod { .. } => {
                let c = self.desired.children(
                    self.owner,
                    0,
                    &self.desired.spec.image,
                    &KodoLayout::default(),
                );
                apply::create_probe(client, ns, &c.config_map, &self.desired.probe(self.owner))
                    .await
            }
            Action::DeleteProbePod { name } => apply::delete_pod(client, ns, name).await,
            Action::PatchClaim { name, size } => apply::patch_claim(client, ns, name, size).await,
            Action::DeleteConfigMap { name } => apply::delete_config_map(client, ns, name).await,
        };
        done.map(|()| None)
    }

    /// After a failed action: un-drain every draining broker (best effort), so an error never
    /// leaves a broker out of the publish path.
    pub async fn resume_all(&self) {
        for b in self.observed.brokers.iter().filter(|b| b.is_draining()) {
            if let Err(e) = self.drain(&b.name, DrainRequest::resume()).await {
                tracing::warn!(broker = %b.name, error = %e, "could not resume after an error");
            }
        }
    }

    async fn drain(&self, pod: &str, req: DrainRequest) -> Result<(), Error> {
        let broker_err = |detail: &str| Error::Broker {
            pod: pod.to_string(),
            detail: detail.to_string(),
        };
        let ip = self
            .observed
            .broker(pod)
            .and_then(|b| b.ip.clone())
            .ok_or_else(|| broker_err("no Pod IP to send the drain request to"))?;
        let token = self
            .tokens
            .ok_or_else(|| broker_err("no admin token in the auth Secret"))?;
        apply::post_drain(&self.ctx.http, pod, &base_url(&ip), &token.admin, req).await
    }
}

async fn write_outcome(ctx: &Context, rq: &RustQueue, decided: &Plan) -> Result<(), Error> {
    let previous = rq.status.clone().unwrap_or_default();
    let (status, transition) =
        next_status(&previous, decided, rq.metadata.generation, &now_rfc3339());
    if status != previous {
        apply::write_status(&ctx.client, rq, &status).await?;
    }
    ctx.metrics.observe_status(
        rq.namespace().as_deref().unwrap_or_default(),
        &rq.name_any(),
        &status,
    );
    let key = |s: &rustqueue_api::crd::RustQueueStatus| {
        s.current_operation
            .as_ref()
            .map(|o| (o.id.clone(), o.phase))
    };
    if key(&status) != key(&previous)
        && let Some(op) = &status.current_operation
    {
        tracing::info!(
            rustqueue = %rq.name_any(),
            operation = %op.id,
            kind = op.kind.as_str(),
            phase = ?op.phase,
            broker = op.current_broker.as_deref().unwrap_or(""),
            message = %op.message,
            "RustQueue operation transitioned"
        );
    }
    if let Some(t) = transition {
        tracing::info!(rustqueue = %rq.name_any(), phase = %t.reason, message = %t.note, "phase changed");
        apply::record_transition(&ctx.recorder, rq, &t).await;
    }
    for t in restore_events(&previous, &status) {
        tracing::info!(rustqueue = %rq.name_any(), reason = %t.reason, message = %t.note, "restore from the bucket ended");
        apply::record_transition(&ctx.recorder, rq, &t).await;
    }
    Ok(())
}
