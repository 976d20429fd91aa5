//! `rustqueued storage restore --from-bucket`: rebuilds a lost data directory from the bucket
//! (docs/tiering.md, "Restoring a lost volume"; docs/operations.md has the runbook).
//!
//! ```text
//! prepare    the directory empty (or --force), locked
//! catalog    nodes/<n>/catalog.json: the topics and the incarnation of each
//! per topic  checkpoint.json ─▶ list the incarnation's segments ─▶ for each, in base order:
//!            .rqidx, then .rqlog into <name>.tmp, each checked against its CRC-32C metadata
//!            (and the checkpoint's), every record's CRC, the index against the records, the
//!            log indexes contiguous ─▶ renamed into place. The first segment that fails ends
//!            the topic's chain: it and the ones after it are reported, never used.
//!            ─▶ channels, empty active segment, tiered record, manifest (storage::restore)
//! finish     FORMAT, COMPATIBILITY, broker.meta; opened and scrubbed as `storage repair` does
//! report     per topic and channel: what was restored, what was lost (exact position ranges)
//! ```
//!
//! The lost count is exact as of the topic's checkpoint: every position from the checkpoint's
//! first position through its head that no restored segment holds. What was published after
//! the checkpoint was written and never uploaded is unknown to the bucket (one period at most,
//! `checkpoint_upload_seconds`); the report gives each checkpoint's time.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustqueue_storage::restore::{self as files, RestoredTopic, SegmentSummary};
use rustqueue_storage::{Fs, Manifest, RealFs, StorageError, TieredRecord, TieredSegment};
use rustqueue_tier::{Bucket, BucketConfig, ObjectKey};

use super::checkpoint::{CHECKPOINT_FORMAT, Catalog, TopicCheckpoint};
use super::keys;
pub use plan::PositionRange;
use plan::{candidates, lost_ranges, unfinished};
pub use report::{ChannelLoss, DamagedObject, Ignored, RestoreReport, TopicRestore};
pub use rustqueue_storage::restore::{DirectoryState, directory_state};
use segments::{Fetched, fetch_segment};

mod plan;
mod report;
mod segments;

/// What to restore, from where, into where.
#[derive(Clone, Debug)]
pub struct RestoreOptions {
    /// The bucket and prefix the broker uploaded to (its `[tiering]`).
    pub bucket: BucketConfig,
    /// The node whose objects are restored (the data directory's identity).
    pub node_id: u16,
    /// The data directory to fill.
    pub data_path: PathBuf,
    /// Remove whatever the directory holds first, instead of refusing.
    pub force: bool,
}

/// Why a restore stopped before its end. The data directory is then incomplete (no
/// `FORMAT`: a start refuses it); run the restore again with `--force`.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// The data directory cannot be prepared or written.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The bucket failed (after its own retries).
    #[error("{0}; check the bucket and run the restore again with --force")]
    Bucket(rustqueue_tier::Error),
    /// The node has no catalog in the bucket.
    #[error(
        "no catalog for node {node_id} at {key} in bucket {bucket}: this node never uploaded a \
         checkpoint there (check --node-id, [tiering] bucket and prefix; checkpoints go up every \
         checkpoint_upload_seconds)"
    )]
    NoCatalog {
        /// The node.
        node_id: u16,
        /// The key looked for.
        key: String,
        /// The bucket.
        bucket: String,
    },
    /// The catalog is unreadable.
    #[error("the catalog {key} cannot be used: {detail}")]
    BadCatalog {
        /// Its key.
        key: String,
        /// What is wrong.
        detail: String,
    },
}

impl From<rustqueue_tier::Error> for RestoreError {
    fn from(e: rustqueue_tier::Error) -> Self {
        Self::Bucket(e)
    }
}

fn key(k: &str) -> Result<ObjectKey, rustqueue_tier::Error> {
    ObjectKey::new(k.to_owned())
}

/// Whether a bucket error means the object is damaged or gone (reported), rather than the
/// bucket failing (which stops the restore).
fn object_fault(e: &rustqueue_tier::Error) -> bool {
    matches!(
        e,
        rustqueue_tier::Error::Corrupt { .. }
            | rustqueue_tier::Error::NoChecksum { .. }
            | rustqueue_tier::Error::NotFound { .. }
    )
}

