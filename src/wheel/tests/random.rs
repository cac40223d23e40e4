//! Random operations checked against a map of pending deadlines.

use super::*;

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
                assert!(
                    want.is_none() || w.head.is_settled(),
                    "a removal settles the head"
                );
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

/// Operations per run of [`random_operations`] (one run per wheel size and
/// start): `PURGATORIO_MODEL_CASES` if set, as CI's release step sets it
/// (10,000), else 256, which a debug build runs in a few seconds.
fn steps() -> u64 {
    std::env::var("PURGATORIO_MODEL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

#[test]
fn random_operations_keep_the_invariants() {
    let steps = steps();
    let starts = [
        0,
        reference::NEAR - 3_000,
        (1 << 32) - 2_000,
        (7 << 40) + 123,
        NEVER - 5 * reference::NEAR,
    ];
    for (i, wheel_size) in [2u64, 3, 8, 64, 100, 4096].into_iter().enumerate() {
        // A wide wheel's check walks all its buckets: a third of the steps.
        let steps = if wheel_size > 256 { steps / 3 } else { steps };
        for (j, &start) in starts.iter().enumerate() {
            let seed = 0x2545_f491_4f6c_dd1d ^ ((i * 8 + j) as u64) << 32;
            random_operations(wheel_size, start, steps, seed);
        }
    }
}
