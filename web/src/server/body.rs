//! [`GuardedBody`]: a request body that must arrive in time, and whose bytes
//! count against the server's body budget.

use std::fmt;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

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

/// What each data frame of a body costs the budget beyond its bytes: the
/// bookkeeping of a collected frame, so that a body sent a byte at a time
/// is charged for what it holds.
const FRAME_COST: usize = 64;

/// Why a request body was cut off. The handler that reads it (axum's
/// `Bytes` extractor) answers 400 with this sentence, and the connection
/// closes: its body was not read to the end.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use purgatorio_web::server::BodyError;
///
/// let late = BodyError::TimedOut(Duration::from_secs(30));
/// assert_eq!(late.to_string(), "the request body did not arrive within 30000 ms of its first wait");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BodyError {
    /// The body was still arriving this long after it first had to wait
    /// ([`Server::body_timeout`](super::Server::body_timeout)).
    TimedOut(Duration),
    /// The server already holds its limit of request body bytes (this
    /// many): a load of uploads, or slow ones; the client may retry.
    Busy(usize),
}

impl fmt::Display for BodyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BodyError::TimedOut(limit) => write!(
                f,
                "the request body did not arrive within {} ms of its first wait",
                limit.as_millis()
            ),
            BodyError::Busy(max) => write!(
                f,
                "the server holds its limit of {max} bytes of request bodies; retry later"
            ),
        }
    }
}

impl std::error::Error for BodyError {}

/// A request body that must arrive whole within the stall's limit of when
/// it first has to wait ([`BodyError::TimedOut`]; trickling does not reset
/// it), and whose frames count against the server's [`Budget`] until the
/// body is dropped (the handler has collected it).
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
                let limit = this.stall.limit();
                Poll::Ready(Some(Err(BodyError::TimedOut(limit).into())))
            }
            Poll::Pending => Poll::Pending,
            Poll::Ready(Some(Ok(frame))) => {
                let cost = frame.data_ref().map_or(0, |data| data.len() + FRAME_COST);
                if !this.budget.take(cost) {
                    return Poll::Ready(Some(Err(BodyError::Busy(this.budget.max).into())));
                }
                this.held += cost;
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
