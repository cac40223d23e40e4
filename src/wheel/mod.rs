//! The hierarchical timing wheel, in ticks, single-threaded.
//!
//! ## Design
//!
//! * **Arena** ([`arena`]): payloads live in a slab; a handle ([`TimerKey`]) is
//!   `(index, generation)`.
//! * **Levels** ([`level`]): level `L` is a ring of `W` buckets of `W^L` ticks.
//!   Levels are created lazily, the first time a deadline needs one.
//! * **Buckets**: a bucket holds 8-byte references `(slot, check)`
//!   ([`reference`](mod@reference)): the check is the deadline's low 31
//!   bits, and the rest of the deadline follows from the wheel's time, since
//!   every reference's deadline is less than 2^31 ticks ahead of it. The
//!   references live in blocks of one pool the wheel owns ([`pool`]): a
//!   flushed bucket's blocks go to the next bucket that grows, and nothing
//!   is handed back to the allocator while the wheel holds references.
//!   Scheduling appends one; cancelling frees the arena slot, which turns
//!   the reference into *garbage* without touching the bucket. Garbage is
//!   dropped when met, and a compaction runs when it outnumbers the live
//!   timers (amortised O(1)). When the last live timer goes, all references
//!   are dropped at once, so an empty wheel has no armed bucket and asks for
//!   no wake-up.
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
//! * **Side heap** ([`side`]): a timer due at once when scheduled
//!   (*overdue*), or 2^31 ticks or more ahead (*far*), has no reference; it
//!   waits in a min-heap with its full deadline and is served in deadline
//!   order with the rest, overdue ones first.
//!
//! Within one tick, the order of expirations is unspecified.

mod arena;
mod bucket_queue;
mod level;
mod pool;
mod reference;
mod side;

use std::num::NonZeroU32;

use crate::time::NEVER;
use arena::{Arena, Slots};
use bucket_queue::BucketQueue;
use level::Geometry;
use pool::{Bucket, Pool};
use reference::{is_near, near_check, Ref, NO_REF, SIDE};
use side::Side;

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
    /// Generation of the occupant: higher than any generation before the
    /// arena last gave its slots back, so a key from before matches nothing
    /// after.
    gen: NonZeroU32,
}

impl TimerKey {
    /// A key that never names a timer (slot indices stop below `u32::MAX`).
    pub(crate) const DEAD: TimerKey = TimerKey {
        idx: u32::MAX,
        gen: NonZeroU32::MIN,
    };

    /// The `n`th key that never names a timer: keys of different `n` below
    /// 2³² − 1 differ, so tasks that never enter a wheel (due at once) can
    /// still be told apart by their keys.
    pub(crate) fn dead(n: u64) -> TimerKey {
        let gen = (n % u64::from(u32::MAX)) as u32 + 1;
        TimerKey {
            idx: u32::MAX,
            gen: NonZeroU32::new(gen).unwrap_or(NonZeroU32::MIN),
        }
    }

    /// Whether this key never names a timer ([`DEAD`](Self::DEAD) or
    /// [`dead`](Self::dead)).
    pub(crate) fn is_dead(self) -> bool {
        self.idx == u32::MAX
    }

    /// The arena slot it names, for tests that check a slot was reused.
    #[cfg(all(test, not(purgatorio_loom)))]
    pub(crate) fn slot(self) -> u32 {
        self.idx
    }
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
/// they do not (`docs/design.md`, W2).
const RUN_PER_TICK: usize = 16;

/// A coarse head bucket whose key-setting timer died is rescanned for its
/// exact key up to this many references; a larger one keeps its early key and
/// is flushed (cascaded) then, which is work it needs anyway.
const RESCAN_LIMIT: usize = 64;

/// Keeps the references of `refs` that `keep` accepts, in order; returns
/// how many it dropped.
///
/// Branch-free on the answer: every reference is written and the write
/// index moves only past kept ones, so the arena lookups of successive
/// references overlap instead of waiting on a mispredicted branch each.
fn retain_kept(refs: &mut Vec<Ref>, mut keep: impl FnMut(Ref) -> bool) -> usize {
    let before = refs.len();
    let mut kept = 0;
    for at in 0..before {
        let r = refs[at];
        refs[kept] = r;
        kept += usize::from(keep(r));
    }
    refs.truncate(kept);
    before - kept
}

/// Keeps the references of `bucket` that `keep` accepts; returns how many
/// it dropped, and the earliest kept one with its deadline at wheel time
/// `now`.
fn retain_kept_in(
    pool: &mut Pool,
    bucket: &mut Bucket,
    now: u64,
    keep: impl FnMut(Ref) -> bool,
) -> (usize, Option<(u64, Ref)>) {
    let before = bucket.len();
    pool.retain(bucket, keep);
    let earliest = (0..bucket.blocks())
        .filter_map(|k| {
            pool.block(bucket, k)
                .iter()
                .map(|&r| (r.deadline(now), r))
                .min_by_key(|e| e.0)
        })
        .min_by_key(|e| e.0);
    (before - bucket.len(), earliest)
}

/// Which arena slots a compaction has kept a reference to: the first
/// reference that reads as live for a slot is kept, and any other one is a
/// stale duplicate (it reads as live because the slot's new occupant has
/// the same deadline, so the same check).
struct Kept(Vec<u64>);

impl Kept {
    /// None yet, for an arena of `slots` slots.
    fn new(slots: usize) -> Self {
        Kept(vec![0; slots.div_ceil(64)])
    }

