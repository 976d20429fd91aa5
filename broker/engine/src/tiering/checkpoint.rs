//! Checkpoints in the bucket: what a restore needs beside the segments, uploaded on its own
//! period (`checkpoint_upload_seconds`, docs/tiering.md "Checkpoints").
//!
//! ```text
//! every period, for each durable topic the uploader knows:
//!   channels  read_topic_files: manifest + each channel's durable state (checkpoint + WAL), read only
//!   head      the log's next position − 1 and first position, read after the channels
//!   put       nodes/<n>/topics/<hex>/<incarnation>/checkpoint.json   (only when it changed)
//! then      nodes/<n>/catalog.json: every topic with a checkpoint, and its incarnation
//! ```
//!
//! The head is read after the channels, so it is at or past every position they mention. A
//! failed upload is tried again at the next period; publishing and delivery never wait for it
//! (the files are read as `storage verify` reads them, and the log lock is held only to read
//! two numbers).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use rustqueue_storage::{ChannelState, TieredSegment};
use rustqueue_tier::ObjectKey;
use serde::{Deserialize, Serialize};

use super::Tiering;
use super::keys;
use super::uploader::Known;
use crate::lock::lock;
use crate::registry::Registry;

/// The layout version of [`TopicCheckpoint`] and [`Catalog`].
pub const CHECKPOINT_FORMAT: u32 = 1;

/// A topic's state at one moment, as a restore needs it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopicCheckpoint {
    /// Always [`CHECKPOINT_FORMAT`].
    pub format: u32,
    /// The node it belongs to.
    pub node_id: u16,
    /// The topic.
    pub topic: String,
    /// This life of the topic (the key segment its objects are under).
    pub incarnation: String,
    /// When it was read, ms since the epoch.
    pub written_at_ms: u64,
    /// The last position the topic had handed out: every message up to here was published;
    /// a restore counts what it cannot bring back against it.
    pub head: u64,
    /// The first position still in the local log (GC and eviction had removed the ones below).
    pub first_position: u64,
    /// Deliveries paused (the manifest's flag).
    pub paused: bool,
    /// The manifest's unrouted boundary (present while the topic has no durable channel).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unrouted_from_position: Option<u64>,
    /// Each durable channel's durable state (its checkpoint body, docs/storage-format.md).
    pub channels: Vec<ChannelState>,
    /// The segments uploaded by then, as the tiered record lists them.
    pub segments: Vec<TieredSegment>,
}

/// One topic of the catalog.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CatalogTopic {
    /// The topic.
    pub topic: String,
    /// The incarnation whose checkpoint is current.
    pub incarnation: String,
}

/// The node's topics at one moment: what a restore brings back (a topic deleted before it is
/// not in it, a topic created after it is not yet).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Catalog {
    /// Always [`CHECKPOINT_FORMAT`].
    pub format: u32,
    /// The node.
    pub node_id: u16,
    /// When it was written, ms since the epoch.
    pub written_at_ms: u64,
    /// The data directory that wrote it (its `tiering.volume`; a restore keeps it).
    pub volume: String,
    /// Its topics, by name.
    pub topics: Vec<CatalogTopic>,
}

/// What the loop remembers between periods: what each topic's last uploaded checkpoint said
/// (without its time), and the last catalog.
#[derive(Default)]
pub(crate) struct Sent {
    topics: HashMap<String, (String, Vec<u8>)>,
    catalog: Option<Vec<CatalogTopic>>,
    /// The catalog found in the bucket at start was checked ([`may_replace`]).
    checked: bool,
    /// This data directory's volume id, once read.
    volume: Option<String>,
}

impl Sent {
    /// Whether the newest checkpoint of `topic` this process uploaded may list the segment
    /// `base` (`true` also when it uploaded none yet: an older one in the bucket may).
    pub(crate) fn may_list(&self, topic: &str, base: u64) -> bool {
        let Some((_, bytes)) = self.topics.get(topic) else {
            return true;
        };
        serde_json::from_slice::<TopicCheckpoint>(bytes)
            .map_or(true, |cp| cp.segments.iter().any(|s| s.base == base))
    }
}

impl Sent {
    /// Whether the newest catalog this process uploaded is without the life `incarnation` of
    /// `topic` (`false` before it uploaded one: the one in the bucket may name it). Only then
    /// may that life's objects go: no restore looks for them any more.
    pub(crate) fn catalog_lacks(&self, topic: &str, incarnation: &str) -> bool {
        self.catalog.as_ref().is_some_and(|topics| {
            !topics
                .iter()
                .any(|t| t.topic == topic && t.incarnation == incarnation)
        })
    }
}

