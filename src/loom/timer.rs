//! loom models of the timer's shared state (`--cfg purgatorio_loom`).
//!
//! Each model builds a real [`Timer`] on a [`ManualClock`], without a driver
//! thread and without workers: one model thread plays the driver and then
//! the worker (`run_due_here`), others cancel, reschedule, schedule or shut
//! down, and loom runs every interleaving of their locks and atomics.

use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;
use std::time::Duration;

use loom::thread;

use super::{builder, model};
use crate::clock::ManualClock;
use crate::sync::AtomicUsize;
use crate::timer::{BoxTask, Task, Timer};

/// A model timer and its clock.
fn timer() -> (Timer, ManualClock) {
    let clock = ManualClock::new();
    let timer = builder(&clock).build().expect("valid timer");
    (timer, clock)
}

/// A task that counts its runs in `ran`.
fn counting(ran: &Arc<AtomicUsize>) -> BoxTask {
    let ran = Arc::clone(ran);
    BoxTask::new(move || {
        ran.fetch_add(1, SeqCst);
    })
}

/// Cancel racing the driver's flush of a due bucket: the task runs or the
/// cancel answers `true`, never both, never neither; the counters agree.
#[test]
fn cancel_races_flush() {
    model("cancel_races_flush", || {
        let (timer, clock) = timer();
        let ran = Arc::new(AtomicUsize::new(0));
        let handle = timer
            .schedule(Duration::from_millis(1), counting(&ran))
            .unwrap();
        clock.advance(Duration::from_millis(1));

        let driver = timer.clone();
        let driving = thread::spawn(move || driver.run_due_here());
        let cancelled = handle.cancel().is_some();
        driving.join().unwrap();

        let ran = ran.load(SeqCst);
        assert_eq!(
            ran + usize::from(cancelled),
            1,
            "ran {ran}, cancelled {cancelled}"
        );
        let metrics = timer.metrics();
        assert_eq!(metrics.scheduled, 1);
        assert_eq!(metrics.cancelled, u64::from(cancelled));
        assert_eq!(metrics.expired, ran as u64);
        assert_eq!(metrics.pending, 0);
        assert!(!handle.is_pending());
    });
}

/// Cancel and reschedule racing a cascade from the second level and the
/// flush that follows: the task runs at most once, and exactly once unless a
/// cancel answered `true`; a rescheduled task still fires, never early.
#[test]
fn cancel_and_reschedule_race_cascade() {
    model("cancel_and_reschedule_race_cascade", || {
        let (timer, clock) = timer();
        let ran = Arc::new(AtomicUsize::new(0));
        // 6 ticks with 4 slots: level 1, cascaded down when the clock passes 4.
        let handle = timer
            .schedule(Duration::from_millis(6), counting(&ran))
            .unwrap();
        clock.advance(Duration::from_millis(5));

        let driver = timer.clone();
        let driving = thread::spawn(move || driver.run_due_here());
        let mover = handle.clone();
        // From tick 5 to tick 7: past the original deadline.
        let moving = thread::spawn(move || mover.reschedule(Duration::from_millis(2)));
        let cancelled = handle.cancel().is_some();
        driving.join().unwrap();
        let rescheduled = moving.join().unwrap();

        // Nothing was due at tick 5, so nothing may have run yet.
        assert_eq!(ran.load(SeqCst), 0, "fired early");
        clock.advance(Duration::from_millis(1));
        timer.run_due_here();
        if rescheduled {
            // Moved to tick 7: still not due at tick 6.
            assert_eq!(ran.load(SeqCst), 0, "fired before its new deadline");
        }
        clock.advance(Duration::from_millis(1));
        timer.run_due_here();

        let ran = ran.load(SeqCst);
        assert_eq!(
            ran + usize::from(cancelled),
            1,
            "ran {ran}, cancelled {cancelled}"
        );
        assert_eq!(timer.metrics().cancelled, u64::from(cancelled));
        assert_eq!(timer.len(), 0);
    });
}

/// A timer with one task due at `ms`, which the driver's pass has planned
/// for (it would sleep until then), and the count of runs its tasks share.
fn planned_at(ms: u64) -> (Timer, ManualClock, Arc<AtomicUsize>) {
    let (timer, clock) = timer();
    let ran = Arc::new(AtomicUsize::new(0));
    timer
        .schedule(Duration::from_millis(ms), counting(&ran))
        .unwrap();
    let (_, planned) = timer.driver().pass_planning();
    assert_eq!(planned, ms);
    (timer, clock, ran)
}

/// Asserts that a driver which read the signal's epoch `seen`, then made a
/// pass planning tick `planned`, wakes in time for a deadline at tick
/// `due`: it plans no later, or it was signalled since.
fn assert_wakes_for(driver: &crate::timer::Driver<BoxTask>, seen: u64, planned: u64, due: u64) {
    let signalled = driver.wake_state().0 != seen;
    assert!(
        planned <= due || signalled,
        "the driver sleeps until {planned}, deadline at {due}, no signal"
    );
}

