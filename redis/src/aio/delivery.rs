//! [`Delivery`] on tokio: a due timer handed to an async consumer, with the
//! handles that finish it.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use crate::aio::consumer::Shared;
use crate::calls::{self, Finish};
use crate::link::Tries;
use crate::{Backoff, Error, Verdict};

/// A due timer handed to an async [`Consumer`](super::Consumer), with the handles that
/// finish it: [`ack`](Self::ack), [`retry`](Self::retry) (or
/// [`retry_with`](Self::retry_with) a [`Backoff`] policy), and
/// [`extend_visibility`](Self::extend_visibility) for a slow handler. It
/// dereferences to the timer ([`crate::Delivery`]: id, payload, deadline,
/// attempt). A delivery dropped unfinished is delivered again after the
/// visibility timeout.
pub struct Delivery {
    /// The timer.
    timer: crate::Delivery,
    /// The consumer that holds it.
    shared: Arc<Shared>,
}

impl fmt::Debug for Delivery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("aio::Delivery")
            .field("timer", &self.timer)
            .field("consumer", &self.shared.name)
            .finish()
    }
}

impl Deref for Delivery {
    type Target = crate::Delivery;

    fn deref(&self) -> &crate::Delivery {
        &self.timer
    }
}

impl Delivery {
    /// The delivery of `timer` to the consumer `shared`.
    pub(super) fn new(timer: crate::Delivery, shared: Arc<Shared>) -> Delivery {
        Delivery { timer, shared }
    }

    /// The timer: id, payload, deadline, attempt.
    pub fn timer(&self) -> &crate::Delivery {
        &self.timer
    }

