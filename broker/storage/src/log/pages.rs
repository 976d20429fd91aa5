//! The bounded cache of sealed-segment metadata pages, shared by every log of one store.
//!
//! The engine creates one handle from `storage.message_index_cache_bytes` and hands it to the
//! store ([`StoreOptions::page_cache`](crate::StoreOptions::page_cache)), which passes it to
//! every [`TopicLog`](super::TopicLog) it opens.
//!
//! A sealed segment keeps only its [`index::Summary`](crate::log::index::Summary) in memory; the
//! per-message [`Entry`] values are read from its `.rqidx` one page
//! ([`PAGE_ENTRIES`](crate::log::index::PAGE_ENTRIES) entries) at a time and kept here, least
//! recently used first out, within a byte bound. The cache lock is a leaf: it is held only to
//! look up, insert or drop pages, never across I/O or while taking another lock, so readers
//! that hold a topic's log lock can use it without any lock-order risk.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::Entry;

/// Default bound of a store's cache (`storage.message_index_cache_bytes` in docs/configuration.md).
pub const DEFAULT_CACHE_BYTES: usize = 64 << 20;

/// Bytes charged for one cached page beyond its entries (map nodes, `Arc` header).
const PAGE_OVERHEAD: usize = 128;

/// (log id, segment base, page number).
type Key = (u64, u64, u32);

#[derive(Default)]
struct Lru {
    pages: BTreeMap<Key, (Arc<[Entry]>, u64)>,
    by_use: BTreeMap<u64, Key>,
    tick: u64,
    bytes: usize,
    loads: u64,
}

/// A byte-bounded LRU of metadata pages.
pub struct PageCache {
    capacity: AtomicUsize,
    lru: Mutex<Lru>,
}

impl Default for PageCache {
    /// A cache bounded by [`DEFAULT_CACHE_BYTES`].
    fn default() -> PageCache {
        PageCache::new(DEFAULT_CACHE_BYTES)
    }
}

impl std::fmt::Debug for PageCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageCache")
            .field("capacity", &self.capacity())
            .field("resident_bytes", &self.resident_bytes())
            .finish()
    }
}

fn cost(page: &[Entry]) -> usize {
    std::mem::size_of_val(page) + PAGE_OVERHEAD
}

impl PageCache {
    /// A cache holding at most `capacity` bytes of pages.
    pub fn new(capacity: usize) -> PageCache {
        PageCache {
            capacity: AtomicUsize::new(capacity),
            lru: Mutex::new(Lru::default()),
        }
    }

    /// Changes the bound (pages beyond it are dropped now).
    pub fn set_capacity(&self, capacity: usize) {
        self.capacity.store(capacity, Ordering::Relaxed);
        let mut lru = self.lock();
        self.evict(&mut lru);
    }

    /// The bound in bytes.
    pub fn capacity(&self) -> usize {
        self.capacity.load(Ordering::Relaxed)
    }

    /// Bytes of pages held now.
    pub fn resident_bytes(&self) -> usize {
        self.lock().bytes
    }

    /// Pages held now.
    pub fn resident_pages(&self) -> usize {
        self.lock().pages.len()
    }

    /// Pages read from disk so far (cache misses).
    pub fn loads(&self) -> u64 {
        self.lock().loads
    }

    fn lock(&self) -> MutexGuard<'_, Lru> {
        self.lru.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The cached page, marked most recently used.
    pub(super) fn get(&self, key: Key) -> Option<Arc<[Entry]>> {
        let mut lru = self.lock();
        let tick = lru.tick + 1;
        let (page, used) = lru.pages.get_mut(&key)?;
        let page = page.clone();
        if *used + 1 == tick {
            // Already the most recently used (a reader walking one page): nothing to reorder.
            return Some(page);
        }
        let old = std::mem::replace(used, tick);
        lru.tick = tick;
        lru.by_use.remove(&old);
        lru.by_use.insert(tick, key);
        Some(page)
    }

    /// Adds a page just read from disk, evicting the least recently used beyond the bound.
    pub(super) fn insert(&self, key: Key, page: Arc<[Entry]>) {
        let mut lru = self.lock();
        lru.loads += 1;
        lru.tick += 1;
        let tick = lru.tick;
        lru.bytes += cost(&page);
        if let Some((old, used)) = lru.pages.insert(key, (page, tick)) {
            lru.bytes -= cost(&old);
            lru.by_use.remove(&used);
        }
        lru.by_use.insert(tick, key);
        self.evict(&mut lru);
    }

    fn evict(&self, lru: &mut Lru) {
        let cap = self.capacity();
        while lru.bytes > cap {
            let Some((_, key)) = lru.by_use.pop_first() else {
                break;
            };
            if let Some((page, _)) = lru.pages.remove(&key) {
                lru.bytes -= cost(&page);
            }
        }
    }

    /// Drops every page of log `log` whose segment base is in `base_from..=base_to`; used
    /// when segments are deleted or a log is closed.
    pub(super) fn forget(&self, log: u64, base_from: u64, base_to: u64) {
        let mut lru = self.lock();
        let keys: Vec<Key> = lru
            .pages
            .range((log, base_from, 0)..=(log, base_to, u32::MAX))
            .map(|(k, _)| *k)
            .collect();
        for key in keys {
            if let Some((page, used)) = lru.pages.remove(&key) {
                lru.bytes -= cost(&page);
                lru.by_use.remove(&used);
            }
        }
    }
}

/// A process-unique id for each opened log, so pages of a deleted and re-created topic
/// never alias.
pub(super) fn next_log_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(first: u64, n: u64) -> Arc<[Entry]> {
        (first..first + n)
            .map(|p| Entry {
                position: p,
                id: p,
                timestamp_ns: 0,
                available_at_ms: 0,
                body_offset: 0,
                body_len: 0,
                body_crc: 0,
                segment: 1,
            })
            .collect()
    }

    #[test]
    fn the_least_recently_used_page_goes_first_and_the_bound_holds() {
        let one = cost(&page(1, 10));
        let cache = PageCache::new(2 * one);
        cache.insert((1, 1, 0), page(1, 10));
        cache.insert((1, 1, 1), page(11, 10));
        assert!(cache.get((1, 1, 0)).is_some(), "touch page 0");
        cache.insert((1, 1, 2), page(21, 10));
        assert!(
            cache.get((1, 1, 1)).is_none(),
            "page 1 was least recently used"
        );
        assert!(cache.get((1, 1, 0)).is_some() && cache.get((1, 1, 2)).is_some());
        assert_eq!(cache.resident_bytes(), 2 * one);
        cache.forget(1, 1, 1);
        assert_eq!((cache.resident_pages(), cache.resident_bytes()), (0, 0));
        cache.insert((2, 1, 0), page(1, 10));
        cache.set_capacity(0);
        assert_eq!(cache.resident_pages(), 0);
    }
}
