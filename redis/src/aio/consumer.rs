//! [`Consumer`] on tokio: the consumer group's member as a
//! [`Stream`](futures_core::Stream) of [`Delivery`] handles, each of which
//! acknowledges, retries or extends itself.
//!
//! A consumer's blocking reads (`XREADGROUP … BLOCK`) run on a connection
//! of their own, so that they never hold up the calls multiplexed on the
//! namespace's connection manager (acknowledgements, schedules). A read
//! that fails or outlives its timeout drops that connection, never reusing
//! it: its answer may still come, and would hand entries to nobody.

use std::collections::VecDeque;
use std::fmt;
use std::ops::Deref;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_core::Stream;
use redis::aio::MultiplexedConnection;
use redis::Value;
use tokio::time::Instant;

use crate::aio::Timers;
use crate::link::{transient, Health, Tries};
use crate::{calls, reply, Backoff, Error, Verdict, MAX_BLOCK};

/// Deliveries read per blocking read of a [`Deliveries`] stream.
const READ_BATCH: usize = 100;

/// A member of the stream's consumer group, on tokio. Cheap to clone.
///
/// # Examples
///
/// ```no_run
/// use futures_util::StreamExt;
/// use purgatorio_redis::{aio, Backoff, Config};
/// use std::time::Duration;
///
/// # #[tokio::main] async fn main() -> Result<(), purgatorio_redis::Error> {
/// let timers = aio::Timers::connect("redis://127.0.0.1:6379", Config::new("payments")).await?;
/// tokio::spawn(aio::Scheduler::new(timers.clone()).run());
/// let consumer = aio::Consumer::new(timers, "worker-1").await?;
/// let policy = Backoff::Exponential { initial: Duration::from_secs(1), max: Duration::from_secs(60) };
/// let mut deliveries = consumer.deliveries();
/// while let Some(delivery) = deliveries.next().await {
///     let delivery = delivery?;
///     if delivery.payload == b"charge card" {
///         delivery.ack().await?;
///     } else {
///         delivery.retry_with(&policy).await?;
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Consumer {
    /// What the clones and the deliveries share.
    shared: Arc<Shared>,
}

/// What a consumer's clones, streams and deliveries share.
struct Shared {
    /// The namespace.
    timers: Timers,
    /// This consumer's name in the group.
    name: String,
    /// How often a stream looks for entries other consumers abandoned: half
    /// the visibility timeout, at most [`MAX_BLOCK`]; also its longest
    /// blocking read.
    look_every: Duration,
    /// The connection of the blocking reads, opened on first use and
    /// dropped after a failure.
    reader: tokio::sync::Mutex<Option<MultiplexedConnection>>,
    /// Deliveries acknowledged by [`Delivery::ack_in_batch`], not yet sent
    /// to Redis. Only pushed to and taken whole under the lock.
    owed: std::sync::Mutex<Vec<crate::Delivery>>,
}

impl fmt::Debug for Consumer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("aio::Consumer")
            .field("name", &self.shared.name)
            .finish()
    }
}

impl Consumer {
    /// Joins the consumer group as `name` (creating the group if needed).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a name that is empty, over
    /// [`MAX_CONSUMER_NAME`](crate::MAX_CONSUMER_NAME) bytes or holds a
    /// control character; [`Error::Unavailable`] after the retries.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use purgatorio_redis::{aio, Config};
    /// # #[tokio::main] async fn main() -> Result<(), purgatorio_redis::Error> {
    /// # let timers = aio::Timers::connect("redis://127.0.0.1:6379", Config::new("payments")).await?;
    /// let consumer = aio::Consumer::new(timers, "worker-1").await?;
    /// # Ok(()) }
    /// ```
    pub async fn new(timers: Timers, name: &str) -> Result<Consumer, Error> {
        calls::check_consumer_name(name)?;
        let visibility = timers.config().visibility_timeout;
        let consumer = Consumer {
            shared: Arc::new(Shared {
                timers,
                name: name.to_string(),
                look_every: (visibility / 2).clamp(Duration::from_millis(1), MAX_BLOCK),
                reader: tokio::sync::Mutex::new(None),
                owed: std::sync::Mutex::new(Vec::new()),
            }),
        };
        consumer.shared.create_group(Tries::Config).await?;
        Ok(consumer)
    }

