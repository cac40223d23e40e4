//! The thread-safe `Timer`, driven by a manual clock.
//!
//! Tasks report through channels; a test waits on a channel (with a generous
//! upper bound so a bug hangs nothing) rather than sleeping, and no assertion
//! depends on how long anything took.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use purgatorio::{BoxTask, BuildError, ManualClock, Metrics, Task, Timer, TimerBuilder};

/// Upper bound for waiting on something that must happen.
const PATIENCE: Duration = Duration::from_secs(20);

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

fn manual_timer(clock: &ManualClock, driver: bool) -> Timer {
    Timer::builder()
        .clock(clock.clone())
        .driver_thread(driver)
        .shards(4)
        .workers(2)
        .build()
        .unwrap()
}

/// Waits until `f(metrics)` holds.
fn wait_for(timer: &Timer, what: &str, f: impl Fn(&Metrics) -> bool) -> Metrics {
    let start = std::time::Instant::now();
    loop {
        let m = timer.metrics();
        if f(&m) {
            return m;
        }
        assert!(
            start.elapsed() < PATIENCE,
            "gave up waiting for {what}: {m:?}"
        );
        thread::yield_now();
    }
}

#[test]
fn fires_only_once_its_deadline_has_passed() {
    let clock = ManualClock::new();
    let timer = manual_timer(&clock, false);
    let (tx, rx) = mpsc::channel();
    timer
        .schedule(ms(10), Box::new(move || tx.send(()).unwrap()))
        .unwrap();
    clock.advance(ms(9));
    assert_eq!(timer.run_due(), 0);
    assert_eq!(timer.len(), 1);
    clock.advance(Duration::from_micros(999));
    assert_eq!(timer.run_due(), 0, "fired before its deadline");
    clock.advance(Duration::from_micros(1));
    assert_eq!(timer.run_due(), 1);
    rx.recv_timeout(PATIENCE).unwrap();
    assert_eq!(timer.len(), 0);
}

#[test]
fn driver_thread_never_fires_early() {
    let clock = ManualClock::new();
    let timer = manual_timer(&clock, true);
    let (tx, rx) = mpsc::channel();
    let n = 2_000u64;
    for i in 0..n {
        let deadline = ms(1 + (i * 7919) % 500);
        let tx = tx.clone();
        let c = clock.clone();
        timer
            .schedule(
                deadline,
                Box::new(move || tx.send((deadline, c.elapsed())).unwrap()),
            )
            .unwrap();
    }
    for _ in 0..600 {
        clock.advance(ms(1));
    }
    for _ in 0..n {
        let (deadline, ran_at) = rx.recv_timeout(PATIENCE).unwrap();
        assert!(ran_at >= deadline, "ran at {ran_at:?} before {deadline:?}");
    }
    let m = wait_for(&timer, "all expired", |m| m.expired == n);
    assert_eq!(m.pending, 0);
    // Every task's lateness was recorded (the last ones may still be
    // starting when `expired` already counts them).
    let m = wait_for(&timer, "lateness recorded", |m| m.lateness.count() == n);
    assert!(m.lateness.quantile(0.5).is_some());
    assert_eq!(m.backlog, 0);
}

#[test]
fn driver_wakes_on_clock_advance_and_runs_in_order_batches() {
    let clock = ManualClock::new();
    let timer = manual_timer(&clock, true);
    let (tx, rx) = mpsc::channel();
    for d in [30u64, 10, 20] {
        let tx = tx.clone();
        timer
            .schedule(ms(d), Box::new(move || tx.send(d).unwrap()))
            .unwrap();
    }
    clock.advance(ms(10));
    assert_eq!(rx.recv_timeout(PATIENCE).unwrap(), 10);
    clock.advance(ms(10));
    assert_eq!(rx.recv_timeout(PATIENCE).unwrap(), 20);
    clock.advance(ms(10));
    assert_eq!(rx.recv_timeout(PATIENCE).unwrap(), 30);
}

