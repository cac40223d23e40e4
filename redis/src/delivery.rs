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
    /// When a scheduler node moved it to the stream, ms by Redis's clock:
    /// never before [`deadline_ms`](Self::deadline_ms).
    pub promoted_ms: u64,
    /// The stream entry.
    pub(crate) entry: String,
    /// The series of a recurring timer, as stored (`recurring.rs`).
    pub(crate) series: Option<String>,
}

impl Delivery {
    /// The delivery of stream entry `entry` with `fields`.
    pub(crate) fn from_entry(entry: String, fields: &Fields) -> Delivery {
        let attempt = reply::number_field(fields, "attempt").clamp(1, u64::from(u32::MAX));
        Delivery {
            id: String::from_utf8_lossy(reply::field(fields, "id").unwrap_or_default())
                .into_owned(),
            payload: reply::field(fields, "payload").unwrap_or_default().to_vec(),
            deadline_ms: reply::number_field(fields, "deadline"),
            attempt: attempt as u32,
            promoted_ms: reply::number_field(fields, "promoted"),
            entry,
            series: reply::field(fields, "repeat")
                .map(|spec| String::from_utf8_lossy(spec).into_owned()),
        }
    }

    /// Whether it is an occurrence of a recurring timer
    /// ([`Timers::schedule_recurring`](crate::Timers::schedule_recurring)):
    /// acknowledging it schedules the next occurrence.
    pub fn is_recurring(&self) -> bool {
        self.series.is_some()
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
}
