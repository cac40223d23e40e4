//! The bucket queue: armed buckets ordered by when they are due.
//!
//! A bucket's key is the earliest deadline (in ticks) it holds, not the start
//! of its range: a lone timer in a coarse bucket is then due exactly when the
//! timer is, and fires on the driver's first wake-up instead of cascading
//! through every finer level on the way down.
//!
//! ## No heap: one bitmap per level
//!
//! Every armed bucket of level `L` holds deadlines in the level's current
//! window `[start_L, last_L]` (see [`level`](super::level)): a deadline is
//! filed there only if it is at most `last_L`, which never shrinks, and a
//! bucket is flushed once the wheel's time reaches its key, so what stays
//! armed is at or after the wheel's time. The window is exactly `W` slot
//! widths starting at the slot that holds the wheel's time, so within a
//! level, **ring order from that slot is time order**, and the ranges of
//! two slots never overlap. The earliest bucket of a level is therefore the
//! first armed slot at or after the current one, found in a bitmap with a
//! mask and a trailing-zero count, and the earliest bucket of all is the
//! least of one candidate per level (a handful of levels).
//!
//! Arming, lowering a key and withdrawing a bucket that is not the earliest
//! are O(1). The earliest `(key, bucket)` is kept, and searched for again
//! only when it is popped, withdrawn or re-keyed later: one search per flush,
//! never per timer. Kafka keeps its buckets in a `DelayQueue` (a heap); so
//! did this queue, and a heap push and pop per bucket was a third of the
//! instructions of a wheel that expires one timer per tick.
//!
//! Ties are broken by bucket id (finer level first), so the order is
//! deterministic.

use super::level::Geometry;

/// Bits in a bitmap word.
const WORD: usize = u64::BITS as usize;

/// Armed buckets by key: one bitmap over all bucket ids.
#[derive(Debug)]
pub(crate) struct BucketQueue {
    /// Slot count and arithmetic.
    geometry: Geometry,
    /// Per level, its tick in base ticks.
    ticks: Vec<u64>,
    /// Per bucket id (`level × W + slot`), its key while armed.
    keys: Vec<u64>,
    /// Bit `b` set iff bucket `b` is armed. Level `L` is bits
    /// `[L·W, (L+1)·W)`: with the default `W = 64`, one word.
    armed: Vec<u64>,
    /// Bit `i` set iff word `i` of `armed` is not zero: lets a wide level
    /// (`W` up to 65,536) skip empty words 64 at a time.
    summary: Vec<u64>,
    /// The wheel's time: each level's search starts at the slot holding it.
    now: u64,
    /// The earliest armed `(key, bucket)`, if any.
    head: Option<(u64, u32)>,
    /// Number of armed buckets.
    len: usize,
}

impl BucketQueue {
    /// An empty queue for a wheel of `geometry`, with no level yet, whose
    /// time is `now`.
    pub(crate) fn new(geometry: Geometry, now: u64) -> Self {
        BucketQueue {
            geometry,
            ticks: Vec::new(),
            keys: Vec::new(),
            armed: Vec::new(),
            summary: Vec::new(),
            now,
            head: None,
            len: 0,
        }
    }

    /// Makes room for the buckets of one more level, whose tick is `tick`.
    pub(crate) fn add_level(&mut self, tick: u64) {
        self.ticks.push(tick);
        let buckets = self.keys.len() + self.geometry.wheel_size() as usize;
        self.keys.resize(buckets, 0);
        let words = buckets.div_ceil(WORD);
        self.armed.resize(words, 0);
        self.summary.resize(words.div_ceil(WORD), 0);
    }

    /// Moves the queue's time forward to the wheel's; every armed key must
    /// be at or after `now` by then (the wheel flushes a bucket when its
    /// key comes).
    #[inline]
    pub(crate) fn set_now(&mut self, now: u64) {
        self.now = now;
    }

    /// Number of armed buckets.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether `bucket` is armed.
    #[inline]
    fn is_armed(&self, bucket: u32) -> bool {
        let b = bucket as usize;
        self.armed[b / WORD] & (1 << (b % WORD)) != 0
    }

