//! The NSQ TCP side: opaque tunnels from producers to publish-ready brokers (the protocol is
//! not parsed, so TLS, Snappy, Deflate and AUTH pass through to the broker untouched).
//!
//! Each accepted connection takes a slot of the connection cap (none left: closed at once,
//! existing tunnels unharmed), is placed on the least-active publish backend, connected
//! within 2 s with TCP_NODELAY on both sides, and copied both ways until either side closes,
//! its jittered lifetime ends, its backend leaves discovery, or shutdown's grace runs out.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::budget::Slots;
use crate::metrics::Metrics;
use crate::pool::{Placement, Pools};

/// Time allowed to connect to a broker.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Shortest jittered lifetime.
const MIN_LIFETIME: Duration = Duration::from_secs(1);

/// A tunnel's lifetime: `base` scaled by a factor in [0.9, 1.1] chosen by `unit` in [0, 1],
/// never below 1 s (300 s gives 270–330 s).
pub fn jittered(base: Duration, unit: f64) -> Duration {
    let factor = 0.9 + 0.2 * unit.clamp(0.0, 1.0);
    base.mul_f64(factor).max(MIN_LIFETIME)
}

/// What the accept loop and its tunnels share.
#[derive(Debug, Clone)]
pub struct TcpContext {
    /// Where tunnels go.
    pub pools: Arc<Pools>,
    /// Metrics.
    pub metrics: Metrics,
    /// The connection cap.
    pub slots: Slots,
    /// Base tunnel lifetime; `None`: no rotation by age.
    pub max_age: Option<Duration>,
    /// Cancelled when shutdown's grace is over: every tunnel closes.
    pub abort: CancellationToken,
}

/// Accept until `stop`, spawning each tunnel on `tasks`.
pub async fn serve(
    listener: TcpListener,
    ctx: TcpContext,
    stop: CancellationToken,
    tasks: TaskTracker,
) {
    crate::core::accept_until(listener, stop, |client| {
        let Some(slot) = ctx.slots.try_take() else {
            return;
        };
        let Some(placement) = ctx.pools.place() else {
            ctx.metrics.tcp_refused.inc();
            return;
        };
        tasks.spawn(tunnel(client, placement, slot, ctx.clone()));
    })
    .await;
}

/// Counts an open tunnel in the gauge for as long as it lives.
struct Open(Metrics);

impl Open {
    fn new(m: &Metrics) -> Self {
        m.tcp_active_tunnels.inc();
        Open(m.clone())
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.tcp_active_tunnels.dec();
    }
}

async fn tunnel(
    mut client: TcpStream,
    placement: Placement,
    _slot: OwnedSemaphorePermit,
    ctx: TcpContext,
) {
    let _open = Open::new(&ctx.metrics);
    let target = placement.backend.tcp_target();
    let mut broker = match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(&target)).await
    {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            ctx.metrics.tcp_connect_failures.inc();
            tracing::debug!(?target, error = %e, "broker refused the tunnel");
            return;
        }
        Err(_) => {
            ctx.metrics.tcp_connect_failures.inc();
            tracing::debug!(?target, "broker did not accept within 2 s");
            return;
        }
    };
    let _ = client.set_nodelay(true);
    let _ = broker.set_nodelay(true);
    let lifetime = ctx
        .max_age
        .map(|base| jittered(base, rand::random::<f64>()));
    let aged = async {
        match lifetime {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client, &mut broker) => {}
        _ = aged => ctx.metrics.tcp_rotations.inc(),
        _ = placement.gone.cancelled() => ctx.metrics.tcp_rotations.inc(),
        _ = ctx.abort.cancelled() => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_within_ten_percent_and_above_one_second() {
        let base = Duration::from_secs(300);
        assert_eq!(jittered(base, 0.0), Duration::from_secs(270));
        assert_eq!(jittered(base, 1.0), Duration::from_secs(330));
        assert_eq!(jittered(base, 0.5), Duration::from_secs(300));
        assert_eq!(jittered(base, -3.0), Duration::from_secs(270));
        assert_eq!(jittered(base, 7.0), Duration::from_secs(330));
        assert_eq!(
            jittered(Duration::from_secs(1), 0.0),
            Duration::from_secs(1)
        );
        assert_eq!(
            jittered(Duration::from_millis(10), 0.5),
            Duration::from_secs(1)
        );
        let (mut lo, mut hi) = (Duration::MAX, Duration::ZERO);
        for _ in 0..10_000 {
            let d = jittered(base, rand::random::<f64>());
            assert!(
                (Duration::from_secs(270)..=Duration::from_secs(330)).contains(&d),
                "{d:?}"
            );
            lo = lo.min(d);
            hi = hi.max(d);
        }
        // The jitter actually spreads (not a constant).
        assert!(hi - lo > Duration::from_secs(50), "{lo:?}..{hi:?}");
    }
}
