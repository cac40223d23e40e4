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
//! that a start reads only the last segments' tails:
//!
//! | at start | read |
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
use std::collections::VecDeque;
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::batch::{last_delta, BatchHeader, Timed};
use super::read::Slice;
use super::roll::{read_snapshot, snapshot_path, Sealed};
use super::segment::{file_name, Place, Segment, Spare};
use super::sync::{sync_dir, sync_file};
use crate::producers::Producers;

/// The most bytes of log between two snapshots of the producers (an
/// eighth of a segment if that is less): what a start replays at most.
pub const SNAPSHOT_INTERVAL: u64 = 64 * 1024 * 1024;

/// Why a read could not be served.
#[derive(Debug)]
pub enum Unreadable {
    /// The offset is before the log start or past its end.
    OutOfRange,
    /// The files could not be read.
    Io(io::Error),
    /// The batch at byte `at` of its segment claims `len` bytes: fewer
    /// than a header, more than its segment holds, or more than any batch
    /// the broker accepts (nothing that large is read).
    Corrupt {
        /// Where the batch starts in its segment.
        at: u64,
        /// Its whole length as its header gives it.
        len: u64,
    },
}

impl From<io::Error> for Unreadable {
    fn from(e: io::Error) -> Unreadable {
        Unreadable::Io(e)
    }
}

impl std::fmt::Display for Unreadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unreadable::OutOfRange => write!(f, "offset out of range"),
            Unreadable::Io(e) => write!(f, "{e}"),
            Unreadable::Corrupt { at, len } => write!(
                f,
                "the batch at byte {at} of its segment claims {len} bytes, which no batch stored has"
            ),
        }
    }
}

impl std::error::Error for Unreadable {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Unreadable::Io(e) => Some(e),
            _ => None,
        }
    }
}

/// Why an append did not happen; either way the log is as it was.
#[derive(Debug)]
pub enum AppendError {
    /// The batch needs a new segment whose files are still being made:
    /// run (or wait for) the partition's [`RollWork`](super::roll::RollWork), then append again.
    Rolling,
    /// A write failed, or the roll work this append waited for did
    /// (reported once; the next append tries again).
    Io(io::Error),
    /// The log is failed for good ([`Log::fail`]): an fsync failed, or
    /// its topic was deleted.
    Failed,
}

impl From<io::Error> for AppendError {
    fn from(e: io::Error) -> AppendError {
        AppendError::Io(e)
    }
}

impl std::fmt::Display for AppendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AppendError::Rolling => write!(f, "the next segment is not made yet"),
            AppendError::Io(e) => write!(f, "{e}"),
            AppendError::Failed => write!(f, "the partition's log is failed"),
        }
    }
}

impl std::error::Error for AppendError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            AppendError::Io(e) => Some(e),
            AppendError::Rolling | AppendError::Failed => None,
        }
    }
}

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

/// One partition's log.
#[derive(Debug)]
pub struct Log {
    /// Its segments, oldest first, the last active; none until the first
    /// append (a partition without records holds no file descriptor).
    pub(super) segments: VecDeque<Segment>,
    /// The start and next offset while there is no segment.
    empty_at: i64,
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

