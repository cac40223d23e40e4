//! The API as a server author writes it: no boxing, no annotations, borrowed
//! keys, mixed operations, one shared timer, errors that `?` carries
//! anywhere. Each test is the natural code for one point, compiling and
//! behaving; time comes from a manual clock.

use std::error::Error;

use purgatorio_workloads::proc::threads_named;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use purgatorio::{
    Completion, DelayedOperation, KeyedTimer, ManualClock, Purgatory, Task, Timer, WatchErrorKind,
};

/// Upper bound for waiting on another thread.
const PATIENCE: Duration = Duration::from_secs(20);

/// What a test returns: any error, as a server's code would.
type Result<T = ()> = std::result::Result<T, Box<dyn Error + Send + Sync>>;

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

/// A fetch that answers once: with data, or with a timeout.
struct Fetch {
    ready: Arc<AtomicUsize>,
    reply: mpsc::Sender<&'static str>,
}

impl DelayedOperation for Fetch {
    fn delay(&self) -> Duration {
        ms(500)
    }
    fn try_complete(&mut self) -> bool {
        self.ready.load(Ordering::SeqCst) > 0
    }
    fn on_complete(&mut self, completion: Completion) {
        let answer = if completion.is_timeout() {
            "timed out"
        } else {
            "data"
        };
        let _ = self.reply.send(answer);
    }
}

#[test]
fn a_timed_out_fetch_gets_exactly_one_answer() -> Result {
    let clock = ManualClock::new();
    let fetches: Purgatory<String, Fetch> = Purgatory::builder()
        .timer(Timer::builder().clock(clock.clone()))
        .build()?;
    let (tx, rx) = mpsc::channel();
    let ready = Arc::new(AtomicUsize::new(0));
    fetches.try_complete_else_watch(
        Fetch {
            ready: Arc::clone(&ready),
            reply: tx,
        },
        ["orders".to_string()],
    )?;
    clock.advance(ms(500));
    assert_eq!(rx.recv_timeout(PATIENCE)?, "timed out");
    // The sender went with the operation, right after its one answer.
    assert!(rx.recv_timeout(PATIENCE).is_err(), "a second answer");
    Ok(())
}

#[test]
fn closures_go_straight_onto_the_default_timer() -> Result {
    let clock = ManualClock::new();
    let timer = Timer::builder().clock(clock.clone()).build()?; // no annotation
    let (tx, rx) = mpsc::channel();
    let first = tx.clone();
    timer.schedule(ms(1), move || first.send(1).unwrap())?; // no Box
    timer.schedule(ms(2), move || tx.send(2).unwrap())?; // another closure type
    let pending = timer.schedule(ms(60_000), || println!("never"))?;
    clock.advance(ms(2));
    let mut got = [rx.recv_timeout(PATIENCE)?, rx.recv_timeout(PATIENCE)?];
    got.sort();
    assert_eq!(got, [1, 2]);
    // Cancel hands the task back, as LocalTimer::cancel does.
    let task = pending.cancel().expect("still pending");
    task.run();
    Ok(())
}

#[test]
fn errors_carry_through_question_mark_into_send_sync_boxes() {
    fn schedule_after_shutdown() -> Result {
        let timer = Timer::builder().build()?;
        timer.shutdown();
        timer.schedule(ms(1), || ())?; // ScheduleError<BoxTask>: Send + Sync
        Ok(())
    }
    let err = schedule_after_shutdown().unwrap_err();
    assert_eq!(err.to_string(), "timer is shut down");

    fn park_after_shutdown() -> Result {
        let p: Purgatory<u32, Fetch> = Purgatory::builder().build()?;
        p.shutdown();
        let (tx, _rx) = mpsc::channel();
        let op = Fetch {
            ready: Arc::default(),
            reply: tx, // a Sender is Send, not Sync: the error is Sync anyway
        };
        p.try_complete_else_watch(op, [1])?;
        Ok(())
    }
    let err = park_after_shutdown().unwrap_err();
    assert_eq!(err.to_string(), "purgatory is shut down");
}

