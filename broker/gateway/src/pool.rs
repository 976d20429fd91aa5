//! The backends the gateway may use, keyed by broker `node_id`, and least-active placement.
//!
//! [`Pools`] holds the publish-ready brokers (where tunnels and forwarded requests go) and
//! every observed broker (reported in health and metrics). The discovery client replaces
//! both with each coherent snapshot; a backend that leaves the publish pool or changes its
//! address has its [`CancellationToken`] cancelled, which closes every tunnel placed on it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio_util::sync::CancellationToken;

/// One broker as the gateway dials it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backend {
    /// Broker node id (pools are keyed by it).
    pub node_id: u32,
    /// Address to dial (the broker's broadcast address).
    pub host: String,
    /// NSQ TCP port.
    pub tcp_port: u16,
    /// HTTP port.
    pub http_port: u16,
}

impl Backend {
    /// `host:port` of the TCP listener.
    pub fn tcp_target(&self) -> (String, u16) {
        (self.host.clone(), self.tcp_port)
    }

    /// Base URL of the HTTP listener (IPv6 hosts bracketed).
    pub fn http_base(&self) -> String {
        if self.host.contains(':') && !self.host.starts_with('[') {
            format!("http://[{}]:{}", self.host, self.http_port)
        } else {
            format!("http://{}:{}", self.host, self.http_port)
        }
    }
}

#[derive(Debug)]
struct Entry {
    backend: Backend,
    active: usize,
    /// Distinguishes this entry from a later one of the same node id.
    generation: u64,
    gone: CancellationToken,
}

/// The publish pool with its placement state.
#[derive(Debug, Default)]
struct PublishPool {
    entries: BTreeMap<u32, Entry>,
    cursor: usize,
    next_generation: u64,
}

/// Pick the least-active node; ties rotate through `cursor` in node-id order, so N
/// placements over N idle backends use each once before any is reused.
pub fn pick_least_active(actives: &[(u32, usize)], cursor: &mut usize) -> Option<u32> {
    let min = actives.iter().map(|(_, a)| *a).min()?;
    let mut ties: Vec<u32> = actives
        .iter()
        .filter(|(_, a)| *a == min)
        .map(|(n, _)| *n)
        .collect();
    ties.sort_unstable();
    let chosen = ties.get(*cursor % ties.len()).copied();
    *cursor = cursor.wrapping_add(1);
    chosen
}

/// Both pools, shared by the discovery client (writer) and the listeners (readers).
#[derive(Debug, Default)]
pub struct Pools {
    publish: Mutex<PublishPool>,
    brokers: Mutex<Vec<Backend>>,
    /// The discovery routing revision the pools were last replaced from (`None` before the
    /// first coherent snapshot and after the pools were emptied for lack of one).
    revision: Mutex<Option<u64>>,
}

/// A tunnel's claim on a backend: counts as active until dropped.
#[derive(Debug)]
pub struct Placement {
    pools: Arc<Pools>,
    /// The chosen backend.
    pub backend: Backend,
    generation: u64,
    /// Cancelled when the backend leaves the publish pool or changes address.
    pub gone: CancellationToken,
}

impl Drop for Placement {
    fn drop(&mut self) {
        let mut pool = self.pools.publish();
        if let Some(e) = pool.entries.get_mut(&self.backend.node_id)
            && e.generation == self.generation
        {
            e.active = e.active.saturating_sub(1);
        }
    }
}

impl Pools {
    fn publish(&self) -> MutexGuard<'_, PublishPool> {
        self.publish.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn brokers(&self) -> MutexGuard<'_, Vec<Backend>> {
        self.brokers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Replace both pools with the snapshot of discovery routing `revision`. Returns how
    /// many publish backends were invalidated (see [`Pools::replace`]).
    pub fn replace_at(
        &self,
        revision: Option<u64>,
        publish: Vec<Backend>,
        brokers: Vec<Backend>,
    ) -> usize {
        let invalidated = self.replace(publish, brokers);
        *self.revision.lock().unwrap_or_else(|e| e.into_inner()) = revision;
        invalidated
    }