    /// The due timers, forever: first those other consumers left
    /// unacknowledged past the visibility timeout (looked for every half
    /// visibility timeout), then new ones. Between deliveries an idle
    /// stream waits in one blocking read on Redis, not polling.
    ///
    /// The stream rides out Redis outages: a failed read is tried again
    /// with backoff (50 ms doubling, at most
    /// [`MAX_BACKOFF`](crate::MAX_BACKOFF)), the outage and its end are
    /// logged once each, and a consumer group lost with Redis's data is
    /// created again. It yields an error only when Redis refuses a call for
    /// another reason (a wrong type at one of the namespace's keys), and
    /// goes on after it. Timers past
    /// [`Config::max_attempts`](crate::Config::max_attempts) go to the
    /// dead-letter stream instead of the stream.
    ///
    /// Dropping the stream stops it; deliveries it read ahead and never
    /// yielded, like deliveries dropped unacknowledged, are delivered again
    /// after the visibility timeout. Acknowledgements that
    /// [`Delivery::ack_in_batch`] left owed stay with the consumer: the next
    /// stream or [`flush_acks`](Self::flush_acks) sends them.
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
    ///     delivery?.ack().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn deliveries(&self) -> Deliveries {
        let feed = Feed {
            shared: Arc::clone(&self.shared),
            buffer: VecDeque::new(),
            next_take_over: Instant::now(),
            health: Health::new(format!("consumer {}", self.shared.name)),
        };
        Deliveries {
            inner: Box::pin(futures_util::stream::unfold(feed, Feed::next)),
        }
    }

    /// Up to `max` due timers: first those other consumers abandoned, then
    /// new ones, waiting up to `block` (at most [`MAX_BLOCK`]) for one.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for `max` of 0; [`Error::Unavailable`]
    /// after the retries.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use purgatorio_redis::{aio, Config};
    /// # #[tokio::main] async fn main() -> Result<(), purgatorio_redis::Error> {
    /// # let timers = aio::Timers::connect("redis://127.0.0.1:6379", Config::new("payments")).await?;
    /// # let consumer = aio::Consumer::new(timers.clone(), "worker-1").await?;
    /// for delivery in consumer.poll(std::time::Duration::from_secs(1), 100).await? {
    ///     delivery.ack().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn poll(&self, block: Duration, max: usize) -> Result<Vec<Delivery>, Error> {
        if max == 0 {
            return Err(Error::InvalidArgument {
                name: "count",
                why: "must be at least 1",
            });
        }
        let shared = &self.shared;
        let mut out = shared.take_over(max, Tries::Config).await?;
        if out.len() < max {
            let block = block.min(MAX_BLOCK);
            let mut failures = 0;
            loop {
                match shared.read_new(block, max - out.len()).await {
                    Ok(read) => {
                        out.extend(read);
                        break;
                    }
                    Err(Error::Unavailable { last, .. }) => {
                        failures += 1;
                        if failures >= shared.tries() {
                            return Err(Error::Unavailable {
                                tries: failures,
                                last,
                            });
                        }
                        tokio::time::sleep(crate::link::backoff(failures)).await;
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(out
            .into_iter()
            .map(|timer| Delivery {
                timer,
                shared: Arc::clone(shared),
            })
            .collect())
    }

    /// Sends the acknowledgements [`Delivery::ack_in_batch`] left owed, in
    /// one round trip (per 1,000); a stream sends them by itself before
    /// each read from Redis.
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] after the retries (they stay owed, and are
    /// sent again by the next flush or read).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use purgatorio_redis::{aio, Config};
    /// # #[tokio::main] async fn main() -> Result<(), purgatorio_redis::Error> {
    /// # let timers = aio::Timers::connect("redis://127.0.0.1:6379", Config::new("payments")).await?;
    /// # let consumer = aio::Consumer::new(timers.clone(), "worker-1").await?;
    /// for delivery in consumer.poll(std::time::Duration::from_secs(1), 100).await? {
    ///     delivery.ack_in_batch();
    /// }
    /// consumer.flush_acks().await?;
    /// # Ok(()) }
    /// ```
    pub async fn flush_acks(&self) -> Result<(), Error> {
        self.shared.flush(Tries::Config).await
    }

    /// Acknowledges `deliveries` in one round trip (per 1,000).
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
    /// let batch = consumer.poll(std::time::Duration::from_secs(1), 100).await?;
    /// // … handle them …
    /// consumer.ack_all(&batch).await?; // one round trip
    /// # Ok(()) }
    /// ```
    pub async fn ack_all(&self, deliveries: &[Delivery]) -> Result<(), Error> {
        let timers: Vec<crate::Delivery> = deliveries.iter().map(|d| d.timer.clone()).collect();
        self.shared.remove(&timers, None).await
    }
}

impl Shared {
    /// Sends the owed acknowledgements; those that fail stay owed.
    async fn flush(&self, tries: Tries) -> Result<(), Error> {
        let owed = std::mem::take(&mut *self.owed.lock().expect("owed acks"));
        if owed.is_empty() {
            return Ok(());
        }
        let sent = self.remove_with(&owed, None, tries).await;
        if sent.is_err() {
            self.owed.lock().expect("owed acks").extend(owed);
        }
        sent
    }

    /// Tries of a public call.
    fn tries(&self) -> u32 {
        self.timers.config().retries.max(1)
    }

    /// Creates the consumer group if it does not exist.
    async fn create_group(&self, tries: Tries) -> Result<(), Error> {
        let create = &calls::create_group(self.timers.link());
        let created = self
            .timers
            .connection
            .call(tries, |mut c| async move {
                create.query_async::<()>(&mut c).await
            })
            .await;
        match created {
            Err(Error::Redis(e)) if calls::group_exists(&e) => Ok(()),
            other => other,
        }
    }

    /// Up to `max` entries idle past the visibility timeout, now this
    /// consumer's; those past the last attempt are dead-lettered.
    async fn take_over(&self, max: usize, tries: Tries) -> Result<Vec<crate::Delivery>, Error> {
        let link = self.timers.link();
        let connection = &self.timers.connection;
        let claim = &calls::autoclaim(link, &self.name, max);
        let claimed: Value = connection
            .call(
                tries,
                |mut c| async move { claim.query_async(&mut c).await },
            )
            .await?;
        let mut out = Vec::new();
        for (entry, fields) in reply::autoclaim_entries(&claimed) {
            let count = &calls::delivery_count(link, &entry);
            let count: Value = connection
                .call(
                    tries,
                    |mut c| async move { count.query_async(&mut c).await },
                )
                .await?;
            let delivery = calls::taken_over(
                crate::Delivery::from_entry(entry, &fields),
                reply::pending_delivery_count(&count)?,
            );
            let counted = &calls::count_redelivered(link);
            connection
                .call(tries, |mut c| async move {
                    counted.query_async::<i64>(&mut c).await
                })
                .await?;
            if delivery.attempt > link.config.max_attempts {
                self.remove(std::slice::from_ref(&delivery), Some(&delivery))
                    .await?;
            } else {
                out.push(delivery);
            }
        }
        Ok(out)
    }

    /// Up to `max` new entries, waiting up to `block` for one; one try on
    /// the reader connection, which a failure drops.
    async fn read_new(&self, block: Duration, max: usize) -> Result<Vec<crate::Delivery>, Error> {
        let link = self.timers.link();
        let mut reader = self.reader.lock().await;
        link.count_round_trip();
        let response_timeout = link.config.response_timeout;
        let block = block.min(MAX_BLOCK);
        let read = async {
            if reader.is_none() {
                // The connection's own timeout is a backstop for the longest
                // read; each read is bounded below by its own wait.
                let config = redis::AsyncConnectionConfig::new()
                    .set_connection_timeout(response_timeout)
                    .set_response_timeout(response_timeout + MAX_BLOCK);
                let client = link.client_with_handshake()?;
                *reader = Some(
                    client
                        .get_multiplexed_async_connection_with_config(&config)
                        .await?,
                );
            }
            let connection = reader.as_mut().expect("opened above");
            let block_ms = u64::try_from(block.as_millis()).unwrap_or(u64::MAX).max(1);
            calls::read_group(link, &self.name, max, block_ms)
                .query_async::<Value>(connection)
                .await
        };
        // Redis may take the read's wait, then the response timeout.
        let read = async {
            tokio::time::timeout(response_timeout + block, read)
                .await
                .unwrap_or_else(|_| Err(std::io::Error::from(std::io::ErrorKind::TimedOut).into()))
        };
        match read.await {
            Ok(read) => Ok(reply::read_group_entries(&read)
                .into_iter()
                .map(|(entry, fields)| crate::Delivery::from_entry(entry, &fields))
                .collect()),
            Err(e) => {
                // Its answer may still come: never reuse it.
                *reader = None;
                if transient(&e) {
                    Err(Error::Unavailable { tries: 1, last: e })
                } else {
                    Err(Error::refused(e))
                }
            }
        }
    }

    /// Removes `timers` from the stream, adding `letter` to the dead-letter
    /// stream in the same atomic step.
    async fn remove(
        &self,
        timers: &[crate::Delivery],
        letter: Option<&crate::Delivery>,
    ) -> Result<(), Error> {
        self.remove_with(timers, letter, Tries::Config).await
    }

    /// [`remove`](Self::remove), trying as `tries` says.
    async fn remove_with(
        &self,
        timers: &[crate::Delivery],
        letter: Option<&crate::Delivery>,
        tries: Tries,
    ) -> Result<(), Error> {
        for remove in &calls::removals(self.timers.link(), timers, letter) {
            self.timers
                .connection
                .call(tries, |mut c| async move {
                    remove.invoke_async::<i64>(&mut c).await
                })
                .await?;
        }
        Ok(())
    }
}

/// A due timer handed to an async [`Consumer`], with the handles that
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
    /// [`Consumer::flush_acks`] at once), as the blocking consumer's `run`
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
        if let Verdict::RetryLater(delay) = verdict {
            if timer.attempt >= shared.timers.config().max_attempts {
                return shared
                    .remove(std::slice::from_ref(timer), Some(timer))
                    .await;
            }
            let delay_ms = calls::retry_delay_ms(delay)?;
            let at = shared.timers.server_time_ms().await? + delay_ms;
            shared
                .timers
                .schedule_attempt(&timer.id, at, &timer.payload, timer.attempt + 1)
                .await?;
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
        let (link, name, entry) = (shared.timers.link(), &shared.name, &self.timer.entry);
        let extended: i64 = shared
            .timers
            .connection
            .call(Tries::Config, |mut c| async move {
                calls::extend(link, name, entry).invoke_async(&mut c).await
            })
            .await?;
        Ok(extended == 1)
    }
}

/// The stream of a consumer's deliveries, from [`Consumer::deliveries`].
pub struct Deliveries {
    /// The state machine behind it.
    inner: Pin<Box<dyn Stream<Item = Result<Delivery, Error>> + Send>>,
}

impl fmt::Debug for Deliveries {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("aio::Deliveries").finish_non_exhaustive()
    }
}

