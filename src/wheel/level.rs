//! Levels: which level and slot a deadline belongs to ([`Geometry`]), and
//! the window of each level created so far ([`Levels`]).
//!
//! With wheel size `W`, level `L` has a tick of `W^L` base ticks and spans
//! `W^(L+1)` ticks. Relative to the wheel's time `now`, level `L` accepts the
//! deadlines in `[start_L, last_L]`, where `start_L` is `now` rounded down to a
//! multiple of the level's tick and `last_L = start_L + W·tick_L − 1`. Within
//! that range a deadline goes to slot `(deadline / tick_L) mod W`; the range
//! holds exactly `W` slot-widths, so a slot never holds two rotations at once.
//!
//! | level | tick (W = 64, 1 ms base) | span            |
//! |-------|--------------------------|-----------------|
//! | 0     | 1 ms                     | 64 ms           |
//! | 1     | 64 ms                    | 4.1 s           |
//! | 2     | 4.1 s                    | 4.5 min         |
//! | 3     | 4.5 min                  | 4.8 h           |
//! | …     | ×64                      | ×64             |
//!
//! Spans saturate: the first level whose span would pass `u64::MAX` ticks
//! accepts every deadline. The wheel files only deadlines less than 2^31
//! ticks ahead (its [near window](super::reference)), so it creates at most
//! 32 levels (W = 2), and 6 with the default W = 64; later deadlines wait in
//! the [side heap](super::side). Powers of two use shifts and masks; other
//! sizes divide.
//!
//! The wheel asks here for a deadline's bucket ([`Levels::bucket_in`]),
//! creates levels as it needs them ([`Levels::add`]), and moves every
//! level's window with its time ([`Levels::set_now`]).

/// The shape shared by all levels of one wheel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Geometry {
    /// Slots per level (≥ 2).
    wheel_size: u64,
    /// `log2(wheel_size)` when it is a power of two.
    bits: Option<u32>,
}

impl Geometry {
    /// The geometry of a wheel with `wheel_size` slots per level (≥ 2).
    pub(crate) fn new(wheel_size: u64) -> Self {
        debug_assert!(wheel_size >= 2, "wheel size {wheel_size} < 2");
        let bits = wheel_size
            .is_power_of_two()
            .then(|| wheel_size.trailing_zeros());
        Geometry { wheel_size, bits }
    }

    /// Slots per level.
    #[inline]
    pub(crate) fn wheel_size(&self) -> u64 {
        self.wheel_size
    }

    /// The tick of `level` in base ticks (`W^level`), or `None` when it does
    /// not fit a `u64` (the level above the last one ever needed).
    pub(crate) fn level_tick(&self, level: u32) -> Option<u64> {
        self.wheel_size.checked_pow(level)
    }

    /// The slot `deadline` takes in a level whose tick is `tick = W^level`.
    #[inline]
    pub(crate) fn slot(&self, level: u32, tick: u64, deadline: u64) -> u64 {
        match self.bits {
            Some(bits) => {
                // level * bits < 64 whenever tick fits a u64.
                (deadline >> (level * bits)) & (self.wheel_size - 1)
            }
            None => (deadline / tick) % self.wheel_size,
        }
    }

    /// The last deadline a level with tick `tick` accepts at time `now`
    /// (inclusive, saturating at `u64::MAX`).
    #[inline]
    pub(crate) fn last(&self, tick: u64, now: u64) -> u64 {
        // A level's tick is a power of the wheel size: with a power-of-two
        // size, a mask instead of a division (this runs for every level
        // whenever the wheel's time moves).
        let start = match self.bits {
            Some(_) => now & !(tick - 1),
            None => now - now % tick,
        };
        tick.checked_mul(self.wheel_size)
            .and_then(|span| start.checked_add(span - 1))
            .unwrap_or(u64::MAX)
    }
}

/// One level of the wheel.
#[derive(Clone, Copy, Debug)]
struct Level {
    /// Ticks per bucket (`W^level`).
    tick: u64,
    /// The last deadline this level accepts at the wheel's current time.
    last: u64,
}

/// The levels a wheel created so far, finest first, and their geometry.
#[derive(Debug)]
pub(super) struct Levels {
    /// Slot count and arithmetic.
    geometry: Geometry,
    /// Levels created so far, finest first.
    levels: Vec<Level>,
}

impl Levels {
    /// No level yet, for a wheel of `wheel_size` slots per level (≥ 2).
    pub(super) fn new(wheel_size: u64) -> Self {
        Levels {
            geometry: Geometry::new(wheel_size),
            levels: Vec::new(),
        }
    }

    /// The geometry all levels share.
    pub(super) fn geometry(&self) -> Geometry {
        self.geometry
    }

    /// Slots per level.
    #[inline]
    pub(super) fn wheel_size(&self) -> u64 {
        self.geometry.wheel_size()
    }

