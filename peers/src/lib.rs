//! purgatorio beside its peers on the standard workloads W1–W4 (written
//! once in `purgatorio-workloads`): the adapters of the other structures.
//!
//! The criterion bench (`cargo bench -p purgatorio-peers`) and the report
//! binary (`cargo run --release -p purgatorio-peers`) both use this module.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use purgatorio_workloads::ms;
pub use purgatorio_workloads::{
    proc, w3, w4, Churn, Expire, Fired, Purgatorio, Sparse, Subject, SEED,
};

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
