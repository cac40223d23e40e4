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
//! | callback (trigger) | `Timer::schedule` | `TimerHandle::cancel` | `TimerHandle::reschedule` | `len` / `is_empty` / `metrics` | `shutdown()` | drop last handle |
//! |---|---|---|---|---|---|---|
//! | task (runs on a worker) | works | works | works | works | works (hands back the pending tasks) | works |
//! | task's `Drop` (`TimerHandle::cancel`) | works | works | works | works | works | works |
//! | task's `Drop` (`Timer::shutdown`, the caller drops the tasks) | `Err(ScheduleError(task))` | `false` | `false` | works (0 pending) | works (`[]`) | works |
//! | task's `Drop` (the last `Timer` handle dropped with it pending) | — ⁵ | `false` | `false` | — ⁵ | — ⁵ | — ⁵ |
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
// Purgatory rows: try_complete, on_complete, on_expiration, Drop
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

/// The purgatory of the purgatory rows.
type Purg = Purgatory<u32, Probe>;

/// Which callback of X makes the cell's call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hook {
    /// `try_complete`, from its `from_try`-th call on (counting from 1).
    TryComplete { from_try: usize },
    /// `on_complete`.
    OnComplete,
    /// `on_expiration`.
    OnExpiration,
    /// The operation's `Drop`.
    Drop,
}

/// What happened to one operation.
#[derive(Debug, Default)]
struct Record {
    /// `try_complete` calls.
    tries: AtomicUsize,
    /// `on_complete` calls.
    completed: AtomicUsize,
    /// `on_expiration` calls.
    expired: AtomicUsize,
    /// Drops.
    dropped: AtomicUsize,
    /// What the drop saw: the name of the thread it ran on, and the
    /// `on_complete` and `on_expiration` calls made before it.
    drop_seen: Mutex<Option<(String, usize, usize)>>,
}

/// A delayed operation that completes once `ready` is set and records what
/// happens to it; X also springs a trap from one of its callbacks.
struct Probe {
    /// Tells operations apart in what `cancel_for_key` hands back.
    id: u32,
    /// Its delay.
    delay: Duration,
    /// Its condition.
    ready: Arc<AtomicBool>,
    /// What happened to it.
    record: Arc<Record>,
    /// The callback that springs the trap, and the trap.
    trap: Option<(Hook, Arc<Trap>)>,
}

impl Probe {
    /// A plain operation, with its condition and its record.
    fn new(id: u32, delay: Duration) -> (Probe, Arc<AtomicBool>, Arc<Record>) {
        let ready = Arc::new(AtomicBool::new(false));
        let record = Arc::new(Record::default());
        let op = Probe {
            id,
            delay,
            ready: Arc::clone(&ready),
            record: Arc::clone(&record),
            trap: None,
        };
        (op, ready, record)
    }

    /// Springs the trap if it is set on `hook`.
    fn spring_at(&self, hook: Hook) {
        if let Some((at, trap)) = &self.trap {
            if *at == hook {
                trap.spring();
            }
        }
    }
}

impl DelayedOperation for Probe {
    fn delay(&self) -> Duration {
        self.delay
    }

    fn try_complete(&mut self) -> bool {
        let n = self.record.tries.fetch_add(1, SeqCst) + 1;
        if let Some((Hook::TryComplete { from_try }, trap)) = &self.trap {
            if n >= *from_try {
                trap.spring();
            }
        }
        self.ready.load(SeqCst)
    }

    fn on_complete(&mut self, completion: Completion) {
        self.record.completed.fetch_add(1, SeqCst);
        self.spring_at(Hook::OnComplete);
        // Kafka's `onExpiration`, widened to every path that ends without
        // the condition or a caller: expiry and shutdown.
        if matches!(completion, Completion::Expired | Completion::ShutDown) {
            self.record.expired.fetch_add(1, SeqCst);
            self.spring_at(Hook::OnExpiration);
        }
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        self.record.dropped.fetch_add(1, SeqCst);
        let thread = thread::current().name().unwrap_or("unnamed").to_string();
        let seen = (
            thread,
            get(&self.record.completed),
            get(&self.record.expired),
        );
        *self.record.drop_seen.lock() = Some(seen);
        self.spring_at(Hook::Drop);
    }
}

/// The ids of operations handed back by `cancel_for_key`.
fn ids(ops: &[Probe]) -> Vec<u32> {
    ops.iter().map(|op| op.id).collect()
}

/// The calls made from inside an operation's callback (the columns).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OpCall {
    /// `Timer::schedule` on a separate timer.
    Schedule,
    /// `TimerHandle::cancel` of a pending task of the separate timer.
    Cancel,
    /// `TimerHandle::reschedule` of that task.
    Reschedule,
    /// `check_and_complete(own key)`.
    CheckOwn,
    /// `check_and_complete(other key)`, whose operation is ready.
    CheckOther,
    /// `park` of a new operation.
    Park,
    /// `try_complete_else_watch` of a new operation.
    TryCompleteElseWatch,
    /// `cancel_for_key(own key)`.
    CancelOwn,
    /// `cancel_for_key(other key)`.
    CancelOther,
    /// `Parked::force_complete` of X.
    ForceOwn,
    /// `Parked::force_complete` of the other operation.
    ForceOther,
    /// `watched`, `keys`, `delayed`, `metrics`, and the separate timer's
    /// `len` and `metrics`.
    Gauges,
    /// `shutdown()`.
    Shutdown,
    /// Dropping the last `Purgatory` handle.
    DropLast,
}

impl Named for OpCall {
    fn name(self) -> &'static str {
        match self {
            OpCall::Schedule => "Timer::schedule",
            OpCall::Cancel => "TimerHandle::cancel",
            OpCall::Reschedule => "TimerHandle::reschedule",
            OpCall::CheckOwn => "check_and_complete(own key)",
            OpCall::CheckOther => "check_and_complete(other key)",
            OpCall::Park => "park(new op)",
            OpCall::TryCompleteElseWatch => "try_complete_else_watch(new op)",
            OpCall::CancelOwn => "cancel_for_key(own key)",
            OpCall::CancelOther => "cancel_for_key(other key)",
            OpCall::ForceOwn => "force_complete(own op)",
            OpCall::ForceOther => "force_complete(other op)",
            OpCall::Gauges => "watched/keys/delayed/metrics",
            OpCall::Shutdown => "shutdown()",
            OpCall::DropLast => "drop last handle",
        }
    }
}

/// What runs X's callback (with the callback, a row).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OpTrigger {
    /// `try_complete`, during `park` (the try after registration).
    TryViaPark,
    /// `try_complete`, from `check_and_complete(own key)` on the test thread.
    TryViaCheck,
    /// `try_complete`, from `Parked::try_complete` on the test thread.
    TryViaParkedTry,
    /// `on_complete`: X is ready and `check_and_complete(own key)` finds it.
    CompleteViaCheck,
    /// `on_complete`: `Parked::force_complete` on the test thread.
    CompleteViaForce,
    /// `on_expiration`: the clock passes X's delay; runs on a timer worker.
    Expire,
    /// X's `Drop`: X is ready when parked, so `park`'s first try completes
    /// it before it is watched or timed, and `park` drops it.
    DropViaPark,
    /// X's `Drop`: X is ready and `check_and_complete(own key)` completes
    /// it, then drops it before taking it out of the key's list.
    DropViaCheck,
    /// X's `Drop`: `Parked::force_complete` on the test thread completes
    /// and drops it.
    DropViaForce,
    /// X's `Drop`: the clock passes X's delay; a timer worker expires X and
    /// drops it.
    DropViaExpire,
}

