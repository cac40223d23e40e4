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

use futures_util::StreamExt;
use tokio::sync::Notify;

use crate::aio::Timers;
use crate::link::{Health, Link};
use crate::scheduler::{Resubscribe, Step, MISFIRE_AFTER};
use crate::timers::MisfirePage;
use crate::{Error, MAX_SLEEP};

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
        Scheduler { timers }
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
        let link = Arc::clone(&self.timers.connection.link);
        tokio::select! {
            () = shutdown => Ok(()),
            () = listen(link, Arc::clone(&wake)) => Ok(()),
            () = self.promote_forever(&timer, &wake) => Ok(()),
        }
    }

    /// The node's loop: misfires, then promotion steps and waits.
    async fn promote_forever(&self, timer: &purgatorio::Timer, wake: &Notify) {
        let mut health = Health::new(format!("scheduler of {}", self.timers.config().namespace));
        let mut misfires_done = false;
        loop {
            if !misfires_done {
                // One bounded page per step, until a page comes back short.
                match self.timers.handle_misfires(MISFIRE_AFTER).await {
                    Ok(MisfirePage::More) => {
                        health.answered();
                        continue;
                    }
                    Ok(MisfirePage::Done) => misfires_done = true,
                    Err(_) => {} // the promotion below fails the same way
                }
            }
            let wait = match self.timers.promote(MISFIRE_AFTER).await {
                Ok(step) => {
                    health.answered();
                    match Step::after(step) {
                        Step::Again => continue, // more may be due: no wait
                        Step::Sleep(wait) => Some(wait),
                        Step::Idle => None,
                    }
                }
                Err(e) => Some(health.failed(&e)),
            };
            // A wake-up that came during the step left a permit: the wait
            // ends at once.
            match wait {
                Some(wait) => {
                    tokio::select! {
                        () = timer.sleep(wait) => {}
                        () = wake.notified() => {}
                    }
                }
                None => wake.notified().await,
            }
        }
    }
}

/// Listens on the namespace's wake channel, forever: each message wakes
/// the node, as does each (re)subscription (whatever was scheduled before it
/// is seen by the next step). Silence longer than [`MAX_SLEEP`] is taken
/// for a dead link, and the listener subscribes again on a fresh
/// connection; a failed or short-lived subscription is made again with
/// backoff, as the blocking node's is ([`Resubscribe`]).
async fn listen(link: Arc<Link>, wake: Arc<Notify>) {
    let mut again = Resubscribe::new(&link.config.namespace);
    loop {
        if let Some(wait) = again.wait() {
            tokio::time::sleep(wait).await;
        }
        let subscribed = tokio::time::timeout(link.config.response_timeout, async {
            let mut pubsub = link.client_with_handshake()?.get_async_pubsub().await?;
            pubsub.subscribe(&link.keys.wake).await?;
            Ok::<_, redis::RedisError>(pubsub)
        })
        .await
        .unwrap_or_else(|_| Err(std::io::Error::from(std::io::ErrorKind::TimedOut).into()));
        let pubsub = match subscribed {
            Ok(pubsub) => pubsub,
            Err(e) => {
                again.failed(e);
                continue;
            }
        };
        let since = again.subscribed();
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
        again.lost(since, lost);
    }
}