    /// Whether `r`, which must read as live, is the first kept for its
    /// slot; marks the slot.
    #[inline]
    fn first(&mut self, r: Ref) -> bool {
        let (word, bit) = (r.idx as usize / 64, 1u64 << (r.idx % 64));
        let first = self.0[word] & bit == 0;
        self.0[word] |= bit;
        first
    }
}

/// Puts `r`, due now, on the `ready` list if it is live, or counts it off
/// `garbage`. Checking liveness while a bucket is flushed, in a tight loop
/// of independent loads, pulls the due timers' slots into cache together
/// rather than one miss per `take`; dead ones are dropped now.
#[inline(always)]
fn expire_into<T>(arena: &Arena<T>, ready: &mut Vec<Ref>, garbage: &mut usize, r: Ref) {
    if arena.is_live(r.idx, r.check) {
        ready.push(r);
    } else {
        *garbage -= 1;
    }
}

/// Pops dead references off the end of `refs` until a live one is last;
/// returns how many it popped.
fn pop_dead<T>(arena: &Arena<T>, refs: &mut Vec<Ref>) -> usize {
    let before = refs.len();
    while refs.last().is_some_and(|r| !arena.is_live(r.idx, r.check)) {
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

/// A timer that came due: the one item that travels from a bucket to
/// whoever runs it (the driver's batches to the workers carry it as is;
/// [`LocalTimer`](crate::LocalTimer) hands it to the user as
/// [`Expired`](crate::Expired), in time rather than ticks).
#[derive(Debug)]
pub(crate) struct Fired<T> {
    /// Its key (now stale).
    pub(crate) key: TimerKey,
    /// Its deadline in ticks.
    pub(crate) deadline: u64,
    /// Its payload.
    pub(crate) value: T,
}

impl<T> Fired<T> {
    /// `value`, due at tick `deadline`, that never had a key in a wheel (a
    /// task due at once, or an internal job).
    pub(crate) fn untracked(deadline: u64, value: T) -> Self {
        Fired {
            key: TimerKey::DEAD,
            deadline,
            value,
        }
    }
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
    buckets: Vec<Bucket>,
    /// The blocks that hold every bucket's references.
    pool: Pool,
    /// Per bucket, the reference whose deadline set the bucket's key: while
    /// it is live, the key is exact.
    holders: Vec<Ref>,
    /// Non-empty buckets by earliest deadline.
    queue: BucketQueue,
    /// Timers outside the near window: overdue or far.
    side: Side,
    /// Expired references of the bucket being handed out.
    ready: Vec<Ref>,
    /// A sparse bucket of the second level, flushed: its references that
    /// were not yet due, sorted latest first (handed out from the back)
    /// instead of filed one by one into finest-level buckets. See
    /// [`RUN_PER_TICK`].
    run: Vec<Ref>,
    /// A spare vector for sorting the run.
    scratch: Vec<Ref>,
    /// A block of the coarse bucket being flushed, copied out of the pool
    /// (at most [`pool::MAX_BLOCK`] references).
    batch: Vec<Ref>,
    /// The wheel's time in ticks: everything due at or before it was flushed.
    now: u64,
    /// References known to be dead but still stored somewhere.
    garbage: usize,
    /// Whether the head is settled ([`settle_head`](Self::settle_head)):
    /// what the next poll and [`next_expiration`](Self::next_expiration)
    /// look at first is live. A poll may leave it unsettled (a bucket that
    /// became the head may hold a dead holder); a removal then settles it,
    /// as does any removal of a timer on top.
    settled: bool,
    /// Whether memory given back during a poll waits in `freed` for the
    /// wheel's owner ([`defer_frees`](Self::defer_frees)).
    defers: bool,
    /// Memory given back during a poll, for the owner to free after its
    /// lock.
    freed: Option<Box<Freed<T>>>,
    /// Compactions so far (tests only).
    #[cfg(test)]
    compactions: usize,
}

/// Memory a wheel gave back (an emptied arena's slots, a pool's or side
/// heap's old store), held to be freed outside its owner's lock. None of it
/// holds a payload: dropping it runs no user code.
#[must_use = "a wheel that defers frees keeps this for its owner (`let_go`)"]
pub(crate) struct Freed<T> {
    /// An emptied arena's slots.
    slots: Option<Slots<T>>,
    /// A pool's old store.
    pool: Option<Pool>,
    /// A side heap's old store.
    side: Option<Side>,
}

impl<T> Default for Freed<T> {
    fn default() -> Self {
        Freed {
            slots: None,
            pool: None,
            side: None,
        }
    }
}

impl<T> std::fmt::Debug for Freed<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Freed")
            .field("slots", &self.slots.is_some())
            .field("pool", &self.pool.is_some())
            .field("side", &self.side.is_some())
            .finish()
    }
}

impl<T> Freed<T> {
    /// Whether it holds nothing.
    fn is_empty(&self) -> bool {
        self.slots.is_none() && self.pool.is_none() && self.side.is_none()
    }

    /// Keeps what `other` holds beside this; of two of a kind (a second
    /// release before the owner took the first, within one batch of
    /// polls) the later is freed here.
    fn merge(&mut self, other: Freed<T>) {
        let Freed { slots, pool, side } = other;
        if self.slots.is_none() {
            self.slots = slots;
        }
        if self.pool.is_none() {
            self.pool = pool;
        }
        if self.side.is_none() {
            self.side = side;
        }
    }
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
            pool: Pool::default(),
            holders: Vec::new(),
            queue: BucketQueue::new(geometry, now),
            side: Side::default(),
            ready: Vec::new(),
            run: Vec::new(),
            scratch: Vec::new(),
            batch: Vec::new(),
            now,
            garbage: 0,
            settled: true,
            defers: false,
            freed: None,
            #[cfg(test)]
            compactions: 0,
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

    /// The check a timer due at `deadline` gets now: its reference's, or a
    /// side heap entry's (reserved here, filed by [`place`](Self::place)).
    #[inline]
    fn check_for(&mut self, deadline: u64) -> u32 {
        if is_near(deadline, self.now) {
            near_check(deadline)
        } else {
            self.side.reserve(deadline)
        }
    }

    /// Schedules `value` at tick `deadline`.
    #[inline]
    pub(crate) fn insert(&mut self, deadline: u64, value: T) -> TimerKey {
        // One test of the window, the common case first.
        let (idx, gen) = if is_near(deadline, self.now) {
            let check = near_check(deadline);
            let (idx, gen) = self.arena.insert(value, check);
            self.place_near(Ref { idx, check }, deadline);
            (idx, gen)
        } else {
            let check = self.side.reserve(deadline);
            let (idx, gen) = self.arena.insert(value, check);
            self.side.push(idx, check, deadline);
            (idx, gen)
        };
        TimerKey { idx, gen }
    }

    /// Whether `key` is pending.
    #[inline]
    pub(crate) fn contains(&self, key: TimerKey) -> bool {
        self.arena.contains(key.idx, key.gen)
    }

    /// The payload of pending `key`, to change in place.
    #[inline]
    pub(crate) fn get_mut(&mut self, key: TimerKey) -> Option<&mut T> {
        self.arena.get_mut(key.idx, key.gen)
    }

    /// Cancels `key`; returns its payload if it was pending.
    #[inline]
    pub(crate) fn remove(&mut self, key: TimerKey) -> Option<T> {
        let (value, check) = self.arena.remove(key.idx, key.gen)?;
        self.forget(check);
        self.collect_garbage();
        self.settle_after(key.idx);
        Some(value)
    }

    /// Moves pending `key` to tick `deadline`; `false` if it is not pending.
    #[inline]
    pub(crate) fn reschedule(&mut self, key: TimerKey, deadline: u64) -> bool {
        if !self.arena.contains(key.idx, key.gen) {
            return false;
        }
        let check = self.check_for(deadline);
        let old = self.arena.recheck(key.idx, key.gen, check);
        debug_assert!(old.is_some(), "recheck of a pending timer");
        match old {
            // The same near deadline: the old reference is still the live one.
            Some(old) if old == check && old & SIDE == 0 => return true,
            Some(old) => self.forget(old),
            None => return false,
        }
        self.place(key.idx, check, deadline);
        self.collect_garbage();
        self.settle_after(key.idx);
        true
    }

