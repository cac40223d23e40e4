//! The driver's scenario tests: passes, discards, shutdown, the memory a
//! wheel gives back.

use std::sync::atomic::Ordering::SeqCst;

use super::super::timing::PASSING;
use super::*;
use crate::{ManualClock, Timer, TimerBuilder};

/// A task whose drop panics.
struct PanicsOnDrop;

impl Task for PanicsOnDrop {
    fn run(self) {}
}

impl Drop for PanicsOnDrop {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            panic!("a task's drop panicked");
        }
    }
}

/// A timer of one shard on `clock`, driven by hand.
fn one_shard_timer(clock: &ManualClock) -> Timer {
    TimerBuilder::new()
        .clock(clock.clone())
        .driver_thread(false)
        .shards(1)
        .build()
        .expect("valid timer")
}

/// 20,000 tasks scheduled on `driver` over its first 100 ticks: a wheel
/// with memory to give back once they are gone.
fn burst(driver: &Driver<BoxTask>) -> Vec<Entry> {
    (1..=20_000)
        .map(|tick| {
            match driver.insert(
                Due {
                    tick: tick % 100 + 1,
                    now: false,
                },
                BoxTask::new(|| ()),
            ) {
                Ok((entry, wake)) => {
                    drop(wake);
                    entry
                }
                Err(_) => panic!("the timer is open"),
            }
        })
        .collect()
}

/// The one shard of `driver` is empty, released its arena, and keeps
/// none of the memory it let go of.
fn assert_emptied_and_nothing_kept(driver: &Driver<BoxTask>) {
    let mut state = driver.shards[0].state.lock();
    assert_eq!(state.wheel.len(), 0);
    assert_eq!(state.wheel.slots(), 0, "the emptied arena was released");
    assert!(
        state.wheel.take_freed().is_none(),
        "what the wheel let go of was kept in the shard"
    );
}

/// The cancel that empties a large wheel leaves nothing it gave back in
/// the wheel (the wheel's own test shows it is handed out, not freed
/// inside the removal).
#[test]
fn a_cancel_that_empties_a_wheel_frees_what_it_gave_back() {
    let timer = one_shard_timer(&ManualClock::new());
    let driver = timer.driver();
    let entries = burst(driver);
    for entry in entries {
        assert!(driver.cancel(entry).is_some());
    }
    assert_emptied_and_nothing_kept(driver);
}

/// A discard (an operation giving up its timer, perhaps under the
/// operation's lock) that empties a large wheel hands the memory back
/// to its caller, to free after that lock; the others hand nothing.
#[test]
fn a_discard_that_empties_a_wheel_hands_its_memory_back() {
    let timer = one_shard_timer(&ManualClock::new());
    let driver = timer.driver();
    let entries = burst(driver);
    let mut held = Vec::new();
    for entry in entries {
        held.push(driver.discard(entry).holds_memory());
    }
    assert_eq!(held.pop(), Some(true), "the last discard emptied the wheel");
    assert!(
        held.iter().all(|&h| !h),
        "only the last one hands memory back"
    );
    assert_emptied_and_nothing_kept(driver);
}

/// Shutdown frees what draining a large wheel gives back after the
/// shard's lock, and keeps none of it in the shard.
#[test]
fn shutdown_frees_what_draining_a_wheel_gave_back() {
    let timer = one_shard_timer(&ManualClock::new());
    let driver = timer.driver();
    let entries = burst(driver);
    assert_eq!(timer.shutdown().len(), entries.len());
    let mut state = driver.shards[0].state.lock();
    assert_eq!(state.wheel.len(), 0);
    assert!(
        state.wheel.take_freed().is_none(),
        "what the drained wheel let go of was kept in the shard"
    );
}

/// The memory a burst's wheel gives back once it fired is freed by the
/// pass, after the lock, not kept in the shard.
#[test]
fn a_pass_frees_what_an_emptied_wheel_gave_back() {
    let clock = ManualClock::new();
    let timer = one_shard_timer(&clock);
    let driver = timer.driver();
    burst(driver);
    clock.advance(std::time::Duration::from_secs(1));
    assert_eq!(timer.run_due(), 20_000);
    assert_emptied_and_nothing_kept(driver);
}

#[test]
fn a_pass_that_unwinds_still_ends_and_has_the_driver_pass_again() {
    let timer: Timer<PanicsOnDrop> = TimerBuilder::new()
        .clock(ManualClock::new())
        .driver_thread(false)
        .build()
        .expect("valid timer");
    let driver = timer.driver();
    let Ok((entry, wake)) = driver.insert(
        Due {
            tick: 50,
            now: false,
        },
        PanicsOnDrop,
    ) else {
        panic!("the timer is open");
    };
    drop(wake);
    // Given up from another thread: the pass removes it and drops it.
    assert!(driver.shards[entry.shard as usize].defer_discard(entry.key));
    let seen = driver.timing.signal.epoch();
    let pass = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| driver.pass_planning()));
    assert!(pass.is_err(), "the task's drop did not panic");
    assert_ne!(
        driver.timing.next_wake.load(SeqCst),
        PASSING,
        "left passing"
    );
    assert_ne!(
        driver.timing.signal.epoch(),
        seen,
        "the driver was not told"
    );
}
