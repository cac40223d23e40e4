//! [`Consumer`]: a member of the stream's consumer group. Reads due timers,
//! takes over those a dead consumer left, acknowledges, retries later, and
//! dead-letters a timer that failed every attempt.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use redis::Value;

use crate::calls::{self, Finish};
use crate::error::transient;
use crate::health::{backoff, Health};
use crate::link::Tries;
use crate::reply;
use crate::stop::{Blocked, NOT_BLOCKED};
use crate::{Delivery, Error, StopHandle, Timers, Verdict};

/// A member of the stream's consumer group.
pub struct Consumer {
    /// The namespace.
    timers: Timers,
    /// This consumer's name in the group.
    name: String,
    /// The connection of the blocking reads, kept apart from the pool so
    /// that [`StopHandle::stop`] can unblock it by its client id.
    reader: Mutex<Option<Reader>>,
    /// The client id of `reader` while it blocks, for [`StopHandle`].
    blocked: Blocked,
    /// Set by [`StopHandle::stop`].
    stopped: Arc<AtomicBool>,
}

/// A connection for blocking reads and its Redis client id.
struct Reader {
    /// The connection.
    connection: redis::Connection,
    /// Its `CLIENT ID`.
    id: i64,
}

/// The longest blocking read of [`Consumer::run`]: it also waits for the
/// next look for abandoned entries, at most this long.
pub const MAX_BLOCK: Duration = Duration::from_secs(15);

impl fmt::Debug for Consumer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Consumer")
            .field("name", &self.name)
            .finish()
    }
}

/// The longest consumer name accepted, bytes.
pub const MAX_CONSUMER_NAME: usize = 256;

/// Refuses `max` of 0: Redis would answer `COUNT must be > 0`.
fn check_count(max: usize) -> Result<(), Error> {
    if max == 0 {
        return Err(Error::InvalidArgument {
            name: "count",
            why: "must be at least 1",
        });
    }
    Ok(())
}

impl Consumer {
    /// Joins the consumer group as `name` (creating the group if needed).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a name that is empty, over
    /// [`MAX_CONSUMER_NAME`] bytes or holds a control character;
    /// [`Error::Unavailable`] after the retries.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use purgatorio_redis::*;
    /// # let timers = Timers::connect("redis://127.0.0.1:6379", Config::new("payments"))?;
    /// let consumer = Consumer::new(timers, "worker-1")?;
    /// let stop = consumer.stop_handle();
    /// let worker = std::thread::spawn(move || consumer.run(|delivery| {
    ///     println!("{} is due", delivery.id);
    ///     Verdict::Ack
    /// }));
    /// // … later, from any thread:
    /// stop.stop();
    /// worker.join().expect("worker")?;
    /// # Ok::<(), purgatorio_redis::Error>(())
    /// ```
    pub fn new(timers: Timers, name: &str) -> Result<Consumer, Error> {
        calls::check_consumer_name(name)?;
        let consumer = Consumer {
            timers,
            name: name.to_string(),
            reader: Mutex::new(None),
            blocked: Arc::new(AtomicI64::new(NOT_BLOCKED)),
            stopped: Arc::new(AtomicBool::new(false)),
        };
        consumer.create_group(Tries::Config)?;
        Ok(consumer)
    }

    /// Creates the consumer group if it does not exist (with the stream).
    fn create_group(&self, tries: Tries) -> Result<(), Error> {
        let create = calls::create_group(&self.timers.ns);
        let created = self.timers.ns.link.call(tries, |c| create.query::<()>(c));
        match created {
            Err(Error::Redis(e)) if calls::group_exists(&e) => Ok(()),
            other => other,
        }
    }

    /// A handle that stops [`run`](Self::run) from another thread, even
    /// while it waits in a blocking read.
    pub fn stop_handle(&self) -> StopHandle {
        StopHandle::consumer(
            Arc::clone(&self.stopped),
            Arc::clone(&self.timers.ns),
            Arc::clone(&self.blocked),
        )
    }

