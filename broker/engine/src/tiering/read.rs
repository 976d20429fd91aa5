//! Read-through: the bodies of remote-only segments (local retention removed their `.rqlog`),
//! read from the segment's object in the bucket for a consumer that reached them.
//!
//! An object is read in aligned chunks of [`CHUNK_BYTES`] by ranged GETs; a chunk fetched for a
//! read also starts the fetch of the next one (read-ahead), and the latest [`CACHED_CHUNKS`]
//! are kept for the engine's consumers, so a channel draining a remote segment costs about one
//! request per chunk, and two channels draining the same one share them. A chunk is fetched
//! once at a time: a reader that wants a chunk already being fetched (by another consumer of
//! the channel, or by the read-ahead) waits for that fetch instead of starting its own. Every body is checked
//! against the CRC-32C of its entry (from the local index), exactly as a local read is: a body
//! that fails, or lies past the end of a short object, or in a missing one, is
//! [`RemoteFail::Damaged`] and quarantined by the caller. Any other failure (the bucket down,
//! after its own retries) is [`RemoteFail::Unavailable`]: the consumer keeps its deliveries and
//! tries again; nothing else waits for it.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use rustqueue_storage::{Entry, RemoteSegment, body_matches};
use rustqueue_tier::{Error, ObjectKey};

use super::Tiering;
use crate::lock::lock;
use crate::metrics::{Counter, EngineMetrics};

/// Bytes one ranged GET reads (the last chunk of an object is shorter).
pub(crate) const CHUNK_BYTES: u64 = 1 << 20;
/// Chunks kept in memory for all consumers of the engine (8 MiB).
pub(crate) const CACHED_CHUNKS: usize = 8;

/// Why a remote body was not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RemoteFail {
    /// The body failed its CRC-32C, or the object is short or missing: quarantine it.
    Damaged,
    /// The bucket could not be read (after its own retries): try again later.
    Unavailable(String),
}

type ChunkKey = (String, u64);

/// The engine's remote reads: a small cache of chunks, shared by its consumers, and the
/// fetches in flight.
#[derive(Default)]
pub(crate) struct RemoteReads {
    chunks: Arc<Mutex<VecDeque<(ChunkKey, Bytes)>>>,
    in_flight: Mutex<HashMap<ChunkKey, Arc<tokio::sync::OnceCell<Fetched>>>>,
}

/// A chunk as read: its bytes, or why not.
type Fetched = Result<Bytes, RemoteFail>;

/// The bodies of `entries` (of one remote-only segment, in file order), each checked against
/// its CRC-32C; the bytes fetched (read-ahead too) and the failed reads are counted.
pub(crate) async fn read_bodies(
    tier: &Arc<Tiering>,
    metrics: &Arc<EngineMetrics>,
    seg: &RemoteSegment,
    entries: &[Entry],
) -> Vec<Result<Bytes, RemoteFail>> {
    let mut out = Vec::with_capacity(entries.len());
    for e in entries {
        let body = body(tier, metrics, seg, e).await;
        if let Err(RemoteFail::Unavailable(why)) = &body {
            metrics.add(Counter::TieringRemoteReadFailures, 1);
            tracing::warn!(key = %seg.key, error = %why, "read of a remote-only segment failed; the consumer tries again");
            // The rest would wait for the same bucket: the consumer tries them again too.
            out.extend(entries[out.len()..].iter().map(|_| body.clone()));
            break;
        }
        out.push(body);
    }
    out
}

/// Fetches the chunks that hold the bodies of `entries` into the cache, without holding any
/// delivery budget: a consumer calls it before it reserves budget for the read, so a bucket
/// that is slow or down holds up that consumer alone, never the budget local reads share.
/// `Err` only when the bucket is unavailable (counted); damage is left to the read.
pub(crate) async fn prefetch(
    tier: &Arc<Tiering>,
    metrics: &Arc<EngineMetrics>,
    seg: &RemoteSegment,
    entries: &[Entry],
) -> Result<(), String> {
    let mut chunks: Vec<u64> = entries
        .iter()
        .filter(|e| e.body_len > 0 && e.body_offset + u64::from(e.body_len) <= seg.size)
        .flat_map(|e| {
            let end = e.body_offset + u64::from(e.body_len);
            e.body_offset / CHUNK_BYTES..=(end - 1) / CHUNK_BYTES
        })
        .collect();
    chunks.dedup();
    for k in chunks.into_iter().take(CACHED_CHUNKS) {
        match chunk(tier, metrics, seg, k).await.0 {
            Ok(_) => {}
            Err(RemoteFail::Damaged) => return Ok(()),
            Err(RemoteFail::Unavailable(why)) => {
                metrics.add(Counter::TieringRemoteReadFailures, 1);
                tracing::warn!(key = %seg.key, error = %why, "read of a remote-only segment failed; the consumer tries again");
                return Err(why);
            }
        }
    }
    Ok(())
}

