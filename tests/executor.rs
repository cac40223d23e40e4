//! Where expired tasks run: the built-in pool, inline on the driver, or an
//! application's rayon pool (`--features rayon`). On a manual clock; waits
//! for other threads are bounded.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use std::future::Future;

use purgatorio::{Executor, KeyedTimer, ManualClock, Timer};

/// Upper bound for waiting on another thread.
const PATIENCE: Duration = Duration::from_secs(20);

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

/// The calling thread's name.
fn me() -> String {
    thread::current().name().unwrap_or("").to_string()
}

#[test]
fn inline_tasks_run_on_the_driver_thread_never_on_the_scheduler() {
    let clock = ManualClock::new();
    let timer = Timer::builder()
        .clock(clock.clone())
        .executor(Executor::Inline)
        .thread_name("inl")
        .build()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let later = tx.clone();
    timer
        .schedule(ms(5), move || later.send(me()).unwrap())
        .unwrap();
    // Due at once: still the driver's, even though it could run right here.
    let lock = Arc::new(parking_lot::Mutex::new(()));
    let held = lock.lock();
    let task_lock = Arc::clone(&lock);
    timer
        .schedule(Duration::ZERO, move || {
            drop(task_lock.lock()); // would deadlock if run on this thread
            tx.send(me()).unwrap();
        })
        .unwrap();
    drop(held);
    assert_eq!(rx.recv_timeout(PATIENCE).unwrap(), "inl-driver");
    clock.advance(ms(5));
    assert_eq!(rx.recv_timeout(PATIENCE).unwrap(), "inl-driver");
    // A panic is caught and counted; the driver goes on.
    timer
        .schedule(Duration::ZERO, || panic!("expected by the test"))
        .unwrap();
    let start = Instant::now();
    while timer.metrics().panicked < 1 {
        assert!(start.elapsed() < PATIENCE, "panic never counted");
        thread::yield_now();
    }
    assert!(timer.shutdown().is_empty());
    assert!(timer.schedule(ms(1), || ()).is_err());
}

/// A timer on `clock` with no driver thread, running its tasks inline.
fn driverless_inline(clock: &ManualClock) -> Timer {
    Timer::builder()
        .clock(clock.clone())
        .executor(Executor::Inline)
        .driver_thread(false)
        .build()
        .unwrap()
}

#[test]
fn a_timer_without_a_driver_thread_runs_inline_tasks_on_the_caller() {
    let clock = ManualClock::new();
    let timer = driverless_inline(&clock);
    let ran = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&ran);
    timer
        .schedule(ms(1), move || flag.store(true, Ordering::SeqCst))
        .unwrap();
    clock.advance(ms(1));
    assert_eq!(timer.run_due(), 1);
    assert!(ran.load(Ordering::SeqCst), "ran within run_due");
}

#[test]
fn an_async_driver_runs_inline_tasks_where_it_is_polled() {
    let clock = ManualClock::new();
    let timer = driverless_inline(&clock);
    let driver = timer.clone();
    // A manual clock gives no deadline to sleep until: the driver only
    // waits for schedules and the clock's jumps, so its sleep never runs.
    let driving = thread::Builder::new()
        .name("async-driver".into())
        .spawn(move || {
            futures_executor::block_on(
                driver.drive(|_: Instant| -> std::future::Pending<()> { unreachable!() }),
            )
        })
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let later = tx.clone();
    timer
        .schedule(ms(5), move || later.send(me()).unwrap())
        .unwrap();
    // Due at once: the schedule itself wakes the waiting future.
    timer
        .schedule(Duration::ZERO, move || tx.send(me()).unwrap())
        .unwrap();
    assert_eq!(rx.recv_timeout(PATIENCE).unwrap(), "async-driver");
    clock.advance(ms(5));
    assert_eq!(rx.recv_timeout(PATIENCE).unwrap(), "async-driver");
    // At least the jump woke it (the schedules may come before its first pass).
    assert!(timer.metrics().wakeups >= 1);
    // Shutting down ends the future.
    assert!(timer.shutdown().is_empty());
    driving.join().unwrap();
}

#[test]
fn an_async_driver_on_tokio_wakes_for_an_earlier_deadline() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    runtime.block_on(async {
        let timer = Timer::builder()
            .executor(Executor::Inline)
            .driver_thread(false)
            .build()
            .unwrap();
        let driver = timer.clone();
        let driving =
            tokio::spawn(
                async move { driver.drive(|at| tokio::time::sleep_until(at.into())).await },
            );
        // The driver sleeps until a minute from now, then a schedule five
        // milliseconds away must wake it; the sleep ends only if it did.
        let far = timer.schedule(Duration::from_secs(60), || ()).unwrap();
        tokio::task::yield_now().await;
        let started = Instant::now();
        tokio::time::timeout(PATIENCE, timer.sleep(ms(5)))
            .await
            .expect("the driver woke for the earlier deadline");
        assert!(started.elapsed() >= ms(5), "never early");
        assert!(far.cancel().is_some());
        timer.shutdown();
        driving.await.unwrap();
    });
}

#[cfg(feature = "rayon")]
mod rayon_pool {
    use super::*;

    fn pool() -> Arc<rayon::ThreadPool> {
        Arc::new(
            rayon::ThreadPoolBuilder::new()
                .num_threads(2)
                .thread_name(|i| format!("app-rayon-{i}"))
                .build()
                .unwrap(),
        )
    }

