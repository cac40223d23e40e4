//! # The re-entrancy matrix
//!
//! Every callback a user writes (rows) × every public call made from inside
//! it (columns). Each cell builds its own timer, purgatory or keyed timer on a
//! [`ManualClock`], installs a callback that makes that one call, triggers the
//! callback, and checks the documented result. Each cell runs on its own
//! thread under a watchdog ([`WATCHDOG`]): a cell that hangs fails its row by
//! name instead of hanging the suite (its threads are leaked). Each row is one
//! `#[test]` that runs all its cells and lists every failing one.
//!
//! "works" means: the call returns, without deadlock, spin or panic, the
//! value it returns outside any callback in the same state; the cells assert
//! that concrete value. "—" means the call cannot be made there (see the
//! notes). X is the operation whose callback makes the call; the "other" op
//! is parked on another key.
//!
//! ## Purgatory callbacks
//!
//! | callback (triggers) | `Timer::schedule` / `cancel` / `reschedule` | `check_and_complete` own key | `check_and_complete` other key | `park` / `try_complete_else_watch` | `cancel_for_key` own key | `cancel_for_key` other key | `force_complete` X | `force_complete` other op | `watched` / `delayed` / `keys` / `metrics` | `shutdown()` | drop last handle |
//! |---|---|---|---|---|---|---|---|---|---|---|---|
//! | `try_complete` (`park`; `check_and_complete`; `Parked::try_complete`) | works | `Ok(0)`: X is not completed by it, and gets at most one more try after the callback returns | works | works | `Ok(v)`, X not in `v` | works | `false`; X completes (`on_complete` once) right after the callback returns ¹ | works | works | works ² | works ² ³ |
//! | `on_complete` (`check_and_complete`; `Parked::force_complete`) | works | `Ok(0)` | works | works | `Ok(v)`, X not in `v` | works | `false` (done) | works | works | works ² | works ² ³ |
//! | `on_complete(Expired)`, Kafka's `onExpiration` (the clock passes X's delay; on a timer worker) | works | `Ok(0)` | works | works | `Ok(v)`, X not in `v` | works | `false` (done) | works | works | works ² | works ² |
//! | X's `Drop` ⁴ (`park`, X ready; `check_and_complete`, X ready; `Parked::force_complete`; the clock passes X's delay, on a timer worker) | works | `Ok(0)` | works | works | `Ok([])` | works | `false` (done) ¹ | works | works | works ² | works ² ³ |
//!
//! 1. Not with the `park` triggers: `park` returns the `Parked` only after the
//!    callback.
//! 2. Returns promptly. Afterwards every operation that was pending, X
//!    included, has had `on_complete` exactly once (the other op with
//!    `Completion::ShutDown`); `check_and_complete` and `cancel_for_key`
//!    return `Err(ShutDownError)`, `park` and `try_complete_else_watch` a
//!    `WatchError` of kind `ShutDown` with the operation, a second
//!    `shutdown()` 0. A call that had already started when its callback shut
//!    the purgatory down finishes normally (shutdown is checked on entry).
//! 3. Only where the trigger holds no `Purgatory` handle:
//!    `Parked::try_complete`, `Parked::force_complete`, the clock. `park`
//!    and `check_and_complete` run on a handle, so a callback inside them
//!    cannot hold the last one.
//! 4. X's value is dropped right after its last callback, inside the
//!    trigger's call, on the thread that ran that callback (the cell's, or
//!    the timer worker for the clock), with no lock of the crate held; its
//!    `Parked` handle may outlive it. X is done then and out of the timer
//!    (a completion cancelled its timer, an expiry fired it), but still in
//!    its key's list (`watched` and `keys` count it): `check_and_complete`
//!    removes done entries after trying them, and no purge runs. Under
//!    `park` X completed at its first try, before it was watched or timed.
//!    Purges and watch-list removals drop only the library's husk of a
//!    done operation, never the value: they are not triggers.
//!
//! ## Timer tasks
//!
//! | callback (trigger) | `Timer::schedule` | `TimerHandle::cancel` | `TimerHandle::reschedule` | by `TimerId`: `Timer::cancel` / `reschedule` / `is_pending` / `schedule_id` | `len` / `is_empty` / `metrics` | `shutdown()` | drop last handle |
//! |---|---|---|---|---|---|---|---|
//! | task (runs on a worker) | works | works | works | works | works | works (hands back the pending tasks) | works |
//! | task's `Drop` (`TimerHandle::cancel`) | works | works | works | works | works | works | works |
//! | task's `Drop` (`Timer::shutdown`, the caller drops the tasks) | `Err(ScheduleError(task))` | `false` | `false` | `None` / `false`; `Err(ScheduleError(task))` | works (0 pending) | works (`[]`) | works |
//! | task's `Drop` (the last `Timer` handle dropped with it pending) | — ⁵ | `false` | `false` | — ⁵ | — ⁵ | — ⁵ | — ⁵ |
//!
//! 5. No `Timer` handle is reachable: one held by the task would keep the
//!    timer alive. Handles of other tasks are.
//!
//! ## Keyed timers
//!
//! | callback (trigger) | `set` own key | `set` other key | `reset` | `remove` | `contains` | `drain` | `len` / `is_empty` | `shutdown()` | drop last handle |
//! |---|---|---|---|---|---|---|---|---|---|
//! | expiry callback (the clock; on a timer worker) | works | works | works | works | works | works | works | works | works |
//! | a value's `Drop` (`remove`; `set` replacing it; `drain`) | works | works | works | works | works | works | works | works | works |
//! | a value's `Drop` (`shutdown`) | `Err(ScheduleError((key, value)))` | `Err(ScheduleError((key, value)))` | works (`false`) | works (`None`) | works (`false`) | works (`[]`) | works (0) | works (`[]`) | works |
//!
//! ## How the cells are made deterministic
//!
//! * Time is a [`ManualClock`]; nothing waits on a real delay to be correct.
//!   Waits for work on other threads are bounded polls or channel receives.
//! * Every purgatory has one watch shard, so "another key" always shares the
//!   own key's shard lock (the worst case; with more shards a collision is
//!   random per run) and one timer worker, so the cell knows which thread
//!   runs what.
//! * A `try_complete` that re-enters `check_and_complete` on its own key
//!   stops re-entering after [`SPIN_LIMIT`] calls, so a livelock ends and is
//!   reported as the number of calls instead of spinning forever.

