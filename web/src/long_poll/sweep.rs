//! [`Sweeper`]: a withdrawn GET leaves its key's watch list at once.
//!
//! A withdrawn (cancelled) operation leaves the purgatory's timer at once,
//! but its entry in the key's watch list stays until a check of the key
//! (which drops the list's done entries before it tries the rest) or a
//! purge (which runs only once about half of all entries are done), as in
//! Kafka's purgatory. So a withdrawal is followed by a check of its key:
//! [`Purgatory::check_and_complete`], whose tries of the live GETs find
//! nothing to complete unless a write came.
//!
//! A check reads every entry of the key (O(GETs on the key)), so
//! withdrawals coalesce. A withdrawal adds its key to the set due; the
//! thread that holds the run lock checks every key due, and takes the keys
//! added meanwhile before it stops, while the others only add theirs: a
//! thousand clients that leave one key at once cost a few checks, not a
//! thousand.
//!
//! Lock order: the run lock, then the purgatory's, then the store's (a
//! GET's `try_complete`). The set due is locked alone.

use std::collections::HashSet;
use std::sync::Arc;

use parking_lot::Mutex;
use purgatorio::Purgatory;

use super::Fetch;

/// Sweeps withdrawn GETs out of their keys' watch lists.
#[derive(Debug, Default)]
pub(super) struct Sweeper {
    /// The keys with a withdrawal not yet swept.
    due: Mutex<HashSet<Arc<str>>>,
    /// Held by the thread sweeping.
    running: Mutex<()>,
}

impl Sweeper {
    /// Takes the withdrawn GETs of `key` out of its watch list in
    /// `fetches`: here, or by the thread sweeping now, before it stops.
    pub(super) fn withdrawn(&self, key: Arc<str>, fetches: &Purgatory<Arc<str>, Fetch>) {
        self.due.lock().insert(key);
        // A key added while another thread sweeps is taken by that thread,
        // which looks at the set again after it released the run lock.
        while let Some(running) = self.running.try_lock() {
            loop {
                let keys: Vec<Arc<str>> = self.due.lock().drain().collect();
                if keys.is_empty() {
                    break;
                }
                for key in keys {
                    // Shut down: nothing is left to sweep.
                    let _ = fetches.check_and_complete(&*key);
                }
            }
            drop(running);
            if self.due.lock().is_empty() {
                return;
            }
        }
    }
}
