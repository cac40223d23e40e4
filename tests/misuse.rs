//! Misuse that earlier suites do not cover: a clock that goes backwards
//! under the thread-safe timer, a stale handle whose slot was reused,
//! dropping the timer while a task runs, and shutting a purgatory down twice.
//! The full list of misuse cases and the tests holding each is in
//! `docs/guarantees.md`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use purgatorio::{Clock, ClockWaker, Completion, DelayedOperation, ManualClock, Purgatory, Timer};

/// A clock the test sets to any time, including earlier ones.
#[derive(Debug, Clone)]
struct SettableClock {
    origin: Instant,
    at: Arc<Mutex<Duration>>,
}

impl Clock for SettableClock {
    fn now(&self) -> Instant {
        self.origin + *self.at.lock()
    }
    fn is_real_time(&self) -> bool {
        false
    }
    fn register_waker(&self, _waker: ClockWaker) {}
}

impl SettableClock {
    /// Sets the clock to `at` past its origin, earlier or later.
    fn set(&self, at: Duration) {
        *self.at.lock() = at;
    }
}

/// A timer on a [`SettableClock`] at its origin, with no driver thread.
fn settable_timer() -> (SettableClock, Timer) {
    let clock = SettableClock {
        origin: Instant::now(),
        at: Arc::new(Mutex::new(Duration::ZERO)),
    };
    let timer = Timer::builder()
        .clock(clock.clone())
        .driver_thread(false)
        .build()
        .unwrap();
    (clock, timer)
}

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

