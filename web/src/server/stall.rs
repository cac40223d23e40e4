//! [`Stall`]: how long a read or write has waited without moving enough.

use std::future::Future;
use std::pin::Pin;
use std::task::Context;
use std::time::Duration;

use purgatorio::{Sleep, Timer};

/// Times a stream that has to wait: armed by the first poll that finds it
/// pending, disarmed once it has moved `min_progress` bytes since, or
/// caught up ([`progress`](Self::progress) with `whole`). A trickle of a
/// byte at a time does not disarm it, so a client cannot hold a stream open
/// by moving one byte per period. It costs no timer entry while the stream
/// does not wait.
#[derive(Debug)]
pub(super) struct Stall {
    /// Where the sleep goes.
    timer: Timer,
    /// How long a wait may last without enough progress.
    limit: Duration,
    /// The bytes that count as progress.
    min_progress: usize,
    /// Armed since the stream first waited.
    sleep: Option<Sleep>,
    /// Bytes moved since it was armed.
    moved: usize,
}

impl Stall {
    /// A stall of at most `limit` on `timer`, disarmed by `min_progress`
    /// bytes (`usize::MAX`: only by catching up).
    pub(super) fn new(timer: &Timer, limit: Duration, min_progress: usize) -> Self {
        Stall {
            timer: timer.clone(),
            limit,
            min_progress,
            sleep: None,
            moved: 0,
        }
    }

    /// The stream moved `bytes`; `whole`: it took all it was offered (it is
    /// not behind).
    pub(super) fn progress(&mut self, bytes: usize, whole: bool) {
        if self.sleep.is_none() {
            return;
        }
        self.moved = self.moved.saturating_add(bytes);
        if whole || self.moved >= self.min_progress {
            self.sleep = None;
            self.moved = 0;
        }
    }

    /// The stream is pending: whether it has waited the whole limit. If
    /// not, `cx`'s task is woken when it has.
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
