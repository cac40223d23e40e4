//! A partition's log: its segments in offset order, the last one active
//! (appended to), rolled when it would pass `--segment-bytes`; the
//! idempotent producers' state; and what the fsyncs made durable.
//!
//! Memory per partition is its segments' few figures and descriptors and
//! the producers' state, whatever the bytes in the files. With
//! `--data-dir` the partition is a directory of segments
//! ([`super::segment`]) plus the last two producer snapshots
//! (`<offset>.snapshot`: the producers' state before that offset, written
//! when a segment rolls and every [`SNAPSHOT_INTERVAL`] bytes of log), so
//! that opening it (at its first use after a start: [`super::lazy`]) reads
//! only the last segments' tails:
//!
//! | at its opening | read |
//! |---|---|
//! | each closed segment but the last | its files' lengths and its time index's last entry |
//! | the last two segments | from their last valid offset-index entry on, batch by batch (length, offsets, CRC); a torn tail is cut off (in the one before the active, with the active after it, whose offsets would no longer follow) |
//! | the producers | the last snapshot, then the headers of the batches after it (at most [`SNAPSHOT_INTERVAL`] of log) |
//! | `*.tmp` | removed: a snapshot or a spare segment that a crash left half made |
//!
//! A roll's slow part (fsyncs, new files) runs off the partition's lock:
//! see [`super::roll`]. What an acks=all produce waits for,
//! [`Log::durable`], moves only over contiguous fsynced bytes whose
//! segment's name is durable too (a directory fsync after its roll's
//! renames): a closed segment's own fsync and the group commit's fsync of
//! the active one ([`Log::synced`]). A start fsyncs the last segment and
//! the directory before it counts what it recovered as durable.
//!
//! | file | job |
//! |---|---|
//! | `partition.rs` | the log: its segments, appends, rolls' triggers, reads |
//! | `recovery.rs` | [`Log::open`]: the log read back at start |
//! | `durability.rs` | what the fsyncs made durable, and a log failed for good |
//! | `start.rs` | the log start offset DeleteRecords raises, kept in its own file |
//! | `errors.rs` | why a read or an append failed |
//! | `tests.rs` | the scenarios |

use std::collections::VecDeque;
use std::io;

use super::batch::{last_delta, BatchHeader, Timed};
use super::read::Slice;
use super::roll::Sealed;
use super::segment::{Place, Segment, Spare};
use crate::producers::Producers;

mod durability;
mod errors;
mod recovery;
mod start;
#[cfg(test)]
pub(super) mod tests;

pub use durability::SyncTarget;
pub use errors::{AppendError, Unreadable};
pub use start::RaisedStart;

/// The most bytes of log between two snapshots of the producers (an
/// eighth of a segment if that is less): what a start replays at most.
pub const SNAPSHOT_INTERVAL: u64 = 64 * 1024 * 1024;

/// One partition's log.
#[derive(Debug)]
pub struct Log {
    /// Its segments, oldest first, the last active; none until the first
    /// append (a partition without records holds no file descriptor).
    pub(super) segments: VecDeque<Segment>,
    /// The start and next offset while there is no segment.
    empty_at: i64,
    /// The log start offset DeleteRecords set (Kafka's `logStartOffset`):
    /// the records below it are gone, though their segment may stay
    /// until retention deletes it whole.
    pub(super) deleted_below: i64,
    /// Where new segments are made.
    pub(super) place: Place,
    /// The size past which the active segment rolls, bytes.
    pub(super) segment_bytes: u64,
    /// Its idempotent producers' sequences.
    pub producers: Producers,
    /// With `--data-dir`: the offsets of its snapshot files, oldest first.
    pub(super) snapshots: VecDeque<i64>,
    /// Bytes appended since the last snapshot.
    pub(super) since_snapshot: u64,
    /// The next segment's files, made ahead.
    pub(super) spare: Option<Spare>,
    /// Whether an append waits for a spare (there was none when it needed one).
    pub(super) wants_spare: bool,
    /// The closed segment not yet fsynced (with `--data-dir`).
    pub(super) sealed: Option<Sealed>,
    /// The producers' snapshot due to be written (with `--data-dir`).
    pub(super) snapshot_due: Option<(i64, Vec<u8>)>,
    /// Whether a [`RollWork`](super::roll::RollWork) is out (one at a time).
    pub(super) working: bool,
    /// Why the roll work that an append waited for failed, for that append.
    pub(super) failed: Option<io::Error>,
    /// Why the log is failed for good (an fsync failed, or its topic was
    /// deleted): no append, no durable offset move, from then on.
    fatal: Option<String>,
    /// With `--data-dir`: the base of the newest segment whose name a
    /// directory fsync made durable (`i64::MIN`: none); bytes of a later
    /// segment count as durable only after the next directory fsync.
    pub(super) named: i64,
    /// With `--data-dir`: offsets below this are on disk (fsynced).
    durable: i64,
    /// An fsync past `durable` that does not join it yet (the active
    /// segment's, while the closed one before it is not on disk): its
    /// segment's base and the offset it covers.
    synced_ahead: Option<(i64, i64)>,
}