/// The driver's wake-up protocol: a schedule that creates an earlier
/// deadline while the driver makes its pass is seen by that pass, or the
/// driver's planned wake is no later than it, or the driver is signalled.
/// Never a sleep past the new deadline.
#[test]
fn schedule_never_loses_a_wakeup() {
    model("schedule_never_loses_a_wakeup", || {
        let (timer, _clock) = timer();
        let ran = Arc::new(AtomicUsize::new(0));
        // Something later is already pending: the driver plans to wake at 9.
        timer
            .schedule(Duration::from_millis(9), counting(&ran))
            .unwrap();

        let scheduler = timer.clone();
        let task = counting(&ran);
        let scheduling =
            thread::spawn(move || scheduler.schedule(Duration::from_millis(3), task).is_ok());

        let driver = timer.driver();
        let (seen, _) = driver.wake_state();
        let (moved, planned) = driver.pass_planning();
        assert!(scheduling.join().unwrap());

        assert_eq!(moved, 0);
        assert_wakes_for(driver, seen, planned, 3);
    });
}

/// `run_due` on another thread while the driver sleeps on its plan: a
/// schedule of an earlier deadline during that pass, or around it, still
/// wakes the sleeping driver (the pass takes it or it signals, and the pass
/// gives its plan back with a signal).
#[test]
fn run_due_while_the_driver_sleeps_still_wakes_it() {
    model("run_due_while_the_driver_sleeps_still_wakes_it", || {
        let (timer, _clock, ran) = planned_at(9);
        let driver = timer.driver();
        let (seen, _) = driver.wake_state();

        let scheduler = timer.clone();
        let task = counting(&ran);
        let scheduling =
            thread::spawn(move || scheduler.schedule(Duration::from_millis(3), task).is_ok());
        assert_eq!(timer.run_due(), 0);
        assert!(scheduling.join().unwrap());
        assert_ne!(
            driver.wake_state().0,
            seen,
            "deadline 3 made while the driver sleeps until 9, and no signal"
        );
    });
}

/// The driver's pass overlapping `run_due` on another thread and a
/// schedule of an earlier deadline: the plan the driver sleeps on is no
/// later than the deadline, or it is signalled.
#[test]
fn the_drivers_pass_beside_run_due_and_a_schedule_loses_no_wakeup() {
    model(
        "the_drivers_pass_beside_run_due_and_a_schedule_loses_no_wakeup",
        || {
            let (timer, _clock, ran) = planned_at(9);
            let driver = timer.driver();

            let other = timer.clone();
            let running = thread::spawn(move || other.run_due());
            let scheduler = timer.clone();
            let task = counting(&ran);
            let scheduling =
                thread::spawn(move || scheduler.schedule(Duration::from_millis(3), task).is_ok());
            let (seen, _) = driver.wake_state();
            let (moved, planned) = driver.pass_planning();
            assert!(scheduling.join().unwrap());
            assert_eq!(running.join().unwrap(), 0);

            assert_eq!(moved, 0);
            assert_wakes_for(driver, seen, planned, 3);
        },
    );
}

/// `run_due` on another thread looks at the wheel before the driver's pass
/// fires its last timer, and ends after it: it must not leave its stale
/// plan in `next_wake` for later schedules to read (they would take it for
/// the driver's and not signal a driver that sleeps with nothing planned).
#[test]
fn a_stale_plan_from_run_due_never_silences_later_schedules() {
    model(
        "a_stale_plan_from_run_due_never_silences_later_schedules",
        || {
            let (timer, clock, ran) = planned_at(1);
            let driver = timer.driver();

            let other = timer.clone();
            let running = thread::spawn(move || other.run_due());
            clock.advance(Duration::from_millis(1));
            let (seen, _) = driver.wake_state();
            let (moved_here, planned) = driver.pass_planning();
            let moved_there = running.join().unwrap();
            assert_eq!(moved_here + moved_there, 1, "the timer fired once");

            // A later deadline, scheduled once both passes are over.
            timer
                .schedule(Duration::from_millis(3), counting(&ran))
                .unwrap();
            assert_wakes_for(driver, seen, planned, 4);
        },
    );
}

/// Shutdown racing a schedule: the task is refused and handed back, or
/// accepted and then returned by shutdown. Never lost, never run.
#[test]
fn shutdown_races_schedule() {
    model("shutdown_races_schedule", || {
        let (timer, _clock) = timer();
        let ran = Arc::new(AtomicUsize::new(0));
        let scheduler = timer.clone();
        let task = counting(&ran);
        let scheduling = thread::spawn(move || {
            scheduler
                .schedule(Duration::from_millis(2), task)
                .map(|_| ())
                .map_err(|refused| refused.into_inner())
        });
        let mut pending = timer.shutdown();
        let scheduled = scheduling.join().unwrap();
        // A second shutdown returns nothing more.
        assert!(timer.shutdown().is_empty());

        match scheduled {
            Ok(()) => assert_eq!(pending.len(), 1, "accepted task lost by shutdown"),
            Err(task) => {
                assert!(pending.is_empty());
                pending.push(task);
            }
        }
        assert_eq!(timer.run_due_here(), 0);
        assert_eq!(ran.load(SeqCst), 0, "ran after shutdown");
        // The task came back whole: it still runs when the caller runs it.
        for task in pending {
            task.run();
        }
        assert_eq!(ran.load(SeqCst), 1);
    });
}
