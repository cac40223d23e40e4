//! The driver's shared state: the time source, the tick the driver will
//! wake at and the signal that wakes it, the shutdown flag, the timer's
//! name and the counters. Shared by the handles, the shards, the driver and
//! the workers.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::metrics::Counters;
use super::signal::Signal;
use crate::sync::{AtomicBool, AtomicU64};
use crate::time::TimeSource;

/// What the timer's threads and handles share.
pub(crate) struct Timing {
    /// The clock, the origin and the tick: time ↔ ticks.
    pub(super) time: TimeSource,
    /// Wakes the driver (and `advance_clock` callers).
    pub(super) signal: Arc<Signal>,
    /// The tick the driver will wake at; `u64::MAX` for none, [`PASSING`]
    /// while a pass looks for the earliest deadline (see
    /// [`driver`](super::driver)'s wake-up protocol).
    pub(super) next_wake: AtomicU64,
    /// The earliest tick scheduled while `next_wake` read [`PASSING`], for
    /// the pass to take at its end; `u64::MAX` for none.
    pub(super) deferred: AtomicU64,
    /// Set once by shutdown.
    pub(super) closed: AtomicBool,
    /// The threads' name prefix: the timer's name in published figures.
    pub(super) name: String,
    /// Counters kept outside the shard locks.
    pub(super) counters: Counters,
    /// The timer's number among the process's timers, in its
    /// [`TimerId`](crate::TimerId)s: an id from another timer names
    /// nothing here.
    pub(super) id: u64,
}

impl Timing {
    /// Whether the timer is shut down.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// The time source.
    pub(crate) fn time(&self) -> &TimeSource {
        &self.time
    }

    /// Records the lag of a task with deadline tick `deadline` starting now.
    pub(super) fn record_lag(&self, deadline: u64) {
        self.counters.record_lag(self.time.lag(deadline));
    }

    /// Lowers the tick the driver plans to wake at to `tick`; the returned
    /// [`Wake`] wakes the driver if that was earlier, once dropped. While
    /// the driver passes, the tick is left for that pass to take at its end
    /// instead, with no wake-up: the driver is awake already.
    #[inline]
    pub(super) fn wake_if_earlier(&self, tick: u64) -> Wake<'_> {
        // A deadline at `PASSING` or later (584 years at the finest tick, or
        // never) needs no wake-up.
        if tick >= PASSING {
            return Wake::none();
        }
        // Fast path: a plain load, so schedulers share the cache line.
        let planned = self.next_wake.load(Ordering::SeqCst);
        if planned == PASSING {
            if tick < self.deferred.load(Ordering::SeqCst) {
                self.deferred.fetch_min(tick, Ordering::SeqCst);
            }
            // Still passing: the pass's end (`end_pass`) takes the tick, as
            // it swaps `deferred` after replacing `PASSING`, which is after
            // this load. Otherwise the pass ended meanwhile and the tick is
            // lowered as below (`deferred` may keep it: the next pass then
            // wakes once early).
            if self.next_wake.load(Ordering::SeqCst) == PASSING {
                return Wake::none();
            }
        } else if tick >= planned {
            return Wake::none();
        }
        let earlier = self.next_wake.fetch_min(tick, Ordering::SeqCst) > tick;
        Wake(earlier.then_some(&*self.signal))
    }

    /// Starts a pass of the driver's own: `next_wake` reads [`PASSING`]
    /// until [`end_pass`](Self::end_pass).
    pub(super) fn begin_pass(&self) {
        self.next_wake.store(PASSING, Ordering::SeqCst);
    }

    /// Ends a pass of the driver's, made at tick `now`, that found
    /// `earliest` the earliest pending deadline: plans the earlier of that
    /// and what was scheduled meanwhile, and returns that tick (`u64::MAX`:
    /// none), which the driver sleeps until. If that is already due (a
    /// deadline at or before `now` scheduled meanwhile), signals, so the
    /// driver passes again at once whatever its clock.
    pub(super) fn end_pass(&self, now: u64, earliest: Option<u64>) -> u64 {
        // A deadline at `PASSING` or later is never woken for.
        let found = earliest.filter(|&tick| tick < PASSING).unwrap_or(u64::MAX);
        // A visiting pass (`run_due`) or a scheduler may have replaced
        // `PASSING` meanwhile: keep the earlier.
        let plan = |was: u64| {
            if was == PASSING {
                found
            } else {
                was.min(found)
            }
        };
        // The closure always returns `Some`: `Err` never comes.
        let was = self
            .next_wake
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |was| Some(plan(was)))
            .unwrap_or_else(|was| was);
        let meanwhile = self.deferred.swap(u64::MAX, Ordering::SeqCst);
        let planned = plan(was).min(meanwhile);
        if meanwhile < found {
            self.next_wake.fetch_min(meanwhile, Ordering::SeqCst);
        }
        if planned <= now {
            self.signal.notify();
        }
        planned
    }

    /// Gives up the plan `planned` of a pass whose caller will not sleep
    /// until it (`run_due`, or `advance_clock` returning): the pass may have
    /// taken schedules left for it, or replaced the plan a sleeping driver
    /// holds, so that driver is signalled to pass again and plan for
    /// itself. Nothing to give up if nothing is pending.
    pub(super) fn relinquish(&self, planned: u64) {
        if planned != u64::MAX {
            self.signal.notify();
        }
    }
}

