//! # purgatorio
//!
//! Park millions of delayed requests until they complete or time out, on a
//! **tickless hierarchical timing wheel** (Varghese & Lauck, as Kafka's
//! purgatory uses it) that never fires early and never wakes up for nothing.
//!
//! Two timers share one core:
//!
//! * [`LocalTimer`]: single-threaded; the caller supplies time. It reads no
//!   clock, spawns no thread, takes no lock: the piece to embed in an event
//!   loop, or to drive a deterministic simulation.
//! * [`Timer`]: thread-safe; sharded wheels, one driver thread that sleeps
//!   until the earliest due bucket, and a worker pool that runs the tasks.
//!
//! Its waits are also futures for any executor: [`Timer::sleep`],
//! [`Timer::timeout`], a [`Parked`] operation, a keyed timer's
//! [`Expirations`].
//!
//! ## The single-threaded timer
//!
//! ```
//! use std::time::Duration;
//! use purgatorio::LocalTimer;
//!
//! let mut timer = LocalTimer::new(); // 1 ms tick, 64 slots per level
//! let fetch = timer.schedule(Duration::from_millis(500), "fetch 17 max_wait");
//! timer.schedule(Duration::from_secs(30), "session 4 idle");
//!
//! // The fetch's data arrived: cancel is O(1) and hands the payload back.
//! assert_eq!(timer.cancel(fetch), Some("fetch 17 max_wait"));
//!
//! // Drive time yourself; jump straight to the next expiration.
//! let at = timer.next_expiration().unwrap();
//! assert_eq!(at, Duration::from_secs(30));
//! let expired: Vec<_> = timer.advance(at).map(|e| e.into_inner()).collect();
//! assert_eq!(expired, ["session 4 idle"]);
//! ```
//!
//! ## The thread-safe timer
//!
//! ```
//! use std::time::Duration;
//! use purgatorio::{ManualClock, Timer};
//!
//! // A manual clock makes the threaded timer deterministic (tests, simulations).
//! let clock = ManualClock::new();
//! let timer = Timer::builder().clock(clock.clone()).build()?;
//!
//! let (tx, rx) = std::sync::mpsc::channel();
//! let handle = timer.schedule(Duration::from_millis(100), move || tx.send("expired").unwrap())?;
//! assert!(handle.is_pending());
//!
//! clock.advance(Duration::from_millis(100)); // wakes the driver
//! assert_eq!(rx.recv()?, "expired");           // ran on a worker thread
//! assert!(handle.cancel().is_none());                    // too late: it already ran
//! assert_eq!(timer.metrics().expired, 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## The purgatory
//!
//! A [`Purgatory`] parks [`DelayedOperation`]s on watch keys until
//! [`check_and_complete`](Purgatory::check_and_complete) finds them satisfied
//! or their delay passes; `on_complete` runs exactly once either way. See
//! [`Purgatory`] for a fetch that waits for data, and [`KeyedTimer`] for
//! session timeouts reset by heartbeats.
//!
//! ## Features
//!
//! * `rayon`: run expired tasks on an application's rayon pool
//!   ([`Executor`]`::Rayon`).
//! * `metrics`: publish every figure to the `metrics` facade, under
//!   documented names, for any of its exporters.
//! * `stream`: [`Expirations`] implements `futures_core::Stream`.
//!
//! ## Guarantees
//!
//! * **Never early.** Deadlines round *up* to the tick, clock readings round
//!   *down*: a timer fires only once its deadline has passed, at every tick
//!   and wheel size, and at most one tick after it (plus the driver's and
//!   workers' scheduling delay in the threaded timer).
//! * **Tickless.** Buckets, not ticks, are queued by due time; the driver sleeps
//!   until the earliest one and, with nothing pending, without a timeout.
//! * **Cheap.** Schedule, cancel and reschedule are O(1) and allocate nothing in
//!   steady state; a pending timer with a `u64` payload costs 32 bytes.
//! * **Unbounded range.** Any deadline up to [`Duration::MAX`](std::time::Duration::MAX) is accepted;
//!   coarser levels appear only when a deadline needs them.
//! * **Robust.** Bad configuration is a [`BuildError`]; a stale handle is
//!   harmless; a panicking task is caught and counted. User code (tasks,
//!   callbacks, and the `Drop` of anything you hand over: tasks, operations,
//!   keys, values, the last handle) runs with no lock of ours held, with one
//!   exception: an operation's callbacks run under that operation's own lock
//!   (see [`DelayedOperation`] for what they may call: everything).
//!
//! ## Design
//!
//! Two timers share one core, and the purgatory and keyed timers sit on the
//! thread-safe one:
//!
//! ```text
//!  Purgatory ──┐   KeyedTimer ──┐
//!              ▼                ▼
//!       Timer: shards of the wheel, one driver thread,    LocalTimer: you
//!       a worker pool; time from a Clock                  supply the time
//!              │                                              │
//!              └──────────────────────┬───────────────────────┘
//!                                     ▼
//!           Wheel: levels of buckets, the arena, the bucket queue
//!                                     ▼
//!               tick: time ↔ ticks (deadlines up, readings down)
//! ```
//!
//! Each level is a ring of
//! `wheel_size` buckets; a bucket is a vector of 16-byte references to arena
//! slots and is registered once in a deadline-ordered queue, keyed by the
//! earliest deadline it holds, so a lone far-away timer fires on the driver's
//! first wake-up instead of cascading through every level. Cancel bumps the
//! slot's stamp, turning its reference into garbage that is skipped when met
//! and compacted away when it outnumbers live timers.

#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs, missing_debug_implementations)]

mod clock;
mod error;
mod future;
mod keyed;
mod local;
#[cfg(all(test, purgatorio_loom))]
mod loom;
mod publish;
mod purgatory;
mod rendezvous;
mod sharded;
mod sync;
mod tick;
mod timer;
mod wheel;

pub use clock::{Clock, ClockWaker, ManualClock, SystemClock};
pub use error::{BuildError, ScheduleError, ShutDownError, WatchError, WatchErrorKind};
pub use future::{Elapsed, Expirations, NextExpired, ShutDown, Sleep, Timeout};
pub use keyed::{KeyedMetrics, KeyedTimer};
pub use local::{Advance, Expired, LocalTimer, LocalTimerBuilder};
pub use purgatory::{
    CancelOnDrop, Completion, DefaultKeyHasher, DelayedOperation, DelayedRequest, Parked,
    Purgatory, PurgatoryBuilder, PurgatoryMetrics, DEFAULT_PURGE_INTERVAL,
};
pub use tick::{
    DEFAULT_TICK, DEFAULT_WHEEL_SIZE, MAX_SHARDS, MAX_TICK, MAX_WATCH_SHARDS, MAX_WHEEL_SIZE,
    MAX_WORKERS, MIN_TICK, MIN_WHEEL_SIZE,
};
pub use timer::{BoxTask, Executor, Lateness, Metrics, Task, Timer, TimerBuilder, TimerHandle};
pub use wheel::TimerKey;

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