async fn body(
    tier: &Arc<Tiering>,
    metrics: &Arc<EngineMetrics>,
    seg: &RemoteSegment,
    e: &Entry,
) -> Result<Bytes, RemoteFail> {
    let reads = &tier.reads;
    let (start, end) = (e.body_offset, e.body_offset + u64::from(e.body_len));
    if end > seg.size {
        return Err(RemoteFail::Damaged);
    }
    if start == end {
        return check(e, Bytes::new());
    }
    let mut body = BytesMut::with_capacity(e.body_len as usize);
    let (first, last) = (start / CHUNK_BYTES, (end - 1) / CHUNK_BYTES);
    for k in first..=last {
        let (chunk, fetched_here) = chunk(tier, metrics, seg, k).await;
        let chunk = chunk?;
        // Read-ahead: the next chunk, while this one is delivered.
        if fetched_here && (k + 1) * CHUNK_BYTES < seg.size && !reads.has(&seg.key, k + 1) {
            let (t, m, s) = (tier.clone(), metrics.clone(), seg.clone());
            tokio::spawn(async move {
                let _ = self::chunk(&t, &m, &s, k + 1).await;
            });
        }
        let base = k * CHUNK_BYTES;
        let from = start.max(base) - base;
        let to = end.min(base + chunk.len() as u64) - base;
        if to <= from || to as usize > chunk.len() {
            return Err(RemoteFail::Damaged);
        }
        body.extend_from_slice(&chunk[from as usize..to as usize]);
    }
    check(e, body.freeze())
}

/// Chunk `k` of the segment's object, from the cache or the bucket (the bytes fetched are
/// counted), and whether this call fetched it.
async fn chunk(
    tier: &Arc<Tiering>,
    metrics: &Arc<EngineMetrics>,
    seg: &RemoteSegment,
    k: u64,
) -> (Fetched, bool) {
    let (got, fetched_here) = tier
        .reads
        .get_or_fetch(&seg.key, k, || fetch(tier, seg, k))
        .await;
    if fetched_here && let Ok(c) = &got {
        metrics.add(Counter::TieringReadThroughBytes, c.len() as u64);
    }
    (got, fetched_here)
}

impl RemoteReads {
    /// Chunk `k` of object `key`: cached, or the result of the fetch in flight for it, or of
    /// `fetch` (kept in the cache when it succeeds); and whether `fetch` ran in this call. A
    /// failed fetch is not remembered: the next reader fetches again.
    async fn get_or_fetch<F: Future<Output = Fetched>>(
        &self,
        key: &str,
        k: u64,
        fetch: impl FnOnce() -> F,
    ) -> (Fetched, bool) {
        let id = (key.to_owned(), k);
        let flight = {
            let mut flights = lock(&self.in_flight);
            // Under the flights' lock: a fetch keeps its chunk before it lands, so a chunk
            // with no flight is either cached or needs fetching.
            if let Some(c) = self.cached(key, k) {
                return (Ok(c), false);
            }
            flights.entry(id.clone()).or_default().clone()
        };
        let mut fetched_here = false;
        let got = flight
            .get_or_init(|| {
                fetched_here = true;
                async {
                    let got = fetch().await;
                    if let Ok(c) = &got {
                        self.keep(key, k, c.clone());
                    }
                    got
                }
            })
            .await
            .clone();
        // Land the flight (the first of its readers to get here does).
        let mut flights = lock(&self.in_flight);
        if flights.get(&id).is_some_and(|f| Arc::ptr_eq(f, &flight)) {
            flights.remove(&id);
        }
        (got, fetched_here)
    }

    /// Chunk `k` of `key` is cached or being fetched.
    fn has(&self, key: &str, k: u64) -> bool {
        lock(&self.in_flight).contains_key(&(key.to_owned(), k)) || self.cached(key, k).is_some()
    }

    fn cached(&self, key: &str, k: u64) -> Option<Bytes> {
        lock(&self.chunks)
            .iter()
            .find(|((ck, ci), _)| *ci == k && ck == key)
            .map(|(_, b)| b.clone())
    }