    /// The log in the partition directory `dir` (see the module's table of
    /// what a start reads); an empty directory is an empty log.
    ///
    /// # Errors
    ///
    /// A file could not be listed, opened, read, cut or removed.
    pub fn open(dir: &Path, segment_bytes: u64) -> io::Result<Log> {
        let (mut bases, mut snapshots, mut indexes) = (Vec::new(), Vec::new(), Vec::new());
        for entry in fs::read_dir(dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else {
                continue;
            };
            if name.ends_with(".tmp") {
                // A snapshot or a spare segment a crash left half made.
                fs::remove_file(entry.path())?;
                continue;
            }
            let Some((stem, extension)) = name.split_once('.') else {
                continue;
            };
            match (stem.parse::<i64>(), extension) {
                (Ok(base), "log") => bases.push(base),
                (Ok(offset), "snapshot") => snapshots.push(offset),
                (Ok(base), "index" | "timeindex") => indexes.push((base, entry.path())),
                _ => {}
            }
        }
        bases.sort_unstable();
        snapshots.sort_unstable();
        // Indexes without their log: a roll's renames cut short by a crash
        // (the log is renamed last).
        for (base, path) in indexes {
            if bases.binary_search(&base).is_err() {
                fs::remove_file(path)?;
            }
        }
        let mut segments = VecDeque::with_capacity(bases.len());
        let trusted = bases.len().saturating_sub(2);
        for (i, &base) in bases[..trusted].iter().enumerate() {
            let mut segment = Segment::open_closed(dir, base)?;
            segment.next = bases[i + 1];
            segments.push_back(segment);
        }
        match bases[trusted..] {
            [] => {
                // What a crash left half made is gone for good.
                sync_dir(dir)?;
                return Ok(Log::create(Place::Dir(dir.to_path_buf()), segment_bytes));
            }
            [last] => segments.push_back(Segment::recover(dir, last)?),
            [closed, last] => {
                // The closed segment's fsync may not have finished.
                let mut segment = Segment::recover(dir, closed)?;
                segment.seal()?;
                segment.files().sync()?;
                let follows = segment.next == last;
                segments.push_back(segment);
                if follows {
                    segments.push_back(Segment::recover(dir, last)?);
                } else {
                    // Its tail was lost: the last segment's offsets no
                    // longer follow, and it goes.
                    for extension in ["log", "index", "timeindex"] {
                        fs::remove_file(file_name(dir, last, extension))?;
                    }
                }
            }
            _ => unreachable!("at most two segments are recovered"),
        }
        let mut origin = 0;
        for segment in &mut segments {
            segment.origin = origin;
            origin += segment.size;
        }
        // What is durable from here on is what is on disk now: the last
        // segment (its recovered bytes, its cut) and the removals and
        // names of the directory.
        let last = segments.back_mut().expect("a segment at least");
        sync_file(&last.log_file())?;
        let (next, named) = (last.next, last.base);
        // A snapshot past what the crash left describes batches that are
        // gone: removed, lest the log grow past it again.
        for &offset in snapshots.iter().filter(|&&offset| offset > next) {
            fs::remove_file(snapshot_path(dir, offset))?;
        }
        snapshots.retain(|&offset| offset <= next);
        // The producers: the newest intact snapshot, then the batches after
        // it (none: every batch, from nothing known).
        let (from, mut producers) = snapshots
            .iter()
            .rev()
            .find_map(|&offset| Some((offset, read_snapshot(dir, offset)?)))
            .unwrap_or_default();
        let mut replay = |h: &BatchHeader, base| producers.appended(h, base);
        for segment in segments.iter().filter(|s| s.next > from) {
            segment.replay_from(from, &mut replay)?;
        }
        let mut log = Log::create(Place::Dir(dir.to_path_buf()), segment_bytes);
        log.segments = segments;
        log.producers = producers;
        log.snapshots = snapshots.into();
        sync_dir(dir)?;
        log.named = named;
        log.durable = next;
        Ok(log)
    }

    /// The next offset to assign (the high watermark).
    pub fn next(&self) -> i64 {
        self.segments.back().map_or(self.empty_at, |s| s.next)
    }

