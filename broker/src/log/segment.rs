//! A segment: one log file of record batches as they arrived on the wire
//! (base offsets rewritten), named by its base offset, with its sparse
//! offset and time indexes ([`super::index`]) written as it grows.
//!
//! ```text
//! <partition dir>/00000000000000004096.log        the batches
//!                 00000000000000004096.index      relative offset → position
//!                 00000000000000004096.timeindex  max timestamp so far → relative offset
//! ```
//!
//! In memory a segment holds its files and a few figures (size, next
//! offset, largest timestamp); every read is a positioned read of the
//! files, which the page cache serves. A segment's files are made ahead
//! of the roll that needs them, as a [`Spare`] (off the partition's lock);
//! a closed segment is fsynced after it closed, off the lock too, before
//! the next spare is made, so that at most the segment before the active
//! one may not be on disk. At start the older closed segments are trusted
//! as they are, and the last two are recovered from their last valid
//! index entry on ([`Segment::recover`]).

use std::fs::{File, OpenOptions};
use std::io::{self, IoSlice};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::batch::{
    self, base_offset, last_delta, max_timestamp, BatchHeader, Timed, BATCH_HEADER,
};
use super::index::{OffsetEntry, OffsetIndex, TimeEntry, TimeIndex, INDEX_INTERVAL};
use super::read::{Found, Reader, Slice};
use super::sync::sync_file;

/// Bytes of log after which a segment writes its pending index entries
/// (at most 64 of them): one index write per 256 KiB of log rather than
/// per batch. A crash loses at most these entries; recovery rebuilds them
/// by checking that much log again.
const INDEX_FLUSH_BYTES: u64 = 64 * INDEX_INTERVAL;

/// Where a partition's segment files are made.
#[derive(Clone, Debug)]
pub enum Place {
    /// Named files in this directory (`--data-dir`), kept.
    Dir(PathBuf),
    /// Files in this directory unlinked as soon as they are made (no
    /// `--data-dir`): only the broker's descriptors hold them, so the
    /// kernel frees them when a segment is deleted or the broker exits,
    /// even by SIGKILL.
    Anonymous(PathBuf),
}

/// A counter making anonymous files' names unique in this process.
static ANONYMOUS: AtomicU64 = AtomicU64::new(0);

/// The extensions of a segment's files, the log last: a roll renames a
/// spare's files in this order, so a start that finds a segment's log
/// finds its indexes too.
const EXTENSIONS: [&str; 3] = ["index", "timeindex", "log"];

impl Place {
    /// A fresh, empty file named `name` (with `--data-dir`, in the
    /// directory; without, unlinked at once).
    fn fresh(&self, name: &str) -> io::Result<File> {
        match self {
            Place::Dir(dir) => OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(dir.join(name)),
            Place::Anonymous(dir) => {
                let n = ANONYMOUS.fetch_add(1, Ordering::Relaxed);
                let path = dir.join(format!(
                    ".purgatorio-broker-{}-{n}.{name}",
                    std::process::id()
                ));
                let file = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create_new(true)
                    .open(&path)?;
                std::fs::remove_file(&path)?;
                Ok(file)
            }
        }
    }

    /// The next segment's files, made now (off the partition's lock) and
    /// named when a roll installs them ([`Segment::install`]). With
    /// `--data-dir` they are `spare.<extension>.tmp` until then: a crash
    /// leaves at most those, which a start removes.
    ///
    /// # Errors
    ///
    /// A file could not be made.
    pub fn spare(&self) -> io::Result<Spare> {
        let [index, timeindex, log] = EXTENSIONS.map(|extension| format!("spare.{extension}.tmp"));
        Ok(Spare {
            index: self.fresh(&index)?,
            timeindex: self.fresh(&timeindex)?,
            log: self.fresh(&log)?,
            dir: match self {
                Place::Dir(dir) => Some(dir.clone()),
                Place::Anonymous(_) => None,
            },
        })
    }
}

/// A segment's files made ahead of the roll that needs them.
#[derive(Debug)]
pub struct Spare {
    /// The offset index.
    index: File,
    /// The time index.
    timeindex: File,
    /// The log.
    log: File,
    /// With `--data-dir`: the directory holding them under temporary names.
    dir: Option<PathBuf>,
}

