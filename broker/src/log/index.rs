//! A segment's sparse indexes, as files of fixed-size entries searched in
//! place with positioned reads (the page cache keeps the hot ones), so no
//! index is held in memory whatever the data size.
//!
//! | file | entry | meaning |
//! |---|---|---|
//! | `.index` | relative offset (u32), position (u32) | the batch with this base offset starts at this byte of the log file |
//! | `.timeindex` | timestamp (i64), relative offset (u32) | every record of the batches up to the one being appended had a timestamp at most this; this batch holds the largest |
//!
//! Entries are appended every [`INDEX_INTERVAL`] bytes of log (Kafka's
//! `log.index.interval.bytes`), so both are sorted in both fields and a
//! binary search finds where to start a scan of the log: at most an
//! interval of batches away from the one sought. The newest entries wait
//! in memory until their segment writes them together (see
//! `segment::INDEX_FLUSH_BYTES`).

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

/// Bytes of log between two index entries (Kafka's
/// `log.index.interval.bytes`).
pub const INDEX_INTERVAL: u64 = 4096;

/// A file of fixed-size entries, its newest ones possibly still in memory.
#[derive(Debug)]
struct Entries<const N: usize> {
    /// The file (shared with a closed segment's fsync, which runs off the
    /// partition's lock).
    file: Arc<File>,
    /// Whole entries in the file.
    written: u64,
    /// Entries after those, not yet written.
    pending: Vec<[u8; N]>,
}

impl<const N: usize> Entries<N> {
    /// The entries of `file`; a torn last entry is cut off.
    fn open(file: File) -> io::Result<Entries<N>> {
        let bytes = file.metadata()?.len();
        let written = bytes / N as u64;
        if bytes % N as u64 != 0 {
            file.set_len(written * N as u64)?;
        }
        Ok(Entries {
            file: Arc::new(file),
            written,
            pending: Vec::new(),
        })
    }

    /// How many entries it has, written or not.
    fn len(&self) -> u64 {
        self.written + self.pending.len() as u64
    }

    /// Entry `i` (below [`len`](Self::len)).
    fn get(&self, i: u64) -> io::Result<[u8; N]> {
        debug_assert!(i < self.len(), "entry {i} of {}", self.len());
        if let Some(pending) = i.checked_sub(self.written) {
            return Ok(self.pending[pending as usize]);
        }
        let mut entry = [0u8; N];
        self.file.read_exact_at(&mut entry, i * N as u64)?;
        Ok(entry)
    }

    /// Appends `entry`, in memory until the next [`flush`](Self::flush).
    fn push(&mut self, entry: [u8; N]) {
        self.pending.push(entry);
    }

    /// Writes the pending entries to the file.
    fn flush(&mut self) -> io::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let bytes: Vec<u8> = self.pending.iter().flatten().copied().collect();
        self.file.write_all_at(&bytes, self.written * N as u64)?;
        self.written += self.pending.len() as u64;
        self.pending.clear();
        Ok(())
    }

    /// Keeps the first `len` entries.
    fn truncate(&mut self, len: u64) -> io::Result<()> {
        match len.checked_sub(self.written) {
            Some(pending) => self.pending.truncate(pending as usize),
            None => {
                self.pending.clear();
                self.file.set_len(len * N as u64)?;
                self.written = len;
            }
        }
        Ok(())
    }

    /// The last entry for which `before` holds, when it holds for a prefix
    /// of the entries.
    fn last_where(&self, before: impl Fn(&[u8; N]) -> bool) -> io::Result<Option<[u8; N]>> {
        // Invariant: entries below `low` hold, from `high` on do not.
        let (mut low, mut high) = (0u64, self.len());
        let mut found = None;
        while low < high {
            let mid = low + (high - low) / 2;
            let entry = self.get(mid)?;
            if before(&entry) {
                found = Some(entry);
                low = mid + 1;
            } else {
                high = mid;
            }
        }
        Ok(found)
    }
}

