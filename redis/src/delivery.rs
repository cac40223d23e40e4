//! What a consumer hands to its handler, and what the handler answers:
//! [`Delivery`], [`Verdict`], and the [`Backoff`] retry policies.

use std::time::Duration;

use crate::reply::{self, Fields};

/// A due timer, delivered to a [`Consumer`](crate::Consumer).
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
    /// When a scheduler node moved it to the stream, ms by Redis's clock
    /// (the stream entry's time): never before
    /// [`deadline_ms`](Self::deadline_ms).
    pub promoted_ms: u64,
    /// The stream entry.
    pub(crate) entry: String,
    /// The series of a recurring timer, as stored (`recurring.rs`).
    pub(crate) series: Option<String>,
}

impl Delivery {
    /// The delivery of stream entry `entry` with `fields`: `i <id> r
    /// <record> d <deadline> [s <series>]`, the record as the timer hash
    /// stored it (`"<bucket> <attempt> <payload>"`, `scripts/mod.rs`), and
    /// the time of promotion the entry id's ms. Entries written by an
    /// earlier version (`id`, `payload`, `deadline`, `attempt`, `promoted`,
    /// `repeat`) are read too.
    pub(crate) fn from_entry(entry: String, fields: &Fields) -> Delivery {
        let (attempt, payload, promoted_ms, series) = match reply::field(fields, "r") {
            Some(record) => {
                let (attempt, payload) = attempt_and_payload(record);
                (
                    attempt,
                    payload,
                    entry_ms(&entry),
                    reply::field(fields, "s"),
                )
            }
            None => (
                reply::number_field(fields, "attempt"),
                reply::field(fields, "payload").unwrap_or_default(),
                reply::number_field(fields, "promoted"),
                reply::field(fields, "repeat"),
            ),
        };
        let id = reply::field(fields, "i").or_else(|| reply::field(fields, "id"));
        let deadline_ms = match reply::field(fields, "d") {
            Some(_) => reply::number_field(fields, "d"),
            None => reply::number_field(fields, "deadline"),
        };
        Delivery {
            id: String::from_utf8_lossy(id.unwrap_or_default()).into_owned(),
            payload: payload.to_vec(),
            deadline_ms,
            attempt: attempt.clamp(1, u64::from(u32::MAX)) as u32,
            promoted_ms,
            entry,
            series: series.map(|spec| String::from_utf8_lossy(spec).into_owned()),
        }
    }
    /// Whether it is an occurrence of a recurring timer
    /// ([`Timers::schedule_recurring`](crate::Timers::schedule_recurring)):
    /// acknowledging it schedules the next occurrence.
    pub fn is_recurring(&self) -> bool {
        self.series.is_some()
    }
}

/// The attempt and payload of a timer record `"<bucket> <attempt>
/// <payload>"`; attempt 0 (read as 1) if it is malformed.
fn attempt_and_payload(record: &[u8]) -> (u64, &[u8]) {
    let mut parts = record.splitn(3, |&b| b == b' ');
    let (_bucket, attempt, payload) = (parts.next(), parts.next(), parts.next());
    let attempt = attempt
        .and_then(|a| std::str::from_utf8(a).ok()?.parse().ok())
        .unwrap_or(0);
    (attempt, payload.unwrap_or_default())
}

/// The ms part of stream entry id `entry` (`<ms>-<seq>`): when it was
/// added, by Redis's clock (or just after the stream's last entry, if
/// Redis's clock stepped back).
fn entry_ms(entry: &str) -> u64 {
    entry
        .split_once('-')
        .and_then(|(ms, _)| ms.parse().ok())
        .unwrap_or(0)
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

/// A retry policy: how long a failed delivery waits before its next
/// attempt. Choose one per timer (by its id or payload) in the handler.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use purgatorio_redis::Backoff;
///
/// let policy = Backoff::Exponential {
///     initial: Duration::from_secs(1),
///     max: Duration::from_secs(60),
/// };
/// assert_eq!(policy.delay(1), Duration::from_secs(1));
/// assert_eq!(policy.delay(3), Duration::from_secs(4));
/// assert_eq!(policy.delay(30), Duration::from_secs(60));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backoff {
    /// The same delay after every attempt.
    Fixed(Duration),
    /// `initial` after the first attempt, doubled after each next one, at
    /// most `max`.
    Exponential {
        /// The delay after the first attempt.
        initial: Duration,
        /// The longest delay.
        max: Duration,
    },
}

