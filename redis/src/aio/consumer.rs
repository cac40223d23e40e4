//! [`Consumer`] on tokio: a member of the stream's consumer group, and
//! what its clones, streams ([`stream`](super::stream)) and deliveries
//! ([`delivery`](super::delivery)) share.
//!
//! A consumer's blocking reads (`XREADGROUP … BLOCK`) run on a connection
//! of their own, so that they never hold up the calls multiplexed on the
//! namespace's connection manager (acknowledgements, schedules). A read
//! that fails or outlives its timeout drops that connection, never reusing
//! it: its answer may still come, and would hand entries to nobody.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::Value;

use crate::aio::{Deliveries, Delivery, Timers};
use crate::error::transient;
use crate::link::Tries;
use crate::{calls, reply, Error, MAX_BLOCK};

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
pub(super) struct Shared {
    /// The namespace.
    pub(super) timers: Timers,
    /// This consumer's name in the group.
    pub(super) name: String,
    /// How often a stream looks for entries other consumers abandoned: half
    /// the visibility timeout, at most [`MAX_BLOCK`]; also its longest
    /// blocking read.
    pub(super) look_every: Duration,
    /// The connection of the blocking reads, opened on first use and
    /// dropped after a failure.
    reader: tokio::sync::Mutex<Option<MultiplexedConnection>>,
    /// Deliveries acknowledged by [`Delivery::ack_in_batch`], not yet sent
    /// to Redis. Only pushed to and taken whole under the lock.
    pub(super) owed: std::sync::Mutex<Vec<crate::Delivery>>,
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
    /// another reason (a wrong type at one of the namespace's keys: a data
    /// error, logged once as such), and goes on after it, [`MAX_BACKOFF`](crate::MAX_BACKOFF) later. Timers past
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
        Deliveries::new(Arc::clone(&self.shared))
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
                        tokio::time::sleep(crate::health::backoff(failures)).await;
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(out
            .into_iter()
            .map(|timer| Delivery::new(timer, Arc::clone(shared)))
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
        let timers: Vec<crate::Delivery> = deliveries.iter().map(|d| d.timer().clone()).collect();
        self.shared.remove(&timers, None).await
    }
}

impl Shared {
    /// Sends the owed acknowledgements; those that fail stay owed.
    pub(super) async fn flush(&self, tries: Tries) -> Result<(), Error> {
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
    pub(super) fn tries(&self) -> u32 {
        self.timers.config().retries.max(1)
    }

    /// Creates the consumer group if it does not exist.
    pub(super) async fn create_group(&self, tries: Tries) -> Result<(), Error> {
        let create = &calls::create_group(self.timers.ns());
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
    pub(super) async fn take_over(
        &self,
        max: usize,
        tries: Tries,
    ) -> Result<Vec<crate::Delivery>, Error> {
        let ns = self.timers.ns();
        let connection = &self.timers.connection;
        let claim = &calls::autoclaim(ns, &self.name, max);
        let claimed: Value = connection
            .call(
                tries,
                |mut c| async move { claim.query_async(&mut c).await },
            )
            .await?;
        let claimed = reply::autoclaim_entries(&claimed);
        if claimed.is_empty() {
            return Ok(Vec::new());
        }
        let counts = &calls::take_over_counts(ns, &claimed);
        let counts: Vec<Value> = connection
            .call(
                tries,
                |mut c| async move { counts.query_async(&mut c).await },
            )
            .await?;
        let taken = calls::taken_over(ns, claimed, &counts)?;
        for dead in &taken.dead {
            self.remove_with(std::slice::from_ref(dead), Some(dead), tries)
                .await?;
        }
        Ok(taken.deliveries)
    }

    /// Up to `max` new entries, waiting up to `block` for one; one try on
    /// the reader connection, which a failure drops.
    pub(super) async fn read_new(
        &self,
        block: Duration,
        max: usize,
    ) -> Result<Vec<crate::Delivery>, Error> {
        let ns = self.timers.ns();
        let mut reader = self.reader.lock().await;
        ns.link.count_round_trip();
        let response_timeout = ns.config.response_timeout;
        let block = block.min(MAX_BLOCK);
        let read = async {
            if reader.is_none() {
                // The connection's own timeout is a backstop for the longest
                // read; each read is bounded below by its own wait.
                let config = redis::AsyncConnectionConfig::new()
                    .set_connection_timeout(response_timeout)
                    .set_response_timeout(response_timeout + MAX_BLOCK);
                let client = super::link::node_client(&self.timers.connection.ns).await?;
                *reader = Some(
                    client
                        .get_multiplexed_async_connection_with_config(&config)
                        .await?,
                );
            }
            let connection = reader.as_mut().expect("opened above");
            let block_ms = u64::try_from(block.as_millis()).unwrap_or(u64::MAX).max(1);
            calls::read_group(ns, &self.name, max, block_ms)
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
    pub(super) async fn remove(
        &self,
        timers: &[crate::Delivery],
        letter: Option<&crate::Delivery>,
    ) -> Result<(), Error> {
        self.remove_with(timers, letter, Tries::Config).await
    }

    /// [`remove`](Self::remove), trying as `tries` says.
    pub(super) async fn remove_with(
        &self,
        timers: &[crate::Delivery],
        letter: Option<&crate::Delivery>,
        tries: Tries,
    ) -> Result<(), Error> {
        for remove in &calls::removals(self.timers.ns(), timers, letter) {
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
