//! The hierarchical timing wheel, in ticks, single-threaded.
//!
//! ## Design
//!
//! * **Arena** ([`arena`]): payloads live in a slab; a handle ([`TimerKey`]) is
//!   `(index, generation)`.
//! * **Levels** ([`level`]): level `L` is a ring of `W` buckets of `W^L` ticks.
//!   Levels are created lazily, the first time a deadline needs one.
//! * **Buckets**: a bucket is a `Vec` of 16-byte references
//!   `(deadline, index, stamp)`. Scheduling appends one; cancelling frees the
//!   arena slot and bumps its stamp, which turns the reference into *garbage*
//!   without touching the bucket. Garbage is dropped when met, and a
//!   compaction runs when it outnumbers the live timers (amortised O(1)).
//!   When the last live timer goes, all references are dropped at once, so an
//!   empty wheel has no armed bucket and asks for no wake-up.
//! * **Bucket queue** (`bucket_queue`): every non-empty bucket is armed
//!   once, keyed by the earliest deadline pushed into it since it was last
//!   flushed. Advancing pops only due buckets, so its cost does not depend on
//!   how much time passed. The queue is a bitmap of armed slots per level,
//!   not a heap: within a level, ring order from the current slot is time
//!   order, so arming is O(1) and finding the earliest bucket is a bit
//!   search per level.
//! * **Flush**: a due bucket's references whose deadline has come are
//!   expired; the rest are re-inserted relative to the new time, which puts
//!   them in a finer level (a reference never returns to the level it came
//!   from). Buckets are flushed in key order and the wheel's time moves to
//!   each key in turn, so expirations come out in deadline order.
//! * **Run**: a flushed second-level bucket with few references per tick is
//!   not filed into the finest level but counting-sorted by tick and handed
//!   out from there, merged with the bucket queue by deadline.
//! * **Overdue**: a deadline at or before the wheel's time is due at once; it
//!   waits in a small list that the next poll serves first, sorted by deadline.
//!
//! Within one tick, the order of expirations is unspecified.

mod arena;
mod bucket_queue;
mod level;

use std::num::NonZeroU32;

use crate::tick::NEVER;
use arena::Arena;
use bucket_queue::BucketQueue;
use level::Geometry;

/// Identifies one scheduled timer of a [`LocalTimer`](crate::LocalTimer).
///
/// Keys are generational: once the timer fired or was cancelled, its key is
/// stale and every operation with it answers `None` / `false`, even after the
/// slot has been reused by another timer.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use purgatorio::LocalTimer;
///
/// let mut timer = LocalTimer::new();
/// let key = timer.schedule_at(Duration::from_millis(5), "five");
/// assert_eq!(timer.cancel(key), Some("five"));
/// assert_eq!(timer.cancel(key), None); // stale: harmless
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TimerKey {
    /// Slot in the arena.
    idx: u32,
    /// Generation of the occupant.
    gen: NonZeroU32,
    /// The arena's epoch when the key was made: a key from before the arena
    /// gave its slots back matches nothing after.
    epoch: u32,
}

impl TimerKey {
    /// A key that never names a timer (slot indices stop below `u32::MAX`).
    pub(crate) const DEAD: TimerKey = TimerKey {
        idx: u32::MAX,
        gen: NonZeroU32::MIN,
        epoch: 0,
    };
}

/// Garbage references tolerated beyond the number of live timers before a
/// compaction (references, not bytes).
const GARBAGE_SLACK: usize = 1024;

/// A flushed second-level bucket becomes the sorted run (`Wheel::run`),
/// rather than being filed into the finest level, when the wheel has at most
/// this many slots (the run is sorted by counting, one count per tick)...
const RUN_MAX_WHEEL: usize = 256;

/// ...and the bucket holds at most this many references per tick of its
/// width. Sparser, finest-level buckets would hold a few references each,
/// and arming and popping one per reference costs more than counting them.
/// Denser, a finest-level bucket's flush reads its references' slots in one
/// tight loop, whose cache misses overlap; handed out one by one from a run
/// they do not (W2 at 1M pending: 33 → 50 ns per timer).
const RUN_PER_TICK: usize = 16;

/// A flushed bucket keeps its allocation for reuse up to this many references.
const KEEP_CAPACITY: usize = 4096;

/// A coarse head bucket whose key-setting timer died is rescanned for its
/// exact key up to this many references; a larger one keeps its early key and
/// is flushed (cascaded) then, which is work it needs anyway.
const RESCAN_LIMIT: usize = 64;

