//! Collecting the support bundle of `report` from the cluster and the brokers.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::anyhow;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Event, PersistentVolumeClaim, Pod};
use kube::Api;
use kube::api::{ListParams, LogParams};
use rustqueue_api::contract::{TokenScope, paths};

use crate::cluster::{one_line, pod_name, secret_values, token_of};
use crate::report::Bundle;
use crate::run::Ctx;

/// Label of the operator's Pods (config/manager).
const OPERATOR_SELECTOR: &str = "app.kubernetes.io/name=rustqueue-operator";
/// Lines of each container log kept.
const LOG_LINES: i64 = 5000;

/// Writes the bundle and lists its files.
pub async fn report(ctx: &Ctx, file: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let t = &ctx.target;
    let rq = t.queue().await?;
    let stamp = jiff::Timestamp::now()
        .strftime("%Y%m%dT%H%M%SZ")
        .to_string();
    let root = format!("rustqueue-report-{}-{stamp}", t.name);
    let out = file.unwrap_or_else(|| PathBuf::from(format!("{root}.tar.gz")));
    let mut b = Bundle::default();
    b.add_yaml("rustqueue.yaml", &rq);
    let secret = t.secret(&rq).await;
    let (registry, secrets) = match &secret {
        Ok(s) => (token_of(s, TokenScope::Registry), secret_values(s)),
        Err(e) => {
            b.errors.push(format!("auth Secret: {e:#}"));
            (None, Vec::new())
        }
    };
    objects(ctx, &mut b).await;
    let pods = t.pods_of_instance().await.unwrap_or_else(|e| {
        b.errors.push(format!("pods: {e:#}"));
        Vec::new()
    });
    b.add_yaml("pods.yaml", &pods);
    logs(ctx, &pods, &mut b).await;
    brokers(ctx, registry.as_deref(), &mut b).await;
    b.redact(&secrets);
    let names = b.write(&root, &out)?;
    println!("wrote {} ({} files):", out.display(), names.len());
    for n in names {
        println!("  {n}");
    }
    Ok(ExitCode::SUCCESS)
}

async fn objects(ctx: &Ctx, b: &mut Bundle) {
    let t = &ctx.target;
    let events: Api<Event> = Api::namespaced(t.client.clone(), &t.namespace);
    match events.list(&ListParams::default()).await {
        Ok(list) => {
            let prefix = format!("{}-", t.name);
            let mut mine: Vec<Event> = list
                .items
                .into_iter()
                .filter(|e| {
                    let n = e.involved_object.name.as_deref().unwrap_or("");
                    n == t.name || n.starts_with(&prefix)
                })
                .collect();
            mine.sort_by(|a, b| {
                a.metadata
                    .creation_timestamp
                    .cmp(&b.metadata.creation_timestamp)
            });
            b.add_yaml("events.yaml", &mine);
        }
        Err(e) => b.errors.push(format!("events.yaml: {}", one_line(&e))),
    }
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(t.client.clone(), &t.namespace);
    match pvcs.list(&ListParams::default()).await {
        Ok(list) => {
            let prefix = format!("data-{}-", t.name);
            let mine: Vec<_> = list
                .items
                .into_iter()
                .filter(|c| {
                    c.metadata
                        .name
                        .as_deref()
                        .is_some_and(|n| n.starts_with(&prefix))
                })
                .collect();
            b.add_yaml("pvcs.yaml", &mine);
        }
        Err(e) => b.errors.push(format!("pvcs.yaml: {}", one_line(&e))),
    }
    let sts: Api<StatefulSet> = Api::namespaced(t.client.clone(), &t.namespace);
    match sts.get_opt(&t.name).await {
        Ok(Some(s)) => b.add_yaml("statefulset.yaml", &s),
        Ok(None) => b
            .errors
            .push(format!("statefulset.yaml: no StatefulSet {}", t.what())),
        Err(e) => b.errors.push(format!("statefulset.yaml: {}", one_line(&e))),
    }
}

async fn logs(ctx: &Ctx, pods: &[Pod], b: &mut Bundle) {
    let t = &ctx.target;
    let api: Api<Pod> = Api::namespaced(t.client.clone(), &t.namespace);
    for p in pods {
        pod_logs(&api, p, &format!("logs/{}", pod_name(p)), b).await;
    }
    let all: Api<Pod> = Api::all(t.client.clone());
    match all
        .list(&ListParams::default().labels(OPERATOR_SELECTOR))
        .await
    {
        Ok(list) => {
            for p in &list.items {
                let ns = p.metadata.namespace.as_deref().unwrap_or("default");
                let api: Api<Pod> = Api::namespaced(t.client.clone(), ns);
                pod_logs(&api, p, &format!("logs/operator/{ns}/{}", pod_name(p)), b).await;
            }
        }
        Err(e) => b.errors.push(format!("operator Pods: {}", one_line(&e))),
    }
}

async fn pod_logs(api: &Api<Pod>, p: &Pod, dir: &str, b: &mut Bundle) {
    let containers = p
        .spec
        .iter()
        .flat_map(|s| &s.containers)
        .map(|c| c.name.clone());
    for c in containers.collect::<Vec<_>>() {
        let params = LogParams {
            container: Some(c.clone()),
            tail_lines: Some(LOG_LINES),
            ..LogParams::default()
        };
        let got = api
            .logs(pod_name(p), &params)
            .await
            .map(String::into_bytes)
            .map_err(|e| anyhow!("{}", one_line(&e)));
        b.add_or_note(&format!("{dir}/{c}.log"), got);
    }
}

async fn brokers(ctx: &Ctx, token: Option<&str>, b: &mut Bundle) {
    let pods = match ctx.target.brokers().await {
        Ok(p) => p,
        Err(e) => return b.errors.push(format!("brokers: {e:#}")),
    };
    for p in &pods {
        let dir = format!("brokers/{}", pod_name(p));
        for (file, path, token) in [
            ("health.json", paths::HEALTH, None),
            ("capabilities.json", paths::CAPABILITIES, token),
            ("stats.json", "/v1/stats", token),
        ] {
            let name = format!("{dir}/{file}");
            let got = ctx
                .reach
                .http(p, ctx.port, http::Method::GET, path, token)
                .await;
            if let Ok((status, _)) = &got
                && !(200..300).contains(status)
            {
                b.errors.push(format!("{name}: HTTP {status}"));
            }
            b.add_or_note(&name, got.map(|(_, body)| body.to_vec()));
        }
    }
}
