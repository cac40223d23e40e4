//! A proptest model of `LocalTimer` against a `BTreeMap`.
//!
//! Random sequences of schedule / cancel / reschedule / advance, at ticks of
//! 1 µs, 1 ms, 10 ms and 100 ms and wheel sizes from 2 upward (small wheels
//! force many levels). Checked after every step: each timer comes out exactly
//! once, never before its deadline, never more than one tick after it
//! relative to the advances made, in deadline order; a deadline at or before
//! the timer's time is due at once; cancel returns the payload exactly when
//! the model says it is pending; stale keys are harmless.
//!
//! Some delays fall within a few ticks of 2^31 ticks, the edge of the wheel's
//! near window (an 8-byte reference holds a deadline less than 2^31 ticks
//! ahead of the wheel's time; the rest wait in a side heap), and some steps
//! are that long, so timers cross from one side of the edge to the other
//! and references are read back across the wrap of their 31-bit check.

use std::collections::BTreeMap;
use std::time::Duration;

use proptest::prelude::*;
use purgatorio::{LocalTimer, TimerKey};

#[derive(Clone, Debug)]
enum Op {
    /// Schedule at now + delay (nanoseconds).
    Schedule(u64),
    /// Schedule at an absolute deadline that may be in the past.
    ScheduleAt(u64),
    /// Cancel the i-th key ever issued (maybe stale).
    Cancel(usize),
    /// Reschedule the i-th key to now + delay.
    Reschedule(usize, u64),
    /// Advance by this many nanoseconds and drain everything due.
    Advance(u64),
    /// Advance and take only a few expirations, leaving the rest pending.
    AdvancePartial(u64, usize),
}

/// Ticks from the wheel's time to the edge of its near window.
const NEAR_TICKS: u64 = 1 << 31;

/// Nanoseconds within a few ticks of the near window's edge.
fn near_edge(tick_ns: u64) -> std::ops::Range<u64> {
    tick_ns * (NEAR_TICKS - 4)..tick_ns * (NEAR_TICKS + 4)
}

fn op(tick_ns: u64) -> impl Strategy<Value = Op> {
    // Delays span many tick widths and, now and then, far beyond the wheel
    // or across the edge of its near window.
    let delay = prop_oneof![
        8 => 0..tick_ns * 300,
        4 => 0..tick_ns * 100_000,
        1 => near_edge(tick_ns),
        2 => 0..u64::MAX / 4,
    ];
    let step = prop_oneof![
        6 => 0..tick_ns * 3,
        4 => 0..tick_ns * 500,
        2 => 0..tick_ns * 200_000,
        1 => near_edge(tick_ns),
    ];
    prop_oneof![
        6 => delay.clone().prop_map(Op::Schedule),
        1 => (0..tick_ns * 1000).prop_map(Op::ScheduleAt),
        3 => any::<usize>().prop_map(Op::Cancel),
        2 => (any::<usize>(), delay).prop_map(|(i, d)| Op::Reschedule(i, d)),
        3 => step.clone().prop_map(Op::Advance),
        1 => (step, 0usize..4).prop_map(|(s, n)| Op::AdvancePartial(s, n)),
    ]
}

/// A pending timer in the model.
#[derive(Clone, Copy, Debug)]
struct Pending {
    /// The exact requested deadline, in ns.
    deadline: u64,
    /// The tick in which it is due: its deadline rounded up, but for a
    /// deadline at or before the timer's time when scheduled no later than
    /// that time's tick (due at once).
    due_tick: u64,
    /// Its key.
    key: TimerKey,
}

#[derive(Debug)]
struct Model {
    /// id → pending timer
    pending: BTreeMap<u64, Pending>,
    keys: Vec<(u64, TimerKey)>,
}

impl Model {
    /// Records timer `id` as pending for `deadline`, scheduled (or moved)
    /// when the timer's time was `timer_now`.
    fn track(&mut self, id: u64, key: TimerKey, deadline: u64, timer_now: u64, tick_ns: u64) {
        let due_tick = due_tick(deadline, timer_now, tick_ns);
        self.pending.insert(
            id,
            Pending {
                deadline,
                due_tick,
                key,
            },
        );
    }
}

/// The tick in which a timer scheduled for `deadline` is due when the
/// timer's time is `now` (both in ns): its deadline rounded up, but never
/// past `now`'s tick if the deadline has passed.
fn due_tick(deadline: u64, now: u64, tick_ns: u64) -> u64 {
    let tick = deadline.div_ceil(tick_ns);
    if deadline <= now {
        tick.min(now / tick_ns)
    } else {
        tick
    }
}

/// The start of `tick`, in ns, without overflow.
fn tick_start(tick: u64, tick_ns: u64) -> u128 {
    u128::from(tick) * u128::from(tick_ns)
}

