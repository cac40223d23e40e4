//! The async API: sleeps, timeouts, parked operations and keyed expirations
//! as futures, on tokio's multi-thread and current-thread runtimes and on a
//! plain `block_on` executor. Time is a manual clock: no assertion depends on
//! how long anything took.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use purgatorio::{
    Completion, DelayedOperation, KeyedTimer, ManualClock, Outcome, Purgatory, Timer, TimerBuilder,
};

/// Every wait in these tests gives up after this long, so a lost wake-up
/// fails instead of hanging.
const PATIENCE: Duration = Duration::from_secs(20);

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

fn manual() -> (ManualClock, Timer) {
    let clock = ManualClock::new();
    let timer = Timer::builder().clock(clock.clone()).build().unwrap();
    (clock, timer)
}

/// A waker that counts its wake-ups and reports each on a channel.
struct Counter {
    woken: AtomicUsize,
    tx: std::sync::Mutex<mpsc::Sender<()>>,
}

impl Wake for Counter {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.fetch_add(1, Ordering::SeqCst);
        let _ = self.tx.lock().unwrap().send(());
    }
}

fn counter() -> (Arc<Counter>, Waker, mpsc::Receiver<()>) {
    let (tx, rx) = mpsc::channel();
    let counter = Arc::new(Counter {
        woken: AtomicUsize::new(0),
        tx: std::sync::Mutex::new(tx),
    });
    let waker = Waker::from(Arc::clone(&counter));
    (counter, waker, rx)
}

fn poll<F: Future + Unpin>(future: &mut F, waker: &Waker) -> Poll<F::Output> {
    Pin::new(future).poll(&mut Context::from_waker(waker))
}

/// Runs the future `make` builds on tokio's multi-thread runtime, on its
/// current-thread runtime, and on `futures_executor::block_on`.
fn on_every_executor<F, Fut>(make: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let multi = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    multi.block_on(async { tokio::time::timeout(PATIENCE, make()).await.expect("hung") });
    let current = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    current.block_on(async { tokio::time::timeout(PATIENCE, make()).await.expect("hung") });
    futures_executor::block_on(make());
}

#[test]
fn a_sleep_is_pending_before_its_deadline_and_ready_once_the_clock_reaches_it() {
    let (clock, timer) = manual();
    let (counter, waker, woken) = counter();
    let mut sleep = timer.sleep(ms(100));
    assert!(poll(&mut sleep, &waker).is_pending());
    assert_eq!(timer.len(), 1, "the first poll schedules the entry");
    clock.advance(ms(99));
    assert!(poll(&mut sleep, &waker).is_pending(), "1 ms early");
    clock.advance(Duration::from_micros(999));
    assert!(poll(&mut sleep, &waker).is_pending(), "1 µs early");
    clock.advance(Duration::from_micros(1));
    woken
        .recv_timeout(PATIENCE)
        .expect("the driver wakes the task");
    assert_eq!(counter.woken.load(Ordering::SeqCst), 1);
    assert!(poll(&mut sleep, &waker).is_ready());
    assert!(poll(&mut sleep, &waker).is_ready(), "and stays ready");
    assert!(timer.is_empty());
}

#[test]
fn a_sleep_is_lazy_and_dropping_it_cancels_its_entry_at_once() {
    let (_clock, timer) = manual();
    let (_, waker, _woken) = counter();
    let never_polled = timer.sleep(ms(10));
    assert_eq!(timer.len(), 0);
    drop(never_polled);
    let mut sleeps: Vec<_> = (0..10_000).map(|i| timer.sleep(ms(1 + i % 5000))).collect();
    for sleep in &mut sleeps {
        assert!(poll(sleep, &waker).is_pending());
    }
    assert_eq!(timer.len(), 10_000);
    drop(sleeps);
    assert_eq!(timer.len(), 0);
    let metrics = timer.metrics();
    assert_eq!((metrics.scheduled, metrics.cancelled), (10_000, 10_000));
}