impl Named for OpTrigger {
    fn name(self) -> &'static str {
        match self {
            OpTrigger::TryViaPark => "try_complete[park]",
            OpTrigger::TryViaCheck => "try_complete[check_and_complete]",
            OpTrigger::TryViaParkedTry => "try_complete[Parked::try_complete]",
            OpTrigger::CompleteViaCheck => "on_complete[check_and_complete]",
            OpTrigger::CompleteViaForce => "on_complete[force_complete]",
            OpTrigger::Expire => "on_expiration[clock]",
            OpTrigger::DropViaPark => "Drop[park]",
            OpTrigger::DropViaCheck => "Drop[check_and_complete]",
            OpTrigger::DropViaForce => "Drop[force_complete]",
            OpTrigger::DropViaExpire => "Drop[expiry]",
        }
    }
}

/// The purgatory's gauges as X's callback should see them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Gauges {
    /// `watched()`.
    watched: usize,
    /// `keys()`.
    keys: usize,
    /// `delayed()`.
    delayed: usize,
    /// `metrics().completed_by_try`.
    completed_by_try: u64,
    /// `metrics().expired`.
    expired: u64,
}

impl OpTrigger {
    /// The callback of X that makes the call.
    fn hook(self) -> Hook {
        match self {
            // The first try of `park` runs before X is watched; the second,
            // with X in its watch list and its lock held, is the one to test.
            OpTrigger::TryViaPark => Hook::TryComplete { from_try: 2 },
            OpTrigger::TryViaCheck | OpTrigger::TryViaParkedTry => {
                Hook::TryComplete { from_try: 0 }
            }
            OpTrigger::CompleteViaCheck | OpTrigger::CompleteViaForce => Hook::OnComplete,
            OpTrigger::Expire => Hook::OnExpiration,
            OpTrigger::DropViaPark
            | OpTrigger::DropViaCheck
            | OpTrigger::DropViaForce
            | OpTrigger::DropViaExpire => Hook::Drop,
        }
    }

    /// Whether X's callback runs inside `try_complete`.
    fn in_try(self) -> bool {
        matches!(self.hook(), Hook::TryComplete { .. })
    }

    /// Whether the callback runs on a timer worker rather than inside the
    /// trigger's call on the cell's thread.
    fn on_worker(self) -> bool {
        matches!(self, OpTrigger::Expire | OpTrigger::DropViaExpire)
    }

    /// X's delay.
    fn x_delay(self) -> Duration {
        match self {
            OpTrigger::Expire | OpTrigger::DropViaExpire => SHORT,
            _ => LONG,
        }
    }

    /// Whether X is ready before it is parked.
    fn x_ready_at_park(self) -> bool {
        self == OpTrigger::DropViaPark
    }

    /// What X's `Drop` sees, if it is the callback: the thread it runs on,
    /// and X's `on_complete` and `on_expiration` calls so far. The value is
    /// dropped right after its last callback, by the thread that ran it.
    fn drop_seen(self) -> Option<(&'static str, usize, usize)> {
        match self {
            OpTrigger::DropViaPark | OpTrigger::DropViaCheck | OpTrigger::DropViaForce => {
                Some((CELL_THREAD, 1, 0))
            }
            OpTrigger::DropViaExpire => Some((WORKER_THREAD, 1, 1)),
            _ => None,
        }
    }

    /// X's `on_complete` count while its callback runs.
    fn x_completed_in_callback(self) -> usize {
        usize::from(!self.in_try())
    }

    /// The gauges while X's callback runs. X is watched on its key and the
    /// other op on its own; a done X lingers in its list until a check or
    /// purge removes it (no purge runs during a cell), and leaves the timer
    /// when it completes (a completion cancels its timer, an expiry fired
    /// it).
    fn gauges(self) -> Gauges {
        let (watched, keys, delayed, completed_by_try, expired) = match self {
            // Watched, not yet added to the timer.
            OpTrigger::TryViaPark => (2, 2, 1, 0, 0),
            OpTrigger::TryViaCheck | OpTrigger::TryViaParkedTry => (2, 2, 2, 0, 0),
            // The drop follows the last callback before anything else
            // changes: `check_and_complete` takes X out of its list only
            // after trying it (and so after dropping it).
            OpTrigger::CompleteViaCheck
            | OpTrigger::CompleteViaForce
            | OpTrigger::DropViaCheck
            | OpTrigger::DropViaForce => (2, 2, 1, 1, 0),
            OpTrigger::Expire | OpTrigger::DropViaExpire => (2, 2, 1, 0, 1),
            // Completed by `park`'s first try: never watched, never timed.
            OpTrigger::DropViaPark => (1, 1, 1, 1, 0),
        };
        Gauges {
            watched,
            keys,
            delayed,
            completed_by_try,
            expired,
        }
    }
}

/// What the calls made from inside X's callback reach.
struct OpCtx {
    /// The callback's purgatory handle; `DropLast` takes it.
    purgatory: Mutex<Option<Purg>>,
    /// X's handle, once parked.
    x: Mutex<Option<Arc<Parked<Probe>>>>,
    /// The other operation's handle.
    y: Mutex<Option<Arc<Parked<Probe>>>>,
    /// What happened to X.
    x_rec: Arc<Record>,
    /// What happened to the other operation.
    y_rec: Arc<Record>,
    /// A separate timer, for the timer columns.
    side: Timer,
    /// A pending task of the separate timer.
    side_pending: TimerHandle,
}

impl OpCtx {
    /// A clone of the callback's purgatory handle.
    fn purgatory(&self) -> Result<Purg, String> {
        let handle = self.purgatory.lock().clone();
        handle.ok_or_else(|| "the callback's purgatory handle is gone".to_string())
    }

    /// An operation's handle, taken out of its slot's lock.
    fn parked(slot: &Mutex<Option<Arc<Parked<Probe>>>>) -> Result<Arc<Parked<Probe>>, String> {
        let parked = slot.lock().clone();
        parked.ok_or_else(|| "no Parked handle for the operation".to_string())
    }
}

/// After a shutdown, from inside a callback or not: every call answers the
/// documented error.
fn refuses_calls(p: &Purg) -> Check {
    check_eq(
        "check_and_complete after shutdown",
        p.check_and_complete(&OWN),
        Err(ShutDownError),
    )?;
    check(
        "cancel_for_key after shutdown to be Err(ShutDownError)",
        matches!(p.cancel_for_key(&OTHER), Err(ShutDownError)),
    )?;
    let (op, _, _) = Probe::new(NEW_ID, LONG);
    check(
        "try_complete_else_watch after shutdown to be Err(WatchError::ShutDown(op))",
        p.try_complete_else_watch(op, [NEW]).map_err(|e| e.kind()) == Err(WatchErrorKind::ShutDown),
    )?;
    let (op, _, _) = Probe::new(NEW_ID, LONG);
    check(
        "park after shutdown to be Err(WatchError::ShutDown(op))",
        p.park(op, [NEW]).map(|_| ()).map_err(|e| e.kind()) == Err(WatchErrorKind::ShutDown),
    )?;
    check_eq("a second shutdown()", p.shutdown(), 0)
}