/// Restores node `opts.node_id`'s data directory from the bucket; `progress` is told what
/// happens, a line at a time.
pub async fn restore_from_bucket(
    opts: RestoreOptions,
    progress: &mut (dyn FnMut(String) + Send),
) -> Result<RestoreReport, RestoreError> {
    let fs: Arc<dyn Fs> = Arc::new(RealFs);
    let root = opts.data_path.clone();
    let lock = {
        let (fs, root) = (fs.clone(), root.clone());
        tokio::task::spawn_blocking(move || files::prepare(fs.as_ref(), &root, opts.force))
            .await
            .map_err(|e| StorageError::Incompatible(e.to_string()))??
    };
    let bucket = Bucket::new(opts.bucket.clone())?;
    let node = opts.node_id;
    let catalog_key = keys::catalog_key(node);
    let catalog: Catalog = match bucket.get_verified(&key(&catalog_key)?).await {
        Ok((bytes, _)) => serde_json::from_slice(&bytes).map_err(|e| RestoreError::BadCatalog {
            key: catalog_key.clone(),
            detail: e.to_string(),
        })?,
        Err(rustqueue_tier::Error::NotFound { .. }) => {
            return Err(RestoreError::NoCatalog {
                node_id: node,
                key: catalog_key,
                bucket: opts.bucket.bucket.clone(),
            });
        }
        Err(e) if object_fault(&e) => {
            return Err(RestoreError::BadCatalog {
                key: catalog_key,
                detail: e.to_string(),
            });
        }
        Err(e) => return Err(e.into()),
    };
    if catalog.format != CHECKPOINT_FORMAT || catalog.node_id != node {
        return Err(RestoreError::BadCatalog {
            key: catalog_key,
            detail: format!(
                "format {} of node {} (this build reads format {CHECKPOINT_FORMAT} of node {node})",
                catalog.format, catalog.node_id
            ),
        });
    }
    progress(format!(
        "catalog of node {node}: {} topics, written at {} ms",
        catalog.topics.len(),
        catalog.written_at_ms
    ));
    let listed: Vec<(String, u64)> = bucket
        .list(Some(&keys::node_prefix(node)))
        .await?
        .into_iter()
        .map(|l| (l.key.to_string(), l.size))
        .collect();
    let mut report = RestoreReport {
        node_id: node,
        data_path: root.clone(),
        catalog_written_at_ms: catalog.written_at_ms,
        topics: Vec::new(),
        ignored: ignored(node, &catalog, &listed),
        damaged_objects: 0,
        lost_messages: 0,
        topics_not_restored: 0,
        findings: Vec::new(),
    };
    for (i, entry) in catalog.topics.iter().enumerate() {
        progress(format!(
            "topic {} ({}/{}), incarnation {}",
            entry.topic,
            i + 1,
            catalog.topics.len(),
            entry.incarnation
        ));
        let t = restore_topic(
            &bucket,
            &opts.bucket,
            &fs,
            &root,
            node,
            &entry.topic,
            &entry.incarnation,
            &listed,
            progress,
        )
        .await?;
        report.damaged_objects += t.damaged.len();
        report.lost_messages += t.lost_messages.unwrap_or(0);
        report.topics_not_restored += usize::from(!t.restored);
        report.topics.push(t);
    }
    progress(
        "writing FORMAT, COMPATIBILITY and broker.meta; opening the directory as a start does"
            .into(),
    );
    let volume = catalog.volume.clone();
    let repaired =
        tokio::task::spawn_blocking(move || files::finish(fs, &root, node, &volume, lock))
            .await
            .map_err(|e| StorageError::Incompatible(e.to_string()))??;
    report.findings = repaired.new_findings;
    Ok(report)
}

/// Incarnations under the node's prefix that the catalog does not name, with their object
/// counts.
fn ignored(node: u16, catalog: &Catalog, listed: &[(String, u64)]) -> Vec<Ignored> {
    let topics = format!("{}/topics/", keys::node_prefix(node));
    let mut found: std::collections::BTreeMap<(String, String), usize> = Default::default();
    for (k, _) in listed {
        let Some(rest) = k.strip_prefix(&topics) else {
            continue;
        };
        let mut parts = rest.split('/');
        let (Some(hex), Some(inc)) = (parts.next(), parts.next()) else {
            continue;
        };
        let topic = keys::unhex_topic(hex).unwrap_or_else(|| hex.to_owned());
        let named = catalog
            .topics
            .iter()
            .any(|t| t.topic == topic && t.incarnation == inc);
        if !named {
            *found.entry((topic, inc.to_owned())).or_default() += 1;
        }
    }
    found
        .into_iter()
        .map(|((topic, incarnation), objects)| Ignored {
            topic,
            incarnation,
            objects,
        })
        .collect()
}

/// Writes a restored topic's files beside its segments (storage::restore::write_topic).
async fn write_restored(
    fs: &Arc<dyn Fs>,
    root: &Path,
    config: &BucketConfig,
    cp: &TopicCheckpoint,
    restored: &[(TieredSegment, SegmentSummary)],
    continues: bool,
    last: Option<u64>,
) -> Result<(), RestoreError> {
    let (topic, incarnation) = (cp.topic.as_str(), cp.incarnation.clone());
    let next_log_index = restored.last().map_or(1, |(_, s)| s.last_log_index + 1);
    let tiered = continues.then(|| {
        let mut record = TieredRecord::new(
            topic,
            config.bucket.clone(),
            config.prefix.clone(),
            incarnation,
        );
        let last_base = restored.last().map_or(0, |(s, _)| s.base);
        for s in cp.segments.iter().filter(|s| s.base <= last_base) {
            record.insert(s.clone());
        }
        for (s, _) in restored {
            record.insert(s.clone());
        }
        record
    });
    let highest = last.unwrap_or(0).max(cp.head);
    let restored_topic = RestoredTopic {
        manifest: Manifest {
            paused: cp.paused,
            next_position: highest + 1,
            unrouted_from_position: cp.unrouted_from_position,
            ..Manifest::new(topic)
        },
        channels: cp.channels.clone(),
        next_log_index,
        tiered,
    };
    let (fs2, root2) = (fs.clone(), root.to_path_buf());
    tokio::task::spawn_blocking(move || files::write_topic(fs2, &root2, &restored_topic))
        .await
        .map_err(|e| StorageError::Incompatible(e.to_string()))??;
    Ok(())
}