    /// Acknowledges it: done, removed from the stream.
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] after the retries (it stays unacknowledged,
    /// and is delivered again after the visibility timeout unless a later
    /// call succeeds).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use purgatorio_redis::{aio, Config};
    /// # #[tokio::main] async fn main() -> Result<(), purgatorio_redis::Error> {
    /// # let timers = aio::Timers::connect("redis://127.0.0.1:6379", Config::new("payments")).await?;
    /// # let consumer = aio::Consumer::new(timers.clone(), "worker-1").await?;
    /// # let delivery = consumer.poll(std::time::Duration::from_secs(1), 1).await?.pop().unwrap();
    /// delivery.ack().await?;
    /// # Ok(()) }
    /// ```
    pub async fn ack(&self) -> Result<(), Error> {
        self.finish(Verdict::Ack).await
    }

    /// Acknowledges it with the next batch instead of at once: no round
    /// trip of its own. The stream sends the owed acknowledgements in one
    /// call before its next read from Redis (and
    /// [`Consumer::flush_acks`](super::Consumer::flush_acks) at once), as the blocking consumer's `run`
    /// does: a timer then costs Redis a third of the commands of
    /// [`ack`](Self::ack) (`tests/aio.rs` counts them). Until sent, it is
    /// unacknowledged: if the process dies first, it is delivered again
    /// after the visibility timeout.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use futures_util::StreamExt;
    /// # use purgatorio_redis::{aio, Config};
    /// # #[tokio::main] async fn main() -> Result<(), purgatorio_redis::Error> {
    /// # let timers = aio::Timers::connect("redis://127.0.0.1:6379", Config::new("payments")).await?;
    /// # let consumer = aio::Consumer::new(timers.clone(), "worker-1").await?;
    /// let mut deliveries = consumer.deliveries();
    /// while let Some(delivery) = deliveries.next().await {
    ///     let delivery = delivery?;
    ///     // … handle it …
    ///     delivery.ack_in_batch();
    /// }
    /// # Ok(()) }
    /// ```
    pub fn ack_in_batch(self) {
        let Delivery { timer, shared } = self;
        shared.owed.lock().expect("owed acks").push(timer);
    }

    /// Schedules its next attempt `delay` from now by Redis's clock and
    /// acknowledges this one; after
    /// [`Config::max_attempts`](crate::Config::max_attempts) it goes to the
    /// dead-letter stream instead.
    ///
    /// # Errors
    ///
    /// [`Error::DeadlineOutOfRange`] for a delay over
    /// [`MAX_DELAY_MS`](crate::MAX_DELAY_MS); [`Error::Unavailable`] after
    /// the retries (it stays unacknowledged).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use purgatorio_redis::{aio, Config};
    /// # #[tokio::main] async fn main() -> Result<(), purgatorio_redis::Error> {
    /// # let timers = aio::Timers::connect("redis://127.0.0.1:6379", Config::new("payments")).await?;
    /// # let consumer = aio::Consumer::new(timers.clone(), "worker-1").await?;
    /// # let delivery = consumer.poll(std::time::Duration::from_secs(1), 1).await?.pop().unwrap();
    /// delivery.retry(std::time::Duration::from_secs(10)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn retry(&self, delay: Duration) -> Result<(), Error> {
        self.finish(Verdict::RetryLater(delay)).await
    }

    /// [`retry`](Self::retry) after the delay `policy` gives this attempt.
    ///
    /// # Errors
    ///
    /// As [`retry`](Self::retry).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use purgatorio_redis::Backoff;
    /// # use purgatorio_redis::{aio, Config};
    /// # #[tokio::main] async fn main() -> Result<(), purgatorio_redis::Error> {
    /// # let timers = aio::Timers::connect("redis://127.0.0.1:6379", Config::new("payments")).await?;
    /// # let consumer = aio::Consumer::new(timers.clone(), "worker-1").await?;
    /// # let delivery = consumer.poll(std::time::Duration::from_secs(1), 1).await?.pop().unwrap();
    /// let policy = Backoff::Exponential {
    ///     initial: std::time::Duration::from_secs(1),
    ///     max: std::time::Duration::from_secs(60),
    /// };
    /// delivery.retry_with(&policy).await?;
    /// # Ok(()) }
    /// ```
    pub async fn retry_with(&self, policy: &Backoff) -> Result<(), Error> {
        self.finish(policy.retry(&self.timer)).await
    }

    /// Acknowledges it or schedules its next attempt, as `verdict` says.
    ///
    /// # Errors
    ///
    /// As [`retry`](Self::retry).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use purgatorio_redis::Verdict;
    /// # use purgatorio_redis::{aio, Config};
    /// # #[tokio::main] async fn main() -> Result<(), purgatorio_redis::Error> {
    /// # let timers = aio::Timers::connect("redis://127.0.0.1:6379", Config::new("payments")).await?;
    /// # let consumer = aio::Consumer::new(timers.clone(), "worker-1").await?;
    /// # let delivery = consumer.poll(std::time::Duration::from_secs(1), 1).await?.pop().unwrap();
    /// delivery.finish(Verdict::Ack).await?;
    /// # Ok(()) }
    /// ```
    pub async fn finish(&self, verdict: Verdict) -> Result<(), Error> {
        let shared = &self.shared;
        let timer = &self.timer;
        match calls::finish(shared.timers.ns(), timer, verdict)? {
            Finish::Ack => {}
            Finish::DeadLetter => {
                return shared
                    .remove(std::slice::from_ref(timer), Some(timer))
                    .await
            }
            Finish::Retry { delay_ms } => {
                let at = shared.timers.server_time_ms().await? + delay_ms;
                shared
                    .timers
                    .schedule_attempt(&timer.id, at, &timer.payload, timer.attempt + 1)
                    .await?;
            }
        }
        shared.remove(std::slice::from_ref(timer), None).await
    }

    /// Restarts its visibility timeout, so that no other consumer takes it
    /// over while a slow handler still works on it; not an attempt. `false`
    /// if this consumer no longer holds it.
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] after the retries.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use purgatorio_redis::{aio, Config};
    /// # #[tokio::main] async fn main() -> Result<(), purgatorio_redis::Error> {
    /// # let timers = aio::Timers::connect("redis://127.0.0.1:6379", Config::new("payments")).await?;
    /// # let consumer = aio::Consumer::new(timers.clone(), "worker-1").await?;
    /// # let delivery = consumer.poll(std::time::Duration::from_secs(1), 1).await?.pop().unwrap();
    /// // … half of the slow work …
    /// delivery.extend_visibility().await?;
    /// // … the other half …
    /// delivery.ack().await?;
    /// # Ok(()) }
    /// ```
    pub async fn extend_visibility(&self) -> Result<bool, Error> {
        let shared = &self.shared;
        let (ns, name, entry) = (shared.timers.ns(), &shared.name, &self.timer.entry);
        let extended: i64 = shared
            .timers
            .connection
            .call(Tries::Config, |mut c| async move {
                calls::extend(ns, name, entry).invoke_async(&mut c).await
            })
            .await?;
        Ok(extended == 1)
    }
}
