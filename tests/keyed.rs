//! Keyed timers: set, reset, remove, drain, on a manual clock.

use std::collections::HashSet;
use std::sync::mpsc;
use std::time::Duration;

use purgatorio::{KeyedTimer, ManualClock, Timer};

const PATIENCE: Duration = Duration::from_secs(20);

fn secs(v: u64) -> Duration {
    Duration::from_secs(v)
}

fn keyed(clock: &ManualClock) -> (KeyedTimer<u32, String>, mpsc::Receiver<(u32, String)>) {
    let (tx, rx) = mpsc::channel();
    let timer = KeyedTimer::with_timer(Timer::builder().clock(clock.clone()), move |k, v| {
        tx.send((k, v)).unwrap();
    })
    .unwrap();
    (timer, rx)
}

#[test]
fn expiry_hands_key_and_value_to_the_callback() {
    let clock = ManualClock::new();
    let (t, rx) = keyed(&clock);
    t.set(1, "one".into(), secs(10)).unwrap();
    t.set(2, "two".into(), secs(20)).unwrap();
    clock.advance(secs(10));
    assert_eq!(rx.recv_timeout(PATIENCE).unwrap(), (1, "one".into()));
    assert!(!t.contains(&1));
    assert_eq!(t.len(), 1);
    clock.advance(secs(10));
    assert_eq!(rx.recv_timeout(PATIENCE).unwrap(), (2, "two".into()));
    assert!(t.is_empty());
}

#[test]
fn heartbeats_keep_a_session_alive() {
    let clock = ManualClock::new();
    let (t, rx) = keyed(&clock);
    t.set(7, "session".into(), secs(30)).unwrap();
    for _ in 0..100 {
        clock.advance(secs(29));
        assert!(t.reset(&7, secs(30)), "heartbeat");
    }
    assert!(rx.try_recv().is_err(), "expired despite heartbeats");
    clock.advance(secs(30));
    assert_eq!(rx.recv_timeout(PATIENCE).unwrap(), (7, "session".into()));
    assert!(!t.reset(&7, secs(30)), "gone after expiry");
}

#[test]
fn set_moves_an_existing_key_and_replaces_its_value() {
    let clock = ManualClock::new();
    let (t, rx) = keyed(&clock);
    assert_eq!(t.set(1, "a".into(), secs(10)).unwrap(), None);
    assert_eq!(t.set(1, "b".into(), secs(50)).unwrap(), Some("a".into()));
    clock.advance(secs(10));
    assert!(t.contains(&1));
    clock.advance(secs(40));
    assert_eq!(rx.recv_timeout(PATIENCE).unwrap(), (1, "b".into()));
    assert!(rx.try_recv().is_err(), "one expiry per key");
}

#[test]
fn remove_and_drain_suppress_the_callback() {
    let clock = ManualClock::new();
    let (t, rx) = keyed(&clock);
    for k in 0..10 {
        t.set(k, format!("v{k}"), secs(5)).unwrap();
    }
    assert_eq!(t.remove(&3), Some("v3".into()));
    assert_eq!(t.remove(&3), None);
    let drained: HashSet<u32> = t.drain().into_iter().map(|(k, _)| k).collect();
    assert_eq!(drained.len(), 9);
    assert!(!drained.contains(&3));
    clock.advance(secs(10));
    std::thread::sleep(Duration::from_millis(20)); // nothing may arrive, however long this takes
    assert!(rx.try_recv().is_err());
    assert!(t.is_empty());
}

#[test]
fn setting_again_from_the_callback_works() {
    let clock = ManualClock::new();
    let (tx, rx) = mpsc::channel();
    let slot: std::sync::Arc<parking_lot::Mutex<Option<KeyedTimer<u32, u32>>>> = Default::default();
    let inner = std::sync::Arc::clone(&slot);
    let t = KeyedTimer::with_timer(Timer::builder().clock(clock.clone()), move |k, n: u32| {
        // Set again first, then report: the test advances the clock on the
        // report, and the new deadline must be relative to the old time.
        if n < 3 {
            let t = inner.lock().clone().unwrap();
            t.set(k, n + 1, secs(1)).unwrap();
        }
        tx.send(n).unwrap();
    })
    .unwrap();
    *slot.lock() = Some(t.clone());
    t.set(1, 0, secs(1)).unwrap();
    for n in 0..4 {
        clock.advance(secs(1));
        assert_eq!(rx.recv_timeout(PATIENCE).unwrap(), n);
    }
    slot.lock().take();
}