impl Stream for Deliveries {
    type Item = Result<Delivery, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}

/// The state of a [`Deliveries`] stream between items.
struct Feed {
    /// The consumer.
    shared: Arc<Shared>,
    /// Read and not yet yielded.
    buffer: VecDeque<crate::Delivery>,
    /// When to look for abandoned entries next.
    next_take_over: Instant,
    /// Redis's health, for logging each outage once.
    health: Health,
}

impl Feed {
    /// The next item, riding out outages.
    async fn next(mut self) -> Option<(Result<Delivery, Error>, Feed)> {
        loop {
            if let Some(timer) = self.buffer.pop_front() {
                let delivery = Delivery {
                    timer,
                    shared: Arc::clone(&self.shared),
                };
                return Some((Ok(delivery), self));
            }
            match self.fill().await {
                Ok(()) => self.health.answered(),
                Err(e) if e.is_unavailable() => tokio::time::sleep(self.health.failed(&e)).await,
                Err(Error::Redis(e)) if calls::no_group(&e) => {
                    // Redis came back without its data: the group is gone.
                    log::warn!(
                        "consumer {}: the consumer group is gone; creating it",
                        self.shared.name
                    );
                    if let Err(e) = self.shared.create_group(Tries::Once).await {
                        tokio::time::sleep(self.health.failed(&e)).await;
                    }
                }
                Err(e) => return Some((Err(e), self)),
            }
        }
    }

    /// Reads into the buffer: abandoned entries when it is time to look,
    /// else new ones, blocking until the next look at the latest.
    async fn fill(&mut self) -> Result<(), Error> {
        let shared = &self.shared;
        shared.flush(Tries::Once).await?;
        if Instant::now() >= self.next_take_over {
            let taken = shared.take_over(READ_BATCH, Tries::Once).await?;
            self.next_take_over = Instant::now() + shared.look_every;
            if !taken.is_empty() {
                self.buffer.extend(taken);
                return Ok(());
            }
        }
        let block = self
            .next_take_over
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1));
        self.buffer
            .extend(shared.read_new(block, READ_BATCH).await?);
        Ok(())
    }
}
