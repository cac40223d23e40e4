//! What the fsyncs made durable: the group commit's [`SyncTarget`], the
//! durable offset that moves only over contiguous fsynced bytes whose
//! segment's name is durable too, and a log failed for good after a failed
//! fsync.

use std::fs::File;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use super::super::segment::Place;
use super::super::sync::{sync_dir, sync_file};
use super::Log;

/// What the group commit fsyncs for a partition.
#[derive(Debug)]
pub struct SyncTarget {
    /// The active segment's log file.
    pub file: Arc<File>,
    /// The active segment's first offset.
    pub base: i64,
    /// The offset after what is appended now: what the fsync covers.
    pub covered: i64,
    /// The partition directory, if the active segment's name is not yet
    /// durable (its roll's directory fsync has not run, or it is the
    /// first segment): fsynced after the file, before anything counts.
    pub dir: Option<PathBuf>,
}

impl SyncTarget {
    /// Runs it, blocking: the file's fsync, then the directory's.
    ///
    /// # Errors
    ///
    /// An fsync failed (the error names the directory, or the segment):
    /// hand it to [`Log::target_synced`], which fails the log.
    pub fn run(&self) -> io::Result<()> {
        sync_file(&self.file).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("fsync of the segment at offset {}: {e}", self.base),
            )
        })?;
        match &self.dir {
            Some(dir) => sync_dir(dir),
            None => Ok(()),
        }
    }
}

impl Log {
    /// With `--data-dir`: offsets below this are on disk (fsynced).
    pub fn durable(&self) -> i64 {
        self.durable
    }

    /// The group commit's target: the active segment's file and what a
    /// sync of it covers now (`None` before the first append).
    pub fn sync_target(&self) -> Option<SyncTarget> {
        if self.fatal.is_some() {
            return None;
        }
        let active = self.segments.back()?;
        Some(SyncTarget {
            file: active.log_file(),
            base: active.base,
            covered: active.next,
            dir: match &self.place {
                Place::Dir(dir) if active.base > self.named => Some(dir.clone()),
                _ => None,
            },
        })
    }

    /// Takes back the group commit's fsync of `target`: on success what it
    /// covers may count as durable; on failure the log fails.
    pub fn target_synced(&mut self, target: &SyncTarget, result: io::Result<()>) {
        match result {
            Ok(()) => {
                if target.dir.is_some() {
                    self.named = self.named.max(target.base);
                }
                self.synced(target.base, target.covered);
            }
            Err(e) => self.fail(&e),
        }
    }

    /// Fails the log for good after a failed fsync (logged once, naming
    /// the partition): the bytes it did not write may be gone and a later
    /// fsync would not say so. Appends are refused
    /// ([`AppendError::Failed`](super::AppendError::Failed), answered KAFKA_STORAGE_ERROR), the durable
    /// offset never moves again, and the acks=all produces waiting for it
    /// are answered KAFKA_STORAGE_ERROR. A restart recovers what the disk
    /// holds.
    pub fn fail(&mut self, e: &io::Error) {
        if self.fatal.is_some() {
            return;
        }
        let at = match &self.place {
            Place::Dir(dir) | Place::Anonymous(dir) => dir.display().to_string(),
        };
        eprintln!("error: {at}: {e}; the partition is failed until a restart");
        self.fatal = Some(e.to_string());
    }

    /// Fails the log without a word: its topic was deleted, and its
    /// directory may hold a new topic's files (no rename happens after).
    pub fn retire(&mut self) {
        self.fatal
            .get_or_insert_with(|| "its topic was deleted".into());
    }

    /// Whether the log is failed for good ([`fail`](Self::fail)).
    pub fn is_failed(&self) -> bool {
        self.fatal.is_some()
    }

    /// The segment starting at `base` is fsynced up to `covered`: moves
    /// [`durable`](Self::durable) if everything before that segment is on
    /// disk, else keeps it for when it is.
    pub fn synced(&mut self, base: i64, covered: i64) {
        if self.fatal.is_some() {
            return;
        }
        if base > self.durable {
            self.synced_ahead = Some(match self.synced_ahead {
                Some((b, c)) if b == base => (b, c.max(covered)),
                _ => (base, covered),
            });
            return;
        }
        self.durable = self.durable.max(covered);
        if let Some((b, c)) = self.synced_ahead {
            if b <= self.durable {
                self.durable = self.durable.max(c);
                self.synced_ahead = None;
            }
        }
    }
}