    /// Up to `max` due timers: first those another consumer left
    /// unacknowledged for longer than the visibility timeout, then new ones,
    /// waiting up to `block` for one to arrive. Timers past
    /// [`Config::max_attempts`](crate::Config::max_attempts) go to the
    /// dead-letter stream instead.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for `max` of 0; [`Error::Unavailable`]
    /// after the retries.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use purgatorio_redis::*;
    /// # let timers = Timers::connect("redis://127.0.0.1:6379", Config::new("payments"))?;
    /// use std::time::Duration;
    ///
    /// let consumer = Consumer::new(timers, "worker-1")?;
    /// for delivery in consumer.poll(Duration::from_secs(1), 100)? {
    ///     consumer.finish(&delivery, Verdict::RetryLater(Duration::from_secs(10)))?;
    /// }
    /// # Ok::<(), purgatorio_redis::Error>(())
    /// ```
    pub fn poll(&self, block: Duration, max: usize) -> Result<Vec<Delivery>, Error> {
        check_count(max)?;
        let mut out = self.take_over_with(max, Tries::Config)?;
        if out.len() < max {
            out.extend(self.read_with(block, max - out.len(), Tries::Config)?);
        }
        Ok(out)
    }

    /// Up to `max` entries that other consumers left unacknowledged for
    /// longer than the visibility timeout, now this consumer's.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for `max` of 0; [`Error::Unavailable`]
    /// after the retries.
    pub fn take_over(&self, max: usize) -> Result<Vec<Delivery>, Error> {
        check_count(max)?;
        self.take_over_with(max, Tries::Config)
    }

    /// [`take_over`](Self::take_over), trying as `tries` says.
    fn take_over_with(&self, max: usize, tries: Tries) -> Result<Vec<Delivery>, Error> {
        let ns = &self.timers.ns;
        let claim = calls::autoclaim(ns, &self.name, max);
        let claimed: Value = ns.link.call(tries, |c| claim.query(c))?;
        let claimed = reply::autoclaim_entries(&claimed);
        if claimed.is_empty() {
            return Ok(Vec::new());
        }
        let counts = calls::take_over_counts(ns, &claimed);
        let counts: Vec<Value> = ns.link.call(tries, |c| counts.query(c))?;
        let taken = calls::taken_over(ns, claimed, &counts)?;
        for dead in &taken.dead {
            self.dead_letter(dead, tries)?;
        }
        Ok(taken.deliveries)
    }

    /// Up to `max` new due timers, waiting up to `block` for one.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for `max` of 0; [`Error::Unavailable`]
    /// after the retries.
    pub fn read_new(&self, block: Duration, max: usize) -> Result<Vec<Delivery>, Error> {
        check_count(max)?;
        self.read_with(block, max, Tries::Config)
    }

    /// [`read_new`](Self::read_new), trying as `tries` says, on the
    /// consumer's own connection: its client id is published while it
    /// blocks, so that [`StopHandle::stop`] can cut the wait short.
    fn read_with(&self, block: Duration, max: usize, tries: Tries) -> Result<Vec<Delivery>, Error> {
        let ns = &self.timers.ns;
        let tries = match tries {
            Tries::Config => ns.config.retries.max(1),
            Tries::Once => 1,
        };
        let block_ms = u64::try_from(block.as_millis()).unwrap_or(u64::MAX).max(1);
        let mut reader = self.reader.lock().expect("reader");
        let mut failures = 0;
        loop {
            match self.read_once(&mut reader, block, block_ms, max) {
                Ok(read) => {
                    return Ok(reply::read_group_entries(&read)
                        .into_iter()
                        .map(|(entry, fields)| Delivery::from_entry(entry, &fields))
                        .collect())
                }
                Err(e) if transient(&e) => {
                    // Its answer may still come: never reuse it.
                    *reader = None;
                    failures += 1;
                    if failures >= tries {
                        return Err(Error::Unavailable { tries, last: e });
                    }
                    thread::sleep(backoff(failures));
                }
                Err(e) => return Err(Error::refused(e)),
            }
        }
    }