/// A closed segment's files, for its fsync off the partition's lock.
#[derive(Clone, Debug)]
pub struct SegmentFiles {
    /// The log.
    log: Arc<File>,
    /// The time index.
    times: Arc<File>,
    /// The offset index.
    offsets: Arc<File>,
}

impl SegmentFiles {
    /// Fsyncs them: the log, then the time index, then the offset index
    /// (the order in which a segment writes them).
    ///
    /// # Errors
    ///
    /// An fsync failed.
    pub fn sync(&self) -> io::Result<()> {
        sync_file(&self.log)?;
        sync_file(&self.times)?;
        sync_file(&self.offsets)
    }
}

/// Batches longer than this are read whole only once their CRC, streamed,
/// matches: a corrupt length costs no buffer of its size.
const READ_WHOLE_FROM: u64 = 1 << 20;

/// The batch `found` read whole, for a lookup by time: a long one only once
/// its CRC matches.
fn checked_batch(reader: &mut Reader<'_>, found: &Found) -> io::Result<Vec<u8>> {
    if found.len > READ_WHOLE_FROM && !reader.crc_matches(found.pos, found.len, &found.header)? {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "the {}-byte batch at {} does not match its CRC",
                found.len, found.pos
            ),
        ));
    }
    reader.batch(found.pos, found.len as usize)
}

#[cfg(test)]
impl Place {
    /// A fresh file, for tests of reading.
    pub fn create_for_test(&self) -> io::Result<File> {
        self.fresh("test.log")
    }
}

/// The path of segment `base`'s file with `extension` in `dir`.
pub fn file_name(dir: &Path, base: i64, extension: &str) -> PathBuf {
    dir.join(format!("{base:020}.{extension}"))
}

/// The record with the largest timestamp so far, by its batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MaxTime {
    /// The timestamp, ms.
    pub timestamp: i64,
    /// The base offset of the batch holding it (the first such batch).
    pub batch: i64,
}

/// One segment.
#[derive(Debug)]
pub struct Segment {
    /// The offset of its first record.
    pub base: i64,
    /// The offset after its last record.
    pub next: i64,
    /// Its bytes of log.
    pub size: u64,
    /// Where its first byte sits in the partition's bytes, counted from
    /// the log start at the partition's opening (what a parked fetch
    /// measures available bytes with).
    pub origin: u64,
    /// The log file, shared with reads in flight (a deleted segment's
    /// file stays readable until they finish).
    log: Arc<File>,
    /// The offset index.
    offsets: OffsetIndex,
    /// The time index.
    times: TimeIndex,
    /// Its largest timestamp, once it holds a batch.
    pub max_time: Option<MaxTime>,
    /// The timestamp of the time index's last entry (`i64::MIN`: none).
    last_time_entry: i64,
    /// Bytes appended since the last offset-index entry.
    since_index: u64,
    /// Bytes appended since the index entries were last written.
    since_flush: u64,
    /// With `--data-dir`: its directory, to delete its files.
    dir: Option<PathBuf>,
}

/// Opens segment `base`'s existing file with `extension` in `dir`.
fn open_file(dir: &Path, base: i64, extension: &str) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(file_name(dir, base, extension))
}

impl Segment {
    /// The new, empty segment starting at `base`, of `spare`'s files:
    /// with `--data-dir` they are renamed to `base`'s names, the log last.
    ///
    /// # Errors
    ///
    /// A rename failed (the spare is spent; a start removes what is left).
    pub fn install(spare: Spare, base: i64) -> io::Result<Segment> {
        if let Some(dir) = &spare.dir {
            for extension in EXTENSIONS {
                std::fs::rename(
                    dir.join(format!("spare.{extension}.tmp")),
                    file_name(dir, base, extension),
                )?;
            }
        }
        Ok(Segment {
            base,
            next: base,
            size: 0,
            origin: 0,
            log: Arc::new(spare.log),
            offsets: OffsetIndex::open(spare.index)?,
            times: TimeIndex::open(spare.timeindex)?,
            max_time: None,
            last_time_entry: i64::MIN,
            since_index: 0,
            since_flush: 0,
            dir: spare.dir,
        })
    }

