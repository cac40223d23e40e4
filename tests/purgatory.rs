//! Purgatory semantics, on a manual clock where time matters.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use purgatorio::{
    Completion, DelayedOperation, ManualClock, Outcome, Purgatory, PurgatoryMetrics, ShutDownError,
    Timer, WatchErrorKind,
};
use purgatorio_workloads::proc::threads_named;

const PATIENCE: Duration = Duration::from_secs(20);

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

/// What happened to one operation.
#[derive(Default, Debug)]
struct Record {
    completed: AtomicUsize,
    expired: AtomicUsize,
    tries: AtomicUsize,
}

/// An operation that completes once `ready` is set.
struct Gate {
    ready: Arc<AtomicBool>,
    record: Arc<Record>,
    delay: Duration,
}

impl DelayedOperation for Gate {
    fn delay(&self) -> Duration {
        self.delay
    }
    fn try_complete(&mut self) -> bool {
        self.record.tries.fetch_add(1, Ordering::SeqCst);
        self.ready.load(Ordering::SeqCst)
    }
    fn on_complete(&mut self, completion: Completion) {
        self.record.completed.fetch_add(1, Ordering::SeqCst);
        if matches!(completion, Completion::Expired | Completion::ShutDown) {
            assert_eq!(
                self.record.completed.load(Ordering::SeqCst),
                1,
                "on_complete first"
            );
            self.record.expired.fetch_add(1, Ordering::SeqCst);
        }
    }
}

fn gate(delay: Duration) -> (Gate, Arc<AtomicBool>, Arc<Record>) {
    let ready = Arc::new(AtomicBool::new(false));
    let record = Arc::new(Record::default());
    let op = Gate {
        ready: Arc::clone(&ready),
        record: Arc::clone(&record),
        delay,
    };
    (op, ready, record)
}

fn purgatory<O: DelayedOperation>(clock: &ManualClock) -> Purgatory<&'static str, O> {
    Purgatory::builder()
        .timer(Timer::builder().clock(clock.clone()).workers(2))
        .build()
        .unwrap()
}

fn wait_until(what: &str, f: impl Fn() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < PATIENCE, "gave up waiting for {what}");
        thread::yield_now();
    }
}

#[test]
fn completes_at_once_when_already_satisfied() {
    let clock = ManualClock::new();
    let p = purgatory(&clock);
    let (op, ready, record) = gate(ms(100));
    ready.store(true, Ordering::SeqCst);
    assert!(p.try_complete_else_watch(op, ["a"]).unwrap());
    assert_eq!(record.completed.load(Ordering::SeqCst), 1);
    assert_eq!(
        (p.watched(), p.delayed()),
        (0, 0),
        "never watched nor delayed"
    );
}

#[test]
fn satisfaction_completes_a_watched_operation_exactly_once() {
    let clock = ManualClock::new();
    let p = purgatory(&clock);
    let (op, ready, record) = gate(ms(100));
    assert!(!p.try_complete_else_watch(op, ["a"]).unwrap());
    assert_eq!(
        record.tries.load(Ordering::SeqCst),
        2,
        "tried before and after watching"
    );
    assert_eq!((p.watched(), p.delayed(), p.keys()), (1, 1, 1));
    assert_eq!(p.check_and_complete(&"a").unwrap(), 0, "not ready yet");
    ready.store(true, Ordering::SeqCst);
    assert_eq!(p.check_and_complete(&"a").unwrap(), 1);
    assert_eq!(p.check_and_complete(&"a").unwrap(), 0);
    assert_eq!(
        (p.watched(), p.delayed(), p.keys()),
        (0, 0, 0),
        "key removed, timer cancelled"
    );
    clock.advance(ms(200));
    thread::sleep(ms(20)); // nothing may happen: no assertion on how long this took
    assert_eq!(record.completed.load(Ordering::SeqCst), 1);
    assert_eq!(record.expired.load(Ordering::SeqCst), 0);
    let m = p.metrics();
    assert_eq!((m.satisfied, m.expired), (1, 0));
}

#[test]
fn expiry_completes_then_expires_never_early() {
    let clock = ManualClock::new();
    let p = purgatory(&clock);
    let (op, _ready, record) = gate(ms(100));
    assert!(!p.try_complete_else_watch(op, ["a", "b"]).unwrap());
    clock.advance(ms(99));
    assert!(!p.advance_clock(Duration::ZERO), "nothing due at 99 ms");
    assert_eq!(record.completed.load(Ordering::SeqCst), 0);
    clock.advance(ms(1));
    wait_until("expiry", || record.expired.load(Ordering::SeqCst) == 1);
    assert_eq!(record.completed.load(Ordering::SeqCst), 1);
    assert_eq!(p.delayed(), 0);
    // The expired operation lingers in both lists until checked or purged.
    assert_eq!(p.check_and_complete(&"a").unwrap(), 0);
    assert_eq!(p.check_and_complete(&"b").unwrap(), 0);
    assert_eq!(p.watched(), 0);
    assert_eq!(p.metrics().expired, 1);
}

