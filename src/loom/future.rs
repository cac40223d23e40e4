//! loom models of the async wake-ups (`--cfg purgatorio_loom`): a task that
//! registers or replaces its waker while the timer fires, completes or
//! shuts down is never left asleep.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use loom::thread;

use super::{builder, model};
use crate::clock::ManualClock;
use crate::purgatory::{Completion, DelayedOperation, DelayedRequest, Purgatory};
use crate::sync::{AtomicUsize, HashState};
use crate::timer::Timer;

/// A waker that counts its wake-ups.
#[derive(Default)]
struct Count(AtomicUsize);

impl Wake for Count {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, SeqCst);
    }
}

/// A counting waker and its count.
fn waker() -> (Arc<Count>, Waker) {
    let count = Arc::new(Count::default());
    (Arc::clone(&count), Waker::from(count))
}

/// A timer whose tasks run inline, where it is driven.
fn inline_timer(clock: &ManualClock) -> Timer {
    builder(clock)
        .executor(crate::timer::Executor::Inline)
        .build()
        .expect("valid timer")
}

/// A task that counts its runs in `ran`.
fn counting(ran: &Arc<AtomicUsize>) -> crate::timer::BoxTask {
    let ran = Arc::clone(ran);
    crate::timer::BoxTask::new(move || {
        ran.fetch_add(1, SeqCst);
    })
}

/// A model thread that moves `clock` on by 1 ms and runs what is due.
fn fire_after_1ms(timer: &Timer, clock: &ManualClock) -> thread::JoinHandle<usize> {
    let (driver, clock) = (timer.clone(), clock.clone());
    thread::spawn(move || {
        clock.advance(Duration::from_millis(1));
        driver.run_due_here()
    })
}

/// Polls `future` once with `waker`.
fn poll<F: Future + Unpin>(future: &mut F, waker: &Waker) -> Poll<F::Output> {
    Pin::new(future).poll(&mut Context::from_waker(waker))
}

/// A sleep polled from a new task while the clock reaches its deadline and
/// the driver fires it: either that poll completes it, or the new task is
/// woken and its next poll does. Never lost, never early, the old task never
/// woken after its waker was replaced.
#[test]
fn a_sleep_moving_to_a_new_task_while_it_fires_is_never_lost() {
    model(
        "a_sleep_moving_to_a_new_task_while_it_fires_is_never_lost",
        || {
            let clock = ManualClock::new();
            let timer = builder(&clock).build().expect("valid timer");
            let mut sleep = timer.sleep(Duration::from_millis(1));
            let (_, first) = waker();
            assert!(poll(&mut sleep, &first).is_pending());

            let firing = fire_after_1ms(&timer, &clock);
            let (second_count, second) = waker();
            let moved = poll(&mut sleep, &second);
            firing.join().unwrap();

            if moved.is_pending() {
                assert_eq!(second_count.0.load(SeqCst), 1, "the new task was not woken");
                assert!(poll(&mut sleep, &second).is_ready());
            }
            assert!(clock.elapsed() >= Duration::from_millis(1));
            drop(sleep);
            assert!(timer.is_empty());
        },
    );
}

/// A sleep polled from a new task while the timer shuts down: that poll
/// completes it, or the new task is woken and then does.
#[test]
fn a_sleep_moving_to_a_new_task_while_the_timer_shuts_down_is_never_lost() {
    model(
        "a_sleep_moving_to_a_new_task_while_the_timer_shuts_down_is_never_lost",
        || poll_racing_shutdown(Before::OtherTask),
    );
}

/// A sleep's first poll (its entry's insert) racing shutdown: the poll
/// completes it, or it inserts before the drain and the drain wakes its
/// task, whose next poll completes it.
#[test]
fn a_sleeps_first_poll_racing_shutdown_is_never_lost() {
    model("a_sleeps_first_poll_racing_shutdown_is_never_lost", || {
        poll_racing_shutdown(Before::Nothing)
    });
}

