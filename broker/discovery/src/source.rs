//! Where the broker endpoints come from: a static list, or the EndpointSlices of the brokers'
//! headless Service (watched with kube-rs). Either way the result is a [`View`] on a
//! `tokio::sync::watch` channel; the poller refreshes as soon as it changes.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::api::ListParams;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;

use crate::Shared;

/// The current endpoint set (`host:port` of each broker's HTTP listener).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct View {
    /// Broker HTTP endpoints.
    pub endpoints: BTreeSet<String>,
    /// `None` while the source is trustworthy, else why not (watch error, not listed yet).
    pub problem: Option<String>,
}

/// A fixed list: always healthy.
pub fn static_view(addresses: &[String]) -> View {
    View {
        endpoints: addresses
            .iter()
            .map(|a| a.trim().to_string())
            .filter(|a| !a.is_empty())
            .collect(),
        problem: None,
    }
}

/// `host:port`, with brackets around an IPv6 host.
pub fn endpoint_key(address: &str, port: u16) -> String {
    if address.contains(':') {
        format!("[{address}]:{port}")
    } else {
        format!("{address}:{port}")
    }
}

/// The endpoints of one EndpointSlice: every address of every endpoint not marked
/// `terminating` (not-ready endpoints are included: the headless Service publishes not-ready
/// addresses, and a draining broker must still be polled). Port: the one named `http`, else
/// the first, else `fallback_port`.
pub fn slice_endpoints(slice: &EndpointSlice, fallback_port: u16) -> Vec<String> {
    let ports = slice.ports.as_deref().unwrap_or_default();
    let port = ports
        .iter()
        .find(|p| p.name.as_deref() == Some("http"))
        .or_else(|| ports.first())
        .and_then(|p| p.port)
        .and_then(|p| u16::try_from(p).ok())
        .unwrap_or(fallback_port);
    let mut out = Vec::new();
    for ep in slice.endpoints.iter().flatten() {
        let terminating = ep
            .conditions
            .as_ref()
            .and_then(|c| c.terminating)
            .unwrap_or(false);
        if terminating {
            continue;
        }
        for a in &ep.addresses {
            out.push(endpoint_key(a, port));
        }
    }
    out
}

fn slice_name(s: &EndpointSlice) -> String {
    s.metadata.name.clone().unwrap_or_default()
}

fn union(slices: &BTreeMap<String, Vec<String>>) -> BTreeSet<String> {
    slices.values().flatten().cloned().collect()
}

/// How often the apiserver is probed while watching.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(2);
/// A probe that takes longer than this counts as a failure.
pub const PROBE_TIMEOUT: Duration = Duration::from_millis(1500);

/// Watch the EndpointSlices labelled `kubernetes.io/service-name=<service>` in `api`'s
/// namespace and publish every change. Errors mark the view as a problem (the poller then
/// stops counting refreshes as successes, so the service fails closed after
/// [`crate::STALE_AFTER`]) while the watcher backs off and re-lists.
///
/// A watch that goes silent (a partitioned apiserver, a dead proxy) sends no error, so every
/// [`PROBE_INTERVAL`] a one-item list of the same slices must also answer within
/// [`PROBE_TIMEOUT`]; until one does, the view carries the problem.
pub async fn watch_endpoint_slices(
    api: Api<EndpointSlice>,
    service: String,
    fallback_port: u16,
    tx: watch::Sender<View>,
    shared: Arc<Shared>,
) {
    let selector = format!("kubernetes.io/service-name={service}");
    let cfg = watcher::Config::default().labels(&selector);
    let mut stream = watcher(api.clone(), cfg).default_backoff().boxed();
    let mut probe = tokio::time::interval(PROBE_INTERVAL);
    probe.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let probe_params = ListParams::default().labels(&selector).limit(1);
    let mut slices: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut buffer: Option<BTreeMap<String, Vec<String>>> = None;
    let mut watch_problem: Option<String> = Some("EndpointSlices not listed yet".into());
    let mut probe_problem: Option<String> = None;
    loop {
        tokio::select! {
            ev = stream.next() => {
                let Some(ev) = ev else { break };
                match ev {
                    Ok(watcher::Event::Init) => {
                        buffer = Some(BTreeMap::new());
                        continue;
                    }
                    Ok(watcher::Event::InitApply(s)) => {
                        buffer
                            .get_or_insert_with(BTreeMap::new)
                            .insert(slice_name(&s), slice_endpoints(&s, fallback_port));
                        continue;
                    }
                    Ok(watcher::Event::InitDone) => {
                        slices = buffer.take().unwrap_or_default();
                        watch_problem = None;
                    }
                    Ok(watcher::Event::Apply(s)) => {
                        slices.insert(slice_name(&s), slice_endpoints(&s, fallback_port));
                    }
                    Ok(watcher::Event::Delete(s)) => {
                        slices.remove(&slice_name(&s));
                    }
                    Err(e) => {
                        shared.metrics.endpoint_slice_errors.inc();
                        tracing::warn!(error = %e, "EndpointSlice watch failed; retrying");
                        watch_problem = Some(format!("EndpointSlice watch: {e}"));
                    }
                }
            }
            _ = probe.tick() => {
                let listed = api.list_metadata(&probe_params);
                probe_problem = match tokio::time::timeout(PROBE_TIMEOUT, listed).await {
                    Ok(Ok(_)) => None,
                    Ok(Err(e)) => {
                        shared.metrics.endpoint_slice_errors.inc();
                        Some(format!("EndpointSlice list: {e}"))
                    }
                    Err(_) => {
                        shared.metrics.endpoint_slice_timeouts.inc();
                        Some(format!(
                            "EndpointSlice list took longer than {} ms",
                            PROBE_TIMEOUT.as_millis()
                        ))
                    }
                };
                if let Some(p) = &probe_problem {
                    tracing::warn!(problem = %p, "apiserver probe failed");
                }
            }
        }
        let view = View {
            endpoints: union(&slices),
            problem: watch_problem.clone().or_else(|| probe_problem.clone()),
        };
        tx.send_if_modified(|cur| {
            if *cur == view {
                false
            } else {
                *cur = view;
                true
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn slices_keep_not_ready_and_drop_terminating() {
        let s: EndpointSlice = serde_json::from_value(json!({
            "metadata": {"name": "b-1"},
            "addressType": "IPv4",
            "ports": [{"name": "tcp", "port": 4150}, {"name": "http", "port": 4151}],
            "endpoints": [
                {"addresses": ["10.0.0.1"], "conditions": {"ready": true}},
                {"addresses": ["10.0.0.2"], "conditions": {"ready": false}},
                {"addresses": ["10.0.0.3"], "conditions": {"ready": false, "terminating": true}},
                {"addresses": ["fd00::4"]}
            ]
        }))
        .unwrap();
        assert_eq!(
            slice_endpoints(&s, 9),
            vec!["10.0.0.1:4151", "10.0.0.2:4151", "[fd00::4]:4151"]
        );
        let bare: EndpointSlice = serde_json::from_value(json!({
            "metadata": {"name": "b-2"}, "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.0.0.9"]}]
        }))
        .unwrap();
        assert_eq!(slice_endpoints(&bare, 4151), vec!["10.0.0.9:4151"]);
    }

    #[test]
    fn static_lists_are_trimmed() {
        let v = static_view(&[" a:1".into(), "".into(), "b:2".into()]);
        assert_eq!(
            v.endpoints.into_iter().collect::<Vec<_>>(),
            vec!["a:1", "b:2"]
        );
        assert!(v.problem.is_none());
    }
}