    /// Counts the reference or side entry that carried `check` as garbage:
    /// its timer was cancelled or moved.
    #[inline]
    fn forget(&mut self, check: u32) {
        if check & SIDE == 0 {
            self.garbage += 1;
        } else {
            self.side.release(check);
            let arena = &self.arena;
            self.side
                .collect_garbage(|idx, check| arena.is_live(idx, check));
        }
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
        self.settled = false;
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
            if let Some(&r) = self.run.last() {
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
                    if self.garbage > 0 {
                        self.settle_head();
                    }
                    // With no garbage every reference is live.
                    self.settled = true;
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
    /// slots; a large pool and side heap are let go of (kept for the owner
    /// if the wheel [defers frees](Self::defer_frees)).
    pub(crate) fn drain(&mut self) -> Vec<T> {
        let freed = self.drop_refs();
        self.let_go(freed);
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
        self.buckets.resize_with(buckets, Bucket::default);
        self.holders.resize(buckets, NO_REF);
        self.queue.add_level(tick);
    }

    /// Moves the wheel's time forward to `now`. Every reference's deadline
    /// must be at or after it (the near window moves with it).
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
        let w = self.geometry.wheel_size() as usize;
        // A sparse second-level bucket: what is not due now all lands in the
        // finest level, one or two references per bucket there. Sorting it
        // once is cheaper than arming and popping a bucket per reference.
        let to_run = self.run.is_empty()
            && w <= RUN_MAX_WHEEL
            && (w..2 * w).contains(&(bucket as usize))
            && refs.len() <= RUN_PER_TICK * w;
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
            self.sort_run();
        }
        let slot = &mut self.buckets[bucket as usize];
        debug_assert!(slot.is_empty(), "bucket {bucket} refilled by its own flush");
        // The emptied bucket keeps its directory of blocks for its next fill
        // (if it were refilled, its own directory must stay).
        if slot.is_empty() {
            *slot = refs;
        }
        self.trim_pool();
    }

    /// Rebuilds the buckets' pool smaller once its store is more than 16
    /// times the references the wheel can hold (its pending timers and its
    /// garbage), past [`pool::KEEP_REFS`]: after a burst fired, the blocks
    /// it freed would otherwise stay until the wheel empties. Amortized
    /// over the references freed since the store last had that size.
    fn trim_pool(&mut self) {
        let needed = self.arena.len() + self.garbage;
        if self.pool.stored() > 16 * needed + pool::KEEP_REFS {
            let old = self.pool.rebuild(self.buckets.iter_mut());
            self.let_go(Freed {
                pool: Some(old),
                ..Freed::default()
            });
        }
    }

    /// Makes the memory a poll or a removal gives back wait for the owner
    /// to free it ([`take_freed`](Self::take_freed)) instead of being freed
    /// inside the call: for a wheel behind a lock, so that freeing a million
    /// timers' slots (milliseconds) does not hold the lock, nor delay the
    /// tasks a poll handed out. The owner takes it after every call that
    /// can empty the wheel or rebuild its pool.
    pub(crate) fn defer_frees(&mut self) {
        self.defers = true;
    }

    /// The arena's slots, occupied or vacant (tests only).
    #[cfg(all(test, not(purgatorio_loom)))]
    pub(crate) fn slots(&self) -> usize {
        self.arena.slots()
    }

    /// The memory polls and removals gave back since the last call, if the
    /// wheel [defers frees](Self::defer_frees): to drop after the owner's
    /// lock.
    #[inline]
    pub(crate) fn take_freed(&mut self) -> Option<Box<Freed<T>>> {
        self.freed.take()
    }

    /// Frees `freed` now, or keeps it for the owner if the wheel defers
    /// frees, beside what it kept already.
    fn let_go(&mut self, freed: Freed<T>) {
        if !self.defers || freed.is_empty() {
            return;
        }
        match &mut self.freed {
            Some(kept) => kept.merge(freed),
            None => self.freed = Some(Box::new(freed)),
        }
    }

    /// Sorts the run latest first. Its deadlines lie in the finest level's
    /// window, at most [`RUN_MAX_WHEEL`] ticks: a counting sort by tick does
    /// it without a compare (a comparison sort of random deadlines
    /// mispredicts about one branch per reference).
    fn sort_run(&mut self) {
        let w = self.geometry.wheel_size() as usize;
        let now = self.now;
        if self.run.len() < 8 {
            self.run
                .sort_unstable_by_key(|r| std::cmp::Reverse(r.deadline(now)));
            return;
        }
        let last = self.levels[0].last;
        // A reference's place counted from the level's last tick, latest
        // first: `last − deadline`, from the checks alone (both are in the
        // near window, and the run spans at most `w` ticks).
        let from_last = |r: &Ref| ((last as u32).wrapping_sub(r.check) & reference::LOW) as usize;
        let mut counts = [0u32; RUN_MAX_WHEEL + 1];
        for r in &self.run {
            debug_assert_eq!(from_last(r) as u64, last - r.deadline(now));
            debug_assert!(from_last(r) < w);
            counts[from_last(r) + 1] += 1;
        }
        for at in 1..=w {
            counts[at] += counts[at - 1];
        }
        let mut sorted = std::mem::take(&mut self.scratch);
        sorted.clear();
        sorted.resize(self.run.len(), NO_REF);
        for &r in &self.run {
            let at = &mut counts[from_last(&r)];
            sorted[*at as usize] = r;
            *at += 1;
        }
        self.scratch = std::mem::replace(&mut self.run, sorted);
    }

