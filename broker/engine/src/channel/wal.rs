//! FIN/REQ group commit to a channel WAL, and the requests a channel sends its worker.
//!
//! One worker per durable channel owns its [`ChannelWal`]. It collects commands (a
//! [`Collector`] group: up to 10 ms from the first, or 1,024 requests), appends all frames in
//! one write, fdatasyncs once, checkpoints when due, and only then answers: every success has
//! crossed the WAL fsync.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use rustqueue_storage::{ChannelCommand, ChannelWal, StorageError};
use tokio::sync::{mpsc, oneshot};

use crate::group::{Collector, Policy, answer};

use super::Channel;
use crate::error::StorageFault;
use crate::lock::lock;
use crate::metrics::{Counter, EngineMetrics, Timer};

pub(crate) type Reply = crate::group::Reply<StorageFault>;

/// A request to a channel WAL worker.
pub(crate) enum WalReq {
    /// Persist commands; reply (if any) after the fsync. The instant is when it was queued.
    Cmds(Vec<ChannelCommand>, Option<Reply>, Instant),
    /// Write a checkpoint now (shutdown).
    Checkpoint(Reply),
    /// Delete the channel's files and stop.
    Delete(Reply),
}

/// Up to 1,024 FIN/REQ waiting for an answer, collected for at most 10 ms after the first.
///
/// Nothing waits on a FIN's fsync but the session's cap on unsettled acks (8,192), and a crash
/// before it only redelivers. With 1 ms, durable PUB+FIN paid one WAL fdatasync per 2.7 ack
/// runs (2,340 in 6 s beside 6,480 publish fsyncs), sharing the disk with the publish fsyncs
/// every durable ack waits for; 10 ms is the relaxed modes' sync interval and cut them to 507
/// (docs/benchmarks.md).
const POLICY: Policy = Policy {
    max_requests: 1_024,
    max_bytes: u64::MAX,
    window: Some(Duration::from_millis(10)),
};

/// The worker loop; ends on delete or when every sender is gone.
pub(crate) async fn wal_worker(
    chan: Weak<Channel>,
    wal: ChannelWal,
    rx: mpsc::UnboundedReceiver<WalReq>,
    metrics: Arc<EngineMetrics>,
) {
    metrics.add(Counter::ChannelWorkers, 1);
    group_commit_loop(chan, wal, rx, &metrics).await;
    metrics.sub(Counter::ChannelWorkers, 1);
    metrics.add(Counter::ChannelWorkersRetired, 1);
}

async fn group_commit_loop(
    chan: Weak<Channel>,
    wal: ChannelWal,
    rx: mpsc::UnboundedReceiver<WalReq>,
    metrics: &Arc<EngineMetrics>,
) {
    let mut wal = Some(wal);
    let mut groups = Collector::new(rx, POLICY);
    let cost = |r: &WalReq| match r {
        WalReq::Cmds(_, reply, _) => (usize::from(reply.is_some()), 0),
        _ => (0, 0),
    };
    let closes = |r: &WalReq| !matches!(r, WalReq::Cmds(..));
    while let Some((group, _)) = groups.next_group(cost, closes).await {
        let mut cmds = Vec::new();
        let mut replies: Vec<Reply> = Vec::new();
        let mut queued: Vec<Instant> = Vec::new();
        let mut control: Option<WalReq> = None;
        for req in group {
            match req {
                WalReq::Cmds(c, r, at) => {
                    cmds.extend(c);
                    replies.extend(r);
                    queued.push(at);
                }
                other => control = Some(other),
            }
        }
        let started = Instant::now();
        for at in &queued {
            metrics.observe(
                Timer::ChannelGroupWait,
                started.saturating_duration_since(*at),
            );
        }
        if !cmds.is_empty() {
            metrics.add(Counter::ChannelGroupCommits, 1);
            metrics.add(Counter::ChannelGroupRequests, queued.len() as u64);
            metrics.raise(Counter::ChannelGroupMaxRequests, queued.len() as u64);
        }
        let m2 = metrics.clone();
        let Some(w) = wal.take() else { break };
        let chan2 = chan.clone();
        let ckpt = matches!(control, Some(WalReq::Checkpoint(_)));
        let delete = matches!(control, Some(WalReq::Delete(_)));
        let joined = tokio::task::spawn_blocking(move || {
            let mut w = w;
            let r = write_group(&mut w, &chan2, &cmds, ckpt, &m2);
            if delete {
                let d = w.delete();
                return (None, r.and(d));
            }
            (Some(w), r)
        })
        .await;
        let (back, result) = match joined {
            Ok((back, r)) => (back, r.map_err(StorageFault::from)),
            Err(e) => (None, Err(StorageFault::task("channel commit", &e))),
        };
        wal = back;
        answer(replies, &result);
        if let Some(WalReq::Checkpoint(r) | WalReq::Delete(r)) = control {
            answer([r], &result);
        }
        if wal.is_none() {
            break;
        }
    }
}

