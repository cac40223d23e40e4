//! [`Sweeper`]: a withdrawn GET leaves its key's watch list within
//! [`SWEEP_AFTER`].
//!
//! A withdrawn (cancelled) operation leaves the purgatory's timer at once,
//! but its entry in the key's watch list stays until a check of the key
//! (which drops the list's done entries before it tries the rest) or a
//! purge (which runs only once about half of all entries are done), as in
//! Kafka's purgatory. So a withdrawal is followed by a check of its key:
//! [`Purgatory::check_and_complete`], whose tries of the live GETs find
//! nothing to complete unless a write came.
//!
//! A check reads every entry of the key (O(GETs on the key)), so it is not
//! run by each withdrawal: that would let a client that parks and leaves in
//! a loop cost a read of the whole list each time. A withdrawal adds its
//! key to the set due; the first one into an empty set schedules a sweep on
//! the purgatory's timer, [`SWEEP_AFTER`] later, which checks every key due
//! then. Sweeps thus run at most once per [`SWEEP_AFTER`], each key once.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use purgatorio::Timer;

use super::LongPoll;

/// How soon a withdrawn GET leaves its key's watch list (100 ms), and how
/// often at most the lists are swept.
pub const SWEEP_AFTER: Duration = Duration::from_millis(100);

/// Sweeps withdrawn GETs out of their keys' watch lists.
#[derive(Debug)]
pub(super) struct Sweeper {
    /// The keys with a withdrawal not yet swept; not empty while a sweep
    /// is scheduled.
    due: Mutex<HashSet<Arc<str>>>,
    /// The purgatory's timer, which runs the sweeps.
    timer: Timer,
}

impl Sweeper {
    /// A sweeper whose sweeps `timer` runs.
    pub(super) fn new(timer: &Timer) -> Self {
        Sweeper {
            due: Mutex::default(),
            timer: timer.clone(),
        }
    }

    /// Has `key`'s watch list in `service` swept within [`SWEEP_AFTER`]: of
    /// the GETs withdrawn from it until then.
    pub(super) fn sweep_soon(&self, key: Arc<str>, service: &LongPoll) {
        let (first, known) = {
            let mut due = self.due.lock();
            let first = due.is_empty();
            // A key already due is handed back, to drop after the lock.
            let known = if due.contains(&key) {
                Some(key)
            } else {
                due.insert(key);
                None
            };
            (first, known)
        };
        drop(known);
        if first {
            let service = service.clone();
            // Shut down: the purgatory, which shares the timer, is too, and
            // has nothing left to sweep.
            let _ = self
                .timer
                .schedule(SWEEP_AFTER, move || service.sweep_due());
        }
    }

    /// The keys due, taken: the next withdrawal schedules a new sweep.
    pub(super) fn take_due(&self) -> Vec<Arc<str>> {
        self.due.lock().drain().collect()
    }
}