    /// A closed segment of `dir` (fsynced after it closed, before the
    /// segment after the next was made): its figures come from the files'
    /// lengths and the time index's last entry, nothing is scanned; `next`
    /// is set by the caller (the next segment's base). A segment whose time
    /// index is missing is recovered instead.
    ///
    /// # Errors
    ///
    /// A file could not be opened or read.
    pub fn open_closed(dir: &Path, base: i64) -> io::Result<Segment> {
        let mut segment = Segment::open(dir, base)?;
        match segment.times.last()? {
            Some(last) => {
                segment.max_time = Some(MaxTime {
                    timestamp: last.timestamp,
                    batch: base + i64::from(last.relative),
                });
                segment.last_time_entry = last.timestamp;
                Ok(segment)
            }
            None if segment.size == 0 => Ok(segment),
            None => {
                let mut segment = Segment::recover(dir, base)?;
                segment.seal()?;
                segment.files().sync()?;
                Ok(segment)
            }
        }
    }

    /// A segment's files opened as they are.
    fn open(dir: &Path, base: i64) -> io::Result<Segment> {
        let log = open_file(dir, base, "log")?;
        let size = log.metadata()?.len();
        Ok(Segment {
            base,
            next: base,
            size,
            origin: 0,
            log: Arc::new(log),
            offsets: OffsetIndex::open(open_file(dir, base, "index")?)?,
            times: TimeIndex::open(open_file(dir, base, "timeindex")?)?,
            max_time: None,
            last_time_entry: i64::MIN,
            since_index: 0,
            since_flush: 0,
            dir: Some(dir.to_path_buf()),
        })
    }

    /// The last segment of `dir`, after a crash or a stop: the scan starts
    /// at the last offset-index entry that points at a batch with its
    /// offset, checks every batch from there (length, offsets, CRC),
    /// rebuilds the index entries after it and cuts off a torn or corrupt
    /// tail: the work is at most [`INDEX_FLUSH_BYTES`] and a batch (the
    /// entries a crash lost), unless the index itself was lost.
    ///
    /// # Errors
    ///
    /// A file could not be opened, read or cut.
    pub fn recover(dir: &Path, base: i64) -> io::Result<Segment> {
        let mut segment = Segment::open(dir, base)?;
        let file_len = segment.size;
        let log = Arc::clone(&segment.log);
        let mut reader = Reader::new(&log, file_len);
        // The resume point: the last index entry that holds.
        let mut kept = segment.offsets.len();
        let mut resume = OffsetEntry {
            relative: 0,
            position: 0,
        };
        while kept > 0 {
            let entry = segment.offsets.get(kept - 1)?;
            let holds = reader
                .header(u64::from(entry.position))?
                .is_some_and(|h| base_offset(&h) == base + i64::from(entry.relative));
            if holds {
                resume = entry;
                break;
            }
            kept -= 1;
        }
        segment.offsets.truncate(kept)?;
        let resume_offset = base + i64::from(resume.relative);
        // Time entries name the batch holding their timestamp; those of
        // batches from the resume point on are rebuilt by the scan.
        let mut times_kept = segment.times.len();
        while times_kept > 0
            && base + i64::from(segment.times.get(times_kept - 1)?.relative) >= resume_offset
        {
            times_kept -= 1;
        }
        segment.times.truncate(times_kept)?;
        if let Some(last) = segment.times.last()? {
            segment.max_time = Some(MaxTime {
                timestamp: last.timestamp,
                batch: base + i64::from(last.relative),
            });
            segment.last_time_entry = last.timestamp;
        }
        // From the resume point: every batch checked, indexed again.
        segment.size = u64::from(resume.position);
        segment.next = resume_offset;
        let mut walk = reader.walk(segment.size);
        while let Some(found) = walk.next() {
            let found = found?;
            let sound = found.end() <= file_len
                && found.header[16] == 2
                && last_delta(&found.header) >= 0
                && found.base() == segment.next
                && walk
                    .reader()
                    .crc_matches(found.pos, found.len, &found.header)?;
            if !sound {
                break;
            }
            segment.indexed(found.pos, found.base(), &found.header, found.len)?;
            segment.next = found.last() + 1;
            segment.size = found.end();
        }
        drop(walk);
        if segment.size < file_len {
            segment.log.set_len(segment.size)?;
        }
        Ok(segment)
    }