    /// One `XREADGROUP … BLOCK` on the reader connection (opened if
    /// needed); nil at once if the consumer is stopped.
    fn read_once(
        &self,
        reader: &mut Option<Reader>,
        block: Duration,
        block_ms: u64,
        max: usize,
    ) -> redis::RedisResult<Value> {
        let ns = &self.timers.ns;
        if reader.is_none() {
            let mut connection = ns.link.connect()?;
            let id: i64 = redis::cmd("CLIENT").arg("ID").query(&mut connection)?;
            *reader = Some(Reader { connection, id });
        }
        let Reader { connection, id } = reader.as_mut().expect("opened above");
        connection.set_read_timeout(Some(ns.config.response_timeout.saturating_add(block)))?;
        // Published before the flag is checked: a stop either sees the id or
        // is seen here (both SeqCst).
        self.blocked.store(*id, Ordering::SeqCst);
        if self.stopped.load(Ordering::SeqCst) {
            self.blocked.store(NOT_BLOCKED, Ordering::SeqCst);
            return Ok(Value::Nil);
        }
        ns.link.count_round_trip();
        let read = calls::read_group(ns, &self.name, max, block_ms).query(connection);
        self.blocked.store(NOT_BLOCKED, Ordering::SeqCst);
        match read {
            // CLIENT UNBLOCK (a stop) ends the wait with no entries.
            Err(e) if e.code() == Some("UNBLOCKED") => Ok(Value::Nil),
            other => other,
        }
    }

    /// Moves `delivery` to the dead-letter stream.
    fn dead_letter(&self, delivery: &Delivery, tries: Tries) -> Result<(), Error> {
        self.remove(std::slice::from_ref(delivery), Some(delivery), tries)
    }

    /// Removes `deliveries` from the stream (acknowledged, and trimmed once
    /// nothing older is pending), adding `letter` to the dead-letter stream
    /// in the same atomic step: the one way entries leave the stream.
    fn remove(
        &self,
        deliveries: &[Delivery],
        letter: Option<&Delivery>,
        tries: Tries,
    ) -> Result<(), Error> {
        for remove in calls::removals(&self.timers.ns, deliveries, letter) {
            self.timers
                .ns
                .link
                .call(tries, |c| remove.invoke::<i64>(c))?;
        }
        Ok(())
    }

