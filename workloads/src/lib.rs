//! The standard workloads W1–W4, written once, and the `/proc` readings the
//! measurements report.
//!
//! * **W1 churn** ([`Churn`]): 1,000,000 pending timers with deadlines uniform
//!   in [1, 30,000] ms, then 2,000,000 × (schedule one more + cancel a random
//!   pending one).
//! * **W2 expire** ([`Expire`]): 1,000,000 timers in [1, 10,000] ms, the clock
//!   advanced 1 ms at a time to 10,001; each fired once, never early, at most
//!   a tick late.
//! * **W3 memory** ([`w3`]): 10,000,000 pending timers with a `u64` payload in
//!   [1 ms, 1 h]; RSS growth per timer.
//! * **W4 sparse** ([`w4`]): 1,000 timers uniform in [1 s, 3,600 s], driven
//!   the way the structure's own driver would; wake-ups counted.
//!
//! Every timer structure is wrapped in one [`Subject`] adapter: time in whole
//! milliseconds on a caller-driven clock that starts at 0, a 1 ms tick, and a
//! `u64` id as the payload, so every structure runs the same operations in
//! the same order from the same seed, and every run checks its fired counts
//! and that nothing fired early. [`Purgatorio`] adapts this crate's
//! [`LocalTimer`](purgatorio::LocalTimer); the peers report
//! (`cargo run --release -p purgatorio-peers`) adapts the other structures,
//! and `cargo run --release --example workloads` runs purgatorio alone.

use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

pub mod cli;
pub mod proc;
use proc::rss_bytes as rss;

/// The fixed seed every workload starts from.
pub const SEED: u64 = 0x0005_eed0_f9a7_9a70;

/// `v` milliseconds.
pub fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

/// One timer structure, driven in milliseconds from time 0 with a 1 ms tick.
pub trait Subject {
    /// The name in reports and charts.
    const NAME: &'static str;
    /// Whether `cancel` takes the timer out of the structure at once (rather
    /// than flagging it and skipping it later).
    const EAGER_CANCEL: bool;
    /// What `schedule` returns and `cancel` takes.
    type Key;

    /// An empty structure at time 0.
    fn new() -> Self;
    /// Schedules `payload` to fire at `deadline` ms.
    fn schedule(&mut self, deadline: u64, payload: u64) -> Self::Key;
    /// Schedules `payload` at `deadline` ms with no intent to cancel it.
    fn schedule_forget(&mut self, deadline: u64, payload: u64) {
        drop(self.schedule(deadline, payload));
    }
    /// Cancels a pending timer; true if it was pending.
    fn cancel(&mut self, key: Self::Key) -> bool;
    /// Moves time forward to `now` ms and passes the payload of every timer
    /// due by then to `fire`.
    fn advance(&mut self, now: u64, fire: &mut dyn FnMut(u64));
    /// When the structure's own driver would next wake up, in ms, if anything
    /// is pending.
    fn next_wake(&mut self) -> Option<u64>;
    /// Runs the structure to empty the way its own driver would, waking only
    /// when it says something may be due; passes `(now, payload)` for each
    /// timer fired and returns the number of wake-ups.
    fn drive(&mut self, fire: &mut dyn FnMut(u64, u64)) -> u64 {
        let mut wakeups = 0;
        while let Some(at) = self.next_wake() {
            wakeups += 1;
            self.advance(at, &mut |id| fire(at, id));
        }
        wakeups
    }
    /// Number of pending timers, for checks.
    fn len(&self) -> usize;
    /// True if nothing is pending.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// W1's pairs on a real-time timer (the thread-safe `Timer`, whose clock
/// the caller does not drive): `pending` timers, then pairs of (schedule
/// one more, cancel a random pending one). `schedule` picks each delay
/// from the RNG it is given and returns the timer's name (a handle, an
/// id); `cancel` cancels by that name and says whether it was pending.
pub struct RealTimePairs<N, S, C> {
    names: Vec<N>,
    rng: SmallRng,
    schedule: S,
    cancel: C,
}

impl<N, S, C> RealTimePairs<N, S, C>
where
    S: FnMut(&mut SmallRng) -> N,
    C: FnMut(N) -> bool,
{
    /// Schedules `pending` timers, from an RNG seeded with `seed`.
    pub fn new(pending: usize, seed: u64, mut schedule: S, cancel: C) -> Self {
        let mut rng = SmallRng::seed_from_u64(seed);
        let names = (0..pending).map(|_| schedule(&mut rng)).collect();
        Self {
            names,
            rng,
            schedule,
            cancel,
        }
    }

    /// `pairs` × (schedule one more, cancel a random pending one). Panics
    /// if a cancel finds its timer gone.
    pub fn run(&mut self, pairs: u64) {
        // The loop's state in locals, where it stays in registers across
        // the calls (through `self` it went to memory and back each pair:
        // 2–3 ns per pair).
        let (mut rng, names) = (self.rng.clone(), &mut self.names);
        let (schedule, cancel) = (&mut self.schedule, &mut self.cancel);
        for _ in 0..pairs {
            let name = schedule(&mut rng);
            let victim = rng.gen_range(0..names.len());
            let old = std::mem::replace(&mut names[victim], name);
            assert!(cancel(old), "a pending timer could not be cancelled");
        }
        self.rng = rng;
    }
}

/// W1 churn, prepared: `pending` timers with deadlines uniform in
/// [1, 30,000] ms and their keys.
pub struct Churn<S: Subject> {
    /// The structure under test.
    pub subject: S,
    keys: Vec<S::Key>,
    rng: SmallRng,
    next_id: u64,
}

impl<S: Subject> Churn<S> {
    /// Fills a fresh structure with `pending` timers.
    pub fn new(pending: usize) -> Self {
        let mut rng = SmallRng::seed_from_u64(SEED);
        let mut subject = S::new();
        let keys = (0..pending as u64)
            .map(|id| subject.schedule(rng.gen_range(1..=30_000), id))
            .collect();
        Self {
            subject,
            keys,
            rng,
            next_id: pending as u64,
        }
    }

