//! Table tests of the console's part in a plan: `Ready` waits for its Deployment while it is
//! enabled and ignores it while disabled, and turning it off removes it.

use super::tests::{run, spec};
use super::*;

fn cond(p: &Plan, t: &str) -> ConditionSpec {
    p.conditions.iter().find(|c| c.type_ == t).cloned().unwrap()
}

fn brokers() -> builder::ObservedBuilder {
    Observed::test().brokers(3).at_revision("b")
}

#[test]
fn ready_waits_for_the_console_deployment_while_the_console_is_enabled() {
    let not_seen = Workload {
        observed: false,
        ..Workload::available(1)
    };
    let starting = Workload {
        ready: 0,
        ..Workload::available(1)
    };
    // (console enabled, console Deployment, Ready, RuntimeAvailable reason, message says)
    let rows: [(bool, Option<Workload>, bool, &str, &str); 6] = [
        (
            true,
            Some(Workload::available(1)),
            true,
            "AllReady",
            "console 1 Pod Ready",
        ),
        (
            true,
            None,
            false,
            "ConsoleUnavailable",
            "console: not created yet",
        ),
        (
            true,
            Some(not_seen),
            false,
            "ConsoleUnavailable",
            "has not seen the latest spec",
        ),
        (
            true,
            Some(starting),
            false,
            "ConsoleUnavailable",
            "0 of 1 Ready",
        ),
        (false, None, true, "AllReady", "gateway 3 Pods Ready"),
        // being deleted: a disabled console never holds Ready back
        (
            false,
            Some(starting),
            true,
            "AllReady",
            "gateway 3 Pods Ready",
        ),
    ];
    for (enabled, console, ready, reason, says) in rows {
        let mut s = spec();
        s.console.enabled = enabled;
        let p = run(&s, &brokers().console(console).build(), None);
        let what = format!("enabled {enabled}, {console:?}");
        assert_eq!(p.phase, Phase::Ready, "the brokers are done: {what}");
        let runtime = cond(&p, "RuntimeAvailable");
        assert_eq!(runtime.status, ready, "{what}");
        assert_eq!(runtime.reason, reason, "{what}");
        assert!(
            runtime.message.contains(says),
            "{what}: {}",
            runtime.message
        );
        let r = cond(&p, "Ready");
        assert_eq!(r.status, ready, "Ready never overstates: {what}");
        if !ready {
            assert_eq!(r.reason, "WaitingForRuntime");
            assert!(cond(&p, "Progressing").status);
            assert!(!cond(&p, "Degraded").status);
        }
    }
}

#[test]
fn an_unavailable_console_beside_an_unavailable_gateway_names_both() {
    let p = run(
        &spec(),
        &brokers().gateway(None).console(None).build(),
        None,
    );
    let runtime = cond(&p, "RuntimeAvailable");
    assert_eq!(runtime.reason, "RuntimeUnavailable");
    assert_eq!(
        runtime.message,
        "gateway: not created yet; console: not created yet"
    );
}

#[test]
fn turning_the_console_off_deletes_it_once_and_never_while_it_runs_by_the_spec() {
    let deletes = |enabled: bool, console: Option<Workload>| {
        let mut s = spec();
        s.console.enabled = enabled;
        run(&s, &brokers().console(console).build(), None)
            .actions
            .iter()
            .filter(|a| **a == Action::DeleteConsole)
            .count()
    };
    assert_eq!(deletes(false, Some(Workload::available(1))), 1);
    assert_eq!(deletes(false, None), 0, "already gone");
    assert_eq!(deletes(true, Some(Workload::available(1))), 0);
    assert_eq!(deletes(true, None), 0, "created by ApplyRuntime instead");
}

#[test]
fn the_console_is_applied_with_the_runtime_while_a_rollout_is_blocked() {
    // one broker cannot be replaced: the runtime (and with it the console) is still applied
    let mut s = spec();
    s.min_brokers = 1;
    let obs = Observed::test().brokers(1).nodes(1).build();
    let p = run(&s, &obs, None);
    assert_eq!(p.phase, Phase::RolloutBlocked);
    assert!(
        p.actions
            .iter()
            .any(|a| matches!(a, Action::ApplyRuntime { .. }))
    );
}