    /// Appends `batch` (whole) with its base offset rewritten to `base`
    /// (the segment's next offset), written from the caller's buffer.
    ///
    /// # Errors
    ///
    /// A write failed (the segment is as it was, but for a torn tail that
    /// the next append overwrites).
    pub fn append(&mut self, batch: &[u8], base: i64) -> io::Result<()> {
        debug_assert_eq!(base, self.next, "appended out of order");
        let pos = self.size;
        // The bytes first: a failed write (a full disk) leaves the indexes
        // and the largest timestamp as they were.
        write_rebased(&self.log, batch, base, pos)?;
        self.indexed(pos, base, batch, batch.len() as u64)?;
        self.size = pos + batch.len() as u64;
        self.next = base + last_delta(batch) + 1;
        Ok(())
    }

    /// Updates the indexes and figures for the `len`-byte batch at `pos`
    /// with base offset `base` and this header, once its bytes are in the
    /// file: an index entry every [`INDEX_INTERVAL`] bytes.
    fn indexed(&mut self, pos: u64, base: i64, header: &[u8], len: u64) -> io::Result<()> {
        if self.since_index >= INDEX_INTERVAL {
            // The time entry first: at recovery, the time entries of
            // batches before a valid offset entry are kept.
            self.time_entry();
            self.offsets.push(OffsetEntry {
                relative: self.relative(base),
                position: u32::try_from(pos).map_err(io::Error::other)?,
            });
            self.since_index = 0;
            if self.since_flush >= INDEX_FLUSH_BYTES {
                // The time entries first, and both together: on disk, the
                // time index covers every batch before the offset index's
                // last entry, which recovery relies on.
                self.times.flush()?;
                self.offsets.flush()?;
                self.since_flush = 0;
            }
        }
        self.since_index += len;
        self.since_flush += len;
        let timestamp = max_timestamp(header);
        if self.max_time.is_none_or(|m| timestamp > m.timestamp) {
            self.max_time = Some(MaxTime {
                timestamp,
                batch: base,
            });
        }
        Ok(())
    }

    /// Appends a time entry if the largest timestamp grew since the last.
    fn time_entry(&mut self) {
        if let Some(max) = self.max_time.filter(|m| m.timestamp > self.last_time_entry) {
            self.times.push(TimeEntry {
                timestamp: max.timestamp,
                relative: self.relative(max.batch),
            });
            self.last_time_entry = max.timestamp;
        }
    }

    /// `offset` relative to the base (the partition rolls before the
    /// difference could pass `i32::MAX`).
    fn relative(&self, offset: i64) -> u32 {
        debug_assert!(
            (0..=i64::from(i32::MAX)).contains(&(offset - self.base)),
            "offset {offset} in the segment at {}",
            self.base
        );
        (offset - self.base) as u32
    }

    /// Closes it (a new segment follows): the time index gets its largest
    /// timestamp and both indexes their pending entries, written, not
    /// fsynced ([`SegmentFiles::sync`] does that off the partition's
    /// lock). Writing again what is written is harmless, so a failed seal
    /// may be tried again.
    ///
    /// # Errors
    ///
    /// A write failed.
    pub fn seal(&mut self) -> io::Result<()> {
        self.time_entry();
        // The time index first, as when pending entries are written.
        self.times.flush()?;
        self.offsets.flush()
    }

    /// Its files, for an fsync off the partition's lock.
    pub fn files(&self) -> SegmentFiles {
        SegmentFiles {
            log: Arc::clone(&self.log),
            times: self.times.file(),
            offsets: self.offsets.file(),
        }
    }

    /// The log file, for the group commit's fsync.
    pub fn log_file(&self) -> Arc<File> {
        Arc::clone(&self.log)
    }

    /// The position of the batch holding `offset` (or the end, if none).
    ///
    /// # Errors
    ///
    /// A read failed.
    pub fn position_of(&self, offset: i64) -> io::Result<u64> {
        if offset >= self.next {
            return Ok(self.size);
        }
        let relative = self.relative(offset.max(self.base));
        let from = self
            .offsets
            .floor(relative)?
            .map_or(0, |e| u64::from(e.position));
        for found in Reader::new(&self.log, self.size).walk(from) {
            let found = found?;
            if found.last() >= offset {
                return Ok(found.pos);
            }
        }
        Ok(self.size)
    }

