//! `rustqueuectl`: the RustQueue operator's command line, also installed as the kubectl plugin
//! `kubectl-rustqueue` (docs/cli.md).
//!
//! Reads the RustQueue and its Pods through the API server, changes it only by merge patches
//! of its spec (the operator does the rest), and talks to brokers over their HTTP contract
//! (`rustqueue_api::contract`) by Pod IP or through a port-forward it opens itself.
//!
//! ```text
//! cli      flags and subcommands            run      one function per command
//! cluster  kubeconfig, the RustQueue, Pods  reach    Pod IP or port-forward, HTTP/1.1
//! summary  status text (pure)               patch    spec merge patches (pure)
//! brokers  broker rows (pure)               stats    /v1/stats and topic sums (pure)
//! wait     Ready / operation done (pure)    nsq      the consumer `tail` speaks
//! tail     discovery lookup + consumers     report   the support bundle
//! ```

mod brokers;
mod cli;
mod cluster;
mod collect;
#[cfg(test)]
mod fixture;
mod nsq;
mod patch;
mod reach;
mod report;
mod run;
mod stats;
mod summary;
mod table;
mod tail;
mod wait;

use std::process::ExitCode;

use clap::Parser;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    match run::run(cli).await {
        Ok(code) => code,
        Err(e) => {
            let text = format!("{e:#}").replace('\n', " ");
            eprintln!("rustqueuectl: {text}");
            ExitCode::FAILURE
        }
    }
}