/// A sleep polled again by the same task while the timer shuts down (the
/// poll that asks whether its entry left the wheel): it ends by the
/// shutdown, not as elapsed.
#[test]
fn a_sleeps_second_poll_racing_shutdown_is_never_lost() {
    model("a_sleeps_second_poll_racing_shutdown_is_never_lost", || {
        poll_racing_shutdown(Before::ThisTask)
    });
}

/// What polled the sleep before the race.
#[derive(Clone, Copy, PartialEq)]
enum Before {
    Nothing,
    /// Another task: the raced poll swaps the waker.
    OtherTask,
    /// The racing task itself.
    ThisTask,
}

/// A sleep polled (after `before`) while the timer shuts down: never left
/// pending with nobody to wake it, ended by the shutdown (not elapsed),
/// nothing left in the wheel.
fn poll_racing_shutdown(before: Before) {
    let clock = ManualClock::new();
    let timer = builder(&clock).build().expect("valid timer");
    let mut sleep = timer.sleep(Duration::from_millis(1));
    let (count, task) = waker();
    match before {
        Before::Nothing => {}
        Before::OtherTask => {
            let (_, first) = waker();
            assert!(poll(&mut sleep, &first).is_pending());
        }
        Before::ThisTask => assert!(poll(&mut sleep, &task).is_pending()),
    }

    let closer = timer.clone();
    let closing = thread::spawn(move || drop(closer.shutdown()));
    let raced = poll(&mut sleep, &task);
    closing.join().unwrap();

    if raced.is_pending() {
        assert_eq!(count.0.load(SeqCst), 1, "the polling task was not woken");
        assert!(poll(&mut sleep, &task).is_ready());
    }
    assert!(!sleep.is_elapsed());
    drop(sleep);
    assert!(timer.is_empty());
}

/// A sleep moved to a later deadline (`reset`) while the driver fires its
/// old one: the move keeps the entry, or finds it fired and the next poll
/// schedules a fresh one. Either way it is pending until the new deadline
/// (a wake-up for the old one is spurious, never a completion) and is
/// woken at it.
#[test]
fn a_sleep_reset_while_it_fires_waits_for_its_new_deadline() {
    model(
        "a_sleep_reset_while_it_fires_waits_for_its_new_deadline",
        || {
            let clock = ManualClock::new();
            let timer = builder(&clock).build().expect("valid timer");
            let start = timer.now();
            let mut sleep = timer.sleep(Duration::from_millis(1));
            let (count, task) = waker();
            assert!(poll(&mut sleep, &task).is_pending());

            let firing = fire_after_1ms(&timer, &clock);
            sleep.reset(start + Duration::from_millis(2));
            firing.join().unwrap();

            assert!(
                poll(&mut sleep, &task).is_pending(),
                "completed before its new deadline"
            );
            let woken = count.0.load(SeqCst);
            clock.advance(Duration::from_millis(1));
            timer.run_due_here();
            assert!(
                count.0.load(SeqCst) > woken,
                "not woken at the new deadline"
            );
            assert!(poll(&mut sleep, &task).is_ready());
            drop(sleep);
            assert!(timer.is_empty());
        },
    );
}

/// A sleep first polled on a thread that does not own the shard, while
/// the owner schedules on it: both lock the shard. Both entries are in the
/// wheel once, and both fire at their tick.
#[test]
fn a_foreign_first_poll_races_the_owners_schedule() {
    model("a_foreign_first_poll_races_the_owners_schedule", || {
        let clock = ManualClock::new();
        let timer = inline_timer(&clock);
        let ran = Arc::new(AtomicUsize::new(0));
        // This thread's first schedule claims the shard: it is the owner.
        timer
            .schedule(Duration::from_millis(1), counting(&ran))
            .unwrap();
        let mut sleep = timer.sleep(Duration::from_millis(1));

        let (count, sleeper) = waker();
        let polling = thread::spawn(move || {
            let first = poll(&mut sleep, &sleeper);
            (sleep, sleeper, first)
        });
        timer
            .schedule(Duration::from_millis(1), counting(&ran))
            .unwrap();
        let (mut sleep, sleeper, first) = polling.join().unwrap();

        assert!(first.is_pending());
        assert_eq!(timer.len(), 3);
        clock.advance(Duration::from_millis(1));
        timer.run_due_here();
        assert_eq!(ran.load(SeqCst), 2);
        assert_eq!(count.0.load(SeqCst), 1, "the sleep was not woken");
        assert!(poll(&mut sleep, &sleeper).is_ready());
        drop(sleep);
        assert!(timer.is_empty());
    });
}

