//! Clocks: the `Clock` trait contract, with a user-defined clock driving a
//! threaded `Timer`.

use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use purgatorio::{Clock, ClockWaker, ManualClock, SystemClock, Timer};

/// A simulation clock of the user's own: time in whole seconds, jumps only.
#[derive(Debug, Clone)]
struct SecondsClock {
    origin: Instant,
    state: Arc<Mutex<(u64, Vec<ClockWaker>)>>,
}

impl SecondsClock {
    fn new() -> Self {
        SecondsClock {
            origin: Instant::now(),
            state: Arc::new(Mutex::new((0, Vec::new()))),
        }
    }

    fn jump(&self, seconds: u64) {
        let wakers = {
            let mut state = self.state.lock();
            state.0 += seconds;
            state.1.clone()
        };
        for waker in wakers {
            waker.wake();
        }
    }

    fn wakers(&self) -> usize {
        self.state.lock().1.len()
    }
}

impl Clock for SecondsClock {
    fn now(&self) -> Instant {
        self.origin + Duration::from_secs(self.state.lock().0)
    }

    fn is_real_time(&self) -> bool {
        false
    }

    fn register_waker(&self, waker: ClockWaker) {
        self.state.lock().1.push(waker);
    }
}

#[test]
fn a_custom_clock_drives_the_timer_through_its_waker() {
    let clock = SecondsClock::new();
    let timer: Timer = Timer::builder().clock(clock.clone()).build().unwrap();
    assert_eq!(clock.wakers(), 1, "the timer registered its driver");
    let (tx, rx) = mpsc::channel();
    timer
        .schedule(
            Duration::from_secs(90),
            Box::new(move || tx.send(()).unwrap()),
        )
        .unwrap();
    clock.jump(60);
    assert!(rx.try_recv().is_err());
    clock.jump(60);
    rx.recv_timeout(Duration::from_secs(20))
        .expect("woken by the clock's jump");
    let alive = {
        let state = clock.state.lock();
        state.1.iter().filter(|w| w.is_alive()).count()
    };
    assert_eq!(alive, 1);
    drop(timer);
    assert!(
        clock.state.lock().1.iter().all(|w| !w.is_alive()),
        "a dead timer's waker is dead"
    );
    clock.jump(1); // waking a dead waker is harmless
}

#[test]
fn advancing_after_timers_are_dropped_is_harmless() {
    let clock = ManualClock::new();
    for _ in 0..5 {
        let timer: Timer = Timer::builder()
            .clock(clock.clone())
            .workers(1)
            .build()
            .unwrap();
        drop(timer);
        clock.advance(Duration::from_millis(1));
    }
    assert_eq!(clock.elapsed(), Duration::from_millis(5));
}

#[test]
fn system_clock_is_monotonic_and_real_time() {
    let a = SystemClock.now();
    let b = SystemClock.now();
    assert!(b >= a);
    assert!(SystemClock.is_real_time());
    assert!(!ManualClock::new().is_real_time());
}

#[test]
fn manual_clock_saturates_instead_of_panicking() {
    let clock = ManualClock::new();
    let start = clock.now();
    clock.advance(Duration::MAX);
    clock.advance(Duration::MAX);
    assert!(clock.now() > start);
    assert_eq!(clock.elapsed(), Duration::MAX);
}
