//! The hierarchical timing wheel, in ticks, single-threaded.
//!
//! ## Design
//!
//! A timer's payload lives in an arena slot; the wheel files an 8-byte
//! *reference* `(slot, check)` to it in the bucket of its deadline. With
//! `W` slots per level, level `L` is a ring of `W` buckets of `W^L` ticks
//! each (W = 64, 1 ms tick: 1 ms, 64 ms, 4.1 s, …, table in [`level`]),
//! bucket id `L·W + slot`. A deadline goes to the finest level whose
//! window, starting at the slot that holds the wheel's time, still reaches
//! it, in slot `(deadline / W^L) mod W`. Levels are created lazily.
//!
//! | part | file | what it holds |
//! |------|------|---------------|
//! | arena | [`arena`] | payloads; a handle ([`TimerKey`], [`key`]) is `(index, generation)` |
//! | references | [`reference`](mod@reference) | the deadline's low 31 bits as the check; the rest follows from the wheel's time |
//! | buckets | [`pool`] | every bucket's references in blocks of one pool |
//! | bucket queue | `bucket_queue` | a bitmap of armed buckets per level, each keyed by its earliest deadline |
//! | ready list | here | the references of the flushed bucket that are due now |
//! | run | [`run`] | a sparse second-level bucket, counting-sorted by tick instead of filed into level 0 |
//! | side heap | [`side`] | timers due at once when scheduled (*overdue*) or 2^31 ticks or more ahead (*far*) |
//! | garbage | [`compact`] | how many references are dead; compaction when they outnumber the live timers |
//! | head | [`head`] | per bucket, the reference that set its key; settling the head after a removal |
//! | freed | [`freed`] | memory the wheel gives back (this module's one name for it), freed at once or, if it [keeps it](Wheel::keep_freed), [by its owner](Wheel::take_freed) after the lock |
//!
//! Scheduling appends a reference; cancelling frees the arena slot, which
//! turns the reference into *garbage* without touching its bucket (dropped
//! when met, compacted when it outnumbers the live timers; when the last
//! live timer goes, every reference is dropped at once, so an empty wheel
//! arms no bucket and asks for no wake-up). A poll pops the earliest due
//! bucket (or run reference, or side entry), moves the wheel's time to its
//! key, expires what is due and files the rest into finer levels (a
//! reference never returns to the level it came from), so expirations come
//! out in deadline order, and the cost of a poll does not depend on how much
//! time passed. Within one tick the order is unspecified.
//!
//! ## Invariants
//!
//! Checked after every step of the tests (`check.rs`):
//! * **level window**: a reference in an armed bucket of level `L` is due in
//!   `[now, last_L]`, in that bucket's slot, so ring order from the current
//!   slot is time order (what lets the bucket queue be a bitmap);
//! * **near window**: every reference is due in `[now, now + 2^31)`, so its
//!   check gives its deadline back; references that read as live for one
//!   slot agree on one deadline;
//! * a bucket is armed iff it holds references, with a key at or before its
//!   earliest deadline, equal to it while the bucket's holder is live;
//! * every pending timer has exactly one live reference or side entry, and
//!   references = near timers + garbage;
//! * when the head is *settled*, what the next poll looks at first is live
//!   (but for a large coarse bucket, which keeps its early key until flushed).

mod arena;
mod bucket_queue;
#[cfg(test)]
mod check;
mod compact;
mod freed;
mod head;
mod key;
mod level;
mod pool;
mod reference;
mod run;
mod side;
#[cfg(test)]
mod tests;

use crate::time::NEVER;
use arena::Arena;
use bucket_queue::BucketQueue;
use compact::Garbage;
pub(crate) use freed::Freed;
use freed::Freer;
use head::Head;
pub(crate) use key::Fired;
pub use key::TimerKey;
use level::Levels;
use pool::{Bucket, Pool};
use reference::{is_near, near_check, Ref, SIDE};
use run::Run;
use side::Side;

/// Puts `r`, due now, on the `ready` list if it is live, or counts it off
/// `garbage`. Checking liveness while a bucket is flushed, in a tight loop
/// of independent loads, pulls the due timers' slots into cache together
/// rather than one miss per `take`; dead ones are dropped now.
#[inline(always)]
fn expire_into<T>(arena: &Arena<T>, ready: &mut Vec<Ref>, garbage: &mut Garbage, r: Ref) {
    if arena.is_live(r.idx, r.check) {
        ready.push(r);
    } else {
        garbage.met(1);
    }
}

