//! The partitions' logs, kept in segment files rather than in memory.
//!
//! | module | job |
//! |---|---|
//! | [`batch`] | the record-batch header arithmetic, CRC, records by time |
//! | [`index`] | a segment's sparse offset and time indexes, searched in their files |
//! | [`segment`] | one segment: append, lookups by offset and time, recovery of a torn tail |
//! | [`read`] | reading a log file: a fetch's slice, the chunked header scans |
//! | [`partition`] | a partition's segments, appends, reads, what is durable, opening at start |
//! | [`lazy`] | a partition's log opened on first use, not at start |
//! | [`roll`] | rolling off the lock: the slow part handed out as a [`RollWork`], the producers' snapshot files |
//! | [`sync`] | the fsyncs of files and directories, never retried after a failure |
//! | [`retention`] | which closed segments `--retention-ms` / `--retention-bytes` give up |
//!
//! A produce appends each batch, as it arrived but for its base offset,
//! to the active segment's file; a fetch finds the batch's position with
//! the sparse offset index and reads the file from there, after the
//! partition's lock is released (the page cache does the caching). What
//! stays in memory per partition is a few figures per segment and its
//! descriptors (three per segment; none for a partition that never had a
//! record), so memory is bounded by the number of segments, not the bytes
//! in them. Without `--data-dir` the segments are
//! anonymous files in the temporary directory (unlinked as they are made,
//! freed by the kernel when the broker exits, however it exits): the same
//! bounded memory, nothing kept across a restart.

use std::sync::Arc;

pub mod batch;
pub mod config;
pub mod index;
pub mod lazy;
pub mod partition;
pub mod read;
pub mod retention;
pub mod roll;
pub mod segment;
pub mod sync;

pub use batch::{BatchHeader, Timed};
pub use lazy::LazyLog;
pub use partition::{AppendError, Log, RaisedStart, Unreadable};
pub use read::{FileRange, First, Records};
pub use retention::Retention;
pub use roll::RollWork;
pub use segment::Place;

/// A topic and partition: the key of every wait on a partition.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TopicPartition {
    /// The topic's name.
    pub topic: String,
    /// The partition's index.
    pub partition: i32,
}

impl TopicPartition {
    /// The key of `topic`'s `partition`.
    pub fn new(topic: impl Into<String>, partition: i32) -> TopicPartition {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }
}

/// A position in a partition: what a waiting fetch or produce needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Position {
    /// The partition.
    pub at: TopicPartition,
    /// The offset.
    pub offset: i64,
}

/// A topic: its partitions. CreatePartitions makes a new `Topic` that
/// shares the old one's logs, notification and liveness, with more logs.
pub struct Topic {
    /// Its partitions' logs, by index.
    pub partitions: Vec<Arc<LazyLog>>,
    /// Notified when a roll work of one of its partitions comes back:
    /// wakes the produces waiting for a new segment
    /// ([`AppendError::Rolling`]).
    pub rolled: Arc<tokio::sync::Notify>,
    /// Its own configs, over the broker's.
    pub config: config::TopicConfig,
    /// Whether its directory is still its own: false once it is deleted
    /// (the directory then holds nothing of it, or a new topic's files).
    /// A roll work makes files only under a read guard of `true`; the
    /// deletion takes the write guard, so it waits for the work running.
    pub live: Arc<parking_lot::RwLock<bool>>,
    /// Its id (Metadata v10+), drawn at random when it is made.
    pub id: uuid::Uuid,
}

impl Topic {
    /// A topic of these logs, with these configs.
    pub fn new(logs: Vec<LazyLog>, config: config::TopicConfig) -> Topic {
        Topic {
            partitions: logs.into_iter().map(Arc::new).collect(),
            config,
            rolled: Arc::new(tokio::sync::Notify::new()),
            live: Arc::new(parking_lot::RwLock::new(true)),
            id: uuid::Uuid::new_v4(),
        }
    }

    /// The topic with the id `id` (kept in its directory).
    pub fn with_id(self, id: uuid::Uuid) -> Topic {
        Topic { id, ..self }
    }

    /// The topic with `more` logs after its own (CreatePartitions) and
    /// `config` (AlterConfigs): the same logs, notification and liveness.
    pub fn rebuilt(&self, more: Vec<Log>, config: config::TopicConfig) -> Topic {
        let mut partitions = self.partitions.clone();
        partitions.extend(more.into_iter().map(|log| Arc::new(LazyLog::open(log))));
        Topic {
            partitions,
            config,
            rolled: Arc::clone(&self.rolled),
            live: Arc::clone(&self.live),
            id: self.id,
        }
    }

    /// Runs `work`, blocking, taken from one of its partitions, unless
    /// the topic is deleted (`None`: nothing is made; its directory may
    /// be a new topic's).
    pub fn run_work(&self, work: RollWork) -> Option<roll::RollDone> {
        let live = self.live.read();
        (*live).then(|| work.run())
    }

    /// Writes partition `index`'s log start to its file if it moved since
    /// (blocking: on the blocking pool), unless the topic is deleted
    /// (`Ok`: nothing is written; its directory may be a new topic's).
    ///
    /// # Errors
    ///
    /// The file could not be written.
    pub fn save_start(&self, index: usize) -> std::io::Result<()> {
        let live = self.live.read();
        match self.partitions.get(index) {
            Some(log) if *live => log.save_start(),
            _ => Ok(()),
        }
    }

    /// Marks it deleted before its directory goes: the roll work and the
    /// start writes running finish first, no other makes a file, and no
    /// append renames one (its logs are retired, [`Log::retire`]).
    ///
    /// Waiting for those may take fsyncs: on a runtime's worker thread it
    /// blocks in place ([`tokio::task::block_in_place`]), the worker's
    /// other tasks moved to another thread meanwhile.
    pub fn retire(&self) {
        let on_worker = tokio::runtime::Handle::try_current()
            .is_ok_and(|r| r.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        if on_worker {
            tokio::task::block_in_place(|| self.retire_now());
        } else {
            self.retire_now();
        }
    }

    /// [`retire`](Self::retire), blocking the calling thread.
    fn retire_now(&self) {
        let mut live = self.live.write();
        *live = false;
        for log in &self.partitions {
            log.retire();
        }
    }
}

/// How a partition's log is kept.
#[derive(Clone, Debug)]
pub struct LogConfig {
    /// The size past which a segment rolls, bytes (Kafka's
    /// `log.segment.bytes`).
    pub segment_bytes: u64,
    /// What retention deletes.
    pub retention: Retention,
}