    /// Restarts `delivery`'s visibility timeout: a handler that needs
    /// longer than [`Config::visibility_timeout`](crate::Config::visibility_timeout)
    /// calls this before it runs out, so that no other consumer takes the
    /// delivery over. Does not count as an attempt. `false` if this consumer
    /// no longer holds it (another took it over, or it was acknowledged).
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] after the retries.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use purgatorio_redis::*;
    /// # let timers = Timers::connect("redis://127.0.0.1:6379", Config::new("payments"))?;
    /// # let consumer = Consumer::new(timers, "worker-1")?;
    /// # let delivery = consumer.poll(std::time::Duration::from_secs(1), 1)?.pop().unwrap();
    /// // … half of the slow work …
    /// consumer.extend_visibility(&delivery)?;
    /// // … the other half …
    /// consumer.finish(&delivery, Verdict::Ack)?;
    /// # Ok::<(), purgatorio_redis::Error>(())
    /// ```
    pub fn extend_visibility(&self, delivery: &Delivery) -> Result<bool, Error> {
        let extend = calls::extend(&self.timers.ns, &self.name, &delivery.entry);
        let extended: i64 = self.timers.ns.link.with_connection(|c| extend.invoke(c))?;
        Ok(extended == 1)
    }

    /// Acknowledges `delivery`, or schedules its next attempt.
    ///
    /// # Errors
    ///
    /// [`Error::DeadlineOutOfRange`] for a retry delay over
    /// [`MAX_DELAY_MS`](crate::MAX_DELAY_MS) (the delivery stays
    /// unacknowledged); [`Error::Unavailable`] after the retries.
    pub fn finish(&self, delivery: &Delivery, verdict: Verdict) -> Result<(), Error> {
        self.finish_with(delivery, verdict, Tries::Config)
    }

    /// [`finish`](Self::finish), trying as `tries` says.
    fn finish_with(
        &self,
        delivery: &Delivery,
        verdict: Verdict,
        tries: Tries,
    ) -> Result<(), Error> {
        match calls::finish(&self.timers.ns, delivery, verdict)? {
            Finish::Ack => {}
            Finish::DeadLetter => return self.dead_letter(delivery, tries),
            Finish::Retry { delay_ms } => {
                let at = self.timers.server_time_ms()? + delay_ms;
                self.timers.schedule_attempt(
                    &delivery.id,
                    at,
                    &delivery.payload,
                    delivery.attempt + 1,
                )?;
            }
        }
        self.ack_with(std::slice::from_ref(delivery), tries)
    }

    /// Acknowledges `deliveries` in one round trip.
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] after the retries.
    pub fn ack_all(&self, deliveries: &[Delivery]) -> Result<(), Error> {
        self.ack_with(deliveries, Tries::Config)
    }

    /// [`ack_all`](Self::ack_all), trying as `tries` says.
    fn ack_with(&self, deliveries: &[Delivery], tries: Tries) -> Result<(), Error> {
        if deliveries.is_empty() {
            return Ok(());
        }
        self.remove(deliveries, None, tries)
    }

    /// Delivers due timers to `handle` until stopped by a
    /// [`StopHandle`] from [`stop_handle`](Self::stop_handle),
    /// acknowledging or retrying each as it says.
    ///
    /// It never gives up: a failed call is retried with backoff (50 ms
    /// doubling, at most [`MAX_BACKOFF`](crate::MAX_BACKOFF)), whether
    /// Redis is down (an outage) or refuses the call (a data error: a key
    /// of the namespace overwritten with another type); each is logged
    /// once as what it is, and its end once. Acknowledgements that failed
    /// are sent again, and a consumer group lost with Redis's data is
    /// created again. An idle consumer waits in one blocking read until
    /// the next look for abandoned entries (every half visibility timeout,
    /// at most [`MAX_BLOCK`]).
    ///
    /// # Errors
    ///
    /// None: it returns `Ok` once stopped. (The `Result` is kept so that a
    /// caller's `?` stays valid.)
    pub fn run(&self, mut handle: impl FnMut(&Delivery) -> Verdict) -> Result<(), Error> {
        let visibility = self.timers.ns.config.visibility_timeout;
        let look_every = (visibility / 2).clamp(Duration::from_millis(1), MAX_BLOCK);
        let mut health = Health::new(format!("consumer {}", self.name));
        let mut round = Round {
            next_take_over: Instant::now(),
            unacknowledged: Vec::new(),
            look_every,
        };
        while !self.stopped.load(Ordering::SeqCst) {
            match self.round(&mut round, &mut handle) {
                Ok(()) => health.answered(),
                Err(e) if e.is_unavailable() => thread::sleep(health.failed(&e)),
                Err(Error::Redis(e)) if calls::no_group(&e) => {
                    // Redis came back without its data: the group is gone.
                    log::warn!(
                        "consumer {}: the consumer group is gone; creating it",
                        self.name
                    );
                    if let Err(e) = self.create_group(Tries::Once) {
                        thread::sleep(health.failed(&e));
                    }
                }
                // A data error (a key of the namespace overwritten by
                // another application): logged as what it is, tried again
                // with the outage's backoff. It may mend; giving up would
                // leave every timer of the namespace undelivered.
                Err(e) => thread::sleep(health.failed(&e)),
            }
        }
        // What was handled but not yet acknowledged: one last try.
        let _ = self.ack_with(&round.unacknowledged, Tries::Once);
        Ok(())
    }

    /// One round of [`run`](Self::run): send the acknowledgements still
    /// owed, look for abandoned entries when due, read new ones (blocking
    /// until the next look), hand each to `handle`.
    fn round(
        &self,
        round: &mut Round,
        handle: &mut impl FnMut(&Delivery) -> Verdict,
    ) -> Result<(), Error> {
        self.ack_with(&round.unacknowledged, Tries::Once)?;
        round.unacknowledged.clear();
        let mut batch = Vec::new();
        if Instant::now() >= round.next_take_over {
            batch = self.take_over_with(RUN_BATCH, Tries::Once)?;
            round.next_take_over = Instant::now() + round.look_every;
        }
        if batch.is_empty() {
            let block = round
                .next_take_over
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1));
            batch = self.read_with(block, RUN_BATCH, Tries::Once)?;
        }
        for delivery in batch {
            match handle(&delivery) {
                Verdict::Ack => round.unacknowledged.push(delivery),
                verdict => self.finish_with(&delivery, verdict, Tries::Once)?,
            }
        }
        self.ack_with(&round.unacknowledged, Tries::Once)?;
        round.unacknowledged.clear();
        Ok(())
    }
}

/// Deliveries read per round of [`Consumer::run`].
const RUN_BATCH: usize = 100;

/// The state of [`Consumer::run`] between rounds.
struct Round {
    /// When to look for abandoned entries next.
    next_take_over: Instant,
    /// Handled and acknowledged by the handler, not yet by Redis.
    unacknowledged: Vec<Delivery>,
    /// How often to look for abandoned entries.
    look_every: Duration,
}
