//! [`GuardedBody`]: a request body that may not stall, nor hold more than
//! its share of the server's body budget.

use std::fmt;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use http_body::{Frame, SizeHint};

use super::stall::Stall;
use crate::BoxError;

/// The bytes of request bodies the server holds at once, across all its
/// connections.
#[derive(Debug)]
pub(super) struct Budget {
    /// Bytes held now.
    held: AtomicUsize,
    /// The most it may hold.
    max: usize,
}

impl Budget {
    /// A budget of `max` bytes.
    pub(super) fn new(max: usize) -> Self {
        Budget {
            held: AtomicUsize::new(0),
            max,
        }
    }

    /// Bytes held now.
    pub(super) fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// Takes `bytes`, or refuses them all if that would pass the limit.
    fn take(&self, bytes: usize) -> bool {
        let mut held = self.held.load(Ordering::Relaxed);
        loop {
            let Some(wanted) = held.checked_add(bytes).filter(|&w| w <= self.max) else {
                return false;
            };
            match self.held.compare_exchange_weak(
                held,
                wanted,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(now) => held = now,
            }
        }
    }

    /// Gives back `bytes` taken before.
    fn give_back(&self, bytes: usize) {
        self.held.fetch_sub(bytes, Ordering::Relaxed);
    }
}

/// Why a request body was cut off. The handler that reads it (axum's
/// `Bytes` extractor) answers 400 with this sentence, and the connection
/// closes: its body was not read to the end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyError {
    /// No byte came for this many milliseconds.
    Stalled(u128),
    /// The server already holds its limit of request body bytes (this
    /// many): a load of uploads, or slow ones; the client may retry.
    Busy(usize),
}

impl fmt::Display for BodyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BodyError::Stalled(ms) => write!(f, "the request body sent nothing for {ms} ms"),
            BodyError::Busy(max) => write!(
                f,
                "the server holds its limit of {max} bytes of request bodies; retry later"
            ),
        }
    }
}

impl std::error::Error for BodyError {}

/// A request body whose frames must keep coming (a stall past the limit is
/// [`BodyError::Stalled`]) and whose bytes count against the server's
/// [`Budget`] until the body is dropped (the handler has collected it).
#[derive(Debug)]
pub(super) struct GuardedBody {
    /// The body.
    body: Body,
    /// How long it has sent nothing.
    stall: Stall,
    /// The server's budget, and what this body holds of it.
    budget: Arc<Budget>,
    /// Bytes this body holds.
    held: usize,
}

impl GuardedBody {
    /// `body`, guarded.
    pub(super) fn new(body: Body, stall: Stall, budget: Arc<Budget>) -> Self {
        GuardedBody {
            body,
            stall,
            budget,
            held: 0,
        }
    }
}

impl http_body::Body for GuardedBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        match Pin::new(&mut this.body).poll_frame(cx) {
            Poll::Pending if this.stall.expired(cx) => {
                let ms = this.stall.limit().as_millis();
                Poll::Ready(Some(Err(BodyError::Stalled(ms).into())))
            }
            Poll::Pending => Poll::Pending,
            Poll::Ready(Some(Ok(frame))) => {
                this.stall.progress();
                let bytes = frame.data_ref().map_or(0, Bytes::len);
                if !this.budget.take(bytes) {
                    return Poll::Ready(Some(Err(BodyError::Busy(this.budget.max).into())));
                }
                this.held += bytes;
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl Drop for GuardedBody {
    fn drop(&mut self) {
        self.budget.give_back(self.held);
    }
}
