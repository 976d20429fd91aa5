//! The operator on the testbed, the way a user runs it: installed from `config/` (two
//! replicas), the sample RustQueue on three eligible Nodes, then one behaviour per named step.
//! Three tests, each on a cluster of its own so they can run side by side (a testbed per step
//! would cost a control plane start each): clients, failover and rollouts; storage and
//! brokers; the Kodo profile.
//!
//! Needs the images `make images` built and the releases `e2e/k8s/fixture-images.sh` derives
//! from them in `$RUSTQUEUE_E2E_IMAGES`, the release `rustqueued` in `$RUSTQUEUE_E2E_BIN_DIR`
//! (`make e2e-operator` does all of it), the testbed's control plane, kubectl and pynsq
//! (`scripts/deps.sh k8s kubectl python`). With `$KUBECONFIG` set it runs on that (kind)
//! cluster instead, the images loaded there (docs/e2e.md, "Running on kind").

mod artifacts;
mod basics;
mod cluster;
mod console;
mod ctl;
mod discovery;
mod dns;
mod failures;
mod gateway;
mod kodo;
mod levels;
mod maintenance;
mod network;
mod rollout;
mod storage;
mod tiering;
mod tls;

use rustqueue_e2e::steps::{figure, step};

use artifacts::*;
use basics::*;
use cluster::{Cluster, DEV};
use console::*;
use ctl::*;
use discovery::*;
use dns::*;
use failures::*;
use gateway::*;
use kodo::*;
use levels::*;
use maintenance::*;
use network::*;
use rollout::*;
use storage::*;
use tiering::*;
use tls::*;

/// Runs `f(args)` as the step named `f`.
macro_rules! step {
    ($f:ident($($a:expr),*)) => {
        step(stringify!($f), $f($($a),*))
    };
}

/// Says that step `name` does not apply to this cluster (never on the testbed), and why.
fn not_run(name: &str, why: &str) {
    eprintln!("=== step {name} not run on this cluster: {why}");
}

/// Clients through every address the operator gives them, its failover, and image rollouts
/// with their human and automatic stops.
#[test]
fn the_operator_runs_the_sample_and_changes_it_one_safe_step_at_a_time() {
    cluster::runtime().block_on(async {
        let c = Cluster::start().await;
        step!(the_operator_installs_from_config_default(&c)).await;
        step!(pod_security_restricted_refuses_a_privileged_pod(&c)).await;
        step!(the_sample_becomes_ready_for_kubectl_wait(&c)).await;
        step!(brokers_and_operator_run_the_built_image_as_nonroot(&c)).await;
        step!(the_printer_columns_show_phase_desired_and_ready(&c)).await;
        step!(argocd_health_reads_the_ready_cluster_as_healthy(&c)).await;
        step!(network_policies_guard_every_pod_of_the_instance(&c)).await;
        step!(official_nsqadmin_lists_every_brokers_topics_through_discovery(&c)).await;
        step!(the_console_reports_the_brokers_under_load_without_message_bodies(&c)).await;
        step!(the_console_serves_its_web_pages_from_the_image(&c)).await;
        step!(turning_the_console_off_removes_it_and_on_brings_it_back(&c)).await;
        step!(messages_published_over_http_reach_a_pynsq_reader(&c)).await;
        step!(a_client_reaches_every_broker_by_its_dns_name(&c)).await;
        step!(consumers_find_every_broker_through_the_discovery_service(
            &c
        ))
        .await;
        step!(producers_reach_every_broker_through_the_gateway_and_consumers_through_discovery(&c))
            .await;
        step!(consumers_reconnect_to_a_broker_that_returns(&c)).await;
        step!(the_gateway_rotates_producer_connections_at_the_configured_age(&c)).await;
        step!(a_deleted_broker_returns_on_its_pvc_with_its_backlog(&c)).await;
        let leader = step!(the_standby_takes_the_lease_when_the_leader_dies(&c)).await;
        step!(the_new_leader_reconciles_and_reports_leadership(
            &c, &leader
        ))
        .await;
        step!(a_terminated_leader_hands_the_lease_over_at_once(&c)).await;
        step!(phase_transitions_are_recorded_as_events(&c)).await;
        step!(the_api_server_refuses_min_brokers_above_max(&c)).await;

        let t =
            step!(an_image_rollout_disrupts_one_broker_at_a_time_and_loses_no_message(&c)).await;
        figure(
            "image changed -> first object applied (3-broker rollout)",
            t.first_applied.as_secs_f64(),
            "s",
        );
        figure(
            "image changed -> Ready on the new revision (3 brokers, one at a time)",
            t.ready.as_secs_f64(),
            "s",
        );
        step!(paused_and_canary_rollouts_wait_for_a_human(&c, &DEV)).await;
        step!(an_image_that_cannot_start_is_blocked_by_preflight(&c, &DEV)).await;
        if c.is_testbed() {
            step!(a_timed_out_rollout_fails_until_a_new_retry_nonce(&c)).await;
        } else {
            let why = "its release is a directory image, which only the testbed runs";
            not_run("a_timed_out_rollout_fails_until_a_new_retry_nonce", why);
        }
    });
}

