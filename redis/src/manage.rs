//! Management by id: read, move, fire now, and list pending and dead
//! timers (what users of job queues expect). Each is one bounded call.

use redis::Value;

use crate::{calls, Error, Timers};

/// A pending timer, as [`Timers::get`] reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pending {
    /// Its deadline, ms since the Unix epoch by Redis's clock.
    pub deadline_ms: u64,
    /// The attempt it will be delivered as (1 unless it was retried).
    pub attempt: u32,
    /// Its payload.
    pub payload: Vec<u8>,
}

/// A timer in the dead-letter stream: it failed every attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadLetter {
    /// The timer's id.
    pub id: String,
    /// Its payload.
    pub payload: Vec<u8>,
    /// Its deadline, ms since the Unix epoch by Redis's clock.
    pub deadline_ms: u64,
    /// The last attempt, the one that failed.
    pub attempt: u32,
    /// Its entry in the dead-letter stream.
    pub(crate) entry: String,
}

/// A delivered timer not yet acknowledged (BullMQ's "active" job), as
/// [`Timers::in_flight`] lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InFlight {
    /// The timer's id.
    pub id: String,
    /// The consumer holding it.
    pub consumer: String,
    /// How long since it was delivered or its visibility last extended, ms.
    pub idle_ms: u64,
    /// How many times the consumer group delivered it (take-overs
    /// included).
    pub deliveries: u32,
    /// Its deadline, ms since the Unix epoch by Redis's clock.
    pub deadline_ms: u64,
    /// Its attempt.
    pub attempt: u32,
}

/// What [`Timers::retry_dead_letter`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeadLetterRetry {
    /// The timer is pending again, due now, as a first attempt; it left
    /// the dead-letter stream.
    Pending,
    /// No such dead letter (retried or removed already): nothing changed.
    Gone,
    /// A timer of its id is pending (scheduled again meanwhile): nothing
    /// changed, so that it is not overwritten.
    IdPending,
}

impl DeadLetterRetry {
    /// The outcome the revive script answered.
    pub(crate) fn from_reply(reply: i64) -> DeadLetterRetry {
        match reply {
            1 => DeadLetterRetry::Pending,
            -1 => DeadLetterRetry::IdPending,
            _ => DeadLetterRetry::Gone,
        }
    }
}

/// The most timers [`Timers::earliest`] and [`Timers::dead_letters`] list
/// per call.
pub const MAX_LIST: usize = 1_000;

/// Refuses a listing of 0 or more than [`MAX_LIST`].
pub(crate) fn check_list(max: usize) -> Result<(), Error> {
    if max == 0 || max > MAX_LIST {
        return Err(Error::InvalidArgument {
            name: "count",
            why: "must be from 1 to 1,000",
        });
    }
    Ok(())
}

impl Timers {
    /// Pending timer `id`: its deadline, attempt and payload; `None` once
    /// it was delivered or cancelled, or if it never was.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidId`]; [`Error::Unavailable`] after the retries.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use purgatorio_redis::*;
    /// # let timers = Timers::connect("redis://127.0.0.1:6379", Config::new("payments"))?;
    /// if let Some(pending) = timers.get("retry-order-17")? {
    ///     println!("due at {} ms", pending.deadline_ms);
    /// }
    /// # Ok::<(), purgatorio_redis::Error>(())
    /// ```
    pub fn get(&self, id: &str) -> Result<Option<Pending>, Error> {
        self.check_id(id)?;
        let get = calls::get(&self.ns, id);
        let found = self.ns.link.with_connection(|c| get.invoke(c))?;
        calls::pending(found)
    }

    /// Moves pending timer `id` to `at_ms`, keeping its payload and
    /// attempt; `false` if it is not pending (delivered, cancelled, never
    /// scheduled), and then nothing is written. [`fire_now`](Self::fire_now)
    /// moves it to now.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidId`], [`Error::DeadlineOutOfRange`];
    /// [`Error::Unavailable`] after the retries.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use purgatorio_redis::*;
    /// # let timers = Timers::connect("redis://127.0.0.1:6379", Config::new("payments"))?;
    /// let later = timers.server_time_ms()? + 60_000;
    /// assert!(timers.reschedule("retry-order-17", later)?);
    /// # Ok::<(), purgatorio_redis::Error>(())
    /// ```
    pub fn reschedule(&self, id: &str, at_ms: u64) -> Result<bool, Error> {
        self.check_input(id, at_ms, b"")?;
        self.move_to(id, &at_ms.to_string())
    }

    /// Moves pending timer `id` to `at` (ms, or `now`: Redis's `TIME`).
    fn move_to(&self, id: &str, at: &str) -> Result<bool, Error> {
        let reschedule = calls::reschedule(&self.ns, id, at);
        let moved: i64 = self.ns.link.with_connection(|c| reschedule.invoke(c))?;
        Ok(moved == 1)
    }

