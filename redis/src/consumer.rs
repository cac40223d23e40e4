//! [`Consumer`]: a member of the stream's consumer group. Reads due timers,
//! takes over those a dead consumer left, acknowledges, retries later, and
//! dead-letters a timer that failed every attempt.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use redis::Value;

use crate::reply::{self, Fields};
use crate::{Error, Timers};

/// A due timer, delivered to a [`Consumer`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// The timer's id.
    pub id: String,
    /// Its payload.
    pub payload: Vec<u8>,
    /// Its deadline, ms since the Unix epoch by Redis's clock.
    pub deadline_ms: u64,
    /// 1 for the first delivery; more after a retry or a take-over.
    pub attempt: u32,
    /// When a scheduler node moved it to the stream, ms by Redis's clock:
    /// never before [`deadline_ms`](Self::deadline_ms).
    pub promoted_ms: u64,
    /// The stream entry.
    entry: String,
}

impl Delivery {
    /// The delivery of stream entry `entry` with `fields`.
    fn from_entry(entry: String, fields: &Fields) -> Delivery {
        let attempt = reply::number_field(fields, "attempt").clamp(1, u64::from(u32::MAX));
        Delivery {
            id: String::from_utf8_lossy(reply::field(fields, "id").unwrap_or_default())
                .into_owned(),
            payload: reply::field(fields, "payload").unwrap_or_default().to_vec(),
            deadline_ms: reply::number_field(fields, "deadline"),
            attempt: attempt as u32,
            promoted_ms: reply::number_field(fields, "promoted"),
            entry,
        }
    }
}

/// What a consumer did with a delivery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Done: acknowledged and removed.
    Ack,
    /// Deliver it again this much later, as the next attempt (or to the
    /// dead-letter stream after [`Config::max_attempts`](crate::Config::max_attempts)).
    RetryLater(Duration),
}

/// A member of the stream's consumer group.
pub struct Consumer {
    /// The namespace.
    timers: Timers,
    /// This consumer's name in the group.
    name: String,
}

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

/// Adds to `pipe` the removal of `entries` from the stream: acknowledged
/// (`XACK`) and deleted (`XDEL`), so the stream holds only what is pending.
fn remove_entries<'a>(
    pipe: &mut redis::Pipeline,
    keys: &crate::link::Keys,
    entries: impl Iterator<Item = &'a str> + Clone,
) {
    let mut ack = redis::cmd("XACK");
    ack.arg(&keys.stream).arg(&keys.group);
    let mut del = redis::cmd("XDEL");
    del.arg(&keys.stream);
    for entry in entries {
        ack.arg(entry);
        del.arg(entry);
    }
    pipe.add_command(ack).ignore().add_command(del).ignore();
}