    /// Frees the timer behind `r`, due at `deadline`, if `r` is live.
    #[inline]
    fn take(&mut self, r: Ref, deadline: u64) -> Option<Fired<T>> {
        match self.arena.remove_live(r.idx, r.check) {
            Some((value, gen)) => {
                if self.arena.len() == 0 && (self.garbage > 0 || !self.side.is_clear()) {
                    self.empty_out(true);
                }
                Some(Fired {
                    key: TimerKey { idx: r.idx, gen },
                    deadline,
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

    /// Frees the side timer on top of the side heap, found live by
    /// [`Side::first`].
    fn take_side(&mut self, idx: u32, check: u32, deadline: u64) -> Fired<T> {
        self.side.pop_first();
        let (value, gen) = self
            .arena
            .remove_live(idx, check)
            .expect("the side heap's first entry is live");
        if self.arena.len() == 0 && (self.garbage > 0 || !self.side.is_clear()) {
            self.empty_out(true);
        }
        Fired {
            key: TimerKey { idx, gen },
            deadline,
            value,
        }
    }

    /// After the timer in slot `idx` was removed or moved: settles the head
    /// if that timer may have been on top of it (the last reference of the
    /// ready list or of the run, or the head bucket's holder), or if a poll
    /// left it unsettled. Otherwise it is settled already, and only that
    /// timer's references died: no lookup in the arena.
    #[inline]
    fn settle_after(&mut self, idx: u32) {
        let on_top = |refs: &Vec<Ref>| refs.last().is_some_and(|r| r.idx == idx);
        if !self.settled
            || on_top(&self.ready)
            || on_top(&self.run)
            || self
                .queue
                .peek()
                .is_some_and(|(_, bucket)| self.holders[bucket as usize].idx == idx)
        {
            self.settle_head();
        }
    }

    /// Makes the head of the bucket queue exact again after its key-setting
    /// timer died, so that [`next_expiration`](Self::next_expiration) does not
    /// ask for a wake-up with nothing due. Amortised O(1): dead references met
    /// here are dropped for good, and a rescan is bounded by [`RESCAN_LIMIT`].
    fn settle_head(&mut self) {
        self.settled = true;
        self.garbage -= pop_dead(&self.arena, &mut self.ready);
        self.garbage -= pop_dead(&self.arena, &mut self.run);
        while let Some((_, bucket)) = self.queue.peek() {
            let b = bucket as usize;
            let holder = self.holders[b];
            if self.arena.is_live(holder.idx, holder.check) {
                return;
            }
            let refs = &mut self.buckets[b];
            if b < self.geometry.wheel_size() as usize {
                // Level 0: every reference has the key as its deadline, so
                // any live one makes the key exact.
                let arena = &self.arena;
                self.garbage -= self
                    .pool
                    .pop_while(refs, |r| !arena.is_live(r.idx, r.check));
                match self.pool.last(refs) {
                    Some(live) => {
                        self.holders[b] = live;
                        return;
                    }
                    None => {
                        self.queue.disarm(bucket);
                    }
                }
            } else if refs.len() <= RESCAN_LIMIT {
                let arena = &self.arena;
                let (dropped, earliest) = retain_kept_in(&mut self.pool, refs, self.now, |r| {
                    arena.is_live(r.idx, r.check)
                });
                self.garbage -= dropped;
                match earliest {
                    Some((deadline, r)) => {
                        self.queue.rekey(bucket, deadline);
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
            self.empty_out(false);
        } else if self.garbage > self.arena.len() + GARBAGE_SLACK {
            self.compact();
        }
    }

    /// Whether the wheel has no memory to give back: its arena, pool and
    /// side heap are no larger than what an empty wheel keeps.
    fn is_small(&self) -> bool {
        self.arena.slots() <= arena::KEEP_SLOTS
            && self.pool.stored() <= pool::KEEP_REFS
            && self.side.is_clear_and_small()
    }

    /// No timer is pending: every reference left is dead, and dropped. A
    /// small wheel ([`is_small`](Self::is_small)) keeps its memory: its
    /// buckets' blocks go back to the pool's free lists, for the next
    /// timers, and its arena keeps its slots. So a wheel that goes from one
    /// timer to none and back, as a lightly loaded server's does, does not
    /// rebuild its store each time. A larger one lets go of its pool and
    /// side heap, and of its arena unless `keep_arena`: when the last timer
    /// is being handed out, its slot was just freed, and the poll that
    /// finds the wheel empty releases the arena (see
    /// [`let_go`](Self::let_go)).
    fn empty_out(&mut self, keep_arena: bool) {
        if self.is_small() {
            self.forget_refs();
            return;
        }
        let mut freed = self.drop_refs();
        if !keep_arena {
            freed.slots = self.arena.release();
        }
        self.let_go(freed);
    }

    /// Drops every reference of the buckets (their blocks go back to the
    /// pool's free lists), the ready list and the run, and disarms every
    /// bucket. Only correct when no near timer is pending (none that a
    /// reference holds).
    fn forget_refs(&mut self) {
        for bucket in self.queue.buckets() {
            self.pool.release(&mut self.buckets[bucket as usize]);
        }
        self.queue.clear();
        self.ready.clear();
        self.run.clear();
        self.garbage = 0;
        self.settled = true;
    }

    /// Drops every reference and side entry and disarms every bucket. Only
    /// correct when no timer is pending (or the arena is drained right after).
    /// Returns the memory a large pool and side heap gave back.
    fn drop_refs(&mut self) -> Freed<T> {
        self.forget_refs();
        let pool = self.pool.clear();
        let side = self.side.clear();
        Freed {
            pool,
            side,
            slots: None,
        }
    }

    /// Removes every dead reference, and every duplicate of a live one, and
    /// re-keys every bucket to its earliest live deadline. O(references).
    fn compact(&mut self) {
        #[cfg(test)]
        {
            self.compactions += 1;
        }
        let arena = &self.arena;
        let mut kept = Kept::new(arena.slots());
        let mut keep = |r: Ref| arena.is_live(r.idx, r.check) && kept.first(r);
        let mut dropped = 0;
        for refs in [&mut self.ready, &mut self.run] {
            dropped += retain_kept(refs, &mut keep);
        }
        let armed: Vec<u32> = self.queue.buckets().collect();
        for bucket in armed {
            let refs = &mut self.buckets[bucket as usize];
            let (gone, earliest) = retain_kept_in(&mut self.pool, refs, self.now, &mut keep);
            dropped += gone;
            match earliest {
                Some((deadline, r)) => {
                    self.queue.rekey(bucket, deadline);
                    self.holders[bucket as usize] = r;
                }
                None => {
                    self.queue.disarm(bucket);
                }
            }
        }
        // A stale reference that reads as live has its timer's deadline
        // (see `reference`): keeping one reference per slot drops them,
        // else a slot reused at one deadline over and over (a clock that
        // does not move) would keep its stale references counted for ever,
        // and every later change would compact again.
        self.garbage -= dropped;
    }

    /// Checks the structure's invariants (tests only), among them the two
    /// windows the layout rests on:
    ///
    /// * **level window**: every reference of an armed bucket of level `L`
    ///   has its deadline in `[now, last_L]`, in that bucket's slot, so ring
    ///   order from the current slot is time order (the bucket queue);
    /// * **near window**: every reference's deadline is in
    ///   `[now, now + NEAR)`, so its check gives it back; references that
    ///   read as live for one slot agree on one deadline, and every pending
    ///   timer has a live reference or a side entry.
    #[cfg(test)]
    pub(crate) fn check_invariants(&self) {
        use std::collections::HashMap;
        let now = self.now;
        let w = self.geometry.wheel_size() as usize;
        // slot → the deadline of the references that read as live for it.
        let mut live: HashMap<u32, u64> = HashMap::new();
        let mut note = |r: &Ref, deadline: u64| {
            assert!(
                deadline >= now && deadline - now < reference::NEAR,
                "reference {r:?} deadline {deadline} outside the near window of {now}"
            );
            if self.arena.is_live(r.idx, r.check) {
                let seen = *live.entry(r.idx).or_insert(deadline);
                assert_eq!(seen, deadline, "live references to slot {} disagree", r.idx);
            }
        };
        let mut refs = self.ready.len() + self.run.len();
        for r in &self.ready {
            note(r, now);
            assert_eq!(r.deadline(now), now, "ready reference {r:?} not due now");
        }
        let run: Vec<u64> = self.run.iter().map(|r| r.deadline(now)).collect();
        assert!(
            run.windows(2).all(|p| p[0] >= p[1]),
            "run sorted latest first"
        );
        for (r, &d) in self.run.iter().zip(&run) {
            note(r, d);
            assert!(
                d >= now && d <= self.levels[0].last,
                "run {d} past level 0 (now {now}, last {})",
                self.levels[0].last
            );
        }
        for (bucket, list) in self.buckets.iter().enumerate() {
            let key = self.queue.key(bucket as u32);
            assert_eq!(
                key.is_some(),
                !list.is_empty(),
                "bucket {bucket} armed iff non-empty"
            );
            let (level, slot) = (bucket / w, (bucket % w) as u64);
            let l = self.levels[level];
            for r in self.pool.refs(list) {
                let d = r.deadline(now);
                note(&r, d);
                assert!(
                    d <= l.last,
                    "deadline {d} past level {level}'s window (last {})",
                    l.last
                );
                assert_eq!(
                    self.geometry.slot(level as u32, l.tick, d),
                    slot,
                    "deadline {d} in bucket {bucket}, not its slot"
                );
            }
            if let Some(key) = key {
                let min = self.pool.refs(list).map(|r| r.deadline(now)).min().unwrap();
                assert!(key <= min, "bucket {bucket} key {key} > earliest {min}");
                assert!(
                    key >= now,
                    "armed bucket {bucket} key {key} before now {now}"
                );
                let holder = self.holders[bucket];
                if self.arena.is_live(holder.idx, holder.check) {
                    assert_eq!(holder.deadline(now), key, "a live holder sets the key");
                }
            }
            refs += list.len();
        }
        // A head said to be settled is: what the next poll or the driver's
        // plan looks at first is live, but for a large coarse bucket, which
        // keeps its early key until it is flushed.
        for list in [&self.ready, &self.run]
            .into_iter()
            .filter(|_| self.settled)
        {
            if let Some(r) = list.last() {
                assert!(self.arena.is_live(r.idx, r.check), "dead {r:?} on top");
            }
        }
        if let Some((_, bucket)) = self.queue.peek().filter(|_| self.settled) {
            let holder = self.holders[bucket as usize];
            assert!(
                self.arena.is_live(holder.idx, holder.check)
                    || (bucket as usize >= w && self.buckets[bucket as usize].len() > RESCAN_LIMIT),
                "the head bucket {bucket}'s holder {holder:?} is dead"
            );
        }
        self.queue.check();
        self.pool.check(&self.buckets);
        let carries = |idx: u32, check: u32| self.arena.is_live(idx, check);
        self.side.check(carries);
        let side = self.side.live(carries);
        for e in &side {
            assert!(
                !live.contains_key(&e.idx),
                "slot {} both in a bucket and the side heap",
                e.idx
            );
        }
        let mut side_slots: Vec<u32> = side.iter().map(|e| e.idx).collect();
        side_slots.sort_unstable();
        side_slots.dedup();
        assert_eq!(
            live.len() + side_slots.len(),
            self.arena.len(),
            "every pending timer has a live reference or a side entry"
        );
        assert_eq!(self.side.len(), side_slots.len(), "side timers");
        assert_eq!(
            refs,
            self.arena.len() - self.side.len() + self.garbage,
            "references = near timers + garbage"
        );
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
    fn an_emptied_wheel_gives_its_pool_back() {
        let mut w = Wheel::new(64, 0);
        let n = 2 * pool::KEEP_REFS as u64;
        for i in 0..n {
            w.insert(1 + i % 5_000, i);
        }
        assert!(w.pool.stored() >= n as usize);
        assert_eq!(std::iter::from_fn(|| w.poll(5_000)).count(), n as usize);
        assert_eq!(w.pool.stored(), 0, "the pool kept its references' memory");
        w.check_invariants();
        w.insert(6_000, 7);
        assert_eq!(w.poll(6_000).map(|f| f.value), Some(7));
        w.check_invariants();
    }

    /// A wheel of 64 slots per level that defers its frees if `defers`.
    fn deferring(defers: bool) -> Wheel<u64> {
        let mut w = Wheel::new(64, 0);
        if defers {
            w.defer_frees();
        }
        w
    }

    #[test]
    fn a_deferring_wheel_keeps_what_its_polls_give_back_for_its_owner() {
        for defers in [false, true] {
            let mut w = deferring(defers);
            let far = w.insert(10_000_000, u64::MAX);
            let n = 20 * pool::KEEP_REFS as u64;
            for i in 0..n {
                w.insert(1 + i % 100_000, i);
            }
            // A burst fired while a timer waits: the pool is rebuilt.
            assert_eq!(std::iter::from_fn(|| w.poll(100_000)).count(), n as usize);
            let rebuilt = w.take_freed();
            assert_eq!(rebuilt.is_some(), defers, "defers {defers}");
            if let Some(freed) = rebuilt {
                assert!(freed.pool.is_some() && freed.slots.is_none());
            }
            // The last timer fired: the arena and the pool give their memory back.
            assert_eq!(w.poll(10_000_000).map(|f| f.key), Some(far));
            assert!(w.poll(10_000_000).is_none());
            assert_eq!(w.arena.slots(), 0);
            let emptied = w.take_freed();
            assert_eq!(emptied.is_some(), defers, "defers {defers}");
            if let Some(freed) = emptied {
                assert!(
                    freed.slots.is_some(),
                    "the arena's slots wait for the owner"
                );
            }
            assert!(w.take_freed().is_none(), "taken once");
            w.check_invariants();
            w.insert(10_000_001, 7);
            assert_eq!(w.poll(10_000_001).map(|f| f.value), Some(7));
        }
    }

    #[test]
    fn a_deferring_wheel_keeps_what_removing_its_last_timer_gives_back() {
        for defers in [false, true] {
            let mut w = deferring(defers);
            // Twice the store an empty wheel keeps: both the arena and the
            // pool have memory to give back.
            let n = 2 * pool::KEEP_REFS as u64;
            let keys: Vec<_> = (0..n).map(|i| w.insert(1 + i % 5_000, i)).collect();
            for (i, key) in keys.into_iter().enumerate() {
                assert_eq!(w.remove(key), Some(i as u64));
            }
            assert_eq!(w.len(), 0);
            assert_eq!(w.arena.slots(), 0, "the emptied arena was released");
            let emptied = w.take_freed();
            assert_eq!(emptied.is_some(), defers, "defers {defers}");
            if let Some(freed) = emptied {
                assert!(
                    freed.slots.is_some() && freed.pool.is_some(),
                    "the arena's slots and the pool's store wait for the owner"
                );
            }
            w.check_invariants();
            w.insert(3, 7);
            assert_eq!(w.poll(3).map(|f| f.value), Some(7));
        }
    }

    #[test]
    fn a_deferring_wheel_keeps_what_draining_it_gives_back() {
        for defers in [false, true] {
            let mut w = deferring(defers);
            let n = 2 * pool::KEEP_REFS as u64;
            for i in 0..n {
                w.insert(1 + i % 5_000, i);
            }
            w.insert(10_000_000, n);
            assert_eq!(w.drain().len(), n as usize + 1);
            assert_eq!(w.len(), 0);
            let drained = w.take_freed();
            assert_eq!(drained.is_some(), defers, "defers {defers}");
            if let Some(freed) = drained {
                assert!(freed.pool.is_some(), "the pool's store waits for the owner");
            }
            w.check_invariants();
            w.insert(3, 7);
            assert_eq!(w.poll(3).map(|f| f.value), Some(7));
        }
    }

    #[test]
    fn what_the_last_fired_timer_and_the_empty_poll_give_back_is_kept_together() {
        let mut w = Wheel::new(64, 0);
        w.defer_frees();
        let n = 4 * pool::KEEP_REFS as u64;
        let keys: Vec<_> = (0..n)
            .map(|i| (w.insert(1 + i % 50, i), 1 + i % 50))
            .collect();
        // Timers cancelled after the last live one leave garbage behind it:
        // the last one to fire then drops every reference itself, and the
        // poll after it releases the arena.
        for &(k, deadline) in &keys {
            if deadline > 25 {
                assert!(w.remove(k).is_some());
            }
        }
        let live = keys.iter().filter(|&&(_, deadline)| deadline <= 25).count();
        assert_eq!(std::iter::from_fn(|| w.poll(25)).count(), live);
        let freed = w.take_freed().expect("kept for the owner");
        assert!(
            freed.pool.is_some(),
            "the pool's store was freed in the poll"
        );
        assert!(
            freed.slots.is_some(),
            "the arena's slots were freed in the poll"
        );
        assert!(w.take_freed().is_none());
        w.check_invariants();
    }

    #[test]
    fn a_fired_burst_gives_the_pool_back_while_a_timer_waits() {
        let mut w = Wheel::new(64, 0);
        let far = w.insert(10_000_000, u64::MAX);
        let n = 20 * pool::KEEP_REFS as u64;
        for i in 0..n {
            w.insert(1 + i % 100_000, i);
        }
        let peak = w.pool.stored();
        assert!(peak >= n as usize);
        let fired = std::iter::from_fn(|| w.poll(100_000)).count();
        assert_eq!(fired, n as usize);
        w.check_invariants();
        assert!(
            w.pool.stored() <= 16 * w.len() + pool::KEEP_REFS,
            "the pool kept {} references' room for {} pending (peak {peak})",
            w.pool.stored(),
            w.len()
        );
        // What waits still fires, once, on time.
        assert_eq!(w.poll(9_999_999).map(|f| f.value), None);
        let last = w.poll(10_000_000).expect("the far timer fires");
        assert_eq!((last.key, last.value), (far, u64::MAX));
        assert!(w.poll(u64::MAX - 1).is_none());
    }

    #[test]
    fn compaction_bounds_garbage_when_every_timer_shares_one_deadline() {
        // The clock never moves and every timer has one deadline: each slot
        // freed is reused at once, at the same deadline, so its stale
        // references read as live. Compaction must still drop them.
        let mut w = Wheel::new(64, 0);
        let mut keys: std::collections::VecDeque<_> =
            (0..40_000u64).map(|i| w.insert(100, i)).collect();
        for i in 0..50_000u64 {
            keys.push_back(w.insert(100, i));
            let k = keys.pop_front().expect("pending");
            assert!(w.remove(k).is_some());
            assert!(
                w.garbage <= w.len() + GARBAGE_SLACK + 1,
                "garbage {} beside {} pending after {i} pairs",
                w.garbage,
                w.len()
            );
        }
        // Each compaction drops at least the slack's worth of garbage.
        assert!(
            w.compactions <= 50_000 / GARBAGE_SLACK + 1,
            "{} compactions for 50,000 cancels",
            w.compactions
        );
        w.check_invariants();
        let fired: Vec<u64> = std::iter::from_fn(|| w.poll(100))
            .map(|f| f.value)
            .collect();
        assert_eq!(fired.len(), 40_000, "each pending timer fires once");
        assert_eq!(w.len(), 0);
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
        let refs: usize = w.buckets.iter().map(Bucket::len).sum();
        assert!(refs <= 1 + GARBAGE_SLACK + 1, "{refs} references kept");
    }

    #[test]
    fn a_finest_bucket_emptied_from_its_end_and_refilled_keeps_its_timers() {
        let mut w = Wheel::new(64, 0);
        // 600 references in bucket 10: blocks of 4, 8, …, 512.
        let keys: Vec<TimerKey> = (0..600).map(|i| w.insert(10, i)).collect();
        assert_eq!(w.buckets[10].len(), 600);
        // Cancelling from the end pops the dead references (the bucket is
        // the head and its key holder dies each time) across every block.
        for &k in keys[1..].iter().rev() {
            assert!(w.remove(k).is_some());
        }
        w.check_invariants();
        assert_eq!((w.buckets[10].len(), w.buckets[10].blocks()), (1, 1));
        assert_eq!(w.garbage, 0, "every dead reference was popped");
        // Refilled, it takes blocks from the pool again.
        for i in 600..1_200 {
            w.insert(10, i);
        }
        w.check_invariants();
        assert!(drain_due(&mut w, 9).is_empty());
        let mut fired: Vec<u64> = drain_due(&mut w, 10).into_iter().map(|f| f.1).collect();
        fired.sort_unstable();
        let want: Vec<u64> = std::iter::once(0).chain(600..1_200).collect();
        assert_eq!(fired, want);
        w.check_invariants();
    }

    #[test]
    fn compaction_of_garbage_across_blocks_keeps_exactly_the_live_timers() {
        let mut w = Wheel::new(64, 0);
        // All in level 2, slot 1 (ticks 4096..8192): one bucket of 6,000.
        let keys: Vec<(TimerKey, u64)> = (0..6_000u64)
            .map(|i| {
                let d = 4_096 + (i * 7_919) % 4_096;
                (w.insert(d, i), d)
            })
            .collect();
        let bucket = w.bucket_for(4_096) as usize;
        assert_eq!(w.buckets[bucket].len(), 6_000);
        // Two of every three cancelled: garbage in every block, and enough
        // to compact (garbage > live + slack) before the end.
        let mut live = Vec::new();
        for (i, &(k, d)) in keys.iter().enumerate() {
            if i % 3 == 0 {
                live.push((d, i as u64));
            } else {
                assert_eq!(w.remove(k), Some(i as u64));
            }
        }
        w.check_invariants();
        assert!(
            w.buckets[bucket].len() < 6_000 - GARBAGE_SLACK,
            "compacted: {} references left",
            w.buckets[bucket].len()
        );
        live.sort_unstable();
        let mut now = 0;
        let mut fired = Vec::new();
        while w.len() > 0 {
            now += 37;
            for (d, v) in drain_due(&mut w, now) {
                assert!(d <= now && d > now - 37, "{d} fired at {now}");
                fired.push((d, v));
            }
            w.check_invariants();
        }
        fired.sort_unstable();
        assert_eq!(fired, live);
    }

    #[test]
    fn cascades_reuse_the_pool_instead_of_growing_it() {
        let mut w = Wheel::new(64, 0);
        // Keeps the wheel from ever emptying (which clears the pool).
        w.insert(1 << 30, u64::MAX);
        let mut high = Vec::new();
        for round in 0..4u64 {
            let start = round * 1_000_000;
            for i in 0..20_000u64 {
                w.insert(start + 1 + (i * 7_919) % 600_000, i);
            }
            let mut now = start;
            let mut fired = 0;
            while fired < 20_000 {
                now += 997;
                fired += drain_due(&mut w, now).len();
            }
            w.check_invariants();
            high.push(w.pool.stored());
        }
        // Each round fills and cascades 20,000 references through the
        // levels. The first round starts at a level boundary and the others
        // do not, so they spread over more buckets; from then on the blocks
        // freed serve the next round, and the pool holds still (it would grow
        // by 20,000 a round if freed blocks were lost).
        assert!(high[0] < 2 * 20_000, "pool high-water marks {high:?}");
        assert!(
            high[2..].iter().all(|&h| h <= high[1] + high[1] / 8),
            "pool high-water marks {high:?}"
        );
    }

    /// Random schedules, cancels, reschedules and polls, checked against a
    /// map of pending deadlines: each timer fires once, at its deadline,
    /// never before; the invariants hold after every step. Start times and
    /// jumps cross the near window's wrap (multiples of 2^31) and the end of
    /// time; some deadlines are far (side heap) or overdue.
    fn random_operations(wheel_size: u64, start: u64, steps: u64, seed: u64) {
        use std::collections::HashMap;
        let near = reference::NEAR;
        let mut seed = seed;
        let mut rand = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut w = Wheel::new(wheel_size, start);
        let mut pending: HashMap<u64, (TimerKey, u64)> = HashMap::new();
        let mut keys: Vec<(u64, TimerKey)> = Vec::new();
        let mut now = start;
        let deadline = |now: u64, r: u64| -> u64 {
            let ahead = match r % 16 {
                0 => near - 3 + r / 16 % 6, // either side of the window's edge
                1 => near + r / 16 % (4 * near),
                2 => return (r / 16) % (now.saturating_add(1)), // overdue
                3 => u64::MAX,
                _ => r / 16 % 5000,
            };
            now.saturating_add(ahead)
        };
        for id in 0..steps {
            match rand() % 8 {
                0..=2 => {
                    let d = deadline(now, rand());
                    let k = w.insert(d, id);
                    pending.insert(id, (k, d.max(now.min(d))));
                    keys.push((id, k));
                }
                3 | 4 if !keys.is_empty() => {
                    let (id, k) = keys.swap_remove((rand() % keys.len() as u64) as usize);
                    let want = pending.remove(&id).map(|_| id);
                    assert_eq!(w.remove(k), want, "cancel of {id}");
                    assert!(want.is_none() || w.settled, "a removal settles the head");
                }
                5 if !keys.is_empty() => {
                    let (id, k) = keys[(rand() % keys.len() as u64) as usize];
                    let d = deadline(now, rand());
                    let moved = w.reschedule(k, d);
                    assert_eq!(moved, pending.contains_key(&id), "reschedule of {id}");
                    if moved {
                        pending.insert(id, (k, d));
                    }
                }
                6 | 7 => {
                    now = match rand() % 64 {
                        0 => now.saturating_add(rand() % near),
                        1 => now.saturating_add(near + rand() % near),
                        _ => now.saturating_add(rand() % 40),
                    }
                    .min(NEVER - 1);
                    let take = if rand() % 2 == 0 { usize::MAX } else { 3 };
                    let mut last = 0;
                    for f in std::iter::from_fn(|| w.poll(now)).take(take) {
                        let (key, d) = pending.remove(&f.value).expect("fired once");
                        assert_eq!((f.key, f.deadline), (key, d), "timer {}", f.value);
                        assert!(f.deadline <= now, "early: {} at {now}", f.deadline);
                        assert!(f.deadline >= last, "out of deadline order");
                        last = f.deadline;
                    }
                    if take == usize::MAX {
                        assert!(
                            pending.values().all(|&(_, d)| d > now),
                            "a due timer is left at {now}"
                        );
                    }
                    if let Some(next) = w.next_expiration() {
                        let min = pending.values().map(|p| p.1).min();
                        assert!(min.is_some_and(|m| next <= m.max(w.now())), "next {next}");
                    }
                }
                _ => {}
            }
            assert_eq!(w.len(), pending.len());
            w.check_invariants();
        }
        let mut left = w.drain();
        left.sort_unstable();
        let mut want: Vec<u64> = pending.into_keys().collect();
        want.sort_unstable();
        assert_eq!(left, want);
    }

    #[test]
    fn random_operations_keep_the_invariants() {
        let starts = [
            0,
            reference::NEAR - 3_000,
            (1 << 32) - 2_000,
            (7 << 40) + 123,
            NEVER - 5 * reference::NEAR,
        ];
        for (i, wheel_size) in [2u64, 3, 8, 64, 100, 4096].into_iter().enumerate() {
            let steps = if wheel_size > 256 { 4_000 } else { 12_000 };
            for (j, &start) in starts.iter().enumerate() {
                let seed = 0x2545_f491_4f6c_dd1d ^ ((i * 8 + j) as u64) << 32;
                random_operations(wheel_size, start, steps / 2, seed);
            }
        }
    }

    /// A small wheel that goes from one timer to none and back keeps its
    /// buckets' blocks and arena, whether the timer was cancelled or fired.
    #[test]
    fn a_small_wheel_that_empties_keeps_its_store() {
        let mut w = Wheel::new(64, 0);
        for round in 0..3u64 {
            for delay in [3, 100, 5_000, 300_000] {
                let k = w.insert(w.now() + delay, delay);
                let stored = w.pool.stored();
                assert!(stored > 0);
                assert_eq!(w.remove(k), Some(delay), "round {round}");
                assert_eq!(w.pool.stored(), stored, "the buckets keep their blocks");
                assert_eq!((w.garbage, w.queue.peek()), (0, None));
                assert_eq!(w.next_expiration(), None);
                w.check_invariants();
            }
            let at = w.now() + 70;
            w.insert(at, 7);
            let stored = w.pool.stored();
            assert_eq!(drain_due(&mut w, at), vec![(at, 7)]);
            assert!(w.poll(at).is_none());
            assert_eq!(w.pool.stored(), stored);
            assert_eq!(w.next_expiration(), None);
            w.check_invariants();
            // The last timer fires with a cancelled one's reference left.
            let at = w.now() + 70;
            w.insert(at, 8);
            let gone = w.insert(at + 5_000, 9);
            let stored = w.pool.stored();
            assert_eq!(w.remove(gone), Some(9));
            assert_eq!(w.garbage, 1, "its reference waits");
            assert_eq!(w.poll(at).map(|f| f.value), Some(8));
            assert_eq!((w.garbage, w.queue.peek()), (0, None));
            assert!(w.poll(at).is_none());
            assert_eq!(w.pool.stored(), stored, "the buckets keep their blocks");
            w.check_invariants();
        }
        assert!(w.arena.slots() > 0, "the arena kept its slot");
    }

    /// A removal skips settling the head only when the head is settled and
    /// the timer is not on top: the next timer out of the ready list is.
    #[test]
    fn removing_the_next_ready_timer_settles_the_head() {
        let mut w = Wheel::new(64, 0);
        let keys: Vec<_> = (0..4).map(|i| w.insert(5, i)).collect();
        w.insert(40, 9);
        let later = w.insert(50, 10);
        assert!(w.poll(5).is_some());
        assert!(
            !w.settled,
            "a poll that handed a timer out may leave it unsettled"
        );
        assert_eq!(w.ready.len(), 3);
        // Neither on top nor the head's holder: settled all the same, since
        // the poll left the head unsettled.
        w.remove(later);
        assert!(w.settled);
        let next = w.ready.last().copied().expect("three still ready");
        let key = keys
            .into_iter()
            .find(|k| k.idx == next.idx)
            .expect("one of them");
        w.remove(key);
        w.check_invariants();
        assert_eq!(std::iter::from_fn(|| w.poll(5)).count(), 2);
        assert_eq!(w.next_expiration(), Some(40));
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
        assert_eq!(w.levels(), 1, "far timers wait in the side heap");
        assert_eq!(w.side.len(), 2);
        assert_eq!(drain_due(&mut w, NEVER - 2), vec![]);
        assert_eq!(drain_due(&mut w, NEVER - 1), vec![(NEVER - 1, 2)]);
        assert_eq!(w.next_expiration(), None);
        assert_eq!(w.len(), 1);
        assert_eq!(w.drain(), vec![1]);
    }

    #[test]
    fn references_near_the_end_of_time_recover_their_deadlines() {
        for wheel_size in [2u64, 64] {
            let start = NEVER - 3 * (reference::NEAR / 4);
            let mut w = Wheel::new(wheel_size, start);
            let deadlines = [NEVER, NEVER - 1, NEVER - 2, start + 1, NEVER - 70_000];
            for &d in &deadlines {
                w.insert(d, d);
            }
            assert_eq!(w.side.len(), 0, "all within the near window");
            w.check_invariants();
            let out: Vec<u64> = drain_due(&mut w, NEVER - 1)
                .into_iter()
                .map(|(d, v)| {
                    assert_eq!(d, v);
                    d
                })
                .collect();
            assert_eq!(out, [start + 1, NEVER - 70_000, NEVER - 2, NEVER - 1]);
            assert_eq!(w.next_expiration(), None, "NEVER asks for no wake-up");
            assert_eq!(w.len(), 1);
            w.check_invariants();
        }
    }

    #[test]
    fn far_timers_fire_in_deadline_order_with_the_buckets() {
        let near = reference::NEAR;
        let mut w = Wheel::new(64, 5);
        let a = w.insert(5 + near, 1); // just outside the window: side
        let b = w.insert(4 + near, 2); // just inside: a reference
        let c = w.insert(3 * near, 3);
        let d = w.insert(10, 4);
        let e = w.insert(7 * near, 5);
        assert_eq!(w.side.len(), 3);
        w.check_invariants();
        assert_eq!(w.remove(c), Some(3), "cancel of a far timer");
        assert!(w.reschedule(d, 2 * near), "near to far");
        assert!(w.reschedule(e, 100), "far to near");
        assert!(w.reschedule(a, 5 + near), "far to the same far deadline");
        w.check_invariants();
        assert_eq!(w.next_expiration(), Some(100));
        let out = drain_due(&mut w, 2 * near);
        assert_eq!(out, [(100, 5), (4 + near, 2), (5 + near, 1), (2 * near, 4)]);
        assert_eq!(w.remove(b), None);
        assert_eq!(w.len(), 0);
        w.check_invariants();
    }

    #[test]
    fn a_stale_reference_that_reads_live_fires_its_timer_on_time_once() {
        let mut w = Wheel::new(8, 0);
        // Moved away and back: the first reference reads as live again.
        let k = w.insert(50, 1);
        assert!(w.reschedule(k, 3_000));
        assert!(w.reschedule(k, 50));
        // Cancelled, and the slot reused by a timer due in the same tick.
        let gone = w.insert(70, 2);
        assert_eq!(w.remove(gone), Some(2));
        let reused = w.insert(70, 3);
        assert_eq!(reused.idx, gone.idx, "the slot was reused");
        w.check_invariants();
        assert!(drain_due(&mut w, 49).is_empty());
        assert_eq!(drain_due(&mut w, 69), vec![(50, 1)]);
        assert_eq!(drain_due(&mut w, 3_000), vec![(70, 3)]);
        assert_eq!(w.len(), 0);
        assert_eq!(w.garbage, 0, "every stale reference was met");
        w.check_invariants();
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
