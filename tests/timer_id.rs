//! The thread-safe `Timer`'s tasks named by `TimerId`, driven by a manual
//! clock: the same promises as a `TimerHandle`'s, through the timer (the
//! race of cancels from many threads is `timer::cancel_race`, for both).
//!
//! Tasks report through channels; a test waits on a channel (with a generous
//! upper bound so a bug hangs nothing) rather than sleeping, and no assertion
//! depends on how long anything took.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use purgatorio::{BoxTask, ManualClock, Task, Timer, TimerId};

/// Upper bound for waiting on something that must happen.
const PATIENCE: Duration = Duration::from_secs(20);

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

/// A timer on `clock`, with `shards` shards, driven by `run_due` only.
fn manual_timer(clock: &ManualClock, shards: usize) -> Timer {
    Timer::builder()
        .clock(clock.clone())
        .driver_thread(false)
        .shards(shards)
        .workers(2)
        .build()
        .unwrap()
}

/// A task that sends `value` on `tx` when it runs.
fn send<T: Send + 'static>(tx: &mpsc::Sender<T>, value: T) -> BoxTask {
    let tx = tx.clone();
    BoxTask::new(move || tx.send(value).unwrap())
}

#[test]
fn an_id_is_a_small_plain_value() {
    fn plain<T: Copy + Send + Sync + Eq + std::hash::Hash + std::fmt::Debug + 'static>() {}
    plain::<TimerId>();
    assert_eq!(std::mem::size_of::<TimerId>(), 16);
}

#[test]
fn fires_by_id_only_once_its_deadline_has_passed() {
    let clock = ManualClock::new();
    let timer = manual_timer(&clock, 4);
    let (tx, rx) = mpsc::channel();
    let id = timer.schedule_id(ms(10), send(&tx, "ten")).unwrap();
    let at = timer
        .schedule_id_at(timer.now() + ms(20), send(&tx, "twenty"))
        .unwrap();
    clock.advance(Duration::from_micros(9_999));
    assert_eq!(timer.run_due(), 0, "early");
    assert!(timer.is_pending(id));
    clock.advance(Duration::from_micros(1));
    assert_eq!(timer.run_due(), 1);
    assert_eq!(rx.recv_timeout(PATIENCE).unwrap(), "ten");
    assert!(!timer.is_pending(id), "a fired task is not pending");
    assert!(timer.cancel(id).is_none(), "nor cancelled");
    assert!(!timer.reschedule(id, ms(1)), "nor moved");
    clock.advance(Duration::from_micros(9_999));
    assert_eq!(timer.run_due(), 0, "early");
    clock.advance(Duration::from_micros(1));
    assert_eq!(timer.run_due(), 1);
    assert_eq!(rx.recv_timeout(PATIENCE).unwrap(), "twenty");
    assert!(!timer.is_pending(at));
}

#[test]
fn cancel_by_id_hands_the_task_back_once() {
    let clock = ManualClock::new();
    let timer = manual_timer(&clock, 1);
    let (tx, rx) = mpsc::channel();
    let id = timer.schedule_id(ms(10), send(&tx, "ran")).unwrap();
    let task = timer.cancel(id).expect("pending");
    assert!(timer.cancel(id).is_none(), "cancelled twice");
    assert!(!timer.is_pending(id));
    clock.advance(ms(10));
    assert_eq!(timer.run_due(), 0, "a cancelled task fired");
    task.run(); // the caller's to run or drop
    assert_eq!(rx.recv_timeout(PATIENCE).unwrap(), "ran");
    let m = timer.metrics();
    assert_eq!((m.scheduled, m.cancelled, m.expired), (1, 1, 0));
}

#[test]
fn reschedule_by_id_moves_the_deadline_both_ways() {
    let clock = ManualClock::new();
    let timer = manual_timer(&clock, 2);
    let (tx, rx) = mpsc::channel();
    let late = timer.schedule_id(ms(5), send(&tx, "late")).unwrap();
    let early = timer.schedule_id(ms(50), send(&tx, "early")).unwrap();
    assert!(timer.reschedule(late, ms(100)));
    assert!(timer.reschedule_at(early, timer.now() + ms(1)));
    clock.advance(ms(1));
    assert_eq!(timer.run_due(), 1);
    assert_eq!(rx.recv_timeout(PATIENCE).unwrap(), "early");
    assert!(!timer.reschedule(early, ms(1)), "fired task rescheduled");
    clock.advance(ms(98));
    assert_eq!(timer.run_due(), 0, "moved later, yet fired early");
    clock.advance(ms(1));
    assert_eq!(timer.run_due(), 1);
    assert_eq!(rx.recv_timeout(PATIENCE).unwrap(), "late");
}