#[test]
fn shutdown_returns_what_is_left_and_refuses_more() {
    let clock = ManualClock::new();
    let (t, _rx) = keyed(&clock);
    t.set(1, "x".into(), secs(5)).unwrap();
    assert_eq!(t.shutdown(), vec![(1, "x".to_string())]);
    let err = t.set(2, "y".into(), secs(5)).unwrap_err();
    assert_eq!(err.into_inner(), (2, "y".to_string()));
}

#[test]
fn metrics_count_what_happened_to_the_keys_and_panics() {
    let clock = ManualClock::new();
    let keyed = KeyedTimer::with_timer(Timer::builder().clock(clock.clone()), |key: u32, _: ()| {
        if key == 13 {
            panic!("expected by the test");
        }
    })
    .unwrap();
    keyed.set(1, (), Duration::from_millis(10)).unwrap();
    keyed.set(1, (), Duration::from_millis(10)).unwrap(); // moved
    assert!(keyed.reset(&1, Duration::from_millis(10))); // moved
    keyed.set(2, (), Duration::from_secs(60)).unwrap();
    keyed.set(13, (), Duration::from_millis(10)).unwrap();
    assert_eq!(keyed.remove(&2), Some(()));
    clock.advance(Duration::from_millis(10));
    let start = std::time::Instant::now();
    while keyed.metrics().expired < 2 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{:?}",
            keyed.metrics()
        );
        std::thread::yield_now();
    }
    let start = std::time::Instant::now();
    while keyed.metrics().panics < 1 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{:?}",
            keyed.metrics()
        );
        std::thread::yield_now();
    }
    let m = keyed.metrics();
    assert_eq!(
        (m.len, m.inserted, m.moved, m.removed, m.expired, m.panics),
        (0, 3, 2, 1, 2, 1)
    );
}

#[test]
fn string_keys_are_looked_up_by_str() {
    let clock = ManualClock::new();
    let (tx, rx) = mpsc::channel();
    let sessions = KeyedTimer::with_timer(
        Timer::builder().clock(clock.clone()),
        move |k: String, v: u8| {
            tx.send((k, v)).unwrap();
        },
    )
    .unwrap();
    sessions.set("consumer-1".to_string(), 1, secs(10)).unwrap();
    sessions.set("consumer-2".to_string(), 2, secs(10)).unwrap();
    assert!(sessions.contains("consumer-1"));
    clock.advance(secs(5));
    assert!(sessions.reset("consumer-1", secs(10)));
    assert!(!sessions.reset("nobody", secs(10)));
    clock.advance(secs(5));
    assert_eq!(
        rx.recv_timeout(PATIENCE).unwrap(),
        ("consumer-2".to_string(), 2)
    );
    assert_eq!(sessions.remove("consumer-1"), Some(1));
    assert!(sessions.is_empty());
}

#[test]
fn a_shared_timers_shutdown_removes_keyed_entries_quietly_and_returns_only_user_tasks() {
    let clock = ManualClock::new();
    let timer = Timer::builder().clock(clock.clone()).build().unwrap();
    let (tx, rx) = mpsc::channel();
    let sessions = KeyedTimer::on_timer(&timer, move |k: u32, _: ()| tx.send(k).unwrap());
    sessions.set(1, (), secs(10)).unwrap();
    timer.schedule(secs(10), || ()).unwrap();
    let never_ran = timer.shutdown();
    assert_eq!(never_ran.len(), 1, "only the user's own task comes back");
    for task in never_ran {
        purgatorio::Task::run(task);
    }
    assert!(!sessions.contains(&1), "the key is not left behind");
    assert_eq!(sessions.len(), 0);
    assert_eq!(sessions.metrics().removed, 1);
    assert!(rx.try_recv().is_err(), "no callback, early or late");
    assert!(sessions.set(2, (), secs(1)).is_err());
}

#[test]
fn a_keyed_timers_shutdown_on_a_shared_timer_leaves_the_timer_running() {
    let clock = ManualClock::new();
    let timer = Timer::builder().clock(clock.clone()).build().unwrap();
    let sessions = KeyedTimer::on_timer(&timer, |_: u32, _: ()| ());
    sessions.set(1, (), secs(10)).unwrap();
    let (tx, rx) = mpsc::channel();
    timer
        .schedule(secs(10), move || tx.send(()).unwrap())
        .unwrap();
    assert_eq!(sessions.shutdown(), vec![(1, ())]);
    assert!(!timer.is_shut_down());
    assert_eq!(timer.len(), 1);
    clock.advance(secs(10));
    rx.recv_timeout(PATIENCE).unwrap();
}
