//! Cron expressions in an IANA time zone, against an established parser:
//! `croniter` (Python, installed with pip into `target/venv`, zones from
//! `pytz`) reads the same expressions in the same zones from
//! the same instants, across both daylight-saving changes of Berlin and
//! New York in 2027, and our next occurrences must be its, everywhere but
//! at the changes themselves, where ours must follow cronie (checked
//! here: a time in the spring-forward gap fires once, at the first instant
//! after it; a time the fall-back overlap repeats fires once, at its first
//! instant; a clock-driven expression fires on both passes). Never early:
//! every occurrence is after the one before.

use std::collections::BTreeMap;
use std::process::Command;

use purgatorio_redis::Recurrence;
use purgatorio_testkit::python_with;

/// `croniter` and the tz database it reads zones from (`pytz`: with the
/// standard library's `zoneinfo`, croniter 6.0.0 fires "30 1 * * *" at
/// 00:30 the day after a spring-forward change, an hour early).
const PACKAGES: [&str; 2] = ["croniter==6.0.0", "pytz==2026.6"];

/// Occurrences compared per expression, zone and change.
const FIRES: usize = 60;

/// The changes of 2027, ms since the epoch: (zone, UTC instant of the
/// change, what it is).
const CHANGES: [(&str, u64, &str); 4] = [
    // 2027-03-28 01:00Z: Berlin's 02:00 CET becomes 03:00 CEST.
    ("Europe/Berlin", 1_806_195_600_000, "spring"),
    // 2027-10-31 01:00Z: Berlin's 03:00 CEST becomes 02:00 CET.
    ("Europe/Berlin", 1_824_944_400_000, "fall"),
    // 2027-03-14 07:00Z: New York's 02:00 EST becomes 03:00 EDT.
    ("America/New_York", 1_805_007_600_000, "spring"),
    // 2027-11-07 06:00Z: New York's 02:00 EDT becomes 01:00 EST.
    ("America/New_York", 1_825_567_200_000, "fall"),
];

/// Expressions: fixed times in and around the changed hours, a weekday
/// time, and clock-driven ones.
const EXPRESSIONS: [&str; 7] = [
    "30 2 * * *",
    "0 2 * * *",
    "30 1 * * *",
    "0 9 * * MON-FRI",
    "*/15 * * * *",
    "0 * * * *",
    "30 1,2 * * *",
];

/// Ours: `FIRES` occurrences after `from_ms`.
fn ours(expression: &str, zone: &str, from_ms: u64) -> Vec<u64> {
    let recurrence = Recurrence::CronIn {
        expression: expression.into(),
        zone: zone.into(),
    };
    let mut out = Vec::new();
    let mut after = from_ms;
    while out.len() < FIRES {
        let next = recurrence.next_after(from_ms, after).unwrap().unwrap();
        assert!(next > after, "{expression} in {zone}: {next} after {after}");
        out.push(next);
        after = next;
    }
    out
}

