//! [`Scheduler`] on tokio: a node that moves due timers to the stream, as
//! a future.
//!
//! The node is the blocking [`crate::Scheduler`]'s loop as one future: it
//! runs the promotion step, then waits on purgatorio's in-memory
//! [`Timer`](purgatorio::Timer) until the next deadline Redis reported, or
//! until the wake channel (Pub/Sub, listened to by a second future joined
//! to the first) says an earlier deadline arrived. Its waits are measured
//! in Redis's clock; the node's own clock is never read.

use std::fmt;
use std::future::{self, Future};
use std::sync::Arc;
use std::time::Instant;

use futures_util::StreamExt;
use tokio::sync::Notify;

use crate::aio::link::node_client;
use crate::aio::Timers;
use crate::health::Health;
use crate::namespace::Namespace;
use crate::resubscribe::Resubscribe;
use crate::scheduler::{wait_after, Start, Wait, MISFIRE_AFTER};
use crate::{Error, Step, MAX_SLEEP};

/// A scheduler node on tokio: moves due timers to the stream. Run any
/// number, blocking and async alike.
///
/// # Examples
///
/// ```no_run
/// use purgatorio_redis::{aio, Config};
///
/// # #[tokio::main] async fn main() -> Result<(), purgatorio_redis::Error> {
/// let timers = aio::Timers::connect("redis://127.0.0.1:6379", Config::new("payments")).await?;
/// let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
/// let node = tokio::spawn(aio::Scheduler::new(timers).run_until(async {
///     let _ = stopped.await;
/// }));
/// // … later:
/// let _ = stop.send(());
/// node.await.expect("the node's task")?;
/// # Ok(()) }
/// ```
pub struct Scheduler {
    /// The namespace.
    timers: Timers,
    /// How far the node's start has got: misfires first, then promotion.
    start: Start,
}

impl fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("aio::Scheduler")
            .field("timers", &self.timers)
            .finish()
    }
}

impl Scheduler {
    /// A node for `timers`' namespace.
    pub fn new(timers: Timers) -> Scheduler {
        Scheduler {
            timers,
            start: Start::default(),
        }
    }

