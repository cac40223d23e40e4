//! [`Sweeper`]: a withdrawn GET leaves its key's watch list at once.
//!
//! A withdrawn (cancelled) operation leaves the purgatory's timer at once,
//! but its entry in the key's watch list stays until a check of the key
//! completes something there, or a purge (which runs only once about half
//! of all entries are done), as in Kafka's purgatory. Through the public
//! API, the done entries of one key are dropped by a `check_and_complete`
//! of the key that completes at least one operation. So a sweep of a key
//! parks a *marker* operation on it ([`Fetch`]'s sweep), makes the marker
//! completable (the sweeper's epoch moves past the marker's), and checks
//! the key: the marker completes, and the key's done entries go with it.
//!
//! The check tries every live GET of the key (O(GETs on the key)); so
//! withdrawals coalesce. A withdrawal adds its key to the set due; the
//! thread that holds the run lock sweeps every key due, and takes the keys
//! added meanwhile before it stops, while the others only add theirs: a
//! thousand clients that leave at once cost a few sweeps, not a thousand.
//! Sweeps never run at the same time, so no other sweep moves the epoch
//! between a marker's registration and its check: a marker is never
//! completed while it registers (and so never missed by its check).
//!
//! Lock order: the run lock, then the purgatory's (an operation's, a watch
//! list's), then the store's (a GET's `try_complete`). The set due is
//! locked alone.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use purgatorio::Purgatory;

use super::Fetch;

/// Sweeps withdrawn GETs out of their keys' watch lists.
#[derive(Debug, Default)]
pub(super) struct Sweeper {
    /// Moved by each sweep: a marker made at epoch `e` is done once the
    /// epoch is past `e`.
    epoch: AtomicU64,
    /// The keys with a withdrawal not yet swept.
    due: Mutex<HashSet<Arc<str>>>,
    /// Held by the thread sweeping.
    running: Mutex<()>,
}

impl Sweeper {
    /// The current epoch.
    pub(super) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Takes the withdrawn GETs of `key` out of its watch list in
    /// `fetches`: here, or by the thread sweeping now, before it stops.
    pub(super) fn withdrawn(self: &Arc<Self>, key: Arc<str>, fetches: &Purgatory<Arc<str>, Fetch>) {
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
                    self.sweep(key, fetches);
                }
            }
            drop(running);
            if self.due.lock().is_empty() {
                return;
            }
        }
    }

    /// Drops `key`'s done entries: a marker parked, made completable, and
    /// completed by a check of the key. Runs under the run lock.
    fn sweep(self: &Arc<Self>, key: Arc<str>, fetches: &Purgatory<Arc<str>, Fetch>) {
        let marker = Fetch::sweep(Arc::clone(self), self.epoch());
        // Shut down: there is nothing left to sweep.
        let Ok(parked) = fetches.park(marker, [Arc::clone(&key)]) else {
            return;
        };
        debug_assert!(
            !parked.completed_now(),
            "a marker completed while it registered (epoch {})",
            self.epoch()
        );
        // Withdrawn if something kept the check below from completing it.
        let _parked = parked.cancel_on_drop();
        self.epoch.fetch_add(1, Ordering::AcqRel);
        // A PUT's check may complete the marker first; it drops the done
        // entries then. Shut down: as above.
        let _ = fetches.check_and_complete(&*key);
    }
}