use std::any::Any;
use std::fmt::{self, Debug};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use purgatorio::{
    BoxTask, Completion, DelayedOperation, KeyedTimer, ManualClock, Parked, Purgatory,
    ShutDownError, Task, Timer, TimerHandle, WatchErrorKind, DEFAULT_PURGE_INTERVAL,
};

// ---------------------------------------------------------------------------
// Bounds
// ---------------------------------------------------------------------------

/// How long a cell may take before it is declared hung.
const WATCHDOG: Duration = Duration::from_secs(20);

/// How long a cell waits for a callback on another thread to report, or for
/// a count to settle: half the watchdog, so that a callback hung on a worker
/// is reported as such while the cell itself still answers.
const PATIENCE: Duration = Duration::from_secs(10);

/// How long tearing a cell's components down may take.
const TEARDOWN: Duration = Duration::from_secs(10);

/// Pause between two polls of a bounded polling loop (a back-off, not a
/// timing assumption).
const POLL_INTERVAL: Duration = Duration::from_millis(1);

/// Most polls of one polling loop, whatever the clock says.
const MAX_POLLS: u32 = 20_000;

/// Calls after which a repeating trap stops making its call, so that a
/// callback that keeps a livelock going ends it.
const SPIN_LIMIT: usize = 1_000;

/// Most `try_complete` calls one trigger may cause when the callback calls
/// `check_and_complete` on its own key: the current one, at most one extra
/// attempt, and (for `park`) the try before registration.
const MAX_TRIES: usize = 3;

/// A delay that never passes during a cell.
const LONG: Duration = Duration::from_secs(60);

/// The delay a cell lets pass to fire something.
const SHORT: Duration = Duration::from_millis(10);

// ---------------------------------------------------------------------------
// Verdicts and the watchdog
// ---------------------------------------------------------------------------

/// Why a cell failed.
#[derive(Debug)]
enum Failure {
    /// Something did not return, or a callback on another thread never did.
    Hang(String),
    /// A call returned something other than the documented result.
    Wrong(String),
    /// A call panicked.
    Panic(String),
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Hang(what) => write!(f, "hang: {what}"),
            Failure::Wrong(what) => write!(f, "wrong value: {what}"),
            Failure::Panic(what) => write!(f, "panic: {what}"),
        }
    }
}

impl From<String> for Failure {
    fn from(what: String) -> Self {
        Failure::Wrong(what)
    }
}

/// A cell's result.
type Verdict = Result<(), Failure>;

/// What a call found wrong, if anything.
type Check = Result<(), String>;

/// `Ok` if `holds`; otherwise names the expectation.
fn check(expected: &str, holds: bool) -> Check {
    if holds {
        Ok(())
    } else {
        Err(format!("expected {expected}"))
    }
}

/// `Ok` if `got == want`; otherwise shows both.
fn check_eq<T: PartialEq + Debug>(what: &str, got: T, want: T) -> Check {
    if got == want {
        Ok(())
    } else {
        Err(format!("{what}: got {got:?}, want {want:?}"))
    }
}