    /// Calls `each(header, base)` for every batch from the one holding
    /// `offset` on, in order (the idempotent producers' replay after their
    /// last snapshot).
    ///
    /// # Errors
    ///
    /// A read failed.
    pub fn replay_from(
        &self,
        offset: i64,
        each: &mut dyn FnMut(&BatchHeader, i64),
    ) -> io::Result<()> {
        let from = self.position_of(offset.max(self.base))?;
        for found in Reader::new(&self.log, self.size).walk(from) {
            let found = found?;
            each(&BatchHeader::of(&found.header), found.base());
        }
        Ok(())
    }

    /// What there is to read from the batch holding `offset` on.
    ///
    /// # Errors
    ///
    /// A read of the index or the log failed.
    pub fn slice_from(&self, offset: i64) -> io::Result<Slice> {
        Ok(Slice {
            file: Some(Arc::clone(&self.log)),
            start: self.position_of(offset)?,
            end: self.size,
        })
    }

    /// The first record at or after `timestamp` whose offset is at least
    /// `from` (the log start), if this segment holds one:
    /// the time index says which batch to start at, the batches' max
    /// timestamps which one holds it, its records which record (a batch is
    /// read whole, its length bounded by the segment's).
    ///
    /// # Errors
    ///
    /// A read failed, or the batch holding the record claims more bytes
    /// than the segment holds after it.
    pub fn first_at_or_after(&self, timestamp: i64, from: i64) -> io::Result<Option<Timed>> {
        if self.max_time.is_none_or(|m| m.timestamp < timestamp) {
            return Ok(None);
        }
        let start = self
            .times
            .below(timestamp)?
            .map_or(self.base, |e| self.base + i64::from(e.relative))
            .max(from);
        let mut walk = Reader::new(&self.log, self.size).walk(self.position_of(start)?);
        while let Some(found) = walk.next() {
            let found = found?;
            if found.max_timestamp() >= timestamp && found.last() >= from {
                let whole = checked_batch(walk.reader(), &found)?;
                if let Some(timed) = batch::first_at_or_after(&whole, timestamp, from) {
                    return Ok(Some(timed));
                }
            }
        }
        Ok(None)
    }

    /// The record holding its largest timestamp (its batch read whole only
    /// whole, its length bounded by the segment's).
    ///
    /// # Errors
    ///
    /// A read failed, or the batch claims more bytes than the segment
    /// holds after it.
    pub fn record_of_max_time(&self) -> io::Result<Option<Timed>> {
        let Some(max) = self.max_time else {
            return Ok(None);
        };
        let mut walk = Reader::new(&self.log, self.size).walk(self.position_of(max.batch)?);
        let Some(found) = walk.next().transpose()? else {
            return Ok(None);
        };
        let whole = checked_batch(walk.reader(), &found)?;
        Ok(Some(batch::record_of_max_time(&whole)))
    }

    /// Removes its files (with `--data-dir`; an anonymous segment's are
    /// freed with its descriptors). Reads in flight keep the log readable.
    ///
    /// # Errors
    ///
    /// A file could not be removed.
    pub fn delete(self) -> io::Result<()> {
        if let Some(dir) = &self.dir {
            for extension in ["log", "index", "timeindex", "snapshot"] {
                match std::fs::remove_file(file_name(dir, self.base, extension)) {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                    _ => {}
                }
            }
        }
        Ok(())
    }
}

/// Writes `batch` at `pos` of `file` with its base offset replaced by
/// `base`, from the caller's buffer (no copy of the batch): one `pwritev`
/// of the new base offset and the rest, continued if the kernel writes
/// less.
fn write_rebased(file: &File, batch: &[u8], base: i64, pos: u64) -> io::Result<()> {
    debug_assert!(batch.len() >= BATCH_HEADER, "a {}-byte batch", batch.len());
    let base = base.to_be_bytes();
    let mut done = 0usize;
    while done < batch.len() {
        let at = pos + done as u64;
        let written = match batch.get(done.max(base.len())..) {
            Some(rest) if done < base.len() => {
                rustix::io::pwritev(file, &[IoSlice::new(&base[done..]), IoSlice::new(rest)], at)
            }
            _ => rustix::io::pwrite(file, &batch[done..], at),
        };
        match written {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => done += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}