#[test]
fn empty_keys_are_an_error_and_duplicates_are_watched_once() {
    let clock = ManualClock::new();
    let p = purgatory(&clock);
    let (op, _, record) = gate(ms(100));
    let err = p
        .try_complete_else_watch(op, Vec::<&str>::new())
        .unwrap_err();
    assert_eq!(err.kind(), WatchErrorKind::NoKeys);
    let op = err.into_inner();
    assert_eq!(
        record.tries.load(Ordering::SeqCst),
        0,
        "refused before trying"
    );
    assert!(!p.try_complete_else_watch(op, ["a", "a", "b", "a"]).unwrap());
    assert_eq!((p.watched(), p.keys()), (2, 2));
}

#[test]
fn unknown_keys_complete_and_cancel_nothing() {
    let clock = ManualClock::new();
    let p: Purgatory<&str, Gate> = purgatory(&clock);
    assert_eq!(p.check_and_complete(&"nobody").unwrap(), 0);
    assert!(p.cancel_for_key(&"nobody").unwrap().is_empty());
    assert_eq!(p.keys(), 0);
}

#[test]
fn cancel_for_key_hands_operations_back_untouched() {
    let clock = ManualClock::new();
    let p = purgatory(&clock);
    let mut records = Vec::new();
    for _ in 0..5 {
        let (op, _, record) = gate(ms(100));
        p.try_complete_else_watch(op, ["a", "b"]).unwrap();
        records.push(record);
    }
    let (op, ready, done) = gate(ms(100));
    p.try_complete_else_watch(op, ["a"]).unwrap();
    ready.store(true, Ordering::SeqCst);
    assert_eq!(p.check_and_complete(&"a").unwrap(), 1);
    let back = p.cancel_for_key(&"a").unwrap();
    assert_eq!(back.len(), 5, "the completed one is not handed back");
    assert_eq!(p.delayed(), 0, "their timers are cancelled");
    // Cancelled operations left in "b" are done: checking removes them.
    assert_eq!(p.check_and_complete(&"b").unwrap(), 0);
    assert_eq!(p.watched(), 0);
    clock.advance(ms(500));
    thread::sleep(ms(20));
    for r in &records {
        assert_eq!(r.completed.load(Ordering::SeqCst), 0);
        assert_eq!(r.expired.load(Ordering::SeqCst), 0);
    }
    assert_eq!(done.completed.load(Ordering::SeqCst), 1);
    drop(back);
}

#[test]
fn a_park_sweeps_a_busy_list_of_done_operations_without_a_purge() {
    // No purge job ever runs (the interval is never reached): done entries
    // of a key that keeps being watched still go, swept by the parks that
    // double its list.
    let clock = ManualClock::new();
    let p: Purgatory<&str, Gate> = Purgatory::builder()
        .timer(Timer::builder().clock(clock.clone()))
        .purge_interval(usize::MAX)
        .build()
        .unwrap();
    let parked: Vec<_> = (0..40)
        .map(|_| p.park(gate(ms(60_000)).0, ["busy", "idle"]).unwrap())
        .collect();
    for handle in &parked {
        assert!(handle.force_complete());
    }
    assert_eq!(p.watched(), 80, "done entries linger in both lists");
    // "busy" was swept at 32 entries (none done then), so the push that
    // makes it 64 sweeps it again: the 40 done entries go, 24 live stay.
    let more: Vec<_> = (0..24)
        .map(|_| p.park(gate(ms(60_000)).0, ["busy"]).unwrap())
        .collect();
    let m = p.metrics();
    assert_eq!(m.purged, 40, "{m:?}");
    assert_eq!(p.watched(), 24 + 40, "the idle key keeps its done entries");
    assert_eq!(p.delayed(), 24);
    drop(more);
}

#[test]
fn multi_key_operations_are_purged_from_their_other_lists() {
    let clock = ManualClock::new();
    let p: Purgatory<u32, Gate> = Purgatory::builder()
        .timer(Timer::builder().clock(clock.clone()))
        .purge_interval(10)
        .build()
        .unwrap();
    let ready = Arc::new(AtomicBool::new(false));
    for i in 0..100u32 {
        let op = Gate {
            ready: Arc::clone(&ready),
            record: Arc::new(Record::default()),
            delay: ms(60_000),
        };
        p.try_complete_else_watch(op, [i, 1000 + i, 2000 + i])
            .unwrap();
    }
    assert_eq!(p.watched(), 300);
    ready.store(true, Ordering::SeqCst);
    let mut completed = 0;
    for i in 0..100u32 {
        completed += p.check_and_complete(&i).unwrap();
    }
    assert_eq!(completed, 100);
    // 200 done entries would linger in the other keys' lists; each time more
    // than the purge interval (10) do, a purge runs on the workers. At most
    // the interval's worth may stay.
    wait_until("purges", || p.watched() <= 10);
    let m = p.metrics();
    assert!(m.purged >= 190, "{m:?}");
    // A purge may also take entries that a check was about to remove, but no
    // entry is removed twice.
    assert!(m.purged as usize + m.watched <= 300, "{m:?}");
    // Checking the other keys clears the rest.
    for i in 0..100u32 {
        assert_eq!(p.check_and_complete(&(1000 + i)).unwrap(), 0);
        assert_eq!(p.check_and_complete(&(2000 + i)).unwrap(), 0);
    }
    assert_eq!((p.watched(), p.keys(), p.delayed()), (0, 0, 0));
}

