//! loom models of the purgatory's shared state (`--cfg purgatorio_loom`).
//!
//! Each model builds a real [`Purgatory`] whose timer runs on a
//! [`ManualClock`] without a driver thread or workers: the thread that
//! expires plays both (`run_due_here`). loom runs every
//! interleaving of the operation locks, the watch-list shard locks, the
//! timer shard lock and the atomics between them.

use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::Arc;
use std::time::Duration;

use loom::thread::{self, JoinHandle};

use super::{builder, model};
use crate::clock::ManualClock;
use crate::error::WatchErrorKind;
use crate::purgatory::{Completion, DelayedOperation, Purgatory};
use crate::sync::{AtomicBool, AtomicUsize, HashState};

/// What an operation's callbacks did.
#[derive(Default)]
struct Log {
    /// Runs of `on_complete`.
    completed: AtomicUsize,
    /// Runs of `on_complete` on the timeout paths (`Expired`, `ShutDown`).
    expired: AtomicUsize,
}

/// Waits for `ready` (a relaxed flag), for 1 ms.
struct Wait {
    ready: Arc<AtomicBool>,
    log: Arc<Log>,
}

impl DelayedOperation for Wait {
    fn delay(&self) -> Duration {
        Duration::from_millis(1)
    }
    fn try_complete(&mut self) -> bool {
        // Relaxed on purpose: the purgatory must supply the ordering.
        self.ready.load(Relaxed)
    }
    fn on_complete(&mut self, completion: Completion) {
        self.log.completed.fetch_add(1, SeqCst);
        if matches!(completion, Completion::Expired | Completion::ShutDown) {
            self.log.expired.fetch_add(1, SeqCst);
        }
    }
}

/// One operation's condition and callback log.
fn wait() -> (Wait, Arc<AtomicBool>, Arc<Log>) {
    let ready = Arc::new(AtomicBool::new(false));
    let log = Arc::new(Log::default());
    let op = Wait {
        ready: Arc::clone(&ready),
        log: Arc::clone(&log),
    };
    (op, ready, log)
}

/// The models' purgatories hash keys with a fixed hasher, so that every
/// run takes the same shards.
type Model = Purgatory<&'static str, Wait, HashState>;

/// A purgatory with two watch shards on the model timer, and its clock.
fn purgatory() -> (Model, ManualClock) {
    let clock = ManualClock::new();
    let purgatory = Purgatory::builder()
        .hasher(HashState::default())
        .watch_shards(2)
        .timer(builder(&clock))
        .build()
        .expect("valid purgatory");
    (purgatory, clock)
}

/// The expiry path on its own thread: the driver's pass, then the worker
/// running what it handed over.
fn expiring(purgatory: &Model) -> JoinHandle<usize> {
    let purgatory = purgatory.clone();
    thread::spawn(move || purgatory.run_due_here())
}

/// An event on its own thread: the condition turns true, then
/// `check_and_complete` on `key` reports it. Joins to how many it completed.
fn reporting(purgatory: &Model, ready: Arc<AtomicBool>, key: &'static str) -> JoinHandle<usize> {
    let purgatory = purgatory.clone();
    thread::spawn(move || {
        ready.store(true, Relaxed);
        purgatory.check_and_complete(&key).unwrap()
    })
}

/// Completion racing expiry and `force_complete`: `on_complete` runs once,
/// `Expired` only if expiry won, and exactly one path reports the win.
#[test]
fn completion_races_expiry_and_force_complete() {
    model("completion_races_expiry_and_force_complete", || {
        let (purgatory, clock) = purgatory();
        let (op, ready, log) = wait();
        let parked = purgatory.park(op, ["k"]).unwrap();
        assert!(!parked.completed_now());
        clock.advance(Duration::from_millis(1));

        let expiring = expiring(&purgatory);
        let completing = reporting(&purgatory, ready, "k");
        let forced = parked.force_complete();
        expiring.join().unwrap();
        let checked = completing.join().unwrap();

        let metrics = purgatory.metrics();
        let expired = metrics.expired as usize;
        assert_eq!(log.completed.load(SeqCst), 1, "on_complete runs once");
        assert_eq!(log.expired.load(SeqCst), expired);
        assert_eq!(checked + usize::from(forced) + expired, 1, "one winner");
        assert_eq!(
            (metrics.satisfied, metrics.forced),
            (checked as u64, u64::from(forced))
        );
        assert!(parked.is_done());
        assert_eq!(purgatory.delayed(), 0);
    });
}