/// An operation was expired: `on_complete`, then `on_expiration`, once each.
fn expired_once(what: &str, record: &Record) -> Check {
    check_eq(
        &format!("{what}: (on_complete, on_expiration) calls"),
        (get(&record.completed), get(&record.expired)),
        (1, 1),
    )
}

/// The call `call` as X's callback makes it under `trigger`, checking the
/// documented result.
fn op_call(
    call: OpCall,
    ctx: Arc<OpCtx>,
    trigger: OpTrigger,
) -> Box<dyn Fn() -> Check + Send + Sync> {
    match call {
        OpCall::Schedule => Box::new(move || {
            let handle = ctx
                .side
                .schedule(LONG, Box::new(|| ()))
                .map_err(|err| format!("Timer::schedule: {err}"))?;
            check("the scheduled task to be pending", handle.is_pending())
        }),
        OpCall::Cancel => Box::new(move || {
            check_eq(
                "TimerHandle::cancel",
                ctx.side_pending.cancel().is_some(),
                true,
            )
        }),
        OpCall::Reschedule => Box::new(move || {
            check_eq(
                "TimerHandle::reschedule",
                ctx.side_pending.reschedule(2 * LONG),
                true,
            )
        }),
        OpCall::CheckOwn => Box::new(move || {
            let got = ctx.purgatory()?.check_and_complete(&OWN);
            check_eq("check_and_complete(own key)", got, Ok(0))
        }),
        OpCall::CheckOther => Box::new(move || {
            let got = ctx.purgatory()?.check_and_complete(&OTHER);
            check_eq("check_and_complete(other key)", got, Ok(1))?;
            check_eq(
                "the other op's on_complete calls",
                get(&ctx.y_rec.completed),
                1,
            )
        }),
        OpCall::Park => Box::new(move || {
            let (op, _, _) = Probe::new(NEW_ID, LONG);
            let parked = ctx
                .purgatory()?
                .park(op, [NEW])
                .map_err(|err| format!("park: {err}"))?;
            check(
                "the new op to be parked, not done",
                !parked.completed_now() && !parked.is_done(),
            )
        }),
        OpCall::TryCompleteElseWatch => Box::new(move || {
            let (op, _, _) = Probe::new(NEW_ID, LONG);
            let got = ctx
                .purgatory()?
                .try_complete_else_watch(op, [NEW])
                .map_err(|err| err.to_string());
            check_eq("try_complete_else_watch", got, Ok(false))
        }),
        OpCall::CancelOwn => Box::new(move || {
            let back = ctx
                .purgatory()?
                .cancel_for_key(&OWN)
                .map_err(|err| format!("cancel_for_key(own key): {err}"))?;
            check_eq(
                "ids handed back by cancel_for_key(own key)",
                ids(&back),
                vec![],
            )
        }),
        OpCall::CancelOther => Box::new(move || {
            let back = ctx
                .purgatory()?
                .cancel_for_key(&OTHER)
                .map_err(|err| format!("cancel_for_key(other key): {err}"))?;
            check_eq(
                "ids handed back by cancel_for_key(other key)",
                ids(&back),
                vec![Y_ID],
            )
        }),
        OpCall::ForceOwn => {
            let completed = trigger.x_completed_in_callback();
            Box::new(move || {
                let x = OpCtx::parked(&ctx.x)?;
                check_eq("force_complete(own op)", x.force_complete(), false)?;
                check_eq(
                    "the own op's on_complete calls while its callback runs",
                    get(&ctx.x_rec.completed),
                    completed,
                )
            })
        }
        OpCall::ForceOther => Box::new(move || {
            let y = OpCtx::parked(&ctx.y)?;
            check_eq("force_complete(other op)", y.force_complete(), true)?;
            check_eq(
                "the other op's on_complete calls",
                get(&ctx.y_rec.completed),
                1,
            )
        }),
        OpCall::Gauges => {
            let want = trigger.gauges();
            Box::new(move || {
                let p = ctx.purgatory()?;
                let m = p.metrics();
                let got = Gauges {
                    watched: p.watched(),
                    keys: p.keys(),
                    delayed: p.delayed(),
                    completed_by_try: m.satisfied + m.forced,
                    expired: m.expired,
                };
                check_eq("the purgatory's gauges", got, want)?;
                check_eq(
                    "metrics() (watched, delayed, panics)",
                    (m.watched, m.delayed, m.panics),
                    (want.watched, want.delayed, 0),
                )?;
                check_eq(
                    "the separate timer's (len, metrics().pending)",
                    (ctx.side.len(), ctx.side.metrics().pending),
                    (1, 1),
                )
            })
        }
        OpCall::Shutdown => Box::new(move || {
            let p = ctx.purgatory()?;
            p.shutdown();
            expired_once("the other op, after shutdown()", &ctx.y_rec)?;
            refuses_calls(&p)
        }),
        OpCall::DropLast => Box::new(move || {
            let last = ctx.purgatory.lock().take();
            check("the callback's slot to hold a handle", last.is_some())?;
            drop(last);
            expired_once("the other op, after the last handle went", &ctx.y_rec)
        }),
    }
}

/// One purgatory cell: a purgatory with X (the operation under test, parked
/// by the cell) and another operation on another key, a separate timer, and
/// the trap X springs.
struct OpCell {
    /// What runs X's callback.
    trigger: OpTrigger,
    /// What the callback calls.
    call: OpCall,
    /// The purgatory's and the separate timer's clock.
    clock: ManualClock,
    /// The test's purgatory handle; given away where the callback drops the
    /// last one.
    p: Option<Purg>,
    /// What the callback reaches.
    ctx: Arc<OpCtx>,
    /// X's condition.
    x_ready: Arc<AtomicBool>,
    /// The other operation's condition.
    y_ready: Arc<AtomicBool>,
    /// The call, in X's callback.
    trap: Arc<Trap>,
    /// Its verdicts.
    verdicts: Receiver<Verdict>,
}

impl Cell for OpCell {
    type Trigger = OpTrigger;
    type Call = OpCall;

