//! The purgatory: operations parked until they complete or time out
//! (Kafka's `DelayedOperationPurgatory`, latest semantics).
//!
//! ## How it works
//!
//! * [`try_complete_else_watch`](Purgatory::try_complete_else_watch): under the
//!   operation's lock, try; if not done, add it to the watch list of every
//!   (distinct) key, then try again (closing the race with an event that
//!   arrived during registration); if still not done, add it to the timer.
//! * [`check_and_complete`](Purgatory::check_and_complete): copy the key's list
//!   under its shard lock, try each operation outside that lock (never
//!   blocking on an operation's lock: see [`DelayedOperation`]), then drop the
//!   done ones from the list.
//! * Expiry: the timer's driver hands due operations to the timer's workers,
//!   which complete them as expired. No polling thread: the driver sleeps
//!   until something is due.
//! * Purge: a done operation may linger in the lists of its other keys. The
//!   purgatory counts those entries exactly. A `park` sweeps a list it finds
//!   twice as long as after its last sweep (amortised O(1) per watch, with
//!   the list at hand), and past `purge_interval` the purgatory hands one
//!   purge job to the timer's workers, which sweeps every list one shard at
//!   a time, for keys nobody parks on any more.
//!
//! ## Lock order
//!
//! operation → watch shard, and operation → timer shard (or that shard's
//! inbox, where a thread that does not own the shard leaves a finished
//! operation's expiry for the owner to remove). Nothing takes an
//! operation's lock while holding a shard lock, and the watch path only ever
//! `try_lock`s operations, so callbacks may re-enter the purgatory.

mod builder;
mod core;
mod counters;
mod metrics;
mod op;
mod operation;
mod outcome;
mod parked;
mod request;
mod service;
#[cfg(all(test, not(purgatorio_loom)))]
mod test_ops;
mod watchers;

pub use builder::{PurgatoryBuilder, DEFAULT_PURGE_INTERVAL};
pub use metrics::PurgatoryMetrics;
pub use operation::{Completion, DelayedOperation, DelayedRequest};
pub use outcome::Outcome;
pub use parked::{CancelOnDrop, Parked};
pub use service::Purgatory;
pub use watchers::DefaultKeyHasher;