#[test]
fn check_and_complete_racing_expiry_completes_exactly_once() {
    let clock = ManualClock::new();
    let p: Purgatory<u32, Gate> = Purgatory::builder()
        .timer(Timer::builder().clock(clock.clone()).workers(2))
        .build()
        .unwrap();
    let n = 2_000u32;
    let ready = Arc::new(AtomicBool::new(false));
    let records: Vec<Arc<Record>> = (0..n)
        .map(|i| {
            let record = Arc::new(Record::default());
            let op = Gate {
                ready: Arc::clone(&ready),
                record: Arc::clone(&record),
                delay: ms(1 + u64::from(i % 20)),
            };
            assert!(!p.try_complete_else_watch(op, [i % 10]).unwrap());
            record
        })
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let checkers: Vec<_> = (0..2)
        .map(|t| {
            let p = p.clone();
            let stop = Arc::clone(&stop);
            thread::spawn(move || {
                let mut total = 0;
                while !stop.load(Ordering::SeqCst) {
                    for key in 0..10u32 {
                        if key % 2 == t {
                            total += p.check_and_complete(&key).unwrap();
                        }
                    }
                }
                total
            })
        })
        .collect();
    for step in 0..25 {
        if step == 10 {
            ready.store(true, Ordering::SeqCst);
        }
        clock.advance(ms(1));
    }
    wait_until("every operation done", || {
        records
            .iter()
            .all(|r| r.completed.load(Ordering::SeqCst) == 1)
    });
    stop.store(true, Ordering::SeqCst);
    let by_check: usize = checkers.into_iter().map(|c| c.join().unwrap()).sum();
    let mut expired = 0;
    for r in &records {
        assert_eq!(
            r.completed.load(Ordering::SeqCst),
            1,
            "on_complete exactly once"
        );
        expired += r.expired.load(Ordering::SeqCst);
    }
    let m = p.metrics();
    assert_eq!(by_check as u64, m.satisfied);
    assert_eq!(expired as u64, m.expired);
    assert_eq!(m.satisfied + m.expired, u64::from(n));
    assert_eq!(m.delayed, 0);
}

#[test]
fn many_threads_completing_the_same_operations() {
    let clock = ManualClock::new();
    let p = purgatory(&clock);
    let ready = Arc::new(AtomicBool::new(false));
    let records: Vec<_> = (0..1_000)
        .map(|_| {
            let record = Arc::new(Record::default());
            let op = Gate {
                ready: Arc::clone(&ready),
                record: Arc::clone(&record),
                delay: ms(60_000),
            };
            p.try_complete_else_watch(op, ["hot"]).unwrap();
            record
        })
        .collect();
    ready.store(true, Ordering::SeqCst);
    let barrier = Arc::new(Barrier::new(4));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let p = p.clone();
            let barrier = Arc::clone(&barrier);
            thread::spawn(move || {
                barrier.wait();
                p.check_and_complete(&"hot").unwrap()
            })
        })
        .collect();
    let total: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(total, 1_000, "every completion counted once across threads");
    assert!(records
        .iter()
        .all(|r| r.completed.load(Ordering::SeqCst) == 1));
    assert_eq!((p.watched(), p.delayed()), (0, 0));
}

/// An operation whose completion pokes other keys of the same purgatory.
struct Chain {
    purgatory: Arc<Mutex<Option<Purgatory<u32, Chain>>>>,
    key: u32,
    ready: Arc<AtomicBool>,
    done: mpsc::Sender<u32>,
}

impl DelayedOperation for Chain {
    fn delay(&self) -> Duration {
        ms(50)
    }
    fn try_complete(&mut self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }
    fn on_complete(&mut self, completion: Completion) {
        let p = self.purgatory.lock().clone().expect("purgatory");
        // Re-entrant calls from a callback: poke the partner key, which may
        // be completing on another thread and poking ours right now.
        p.check_and_complete(&(self.key ^ 1)).unwrap();
        let _ = p.metrics();
        self.done.send(self.key).unwrap();
        if completion.is_timeout() {
            let p = self.purgatory.lock().clone().expect("purgatory");
            p.check_and_complete(&(self.key ^ 1)).unwrap();
        }
    }
}