/// Reads a counter.
fn get(counter: &AtomicUsize) -> usize {
    counter.load(SeqCst)
}

/// The message of a caught panic.
fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_string())
}

/// Polls `holds` until it is true, at most [`PATIENCE`] and [`MAX_POLLS`]
/// times.
fn settle(what: &str, holds: impl Fn() -> bool) -> Check {
    let start = Instant::now();
    for _ in 0..MAX_POLLS {
        if holds() {
            return Ok(());
        }
        if start.elapsed() >= PATIENCE {
            break;
        }
        thread::sleep(POLL_INTERVAL);
    }
    check(&format!("{what} within {PATIENCE:?}"), holds())
}

/// What a cell's thread tells the watchdog.
enum Report {
    /// The cell's result.
    Verdict(Verdict),
    /// The cell's components are gone (or were left to a hung thread).
    TornDown,
}

/// Runs one cell on its own thread under the watchdog and returns its
/// failure, named, if any.
///
/// `setup` builds the cell's components, `body` triggers the callback and
/// checks the results. The components are dropped after the verdict is in,
/// so a teardown that hangs is reported on its own. After a hang they are
/// left to the blocked thread.
fn run_cell<E>(
    name: String,
    setup: impl FnOnce() -> E + Send + 'static,
    body: impl FnOnce(&mut E) -> Verdict + Send + 'static,
) -> Option<String> {
    let (tx, rx) = mpsc::channel();
    let spawned = thread::Builder::new()
        .name(CELL_THREAD.to_string())
        .spawn(move || {
            let mut env = match catch_unwind(AssertUnwindSafe(setup)) {
                Ok(env) => env,
                Err(panic) => {
                    let what = format!("in the cell's set-up: {}", panic_message(&*panic));
                    let _ = tx.send(Report::Verdict(Err(Failure::Panic(what))));
                    let _ = tx.send(Report::TornDown);
                    return;
                }
            };
            let verdict = catch_unwind(AssertUnwindSafe(|| body(&mut env)))
                .unwrap_or_else(|panic| Err(Failure::Panic(panic_message(&*panic))));
            let hung = matches!(verdict, Err(Failure::Hang(_)));
            let _ = tx.send(Report::Verdict(verdict));
            if hung {
                // A thread is blocked inside these components: leave them.
                std::mem::forget(env);
            } else {
                drop(env);
            }
            let _ = tx.send(Report::TornDown);
        });
    if let Err(err) = spawned {
        return Some(format!("{name}: could not start the cell's thread: {err}"));
    }
    let failure = match rx.recv_timeout(WATCHDOG) {
        Ok(Report::Verdict(verdict)) => verdict.err(),
        Ok(Report::TornDown) => Some(Failure::Panic("the cell gave no verdict".to_string())),
        Err(RecvTimeoutError::Timeout) => {
            let what = format!("the cell did not finish within {WATCHDOG:?}");
            return Some(format!("{name}: {}", Failure::Hang(what)));
        }
        Err(RecvTimeoutError::Disconnected) => {
            Some(Failure::Panic("the cell's thread died".to_string()))
        }
    };
    let teardown = match rx.recv_timeout(TEARDOWN) {
        Ok(_) => None,
        Err(RecvTimeoutError::Timeout) => Some(Failure::Hang(format!(
            "dropping the cell's components did not finish within {TEARDOWN:?}"
        ))),
        Err(RecvTimeoutError::Disconnected) => Some(Failure::Panic(
            "dropping the cell's components panicked".to_string(),
        )),
    };
    match (failure, teardown) {
        (None, None) => None,
        (Some(failure), None) | (None, Some(failure)) => Some(format!("{name}: {failure}")),
        (Some(failure), Some(teardown)) => Some(format!("{name}: {failure}; then {teardown}")),
    }
}

/// Fails a row's test with every failing cell, one a line.
fn assert_row(row: &str, cells: usize, failures: &[String]) {
    assert!(
        failures.is_empty(),
        "{row}: {} of {cells} cells fail:\n  {}",
        failures.len(),
        failures.join("\n  ")
    );
}

/// A name for the report.
trait Named: Copy + Send + 'static {
    /// The name.
    fn name(self) -> &'static str;
}

/// One family of cells: a component, the triggers of its callbacks (the
/// rows), and the calls made from them (the columns).
trait Cell: Sized + 'static {
    /// What runs the callback; with the callback, the row.
    type Trigger: Named;
    /// The call made from inside the callback: the column.
    type Call: Named;
    /// Every column.
    const CALLS: &'static [Self::Call];
    /// Whether the call can be made from that callback.
    fn applies(trigger: Self::Trigger, call: Self::Call) -> bool;
    /// Builds the cell's components.
    fn new(trigger: Self::Trigger, call: Self::Call) -> Self;
    /// Triggers the callback and checks what happened.
    fn run(&mut self) -> Verdict;
}

