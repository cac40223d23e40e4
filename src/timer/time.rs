//! The timer's time source: its clock, its origin (tick 0, the clock's
//! reading when the timer was built) and its resolution. Every conversion
//! between the clock's instants and the wheel's ticks goes through here:
//! readings round down (a tick has begun only once all of it is past) and
//! deadlines round up (a timer fires only in a tick that starts at or after
//! its deadline), so nothing fires early.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::clock::{Clock, SystemClock};
use crate::tick::{nanos, Resolution};

/// A reading of the timer's clock: the time since the origin and the tick
/// it falls in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Now {
    /// Whole nanoseconds since the origin (saturating at `u64::MAX`,
    /// 584 years).
    pub(super) ns: u64,
    /// The tick the reading falls in, rounded down.
    pub(super) tick: u64,
}

/// Where a timer's time comes from, and how it becomes ticks.
///
/// Every schedule reads the clock and converts a time, so this is the hot
/// path of [`Timer::schedule`](crate::Timer::schedule): the system clock
/// is read without a virtual call, conversions run on whole nanoseconds in
/// 64 bits ([`Resolution`]), and a deadline still ahead of the reading is
/// the only time converted to ticks ([`due_at_now`](Self::due_at_now),
/// [`due_after_now`](Self::due_after_now)): the reading's own tick cannot
/// make it due.
pub(crate) struct TimeSource {
    /// Where time comes from.
    clock: Arc<dyn Clock>,
    /// Whether `clock` is the [`SystemClock`], read as [`Instant::now`]
    /// directly.
    system: bool,
    /// The clock's reading when the timer was built: tick 0.
    origin: Instant,
    /// Tick length and conversions.
    resolution: Resolution,
    /// The origin as the system's monotonic clock reads it, in whole
    /// nanoseconds, if `origin` is verifiably a reading of that clock
    /// ([`monotonic::origin`]); [`OFF`] otherwise, or once a pass found the
    /// two apart ([`check_monotonic`](Self::check_monotonic)). A delay
    /// from now then reads that clock and converts no `Instant`
    /// ([`due_after_now`](Self::due_after_now)). A plain atomic of std's,
    /// not the loom models' own: it carries no other memory, and turns off
    /// at most once.
    monotonic_origin: AtomicU64,
}

/// [`TimeSource::monotonic_origin`] when the monotonic clock is not read.
const OFF: u64 = u64::MAX;

impl TimeSource {
    /// A time source on `clock` whose tick 0 starts now; `system`: the
    /// clock is the [`SystemClock`] (see [`is_system`]).
    pub(crate) fn new(clock: Arc<dyn Clock>, system: bool, resolution: Resolution) -> Self {
        let (origin, monotonic_origin) = if system {
            monotonic::origin()
        } else {
            (clock.now(), None)
        };
        TimeSource {
            clock,
            system,
            origin,
            resolution,
            monotonic_origin: AtomicU64::new(monotonic_origin.unwrap_or(OFF)),
        }
    }

    /// The clock.
    pub(crate) fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The tick's length.
    pub(crate) fn tick(&self) -> Duration {
        self.resolution.tick()
    }

    /// The clock's instant now (one clock reading).
    #[inline]
    pub(crate) fn instant(&self) -> Instant {
        if self.system {
            Instant::now()
        } else {
            self.clock.now()
        }
    }

    /// Whether the clock is the [`SystemClock`], which never goes back.
    #[inline]
    pub(crate) fn reads_system_clock(&self) -> bool {
        self.system
    }

    /// Whether `at`, a reading of the clock, lies before the origin (a
    /// clock that went back to before the timer was built): it counts as
    /// the origin.
    #[inline]
    pub(crate) fn before_origin(&self, at: Instant) -> bool {
        at < self.origin
    }

    /// The clock read now, in ticks.
    #[inline]
    pub(crate) fn now(&self) -> Now {
        self.ticks(self.instant())
    }

    /// `at`, a reading of the clock, in ticks.
    #[inline]
    pub(crate) fn ticks(&self, at: Instant) -> Now {
        match self.since_origin(at) {
            Some(ns) => Now {
                ns,
                tick: self.resolution.now_tick_ns(ns),
            },
            None => Now {
                ns: u64::MAX,
                tick: self
                    .resolution
                    .now_tick(at.saturating_duration_since(self.origin)),
            },
        }
    }

    /// `at` (a reading of the clock, or a deadline) in whole nanoseconds
    /// since the origin, an instant before it counting as the origin;
    /// `None` past what a `u64` holds (584 years): the one conversion of
    /// an instant.
    #[inline]
    fn since_origin(&self, at: Instant) -> Option<u64> {
        nanos(at.saturating_duration_since(self.origin))
    }

