//! Nanoseconds ↔ ticks: deadlines round up, readings round down.
//!
//! The wheel counts whole ticks since an origin; the crate's times are whole
//! nanoseconds since that origin in a `u64` (584 years). One rule makes the
//! crate *never early*: a **deadline** is rounded **up** to the next tick
//! boundary and a **reading** **down** to the tick it falls in, so "the
//! reading's tick ≥ the deadline's tick" implies "reading ≥ deadline" at
//! every tick size. Both saturate instead of overflowing: a deadline past
//! what a `u64` holds ([`NEVER_NS`]) is due at [`NEVER`], a tick that no
//! reading reaches.

use std::time::Duration;

/// The tick that no clock reading reaches: deadlines beyond the
/// representable range are filed here and never fire.
pub(crate) const NEVER: u64 = u64::MAX;

/// A deadline past what whole nanoseconds in a `u64` hold (584 years after
/// the origin): due at [`NEVER`].
pub(crate) const NEVER_NS: u64 = u64::MAX;

/// The largest tick a reading converts to (one below [`NEVER`]).
const LATEST_READING: u64 = NEVER - 1;

/// `d` in whole nanoseconds, saturating at [`NEVER_NS`].
#[inline]
pub(crate) fn nanos(d: Duration) -> u64 {
    d.as_secs()
        .checked_mul(1_000_000_000)
        .and_then(|ns| ns.checked_add(u64::from(d.subsec_nanos())))
        .unwrap_or(NEVER_NS)
}

/// `delay` after `now` (nanoseconds since the origin), saturating at
/// [`NEVER_NS`]: a delay too long to represent never comes.
#[inline]
pub(crate) fn after(now: u64, delay: Duration) -> u64 {
    now.saturating_add(nanos(delay))
}

/// When a task falls due, as the wheel files it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Due {
    /// The tick at which it may fire.
    pub(crate) tick: u64,
    /// Whether it is due already: its deadline is at or before the reading.
    pub(crate) now: bool,
}

/// The tick length and the conversions between nanoseconds and ticks.
///
/// Every schedule converts a deadline, so the division by the tick is a
/// multiplication by its precomputed reciprocal, corrected to be exact
/// ([`split`](Self::split)): no 128-bit division.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Resolution {
    /// Length of one tick in nanoseconds (≥ 1).
    tick_ns: u64,
    /// `⌊(2^64 − 1) / tick_ns⌋`: the quotient estimate's multiplier.
    reciprocal: u64,
}

impl Resolution {
    /// A resolution of `tick`, which the caller has validated (≥ 1 ns).
    pub(crate) fn new(tick: Duration) -> Self {
        let tick_ns = nanos(tick).max(1);
        Resolution {
            tick_ns,
            reciprocal: u64::MAX / tick_ns,
        }
    }

    /// The tick length.
    pub(crate) fn tick(&self) -> Duration {
        Duration::from_nanos(self.tick_ns)
    }

    /// `ns / tick_ns` and `ns % tick_ns`, exactly.
    ///
    /// The estimate `⌊ns · r / 2^64⌋`, with `r = ⌊(2^64 − 1) / d⌋ > 2^64/d − 1`,
    /// is never above the quotient and below it by less than
    /// `1 + ns/2^64 < 2`, so at most two corrections make it exact.
    #[inline]
    fn split(&self, ns: u64) -> (u64, u64) {
        let mut q = ((u128::from(ns) * u128::from(self.reciprocal)) >> 64) as u64;
        let mut r = ns - q * self.tick_ns;
        // At most twice (see above); a loop the compiler keeps short.
        while r >= self.tick_ns {
            q += 1;
            r -= self.tick_ns;
        }
        (q, r)
    }

    /// The tick a reading `ns` after the origin falls in: rounded down, and
    /// never [`NEVER`]. A reading at the cap ([`NEVER_NS`]: 584 years or
    /// more) has passed every deadline below it, so it reaches the last
    /// tick a deadline can have.
    #[inline]
    pub(crate) fn tick_of(&self, ns: u64) -> u64 {
        if ns == NEVER_NS {
            return LATEST_READING;
        }
        self.split(ns).0.min(LATEST_READING)
    }

    /// The tick at which a deadline `ns` after the origin may fire: rounded
    /// up, so the tick begins at or after it; [`NEVER`] for [`NEVER_NS`].
    #[inline]
    pub(crate) fn ceil(&self, ns: u64) -> u64 {
        if ns == NEVER_NS {
            return NEVER;
        }
        let (q, r) = self.split(ns);
        q + u64::from(r > 0)
    }

    /// When a task due `deadline` after the origin falls due, the clock
    /// reading `now`: a deadline still ahead at its own tick, rounded up
    /// ([`ceil`](Self::ceil), after the reading's, so it is not due now); a
    /// deadline reached, due now, at its own tick but never past the
    /// reading's, so a long-past deadline keeps its place in deadline order.
    /// A deadline of [`NEVER_NS`] ahead of the reading is due at [`NEVER`].
    #[inline]
    pub(crate) fn due(&self, deadline: u64, now: u64) -> Due {
        let tick = self.ceil(deadline);
        if deadline > now {
            Due { tick, now: false }
        } else {
            Due {
                tick: tick.min(self.tick_of(now)),
                now: true,
            }
        }
    }

