//! A Pod watch that records the largest number of brokers unready at the same moment, the
//! measure of "one disruption at a time": a broker is unready while its Pod is missing, not
//! Ready, or terminating. Every watch event is a sample, so no transition is missed between
//! polls.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::runtime::watcher;
use tokio::task::JoinHandle;

/// What a broker Pod looked like in the last event about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodView {
    /// Pod UID (a replacement has a new one).
    pub uid: String,
    /// Ready condition true and not terminating.
    pub ready: bool,
    /// `status.podIP`, once assigned.
    pub ip: Option<String>,
    /// The `rustqueue.io/revision` annotation.
    pub revision: Option<String>,
}

/// The worst moment seen so far.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Worst {
    /// How many brokers were unready at once.
    pub unready: usize,
    /// Which ones.
    pub names: Vec<String>,
}

#[derive(Debug, Default)]
struct State {
    pods: BTreeMap<String, PodView>,
    synced: bool,
    worst: Worst,
    events: usize,
}

type OnChange = Box<dyn Fn(&BTreeMap<String, PodView>) + Send + Sync>;

/// A running watch over the broker Pods `names` (matched by `selector`).
pub struct UnreadyWatch {
    state: Arc<Mutex<State>>,
    task: JoinHandle<()>,
}

impl std::fmt::Debug for UnreadyWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UnreadyWatch")
            .field("state", &self.state)
            .finish()
    }
}

fn view(p: &Pod) -> PodView {
    let status = p.status.as_ref();
    let ready = p.metadata.deletion_timestamp.is_none()
        && status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    PodView {
        uid: p.metadata.uid.clone().unwrap_or_default(),
        ready,
        ip: status.and_then(|s| s.pod_ip.clone()),
        revision: p
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("rustqueue.io/revision").cloned()),
    }
}

/// The brokers among `names` that are not Ready in `pods`.
pub fn unready(names: &[String], pods: &BTreeMap<String, PodView>) -> Vec<String> {
    names
        .iter()
        .filter(|n| !pods.get(*n).is_some_and(|p| p.ready))
        .cloned()
        .collect()
}

impl UnreadyWatch {
    /// Starts watching Pods matching `selector`; `names` are the brokers that should exist.
    /// `on_change` is called with the Pod map after every event once the watch is synced.
    pub fn start(
        pods: Api<Pod>,
        selector: &str,
        names: Vec<String>,
        on_change: impl Fn(&BTreeMap<String, PodView>) + Send + Sync + 'static,
    ) -> UnreadyWatch {
        let state = Arc::new(Mutex::new(State::default()));
        let on_change: OnChange = Box::new(on_change);
        let cfg = watcher::Config::default().labels(selector);
        let st = state.clone();
        let task = tokio::spawn(async move {
            let mut stream = watcher(pods, cfg).boxed();
            let mut init: BTreeMap<String, PodView> = BTreeMap::new();
            while let Some(ev) = stream.next().await {
                let Ok(ev) = ev else { continue };
                let mut s = st.lock().unwrap_or_else(|p| p.into_inner());
                match ev {
                    watcher::Event::Init => init.clear(),
                    watcher::Event::InitApply(p) => {
                        init.insert(p.metadata.name.clone().unwrap_or_default(), view(&p));
                    }
                    watcher::Event::InitDone => {
                        s.pods = std::mem::take(&mut init);
                        s.synced = true;
                    }
                    watcher::Event::Apply(p) => {
                        s.pods
                            .insert(p.metadata.name.clone().unwrap_or_default(), view(&p));
                    }
                    watcher::Event::Delete(p) => {
                        s.pods
                            .remove(p.metadata.name.as_deref().unwrap_or_default());
                    }
                }
                if !s.synced {
                    continue;
                }
                s.events += 1;
                let now = unready(&names, &s.pods);
                if now.len() > s.worst.unready {
                    s.worst = Worst {
                        unready: now.len(),
                        names: now,
                    };
                }
                on_change(&s.pods);
            }
        });
        UnreadyWatch { state, task }
    }

    /// The most brokers seen unready at once since the start (or the last [`reset`]).
    ///
    /// [`reset`]: UnreadyWatch::reset
    pub fn worst(&self) -> Worst {
        self.lock().worst.clone()
    }

    /// Forgets the worst moment (e.g. after the initial start-up, when all were unready).
    pub fn reset(&self) {
        self.lock().worst = Worst::default();
    }

    /// The Pods as last seen.
    pub fn pods(&self) -> BTreeMap<String, PodView> {
        self.lock().pods.clone()
    }

    /// How many events were sampled after the initial list.
    pub fn events(&self) -> usize {
        self.lock().events
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for UnreadyWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_unready_and_ready_pods_are_told_apart() {
        let names: Vec<String> = (0..3).map(|i| format!("q-{i}")).collect();
        let pod = |ready| PodView {
            uid: "u".into(),
            ready,
            ip: None,
            revision: None,
        };
        let pods = BTreeMap::from([("q-0".to_string(), pod(true)), ("q-1".into(), pod(false))]);
        assert_eq!(unready(&names, &pods), ["q-1", "q-2"]);
    }
}