/// An operation completed by a thread that does not own its timer's shard
/// leaves its expiry in the shard's inbox: racing the driver's pass (which
/// removes the waiting expiries before it polls) and the owner parking
/// again (which removes them once a batch waits), the operation completes
/// once, the counts never include a given-up timer, and the next pass
/// removes what still waits before anything fires.
#[test]
fn foreign_completion_leaves_the_expiry_to_the_owner() {
    model("foreign_completion_leaves_the_expiry_to_the_owner", || {
        let (purgatory, clock) = purgatory();
        let (op, ready, log) = wait();
        let parked = purgatory.park(op, ["k"]).unwrap();
        // Not due yet: the pass below removes the expiry if it finds it
        // waiting, and otherwise leaves it to the owner or a later pass.

        let expiring = expiring(&purgatory);
        let completing = {
            let purgatory = purgatory.clone();
            thread::spawn(move || {
                crate::timer::act_as_foreign();
                ready.store(true, Relaxed);
                purgatory.check_and_complete(&"k").unwrap()
            })
        };
        let (second, _, second_log) = wait();
        let later = purgatory.park(second, ["k2"]).unwrap();
        expiring.join().unwrap();
        let checked = completing.join().unwrap();

        let expired = purgatory.metrics().expired as usize;
        assert_eq!(log.completed.load(SeqCst), 1, "on_complete runs once");
        assert_eq!(checked + expired, 1, "one winner");
        assert!(parked.is_done());
        // The second operation is pending, whatever waits in the inbox.
        assert!(!later.is_done());
        assert_eq!(purgatory.delayed(), 1);
        // A pass removes what waits; only the second operation's expiry
        // can fire.
        clock.advance(Duration::from_millis(1));
        purgatory.run_due_here();
        assert_eq!(second_log.expired.load(SeqCst), 1);
        assert_eq!(log.completed.load(SeqCst), 1);
        assert_eq!(purgatory.delayed(), 0);
    });
}

/// `cancel_for_key` racing expiry and completion: the operation is handed
/// back untouched, or completed once; never both.
#[test]
fn cancel_for_key_races_expiry_and_completion() {
    model("cancel_for_key_races_expiry_and_completion", || {
        let (purgatory, clock) = purgatory();
        let (op, ready, log) = wait();
        purgatory.try_complete_else_watch(op, ["k"]).unwrap();
        clock.advance(Duration::from_millis(1));

        let expiring = expiring(&purgatory);
        let completing = reporting(&purgatory, ready, "k");
        let back = purgatory.cancel_for_key(&"k").unwrap();
        expiring.join().unwrap();
        let checked = completing.join().unwrap();

        let completed = log.completed.load(SeqCst);
        assert_eq!(back.len() + completed, 1, "handed back xor completed");
        let metrics = purgatory.metrics();
        assert_eq!(metrics.satisfied + metrics.expired, completed as u64);
        assert_eq!(metrics.satisfied, checked as u64);
        assert_eq!(metrics.cancelled, back.len() as u64);
        assert_eq!(log.expired.load(SeqCst) as u64, metrics.expired);
        assert_eq!(purgatory.delayed(), 0);
    });
}

/// Registration (try, watch, try again) racing `check_and_complete` on a
/// key of the operation and a purge of the watch lists: an event reported
/// after its condition became true is never lost, and the purge drops only
/// done operations.
#[test]
fn watch_races_check_and_complete_and_purge() {
    model("watch_races_check_and_complete_and_purge", || {
        let (purgatory, _clock) = purgatory();
        // A done operation lingering on "a", for the purge to find.
        let (old, _, old_log) = wait();
        assert!(purgatory.park(old, ["a"]).unwrap().force_complete());

        let (op, ready, log) = wait();
        let watcher = purgatory.clone();
        let watching = thread::spawn(move || watcher.park(op, ["a", "b"]).unwrap());
        let completing = reporting(&purgatory, ready, "b");
        purgatory.purge_now();
        let parked = watching.join().unwrap();
        let checked = completing.join().unwrap();

        assert!(parked.is_done(), "completion lost");
        assert_eq!(log.completed.load(SeqCst), 1);
        assert_eq!(log.expired.load(SeqCst), 0);
        assert_eq!(usize::from(parked.completed_now()) + checked, 1);
        assert_eq!(old_log.completed.load(SeqCst), 1);
        let metrics = purgatory.metrics();
        assert_eq!((metrics.satisfied, metrics.forced), (1, 1));
        // Everything is done, so one more purge empties the lists.
        purgatory.purge_now();
        assert_eq!(purgatory.watched(), 0);
        assert_eq!(purgatory.keys(), 0);
    });
}

