//! Rolling at work: the slow part of a partition's roll (the closed
//! segment's fsync, the producers' snapshot file, the next segment's
//! files; see [`crate::log::partition`]) runs on the blocking pool,
//! without the partition's lock, so produces and fetches of the partition
//! go on meanwhile. One task per partition with work due, while there is
//! some: it takes the work under the lock, runs it off the lock, hands it
//! back under the lock, then wakes the produces waiting for a segment and
//! checks the acks=all produces that the fsync may have made durable.

use std::sync::Arc;

use crate::broker::Broker;
use crate::log::{RollWork, Topic, TopicPartition};

/// Runs `work`, taken from the log of `topic`'s partition `at`, and
/// whatever work follows it, in a task of its own (it finishes even if the
/// request that started it goes away, or the topic is deleted meanwhile).
pub fn spawn(broker: &Arc<Broker>, topic: Arc<Topic>, at: TopicPartition, work: RollWork) {
    let broker = Arc::clone(broker);
    tokio::spawn(async move {
        let Some(log) = usize::try_from(at.partition)
            .ok()
            .and_then(|i| topic.partitions.get(i))
        else {
            return;
        };
        let mut work = work;
        loop {
            let of = Arc::clone(&topic);
            let done = tokio::task::spawn_blocking(move || of.run_work(work)).await;
            let next = {
                let mut log = log.lock();
                match done {
                    // Deleted: its logs are retired, nothing waits.
                    Ok(None) => return,
                    // After a failure, the next produce tries again: no
                    // loop on a failing disk.
                    Ok(Some(done)) => log.finish(done).then(|| log.take_work()).flatten(),
                    Err(_) => {
                        log.abandon_work();
                        None
                    }
                }
            };
            topic.rolled.notify_waiters();
            // The closed segment's fsync may complete acks=all produces.
            let _ = broker.produces.check_and_complete(&at);
            match next {
                Some(more) => work = more,
                None => return,
            }
        }
    });
}