/// Schedules 4,000 tasks from four threads (so they sit in several shards),
/// named by what `schedule` returns; two threads race to `cancel` every
/// other one while the clock moves. Every task runs or is cancelled, never
/// both, never twice, and none is lost (a lost one fails the receive, not
/// the suite by hanging); afterwards every name is stale.
fn cancel_race<N: Send + Sync + 'static>(
    schedule: fn(&Timer, Duration, BoxTask) -> N,
    cancel: fn(&Timer, &N) -> bool,
) {
    let clock = ManualClock::new();
    let timer = manual_timer(&clock, true);
    let (tx, rx) = mpsc::channel();
    let n = 4_000usize;
    let names: Vec<N> = (0..4)
        .map(|t| {
            let (timer, tx) = (timer.clone(), tx.clone());
            thread::spawn(move || {
                (t * n / 4..(t + 1) * n / 4)
                    .map(|i| {
                        let tx = tx.clone();
                        let task = BoxTask::new(move || tx.send(i).unwrap());
                        schedule(&timer, ms(1 + (i as u64 % 50)), task)
                    })
                    .collect::<Vec<_>>()
            })
        })
        .flat_map(|scheduler| scheduler.join().unwrap())
        .collect();
    drop(tx);
    let barrier = Arc::new(Barrier::new(3));
    let names = Arc::new(names);
    let cancellers: Vec<_> = (0..2)
        .map(|t| {
            let (names, barrier, timer) = (Arc::clone(&names), Arc::clone(&barrier), timer.clone());
            thread::spawn(move || {
                barrier.wait();
                let mut cancelled = Vec::new();
                for (i, name) in names.iter().enumerate() {
                    if i % 2 == t && cancel(&timer, name) {
                        cancelled.push(i);
                    }
                }
                cancelled
            })
        })
        .collect();
    barrier.wait();
    for _ in 0..60 {
        clock.advance(ms(1));
    }
    let cancelled: HashSet<usize> = cancellers
        .into_iter()
        .flat_map(|c| c.join().unwrap())
        .collect();
    let ran: Vec<usize> = (0..n - cancelled.len())
        .map(|_| {
            rx.recv_timeout(PATIENCE)
                .expect("a task that was not cancelled never ran")
        })
        .collect();
    let ran_set: HashSet<usize> = ran.iter().copied().collect();
    assert_eq!(ran.len(), ran_set.len(), "a task ran twice");
    assert!(ran_set.is_disjoint(&cancelled), "cancelled and ran");
    assert!(
        names.iter().all(|name| !cancel(&timer, name)),
        "a stale name cancelled something"
    );
    let m = timer.metrics();
    assert_eq!(m.cancelled as usize, cancelled.len());
    assert_eq!(m.expired as usize, ran.len());
    assert_eq!(m.scheduled as usize, n);
    assert_eq!(m.pending, 0);
    drop(timer);
    assert!(
        rx.try_recv().is_err(),
        "a task ran after every one was accounted for"
    );
}

#[test]
fn cancel_from_any_thread_is_truthful() {
    cancel_race(
        |timer, delay, task| timer.schedule(delay, task).unwrap(),
        |_, handle| handle.cancel().is_some(),
    );
}

#[test]
fn cancel_by_id_from_any_thread_is_truthful() {
    cancel_race(
        |timer, delay, task| timer.schedule_id(delay, task).unwrap(),
        |timer, &id| timer.cancel(id).is_some(),
    );
}

#[test]
fn reschedule_moves_the_deadline_both_ways() {
    let clock = ManualClock::new();
    let timer = manual_timer(&clock, false);
    let (tx, rx) = mpsc::channel();
    let tx2 = tx.clone();
    let late = timer
        .schedule(ms(5), Box::new(move || tx.send("late").unwrap()))
        .unwrap();
    let early = timer
        .schedule(ms(50), Box::new(move || tx2.send("early").unwrap()))
        .unwrap();
    assert!(late.reschedule(ms(100)));
    assert!(early.reschedule(ms(1)));
    clock.advance(ms(1));
    assert_eq!(timer.run_due(), 1);
    assert_eq!(rx.recv_timeout(PATIENCE).unwrap(), "early");
    assert!(!early.reschedule(ms(1)), "fired task rescheduled");
    clock.advance(ms(98));
    assert_eq!(timer.run_due(), 0);
    clock.advance(ms(1));
    assert_eq!(timer.run_due(), 1);
    assert_eq!(rx.recv_timeout(PATIENCE).unwrap(), "late");
}

