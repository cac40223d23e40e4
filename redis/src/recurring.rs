//! Recurring timers: a fixed interval or a cron expression, one timer id
//! for the whole series.
//!
//! A series is stored beside its pending occurrence (`{ns}:repeat`, id →
//! series) and the promotion step copies it into the occurrence's stream
//! entry. The next occurrence is scheduled **by the acknowledgement of the
//! current one, in the same atomic step** (the `acknowledge` script), and
//! not at promotion:
//!
//! * at least once: an occurrence whose consumer died is taken over and
//!   acknowledged later, and only then is the next one scheduled, so a
//!   crash never loses the series;
//! * no double fire: only the acknowledgement that removes the entry from
//!   the group's pending list (`XACK` answering 1) schedules the next one,
//!   so a take-over racing a slow handler schedules it once, and never over
//!   a pending timer of the same id (a retry of this occurrence keeps the
//!   id until it succeeds);
//! * no drift: occurrences are computed from the series' anchor (interval)
//!   or its expression (cron), never from when a handler finished; the next
//!   one is the first strictly after both the delivered deadline and its
//!   promotion by Redis's clock, so occurrences missed during an outage are
//!   skipped, not fired in a burst, and none is early;
//! * a cancel by id ends the series: it removes the series with the
//!   pending occurrence, and an in-flight occurrence's acknowledgement then
//!   finds no series and schedules nothing.
//!
//! Cron expressions are read by the `croner` crate: five fields (minute
//! granularity) or six (seconds first), in UTC ([`Recurrence::Cron`]) or in
//! an IANA time zone ([`Recurrence::CronIn`], the tz database of the
//! `chrono-tz` crate compiled in). Across a daylight-saving change a zone's
//! series follows cronie (`zoned.rs`): a time that falls in a
//! spring-forward gap (02:30 in Berlin on the last Sunday of March) fires
//! once, at the first instant after the gap (03:00); a time that a
//! fall-back overlap repeats (02:30 on the last Sunday of October) fires
//! once, at its first instant; an expression whose minute or hour field
//! begins with `*` (`*/15 * * * *`) runs by the clock, on both passes of
//! the overlap. Never early: each
//! occurrence is a real instant, and the next one is strictly after the
//! last one delivered.

use std::str::FromStr;
use std::time::Duration;

use chrono_tz::Tz;
use croner::Cron;

use crate::{calls, Error, Timers, MAX_DEADLINE_MS, MAX_DELAY_MS};

/// How a recurring timer repeats.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Recurrence {
    /// Every `interval` (at least 1 ms, at most
    /// [`MAX_DELAY_MS`](crate::MAX_DELAY_MS)), the first one `interval`
    /// after it is scheduled, by Redis's clock.
    Every(Duration),
    /// At the times of a cron expression, in UTC: `"*/5 * * * *"` (every
    /// five minutes), `"0 9 * * MON-FRI"`, or with a seconds field first,
    /// `"*/10 * * * * *"`.
    Cron(String),
    /// At the times of a cron expression in an IANA time zone:
    /// `expression: "0 9 * * MON-FRI", zone: "Europe/Berlin"` is 09:00 on
    /// Berlin's weekdays, summer and winter. Daylight-saving changes follow
    /// cronie (see the module's docs): a time in a spring-forward gap fires
    /// once at the first instant after it, a time a fall-back overlap
    /// repeats fires once, at its first instant.
    CronIn {
        /// The cron expression, as for [`Recurrence::Cron`].
        expression: String,
        /// The IANA zone (`Europe/Berlin`, `America/New_York`, `UTC`).
        zone: String,
    },
}

impl Recurrence {
    /// The first occurrence strictly after `after_ms` (ms since the Unix
    /// epoch) of this recurrence scheduled at `scheduled_ms` (an interval's
    /// phase; a cron expression does not depend on it); `None` if none
    /// comes before [`MAX_DEADLINE_MS`]. What a
    /// series schedules after a delivery, for a look ahead (a schedule's
    /// preview, a test against another cron parser).
    ///
    /// # Errors
    ///
    /// As [`Timers::schedule_recurring`](crate::Timers::schedule_recurring)
    /// for a recurrence that is refused.
    ///
    /// # Examples
    ///
    /// ```
    /// use purgatorio_redis::Recurrence;
    ///
    /// let nine = Recurrence::CronIn {
    ///     expression: "0 9 * * *".into(),
    ///     zone: "Europe/Berlin".into(),
    /// };
    /// // 2027-01-01T00:00Z: 09:00 in Berlin is 08:00 UTC in winter.
    /// let new_year = 1_798_761_600_000;
    /// assert_eq!(nine.next_after(new_year, new_year)?, Some(new_year + 8 * 3_600_000));
    /// # Ok::<(), purgatorio_redis::Error>(())
    /// ```
    pub fn next_after(&self, scheduled_ms: u64, after_ms: u64) -> Result<Option<u64>, Error> {
        Ok(Series::new(self, scheduled_ms)?.next_after(after_ms))
    }
}

