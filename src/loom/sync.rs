//! Models of the shards' biased lock (`sync::biased`): its owner's fast
//! path against a visit, a thread that shares the lock, and the bias taken
//! back, and a batch of visits sharing one barrier. loom's cell reports any
//! two guards reaching the value at once.

use std::sync::Arc;

use super::model;
use crate::sync::{BiasedMutex, VisitBatch};

/// Runs `f` with `lock` on a new model thread.
fn on_thread(
    lock: &Arc<BiasedMutex<u64>>,
    f: impl FnOnce(&BiasedMutex<u64>) + Send + 'static,
) -> loom::thread::JoinHandle<()> {
    let lock = Arc::clone(lock);
    loom::thread::spawn(move || f(&lock))
}

/// The owner's part of a model: adds one `adds` times from the calling
/// thread while `others` run, joins them, and checks the value is
/// `expected`.
fn owner_adds_and_joins<const N: usize>(
    lock: &BiasedMutex<u64>,
    adds: usize,
    others: [loom::thread::JoinHandle<()>; N],
    expected: u64,
) {
    for _ in 0..adds {
        add_at_home(lock);
    }
    for other in others {
        other.join().unwrap();
    }
    assert_eq!(*lock.lock(), expected);
}

/// Adds one to the value under `lock`'s owner path (the calling thread's
/// home), in two steps, so a second holder between them would be seen.
fn add_at_home(lock: &BiasedMutex<u64>) {
    let mut guard = lock.lock_home();
    let read = *guard;
    loom::thread::yield_now();
    *guard = read + 1;
}

#[test]
fn the_owner_and_a_visit_never_hold_the_lock_together() {
    model("the_owner_and_a_visit_never_hold_the_lock_together", || {
        let lock = Arc::new(BiasedMutex::new(0u64));
        add_at_home(&lock); // claims it
        let visitor = on_thread(&lock, |lock| {
            let mut guard = lock.visit();
            *guard += 10;
        });
        owner_adds_and_joins(&lock, 2, [visitor], 13);
        // The visit gave the bias back.
        add_at_home(&lock);
        assert_eq!(*lock.visit(), 14);
    });
}

#[test]
fn a_thread_sharing_the_lock_revokes_it_and_the_owner_takes_it_back() {
    model(
        "a_thread_sharing_the_lock_revokes_it_and_the_owner_takes_it_back",
        || {
            let lock = Arc::new(BiasedMutex::new(0u64));
            add_at_home(&lock); // claims it
            let other = on_thread(&lock, |lock| {
                // Not the owner: the mutex, leaving the bias revoked.
                let mut guard = lock.lock_home();
                *guard += 10;
            });
            // Enough to take the bias back (REBIAS_AFTER is 2 here) if the
            // other thread came first, then the fast path.
            owner_adds_and_joins(&lock, 3, [other], 14);
        },
    );
}

#[test]
fn two_visits_and_the_owner_share_the_lock() {
    model("two_visits_and_the_owner_share_the_lock", || {
        let lock = Arc::new(BiasedMutex::new(0u64));
        add_at_home(&lock);
        let visitors = [(); 2].map(|()| on_thread(&lock, |lock| *lock.visit() += 10));
        owner_adds_and_joins(&lock, 1, visitors, 22);
    });
}

#[test]
fn a_claim_races_a_visit_and_a_sharing_thread() {
    model("a_claim_races_a_visit_and_a_sharing_thread", || {
        let lock = Arc::new(BiasedMutex::new(0u64));
        let visitor = on_thread(&lock, |lock| *lock.visit() += 10);
        let other = on_thread(&lock, add_at_home);
        owner_adds_and_joins(&lock, 2, [visitor, other], 13);
    });
}

#[test]
fn the_owner_takes_the_bias_back_while_a_visit_waits() {
    model("the_owner_takes_the_bias_back_while_a_visit_waits", || {
        let lock = Arc::new(BiasedMutex::new(0u64));
        add_at_home(&lock);
        // Revoked by another thread's lock first.
        on_thread(&lock, |lock| *lock.lock() += 100).join().unwrap();
        let visitor = on_thread(&lock, |lock| {
            let mut guard = lock.visit();
            let read = *guard;
            loom::thread::yield_now();
            *guard = read + 10;
        });
        owner_adds_and_joins(&lock, 3, [visitor], 114);
    });
}

