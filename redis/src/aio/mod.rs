//! The async face, on tokio (feature `tokio`): the same namespace, keys,
//! scripts and guarantees as the blocking face, with every call an
//! `async fn`.
//!
//! | blocking | async |
//! |---|---|
//! | [`crate::Timers`] | [`Timers`]: schedule, cancel, manage (`async fn`s) |
//! | [`crate::Scheduler::run`] on a thread | [`Scheduler::run`] / [`Scheduler::run_until`], a future to spawn |
//! | [`crate::Consumer::run`] with a callback | [`Consumer::deliveries`], a `Stream` of [`Delivery`] handles |
//! | [`crate::Verdict`] returned by the callback | [`Delivery::ack`], [`Delivery::retry`], [`Delivery::retry_with`]; [`Delivery::ack_in_batch`] to acknowledge with the next batch, as `run` does |
//! | [`crate::Consumer::extend_visibility`] | [`Delivery::extend_visibility`] |
//! | [`crate::StopHandle`] | drop the stream; drop the node's future or end its `shutdown` |
//!
//! Connections: a [`Timers`] and its clones share one
//! [`ConnectionManager`](redis::aio::ConnectionManager) (one multiplexed
//! connection that reconnects by itself); each consumer's blocking reads
//! run on a connection of their own, and each scheduler node listens for
//! wake-ups on one Pub/Sub connection. Every call has the configured
//! response timeout and is retried with the blocking face's backoff; TLS
//! (`rediss://`) works with the `tls` feature, as on the blocking face,
//! and so does a Redis Cluster ([`Timers::connect_cluster`], feature
//! `cluster`): every connection goes to the master of the namespace's
//! slot, asked again after a failover.
//!
//! The two faces build every call from one place (the crate's `calls`
//! module) and read every reply with the same code, so a namespace may mix
//! blocking and async nodes.
//!
//! ```no_run
//! use futures_util::StreamExt;
//! use purgatorio_redis::{aio, Config};
//!
//! # #[tokio::main] async fn main() -> Result<(), purgatorio_redis::Error> {
//! let timers = aio::Timers::connect("redis://127.0.0.1:6379", Config::new("payments")).await?;
//! let at = timers.server_time_ms().await? + 30_000;
//! timers.schedule("retry-order-17", at, b"charge card").await?;
//! tokio::spawn(aio::Scheduler::new(timers.clone()).run());
//! let consumer = aio::Consumer::new(timers, "worker-1").await?;
//! let mut deliveries = consumer.deliveries();
//! while let Some(delivery) = deliveries.next().await {
//!     let delivery = delivery?;
//!     println!("{} is due", delivery.id);
//!     delivery.ack().await?;
//! }
//! # Ok(()) }
//! ```

mod consumer;
mod delivery;
mod link;
mod manage;
mod scheduler;
mod start;
mod stream;
mod timers;

pub use consumer::Consumer;
pub use delivery::Delivery;
pub use scheduler::Scheduler;
pub use start::wait_for_redis;
pub use stream::Deliveries;
pub use timers::Timers;
