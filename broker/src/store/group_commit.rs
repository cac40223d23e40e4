//! The group commit: one task fsyncs every dirty partition's active
//! segment, up to [`CONCURRENT_FSYNCS`] at once on the blocking pool, and
//! the offsets log beside them (one fsync covers every produce and commit
//! since the last), then tells whom it serves what they made durable.
//!
//! It needs nothing of the broker but that: [`Durable`], two calls, which
//! the broker answers by checking its purgatories of acks=-1 produces and
//! of OffsetCommits. The partitions to fsync come with their logs
//! ([`Store::dirty`]), so no topic is looked up by name.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{Store, OFFSETS_LOG};
use crate::log::partition::SyncTarget;
use crate::log::{LazyLog, TopicPartition};

/// The most partitions' fsyncs a group commit runs at once on the blocking
/// pool.
pub const CONCURRENT_FSYNCS: usize = 16;

/// The key of every OffsetCommit waiting for the offsets log's fsync.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OffsetsKey;

/// Whom the group commit tells what its fsyncs made durable: the broker's
/// purgatories of acks=-1 produces and of OffsetCommits. The group commit
/// needs nothing else of the broker: the partitions to fsync come with
/// their logs ([`Store::dirty`]).
pub trait Durable: Send + Sync {
    /// A partition's fsync returned (its log says how far it is durable,
    /// or that it failed): the produces waiting on `at` may complete.
    fn partition_synced(&self, at: &TopicPartition);

    /// An fsync of the offsets log returned: the commits waiting may
    /// complete ([`Store::commits_durable`]).
    fn offsets_synced(&self);
}

/// The group commit: fsyncs every dirty partition (several at once) and
/// the offsets log, then tells `waiters` what the fsyncs covered. Runs for
/// the broker's life.
pub async fn group_commit(store: Arc<Store>, waiters: Arc<dyn Durable>) {
    loop {
        store.wake.notified().await;
        tokio::join!(
            sync_partitions(&*waiters, &store),
            sync_offsets(&*waiters, &store)
        );
    }
}

/// Fsyncs every dirty partition's active segment, up to
/// [`CONCURRENT_FSYNCS`] at once, telling `waiters` of each as it returns.
async fn sync_partitions(waiters: &dyn Durable, store: &Store) {
    let dirty: Vec<(TopicPartition, Arc<LazyLog>)> = store.dirty.lock().drain().collect();
    let mut syncs = tokio::task::JoinSet::new();
    for (at, log) in dirty {
        if syncs.len() >= CONCURRENT_FSYNCS {
            if let Some(Ok(done)) = syncs.join_next().await {
                partition_synced(waiters, store, done);
            }
        }
        // What is written now is what this fsync covers (a deleted
        // topic's log is retired: nothing to fsync).
        let Some(target) = log.lock().sync_target() else {
            continue;
        };
        syncs.spawn_blocking(move || {
            let result = target.run();
            PartitionSync {
                at,
                log,
                target,
                result,
            }
        });
    }
    while let Some(joined) = syncs.join_next().await {
        if let Ok(done) = joined {
            partition_synced(waiters, store, done);
        }
    }
}

/// A partition's fsync by the group commit, done.
struct PartitionSync {
    /// The partition.
    at: TopicPartition,
    /// Its log (the one the produces appended to, even if its topic was
    /// deleted and made again meanwhile).
    log: Arc<LazyLog>,
    /// What was fsynced.
    target: SyncTarget,
    /// How it went.
    result: std::io::Result<()>,
}

/// Takes back a partition's fsync: its log's durable offset moves, or
/// (it failed) the log fails, never to be fsynced again; either way the
/// produces waiting on it are checked.
fn partition_synced(waiters: &dyn Durable, store: &Store, done: PartitionSync) {
    store.fsyncs.fetch_add(1, Ordering::Relaxed);
    done.log.lock().target_synced(&done.target, done.result);
    waiters.partition_synced(&done.at);
}

/// Fsyncs the offsets log if commits were appended, then completes the
/// commits it covers.
async fn sync_offsets(waiters: &dyn Durable, store: &Store) {
    if !store.offsets_dirty.swap(false, Ordering::AcqRel) {
        return;
    }
    if store.offsets_failed.load(Ordering::Acquire) {
        return;
    }
    let target = store.offsets.lock().to_sync();
    let synced = match target {
        Ok((file, covered)) => {
            match tokio::task::spawn_blocking(move || crate::log::sync::sync_file(&file)).await {
                Ok(Ok(())) => Some(covered),
                Ok(Err(e)) => {
                    // Never retried and trusted (see `crate::log::sync`):
                    // the commits waiting time out, later ones are refused.
                    store.offsets_failed.store(true, Ordering::Release);
                    eprintln!(
                        "error: fsync of {}: {e}; committed offsets are refused until a restart",
                        store.dir.join(OFFSETS_LOG).display()
                    );
                    return;
                }
                Err(_) => None,
            }
        }
        Err(_) => None,
    };
    match synced {
        Some(covered) => {
            let mut offsets = store.offsets.lock();
            offsets.durable = offsets.durable.max(covered);
            drop(offsets);
            waiters.offsets_synced();
        }
        // Again at the next commit; the commits wait or time out.
        None => store.offsets_dirty.store(true, Ordering::Release),
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::sync::atomic::AtomicU64;

    use parking_lot::Mutex;

    use super::*;
    use crate::log::config::TopicConfig;
    use crate::offsets::GroupCommit;

    /// Whom a test's group commit told.
    #[derive(Default)]
    struct Told {
        /// The partitions whose fsyncs returned.
        partitions: Mutex<Vec<TopicPartition>>,
        /// How many of the offsets log's fsyncs returned.
        offsets: AtomicU64,
    }

    impl Durable for Told {
        fn partition_synced(&self, at: &TopicPartition) {
            self.partitions.lock().push(at.clone());
        }
        fn offsets_synced(&self) {
            self.offsets.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The group commit runs on its store and whom to tell alone, with no
    /// broker (it used to take the whole `Broker` and look partitions up
    /// in its topics).
    #[tokio::test]
    async fn the_group_commit_needs_only_its_store_and_whom_to_tell() {
        let dir = std::env::temp_dir().join(format!("pg-store-{}-commit", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let (store, _) = Store::open(dir.clone(), 1 << 20).unwrap();
        let store = Arc::new(store);
        let mut logs = store
            .create("t", 1, &TopicConfig::default(), uuid::Uuid::nil())
            .unwrap();
        let log = Arc::new(LazyLog::open(logs.remove(0)));
        log.lock()
            .append_now(&crate::log::batch::testing::of(3))
            .unwrap();
        assert_eq!(
            log.lock().durable(),
            0,
            "nothing fsynced the active segment"
        );
        let told = Arc::new(Told::default());
        let task = tokio::spawn(group_commit(Arc::clone(&store), Arc::clone(&told) as _));
        let at = TopicPartition::new("t", 0);
        store.dirty(&at, &log);
        let records = store.commit(&[GroupCommit::topic_deleted("u")]).unwrap();
        for _ in 0..1_000 {
            if told.partitions.lock().len() == 1 && told.offsets.load(Ordering::Relaxed) >= 1 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert_eq!(*told.partitions.lock(), [at]);
        assert_eq!(
            log.lock().durable(),
            3,
            "the fsync made the records durable"
        );
        assert!(told.offsets.load(Ordering::Relaxed) >= 1);
        assert!(store.commits_durable(records));
        task.abort();
        fs::remove_dir_all(&dir).unwrap();
    }
}
