//! A partition's log opened on first use, so that a start reads no
//! partition's files: a restart on 100,000 partitions lists their topics'
//! directories and listens.
//!
//! A partition found at start is [`LazyLog::closed`]: its directory and
//! segment size. Its first use opens it ([`Log::open`]: its last segments'
//! tails checked, a torn tail cut), under its own lock. A request
//! opens the partitions it names first, on the blocking pool
//! ([`LazyLog::ready`]), so no request waits for another partition's
//! opening, and no runtime thread reads a file for it; the cleaner opens
//! the closed partitions of the topics it keeps in bounds the same way
//! before each check, so retention still reaches a partition that holds
//! data and no request used. A partition made by CreateTopics or
//! CreatePartitions is open from the start ([`LazyLog::open`]).
//!
//! A partition that cannot be opened is failed ([`Log::fail`], the reason
//! printed): its produces and fetches are answered KAFKA_STORAGE_ERROR
//! until a restart.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::{MappedMutexGuard, Mutex, MutexGuard};

use super::sync::sync_dir;
use super::{Log, Place};

/// A partition's log, read from its directory on first use.
#[derive(Debug)]
pub struct LazyLog {
    /// The log, or where to read it from.
    slot: Mutex<Slot>,
    /// Whether `slot` is [`Slot::Open`] (it never goes back): asked
    /// without the lock by every request's [`ready`](LazyLog::ready).
    opened: AtomicBool,
    /// The log start last written to its file (DeleteRecords'): held while
    /// it is written, so that two writes do not cross and the file ends
    /// with the latest start.
    start_saved: Mutex<i64>,
}

/// A [`LazyLog`]'s state. A closed one is as large as an open one (a
/// partition held as much before it was lazy); boxing the log would add a
/// pointer chase to every append and read.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
enum Slot {
    /// Not read yet.
    Closed {
        /// Its topic's directory, shared by its partitions (no path is
        /// allocated per partition until it is read).
        topic: Arc<Path>,
        /// Its index: its directory is `topic/<index>`, made at its
        /// opening if missing.
        index: usize,
        /// The size past which its active segment rolls, bytes.
        segment_bytes: u64,
    },
    /// Read.
    Open(Log),
}

impl LazyLog {
    /// A log that is open already (a new partition's, or one without
    /// `--data-dir`).
    pub fn open(log: Log) -> LazyLog {
        LazyLog {
            slot: Mutex::new(Slot::Open(log)),
            opened: AtomicBool::new(true),
            start_saved: Mutex::new(i64::MIN),
        }
    }

    /// The log of the partition directory `topic/<index>`, read on first
    /// use.
    pub fn closed(topic: Arc<Path>, index: usize, segment_bytes: u64) -> LazyLog {
        LazyLog {
            slot: Mutex::new(Slot::Closed {
                topic,
                index,
                segment_bytes,
            }),
            opened: AtomicBool::new(false),
            start_saved: Mutex::new(i64::MIN),
        }
    }

    /// Whether it was read.
    pub fn is_open(&self) -> bool {
        self.opened.load(Ordering::Acquire)
    }

