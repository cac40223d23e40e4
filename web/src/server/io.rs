//! [`GuardedIo`]: a connection whose writes may not stall past a limit.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::stall::Stall;

/// A connection whose writes fail with [`io::ErrorKind::TimedOut`] once
/// they have waited the stall's limit without the client reading its
/// minimum progress (or catching up): a client that stops reading its
/// answers, or reads them a byte at a time, is cut off, and what its
/// answers held is freed. Reads pass through: hyper's header read timeout
/// and [`GuardedBody`] time them.
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

    /// `polled`, the outcome of a write of `offered` bytes, or of a flush
    /// or shutdown (`None`: hyper has nothing left to write): progress
    /// counts against the stall; pending past its limit is an error.
    fn timed<R: Moved>(
        &mut self,
        polled: Poll<io::Result<R>>,
        offered: Option<usize>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<R>> {
        match polled {
            Poll::Pending if self.stall.expired(cx) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "the client did not read its answer for {} ms",
                    self.stall.limit().as_millis()
                ),
            ))),
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(done)) => {
                let moved = done.bytes();
                self.stall
                    .progress(moved, offered.is_none_or(|all| moved >= all));
                Poll::Ready(Ok(done))
            }
            failed => failed,
        }
    }
}

/// What a write, flush or shutdown moved.
trait Moved {
    /// The bytes written.
    fn bytes(&self) -> usize;
}

impl Moved for usize {
    fn bytes(&self) -> usize {
        *self
    }
}

impl Moved for () {
    fn bytes(&self) -> usize {
        0
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
        this.timed(polled, Some(buf.len()), cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        let offered = bufs.iter().map(|buf| buf.len()).sum();
        this.timed(polled, Some(offered), cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.io).poll_flush(cx);
        this.timed(polled, None, cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.io).poll_shutdown(cx);
        this.timed(polled, None, cx)
    }
}

#[cfg(test)]
mod tests {
    //! A writer on an in-memory pipe of 16 KiB, its reader driven step by
    //! step, every timeout on a manual clock.

    use std::time::Duration;

    use purgatorio::{ManualClock, Timer};
    use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

    use super::super::stall::Stall;
    use super::GuardedIo;

    const LIMIT: Duration = Duration::from_secs(10);
    const ANSWER: usize = 1 << 20;

    /// Writes `ANSWER` bytes through a guarded pipe of 16 KiB while the
    /// reader takes `per_step` bytes, then lets half the limit pass, per
    /// step; how many bytes arrived before the writer gave up or finished.
    async fn read_in_steps(per_step: usize) -> usize {
        let clock = ManualClock::new();
        let timer = Timer::builder()
            .clock(clock.clone())
            .build()
            .expect("a timer");
        let (near, mut far) = tokio::io::duplex(16 * 1024);
        let mut io: GuardedIo<DuplexStream> =
            GuardedIo::new(near, Stall::new(&timer, LIMIT, 16 * 1024));
        let writer = tokio::spawn(async move { io.write_all(&vec![b'v'; ANSWER]).await });
        let (mut got, mut buf) = (0, vec![0; per_step]);
        for _ in 0..10_000 {
            // Let the writer fill the pipe and arm its stall.
            while !writer.is_finished() && timer.is_empty() {
                tokio::task::yield_now().await;
            }
            if writer.is_finished() {
                break;
            }
            let n = far.read(&mut buf).await.expect("read");
            got += n;
            for _ in 0..16 {
                tokio::task::yield_now().await;
            }
            clock.advance(LIMIT / 2);
            for _ in 0..16 {
                tokio::task::yield_now().await;
            }
        }
        let written = writer.await.expect("the writer");
        let mut rest = Vec::new();
        let _ = far.read_to_end(&mut rest).await;
        if written.is_ok() {
            got + rest.len()
        } else {
            got
        }
    }

    #[tokio::test]
    async fn a_reader_that_keeps_up_gets_the_whole_answer() {
        assert_eq!(read_in_steps(16 * 1024).await, ANSWER);
    }

    #[tokio::test]
    async fn a_reader_that_trickles_is_cut_off() {
        let got = read_in_steps(100).await;
        assert!(got < 1000, "a trickle kept the write going: {got} bytes");
    }
}