    /// The tick at which a task due `delay` after `now` may fire.
    #[inline]
    pub(crate) fn due_after(&self, now: Now, delay: Duration) -> u64 {
        let deadline = nanos(delay).and_then(|delay| now.ns.checked_add(delay));
        self.resolution.due_tick_ns(deadline, now.ns)
    }

    /// Reads the clock for a task due `delay` from now: as
    /// [`due_at_now`](Self::due_at_now), the tick at which it may fire
    /// ([`due_after`](Self::due_after)) and a tick the clock has reached.
    /// A delay of at least a nanosecond puts the deadline after the
    /// reading, so its tick is the deadline rounded up, after the
    /// reading's own: that one is never converted, and tick 0 serves.
    ///
    /// With the system clock, that reading is the monotonic clock's own,
    /// in nanoseconds, when `Instant` is verifiably that clock
    /// ([`monotonic_origin`](Self::monotonic_origin)): no `Instant`
    /// subtraction (about 55 instructions; a `Timer` schedule and cancel
    /// take about 570 together).
    #[inline]
    pub(crate) fn due_after_now(&self, delay: Duration) -> (u64, u64) {
        let (now, instant) = match self.monotonic_now() {
            Some(now) => (Some(now), None),
            None => {
                let instant = self.instant();
                (self.since_origin(instant), Some(instant))
            }
        };
        match (now, nanos(delay)) {
            // After the reading: rounded up, never due now.
            (Some(now), Some(delay)) if delay > 0 => {
                (self.resolution.deadline_tick_of(now.checked_add(delay)), 0)
            }
            _ => {
                let now = self.ticks(instant.unwrap_or_else(|| self.instant()));
                (self.due_after(now, delay), now.tick)
            }
        }
    }

    /// The tick at which a task due at `deadline` may fire, the clock
    /// reading `now`: due now if the deadline has passed.
    #[inline]
    pub(crate) fn due_at(&self, now: Now, deadline: Instant) -> u64 {
        self.resolution
            .due_tick_ns(self.since_origin(deadline), now.ns)
    }

    /// The tick at which a task due at `deadline` may fire, the clock
    /// reading before `deadline`: [`due_at`](Self::due_at) with no reading
    /// to convert, since a deadline still ahead is rounded up whatever the
    /// reading.
    #[inline]
    pub(crate) fn due_ahead(&self, deadline: Instant) -> u64 {
        self.resolution
            .deadline_tick_of(self.since_origin(deadline))
    }

    /// Reads the clock for a task due at `deadline`: the tick at which it
    /// may fire ([`due_at`](Self::due_at)), and a tick the clock has
    /// reached, so that the task is due now if its tick is at or before
    /// that one. A deadline still ahead (the common case) costs one
    /// conversion, not two: its tick is the deadline rounded up, which lies
    /// after the reading's tick unless it is tick 0 (a deadline at or
    /// before the origin, which a reading before the origin counts as), so
    /// the origin's tick 0 serves as the tick reached.
    #[inline]
    pub(crate) fn due_at_now(&self, deadline: Instant) -> (u64, u64) {
        let instant = self.instant();
        if instant < deadline {
            (self.due_ahead(deadline), 0)
        } else {
            let now = self.ticks(instant);
            (self.due_at(now, deadline), now.tick)
        }
    }

    /// The monotonic clock read now, in whole nanoseconds since the
    /// origin, if delays read it ([`due_after_now`](Self::due_after_now));
    /// exactly what converting an `Instant` read now would give.
    #[inline]
    pub(crate) fn monotonic_now(&self) -> Option<u64> {
        let origin = self.monotonic_origin.load(Ordering::Relaxed);
        if origin == OFF {
            return None;
        }
        Some(monotonic::now()?.saturating_sub(origin))
    }

    /// The instant `ns` nanoseconds after the origin, if representable.
    #[inline]
    pub(crate) fn instant_after_origin(&self, ns: u64) -> Option<Instant> {
        self.origin.checked_add(Duration::from_nanos(ns))
    }

    /// The tick at which a task due `ns` nanoseconds after the origin may
    /// fire, the clock reading before that: rounded up, as
    /// [`due_ahead`](Self::due_ahead).
    #[inline]
    pub(crate) fn due_ahead_ns(&self, ns: u64) -> u64 {
        self.resolution.deadline_tick_ns(ns)
    }

