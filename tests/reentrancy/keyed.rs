//! The keyed-timer rows: calls from the expiry callback, and from a value's `Drop`.

use super::*;

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