    /// The nanoseconds after the origin at which `tick` begins, saturating
    /// at [`NEVER_NS`].
    #[inline]
    pub(crate) fn start(&self, tick: u64) -> u64 {
        tick.saturating_mul(self.tick_ns)
    }

    /// [`start`](Self::start) as a [`Duration`] since the origin.
    #[inline]
    pub(crate) fn start_after_origin(&self, tick: u64) -> Duration {
        Duration::from_nanos(self.start(tick))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// The tick a deadline ahead of every reading is filed at.
    fn ahead(r: &Resolution, deadline: u64) -> u64 {
        r.due(deadline, 0).tick
    }

    #[test]
    fn deadlines_round_up_and_readings_down() {
        let r = Resolution::new(Duration::from_millis(1));
        assert_eq!(ahead(&r, 1), 1);
        assert_eq!(ahead(&r, MS), 1);
        assert_eq!(ahead(&r, MS + 1), 2);
        assert_eq!(r.tick_of(MS - 1), 0);
        assert_eq!(r.tick_of(MS), 1);
        assert_eq!(r.tick_of(2 * MS - 1), 1);
    }

    #[test]
    fn never_early_at_every_boundary() {
        for tick_ns in [1u64, 7, 1_000, 999_999, 1_000_000, 100_000_000] {
            let r = Resolution::new(Duration::from_nanos(tick_ns));
            let deadlines = [1u64, tick_ns - 1, tick_ns, tick_ns + 1, 3 * tick_ns - 1];
            for d in deadlines.into_iter().filter(|d| *d > 0) {
                let tick = ahead(&r, d);
                // The first reading whose tick reaches it is its start.
                let fire = r.start(tick);
                assert!(fire >= d, "tick {tick_ns}: {fire} < {d}");
                assert!(fire - d < tick_ns, "more than a tick late");
                assert!(r.tick_of(fire) >= tick);
                assert!(r.tick_of(fire - 1) < tick);
            }
        }
    }

    #[test]
    fn a_reached_deadline_is_due_now_in_the_current_tick_at_the_latest() {
        let r = Resolution::new(Duration::from_millis(10));
        let now = 15 * MS;
        let due = |d: u64| r.due(d, now);
        let at = |tick, now| Due { tick, now };
        assert_eq!(due(14 * MS), at(1, true), "past, inside the current tick");
        assert_eq!(due(now), at(1, true), "exactly now");
        assert_eq!(due(0), at(0, true), "long past keeps its tick");
        assert_eq!(due(10 * MS), at(1, true), "past, at a tick boundary");
        assert_eq!(due(9 * MS), at(1, true));
        assert_eq!(due(now + 1), at(2, false));
        assert_eq!(due(20 * MS), at(2, false));
        assert_eq!(due(20 * MS + 1), at(3, false));
        for ms in 0..40 {
            let d = ms * MS;
            let Due { tick, now: due_now } = due(d);
            // Due now exactly when reached; otherwise never early, and
            // never due at the reading's own tick.
            assert_eq!(due_now, d <= now);
            assert!(due_now || (r.start(tick) >= d && tick > r.tick_of(now)));
            assert!(!due_now || tick <= r.tick_of(now));
        }
    }

    #[test]
    fn saturates_instead_of_overflowing() {
        let r = Resolution::new(Duration::from_nanos(1));
        assert_eq!(nanos(Duration::MAX), NEVER_NS);
        assert_eq!(after(5, Duration::MAX), NEVER_NS);
        assert_eq!(after(u64::MAX - 1, Duration::from_nanos(7)), NEVER_NS);
        assert_eq!(r.due(NEVER_NS, 0).tick, NEVER);
        assert!(r.tick_of(u64::MAX) < NEVER);
        for tick in [1, 3, 1_000_000, 3_600_000_000_000] {
            let r = Resolution::new(Duration::from_nanos(tick));
            // A reading at the cap reaches every deadline below it, and a
            // deadline reached at the cap is due now, not never.
            assert!(r.tick_of(NEVER_NS) >= r.due(NEVER_NS - 1, 0).tick, "{tick}");
            assert!(r.due(NEVER_NS, NEVER_NS).now, "{tick}");
            assert!(r.due(NEVER_NS, NEVER_NS).tick <= r.tick_of(NEVER_NS));
        }
        let hour = Resolution::new(Duration::from_secs(3600));
        assert_eq!(hour.start(NEVER), NEVER_NS);
        assert_eq!(hour.start(2), 7_200_000_000_000);
        assert!(hour.due(NEVER_NS - 1, 0).tick < NEVER);
    }

    #[test]
    fn the_reciprocal_divides_exactly() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            // xorshift64: enough spread for edge-free values.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut ticks = vec![1, 2, 3, 7, 1_000, 999_999, 1_000_000, 3_600_000_000_000];
        ticks.push(u64::MAX);
        ticks.extend((0..200).map(|_| (next() >> (next() % 64)).max(1)));
        for d in ticks {
            let r = Resolution {
                tick_ns: d,
                reciprocal: u64::MAX / d,
            };
            let mut values = vec![0, 1, d - 1, d, d.saturating_add(1), u64::MAX - 1, u64::MAX];
            values.extend((0..200).map(|_| next() >> (next() % 64)));
            for ns in values {
                assert_eq!(r.split(ns), (ns / d, ns % d), "{ns} / {d}");
            }
        }
    }
}