    /// A timer on `clock` whose tasks run on a fresh two-thread rayon pool.
    fn rayon_timer(clock: &ManualClock) -> Timer {
        Timer::builder()
            .clock(clock.clone())
            .executor(Executor::Rayon(pool()))
            .build()
            .unwrap()
    }

    #[test]
    fn tasks_run_on_the_applications_rayon_pool_and_panics_are_counted() {
        let clock = ManualClock::new();
        let timer = rayon_timer(&clock);
        let (tx, rx) = mpsc::channel();
        timer
            .schedule(ms(3), move || tx.send(me()).unwrap())
            .unwrap();
        timer
            .schedule(ms(3), || panic!("expected by the test"))
            .unwrap();
        clock.advance(ms(3));
        assert!(rx.recv_timeout(PATIENCE).unwrap().starts_with("app-rayon-"));
        let start = Instant::now();
        while timer.metrics().panicked < 1 {
            assert!(start.elapsed() < PATIENCE, "panic never counted");
            thread::yield_now();
        }
        assert_eq!(timer.metrics().expired, 2);
    }

    #[test]
    fn shutdown_waits_for_the_tasks_already_running() {
        let clock = ManualClock::new();
        let timer = rayon_timer(&clock);
        let (started_tx, started) = mpsc::channel();
        let (release, released) = mpsc::channel::<()>();
        let finished = Arc::new(AtomicBool::new(false));
        let done = Arc::clone(&finished);
        timer
            .schedule(Duration::ZERO, move || {
                started_tx.send(()).unwrap();
                released.recv_timeout(PATIENCE).unwrap();
                done.store(true, Ordering::SeqCst);
            })
            .unwrap();
        started.recv_timeout(PATIENCE).unwrap();
        let closer = timer.clone();
        let shutting = thread::spawn(move || {
            closer.shutdown();
            // Returns only once the running task has finished.
            finished.load(Ordering::SeqCst)
        });
        release.send(()).unwrap();
        assert!(
            shutting.join().unwrap(),
            "shutdown returned before the task"
        );
    }

    #[test]
    fn a_rayon_task_may_drop_the_last_timer_handle() {
        let clock = ManualClock::new();
        let timer = rayon_timer(&clock);
        let slot = Arc::new(parking_lot::Mutex::new(Some(timer.clone())));
        let in_task = Arc::clone(&slot);
        let (tx, rx) = mpsc::channel();
        timer
            .schedule(ms(1), move || {
                drop(in_task.lock().take()); // the last handle: shuts down here
                tx.send(()).unwrap();
            })
            .unwrap();
        drop(timer);
        clock.advance(ms(1));
        rx.recv_timeout(PATIENCE).unwrap();
        assert!(slot.lock().is_none());
    }
}

/// A waker that reads the keyed timer it was built for: the runtime's code,
/// calling back into the crate.
struct ReadsKeyed {
    keyed: Arc<KeyedTimer<u32, ()>>,
    woken: mpsc::Sender<usize>,
}

impl std::task::Wake for ReadsKeyed {
    fn wake(self: Arc<Self>) {
        let _ = self.woken.send(self.keyed.len());
    }
}

/// An async driver's wake-up runs its runtime's waker, so a schedule made
/// under one of the crate's locks (here a keyed timer's shard, while `set`
/// files the key) wakes it only after that lock: a waker that calls back
/// into the keyed timer would otherwise wait for the lock its own thread
/// holds.
#[test]
fn an_async_drivers_waker_runs_after_the_keyed_timers_lock() {
    let clock = ManualClock::new();
    let timer = driverless_inline(&clock);
    let keyed = Arc::new(KeyedTimer::on_timer(&timer, |_: u32, ()| ()));
    let (tx, rx) = mpsc::channel();
    let waker = std::task::Waker::from(Arc::new(ReadsKeyed {
        keyed: Arc::clone(&keyed),
        woken: tx,
    }));
    let mut driving = Box::pin(timer.drive(|_| std::future::pending::<()>()));
    let mut cx = std::task::Context::from_waker(&waker);
    assert!(
        driving.as_mut().poll(&mut cx).is_pending(),
        "nothing pending yet"
    );
    // `set` on its own thread: a deadlock there fails the wait below
    // instead of hanging the test.
    let setting = {
        let keyed = Arc::clone(&keyed);
        thread::spawn(move || keyed.set(7, (), ms(5)).unwrap())
    };
    assert_eq!(
        rx.recv_timeout(PATIENCE),
        Ok(1),
        "the waker ran, after the lock"
    );
    setting.join().unwrap();
    timer.shutdown();
    assert!(
        driving.as_mut().poll(&mut cx).is_ready(),
        "ends at shutdown"
    );
}

/// A waker that does nothing: the test counts its references.
struct Idle;

impl std::task::Wake for Idle {
    fn wake(self: Arc<Self>) {}
}

/// An async driver dropped while it waits (its task aborted) leaves no
/// waker behind: the signal keeps no reference to a task that no longer
/// waits.
#[test]
fn a_dropped_async_driver_leaves_no_waker_behind() {
    let clock = ManualClock::new();
    let timer = driverless_inline(&clock);
    let task = Arc::new(Idle);
    let waker = std::task::Waker::from(Arc::clone(&task));
    let mut driving = Box::pin(timer.drive(|_| std::future::pending::<()>()));
    let mut cx = std::task::Context::from_waker(&waker);
    assert!(driving.as_mut().poll(&mut cx).is_pending());
    assert!(Arc::strong_count(&task) > 2, "the signal keeps the waker");
    drop(driving);
    drop(waker);
    assert_eq!(Arc::strong_count(&task), 1, "no waker left behind");
}
