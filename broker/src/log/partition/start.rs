//! The log start offset that DeleteRecords raises (Kafka's
//! `logStartOffset`), anywhere up to the high watermark, inside a segment
//! too: the records below it are gone for every reader (a fetch below it is
//! OFFSET_OUT_OF_RANGE, ListOffsets' earliest answers it) while their
//! segment stays until retention deletes it whole.
//!
//! With `--data-dir` it is kept in the partition's [`START_FILE`] (the
//! offset in decimal), written to a temporary file, fsynced, renamed over
//! the old one and the directory fsynced: a crash leaves the old value or
//! the new one, never a torn file (Kafka keeps every partition's in one
//! `log-start-offset-checkpoint`, rewritten the same way). A start past
//! what a crash left of the log (records acknowledged with acks=1, not yet
//! on disk) empties the log at that start, as Kafka truncates it.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::super::segment::Place;
use super::super::sync::{sync_dir, sync_file};
use super::Log;

/// The log start offset's file in a partition's directory.
pub const START_FILE: &str = "log-start-offset";

/// What [`Log::raise_start`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RaisedStart {
    /// The start moved to this offset.
    Moved(i64),
    /// The start was at or past the offset already, and stays here.
    Kept(i64),
    /// The offset is negative or past the high watermark.
    OutOfRange,
    /// The log is failed (a failed fsync, or its topic deleted).
    Failed,
}

/// A log start to write to its partition's [`START_FILE`], off the
/// partition's lock.
#[derive(Clone, Debug)]
pub struct StartFile {
    /// The partition's directory.
    dir: PathBuf,
    /// The start.
    pub start: i64,
}

impl StartFile {
    /// Writes it, crash-safely (temporary file, fsync, rename, directory
    /// fsync). Blocking.
    ///
    /// # Errors
    ///
    /// A write, fsync or rename failed; the old file stays as it was.
    pub fn write(&self) -> io::Result<()> {
        let path = self.dir.join(START_FILE);
        let tmp = path.with_extension("tmp");
        let mut file = fs::File::create(&tmp)?;
        writeln!(file, "{}", self.start)?;
        sync_file(&file)?;
        fs::rename(&tmp, &path)?;
        sync_dir(&self.dir)
    }
}

/// The start kept in `dir`'s [`START_FILE`], if there is one.
///
/// # Errors
///
/// The file cannot be read, or holds no offset (an error naming it: a
/// rename never leaves it torn, so something else wrote it).
pub fn read_start(dir: &Path) -> io::Result<Option<i64>> {
    let path = dir.join(START_FILE);
    match fs::read_to_string(&path) {
        Ok(text) => text.trim().parse().map(Some).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{} holds no offset: {text:?}", path.display()),
            )
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

impl Log {
    /// DeleteRecords: raises the log start to `offset` (at most the high
    /// watermark); a start already past it stays.
    pub fn raise_start(&mut self, offset: i64) -> RaisedStart {
        if self.is_failed() {
            return RaisedStart::Failed;
        }
        if offset < 0 || offset > self.next() {
            return RaisedStart::OutOfRange;
        }
        if offset <= self.start() {
            return RaisedStart::Kept(self.start());
        }
        self.deleted_below = offset;
        RaisedStart::Moved(offset)
    }

    /// Its start as its [`START_FILE`] should hold it: `None` without
    /// `--data-dir`.
    ///
    /// # Errors
    ///
    /// The log is failed (its directory may be another topic's by now):
    /// nothing may be written, and the start is not kept.
    pub fn start_file(&self) -> io::Result<Option<StartFile>> {
        match &self.place {
            Place::Dir(_) if self.is_failed() => {
                Err(io::Error::other("the log failed: its start is not kept"))
            }
            Place::Dir(dir) => Ok(Some(StartFile {
                dir: dir.clone(),
                start: self.start(),
            })),
            Place::Anonymous(_) => Ok(None),
        }
    }

    /// An empty log whose first offset is `start` (every record below it
    /// deleted, or lost): the next append goes there.
    pub(super) fn empty_from(place: Place, segment_bytes: u64, start: i64) -> Log {
        let mut log = Log::create(place, segment_bytes);
        log.empty_at = start;
        log.deleted_below = start;
        log.durable = start;
        log
    }
}
