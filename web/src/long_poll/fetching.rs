//! [`Fetching`]: the answer to a GET, at once or once its parked request
//! ends; small, because a parked GET's handler future holds it for as long
//! as the client waits.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use purgatorio::{CancelOnDrop, Completion};

use super::{entry_response, BadRequest, Entry, Fetch, LongPoll};

/// The answer to a GET of the long-poll service: a future of its
/// [`Response`], from [`LongPoll::fetch`](super::LongPoll::fetch).
///
/// While the request is parked it holds only the parked request's handle,
/// the key (shared with the store) and the service, not the request's
/// strings: 48 bytes, where an `async fn` that kept its arguments would hold
/// over a hundred for every waiting client. Dropped before it resolves (the
/// client went away), it withdraws the parked request: the request leaves
/// the purgatory's timer at once, and its key's watch list within
/// [`SWEEP_AFTER`](super::SWEEP_AFTER).
///
/// # Examples
///
/// ```
/// use purgatorio_web::long_poll::{LongPoll, Query};
///
/// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
/// let service = LongPoll::new(purgatorio_web::shared_timer())?;
/// service.put("k", "v".into());
/// let answer = service.fetch("k", Query::parse(Some("index=0"))?).await;
/// assert_eq!(answer.headers()["x-index"], "1");
/// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
/// ```
#[must_use = "a future does nothing unless polled; dropped, it withdraws the request"]
pub struct Fetching {
    /// Where the answer stands.
    state: State,
}

/// Where a [`Fetching`] stands.
enum State {
    /// Answered at once: the key's entry (or none).
    Now(Option<Entry>),
    /// Refused: answered 400.
    Refused(BadRequest),
    /// Parked until a write past the index the client saw, or the wait.
    Waiting {
        /// The service: its store is read once the request ends.
        service: LongPoll,
        /// The key, shared with the store and the parked request.
        key: Arc<str>,
        /// The parked request, withdrawn if this is dropped first.
        parked: CancelOnDrop<Fetch>,
    },
    /// The service is shut down: answered 503.
    ShuttingDown,
    /// Resolved.
    Done,
}

impl Fetching {
    /// An answer ready now: `entry` (or 404).
    pub(super) fn now(entry: Option<Entry>) -> Self {
        Fetching {
            state: State::Now(entry),
        }
    }

    /// The answer to a bad request: 400.
    pub(super) fn refused(bad: BadRequest) -> Self {
        Fetching {
            state: State::Refused(bad),
        }
    }

    /// The answer of a service that shut down: 503.
    pub(super) fn shutting_down() -> Self {
        Fetching {
            state: State::ShuttingDown,
        }
    }

    /// The answer once `parked` ends: `key`'s entry in `service` then.
    pub(super) fn waiting(service: LongPoll, key: Arc<str>, parked: CancelOnDrop<Fetch>) -> Self {
        Fetching {
            state: State::Waiting {
                service,
                key,
                parked,
            },
        }
    }
}

impl Future for Fetching {
    type Output = Response;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Response> {
        // Every field is `Unpin`: the state moves freely.
        let state = &mut self.get_mut().state;
        if let State::Waiting { parked, .. } = state {
            // The answer is read below, on the woken task, not by the PUT
            // that completes thousands of requests at once.
            match Pin::new(parked).poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Completion::ShutDown) | None) => *state = State::ShuttingDown,
                Poll::Ready(Some(_)) => {}
            }
        }
        Poll::Ready(match std::mem::replace(state, State::Done) {
            State::Now(entry) => entry_response(entry),
            State::Refused(bad) => bad.into_response(),
            State::Waiting { service, key, .. } => entry_response(service.store().get(&key)),
            State::ShuttingDown => shutting_down(),
            State::Done => panic!("`Fetching` polled after it resolved"),
        })
    }
}

impl Drop for Fetching {
    /// Withdraws a request still parked (its client went away): it leaves
    /// the timer here, and its key's watch list by a sweep soon after.
    fn drop(&mut self) {
        if let State::Waiting {
            service,
            key,
            parked,
        } = std::mem::replace(&mut self.state, State::Done)
        {
            let parked = parked.into_inner();
            if parked.is_done() {
                return;
            }
            // The sweep is scheduled before the withdrawal, so it is due
            // by the time the withdrawal shows in `delayed()` (a test on a
            // manual clock moves the clock then), and comes after it.
            service.sweep_soon(key);
            drop(parked.cancel());
        }
    }
}

impl fmt::Debug for Fetching {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Now(_) => "now",
            State::Refused(_) => "refused",
            State::Waiting { .. } => "waiting",
            State::ShuttingDown => "shutting down",
            State::Done => "done",
        };
        f.debug_struct("Fetching").field("state", &state).finish()
    }
}

/// The answer once the service shuts down: 503.
fn shutting_down() -> Response {
    (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n").into_response()
}