impl Log {
    /// An empty log whose segments are made at `place`, from the first
    /// append on.
    pub fn create(place: Place, segment_bytes: u64) -> Log {
        Log {
            segments: VecDeque::new(),
            empty_at: 0,
            deleted_below: 0,
            place,
            segment_bytes,
            producers: Producers::default(),
            snapshots: VecDeque::new(),
            since_snapshot: 0,
            spare: None,
            wants_spare: false,
            sealed: None,
            snapshot_due: None,
            working: false,
            failed: None,
            fatal: None,
            named: i64::MIN,
            durable: 0,
            synced_ahead: None,
        }
    }

    /// Sets the size past which the active segment rolls, bytes (a
    /// topic's `segment.bytes` altered).
    pub fn set_segment_bytes(&mut self, bytes: u64) {
        self.segment_bytes = bytes;
    }

    /// The next offset to assign (the high watermark).
    pub fn next(&self) -> i64 {
        self.segments.back().map_or(self.empty_at, |s| s.next)
    }

    /// The log start offset: the first offset still held (the first
    /// segment's base, or past it where DeleteRecords moved it).
    pub fn start(&self) -> i64 {
        self.segments
            .front()
            .map_or(self.empty_at, |s| s.base)
            .max(self.deleted_below)
    }

    /// Its bytes, over every segment.
    pub fn size(&self) -> u64 {
        self.segments.iter().map(|s| s.size).sum()
    }

    /// How many segments it has.
    #[cfg(test)]
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    /// Appends `batch` (whole, checked, and admitted by
    /// [`Producers::check`]) at the next offset, written from the caller's
    /// buffer with its base offset rewritten; rolls first if the active
    /// segment would pass `--segment-bytes` (or its offsets could no longer
    /// be relative ones); records it in the producers' state; returns its
    /// base offset. No fsync and no file creation happen here.
    ///
    /// # Errors
    ///
    /// [`AppendError::Rolling`] if it needs the next segment's files and
    /// they are not made yet; [`AppendError::Io`] if a write or a rename
    /// failed, or the last roll work did. Either way the log is as it was.
    pub fn append(&mut self, batch: &[u8]) -> Result<i64, AppendError> {
        if self.fatal.is_some() {
            return Err(AppendError::Failed);
        }
        let base = self.next();
        let len = batch.len() as u64;
        let full = self.segments.back().is_none_or(|active| {
            active.size > 0
                && (active.size + len > self.segment_bytes
                    || base + last_delta(batch) - active.base > i64::from(i32::MAX))
        });
        if full {
            self.roll(base)?;
        } else if self.since_snapshot >= (self.segment_bytes / 8).min(SNAPSHOT_INTERVAL) {
            self.snapshot(base);
        }
        self.segments
            .back_mut()
            .expect("a log has a segment")
            .append(batch, base)?;
        self.since_snapshot += len;
        self.producers.appended(&BatchHeader::of(batch), base);
        Ok(base)
    }

