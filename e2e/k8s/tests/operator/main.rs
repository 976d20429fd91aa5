//! The operator on the testbed, the way a user runs it: installed from `config/` (two
//! replicas), the sample RustQueue on three eligible Nodes, then one behaviour per named step
//! on that one cluster start-up (a testbed per step would cost a control plane start each).
//!
//! Needs `rustqueued` and `rustqueue-operator` in `$RUSTQUEUE_E2E_BIN_DIR` (`make e2e` builds
//! them), the testbed's control plane, kubectl and pynsq (`scripts/deps.sh k8s kubectl python`).

mod basics;
mod cluster;

use rustqueue_e2e::steps::step;

use basics::*;
use cluster::Cluster;

/// Runs `f(args)` as the step named `f`.
macro_rules! step {
    ($f:ident($($a:expr),*)) => {
        step(stringify!($f), $f($($a),*))
    };
}

#[test]
fn operator_runs_the_sample_cluster_and_survives_pod_and_leader_loss() {
    // The testbed's private network namespace: Pod IPs are reachable from this test.
    rustqueue_testbed::netns::isolated_runtime()
        .expect("private network namespace")
        .block_on(async {
            let c = Cluster::start().await;
            step!(the_operator_installs_from_config_default(&c)).await;
            step!(the_sample_becomes_ready_for_kubectl_wait(&c)).await;
            step!(the_printer_columns_show_phase_desired_and_ready(&c)).await;
            step!(argocd_health_reads_the_ready_cluster_as_healthy(&c)).await;
            step!(messages_published_over_http_reach_a_pynsq_reader(&c)).await;
            step!(a_deleted_broker_returns_on_its_pvc_with_its_backlog(&c)).await;
            let leader = step!(the_standby_takes_the_lease_when_the_leader_dies(&c)).await;
            step!(the_new_leader_reconciles_and_reports_leadership(
                &c, &leader
            ))
            .await;
            step!(phase_transitions_are_recorded_as_events(&c)).await;
            step!(the_api_server_refuses_min_brokers_above_max(&c)).await;
        });
}