/// The sample's storage and its brokers changed one at a time, on a cluster of its own (so
/// `make test` runs it beside the first scenario): console management turned on and used
/// (create, pause, empty, delete, a console killed mid-operation), a feature level raised only after a capable
/// binary, the rollback fence it sets and a lowering refused, a rollout finished by the standby after the leader dies,
/// maintenance (also through `kubectl rustqueue`, with its other commands), claims that grow
/// and never shrink, and a drained scale-down.
#[test]
fn the_operator_changes_storage_and_brokers_one_safe_step_at_a_time() {
    cluster::runtime().block_on(async {
        let c = Cluster::start().await;
        step!(the_operator_installs_from_config_default(&c)).await;
        step!(the_sample_becomes_ready_for_kubectl_wait(&c)).await;
        let session = step!(console_management_turns_on_with_the_one_switch(&c)).await;
        let owner = step!(
            a_topic_created_in_the_console_lands_on_an_owner_and_becomes_active(&c, &session)
        )
        .await;
        step!(channels_are_paused_resumed_and_emptied_through_the_console(
            &c, &session, &owner
        ))
        .await;
        step!(a_deleted_topic_refuses_publishes_while_tombstoned(
            &c, &session, &owner
        ))
        .await;
        step!(a_console_killed_mid_operation_finishes_it_exactly_once(
            &c, &session
        ))
        .await;
        step!(a_feature_level_activates_only_after_a_capable_binary(
            &c, &DEV
        ))
        .await;
        step!(a_rollback_is_fenced_by_the_active_level(&c)).await;
        step!(the_feature_level_is_never_lowered_below_the_active_one(&c)).await;
        step!(a_standby_continues_the_leaders_rollout(&c, &DEV)).await;
        step!(maintenance_drains_a_named_broker_and_resumes_it(&c)).await;
        step!(ctl_maintenance_drains_a_broker_and_gives_it_back(&c)).await;
        step!(ctl_tail_prints_messages_published_through_the_gateway(&c)).await;
        step!(ctl_reads_brokers_topics_and_stats(&c)).await;
        step!(ctl_report_bundles_everything_but_the_tokens(&c)).await;
        step!(ctl_errors_are_one_line_and_a_non_zero_exit(&c)).await;
        if c.storage_class_expands().await {
            step!(claims_grow_with_storage_size_and_never_shrink(&c)).await;
        } else {
            let why = format!("StorageClass {} cannot expand volumes", c.storage_class);
            not_run("claims_grow_with_storage_size_and_never_shrink", &why);
        }
        step!(a_scale_down_drains_the_highest_broker_to_empty_and_keeps_its_claim(&c)).await;
    });
}

/// The Kodo compatibility profile (docs/kodo.md) on a cluster of its own: enabled under a
/// publishing Kodo stand-in, a broker killed mid-publish, a blocked and then a confirmed
/// decommission, every acknowledged message consumed at the end. Then, as the shortest of the
/// three scenarios, client TLS renewed in place (tls.rs).
#[test]
fn the_kodo_profile_moves_a_kodo_fleet_on_and_off_without_losing_a_message() {
    cluster::runtime().block_on(async {
        let c = Cluster::start().await;
        step!(the_operator_installs_from_config_default(&c)).await;
        step!(the_sample_becomes_ready_for_kubectl_wait(&c)).await;
        step!(the_brokers_take_kodo_sized_messages_before_the_profile(&c)).await;
        let mut fleet = step!(enabling_kodo_keeps_a_kodo_producer_publishing(&c)).await;
        let large =
            step!(a_broker_killed_mid_publish_keeps_every_acknowledged_kodo_message(&c)).await;
        step!(
            disabling_kodo_waits_for_confirmation_then_returns_to_the_brokers(
                &c, &mut fleet, &large
            )
        )
        .await;
        step!(a_renewed_client_certificate_reaches_new_handshakes_without_a_restart(&c)).await;
    });
}

/// Tiered storage through the operator (docs/tiering.md) on a cluster of its own, with a real
/// versitygw this test starts: a missing credentials Secret named in the status, tiering
/// turned on by one rollout, and a broker whose PVC is lost restored from the bucket before it
/// starts, every message of its uploaded segment delivered and the rest counted lost exactly.
/// Only on the testbed: its Pods share this test's network namespace, so they reach the bucket
/// on loopback.
#[test]
fn the_operator_restores_a_lost_broker_volume_from_the_bucket() {
    cluster::runtime().block_on(async {
        let c = Cluster::start().await;
        if !c.is_testbed() {
            not_run(
                "the_operator_restores_a_lost_broker_volume_from_the_bucket",
                "the test's bucket listens on the testbed's loopback",
            );
            return;
        }
        let bucket = rustqueue_tier::test_server::TestServer::start();
        step!(the_operator_installs_from_config_default(&c)).await;
        step!(the_sample_becomes_ready_for_kubectl_wait(&c)).await;
        step!(tiering_waits_for_its_credentials_secret_then_rolls_once(
            &c, &bucket
        ))
        .await;
        step!(a_broker_whose_volume_is_lost_is_restored_from_the_bucket(
            &c, &bucket
        ))
        .await;
    });
}
