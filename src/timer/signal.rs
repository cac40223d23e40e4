//! The driver's wake-up signal: an event count, for threads and for tasks.

use std::task::{Context, Poll, Waker};
use std::time::Instant;

use crate::clock::Wake;
use crate::sync::{Condvar, Mutex};

/// An event count: "something changed, look again".
///
/// A waiter reads the epoch *before* looking at the shards and then waits
/// only while the epoch is unchanged, so a notification that arrives between
/// the look and the wait is never lost, and no waiter consumes another's.
/// Threads wait on the condvar ([`wait`](Self::wait)); async drivers leave
/// their waker ([`poll_changed`](Self::poll_changed)), and a notification
/// wakes both.
#[derive(Debug, Default)]
pub(crate) struct Signal {
    /// The epoch and the async waiters.
    state: Mutex<SignalState>,
    /// Where waiting threads sleep.
    condvar: Condvar,
}

/// What the signal's mutex guards.
#[derive(Debug, Default)]
struct SignalState {
    /// Bumped by every notification.
    epoch: u64,
    /// The tasks waiting for the next notification; taken by it.
    wakers: Vec<Waker>,
}

impl Signal {
    /// The current epoch, to pass to [`wait`](Self::wait) later.
    pub(crate) fn epoch(&self) -> u64 {
        self.state.lock().epoch
    }

    /// Bumps the epoch and wakes every waiter, threads and tasks (the tasks'
    /// wakers run after the lock is released).
    pub(crate) fn notify(&self) {
        let wakers = {
            let mut state = self.state.lock();
            state.epoch += 1;
            std::mem::take(&mut state.wakers)
        };
        self.condvar.notify_all();
        for waker in wakers {
            waker.wake();
        }
    }

    /// Waits while the epoch is still `seen`, until `until` passes (no
    /// timeout if `None`).
    pub(crate) fn wait(&self, seen: u64, until: Option<Instant>) {
        let mut state = self.state.lock();
        while state.epoch == seen {
            match until {
                Some(until) => {
                    if self.condvar.wait_until(&mut state, until).timed_out() {
                        return;
                    }
                }
                None => self.condvar.wait(&mut state),
            }
        }
    }

    /// The async form of [`wait`](Self::wait) without a timeout: ready once
    /// the epoch is no longer `seen`; until then the task's waker is kept
    /// (once per task) for the next notification.
    pub(crate) fn poll_changed(&self, seen: u64, cx: &mut Context<'_>) -> Poll<()> {
        // Cloned and, if not kept, dropped outside the lock: a waker's
        // clone and drop are the runtime's code.
        let waker = cx.waker().clone();
        let mut state = self.state.lock();
        if state.epoch != seen {
            return Poll::Ready(());
        }
        if !state.wakers.iter().any(|w| w.will_wake(&waker)) {
            state.wakers.push(waker);
        }
        Poll::Pending
    }

    /// Takes back the kept waker that wakes `waker`'s task, which no longer
    /// waits (its future was dropped); dropped after the lock.
    pub(crate) fn forget(&self, waker: &Waker) {
        let gone: Vec<Waker> = self
            .state
            .lock()
            .wakers
            .extract_if(.., |w| w.will_wake(waker))
            .collect();
        drop(gone);
    }
}

impl Wake for Signal {
    fn wake(&self) {
        self.notify();
    }
}