#[test]
fn a_sleep_polled_from_another_task_wakes_that_task_only() {
    let (clock, timer) = manual();
    let (first, first_waker, _) = counter();
    let (second, second_waker, second_woken) = counter();
    let mut sleep = timer.sleep(ms(10));
    assert!(poll(&mut sleep, &first_waker).is_pending());
    assert!(poll(&mut sleep, &second_waker).is_pending());
    assert_eq!(timer.len(), 1, "the waker is replaced in place");
    clock.advance(ms(10));
    second_woken
        .recv_timeout(PATIENCE)
        .expect("the new task is woken");
    assert!(poll(&mut sleep, &second_waker).is_ready());
    assert_eq!(first.woken.load(Ordering::SeqCst), 0, "the old task is not");
    assert_eq!(second.woken.load(Ordering::SeqCst), 1);
}

#[test]
fn a_reset_sleep_moves_its_deadline() {
    let (clock, timer) = manual();
    let (_, waker, woken) = counter();
    let mut sleep = timer.sleep(ms(10));
    assert!(poll(&mut sleep, &waker).is_pending());
    clock.advance(ms(5));
    sleep.reset(timer.now() + ms(10));
    clock.advance(ms(5));
    assert!(
        poll(&mut sleep, &waker).is_pending(),
        "the old deadline is gone"
    );
    clock.advance(ms(5));
    woken.recv_timeout(PATIENCE).unwrap();
    assert!(poll(&mut sleep, &waker).is_ready());
    // A reset after it completed makes it pending again.
    sleep.reset(timer.now() + ms(1));
    assert!(poll(&mut sleep, &waker).is_pending());
    clock.advance(ms(1));
    woken.recv_timeout(PATIENCE).unwrap();
    assert!(poll(&mut sleep, &waker).is_ready());
}

#[test]
fn a_zero_or_past_sleep_is_ready_at_once_and_an_endless_one_is_accepted() {
    let (_clock, timer) = manual();
    let (_, waker, _) = counter();
    assert!(poll(&mut timer.sleep(Duration::ZERO), &waker).is_ready());
    let past = timer.now() - ms(1);
    assert!(poll(&mut timer.sleep_until(past), &waker).is_ready());
    let mut endless = timer.sleep(Duration::MAX);
    assert!(poll(&mut endless, &waker).is_pending());
    assert!(endless.deadline() > timer.now() + Duration::from_secs(86_400 * 365));
    assert_eq!(
        timer.metrics().scheduled,
        1,
        "ready sleeps schedule nothing"
    );
}

#[test]
fn a_timeout_around_a_ready_future_schedules_nothing() {
    let (_clock, timer) = manual();
    let (_, waker, _) = counter();
    let mut timeout = Box::pin(timer.timeout(ms(10), async { 7 }));
    assert_eq!(
        timeout.as_mut().poll(&mut Context::from_waker(&waker)),
        Poll::Ready(Ok(7))
    );
    assert_eq!(timer.metrics().scheduled, 0);
}

#[test]
fn a_timeout_elapses_at_its_deadline_never_before() {
    let (clock, timer) = manual();
    let (_, waker, woken) = counter();
    let mut timeout = Box::pin(timer.timeout(ms(10), std::future::pending::<()>()));
    let mut cx = Context::from_waker(&waker);
    assert!(timeout.as_mut().poll(&mut cx).is_pending());
    clock.advance(Duration::from_nanos(9_999_999));
    assert!(timeout.as_mut().poll(&mut cx).is_pending());
    clock.advance(Duration::from_nanos(1));
    woken.recv_timeout(PATIENCE).unwrap();
    let elapsed = match timeout.as_mut().poll(&mut cx) {
        Poll::Ready(Err(elapsed)) => elapsed,
        other => panic!("expected the deadline, got {other:?}"),
    };
    assert!(!elapsed.is_shut_down());
    assert!(timer.is_empty());
}