#[test]
fn zero_delay_runs_at_once_with_a_stale_handle() {
    let clock = ManualClock::new();
    let timer = manual_timer(&clock, false);
    let (tx, rx) = mpsc::channel();
    let h = timer
        .schedule(Duration::ZERO, Box::new(move || tx.send(()).unwrap()))
        .unwrap();
    rx.recv_timeout(PATIENCE).unwrap();
    assert!(h.cancel().is_none());
    assert!(!h.is_pending());
    let now = timer.now();
    let past = now.checked_sub(ms(5)).unwrap_or(now);
    let (tx, rx) = mpsc::channel();
    timer
        .schedule_at(past, Box::new(move || tx.send(()).unwrap()))
        .unwrap();
    rx.recv_timeout(PATIENCE).unwrap();
    assert_eq!(timer.metrics().expired, 2);
}

#[test]
fn panicking_tasks_are_counted_and_the_pool_keeps_working() {
    let clock = ManualClock::new();
    let timer = manual_timer(&clock, true);
    for _ in 0..10 {
        timer
            .schedule(
                ms(1),
                Box::new(|| panic!("task failure (expected by the test)")),
            )
            .unwrap();
    }
    let (tx, rx) = mpsc::channel();
    timer
        .schedule(ms(2), Box::new(move || tx.send(()).unwrap()))
        .unwrap();
    clock.advance(ms(2));
    rx.recv_timeout(PATIENCE).unwrap();
    wait_for(&timer, "ten panics", |m| m.panicked == 10);
    let (tx, rx) = mpsc::channel();
    timer
        .schedule(ms(1), Box::new(move || tx.send(()).unwrap()))
        .unwrap();
    clock.advance(ms(1));
    rx.recv_timeout(PATIENCE).unwrap();
}

#[test]
fn shutdown_hands_back_pending_tasks_and_refuses_new_ones() {
    let clock = ManualClock::new();
    let timer = manual_timer(&clock, true);
    let ran = Arc::new(AtomicUsize::new(0));
    for i in 0..100u64 {
        let ran = Arc::clone(&ran);
        timer
            .schedule(
                ms(1000 + i),
                Box::new(move || {
                    ran.fetch_add(1, Ordering::SeqCst);
                }),
            )
            .unwrap();
    }
    let handle = timer.schedule(ms(5000), Box::new(|| ())).unwrap();
    let pending = timer.shutdown();
    assert_eq!(pending.len(), 101);
    assert!(timer.is_shut_down());
    assert!(handle.cancel().is_none());
    assert!(!handle.reschedule(ms(1)));
    let err = timer.schedule(ms(1), Box::new(|| ())).unwrap_err();
    assert_eq!(err.to_string(), "timer is shut down");
    let _task_back: BoxTask = err.into_inner();
    assert!(timer.schedule(Duration::ZERO, Box::new(|| ())).is_err());
    assert!(timer.shutdown().is_empty(), "second shutdown");
    clock.advance(ms(10_000));
    assert!(!timer.advance_clock(Duration::ZERO));
    assert_eq!(ran.load(Ordering::SeqCst), 0);
    for task in pending {
        task.run();
    }
    assert_eq!(ran.load(Ordering::SeqCst), 100);
}

