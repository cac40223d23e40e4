//! Management by id on tokio: read, move, fire now, list pending, due,
//! in-flight and dead timers, and send a dead letter back (the async face
//! of `crate::manage`). Each is one bounded call, or two.

use redis::Value;

use crate::aio::Timers;
use crate::link::Tries;
use crate::manage::check_list;
use crate::{calls, DeadLetter, DeadLetterRetry, Error, InFlight, Pending};

impl Timers {
    /// Pending timer `id`, or `None` once it was delivered or cancelled.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidId`]; [`Error::Unavailable`] after the retries.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use purgatorio_redis::{aio, Config};
    /// # #[tokio::main] async fn main() -> Result<(), purgatorio_redis::Error> {
    /// # let timers = aio::Timers::connect("redis://127.0.0.1:6379", Config::new("payments")).await?;
    /// if let Some(pending) = timers.get("retry-order-17").await? {
    ///     println!("due at {} ms", pending.deadline_ms);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn get(&self, id: &str) -> Result<Option<Pending>, Error> {
        self.checks.check_id(id)?;
        let ns = self.ns();
        let found: calls::GetReply = self
            .connection
            .call(Tries::Config, |mut c| async move {
                calls::get(ns, id).invoke_async(&mut c).await
            })
            .await?;
        calls::pending(found)
    }

    /// Moves pending timer `id` to `at_ms`, keeping its payload and
    /// attempt; `false` if it is not pending.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidId`], [`Error::DeadlineOutOfRange`];
    /// [`Error::Unavailable`] after the retries.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use purgatorio_redis::{aio, Config};
    /// # #[tokio::main] async fn main() -> Result<(), purgatorio_redis::Error> {
    /// # let timers = aio::Timers::connect("redis://127.0.0.1:6379", Config::new("payments")).await?;
    /// let later = timers.server_time_ms().await? + 60_000;
    /// assert!(timers.reschedule("retry-order-17", later).await?);
    /// # Ok(()) }
    /// ```
    pub async fn reschedule(&self, id: &str, at_ms: u64) -> Result<bool, Error> {
        self.checks.check_input(id, at_ms, b"")?;
        self.move_to(id, &at_ms.to_string()).await
    }

    /// Makes pending timer `id` due now (by Redis's clock); `false` if it
    /// is not pending.
    ///
    /// # Errors
    ///
    /// As [`reschedule`](Self::reschedule).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use purgatorio_redis::{aio, Config};
    /// # #[tokio::main] async fn main() -> Result<(), purgatorio_redis::Error> {
    /// # let timers = aio::Timers::connect("redis://127.0.0.1:6379", Config::new("payments")).await?;
    /// timers.fire_now("retry-order-17").await?;
    /// # Ok(()) }
    /// ```
    pub async fn fire_now(&self, id: &str) -> Result<bool, Error> {
        self.checks.check_id(id)?;
        self.move_to(id, "now").await
    }

    /// Moves pending timer `id` to `at` (ms, or `now`).
    async fn move_to(&self, id: &str, at: &str) -> Result<bool, Error> {
        let ns = self.ns();
        let moved: i64 = self
            .connection
            .call(Tries::Config, |mut c| async move {
                calls::reschedule(ns, id, at).invoke_async(&mut c).await
            })
            .await?;
        Ok(moved == 1)
    }

    /// Up to `max` (at most [`MAX_LIST`](crate::MAX_LIST)) pending timers,
    /// earliest deadline first, as `(id, deadline_ms)`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for `max` of 0 or over
    /// [`MAX_LIST`](crate::MAX_LIST); [`Error::Unavailable`] after the
    /// retries.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use purgatorio_redis::{aio, Config};
    /// # #[tokio::main] async fn main() -> Result<(), purgatorio_redis::Error> {
    /// # let timers = aio::Timers::connect("redis://127.0.0.1:6379", Config::new("payments")).await?;
    /// for (id, at) in timers.earliest(10).await? {
    ///     println!("{id} at {at} ms");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn earliest(&self, max: usize) -> Result<Vec<(String, u64)>, Error> {
        check_list(max)?;
        let ns = self.ns();
        let flat: Vec<String> = self
            .connection
            .call(Tries::Config, |mut c| async move {
                calls::earliest(ns, max).invoke_async(&mut c).await
            })
            .await?;
        calls::listing(&flat)
    }

    /// Up to `max` (at most [`MAX_LIST`](crate::MAX_LIST)) pending timers
    /// due by Redis's clock and not yet moved to the stream, earliest
    /// first, as `(id, deadline_ms)`.
    ///
    /// # Errors
    ///
    /// As [`crate::Timers::due`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use purgatorio_redis::{aio, Config};
    /// # #[tokio::main] async fn main() -> Result<(), purgatorio_redis::Error> {
    /// # let timers = aio::Timers::connect("redis://127.0.0.1:6379", Config::new("payments")).await?;
    /// if !timers.due(1).await?.is_empty() {
    ///     eprintln!("timers are due and no scheduler node moves them");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn due(&self, max: usize) -> Result<Vec<(String, u64)>, Error> {
        check_list(max)?;
        let now = self.server_time_ms().await?;
        Ok(calls::due(self.earliest(max).await?, now))
    }

    /// Up to `max` (at most [`MAX_LIST`](crate::MAX_LIST)) delivered timers
    /// not yet acknowledged, oldest delivery first.
    ///
    /// # Errors
    ///
    /// As [`crate::Timers::in_flight`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use purgatorio_redis::{aio, Config};
    /// # #[tokio::main] async fn main() -> Result<(), purgatorio_redis::Error> {
    /// # let timers = aio::Timers::connect("redis://127.0.0.1:6379", Config::new("payments")).await?;
    /// for held in timers.in_flight(100).await? {
    ///     println!("{} held by {} for {} ms", held.id, held.consumer, held.idle_ms);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn in_flight(&self, max: usize) -> Result<Vec<InFlight>, Error> {
        check_list(max)?;
        let held = &calls::held(self.ns(), max);
        let rows: Value = self
            .connection
            .call(Tries::Config, |mut c| async move {
                match held.query_async(&mut c).await {
                    Err(e) if calls::no_group(&e) => Ok(Value::Nil),
                    other => other,
                }
            })
            .await?;
        let rows = calls::held_rows(&rows);
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let read = &calls::read_entries(self.ns(), &rows);
        let entries: Vec<Value> = self
            .connection
            .call(Tries::Config, |mut c| async move {
                read.query_async(&mut c).await
            })
            .await?;
        Ok(calls::in_flight_of(rows, &entries))
    }

    /// Up to `max` (at most [`MAX_LIST`](crate::MAX_LIST)) timers of the
    /// dead-letter stream, oldest first.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for `max` of 0 or over
    /// [`MAX_LIST`](crate::MAX_LIST); [`Error::Unavailable`] after the
    /// retries.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use purgatorio_redis::{aio, Config};
    /// # #[tokio::main] async fn main() -> Result<(), purgatorio_redis::Error> {
    /// # let timers = aio::Timers::connect("redis://127.0.0.1:6379", Config::new("payments")).await?;
    /// for letter in timers.dead_letters(100).await? {
    ///     println!("{} failed {} times", letter.id, letter.attempt);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn dead_letters(&self, max: usize) -> Result<Vec<DeadLetter>, Error> {
        check_list(max)?;
        let read = &calls::dead_letters(self.ns(), max);
        let read: Value = self
            .connection
            .call(Tries::Config, |mut c| async move {
                read.query_async(&mut c).await
            })
            .await?;
        Ok(calls::dead_letters_of(&read))
    }

    /// Moves dead letter `letter` back to pending, due now, as a first
    /// attempt, and removes it from the dead-letter stream, in one atomic
    /// step.
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
    /// for letter in timers.dead_letters(100).await? {
    ///     timers.retry_dead_letter(&letter).await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn retry_dead_letter(&self, letter: &DeadLetter) -> Result<DeadLetterRetry, Error> {
        let revive = &calls::revive(self.ns(), &letter.entry);
        let reply: i64 = self
            .connection
            .call(Tries::Config, |mut c| async move {
                revive.invoke_async(&mut c).await
            })
            .await?;
        Ok(DeadLetterRetry::from_reply(reply))
    }
}