#[test]
fn the_owner_a_visit_and_a_sharing_thread_never_hold_it_together() {
    model(
        "the_owner_a_visit_and_a_sharing_thread_never_hold_it_together",
        || {
            let lock = Arc::new(BiasedMutex::new(0u64));
            add_at_home(&lock);
            let visitor = on_thread(&lock, |lock| *lock.visit() += 10);
            let other = on_thread(&lock, |lock| *lock.lock() += 100);
            owner_adds_and_joins(&lock, 2, [visitor, other], 113);
        },
    );
}

/// Visits `lock` twice in `batch` (as a pass that moves two batches of
/// expirations out of one shard does), in two steps each.
fn visit_twice_in(lock: &BiasedMutex<u64>, batch: &VisitBatch) {
    for _ in 0..2 {
        let mut guard = lock.visit_in(batch);
        let read = *guard;
        loom::thread::yield_now();
        *guard = read + 10;
    }
}

#[test]
fn one_barrier_serves_a_batch_of_visits_to_two_owners() {
    model("one_barrier_serves_a_batch_of_visits_to_two_owners", || {
        let locks = Arc::new([BiasedMutex::new(0u64), BiasedMutex::new(0u64)]);
        let owners: Vec<_> = (0..2)
            .map(|i| {
                let locks = Arc::clone(&locks);
                loom::thread::spawn(move || {
                    add_at_home(&locks[i]);
                    add_at_home(&locks[i]);
                })
            })
            .collect();
        let mut batch = VisitBatch::new();
        for lock in locks.iter() {
            batch.mark(lock);
        }
        batch.barrier();
        for lock in locks.iter() {
            visit_twice_in(lock, &batch);
            batch.end(lock);
        }
        for owner in owners {
            owner.join().unwrap();
        }
        for lock in locks.iter() {
            assert_eq!(*lock.visit(), 22);
        }
    });
}

#[test]
fn a_thread_that_finds_a_batchs_mark_revokes_for_itself() {
    model(
        "a_thread_that_finds_a_batchs_mark_revokes_for_itself",
        || {
            let lock = Arc::new(BiasedMutex::new(0u64));
            add_at_home(&lock); // the owner: this thread
            let driver = on_thread(&lock, batch_on);
            let other = on_thread(&lock, |lock| *lock.lock() += 100);
            owner_adds_and_joins(&lock, 1, [driver, other], 122);
        },
    );
}

/// A whole batch on `lock` alone: mark, barrier, two visits, end.
fn batch_on(lock: &BiasedMutex<u64>) {
    let mut batch = VisitBatch::new();
    batch.mark(lock);
    batch.barrier();
    visit_twice_in(lock, &batch);
    batch.end(lock);
}

#[test]
fn two_batches_and_the_owner_share_the_lock() {
    model("two_batches_and_the_owner_share_the_lock", || {
        let lock = Arc::new(BiasedMutex::new(0u64));
        add_at_home(&lock);
        let first = on_thread(&lock, batch_on);
        let second = on_thread(&lock, batch_on);
        owner_adds_and_joins(&lock, 1, [first, second], 42);
    });
}

#[test]
fn a_batch_a_visit_and_the_owner_share_the_lock() {
    model("a_batch_a_visit_and_the_owner_share_the_lock", || {
        let lock = Arc::new(BiasedMutex::new(0u64));
        add_at_home(&lock);
        let batch = on_thread(&lock, batch_on);
        let visitor = on_thread(&lock, |lock| *lock.visit() += 100);
        owner_adds_and_joins(&lock, 1, [batch, visitor], 122);
    });
}

#[test]
fn a_batch_that_marks_and_ends_without_a_visit_leaves_the_lock_safe() {
    model(
        "a_batch_that_marks_and_ends_without_a_visit_leaves_the_lock_safe",
        || {
            let lock = Arc::new(BiasedMutex::new(0u64));
            // The owner's first lock (its claim) races the batch: an owner
            // inside with fewer than REBIAS_AFTER locks, whose bias the
            // batch's end does not give back.
            let batch = on_thread(&lock, |lock| {
                let mut batch = VisitBatch::new();
                batch.mark(lock);
                batch.barrier();
                batch.end(lock);
            });
            let other = on_thread(&lock, |lock| *lock.lock() += 100);
            owner_adds_and_joins(&lock, 1, [batch, other], 101);
        },
    );
}