    const CALLS: &'static [OpCall] = &[
        OpCall::Schedule,
        OpCall::Cancel,
        OpCall::Reschedule,
        OpCall::CheckOwn,
        OpCall::CheckOther,
        OpCall::Park,
        OpCall::TryCompleteElseWatch,
        OpCall::CancelOwn,
        OpCall::CancelOther,
        OpCall::ForceOwn,
        OpCall::ForceOther,
        OpCall::Gauges,
        OpCall::Shutdown,
        OpCall::DropLast,
    ];

    fn applies(trigger: OpTrigger, call: OpCall) -> bool {
        match (trigger, call) {
            // Only there does the trigger hold no purgatory handle.
            (OpTrigger::TryViaParkedTry, call) => call == OpCall::DropLast,
            // `park` returns X's `Parked` only after the callback.
            (OpTrigger::TryViaPark | OpTrigger::DropViaPark, OpCall::ForceOwn) => false,
            // The trigger runs on the test's handle, so it is not the last.
            (
                OpTrigger::TryViaPark
                | OpTrigger::TryViaCheck
                | OpTrigger::CompleteViaCheck
                | OpTrigger::DropViaPark
                | OpTrigger::DropViaCheck,
                OpCall::DropLast,
            ) => false,
            _ => true,
        }
    }

    fn new(trigger: OpTrigger, call: OpCall) -> OpCell {
        let clock = ManualClock::new();
        let p: Purg = Purgatory::builder()
            .watch_shards(1)
            // No purge during a cell: lingering entries stay until a check.
            .purge_interval(DEFAULT_PURGE_INTERVAL)
            .timer(Timer::builder().clock(clock.clone()).workers(1))
            .build()
            .expect("the purgatory builds");
        let side: Timer = Timer::builder()
            .clock(clock.clone())
            .driver_thread(false)
            .workers(1)
            .build()
            .expect("the separate timer builds");
        let side_pending = side
            .schedule(LONG, Box::new(|| ()))
            .expect("the separate timer takes a task");
        let (y_op, y_ready, y_rec) = Probe::new(Y_ID, LONG);
        let y = p.park(y_op, [OTHER]).expect("the other op parks");
        let ctx = Arc::new(OpCtx {
            purgatory: Mutex::new(Some(p.clone())),
            x: Mutex::new(None),
            y: Mutex::new(Some(Arc::new(y))),
            x_rec: Arc::default(),
            y_rec,
            side,
            side_pending,
        });
        // Repeat the own-key check at every try: a retry that the check
        // raises then comes back at every attempt.
        let repeat = call == OpCall::CheckOwn && trigger.in_try();
        let (trap, verdicts) = Trap::new(repeat, op_call(call, Arc::clone(&ctx), trigger));
        OpCell {
            trigger,
            call,
            clock,
            p: Some(p),
            ctx,
            x_ready: Arc::default(),
            y_ready,
            trap,
            verdicts,
        }
    }

    fn run(&mut self) -> Verdict {
        let (trigger, call) = (self.trigger, self.call);
        let ctx = Arc::clone(&self.ctx);
        // Handed back at the end unless given away; a cell that fails early
        // drops it (the callback's slot still holds another).
        let mut p = self.p.take();
        if call == OpCall::CheckOther {
            self.y_ready.store(true, SeqCst);
        }
        let x_op = Probe {
            id: X_ID,
            delay: trigger.x_delay(),
            ready: Arc::clone(&self.x_ready),
            record: Arc::clone(&ctx.x_rec),
            trap: Some((trigger.hook(), Arc::clone(&self.trap))),
        };
        if trigger.x_ready_at_park() {
            self.x_ready.store(true, SeqCst);
        }
        if matches!(trigger, OpTrigger::TryViaPark | OpTrigger::DropViaPark) {
            self.trap.arm();
        }
        let parked = the(&p)
            .park(x_op, [OWN])
            .map_err(|err| format!("park(own op): {err}"))?;
        check_eq(
            "park(own op): completed_now",
            parked.completed_now(),
            trigger.x_ready_at_park(),
        )?;
        let x = Some(Arc::new(parked));
        *ctx.x.lock() = x.clone();
        let tries_before = if matches!(trigger, OpTrigger::TryViaPark | OpTrigger::DropViaPark) {
            0
        } else {
            get(&ctx.x_rec.tries)
        };
        let give_away = call == OpCall::DropLast;
        match trigger {
            OpTrigger::TryViaPark | OpTrigger::DropViaPark => {}
            OpTrigger::TryViaCheck => {
                self.trap.arm();
                let got = the(&p).check_and_complete(&OWN);
                check("check_and_complete(own key) to be Ok", got.is_ok())?;
            }
            OpTrigger::TryViaParkedTry => {
                drop(p.take());
                self.trap.arm();
                parked_of(&x).try_complete();
            }
            OpTrigger::CompleteViaCheck | OpTrigger::DropViaCheck => {
                self.x_ready.store(true, SeqCst);
                self.trap.arm();
                let got = the(&p).check_and_complete(&OWN);
                check_eq("check_and_complete(own key), completing X", got, Ok(1))?;
            }
            OpTrigger::CompleteViaForce | OpTrigger::DropViaForce => {
                if give_away {
                    drop(p.take());
                }
                self.trap.arm();
                check_eq(
                    "Parked::force_complete",
                    parked_of(&x).force_complete(),
                    true,
                )?;
            }
            OpTrigger::Expire | OpTrigger::DropViaExpire => {
                if give_away {
                    drop(p.take());
                }
                self.trap.arm();
                self.clock.advance(SHORT);
            }
        }
        let tries = get(&ctx.x_rec.tries) - tries_before;
        collect(&self.verdicts, trigger.on_worker())?;
        drop(x);
        self.check_after(tries, p.as_ref())?;
        self.p = p;
        Ok(())
    }
}

/// The test's purgatory handle, while it holds one.
fn the(p: &Option<Purg>) -> &Purg {
    p.as_ref()
        .expect("the test holds its handle until it gives it away")
}

/// X's handle, while the test holds it.
fn parked_of(x: &Option<Arc<Parked<Probe>>>) -> &Parked<Probe> {
    x.as_ref().expect("the test holds X's handle")
}

impl OpCell {
    /// After the trigger: X completed as documented, the other op left alone
    /// or completed by the call, and the test's handle (if it kept one) sees
    /// a shutdown.
    fn check_after(&self, tries: usize, p: Option<&Purg>) -> Verdict {
        let (call, in_try) = (self.call, self.trigger.in_try());
        let (x, y) = (&self.ctx.x_rec, &self.ctx.y_rec);
        if in_try && call == OpCall::CheckOwn && tries > MAX_TRIES {
            let spun = if tries > SPIN_LIMIT {
                "; it was retried until the callback stopped re-entering (a livelock)"
            } else {
                ""
            };
            return Err(Failure::Wrong(format!(
                "try_complete ran {tries} times for one trigger, want at most {MAX_TRIES}{spun}"
            )));
        }
        let want_x = match call {
            OpCall::ForceOwn | OpCall::Shutdown | OpCall::DropLast => {
                settle("the own op's on_complete to have run", || {
                    get(&x.completed) >= 1
                })?;
                Some(1)
            }
            // Cancelling X itself from inside its try is left open.
            OpCall::CancelOwn if in_try => None,
            _ if in_try => Some(0),
            _ => Some(1),
        };
        if let Some(want) = want_x {
            check_eq("the own op's on_complete calls", get(&x.completed), want)?;
        }
        check(
            "the own op's on_expiration only after its on_complete",
            get(&x.expired) <= get(&x.completed),
        )?;
        if let Some((thread, completed, expired)) = self.trigger.drop_seen() {
            check_eq("the own op's drops", get(&x.dropped), 1)?;
            check_eq(
                "the own op's drop: (thread, on_complete, on_expiration calls before it)",
                x.drop_seen.lock().clone(),
                Some((thread.to_string(), completed, expired)),
            )?;
        }
        let y_calls = (get(&y.completed), get(&y.expired));
        match call {
            OpCall::Shutdown | OpCall::DropLast => expired_once("the other op", y)?,
            OpCall::CheckOther | OpCall::ForceOther => check_eq(
                "the other op's (on_complete, on_expiration) calls",
                y_calls,
                (1, 0),
            )?,
            OpCall::CancelOther => check_eq(
                "the other op, handed back: (on_complete, on_expiration, drops)",
                (y_calls.0, y_calls.1, get(&y.dropped)),
                (0, 0, 1),
            )?,
            _ => check_eq(
                "the other op's (on_complete, on_expiration) calls",
                y_calls,
                (0, 0),
            )?,
        }
        if let Some(p) = p {
            if call == OpCall::Shutdown {
                refuses_calls(p)?;
            }
            check_eq("metrics().panics", p.metrics().panics, 0)?;
        }
        Ok(())
    }
}

