//! A partition's log: its segments in offset order, the last one active
//! (appended to), rolled when it would pass `--segment-bytes`; the
//! idempotent producers' state; and what the group commit made durable.
//!
//! Memory per partition is its segments' few figures and descriptors and
//! the producers' state, whatever the bytes in the files. With
//! `--data-dir` the partition is a directory of segments
//! ([`super::segment`]) plus the last two producer snapshots
//! (`<offset>.snapshot`: the producers' state before that offset, written
//! when a segment rolls and every [`SNAPSHOT_INTERVAL`] bytes of log), so
//! that a start reads only the last segment's tail:
//!
//! | at start | read |
//! |---|---|
//! | each closed segment | its files' lengths and its time index's last entry |
//! | the last segment | from its last valid offset-index entry on, batch by batch (length, offsets, CRC); a torn tail is cut off |
//! | the producers | the last snapshot, then the headers of the batches after it (at most [`SNAPSHOT_INTERVAL`] of log) |

use std::collections::VecDeque;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::batch::{last_delta, BatchHeader, Timed};
use super::read::Slice;
use super::segment::{file_name, Place, Segment};
use crate::producers::Producers;

/// The most bytes of log between two snapshots of the producers (an
/// eighth of a segment if that is less): what a start replays at most.
pub const SNAPSHOT_INTERVAL: u64 = 64 * 1024 * 1024;

/// How many snapshots a partition keeps (the newest may be past the end
/// of what a crash left).
const KEPT_SNAPSHOTS: usize = 2;

/// Why a read could not be served.
#[derive(Debug)]
pub enum Unreadable {
    /// The offset is before the log start or past its end.
    OutOfRange,
    /// The files could not be read.
    Io(io::Error),
}

impl From<io::Error> for Unreadable {
    fn from(e: io::Error) -> Unreadable {
        Unreadable::Io(e)
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
    place: Place,
    /// The size past which the active segment rolls, bytes.
    segment_bytes: u64,
    /// Its idempotent producers' sequences.
    pub producers: Producers,
    /// With `--data-dir`: the offsets of its snapshot files, oldest first.
    snapshots: VecDeque<i64>,
    /// Bytes appended since the last snapshot.
    since_snapshot: u64,
    /// With `--data-dir`: offsets below this are on disk (fsynced).
    pub durable: i64,
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
            durable: 0,
        }
    }

    /// The log in the partition directory `dir` (see the module's table of
    /// what a start reads); an empty directory is an empty log.
    ///
    /// # Errors
    ///
    /// A file could not be listed, opened, read or cut.
    pub fn open(dir: &Path, segment_bytes: u64) -> io::Result<Log> {
        let (mut bases, mut snapshots) = (Vec::new(), Vec::new());
        for entry in fs::read_dir(dir)? {
            let name = entry?.file_name();
            let Some((stem, extension)) = name.to_str().and_then(|n| n.split_once('.')) else {
                continue;
            };
            match (stem.parse::<i64>(), extension) {
                (Ok(base), "log") => bases.push(base),
                (Ok(offset), "snapshot") => snapshots.push(offset),
                _ => {}
            }
        }
        bases.sort_unstable();
        snapshots.sort_unstable();
        let Some((&last, closed)) = bases.split_last() else {
            return Ok(Log::create(Place::Dir(dir.to_path_buf()), segment_bytes));
        };
        let mut segments = VecDeque::with_capacity(bases.len());
        for (i, &base) in closed.iter().enumerate() {
            let mut segment = Segment::open_closed(dir, base)?;
            segment.next = bases[i + 1];
            segments.push_back(segment);
        }
        segments.push_back(Segment::recover(dir, last)?);
        let next = segments.back().map_or(0, |s| s.next);
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
        Ok(Log {
            segments,
            empty_at: 0,
            place: Place::Dir(dir.to_path_buf()),
            segment_bytes,
            producers,
            snapshots: snapshots.into(),
            since_snapshot: 0,
            durable: next,
        })
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

    /// Appends `batch` (whole, checked, and admitted by
    /// [`Producers::check`]) at the next offset, rolling first if the
    /// active segment would pass `--segment-bytes` (or its offsets could no
    /// longer be relative ones), and records it in the producers' state;
    /// returns its base offset.
    ///
    /// # Errors
    ///
    /// A write, or a roll's fsync or file creation, failed; the log is as
    /// it was.
    pub fn append(&mut self, batch: &[u8]) -> io::Result<i64> {
        let base = self.next();
        match self.segments.back() {
            None => self.segments.push_back(Segment::create(&self.place, base)?),
            Some(active)
                if active.size > 0
                    && (active.size + batch.len() as u64 > self.segment_bytes
                        || base + last_delta(batch) - active.base > i64::from(i32::MAX)) =>
            {
                self.roll()?;
            }
            Some(_) if self.since_snapshot >= (self.segment_bytes / 8).min(SNAPSHOT_INTERVAL) => {
                self.snapshot()?;
            }
            Some(_) => {}
        }
        let mut stored = batch.to_vec();
        stored[..8].copy_from_slice(&base.to_be_bytes());
        self.segments
            .back_mut()
            .expect("a log has a segment")
            .append(&stored)?;
        self.since_snapshot += stored.len() as u64;
        self.producers.appended(&BatchHeader::of(batch), base);
        Ok(base)
    }

    /// With `--data-dir`, writes the producers' state before the next
    /// offset, and removes all but the newest [`KEPT_SNAPSHOTS`].
    fn snapshot(&mut self) -> io::Result<()> {
        self.since_snapshot = 0;
        let Place::Dir(dir) = &self.place else {
            return Ok(());
        };
        let next = self.next();
        write_snapshot(dir, next, &self.producers)?;
        if self.snapshots.back() != Some(&next) {
            self.snapshots.push_back(next);
        }
        while self.snapshots.len() > KEPT_SNAPSHOTS {
            if let Some(old) = self.snapshots.pop_front() {
                // A leftover file costs a few bytes; the next start ignores
                // it unless it is the newest.
                let _ = fs::remove_file(snapshot_path(dir, old));
            }
        }
        Ok(())
    }

    /// Closes the active segment (fsynced), snapshots the producers, and
    /// starts a new segment at the next offset.
    fn roll(&mut self) -> io::Result<()> {
        let next = self.next();
        self.segments
            .back_mut()
            .expect("a log has a segment")
            .close()?;
        self.snapshot()?;
        self.segments.push_back(Segment::create(&self.place, next)?);
        // Everything before the new segment was fsynced as its segment
        // closed.
        self.durable = self.durable.max(next);
        Ok(())
    }

    /// The active segment's file and the offset a sync of it covers (what
    /// is appended now): the group commit's target (`None` before the
    /// first append).
    pub fn sync_target(&self) -> Option<(Arc<File>, i64)> {
        let active = self.segments.back()?;
        Some((active.log_file(), active.next))
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

    /// Bytes available from `offset` on (0 outside the log, or if the
    /// index cannot be read).
    pub fn bytes_from(&self, offset: i64) -> u64 {
        if offset >= self.next() || offset < self.start() {
            return 0;
        }
        let i = self.segments.partition_point(|s| s.base <= offset) - 1;
        let later: u64 = self.segments.iter().skip(i + 1).map(|s| s.size).sum();
        let holding = &self.segments[i];
        holding
            .position_of(offset)
            .map_or(0, |pos| holding.size - pos + later)
    }

    /// The first record with a timestamp at or after `timestamp` (ms), as
    /// ListOffsets answers it: segments are skipped by their largest
    /// timestamp, then the segment's time index says where to start.
    ///
    /// # Errors
    ///
    /// A read failed.
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
    /// A read failed.
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
        best.map_or(Ok(None), Segment::record_of_max_time)
    }
}