    /// Its log, locked; read first if it was not (blocking: a caller on
    /// the runtime awaits [`ready`](Self::ready) before).
    pub fn lock(&self) -> MappedMutexGuard<'_, Log> {
        MutexGuard::map(self.slot.lock(), |slot| {
            if let Slot::Closed {
                topic,
                index,
                segment_bytes,
            } = slot
            {
                *slot = Slot::Open(read(topic.join(index.to_string()), *segment_bytes));
                self.opened.store(true, Ordering::Release);
            }
            match slot {
                Slot::Open(log) => log,
                Slot::Closed { .. } => unreachable!("opened above"),
            }
        })
    }

    /// Its log, locked, if it was read (else `None`, and nothing is read).
    pub fn lock_if_open(&self) -> Option<MappedMutexGuard<'_, Log>> {
        MutexGuard::try_map(self.slot.lock(), |slot| match slot {
            Slot::Open(log) => Some(log),
            Slot::Closed { .. } => None,
        })
        .ok()
    }

    /// Reads those of `logs` that were not read, on the blocking pool:
    /// then their [`lock`](Self::lock) reads no file.
    pub async fn ready(logs: impl IntoIterator<Item = Arc<LazyLog>>) {
        let closed: Vec<Arc<LazyLog>> = logs.into_iter().filter(|l| !l.is_open()).collect();
        if closed.is_empty() {
            return;
        }
        let _ = tokio::task::spawn_blocking(move || {
            for log in closed {
                drop(log.lock());
            }
        })
        .await;
    }

    /// Writes its log start to its file if it moved since the last write
    /// (with `--data-dir`; blocking). The partition's lock is held only to
    /// read the start, not while the file is written.
    ///
    /// If the write fails (or the log failed since the start moved), the
    /// start in memory stays where DeleteRecords moved it, ahead of the
    /// file's until a restart reads the file back: the records between
    /// are hidden now and seen again after the restart, and the
    /// DeleteRecords that moved it was answered KAFKA_STORAGE_ERROR.
    ///
    /// # Errors
    ///
    /// The log is failed, or the file could not be written.
    pub fn save_start(&self) -> std::io::Result<()> {
        let mut saved = self.start_saved.lock();
        let Some(file) = self.lock().start_file()? else {
            return Ok(());
        };
        if file.start > *saved {
            file.write()?;
            *saved = file.start;
        }
        Ok(())
    }

    /// Sets the size past which its active segment rolls, bytes (a
    /// topic's `segment.bytes` altered), read or not.
    pub fn set_segment_bytes(&self, bytes: u64) {
        match &mut *self.slot.lock() {
            Slot::Closed { segment_bytes, .. } => *segment_bytes = bytes,
            Slot::Open(log) => log.set_segment_bytes(bytes),
        }
    }

    /// Fails it without a word, read or not: its topic was deleted
    /// ([`Log::retire`]; a closed one is never read).
    pub fn retire(&self) {
        let mut slot = self.slot.lock();
        if let Slot::Closed {
            topic,
            index,
            segment_bytes,
        } = &*slot
        {
            let empty = Log::create(Place::Dir(topic.join(index.to_string())), *segment_bytes);
            *slot = Slot::Open(empty);
            self.opened.store(true, Ordering::Release);
        }
        if let Slot::Open(log) = &mut *slot {
            log.retire();
        }
    }
}

/// The log of the partition directory `dir`: made (and its name fsynced)
/// if a crash lost it, read, or failed if it cannot be.
fn read(dir: PathBuf, segment_bytes: u64) -> Log {
    let opened = (|| {
        if !dir.exists() {
            std::fs::create_dir_all(&dir)?;
            if let Some(topic) = dir.parent() {
                sync_dir(topic)?;
            }
        }
        Log::open(&dir, segment_bytes)
    })();
    opened.unwrap_or_else(|e| {
        let mut log = Log::create(Place::Dir(dir), segment_bytes);
        log.fail(&e);
        log
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::batch::testing::of;
    use crate::log::partition::tests::Scratch;
    use crate::log::AppendError;

    #[test]
    fn a_closed_log_is_read_at_its_first_lock_and_never_by_a_retirement() {
        let topic = Scratch::new("lazy");
        let dir = Scratch(topic.0.join("0"));
        std::fs::create_dir_all(&dir.0).unwrap();
        let mut log = Log::create(Place::Dir(dir.0.clone()), 1 << 20);
        log.append_now(&of(2)).unwrap();
        drop(log);
        std::fs::write(dir.0.join("stray.tmp"), b"").unwrap();
        let lazy = LazyLog::closed(Arc::from(topic.0.as_path()), 0, 1 << 20);
        assert!(!lazy.is_open() && lazy.lock_if_open().is_none());
        assert!(dir.0.join("stray.tmp").exists(), "made, it read nothing");
        assert_eq!(lazy.lock().next(), 2);
        assert!(lazy.is_open() && !dir.0.join("stray.tmp").exists());
        // A deleted topic's closed partition is failed without a read.
        std::fs::write(dir.0.join("stray.tmp"), b"").unwrap();
        let retired = LazyLog::closed(Arc::from(topic.0.as_path()), 0, 1 << 20);
        retired.retire();
        assert!(retired.lock().is_failed());
        assert!(dir.0.join("stray.tmp").exists());
    }

    #[test]
    fn a_log_that_cannot_be_read_is_failed_not_a_panic() {
        let topic = Scratch::new("lazy-unreadable");
        // A segment's name on a directory: its file cannot be opened.
        std::fs::create_dir_all(topic.0.join("0/00000000000000000000.log")).unwrap();
        let lazy = LazyLog::closed(Arc::from(topic.0.as_path()), 0, 1 << 20);
        let mut log = lazy.lock();
        assert!(log.is_failed());
        assert!(matches!(log.append(&of(1)), Err(AppendError::Failed)));
        assert!(
            matches!(log.slice(0), Err(crate::log::Unreadable::Io(_))),
            "a fetch is KAFKA_STORAGE_ERROR, not an empty answer"
        );
    }
}