/// Runs every applicable cell of the rows `triggers` and fails with the list
/// of failing cells.
fn run_row<C: Cell>(row: &str, triggers: &[C::Trigger]) {
    let mut cells = 0;
    let mut failures = Vec::new();
    for &trigger in triggers {
        for &call in C::CALLS {
            if !C::applies(trigger, call) {
                continue;
            }
            cells += 1;
            let name = format!("{} × {}", trigger.name(), call.name());
            failures.extend(run_cell(name, move || C::new(trigger, call), C::run));
        }
    }
    assert_row(row, cells, &failures);
}

// ---------------------------------------------------------------------------
// Traps: the call a cell makes from inside a callback
// ---------------------------------------------------------------------------

/// The call a cell makes from inside a callback, armed by the cell right
/// before the trigger. Each call's verdict goes to the cell on a channel.
struct Trap {
    /// The call, checking its own results.
    call: Box<dyn Fn() -> Check + Send + Sync>,
    /// Whether the next spring makes the call.
    armed: AtomicBool,
    /// Make the call at every spring while armed (up to [`SPIN_LIMIT`]),
    /// instead of once.
    repeat: bool,
    /// Springs while armed, for the spin limit.
    runs: AtomicUsize,
    /// Where the verdicts go.
    verdicts: Sender<Verdict>,
}

impl Trap {
    /// A disarmed trap making `call`, and the receiver of its verdicts.
    fn new(
        repeat: bool,
        call: Box<dyn Fn() -> Check + Send + Sync>,
    ) -> (Arc<Trap>, Receiver<Verdict>) {
        let (verdicts, rx) = mpsc::channel();
        let trap = Trap {
            call,
            armed: AtomicBool::new(false),
            repeat,
            runs: AtomicUsize::new(0),
            verdicts,
        };
        (Arc::new(trap), rx)
    }

    /// Lets the next spring (or, repeating, every spring) make the call.
    fn arm(&self) {
        self.armed.store(true, SeqCst);
    }

    /// Makes further springs do nothing.
    fn disarm(&self) {
        self.armed.store(false, SeqCst);
    }

    /// Called by a callback: makes the call if armed, and reports its verdict
    /// (a panic included).
    fn spring(&self) {
        let go = if self.repeat {
            self.armed.load(SeqCst) && self.runs.fetch_add(1, SeqCst) < SPIN_LIMIT
        } else {
            self.armed.swap(false, SeqCst)
        };
        if !go {
            return;
        }
        let verdict = match catch_unwind(AssertUnwindSafe(|| (self.call)())) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(what)) => Err(Failure::Wrong(what)),
            Err(panic) => Err(Failure::Panic(panic_message(&*panic))),
        };
        let _ = self.verdicts.send(verdict);
    }
}

/// Collects a trap's verdicts after its trigger: at least one, all good.
///
/// A callback that runs on a worker gets [`PATIENCE`] to report; one that
/// runs inside the trigger's call has reported by the time the call returns.
fn collect(verdicts: &Receiver<Verdict>, on_worker: bool) -> Verdict {
    let first = if on_worker {
        verdicts.recv_timeout(PATIENCE).map_err(|_| {
            Failure::Hang(format!(
                "the call made by the callback on the worker did not return within {PATIENCE:?}"
            ))
        })?
    } else {
        verdicts
            .try_recv()
            .map_err(|_| Failure::Wrong("the callback never made the call".to_string()))?
    };
    first?;
    verdicts.try_iter().try_for_each(|verdict| verdict)
}

// ---------------------------------------------------------------------------
// Keys, ids and threads every matrix uses
// ---------------------------------------------------------------------------

/// The key the operation under test (X) is watched on.
const OWN: u32 = 1;
/// The key the other operation is watched on.
const OTHER: u32 = 2;
/// The key callbacks park new operations on.
const NEW: u32 = 4;

/// Id of the operation under test.
const X_ID: u32 = 1;
/// Id of the other operation.
const Y_ID: u32 = 2;
/// Id of operations parked from inside a callback.
const NEW_ID: u32 = 4;

/// The name of the thread each cell runs on (see [`run_cell`]).
const CELL_THREAD: &str = "reentrancy-cell";
/// The name of the purgatory's one timer worker (the timer's default thread
/// name prefix).
const WORKER_THREAD: &str = "purgatorio-worker-0";

mod keyed;
mod purgatory;
mod timer;