/// The snapshot file of the producers' state before `offset`.
fn snapshot_path(dir: &Path, offset: i64) -> PathBuf {
    file_name(dir, offset, "snapshot")
}

/// Writes the producers' state before `offset`: to a temporary file, then
/// renamed, so a snapshot is whole or absent (a start ignores one past
/// what the log holds, and one whose CRC does not match).
fn write_snapshot(dir: &Path, offset: i64, producers: &Producers) -> io::Result<()> {
    let path = snapshot_path(dir, offset);
    let tmp = path.with_extension("snapshot.tmp");
    let mut file = File::create(&tmp)?;
    file.write_all(&producers.snapshot())?;
    // On disk before its name: after a crash the name never points at a
    // partial file.
    file.sync_data()?;
    fs::rename(&tmp, &path)
}

/// The producers' state before `offset`, if its snapshot is there and
/// intact.
fn read_snapshot(dir: &Path, offset: i64) -> Option<Producers> {
    Producers::from_snapshot(&fs::read(snapshot_path(dir, offset)).ok()?)
}

#[cfg(test)]
mod tests {
    use super::super::batch::testing::{of, timed};
    use super::*;
    use std::os::unix::fs::FileExt;

    /// A scratch directory, removed when dropped.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Scratch {
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
    fn read_all(log: &Log, mut offset: i64) -> Vec<i64> {
        let mut bases = Vec::new();
        while offset < log.next() {
            let bytes = log.slice(offset).unwrap().read(usize::MAX, true).unwrap();
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
        assert!(log.slice(0).unwrap().read(100, true).unwrap().is_empty());
        assert!(fs::read_dir(&dir.0).unwrap().next().is_none());
        for _ in 0..100 {
            log.append(&of(3)).unwrap();
        }
        assert!(log.segment_count() > 5, "{} segments", log.segment_count());
        assert_eq!(log.next(), 300);
        let bases = read_all(&log, 0);
        assert_eq!(bases, (0..100).map(|i| i * 3).collect::<Vec<_>>());
        // From the middle of a batch: that batch.
        assert_eq!(read_all(&log, 151)[0], 150);
        assert!(matches!(log.slice(301), Err(Unreadable::OutOfRange)));
        assert_eq!(log.bytes_from(297), of(3).len() as u64);
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
            log.append(&timed(&[i * 20, i * 20 + 10])).unwrap();
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
            log.append(&timed(&[i * 2, i * 2 + 1])).unwrap();
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
            log.append(&timed(&[i, i])).unwrap();
        }
        let size = log.size();
        drop(log);
        let path = file_name(&dir.0, 0, "log");
        let file = fs::OpenOptions::new().write(true).open(&path).unwrap();
        // Half of the last batch gone.
        file.set_len(size - 20).unwrap();
        let mut log = Log::open(&dir.0, 1 << 20).unwrap();
        assert_eq!(log.next(), 998);
        assert_eq!(log.append(&of(1)).unwrap(), 998);
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
            log.append(&batch).unwrap();
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
}