/// The topic's checkpoint, or the reason it cannot be used.
async fn fetch_checkpoint(
    bucket: &Bucket,
    node: u16,
    topic: &str,
    incarnation: &str,
) -> Result<Result<TopicCheckpoint, DamagedObject>, RestoreError> {
    let cp_key = keys::checkpoint_key(node, topic, incarnation);
    let detail = match bucket.get_verified(&key(&cp_key)?).await {
        Ok((bytes, _)) => match serde_json::from_slice::<TopicCheckpoint>(&bytes) {
            Ok(cp)
                if cp.format == CHECKPOINT_FORMAT
                    && cp.topic == topic
                    && cp.incarnation == incarnation =>
            {
                return Ok(Ok(cp));
            }
            Ok(cp) => format!(
                "a checkpoint of format {} for topic {:?} incarnation {}: not this topic's",
                cp.format, cp.topic, cp.incarnation
            ),
            Err(e) => format!("does not parse: {e}"),
        },
        Err(e) if object_fault(&e) => e.to_string(),
        Err(e) => return Err(e.into()),
    };
    Ok(Err(DamagedObject {
        key: cp_key,
        detail,
    }))
}

/// Restores one topic of the catalog.
#[allow(clippy::too_many_arguments)]
async fn restore_topic(
    bucket: &Bucket,
    config: &BucketConfig,
    fs: &Arc<dyn Fs>,
    root: &Path,
    node: u16,
    topic: &str,
    incarnation: &str,
    listed: &[(String, u64)],
    progress: &mut (dyn FnMut(String) + Send),
) -> Result<TopicRestore, RestoreError> {
    let mut out = TopicRestore::new(topic, incarnation);
    let cp = match fetch_checkpoint(bucket, node, topic, incarnation).await? {
        Ok(cp) => cp,
        Err(damaged) => {
            out.damaged.push(damaged);
            return Ok(out);
        }
    };
    out.checkpoint_written_at_ms = Some(cp.written_at_ms);
    out.head = Some(cp.head);
    let seg_prefix = format!("{}/", keys::segments_prefix(node, topic, incarnation));
    let mine: Vec<(String, u64)> = listed
        .iter()
        .filter(|(k, _)| k.starts_with(&seg_prefix))
        .cloned()
        .collect();
    let todo = candidates(&cp.segments, &mine);
    let sdir = {
        let (fs, root, topic) = (fs.clone(), root.to_path_buf(), topic.to_owned());
        tokio::task::spawn_blocking(move || files::segments_dir(fs.as_ref(), &root, &topic))
            .await
            .map_err(|e| StorageError::Incompatible(e.to_string()))??
    };
    let mut restored: Vec<(TieredSegment, SegmentSummary)> = Vec::new();
    let mut failed = false;
    for (n, c) in todo.iter().enumerate() {
        if failed {
            out.not_restored_after_damage.push(c.base);
            continue;
        }
        let expected = restored.last().map(|(_, s)| s.last_log_index + 1);
        let keys = keys::segment_keys(node, topic, incarnation, c.base);
        match fetch_segment(bucket, fs, &sdir, c, &keys, expected, cp.first_position).await? {
            Fetched::Restored(segment, summary) => {
                progress(format!(
                    "  segment {} ({}/{}): {} messages, positions {}..={}",
                    c.base,
                    n + 1,
                    todo.len(),
                    summary.messages,
                    summary.first_position.unwrap_or(0),
                    summary.last_position.unwrap_or(0)
                ));
                out.segments_restored += 1;
                out.messages_restored += summary.messages;
                restored.push((segment, summary));
            }
            Fetched::Collected => out.collected_segments_skipped += 1,
            Fetched::Damaged(d) => {
                progress(format!("  segment {}: NOT restored: {}", c.base, d.detail));
                out.damaged.push(d);
                failed = true;
            }
        }
    }
    let first = restored.iter().find_map(|(_, s)| s.first_position);
    let last = restored.iter().rev().find_map(|(_, s)| s.last_position);
    out.restored_positions = first
        .zip(last)
        .map(|(from, through)| PositionRange { from, through });
    out.lost = lost_ranges(cp.first_position, cp.head, first.zip(last));
    out.lost_messages = Some(out.lost.iter().map(PositionRange::messages).sum());
    out.channels = cp
        .channels
        .iter()
        .map(|c| ChannelLoss {
            channel: c.name.clone(),
            lost_messages: unfinished(c, &out.lost),
        })
        .collect();
    out.continues_incarnation = !failed && !restored.is_empty();
    write_restored(
        fs,
        root,
        config,
        &cp,
        &restored,
        out.continues_incarnation,
        last,
    )
    .await?;
    out.restored = true;
    Ok(out)
}
