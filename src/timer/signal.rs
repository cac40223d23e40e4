//! The driver's wake-up signal: an event count.

use std::time::Instant;

use crate::clock::Wake;
use crate::sync::{Condvar, Mutex};

/// An event count: "something changed, look again".
///
/// A waiter reads the epoch *before* looking at the shards and then waits
/// only while the epoch is unchanged, so a notification that arrives between
/// the look and the wait is never lost, and no waiter consumes another's.
#[derive(Debug, Default)]
pub(crate) struct Signal {
    /// Bumped by every notification.
    epoch: Mutex<u64>,
    /// Where waiters sleep.
    condvar: Condvar,
}

impl Signal {
    /// The current epoch, to pass to [`wait`](Self::wait) later.
    pub(crate) fn epoch(&self) -> u64 {
        *self.epoch.lock()
    }

    /// Bumps the epoch and wakes every waiter.
    pub(crate) fn notify(&self) {
        *self.epoch.lock() += 1;
        self.condvar.notify_all();
    }

    /// Waits while the epoch is still `seen`, until `until` passes (no
    /// timeout if `None`).
    pub(crate) fn wait(&self, seen: u64, until: Option<Instant>) {
        let mut epoch = self.epoch.lock();
        while *epoch == seen {
            match until {
                Some(until) => {
                    if self.condvar.wait_until(&mut epoch, until).timed_out() {
                        return;
                    }
                }
                None => self.condvar.wait(&mut epoch),
            }
        }
    }
}

impl Wake for Signal {
    fn wake(&self) {
        self.notify();
    }
}