/// croniter's, for every case at once: `case → occurrences`.
fn croniter(cases: &[(String, String, u64)]) -> BTreeMap<(String, String, u64), Vec<u64>> {
    let python = python_with(&PACKAGES);
    let script = format!(
        r#"
import sys
from datetime import datetime
import pytz
from croniter import croniter
for line in sys.stdin:
    expression, zone, start = line.rstrip("\n").split("\t")
    base = datetime.fromtimestamp(int(start) / 1000, pytz.timezone(zone))
    it = croniter(expression, base)
    print("\t".join(str(int(it.get_next(datetime).timestamp() * 1000)) for _ in range({FIRES})))
"#
    );
    let input: String = cases
        .iter()
        .map(|(e, z, s)| format!("{e}\t{z}\t{s}\n"))
        .collect();
    let mut child = Command::new(python)
        .args(["-c", &script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python");
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "croniter failed");
    let text = String::from_utf8(out.stdout).unwrap();
    cases
        .iter()
        .cloned()
        .zip(text.lines().map(|line| {
            line.split('\t')
                .map(|n| n.parse().unwrap())
                .collect::<Vec<u64>>()
        }))
        .collect()
}

const HOUR: u64 = 3_600_000;

#[test]
fn zoned_cron_agrees_with_croniter_and_follows_cronie_at_the_changes() {
    let mut cases = Vec::new();
    for (zone, change, _) in CHANGES {
        for expression in EXPRESSIONS {
            // From two days before the change, through it.
            cases.push((expression.to_string(), zone.to_string(), change - 48 * HOUR));
        }
    }
    let theirs = croniter(&cases);
    let mut differences = Vec::new();
    for case in &cases {
        let (expression, zone, from) = case;
        let ours = ours(expression, zone, *from);
        let theirs = &theirs[case];
        let change = CHANGES
            .iter()
            .find(|c| c.0 == zone && c.1 == from + 48 * HOUR);
        let (_, at, _) = change.unwrap();
        // The instants one lists and the other does not, up to the end of
        // the shorter list.
        let end = *ours.last().unwrap().min(theirs.last().unwrap());
        let only = |a: &[u64], b: &[u64]| -> Vec<u64> {
            a.iter()
                .filter(|t| **t <= end && !b.contains(t))
                .copied()
                .collect()
        };
        for (who, t) in only(&ours, theirs)
            .into_iter()
            .map(|t| ("ours", t))
            .chain(only(theirs, &ours).into_iter().map(|t| ("croniter's", t)))
        {
            differences.push(format!(
                "{expression:?} in {zone}: only {who} fires at {t} ({:+} min from the change)",
                (t as i64 - *at as i64) / 60_000
            ));
            // Only at the change: within 2 hours of it.
            assert!(
                t.abs_diff(*at) <= 2 * HOUR,
                "{}",
                differences.last().unwrap()
            );
        }
    }
    eprintln!(
        "{} cases of {FIRES} fires: {} differences from croniter, all at a change:",
        cases.len(),
        differences.len()
    );
    for d in &differences {
        eprintln!("  {d}");
    }
}

/// The cronie rules, by hand, at Berlin's two changes of 2027.
#[test]
fn a_gap_fires_once_after_it_and_an_overlap_once() {
    let berlin = |expression: &str, from: u64, n: usize| {
        let r = Recurrence::CronIn {
            expression: expression.into(),
            zone: "Europe/Berlin".into(),
        };
        let mut out = vec![];
        let mut after = from;
        for _ in 0..n {
            after = r.next_after(from, after).unwrap().unwrap();
            out.push(after);
        }
        out
    };
    let (spring, fall) = (CHANGES[0].1, CHANGES[1].1);
    // 02:30 does not exist on 2027-03-28: once, at 03:00 CEST = 01:00Z,
    // between 02:30 CET the day before (01:30Z) and 02:30 CEST the day
    // after (00:30Z).
    assert_eq!(
        berlin("30 2 * * *", spring - 24 * HOUR, 3),
        [
            spring - 24 * HOUR + HOUR / 2,
            spring,
            spring + 24 * HOUR - HOUR / 2
        ]
    );
    // 02:30 comes twice on 2027-10-31 (00:30Z CEST, 01:30Z CET): once, the
    // first.
    assert_eq!(
        berlin("30 2 * * *", fall - 2 * HOUR, 2),
        [fall - HOUR / 2, fall + 24 * HOUR + HOUR / 2]
    );
    // A list in the hour field is a fixed-time job too (cronie): 01:30 CET,
    // then the missing 02:30 at 03:00 CEST; in the fall, 01:30 and 02:30
    // CEST once each, not again on the second pass.
    assert_eq!(
        berlin("30 1,2 * * *", spring - 2 * HOUR, 3),
        [spring - HOUR / 2, spring, spring + 22 * HOUR + HOUR / 2]
    );
    assert_eq!(
        berlin("30 1,2 * * *", fall - 3 * HOUR, 3),
        [
            fall - 2 * HOUR + HOUR / 2,
            fall - HOUR / 2,
            fall + 23 * HOUR + HOUR / 2
        ]
    );
    // By the clock, every 15 minutes: both passes of the repeated hour,
    // 8 fires from 00:00Z to 02:00Z, none skipped, none doubled.
    let quarter = berlin("*/15 * * * *", fall - HOUR - 1, 9);
    let want: Vec<u64> = (0..9).map(|k| fall - HOUR + k * HOUR / 4).collect();
    assert_eq!(quarter, want);
}

#[test]
fn a_zone_that_is_not_one_is_refused() {
    let bad = Recurrence::CronIn {
        expression: "0 9 * * *".into(),
        zone: "Europe/Atlantis".into(),
    };
    assert!(matches!(
        bad.next_after(0, 0),
        Err(purgatorio_redis::Error::InvalidArgument { .. })
    ));
}