    /// `pairs` × (schedule one more, cancel a random pending one). Panics if
    /// a cancel finds its timer gone.
    pub fn run(&mut self, pairs: u64) {
        for _ in 0..pairs {
            let key = self
                .subject
                .schedule(self.rng.gen_range(1..=30_000), self.next_id);
            self.next_id += 1;
            let victim = self.rng.gen_range(0..self.keys.len());
            let old = std::mem::replace(&mut self.keys[victim], key);
            assert!(self.subject.cancel(old), "{}: cancel missed", S::NAME);
        }
    }

    /// Cancels every remaining timer (some structures insist) and checks
    /// that exactly the expected number were pending.
    pub fn finish(mut self) {
        let n = self.keys.len();
        let pending = self.subject.len();
        assert_eq!(pending, n, "{}: pending count after churn", S::NAME);
        for key in self.keys.drain(..) {
            assert!(self.subject.cancel(key), "{}: final cancel missed", S::NAME);
        }
    }
}

/// W2 expire, prepared: `n` timers with deadlines uniform in [1, 10,000] ms.
pub struct Expire<S: Subject> {
    /// The structure under test.
    pub subject: S,
    n: u64,
}

/// What a W2 or W4 run saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fired {
    /// Timers fired.
    pub fired: u64,
    /// Timers fired before their deadline.
    pub early: u64,
    /// Timers fired more than one tick after their deadline.
    pub late: u64,
    /// Sum of the fired timers' ids; with `fired` it shows each fired once.
    pub id_sum: u64,
}

/// The payload of timer `id` due at `deadline`: the deadline rides along so
/// that checking a firing needs no lookup that would cost the structure
/// under test a cache miss it does not cause.
pub fn payload(deadline: u64, id: u64) -> u64 {
    (deadline << 32) | id
}

impl Fired {
    fn new() -> Self {
        Fired {
            fired: 0,
            early: 0,
            late: 0,
            id_sum: 0,
        }
    }

    /// Records that the timer with `payload` fired at `now`.
    fn record(&mut self, now: u64, payload: u64) {
        let (deadline, id) = (payload >> 32, payload & 0xffff_ffff);
        self.fired += 1;
        self.early += u64::from(now < deadline);
        self.late += u64::from(now > deadline + 1);
        self.id_sum += id;
    }