/// Names of this process's threads.
fn thread_names() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .map(|dir| {
            dir.filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("comm")).ok())
                .map(|s| s.trim().to_string())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn dropping_the_last_handle_joins_every_thread() {
    let prefix = "pgtdrop";
    let timer: Timer = Timer::builder()
        .thread_name(prefix)
        .workers(3)
        .build()
        .unwrap();
    let clone = timer.clone();
    if cfg!(target_os = "linux") {
        // Each thread names itself once it starts: wait for all four.
        let start = std::time::Instant::now();
        while thread_names()
            .iter()
            .filter(|n| n.starts_with(prefix))
            .count()
            < 4
        {
            assert!(
                start.elapsed() < PATIENCE,
                "driver and three workers never started"
            );
            thread::yield_now();
        }
    }
    timer.schedule(ms(60_000), Box::new(|| ())).unwrap();
    drop(timer);
    assert!(!clone.is_shut_down(), "a clone keeps it alive");
    drop(clone);
    if cfg!(target_os = "linux") {
        // A joined thread leaves /proc a moment after `join` returns; a
        // leaked one never does.
        let start = std::time::Instant::now();
        loop {
            let alive: Vec<_> = thread_names()
                .into_iter()
                .filter(|n| n.starts_with(prefix))
                .collect();
            if alive.is_empty() {
                break;
            }
            assert!(start.elapsed() < PATIENCE, "threads left: {alive:?}");
            thread::yield_now();
        }
    }
}

#[test]
fn a_task_may_drop_the_last_timer_handle() {
    let clock = ManualClock::new();
    let timer = manual_timer(&clock, true);
    let (tx, rx) = mpsc::channel();
    let slot = Arc::new(parking_lot::Mutex::new(Some(timer.clone())));
    let inner = Arc::clone(&slot);
    timer
        .schedule(
            ms(1),
            Box::new(move || {
                let last = inner.lock().take();
                drop(last); // the last handle, dropped on a worker
                tx.send(()).unwrap();
            }),
        )
        .unwrap();
    drop(timer);
    clock.advance(ms(1));
    rx.recv_timeout(PATIENCE).unwrap();
    assert!(slot.lock().is_none());
}

#[test]
fn tasks_may_use_the_timer_reentrantly() {
    let clock = ManualClock::new();
    let timer = manual_timer(&clock, true);
    let (tx, rx) = mpsc::channel();
    let t2 = timer.clone();
    let victim = timer.schedule(ms(100), Box::new(|| ())).unwrap();
    timer
        .schedule(
            ms(1),
            Box::new(move || {
                assert!(victim.cancel().is_some());
                let tx2 = tx.clone();
                t2.schedule(ms(1), Box::new(move || tx2.send("second").unwrap()))
                    .unwrap();
                let _ = t2.metrics();
                tx.send("first").unwrap();
            }),
        )
        .unwrap();
    clock.advance(ms(1));
    assert_eq!(rx.recv_timeout(PATIENCE).unwrap(), "first");
    clock.advance(ms(1));
    assert_eq!(rx.recv_timeout(PATIENCE).unwrap(), "second");
}

#[test]
fn idle_system_clock_timer_never_wakes() {
    let timer: Timer = Timer::builder().build().unwrap();
    thread::sleep(ms(100));
    assert_eq!(timer.metrics().wakeups, 0, "woke with nothing ever pending");
    let h = timer.schedule(ms(5), Box::new(|| ())).unwrap();
    assert!(h.cancel().is_some());
    thread::sleep(ms(300));
    // At most two wake-ups, whatever the sleeps' length: the schedule's
    // notification (the driver re-plans) and, if the driver had planned its
    // sleep for the 5 ms deadline before the cancel, that deadline. A driver
    // that ticks or polls would have woken hundreds of times.
    assert!(timer.metrics().wakeups <= 2, "{:?}", timer.metrics());
}

#[test]
fn an_earlier_schedule_wakes_the_sleeping_driver() {
    let timer: Timer = Timer::builder().build().unwrap();
    timer
        .schedule(Duration::from_secs(3600), Box::new(|| ()))
        .unwrap();
    let (tx, rx) = mpsc::channel();
    timer
        .schedule(ms(1), Box::new(move || tx.send(()).unwrap()))
        .unwrap();
    // Only a prompt wake-up gets here: the driver slept for an hour.
    rx.recv_timeout(PATIENCE).unwrap();
}

#[test]
fn self_driven_timer_steps_to_each_expiration() {
    let clock = ManualClock::new();
    let timer = manual_timer(&clock, false);
    for s in [1u64, 50, 3599, 3600] {
        timer
            .schedule(Duration::from_secs(s), Box::new(|| ()))
            .unwrap();
    }
    let mut steps = 0;
    while let Some(at) = timer.next_expiration() {
        clock.advance(at.saturating_duration_since(timer.now()));
        steps += 1;
        assert!(timer.run_due() >= 1, "woke for nothing at step {steps}");
    }
    assert_eq!(steps, 4, "one step per distinct deadline");
}