fn write_group(
    w: &mut ChannelWal,
    chan: &Weak<Channel>,
    cmds: &[ChannelCommand],
    force_checkpoint: bool,
    metrics: &EngineMetrics,
) -> Result<(), StorageError> {
    if !cmds.is_empty() {
        w.append(cmds)?;
        let fsync = Instant::now();
        let synced = w.sync();
        metrics.since(Timer::ChannelFsync, fsync);
        synced?;
    }
    if (force_checkpoint || w.needs_checkpoint())
        && let Some(c) = chan.upgrade()
    {
        let snapshot = lock(&c.st).durable.clone();
        w.checkpoint(&snapshot)?;
    }
    Ok(())
}

impl Channel {
    /// Sends commands and waits for their fsync.
    pub(crate) async fn persist(&self, cmds: Vec<ChannelCommand>) -> Result<(), StorageFault> {
        self.persist_send(cmds).await
    }

    /// Queues commands for the next group commit now, before returning; the future resolves
    /// once they crossed the WAL fsync. It borrows nothing, so callers may keep working (and
    /// queue more) while the fsync runs.
    pub(crate) fn persist_send(
        &self,
        cmds: Vec<ChannelCommand>,
    ) -> impl std::future::Future<Output = Result<(), StorageFault>> + Send + 'static {
        let rx = match &self.wal_tx {
            Some(tx) if !cmds.is_empty() => {
                let (rtx, rrx) = oneshot::channel();
                tx.send(WalReq::Cmds(cmds, Some(rtx), Instant::now()))
                    .map(|()| rrx)
                    .map_err(|_| StorageFault::ChannelClosed)
                    .map(Some)
            }
            _ => Ok(None),
        };
        async move {
            match rx? {
                Some(rrx) => rrx.await.map_err(|_| StorageFault::ChannelClosed)?,
                None => Ok(()),
            }
        }
    }

    /// Sends commands without waiting (timeout counters, sampled auto-FINs).
    pub(crate) fn persist_later(&self, cmds: Vec<ChannelCommand>) {
        if let Some(tx) = &self.wal_tx
            && !cmds.is_empty()
        {
            let _ = tx.send(WalReq::Cmds(cmds, None, Instant::now()));
        }
    }

    /// Sends a control request ([`WalReq::Checkpoint`], [`WalReq::Delete`]) and waits; a
    /// channel without a WAL answers at once.
    pub(crate) async fn control(
        &self,
        make: impl FnOnce(Reply) -> WalReq,
    ) -> Result<(), StorageFault> {
        let Some(tx) = &self.wal_tx else {
            return Ok(());
        };
        let (rtx, rrx) = oneshot::channel();
        tx.send(make(rtx))
            .map_err(|_| StorageFault::ChannelClosed)?;
        rrx.await.map_err(|_| StorageFault::ChannelClosed)?
    }
}