    /// What to read from `offset` on: the rest of the segment holding it
    /// (a fetch answer comes from one segment, as Kafka's does; the next
    /// fetch reads on).
    ///
    /// # Errors
    ///
    /// [`Unreadable::OutOfRange`] before the log start or past its end,
    /// [`Unreadable::Io`] if the index or log could not be read, or the
    /// log failed before it held a segment.
    pub fn slice(&self, offset: i64) -> Result<Slice, Unreadable> {
        if let (Some(why), true) = (&self.fatal, self.segments.is_empty()) {
            // Failed before it held a segment (its files could not be read
            // at its opening): whatever they hold is not "nothing".
            return Err(Unreadable::Io(io::Error::other(why.clone())));
        }
        if offset < self.start() || offset > self.next() {
            return Err(Unreadable::OutOfRange);
        }
        // The segment holding `offset`: the last whose base is at or
        // before it.
        let i = self.segments.partition_point(|s| s.base <= offset);
        match i.checked_sub(1) {
            Some(i) => Ok(self.segments[i].slice_from(offset)?),
            None => Ok(Slice::empty()),
        }
    }

    /// Where the batch holding `offset` starts in the partition's bytes
    /// (the end, for the next offset); `None` outside the log. With
    /// [`end_position`](Self::end_position) it gives the bytes a fetch
    /// from `offset` has: a parked fetch asks once, then only subtracts.
    ///
    /// # Errors
    ///
    /// The index or the log could not be read.
    pub fn position_of(&self, offset: i64) -> io::Result<Option<u64>> {
        if offset > self.next() || offset < self.start() {
            return Ok(None);
        }
        let i = self.segments.partition_point(|s| s.base <= offset);
        let Some(holding) = i.checked_sub(1).map(|i| &self.segments[i]) else {
            return Ok(Some(self.end_position()));
        };
        Ok(Some(holding.origin + holding.position_of(offset)?))
    }

    /// Where the partition's bytes end (see [`position_of`](Self::position_of)).
    pub fn end_position(&self) -> u64 {
        self.segments.back().map_or(0, |s| s.origin + s.size)
    }

    /// The first record with a timestamp at or after `timestamp` (ms), at
    /// or after the log start, as ListOffsets answers it: segments are skipped by their largest
    /// timestamp, then the segment's time index says where to start.
    ///
    /// # Errors
    ///
    /// A read failed, or the batch holding the record claims more bytes
    /// than its segment holds.
    pub fn offset_for_time(&self, timestamp: i64) -> io::Result<Option<Timed>> {
        let start = self.start();
        for segment in self.segments.iter().filter(|s| s.next > start) {
            if let Some(found) = segment.first_at_or_after(timestamp, start)? {
                return Ok(Some(found));
            }
        }
        Ok(None)
    }

    /// The record with the largest timestamp (the first of equals).
    ///
    /// # Errors
    ///
    /// A read failed, or the batch claims more bytes than its segment
    /// holds.
    pub fn offset_of_max_time(&self) -> io::Result<Option<Timed>> {
        let mut best: Option<&Segment> = None;
        for segment in &self.segments {
            let (Some(max), Some(held)) = (
                segment.max_time,
                best.map_or(Some(i64::MIN), |b| b.max_time.map(|m| m.timestamp)),
            ) else {
                continue;
            };
            if best.is_none() || max.timestamp > held {
                best = Some(segment);
            }
        }
        best.map_or(Ok(None), |s| s.record_of_max_time())
    }
}

#[cfg(test)]
impl Log {
    /// Appends as the broker does, with the roll work run in place of the
    /// broker's blocking pool: before the append if it waits for it, and
    /// after it if some is due.
    pub fn append_now(&mut self, batch: &[u8]) -> io::Result<i64> {
        let appended = loop {
            match self.append(batch) {
                Err(AppendError::Rolling) => self.work_now(),
                Err(AppendError::Io(e)) => return Err(e),
                Err(AppendError::Failed) => return Err(io::Error::other("the log is failed")),
                Ok(base) => break base,
            }
        };
        self.work_now();
        Ok(appended)
    }

    /// Runs the roll work due, if any, and takes it back.
    pub fn work_now(&mut self) {
        if let Some(work) = self.take_work() {
            let done = work.run();
            self.finish(done);
        }
    }
}