/// Never completes; expires after 1 ms.
struct Wait;

impl DelayedOperation for Wait {
    fn delay(&self) -> Duration {
        Duration::from_millis(1)
    }
    fn try_complete(&mut self) -> bool {
        false
    }
    fn on_complete(&mut self, _: Completion) {}
}

/// A parked operation's task registers its waker while the operation is
/// forced on one thread and expires on another: the task is woken, or its
/// poll sees the outcome, and the outcome is the one completion that won.
#[test]
fn a_parked_operation_wakes_its_task() {
    model("a_parked_operation_wakes_its_task", || {
        let clock = ManualClock::new();
        let purgatory: Purgatory<u8, Wait, HashState> = Purgatory::builder()
            .hasher(HashState::default())
            .watch_shards(1)
            .timer(builder(&clock))
            .build()
            .expect("valid purgatory");
        let mut parked = purgatory.park(Wait, [1]).expect("open");
        clock.advance(Duration::from_millis(1));

        let expirer = purgatory.clone();
        let expiring = thread::spawn(move || expirer.run_due_here());
        let forced = parked.force_complete();
        let (count, task) = waker();
        let first = poll(&mut parked, &task);
        expiring.join().unwrap();

        let outcome = match first {
            Poll::Ready(outcome) => outcome,
            Poll::Pending => {
                assert_eq!(count.0.load(SeqCst), 1, "the task was not woken");
                match poll(&mut parked, &task) {
                    Poll::Ready(outcome) => outcome,
                    Poll::Pending => panic!("woken but not ready"),
                }
            }
        };
        let expected = if forced {
            Completion::Forced
        } else {
            Completion::Expired
        };
        assert_eq!(outcome, Some(expected));
    });
}

/// An answer that counts its drops (a plain atomic: the count is read after
/// the model's threads joined).
struct Answer(Arc<std::sync::atomic::AtomicUsize>);

impl Drop for Answer {
    fn drop(&mut self) {
        self.0.fetch_add(1, SeqCst);
    }
}

/// A request whose answer counts its drops; expires after 1 ms.
struct Request(Arc<std::sync::atomic::AtomicUsize>);

impl DelayedRequest for Request {
    type Output = Answer;
    fn delay(&self) -> Duration {
        Duration::from_millis(1)
    }
    fn try_complete(&mut self) -> bool {
        false
    }
    fn answer(&mut self, _: Completion) -> Answer {
        Answer(Arc::clone(&self.0))
    }
}

/// A purgatory of `Request`s on the model timer.
fn requests(clock: &ManualClock) -> Purgatory<u8, Request, HashState> {
    Purgatory::builder()
        .hasher(HashState::default())
        .watch_shards(1)
        .timer(builder(clock))
        .build()
        .expect("valid purgatory")
}

/// The handle is dropped while another thread completes the request: of the
/// two, exactly one drops the answer (the publisher if the handle went
/// first, the handle's drop otherwise), before either returns, and the
/// answer is neither kept for nobody nor dropped twice.
#[test]
fn an_answer_nobody_awaits_is_dropped_exactly_once() {
    model("an_answer_nobody_awaits_is_dropped_exactly_once", || {
        let clock = ManualClock::new();
        let purgatory = requests(&clock);
        let drops = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let parked = purgatory
            .park(Request(Arc::clone(&drops)), [1])
            .expect("open");
        clock.advance(Duration::from_millis(1));

        let expirer = purgatory.clone();
        let expiring = thread::spawn(move || expirer.run_due_here());
        drop(parked);
        expiring.join().unwrap();

        // The purgatory still holds the operation (its watch list): a count
        // of one here means one of the two racers dropped the answer.
        assert_eq!(drops.load(SeqCst), 1, "answer kept or dropped twice");
        drop(purgatory);
        assert_eq!(drops.load(SeqCst), 1);
    });
}