    /// The discovery routing revision the pools follow, if any (reported by `/v1/health`, so
    /// a caller can wait until the gateway routes to what discovery publishes).
    pub fn revision(&self) -> Option<u64> {
        *self.revision.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Replace both pools. Returns how many publish backends were invalidated (left or
    /// changed address), whose tunnels are now closing.
    pub fn replace(&self, publish: Vec<Backend>, brokers: Vec<Backend>) -> usize {
        let mut pool = self.publish();
        let wanted: BTreeMap<u32, Backend> = publish.into_iter().map(|b| (b.node_id, b)).collect();
        let stale: Vec<u32> = pool
            .entries
            .iter()
            .filter(|(id, e)| wanted.get(id) != Some(&e.backend))
            .map(|(id, _)| *id)
            .collect();
        for id in &stale {
            if let Some(e) = pool.entries.remove(id) {
                e.gone.cancel();
            }
        }
        for (id, backend) in wanted {
            if !pool.entries.contains_key(&id) {
                pool.next_generation += 1;
                let generation = pool.next_generation;
                let gone = CancellationToken::new();
                pool.entries.insert(
                    id,
                    Entry {
                        backend,
                        active: 0,
                        generation,
                        gone,
                    },
                );
            }
        }
        drop(pool);
        let mut all: BTreeMap<u32, Backend> = BTreeMap::new();
        for b in brokers {
            all.entry(b.node_id).or_insert(b);
        }
        *self.brokers() = all.into_values().collect();
        stale.len()
    }

    /// Place one tunnel on the least-active publish backend.
    pub fn place(self: &Arc<Self>) -> Option<Placement> {
        let mut pool = self.publish();
        let actives: Vec<(u32, usize)> =
            pool.entries.iter().map(|(id, e)| (*id, e.active)).collect();
        let mut cursor = pool.cursor;
        let id = pick_least_active(&actives, &mut cursor)?;
        pool.cursor = cursor;
        let e = pool.entries.get_mut(&id)?;
        e.active += 1;
        Some(Placement {
            pools: self.clone(),
            backend: e.backend.clone(),
            generation: e.generation,
            gone: e.gone.clone(),
        })
    }

    /// The publish-ready backends, in node-id order.
    pub fn publish_backends(&self) -> Vec<Backend> {
        self.publish()
            .entries
            .values()
            .map(|e| e.backend.clone())
            .collect()
    }

    /// Active tunnels per publish backend (node id, count).
    #[cfg(any(test, feature = "test-support"))]
    pub fn actives(&self) -> Vec<(u32, usize)> {
        self.publish()
            .entries
            .iter()
            .map(|(id, e)| (*id, e.active))
            .collect()
    }

    /// Number of publish-ready backends.
    pub fn publish_count(&self) -> usize {
        self.publish().entries.len()
    }

    /// Every observed broker, in node-id order (Kodo stats shards read it).
    pub fn broker_backends(&self) -> Vec<Backend> {
        self.brokers().clone()
    }

    /// Number of observed brokers.
    pub fn broker_count(&self) -> usize {
        self.brokers().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(id: u32, port: u16) -> Backend {
        Backend {
            node_id: id,
            host: "127.0.0.1".into(),
            tcp_port: port,
            http_port: port + 1,
        }
    }

    #[test]
    fn n_placements_over_n_backends_use_each_once_before_reuse() {
        for n in 1..=7u32 {
            let pools = Arc::new(Pools::default());
            pools.replace(
                (1..=n).map(|i| b(i, 4000 + i as u16 * 10)).collect(),
                vec![],
            );
            let held: Vec<Placement> = (0..n).map(|_| pools.place().unwrap()).collect();
            let mut ids: Vec<u32> = held.iter().map(|p| p.backend.node_id).collect();
            ids.sort_unstable();
            assert_eq!(ids, (1..=n).collect::<Vec<_>>(), "n = {n}");
            let more: Vec<Placement> = (0..n).map(|_| pools.place().unwrap()).collect();
            assert!(
                pools.actives().iter().all(|(_, a)| *a == 2),
                "{:?}",
                pools.actives()
            );
            drop(more);
        }
    }

    #[test]
    fn placement_prefers_the_least_active_and_releases_on_drop() {
        let pools = Arc::new(Pools::default());
        pools.replace(vec![b(1, 4000), b(2, 4010), b(3, 4020)], vec![]);
        let mut p: Vec<Placement> = (0..3).map(|_| pools.place().unwrap()).collect();
        let freed = p.remove(1);
        let freed_id = freed.backend.node_id;
        drop(freed);
        assert_eq!(pools.place().unwrap().backend.node_id, freed_id);
    }

    #[test]
    fn ties_rotate_round_robin() {
        let mut cursor = 0;
        let idle = [(5, 0), (2, 0), (9, 0)];
        let picks: Vec<u32> = (0..6)
            .map(|_| pick_least_active(&idle, &mut cursor).unwrap())
            .collect();
        assert_eq!(picks, vec![2, 5, 9, 2, 5, 9]);
        assert_eq!(pick_least_active(&[], &mut cursor), None);
        assert_eq!(
            pick_least_active(&[(1, 3), (2, 1), (3, 1)], &mut 0),
            Some(2)
        );
    }

    #[test]
    fn leaving_or_moving_cancels_that_backends_tunnels_only() {
        let pools = Arc::new(Pools::default());
        pools.replace(vec![b(1, 4000), b(2, 4010), b(3, 4020)], vec![]);
        let p: Vec<Placement> = (0..3).map(|_| pools.place().unwrap()).collect();
        let by = |id: u32| p.iter().find(|x| x.backend.node_id == id).unwrap();
        // 1 leaves, 2 moves, 3 stays.
        let n = pools.replace(
            vec![b(2, 5000), b(3, 4020)],
            vec![b(2, 5000), b(3, 4020), b(7, 1)],
        );
        assert_eq!(n, 2);
        assert!(by(1).gone.is_cancelled());
        assert!(by(2).gone.is_cancelled());
        assert!(!by(3).gone.is_cancelled());
        assert_eq!(pools.broker_count(), 3);
        // The moved backend starts from zero: the old tunnel's release does not touch it.
        drop(p);
        assert_eq!(pools.actives(), vec![(2, 0), (3, 0)]);
        let again = [pools.place().unwrap(), pools.place().unwrap()];
        let moved = again.iter().find(|p| p.backend.node_id == 2).unwrap();
        assert_eq!(moved.backend.tcp_port, 5000);
    }

    #[test]
    fn empty_pool_places_nothing() {
        let pools = Arc::new(Pools::default());
        assert!(pools.place().is_none());
        assert_eq!(pools.publish_count(), 0);
    }
}
