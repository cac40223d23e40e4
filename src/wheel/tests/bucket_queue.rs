//! The bucket queue against an ordered set.

use std::collections::BTreeSet;

use crate::wheel::bucket_queue::BucketQueue;
use crate::wheel::level::Geometry;

/// Arms, re-keys, withdraws and pops buckets of a moving wheel the way
/// the wheel does (every key inside its slot's range of the current
/// window, never before the time) and compares with an ordered set.
fn matches_an_ordered_set(wheel_size: u64) {
    let geometry = Geometry::new(wheel_size);
    let levels = 3u32;
    let mut q = BucketQueue::new(geometry, 0);
    for level in 0..levels {
        q.add_level(geometry.level_tick(level).unwrap());
    }
    let mut model: BTreeSet<(u64, u32)> = BTreeSet::new();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut rand = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut now = 0u64;
    // A key for a random level: after `now`, inside the level's window.
    let key_for = |now: u64, r: u64, level: u32| {
        let tick = geometry.level_tick(level).unwrap();
        let last = geometry.last(tick, now);
        let key = now + 1 + r % (last - now);
        let slot = geometry.slot(level, tick, key);
        (key, level * wheel_size as u32 + slot as u32)
    };
    for _ in 0..20_000 {
        let (k, b) = key_for(now, rand(), (rand() % u64::from(levels)) as u32);
        let current = model.iter().find(|e| e.1 == b).copied();
        match rand() % 5 {
            0 | 1 => {
                let lowered = q.arm(b, k);
                assert_eq!(lowered, current.is_none_or(|c| k <= c.0));
                if current.is_none_or(|c| k < c.0) {
                    if let Some(c) = current {
                        model.remove(&c);
                    }
                    model.insert((k, b));
                }
            }
            2 => {
                assert_eq!(q.disarm(b), current.map(|c| c.0));
                if let Some(c) = current {
                    model.remove(&c);
                }
            }
            3 => {
                if let Some(c) = current {
                    q.rekey(b, k);
                    model.remove(&c);
                    model.insert((k, b));
                }
            }
            _ => {
                let first = model.iter().next().copied();
                assert_eq!(q.pop(), first);
                if let Some(f) = first {
                    model.remove(&f);
                    // The wheel moves its time to a popped key.
                    now = f.0;
                    q.set_now(now);
                }
            }
        }
        q.check();
        assert_eq!(q.peek(), model.iter().next().copied());
        assert_eq!(q.len(), model.len());
        assert_eq!(q.key(b), model.iter().find(|e| e.1 == b).map(|e| e.0));
    }
    q.clear();
    assert_eq!(q.peek(), None);
    assert_eq!(q.buckets().count(), 0);
}

#[test]
fn matches_an_ordered_set_with_one_word_per_level() {
    matches_an_ordered_set(64);
    matches_an_ordered_set(2);
    matches_an_ordered_set(20);
}

#[test]
fn matches_an_ordered_set_with_wide_levels() {
    matches_an_ordered_set(100);
    matches_an_ordered_set(4096);
}
