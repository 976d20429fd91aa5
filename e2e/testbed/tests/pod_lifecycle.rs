//! Pod-level behaviour of the process kubelet: env and volume sources, the termination
//! message, init containers, restart policies, liveness restarts, image errors, and SIGTERM-then-SIGKILL on
//! delete within the grace period.

mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::{TOOLS, wait_pod};

const NS: &str = "features";
const LONG: Duration = Duration::from_secs(90);

fn pod(name: &str, restart: &str, script: &str, extra: serde_json::Value) -> Pod {
    let mut p = json!({
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "restartPolicy": restart,
            "terminationGracePeriodSeconds": 2,
            "containers": [{"name": "main", "image": TOOLS, "command": ["sh", "-c", script]}],
        },
    });
    merge(&mut p, extra);
    serde_json::from_value(p).unwrap()
}

fn merge(a: &mut serde_json::Value, b: serde_json::Value) {
    match (a, b) {
        (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(serde_json::Value::Null), v);
            }
        }
        (a, b) => *a = b,
    }
}

fn terminated(p: &Pod) -> Option<k8s_openapi::api::core::v1::ContainerStateTerminated> {
    p.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .first()?
        .state
        .as_ref()?
        .terminated
        .clone()
}

fn terminated_of(
    cs: &[k8s_openapi::api::core::v1::ContainerStatus],
) -> Option<k8s_openapi::api::core::v1::ContainerStateTerminated> {
    cs.first()?.state.as_ref()?.terminated.clone()
}

const INSPECT: &str = r#"
echo "env: GREETING=$GREETING MY_IP=$MY_IP MY_NAME=$MY_NAME"
test "$GREETING" = hello || exit 10
test "$PASSWORD" = s3cret || exit 11
test "$(cat /etc/cfg/greeting)" = hello || exit 12
test "$(cat /etc/sec/password)" = s3cret || exit 13
grep -q 'app="inspect"' /etc/podinfo/labels || exit 14
test -s /var/run/secrets/kubernetes.io/serviceaccount/token || exit 15
grep -q 'BEGIN CERTIFICATE' /var/run/secrets/kubernetes.io/serviceaccount/ca.crt || exit 16
test "$(cat /var/run/secrets/kubernetes.io/serviceaccount/namespace)" = features || exit 17
test "$(hostname)" = inspect || exit 18
test "$KUBERNETES_SERVICE_HOST" = 127.0.0.1 || exit 19
echo "ip=$MY_IP name=$MY_NAME" > /dev/termination-log
exit 3
"#;

#[test]
fn pods_get_their_env_volumes_restarts_and_graceful_termination() {
    support::run(scenario());
}

