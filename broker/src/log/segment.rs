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
//! files, which the page cache serves. A closed segment was fsynced when
//! it closed and its files are trusted at start; the active one is
//! recovered from its last valid index entry on ([`Segment::recover`]).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::batch::{
    self, base_offset, last_delta, max_timestamp, whole_len, BatchHeader, Timed, BATCH_HEADER,
    LENGTH_PREFIX,
};
use super::index::{OffsetEntry, OffsetIndex, TimeEntry, TimeIndex, INDEX_INTERVAL};

/// Bytes of log after which a segment writes its pending index entries
/// (at most 64 of them): one index write per 256 KiB of log rather than
/// per batch. A crash loses at most these entries; recovery rebuilds them
/// by checking that much log again.
const INDEX_FLUSH_BYTES: u64 = 64 * INDEX_INTERVAL;
use super::read::{Reader, Slice};

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

impl Place {
    /// A fresh, empty file for segment `base`'s `extension`.
    fn create(&self, base: i64, extension: &str) -> io::Result<File> {
        match self {
            Place::Dir(dir) => OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(file_name(dir, base, extension)),
            Place::Anonymous(dir) => {
                let n = ANONYMOUS.fetch_add(1, Ordering::Relaxed);
                let path = dir.join(format!(
                    ".purgatorio-broker-{}-{n}.{extension}",
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
}

#[cfg(test)]
impl Place {
    /// A fresh file, for tests of reading.
    pub fn create_for_test(&self) -> io::Result<File> {
        self.create(0, "log")
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
    /// A new, empty segment starting at `base`.
    ///
    /// # Errors
    ///
    /// A file could not be made.
    pub fn create(place: &Place, base: i64) -> io::Result<Segment> {
        Ok(Segment {
            base,
            next: base,
            size: 0,
            log: Arc::new(place.create(base, "log")?),
            offsets: OffsetIndex::open(place.create(base, "index")?)?,
            times: TimeIndex::open(place.create(base, "timeindex")?)?,
            max_time: None,
            last_time_entry: i64::MIN,
            since_index: 0,
            since_flush: 0,
            dir: match place {
                Place::Dir(dir) => Some(dir.clone()),
                Place::Anonymous(_) => None,
            },
        })
    }

    /// A closed segment of `dir` (fsynced when it closed): its figures come
    /// from the files' lengths and the time index's last entry, nothing is
    /// scanned; `next` is set by the caller (the next segment's base). A
    /// segment whose time index is missing is recovered instead.
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
                segment.close()?;
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
        let (mut pos, mut next) = (u64::from(resume.position), resume_offset);
        segment.size = pos;
        segment.next = next;
        while let Some(header) = reader.header(pos)? {
            let Some(len) = whole_len(&header).map(|n| n as u64) else {
                break;
            };
            let sound = len >= BATCH_HEADER as u64
                && pos + len <= file_len
                && header[16] == 2
                && last_delta(&header) >= 0
                && base_offset(&header) == next
                && reader.crc_matches(pos, len, &header)?;
            if !sound {
                break;
            }
            segment.indexed(pos, &header, len)?;
            next += last_delta(&header) + 1;
            pos += len;
            segment.size = pos;
            segment.next = next;
        }
        drop(reader);
        if segment.size < file_len {
            segment.log.set_len(segment.size)?;
        }
        Ok(segment)
    }

    /// Appends `batch` (whole, its base offset rewritten to `next`).
    ///
    /// # Errors
    ///
    /// A write failed (the segment is as it was, but for a torn tail that
    /// the next append overwrites).
    pub fn append(&mut self, batch: &[u8]) -> io::Result<()> {
        debug_assert_eq!(base_offset(batch), self.next, "appended out of order");
        let pos = self.size;
        // The bytes first: a failed write (a full disk) leaves the indexes
        // and the largest timestamp as they were.
        self.log.write_all_at(batch, pos)?;
        self.indexed(pos, batch, batch.len() as u64)?;
        self.size = pos + batch.len() as u64;
        self.next = base_offset(batch) + last_delta(batch) + 1;
        Ok(())
    }

    /// Updates the indexes and figures for the `len`-byte batch at `pos`
    /// with this header, once its bytes are in the file: an index entry
    /// every [`INDEX_INTERVAL`] bytes.
    fn indexed(&mut self, pos: u64, header: &[u8], len: u64) -> io::Result<()> {
        let base = base_offset(header);
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
    /// timestamp, and its files are fsynced, so that at start its files
    /// are trusted as they are.
    ///
    /// # Errors
    ///
    /// A write or an fsync failed.
    pub fn close(&mut self) -> io::Result<()> {
        self.time_entry();
        if self.dir.is_some() {
            self.log.sync_data()?;
            // The time index first, as when pending entries are written.
            self.times.sync()?;
            self.offsets.sync()?;
        }
        Ok(())
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
        let mut pos = self
            .offsets
            .floor(relative)?
            .map_or(0, |e| u64::from(e.position));
        let mut reader = Reader::new(&self.log, self.size);
        while let Some(header) = reader.header(pos)? {
            let len = whole_len(&header).map_or(0, |n| n as u64);
            if len == 0 || base_offset(&header) + last_delta(&header) >= offset {
                return Ok(pos);
            }
            pos += len;
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
        let mut reader = Reader::new(&self.log, self.size);
        let mut pos = self.position_of(offset.max(self.base))?;
        while let Some(header) = reader.header(pos)? {
            let len = whole_len(&header).map_or(0, |n| n as u64);
            if len < BATCH_HEADER as u64 {
                break;
            }
            each(&BatchHeader::of(&header), base_offset(&header));
            pos += len;
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

    /// The first record at or after `timestamp`, if this segment holds one:
    /// the time index says which batch to start at, the batches' max
    /// timestamps which one holds it, its records which record.
    ///
    /// # Errors
    ///
    /// A read failed.
    pub fn first_at_or_after(&self, timestamp: i64) -> io::Result<Option<Timed>> {
        if self.max_time.is_none_or(|m| m.timestamp < timestamp) {
            return Ok(None);
        }
        let start = self
            .times
            .below(timestamp)?
            .map_or(self.base, |e| self.base + i64::from(e.relative));
        let mut pos = self.position_of(start)?;
        let mut reader = Reader::new(&self.log, self.size);
        while let Some(header) = reader.header(pos)? {
            let len = whole_len(&header).unwrap_or(0);
            if len < BATCH_HEADER {
                break;
            }
            if max_timestamp(&header) >= timestamp {
                let whole = reader.batch(pos, len)?;
                return Ok(batch::first_at_or_after(&whole, timestamp));
            }
            pos += len as u64;
        }
        Ok(None)
    }

    /// The record holding its largest timestamp.
    ///
    /// # Errors
    ///
    /// A read failed.
    pub fn record_of_max_time(&self) -> io::Result<Option<Timed>> {
        let Some(max) = self.max_time else {
            return Ok(None);
        };
        let pos = self.position_of(max.batch)?;
        let reader = Reader::new(&self.log, self.size);
        let mut prefix = [0u8; LENGTH_PREFIX];
        self.log.read_exact_at(&mut prefix, pos)?;
        let len = whole_len(&prefix).unwrap_or(0);
        if len < BATCH_HEADER {
            return Ok(None);
        }
        Ok(Some(batch::record_of_max_time(&reader.batch(pos, len)?)))
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