    /// Checks, with `reading` just taken, that the monotonic clock read
    /// now is not behind it (both since the origin); if it is, the two
    /// clocks have come apart and a delay read from the monotonic clock
    /// could end early, so it is never read again. The driver checks once
    /// per pass. They are one clock on Linux today, so this never turns
    /// it off; it guards against `Instant` moving to another clock (one
    /// that counts suspended time, say) in a later Rust. It comes after
    /// the fact: delays read between the clocks coming apart and the next
    /// pass could end early by that much.
    pub(crate) fn check_monotonic(&self, reading: Now) {
        if self.monotonic_now().is_some_and(|now| now < reading.ns) {
            self.monotonic_origin.store(OFF, Ordering::Relaxed);
        }
    }

    /// Whether a delay reads the monotonic clock (tests only).
    #[cfg(all(test, not(purgatorio_loom)))]
    pub(crate) fn reads_monotonic(&self) -> bool {
        self.monotonic_origin.load(Ordering::Relaxed) != OFF
    }

    /// Moves the monotonic clock's origin `ns` later, as if `Instant` ran
    /// ahead of it by that much (tests only).
    #[cfg(all(test, not(purgatorio_loom)))]
    pub(crate) fn shift_monotonic_origin(&self, ns: u64) {
        let origin = self.monotonic_origin.load(Ordering::Relaxed);
        if origin != OFF {
            self.monotonic_origin.store(origin + ns, Ordering::Relaxed);
        }
    }

    /// The instant at which `tick` begins, if representable.
    pub(crate) fn instant_of(&self, tick: u64) -> Option<Instant> {
        self.origin.checked_add(self.resolution.tick_start(tick))
    }

    /// How long after its tick `deadline` began the clock reads now (the
    /// monotonic clock's nanoseconds where delays read it: a worker asks
    /// this of every task it runs).
    pub(crate) fn lag(&self, deadline: u64) -> Duration {
        let now = self.monotonic_now().unwrap_or_else(|| self.now().ns);
        Duration::from_nanos(now).saturating_sub(self.resolution.tick_start(deadline))
    }
}

/// The system's monotonic clock, read without an `Instant`.
///
/// On Linux, `Instant::now` reads `CLOCK_MONOTONIC` (`clock_gettime`), and
/// an `Instant`'s `Debug` shows that reading's seconds and nanoseconds. So
/// the timer's origin, an `Instant`, has a value in that clock's whole
/// nanoseconds, and a reading of that clock minus it is the time since the
/// origin, exactly as subtracting `Instant`s would give it, for a few
/// instructions. That holds only if both are true, so [`origin`] checks
/// them: the origin's `Debug` must parse, and its value must lie between
/// two readings of the monotonic clock taken around it (another clock's
/// value would not, unless it is the clock that counts suspended time on a
/// machine that never slept; [`TimeSource::check_monotonic`] catches that
/// one at the first pass after it slept). Otherwise every delay converts
/// an `Instant`, as on other systems.
#[cfg(all(target_os = "linux", target_pointer_width = "64"))]
mod monotonic {
    use std::time::Instant;

    /// `CLOCK_MONOTONIC` now, in whole nanoseconds; `None` if it cannot be
    /// read.
    #[inline]
    #[allow(unsafe_code)]
    pub(super) fn now() -> Option<u64> {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid `timespec` the call may write; it reads
        // no other memory.
        let read = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) } == 0;
        // The kernel keeps both in range: seconds since boot (584 years
        // before this wraps) and nanoseconds below a second.
        read.then(|| {
            (ts.tv_sec as u64)
                .wrapping_mul(1_000_000_000)
                .wrapping_add(ts.tv_nsec as u64)
        })
    }

    /// `secs` and `subsec` (below a second) in whole nanoseconds.
    fn nanos(secs: u64, subsec: u64) -> Option<u64> {
        (subsec < 1_000_000_000)
            .then(|| secs.checked_mul(1_000_000_000)?.checked_add(subsec))
            .flatten()
    }

    /// An instant read now, for the origin, and its value in the monotonic
    /// clock's nanoseconds if it is verifiably a reading of that clock.
    pub(super) fn origin() -> (Instant, Option<u64>) {
        let before = now();
        let origin = Instant::now();
        let after = now();
        let value = parse(&format!("{origin:?}"))
            .filter(|v| before.is_some_and(|b| b <= *v) && after.is_some_and(|a| *v <= a));
        (origin, value)
    }

    /// The nanoseconds of an `Instant`'s `Debug`, `Instant { tv_sec: S,
    /// tv_nsec: N }`; `None` for anything else.
    pub(super) fn parse(debug: &str) -> Option<u64> {
        let fields = debug
            .strip_prefix("Instant { tv_sec: ")?
            .strip_suffix(" }")?;
        let (secs, subsec) = fields.split_once(", tv_nsec: ")?;
        let digits = |s: &str| {
            s.bytes()
                .all(|b| b.is_ascii_digit())
                .then(|| s.parse().ok())?
        };
        nanos(digits(secs)?, digits(subsec)?)
    }
}