    /// Number of levels created so far.
    #[inline]
    pub(super) fn len(&self) -> usize {
        self.levels.len()
    }

    /// The bucket (`level × W + slot`) `deadline` goes to in `level`, if
    /// that level accepts it (`None` if it is past the level's window).
    #[inline]
    pub(super) fn bucket_in(&self, level: usize, deadline: u64) -> Option<u32> {
        let l = self.levels[level];
        (deadline <= l.last).then(|| {
            let slot = self.geometry.slot(level as u32, l.tick, deadline);
            (level as u64 * self.geometry.wheel_size() + slot) as u32
        })
    }

    /// Creates the next coarser level at the wheel's time `now`; returns
    /// its tick.
    pub(super) fn add(&mut self, now: u64) -> u64 {
        let level = self.levels.len() as u32;
        let tick = self
            .geometry
            .level_tick(level)
            .expect("the level below accepts every deadline");
        self.levels.push(Level {
            tick,
            last: self.geometry.last(tick, now),
        });
        tick
    }

    /// Moves every level's window to the wheel's new time `now`.
    #[inline]
    pub(super) fn set_now(&mut self, now: u64) {
        for level in &mut self.levels {
            let last = self.geometry.last(level.tick, now);
            if last == level.last {
                // Its window did not move, so no coarser one did: a
                // coarser tick is a multiple of this one.
                break;
            }
            level.last = last;
        }
    }

    /// The last deadline the finest level accepts.
    #[inline]
    pub(super) fn finest_last(&self) -> u64 {
        self.levels[0].last
    }

    /// The last deadline `level` accepts, and the slot `deadline` takes in
    /// it (for the invariant check).
    #[cfg(test)]
    pub(super) fn window_and_slot(&self, level: usize, deadline: u64) -> (u64, u64) {
        let l = self.levels[level];
        (l.last, self.geometry.slot(level as u32, l.tick, deadline))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn level_ticks_grow_by_wheel_size_until_overflow() {
        let g = Geometry::new(64);
        assert_eq!(g.level_tick(0), Some(1));
        assert_eq!(g.level_tick(1), Some(64));
        assert_eq!(g.level_tick(10), Some(1 << 60));
        assert_eq!(g.level_tick(11), None);
        let g = Geometry::new(2);
        assert_eq!(g.level_tick(63), Some(1 << 63));
        assert_eq!(g.level_tick(64), None);
        let g = Geometry::new(20);
        assert_eq!(g.level_tick(2), Some(400));
    }

    #[test]
    fn slot_matches_division_for_powers_of_two_and_others() {
        for w in [2u64, 3, 8, 20, 64, 100, 256] {
            let g = Geometry::new(w);
            for level in 0..4 {
                let tick = g.level_tick(level).unwrap();
                for d in [
                    0,
                    1,
                    tick - 1,
                    tick,
                    tick * w - 1,
                    tick * w,
                    tick * w + 1,
                    u64::MAX,
                ] {
                    assert_eq!(
                        g.slot(level, tick, d),
                        (d / tick) % w,
                        "w {w} level {level} d {d}"
                    );
                }
            }
        }
    }

    #[test]
    fn last_covers_exactly_one_rotation_from_the_slot_start() {
        for w in [2u64, 3, 64] {
            let g = Geometry::new(w);
            for level in 0..3 {
                let tick = g.level_tick(level).unwrap();
                for now in [0, 1, tick - 1, tick, tick + 1, 5 * tick + 3] {
                    let last = g.last(tick, now);
                    let start = now / tick * tick;
                    assert_eq!(last, start + tick * w - 1);
                    // W distinct slots between start and last.
                    let first_slot = g.slot(level, tick, start);
                    let last_slot = g.slot(level, tick, last);
                    assert_eq!((first_slot + w - 1) % w, last_slot);
                }
            }
        }
    }

    #[test]
    fn last_saturates_at_the_top() {
        let g = Geometry::new(64);
        let top = g.level_tick(10).unwrap();
        assert_eq!(g.last(top, u64::MAX - 5), u64::MAX);
        assert_eq!(g.last(1, u64::MAX - 1), u64::MAX);
        let g = Geometry::new(2);
        assert_eq!(g.last(1 << 63, 0), u64::MAX);
    }

    #[test]
    fn lower_level_covers_the_current_slot_of_the_next() {
        // Level L's current slot [start_L, start_L + tick_L) never receives
        // new entries: level L-1 already accepts all of it.
        for w in [2u64, 3, 20, 64] {
            let g = Geometry::new(w);
            for level in 1..4 {
                let tick = g.level_tick(level).unwrap();
                let lower = g.level_tick(level - 1).unwrap();
                for now in [0, 1, tick - 1, tick, 7 * tick + tick / 2] {
                    let start = now / tick * tick;
                    assert!(g.last(lower, now) >= start + tick - 1);
                    assert!(g.last(lower, now) <= g.last(tick, now));
                }
            }
        }
    }
}