/// An offset-index entry: where a batch starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OffsetEntry {
    /// The batch's base offset, relative to the segment's.
    pub relative: u32,
    /// Its position in the log file.
    pub position: u32,
}

/// A segment's offset index.
#[derive(Debug)]
pub struct OffsetIndex(Entries<8>);

impl OffsetIndex {
    /// The index in `file` (a torn last entry cut off).
    ///
    /// # Errors
    ///
    /// The file's length cannot be read or set.
    pub fn open(file: File) -> io::Result<OffsetIndex> {
        Entries::open(file).map(OffsetIndex)
    }

    /// Entries in it.
    pub fn len(&self) -> u64 {
        self.0.len()
    }

    /// Entry `i` (below [`len`](Self::len)).
    ///
    /// # Errors
    ///
    /// The read failed.
    pub fn get(&self, i: u64) -> io::Result<OffsetEntry> {
        self.0.get(i).map(|e| decode_offset(&e))
    }

    /// Appends an entry, in memory until the next `flush`.
    pub fn push(&mut self, entry: OffsetEntry) {
        let mut bytes = [0u8; 8];
        bytes[..4].copy_from_slice(&entry.relative.to_be_bytes());
        bytes[4..].copy_from_slice(&entry.position.to_be_bytes());
        self.0.push(bytes);
    }

    /// Entries not yet written to the file.
    #[cfg(test)]
    pub fn pending(&self) -> usize {
        self.0.pending.len()
    }

    /// Writes the pending entries to the file.
    ///
    /// # Errors
    ///
    /// The write failed.
    pub fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }

    /// Keeps the first `len` entries.
    ///
    /// # Errors
    ///
    /// The file cannot be cut.
    pub fn truncate(&mut self, len: u64) -> io::Result<()> {
        self.0.truncate(len)
    }

    /// The last entry at or before the relative offset `relative`.
    ///
    /// # Errors
    ///
    /// A read failed.
    pub fn floor(&self, relative: u32) -> io::Result<Option<OffsetEntry>> {
        Ok(self
            .0
            .last_where(|e| decode_offset(e).relative <= relative)?
            .map(|e| decode_offset(&e)))
    }

    /// The file, for a closed segment's fsync (after [`flush`](Self::flush)).
    pub fn file(&self) -> Arc<File> {
        Arc::clone(&self.0.file)
    }
}

fn decode_offset(e: &[u8; 8]) -> OffsetEntry {
    OffsetEntry {
        relative: u32::from_be_bytes([e[0], e[1], e[2], e[3]]),
        position: u32::from_be_bytes([e[4], e[5], e[6], e[7]]),
    }
}

/// A time-index entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimeEntry {
    /// The largest timestamp so far in the segment, ms.
    pub timestamp: i64,
    /// The base offset (relative) of the batch holding it.
    pub relative: u32,
}

/// A segment's time index.
#[derive(Debug)]
pub struct TimeIndex(Entries<12>);

impl TimeIndex {
    /// The index in `file` (a torn last entry cut off).
    ///
    /// # Errors
    ///
    /// The file's length cannot be read or set.
    pub fn open(file: File) -> io::Result<TimeIndex> {
        Entries::open(file).map(TimeIndex)
    }

    /// Entries in it.
    pub fn len(&self) -> u64 {
        self.0.len()
    }

    /// Entry `i` (below [`len`](Self::len)).
    ///
    /// # Errors
    ///
    /// The read failed.
    pub fn get(&self, i: u64) -> io::Result<TimeEntry> {
        self.0.get(i).map(|e| decode_time(&e))
    }

    /// The last entry, if any.
    ///
    /// # Errors
    ///
    /// The read failed.
    pub fn last(&self) -> io::Result<Option<TimeEntry>> {
        match self.len() {
            0 => Ok(None),
            n => self.get(n - 1).map(Some),
        }
    }