#[test]
fn string_keys_are_checked_and_cancelled_by_str() -> Result {
    let p: Purgatory<String, Fetch> = Purgatory::builder().build()?;
    let (tx, rx) = mpsc::channel();
    let ready = Arc::new(AtomicUsize::new(0));
    let topics = vec!["orders".to_string(), "payments".to_string()];
    let op = Fetch {
        ready: Arc::clone(&ready),
        reply: tx.clone(),
    };
    assert!(!p.try_complete_else_watch(op, &topics)?); // borrowed keys
    ready.store(1, Ordering::SeqCst);
    assert_eq!(p.check_and_complete("orders")?, 1); // &str look-up
    assert_eq!(rx.recv_timeout(PATIENCE)?, "data");
    ready.store(0, Ordering::SeqCst);
    let op = Fetch {
        ready: Arc::clone(&ready),
        reply: tx,
    };
    p.try_complete_else_watch(op, topics.iter().skip(1))?; // any iterator
    assert_eq!(p.cancel_for_key("payments")?.len(), 1);
    let err = p
        .try_complete_else_watch(
            Fetch {
                ready,
                reply: mpsc::channel().0,
            },
            Vec::<String>::new(),
        )
        .unwrap_err();
    assert_eq!(err.kind(), WatchErrorKind::NoKeys);
    Ok(())
}

/// A produce that waits for acknowledgements.
struct Produce {
    acks: Arc<AtomicUsize>,
    reply: mpsc::Sender<&'static str>,
}

impl DelayedOperation for Produce {
    fn delay(&self) -> Duration {
        ms(30_000)
    }
    fn try_complete(&mut self) -> bool {
        self.acks.load(Ordering::SeqCst) >= 2
    }
    fn on_complete(&mut self, completion: Completion) {
        let _ = self.reply.send(if completion.is_timeout() {
            "REQUEST_TIMED_OUT"
        } else if completion.is_shut_down() {
            "shut down"
        } else {
            "acked"
        });
    }
}

#[test]
fn one_purgatory_holds_several_kinds_of_operation() -> Result {
    let p: Purgatory<u32, Box<dyn DelayedOperation>> = Purgatory::builder().build()?;
    let (tx, rx) = mpsc::channel();
    let acks = Arc::new(AtomicUsize::new(0));
    let ready = Arc::new(AtomicUsize::new(0));
    p.try_complete_else_watch(
        Box::new(Produce {
            acks: Arc::clone(&acks),
            reply: tx.clone(),
        }),
        [7],
    )?;
    p.try_complete_else_watch(
        Box::new(Fetch {
            ready: Arc::clone(&ready),
            reply: tx,
        }),
        [7],
    )?;
    acks.store(2, Ordering::SeqCst);
    ready.store(1, Ordering::SeqCst);
    assert_eq!(p.check_and_complete(&7)?, 2);
    let mut got = [rx.recv_timeout(PATIENCE)?, rx.recv_timeout(PATIENCE)?];
    got.sort();
    assert_eq!(got, ["acked", "data"]);
    Ok(())
}

