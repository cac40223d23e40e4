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
//! [`Timer::timeout`], a [`Parked`] request (whose await gives the
//! [`DelayedRequest`]'s answer), a keyed timer's [`Expirations`].
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
//! ## On tokio
//!
//! Every wait is a future that any executor polls, woken by the timer's own
//! driver thread; nothing ties it to a runtime. This compiles as written in a
//! tokio application (`tokio = { version = "1", features = ["full"] }`): one
//! [`Timer`] for the whole server, a long-poll parked in a [`Purgatory`]
//! whose await gives its answer, sessions in a [`KeyedTimer`] whose
//! expirations are a stream, and a plain timeout.
//!
//! ```
//! use std::sync::{Arc, Mutex};
//! use std::time::Duration;
//! use purgatorio::{Completion, DelayedRequest, KeyedTimer, Purgatory, Timer};
//!
//! /// A fetch that answers with the records past `offset`: at once if there
//! /// are some, when a produce brings some, or empty at `max_wait`.
//! struct Fetch { log: Arc<Mutex<Vec<String>>>, offset: usize, max_wait: Duration }
//!
//! impl DelayedRequest for Fetch {
//!     type Output = Vec<String>;
//!     fn delay(&self) -> Duration { self.max_wait }
//!     fn try_complete(&mut self) -> bool { self.log.lock().unwrap().len() > self.offset }
//!     fn answer(&mut self, _: Completion) -> Vec<String> {
//!         self.log.lock().unwrap()[self.offset..].to_vec()
//!     }
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//!     let timer = Timer::builder().thread_name("server-timer").build()?;
//!     let fetches: Purgatory<String, Fetch> =
//!         Purgatory::builder().shared_timer(&timer).build()?;
//!     let log = Arc::new(Mutex::new(Vec::new()));
//!
//!     // A consumer's long-poll, and a producer that appends 10 ms later.
//!     let fetch = Fetch { log: log.clone(), offset: 0, max_wait: Duration::from_secs(5) };
//!     let waiting = fetches.park(fetch, ["orders".to_string()])?;
//!     let (producer, appended) = (fetches.clone(), log.clone());
//!     tokio::spawn(async move {
//!         tokio::time::sleep(Duration::from_millis(10)).await;
//!         appended.lock().unwrap().push("order 1".to_string());
//!         producer.check_and_complete("orders").unwrap(); // wakes the fetch
//!     });
//!     assert_eq!(waiting.await, Some(vec!["order 1".to_string()])); // one await
//!
//!     // Sessions that expire unless a heartbeat resets them.
//!     let (sessions, mut expired) = KeyedTimer::with_expirations(&timer);
//!     sessions.set("consumer-1".to_string(), (), Duration::from_millis(20))?;
//!     assert!(sessions.reset("consumer-1", Duration::from_millis(20))); // a heartbeat, by &str
//!     assert_eq!(expired.next_expired().await, Some(("consumer-1".to_string(), ())));
//!
//!     // A timeout around any future.
//!     let slow = timer.timeout(Duration::from_millis(5), std::future::pending::<()>());
//!     assert!(slow.await.is_err());
//!
//!     // Shut down without blocking a runtime thread: the fetches still
//!     // parked complete as shut down, the stream ends.
//!     timer.shutdown_async().await;
//!     assert_eq!(expired.next_expired().await, None);
//!     Ok(())
//! }
//! ```
//!
//! A server whose waits are all awaited can do without the timer's thread:
//! built with `.driver_thread(false).executor(Executor::Inline)`, the timer
//! is driven by a task of the runtime ([`Timer::drive`], given tokio's
//! sleep), and an expiry wakes its task from the runtime thread that woke
//! for the deadline, with no hand-off between threads.
//!
//! `docs/tokio.md` in the repository is the guide for tokio users: coming
//! from `tokio::time` and `DelayQueue`, getting answers out of parked
//! requests, sessions, timeouts, and choosing the executor, tick and threads.
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
//!   steady state (a deadline due at once, or 2^31 ticks or more away, waits
//!   in a side heap: O(log n) to schedule); a pending timer with a `u64`
//!   payload costs 24 bytes.
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
//! `wheel_size` buckets; a bucket is a vector of 8-byte references to arena
//! slots (the slot, and the deadline's low 31 bits as a check: the wheel's
//! time recovers the rest) and is registered once in a deadline-ordered
//! queue, keyed by the earliest deadline it holds, so a lone far-away timer
//! fires on the driver's first wake-up instead of cascading through every
//! level. Cancel frees the slot, turning its reference into garbage that is
//! skipped when met and compacted away when it outnumbers live timers.

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
mod time;
mod timer;
mod wheel;

pub use clock::{Clock, ClockWaker, ManualClock, SystemClock};
pub use error::{BuildError, ScheduleError, ShutDownError, WatchError, WatchErrorKind};
pub use future::{Elapsed, Expirations, NextExpired, ShutDown, Sleep, Timeout};
pub use keyed::{KeyedMetrics, KeyedTimer};
pub use local::{Advance, Expired, LocalTimer, LocalTimerBuilder};
pub use purgatory::{
    CancelOnDrop, Completion, DefaultKeyHasher, DelayedOperation, DelayedRequest, Outcome, Parked,
    Purgatory, PurgatoryBuilder, PurgatoryMetrics, DEFAULT_PURGE_INTERVAL,
};
pub use time::{
    DEFAULT_TICK, DEFAULT_WHEEL_SIZE, MAX_SHARDS, MAX_TICK, MAX_WATCH_SHARDS, MAX_WHEEL_SIZE,
    MAX_WORKERS, MIN_TICK, MIN_WHEEL_SIZE,
};
pub use timer::{
    BoxTask, Executor, Lateness, Metrics, Task, Timer, TimerBuilder, TimerHandle, TimerId,
};
pub use wheel::TimerKey;

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