/// The hierarchical timing wheel: schedule, cancel, reschedule and poll in
/// ticks. Reads no clock, spawns no thread, takes no lock.
#[derive(Debug)]
pub(crate) struct Wheel<T> {
    /// Payloads of pending timers.
    arena: Arena<T>,
    /// Levels created so far, and the slot arithmetic.
    levels: Levels,
    /// References per bucket; bucket id = level × W + slot.
    buckets: Vec<Bucket>,
    /// The blocks that hold every bucket's references.
    pool: Pool,
    /// Non-empty buckets by earliest deadline.
    queue: BucketQueue,
    /// Each bucket's key holder, and whether the head is settled.
    head: Head,
    /// Timers outside the near window: overdue or far.
    side: Side,
    /// Expired references of the bucket being handed out.
    ready: Vec<Ref>,
    /// A sparse second-level bucket, flushed, sorted by deadline.
    run: Run,
    /// A block of the coarse bucket being flushed, copied out of the pool
    /// (at most [`pool::MAX_BLOCK`] references).
    batch: Vec<Ref>,
    /// The wheel's time in ticks: everything due at or before it was flushed.
    now: u64,
    /// References known to be dead but still stored somewhere.
    garbage: Garbage,
    /// Who frees the memory the wheel gives back: the wheel, or its owner.
    freed: Freer<T>,
}

impl<T> Wheel<T> {
    /// An empty wheel with `wheel_size` slots per level (≥ 2, validated by
    /// the caller) whose time starts at tick `now`.
    pub(crate) fn new(wheel_size: u64, now: u64) -> Self {
        let levels = Levels::new(wheel_size);
        let mut wheel = Wheel {
            arena: Arena::new(),
            queue: BucketQueue::new(levels.geometry(), now),
            levels,
            buckets: Vec::new(),
            pool: Pool::default(),
            head: Head::default(),
            side: Side::default(),
            ready: Vec::new(),
            run: Run::default(),
            batch: Vec::new(),
            now,
            garbage: Garbage::default(),
            freed: Freer::Wheel,
        };
        wheel.add_level();
        wheel
    }

