//! Node-wide budgets, each a semaphore taken without waiting: [`ByteBudget`] (bytes held by
//! request bodies and Kodo commands in flight) and [`Slots`] (open connections). A request or
//! connection that does not fit is refused at once, never queued; what was taken is given back
//! when its permit drops.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use prometheus::IntCounter;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Bytes in flight, one permit per byte.
#[derive(Debug, Clone)]
pub struct ByteBudget(Arc<Semaphore>);

impl ByteBudget {
    /// A budget of `bytes`.
    pub fn new(bytes: u32) -> Self {
        ByteBudget(Arc::new(Semaphore::new(bytes as usize)))
    }

    /// Take `bytes` now, or `None` when they do not fit.
    pub fn try_reserve(&self, bytes: u32) -> Option<OwnedSemaphorePermit> {
        self.0.clone().try_acquire_many_owned(bytes).ok()
    }

    /// Bytes not reserved.
    #[cfg(feature = "test-support")]
    pub fn available(&self) -> usize {
        self.0.available_permits()
    }
}

/// Open connections of one kind, one permit each.
#[derive(Debug, Clone)]
pub struct Slots {
    slots: Arc<Semaphore>,
    refused: IntCounter,
}

impl Slots {
    /// `max` connections; each refused one is counted in `refused`.
    pub fn new(max: usize, refused: IntCounter) -> Self {
        Slots {
            slots: Arc::new(Semaphore::new(max)),
            refused,
        }
    }

    /// A slot now, or `None` (counted) when every slot is taken.
    pub fn try_take(&self) -> Option<OwnedSemaphorePermit> {
        let slot = self.slots.clone().try_acquire_owned().ok();
        if slot.is_none() {
            self.refused.inc();
        }
        slot
    }
}

/// A listener for `axum::serve` that holds a [`Slots`] permit per connection: a connection
/// accepted while every slot is taken is closed at once, the open ones are not touched.
#[derive(Debug)]
pub struct CappedListener {
    inner: TcpListener,
    slots: Slots,
}

impl CappedListener {
    /// Cap `inner` by `slots`.
    pub fn new(inner: TcpListener, slots: Slots) -> Self {
        CappedListener { inner, slots }
    }
}

impl axum::serve::Listener for CappedListener {
    type Io = SlottedStream;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let (stream, addr) = axum::serve::Listener::accept(&mut self.inner).await;
            if let Some(slot) = self.slots.try_take() {
                return (
                    SlottedStream {
                        stream,
                        _slot: slot,
                    },
                    addr,
                );
            }
            drop(stream);
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// A connection and the slot it holds until it closes.
#[derive(Debug)]
pub struct SlottedStream {
    stream: TcpStream,
    _slot: OwnedSemaphorePermit,
}

impl AsyncRead for SlottedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for SlottedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}