impl Drop for OpCell {
    fn drop(&mut self) {
        self.trap.disarm();
        let slot = self.ctx.purgatory.lock().take();
        drop(slot);
        let x = self.ctx.x.lock().take();
        drop(x);
        let y = self.ctx.y.lock().take();
        drop(y);
        drop(self.p.take());
    }
}

/// Row 1: calls from `DelayedOperation::try_complete`, which runs with the
/// operation's lock held by the calling thread.
#[test]
fn row1_try_complete() {
    run_row::<OpCell>(
        "row 1, DelayedOperation::try_complete",
        &[
            OpTrigger::TryViaPark,
            OpTrigger::TryViaCheck,
            OpTrigger::TryViaParkedTry,
        ],
    );
}

/// Row 2: calls from `DelayedOperation::on_complete`.
#[test]
fn row2_on_complete() {
    run_row::<OpCell>(
        "row 2, DelayedOperation::on_complete",
        &[OpTrigger::CompleteViaCheck, OpTrigger::CompleteViaForce],
    );
}

/// Row 3: calls from `DelayedOperation::on_expiration`, on a timer worker.
#[test]
fn row3_on_expiration() {
    run_row::<OpCell>(
        "row 3, DelayedOperation::on_expiration",
        &[OpTrigger::Expire],
    );
}

/// Row 4: calls from the operation's `Drop`, which runs right after its
/// last callback, on the thread that ran it, with no lock of the crate held.
#[test]
fn row4_operation_drop() {
    run_row::<OpCell>(
        "row 4, the operation's Drop",
        &[
            OpTrigger::DropViaPark,
            OpTrigger::DropViaCheck,
            OpTrigger::DropViaForce,
            OpTrigger::DropViaExpire,
        ],
    );
}

// ---------------------------------------------------------------------------
// Timer rows: a task, and a task's Drop
// ---------------------------------------------------------------------------

/// What happened to a task.
#[derive(Debug, Default)]
struct TaskRecord {
    /// Runs.
    ran: AtomicUsize,
    /// Drops of the closure (after running, or instead).
    dropped: AtomicUsize,
}

/// Counts the drops of the task that captures it.
struct DropCounter(Arc<TaskRecord>);

impl Drop for DropCounter {
    fn drop(&mut self) {
        self.0.dropped.fetch_add(1, SeqCst);
    }
}

/// A task that records its run and its drop in `record`.
fn recorded_task(record: &Arc<TaskRecord>) -> BoxTask {
    let counter = DropCounter(Arc::clone(record));
    BoxTask::new(move || {
        counter.0.ran.fetch_add(1, SeqCst);
    })
}

/// A task that sets the returned flag when it runs.
fn marked_task() -> (BoxTask, Arc<AtomicBool>) {
    let ran = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&ran);
    (BoxTask::new(move || flag.store(true, SeqCst)), ran)
}

/// Springs the trap when the task that captures it is dropped.
struct DropTrap(Arc<Trap>);

impl Drop for DropTrap {
    fn drop(&mut self) {
        self.0.spring();
    }
}

/// After shutdown: a schedule hands the task back in its `ScheduleError`.
fn schedule_refused(timer: &Timer) -> Check {
    let (task, ran) = marked_task();
    match timer.schedule(LONG, task) {
        Ok(_) => Err("schedule after shutdown accepted the task".to_string()),
        Err(err) => {
            err.into_inner().run();
            check("the ScheduleError to hold the task", ran.load(SeqCst))
        }
    }
}

/// The calls made from inside a timer task or its `Drop` (the columns).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TimerCall {
    /// `Timer::schedule`.
    Schedule,
    /// `TimerHandle::cancel`, of another pending task and of the task's own.
    Cancel,
    /// `TimerHandle::reschedule`, likewise.
    Reschedule,
    /// `len`, `is_empty`, `is_shut_down`, `metrics`.
    Gauges,
    /// `shutdown()`.
    Shutdown,
    /// Dropping the last `Timer` handle.
    DropLast,
}

impl Named for TimerCall {
    fn name(self) -> &'static str {
        match self {
            TimerCall::Schedule => "Timer::schedule",
            TimerCall::Cancel => "TimerHandle::cancel",
            TimerCall::Reschedule => "TimerHandle::reschedule",
            TimerCall::Gauges => "len/is_empty/metrics",
            TimerCall::Shutdown => "shutdown()",
            TimerCall::DropLast => "drop last handle",
        }
    }
}

/// What runs the task's code (with the code, a row).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TaskTrigger {
    /// The task runs: the clock passes its delay; on a worker.
    Run,
    /// The task's `Drop`: `TimerHandle::cancel` on the test thread.
    DropViaCancel,
    /// The task's `Drop`: the test drops what `Timer::shutdown` returned.
    DropViaShutdown,
    /// The task's `Drop`: the test drops the last `Timer` with it pending.
    DropViaLastHandle,
}

impl Named for TaskTrigger {
    fn name(self) -> &'static str {
        match self {
            TaskTrigger::Run => "Timer task[run]",
            TaskTrigger::DropViaCancel => "task Drop[TimerHandle::cancel]",
            TaskTrigger::DropViaShutdown => "task Drop[Timer::shutdown]",
            TaskTrigger::DropViaLastHandle => "task Drop[last Timer dropped]",
        }
    }
}

impl TaskTrigger {
    /// Whether the timer is still running when the task's code runs.
    fn live(self) -> bool {
        matches!(self, TaskTrigger::Run | TaskTrigger::DropViaCancel)
    }
}

/// What the calls made from inside the task's code reach.
struct TaskCtx {
    /// The callback's timer handle; `DropLast` takes it.
    timer: Mutex<Option<Timer>>,
    /// The handle of the task under test.
    own: Mutex<Option<TimerHandle>>,
    /// Another pending task.
    other: TimerHandle,
    /// What happened to the other task.
    other_rec: Arc<TaskRecord>,
}

impl TaskCtx {
    /// A clone of the callback's timer handle.
    fn timer(&self) -> Result<Timer, String> {
        let timer = self.timer.lock().clone();
        timer.ok_or_else(|| "the callback's timer handle is gone".to_string())
    }

    /// The handle of the task under test.
    fn own(&self) -> Result<TimerHandle, String> {
        let own = self.own.lock().clone();
        own.ok_or_else(|| "no handle for the task under test".to_string())
    }
}

