//! The command line: global flags like kubectl's, one subcommand per operator task, and an
//! example under every `--help`.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use rustqueue_api::labels::BROKER_HTTP_PORT;

const EXAMPLES: &str = "\
Examples:
  rustqueuectl status                          # the RustQueue `rustqueue` in the current namespace
  kubectl rustqueue -n prod --name queue status  # the same, as a kubectl plugin
  rustqueuectl rollout approve                 # let a canary rollout finish
  rustqueuectl wait --for ready --timeout 10m  # for scripts and CI (exit 0 when Ready)

Exit status: 0 success, 1 failure (one line on stderr saying what failed), 2 `wait` timed out.";

/// Operate a RustQueue: status, brokers, topics, rollouts, maintenance, storage, support
/// bundles. Every change is a merge patch of the RustQueue's spec that the operator acts on.
#[derive(Debug, Parser)]
// A flag given twice takes its last value, as with kubectl (a plugin wrapper may add defaults).
#[command(name = "rustqueuectl", version, after_help = EXAMPLES, args_override_self = true)]
pub struct Cli {
    /// Namespace of the RustQueue (default: the kubeconfig context's namespace).
    #[arg(short = 'n', long, env = "RUSTQUEUE_NAMESPACE", global = true)]
    pub namespace: Option<String>,
    /// Name of the RustQueue.
    #[arg(
        long,
        env = "RUSTQUEUE_NAME",
        default_value = "rustqueue",
        global = true
    )]
    pub name: String,
    /// Path of the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then in-cluster).
    #[arg(long, global = true)]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: its current context).
    #[arg(long, global = true)]
    pub context: Option<String>,
    /// How to reach broker and discovery Pods: by Pod IP when it answers, else through a
    /// port-forward the tool opens (`auto`), or only one of the two.
    #[arg(long, value_enum, default_value_t = Via::Auto, global = true)]
    pub via: Via,
    /// HTTP port of the brokers.
    #[arg(long, env = "RUSTQUEUE_BROKER_HTTP_PORT", default_value_t = BROKER_HTTP_PORT, global = true)]
    pub broker_http_port: u16,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// How Pods are reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Via {
    /// The Pod IP when a connection to it opens within a second, else a port-forward.
    Auto,
    /// Only the Pod IP (inside the cluster's network).
    PodIp,
    /// Only a port-forward through the API server (from anywhere kubectl works).
    PortForward,
}

/// Output format of commands that print objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Human-readable.
    Table,
    /// JSON, for scripts.
    Json,
    /// YAML.
    Yaml,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Phase, conditions, the current operation and what it waits for.
    #[command(
        after_help = "Example:\n  rustqueuectl status -n rustqueue-system --name queue\n  rustqueuectl status -o json | jq .status.phase"
    )]
    Status {
        /// Output format.
        #[arg(short = 'o', long, value_enum, default_value_t = Format::Table)]
        output: Format,
    },
    /// Every broker: readiness, Node, IP, revision, image, claim, disk use and depth.
    #[command(after_help = "Example:\n  rustqueuectl brokers\n  rustqueuectl brokers -o json")]
    Brokers {
        /// Output format.
        #[arg(short = 'o', long, value_enum, default_value_t = Format::Table)]
        output: Format,
    },
    /// Topics and channels summed over the brokers that own them (from each broker's /v1/stats).
    #[command(
        after_help = "Example:\n  rustqueuectl topics\n  rustqueuectl topics --topic orders -o yaml"
    )]
    Topics {
        /// Only this topic.
        #[arg(long)]
        topic: Option<String>,
        /// Output format.
        #[arg(short = 'o', long, value_enum, default_value_t = Format::Table)]
        output: Format,
    },
    /// Each broker's /v1/stats, one `pod<TAB>json` line per broker.
    #[command(after_help = "Example:\n  rustqueuectl stats | cut -f2 | jq '.topics[].name'")]
    Stats,
    /// Check every record on every broker's claim (POST /v1/storage/scrub, admin token).
    #[command(after_help = "Example:\n  rustqueuectl scrub")]
    Scrub,
    /// Drain one broker for maintenance, or give it back.
    #[command(
        after_help = "Example:\n  rustqueuectl maintenance queue-1 enable\n  rustqueuectl maintenance queue-1 disable"
    )]
    Maintenance {
        /// The broker Pod (`<name>-<ordinal>`).
        broker: String,
        /// enable or disable.
        #[arg(value_enum)]
        action: Toggle,
    },
    /// Grow every broker's claim (claims never shrink).
    #[command(after_help = "Example:\n  rustqueuectl storage 200Gi")]
    Storage {
        /// The new `storageSize`, a Kubernetes quantity.
        size: String,
    },
    /// Steer an image rollout.
    #[command(subcommand)]
    Rollout(Rollout),
    /// Wait until the RustQueue is Ready, or its operation is done; prints each phase change.
    #[command(
        after_help = "Example:\n  rustqueuectl wait --for ready --timeout 10m\n  rustqueuectl wait --for operation-done\n\nExit status: 0 done, 1 the operation failed or is blocked, 2 timed out."
    )]
    Wait {
        /// What to wait for.
        #[arg(long = "for", value_enum, default_value_t = WaitFor::Ready)]
        for_: WaitFor,
        /// Give up after this long (`90s`, `10m`, `1h`, or seconds).
        #[arg(long, default_value = "10m", value_parser = parse_duration)]
        timeout: Duration,
    },
    /// Print the bodies of messages published to a topic from now on, like nsq_tail.
    #[command(
        after_help = "Example:\n  rustqueuectl tail orders\n  rustqueuectl tail orders -n 10 --timeout 1m"
    )]
    Tail {
        /// The topic.
        topic: String,
        /// Stop after this many messages.
        #[arg(short = 'c', long)]
        count: Option<u64>,
        /// Stop after this long (`30s`, `5m`, ...).
        #[arg(long, value_parser = parse_duration)]
        timeout: Option<Duration>,
    },
    /// Write a support bundle (tar.gz): the RustQueue, its Events, Pods, claims, StatefulSet,
    /// operator and broker logs and each broker's health, capabilities and stats. No Secret
    /// values: every token of the auth Secret is redacted from every file.
    #[command(after_help = "Example:\n  rustqueuectl report -f queue-report.tar.gz")]
    Report {
        /// Where to write the bundle (default: rustqueue-report-<name>-<time>.tar.gz).
        #[arg(short = 'f', long)]
        file: Option<PathBuf>,
    },
    /// Print a shell completion script.
    #[command(
        after_help = "Example:\n  rustqueuectl completion bash > /etc/bash_completion.d/rustqueuectl\n  rustqueuectl completion zsh > \"${fpath[1]}/_rustqueuectl\"\n  rustqueuectl completion fish > ~/.config/fish/completions/rustqueuectl.fish"
    )]
    Completion {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// `enable` or `disable`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Toggle {
    /// Turn it on.
    Enable,
    /// Turn it off.
    Disable,
}