    fn keep(&self, key: &str, k: u64, bytes: Bytes) {
        let mut chunks = lock(&self.chunks);
        if chunks.iter().any(|((ck, ci), _)| *ci == k && ck == key) {
            return;
        }
        chunks.push_back(((key.to_string(), k), bytes));
        while chunks.len() > CACHED_CHUNKS {
            chunks.pop_front();
        }
    }
}

/// The same check as a local read's (`read_body_from`): the entry's CRC-32C.
fn check(e: &Entry, body: Bytes) -> Result<Bytes, RemoteFail> {
    if body_matches(e, &body) {
        Ok(body)
    } else {
        Err(RemoteFail::Damaged)
    }
}

/// Chunk `k` of the segment's object, whole: a short answer (the object is shorter than
/// recorded) or a missing object is damage; anything else is the bucket unavailable.
async fn fetch(tier: &Tiering, seg: &RemoteSegment, k: u64) -> Fetched {
    let start = k * CHUNK_BYTES;
    let end = (start + CHUNK_BYTES).min(seg.size);
    let key = ObjectKey::new(seg.key.clone()).map_err(|_| RemoteFail::Damaged)?;
    let unavailable = |e: Error| match e {
        Error::NotFound { .. } => RemoteFail::Damaged,
        e => RemoteFail::Unavailable(e.to_string()),
    };
    let mut stream = tier
        .bucket
        .get_range(&key, start..end)
        .await
        .map_err(unavailable)?;
    let mut bytes = BytesMut::with_capacity((end - start) as usize);
    while let Some(chunk) = stream.next().await {
        bytes.extend_from_slice(&chunk.map_err(unavailable)?);
    }
    if bytes.len() as u64 != end - start {
        return Err(RemoteFail::Damaged);
    }
    Ok(bytes.freeze())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn readers_of_a_chunk_being_fetched_wait_for_that_fetch() {
        let reads = Arc::new(RemoteReads::default());
        let fetches = Arc::new(AtomicU32::new(0));
        let mut readers = Vec::new();
        for _ in 0..4 {
            let (reads, fetches) = (reads.clone(), fetches.clone());
            readers.push(tokio::spawn(async move {
                reads
                    .get_or_fetch("seg", 3, || async {
                        fetches.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        Ok(Bytes::from_static(b"chunk"))
                    })
                    .await
            }));
        }
        let mut fetched_here = 0;
        for r in readers {
            let (got, here) = r.await.unwrap();
            assert_eq!(got, Ok(Bytes::from_static(b"chunk")));
            fetched_here += u32::from(here);
        }
        assert_eq!(fetches.load(Ordering::SeqCst), 1);
        assert_eq!(fetched_here, 1, "one reader says it fetched");
        assert!(lock(&reads.in_flight).is_empty(), "the flight landed");
        // Kept: a later reader takes it from the cache.
        let (got, here) = reads
            .get_or_fetch("seg", 3, || async { panic!("cached") })
            .await;
        assert_eq!((got, here), (Ok(Bytes::from_static(b"chunk")), false));
        assert!(reads.has("seg", 3) && !reads.has("seg", 4) && !reads.has("other", 3));
    }

    #[tokio::test]
    async fn a_failed_fetch_is_not_remembered() {
        let reads = RemoteReads::default();
        let (got, here) = reads
            .get_or_fetch("seg", 0, || async {
                Err(RemoteFail::Unavailable("down".into()))
            })
            .await;
        assert_eq!(
            (got, here),
            (Err(RemoteFail::Unavailable("down".into())), true)
        );
        assert!(!reads.has("seg", 0));
        let (got, here) = reads
            .get_or_fetch("seg", 0, || async { Ok(Bytes::from_static(b"back")) })
            .await;
        assert_eq!((got, here), (Ok(Bytes::from_static(b"back")), true));
    }

    #[tokio::test]
    async fn a_reader_dropped_mid_fetch_leaves_the_chunk_to_the_next() {
        let reads = Arc::new(RemoteReads::default());
        let r = reads.clone();
        let stuck = tokio::spawn(async move {
            r.get_or_fetch("seg", 1, std::future::pending::<Fetched>)
                .await
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        stuck.abort();
        let _ = stuck.await;
        let (got, here) = reads
            .get_or_fetch("seg", 1, || async { Ok(Bytes::from_static(b"x")) })
            .await;
        assert_eq!((got, here), (Ok(Bytes::from_static(b"x")), true));
    }
}