#[test]
fn a_stale_id_never_touches_the_task_that_reused_its_slot() {
    let clock = ManualClock::new();
    // One shard, one slot freed: the new task takes the old one's slot.
    let timer = manual_timer(&clock, 1);
    let (tx, rx) = mpsc::channel();
    let old = timer.schedule_id(ms(1), send(&tx, "old")).unwrap();
    clock.advance(ms(1));
    assert_eq!(timer.run_due(), 1);
    assert_eq!(rx.recv_timeout(PATIENCE).unwrap(), "old");
    let new = timer.schedule_id(ms(10), send(&tx, "new")).unwrap();
    assert_ne!(old, new);
    assert!(!timer.is_pending(old));
    assert!(
        timer.cancel(old).is_none(),
        "a fired task's id cancels nothing"
    );
    assert!(!timer.reschedule(old, ms(1)), "nor moves anything");
    assert!(timer.is_pending(new), "the slot's new task is untouched");
    clock.advance(ms(10));
    assert_eq!(timer.run_due(), 1);
    assert_eq!(rx.recv_timeout(PATIENCE).unwrap(), "new");
}

#[test]
fn an_id_from_another_timer_names_nothing() {
    let clock = ManualClock::new();
    // Two timers of the same shape: the same shard, slot and generation.
    let (a, b) = (manual_timer(&clock, 1), manual_timer(&clock, 1));
    let (tx, rx) = mpsc::channel();
    let in_a = a.schedule_id(ms(10), send(&tx, "a")).unwrap();
    let in_b = b.schedule_id(ms(10), send(&tx, "b")).unwrap();
    assert_ne!(in_a, in_b);
    assert!(!b.is_pending(in_a));
    assert!(b.cancel(in_a).is_none(), "a's id cancelled b's task");
    assert!(!b.reschedule(in_a, ms(1)), "a's id moved b's task");
    assert!(!b.reschedule_at(in_a, b.now() + ms(1)));
    assert!(a.is_pending(in_a) && b.is_pending(in_b), "both untouched");
    clock.advance(ms(10));
    assert_eq!(a.run_due() + b.run_due(), 2);
    let mut fired = [
        rx.recv_timeout(PATIENCE).unwrap(),
        rx.recv_timeout(PATIENCE).unwrap(),
    ];
    fired.sort_unstable();
    assert_eq!(fired, ["a", "b"]);
}

#[test]
fn a_handle_and_its_id_name_the_same_task() {
    let clock = ManualClock::new();
    let timer = manual_timer(&clock, 4);
    let handle = timer.schedule(ms(10), BoxTask::new(|| ())).unwrap();
    let id = handle.id();
    assert_eq!(handle.clone().id(), id);
    assert!(timer.is_pending(id));
    assert!(timer.reschedule(id, ms(20)));
    assert!(handle.is_pending());
    assert!(timer.cancel(id).is_some());
    assert!(!handle.is_pending(), "cancelled by id, the handle is stale");
    assert!(handle.cancel().is_none());
}

#[test]
fn a_shut_down_timer_refuses_ids_and_hands_the_task_back() {
    let clock = ManualClock::new();
    let timer = manual_timer(&clock, 2);
    let ran = Arc::new(AtomicUsize::new(0));
    let counted = || {
        let ran = Arc::clone(&ran);
        BoxTask::new(move || {
            ran.fetch_add(1, Ordering::SeqCst);
        })
    };
    let id = timer.schedule_id(ms(100), counted()).unwrap();
    let pending = timer.shutdown();
    assert_eq!(pending.len(), 1);
    assert!(!timer.is_pending(id));
    assert!(
        timer.cancel(id).is_none(),
        "shutdown handed it back already"
    );
    assert!(!timer.reschedule(id, ms(1)));
    let err = timer.schedule_id(ms(1), counted()).unwrap_err();
    assert_eq!(err.to_string(), "timer is shut down");
    err.into_inner().run();
    assert!(timer.schedule_id_at(timer.now(), counted()).is_err());
    assert_eq!(ran.load(Ordering::SeqCst), 1, "only the refused task ran");
}

#[test]
fn tasks_may_cancel_and_schedule_by_id_from_inside_a_task() {
    let clock = ManualClock::new();
    let timer = manual_timer(&clock, 2);
    let (tx, rx) = mpsc::channel();
    let other = timer.schedule_id(ms(50), send(&tx, "other")).unwrap();
    let inner = timer.clone();
    let report = tx.clone();
    timer
        .schedule_id(
            ms(1),
            BoxTask::new(move || {
                let cancelled = inner.cancel(other).is_some();
                let next = inner.schedule_id(ms(5), BoxTask::new(|| ())).is_ok();
                report
                    .send(if cancelled && next { "ok" } else { "refused" })
                    .unwrap();
            }),
        )
        .unwrap();
    clock.advance(ms(1));
    assert_eq!(timer.run_due(), 1);
    assert_eq!(rx.recv_timeout(PATIENCE).unwrap(), "ok");
    assert!(!timer.is_pending(other));
    clock.advance(ms(100));
    timer.run_due();
    drop(timer);
    drop(tx);
    assert!(
        rx.iter().all(|said| said != "other"),
        "a cancelled task ran"
    );
}
