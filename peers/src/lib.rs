//! purgatorio beside its peers on the standard workloads of the shared brief.
//!
//! Every timer structure is wrapped in one [`Subject`] adapter: time in whole
//! milliseconds on a caller-driven clock that starts at 0, a 1 ms tick, and a
//! `u64` id as the payload. The workloads ([`Churn`], [`Expire`], [`w3`], [`w4`]) are
//! written once against that trait, so every peer runs the same operations in
//! the same order from the same seed, and every run checks its fired counts
//! and that nothing fired early.
//!
//! The criterion bench (`cargo bench -p purgatorio-peers`) and the report
//! binary (`cargo run --release -p purgatorio-peers`) both use this module.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

#[path = "../../examples/support/proc_stats.rs"]
mod proc_stats;
use proc_stats::rss_bytes as rss;

/// The fixed seed every workload starts from.
pub const SEED: u64 = 0x0005_eed0_f9a7_9a70;

fn ms(v: u64) -> Duration {
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
fn payload(deadline: u64, id: u64) -> u64 {
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
    // bucket's reference behind as garbage: lazy by the brief's definition.
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

/// `nexus-timer`'s unbounded hierarchical wheel (1 ms tick, 64 slots per
/// level, polled with `poll_and_rebalance`).
pub struct Nexus {
    wheel: nexus_timer::Wheel<u64>,
    epoch: std::time::Instant,
    now: u64,
    /// Reused across polls, so no peer pays an allocation per tick.
    buf: Vec<u64>,
}

impl Subject for Nexus {
    const NAME: &'static str = "nexus-timer";
    const EAGER_CANCEL: bool = true;
    type Key = nexus_timer::TimerHandle<u64>;

    fn new() -> Self {
        let epoch = std::time::Instant::now();
        Self {
            wheel: nexus_timer::Wheel::unbounded(4096, epoch),
            epoch,
            now: 0,
            buf: Vec::new(),
        }
    }
    fn schedule(&mut self, deadline: u64, payload: u64) -> Self::Key {
        self.wheel.schedule(self.epoch + ms(deadline), payload)
    }
    fn schedule_forget(&mut self, deadline: u64, payload: u64) {
        self.wheel
            .schedule_forget(self.epoch + ms(deadline), payload);
    }
    fn cancel(&mut self, key: Self::Key) -> bool {
        self.wheel.cancel(key).is_some()
    }
    fn advance(&mut self, now: u64, fire: &mut dyn FnMut(u64)) {
        self.now = self.now.max(now);
        self.wheel
            .poll_and_rebalance(self.epoch + ms(now), &mut self.buf);
        self.buf.drain(..).for_each(fire);
    }
    fn next_wake(&mut self) -> Option<u64> {
        // `next_deadline` is a lower bound that can stay behind the clock
        // after a poll; a driver would not wake again for a time it has
        // already polled, so the next wake is at least one tick later.
        self.wheel.next_deadline().map(|at| {
            let since = at.saturating_duration_since(self.epoch);
            (since.as_nanos().div_ceil(1_000_000) as u64).max(self.now + 1)
        })
    }
    fn len(&self) -> usize {
        self.wheel.len()
    }
}

type KompactWheel = hierarchical_hash_wheel_timer::wheels::cancellable::QuadWheelWithOverflow<
    hierarchical_hash_wheel_timer::IdOnlyTimerEntry<u64>,
>;

/// `hierarchical_hash_wheel_timer` (Kompact): four 256-slot byte wheels plus
/// an overflow list, its cancellable variant (an id map beside the wheel),
/// ticked one 1 ms unit at a time and skipped where `can_skip` allows.
pub struct Kompact {
    wheel: KompactWheel,
    now: u64,
    live: usize,
}

impl Subject for Kompact {
    const NAME: &'static str = "hierarchical_hash_wheel_timer";
    const EAGER_CANCEL: bool = false;
    type Key = u64;

    fn new() -> Self {
        Self {
            wheel: KompactWheel::new(),
            now: 0,
            live: 0,
        }
    }
    fn schedule(&mut self, deadline: u64, payload: u64) -> Self::Key {
        // The payload doubles as the entry's id: payloads are unique here.
        let entry = hierarchical_hash_wheel_timer::IdOnlyTimerEntry::new(
            payload,
            ms(deadline.saturating_sub(self.now)),
        );
        self.wheel.insert(entry).expect("deadline in the future");
        self.live += 1;
        payload
    }
    fn cancel(&mut self, key: Self::Key) -> bool {
        let was = self.wheel.cancel(&key).is_ok();
        self.live -= usize::from(was);
        was
    }
    fn advance(&mut self, now: u64, fire: &mut dyn FnMut(u64)) {
        use hierarchical_hash_wheel_timer::wheels::Skip;
        while self.now < now {
            if let Skip::Millis(n) = self.wheel.can_skip() {
                let n = u64::from(n).min(now - self.now - 1);
                if n > 0 {
                    self.wheel.skip(n as u32);
                    self.now += n;
                    continue;
                }
            }
            for e in self.wheel.tick() {
                self.live -= 1;
                fire(e.id);
            }
            self.now += 1;
        }
    }
    fn next_wake(&mut self) -> Option<u64> {
        use hierarchical_hash_wheel_timer::wheels::Skip;
        match self.wheel.can_skip() {
            Skip::Empty => None,
            Skip::None => Some(self.now + 1),
            Skip::Millis(n) => Some(self.now + u64::from(n) + 1),
        }
    }
    fn len(&self) -> usize {
        self.live
    }
}

/// tokio-util's `DelayQueue` on a current-thread runtime with a paused
/// clock that the adapter advances.
pub struct Tokio {
    rt: tokio::runtime::Runtime,
    queue: tokio_util::time::DelayQueue<u64>,
    start: tokio::time::Instant,
    now: u64,
}

impl Subject for Tokio {
    const NAME: &'static str = "tokio-util DelayQueue";
    const EAGER_CANCEL: bool = true;
    type Key = tokio_util::time::delay_queue::Key;

    fn new() -> Self {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("tokio runtime");
        let (queue, start) = {
            let _guard = rt.enter();
            (
                tokio_util::time::DelayQueue::new(),
                tokio::time::Instant::now(),
            )
        };
        Self {
            rt,
            queue,
            start,
            now: 0,
        }
    }
    fn schedule(&mut self, deadline: u64, payload: u64) -> Self::Key {
        let _guard = self.rt.enter();
        self.queue.insert_at(payload, self.start + ms(deadline))
    }
    fn cancel(&mut self, key: Self::Key) -> bool {
        let _guard = self.rt.enter();
        self.queue.try_remove(&key).is_some()
    }
    fn advance(&mut self, now: u64, fire: &mut dyn FnMut(u64)) {
        let step = ms(now.saturating_sub(self.now));
        self.now = self.now.max(now);
        let (queue, until) = (&mut self.queue, self.start + ms(self.now));
        self.rt.block_on(tokio::task::unconstrained(async move {
            tokio::time::advance(step).await;
            // Drain until nothing is due; a Pending with something due means
            // the runtime's driver has not yet processed the new time.
            let waker = std::task::Waker::noop();
            let mut cx = std::task::Context::from_waker(waker);
            loop {
                match queue.poll_expired(&mut cx) {
                    std::task::Poll::Ready(Some(e)) => fire(e.into_inner()),
                    std::task::Poll::Ready(None) => break,
                    std::task::Poll::Pending => {
                        let due = queue
                            .peek()
                            .is_some_and(|key| queue.deadline(&key) <= until);
                        if !due {
                            break;
                        }
                        tokio::task::yield_now().await;
                    }
                }
            }
        }));
    }
    /// Tokio's own driver: the runtime (paused clock, auto-advance) sleeps
    /// until the queue's internal timer, which follows the wheel's slots.
    /// Every `Pending` the queue returns is one sleep and so one wake-up.
    fn drive(&mut self, fire: &mut dyn FnMut(u64, u64)) -> u64 {
        let (queue, start) = (&mut self.queue, self.start);
        let mut wakeups = 0;
        self.rt.block_on(tokio::task::unconstrained(async {
            loop {
                let next = std::future::poll_fn(|cx| {
                    let poll = queue.poll_expired(cx);
                    wakeups += u64::from(poll.is_pending());
                    poll
                })
                .await;
                let Some(e) = next else { break };
                let now = (tokio::time::Instant::now() - start).as_millis() as u64;
                fire(now, e.into_inner());
            }
        }));
        wakeups
    }
    fn next_wake(&mut self) -> Option<u64> {
        let _guard = self.rt.enter();
        let key = self.queue.peek()?;
        let at = self.queue.deadline(&key) - self.start;
        Some(at.as_nanos().div_ceil(1_000_000) as u64)
    }
    fn len(&self) -> usize {
        self.queue.len()
    }
}

/// `std::collections::BinaryHeap` of `(deadline, sequence, payload)` with
/// lazy cancel: a cancelled sequence number is flagged and skipped when it
/// reaches the top.
#[derive(Default)]
pub struct Heap {
    heap: BinaryHeap<Reverse<(u64, u64, u64)>>,
    cancelled: Vec<bool>,
    live: usize,
}

impl Subject for Heap {
    const NAME: &'static str = "BinaryHeap (lazy cancel)";
    const EAGER_CANCEL: bool = false;
    type Key = u64;

    fn new() -> Self {
        Self::default()
    }
    fn schedule(&mut self, deadline: u64, payload: u64) -> Self::Key {
        let seq = self.cancelled.len() as u64;
        self.cancelled.push(false);
        self.heap.push(Reverse((deadline, seq, payload)));
        self.live += 1;
        seq
    }
    fn cancel(&mut self, key: Self::Key) -> bool {
        let was = !std::mem::replace(&mut self.cancelled[key as usize], true);
        self.live -= usize::from(was);
        was
    }
    fn advance(&mut self, now: u64, fire: &mut dyn FnMut(u64)) {
        while let Some(&Reverse((deadline, seq, payload))) = self.heap.peek() {
            if deadline > now {
                break;
            }
            self.heap.pop();
            if !std::mem::replace(&mut self.cancelled[seq as usize], true) {
                self.live -= 1;
                fire(payload);
            }
        }
    }
    fn next_wake(&mut self) -> Option<u64> {
        while let Some(&Reverse((deadline, seq, _))) = self.heap.peek() {
            if !self.cancelled[seq as usize] {
                return Some(deadline);
            }
            self.heap.pop();
        }
        None
    }
    fn len(&self) -> usize {
        self.live
    }
}

/// `std::collections::BTreeMap` keyed by `(deadline, id)`: eager cancel.
#[derive(Default)]
pub struct BTree(BTreeMap<(u64, u64), ()>);

impl Subject for BTree {
    const NAME: &'static str = "BTreeMap";
    const EAGER_CANCEL: bool = true;
    type Key = (u64, u64);

    fn new() -> Self {
        Self::default()
    }
    fn schedule(&mut self, deadline: u64, payload: u64) -> Self::Key {
        self.0.insert((deadline, payload), ());
        (deadline, payload)
    }
    fn cancel(&mut self, key: Self::Key) -> bool {
        self.0.remove(&key).is_some()
    }
    fn advance(&mut self, now: u64, fire: &mut dyn FnMut(u64)) {
        while let Some(entry) = self.0.first_entry() {
            if entry.key().0 > now {
                break;
            }
            fire(entry.remove_entry().0 .1);
        }
    }
    fn next_wake(&mut self) -> Option<u64> {
        self.0.first_key_value().map(|(&(d, _), _)| d)
    }
    fn len(&self) -> usize {
        self.0.len()
    }
}