#[test]
fn a_million_timeouts_cancelled_before_their_deadline_leave_nothing_pending() {
    let (_clock, timer) = manual();
    let (_, waker, _) = counter();
    let mut cx = Context::from_waker(&waker);
    let count = if cfg!(debug_assertions) {
        200_000
    } else {
        1_000_000
    };
    let mut batch = Vec::with_capacity(10_000);
    for i in 0..count {
        let mut timeout =
            Box::pin(timer.timeout(ms(30_000 + i % 1000), std::future::pending::<()>()));
        assert!(timeout.as_mut().poll(&mut cx).is_pending());
        batch.push(timeout);
        if batch.len() == 10_000 {
            assert_eq!(timer.len(), 10_000);
            batch.clear();
        }
    }
    batch.clear();
    let metrics = timer.metrics();
    assert_eq!(metrics.pending, 0);
    assert_eq!((metrics.scheduled, metrics.cancelled), (count, count));
}

#[test]
fn shutting_the_timer_down_ends_pending_sleeps_and_timeouts_as_shut_down() {
    let (_clock, timer) = manual();
    let (counter, waker, woken) = counter();
    let mut sleep = timer.sleep(ms(10));
    let mut timeout = Box::pin(timer.timeout(ms(10), std::future::pending::<()>()));
    let mut cx = Context::from_waker(&waker);
    assert!(poll(&mut sleep, &waker).is_pending());
    assert!(timeout.as_mut().poll(&mut cx).is_pending());
    timer.schedule(ms(10), || ()).unwrap();
    let never_ran = timer.shutdown();
    assert_eq!(never_ran.len(), 1, "only the user's own task comes back");
    // The sleeps' entries were ended by the shutdown itself, not by the
    // caller dropping what it returned.
    woken.recv_timeout(PATIENCE).unwrap();
    woken.recv_timeout(PATIENCE).unwrap();
    assert_eq!(counter.woken.load(Ordering::SeqCst), 2);
    drop(never_ran);
    assert!(poll(&mut sleep, &waker).is_ready());
    assert!(!sleep.is_elapsed());
    match timeout.as_mut().poll(&mut cx) {
        Poll::Ready(Err(elapsed)) => assert!(elapsed.is_shut_down()),
        other => panic!("expected a shut-down timeout, got {other:?}"),
    }
    // A sleep made after the shutdown ends at once too.
    assert!(poll(&mut timer.sleep(ms(10)), &waker).is_ready());
}

#[test]
fn sleeps_and_timeouts_on_every_executor() {
    let timer = Timer::builder().build().unwrap();
    on_every_executor(|| {
        let timer = timer.clone();
        async move {
            let start = timer.now();
            timer.sleep(ms(5)).await;
            assert!(timer.now() - start >= ms(5), "never early");
            let fast = timer.timeout(ms(10_000), async { "value" }).await;
            assert_eq!(fast, Ok("value"));
            let slow = timer.timeout(ms(5), timer.sleep(ms(10_000))).await;
            assert!(slow.is_err());
            assert!(timer.now() - start >= ms(10));
        }
    });
    assert!(timer.is_empty());
}