#[allow(
    clippy::too_many_lines,
    reason = "a test table or scenario reads best in one piece"
)]
async fn scenario() {
    let bed = support::start().await;
    let client = bed.client();
    bed.create_namespace(NS).await.unwrap();
    let pp = PostParams::default();
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "cfg"}, "data": {"greeting": "hello"}
    }))
    .unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), NS)
        .create(&pp, &cm)
        .await
        .unwrap();
    let sec: Secret = serde_json::from_value(json!({
        "metadata": {"name": "sec"}, "stringData": {"password": "s3cret"}
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), NS)
        .create(&pp, &sec)
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);

    let inspect = pod(
        "inspect",
        "Never",
        INSPECT,
        json!({"spec": {
            "containers": [{"name": "main", "image": TOOLS, "command": ["sh", "-c", INSPECT],
                "env": [
                    {"name": "GREETING", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "greeting"}}},
                    {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "password"}}},
                    {"name": "MY_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    {"name": "MY_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                ],
                "volumeMounts": [
                    {"name": "cfg", "mountPath": "/etc/cfg", "readOnly": true},
                    {"name": "sec", "mountPath": "/etc/sec"},
                    {"name": "podinfo", "mountPath": "/etc/podinfo"},
                ]}],
            "volumes": [
                {"name": "cfg", "configMap": {"name": "cfg"}},
                {"name": "sec", "secret": {"secretName": "sec"}},
                {"name": "podinfo", "downwardAPI": {"items": [
                    {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
            ],
        }}),
    );
    let flaky = pod(
        "flaky",
        "Always",
        "echo run; sleep 60",
        json!({"spec": {
            "containers": [{"name": "main", "image": TOOLS, "command": ["sh", "-c", "echo run; sleep 60"],
                "livenessProbe": {"exec": {"command": ["test", "-f", "/scratch/healthy"]},
                                  "initialDelaySeconds": 2, "periodSeconds": 1, "failureThreshold": 1},
                "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]}],
            "volumes": [{"name": "scratch", "emptyDir": {}}],
        }}),
    );
    let done = pod("done", "OnFailure", "echo finished", json!({}));
    // An init container prepares a volume and reports through its termination message (the
    // operator's restore init container does both) before the main container starts.
    let init = pod(
        "init",
        "Never",
        "test \"$(cat /work/state)\" = prepared",
        json!({"spec": {
            "initContainers": [{"name": "prepare", "image": TOOLS, "command": ["sh", "-c",
                "echo prepared > /work/state; printf '{\"outcome\":\"restored\"}' > /dev/termination-log"],
                "volumeMounts": [{"name": "work", "mountPath": "/work"}]}],
            "containers": [{"name": "main", "image": TOOLS, "command": ["sh", "-c",
                "test \"$(cat /work/state)\" = prepared"],
                "volumeMounts": [{"name": "work", "mountPath": "/work"}]}],
            "volumes": [{"name": "work", "emptyDir": {}}],
        }}),
    );
    let stubborn_script = "trap 'echo got TERM' TERM; echo started; while true; do sleep 0.2; done";
    let stubborn = pod("stubborn", "Always", stubborn_script, json!({}));
    let mut missing = pod("missing", "Always", "true", json!({}));
    missing.spec.as_mut().unwrap().containers[0].image = Some("no/such-image:1".into());
    for p in [&inspect, &flaky, &done, &init, &stubborn, &missing] {
        pods.create(&pp, p).await.unwrap();
    }

    // Env and every volume kind resolved; the termination message is reported.
    let p = wait_pod(&pods, "inspect", "Failed with exit 3", LONG, |p| {
        terminated(p).is_some_and(|t| t.exit_code != 0)
    })
    .await;
    let t = terminated(&p).unwrap();
    let log = bed.logs(NS, "inspect", "main").unwrap_or_default();
    assert_eq!(t.exit_code, 3, "the script's checks passed; log: {log}");
    let ip = p.status.as_ref().unwrap().pod_ip.clone().unwrap();
    assert_eq!(
        t.message.as_deref(),
        Some(format!("ip={ip} name=inspect\n").as_str())
    );
    assert_eq!(p.status.as_ref().unwrap().phase.as_deref(), Some("Failed"));

    // OnFailure + exit 0: Succeeded, no restart.
    let p = wait_pod(&pods, "done", "Succeeded", LONG, |p| {
        p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded")
    })
    .await;
    assert_eq!(
        p.status.unwrap().container_statuses.unwrap()[0].restart_count,
        0
    );
    assert_eq!(bed.logs(NS, "done", "main").unwrap(), "finished\n");

    // The init container ran first, to the end, and its termination message is reported in
    // initContainerStatuses; the main container saw what it prepared.
    let p = wait_pod(&pods, "init", "Succeeded", LONG, |p| {
        p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded")
    })
    .await;
    let status = p.status.unwrap();
    let prepare = &status
        .init_container_statuses
        .expect("initContainerStatuses")[0];
    assert_eq!(prepare.name, "prepare");
    let t = prepare
        .state
        .as_ref()
        .and_then(|s| s.terminated.clone())
        .expect("terminated");
    assert_eq!(t.exit_code, 0);
    assert_eq!(t.message.as_deref(), Some(r#"{"outcome":"restored"}"#));
    assert_eq!(
        terminated_of(&status.container_statuses.unwrap()).map(|t| t.exit_code),
        Some(0)
    );

    // Liveness failures restart the container; the previous run's log is kept.
    let p = wait_pod(
        &pods,
        "flaky",
        "restarted by its liveness probe",
        LONG,
        |p| {
            p.status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .is_some_and(|cs| cs[0].restart_count >= 1)
        },
    )
    .await;
    let cs = &p.status.unwrap().container_statuses.unwrap()[0];
    assert!(cs.last_state.as_ref().unwrap().terminated.is_some());
    assert_eq!(bed.previous_logs(NS, "flaky", "main").unwrap(), "run\n");

    // An image outside the table is an image pull error.
    wait_pod(&pods, "missing", "ErrImagePull", LONG, |p| {
        p.status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|cs| cs[0].state.as_ref()?.waiting.as_ref()?.reason.clone())
            .as_deref()
            == Some("ErrImagePull")
    })
    .await;

    // A process that ignores SIGTERM is SIGKILLed after the 2 s grace period.
    let p = wait_pod(&pods, "stubborn", "running", LONG, |p| {
        p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
    })
    .await;
    let pid: u32 = p.status.unwrap().container_statuses.unwrap()[0]
        .container_id
        .clone()
        .unwrap()
        .trim_start_matches("process://")
        .parse()
        .unwrap();
    // The script says "started" once its TERM trap is set: only then is SIGTERM ignored.
    let trap_set = Instant::now();
    while !bed
        .logs(NS, "stubborn", "main")
        .unwrap_or_default()
        .contains("started")
    {
        assert!(trap_set.elapsed() < LONG, "stubborn never said it started");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let asked = Instant::now();
    pods.delete("stubborn", &DeleteParams::default())
        .await
        .unwrap();
    loop {
        if pods.get_opt("stubborn").await.unwrap().is_none() {
            break;
        }
        assert!(asked.elapsed() < LONG, "stubborn pod never went away");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let took = asked.elapsed();
    assert!(
        took >= Duration::from_millis(1900),
        "waited the grace period: {took:?}"
    );
    assert!(
        !support::process_running(pid),
        "SIGKILLed after the grace period"
    );
    assert!(
        bed.logs(NS, "stubborn", "main")
            .unwrap()
            .contains("got TERM")
    );

    a_force_deleted_pod_never_writes_its_replacements_status(&pods).await;

    let all = bed.process_ids();
    drop(bed);
    assert!(
        all.iter().all(|p| !support::process_running(*p)),
        "nothing left: {all:?}"
    );
}

/// A StatefulSet replaces a force-deleted Pod at once under the same name. The deleted Pod's
/// worker may still be in the middle of a probe when the deletion arrives; the status it
/// writes afterwards must not land on the replacement: the API server then keeps the dead
/// Pod's IP on it for good (a Pod IP may not change once set) and refuses every status the
/// replacement's own worker writes, so it never turns Ready.
async fn a_force_deleted_pod_never_writes_its_replacements_status(pods: &Api<Pod>) {
    // Ready after its first probe; every later probe says so in a host directory, takes 3 s
    // and fails, so the worker is inside a probe when the deletion comes, and has a changed
    // status to write after it.
    let marks = tempfile::tempdir().unwrap();
    let slow = marks.path().join("slow");
    let probe = "if test -f /scratch/seen; then touch /marks/slow; sleep 3; exit 1; fi; \
                 touch /scratch/seen";
    let old = pod(
        "reborn",
        "Always",
        "sleep 600",
        json!({"spec": {
            "containers": [{"name": "main", "image": TOOLS, "command": ["sh", "-c", "sleep 600"],
                "readinessProbe": {"exec": {"command": ["sh", "-c", probe]},
                                   "periodSeconds": 1, "timeoutSeconds": 10, "failureThreshold": 1},
                "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"},
                                 {"name": "marks", "mountPath": "/marks"}]}],
            "volumes": [{"name": "scratch", "emptyDir": {}},
                        {"name": "marks", "hostPath": {"path": marks.path().to_string_lossy()}}],
        }}),
    );
    let pp = PostParams::default();
    pods.create(&pp, &old).await.unwrap();
    let first = wait_pod(pods, "reborn", "Ready", LONG, support::is_ready).await;
    let old_uid = first.metadata.uid.clone().unwrap();
    let old_ip = support::pod_ip(&first).expect("the first Pod has an IP");
    let old_pid: u32 = first
        .status
        .as_ref()
        .unwrap()
        .container_statuses
        .as_ref()
        .unwrap()[0]
        .container_id
        .clone()
        .unwrap()
        .trim_start_matches("process://")
        .parse()
        .unwrap();
    let started = Instant::now();
    while !slow.exists() {
        assert!(
            started.elapsed() < LONG,
            "the second, slow probe never started"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let force = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    pods.delete("reborn", &force).await.unwrap();
    // The replacement is held unscheduled (so no worker of its own writes its status) until
    // the old worker is past its status write: it writes after the probe, and only then
    // reads the deletion and kills the old container.
    let gate = "testbed.rustqueue.io/hold";
    let replacement = pod(
        "reborn",
        "Always",
        "sleep 600",
        json!({"spec": {"schedulingGates": [{"name": gate}]}}),
    );
    pods.create(&pp, &replacement).await.unwrap();
    let deleted = Instant::now();
    while support::process_running(old_pid) {
        assert!(
            deleted.elapsed() < LONG,
            "the deleted Pod's container still runs"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let held = pods.get("reborn").await.unwrap();
    assert_ne!(held.metadata.uid.as_deref(), Some(old_uid.as_str()));
    assert_eq!(
        support::pod_ip(&held),
        None,
        "the deleted Pod's worker wrote its status ({old_ip}) into its unscheduled replacement: {:#?}",
        held.status
    );
    pods.patch(
        "reborn",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"schedulingGates": null}})),
    )
    .await
    .unwrap();
    let new = wait_pod(
        pods,
        "reborn",
        "the replacement Ready",
        LONG,
        support::is_ready,
    )
    .await;
    assert_ne!(support::pod_ip(&new), Some(old_ip));
    pods.delete("reborn", &force).await.unwrap();
}