/// The call `call` as the task's code makes it under `trigger`, checking the
/// documented result.
fn timer_call(
    call: TimerCall,
    ctx: Arc<TaskCtx>,
    trigger: TaskTrigger,
) -> Box<dyn Fn() -> Check + Send + Sync> {
    let live = trigger.live();
    match call {
        TimerCall::Schedule => Box::new(move || {
            let timer = ctx.timer()?;
            if !live {
                return schedule_refused(&timer);
            }
            let handle = timer
                .schedule(LONG, Box::new(|| ()))
                .map_err(|err| format!("schedule: {err}"))?;
            check("the scheduled task to be pending", handle.is_pending())
        }),
        TimerCall::Cancel => Box::new(move || {
            check_eq(
                "cancel(another pending task)",
                ctx.other.cancel().is_some(),
                live,
            )?;
            check_eq(
                "cancel(the task's own handle)",
                ctx.own()?.cancel().is_some(),
                false,
            )
        }),
        TimerCall::Reschedule => Box::new(move || {
            check_eq(
                "reschedule(another pending task)",
                ctx.other.reschedule(2 * LONG),
                live,
            )?;
            check_eq(
                "reschedule(the task's own handle)",
                ctx.own()?.reschedule(2 * LONG),
                false,
            )
        }),
        TimerCall::Gauges => {
            let (cancelled, expired) = match trigger {
                TaskTrigger::Run => (0, 1),
                TaskTrigger::DropViaCancel => (1, 0),
                TaskTrigger::DropViaShutdown | TaskTrigger::DropViaLastHandle => (0, 0),
            };
            Box::new(move || {
                let timer = ctx.timer()?;
                let pending = usize::from(live);
                check_eq(
                    "(len, is_empty, is_shut_down)",
                    (timer.len(), timer.is_empty(), timer.is_shut_down()),
                    (pending, !live, !live),
                )?;
                let m = timer.metrics();
                check_eq(
                    "metrics (pending, scheduled, cancelled, expired, panicked)",
                    (m.pending, m.scheduled, m.cancelled, m.expired, m.panicked),
                    (pending, 2, cancelled, expired, 0),
                )
            })
        }
        TimerCall::Shutdown => Box::new(move || {
            let timer = ctx.timer()?;
            let left = timer.shutdown();
            check_eq(
                "tasks handed back by shutdown()",
                left.len(),
                usize::from(live),
            )?;
            drop(left);
            check("is_shut_down() after shutdown()", timer.is_shut_down())?;
            check_eq("a second shutdown()", timer.shutdown().len(), 0)?;
            schedule_refused(&timer)
        }),
        TimerCall::DropLast => Box::new(move || {
            let last = ctx.timer.lock().take();
            check("the callback's slot to hold a handle", last.is_some())?;
            drop(last);
            if live {
                check_eq(
                    "the other pending task (runs, drops)",
                    (get(&ctx.other_rec.ran), get(&ctx.other_rec.dropped)),
                    (0, 1),
                )?;
            }
            Ok(())
        }),
    }
}

/// One timer cell: a timer with the task under test and another pending
/// task, and the trap the task's code springs.
struct TaskCell {
    /// What runs the task's code.
    trigger: TaskTrigger,
    /// What the code calls.
    call: TimerCall,
    /// The timer's clock.
    clock: ManualClock,
    /// The test's timer handle; given away where the code drops the last.
    timer: Option<Timer>,
    /// What the code reaches.
    ctx: Arc<TaskCtx>,
    /// The call, in the task's code.
    trap: Arc<Trap>,
    /// Its verdicts.
    verdicts: Receiver<Verdict>,
}

impl Cell for TaskCell {
    type Trigger = TaskTrigger;
    type Call = TimerCall;

    const CALLS: &'static [TimerCall] = &[
        TimerCall::Schedule,
        TimerCall::Cancel,
        TimerCall::Reschedule,
        TimerCall::Gauges,
        TimerCall::Shutdown,
        TimerCall::DropLast,
    ];

    fn applies(trigger: TaskTrigger, call: TimerCall) -> bool {
        // Dropped with the last `Timer`, the task can reach no `Timer`
        // (holding one would keep it alive), only handles.
        trigger != TaskTrigger::DropViaLastHandle
            || matches!(call, TimerCall::Cancel | TimerCall::Reschedule)
    }

    fn new(trigger: TaskTrigger, call: TimerCall) -> TaskCell {
        let clock = ManualClock::new();
        let timer: Timer = Timer::builder()
            .clock(clock.clone())
            .workers(1)
            .build()
            .expect("the timer builds");
        let other_rec = Arc::default();
        let other = timer
            .schedule(LONG, recorded_task(&other_rec))
            .expect("the timer takes the other task");
        let ctx = Arc::new(TaskCtx {
            timer: Mutex::new(Some(timer.clone())),
            own: Mutex::new(None),
            other,
            other_rec,
        });
        let (trap, verdicts) = Trap::new(false, timer_call(call, Arc::clone(&ctx), trigger));
        TaskCell {
            trigger,
            call,
            clock,
            timer: Some(timer),
            ctx,
            trap,
            verdicts,
        }
    }

    fn run(&mut self) -> Verdict {
        let (trigger, call) = (self.trigger, self.call);
        let mut timer = self.timer.take();
        let task: BoxTask = if trigger == TaskTrigger::Run {
            let trap = Arc::clone(&self.trap);
            BoxTask::new(move || trap.spring())
        } else {
            let on_drop = DropTrap(Arc::clone(&self.trap));
            BoxTask::new(move || drop(on_drop))
        };
        let delay = if trigger == TaskTrigger::Run {
            SHORT
        } else {
            LONG
        };
        let own = the_timer(&timer)
            .schedule(delay, task)
            .map_err(|err| format!("schedule(the task under test): {err}"))?;
        *self.ctx.own.lock() = Some(own.clone());
        let give_away = call == TimerCall::DropLast;
        match trigger {
            TaskTrigger::Run => {
                if give_away {
                    drop(timer.take());
                }
                self.trap.arm();
                self.clock.advance(SHORT);
            }
            TaskTrigger::DropViaCancel => {
                if give_away {
                    drop(timer.take());
                }
                self.trap.arm();
                check_eq("cancel(the task under test)", own.cancel().is_some(), true)?;
            }
            TaskTrigger::DropViaShutdown => {
                let left = the_timer(&timer).shutdown();
                check_eq("tasks handed back by shutdown()", left.len(), 2)?;
                if give_away {
                    drop(timer.take());
                }
                self.trap.arm();
                drop(left);
            }
            TaskTrigger::DropViaLastHandle => {
                let slot = self.ctx.timer.lock().take();
                drop(slot);
                self.trap.arm();
                drop(timer.take());
            }
        }
        collect(&self.verdicts, trigger == TaskTrigger::Run)?;
        if call == TimerCall::Shutdown {
            if let Some(timer) = &timer {
                check(
                    "the test's handle to see the shutdown",
                    timer.is_shut_down(),
                )?;
                schedule_refused(timer)?;
            }
        }
        self.timer = timer;
        Ok(())
    }
}

/// The test's timer handle, while it holds one.
fn the_timer(timer: &Option<Timer>) -> &Timer {
    timer
        .as_ref()
        .expect("the test holds its handle until it gives it away")
}

impl Drop for TaskCell {
    fn drop(&mut self) {
        self.trap.disarm();
        let slot = self.ctx.timer.lock().take();
        drop(slot);
        self.ctx.own.lock().take();
        drop(self.timer.take());
    }
}

/// Row 5: calls from a `Timer` task, on a worker.
#[test]
fn row5_timer_task() {
    run_row::<TaskCell>("row 5, a Timer task", &[TaskTrigger::Run]);
}

/// Row 6: calls from a `Timer` task's `Drop`.
#[test]
fn row6_timer_task_drop() {
    run_row::<TaskCell>(
        "row 6, a Timer task's Drop",
        &[
            TaskTrigger::DropViaCancel,
            TaskTrigger::DropViaShutdown,
            TaskTrigger::DropViaLastHandle,
        ],
    );
}

// ---------------------------------------------------------------------------
// Keyed-timer rows: the expiry callback, and a value's Drop
// ---------------------------------------------------------------------------