#[test]
fn a_dozen_purgatories_and_keyed_timers_share_one_driver_and_one_pool() -> Result {
    let clock = ManualClock::new();
    let timer = Timer::builder()
        .clock(clock.clone())
        .workers(2)
        .thread_name("sharedtm")
        .build()?;
    let (tx, rx) = mpsc::channel();
    let purgatories: Vec<Purgatory<u32, Produce>> = (0..12)
        .map(|_| Purgatory::builder().shared_timer(&timer).build())
        .collect::<std::result::Result<_, _>>()?;
    let expired = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&expired);
    let sessions = KeyedTimer::on_timer(&timer, move |_: u32, _: ()| {
        seen.fetch_add(1, Ordering::SeqCst);
    });
    for (i, p) in purgatories.iter().enumerate() {
        let op = Produce {
            acks: Arc::default(),
            reply: tx.clone(),
        };
        p.try_complete_else_watch(op, [i as u32])?;
        sessions.set(i as u32, (), ms(10))?;
    }
    assert_eq!(timer.len(), 24, "12 operations and 12 sessions");
    assert!(purgatories.iter().all(|p| p.delayed() == 1));
    // One driver and two workers for all of them.
    let start = Instant::now();
    while threads_named("sharedtm") < 3 {
        assert!(start.elapsed() < PATIENCE, "threads never started");
        thread::yield_now();
    }
    assert_eq!(threads_named("sharedtm"), 3);
    clock.advance(ms(10));
    let start = Instant::now();
    while expired.load(Ordering::SeqCst) < 12 {
        assert!(start.elapsed() < PATIENCE, "sessions never expired");
        thread::yield_now();
    }
    // One purgatory shuts down: its operation completes, the rest wait on.
    assert_eq!(purgatories[0].shutdown(), 1);
    assert_eq!(rx.recv_timeout(PATIENCE)?, "shut down");
    assert_eq!(timer.len(), 11);
    assert!(!timer.is_shut_down());
    clock.advance(ms(30_000));
    for _ in 0..11 {
        assert_eq!(rx.recv_timeout(PATIENCE)?, "REQUEST_TIMED_OUT");
    }
    assert!(purgatories.iter().all(|p| p.delayed() == 0));
    Ok(())
}

#[test]
fn shutting_a_shared_timer_down_completes_the_operations_it_held() -> Result {
    let clock = ManualClock::new();
    let timer = Timer::builder().clock(clock.clone()).build()?;
    let p: Purgatory<u32, Produce> = Purgatory::builder().shared_timer(&timer).build()?;
    let (tx, rx) = mpsc::channel();
    p.try_complete_else_watch(
        Produce {
            acks: Arc::default(),
            reply: tx,
        },
        [1],
    )?;
    // The operation's expiry is the crate's own entry: not handed back as a
    // task of the caller's, but completed as shut down.
    assert!(timer.shutdown().is_empty());
    assert_eq!(rx.recv_timeout(PATIENCE)?, "shut down");
    assert_eq!(p.metrics().shut_down, 1);
    assert_eq!(p.delayed(), 0);
    // Parking on a stopped timer is refused, and the operation handed back
    // uncompleted: it could never expire.
    let (tx, rx) = mpsc::channel();
    let op = Produce {
        acks: Arc::default(),
        reply: tx,
    };
    let refused = p.try_complete_else_watch(op, [2]).unwrap_err();
    assert_eq!(refused.kind(), WatchErrorKind::ShutDown);
    drop(refused.into_inner());
    assert!(rx.recv().is_err(), "dropped without ever completing");
    Ok(())
}

#[test]
fn many_keys_with_duplicates_are_each_watched_once() -> Result {
    let p: Purgatory<u32, Fetch> = Purgatory::builder().build()?;
    let (tx, _rx) = mpsc::channel();
    let op = Fetch {
        ready: Arc::default(),
        reply: tx,
    };
    // Twelve keys (more than are held without allocating), five repeated.
    let keys = [1, 2, 3, 1, 4, 5, 6, 2, 7, 8, 3, 9];
    p.try_complete_else_watch(op, keys)?;
    assert_eq!((p.watched(), p.keys()), (9, 9));
    assert_eq!(p.cancel_for_key(&9)?.len(), 1);
    Ok(())
}

/// A key is two `u32`s, and a handle a key beside its shard's reference:
/// the sizes the memory figures assume.
#[test]
fn keys_and_handles_are_eight_and_sixteen_bytes() {
    assert_eq!(std::mem::size_of::<purgatorio::TimerKey>(), 8);
    assert_eq!(std::mem::size_of::<purgatorio::TimerHandle>(), 16);
    assert_eq!(std::mem::size_of::<Option<purgatorio::TimerHandle>>(), 16);
}
