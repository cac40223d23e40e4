//! The invariant check (tests only): the module's invariants, asserted
//! with the values involved, and what else the tests read of a wheel.

use std::collections::HashMap;

use super::head::RESCAN_LIMIT;
use super::reference::{self, Ref};
use super::Wheel;

impl<T> Wheel<T> {
    /// The wheel's time in ticks.
    pub(crate) fn now(&self) -> u64 {
        self.now
    }

    /// Number of levels created so far.
    pub(crate) fn levels(&self) -> usize {
        self.levels.len()
    }

    /// The arena's slots, occupied or vacant.
    #[cfg(not(purgatorio_loom))]
    pub(crate) fn slots(&self) -> usize {
        self.arena.slots()
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
    pub(crate) fn check_invariants(&self) {
        let now = self.now;
        let w = self.levels.wheel_size() as usize;
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
        let run_refs = self.run.refs();
        let mut refs = self.ready.len() + run_refs.len();
        for r in &self.ready {
            note(r, now);
            assert_eq!(r.deadline(now), now, "ready reference {r:?} not due now");
        }
        let run: Vec<u64> = run_refs.iter().map(|r| r.deadline(now)).collect();
        assert!(
            run.windows(2).all(|p| p[0] >= p[1]),
            "run sorted latest first"
        );
        let finest_last = self.levels.finest_last();
        for (r, &d) in run_refs.iter().zip(&run) {
            note(r, d);
            assert!(
                d >= now && d <= finest_last,
                "run {d} past level 0 (now {now}, last {finest_last})",
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
            for r in self.pool.refs(list) {
                let d = r.deadline(now);
                note(&r, d);
                let (last, its_slot) = self.levels.window_and_slot(level, d);
                assert!(
                    d <= last,
                    "deadline {d} past level {level}'s window (last {last})",
                );
                assert_eq!(
                    its_slot, slot,
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
                let holder = self.head.holder(bucket as u32);
                if self.arena.is_live(holder.idx, holder.check) {
                    assert_eq!(holder.deadline(now), key, "a live holder sets the key");
                }
            }
            refs += list.len();
        }
        // A head said to be settled is: what the next poll or the driver's
        // plan looks at first is live, but for a large coarse bucket, which
        // keeps its early key until it is flushed.
        let settled = self.head.is_settled();
        for r in [self.ready.last(), run_refs.last()]
            .into_iter()
            .filter(|_| settled)
            .flatten()
        {
            assert!(self.arena.is_live(r.idx, r.check), "dead {r:?} on top");
        }
        if let Some((_, bucket)) = self.queue.peek().filter(|_| settled) {
            let holder = self.head.holder(bucket);
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
            self.arena.len() - self.side.len() + self.garbage.count(),
            "references = near timers + garbage"
        );
    }
}
