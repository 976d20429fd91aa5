//! Wiring: the kube-runtime Controller and the reconcile function that runs
//! observe → plan → render → apply for one RustQueue.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::runtime::controller::Action as Requeue;
use kube::runtime::events::Recorder;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{Controller, watcher};
use kube::{Api, ResourceExt};
use rustqueue_api::crd::{RustQueue, RustQueueSpec};
use rustqueue_api::labels;

use crate::Error;
use crate::apply;
use crate::metrics::Metrics;
use crate::observe::Observer;
use crate::plan::{Action, Observed, Plan, auth_secret_name, plan};
use crate::render::{BrokerInputs, Children, Owner};
use crate::status::{error_status, next_status, now_rfc3339};

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
}

/// Run the controller for `namespace` until the stream ends (it does not, normally). Dropping
/// this future abandons every reconcile in flight.
pub async fn run(ctx: Arc<Context>, namespace: String) {
    let client = ctx.client.clone();
    let rqs: Api<RustQueue> = Api::namespaced(client.clone(), &namespace);
    let broker_pods = watcher::Config::default().labels(&format!(
        "{}={},{}={}",
        labels::NAME,
        labels::APP_NAME,
        labels::COMPONENT,
        labels::COMPONENT_BROKER
    ));
    let ns = namespace.clone();
    Controller::new(rqs, watcher::Config::default())
        .owns(
            Api::<StatefulSet>::namespaced(client.clone(), &namespace),
            watcher::Config::default(),
        )
        .owns(
            Api::<Service>::namespaced(client.clone(), &namespace),
            watcher::Config::default(),
        )
        .watches(
            Api::<Pod>::namespaced(client, &namespace),
            broker_pods,
            move |pod| {
                pod.labels()
                    .get(labels::INSTANCE)
                    .map(|n| ObjectRef::<RustQueue>::new(n).within(&ns))
            },
        )
        .run(reconcile, error_policy, ctx)
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!(error = %e, "controller event");
            }
        })
        .await;
}

fn error_policy(_rq: Arc<RustQueue>, _e: &Error, _ctx: Arc<Context>) -> Requeue {
    Requeue::requeue(Duration::from_secs(10))
}

async fn reconcile(rq: Arc<RustQueue>, ctx: Arc<Context>) -> Result<Requeue, Error> {
    let started = Instant::now();
    let result = reconcile_inner(&rq, &ctx).await;
    ctx.metrics
        .observe_reconcile(result.is_ok(), started.elapsed());
    if let Err(e) = &result {
        tracing::warn!(rustqueue = %rq.name_any(), error = %e, "reconcile failed");
        let previous = rq.status.clone().unwrap_or_default();
        let (status, transition) = error_status(
            &previous,
            &e.to_string(),
            rq.metadata.generation,
            &now_rfc3339(),
        );
        if apply::write_status(&ctx.client, &rq, &status).await.is_ok()
            && let Some(t) = transition
        {
            apply::record_transition(&ctx.recorder, &rq, &t).await;
        }
    }
    result
}

async fn reconcile_inner(rq: &RustQueue, ctx: &Context) -> Result<Requeue, Error> {
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
    let observed = observer.observe(&name, &rq.spec).await?;
    let decided = plan(&name, &rq.spec, &observed);
    let previous = rq.status.clone().unwrap_or_default();
    for action in &decided.actions {
        carry_out(ctx, &owner, &rq.spec, &observed, &previous, action).await?;
    }
    write_outcome(ctx, rq, &decided).await?;
    Ok(Requeue::requeue(decided.requeue))
}

async fn carry_out(
    ctx: &Context,
    owner: &Owner<'_>,
    spec: &RustQueueSpec,
    observed: &Observed,
    previous: &rustqueue_api::crd::RustQueueStatus,
    action: &Action,
) -> Result<(), Error> {
    match action {
        Action::CreateAuthSecret { name } => {
            apply::create_auth_secret(&ctx.client, owner, name).await
        }
        Action::ApplyChildren {
            replicas,
            auth_revision,
        } => {
            let inputs = BrokerInputs {
                replicas: *replicas,
                auth_secret_name: auth_secret_name(owner.name, spec),
                auth_secret_revision: auth_revision.clone(),
                claim_size: observed
                    .claim_template_size
                    .clone()
                    .unwrap_or_else(|| spec.storage_size.clone()),
                feature_level_floor: previous.active_storage_feature_level.unwrap_or(1),
            };
            let children = Children::render(owner, spec, &inputs);
            apply::apply_children(&ctx.client, owner.namespace, &children).await
        }
    }
}

async fn write_outcome(ctx: &Context, rq: &RustQueue, decided: &Plan) -> Result<(), Error> {
    let previous = rq.status.clone().unwrap_or_default();
    let (status, transition) =
        next_status(&previous, decided, rq.metadata.generation, &now_rfc3339());
    if status != previous {
        apply::write_status(&ctx.client, rq, &status).await?;
    }
    if let Some(t) = transition {
        tracing::info!(rustqueue = %rq.name_any(), phase = %t.reason, message = %t.note, "phase changed");
        apply::record_transition(&ctx.recorder, rq, &t).await;
    }
    Ok(())
}