    /// The key of `bucket`, if armed.
    #[cfg(test)]
    pub(crate) fn key(&self, bucket: u32) -> Option<u64> {
        self.is_armed(bucket).then(|| self.keys[bucket as usize])
    }

    /// Arms `bucket` at `key`, or lowers its key to `key` if that is earlier.
    /// Returns whether the bucket's key is now `key` (armed, lowered, or
    /// already equal).
    #[inline]
    pub(crate) fn arm(&mut self, bucket: u32, key: u64) -> bool {
        let b = bucket as usize;
        let bit = 1 << (b % WORD);
        let word = &mut self.armed[b / WORD];
        if *word & bit == 0 {
            if *word == 0 {
                self.summary[b / WORD / WORD] |= 1 << ((b / WORD) % WORD);
            }
            *word |= bit;
            self.len += 1;
        } else {
            let current = self.keys[b];
            if key >= current {
                return key == current;
            }
        }
        self.keys[b] = key;
        if self.head.is_none_or(|head| (key, bucket) < head) {
            self.head = Some((key, bucket));
        }
        true
    }

    /// Sets the key of an armed `bucket`, earlier or later.
    pub(crate) fn rekey(&mut self, bucket: u32, key: u64) {
        debug_assert!(self.is_armed(bucket), "rekey of unarmed bucket {bucket}");
        self.keys[bucket as usize] = key;
        match self.head {
            Some((_, head)) if head == bucket => self.find_head(),
            Some(head) if (key, bucket) >= head => {}
            _ => self.head = Some((key, bucket)),
        }
    }

    /// Withdraws `bucket`; returns its key if it was armed.
    pub(crate) fn disarm(&mut self, bucket: u32) -> Option<u64> {
        let b = bucket as usize;
        let bit = 1 << (b % WORD);
        let word = &mut self.armed[b / WORD];
        if *word & bit == 0 {
            return None;
        }
        *word &= !bit;
        if *word == 0 {
            self.summary[b / WORD / WORD] &= !(1 << ((b / WORD) % WORD));
        }
        self.len -= 1;
        if self.head.is_some_and(|(_, head)| head == bucket) {
            self.find_head();
        }
        Some(self.keys[b])
    }

    /// The earliest `(key, bucket)`.
    #[inline]
    pub(crate) fn peek(&self) -> Option<(u64, u32)> {
        self.head
    }

    /// Removes and returns the earliest `(key, bucket)`.
    pub(crate) fn pop(&mut self) -> Option<(u64, u32)> {
        let head = self.head?;
        self.disarm(head.1);
        Some(head)
    }

    /// The armed buckets, in id order (finest level first).
    pub(crate) fn buckets(&self) -> impl Iterator<Item = u32> + '_ {
        self.armed
            .iter()
            .enumerate()
            .flat_map(|(at, &word)| Bits(word).map(move |bit| (at * WORD + bit) as u32))
    }

    /// Disarms every bucket.
    pub(crate) fn clear(&mut self) {
        self.armed.fill(0);
        self.summary.fill(0);
        self.head = None;
        self.len = 0;
    }

    /// Finds the earliest armed bucket again: per level, the first armed
    /// slot in ring order from the slot holding the queue's time; then the
    /// least `(key, bucket)` of those.
    fn find_head(&mut self) {
        let w = self.geometry.wheel_size() as usize;
        let mut head: Option<(u64, u32)> = None;
        let keys = &self.keys;
        let mut consider = |bucket: usize| {
            let candidate = (keys[bucket], bucket as u32);
            if head.is_none_or(|h| candidate < h) {
                head = Some(candidate);
            }
        };
        if w == WORD {
            // The default shape: level `L` is word `L`.
            // Level `L`'s tick is 2^(6L), so its current slot is 6 bits of
            // the time; at most 11 levels, so the shift stays below 64.
            let levels = self.ticks.len();
            for (level, &word) in self.armed[..levels].iter().enumerate() {
                if word != 0 {
                    let start = (self.now >> (6 * level)) % WORD as u64;
                    let ahead = word & (!0u64 << start);
                    let slot = if ahead != 0 { ahead } else { word }.trailing_zeros() as usize;
                    consider(level * WORD + slot);
                }
            }
        } else {
            for (level, &tick) in self.ticks.iter().enumerate() {
                let first = level * w;
                let end = first + w;
                let from = first + self.geometry.slot(level as u32, tick, self.now) as usize;
                let found = first_set(&self.armed, &self.summary, from, end)
                    .or_else(|| first_set(&self.armed, &self.summary, first, from));
                if let Some(bucket) = found {
                    consider(bucket);
                }
            }
        }
        self.head = head;
    }

    /// Checks the queue against its bitmaps (tests only): the head is the
    /// least armed `(key, bucket)`, and the summary matches the words.
    #[cfg(test)]
    pub(crate) fn check(&self) {
        let least = self.buckets().map(|b| (self.keys[b as usize], b)).min();
        assert_eq!(self.head, least, "head is the least armed bucket");
        assert_eq!(self.buckets().count(), self.len, "armed count");
        for (index, &word) in self.armed.iter().enumerate() {
            let flagged = self.summary[index / WORD] & (1 << (index % WORD)) != 0;
            assert_eq!(word != 0, flagged, "summary of word {index}");
        }
    }
}