/// What `wait` waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum WaitFor {
    /// The Ready condition is True for the current generation.
    Ready,
    /// The current operation has finished (or there is none).
    OperationDone,
}

/// `rollout` subcommands: each is a merge patch of `spec.rollout`.
#[derive(Debug, Subcommand)]
pub enum Rollout {
    /// Hold the rollout before the next broker (`rollout.paused: true`).
    #[command(after_help = "Example:\n  rustqueuectl rollout pause")]
    Pause,
    /// Continue a paused rollout.
    #[command(after_help = "Example:\n  rustqueuectl rollout resume")]
    Resume,
    /// Retry a failed (timed out) rollout with a new retry nonce.
    #[command(after_help = "Example:\n  rustqueuectl rollout retry")]
    Retry,
    /// Approve the revision the canary runs; refused unless a canary waits for approval.
    #[command(after_help = "Example:\n  rustqueuectl rollout approve")]
    Approve,
    /// Roll back to an earlier image (behind the storage reader fence).
    #[command(after_help = "Example:\n  rustqueuectl rollout rollback rustqueue:0.8.3")]
    Rollback {
        /// The image to roll back to.
        image: String,
    },
    /// Drop the rollback and go forward to `spec.image` again.
    #[command(after_help = "Example:\n  rustqueuectl rollout forward")]
    Forward,
}

/// `90s`, `10m`, `1h`, `500ms` or plain seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("`{s}` is not a duration such as 90s, 10m or 1h"))?;
    let secs = match unit {
        "" | "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        "ms" => return Ok(Duration::from_millis(n)),
        _ => return Err(format!("`{s}`: unknown unit `{unit}` (use ms, s, m or h)")),
    };
    Ok(Duration::from_secs(secs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn durations_read_like_kubectls() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("15"), Ok(Duration::from_secs(15)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("3d").is_err());
    }

    #[test]
    fn the_command_line_is_consistent_and_every_command_has_an_example() {
        let cmd = Cli::command();
        cmd.clone().debug_assert();
        for sub in cmd.get_subcommands() {
            let leaves: Vec<&clap::Command> = if sub.has_subcommands() {
                sub.get_subcommands().collect()
            } else {
                vec![sub]
            };
            for leaf in leaves {
                let help = leaf.get_after_help().map(ToString::to_string);
                assert!(
                    help.is_some_and(|h| h.contains("Example:\n  rustqueuectl")),
                    "{} has no example",
                    leaf.get_name()
                );
            }
        }
    }

    #[test]
    fn a_repeated_flag_takes_its_last_value_as_with_kubectl() {
        let cli = Cli::try_parse_from([
            "rustqueuectl",
            "--name",
            "queue",
            "--name",
            "nope",
            "status",
        ])
        .unwrap();
        assert_eq!(cli.name, "nope");
    }

    #[test]
    fn global_flags_work_after_the_subcommand_as_with_kubectl() {
        let cli = Cli::try_parse_from([
            "rustqueuectl",
            "status",
            "-n",
            "prod",
            "--name",
            "q",
            "-o",
            "json",
        ])
        .unwrap();
        assert_eq!(cli.namespace.as_deref(), Some("prod"));
        assert_eq!(cli.name, "q");
        assert!(matches!(
            cli.command,
            Command::Status {
                output: Format::Json
            }
        ));
    }
}