/// A reference that is never live, for buckets that hold nothing.
const NO_REF: Ref = Ref {
    deadline: 0,
    idx: u32::MAX,
    stamp: 0,
};

/// A bucket's reference to a scheduled timer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Ref {
    /// Deadline in ticks.
    deadline: u64,
    /// Slot in the arena.
    idx: u32,
    /// Stamp the slot must still carry for this reference to be live.
    stamp: u32,
}

/// Keeps the live references of `refs`, in order, and returns the earliest.
///
/// Branch-free on liveness: every reference is written and the write index
/// moves only past live ones, so the arena lookups of successive references
/// overlap instead of waiting on a mispredicted branch each.
fn retain_live<T>(arena: &Arena<T>, refs: &mut Vec<Ref>) -> Option<Ref> {
    let mut kept = 0;
    for at in 0..refs.len() {
        let r = refs[at];
        refs[kept] = r;
        kept += usize::from(arena.is_live(r.idx, r.stamp));
    }
    refs.truncate(kept);
    refs.iter().copied().min_by_key(|r| r.deadline)
}

/// Pops dead references off the end of `refs` until a live one is last;
/// returns how many it popped.
fn pop_dead<T>(arena: &Arena<T>, refs: &mut Vec<Ref>) -> usize {
    let before = refs.len();
    while refs.last().is_some_and(|r| !arena.is_live(r.idx, r.stamp)) {
        refs.pop();
    }
    before - refs.len()
}

/// One level of the wheel.
#[derive(Clone, Copy, Debug)]
struct Level {
    /// Ticks per bucket (`W^level`).
    tick: u64,
    /// The last deadline this level accepts at the wheel's current time.
    last: u64,
}

/// A timer that came due.
#[derive(Debug)]
pub(crate) struct Fired<T> {
    /// Its key (now stale).
    pub(crate) key: TimerKey,
    /// Its deadline in ticks.
    pub(crate) deadline: u64,
    /// Its payload.
    pub(crate) value: T,
}

/// The hierarchical timing wheel: schedule, cancel, reschedule and poll in
/// ticks. Reads no clock, spawns no thread, takes no lock.
#[derive(Debug)]
pub(crate) struct Wheel<T> {
    /// Payloads of pending timers.
    arena: Arena<T>,
    /// Slot count and arithmetic.
    geometry: Geometry,
    /// Levels created so far, finest first.
    levels: Vec<Level>,
    /// References per bucket; bucket id = level × W + slot.
    buckets: Vec<Vec<Ref>>,
    /// Per bucket, the reference whose deadline set the bucket's key: while
    /// it is live, the key is exact.
    holders: Vec<Ref>,
    /// Non-empty buckets by earliest deadline.
    queue: BucketQueue,
    /// Timers that were already due when scheduled.
    overdue: Vec<Ref>,
    /// Whether `overdue` is sorted latest first (served from the back).
    overdue_sorted: bool,
    /// Expired references of the bucket being handed out.
    ready: Vec<Ref>,
    /// A sparse bucket of the second level, flushed: its references that
    /// were not yet due, sorted latest first (handed out from the back)
    /// instead of filed one by one into finest-level buckets. See
    /// [`RUN_PER_TICK`].
    run: Vec<Ref>,
    /// A spare vector for sorting the run.
    scratch: Vec<Ref>,
    /// The wheel's time in ticks: everything due at or before it was flushed.
    now: u64,
    /// References known to be dead but still stored somewhere.
    garbage: usize,
}

impl<T> Wheel<T> {
    /// An empty wheel with `wheel_size` slots per level (≥ 2, validated by
    /// the caller) whose time starts at tick `now`.
    pub(crate) fn new(wheel_size: u64, now: u64) -> Self {
        let geometry = Geometry::new(wheel_size);
        let mut wheel = Wheel {
            arena: Arena::new(),
            geometry,
            levels: Vec::new(),
            buckets: Vec::new(),
            holders: Vec::new(),
            queue: BucketQueue::new(geometry, now),
            overdue: Vec::new(),
            overdue_sorted: true,
            ready: Vec::new(),
            run: Vec::new(),
            scratch: Vec::new(),
            now,
            garbage: 0,
        };
        wheel.add_level();
        wheel
    }

    /// The wheel's time in ticks.
    #[cfg(test)]
    pub(crate) fn now(&self) -> u64 {
        self.now
    }