/// Waits for `f`, panicking after a minute (a hang guard, not a timing check).
fn wait_until(what: &str, f: impl Fn() -> bool) {
    let give_up = Instant::now() + Duration::from_secs(60);
    while !f() {
        assert!(Instant::now() < give_up, "hung waiting for {what}");
        thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn a_clock_going_backwards_fires_nothing_early_and_panics_nowhere() {
    let (clock, timer) = settable_timer();
    let set = |v| clock.set(ms(v));
    let ran = Arc::new(AtomicUsize::new(0));
    let task = || {
        let ran = Arc::clone(&ran);
        purgatorio::BoxTask::new(move || {
            ran.fetch_add(1, Ordering::SeqCst);
        })
    };
    timer.schedule(ms(10), task()).unwrap(); // due at 10 ms
    set(20);
    assert_eq!(timer.run_due(), 1);
    wait_until("the first task", || ran.load(Ordering::SeqCst) == 1);
    timer.schedule(ms(10), task()).unwrap(); // due at 30 ms
    set(5); // backwards
    assert_eq!(timer.run_due(), 0);
    timer.schedule(ms(10), task()).unwrap(); // due at 15 ms by the clock's word
    set(12);
    assert_eq!(timer.run_due(), 0, "nothing is due at 12 ms");
    set(29);
    assert_eq!(timer.run_due(), 1, "the 15 ms task, not the 30 ms one");
    set(30);
    assert_eq!(timer.run_due(), 1);
    wait_until("all three tasks", || ran.load(Ordering::SeqCst) == 3);
    assert_eq!(timer.metrics().panicked, 0);
}

/// A sleep (and a timeout) whose entry fired, polled after the clock went
/// back before its deadline: the timer saw the deadline pass, so it is
/// over, and elapsed, not shut down. It used to stay pending with no entry
/// left to wake it. Before its entry fires, a clock gone back still keeps
/// it pending: nothing ends early.
#[test]
fn a_sleep_whose_entry_fired_ends_though_the_clock_went_back() {
    use std::future::Future;
    use std::task::{Context, Poll, Waker};

    let (clock, timer) = settable_timer();
    let set = |v| clock.set(ms(v));
    let mut cx = Context::from_waker(Waker::noop());
    let mut sleep = std::pin::pin!(timer.sleep(ms(10)));
    let mut timeout = std::pin::pin!(timer.timeout(ms(10), std::future::pending::<()>()));
    let mut moved = std::pin::pin!(timer.sleep(ms(100)));
    assert!(sleep.as_mut().poll(&mut cx).is_pending());
    assert!(timeout.as_mut().poll(&mut cx).is_pending());
    assert!(moved.as_mut().poll(&mut cx).is_pending());
    moved.as_mut().reset(clock.origin + ms(10));
    set(9);
    assert_eq!(timer.run_due(), 0);
    set(20);
    assert_eq!(timer.run_due(), 3, "all three entries fire at 20 ms");
    set(5); // backwards, before every deadline
    assert_eq!(sleep.as_mut().poll(&mut cx), Poll::Ready(()));
    assert!(sleep.is_elapsed());
    assert_eq!(moved.as_mut().poll(&mut cx), Poll::Ready(()));
    match timeout.as_mut().poll(&mut cx) {
        Poll::Ready(Err(elapsed)) => assert!(!elapsed.is_shut_down()),
        other => panic!("the timeout did not elapse: {other:?}"),
    }

    // The clock went back before the entry went in: the shard was polled
    // past the entry's tick already, so only the shard itself can tell
    // that the entry fired.
    set(20);
    assert_eq!(timer.run_due(), 0);
    set(5);
    let mut behind = std::pin::pin!(timer.sleep(ms(10))); // due at 15 ms
    assert!(behind.as_mut().poll(&mut cx).is_pending());
    set(16);
    assert_eq!(timer.run_due(), 1);
    set(5);
    assert_eq!(behind.as_mut().poll(&mut cx), Poll::Ready(()));
    assert!(behind.is_elapsed());

    // Not fired yet: the clock's word holds, and nothing ends early.
    let mut later = std::pin::pin!(timer.sleep(ms(10))); // due at 15 ms
    assert!(later.as_mut().poll(&mut cx).is_pending());
    set(4);
    assert_eq!(timer.run_due(), 0);
    assert!(later.as_mut().poll(&mut cx).is_pending());
    assert!(!later.is_elapsed());
    assert_eq!(timer.len(), 1, "only the later sleep is pending");
}

#[test]
fn a_stale_handle_never_touches_the_timer_that_reused_its_slot() {
    let clock = ManualClock::new();
    let timer: Timer = Timer::builder()
        .clock(clock.clone())
        .driver_thread(false)
        .shards(1)
        .build()
        .unwrap();
    let ran = Arc::new(AtomicUsize::new(0));
    let counter = |n: usize| {
        let ran = Arc::clone(&ran);
        purgatorio::BoxTask::new(move || {
            ran.fetch_add(n, Ordering::SeqCst);
        })
    };
    let old = timer.schedule(ms(1), counter(1)).unwrap();
    clock.advance(ms(1));
    assert_eq!(timer.run_due(), 1);
    wait_until("the first task", || ran.load(Ordering::SeqCst) == 1);
    // One shard, one free slot: the new timer takes the old one's slot.
    let new = timer.schedule(ms(10), counter(100)).unwrap();
    assert!(!old.is_pending());
    assert!(
        old.cancel().is_none(),
        "a fired timer's handle cancels nothing"
    );
    assert!(!old.reschedule(ms(1)), "nor moves anything");
    assert!(new.is_pending(), "the slot's new timer is untouched");
    clock.advance(ms(10));
    assert_eq!(timer.run_due(), 1);
    wait_until("the second task", || ran.load(Ordering::SeqCst) == 101);
    assert!(new.cancel().is_none());
}

#[test]
fn dropping_the_timer_while_a_task_runs_waits_for_it() {
    let clock = ManualClock::new();
    let timer: Timer = Timer::builder()
        .clock(clock.clone())
        .driver_thread(false)
        .build()
        .unwrap();
    let (started_tx, started) = mpsc::channel();
    let (go, go_rx) = mpsc::channel::<()>();
    let finished = Arc::new(AtomicUsize::new(0));
    let f = Arc::clone(&finished);
    timer
        .schedule(
            ms(1),
            Box::new(move || {
                started_tx.send(()).unwrap();
                go_rx.recv().unwrap();
                f.store(1, Ordering::SeqCst);
            }),
        )
        .unwrap();
    clock.advance(ms(1));
    assert_eq!(timer.run_due(), 1);
    started.recv().unwrap();
    // Release the task from another thread while this one is in drop.
    let releaser = thread::spawn(move || {
        thread::sleep(Duration::from_millis(20));
        go.send(()).unwrap();
    });
    drop(timer);
    assert_eq!(
        finished.load(Ordering::SeqCst),
        1,
        "drop returned only after the running task finished"
    );
    releaser.join().unwrap();
}

struct Never;

impl DelayedOperation for Never {
    fn delay(&self) -> Duration {
        Duration::from_secs(60)
    }
    fn try_complete(&mut self) -> bool {
        false
    }
    fn on_complete(&mut self, _: Completion) {}
}

#[test]
fn shutting_a_purgatory_down_twice_is_harmless() {
    let purgatory: Purgatory<u32, Never> = Purgatory::builder().build().unwrap();
    purgatory.try_complete_else_watch(Never, [1]).unwrap();
    assert_eq!(purgatory.shutdown(), 1);
    assert_eq!(purgatory.shutdown(), 0);
    assert!(purgatory.try_complete_else_watch(Never, [1]).is_err());
    assert!(purgatory.check_and_complete(&1).is_err());
    assert_eq!(purgatory.watched(), 0);
}