/// Whether this broker may replace `found`, the catalog in the bucket: only when it was
/// written from the same data directory (`volume`), or names no topic. A catalog of another
/// volume is a lost volume's, which `storage restore --from-bucket` still needs: a broker
/// started on an empty directory must not replace it with its own.
pub(crate) fn may_replace(found: &Catalog, volume: &str) -> bool {
    found.topics.is_empty() || found.volume == volume
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Uploads the checkpoint of every topic in `known` whose state changed since its last one,
/// then the catalog if the set of topics changed. A failure is logged and counted and ends
/// the round (the catalog included); the next period tries again. Returns whether the round
/// left every checkpoint and the catalog in the bucket up to date.
pub(crate) async fn upload(
    r: &Arc<Registry>,
    tier: &Tiering,
    node_id: u16,
    known: &HashMap<String, Known>,
    sent: &mut Sent,
) -> bool {
    sent.topics.retain(|name, _| known.contains_key(name));
    let mut names: Vec<&String> = known.keys().collect();
    names.sort();
    for name in names {
        let Some(k) = known.get(name) else { continue };
        let Some(incarnation) = k.record.incarnation.clone() else {
            continue;
        };
        let Some(mut cp) = read(r, node_id, k, &incarnation).await else {
            continue;
        };
        let unchanged = serde_json::to_vec(&cp).unwrap_or_default();
        if sent.topics.get(name) == Some(&(incarnation.clone(), unchanged.clone())) {
            continue;
        }
        cp.written_at_ms = now_ms();
        let key = keys::checkpoint_key(node_id, name, &incarnation);
        match put_json(tier, &key, &cp).await {
            Ok(()) => {
                tier.checkpoint_uploads.fetch_add(1, Ordering::Relaxed);
                sent.topics.insert(name.clone(), (incarnation, unchanged));
                tracing::debug!(topic = %name, head = cp.head, "topic checkpoint uploaded");
            }
            Err(error) => {
                // The bucket's own retries are spent: the rest of this round would wait as
                // long each, holding up the segment uploads behind it.
                tier.checkpoint_failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(topic = %name, %error, "upload of a topic checkpoint failed; the round stops and the next period tries again");
                return false;
            }
        }
    }
    let mut topics: Vec<CatalogTopic> = sent
        .topics
        .iter()
        .map(|(topic, (incarnation, _))| CatalogTopic {
            topic: topic.clone(),
            incarnation: incarnation.clone(),
        })
        .collect();
    topics.sort_by(|a, b| a.topic.cmp(&b.topic));
    if sent.catalog.as_ref() == Some(&topics) {
        return true;
    }
    let Some(volume) = volume(r, sent).await else {
        tier.checkpoint_failures.fetch_add(1, Ordering::Relaxed);
        return false;
    };
    if !sent.checked {
        match check_found(tier, node_id, &volume).await {
            Ok(()) => sent.checked = true,
            Err(error) => {
                tier.checkpoint_failures.fetch_add(1, Ordering::Relaxed);
                tracing::error!(%error, "the node's catalog is not replaced");
                return false;
            }
        }
    }
    let catalog = Catalog {
        format: CHECKPOINT_FORMAT,
        node_id,
        written_at_ms: now_ms(),
        volume,
        topics: topics.clone(),
    };
    match put_json(tier, &keys::catalog_key(node_id), &catalog).await {
        Ok(()) => {
            tier.checkpoint_uploads.fetch_add(1, Ordering::Relaxed);
            sent.catalog = Some(topics);
            true
        }
        Err(error) => {
            tier.checkpoint_failures.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(%error, "upload of the node's catalog failed; tried again at the next period");
            false
        }
    }
}

/// The topic's checkpoint now (`written_at_ms` 0), or `None` when its files cannot be read
/// (deleted meanwhile, or damaged: logged).
async fn read(
    r: &Arc<Registry>,
    node_id: u16,
    k: &Known,
    incarnation: &str,
) -> Option<TopicCheckpoint> {
    if k.topic.deleted.load(Ordering::SeqCst) {
        return None;
    }
    let store = r.store().clone();
    let name = k.topic.name.clone();
    let files = tokio::task::spawn_blocking(move || {
        rustqueue_storage::restore::read_topic_files(store.fs().as_ref(), store.root(), &name)
    })
    .await
    .ok()?;
    let files = match files {
        Ok(files) => files,
        Err(error) => {
            if !k.topic.deleted.load(Ordering::SeqCst) {
                tracing::warn!(topic = %k.topic.name, %error, "cannot read the topic's channel files for its checkpoint; tried again at the next period");
            }
            return None;
        }
    };
    let (head, first_position, first_base) = {
        let log = lock(&k.topic.log);
        (
            log.next_position() - 1,
            log.first_position(),
            log.first_base(),
        )
    };
    Some(TopicCheckpoint {
        format: CHECKPOINT_FORMAT,
        node_id,
        topic: k.topic.name.clone(),
        incarnation: incarnation.to_owned(),
        written_at_ms: 0,
        head,
        first_position,
        paused: files.manifest.paused,
        unrouted_from_position: files.manifest.unrouted_from_position,
        channels: files.channels,
        // Where the local copies are is no concern of a restore (nor of an older build's).
        // Segments GC deleted are left out: their objects are deleted once a checkpoint
        // without them is up (uploader.rs, `collect`), so no restore ever looks for them.
        segments: k
            .record
            .segments
            .iter()
            .filter(|s| s.base >= first_base)
            .map(|s| TieredSegment {
                evicted: false,
                ..s.clone()
            })
            .collect(),
    })
}

/// This data directory's volume id (created at the first call).
async fn volume(r: &Arc<Registry>, sent: &mut Sent) -> Option<String> {
    if let Some(v) = &sent.volume {
        return Some(v.clone());
    }
    let store = r.store().clone();
    let new_id = keys::new_incarnation(now_ms(), rand::random::<u32>());
    let read = tokio::task::spawn_blocking(move || {
        rustqueue_storage::restore::volume_id(store.fs().as_ref(), store.root(), &new_id)
    })
    .await
    .ok()?;
    match read {
        Ok(v) => {
            sent.volume = Some(v.clone());
            Some(v)
        }
        Err(error) => {
            tracing::error!(%error, "cannot read or write the data directory's tiering.volume; the node's catalog is not uploaded");
            None
        }
    }
}

/// Checks the catalog in the bucket before the first one this broker writes.
async fn check_found(tier: &Tiering, node_id: u16, volume: &str) -> Result<(), String> {
    let key = keys::catalog_key(node_id);
    let object = ObjectKey::new(key.clone()).map_err(|e| e.to_string())?;
    let found: Catalog = match tier.bucket.get_verified(&object).await {
        Ok((bytes, _)) => serde_json::from_slice(&bytes).map_err(|e| {
            format!(
                "{key} does not parse ({e}); delete it if this node's bucket objects are not needed"
            )
        })?,
        Err(rustqueue_tier::Error::NotFound { .. }) => return Ok(()),
        Err(e) => {
            return Err(format!(
                "cannot read {key} ({e}); tried again at the next period"
            ));
        }
    };
    if may_replace(&found, volume) {
        return Ok(());
    }
    let named: Vec<String> = found
        .topics
        .iter()
        .map(|t| format!("{} ({})", t.topic, t.incarnation))
        .collect();
    Err(format!(
        "{key} was written from another data directory (volume {}, this one is {volume}) and \
         names topics: {}. If this broker's volume was lost, stop it and run `rustqueued \
         storage restore --from-bucket` (docs/operations.md); if those topics are not needed, \
         delete {key} and this broker's catalog is written at the next period",
        found.volume,
        named.join(", ")
    ))
}

async fn put_json<T: Serialize>(tier: &Tiering, key: &str, value: &T) -> Result<(), String> {
    let key = ObjectKey::new(key.to_owned()).map_err(|e| e.to_string())?;
    let bytes = serde_json::to_vec(value).map_err(|e| e.to_string())?;
    tier.bucket
        .put_bytes(&key, bytes.into())
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic(name: &str, incarnation: &str) -> CatalogTopic {
        CatalogTopic {
            topic: name.into(),
            incarnation: incarnation.into(),
        }
    }

    #[test]
    fn a_lost_volumes_catalog_is_never_replaced_by_another_data_directory() {
        let found = |volume: &str, topics: Vec<CatalogTopic>| Catalog {
            format: CHECKPOINT_FORMAT,
            node_id: 1,
            written_at_ms: 0,
            volume: volume.into(),
            topics,
        };
        let cases = [
            (found("v1", vec![]), "v2", true),
            (found("v1", vec![topic("t", "a")]), "v1", true),
            // An empty directory, or another one: the catalog is a lost volume's.
            (found("v1", vec![topic("t", "a")]), "v2", false),
        ];
        for (in_bucket, ours, want) in cases {
            assert_eq!(
                may_replace(&in_bucket, ours),
                want,
                "{in_bucket:?} vs {ours}"
            );
        }
    }
}