/// A series as stored in Redis and read back: its recurrence, and the
/// Redis time it was scheduled at (the interval's phase, and what tells two
/// series of one id apart).
#[derive(Clone, Debug)]
pub(crate) struct Series {
    /// When it was scheduled, ms by Redis's clock.
    anchor_ms: u64,
    /// How it repeats.
    kind: Kind,
}

/// A parsed [`Recurrence`].
#[derive(Clone, Debug)]
enum Kind {
    /// Every this many ms.
    Every(u64),
    /// At the times of this expression (and its text, as given), in UTC
    /// or in a zone.
    Cron(Box<Cron>, String, Option<Tz>),
}

/// The zone named `name` (IANA); `None` if there is no such zone.
fn zone(name: &str) -> Option<Tz> {
    Tz::from_str(name).ok()
}

/// The first time of `cron` strictly after `after_ms`, in UTC.
fn cron_after_utc(cron: &Cron, after_ms: u64) -> Option<u64> {
    let after = chrono::DateTime::from_timestamp_millis(i64::try_from(after_ms).ok()?)?;
    let next = cron.find_next_occurrence(&after, false).ok()?;
    u64::try_from(next.timestamp_millis()).ok()
}

/// The longest cron expression accepted, bytes.
const MAX_CRON: usize = 256;

impl Series {
    /// The series of `recurrence` scheduled at `anchor_ms`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an interval of 0 or over
    /// [`MAX_DELAY_MS`], a cron expression that does not parse, or a
    /// series with no occurrence before [`MAX_DEADLINE_MS`] (the 30th of
    /// February).
    pub(crate) fn new(recurrence: &Recurrence, anchor_ms: u64) -> Result<Series, Error> {
        let invalid = |why| Error::InvalidArgument {
            name: "recurrence",
            why,
        };
        let kind = match recurrence {
            Recurrence::Every(interval) => {
                let ms = u64::try_from(interval.as_millis()).unwrap_or(u64::MAX);
                if ms == 0 || ms > MAX_DELAY_MS {
                    return Err(invalid("the interval must be from 1 ms to 100 years"));
                }
                Kind::Every(ms)
            }
            Recurrence::Cron(expression) => {
                Kind::Cron(Box::new(parse_cron(expression)?), expression.clone(), None)
            }
            Recurrence::CronIn {
                expression,
                zone: name,
            } => {
                let Some(tz) = zone(name) else {
                    return Err(invalid(
                        "the time zone is not an IANA zone name (Europe/Berlin)",
                    ));
                };
                Kind::Cron(
                    Box::new(parse_cron(expression)?),
                    expression.clone(),
                    Some(tz),
                )
            }
        };
        let series = Series { anchor_ms, kind };
        if series.next_after(anchor_ms).is_none() {
            return Err(invalid(
                "no occurrence comes before the latest deadline accepted",
            ));
        }
        Ok(series)
    }

    /// The series as stored: `every <ms> <anchor>`, `cron <anchor>
    /// <expression>` or `cron-in <anchor> <zone> <expression>` (a zone's
    /// name has no space).
    pub(crate) fn spec(&self) -> String {
        match &self.kind {
            Kind::Every(ms) => format!("every {ms} {}", self.anchor_ms),
            Kind::Cron(_, expression, None) => format!("cron {} {expression}", self.anchor_ms),
            Kind::Cron(_, expression, Some(tz)) => {
                format!("cron-in {} {} {expression}", self.anchor_ms, tz.name())
            }
        }
    }