/// Value id of the own key's entry (the one under test).
const V_OWN: u32 = 10;
/// Value id of the entry that replaces it under the `set` trigger.
const V_REPLACEMENT: u32 = 11;
/// Value id of the other key's entry.
const V_OTHER: u32 = 20;
/// Value id of entries set from inside the callback.
const V_NEW: u32 = 30;

/// The keyed timer of the keyed rows.
type Keyed = KeyedTimer<u32, Val>;

/// A keyed timer's value: an id, a drop counter, and (for the value under
/// test) a trap its `Drop` springs.
struct Val {
    /// Tells values apart.
    id: u32,
    /// Counts its drops.
    drops: Arc<AtomicUsize>,
    /// Sprung on drop.
    trap: Option<Arc<Trap>>,
}

impl Val {
    /// A plain value.
    fn new(id: u32) -> Val {
        Val {
            id,
            drops: Arc::default(),
            trap: None,
        }
    }
}

impl Drop for Val {
    fn drop(&mut self) {
        self.drops.fetch_add(1, SeqCst);
        if let Some(trap) = &self.trap {
            trap.spring();
        }
    }
}

/// The calls made from inside a keyed timer's callback or a value's `Drop`
/// (the columns).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KeyedCall {
    /// `set` on the own key (the one that expired or whose value dropped).
    SetOwn,
    /// `set` on the other key.
    SetOther,
    /// `reset` of both keys.
    Reset,
    /// `remove` of both keys.
    Remove,
    /// `contains` of both keys.
    Contains,
    /// `drain`.
    Drain,
    /// `len` and `is_empty`.
    Len,
    /// `shutdown()`.
    Shutdown,
    /// Dropping the last `KeyedTimer` handle.
    DropLast,
}

impl Named for KeyedCall {
    fn name(self) -> &'static str {
        match self {
            KeyedCall::SetOwn => "set(own key)",
            KeyedCall::SetOther => "set(other key)",
            KeyedCall::Reset => "reset",
            KeyedCall::Remove => "remove",
            KeyedCall::Contains => "contains",
            KeyedCall::Drain => "drain",
            KeyedCall::Len => "len/is_empty",
            KeyedCall::Shutdown => "shutdown()",
            KeyedCall::DropLast => "drop last handle",
        }
    }
}

/// What runs the code under test (with the code, a row).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KeyedTrigger {
    /// The expiry callback: the clock passes the own key's delay; on a worker.
    Expire,
    /// The own value's `Drop`: the test drops what `remove` returned.
    DropViaRemove,
    /// The own value's `Drop`: the test drops what `set` replacing it returned.
    DropViaSet,
    /// The own value's `Drop`: the test drops what `drain` returned.
    DropViaDrain,
    /// The own value's `Drop`: the test drops what `shutdown` returned.
    DropViaShutdown,
}

impl Named for KeyedTrigger {
    fn name(self) -> &'static str {
        match self {
            KeyedTrigger::Expire => "KeyedTimer callback[clock]",
            KeyedTrigger::DropViaRemove => "value Drop[remove]",
            KeyedTrigger::DropViaSet => "value Drop[set replacing it]",
            KeyedTrigger::DropViaDrain => "value Drop[drain]",
            KeyedTrigger::DropViaShutdown => "value Drop[shutdown]",
        }
    }
}

/// The keyed timer as the code under test sees it.
#[derive(Clone, Copy, Debug)]
struct KeyedState {
    /// The id of the own key's value, if it is set.
    own: Option<u32>,
    /// The id of the other key's value, if it is set.
    other: Option<u32>,
    /// Whether the timer is running (not shut down).
    live: bool,
}

impl KeyedTrigger {
    /// The keyed timer while the code under test runs.
    fn state(self) -> KeyedState {
        let (own, other, live) = match self {
            KeyedTrigger::Expire | KeyedTrigger::DropViaRemove => (None, Some(V_OTHER), true),
            KeyedTrigger::DropViaSet => (Some(V_REPLACEMENT), Some(V_OTHER), true),
            KeyedTrigger::DropViaDrain => (None, None, true),
            KeyedTrigger::DropViaShutdown => (None, None, false),
        };
        KeyedState { own, other, live }
    }
}

/// What the calls made from inside the code under test reach.
struct KeyedCtx {
    /// The callback's keyed-timer handle; `DropLast` takes it.
    keyed: Mutex<Option<Keyed>>,
    /// Drops of the other key's value.
    other_drops: Arc<AtomicUsize>,
}

impl KeyedCtx {
    /// A clone of the callback's keyed-timer handle.
    fn keyed(&self) -> Result<Keyed, String> {
        let keyed = self.keyed.lock().clone();
        keyed.ok_or_else(|| "the callback's keyed-timer handle is gone".to_string())
    }
}

/// `set(key, a new value)`: while the timer runs, answers the key's previous
/// value (id `previous`); after shutdown, hands key and value back in a
/// `ScheduleError`.
fn set_checked(keyed: &Keyed, key: u32, previous: Option<u32>, live: bool) -> Check {
    match (keyed.set(key, Val::new(V_NEW), LONG), live) {
        (Ok(old), true) => {
            check_eq(
                &format!("set({key}): the previous value's id"),
                old.map(|v| v.id),
                previous,
            )?;
            check(&format!("key {key} to be set"), keyed.contains(&key))
        }
        (Err(err), false) => {
            let (back_key, back) = err.into_inner();
            check_eq(
                "the (key, value id) in the ScheduleError",
                (back_key, back.id),
                (key, V_NEW),
            )
        }
        (Ok(_), false) => Err(format!("set({key}) after shutdown was accepted")),
        (Err(err), true) => Err(format!("set({key}): {err}")),
    }
}

/// `(key, value id)` pairs, sorted.
fn entries(pairs: Vec<(u32, Val)>) -> Vec<(u32, u32)> {
    let mut ids: Vec<(u32, u32)> = pairs.into_iter().map(|(key, v)| (key, v.id)).collect();
    ids.sort_unstable();
    ids
}

/// The call `call` as the code under test makes it under `trigger`, checking
/// the documented result.
fn keyed_call(
    call: KeyedCall,
    ctx: Arc<KeyedCtx>,
    trigger: KeyedTrigger,
) -> Box<dyn Fn() -> Check + Send + Sync> {
    let KeyedState { own, other, live } = trigger.state();
    let set: Vec<(u32, u32)> = [(OWN, own), (OTHER, other)]
        .into_iter()
        .filter_map(|(key, id)| id.map(|id| (key, id)))
        .collect();
    match call {
        KeyedCall::SetOwn => Box::new(move || set_checked(&ctx.keyed()?, OWN, own, live)),
        KeyedCall::SetOther => Box::new(move || set_checked(&ctx.keyed()?, OTHER, other, live)),
        KeyedCall::Reset => Box::new(move || {
            let k = ctx.keyed()?;
            check_eq(
                "(reset(own key), reset(other key))",
                (k.reset(&OWN, LONG), k.reset(&OTHER, LONG)),
                (own.is_some(), other.is_some()),
            )
        }),
        KeyedCall::Remove => Box::new(move || {
            let k = ctx.keyed()?;
            let got = (k.remove(&OWN).map(|v| v.id), k.remove(&OTHER).map(|v| v.id));
            check_eq("(remove(own key), remove(other key))", got, (own, other))
        }),
        KeyedCall::Contains => Box::new(move || {
            let k = ctx.keyed()?;
            check_eq(
                "(contains(own key), contains(other key))",
                (k.contains(&OWN), k.contains(&OTHER)),
                (own.is_some(), other.is_some()),
            )
        }),
        KeyedCall::Drain => Box::new(move || {
            let got = entries(ctx.keyed()?.drain());
            check_eq("drain()", got, set.clone())
        }),
        KeyedCall::Len => Box::new(move || {
            let k = ctx.keyed()?;
            check_eq(
                "(len, is_empty)",
                (k.len(), k.is_empty()),
                (set.len(), set.is_empty()),
            )
        }),
        KeyedCall::Shutdown => Box::new(move || {
            let k = ctx.keyed()?;
            check_eq("shutdown()", entries(k.shutdown()), set.clone())?;
            set_checked(&k, NEW, None, false)
        }),
        KeyedCall::DropLast => Box::new(move || {
            let last = ctx.keyed.lock().take();
            check("the callback's slot to hold a handle", last.is_some())?;
            drop(last);
            Ok(())
        }),
    }
}