    /// Makes pending timer `id` due now: a scheduler node delivers it at
    /// once (it is woken through Pub/Sub). `false` if it is not pending.
    ///
    /// # Errors
    ///
    /// As [`reschedule`](Self::reschedule).
    pub fn fire_now(&self, id: &str) -> Result<bool, Error> {
        self.check_id(id)?;
        // Its deadline becomes Redis's now, read in the script: due at once,
        // and not counted late.
        self.move_to(id, "now")
    }

    /// Up to `max` (at most [`MAX_LIST`]) pending timers, earliest deadline
    /// first, as `(id, deadline_ms)`; those due by Redis's clock are
    /// waiting for a scheduler node.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for `max` of 0 or over [`MAX_LIST`];
    /// [`Error::Unavailable`] after the retries.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use purgatorio_redis::*;
    /// # let timers = Timers::connect("redis://127.0.0.1:6379", Config::new("payments"))?;
    /// let now = timers.server_time_ms()?;
    /// let due = timers.earliest(100)?.into_iter().filter(|(_, at)| *at <= now).count();
    /// println!("{due} due and not yet moved to the stream");
    /// # Ok::<(), purgatorio_redis::Error>(())
    /// ```
    pub fn earliest(&self, max: usize) -> Result<Vec<(String, u64)>, Error> {
        check_list(max)?;
        let earliest = calls::earliest(&self.ns, max);
        let flat: Vec<String> = self.ns.link.with_connection(|c| earliest.invoke(c))?;
        calls::listing(&flat)
    }

    /// Up to `max` (at most [`MAX_LIST`]) pending timers that are due by
    /// Redis's clock and not yet moved to the stream (waiting for a
    /// scheduler node), earliest first, as `(id, deadline_ms)`. Two round
    /// trips: Redis's `TIME`, then [`earliest`](Self::earliest).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for `max` of 0 or over [`MAX_LIST`];
    /// [`Error::Unavailable`] after the retries.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use purgatorio_redis::*;
    /// # let timers = Timers::connect("redis://127.0.0.1:6379", Config::new("payments"))?;
    /// if !timers.due(1)?.is_empty() {
    ///     eprintln!("timers are due and no scheduler node moves them: is one running?");
    /// }
    /// # Ok::<(), purgatorio_redis::Error>(())
    /// ```
    pub fn due(&self, max: usize) -> Result<Vec<(String, u64)>, Error> {
        check_list(max)?;
        let now = self.server_time_ms()?;
        Ok(calls::due(self.earliest(max)?, now))
    }

    /// Up to `max` (at most [`MAX_LIST`]) delivered timers not yet
    /// acknowledged, oldest delivery first. Two round trips (`XPENDING`, then
    /// one pipeline of `XRANGE`s).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for `max` of 0 or over [`MAX_LIST`];
    /// [`Error::Unavailable`] after the retries.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use purgatorio_redis::*;
    /// # let timers = Timers::connect("redis://127.0.0.1:6379", Config::new("payments"))?;
    /// for held in timers.in_flight(100)? {
    ///     println!("{} held by {} for {} ms", held.id, held.consumer, held.idle_ms);
    /// }
    /// # Ok::<(), purgatorio_redis::Error>(())
    /// ```
    pub fn in_flight(&self, max: usize) -> Result<Vec<InFlight>, Error> {
        check_list(max)?;
        let held = calls::held(&self.ns, max);
        let rows: Value = self.ns.link.with_connection(|c| match held.query(c) {
            Err(e) if calls::no_group(&e) => Ok(Value::Nil), // nothing delivered yet
            other => other,
        })?;
        let rows = calls::held_rows(&rows);
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let read = calls::read_entries(&self.ns, &rows);
        let entries: Vec<Value> = self.ns.link.with_connection(|c| read.query(c))?;
        Ok(calls::in_flight_of(rows, &entries))
    }

    /// Up to `max` (at most [`MAX_LIST`]) timers of the dead-letter stream,
    /// oldest first.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for `max` of 0 or over [`MAX_LIST`];
    /// [`Error::Unavailable`] after the retries.
    pub fn dead_letters(&self, max: usize) -> Result<Vec<DeadLetter>, Error> {
        check_list(max)?;
        let read = calls::dead_letters(&self.ns, max);
        let read: Value = self.ns.link.with_connection(|c| read.query(c))?;
        Ok(calls::dead_letters_of(&read))
    }

    /// Moves dead letter `letter` back to pending, due now by Redis's
    /// clock, as a first attempt (its payload kept), and removes it from
    /// the dead-letter stream, in one atomic step.
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
    /// // The payment gateway is back: try every failed charge again.
    /// for letter in timers.dead_letters(100)? {
    ///     timers.retry_dead_letter(&letter)?;
    /// }
    /// # Ok::<(), purgatorio_redis::Error>(())
    /// ```
    pub fn retry_dead_letter(&self, letter: &DeadLetter) -> Result<DeadLetterRetry, Error> {
        let revive = calls::revive(&self.ns, &letter.entry);
        let reply: i64 = self.ns.link.with_connection(|c| revive.invoke(c))?;
        Ok(DeadLetterRetry::from_reply(reply))
    }
}
