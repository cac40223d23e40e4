//! The purgatory rows: calls from `try_complete`, `on_complete`, `on_complete(Expired)` and an operation's `Drop`.

use super::*;

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