#[test]
fn ten_thousand_concurrent_sleeps_on_tokio_all_end_after_their_deadlines() {
    let timer = Timer::builder().build().unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    let early = Arc::new(AtomicUsize::new(0));
    runtime.block_on(async {
        let tasks: Vec<_> = (0..10_000u64)
            .map(|i| {
                let timer = timer.clone();
                let early = Arc::clone(&early);
                tokio::spawn(async move {
                    let deadline = timer.now() + Duration::from_micros(100 * (i % 500));
                    timer.sleep_until(deadline).await;
                    if timer.now() < deadline {
                        early.fetch_add(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        for task in tasks {
            tokio::time::timeout(PATIENCE, task)
                .await
                .expect("hung")
                .unwrap();
        }
    });
    assert_eq!(early.load(Ordering::SeqCst), 0);
    assert!(timer.is_empty());
}

/// An operation that completes when its gate opens.
struct Gate {
    open: Arc<AtomicBool>,
    delay: Duration,
}

impl DelayedOperation for Gate {
    fn delay(&self) -> Duration {
        self.delay
    }
    fn try_complete(&mut self) -> bool {
        self.open.load(Ordering::SeqCst)
    }
    fn on_complete(&mut self, _: Completion) {}
}

#[test]
fn a_parked_operation_resolves_with_how_it_ended_on_every_executor() {
    let clock = ManualClock::new();
    let purgatory: Purgatory<u32, Gate> = Purgatory::builder()
        .timer(Timer::builder().clock(clock.clone()))
        .build()
        .unwrap();
    let purgatory = Arc::new(purgatory);
    let clock = Arc::new(clock);
    on_every_executor(|| {
        let purgatory = Arc::clone(&purgatory);
        let clock = Arc::clone(&clock);
        async move {
            let open = Arc::new(AtomicBool::new(false));
            let gate = |delay| Gate {
                open: Arc::clone(&open),
                delay,
            };
            // Satisfied by an event on its key, from another thread.
            let satisfied = purgatory.park(gate(ms(60_000)), [1]).unwrap();
            let (opener, event) = (Arc::clone(&open), Arc::clone(&purgatory));
            let thread = std::thread::spawn(move || {
                opener.store(true, Ordering::SeqCst);
                event.check_and_complete(&1)
            });
            assert_eq!(satisfied.await, Some(Completion::Satisfied));
            assert_eq!(thread.join().unwrap(), Ok(1));
            open.store(false, Ordering::SeqCst);
            // Forced.
            let forced = purgatory.park(gate(ms(60_000)), [2]).unwrap();
            assert!(forced.force_complete());
            assert_eq!(forced.await, Some(Completion::Forced));
            // Expired: the clock passes its delay.
            let expired = purgatory.park(gate(ms(10)), [3]).unwrap();
            clock.advance(ms(10));
            assert_eq!(expired.await, Some(Completion::Expired));
            // Cancelled: handed back, never completed.
            let cancelled = purgatory.park(gate(ms(60_000)), [4]).unwrap();
            assert_eq!(purgatory.cancel_for_key(&4).unwrap().len(), 1);
            assert_eq!(cancelled.await, None);
            // Completed at once by park.
            open.store(true, Ordering::SeqCst);
            let at_once = purgatory.park(gate(ms(60_000)), [5]).unwrap();
            assert!(at_once.completed_now());
            assert_eq!(at_once.await, Some(Completion::Satisfied));
        }
    });
}

#[test]
fn a_parked_future_resolves_once_and_answers_the_same_when_polled_again() {
    let purgatory: Purgatory<u32, Gate> = Purgatory::builder().build().unwrap();
    let open = Arc::new(AtomicBool::new(false));
    let mut parked = purgatory
        .park(
            Gate {
                open,
                delay: ms(60_000),
            },
            [1],
        )
        .unwrap();
    let (counter, waker, woken) = counter();
    assert!(poll(&mut parked, &waker).is_pending());
    assert_eq!(parked.outcome(), None);
    assert!(parked.force_complete());
    woken.recv_timeout(PATIENCE).unwrap();
    assert_eq!(
        poll(&mut parked, &waker),
        Poll::Ready(Some(Completion::Forced))
    );
    assert_eq!(
        poll(&mut parked, &waker),
        Poll::Ready(Some(Completion::Forced))
    );
    assert_eq!(
        parked.outcome(),
        Some(Outcome::Completed(Completion::Forced))
    );
    assert_eq!(counter.woken.load(Ordering::SeqCst), 1);
}

#[test]
fn dropping_a_parked_future_leaves_the_operation_unless_asked_to_cancel() {
    let purgatory: Purgatory<u32, Gate> = Purgatory::builder().build().unwrap();
    let open = Arc::new(AtomicBool::new(false));
    let gate = || Gate {
        open: Arc::clone(&open),
        delay: ms(60_000),
    };
    drop(purgatory.park(gate(), [1]).unwrap());
    assert_eq!(purgatory.delayed(), 1, "a dropped handle leaves it parked");
    let request = purgatory.park(gate(), [2]).unwrap().cancel_on_drop();
    assert_eq!(purgatory.delayed(), 2);
    drop(request);
    assert_eq!(purgatory.delayed(), 1, "cancel_on_drop cancels it");
    assert_eq!(purgatory.metrics().cancelled, 1);
    open.store(true, Ordering::SeqCst);
    assert_eq!(purgatory.check_and_complete(&1), Ok(1));
    assert_eq!(purgatory.check_and_complete(&2), Ok(0));
}

#[test]
fn shutting_a_purgatory_down_resolves_its_parked_futures() {
    let purgatory: Purgatory<u32, Gate> = Purgatory::builder().build().unwrap();
    let parked = purgatory
        .park(
            Gate {
                open: Arc::new(AtomicBool::new(false)),
                delay: ms(60_000),
            },
            [1],
        )
        .unwrap();
    let waiter = std::thread::spawn(move || futures_executor::block_on(parked));
    purgatory.shutdown();
    assert_eq!(waiter.join().unwrap(), Some(Completion::ShutDown));
}

#[test]
fn keyed_expirations_stream_in_deadline_order_and_end_with_the_keyed_timer() {
    let (clock, timer) = manual();
    let (sessions, mut expired) = KeyedTimer::with_expirations(&timer);
    for (member, secs) in [("c", 30), ("a", 10), ("b", 20)] {
        sessions
            .set(member, secs, Duration::from_secs(secs))
            .unwrap();
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime.block_on(async {
        let (_, waker, _) = counter();
        assert!(expired
            .poll_expired(&mut Context::from_waker(&waker))
            .is_pending());
        clock.advance(Duration::from_secs(10));
        assert_eq!(expired.next_expired().await, Some(("a", 10)));
        assert!(sessions.reset(&"b", Duration::from_secs(100)));
        clock.advance(Duration::from_secs(20));
        assert_eq!(expired.next_expired().await, Some(("c", 30)));
        assert_eq!(sessions.len(), 1);
        drop(sessions);
        assert_eq!(expired.next_expired().await, None);
    });
    assert!(timer.is_empty(), "the dropped keyed timer cancelled b");
}

#[cfg(feature = "stream")]
#[test]
fn keyed_expirations_are_a_futures_stream() {
    use futures_util::StreamExt;
    let (clock, timer) = manual();
    let (sessions, mut expired) = KeyedTimer::with_expirations(&timer);
    for i in 0..100u32 {
        sessions.set(i, (), ms(u64::from(i) + 1)).unwrap();
    }
    clock.advance(ms(100));
    let mut keys: Vec<u32> =
        futures_executor::block_on(expired.by_ref().map(|(k, ())| k).take(100).collect());
    keys.sort_unstable();
    assert_eq!(keys, (0..100).collect::<Vec<_>>());
    drop(sessions);
    assert_eq!(futures_executor::block_on(expired.next()), None);
}

#[test]
fn shutdown_async_does_not_block_the_runtime_thread() {
    let timer = Timer::builder().build().unwrap();
    timer.schedule(ms(60_000), || ()).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let never_ran = runtime.block_on(async {
        // A task that runs on the same (only) runtime thread meanwhile.
        let other = tokio::spawn(async { 5 });
        let never_ran = timer.shutdown_async().await;
        assert_eq!(other.await.unwrap(), 5);
        never_ran
    });
    assert_eq!(never_ran.len(), 1);
    assert!(timer.is_shut_down());
}

#[test]
fn dropping_the_last_timer_inside_a_runtime_ends_its_pending_sleeps() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    runtime.block_on(async {
        let clock = ManualClock::new();
        let timer = TimerBuilder::new().clock(clock).build().unwrap();
        let mut sleep = timer.sleep(ms(60_000));
        let (_, waker, _) = counter();
        assert!(poll(&mut sleep, &waker).is_pending());
        let never_polled = timer.sleep(ms(60_000));
        drop(timer); // a sleep does not keep the timer: this shuts it down
        (&mut sleep).await;
        assert!(!sleep.is_elapsed(), "ended by the shutdown, not the clock");
        never_polled.await; // ends at once too
    });
}

#[test]
fn a_dropped_parked_future_lets_go_of_its_task() {
    let purgatory: Purgatory<u32, Gate> = Purgatory::builder().build().unwrap();
    let open = Arc::new(AtomicBool::new(false));
    let mut parked = purgatory
        .park(
            Gate {
                open: Arc::clone(&open),
                delay: ms(60_000),
            },
            [1],
        )
        .unwrap();
    let (counter, waker, _) = counter();
    assert!(poll(&mut parked, &waker).is_pending());
    assert_eq!(
        Arc::strong_count(&counter),
        3,
        "ours, the waker, the slot's clone"
    );
    drop(parked); // lost a select!: the operation stays parked
    assert_eq!(
        Arc::strong_count(&counter),
        2,
        "the slot let go of the waker"
    );
    open.store(true, Ordering::SeqCst);
    assert_eq!(purgatory.check_and_complete(&1), Ok(1));
    assert_eq!(
        counter.woken.load(Ordering::SeqCst),
        0,
        "nobody woken for nothing"
    );
}

#[test]
fn a_dropped_expirations_stream_keeps_nothing() {
    let (clock, timer) = manual();
    let (sessions, expired) = KeyedTimer::<u32, Arc<()>>::with_expirations(&timer);
    let value = Arc::new(());
    sessions.set(0, Arc::clone(&value), ms(1)).unwrap();
    drop(expired);
    for key in 1..1000 {
        sessions.set(key, Arc::clone(&value), ms(1)).unwrap();
    }
    clock.advance(ms(1));
    let start = std::time::Instant::now();
    while sessions.metrics().expired < 1000 {
        assert!(start.elapsed() < PATIENCE, "the entries never expired");
        std::thread::sleep(ms(1));
    }
    // The callback may still be returning; every value is let go at once.
    while Arc::strong_count(&value) > 1 {
        assert!(
            start.elapsed() < PATIENCE,
            "expired values kept: {}",
            Arc::strong_count(&value)
        );
        std::thread::sleep(ms(1));
    }
}

/// A long-poll that answers with the records past its offset: at once if
/// there are some, when a produce brings some, or empty at `max_wait`.
struct LongPoll {
    log: Arc<std::sync::Mutex<Vec<u32>>>,
    offset: usize,
    max_wait: Duration,
}

impl purgatorio::DelayedRequest for LongPoll {
    type Output = (Completion, Vec<u32>);
    fn delay(&self) -> Duration {
        self.max_wait
    }
    fn try_complete(&mut self) -> bool {
        self.log.lock().unwrap().len() > self.offset
    }
    fn answer(&mut self, completion: Completion) -> (Completion, Vec<u32>) {
        (completion, self.log.lock().unwrap()[self.offset..].to_vec())
    }
}

#[test]
fn one_await_gives_a_parked_requests_answer_on_every_executor() {
    let clock = ManualClock::new();
    let purgatory: Purgatory<&'static str, LongPoll> = Purgatory::builder()
        .timer(Timer::builder().clock(clock.clone()))
        .build()
        .unwrap();
    let (purgatory, clock) = (Arc::new(purgatory), Arc::new(clock));
    on_every_executor(|| {
        let (purgatory, clock) = (Arc::clone(&purgatory), Arc::clone(&clock));
        async move {
            let log = Arc::new(std::sync::Mutex::new(vec![1]));
            let poll = |offset| LongPoll {
                log: Arc::clone(&log),
                offset,
                max_wait: ms(500),
            };
            // Data there already: answered by park itself.
            let at_once = purgatory.park(poll(0), ["t"]).unwrap();
            assert!(at_once.completed_now());
            assert_eq!(at_once.await, Some((Completion::Satisfied, vec![1])));
            // Data from a produce on another thread.
            let waiting = purgatory.park(poll(1), ["t"]).unwrap();
            let (producer, log2) = (Arc::clone(&purgatory), Arc::clone(&log));
            let produce = std::thread::spawn(move || {
                log2.lock().unwrap().push(2);
                producer.check_and_complete("t").unwrap()
            });
            assert_eq!(waiting.await, Some((Completion::Satisfied, vec![2])));
            assert_eq!(produce.join().unwrap(), 1);
            // No data before max_wait: an empty answer, never early.
            let empty = purgatory.park(poll(2), ["t"]).unwrap();
            clock.advance(ms(499));
            assert!(empty.outcome().is_none(), "answered before max_wait");
            clock.advance(ms(1));
            assert_eq!(empty.await, Some((Completion::Expired, vec![])));
            // Taken back: no answer.
            let cancelled = purgatory.park(poll(2), ["t"]).unwrap();
            assert!(cancelled.cancel().is_some());
            assert_eq!(cancelled.await, None);
        }
    });
}

/// An answer that counts its drops and checks where it is dropped.
struct Counted(Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

struct Answers {
    drops: Arc<AtomicUsize>,
    open: Arc<AtomicBool>,
}

impl purgatorio::DelayedRequest for Answers {
    type Output = Counted;
    fn delay(&self) -> Duration {
        ms(60_000)
    }
    fn try_complete(&mut self) -> bool {
        self.open.load(Ordering::SeqCst)
    }
    fn answer(&mut self, _: Completion) -> Counted {
        Counted(Arc::clone(&self.drops))
    }
}

#[test]
fn an_answer_nobody_awaits_is_dropped_once_whoever_goes_first() {
    let purgatory: Purgatory<u32, Answers> = Purgatory::builder().build().unwrap();
    let drops = Arc::new(AtomicUsize::new(0));
    let open = Arc::new(AtomicBool::new(false));
    let op = || Answers {
        drops: Arc::clone(&drops),
        open: Arc::clone(&open),
    };
    // The handle goes before the completion: the completer drops the answer.
    drop(purgatory.park(op(), [1]).unwrap());
    open.store(true, Ordering::SeqCst);
    assert_eq!(purgatory.check_and_complete(&1), Ok(1));
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    // The completion comes first: the handle's drop drops the answer.
    open.store(false, Ordering::SeqCst);
    let parked = purgatory.park(op(), [2]).unwrap();
    assert!(parked.force_complete());
    assert_eq!(drops.load(Ordering::SeqCst), 1, "kept for the handle");
    drop(parked);
    assert_eq!(drops.load(Ordering::SeqCst), 2);
    // try_complete_else_watch keeps no handle: completed at once, dropped.
    open.store(true, Ordering::SeqCst);
    assert!(purgatory.try_complete_else_watch(op(), [3]).unwrap());
    assert_eq!(drops.load(Ordering::SeqCst), 3);
    // Awaited: handed over once; polled again, nothing more.
    let mut parked = purgatory.park(op(), [4]).unwrap();
    let (_, waker, _) = counter();
    match poll(&mut parked, &waker) {
        Poll::Ready(Some(answer)) => drop(answer),
        other => panic!("not answered: {:?}", other.map(|a| a.is_some())),
    }
    assert_eq!(drops.load(Ordering::SeqCst), 4);
    assert!(matches!(poll(&mut parked, &waker), Poll::Ready(None)));
    drop(parked);
    assert_eq!(drops.load(Ordering::SeqCst), 4, "dropped exactly once");
}

#[test]
fn a_sleep_first_polled_after_its_deadline_is_ready_at_once() {
    let (clock, timer) = manual();
    let (_, waker, _) = counter();
    let mut sleep = timer.sleep(ms(100));
    let mut until = timer.sleep_until(timer.now() + ms(100));
    clock.advance(ms(100));
    assert!(sleep.is_elapsed());
    assert!(poll(&mut sleep, &waker).is_ready(), "elapsed, yet pending");
    assert!(poll(&mut until, &waker).is_ready(), "elapsed, yet pending");
    assert_eq!(timer.metrics().scheduled, 0, "nothing scheduled for them");
}

#[test]
fn a_sleep_of_duration_max_never_elapses_as_a_task_of_duration_max_never_runs() {
    let (clock, timer) = manual();
    let (_, waker, _) = counter();
    let mut endless = timer.sleep(Duration::MAX);
    assert!(poll(&mut endless, &waker).is_pending());
    let ran = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&ran);
    timer
        .schedule(Duration::MAX, move || flag.store(true, Ordering::SeqCst))
        .unwrap();
    // Far past the 30 years the deadline reads as.
    clock.advance(Duration::from_secs(86_400 * 365 * 100));
    assert!(!endless.is_elapsed());
    assert!(poll(&mut endless, &waker).is_pending());
    let mut timeout = timer.timeout(Duration::MAX, std::future::pending::<()>());
    assert!(poll(&mut timeout, &waker).is_pending());
    // Shutdown still ends it.
    drop(timer.shutdown());
    assert!(poll(&mut endless, &waker).is_ready());
    assert!(!ran.load(Ordering::SeqCst));
}

#[test]
fn the_timers_shutdown_ends_a_keyed_stream_whose_keyed_timer_is_alive_on_every_executor() {
    on_every_executor(|| async {
        let (clock, timer) = manual();
        let (sessions, mut expired) = KeyedTimer::<String, u32>::with_expirations(&timer);
        sessions.set("ada".to_string(), 1, ms(10)).unwrap();
        sessions.set("bob".to_string(), 2, ms(60_000)).unwrap();
        clock.advance(ms(10));
        assert_eq!(expired.next_expired().await, Some(("ada".to_string(), 1)));
        let shut = std::thread::spawn(move || {
            let never_ran = timer.shutdown();
            (never_ran.len(), timer)
        });
        // Ends, although `sessions` is still held.
        assert_eq!(expired.next_expired().await, None);
        let (returned, _timer) = shut.join().unwrap();
        assert_eq!(returned, 0, "no keyed entry handed back as a user task");
        assert!(!sessions.contains("bob"));
        assert!(sessions.is_empty());
    });
}

#[test]
fn purgatory_and_keyed_shutdown_async_do_not_block_the_runtime_thread() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    runtime.block_on(async {
        struct Wait;
        impl DelayedOperation for Wait {
            fn delay(&self) -> Duration {
                ms(60_000)
            }
            fn try_complete(&mut self) -> bool {
                false
            }
            fn on_complete(&mut self, _: Completion) {}
        }
        let purgatory: Purgatory<u8, Wait> = Purgatory::builder().build().unwrap();
        let parked = purgatory.park(Wait, [1]).unwrap();
        let other = tokio::spawn(async { 5 });
        assert_eq!(purgatory.shutdown_async().await, 1);
        assert_eq!(parked.await, Some(Completion::ShutDown));
        assert_eq!(other.await.unwrap(), 5);
        let sessions = KeyedTimer::new(|_: u8, _: ()| ()).unwrap();
        sessions.set(3, (), ms(60_000)).unwrap();
        assert_eq!(sessions.shutdown_async().await, vec![(3, ())]);
        assert!(sessions.set(4, (), ms(1)).is_err());
    });
}

/// A sleep whose entry fired leaves nothing behind when dropped, and one
/// moved to a later deadline is still removed by its drop after the wheel
/// was polled past its old deadline (the drop may not take the old
/// deadline's passing for its entry's firing).
#[test]
fn dropping_fired_and_moved_sleeps_leaves_no_entry() {
    let (clock, timer) = manual();
    let (_count, waker, _rx) = counter();

    let mut fired = timer.sleep(ms(5));
    let mut moved = timer.sleep(ms(5));
    assert!(poll(&mut fired, &waker).is_pending());
    assert!(poll(&mut moved, &waker).is_pending());
    moved.reset(timer.now() + ms(50));
    assert_eq!(timer.len(), 2);

    clock.advance(ms(10));
    timer.run_due();
    assert_eq!(timer.len(), 1, "the moved sleep fired at its old deadline");
    assert!(poll(&mut fired, &waker).is_ready());
    drop(fired);
    assert!(poll(&mut moved, &waker).is_pending());
    drop(moved);
    assert_eq!(timer.len(), 0, "the moved sleep's entry was left behind");
    assert_eq!(timer.metrics().cancelled, 1);
}
