//! [`GuardedIo`]: a connection whose writes may not stall past a limit.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::stall::Stall;

/// A connection whose writes fail with [`io::ErrorKind::TimedOut`] once
/// they have made no progress for the stall's limit: a client that stops
/// reading its answers is cut off, and what its answers held is freed.
/// Reads pass through: hyper's header read timeout and [`GuardedBody`]
/// time them.
///
/// [`GuardedBody`]: super::body::GuardedBody
#[derive(Debug)]
pub(super) struct GuardedIo<T> {
    /// The connection.
    io: T,
    /// How long its writes have been stuck.
    stall: Stall,
}

impl<T> GuardedIo<T> {
    /// `io` with its writes timed by `stall`.
    pub(super) fn new(io: T, stall: Stall) -> Self {
        GuardedIo { io, stall }
    }

    /// `polled`, the outcome of a write, flush or shutdown: progress
    /// disarms the stall; pending for the whole limit is an error.
    fn timed<R>(
        &mut self,
        polled: Poll<io::Result<R>>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<R>> {
        match polled {
            Poll::Pending if self.stall.expired(cx) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "the client read nothing for {} ms",
                    self.stall.limit().as_millis()
                ),
            ))),
            Poll::Pending => Poll::Pending,
            ready => {
                self.stall.progress();
                ready
            }
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for GuardedIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for GuardedIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.io).poll_write(cx, buf);
        this.timed(polled, cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.timed(polled, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.io).poll_flush(cx);
        this.timed(polled, cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.io).poll_shutdown(cx);
        this.timed(polled, cx)
    }
}
