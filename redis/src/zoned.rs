//! A cron expression's next time in an IANA time zone, as cronie runs it
//! across daylight-saving changes.
//!
//! cronie tells two kinds of job apart by the text of the expression: a
//! **clock-driven** one has a minute or hour field that begins with `*`
//! (`*/15 * * * *`, `0 * * * *`, `@hourly`); every other one is a
//! **fixed-time** job (`30 2 * * *`, `30 1,2 * * *`, `0 9-17 * * MON-FRI`).
//!
//! | change | clock-driven | fixed-time |
//! |---|---|---|
//! | spring forward: a gap (02:00–03:00 does not exist) | the missing times do not come | each missing time fires once, at the first instant after the gap (03:00), all of them as one |
//! | fall back: an overlap (02:00–03:00 comes twice) | fires on both passes, by the clock | fires once, on the first pass |
//!
//! A clock-driven job is `croner`'s own search in the zone (it follows the
//! clock the same way). A fixed-time job is searched in local wall time
//! (`croner` on a `NaiveDateTime`, where no time is missing or repeated),
//! and each match is then made an instant: a repeated time is its first
//! instant, a missing one the first instant after the gap; a match whose
//! instant is not after the last occurrence (the second pass of an
//! overlap, a second missing time of the same gap) is passed over.
//! (`croner` alone treats a list or a range in the hour field, `30 1,2`, as
//! clock-driven: it skips the gap and fires twice in the overlap.)

use chrono::{DateTime, Duration, LocalResult, NaiveDateTime, TimeZone};
use chrono_tz::Tz;
use croner::Cron;

/// The most wall-time matches looked at for one occurrence: the second
/// pass of an overlap, or the other missing times of a gap, are passed
/// over, a handful at most.
const MAX_LOOKS: usize = 64;

/// Whether `expression` is clock-driven, as cronie reads it: its minute or
/// hour field begins with `*` (with a seconds field first, the fields after
/// it), or it is `@hourly`.
pub(crate) fn clock_driven(expression: &str) -> bool {
    let fields: Vec<&str> = expression.split_whitespace().collect();
    match fields.as_slice() {
        [nickname] => nickname.eq_ignore_ascii_case("@hourly"),
        [minute, hour, _, _, _] | [_, minute, hour, _, _, _] | [_, minute, hour, _, _, _, _] => {
            minute.starts_with('*') || hour.starts_with('*')
        }
        _ => false,
    }
}

/// The first time of `cron` (the text `expression`) strictly after
/// `after_ms`, in `zone`, as cronie runs it (see the module's docs).
pub(crate) fn next_in_zone(cron: &Cron, expression: &str, zone: Tz, after_ms: u64) -> Option<u64> {
    let after = zone
        .timestamp_millis_opt(i64::try_from(after_ms).ok()?)
        .single()?;
    let next = if clock_driven(expression) {
        cron.find_next_occurrence(&after, false).ok()?
    } else {
        fixed_time_after(cron, zone, &after)?
    };
    u64::try_from(next.timestamp_millis()).ok()
}

/// A fixed-time job's next occurrence after `after`: the next wall-time
/// match whose instant is after it.
fn fixed_time_after(cron: &Cron, zone: Tz, after: &DateTime<Tz>) -> Option<DateTime<Tz>> {
    let mut from = after.naive_local();
    for _ in 0..MAX_LOOKS {
        let wall = cron.find_next_occurrence(&from, false).ok()?;
        let instant = instant_of(zone, wall)?;
        if instant > *after {
            return Some(instant);
        }
        from = wall;
    }
    None
}

/// The instant of wall time `wall` in `zone`: the earlier of two in an
/// overlap; in a gap, the first instant after it.
fn instant_of(zone: Tz, wall: NaiveDateTime) -> Option<DateTime<Tz>> {
    match zone.from_local_datetime(&wall) {
        LocalResult::Single(instant) => Some(instant),
        LocalResult::Ambiguous(earlier, _) => Some(earlier),
        LocalResult::None => {
            // The gap's end: the first whole minute that exists, then the
            // first second of the minute before it that does (tz database
            // changes fall on whole minutes; the seconds are a safeguard).
            let exists = |t: NaiveDateTime| zone.from_local_datetime(&t).earliest();
            let minute = (1..=MAX_GAP_MINUTES)
                .map(|m| wall + Duration::minutes(m))
                .find(|t| exists(*t).is_some())?;
            (0..60)
                .map(|s| minute - Duration::seconds(60 - s))
                .find_map(exists)
                .or_else(|| exists(minute))
        }
    }
}

/// The longest gap looked across, minutes: a day (Samoa skipped one in
/// 2011).
const MAX_GAP_MINUTES: i64 = 24 * 60;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cronie_tells_clock_driven_jobs_by_a_star_in_the_minute_or_hour() {
        for clock in [
            "*/15 * * * *",
            "0 * * * *",
            "* 2 * * *",
            "@hourly",
            "0 */5 * * * *",
        ] {
            assert!(clock_driven(clock), "{clock}");
        }
        for fixed in [
            "30 2 * * *",
            "30 1,2 * * *",
            "0 9-17 * * MON-FRI",
            "@daily",
            "15 30 2 * * *",
        ] {
            assert!(!clock_driven(fixed), "{fixed}");
        }
    }
}