/// A task awaits the answer while another thread completes the request: it
/// gets the answer exactly once (from the poll that sees it published, or
/// the one after its wake-up), and nothing else drops it.
#[test]
fn an_awaited_answer_is_handed_over_once() {
    model("an_awaited_answer_is_handed_over_once", || {
        let clock = ManualClock::new();
        let purgatory = requests(&clock);
        let drops = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut parked = purgatory
            .park(Request(Arc::clone(&drops)), [1])
            .expect("open");
        clock.advance(Duration::from_millis(1));

        let expirer = purgatory.clone();
        let expiring = thread::spawn(move || expirer.run_due_here());
        let (count, task) = waker();
        let first = poll(&mut parked, &task);
        expiring.join().unwrap();

        let answer = match first {
            Poll::Ready(answer) => answer,
            Poll::Pending => {
                assert_eq!(count.0.load(SeqCst), 1, "the task was not woken");
                match poll(&mut parked, &task) {
                    Poll::Ready(answer) => answer,
                    Poll::Pending => panic!("woken but not ready"),
                }
            }
        };
        assert!(answer.is_some(), "expired without an answer");
        assert_eq!(drops.load(SeqCst), 0, "dropped before it was handed over");
        drop(answer);
        drop(parked);
        assert_eq!(drops.load(SeqCst), 1);
    });
}

/// A sleep polled while the clock passes its deadline and a pass polls the
/// wheel through it: its entry goes in before the pass (and fires) or after
/// it (a clock read before the pass, an insert after), and then dropping
/// the sleep must still remove it. A drop that trusted the pass to have
/// fired every entry at or before its tick would leave this one behind.
#[test]
fn a_sleep_registered_behind_a_pass_is_removed_when_dropped() {
    model(
        "a_sleep_registered_behind_a_pass_is_removed_when_dropped",
        || {
            let clock = ManualClock::new();
            let timer = builder(&clock).build().expect("valid timer");
            let mut sleep = timer.sleep(Duration::from_millis(1));
            let polling = thread::spawn(move || {
                let (_count, task) = waker();
                let first = poll(&mut sleep, &task);
                drop(sleep);
                first
            });
            clock.advance(Duration::from_millis(1));
            timer.run_due_here();
            let first = polling.join().unwrap();
            assert_eq!(
                timer.len(),
                0,
                "a dropped sleep left its entry (first poll {first:?})"
            );
        },
    );
}

/// A schedule racing the async driver's pass and wait (`Timer::drive`,
/// without a driver thread, inline executor): the task runs in that pass,
/// or the driver's task is woken and its next poll runs it. Never a lost
/// wake-up.
#[test]
fn schedule_races_async_driver() {
    model("schedule_races_async_driver", || {
        let clock = ManualClock::new();
        let timer = inline_timer(&clock);
        let ran = Arc::new(AtomicUsize::new(0));
        let counted = counting(&ran);
        // A manual clock gives nothing to sleep until: only the signal
        // wakes the driver.
        let mut driving = Box::pin(timer.drive(|_| std::future::pending::<()>()));

        let scheduler = timer.clone();
        let scheduling = thread::spawn(move || {
            scheduler.schedule(Duration::ZERO, counted).unwrap();
        });
        let (count, task) = waker();
        assert!(poll(&mut driving, &task).is_pending());
        scheduling.join().unwrap();

        if ran.load(SeqCst) == 0 {
            assert!(count.0.load(SeqCst) >= 1, "the driver was not woken");
            assert!(poll(&mut driving, &task).is_pending());
        }
        assert_eq!(ran.load(SeqCst), 1);
        // Shutting down ends the driver's future.
        timer.shutdown();
        assert!(poll(&mut driving, &task).is_ready());
    });
}
