//! [`Stall`]: how long a read or write has made no progress.

use std::future::Future;
use std::pin::Pin;
use std::task::Context;
use std::time::Duration;

use purgatorio::{Sleep, Timer};

/// Times a stream that has stopped moving: armed by the first poll that
/// finds it pending, disarmed by any progress. It costs no timer entry while
/// bytes flow.
#[derive(Debug)]
pub(super) struct Stall {
    /// Where the sleep goes.
    timer: Timer,
    /// How long no progress may last.
    limit: Duration,
    /// Armed since the stream last stopped.
    sleep: Option<Sleep>,
}

impl Stall {
    /// A stall of at most `limit` on `timer`.
    pub(super) fn new(timer: &Timer, limit: Duration) -> Self {
        Stall {
            timer: timer.clone(),
            limit,
            sleep: None,
        }
    }

    /// The stream moved: the count starts again at its next stop.
    pub(super) fn progress(&mut self) {
        self.sleep = None;
    }

    /// The stream is pending: whether it has been for the whole limit.
    /// If not, `cx`'s task is woken when it has.
    pub(super) fn expired(&mut self, cx: &mut Context<'_>) -> bool {
        let sleep = self
            .sleep
            .get_or_insert_with(|| self.timer.sleep(self.limit));
        // A timer that shut down ends its sleeps early: a server going down
        // cuts stalled streams too.
        Pin::new(sleep).poll(cx).is_ready()
    }

    /// The limit.
    pub(super) fn limit(&self) -> Duration {
        self.limit
    }
}