#[test]
fn invalid_configuration_is_an_error() {
    let cases: Vec<(Result<Timer, BuildError>, &str)> = vec![
        (Timer::builder().tick(Duration::ZERO).build(), "tick"),
        (Timer::builder().tick(Duration::MAX).build(), "tick"),
        (Timer::builder().wheel_size(0).build(), "wheel size"),
        (Timer::builder().wheel_size(1).build(), "wheel size"),
        (
            Timer::builder().wheel_size(usize::MAX).build(),
            "wheel size",
        ),
        (Timer::builder().shards(0).build(), "shard"),
        (Timer::builder().shards(1 << 20).build(), "shard"),
        (Timer::builder().workers(0).build(), "worker"),
    ];
    for (result, word) in cases {
        let err = result.unwrap_err();
        assert!(err.to_string().contains(word), "{err}");
    }
}

/// A custom task type: no boxing.
struct Send1(mpsc::Sender<u32>, u32);

impl Task for Send1 {
    fn run(self) {
        self.0.send(self.1).unwrap();
    }
}

#[test]
fn custom_task_types_need_no_box() {
    let clock = ManualClock::new();
    let timer: Timer<Send1> = TimerBuilder::new().clock(clock.clone()).build().unwrap();
    let (tx, rx) = mpsc::channel();
    timer.schedule(ms(3), Send1(tx, 42)).unwrap();
    clock.advance(ms(3));
    assert_eq!(rx.recv_timeout(PATIENCE).unwrap(), 42);
}

#[test]
fn far_deadlines_are_accepted() {
    let clock = ManualClock::new();
    let timer = manual_timer(&clock, true);
    let h = timer.schedule(Duration::MAX, Box::new(|| ())).unwrap();
    assert!(h.is_pending());
    clock.advance(Duration::from_secs(1 << 40));
    assert!(h.is_pending());
    assert!(h.cancel().is_some());
}

#[test]
fn a_zero_delay_inside_the_current_tick_runs_without_waiting_for_the_next() {
    // Issue 10, defect 5: at 15 ms on a 10 ms tick, `schedule(ZERO)` waited
    // for the clock to reach 20 ms.
    let clock = ManualClock::new();
    let timer: Timer = Timer::builder()
        .clock(clock.clone())
        .tick(ms(10))
        .driver_thread(false)
        .workers(1)
        .build()
        .unwrap();
    clock.advance(ms(15));
    let (tx, rx) = mpsc::channel();
    let zero = tx.clone();
    timer
        .schedule(Duration::ZERO, Box::new(move || zero.send("zero").unwrap()))
        .unwrap();
    let past = timer.now() - ms(1);
    timer
        .schedule_at(past, Box::new(move || tx.send("past").unwrap()))
        .unwrap();
    let mut got = [
        rx.recv_timeout(PATIENCE).unwrap(),
        rx.recv_timeout(PATIENCE).unwrap(),
    ];
    got.sort();
    assert_eq!(got, ["past", "zero"]);
    // A rescheduled handle moved to "now" is due at the next step too.
    let (tx, rx) = mpsc::channel();
    let h = timer
        .schedule(ms(100), Box::new(move || tx.send("moved").unwrap()))
        .unwrap();
    assert!(h.reschedule(Duration::ZERO));
    assert_eq!(timer.run_due(), 1);
    assert_eq!(rx.recv_timeout(PATIENCE).unwrap(), "moved");
}

#[test]
fn a_thread_name_with_a_nul_byte_is_a_build_error() {
    // Issue 10, defect 6: it panicked inside `std::thread`.
    let err = Timer::<purgatorio::BoxTask>::builder()
        .thread_name("bad\0name")
        .build()
        .unwrap_err();
    assert!(matches!(&err, BuildError::ThreadName(name) if name == "bad\0name"));
    assert_eq!(
        err.to_string(),
        "thread name \"bad\\0name\" contains a NUL byte"
    );
}
