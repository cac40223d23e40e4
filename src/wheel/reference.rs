//! A bucket's reference to a timer: 8 bytes, `(slot, check)`.
//!
//! The reference does not store its deadline. It stores the deadline's low
//! 31 bits as its **check**, and the arena slot of a pending timer stores
//! the check of its one live reference. The deadline's high bits are implied
//! by the **near window**: every reference anywhere in the wheel has a
//! deadline in `[now, now + NEAR)`, where `now` is the wheel's time. A
//! reference is filed only for a deadline in `(now, now + NEAR)`, the wheel's
//! time only grows, and a reference leaves the wheel once the time passes
//! its deadline (its bucket is flushed at the bucket's earliest deadline, the
//! sorted run and the ready list are served before the time moves). So
//!
//! ```text
//! deadline = now + ((check − now) mod 2^31)
//! ```
//!
//! recovers it exactly, with no division and no look at the level.
//!
//! The check also decides liveness: a reference is live iff its slot is
//! occupied and carries the same check. Two references to one slot with
//! the same check have deadlines in the same window that agree in their low
//! 31 bits, so **the same deadline**: a stale reference that passes the test
//! (the slot was rescheduled back to that deadline, or reused by a timer
//! due in the same tick) fires that timer at its own deadline, and firing
//! frees the slot, so the other reference is dead when met. A stale
//! reference can therefore never fire a timer early, nor twice, and there
//! is no stamp to wrap around.
//!
//! A timer whose deadline is outside the near window (due already, or
//! `NEAR` ticks or more ahead: 24.8 days at a 1 ms tick) has no reference:
//! it waits in the [side heap](super::side), and its slot's check has the
//! [`SIDE`] bit set, which no reference's check has.

/// Width of the near window in ticks (2^31): only a deadline less than this
/// far ahead of the wheel's time is held by a reference.
pub(super) const NEAR: u64 = 1 << 31;

/// The check bits a reference keeps of its deadline.
pub(super) const LOW: u32 = (1 << 31) - 1;

/// The bit set in the check of a timer held by the side heap.
pub(super) const SIDE: u32 = 1 << 31;

/// A bucket's reference to a scheduled timer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Ref {
    /// Slot in the arena.
    pub(super) idx: u32,
    /// The deadline's low 31 bits; the slot must carry it for the reference
    /// to be live.
    pub(super) check: u32,
}

/// A reference that is never live, for buckets that hold nothing.
pub(super) const NO_REF: Ref = Ref {
    idx: u32::MAX,
    check: 0,
};

/// Whether a timer due at `deadline` is held by a reference when the
/// wheel's time is `now`: due later than `now`, less than [`NEAR`] ahead.
#[inline]
pub(super) fn is_near(deadline: u64, now: u64) -> bool {
    // One compare: `deadline − now − 1` wraps to a huge value when the
    // deadline is not after `now`.
    deadline.wrapping_sub(now).wrapping_sub(1) < NEAR - 1
}

/// The check of a reference due at `deadline`.
#[inline]
pub(super) fn near_check(deadline: u64) -> u32 {
    deadline as u32 & LOW
}

impl Ref {
    /// The deadline of this reference when the wheel's time is `now`: the
    /// one tick in `[now, now + NEAR)` whose low 31 bits are the check.
    #[inline]
    pub(super) fn deadline(self, now: u64) -> u64 {
        // Cannot overflow: the true deadline is `now` plus this offset.
        now + u64::from(self.check.wrapping_sub(now as u32) & LOW)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reference_is_eight_bytes() {
        assert_eq!(std::mem::size_of::<Ref>(), 8);
    }

    #[test]
    fn the_deadline_comes_back_across_every_boundary_of_the_window() {
        let nows = [
            0,
            1,
            u64::from(LOW) - 1,
            u64::from(LOW),
            NEAR,
            NEAR + 1,
            u64::from(u32::MAX),
            1 << 32,
            (1 << 32) + 5,
            3 << 40,
            u64::MAX - NEAR,
            u64::MAX - NEAR + 1,
            u64::MAX - 1,
        ];
        for now in nows {
            let offsets = [0, 1, 2, NEAR / 2, NEAR - 2, NEAR - 1];
            for off in offsets {
                let Some(deadline) = now.checked_add(off) else {
                    continue;
                };
                let r = Ref {
                    idx: 7,
                    check: near_check(deadline),
                };
                assert_eq!(r.deadline(now), deadline, "now {now} offset {off}");
                assert_eq!(r.check & SIDE, 0, "a reference's check never has SIDE");
                // Later times inside the window still recover it.
                for later in [now + off / 2, deadline] {
                    assert_eq!(r.deadline(later), deadline, "now {later}");
                }
                assert_eq!(is_near(deadline, now), off > 0, "near at offset {off}");
            }
            if let Some(far) = now.checked_add(NEAR) {
                assert!(!is_near(far, now), "{NEAR} ahead is not near");
            }
        }
    }

    #[test]
    fn equal_checks_in_one_window_mean_equal_deadlines() {
        let now = (1 << 33) + 12_345;
        for a in [now, now + 1, now + NEAR / 3, now + NEAR - 1] {
            for b in [now, now + 2, now + NEAR / 3, now + NEAR - 1] {
                assert_eq!(near_check(a) == near_check(b), a == b, "{a} {b}");
            }
        }
    }
}