    /// True if ids `0..n` each fired exactly once (by count and sum).
    pub fn exactly_once(&self, n: u64) -> bool {
        self.fired == n && self.id_sum == n * n.saturating_sub(1) / 2
    }
}

impl<S: Subject> Expire<S> {
    /// Fills a fresh structure with `n` timers.
    pub fn new(n: usize) -> Self {
        let mut rng = SmallRng::seed_from_u64(SEED);
        let mut subject = S::new();
        for id in 0..n as u64 {
            let deadline = rng.gen_range(1..=10_000);
            subject.schedule_forget(deadline, payload(deadline, id));
        }
        Self {
            subject,
            n: n as u64,
        }
    }

    /// Advances 1 ms at a time to 10,001 and classifies every firing.
    pub fn run(mut self) -> Fired {
        let mut out = Fired::new();
        for now in 1..=10_001u64 {
            self.subject.advance(now, &mut |p| out.record(now, p));
        }
        assert!(
            out.exactly_once(self.n),
            "{}: not exactly once: {out:?}",
            S::NAME
        );
        out
    }
}

/// W3 memory: RSS growth in bytes per pending timer with `n` timers in
/// [1 ms, 1 h], keys dropped. Run it in a fresh process for a clean figure.
pub fn w3<S: Subject>(n: usize) -> f64 {
    let mut rng = SmallRng::seed_from_u64(SEED);
    let before = rss();
    let mut subject = S::new();
    for id in 0..n as u64 {
        subject.schedule_forget(rng.gen_range(1..=3_600_000), id);
    }
    let after = rss();
    assert_eq!(subject.len(), n, "{}: pending after W3", S::NAME);
    let per = after.saturating_sub(before) as f64 / n as f64;
    std::mem::forget(subject); // freeing 10M timers is not part of the workload
    per
}

/// What a W4 run saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sparse {
    /// Times the driver woke up.
    pub wakeups: u64,
    /// The firings.
    pub fired: Fired,
}

/// W4 sparse: 1,000 timers uniform in [1 s, 3,600 s], driven by waking only
/// when the structure says something may be due.
pub fn w4<S: Subject>() -> Sparse {
    let mut rng = SmallRng::seed_from_u64(SEED);
    let mut subject = S::new();
    for id in 0..1_000 {
        let deadline = rng.gen_range(1_000..=3_600_000);
        subject.schedule_forget(deadline, payload(deadline, id));
    }
    let mut fired = Fired::new();
    let wakeups = subject.drive(&mut |now, p| fired.record(now, p));
    assert!(
        fired.exactly_once(1_000),
        "{}: W4 not exactly once: {fired:?}",
        S::NAME
    );
    Sparse { wakeups, fired }
}

/// purgatorio's single-threaded core, [`purgatorio::LocalTimer`].
pub struct Purgatorio(purgatorio::LocalTimer<u64>);

impl Subject for Purgatorio {
    const NAME: &'static str = "purgatorio";
    // Cancel frees the slot and returns the payload at once, but leaves the
    // bucket's reference behind as garbage: lazy by this report's definition (cancel leaves something behind).
    const EAGER_CANCEL: bool = false;
    type Key = purgatorio::TimerKey;

    fn new() -> Self {
        Self(purgatorio::LocalTimer::new())
    }
    fn schedule(&mut self, deadline: u64, payload: u64) -> Self::Key {
        self.0.schedule_at(ms(deadline), payload)
    }
    fn cancel(&mut self, key: Self::Key) -> bool {
        self.0.cancel(key).is_some()
    }
    fn advance(&mut self, now: u64, fire: &mut dyn FnMut(u64)) {
        for e in self.0.advance(ms(now)) {
            fire(e.into_inner());
        }
    }
    fn next_wake(&mut self) -> Option<u64> {
        // Round up: waking before the deadline would be a wake-up for nothing.
        self.0
            .next_expiration()
            .map(|at| at.as_nanos().div_ceil(1_000_000) as u64)
    }
    fn len(&self) -> usize {
        self.0.len()
    }
}
