//! The timer rows: calls from a task, and from a task's `Drop`.

use super::*;

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
    /// By `TimerId`: `Timer::is_pending`, `reschedule` and `cancel` of
    /// another pending task, `cancel` of the task's own, `schedule_id`.
    ById,
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
            TimerCall::ById => "Timer::cancel/reschedule/is_pending/schedule_id by id",
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
        TimerCall::ById => Box::new(move || {
            let timer = ctx.timer()?;
            let (other, own) = (ctx.other.id(), ctx.own()?.id());
            check_eq(
                "is_pending(another task's id)",
                timer.is_pending(other),
                live,
            )?;
            check_eq(
                "reschedule(another task's id)",
                timer.reschedule(other, 2 * LONG),
                live,
            )?;
            check_eq(
                "cancel(another task's id)",
                timer.cancel(other).is_some(),
                live,
            )?;
            check_eq(
                "cancel(the task's own id)",
                timer.cancel(own).is_some(),
                false,
            )?;
            match timer.schedule_id(LONG, Box::new(|| ())) {
                Ok(id) => check_eq(
                    "(live, the task scheduled by id pending)",
                    (live, timer.is_pending(id)),
                    (true, true),
                ),
                Err(err) => {
                    drop(err.into_inner());
                    check("schedule_id refused only once shut down", !live)
                }
            }
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
        TimerCall::ById,
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
