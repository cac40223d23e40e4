//! # purgatorio-redis
//!
//! Durable timers on Redis: scheduled timers survive the death of every
//! process that scheduled them, fire on whichever scheduler node is alive,
//! and are delivered at least once through a Redis Stream, never before their
//! deadline by Redis's own clock.
//!
//! * [`Timers`]: schedule (idempotent by id: scheduling an id again moves
//!   it; [`Timers::schedule_many`] batches), cancel, read, move or fire now
//!   by id, list pending and dead timers, metrics.
//! * [`Scheduler`]: a node that moves due timers to the stream. Any number
//!   may run; each due timer is moved once, by one atomic server-side step
//!   that reads Redis `TIME` itself. A node sleeps until the earliest
//!   deadline on purgatorio's in-memory timer, or until a schedule of an
//!   earlier deadline wakes it through Pub/Sub: no polling interval.
//! * [`Consumer`]: reads due timers as a member of the stream's consumer
//!   group, acknowledges them, or asks for a retry later; takes over the
//!   entries of a consumer that died after a visibility timeout, and moves a
//!   timer that failed every attempt to a dead-letter stream; a slow
//!   handler extends its delivery's visibility.
//! * [`StopHandle`]: stops a running scheduler or consumer from another
//!   thread, even while it waits.
//! * `aio` (feature `tokio`): the same on tokio: `async fn`s, a
//!   scheduler node as a future, the consumer as a `Stream` of deliveries
//!   that acknowledge, retry or extend themselves.
//!
//! Every server-side step is bounded (at most
//! [`MAX_PROMOTE_BATCH`] timers per call), every Redis call has a response
//! timeout ([`Config::response_timeout`]), and the scheduler's and the
//! consumer's `run` ride out Redis outages with backoff of at most
//! [`MAX_BACKOFF`], logging (through the `log` crate) each outage and its
//! end once. Bad input is a typed [`Error`] before Redis is asked; the
//! ranges are in [`Config`] and the `MAX_` constants.
//!
//! ```no_run
//! use purgatorio_redis::{Config, Consumer, Scheduler, Timers, Verdict};
//!
//! let timers = Timers::connect("redis://127.0.0.1:6379", Config::new("payments"))?;
//! let at = timers.server_time_ms()? + 30_000;
//! timers.schedule("retry-order-17", at, b"charge card")?;
//! let scheduler = Scheduler::new(timers.clone());
//! std::thread::spawn(move || scheduler.run());
//! let consumer = Consumer::new(timers, "worker-1")?;
//! let stop = consumer.stop_handle(); // for another thread
//! consumer.run(|delivery| {
//!     println!("{} is due", delivery.id);
//!     Verdict::Ack
//! })?;
//! # drop(stop);
//! # Ok::<(), purgatorio_redis::Error>(())
//! ```

#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub mod aio;
mod calls;
mod check;
#[cfg(feature = "cluster")]
mod cluster;
mod config;
mod consumer;
mod delivery;
mod error;
mod health;
mod keys;
mod link;
mod manage;
mod namespace;
mod recurring;
mod replication;
mod reply;
mod resubscribe;
mod scheduler;
mod scripts;
mod stop;
mod timers;
mod zoned;

pub use check::{Check, Stranded, WrongType};
pub use config::{
    Config, Misfire, ReplicaAck, MAX_DEADLINE_MS, MAX_DELAY_MS, MAX_NAMESPACE, MAX_PAYLOAD_LIMIT,
    MAX_PROMOTE_BATCH, MAX_PROMOTE_PACE, MAX_REPLICA_WAIT,
};
pub use consumer::{Consumer, MAX_BLOCK, MAX_CONSUMER_NAME};
pub use delivery::{Backoff, Delivery, Verdict};
pub use error::Error;
pub use health::{wait_for_redis, MAX_BACKOFF};
pub use manage::{DeadLetter, DeadLetterRetry, InFlight, Pending, MAX_LIST};
pub use recurring::Recurrence;
pub use scheduler::{Scheduler, Step, MAX_SLEEP};
pub use stop::StopHandle;
pub use timers::{Metrics, Scheduled, Timers};