/// Elsewhere (and on 32-bit Linux, whose `timespec` may have padding)
/// every delay converts an `Instant`.
#[cfg(not(all(target_os = "linux", target_pointer_width = "64")))]
mod monotonic {
    use std::time::Instant;

    /// Never read.
    #[inline]
    pub(super) fn now() -> Option<u64> {
        None
    }

    /// The origin, with no monotonic value.
    pub(super) fn origin() -> (Instant, Option<u64>) {
        (Instant::now(), None)
    }
}

/// Whether a clock of type `C` is the [`SystemClock`], which a
/// [`TimeSource`] reads without a virtual call.
pub(crate) fn is_system<C: Clock>(_: &C) -> bool {
    std::any::TypeId::of::<C>() == std::any::TypeId::of::<SystemClock>()
}

#[cfg(all(test, not(purgatorio_loom)))]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::tick::NEVER;

    fn source(tick_ms: u64) -> (ManualClock, TimeSource) {
        let clock = ManualClock::new();
        let resolution = Resolution::new(Duration::from_millis(tick_ms));
        (
            clock.clone(),
            TimeSource::new(Arc::new(clock), false, resolution),
        )
    }

    #[test]
    fn readings_round_down_and_deadlines_up() {
        let (clock, time) = source(10);
        clock.advance(Duration::from_millis(15));
        let now = time.now();
        assert_eq!((now.ns, now.tick), (15_000_000, 1));
        // Due 5 ms from 15 ms: 20 ms starts tick 2, never earlier.
        assert_eq!(time.due_after(now, Duration::from_millis(5)), 2);
        // Due 6 ms from 15 ms: 21 ms, so the tick that starts at 30 ms.
        assert_eq!(time.due_after(now, Duration::from_millis(6)), 3);
        let at = time.instant() + Duration::from_millis(6);
        assert_eq!(time.due_at(now, at), 3);
        assert_eq!(
            time.instant_of(3),
            Some(time.instant() + Duration::from_millis(15))
        );
        assert_eq!(time.lag(1), Duration::from_millis(5));
    }

    /// Reading the clock for a delay converts only the deadline when the
    /// delay is not zero, and gives what converting the reading too gives.
    #[test]
    fn a_reading_for_a_delay_agrees_with_converting_both() {
        for tick_ms in [1, 3, 10] {
            let (clock, time) = source(tick_ms);
            for step_ns in [0, 1, 999_999, 1_000_000, 2_500_000, 10_000_001] {
                clock.advance(Duration::from_nanos(step_ns));
                let now = time.now();
                for delay_ns in [0u64, 1, 499_999, 1_000_000, 7_000_001, 45_000_000] {
                    let delay = Duration::from_nanos(delay_ns);
                    let want = time.due_after(now, delay);
                    let (tick, reached) = time.due_after_now(delay);
                    assert_eq!(tick, want, "tick {tick_ms} ms, delay {delay:?}");
                    assert_eq!(tick <= reached, want <= now.tick, "due now: {delay:?}");
                }
                for delay in [Duration::MAX, Duration::from_secs(u64::MAX / 2)] {
                    assert_eq!(time.due_after_now(delay).0, NEVER);
                }
            }
        }
    }

    /// A time source on the system clock, ticks of `tick`.
    fn system(tick: Duration) -> TimeSource {
        TimeSource::new(Arc::new(SystemClock), true, Resolution::new(tick))
    }

    /// A delay read from the monotonic clock lands between the ticks that
    /// two `Instant` readings around it give: the two are one clock, and
    /// the origin's value in it is exact (a frame off by a microsecond
    /// fails with the 1 ns tick). Also after the monotonic clock was
    /// turned off.
    #[test]
    fn a_delay_from_the_monotonic_clock_lies_between_two_instant_readings() {
        for tick in [
            Duration::from_nanos(1),
            Duration::from_micros(1),
            Duration::from_millis(1),
        ] {
            let time = system(tick);
            #[cfg(all(target_os = "linux", target_pointer_width = "64"))]
            assert!(
                time.reads_monotonic(),
                "Instant is CLOCK_MONOTONIC on Linux"
            );
            for round in 0..2 {
                for delay_ns in [1u64, 999, 1_000_000, 45_000_001, 3_600_000_000_000] {
                    let delay = Duration::from_nanos(delay_ns);
                    let before = time.now();
                    let (due, reached) = time.due_after_now(delay);
                    let after = time.now();
                    let (early, late) =
                        (time.due_after(before, delay), time.due_after(after, delay));
                    assert!(
                        early <= due && due <= late,
                        "{due} outside [{early}, {late}], tick {tick:?}, delay {delay:?}"
                    );
                    assert!(due > reached, "a delay is never due at once");
                    // A task's lag, read between two readings.
                    let (before, start) = (time.now(), time.resolution.tick_start(1));
                    let lag = time.lag(1);
                    let after = time.now();
                    let [least, most] = [before.ns, after.ns]
                        .map(|ns| Duration::from_nanos(ns).saturating_sub(start));
                    assert!(
                        least <= lag && lag <= most,
                        "lag {lag:?} outside [{least:?}, {most:?}]"
                    );
                }
                if round == 0 {
                    // Turned off: the same answers from `Instant`s.
                    time.check_monotonic(Now {
                        ns: u64::MAX,
                        tick: u64::MAX,
                    });
                    assert!(!time.reads_monotonic());
                }
            }
        }
    }

    /// A pass's reading taken before the monotonic clock's keeps it on; one
    /// the monotonic clock is behind (the clocks came apart) turns it off,
    /// for good.
    #[test]
    fn the_monotonic_clock_is_turned_off_once_it_falls_behind() {
        let time = system(Duration::from_millis(1));
        #[cfg(all(target_os = "linux", target_pointer_width = "64"))]
        {
            time.check_monotonic(time.now());
            assert!(time.reads_monotonic(), "one clock: never behind");
        }
        let ahead = time.now().ns + 1_000_000_000;
        time.check_monotonic(Now { ns: ahead, tick: 0 });
        assert!(!time.reads_monotonic());
        time.check_monotonic(time.now());
        assert!(!time.reads_monotonic(), "off for good");
    }

    #[cfg(all(target_os = "linux", target_pointer_width = "64"))]
    #[test]
    fn an_instants_debug_parses_to_its_nanoseconds_and_nothing_else_does() {
        use super::monotonic::parse;
        assert_eq!(
            parse("Instant { tv_sec: 5, tv_nsec: 7 }"),
            Some(5_000_000_007)
        );
        assert_eq!(
            parse("Instant { tv_sec: 0, tv_nsec: 999999999 }"),
            Some(999_999_999)
        );
        for bad in [
            "",
            "Instant { tv_sec: -5, tv_nsec: 7 }",
            "Instant { tv_sec: 5, tv_nsec: 1000000000 }",
            "Instant { tv_sec: 5, tv_nsec: +7 }",
            "Instant { tv_sec: 5, tv_nsec: 7, clock: 1 }",
            "Instant { tv_sec: 18446744073709551615, tv_nsec: 0 }",
            "Instant { t: 5 }",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }

    /// Reading the clock for a deadline converts only the deadline when it
    /// is ahead, and gives what the two conversions give: the same tick,
    /// and due now exactly when that tick is at or before the reading's.
    #[test]
    fn a_reading_for_a_deadline_agrees_with_converting_both() {
        for tick_ms in [1, 3, 10] {
            let (clock, time) = source(tick_ms);
            let origin = time.instant();
            for step_us in [0, 1, 999, 1_000, 2_500, 9_999, 10_000, 10_001] {
                clock.advance(Duration::from_micros(step_us));
                let reading = time.instant();
                let now = time.now();
                for offset_us in [0u64, 1, 500, 999, 1_000, 1_001, 7_000, 10_000, 45_000] {
                    for deadline in [
                        reading + Duration::from_micros(offset_us),
                        reading
                            .checked_sub(Duration::from_micros(offset_us))
                            .filter(|d| *d >= origin)
                            .unwrap_or(origin),
                    ] {
                        let want = time.due_at(now, deadline);
                        let (tick, reached) = time.due_at_now(deadline);
                        assert_eq!(tick, want, "tick {tick_ms} ms, deadline {deadline:?}");
                        assert_eq!(
                            tick <= reached,
                            want <= now.tick,
                            "due now: tick {tick_ms} ms, deadline {deadline:?}"
                        );
                        // Ahead: its tick starts at or after it. Passed:
                        // due now, at the latest at the reading's tick.
                        assert!(
                            time.instant_of(tick).is_none_or(|start| start >= deadline)
                                || (deadline <= reading && tick <= reached),
                            "never early"
                        );
                    }
                }
            }
        }
    }
}