    /// A stored series read back; `None` if it is not one.
    pub(crate) fn parse(spec: &str) -> Option<Series> {
        let (kind, rest) = spec.split_once(' ')?;
        match kind {
            "every" => {
                let (ms, anchor) = rest.split_once(' ')?;
                let ms: u64 = ms.parse().ok()?;
                let anchor_ms = anchor.parse().ok()?;
                (ms > 0).then_some(Series {
                    anchor_ms,
                    kind: Kind::Every(ms),
                })
            }
            "cron" => {
                let (anchor, expression) = rest.split_once(' ')?;
                let cron = Cron::from_str(expression).ok()?;
                Some(Series {
                    anchor_ms: anchor.parse().ok()?,
                    kind: Kind::Cron(Box::new(cron), expression.to_string(), None),
                })
            }
            "cron-in" => {
                let (anchor, rest) = rest.split_once(' ')?;
                let (name, expression) = rest.split_once(' ')?;
                let cron = Cron::from_str(expression).ok()?;
                Some(Series {
                    anchor_ms: anchor.parse().ok()?,
                    kind: Kind::Cron(Box::new(cron), expression.to_string(), Some(zone(name)?)),
                })
            }
            _ => None,
        }
    }

    /// The first occurrence strictly after `after_ms`, ms since the Unix
    /// epoch; `None` if there is none before [`MAX_DEADLINE_MS`].
    pub(crate) fn next_after(&self, after_ms: u64) -> Option<u64> {
        let next = match &self.kind {
            Kind::Every(ms) => {
                // The first anchor + k·ms (k ≥ 1) past `after_ms`.
                let periods = after_ms.saturating_sub(self.anchor_ms) / ms + 1;
                self.anchor_ms.checked_add(periods.checked_mul(*ms)?)?
            }
            Kind::Cron(cron, expression, tz) => {
                let next = match tz {
                    Some(tz) => crate::zoned::next_in_zone(cron, expression, *tz, after_ms)?,
                    None => cron_after_utc(cron, after_ms)?,
                };
                // Cron has whole seconds; never at or before `after_ms`.
                if next <= after_ms {
                    return None;
                }
                next
            }
        };
        (next <= MAX_DEADLINE_MS).then_some(next)
    }
}

/// `expression` parsed, if it is a cron expression of at most
/// [`MAX_CRON`] bytes with no control character.
fn parse_cron(expression: &str) -> Result<Cron, Error> {
    let invalid = |why| Error::InvalidArgument {
        name: "recurrence",
        why,
    };
    if expression.len() > MAX_CRON || expression.chars().any(char::is_control) {
        return Err(invalid(
            "a cron expression is at most 256 bytes, no control character",
        ));
    }
    Cron::from_str(expression).map_err(|_| invalid("the cron expression does not parse"))
}

/// The stored form of `recurrence`'s series scheduled at `now_ms`, and its
/// first occurrence.
///
/// # Errors
///
/// As [`Series::new`].
pub(crate) fn first(recurrence: &Recurrence, now_ms: u64) -> Result<(String, u64), Error> {
    let series = Series::new(recurrence, now_ms)?;
    let first = series
        .next_after(now_ms)
        .expect("Series::new checked that one comes");
    Ok((series.spec(), first))
}

impl Timers {
    /// Schedules recurring timer `id`: every occurrence is delivered with
    /// `payload` under the same id, the first one after Redis's now.
    /// Acknowledging an occurrence schedules the next one in the same
    /// atomic step: the first time strictly after both the delivered
    /// deadline and its promotion, so occurrences missed while nothing ran
    /// are skipped, never fired in a burst, and none is early. A retry of an
    /// occurrence keeps the series; a dead-lettered occurrence does not
    /// end it. Scheduling the id again replaces its series (the pending
    /// occurrence moves); [`cancel`](Self::cancel) ends it. Returns the
    /// first occurrence's deadline, ms by Redis's clock.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an interval of 0 or over
    /// [`MAX_DELAY_MS`], or a cron expression that does not parse or never
    /// comes; [`Error::InvalidId`], [`Error::PayloadTooLarge`];
    /// [`Error::Unavailable`] after the retries.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use purgatorio_redis::{Config, Recurrence, Timers};
    ///
    /// let timers = Timers::connect("redis://127.0.0.1:6379", Config::new("reports"))?;
    /// timers.schedule_recurring("heartbeat", &Recurrence::Every(Duration::from_secs(30)), b"")?;
    /// timers.schedule_recurring("nightly", &Recurrence::Cron("0 3 * * *".into()), b"compact")?;
    /// // … the consumers acknowledge each occurrence as usual; to stop a series:
    /// timers.cancel("nightly")?;
    /// # Ok::<(), purgatorio_redis::Error>(())
    /// ```
    pub fn schedule_recurring(
        &self,
        id: &str,
        recurrence: &Recurrence,
        payload: &[u8],
    ) -> Result<u64, Error> {
        self.check_input(id, 0, payload)?;
        let now = self.server_time_ms()?;
        let (spec, first) = first(recurrence, now)?;
        self.send_schedule_pipe(
            &calls::schedule_recurring(&self.ns, id, &spec, first, payload),
            1,
        )?;
        Ok(first)
    }
}