impl Backoff {
    /// The delay after attempt number `attempt` (1 for the first) failed.
    pub fn delay(&self, attempt: u32) -> Duration {
        match *self {
            Backoff::Fixed(delay) => delay,
            Backoff::Exponential { initial, max } => {
                let doublings = attempt.saturating_sub(1).min(63);
                initial
                    .checked_mul(1u32 << doublings.min(31))
                    .map_or(max, |d| d.min(max))
            }
        }
    }

    /// The verdict that retries `delivery` by this policy (or dead-letters
    /// it after [`Config::max_attempts`](crate::Config::max_attempts)).
    pub fn retry(&self, delivery: &Delivery) -> Verdict {
        Verdict::RetryLater(self.delay(delivery.attempt))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_saturates() {
        let exponential = Backoff::Exponential {
            initial: Duration::from_millis(10),
            max: Duration::from_millis(70),
        };
        let delays: Vec<u128> = (1..=6).map(|a| exponential.delay(a).as_millis()).collect();
        assert_eq!(delays, [10, 20, 40, 70, 70, 70]);
        assert_eq!(exponential.delay(0), Duration::from_millis(10));
        assert_eq!(exponential.delay(u32::MAX), Duration::from_millis(70));
        let huge = Backoff::Exponential {
            initial: Duration::MAX,
            max: Duration::from_secs(1),
        };
        assert_eq!(huge.delay(40), Duration::from_secs(1));
        assert_eq!(
            Backoff::Fixed(Duration::from_secs(2)).delay(9),
            Duration::from_secs(2)
        );
    }

    fn fields(pairs: &[(&str, &str)]) -> Fields {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
            .collect()
    }

    #[test]
    fn a_compact_entry_reads_its_record_and_the_entry_time() {
        let entry = fields(&[
            ("i", "t1"),
            ("r", "170 3 a b c"),
            ("d", "1700"),
            ("s", "cron"),
        ]);
        let d = Delivery::from_entry("1750-2".into(), &entry);
        assert_eq!(d.id, "t1");
        assert_eq!(d.payload, b"a b c");
        assert_eq!((d.deadline_ms, d.attempt, d.promoted_ms), (1700, 3, 1750));
        assert_eq!(d.series.as_deref(), Some("cron"));
        let empty = Delivery::from_entry("9-0".into(), &fields(&[("i", "t"), ("r", "0 1 ")]));
        assert_eq!((empty.payload.len(), empty.attempt), (0, 1));
        let bad = Delivery::from_entry("x".into(), &fields(&[("i", "t"), ("r", "0")]));
        assert_eq!((bad.attempt, bad.promoted_ms, bad.payload.len()), (1, 0, 0));
    }

    #[test]
    fn an_entry_of_an_earlier_version_reads_too() {
        let entry = fields(&[
            ("id", "t1"),
            ("payload", "p"),
            ("deadline", "1700"),
            ("attempt", "2"),
            ("promoted", "1701"),
        ]);
        let d = Delivery::from_entry("1750-0".into(), &entry);
        assert_eq!((d.id.as_str(), d.payload.as_slice()), ("t1", &b"p"[..]));
        assert_eq!((d.deadline_ms, d.attempt, d.promoted_ms), (1700, 2, 1701));
        assert_eq!(d.series, None);
    }
}