    /// One step of the node, one script call in Redis, as the blocking
    /// [`Scheduler::step`](crate::Scheduler::step): until a misfire page
    /// comes back short, a page of the misfire policy (at most 500
    /// timers); then a promotion of at most
    /// [`Config::promote_batch`](crate::Config::promote_batch) due timers.
    /// [`run_until`](Self::run_until) is this step in a loop with its
    /// waits; calling it directly drives a node by hand (a test, or a loop
    /// of one's own), one try per call. A step whose misfire page failed
    /// promotes nothing: the policy is applied before any overdue timer
    /// can be delivered.
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] if Redis did not answer within the response
    /// timeout (one try); [`Error::Redis`] if it refused the call.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use purgatorio_redis::{aio, Config, Step};
    ///
    /// # #[tokio::main] async fn main() -> Result<(), purgatorio_redis::Error> {
    /// let timers = aio::Timers::connect("redis://127.0.0.1:6379", Config::new("payments")).await?;
    /// let node = aio::Scheduler::new(timers);
    /// // Everything due now, in bounded steps:
    /// while node.step().await? == Step::Again {}
    /// # Ok(()) }
    /// ```
    pub async fn step(&self) -> Result<Step, Error> {
        if self.start.misfires_pending() {
            let page = self.timers.handle_misfires(MISFIRE_AFTER).await?;
            return Ok(self.start.after_misfires(page));
        }
        let pace = self.timers.config().promote_pace;
        let promotion = self.timers.promote(MISFIRE_AFTER).await?;
        Ok(Step::after(promotion, pace))
    }

    /// Runs the node until the future is dropped (or its task aborted):
    /// [`run_until`](Self::run_until) a shutdown that never comes.
    ///
    /// # Errors
    ///
    /// As [`run_until`](Self::run_until).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use purgatorio_redis::{aio, Config};
    /// # #[tokio::main] async fn main() -> Result<(), purgatorio_redis::Error> {
    /// # let timers = aio::Timers::connect("redis://127.0.0.1:6379", Config::new("payments")).await?;
    /// let node = tokio::spawn(aio::Scheduler::new(timers).run());
    /// // … later:
    /// node.abort();
    /// # Ok(()) }
    /// ```
    pub async fn run(self) -> Result<(), Error> {
        self.run_until(future::pending::<()>()).await
    }

    /// Runs the node until `shutdown` completes: handles misfires once,
    /// then promotes due timers and waits until the next deadline or a
    /// wake-up. Dropping the future instead stops it as well: each step is
    /// one atomic script, so a step cut short either ran whole or not at
    /// all.
    ///
    /// It rides out Redis outages as the blocking node does: a failed step
    /// is tried again with backoff (50 ms doubling, at most
    /// [`MAX_BACKOFF`](crate::MAX_BACKOFF)), every call is bounded by the
    /// response timeout, and the outage and its end are logged once each.
    ///
    /// # Errors
    ///
    /// [`Error::Protocol`] if the in-memory timer cannot start; otherwise
    /// it returns `Ok` once `shutdown` completes.
    pub async fn run_until(self, shutdown: impl Future<Output = ()>) -> Result<(), Error> {
        let timer = purgatorio::Timer::builder()
            .thread_name("redis-scheduler")
            .executor(purgatorio::Executor::Inline)
            .build()
            .map_err(|e| Error::Protocol(e.to_string()))?;
        let wake = Arc::new(Notify::new());
        let ns = Arc::clone(&self.timers.connection.ns);
        tokio::select! {
            () = shutdown => Ok(()),
            () = listen(ns, Arc::clone(&wake)) => Ok(()),
            () = self.promote_forever(&timer, &wake) => Ok(()),
        }
    }

    /// The node's loop: [`step`](Self::step)s and their waits.
    async fn promote_forever(&self, timer: &purgatorio::Timer, wake: &Notify) {
        let mut health = Health::new(format!("scheduler of {}", self.timers.config().namespace));
        loop {
            // A wake-up that came during the step left a permit: the wait
            // ends at once.
            match wait_after(&mut health, self.step().await) {
                Wait::None => {} // more may be due: no wait
                Wait::For(wait) => {
                    tokio::select! {
                        () = timer.sleep(wait) => {}
                        () = wake.notified() => {}
                    }
                }
                Wait::Woken => wake.notified().await,
            }
        }
    }
}

/// Listens on the namespace's wake channel, forever: each message wakes
/// the node, as does each (re)subscription (whatever was scheduled before it
/// is seen by the next step). Silence longer than [`MAX_SLEEP`] is taken
/// for a dead link, and the listener subscribes again on a fresh
/// connection; a failed or short-lived subscription is made again with
/// backoff, as the blocking node's is ([`Resubscribe`](crate::resubscribe::Resubscribe)).
async fn listen(ns: Arc<Namespace>, wake: Arc<Notify>) {
    let mut again = Resubscribe::new(&ns.config.namespace);
    loop {
        if let Some(wait) = again.wait() {
            tokio::time::sleep(wait).await;
        }
        let subscribed = tokio::time::timeout(ns.config.response_timeout, async {
            let mut pubsub = node_client(&ns).await?.get_async_pubsub().await?;
            pubsub.subscribe(&ns.keys.wake).await?;
            Ok::<_, redis::RedisError>(pubsub)
        })
        .await
        .unwrap_or_else(|_| Err(std::io::Error::from(std::io::ErrorKind::TimedOut).into()));
        let pubsub = match subscribed {
            Ok(pubsub) => pubsub,
            Err(e) => {
                again.failed(Instant::now(), e);
                continue;
            }
        };
        again.subscribed(Instant::now());
        wake.notify_one();
        let mut messages = pubsub.into_on_message();
        let lost: redis::RedisError = loop {
            match tokio::time::timeout(MAX_SLEEP, messages.next()).await {
                Ok(Some(_message)) => {
                    again.heard();
                    wake.notify_one();
                }
                Ok(None) => break std::io::Error::from(std::io::ErrorKind::ConnectionReset).into(),
                Err(_) => break std::io::Error::from(std::io::ErrorKind::TimedOut).into(),
            }
        };
        again.lost(Instant::now(), lost);
    }
}