/// What `next_wake` reads while the driver passes. Above every tick a plan
/// holds: schedules and passes plan for ticks below it.
pub(super) const PASSING: u64 = u64::MAX - 1;

/// A wake-up owed to the driver by a schedule that made the earliest
/// deadline, given when dropped. An async driver's wake-up runs its
/// runtime's waker, so a caller that scheduled under one of the crate's
/// locks (a keyed timer's shard, an operation's lock) keeps this until the
/// lock is released; any other caller lets it drop at once.
#[must_use = "dropping it wakes the driver: drop it after the locks"]
pub(crate) struct Wake<'a>(Option<&'a Signal>);

impl Wake<'_> {
    /// No wake-up owed.
    pub(super) fn none() -> Self {
        Wake(None)
    }
}

impl Drop for Wake<'_> {
    fn drop(&mut self) {
        if let Some(signal) = self.0.take() {
            signal.notify();
        }
    }
}

#[cfg(all(test, not(purgatorio_loom)))]
mod tests {
    use std::sync::atomic::Ordering;
    use std::time::Duration;

    use super::PASSING;
    use crate::{ManualClock, Timer, TimerBuilder};

    fn timer() -> Timer {
        TimerBuilder::new()
            .clock(ManualClock::new())
            .driver_thread(false)
            .build()
            .expect("valid timer")
    }

    #[test]
    fn schedules_during_the_drivers_pass_wake_nobody_and_the_pass_plans_for_them() {
        let timer = timer();
        let timing = &timer.driver().timing;
        let seen = timing.signal.epoch();
        timing.begin_pass();
        assert_eq!(timing.next_wake.load(Ordering::SeqCst), PASSING);
        for ms in [40, 7, 90, 12] {
            drop(
                timer
                    .schedule(Duration::from_millis(ms), || ())
                    .expect("scheduled"),
            );
        }
        assert_eq!(
            timing.signal.epoch(),
            seen,
            "a schedule during a pass signalled"
        );
        // The pass saw none of them (it visited the shards before): its end
        // takes the earliest of them, with no signal (nothing is due).
        assert_eq!(timing.end_pass(0, None), 7);
        assert_eq!(timing.next_wake.load(Ordering::SeqCst), 7);
        assert_eq!(timing.signal.epoch(), seen);
        // After the pass, a later deadline signals nothing; an earlier one does.
        drop(
            timer
                .schedule(Duration::from_millis(20), || ())
                .expect("scheduled"),
        );
        assert_eq!(timing.signal.epoch(), seen, "a later deadline signalled");
        drop(
            timer
                .schedule(Duration::from_millis(3), || ())
                .expect("scheduled"),
        );
        assert_eq!(
            timing.signal.epoch(),
            seen + 1,
            "an earlier deadline did not signal"
        );
    }

    #[test]
    fn a_deadline_due_already_made_during_the_drivers_pass_makes_it_pass_again() {
        let timer = timer();
        let timing = &timer.driver().timing;
        let handle = timer
            .schedule(Duration::from_millis(50), || ())
            .expect("scheduled");
        let seen = timing.signal.epoch();
        timing.begin_pass();
        // Due now, on a clock that does not move by itself: the driver, which
        // would wait for a signal, must pass again.
        assert!(handle.reschedule(Duration::ZERO));
        assert_eq!(timing.end_pass(0, Some(50)), 0);
        assert_eq!(timing.signal.epoch(), seen + 1, "the due deadline waits");
    }
}