    /// The log start offset: the first offset still held.
    pub fn start(&self) -> i64 {
        self.segments.front().map_or(self.empty_at, |s| s.base)
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

    /// With `--data-dir`: offsets below this are on disk (fsynced).
    pub fn durable(&self) -> i64 {
        self.durable
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
    /// ([`AppendError::Failed`], answered KAFKA_STORAGE_ERROR), the durable
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

    /// What to read from `offset` on: the rest of the segment holding it
    /// (a fetch answer comes from one segment, as Kafka's does; the next
    /// fetch reads on).
    ///
    /// # Errors
    ///
    /// [`Unreadable::OutOfRange`] before the log start or past its end,
    /// [`Unreadable::Io`] if the index or log could not be read.
    pub fn slice(&self, offset: i64) -> Result<Slice, Unreadable> {
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

    /// The first record with a timestamp at or after `timestamp` (ms), as
    /// ListOffsets answers it: segments are skipped by their largest
    /// timestamp, then the segment's time index says where to start.
    ///
    /// # Errors
    ///
    /// A read failed, or the batch holding the record claims more bytes
    /// than its segment holds.
    pub fn offset_for_time(&self, timestamp: i64) -> io::Result<Option<Timed>> {
        for segment in &self.segments {
            if let Some(found) = segment.first_at_or_after(timestamp)? {
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

#[cfg(test)]
pub(super) mod tests {
    use super::super::batch::testing::{of, timed};
    use super::super::read::First;
    use super::super::roll::KEPT_SNAPSHOTS;
    use super::*;
    use std::os::unix::fs::FileExt;
    use std::path::PathBuf;

    /// A scratch directory, removed when dropped.
    pub(in crate::log) struct Scratch(pub(in crate::log) PathBuf);

    impl Scratch {
        pub(in crate::log) fn new(name: &str) -> Scratch {
            let dir =
                std::env::temp_dir().join(format!("pg-partition-{}-{name}", std::process::id()));
            let _ = fs::remove_dir_all(&dir);
            fs::create_dir_all(&dir).unwrap();
            Scratch(dir)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    /// Every batch read from `offset` on, one segment at a time.
    pub(in crate::log) fn read_all(log: &Log, mut offset: i64) -> Vec<i64> {
        let mut bases = Vec::new();
        while offset < log.next() {
            let bytes = log
                .slice(offset)
                .unwrap()
                .read(usize::MAX, First::Whole { max: usize::MAX })
                .unwrap();
            let mut at = 0;
            while at < bytes.len() {
                let batch = &bytes[at..];
                let base = i64::from_be_bytes(batch[..8].try_into().unwrap());
                bases.push(base);
                offset = base + last_delta(batch) + 1;
                at += super::super::batch::whole_len(batch).unwrap();
            }
        }
        bases
    }

    #[test]
    fn batches_roll_into_segments_and_read_back_across_them() {
        let dir = Scratch::new("roll");
        let mut log = Log::create(Place::Dir(dir.0.clone()), 1000);
        // No file until the first append.
        assert_eq!(log.segment_count(), 0);
        assert!(log
            .slice(0)
            .unwrap()
            .read(100, First::Whole { max: usize::MAX })
            .unwrap()
            .is_empty());
        assert!(fs::read_dir(&dir.0).unwrap().next().is_none());
        for _ in 0..100 {
            log.append_now(&of(3)).unwrap();
        }
        assert!(log.segment_count() > 5, "{} segments", log.segment_count());
        assert_eq!(log.next(), 300);
        let bases = read_all(&log, 0);
        assert_eq!(bases, (0..100).map(|i| i * 3).collect::<Vec<_>>());
        // From the middle of a batch: that batch.
        assert_eq!(read_all(&log, 151)[0], 150);
        assert!(matches!(log.slice(301), Err(Unreadable::OutOfRange)));
        // The bytes from an offset: a position once, then a subtraction.
        let from = log.position_of(297).unwrap().unwrap();
        assert_eq!(log.end_position() - from, of(3).len() as u64);
        let at_end = log.position_of(300).unwrap().unwrap();
        assert_eq!(log.end_position(), at_end);
        log.append_now(&of(2)).unwrap();
        assert_eq!(
            log.end_position() - from,
            (of(3).len() + of(2).len()) as u64
        );
        assert_eq!(log.position_of(303).unwrap(), None, "past the end");
        let bases = read_all(&log, 0);
        let reopened = Log::open(&dir.0, 1000).unwrap();
        assert_eq!(reopened.segment_count(), log.segment_count());
        assert_eq!(read_all(&reopened, 0), bases);
    }

    #[test]
    fn times_are_found_through_the_time_index_before_and_after_a_restart() {
        let dir = Scratch::new("time");
        let mut log = Log::create(Place::Dir(dir.0.clone()), 4000);
        // 200 batches of two records, timestamps 10 ms apart.
        for i in 0..200i64 {
            log.append_now(&timed(&[i * 20, i * 20 + 10])).unwrap();
        }
        let check = |log: &Log| {
            for ts in [0, 5, 10, 11, 1_234, 3_990, 3_991] {
                let found = log.offset_for_time(ts).unwrap().map(|t| t.offset);
                let expected = (ts + 9) / 10;
                assert_eq!(found, (expected < 400).then_some(expected), "at {ts}");
            }
            let max = log.offset_of_max_time().unwrap().unwrap();
            assert_eq!((max.offset, max.timestamp), (399, 3_990));
        };
        check(&log);
        drop(log);
        check(&Log::open(&dir.0, 4000).unwrap());
    }

    #[test]
    fn after_a_crash_the_indexes_written_and_the_batches_after_them_agree() {
        let dir = Scratch::new("crash");
        let mut log = Log::create(Place::Dir(dir.0.clone()), 8 << 20);
        // About 2.4 MB in one segment: some index entries written, the
        // newest pending in memory, lost with the process.
        for i in 0..30_000i64 {
            log.append_now(&timed(&[i * 2, i * 2 + 1])).unwrap();
        }
        let index = fs::metadata(file_name(&dir.0, 0, "index")).unwrap().len();
        assert!(index > 0 && index < 600 * 8, "{index} bytes of index");
        drop(log);
        let log = Log::open(&dir.0, 8 << 20).unwrap();
        assert_eq!(log.next(), 60_000);
        let max = log.offset_of_max_time().unwrap().unwrap();
        assert_eq!((max.offset, max.timestamp), (59_999, 59_999));
        for ts in [0, 1, 12_345, 40_000, 59_998, 59_999] {
            let found = log.offset_for_time(ts).unwrap().map(|t| t.offset);
            assert_eq!(found, Some(ts), "at {ts}");
        }
        assert_eq!(log.offset_for_time(60_000).unwrap(), None);
        assert_eq!(read_all(&log, 0).len(), 30_000);
    }

    #[test]
    fn a_torn_tail_is_cut_off_and_the_index_rebuilt() {
        let dir = Scratch::new("torn");
        let mut log = Log::create(Place::Dir(dir.0.clone()), 1 << 20);
        for i in 0..500i64 {
            log.append_now(&timed(&[i, i])).unwrap();
        }
        let size = log.size();
        drop(log);
        let path = file_name(&dir.0, 0, "log");
        let file = fs::OpenOptions::new().write(true).open(&path).unwrap();
        // Half of the last batch gone.
        file.set_len(size - 20).unwrap();
        let mut log = Log::open(&dir.0, 1 << 20).unwrap();
        assert_eq!(log.next(), 998);
        assert_eq!(log.append_now(&of(1)).unwrap(), 998);
        drop(log);
        // Garbage after the last batch: its CRC does not match.
        let size = fs::metadata(&path).unwrap().len();
        file.write_all_at(&timed(&[7, 7])[..70], size).unwrap();
        file.write_all_at(&[0xff; 10], size + 64).unwrap();
        let log = Log::open(&dir.0, 1 << 20).unwrap();
        assert_eq!(log.next(), 999);
        assert_eq!(fs::metadata(&path).unwrap().len(), size);
        // The torn batch (timestamp 499) is gone from the time index too.
        assert_eq!(
            log.offset_for_time(498).unwrap().map(|t| t.offset),
            Some(996)
        );
        assert_eq!(log.offset_for_time(499).unwrap(), None);
        assert_eq!(read_all(&log, 0).len(), 500);
    }

    #[test]
    fn producers_are_restored_from_the_last_snapshot_and_the_batches_after_it() {
        let dir = Scratch::new("producers");
        // Snapshots at each roll (every ~1 MiB) and every 128 KiB.
        let mut log = Log::create(Place::Dir(dir.0.clone()), 1 << 20);
        for seq in 0..40_000i32 {
            let mut batch = of(1);
            batch[43..51].copy_from_slice(&7i64.to_be_bytes());
            batch[53..57].copy_from_slice(&seq.to_be_bytes());
            let crc = crc32c::crc32c(&batch[21..]);
            batch[17..21].copy_from_slice(&crc.to_be_bytes());
            assert_eq!(
                log.producers.check(&BatchHeader::of(&batch)),
                crate::producers::Verdict::Append
            );
            log.append_now(&batch).unwrap();
        }
        assert!(log.segment_count() >= 2);
        let snapshots = fs::read_dir(&dir.0)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .path()
                    .extension()
                    .is_some_and(|x| x == "snapshot")
            })
            .count();
        assert_eq!(snapshots, KEPT_SNAPSHOTS);
        let expected = log.producers.snapshot();
        drop(log);
        // One past the log's end (what a crash can leave): not used, gone.
        let stale = snapshot_path(&dir.0, 1_000_000);
        fs::write(&stale, Producers::default().snapshot()).unwrap();
        let reopened = Log::open(&dir.0, 1 << 20).unwrap();
        assert_eq!(reopened.producers.snapshot(), expected);
        assert!(!stale.exists());
        // Without any snapshot, every batch is replayed: the same state.
        for e in fs::read_dir(&dir.0).unwrap() {
            let path = e.unwrap().path();
            if path.extension().is_some_and(|x| x == "snapshot") {
                fs::remove_file(path).unwrap();
            }
        }
        assert_eq!(
            Log::open(&dir.0, 1 << 20).unwrap().producers.snapshot(),
            expected
        );
    }

    /// The files of `dir`, sorted.
    pub(in crate::log) fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_roll_under_the_lock_only_installs_files_made_and_fsyncs_done_off_it() {
        let dir = Scratch::new("off-lock");
        let mut log = Log::create(Place::Dir(dir.0.clone()), 1000);
        // The first append makes no file: it waits for the work.
        assert!(matches!(log.append(&of(3)), Err(AppendError::Rolling)));
        assert!(names(&dir.0).is_empty());
        let work = log.take_work().expect("the first segment's files are due");
        assert!(log.take_work().is_none(), "one work at a time");
        // The work owns all it needs: it runs without the log (the lock).
        let done = std::thread::spawn(move || work.run()).join().unwrap();
        assert_eq!(
            names(&dir.0),
            ["spare.index.tmp", "spare.log.tmp", "spare.timeindex.tmp"]
        );
        assert!(log.finish(done));
        assert_eq!(log.append(&of(3)).unwrap(), 0);
        // Half full: the next segment's files are due; while they are
        // made, appends go on until one needs them.
        let mut appended = 3;
        let spare = loop {
            match log.take_work() {
                Some(work) if work.makes_spare() => break work,
                // The producers' snapshot, every eighth of a segment.
                Some(work) => assert!(log.finish(work.run())),
                None => {}
            }
            assert_eq!(log.append(&of(3)).unwrap(), appended);
            appended += 3;
        };
        let last = loop {
            match log.append(&of(3)) {
                Ok(base) => assert_eq!(base, appended),
                Err(e) => break e,
            }
            appended += 3;
        };
        assert!(matches!(last, AppendError::Rolling), "{last}");
        assert!(log.take_work().is_none(), "one work at a time");
        assert_eq!(log.segment_count(), 1);
        assert!(log.finish(spare.run()));
        // The roll: the spare installed under its base offset's names; the
        // closed segment is not yet durable: its fsync is the next work.
        assert_eq!(log.append(&of(3)).unwrap(), appended);
        assert_eq!(log.segment_count(), 2);
        let base = file_name(&dir.0, appended, "log");
        assert!(base.exists() && !dir.0.join("spare.log.tmp").exists());
        assert!(log.durable() < appended);
        // The group commit's fsync of the active segment must not pass the
        // closed one's.
        log.synced(appended, appended + 3);
        assert!(log.durable() < appended);
        let work = log.take_work().expect("the closed segment's fsync");
        assert!(!snapshot_path(&dir.0, appended).exists());
        assert_eq!(
            log.append(&of(3)).unwrap(),
            appended + 3,
            "appends go on meanwhile"
        );
        assert!(log.finish(work.run()));
        assert_eq!(log.durable(), appended + 3, "both fsyncs joined");
        assert!(
            snapshot_path(&dir.0, appended).exists(),
            "the roll's snapshot, written by the work"
        );
    }

    #[test]
    fn a_start_removes_what_a_crash_left_half_made() {
        let dir = Scratch::new("leftovers");
        let mut log = Log::create(Place::Dir(dir.0.clone()), 1 << 20);
        log.append_now(&of(2)).unwrap();
        drop(log);
        for leftover in [
            "00000000000000000002.snapshot.tmp",
            "spare.log.tmp",
            "spare.index.tmp",
        ] {
            fs::write(dir.0.join(leftover), b"half").unwrap();
        }
        // A roll's renames cut short: indexes without their log.
        fs::write(file_name(&dir.0, 9, "index"), b"").unwrap();
        fs::write(file_name(&dir.0, 9, "timeindex"), b"").unwrap();
        let log = Log::open(&dir.0, 1 << 20).unwrap();
        assert_eq!(log.next(), 2);
        assert_eq!(
            names(&dir.0),
            [
                "00000000000000000000.index",
                "00000000000000000000.log",
                "00000000000000000000.timeindex"
            ]
        );
    }

    #[test]
    fn a_closed_segment_that_lost_its_tail_takes_the_segment_after_it_along() {
        let dir = Scratch::new("lost-tail");
        let mut log = Log::create(Place::Dir(dir.0.clone()), 1000);
        for _ in 0..30 {
            log.append_now(&of(1)).unwrap();
        }
        let bases: Vec<i64> = log.segments.iter().map(|s| s.base).collect();
        assert!(bases.len() >= 3, "{bases:?}");
        drop(log);
        // A power loss before the closed segment's fsync: its last batch
        // is gone, so the active segment's offsets no longer follow.
        let closed = bases[bases.len() - 2];
        let path = file_name(&dir.0, closed, "log");
        let len = fs::metadata(&path).unwrap().len();
        let file = fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.set_len(len - 1).unwrap();
        let active = bases[bases.len() - 1];
        let log = Log::open(&dir.0, 1000).unwrap();
        assert_eq!(log.next(), active - 1);
        assert_eq!(log.segment_count(), bases.len() - 1);
        assert!(!file_name(&dir.0, active, "log").exists());
        assert_eq!(read_all(&log, 0), (0..active - 1).collect::<Vec<_>>());
    }
}