    /// Appends an entry, in memory until the next `flush`.
    pub fn push(&mut self, entry: TimeEntry) {
        let mut bytes = [0u8; 12];
        bytes[..8].copy_from_slice(&entry.timestamp.to_be_bytes());
        bytes[8..].copy_from_slice(&entry.relative.to_be_bytes());
        self.0.push(bytes);
    }

    /// Writes the pending entries to the file.
    ///
    /// # Errors
    ///
    /// The write failed.
    pub fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }

    /// Keeps the first `len` entries.
    ///
    /// # Errors
    ///
    /// The file cannot be cut.
    pub fn truncate(&mut self, len: u64) -> io::Result<()> {
        self.0.truncate(len)
    }

    /// The last entry with a timestamp below `timestamp`: every record up
    /// to its batch is older than `timestamp`, so a search by time starts
    /// at its batch.
    ///
    /// # Errors
    ///
    /// A read failed.
    pub fn below(&self, timestamp: i64) -> io::Result<Option<TimeEntry>> {
        Ok(self
            .0
            .last_where(|e| decode_time(e).timestamp < timestamp)?
            .map(|e| decode_time(&e)))
    }

    /// The file, for a closed segment's fsync (after [`flush`](Self::flush)).
    pub fn file(&self) -> Arc<File> {
        Arc::clone(&self.0.file)
    }
}

fn decode_time(e: &[u8; 12]) -> TimeEntry {
    TimeEntry {
        timestamp: i64::from_be_bytes(e[..8].try_into().expect("8 bytes")),
        relative: u32::from_be_bytes([e[8], e[9], e[10], e[11]]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> File {
        let dir = std::env::temp_dir().join(format!("pg-index-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("x");
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        file
    }

    #[test]
    fn floor_finds_the_last_entry_at_or_before_every_offset() {
        let mut index = OffsetIndex::open(scratch("floor")).unwrap();
        assert_eq!(index.floor(5).unwrap(), None);
        for i in 0..100u32 {
            index.push(OffsetEntry {
                relative: 10 + i * 10,
                position: i * 4096,
            });
        }
        assert_eq!(index.floor(9).unwrap(), None);
        for offset in 10..1010u32 {
            let e = index.floor(offset).unwrap().unwrap();
            assert_eq!(e.relative, offset / 10 * 10, "{offset}");
        }
        index.flush().unwrap();
        for i in 100..130u32 {
            index.push(OffsetEntry {
                relative: 10 + i * 10,
                position: i * 4096,
            });
        }
        // 100 entries written, 30 pending: searched alike.
        assert_eq!((index.0.written, index.pending()), (100, 30));
        assert_eq!(index.floor(1_295).unwrap().unwrap().relative, 1_290);
        index.truncate(80).unwrap();
        assert_eq!(index.floor(1000).unwrap().unwrap().relative, 800);
        index.truncate(3).unwrap();
        assert_eq!(index.floor(1000).unwrap().unwrap().relative, 30);
    }

    #[test]
    fn below_finds_the_last_entry_older_than_a_time_and_a_torn_entry_is_cut() {
        let file = scratch("time");
        let mut index = TimeIndex::open(file.try_clone().unwrap()).unwrap();
        for (timestamp, relative) in [(100, 0), (200, 5), (300, 9)] {
            index.push(TimeEntry {
                timestamp,
                relative,
            });
        }
        let below = |t| index.below(t).unwrap().map(|e| e.relative);
        assert_eq!(below(100), None);
        assert_eq!(below(101), Some(0));
        assert_eq!(below(300), Some(5));
        assert_eq!(below(i64::MAX), Some(9));
        // Pending in memory until written together.
        assert_eq!(file.metadata().unwrap().len(), 0);
        index.flush().unwrap();
        file.write_all_at(&[1, 2, 3], 36).unwrap();
        let reopened = TimeIndex::open(file).unwrap();
        assert_eq!(reopened.len(), 3);
        assert_eq!(reopened.last().unwrap().unwrap().timestamp, 300);
    }
}