/// Two `check_and_complete` calls on one key, the condition turning true
/// between them: a caller that finds the operation locked leaves the retry
/// flag, and the holder tries again. No completion is lost.
#[test]
fn retry_flag_never_loses_a_completion() {
    model("retry_flag_never_loses_a_completion", || {
        let (purgatory, _clock) = purgatory();
        let (op, ready, log) = wait();
        let parked = purgatory.park(op, ["a"]).unwrap();

        let completing = reporting(&purgatory, ready, "a");
        let mine = purgatory.check_and_complete(&"a").unwrap();
        let theirs = completing.join().unwrap();

        assert!(parked.is_done(), "completion lost");
        assert_eq!(mine + theirs, 1);
        assert_eq!(log.completed.load(SeqCst), 1);
    });
}

/// Shutdown racing `park`: the operation is refused and handed back, or it
/// is accepted and then expired exactly once (by shutdown, or by `park`
/// itself when the timer is already shut down). None is left pending.
#[test]
fn shutdown_races_park() {
    model("shutdown_races_park", || {
        let (purgatory, _clock) = purgatory();
        let (op, _, log) = wait();
        let parker = purgatory.clone();
        let parking = thread::spawn(move || parker.park(op, ["a"]));
        purgatory.shutdown();
        let parked = parking.join().unwrap();

        match parked {
            Ok(parked) => {
                assert!(parked.is_done(), "accepted operation left pending");
                assert_eq!(log.completed.load(SeqCst), 1);
                assert_eq!(log.expired.load(SeqCst), 1);
            }
            Err(err) => {
                assert_eq!(err.kind(), WatchErrorKind::ShutDown);
                assert_eq!(log.completed.load(SeqCst), 0);
            }
        }
        assert_eq!(purgatory.delayed(), 0);
    });
}

/// An operation that holds a purgatory handle and calls the purgatory from
/// its `Drop` before letting the handle go.
struct HoldsHandle {
    /// The handle; possibly the purgatory's last.
    purgatory: Option<Purgatory<&'static str, HoldsHandle, HashState>>,
    /// Runs of `on_complete`, then of `Drop`.
    log: Arc<Log>,
}

impl DelayedOperation for HoldsHandle {
    fn delay(&self) -> Duration {
        Duration::from_millis(1)
    }
    fn try_complete(&mut self) -> bool {
        false
    }
    fn on_complete(&mut self, _completion: Completion) {
        self.log.completed.fetch_add(1, SeqCst);
    }
}

impl Drop for HoldsHandle {
    fn drop(&mut self) {
        if let Some(purgatory) = self.purgatory.take() {
            // Takes the watch shards' locks: a deadlock if any were held.
            let _ = purgatory.watched();
            self.log.expired.fetch_add(1, SeqCst); // counts drops here
        }
    }
}

/// The drop paths: an operation that holds a purgatory handle is completed
/// on one thread (and dropped there), a purge sweeps its lingering entry on
/// another, and the application drops its own handle on a third, so the
/// last handle goes with whichever finishes last, possibly inside the
/// operation's `Drop`. No deadlock, no lock held while user code runs
/// (the `Drop` calls the purgatory), the operation completes and is dropped
/// exactly once, and the shutdown that follows leaves nothing watched.
#[test]
fn purge_and_completion_race_the_last_handles_drop() {
    model("purge_and_completion_race_the_last_handles_drop", || {
        let clock = ManualClock::new();
        let purgatory: Purgatory<&'static str, HoldsHandle, HashState> = Purgatory::builder()
            .hasher(HashState::default())
            .watch_shards(2)
            .timer(builder(&clock))
            .build()
            .expect("valid purgatory");
        let log = Arc::new(Log::default());
        let op = HoldsHandle {
            purgatory: Some(purgatory.clone()),
            log: Arc::clone(&log),
        };
        let parked = purgatory.park(op, ["a", "b"]).unwrap();
        // The purge works on the watch lists alone: it keeps no handle.
        let purge = purgatory.purger();

        let completing = thread::spawn(move || parked.force_complete());
        let purging = thread::spawn(purge);
        drop(purgatory);
        assert!(completing.join().unwrap(), "force_complete wins");
        purging.join().unwrap();

        assert_eq!(log.completed.load(SeqCst), 1, "on_complete once");
        assert_eq!(log.expired.load(SeqCst), 1, "dropped once");
    });
}
