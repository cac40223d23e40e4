//! The thread-safe timer: Kafka's `SystemTimer` and its reaper, done better.
//!
//! ## Shape
//!
//! ```text
//!  schedule/cancel ──▶ shard[i]: Mutex<Wheel>   (i = the calling thread's shard)
//!                          │ next expiration
//!                          ▼
//!          driver thread: sleeps until the earliest one, or a signal
//!                          │ batches of due tasks
//!                          ▼
//!          worker pool: runs them, catching panics
//! ```
//!
//! * **No global lock.** Each thread schedules into its own shard (assigned
//!   round-robin on first use), so threads that schedule and cancel mostly
//!   touch different locks. A handle remembers its shard, so cancel works
//!   from any thread.
//! * **Tickless driver.** One thread sleeps until the earliest due bucket of
//!   all shards; with nothing pending it sleeps without a timeout. A
//!   schedule that creates an earlier deadline wakes it (see `driver` for the
//!   protocol). It moves due tasks out of one shard at a time, at most
//!   [`BATCH`](driver::BATCH) per lock hold, and never runs them (it only
//!   wakes the async tasks whose sleeps came due, after the lock). Without
//!   the thread, the same loop runs as a future on an async runtime
//!   ([`Timer::drive`]), sleeping with the runtime's own sleep.
//! * **Workers.** A pool of threads runs expired tasks; a panic is caught and
//!   counted.
//! * **Lock order.** At most one lock of the timer's is held at any time,
//!   and never while user code runs (tasks, their `Drop`, the clock). A task
//!   due at once is queued for the workers, never run on the scheduling
//!   thread, so a caller may schedule while holding a lock its task takes.
//!
//! Time is measured from the instant the timer was built (its origin), in
//! ticks: deadlines round up, clock readings round down, so nothing fires
//! early.

mod builder;
mod driver;
mod executor;
mod handle;
mod hooks;
mod ids;
mod metrics;
mod pool;
mod service;
mod shard;
mod signal;
mod task;
mod timing;

pub use builder::TimerBuilder;
pub(crate) use driver::{Driver, Entry};
pub use executor::Executor;
pub use handle::{TimerHandle, TimerId};
pub(crate) use hooks::OnShutdown;
pub use metrics::{Lateness, Metrics};
pub use service::Timer;
#[cfg(all(test, purgatorio_loom))]
pub(crate) use shard::act_as_foreign;
pub(crate) use shard::{HomeShard, Leftover};
pub(crate) use task::Job;
pub use task::{BoxTask, Task};
