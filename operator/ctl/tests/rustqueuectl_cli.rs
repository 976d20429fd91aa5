//! The binary without a cluster: refusals are one line and a non-zero exit, completions and
//! help print. (The e2e scenario drives it against a live RustQueue as `kubectl rustqueue`.)

use std::process::{Command, Output};

fn ctl(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rustqueuectl"));
    cmd.args(args)
        .env_remove("KUBECONFIG")
        .env_remove("RUSTQUEUE_NAMESPACE")
        .env_remove("RUSTQUEUE_NAME")
        .env_remove("KUBERNETES_SERVICE_HOST");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("running rustqueuectl")
}

fn one_line_failure(out: &Output) -> String {
    assert!(!out.status.success(), "it succeeded: {out:?}");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(err.lines().count(), 1, "not one line: {err}");
    assert!(err.starts_with("rustqueuectl: "), "{err}");
    err
}

#[test]
fn a_missing_kubeconfig_file_is_one_line_naming_it() {
    let out = ctl(&["--kubeconfig", "/nonexistent/kubeconfig", "status"], &[]);
    let err = one_line_failure(&out);
    assert!(err.contains("/nonexistent/kubeconfig"), "{err}");
}

#[test]
fn no_kubeconfig_at_all_says_how_to_give_one() {
    let home = std::env::temp_dir().join(format!("rqctl-home-{}", std::process::id()));
    std::fs::create_dir_all(&home).unwrap();
    let out = ctl(&["status"], &[("HOME", home.to_str().unwrap())]);
    let err = one_line_failure(&out);
    assert!(err.contains("set KUBECONFIG or pass --kubeconfig"), "{err}");
    std::fs::remove_dir_all(&home).unwrap();
}

#[test]
fn completions_print_for_bash_zsh_and_fish() {
    for (shell, marker) in [
        ("bash", "complete -F"),
        ("zsh", "#compdef rustqueuectl"),
        ("fish", "complete -c rustqueuectl"),
    ] {
        let out = ctl(&["completion", shell], &[]);
        assert!(out.status.success(), "{shell}: {out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(marker), "{shell} completion lacks {marker}");
        assert!(
            text.contains("rollout"),
            "{shell} completion lacks subcommands"
        );
    }
}

#[test]
fn help_shows_an_example_for_each_command() {
    let out = ctl(&["rollout", "approve", "--help"], &[]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("Example:\n  rustqueuectl rollout approve"),
        "{text}"
    );
}