/// The first set bit of `bits` in `[from, end)`, if any; `summary` flags
/// the non-zero words of `bits`.
#[inline]
fn first_set(bits: &[u64], summary: &[u64], from: usize, end: usize) -> Option<usize> {
    if from >= end {
        return None;
    }
    let last = (end - 1) / WORD;
    let mut at = from / WORD;
    let mut word = bits[at] & (!0u64 << (from % WORD));
    loop {
        if at == last {
            // Keep the bits below `end` only.
            let keep = end - last * WORD;
            if keep < WORD {
                word &= (1u64 << keep) - 1;
            }
            return (word != 0).then(|| at * WORD + word.trailing_zeros() as usize);
        }
        if word != 0 {
            return Some(at * WORD + word.trailing_zeros() as usize);
        }
        // The next non-zero word after `at`, from the summary; past `last`
        // (or none) means nothing is set in range.
        at = first_flagged(summary, at + 1).filter(|&next| next <= last)?;
        word = bits[at];
    }
}

/// The first set bit of `summary` at or after `from`.
#[inline]
fn first_flagged(summary: &[u64], from: usize) -> Option<usize> {
    let mut at = from / WORD;
    let mut word = summary.get(at)? & (!0u64 << (from % WORD));
    loop {
        if word != 0 {
            return Some(at * WORD + word.trailing_zeros() as usize);
        }
        at += 1;
        word = *summary.get(at)?;
    }
}

/// The set bits of a word, lowest first.
struct Bits(u64);

impl Iterator for Bits {
    type Item = usize;

    #[inline]
    fn next(&mut self) -> Option<usize> {
        if self.0 == 0 {
            return None;
        }
        let bit = self.0.trailing_zeros() as usize;
        self.0 &= self.0 - 1;
        Some(bit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_set_finds_the_first_bit_in_a_range() {
        for bits in [2usize, 64, 65, 200, 4096, 1 << 16] {
            let words = bits.div_ceil(WORD);
            let mut map = vec![0u64; words];
            let mut summary = vec![0u64; words.div_ceil(WORD)];
            let set = [0, 1, bits / 3, bits / 2 + 1, bits - 1];
            for &b in &set {
                map[b / WORD] |= 1 << (b % WORD);
                summary[b / WORD / WORD] |= 1 << ((b / WORD) % WORD);
            }
            let edges = [
                0,
                1,
                2,
                bits / 3,
                bits / 3 + 1,
                bits / 2,
                bits / 2 + 2,
                bits - 1,
                bits,
            ];
            for from in edges {
                for end in edges {
                    let want = set.iter().copied().filter(|&b| b >= from && b < end).min();
                    assert_eq!(
                        first_set(&map, &summary, from, end),
                        want,
                        "{bits} bits, [{from}, {end})"
                    );
                }
            }
        }
    }
}