    /// Number of pending timers (including due ones not yet polled).
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.arena.len()
    }

    /// Slots per level.
    #[inline]
    pub(crate) fn wheel_size(&self) -> u64 {
        self.geometry.wheel_size()
    }

    /// Number of levels created so far.
    #[cfg(test)]
    pub(crate) fn levels(&self) -> usize {
        self.levels.len()
    }

    /// Schedules `value` at tick `deadline`.
    #[inline]
    pub(crate) fn insert(&mut self, deadline: u64, value: T) -> TimerKey {
        let (idx, gen, stamp) = self.arena.insert(value);
        self.place(Ref {
            deadline,
            idx,
            stamp,
        });
        TimerKey {
            idx,
            gen,
            epoch: self.arena.epoch(),
        }
    }

    /// Whether `key` was made in the arena's current epoch.
    #[inline]
    fn current(&self, key: TimerKey) -> bool {
        key.epoch == self.arena.epoch()
    }

    /// Whether `key` is pending.
    #[inline]
    pub(crate) fn contains(&self, key: TimerKey) -> bool {
        self.current(key) && self.arena.contains(key.idx, key.gen)
    }

    /// The payload of pending `key`, to change in place.
    #[inline]
    pub(crate) fn get_mut(&mut self, key: TimerKey) -> Option<&mut T> {
        if !self.current(key) {
            return None;
        }
        self.arena.get_mut(key.idx, key.gen)
    }

    /// Cancels `key`; returns its payload if it was pending.
    #[inline]
    pub(crate) fn remove(&mut self, key: TimerKey) -> Option<T> {
        if !self.current(key) {
            return None;
        }
        let value = self.arena.remove(key.idx, key.gen)?;
        self.garbage += 1;
        self.collect_garbage();
        self.settle_head();
        Some(value)
    }

    /// Moves pending `key` to tick `deadline`; `false` if it is not pending.
    #[inline]
    pub(crate) fn reschedule(&mut self, key: TimerKey, deadline: u64) -> bool {
        if !self.current(key) {
            return false;
        }
        let Some(stamp) = self.arena.restamp(key.idx, key.gen) else {
            return false;
        };
        self.garbage += 1;
        self.place(Ref {
            deadline,
            idx: key.idx,
            stamp,
        });
        self.collect_garbage();
        self.settle_head();
        true
    }

    /// The tick at which the next timer may be due, if any can ever be.
    ///
    /// Never later than the earliest pending deadline, and exact unless the
    /// earliest timer of a large coarse bucket was cancelled (then a poll at
    /// the reported tick cascades that bucket and hands out nothing).
    pub(crate) fn next_expiration(&self) -> Option<u64> {
        if !self.ready.is_empty() {
            return Some(self.now);
        }
        // Overdue timers were due by the wheel's time when filed; after a
        // clock that went backwards they are due by their own deadline.
        let earliest = if self.overdue_sorted {
            self.overdue.last().map(|r| r.deadline)
        } else {
            self.overdue.iter().map(|r| r.deadline).min()
        };
        if earliest.is_some() {
            return earliest;
        }
        let bucket = self.queue.peek().map(|(key, _)| key);
        let run = self.run.last().map(|r| r.deadline);
        match (bucket, run) {
            (Some(b), Some(r)) => Some(b.min(r)),
            (b, r) => b.or(r),
        }
        .filter(|&k| k != NEVER)
    }

    /// Hands out the next timer due at or before tick `now`, in deadline
    /// order; `None` when nothing more is due. Afterwards the wheel's time is
    /// `now` (or stays where it was if `now` is earlier: time never runs back).
    pub(crate) fn poll(&mut self, now: u64) -> Option<Fired<T>> {
        loop {
            if let Some(r) = self.next_overdue(now) {
                if let Some(fired) = self.take(r) {
                    return Some(fired);
                }
                continue;
            }
            if let Some(r) = self.ready.pop() {
                if let Some(fired) = self.take(r) {
                    return Some(fired);
                }
                continue;
            }
            let head = self.queue.peek();
            if let Some(&r) = self.run.last() {
                if r.deadline <= now && head.is_none_or(|(key, _)| r.deadline <= key) {
                    self.run.pop();
                    self.set_now(r.deadline);
                    if let Some(fired) = self.take(r) {
                        return Some(fired);
                    }
                    continue;
                }
            }
            match head {
                Some((key, bucket)) if key <= now => {
                    self.queue.pop();
                    self.flush(bucket, key);
                }
                _ => {
                    self.set_now(now);
                    // With no dead reference every holder is live: nothing
                    // to settle (the common case when timers expire rather
                    // than get cancelled). The test is here, not in
                    // `settle_head`: there it lengthened the cancel path,
                    // and W1 at 1M pending went from 190-240 to 320 ns per
                    // pair (two dependent cache misses per pair, which a
                    // longer path stops from overlapping the next pair's).
                    if self.garbage > 0 {
                        self.settle_head();
                    }
                    if self.arena.len() == 0 {
                        // Everything fired: no reference is live.
                        self.drop_refs();
                        self.arena.release();
                    }
                    return None;
                }
            }
        }
    }

    /// Removes every pending timer and returns the payloads (in no
    /// particular order). Every key turns stale.
    pub(crate) fn drain(&mut self) -> Vec<T> {
        self.drop_refs();
        self.arena.drain()
    }

    /// Files a reference into the overdue list or its bucket.
    #[inline]
    fn place(&mut self, r: Ref) {
        if r.deadline <= self.now {
            self.overdue.push(r);
            self.overdue_sorted = self.overdue.len() == 1;
            return;
        }
        let bucket = self.bucket_for(r.deadline);
        self.buckets[bucket as usize].push(r);
        if self.queue.arm(bucket, r.deadline) {
            self.holders[bucket as usize] = r;
        }
    }

    /// The bucket a future `deadline` goes to, creating levels as needed.
    #[inline]
    fn bucket_for(&mut self, deadline: u64) -> u32 {
        debug_assert!(
            deadline > self.now,
            "deadline {deadline} <= now {}",
            self.now
        );
        let mut level = 0;
        loop {
            if level == self.levels.len() {
                self.add_level();
            }
            let l = self.levels[level];
            if deadline <= l.last {
                let slot = self.geometry.slot(level as u32, l.tick, deadline);
                return (level as u64 * self.geometry.wheel_size() + slot) as u32;
            }
            level += 1;
        }
    }

    /// Creates the next coarser level.
    fn add_level(&mut self) {
        let level = self.levels.len() as u32;
        let tick = self
            .geometry
            .level_tick(level)
            .expect("the level below accepts every deadline");
        self.levels.push(Level {
            tick,
            last: self.geometry.last(tick, self.now),
        });
        let buckets = self.buckets.len() + self.geometry.wheel_size() as usize;
        self.buckets.resize_with(buckets, Vec::new);
        self.holders.resize(buckets, NO_REF);
        self.queue.add_level(tick);
    }

    /// Moves the wheel's time forward to `now`.
    #[inline]
    fn set_now(&mut self, now: u64) {
        if now > self.now {
            self.now = now;
            self.queue.set_now(now);
            for level in &mut self.levels {
                let last = self.geometry.last(level.tick, now);
                if last == level.last {
                    // Its window did not move, so no coarser one did: a
                    // coarser tick is a multiple of this one.
                    break;
                }
                level.last = last;
            }
        }
    }

    /// Flushes `bucket`, popped from the queue at `key`: expires what is due
    /// at `key` and re-inserts the rest into finer levels.
    fn flush(&mut self, bucket: u32, key: u64) {
        self.set_now(key);
        let mut refs = std::mem::take(&mut self.buckets[bucket as usize]);
        let w = self.geometry.wheel_size() as usize;
        // A sparse second-level bucket: what is not due now all lands in the
        // finest level, one or two references per bucket there. Sorting it
        // once is cheaper than arming and popping a bucket per reference.
        let to_run = self.run.is_empty()
            && w <= RUN_MAX_WHEEL
            && (w..2 * w).contains(&(bucket as usize))
            && refs.len() <= RUN_PER_TICK * w;
        for &r in &refs {
            if r.deadline <= self.now {
                // Checking liveness here, in a tight loop of independent
                // loads, pulls the due timers' slots into cache together
                // rather than one miss per `take`; dead ones are dropped now.
                if self.arena.is_live(r.idx, r.stamp) {
                    self.ready.push(r);
                } else {
                    self.garbage -= 1;
                }
            } else if to_run {
                self.run.push(r);
            } else {
                // Cascade: lands in a finer level, never back in `bucket`.
                self.place(r);
            }
        }
        if to_run {
            self.sort_run();
        }
        refs.clear();
        let slot = &mut self.buckets[bucket as usize];
        debug_assert!(slot.is_empty(), "bucket {bucket} refilled by its own flush");
        if slot.is_empty() && refs.capacity() <= KEEP_CAPACITY {
            *slot = refs;
        }
    }

    /// Sorts the run latest first. Its deadlines lie in the finest level's
    /// window, at most [`RUN_MAX_WHEEL`] ticks: a counting sort by tick does
    /// it without a compare (a comparison sort of random deadlines
    /// mispredicts about one branch per reference).
    fn sort_run(&mut self) {
        let w = self.geometry.wheel_size() as usize;
        if self.run.len() < 8 {
            self.run
                .sort_unstable_by_key(|r| std::cmp::Reverse(r.deadline));
            return;
        }
        let last = self.levels[0].last;
        let mut counts = [0u32; RUN_MAX_WHEEL + 1];
        for r in &self.run {
            debug_assert!(r.deadline <= last && last - r.deadline < w as u64);
            // Latest first: offset 0 is the level's last tick.
            counts[(last - r.deadline) as usize + 1] += 1;
        }
        for at in 1..=w {
            counts[at] += counts[at - 1];
        }
        let mut sorted = std::mem::take(&mut self.scratch);
        sorted.clear();
        sorted.resize(self.run.len(), NO_REF);
        for &r in &self.run {
            let at = &mut counts[(last - r.deadline) as usize];
            sorted[*at as usize] = r;
            *at += 1;
        }
        self.scratch = std::mem::replace(&mut self.run, sorted);
    }

    /// The next overdue reference due by `now`, earliest deadline first.
    /// With a monotonic clock every overdue reference is due; one filed
    /// after the clock went backwards waits until `now` reaches it.
    #[inline]
    fn next_overdue(&mut self, now: u64) -> Option<Ref> {
        if !self.overdue_sorted {
            self.overdue
                .sort_unstable_by_key(|r| std::cmp::Reverse(r.deadline));
            self.overdue_sorted = true;
        }
        match self.overdue.last() {
            Some(r) if r.deadline <= now => self.overdue.pop(),
            _ => None,
        }
    }

    /// Frees the timer behind `r`, if `r` is live.
    #[inline]
    fn take(&mut self, r: Ref) -> Option<Fired<T>> {
        match self.arena.remove_live(r.idx, r.stamp) {
            Some((value, gen)) => {
                if self.arena.len() == 0 && self.garbage > 0 {
                    self.drop_refs();
                }
                Some(Fired {
                    key: TimerKey {
                        idx: r.idx,
                        gen,
                        epoch: self.arena.epoch(),
                    },
                    deadline: r.deadline,
                    value,
                })
            }
            None => {
                debug_assert!(self.garbage > 0, "dead reference not counted as garbage");
                self.garbage = self.garbage.saturating_sub(1);
                None
            }
        }
    }

    /// Makes the head of the bucket queue exact again after its key-setting
    /// timer died, so that [`next_expiration`](Self::next_expiration) does not
    /// ask for a wake-up with nothing due. Amortised O(1): dead references met
    /// here are dropped for good, and a rescan is bounded by [`RESCAN_LIMIT`].
    fn settle_head(&mut self) {
        self.garbage -= pop_dead(&self.arena, &mut self.overdue);
        self.garbage -= pop_dead(&self.arena, &mut self.ready);
        self.garbage -= pop_dead(&self.arena, &mut self.run);
        while let Some((_, bucket)) = self.queue.peek() {
            let b = bucket as usize;
            let holder = self.holders[b];
            if self.arena.is_live(holder.idx, holder.stamp) {
                return;
            }
            let refs = &mut self.buckets[b];
            if b < self.geometry.wheel_size() as usize {
                // Level 0: every reference has the key as its deadline, so
                // any live one makes the key exact.
                self.garbage -= pop_dead(&self.arena, refs);
                match refs.last() {
                    Some(&live) => {
                        self.holders[b] = live;
                        return;
                    }
                    None => {
                        self.queue.disarm(bucket);
                    }
                }
            } else if refs.len() <= RESCAN_LIMIT {
                let before = refs.len();
                let earliest = retain_live(&self.arena, refs);
                self.garbage -= before - refs.len();
                match earliest {
                    Some(r) => {
                        self.queue.rekey(bucket, r.deadline);
                        self.holders[b] = r;
                    }
                    None => {
                        self.queue.disarm(bucket);
                    }
                }
            } else {
                return;
            }
        }
    }

    /// Drops all references when no timer is live, or compacts when garbage
    /// outnumbers the live timers.
    #[inline]
    fn collect_garbage(&mut self) {
        if self.arena.len() == 0 {
            self.drop_refs();
            self.arena.release();
        } else if self.garbage > self.arena.len() + GARBAGE_SLACK {
            self.compact();
        }
    }

    /// Drops every reference and disarms every bucket. Only correct when no
    /// reference is live (or the arena is drained right after).
    fn drop_refs(&mut self) {
        for bucket in self.queue.buckets() {
            let refs = &mut self.buckets[bucket as usize];
            refs.clear();
            if refs.capacity() > KEEP_CAPACITY {
                *refs = Vec::new();
            }
        }
        self.queue.clear();
        self.overdue.clear();
        self.ready.clear();
        self.run.clear();
        self.garbage = 0;
    }

    /// Removes every dead reference and re-keys every bucket to its earliest
    /// live deadline. O(references).
    fn compact(&mut self) {
        let armed: Vec<u32> = self.queue.buckets().collect();
        for bucket in armed {
            let refs = &mut self.buckets[bucket as usize];
            match retain_live(&self.arena, refs) {
                Some(earliest) => {
                    self.queue.rekey(bucket, earliest.deadline);
                    self.holders[bucket as usize] = earliest;
                }
                None => {
                    self.queue.disarm(bucket);
                }
            }
        }
        retain_live(&self.arena, &mut self.overdue);
        retain_live(&self.arena, &mut self.ready);
        retain_live(&self.arena, &mut self.run);
        self.garbage = 0;
    }

    /// Checks the structure's invariants (tests only).
    #[cfg(test)]
    pub(crate) fn check_invariants(&self) {
        let mut refs = self.overdue.len() + self.ready.len() + self.run.len();
        assert!(
            self.run.windows(2).all(|p| p[0].deadline >= p[1].deadline),
            "run sorted latest first"
        );
        assert!(
            self.run.iter().all(|r| r.deadline >= self.now),
            "run before now {}",
            self.now
        );
        for (bucket, list) in self.buckets.iter().enumerate() {
            let key = self.queue.key(bucket as u32);
            assert_eq!(
                key.is_some(),
                !list.is_empty(),
                "bucket {bucket} armed iff non-empty"
            );
            if let Some(key) = key {
                let min = list.iter().map(|r| r.deadline).min().unwrap();
                assert!(key <= min, "bucket {bucket} key {key} > earliest {min}");
                assert!(
                    key >= self.now,
                    "armed bucket {bucket} key {key} before now {}",
                    self.now
                );
            }
            refs += list.len();
        }
        self.queue.check();
        for (level, l) in self.levels.iter().enumerate() {
            let w = self.geometry.wheel_size() as usize;
            for list in &self.buckets[level * w..][..w] {
                for r in list {
                    assert!(
                        r.deadline <= l.last,
                        "deadline {} past level {level}'s window (last {})",
                        r.deadline,
                        l.last
                    );
                }
            }
        }
        let live = self.arena.len();
        assert_eq!(refs, live + self.garbage, "references = live + garbage");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain_due(w: &mut Wheel<u64>, now: u64) -> Vec<(u64, u64)> {
        std::iter::from_fn(|| w.poll(now))
            .map(|f| (f.deadline, f.value))
            .collect()
    }

    #[test]
    fn lone_far_timer_fires_on_first_wake_up() {
        let mut w = Wheel::new(64, 0);
        w.insert(1_000_000, 1);
        assert!(w.levels() >= 4);
        assert_eq!(w.next_expiration(), Some(1_000_000));
        assert!(drain_due(&mut w, 999_999).is_empty());
        assert_eq!(w.next_expiration(), Some(1_000_000));
        assert_eq!(drain_due(&mut w, 1_000_000), vec![(1_000_000, 1)]);
        assert_eq!(w.next_expiration(), None);
    }

    #[test]
    fn expirations_come_out_in_deadline_order_across_levels() {
        let mut w = Wheel::new(4, 0);
        let deadlines = [70u64, 3, 17, 64, 5, 1000, 4, 63, 65];
        for &d in &deadlines {
            w.insert(d, d);
        }
        w.check_invariants();
        let out: Vec<u64> = drain_due(&mut w, 2000).into_iter().map(|f| f.0).collect();
        let mut sorted = deadlines.to_vec();
        sorted.sort();
        assert_eq!(out, sorted);
        w.check_invariants();
    }

    #[test]
    fn a_sparse_second_level_bucket_is_served_as_a_sorted_run() {
        let mut w = Wheel::new(64, 0);
        // All in the second level's slot 1 (ticks 64..128), a few per tick.
        let deadlines = [127u64, 64, 100, 65, 100, 90, 126, 64];
        let keys: Vec<TimerKey> = deadlines.iter().map(|&d| w.insert(d, d)).collect();
        assert!(w.run.is_empty());
        // The bucket flushes at its earliest deadline: due ones go out, the
        // rest wait in the run, not in finest-level buckets.
        assert_eq!(w.poll(64).map(|f| f.value), Some(64));
        assert_eq!(w.poll(64).map(|f| f.value), Some(64));
        assert_eq!(w.poll(64).map(|f| f.value), None);
        assert_eq!(w.run.len(), 6);
        assert_eq!(w.queue.peek(), None, "nothing filed into the finest level");
        assert_eq!(w.next_expiration(), Some(65));
        w.check_invariants();
        // Cancelling the run's earliest moves the next expiration with it.
        assert_eq!(w.remove(keys[3]), Some(65));
        assert_eq!(w.next_expiration(), Some(90));
        // A timer scheduled meanwhile, due before the run's next, goes first.
        w.insert(80, 80);
        w.check_invariants();
        let out: Vec<(u64, u64)> = drain_due(&mut w, 1000);
        assert_eq!(
            out.iter().map(|f| f.1).collect::<Vec<_>>(),
            [80, 90, 100, 100, 126, 127]
        );
        assert!(out.iter().all(|&(d, v)| d == v));
        w.check_invariants();
    }

    #[test]
    fn a_run_sorted_by_counting_hands_out_in_deadline_order() {
        for wheel_size in [2u64, 3, 8, 64, 100, 256] {
            let mut w = Wheel::new(wheel_size, 0);
            // Second-level slot 1: ticks [W, 2W), several per tick, shuffled.
            let mut deadlines: Vec<u64> = (0..8 * wheel_size)
                .map(|i| wheel_size + (i * 7919) % wheel_size)
                .collect();
            deadlines.push(wheel_size);
            for (id, &d) in deadlines.iter().enumerate() {
                w.insert(d, id as u64);
            }
            assert_eq!(w.poll(wheel_size).map(|f| f.deadline), Some(wheel_size));
            assert!(w.run.len() >= 8, "W {wheel_size}: the bucket became a run");
            w.check_invariants();
            let mut out = vec![wheel_size];
            let mut now = wheel_size;
            while w.len() > 0 {
                now += 1;
                while let Some(f) = w.poll(now) {
                    assert!(f.deadline <= now, "W {wheel_size}: early");
                    out.push(f.deadline);
                }
                w.check_invariants();
            }
            deadlines.sort_unstable();
            assert_eq!(out, deadlines, "W {wheel_size}: deadline order");
        }
    }

    #[test]
    fn overdue_is_served_first_in_order() {
        let mut w = Wheel::new(8, 100);
        w.insert(150, 150);
        w.insert(90, 90);
        w.insert(10, 10);
        w.insert(100, 100);
        assert_eq!(w.next_expiration(), Some(10), "due since 10");
        let out: Vec<u64> = drain_due(&mut w, 100).into_iter().map(|f| f.0).collect();
        assert_eq!(out, vec![10, 90, 100]);
        assert_eq!(drain_due(&mut w, 150), vec![(150, 150)]);
    }

    #[test]
    fn cancel_and_reschedule_leave_garbage_that_is_skipped() {
        let mut w = Wheel::new(8, 0);
        let a = w.insert(10, 1);
        let b = w.insert(20, 2);
        assert!(w.reschedule(a, 30));
        assert_eq!(w.remove(b), Some(2));
        w.check_invariants();
        assert!(drain_due(&mut w, 29).is_empty());
        assert_eq!(drain_due(&mut w, 30), vec![(30, 1)]);
        assert!(!w.reschedule(a, 40));
        assert_eq!(w.remove(a), None);
        w.check_invariants();
    }

    #[test]
    fn emptied_wheel_arms_nothing() {
        let mut w = Wheel::new(64, 0);
        let keys: Vec<_> = (1..100).map(|d| w.insert(d * 1000, d)).collect();
        for k in keys {
            w.remove(k);
        }
        assert_eq!(w.next_expiration(), None);
        assert_eq!(w.queue.len(), 0);
        w.check_invariants();
    }

    #[test]
    fn an_emptied_wheel_gives_its_arena_back_and_keeps_working() {
        let mut w = Wheel::new(64, 0);
        let keys: Vec<_> = (0..10_000u64).map(|i| w.insert(1 + i % 500, i)).collect();
        for &k in &keys[..5_000] {
            assert!(w.remove(k).is_some());
        }
        let fired = std::iter::from_fn(|| w.poll(1_000)).count();
        assert_eq!(fired, 5_000);
        assert_eq!(w.arena.slots(), 0, "released once empty");
        w.check_invariants();
        let k = w.insert(1_010, 7);
        assert!(
            keys.iter().all(|&old| !w.contains(old)),
            "old keys stay stale"
        );
        assert!(keys.iter().all(|&old| w.remove(old).is_none()));
        assert!(w.contains(k));
        assert_eq!(w.poll(1_010).map(|f| f.value), Some(7));
        w.check_invariants();
    }

    #[test]
    fn compaction_bounds_garbage() {
        let mut w = Wheel::new(64, 0);
        w.insert(5_000_000, 0);
        for i in 0..100_000u64 {
            let k = w.insert(1 + i % 30_000, i);
            w.remove(k);
            assert!(w.garbage <= w.len() + GARBAGE_SLACK + 1);
        }
        w.check_invariants();
        let refs: usize = w.buckets.iter().map(Vec::len).sum();
        assert!(refs <= 1 + GARBAGE_SLACK + 1, "{refs} references kept");
    }

    #[test]
    fn random_operations_keep_the_invariants() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut rand = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for wheel_size in [2u64, 3, 8, 64, 100, 4096] {
            let mut w = Wheel::new(wheel_size, 0);
            let mut keys = Vec::new();
            let mut now = 0u64;
            for step in 0..20_000u64 {
                match rand() % 8 {
                    0..=2 => keys.push(w.insert(now + rand() % 5000, step)),
                    3 | 4 if !keys.is_empty() => {
                        let k = keys.swap_remove((rand() % keys.len() as u64) as usize);
                        w.remove(k);
                    }
                    5 if !keys.is_empty() => {
                        let k = keys[(rand() % keys.len() as u64) as usize];
                        w.reschedule(k, now + rand() % 5000);
                    }
                    6 => {
                        now += rand() % 40;
                        let take = rand() % 4;
                        for _ in 0..take {
                            if w.poll(now).is_none() {
                                break;
                            }
                        }
                    }
                    _ => {
                        now += rand() % 40;
                        while let Some(f) = w.poll(now) {
                            assert!(f.deadline <= now);
                        }
                        if let Some(next) = w.next_expiration() {
                            let pending = keys.iter().filter(|k| w.contains(**k)).count();
                            assert!(pending > 0, "next expiration {next} with nothing pending");
                        }
                    }
                }
                w.check_invariants();
            }
        }
    }

    #[test]
    fn cancelling_the_earliest_timer_moves_next_expiration() {
        let mut w = Wheel::new(64, 0);
        let a = w.insert(10, 1);
        w.insert(20, 2);
        let far = w.insert(100_000, 3);
        w.insert(100_050, 4);
        assert_eq!(w.next_expiration(), Some(10));
        w.remove(a);
        assert_eq!(w.next_expiration(), Some(20), "level 0 key settles");
        while w.poll(20).is_some() {}
        assert_eq!(w.next_expiration(), Some(100_000));
        w.remove(far);
        assert_eq!(
            w.next_expiration(),
            Some(100_050),
            "small coarse bucket rescanned"
        );
        assert!(!w.reschedule(far, 5), "a cancelled key stays stale");
    }

    #[test]
    fn never_fires_never_ticks() {
        let mut w = Wheel::new(2, 0);
        w.insert(NEVER, 1);
        w.insert(NEVER - 1, 2);
        assert_eq!(w.levels(), 64);
        assert_eq!(drain_due(&mut w, NEVER - 2), vec![]);
        assert_eq!(drain_due(&mut w, NEVER - 1), vec![(NEVER - 1, 2)]);
        assert_eq!(w.next_expiration(), None);
        assert_eq!(w.len(), 1);
        assert_eq!(w.drain(), vec![1]);
    }

    #[test]
    fn time_never_runs_back() {
        let mut w = Wheel::new(8, 50);
        w.insert(60, 1);
        assert!(drain_due(&mut w, 10).is_empty());
        assert_eq!(w.now(), 50);
        assert_eq!(drain_due(&mut w, 60), vec![(60, 1)]);
    }
}
