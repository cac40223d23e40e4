//! What goes into a wheel and comes out: a timer's handle ([`TimerKey`])
//! and a timer that came due ([`Fired`]).

use std::num::NonZeroU32;

/// Identifies one scheduled timer of a [`LocalTimer`](crate::LocalTimer).
///
/// Keys are generational: once the timer fired or was cancelled, its key is
/// stale and every operation with it answers `None` / `false`, even after the
/// slot has been reused by another timer.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use purgatorio::LocalTimer;
///
/// let mut timer = LocalTimer::new();
/// let key = timer.schedule_at(Duration::from_millis(5), "five");
/// assert_eq!(timer.cancel(key), Some("five"));
/// assert_eq!(timer.cancel(key), None); // stale: harmless
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TimerKey {
    /// Slot in the arena.
    pub(super) idx: u32,
    /// Generation of the occupant: higher than any generation before the
    /// arena last gave its slots back, so a key from before matches nothing
    /// after.
    pub(super) generation: NonZeroU32,
}

impl TimerKey {
    /// A key that never names a timer (slot indices stop below `u32::MAX`).
    pub(crate) const DEAD: TimerKey = TimerKey {
        idx: u32::MAX,
        generation: NonZeroU32::MIN,
    };

    /// The `n`th key that never names a timer: keys of different `n` below
    /// 2³² − 1 differ, so tasks that never enter a wheel (due at once) can
    /// still be told apart by their keys.
    pub(crate) fn dead(n: u64) -> TimerKey {
        let generation = (n % u64::from(u32::MAX)) as u32 + 1;
        TimerKey {
            idx: u32::MAX,
            generation: NonZeroU32::new(generation).unwrap_or(NonZeroU32::MIN),
        }
    }

    /// Whether this key never names a timer ([`DEAD`](Self::DEAD) or
    /// [`dead`](Self::dead)).
    pub(crate) fn is_dead(self) -> bool {
        self.idx == u32::MAX
    }

    /// The arena slot it names, for tests that check a slot was reused.
    #[cfg(all(test, not(purgatorio_loom)))]
    pub(crate) fn slot(self) -> u32 {
        self.idx
    }
}

/// A timer that came due: the one item that travels from a bucket to
/// whoever runs it (the driver's batches to the workers carry it as is;
/// [`LocalTimer`](crate::LocalTimer) hands it to the user as
/// [`Expired`](crate::Expired), in time rather than ticks).
#[derive(Debug)]
pub(crate) struct Fired<T> {
    /// Its key (now stale).
    pub(crate) key: TimerKey,
    /// Its deadline in ticks.
    pub(crate) deadline: u64,
    /// Its payload.
    pub(crate) value: T,
}

impl<T> Fired<T> {
    /// `value`, due at tick `deadline`, that never had a key in a wheel (a
    /// task due at once, or an internal job).
    pub(crate) fn untracked(deadline: u64, value: T) -> Self {
        Fired {
            key: TimerKey::DEAD,
            deadline,
            value,
        }
    }
}
