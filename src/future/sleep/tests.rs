//! A sleep's scenario tests: its home shard, its registration, a clock
//! read before the origin, its size.

use super::*;
use crate::ManualClock;
use std::sync::Arc;
use std::task::Waker;

#[test]
fn a_sleep_made_on_one_thread_goes_to_the_home_of_the_thread_that_polls_it() {
    let clock = ManualClock::new();
    let timer = Timer::builder()
        .clock(clock.clone())
        .driver_thread(false)
        .shards(8)
        .build()
        .expect("timer");
    // Made on one thread, first polled on another, dropped on a third.
    let made = std::thread::spawn({
        let timer = timer.clone();
        move || Box::pin(timer.sleep(Duration::from_millis(10)))
    })
    .join()
    .expect("maker");
    let (mut polled, home) = std::thread::spawn(move || {
        let mut sleep = made;
        let mut cx = Context::from_waker(Waker::noop());
        assert!(sleep.as_mut().poll(&mut cx).is_pending());
        let home = sleep.shard.is_home();
        (sleep, home)
    })
    .join()
    .expect("poller");
    assert!(home, "the entry went to the poller's home shard");
    assert_eq!(timer.len(), 1);
    clock.advance(Duration::from_millis(9));
    timer.run_due();
    let mut cx = Context::from_waker(Waker::noop());
    assert!(polled.as_mut().poll(&mut cx).is_pending(), "early");
    std::thread::spawn(move || drop(polled))
        .join()
        .expect("dropper");
    assert_eq!(timer.len(), 0, "dropped on a third thread, the entry went");
}

/// A sleep's first poll before its deadline registers at the
/// deadline's tick, rounded up; cancelled and polled again it registers
/// anew; a reset into the past completes it at once.
#[test]
fn a_sleep_registers_at_its_deadlines_tick() {
    let timer = Timer::builder().build().expect("timer");
    let time = timer.driver().time();
    let mut cx = Context::from_waker(Waker::noop());
    let before = timer.now();
    let mut sleep = Box::pin(timer.sleep(Duration::from_secs(60)));
    let after = timer.now();
    let deadline = sleep.deadline();
    assert!(before + Duration::from_secs(60) <= deadline);
    assert!(deadline <= after + Duration::from_secs(60));
    assert!(sleep.as_mut().poll(&mut cx).is_pending());
    assert!(sleep.entry.is_some() && timer.len() == 1, "registered");
    let tick = time.resolution().ceil(time.since_origin(deadline));
    assert_eq!(sleep.mark, tick, "the deadline's tick");

    // Cancelled (as a `Timeout` whose future finished does) and polled
    // again: pending, with a new entry, not misreading the old mark.
    sleep.cancel();
    assert_eq!(timer.len(), 0);
    assert!(
        sleep.as_mut().poll(&mut cx).is_pending(),
        "early after a cancel"
    );
    assert_eq!(timer.len(), 1);

    let mut moved = Box::pin(timer.sleep(Duration::from_secs(60)));
    moved.reset(timer.now());
    assert!(
        moved.as_mut().poll(&mut cx).is_ready(),
        "reset into the past"
    );
    assert!(Box::pin(timer.sleep(Duration::ZERO))
        .as_mut()
        .poll(&mut cx)
        .is_ready());
}

/// A clock that can be set anywhere, before the timer's origin too.
#[derive(Debug)]
struct SetClock(std::sync::Mutex<Instant>);

impl crate::Clock for SetClock {
    fn now(&self) -> Instant {
        *self.0.lock().expect("clock")
    }
}

/// A clock that went back to before the timer's origin, a sleep whose
/// deadline lies between that reading and the origin: its entry fires
/// at tick 0 on the next pass, which moves no mark, and the woken sleep
/// still ends (it used to wait for an entry that was gone).
#[test]
fn a_sleep_between_a_reading_before_the_origin_and_the_origin_ends_at_the_next_pass() {
    let base = Instant::now();
    let clock = Arc::new(SetClock(std::sync::Mutex::new(
        base + Duration::from_secs(10),
    )));
    let timer = Timer::builder()
        .clock(Shared(Arc::clone(&clock)))
        .driver_thread(false)
        .build()
        .expect("timer");
    *clock.0.lock().expect("clock") = base + Duration::from_secs(5);
    let mut sleep = Box::pin(timer.sleep_until(base + Duration::from_secs(8)));
    let mut cx = Context::from_waker(Waker::noop());
    assert!(
        sleep.as_mut().poll(&mut cx).is_pending(),
        "before its deadline"
    );
    assert_eq!(timer.len(), 1);
    timer.run_due();
    assert_eq!(timer.len(), 0, "the pass fired the entry at tick 0");
    assert!(sleep.as_mut().poll(&mut cx).is_ready(), "woken, it ends");
}

/// An `Arc` of a clock, as a clock.
#[derive(Debug)]
struct Shared(Arc<SetClock>);

impl crate::Clock for Shared {
    fn now(&self) -> Instant {
        self.0.now()
    }
}

#[test]
fn a_sleep_is_64_bytes() {
    assert_eq!(std::mem::size_of::<Sleep>(), 64);
}