    /// Number of pending timers (including due ones not yet polled).
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.arena.len()
    }

    /// Slots per level.
    #[inline]
    pub(crate) fn wheel_size(&self) -> u64 {
        self.levels.wheel_size()
    }

    /// Makes the memory polls and removals give back wait for the owner to
    /// [take it](Self::take_freed) and free it after its lock.
    pub(crate) fn keep_freed(&mut self) {
        self.freed.keep();
    }

    /// The memory given back since the last call, if [kept](Self::keep_freed).
    #[inline]
    pub(crate) fn take_freed(&mut self) -> Option<Box<Freed<T>>> {
        self.freed.take()
    }

    /// Schedules `value` at tick `deadline`.
    #[inline]
    pub(crate) fn insert(&mut self, deadline: u64, value: T) -> TimerKey {
        // One test of the window, the common case first.
        let (idx, generation) = if is_near(deadline, self.now) {
            let check = near_check(deadline);
            let (idx, generation) = self.arena.insert(value, check);
            self.place_near(Ref { idx, check }, deadline);
            (idx, generation)
        } else {
            let check = self.side.reserve(deadline);
            let (idx, generation) = self.arena.insert(value, check);
            self.side.push(idx, check, deadline);
            (idx, generation)
        };
        TimerKey { idx, generation }
    }

    /// Whether `key` is pending.
    #[inline]
    pub(crate) fn contains(&self, key: TimerKey) -> bool {
        self.arena.contains(key.idx, key.generation)
    }

    /// The payload of pending `key`, to change in place.
    #[inline]
    pub(crate) fn get_mut(&mut self, key: TimerKey) -> Option<&mut T> {
        self.arena.get_mut(key.idx, key.generation)
    }

    /// Cancels `key`; returns its payload if it was pending.
    #[inline]
    pub(crate) fn remove(&mut self, key: TimerKey) -> Option<T> {
        let (value, check) = self.arena.remove(key.idx, key.generation)?;
        self.garbage.forget(check, &mut self.side, &self.arena);
        self.tidy_after(key.idx);
        Some(value)
    }

    /// Moves pending `key` to tick `deadline`; `false` if it is not pending.
    #[inline]
    pub(crate) fn reschedule(&mut self, key: TimerKey, deadline: u64) -> bool {
        if !self.arena.contains(key.idx, key.generation) {
            return false;
        }
        // Its reference's check, or a side heap entry's (reserved here).
        let check = if is_near(deadline, self.now) {
            near_check(deadline)
        } else {
            self.side.reserve(deadline)
        };
        let old = self.arena.recheck(key.idx, key.generation, check);
        debug_assert!(old.is_some(), "recheck of a pending timer");
        match old {
            // The same near deadline: the old reference is still the live one.
            Some(old) if old == check && old & SIDE == 0 => return true,
            Some(old) => self.garbage.forget(old, &mut self.side, &self.arena),
            None => return false,
        }
        self.place(key.idx, check, deadline);
        self.tidy_after(key.idx);
        true
    }

    /// The tick at which the next timer may be due, if any can ever be.
    ///
    /// Never later than the earliest pending deadline, and exact unless the
    /// earliest timer of a large coarse bucket or of the side heap was
    /// cancelled (then a poll at the reported tick hands out nothing).
    pub(crate) fn next_expiration(&self) -> Option<u64> {
        if !self.ready.is_empty() {
            return Some(self.now);
        }
        // An overdue timer's deadline is at or before the wheel's time
        // (after a clock that went backwards, it is due by its own deadline);
        // a far one's is after every reference's.
        let side = self.side.earliest();
        let bucket = self.queue.peek().map(|(key, _)| key);
        let run = self.run.last().map(|r| r.deadline(self.now));
        [side, bucket, run]
            .into_iter()
            .flatten()
            .min()
            .filter(|&k| k != NEVER)
    }

    /// Hands out the next timer due at or before tick `now`, in deadline
    /// order; `None` when nothing more is due. Afterwards the wheel's time is
    /// `now` (or stays where it was if `now` is earlier: time never runs back).
    pub(crate) fn poll(&mut self, now: u64) -> Option<Fired<T>> {
        self.head.unsettle();
        loop {
            let arena = &self.arena;
            let side = self
                .side
                .first(|idx, check| arena.is_live(idx, check))
                .filter(|e| e.deadline <= now);
            // Overdue timers first: due at or before the wheel's time.
            if let Some(e) = side.filter(|e| e.deadline <= self.now) {
                return Some(self.take_side(e.idx, e.check, e.deadline));
            }
            if let Some(r) = self.ready.pop() {
                if let Some(fired) = self.take(r, self.now) {
                    return Some(fired);
                }
                continue;
            }
            let head = self.queue.peek();
            if let Some(r) = self.run.last() {
                let d = r.deadline(self.now);
                if d <= now
                    && head.is_none_or(|(key, _)| d <= key)
                    && side.is_none_or(|e| d <= e.deadline)
                {
                    self.run.pop();
                    self.set_now(d);
                    if let Some(fired) = self.take(r, d) {
                        return Some(fired);
                    }
                    continue;
                }
            }
            // A far timer whose time has come, if no bucket is due before it.
            if let Some(e) = side.filter(|e| head.is_none_or(|(key, _)| e.deadline <= key)) {
                self.set_now(e.deadline);
                return Some(self.take_side(e.idx, e.check, e.deadline));
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
                    // whose two dependent cache misses per W1 pair then no
                    // longer overlap the next pair's (`docs/design.md`, W1).
                    if self.garbage.count() > 0 {
                        self.settle_head();
                    }
                    // With no garbage every reference is live.
                    self.head.mark_settled();
                    if self.arena.len() == 0 {
                        // Everything fired: no reference is live.
                        self.empty_out(false);
                    }
                    return None;
                }
            }
        }
    }

    /// Removes every pending timer and returns the payloads (in no
    /// particular order). Every key turns stale. The arena keeps its
    /// slots; a large pool and side heap are freed (kept for the owner if
    /// the wheel [keeps what it frees](Self::keep_freed)).
    pub(crate) fn drain(&mut self) -> Vec<T> {
        self.forget_refs();
        self.freed.give_back(&mut self.pool, &mut self.side, None);
        self.arena.drain()
    }

    /// Files the timer of slot `idx`, whose slot carries `check`, due at
    /// `deadline`: into its bucket, or the side heap.
    #[inline]
    fn place(&mut self, idx: u32, check: u32, deadline: u64) {
        if check & SIDE == 0 {
            self.place_near(Ref { idx, check }, deadline);
        } else {
            self.side.push(idx, check, deadline);
        }
    }

    /// Files reference `r`, due at `deadline` in the near window, into its
    /// bucket.
    #[inline]
    fn place_near(&mut self, r: Ref, deadline: u64) {
        let bucket = self.bucket_for(deadline);
        self.pool.push(&mut self.buckets[bucket as usize], r);
        if self.queue.arm(bucket, deadline) {
            self.head.hold(bucket, r);
        }
    }

    /// Flushes `bucket`, popped from the queue at `key`: expires what is due
    /// at `key` and re-inserts the rest into finer levels.
    ///
    /// Not inlined: it runs once per bucket, but inlined into
    /// [`poll`](Self::poll), which runs once per timer, it made every poll
    /// save and restore the registers its loops use.
    #[inline(never)]
    fn flush(&mut self, bucket: u32, key: u64) {
        // Every reference of the bucket is due at or after its key, so its
        // deadline is still recovered at the new time.
        self.set_now(key);
        let mut refs = std::mem::take(&mut self.buckets[bucket as usize]);
        let w = self.levels.wheel_size() as usize;
        // A sparse second-level bucket: what is not due now all lands in the
        // finest level, one or two references per bucket there. Sorting it
        // once is cheaper than arming and popping a bucket per reference.
        let to_run = self.run.takes(w, bucket as usize, refs.len());
        // Every reference here is due at or after the new time, so it is
        // due now iff its check is the time's.
        let due = near_check(self.now);
        let mut batch = std::mem::take(&mut self.batch);
        if (bucket as usize) < w {
            // The finest level: a bucket is one tick wide, so everything in
            // it is due now and nothing is filed while it is read: read in
            // place, with no copy (W2 flushes a finest bucket every tick).
            batch.clear();
            for block in 0..refs.blocks() {
                for &r in self.pool.block(&refs, block) {
                    if r.check == due {
                        expire_into(&self.arena, &mut self.ready, &mut self.garbage, r);
                    } else {
                        batch.push(r);
                    }
                }
            }
            self.pool.release(&mut refs);
            debug_assert!(
                batch.is_empty(),
                "finest bucket {bucket} held references not due at {}: {batch:?}",
                self.now
            );
            for &r in &batch {
                self.place_near(r, r.deadline(self.now));
            }
        }
        // Coarser levels cascade: each block is copied out and given back
        // first, so filing its references can take it.
        while self.pool.unload(&mut refs, &mut batch) {
            for &r in &batch {
                if r.check == due {
                    expire_into(&self.arena, &mut self.ready, &mut self.garbage, r);
                } else if to_run {
                    self.run.push(r);
                } else {
                    // Cascade: lands in a finer level, never back in
                    // `bucket`, perhaps in the block just unloaded.
                    self.place_near(r, r.deadline(self.now));
                }
            }
        }
        self.batch = batch;
        if to_run {
            self.run.sort(self.now, self.levels.finest_last(), w);
        }
        let slot = &mut self.buckets[bucket as usize];
        debug_assert!(slot.is_empty(), "bucket {bucket} refilled by its own flush");
        // The emptied bucket keeps its directory of blocks for its next fill
        // (if it were refilled, its own directory must stay).
        if slot.is_empty() {
            *slot = refs;
        }
        let needed = self.arena.len() + self.garbage.count();
        self.freed
            .trim_pool(&mut self.pool, &mut self.buckets, needed);
    }

    /// Frees the timer behind `r`, due at `deadline`, if `r` is live.
    #[inline]
    fn take(&mut self, r: Ref, deadline: u64) -> Option<Fired<T>> {
        match self.arena.remove_live(r.idx, r.check) {
            Some((value, generation)) => {
                self.empty_out_if_last();
                Some(Fired {
                    key: TimerKey {
                        idx: r.idx,
                        generation,
                    },
                    deadline,
                    value,
                })
            }
            None => {
                self.garbage.met_dead();
                None
            }
        }
    }

    /// Frees the side timer on top of the side heap, found live by
    /// [`Side::first`].
    fn take_side(&mut self, idx: u32, check: u32, deadline: u64) -> Fired<T> {
        self.side.pop_first();
        let (value, generation) = self
            .arena
            .remove_live(idx, check)
            .expect("the side heap's first entry is live");
        self.empty_out_if_last();
        Fired {
            key: TimerKey { idx, generation },
            deadline,
            value,
        }
    }

    /// After a timer was handed out: if it was the last and references or
    /// side entries remain, drops them all now, keeping the arena (the poll
    /// that finds the wheel empty releases it).
    #[inline]
    fn empty_out_if_last(&mut self) {
        if self.arena.len() == 0 && (self.garbage.count() > 0 || !self.side.is_clear()) {
            self.empty_out(true);
        }
    }

    /// The bucket a future `deadline` goes to, creating levels as needed.
    #[inline]
    fn bucket_for(&mut self, deadline: u64) -> u32 {
        debug_assert!(deadline > self.now, "deadline {deadline} <= {}", self.now);
        // The finest level that accepts it, created if need be.
        let mut level = 0;
        loop {
            if level == self.levels.len() {
                self.add_level();
            }
            if let Some(bucket) = self.levels.bucket_in(level, deadline) {
                return bucket;
            }
            level += 1;
        }
    }

    /// Creates the next coarser level, with its buckets.
    ///
    /// Cold: it runs once per level in a wheel's life, and inlined into
    /// [`place_near`](Self::place_near), which runs once per timer filed,
    /// it made every call save and restore the registers its `resize`
    /// loops use.
    #[cold]
    fn add_level(&mut self) {
        let tick = self.levels.add(self.now);
        let buckets = self.buckets.len() + self.levels.wheel_size() as usize;
        self.buckets.resize_with(buckets, Bucket::default);
        self.head.add_buckets(buckets);
        self.queue.add_level(tick);
    }

    /// Moves the wheel's time forward to `now`. Every reference's deadline
    /// must be at or after it (the near window moves with it).
    #[inline]
    fn set_now(&mut self, now: u64) {
        if now > self.now {
            self.now = now;
            self.queue.set_now(now);
            self.levels.set_now(now);
        }
    }

    /// After the timer in slot `idx` was removed or moved: drops all
    /// references if no timer is live, or compacts if garbage outnumbers the
    /// live timers; settles the head if a poll left it unsettled or that
    /// timer may have been on top (else no lookup in the arena).
    #[inline]
    fn tidy_after(&mut self, idx: u32) {
        if self.arena.len() == 0 {
            self.empty_out(false);
        } else if self.garbage.outnumbers(self.arena.len()) {
            self.compact();
        }
        let on_top = |r: Option<Ref>| r.is_some_and(|r| r.idx == idx);
        let holder = |(_, bucket)| self.head.holder(bucket).idx == idx;
        if !self.head.is_settled()
            || on_top(self.ready.last().copied())
            || on_top(self.run.last())
            || self.queue.peek().is_some_and(holder)
        {
            self.settle_head();
        }
    }

    /// Makes what the next poll looks at first live ([`Head::settle`]).
    /// Not inlined: its argument set-up lengthened the cancel path (W1).
    #[inline(never)]
    fn settle_head(&mut self) {
        let lists = [&mut self.ready, self.run.refs_mut()];
        let (queue, buckets, pool) = (&mut self.queue, &mut self.buckets, &mut self.pool);
        let dropped = self
            .head
            .settle(&self.arena, lists, queue, buckets, pool, self.now);
        self.garbage.met(dropped);
    }

    /// Drops every dead reference, and every duplicate of a live one.
    #[cold]
    fn compact(&mut self) {
        let lists = [&mut self.ready, self.run.refs_mut()];
        let (queue, head, pool) = (&mut self.queue, &mut self.head, &mut self.pool);
        let buckets = &mut self.buckets;
        let dropped = compact::compact(&self.arena, lists, queue, buckets, pool, head, self.now);
        self.garbage.compacted(dropped);
    }

    /// No timer is pending: drops every reference left. A wheel that is not
    /// small ([`freed::is_small`]) gives back its pool, side heap and, unless
    /// `keep_arena` (the poll that finds it empty will), its arena.
    fn empty_out(&mut self, keep_arena: bool) {
        let small = freed::is_small(&self.arena, &self.pool, &self.side);
        self.forget_refs();
        if !small {
            let arena = (!keep_arena).then_some(&mut self.arena);
            self.freed.give_back(&mut self.pool, &mut self.side, arena);
        }
    }

    /// Drops every reference (the buckets' blocks go back to the pool's free
    /// lists) and disarms every bucket; only correct when no near timer is pending.
    fn forget_refs(&mut self) {
        for bucket in self.queue.buckets() {
            self.pool.release(&mut self.buckets[bucket as usize]);
        }
        self.queue.clear();
        self.ready.clear();
        self.run.clear();
        self.garbage.clear();
        self.head.mark_settled();
    }
}
