//! [`Rendezvous`]: a value set once and the waker of the task awaiting it;
//! [`WakerSlot`]: just the waker, for an event its owner publishes itself.

use std::task::{Context, Poll, Waker};

use crate::sync::Mutex;

/// The waker of the task awaiting an event that its owner publishes in an
/// atomic of its own, with the protocol on that atomic (see
/// `purgatory::op`): the task [stores](Self::register) its waker, then marks
/// the atomic as awaited with a read-modify-write; the publisher publishes
/// with a read-modify-write and [wakes](Self::wake) only if it saw the mark.
/// Wakers are cloned, woken and dropped outside the lock.
#[derive(Debug, Default)]
pub(crate) struct WakerSlot {
    /// The waker.
    waker: Mutex<Option<Waker>>,
}

impl WakerSlot {
    /// Stores `cx`'s waker, replacing another task's.
    pub(crate) fn register(&self, cx: &mut Context<'_>) {
        if self
            .waker
            .lock()
            .as_ref()
            .is_some_and(|w| w.will_wake(cx.waker()))
        {
            return;
        }
        let new = cx.waker().clone();
        let old = self.waker.lock().replace(new);
        drop(old);
    }

    /// Drops the stored waker, if any, outside the lock: its task no longer
    /// waits.
    pub(crate) fn clear(&self) {
        let waker = self.waker.lock().take();
        drop(waker);
    }

    /// Wakes the stored task, if any.
    pub(crate) fn wake(&self) {
        let waker = self.waker.lock().take();
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

/// What the rendezvous's lock protects.
#[derive(Debug)]
struct State<T> {
    /// The value, once set.
    value: Option<T>,
    /// The task to wake when it is.
    waker: Option<Waker>,
    /// Whether the value was taken.
    taken: bool,
}

/// A value set once by one thread and awaited by a task on another.
///
/// Its lock is held only to move the value and the waker in and out: wakers
/// are cloned, woken and dropped after it is released, since they are the
/// runtime's code. A waker registered before the value is set is woken by
/// [`set`](Self::set); one registered after finds the value under the same
/// lock: no wake-up is lost.
#[derive(Debug)]
pub(crate) struct Rendezvous<T> {
    /// The value and the waker.
    state: Mutex<State<T>>,
}

impl<T> Default for Rendezvous<T> {
    fn default() -> Self {
        Rendezvous {
            state: Mutex::new(State {
                value: None,
                waker: None,
                taken: false,
            }),
        }
    }
}

impl<T> Rendezvous<T> {
    /// Sets the value unless it is set, and wakes the waiting task.
    pub(crate) fn set(&self, value: T) {
        let waker = {
            let mut state = self.state.lock();
            if state.value.is_some() || state.taken {
                return;
            }
            state.value = Some(value);
            state.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// The value, taken out, if it is set (`Some` once, `None` after);
    /// otherwise registers `cx`'s waker (replacing another task's) to be
    /// woken when it is.
    pub(crate) fn poll_take(&self, cx: &mut Context<'_>) -> Poll<Option<T>> {
        {
            let mut state = self.state.lock();
            if state.value.is_some() || state.taken {
                state.taken = true;
                return Poll::Ready(state.value.take());
            }
            if state
                .waker
                .as_ref()
                .is_some_and(|w| w.will_wake(cx.waker()))
            {
                return Poll::Pending;
            }
        }
        let new = cx.waker().clone();
        let old = {
            let mut state = self.state.lock();
            if state.value.is_some() || state.taken {
                state.taken = true;
                let value = state.value.take();
                drop(state);
                drop(new);
                return Poll::Ready(value);
            }
            state.waker.replace(new)
        };
        drop(old);
        Poll::Pending
    }
}