/// The deadline of the occurrence after a delivered one: the first
/// strictly after both its deadline and its promotion (Redis's clock), so
/// that missed occurrences are skipped and none is early. `None` if the
/// series is unreadable or has no next occurrence: the series ends.
pub(crate) fn next_occurrence(spec: &str, deadline_ms: u64, promoted_ms: u64) -> Option<u64> {
    let series = Series::parse(spec);
    if series.is_none() {
        log::warn!("a recurring timer's series {spec:?} is unreadable; it ends");
    }
    series?.next_after(deadline_ms.max(promoted_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every(ms: u64, anchor_ms: u64) -> Series {
        Series::new(&Recurrence::Every(Duration::from_millis(ms)), anchor_ms).unwrap()
    }

    #[test]
    fn an_interval_keeps_its_phase_and_skips_what_was_missed() {
        let series = every(1_000, 10_500);
        assert_eq!(series.next_after(10_500), Some(11_500));
        assert_eq!(series.next_after(11_499), Some(11_500));
        assert_eq!(series.next_after(11_500), Some(12_500));
        // A handler that finished late, or an outage: the phase stays.
        assert_eq!(series.next_after(15_750), Some(16_500));
        assert_eq!(series.next_after(0), Some(11_500));
        assert_eq!(
            every(1, MAX_DEADLINE_MS - 1).next_after(MAX_DEADLINE_MS),
            None
        );
        let overflowing = Series {
            anchor_ms: u64::MAX - 5,
            kind: Kind::Every(MAX_DELAY_MS),
        };
        assert_eq!(overflowing.next_after(u64::MAX), None);
        assert!(Series::new(&Recurrence::Every(Duration::from_secs(1)), u64::MAX - 5).is_err());
    }

    #[test]
    fn a_cron_expression_gives_its_next_time_in_utc() {
        let cron = Recurrence::Cron("*/5 * * * *".into());
        // 2026-01-01T00:00:00Z.
        let start = 1_767_225_600_000;
        let series = Series::new(&cron, start).unwrap();
        assert_eq!(series.next_after(start), Some(start + 300_000));
        assert_eq!(series.next_after(start + 299_999), Some(start + 300_000));
        assert_eq!(series.next_after(start + 300_000), Some(start + 600_000));
        let seconds = Series::new(&Recurrence::Cron("*/10 * * * * *".into()), start).unwrap();
        assert_eq!(seconds.next_after(start + 500), Some(start + 10_000));
    }

    #[test]
    fn a_series_round_trips_through_its_stored_form() {
        for series in [
            every(250, 42),
            Series::new(&Recurrence::Cron("0 9 * * MON-FRI".into()), 7).unwrap(),
        ] {
            let back = Series::parse(&series.spec()).expect("parses");
            assert_eq!(back.spec(), series.spec());
            assert_eq!(back.next_after(1_000_000), series.next_after(1_000_000));
        }
        for bad in [
            "",
            "every",
            "every x 1",
            "every 0 1",
            "cron 1 nonsense",
            "weekly 1 2",
        ] {
            assert!(Series::parse(bad).is_none(), "{bad}");
        }
        assert_eq!(next_occurrence("garbage", 1, 2), None);
    }

    #[test]
    fn recurrences_that_cannot_work_are_refused() {
        for bad in [
            Recurrence::Every(Duration::ZERO),
            Recurrence::Every(Duration::MAX),
            Recurrence::Cron("not cron".into()),
            Recurrence::Cron("* * * * * * * * *".into()),
            Recurrence::Cron("0 0 30 2 *".into()),
            Recurrence::Cron("*".repeat(300)),
            Recurrence::Cron("* * *\n* *".into()),
        ] {
            match Series::new(&bad, 1_000) {
                Err(Error::InvalidArgument {
                    name: "recurrence", ..
                }) => {}
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }
}
