//! [`Rendezvous`]: a value set once and the waker of the task awaiting it.

use std::task::{Context, Poll, Waker};

use crate::sync::Mutex;

/// What the rendezvous's lock protects.
#[derive(Debug)]
struct State<T> {
    /// The value, once set.
    value: Option<T>,
    /// The task to wake when it is.
    waker: Option<Waker>,
}

/// A value set once by one thread and awaited by a task on another.
///
/// Its lock is held only to move the value and the waker in and out: wakers
/// are cloned, woken and dropped after it is released, since they are the
/// runtime's code. A waker registered before the value is set is woken by
/// [`set`](Self::set); one registered after finds the value: no wake-up is
/// lost (the loom model `a_parked_operation_wakes_its_task` checks it).
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
            }),
        }
    }
}

impl<T> Rendezvous<T> {
    /// Sets the value unless it is set, and wakes the waiting task.
    pub(crate) fn set(&self, value: T) {
        let waker = {
            let mut state = self.state.lock();
            if state.value.is_some() {
                return;
            }
            state.value = Some(value);
            state.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// The value, taken out, if it is set; otherwise registers `cx`'s waker
    /// as [`poll`](Self::poll) does. A value is taken once.
    pub(crate) fn poll_take(&self, cx: &mut Context<'_>) -> Poll<Option<T>> {
        self.poll_with(cx, Option::take)
    }

    /// `read` of the value if it is set; otherwise registers `cx`'s waker
    /// (replacing another task's) to be woken when it is.
    fn poll_with<R>(
        &self,
        cx: &mut Context<'_>,
        read: impl FnOnce(&mut Option<T>) -> R,
    ) -> Poll<R> {
        {
            let mut state = self.state.lock();
            if state.value.is_some() {
                return Poll::Ready(read(&mut state.value));
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
            if state.value.is_some() {
                let value = read(&mut state.value);
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

impl<T: Clone> Rendezvous<T> {
    /// The value if it is set.
    pub(crate) fn get(&self) -> Option<T> {
        self.state.lock().value.clone()
    }

    /// The value if it is set; otherwise registers `cx`'s waker (replacing
    /// another task's) to be woken when it is.
    pub(crate) fn poll(&self, cx: &mut Context<'_>) -> Poll<T> {
        self.poll_with(cx, |value| value.clone().expect("set"))
    }
}
