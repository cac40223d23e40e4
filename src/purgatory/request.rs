//! What a caller asks of an operation whose lock another thread holds, and
//! what the calling thread is doing inside operations' callbacks (see the
//! cell's docs in `op`: nobody waits for an operation from inside a
//! callback).

use std::cell::Cell;

use super::operation::Completion;
use crate::sync::thread_local;

/// Request bit: an event arrived while another thread held the lock.
pub(super) const RETRY: usize = 1;
/// Request bit: an event was reported from inside a `try_complete` (this
/// operation's own, or another's) while the lock was held.
pub(super) const RETRY_NESTED: usize = 1 << 1;
/// Request bit: complete the operation (`force_complete`).
pub(super) const FORCE: usize = 1 << 2;
/// Request bit: expire the operation.
pub(super) const EXPIRE: usize = 1 << 3;
/// Request bit: complete the operation as shut down.
pub(super) const SHUT_DOWN: usize = 1 << 4;

/// What a caller asks of an operation; a later variant overrides an earlier
/// one when several are pending.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Request {
    /// Run `try_complete`; complete the operation if it returns `true`.
    Try,
    /// Complete it as expired.
    Expire,
    /// Complete it as shut down.
    ShutDown,
    /// Complete it, whatever its condition.
    Force,
}

impl Request {
    /// The strongest request among raised `bits`.
    pub(super) fn from_bits(bits: usize) -> Request {
        if bits & FORCE != 0 {
            Request::Force
        } else if bits & SHUT_DOWN != 0 {
            Request::ShutDown
        } else if bits & EXPIRE != 0 {
            Request::Expire
        } else {
            Request::Try
        }
    }

    /// The bit this request leaves for the lock's holder.
    pub(super) fn bit(self) -> usize {
        match self {
            Request::Try if Depth::get().trying > 0 => RETRY_NESTED,
            Request::Try => RETRY,
            Request::Expire => EXPIRE,
            Request::ShutDown => SHUT_DOWN,
            Request::Force => FORCE,
        }
    }

    /// How carrying this request out completes the operation; `None` for a
    /// try, which completes it only if `try_complete` says so.
    pub(super) fn completion(self) -> Option<Completion> {
        match self {
            Request::Try => None,
            Request::Expire => Some(Completion::Expired),
            Request::ShutDown => Some(Completion::ShutDown),
            Request::Force => Some(Completion::Forced),
        }
    }
}

/// What this thread is doing inside operations' callbacks.
#[derive(Clone, Copy, Default)]
pub(super) struct Depth {
    /// Operation locks this thread holds.
    pub(super) held: u32,
    /// `try_complete` calls running on this thread.
    pub(super) trying: u32,
}

/// No thread is inside a callback.
const OUTSIDE: Depth = Depth { held: 0, trying: 0 };

#[cfg(not(purgatorio_loom))]
thread_local! {
    /// This thread's [`Depth`].
    static DEPTH: Cell<Depth> = const { Cell::new(OUTSIDE) };
}

// loom's `thread_local!` takes only a plain initialiser.
#[cfg(purgatorio_loom)]
thread_local! {
    /// This thread's [`Depth`].
    static DEPTH: Cell<Depth> = Cell::new(OUTSIDE);
}

impl Depth {
    /// This thread's depth.
    pub(super) fn get() -> Depth {
        DEPTH.with(Cell::get)
    }

    /// Changes this thread's depth.
    pub(super) fn update(f: impl FnOnce(&mut Depth)) {
        DEPTH.with(|cell| {
            let mut depth = cell.get();
            f(&mut depth);
            cell.set(depth);
        });
    }
}

/// Whether the calling thread holds an operation's lock, that is, runs one
/// of its callbacks (or is about to): it must then not wait for another.
pub(crate) fn in_callback() -> bool {
    Depth::get().held > 0
}
