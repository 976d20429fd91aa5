//! An acknowledged-vs-delivered ledger kept by the official pynsq client while the cluster
//! changes under it: a `Writer` publishing at a steady rate and a `Reader` FIN-ing everything
//! (`e2e/k8s/pynsq_ledger.py`). The test feeds it the brokers' current addresses
//! ([`Ledger::set_addresses`]) because a replaced broker Pod comes back with a new IP.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::tools::pynsq_python;

/// A running producer + consumer pair.
#[derive(Debug)]
pub struct Ledger {
    child: Option<Child>,
    dir: tempfile::TempDir,
}

/// The counts the running ledger last wrote.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// Publishes attempted.
    pub published: u64,
    /// Publishes the broker acknowledged.
    pub acked: u64,
    /// Publishes refused or lost with their connection.
    pub failed: u64,
    /// Distinct messages delivered.
    pub delivered: u64,
    /// Acknowledged but not (yet) delivered.
    pub missing: u64,
}

/// The final ledger.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// Publishes attempted.
    pub published: u64,
    /// Publishes the broker acknowledged.
    pub acked: u64,
    /// Publishes not acknowledged, by error text (a refusal while draining is expected).
    pub failed: BTreeMap<String, u64>,
    /// Distinct messages delivered.
    pub delivered: u64,
    /// Acknowledged messages never delivered: must be empty.
    pub missing: Vec<String>,
    /// Deliveries beyond the first of a message (at-least-once redeliveries).
    pub duplicates: u64,
}

impl Ledger {
    /// Starts publishing `rate` messages per second to `topic` on `addresses` (`ip:port`) and
    /// consuming them from `channel`.
    pub fn start(addresses: &[String], topic: &str, channel: &str, rate: u32) -> Ledger {
        Ledger::spawn(
            Command::new(pynsq_python()),
            addresses,
            topic,
            channel,
            rate,
        )
    }

    /// Like [`Ledger::start`], but the clients resolve names with `resolv_conf` as their
    /// `/etc/resolv.conf`, bind-mounted in a mount namespace of their own the way a Pod's is
    /// (`unshare`, root needed): `<pod>.<service>.<namespace>.svc.cluster.local:4150`
    /// addresses are looked up by the C library in the cluster DNS, as in a Pod.
    pub fn start_resolving(
        resolv_conf: &Path,
        addresses: &[String],
        topic: &str,
        channel: &str,
        rate: u32,
    ) -> Ledger {
        let mut cmd = Command::new("unshare");
        cmd.args(["--mount", "--propagation", "private", "--", "sh", "-c"])
            .arg(r#"mount --bind "$0" /etc/resolv.conf && exec "$@""#)
            .arg(resolv_conf)
            .arg(pynsq_python());
        Ledger::spawn(cmd, addresses, topic, channel, rate)
    }

    /// Runs `cmd` (the interpreter, or what wraps it) with the script and its arguments.
    fn spawn(
        mut cmd: Command,
        addresses: &[String],
        topic: &str,
        channel: &str,
        rate: u32,
    ) -> Ledger {
        let dir = tempfile::tempdir().expect("ledger work dir");
        write_addresses(&dir.path().join("addresses"), addresses);
        let child = cmd
            .arg(crate::crate_dir().join("pynsq_ledger.py"))
            .arg(dir.path())
            .args([topic, channel, &rate.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting pynsq_ledger.py");
        Ledger {
            child: Some(child),
            dir,
        }
    }

    /// Replaces the brokers' addresses; the clients connect to each new one.
    pub fn set_addresses(&self, addresses: &[String]) {
        write_addresses(&self.address_file(), addresses);
    }

    /// The file [`Ledger::set_addresses`] writes, for a writer on another task.
    pub fn address_file(&self) -> PathBuf {
        self.path("addresses")
    }

    /// What the ledger counted so far (zeros before its first report).
    pub fn progress(&self) -> Progress {
        let Ok(text) = std::fs::read_to_string(self.path("progress")) else {
            return Progress::default();
        };
        let v: Value = serde_json::from_str(&text).unwrap_or_default();
        let n = |k: &str| v[k].as_u64().unwrap_or(0);
        Progress {
            published: n("published"),
            acked: n("acked"),
            failed: n("failed"),
            delivered: n("delivered"),
            missing: n("missing"),
        }
    }

    /// Stops publishing, waits up to `settle` for every acknowledged message to be delivered,
    /// and returns the ledger.
    pub async fn finish(mut self, settle: Duration) -> Report {
        std::fs::write(self.path("stop"), settle.as_secs().to_string()).expect("stop file");
        let child = self.child.take().expect("running");
        let out = tokio::task::spawn_blocking(move || child.wait_with_output())
            .await
            .expect("join")
            .expect("waiting for pynsq_ledger.py");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "pynsq_ledger.py failed ({}):\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_str(stdout.trim())
            .unwrap_or_else(|e| panic!("ledger output {stdout:?}: {e}"));
        report_from(&v)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

impl Drop for Ledger {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Turns the script's JSON (`acked`: bodies, `delivered`: body -> count) into the report.
fn report_from(v: &Value) -> Report {
    let acked: Vec<String> = v["acked"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|b| b.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let delivered: BTreeMap<String, u64> = v["delivered"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, c)| (k.clone(), c.as_u64().unwrap_or(0)))
                .collect()
        })
        .unwrap_or_default();
    let failed = v["errors"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, c)| (k.clone(), c.as_u64().unwrap_or(0)))
                .collect()
        })
        .unwrap_or_default();
    Report {
        published: v["published"].as_u64().unwrap_or(0),
        acked: acked.len() as u64,
        failed,
        delivered: delivered.len() as u64,
        missing: acked
            .iter()
            .filter(|b| !delivered.contains_key(*b))
            .cloned()
            .collect(),
        duplicates: delivered.values().map(|c| c.saturating_sub(1)).sum(),
    }
}

/// Writes `addresses` to a ledger's [`Ledger::address_file`].
pub fn write_addresses(file: &Path, addresses: &[String]) {
    write_atomically(file, &addresses.join("\n"));
}

fn write_atomically(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).expect("writing the ledger's addresses");
    std::fs::rename(&tmp, path).expect("replacing the ledger's addresses");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_names_missing_messages_and_counts_duplicates() {
        let v = serde_json::json!({
            "published": 5,
            "acked": ["1", "2", "3"],
            "errors": {"E_DRAINING": 2},
            "delivered": {"1": 1, "3": 3, "9": 1},
        });
        let r = report_from(&v);
        assert_eq!(r.published, 5);
        assert_eq!(r.acked, 3);
        assert_eq!(r.delivered, 3);
        assert_eq!(r.missing, ["2"]);
        assert_eq!(r.duplicates, 2);
        assert_eq!(r.failed["E_DRAINING"], 2);
    }
}