fn run(tick_ns: u64, wheel_size: usize, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let tick = Duration::from_nanos(tick_ns);
    let mut timer: LocalTimer<u64> = LocalTimer::builder()
        .tick(tick)
        .wheel_size(wheel_size)
        .build()
        .unwrap();
    let mut model = Model {
        pending: BTreeMap::new(),
        keys: Vec::new(),
    };
    let mut now: u64 = 0;
    let mut next_id = 0u64;
    // Time of the previous advance: a timer must come out at the first
    // advance at or after its deadline rounded up to the tick.
    for op in ops {
        match op {
            Op::Schedule(delay) | Op::ScheduleAt(delay) => {
                let deadline = match op {
                    Op::Schedule(_) => now.saturating_add(delay),
                    _ => delay,
                };
                let id = next_id;
                next_id += 1;
                let timer_now = timer.now().as_nanos() as u64;
                let key = timer.schedule_at(Duration::from_nanos(deadline), id);
                model.track(id, key, deadline, timer_now, tick_ns);
                model.keys.push((id, key));
            }
            Op::Cancel(i) => {
                if model.keys.is_empty() {
                    continue;
                }
                let (id, key) = model.keys[i % model.keys.len()];
                let expected = model.pending.remove(&id).map(|_| id);
                prop_assert_eq!(timer.cancel(key), expected);
                prop_assert!(!timer.contains(key));
            }
            Op::Reschedule(i, delay) => {
                if model.keys.is_empty() {
                    continue;
                }
                let (id, key) = model.keys[i % model.keys.len()];
                let deadline = now.saturating_add(delay);
                let pending = model.pending.contains_key(&id);
                let timer_now = timer.now().as_nanos() as u64;
                prop_assert_eq!(
                    timer.reschedule_at(key, Duration::from_nanos(deadline)),
                    pending
                );
                if pending {
                    model.track(id, key, deadline, timer_now, tick_ns);
                }
            }
            Op::Advance(step) | Op::AdvancePartial(step, _) => {
                now = now.saturating_add(step);
                let limit = match op {
                    Op::AdvancePartial(_, n) => n,
                    _ => usize::MAX,
                };
                let mut last_deadline = Duration::ZERO;
                let mut taken = 0;
                while taken < limit {
                    let Some(e) = timer.poll(Duration::from_nanos(now)) else {
                        break;
                    };
                    taken += 1;
                    let id = *e.get_ref();
                    let Some(Pending {
                        deadline,
                        due_tick,
                        key,
                    }) = model.pending.remove(&id)
                    else {
                        return Err(TestCaseError::fail(format!(
                            "timer {id} fired twice or after cancel"
                        )));
                    };
                    prop_assert_eq!(e.key(), key);
                    prop_assert!(
                        deadline <= now,
                        "timer {} early: deadline {} now {}",
                        id,
                        deadline,
                        now
                    );
                    prop_assert_eq!(e.deadline().as_nanos(), tick_start(due_tick, tick_ns));
                    prop_assert!(e.deadline() >= last_deadline, "out of deadline order");
                    last_deadline = e.deadline();
                }
                if limit == usize::MAX {
                    // Everything whose rounded-up deadline has come is out: at
                    // most one tick late relative to the advances made.
                    let now_tick = now / tick_ns;
                    for (id, pending) in &model.pending {
                        let due_tick = pending.due_tick;
                        prop_assert!(
                            due_tick > now_tick,
                            "timer {} due at tick {} still pending at tick {}",
                            id,
                            due_tick,
                            now_tick
                        );
                    }
                }
            }
        }
        prop_assert_eq!(timer.len(), model.pending.len());
        if let (Some(next), Some(min)) = (
            timer.next_expiration(),
            model.pending.values().map(|p| p.due_tick).min(),
        ) {
            let due = tick_start(min, tick_ns).max(u128::from(now / tick_ns * tick_ns));
            prop_assert!(
                next.as_nanos() <= due,
                "next_expiration {:?} later than earliest due {} ns",
                next,
                due
            );
        }
        if model.pending.is_empty() {
            prop_assert_eq!(timer.next_expiration(), None);
        }
    }
    let mut left = timer.drain();
    left.sort();
    let expected: Vec<u64> = model.pending.keys().copied().collect();
    prop_assert_eq!(left, expected);
    Ok(())
}