impl Consumer {
    /// Joins the consumer group as `name` (creating the group if needed).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a name that is empty, over
    /// [`MAX_CONSUMER_NAME`] bytes or holds a control character;
    /// [`Error::Unavailable`] after the retries.
    pub fn new(timers: Timers, name: &str) -> Result<Consumer, Error> {
        let why = if name.is_empty() {
            Some("empty")
        } else if name.len() > MAX_CONSUMER_NAME {
            Some("longer than 256 bytes")
        } else if name.chars().any(char::is_control) {
            Some("holds a control character")
        } else {
            None
        };
        if let Some(why) = why {
            return Err(Error::InvalidArgument {
                name: "consumer name",
                why,
            });
        }
        let keys = &timers.link.keys;
        let created: Result<(), Error> = timers.link.with_connection(|c| {
            redis::cmd("XGROUP")
                .arg("CREATE")
                .arg(&keys.stream)
                .arg(&keys.group)
                .arg("0")
                .arg("MKSTREAM")
                .query::<()>(c)
        });
        match created {
            Ok(()) => {}
            Err(Error::Redis(e)) if e.code() == Some("BUSYGROUP") => {}
            Err(e) => return Err(e),
        }
        Ok(Consumer {
            timers,
            name: name.to_string(),
        })
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
    pub fn poll(&self, block: Duration, max: usize) -> Result<Vec<Delivery>, Error> {
        check_count(max)?;
        let mut out = self.take_over(max)?;
        if out.len() < max {
            out.extend(self.read_new(block, max - out.len())?);
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
        let link = &self.timers.link;
        let (keys, config) = (&link.keys, &link.config);
        let claimed: Value = link.with_connection(|c| {
            redis::cmd("XAUTOCLAIM")
                .arg(&keys.stream)
                .arg(&keys.group)
                .arg(&self.name)
                .arg(config.visibility_timeout.as_millis() as u64)
                .arg("0-0")
                .arg("COUNT")
                .arg(max)
                .query(c)
        })?;
        let mut out = Vec::new();
        for (entry, fields) in reply::autoclaim_entries(&claimed) {
            // An entry another consumer held too long: each delivery of it
            // counts as an attempt.
            let mut delivery = Delivery::from_entry(entry, &fields);
            let deliveries = self.delivery_count(&delivery.entry)?;
            delivery.attempt += deliveries.saturating_sub(1);
            link.with_connection(|c| {
                redis::cmd("HINCRBY")
                    .arg(&keys.stats)
                    .arg("redelivered")
                    .arg(1)
                    .query::<i64>(c)
            })?;
            if delivery.attempt > config.max_attempts {
                self.dead_letter(&delivery)?;
            } else {
                out.push(delivery);
            }
        }
        Ok(out)
    }

    /// Up to `max` new due timers, waiting up to `block` for one.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for `max` of 0; [`Error::Unavailable`]
    /// after the retries.
    pub fn read_new(&self, block: Duration, max: usize) -> Result<Vec<Delivery>, Error> {
        check_count(max)?;
        let keys = &self.timers.link.keys;
        let read: Value = self.timers.link.with_connection(|c| {
            redis::cmd("XREADGROUP")
                .arg("GROUP")
                .arg(&keys.group)
                .arg(&self.name)
                .arg("COUNT")
                .arg(max)
                .arg("BLOCK")
                .arg(block.as_millis().max(1) as u64)
                .arg("STREAMS")
                .arg(&keys.stream)
                .arg(">")
                .query(c)
        })?;
        Ok(reply::read_group_entries(&read)
            .into_iter()
            .map(|(entry, fields)| Delivery::from_entry(entry, &fields))
            .collect())
    }

    /// How many times the group delivered `entry` (Redis counts each
    /// take-over).
    fn delivery_count(&self, entry: &str) -> Result<u32, Error> {
        let keys = &self.timers.link.keys;
        let reply: Value = self.timers.link.with_connection(|c| {
            redis::cmd("XPENDING")
                .arg(&keys.stream)
                .arg(&keys.group)
                .arg(entry)
                .arg(entry)
                .arg(1)
                .query(c)
        })?;
        reply::pending_delivery_count(&reply)
    }

    /// Moves `delivery` to the dead-letter stream.
    fn dead_letter(&self, delivery: &Delivery) -> Result<(), Error> {
        let keys = &self.timers.link.keys;
        self.timers.link.with_connection(|c| {
            let mut pipe = redis::pipe();
            pipe.atomic()
                .cmd("XADD")
                .arg(&keys.dead)
                .arg("*")
                .arg("id")
                .arg(&delivery.id)
                .arg("payload")
                .arg(&delivery.payload)
                .arg("deadline")
                .arg(delivery.deadline_ms)
                .arg("attempt")
                .arg(delivery.attempt)
                .ignore();
            remove_entries(&mut pipe, keys, std::iter::once(delivery.entry.as_str()));
            pipe.query::<()>(c)
        })
    }

    /// Acknowledges `delivery`, or schedules its next attempt.
    ///
    /// # Errors
    ///
    /// [`Error::DeadlineOutOfRange`] for a retry delay over
    /// [`MAX_DELAY_MS`](crate::MAX_DELAY_MS) (the delivery stays
    /// unacknowledged); [`Error::Unavailable`] after the retries.
    pub fn finish(&self, delivery: &Delivery, verdict: Verdict) -> Result<(), Error> {
        if let Verdict::RetryLater(delay) = verdict {
            if delivery.attempt >= self.timers.link.config.max_attempts {
                return self.dead_letter(delivery);
            }
            let delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
            if delay_ms > crate::MAX_DELAY_MS {
                return Err(Error::DeadlineOutOfRange {
                    at_ms: u64::MAX,
                    max_ms: crate::MAX_DEADLINE_MS,
                });
            }
            let at = self.timers.server_time_ms()? + delay_ms;
            self.timers.schedule_attempt(
                &delivery.id,
                at,
                &delivery.payload,
                delivery.attempt + 1,
            )?;
        }
        self.ack_all(std::slice::from_ref(delivery))
    }

    /// Acknowledges `deliveries` in one round trip.
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] after the retries.
    pub fn ack_all(&self, deliveries: &[Delivery]) -> Result<(), Error> {
        if deliveries.is_empty() {
            return Ok(());
        }
        let keys = &self.timers.link.keys;
        self.timers.link.with_connection(|c| {
            let mut pipe = redis::pipe();
            pipe.atomic();
            remove_entries(&mut pipe, keys, deliveries.iter().map(|d| d.entry.as_str()));
            pipe.query::<()>(c)
        })
    }

    /// Delivers due timers to `handle` until `stop` is set, acknowledging
    /// or retrying each as it says.
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] if Redis stays unreachable.
    pub fn run(
        &self,
        stop: &AtomicBool,
        mut handle: impl FnMut(&Delivery) -> Verdict,
    ) -> Result<(), Error> {
        // Redis tells nobody when an entry's visibility runs out: look for
        // abandoned entries every half visibility timeout, and otherwise
        // wait in a blocking read (at most `block`, to see `stop`).
        let visibility = self.timers.link.config.visibility_timeout;
        let block = (visibility / 2).clamp(Duration::from_millis(10), Duration::from_secs(1));
        let mut next_take_over = Instant::now();
        while !stop.load(Ordering::SeqCst) {
            let mut batch = Vec::new();
            if Instant::now() >= next_take_over {
                batch = self.take_over(100)?;
                next_take_over = Instant::now() + visibility / 2;
            }
            batch.extend(self.read_new(block, 100)?);
            let mut done = Vec::with_capacity(batch.len());
            for delivery in batch {
                match handle(&delivery) {
                    Verdict::Ack => done.push(delivery),
                    verdict => self.finish(&delivery, verdict)?,
                }
            }
            self.ack_all(&done)?;
        }
        Ok(())
    }
}