#[test]
fn callbacks_may_reenter_without_deadlock() {
    let clock = ManualClock::new();
    let p: Purgatory<u32, Chain> = Purgatory::builder()
        .timer(Timer::builder().clock(clock.clone()))
        .build()
        .unwrap();
    let slot = Arc::new(Mutex::new(Some(p.clone())));
    let (tx, rx) = mpsc::channel();
    let ready = Arc::new(AtomicBool::new(false));
    for key in 0..200u32 {
        let op = Chain {
            purgatory: Arc::clone(&slot),
            key,
            ready: Arc::clone(&ready),
            done: tx.clone(),
        };
        p.try_complete_else_watch(op, [key]).unwrap();
    }
    ready.store(true, Ordering::SeqCst);
    // Pairs (2k, 2k+1) complete on two threads at once; each callback pokes
    // its partner's key while the partner may be locked by the other thread.
    let threads: Vec<_> = (0..2u32)
        .map(|t| {
            let p = p.clone();
            thread::spawn(move || {
                for pair in 0..100u32 {
                    p.check_and_complete(&(2 * pair + t)).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let mut seen: Vec<u32> = (0..200)
        .map(|_| rx.recv_timeout(PATIENCE).unwrap())
        .collect();
    seen.sort();
    assert_eq!(seen, (0..200).collect::<Vec<_>>());
    slot.lock().take();
}

/// On completion, parks a follow-up operation in the same purgatory.
struct Relay {
    purgatory: Arc<Mutex<Option<Purgatory<u32, Relay>>>>,
    hops: u32,
    done: mpsc::Sender<u32>,
}

impl DelayedOperation for Relay {
    fn delay(&self) -> Duration {
        ms(10)
    }
    fn try_complete(&mut self) -> bool {
        false
    }
    fn on_complete(&mut self, _completion: Completion) {
        let p = self.purgatory.lock().clone().expect("purgatory");
        if self.hops > 0 {
            let next = Relay {
                purgatory: Arc::clone(&self.purgatory),
                hops: self.hops - 1,
                done: self.done.clone(),
            };
            assert!(!p.try_complete_else_watch(next, [self.hops]).unwrap());
        }
        self.done.send(self.hops).unwrap();
    }
}

#[test]
fn an_expiring_operation_may_park_another() {
    let clock = ManualClock::new();
    let p: Purgatory<u32, Relay> = Purgatory::builder()
        .timer(Timer::builder().clock(clock.clone()))
        .build()
        .unwrap();
    let slot = Arc::new(Mutex::new(Some(p.clone())));
    let (tx, rx) = mpsc::channel();
    let first = Relay {
        purgatory: Arc::clone(&slot),
        hops: 3,
        done: tx,
    };
    p.try_complete_else_watch(first, [99]).unwrap();
    for expected in [3, 2, 1, 0] {
        clock.advance(ms(10));
        assert_eq!(rx.recv_timeout(PATIENCE).unwrap(), expected);
    }
    assert_eq!(p.metrics().expired, 4);
    slot.lock().take();
}

/// Panics in the callback named by `at`.
struct Panicky {
    at: &'static str,
    delay: Duration,
}

impl DelayedOperation for Panicky {
    fn delay(&self) -> Duration {
        self.delay
    }
    fn try_complete(&mut self) -> bool {
        match self.at {
            "try_complete" => panic!("try_complete failure (expected by the test)"),
            "on_complete" => true,
            _ => false,
        }
    }
    fn on_complete(&mut self, completion: Completion) {
        if self.at == "on_complete" {
            panic!("on_complete failure (expected by the test)");
        }
        if completion.is_timeout() {
            panic!("on_complete failure on expiry (expected by the test)");
        }
    }
}

#[test]
fn panicking_callbacks_are_caught_counted_and_leave_the_operation_done() {
    let clock = ManualClock::new();
    let p: Purgatory<&str, Panicky> = purgatory(&clock);
    // try_complete panics: done without callbacks, not parked.
    let op = Panicky {
        at: "try_complete",
        delay: ms(10),
    };
    assert!(!p.try_complete_else_watch(op, ["a"]).unwrap());
    assert_eq!((p.watched(), p.delayed()), (0, 0));
    // on_complete panics on the immediate path: completed all the same.
    let op = Panicky {
        at: "on_complete",
        delay: ms(10),
    };
    assert!(p.try_complete_else_watch(op, ["a"]).unwrap());
    // on_complete panics on expiry, on the timer's worker.
    let op = Panicky {
        at: "on_expiration",
        delay: ms(10),
    };
    assert!(!p.try_complete_else_watch(op, ["b"]).unwrap());
    clock.advance(ms(10));
    wait_until("expiry", || p.metrics().expired == 1);
    wait_until("third panic", || p.metrics().panics == 3);
    let m: PurgatoryMetrics = p.metrics();
    assert_eq!((m.satisfied, m.expired, m.panics, m.delayed), (1, 1, 3, 0));
    // Still working.
    let (op, ready, record) = gate(ms(10));
    let q: Purgatory<&str, Gate> = purgatory(&clock);
    ready.store(true, Ordering::SeqCst);
    assert!(q.try_complete_else_watch(op, ["a"]).unwrap());
    assert_eq!(record.completed.load(Ordering::SeqCst), 1);
    assert_eq!(p.check_and_complete(&"b").unwrap(), 0);
    // Parked, its handle tells the panic from a cancel.
    let op = Panicky {
        at: "try_complete",
        delay: ms(10),
    };
    let parked = p.park(op, ["c"]).unwrap();
    assert_eq!(parked.outcome(), Some(Outcome::Panicked));
    assert_eq!(p.metrics().panics, 4);
    let op = Panicky {
        at: "never",
        delay: ms(10),
    };
    let parked = p.park(op, ["c"]).unwrap();
    assert!(parked.cancel().is_some());
    assert_eq!(parked.outcome(), Some(Outcome::Cancelled));
}

#[test]
fn shutdown_expires_pending_operations_and_refuses_calls() {
    let clock = ManualClock::new();
    let p = purgatory(&clock);
    let mut records = Vec::new();
    for i in 0..10u64 {
        let (op, _, record) = gate(ms(1000 + i));
        p.try_complete_else_watch(op, ["a", "b"]).unwrap();
        records.push(record);
    }
    assert_eq!(p.shutdown(), 10);
    for r in &records {
        assert_eq!(r.completed.load(Ordering::SeqCst), 1);
        assert_eq!(r.expired.load(Ordering::SeqCst), 1);
    }
    assert_eq!(p.shutdown(), 0, "second shutdown");
    let (op, _, _) = gate(ms(1));
    assert_eq!(
        p.try_complete_else_watch(op, ["a"]).map_err(|e| e.kind()),
        Err(WatchErrorKind::ShutDown)
    );
    assert_eq!(p.check_and_complete(&"a"), Err(ShutDownError));
    assert!(p.cancel_for_key(&"a").is_err());
    assert_eq!((p.watched(), p.delayed()), (0, 0));
}

#[test]
fn dropping_the_last_handle_expires_pending_operations() {
    let clock = ManualClock::new();
    let p = purgatory(&clock);
    let (op, _, record) = gate(ms(1000));
    p.try_complete_else_watch(op, ["a"]).unwrap();
    let clone = p.clone();
    drop(p);
    assert_eq!(
        record.expired.load(Ordering::SeqCst),
        0,
        "a clone keeps it running"
    );
    drop(clone);
    assert_eq!(record.completed.load(Ordering::SeqCst), 1);
    assert_eq!(record.expired.load(Ordering::SeqCst), 1);
}

/// Completes on its second try: the one right after registration.
struct SecondTry(usize, Arc<Record>);

impl DelayedOperation for SecondTry {
    fn delay(&self) -> Duration {
        ms(100)
    }
    fn try_complete(&mut self) -> bool {
        self.0 += 1;
        self.0 >= 2
    }
    fn on_complete(&mut self, _completion: Completion) {
        self.1.completed.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn an_event_during_registration_is_not_missed() {
    let clock = ManualClock::new();
    let p = purgatory(&clock);
    let record = Arc::new(Record::default());
    assert!(p
        .try_complete_else_watch(SecondTry(0, Arc::clone(&record)), ["a", "b", "c"])
        .unwrap());
    assert_eq!(record.completed.load(Ordering::SeqCst), 1);
    assert_eq!(p.delayed(), 0, "never added to the timer");
    // Its entries are done: checking each key removes them.
    for key in ["a", "b", "c"] {
        assert_eq!(p.check_and_complete(&key).unwrap(), 0);
    }
    assert_eq!(p.watched(), 0);
}

#[test]
fn a_parked_handle_completes_its_operation_directly() {
    let clock = ManualClock::new();
    let p = purgatory(&clock);
    let (op, ready, record) = gate(ms(100));
    let parked = p.park(op, ["a", "b"]).unwrap();
    assert!(!parked.completed_now());
    assert!(!parked.try_complete(), "condition false");
    ready.store(true, Ordering::SeqCst);
    assert!(parked.try_complete());
    assert!(parked.is_done());
    assert!(!parked.force_complete(), "already done");
    assert_eq!(record.completed.load(Ordering::SeqCst), 1);
    assert_eq!(p.delayed(), 0, "its timer is cancelled");
    // Its entries linger until their keys are checked.
    assert_eq!(p.watched(), 2);
    assert_eq!(p.check_and_complete(&"a").unwrap(), 0);
    assert_eq!(p.check_and_complete(&"b").unwrap(), 0);
    assert_eq!(p.watched(), 0);

    let (op, _ready, record) = gate(ms(100));
    let parked = p.park(op, ["c"]).unwrap();
    assert!(parked.force_complete(), "whatever the condition");
    assert_eq!(record.completed.load(Ordering::SeqCst), 1);
    clock.advance(ms(200));
    thread::sleep(ms(20));
    assert_eq!(
        record.expired.load(Ordering::SeqCst),
        0,
        "no expiry after completion"
    );

    let (op, ready, _) = gate(ms(100));
    ready.store(true, Ordering::SeqCst);
    assert!(p.park(op, ["d"]).unwrap().completed_now());
}

#[test]
fn force_complete_racing_expiry_completes_exactly_once() {
    let clock = ManualClock::new();
    let p: Purgatory<u32, Gate> = Purgatory::builder()
        .timer(Timer::builder().clock(clock.clone()).workers(2))
        .build()
        .unwrap();
    let mut handles = Vec::new();
    let mut records = Vec::new();
    for i in 0..2_000u32 {
        let (op, _, record) = gate(ms(1 + u64::from(i % 10)));
        handles.push(p.park(op, [i % 7]).unwrap());
        records.push(record);
    }
    let forcer = thread::spawn(move || handles.iter().filter(|h| h.force_complete()).count());
    for _ in 0..12 {
        clock.advance(ms(1));
    }
    let forced = forcer.join().unwrap();
    wait_until("every operation done", || {
        records
            .iter()
            .all(|r| r.completed.load(Ordering::SeqCst) == 1)
    });
    let expired: usize = records
        .iter()
        .map(|r| r.expired.load(Ordering::SeqCst))
        .sum();
    assert_eq!(
        forced + expired,
        2_000,
        "each one exactly once, by one path"
    );
    let m = p.metrics();
    assert_eq!((m.forced as usize, m.expired as usize), (forced, expired));
}

/// Reads its condition, then (on the try after `park` watched it) lets
/// another thread report the event while the lock is still held, and only
/// then answers what it read: the interleaving in which the event arrives
/// between the read and the unlock, made deterministic.
struct Handshake {
    ready: Arc<AtomicBool>,
    tries: usize,
    go: mpsc::Sender<()>,
    reported: mpsc::Receiver<()>,
    record: Arc<Record>,
}

impl DelayedOperation for Handshake {
    fn delay(&self) -> Duration {
        Duration::from_secs(3600)
    }
    fn try_complete(&mut self) -> bool {
        let seen = self.ready.load(Ordering::SeqCst);
        self.tries += 1;
        if self.tries == 2 {
            self.go.send(()).unwrap();
            self.reported
                .recv_timeout(PATIENCE)
                .expect("event reported");
        }
        seen
    }
    fn on_complete(&mut self, _completion: Completion) {
        self.record.completed.fetch_add(1, Ordering::SeqCst);
    }
}

/// An event reported by `check_and_complete` while `park` holds the
/// operation's lock after watching it (the checker finds the lock taken and
/// leaves a retry) is not lost: `park` honours the retry and completes it.
/// (Found by the loom model `watch_races_check_and_complete_and_purge`.)
#[test]
fn an_event_reported_during_registration_is_not_lost() {
    let clock = ManualClock::new();
    let p: Purgatory<&str, Handshake> = purgatory(&clock);
    let (go, went) = mpsc::channel();
    let (report, reported) = mpsc::channel();
    let ready = Arc::new(AtomicBool::new(false));
    let record = Arc::new(Record::default());
    let op = Handshake {
        ready: Arc::clone(&ready),
        tries: 0,
        go,
        reported,
        record: Arc::clone(&record),
    };
    let checker = p.clone();
    let checking = thread::spawn(move || {
        went.recv().unwrap();
        ready.store(true, Ordering::SeqCst);
        // The operation is locked by `park`: nothing completes here.
        let completed = checker.check_and_complete(&"k").unwrap();
        report.send(()).unwrap();
        completed
    });
    let parked = p.park(op, ["k"]).unwrap();
    assert_eq!(checking.join().unwrap(), 0);
    assert!(parked.is_done(), "the reported event was lost");
    assert!(parked.completed_now());
    assert_eq!(record.completed.load(Ordering::SeqCst), 1);
    assert_eq!(p.delayed(), 0);
}

// ---------------------------------------------------------------------------
// Issue 10's defects: each hung, spun or counted wrong before its fix. Each
// body runs on its own thread under a watchdog, so a hang fails fast.

/// Runs `body` on a new thread and fails if it does not return within
/// [`PATIENCE`] (the hung thread is left behind; the test fails at once).
fn within<R: Send + 'static>(what: &str, body: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(body());
    });
    match rx.recv_timeout(PATIENCE) {
        Ok(result) => result,
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("{what}: hung for {PATIENCE:?}"),
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("{what}: panicked (see above)"),
    }
}

/// An operation that keeps a purgatory handle and calls it when dropped.
struct CallsOnDrop {
    purgatory: Option<Purgatory<u32, CallsOnDrop>>,
    dropped: mpsc::Sender<usize>,
}

impl DelayedOperation for CallsOnDrop {
    fn delay(&self) -> Duration {
        ms(60_000)
    }
    fn try_complete(&mut self) -> bool {
        false
    }
    fn on_complete(&mut self, _: Completion) {}
}

impl Drop for CallsOnDrop {
    fn drop(&mut self) {
        if let Some(p) = self.purgatory.take() {
            let _ = self.dropped.send(p.watched());
        }
    }
}

#[test]
fn an_operation_whose_drop_calls_the_purgatory_does_not_deadlock() {
    // Defect 1: the operation was dropped inside `Vec::retain` under the
    // watch shard's lock, and its `Drop` waited for that same lock.
    within("drop calling watched()", || {
        let clock = ManualClock::new();
        let p: Purgatory<u32, CallsOnDrop> = Purgatory::builder()
            .watch_shards(1)
            .timer(Timer::builder().clock(clock.clone()).workers(1))
            .build()
            .unwrap();
        let (tx, rx) = mpsc::channel();
        let op = CallsOnDrop {
            purgatory: Some(p.clone()),
            dropped: tx,
        };
        let parked = p.park(op, [1]).unwrap();
        assert!(parked.force_complete());
        drop(parked);
        assert_eq!(p.check_and_complete(&1), Ok(0));
        assert_eq!(rx.recv_timeout(PATIENCE).unwrap(), 1, "ran, watched once");
        assert_eq!(p.watched(), 0);
    });
}

#[test]
fn a_lingering_operation_holding_the_last_handle_shuts_down_cleanly() {
    // Defect 2: the purge dropped the operation (and so the last handle)
    // under a shard lock; shutdown's drain then waited for that lock, the
    // worker hung and the threads were never joined.
    within("last handle inside a lingering operation", || {
        let clock = ManualClock::new();
        let p: Purgatory<u32, CallsOnDrop> = Purgatory::builder()
            .purge_interval(0)
            .timer(
                Timer::builder()
                    .clock(clock.clone())
                    .workers(1)
                    .thread_name("lingr"),
            )
            .build()
            .unwrap();
        wait_until("the driver and the worker to start", || {
            threads_named("lingr") == 2
        });
        let (tx, rx) = mpsc::channel();
        let op = CallsOnDrop {
            purgatory: Some(p.clone()),
            dropped: tx,
        };
        let parked = p.park(op, [1, 2]).unwrap();
        assert!(parked.force_complete());
        drop(parked);
        assert_eq!(p.check_and_complete(&1), Ok(0)); // lingers on 2; a purge is queued
        drop(p);
        rx.recv_timeout(PATIENCE).unwrap();
        let start = Instant::now();
        while threads_named("lingr") > 0 {
            assert!(start.elapsed() < PATIENCE, "purgatory threads left running");
            thread::yield_now();
        }
    });
}

/// An operation whose `try_complete` reports its own key.
struct ReportsItself {
    purgatory: Arc<Mutex<Option<Purgatory<u32, ReportsItself>>>>,
    tries: Arc<AtomicUsize>,
}

impl DelayedOperation for ReportsItself {
    fn delay(&self) -> Duration {
        ms(60_000)
    }
    fn try_complete(&mut self) -> bool {
        self.tries.fetch_add(1, Ordering::SeqCst);
        let p = self.purgatory.lock().clone();
        if let Some(p) = p {
            assert_eq!(p.check_and_complete(&1), Ok(0));
        }
        false
    }
    fn on_complete(&mut self, _: Completion) {}
}

#[test]
fn try_complete_reporting_its_own_key_gets_one_more_attempt_not_a_livelock() {
    // Defect 3: the nested call raised the retry flag on the operation the
    // thread itself held, and the retry loop never ended (100 % CPU).
    within("try_complete reporting its own key", || {
        let p: Purgatory<u32, ReportsItself> = Purgatory::builder().build().unwrap();
        let slot = Arc::new(Mutex::new(Some(p.clone())));
        let tries = Arc::new(AtomicUsize::new(0));
        let op = ReportsItself {
            purgatory: Arc::clone(&slot),
            tries: Arc::clone(&tries),
        };
        assert!(!p.try_complete_else_watch(op, [1]).unwrap());
        // Try, watch, try again, and the one extra attempt its own report earned.
        assert_eq!(tries.load(Ordering::SeqCst), 3);
        // Reported from outside, it is tried once and again once for the
        // report its own try made.
        assert_eq!(p.check_and_complete(&1), Ok(0));
        assert_eq!(tries.load(Ordering::SeqCst), 5);
        slot.lock().take();
    });
}

/// Shuts its purgatory down from `on_complete`.
struct ShutsDown {
    purgatory: Arc<Mutex<Option<Purgatory<u32, ShutsDown>>>>,
    ready: Arc<AtomicBool>,
    record: Arc<Record>,
}

impl DelayedOperation for ShutsDown {
    fn delay(&self) -> Duration {
        ms(60_000)
    }
    fn try_complete(&mut self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }
    fn on_complete(&mut self, completion: Completion) {
        self.record.completed.fetch_add(1, Ordering::SeqCst);
        let p = self.purgatory.lock().take();
        if let Some(p) = p {
            p.shutdown();
        }
        if matches!(completion, Completion::Expired | Completion::ShutDown) {
            self.record.expired.fetch_add(1, Ordering::SeqCst);
        }
    }
}

#[test]
fn shutdown_from_on_complete_of_an_operation_still_watched_elsewhere() {
    // Defect 4: shutdown's expiry pass waited for the lock of the very
    // operation whose `on_complete` called it (it was still in key 3's list).
    within("shutdown from on_complete", || {
        let clock = ManualClock::new();
        let p: Purgatory<u32, ShutsDown> = purgatory_on(&clock);
        let slot = Arc::new(Mutex::new(Some(p.clone())));
        let ready = Arc::new(AtomicBool::new(false));
        let record = Arc::new(Record::default());
        let op = ShutsDown {
            purgatory: Arc::clone(&slot),
            ready: Arc::clone(&ready),
            record: Arc::clone(&record),
        };
        assert!(!p.try_complete_else_watch(op, [1, 3]).unwrap());
        // Another operation, pending, that the shutdown must expire.
        let other_record = Arc::new(Record::default());
        let other = ShutsDown {
            purgatory: Arc::new(Mutex::new(None)),
            ready: Arc::new(AtomicBool::new(false)),
            record: Arc::clone(&other_record),
        };
        assert!(!p.try_complete_else_watch(other, [2]).unwrap());
        ready.store(true, Ordering::SeqCst);
        assert_eq!(p.check_and_complete(&1), Ok(1));
        assert_eq!(record.completed.load(Ordering::SeqCst), 1);
        assert_eq!(record.expired.load(Ordering::SeqCst), 0);
        assert_eq!(other_record.completed.load(Ordering::SeqCst), 1);
        assert_eq!(other_record.expired.load(Ordering::SeqCst), 1);
        assert_eq!(p.check_and_complete(&3), Err(ShutDownError));
    });
}

fn purgatory_on<O: DelayedOperation>(clock: &ManualClock) -> Purgatory<u32, O> {
    Purgatory::builder()
        .timer(Timer::builder().clock(clock.clone()).workers(2))
        .build()
        .unwrap()
}

#[test]
fn the_purge_is_not_a_delayed_operation_and_needs_no_tick() {
    // Defect 7: the purge job went through the wheel, so `delayed()` counted
    // it and it waited for the next tick (for ever on a clock that stays).
    within("purge without a tick", || {
        let clock = ManualClock::new();
        let p: Purgatory<u32, Gate> = Purgatory::builder()
            .purge_interval(0)
            .timer(Timer::builder().clock(clock.clone()).workers(1))
            .build()
            .unwrap();
        // Mid-tick, where a zero delay used to round up to the next tick.
        clock.advance(Duration::from_micros(15_500));
        let (op, ready, record) = gate(ms(60_000));
        assert!(!p.try_complete_else_watch(op, [1, 2]).unwrap());
        ready.store(true, Ordering::SeqCst);
        assert_eq!(p.check_and_complete(&1), Ok(1));
        assert_eq!(record.completed.load(Ordering::SeqCst), 1);
        assert_eq!(p.delayed(), 0, "nothing waits in the timer");
        // The clock never moves, yet the purge runs and empties key 2.
        wait_until("the purge", || p.metrics().purged == 1);
        assert_eq!(p.watched(), 0);
        assert_eq!(p.delayed(), 0);
    });
}

/// Operations parked on one thread and completed on another: the
/// completing thread leaves each expiry for the parking thread or the
/// driver to remove. The counts never include a given-up expiry, and once
/// the deadlines have passed none of them fired: the driver removes what
/// waits before it polls, and the parking thread removes it in batches as
/// it parks again.
#[test]
fn expiries_of_operations_completed_on_another_thread_never_fire() {
    const OPS: usize = 1_000;
    let clock = ManualClock::new();
    // Threads take shards round-robin: with this many, the completing
    // thread's shard is not this one's.
    let timer = Timer::builder()
        .clock(clock.clone())
        .shards(purgatorio::MAX_SHARDS)
        .driver_thread(false)
        .build()
        .unwrap();
    let p: Purgatory<&'static str, Gate> =
        Purgatory::builder().shared_timer(&timer).build().unwrap();
    // Parks `OPS` operations here and completes them on another thread.
    let park_and_complete_elsewhere = || {
        let mut records = Vec::new();
        let mut handles = Vec::new();
        for _ in 0..OPS {
            let (op, ready, record) = gate(ms(100));
            handles.push(p.park(op, ["k"]).unwrap());
            records.push((ready, record));
        }
        let completed = thread::scope(|s| {
            s.spawn(|| {
                for (ready, _) in &records {
                    ready.store(true, Ordering::SeqCst);
                }
                p.check_and_complete(&"k").unwrap()
            })
            .join()
            .unwrap()
        });
        assert_eq!(completed, OPS);
        assert_eq!(p.delayed(), 0);
        records
            .into_iter()
            .map(|(_, record)| record)
            .collect::<Vec<_>>()
    };
    let check = |records: &[Arc<Record>]| {
        for record in records {
            assert_eq!(record.completed.load(Ordering::SeqCst), 1);
            assert_eq!(record.expired.load(Ordering::SeqCst), 0);
        }
    };

    // The driver's pass.
    let first = park_and_complete_elsewhere();
    let m = timer.metrics();
    assert_eq!((m.pending, m.cancelled), (0, OPS as u64), "{m:?}");
    assert_eq!(timer.len(), 0);
    clock.advance(ms(100));
    assert_eq!(
        timer.run_due(),
        0,
        "a given-up expiry never reaches a worker"
    );
    check(&first);

    // The parking thread, parking again.
    let second = park_and_complete_elsewhere();
    let (op, _ready, last) = gate(ms(100));
    let pending = p.park(op, ["other"]).unwrap();
    let m = timer.metrics();
    assert_eq!((m.pending, m.cancelled), (1, 2 * OPS as u64), "{m:?}");
    clock.advance(ms(100));
    assert_eq!(
        timer.run_due(),
        1,
        "only the pending operation's expiry runs"
    );
    wait_until("the expiry to run on a worker", || {
        last.expired.load(Ordering::SeqCst) == 1
    });
    assert!(pending.is_done());
    check(&second);
    let m = timer.metrics();
    assert_eq!(
        (m.pending, m.expired, m.cancelled),
        (0, 1, 2 * OPS as u64),
        "{m:?}"
    );
}