/// Cases per model test: `PURGATORIO_MODEL_CASES`, else a count a debug
/// build runs in seconds (CI's release step asks for 10,000).
fn cases() -> u32 {
    std::env::var("PURGATORIO_MODEL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if cfg!(debug_assertions) { 32 } else { 256 })
}

macro_rules! model_test {
    ($name:ident, $tick_ns:expr) => {
        proptest! {
            #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]
            #[test]
            fn $name(
                wheel_size in prop_oneof![Just(2usize), Just(3), Just(4), Just(8), Just(20), Just(64), 2usize..300],
                ops in prop::collection::vec(op($tick_ns), 1..300),
            ) {
                run($tick_ns, wheel_size, ops)?;
            }
        }
    };
}

model_test!(model_tick_1us, 1_000);
model_test!(model_tick_1ms, 1_000_000);
model_test!(model_tick_10ms, 10_000_000);
model_test!(model_tick_100ms, 100_000_000);

// ---------------------------------------------------------------------------
// The fuzz harness: the same model, fed operation sequences decoded with
// `arbitrary` from random bytes, for as long as asked.
//
//   PURGATORIO_FUZZ_SECS=600 cargo test --release --test local_model fuzz -- --nocapture
//
// Without the variable it runs 300 sequences. A failure prints the seed of
// the failing sequence; PURGATORIO_FUZZ_SEED=<seed> replays just that one.

use arbitrary::Unstructured;
use rand::rngs::SmallRng;
use rand::{RngCore, SeedableRng};

/// A delay spanning many tick widths and, now and then, far beyond the wheel.
fn fuzz_delay(u: &mut Unstructured, tick_ns: u64) -> arbitrary::Result<u64> {
    let edge = near_edge(tick_ns);
    Ok(match u.int_in_range(0..=14u8)? {
        0..=7 => u.int_in_range(0..=tick_ns * 300)?,
        8..=11 => u.int_in_range(0..=tick_ns * 100_000)?,
        12 => u.int_in_range(edge.start..=edge.end)?,
        _ => u.int_in_range(0..=u64::MAX / 4)?,
    })
}

fn fuzz_step(u: &mut Unstructured, tick_ns: u64) -> arbitrary::Result<u64> {
    let edge = near_edge(tick_ns);
    Ok(match u.int_in_range(0..=12u8)? {
        0..=5 => u.int_in_range(0..=tick_ns * 3)?,
        6..=9 => u.int_in_range(0..=tick_ns * 500)?,
        10 | 11 => u.int_in_range(0..=tick_ns * 200_000)?,
        _ => u.int_in_range(edge.start..=edge.end)?,
    })
}

fn fuzz_op(u: &mut Unstructured, tick_ns: u64) -> arbitrary::Result<Op> {
    Ok(match u.int_in_range(0..=15u8)? {
        0..=5 => Op::Schedule(fuzz_delay(u, tick_ns)?),
        6 => Op::ScheduleAt(u.int_in_range(0..=tick_ns * 1000)?),
        7..=9 => Op::Cancel(u.arbitrary()?),
        10 | 11 => Op::Reschedule(u.arbitrary()?, fuzz_delay(u, tick_ns)?),
        12..=14 => Op::Advance(fuzz_step(u, tick_ns)?),
        _ => Op::AdvancePartial(fuzz_step(u, tick_ns)?, u.int_in_range(0..=3)?),
    })
}

/// Decodes one case (tick, wheel size, operations) from `bytes` and runs it.
fn fuzz_one(bytes: &[u8]) -> Result<usize, String> {
    let mut u = Unstructured::new(bytes);
    let decode = |u: &mut Unstructured| -> arbitrary::Result<(u64, usize, Vec<Op>)> {
        let tick_ns = *u.choose(&[1u64, 1_000, 1_000_000, 10_000_000, 100_000_000])?;
        let wheel_size = match u.int_in_range(0..=3u8)? {
            0 => *u.choose(&[2usize, 3, 4, 8, 64])?,
            _ => u.int_in_range(2..=300)?,
        };
        let mut ops = Vec::new();
        while !u.is_empty() && ops.len() < 2_000 {
            ops.push(fuzz_op(u, tick_ns)?);
        }
        Ok((tick_ns, wheel_size, ops))
    };
    let Ok((tick_ns, wheel_size, ops)) = decode(&mut u) else {
        return Ok(0);
    };
    let n = ops.len();
    run(tick_ns, wheel_size, ops).map_err(|e| e.to_string())?;
    Ok(n)
}

#[test]
fn fuzz() {
    let env = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    let seeds: Box<dyn Iterator<Item = u64>> = match env("PURGATORIO_FUZZ_SEED") {
        Some(seed) => Box::new(std::iter::once(seed)),
        None => Box::new(1..),
    };
    let budget = env("PURGATORIO_FUZZ_SECS").map(Duration::from_secs);
    let start = std::time::Instant::now();
    let (mut cases, mut ops) = (0u64, 0u64);
    for seed in seeds {
        let done = match budget {
            Some(b) => start.elapsed() >= b,
            None => cases >= 300,
        };
        if done {
            break;
        }
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut bytes = vec![0u8; 64 + (rng.next_u32() % 16_384) as usize];
        rng.fill_bytes(&mut bytes);
        match fuzz_one(&bytes) {
            Ok(n) => ops += n as u64,
            Err(e) => panic!("diverged from the model at PURGATORIO_FUZZ_SEED={seed}: {e}"),
        }
        cases += 1;
    }
    eprintln!(
        "fuzz: {cases} sequences, {ops} operations, no divergence ({:.0?})",
        start.elapsed()
    );
}