/// One keyed-timer cell: a keyed timer with the own key's entry (under test)
/// and the other key's, and the trap the code under test springs.
struct KeyedCell {
    /// What runs the code under test.
    trigger: KeyedTrigger,
    /// What the code calls.
    call: KeyedCall,
    /// The keyed timer's clock.
    clock: ManualClock,
    /// The test's handle; given away where the code drops the last one.
    keyed: Option<Keyed>,
    /// What the code reaches.
    ctx: Arc<KeyedCtx>,
    /// The call, in the code under test.
    trap: Arc<Trap>,
    /// Its verdicts.
    verdicts: Receiver<Verdict>,
}

impl Cell for KeyedCell {
    type Trigger = KeyedTrigger;
    type Call = KeyedCall;

    const CALLS: &'static [KeyedCall] = &[
        KeyedCall::SetOwn,
        KeyedCall::SetOther,
        KeyedCall::Reset,
        KeyedCall::Remove,
        KeyedCall::Contains,
        KeyedCall::Drain,
        KeyedCall::Len,
        KeyedCall::Shutdown,
        KeyedCall::DropLast,
    ];

    fn applies(_: KeyedTrigger, _: KeyedCall) -> bool {
        true
    }

    fn new(trigger: KeyedTrigger, call: KeyedCall) -> KeyedCell {
        let clock = ManualClock::new();
        let ctx = Arc::new(KeyedCtx {
            keyed: Mutex::new(None),
            other_drops: Arc::default(),
        });
        let (trap, verdicts) = Trap::new(false, keyed_call(call, Arc::clone(&ctx), trigger));
        let in_callback = (trigger == KeyedTrigger::Expire).then(|| Arc::clone(&trap));
        let keyed: Keyed = KeyedTimer::with_timer(
            Timer::builder().clock(clock.clone()).workers(1),
            move |key, _value: Val| {
                if let (OWN, Some(trap)) = (key, &in_callback) {
                    trap.spring();
                }
            },
        )
        .expect("the keyed timer builds");
        *ctx.keyed.lock() = Some(keyed.clone());
        let other = Val {
            id: V_OTHER,
            drops: Arc::clone(&ctx.other_drops),
            trap: None,
        };
        keyed.set(OTHER, other, LONG).expect("the other key is set");
        let own = Val {
            id: V_OWN,
            drops: Arc::default(),
            trap: (trigger != KeyedTrigger::Expire).then(|| Arc::clone(&trap)),
        };
        let delay = if trigger == KeyedTrigger::Expire {
            SHORT
        } else {
            LONG
        };
        keyed.set(OWN, own, delay).expect("the own key is set");
        KeyedCell {
            trigger,
            call,
            clock,
            keyed: Some(keyed),
            ctx,
            trap,
            verdicts,
        }
    }

    fn run(&mut self) -> Verdict {
        let (trigger, call) = (self.trigger, self.call);
        let mut keyed = self.keyed.take();
        match trigger {
            KeyedTrigger::Expire => {
                if call == KeyedCall::DropLast {
                    drop(keyed.take());
                }
                self.trap.arm();
                self.clock.advance(SHORT);
            }
            KeyedTrigger::DropViaRemove => {
                let value = the_keyed(&keyed).remove(&OWN);
                let got = value.as_ref().map(|v| v.id);
                check_eq("remove(own key)", got, Some(V_OWN))?;
                self.let_go(value, &mut keyed);
            }
            KeyedTrigger::DropViaSet => {
                let value = the_keyed(&keyed).set(OWN, Val::new(V_REPLACEMENT), LONG);
                let got = value.as_ref().map(|old| old.as_ref().map(|v| v.id));
                check_eq("set(own key) replacing it", got.ok(), Some(Some(V_OWN)))?;
                self.let_go(value, &mut keyed);
            }
            KeyedTrigger::DropViaDrain => {
                let values = the_keyed(&keyed).drain();
                check_eq("drain() entries", values.len(), 2)?;
                self.let_go(values, &mut keyed);
            }
            KeyedTrigger::DropViaShutdown => {
                let values = the_keyed(&keyed).shutdown();
                check_eq("shutdown() entries", values.len(), 2)?;
                self.let_go(values, &mut keyed);
            }
        }
        collect(&self.verdicts, trigger == KeyedTrigger::Expire)?;
        if call == KeyedCall::Shutdown {
            if let Some(keyed) = &keyed {
                set_checked(keyed, NEW, None, false)?;
            }
        }
        if call == KeyedCall::DropLast && trigger.state().other.is_some() {
            settle("the other key's value to go with the keyed timer", || {
                get(&self.ctx.other_drops) == 1
            })?;
        }
        self.keyed = keyed;
        Ok(())
    }
}

impl KeyedCell {
    /// Drops what a trigger call handed back, with the trap armed; first the
    /// test's handle, where the code under test drops the last one.
    fn let_go<T>(&self, handed_back: T, keyed: &mut Option<Keyed>) {
        if self.call == KeyedCall::DropLast {
            drop(keyed.take());
        }
        self.trap.arm();
        drop(handed_back);
    }
}

/// The test's keyed-timer handle, while it holds one.
fn the_keyed(keyed: &Option<Keyed>) -> &Keyed {
    keyed
        .as_ref()
        .expect("the test holds its handle until it gives it away")
}

impl Drop for KeyedCell {
    fn drop(&mut self) {
        self.trap.disarm();
        let slot = self.ctx.keyed.lock().take();
        drop(slot);
        drop(self.keyed.take());
    }
}

/// Row 7: calls from a `KeyedTimer`'s expiry callback, on a worker.
#[test]
fn row7_keyed_expiry_callback() {
    run_row::<KeyedCell>(
        "row 7, the KeyedTimer expiry callback",
        &[KeyedTrigger::Expire],
    );
}

/// Row 8: calls from a `KeyedTimer` value's `Drop`.
#[test]
fn row8_keyed_value_drop() {
    run_row::<KeyedCell>(
        "row 8, a KeyedTimer value's Drop",
        &[
            KeyedTrigger::DropViaRemove,
            KeyedTrigger::DropViaSet,
            KeyedTrigger::DropViaDrain,
            KeyedTrigger::DropViaShutdown,
        ],
    );
}
