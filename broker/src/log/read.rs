//! Reading a segment's log file: the [`Slice`] a fetch reads after the
//! partition's lock is released, and the chunked [`Reader`] whose
//! [`Walk`] is the one walk over batch headers (recovery, lookups by
//! offset and time, the producers' replay).
//!
//! Every length read from a file is distrusted: a batch is read whole
//! only if its length is one the broker could have stored (at least a
//! header, at most the caller's bound and within the file), so a corrupt
//! length is an error or the end of a walk, never a large buffer.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use bytes::Bytes;

use super::batch::{
    base_offset, last_delta, max_timestamp, whole_len, BATCH_HEADER, LENGTH_PREFIX,
};
use super::partition::Unreadable;

/// Bytes read at once when a scan jumps to a batch header: a page, so
/// that a walk over large batches reads little more than their headers.
const HEADER_CHUNK: usize = 4096;

/// Bytes read at once when a scan reads on (small batches, or a batch
/// read through for its CRC).
const SCAN_CHUNK: usize = 64 * 1024;

/// A range of a segment's log to read from, taken under the partition's
/// lock and read after it is released.
#[derive(Clone, Debug)]
pub struct Slice {
    /// The log file (`None`: a log without a segment yet).
    pub(super) file: Option<Arc<File>>,
    /// The first byte.
    pub(super) start: u64,
    /// The end of what was appended when the slice was taken (whole
    /// batches only).
    pub(super) end: u64,
}

impl Slice {
    /// Nothing to read.
    pub fn empty() -> Slice {
        Slice {
            file: None,
            start: 0,
            end: 0,
        }
    }

    /// Bytes in it.
    pub fn len(&self) -> u64 {
        self.end.saturating_sub(self.start)
    }

    /// Its whole batches from the start within `limit` bytes, and with
    /// [`First::Whole`] the first batch even if it is larger: one past the
    /// bound given too, if its CRC matches (a batch stored under a larger
    /// `--message-max-bytes` stays readable after the limit is lowered;
    /// the segment's bytes bound what is read).
    ///
    /// # Errors
    ///
    /// [`Unreadable::Io`] if a read of the log file failed;
    /// [`Unreadable::Corrupt`] if the first batch must be whole and its
    /// length is shorter than a header, runs past the slice, or passes
    /// the bound with a CRC that does not match (checked streaming:
    /// nothing that large is allocated).
    pub fn read(&self, limit: usize, first: First) -> Result<Bytes, Unreadable> {
        let Some(file) = &self.file else {
            return Ok(Bytes::new());
        };
        let want = self.bound(file, limit, first)?;
        let mut bytes = vec![0u8; usize::try_from(want).unwrap_or(usize::MAX)];
        file.read_exact_at(&mut bytes, self.start)?;
        // Cut after the last whole batch.
        let mut at = 0usize;
        while at + LENGTH_PREFIX <= bytes.len() {
            match whole_len(&bytes[at..]).and_then(|n| at.checked_add(n)) {
                Some(end) if end <= bytes.len() => at = end,
                _ => break,
            }
        }
        bytes.truncate(at);
        Ok(Bytes::from(bytes))
    }

    /// What [`read`](Self::read) reads, but past [`INLINE_BYTES`] left in
    /// the file as a [`FileRange`] to stream from it (Kafka's
    /// `FileRecords`): its whole batches found by walking their headers,
    /// so an answer's records cost no memory however large.
    ///
    /// # Errors
    ///
    /// As [`read`](Self::read).
    pub fn serve(&self, limit: usize, first: First) -> Result<Records, Unreadable> {
        let Some(file) = &self.file else {
            return Ok(Records::Inline(Bytes::new()));
        };
        let want = self.bound(file, limit, first)?;
        if want <= INLINE_BYTES {
            return self.read(limit, first).map(Records::Inline);
        }
        let end = self.start + want;
        let mut cut = self.start;
        for found in Reader::new(file, self.end).walk(self.start) {
            let found = found?;
            if found.end() > end {
                break;
            }
            cut = found.end();
        }
        Ok(Records::File(FileRange {
            file: Arc::clone(file),
            start: self.start,
            len: cut - self.start,
        }))
    }

    /// The bytes from the start to read: `limit` (at most the slice's),
    /// and with [`First::Whole`] at least the first batch, checked as
    /// [`read`](Self::read) says.
    fn bound(&self, file: &File, limit: usize, first: First) -> Result<u64, Unreadable> {
        let available = self.len();
        let mut want = (limit as u64).min(available);
        if let First::Whole { max } = first {
            if available >= LENGTH_PREFIX as u64 {
                let mut prefix = [0u8; LENGTH_PREFIX];
                file.read_exact_at(&mut prefix, self.start)?;
                let len = whole_len(&prefix).map_or(0, |n| n as u64);
                let sound = len >= BATCH_HEADER as u64 && len <= available;
                // Past the bound: a length that corruption made, unless the
                // bytes it claims are the batch its CRC says.
                let sound = sound
                    && (len <= want.max(max as u64) || {
                        let mut reader = Reader::new(file, self.end);
                        match reader.header(self.start)? {
                            Some(h) if h[16] == 2 => reader.crc_matches(self.start, len, &h)?,
                            _ => false,
                        }
                    });
                if !sound {
                    return Err(Unreadable::Corrupt {
                        at: self.start,
                        len,
                    });
                }
                want = want.max(len);
            }
        }
        Ok(want)
    }
}

/// The most records an answer holds in memory, bytes; more are streamed
/// from the log file.
pub const INLINE_BYTES: u64 = 1024 * 1024;

/// A fetch answer's records for one partition.
#[derive(Clone, Debug)]
pub enum Records {
    /// Read into memory (at most [`INLINE_BYTES`]).
    Inline(Bytes),
    /// Left in the log file, to be streamed from it.
    File(FileRange),
}

impl Records {
    /// Bytes of records.
    pub fn len(&self) -> u64 {
        match self {
            Records::Inline(bytes) => bytes.len() as u64,
            Records::File(range) => range.len,
        }
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Bytes of a log file: whole batches, appended before the range was
/// taken, so they never change (a segment deleted meanwhile stays
/// readable through its open file).
#[derive(Clone, Debug)]
pub struct FileRange {
    /// The file.
    pub file: Arc<File>,
    /// The first byte.
    pub start: u64,
    /// Bytes.
    pub len: u64,
}

/// How a fetch treats the first batch of its answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum First {
    /// Like the others: only within the limit.
    Within,
    /// Whole even past the limit (Kafka's rule, so that a batch larger
    /// than a fetch's limits is still delivered), up to the end of its
    /// segment; past `max` bytes (the broker's `--message-max-bytes`)
    /// only once its CRC is checked.
    Whole {
        /// The largest first batch read whole unchecked, bytes.
        max: usize,
    },
}

/// Reads a log file's bytes in chunks, for scans that walk its batches.
pub(super) struct Reader<'a> {
    /// The file.
    file: &'a File,
    /// Where its readable bytes end.
    end: u64,
    /// The chunk last read.
    buf: Vec<u8>,
    /// The position of `buf`'s first byte.
    buf_at: u64,
}

impl<'a> Reader<'a> {
    pub(super) fn new(file: &'a File, end: u64) -> Reader<'a> {
        Reader {
            file,
            end,
            buf: Vec::new(),
            buf_at: 0,
        }
    }

    /// The `n` bytes at `pos` (`n` at most [`SCAN_CHUNK`]), `None` if they
    /// pass the end.
    pub(super) fn bytes(&mut self, pos: u64, n: usize) -> io::Result<Option<&[u8]>> {
        debug_assert!(n <= SCAN_CHUNK, "{n} bytes at once");
        if pos.checked_add(n as u64).is_none_or(|e| e > self.end) {
            return Ok(None);
        }
        let held = self.buf_at <= pos && pos + n as u64 <= self.buf_at + self.buf.len() as u64;
        if !held {
            // A walk that runs off the end of the chunk (small batches)
            // reads on in large chunks; one that jumps past it (large
            // batches) reads a page for the header it needs.
            let buf_end = self.buf_at + self.buf.len() as u64;
            let sequential = !self.buf.is_empty() && (self.buf_at..=buf_end).contains(&pos);
            let chunk = if sequential { SCAN_CHUNK } else { HEADER_CHUNK };
            let len = (n.max(chunk) as u64).min(self.end - pos) as usize;
            self.buf.resize(len, 0);
            self.file.read_exact_at(&mut self.buf, pos)?;
            self.buf_at = pos;
        }
        let from = (pos - self.buf_at) as usize;
        Ok(Some(&self.buf[from..from + n]))
    }

    /// The header of the batch at `pos`, if a whole header is there.
    pub(super) fn header(&mut self, pos: u64) -> io::Result<Option<[u8; BATCH_HEADER]>> {
        Ok(self
            .bytes(pos, BATCH_HEADER)?
            .map(|h| h.try_into().expect("a whole header")))
    }

    /// Whether the `len`-byte batch at `pos`, whose header is read, has a
    /// matching CRC; streamed, so a torn tail's claimed length costs no
    /// memory.
    pub(super) fn crc_matches(&mut self, pos: u64, len: u64, header: &[u8]) -> io::Result<bool> {
        let expected = u32::from_be_bytes([header[17], header[18], header[19], header[20]]);
        let mut crc = 0u32;
        let (mut at, end) = (pos + 21, pos + len);
        while at < end {
            let n = ((end - at) as usize).min(SCAN_CHUNK);
            match self.bytes(at, n)? {
                Some(chunk) => crc = crc32c::crc32c_append(crc, chunk),
                None => return Ok(false),
            }
            at += n as u64;
        }
        Ok(crc == expected)
    }

    /// The whole `len`-byte batch at `pos`: an error, before anything is
    /// allocated, if it would end past the readable bytes (a length read
    /// from a corrupt file).
    pub(super) fn batch(&self, pos: u64, len: usize) -> io::Result<Vec<u8>> {
        if pos.checked_add(len as u64).is_none_or(|end| end > self.end) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "a batch of {len} bytes at {pos} ends past the segment's {} bytes",
                    self.end
                ),
            ));
        }
        let mut whole = vec![0u8; len];
        self.file.read_exact_at(&mut whole, pos)?;
        Ok(whole)
    }

    /// The walk over the batches from `pos` on.
    pub(super) fn walk(self, pos: u64) -> Walk<'a> {
        Walk { reader: self, pos }
    }
}

/// A batch met by a [`Walk`].
#[derive(Clone, Copy, Debug)]
pub(super) struct Found {
    /// Where it starts in the file.
    pub(super) pos: u64,
    /// Its header.
    pub(super) header: [u8; BATCH_HEADER],
    /// Its whole length, header included (at least a header's).
    pub(super) len: u64,
}

impl Found {
    /// Its base offset.
    pub(super) fn base(&self) -> i64 {
        base_offset(&self.header)
    }

    /// The offset of its last record.
    pub(super) fn last(&self) -> i64 {
        self.base() + last_delta(&self.header)
    }

    /// Its largest timestamp.
    pub(super) fn max_timestamp(&self) -> i64 {
        max_timestamp(&self.header)
    }

    /// Where the batch after it starts.
    pub(super) fn end(&self) -> u64 {
        self.pos + self.len
    }
}

/// The batches of a log file in order, from a batch's start: each with a
/// whole header and a length of at least a header. It ends at the end of
/// the readable bytes or at a length no batch has (what follows cannot be
/// found); the lengths are not checked against the file, nor the CRCs
/// (recovery does that).
pub(super) struct Walk<'a> {
    /// The file's reader.
    reader: Reader<'a>,
    /// Where the next batch starts.
    pos: u64,
}

impl<'a> Walk<'a> {
    /// The reader, for what a walk's user reads besides headers.
    pub(super) fn reader(&mut self) -> &mut Reader<'a> {
        &mut self.reader
    }
}

impl Iterator for Walk<'_> {
    type Item = io::Result<Found>;

    fn next(&mut self) -> Option<io::Result<Found>> {
        let header = match self.reader.header(self.pos) {
            Ok(header) => header?,
            Err(e) => {
                // Nothing more can be read.
                self.pos = self.reader.end;
                return Some(Err(e));
            }
        };
        let len = whole_len(&header).filter(|&n| n >= BATCH_HEADER)? as u64;
        let found = Found {
            pos: self.pos,
            header,
            len,
        };
        self.pos = self.pos.saturating_add(len);
        Some(Ok(found))
    }
}

#[cfg(test)]
mod tests {
    use super::super::batch::testing::of;
    use super::*;

    #[test]
    fn a_slice_reads_whole_batches_within_its_limit_and_the_first_whole_if_asked() {
        let dir = std::env::temp_dir();
        let file = super::super::segment::Place::Anonymous(dir)
            .create_for_test()
            .unwrap();
        let (a, b) = (of(3), of(5));
        file.write_all_at(&a, 0).unwrap();
        file.write_all_at(&b, a.len() as u64).unwrap();
        let slice = Slice {
            file: Some(Arc::new(file)),
            start: 0,
            end: (a.len() + b.len()) as u64,
        };
        let whole = First::Whole { max: 1 << 20 };
        let read = |limit, first| slice.read(limit, first).unwrap().len();
        assert_eq!(
            read(a.len() + b.len() - 1, First::Within),
            a.len(),
            "the second cut"
        );
        assert_eq!(read(usize::MAX, First::Within), a.len() + b.len());
        assert_eq!(read(10, whole), a.len(), "the first whole, past the limit");
        assert_eq!(read(10, First::Within), 0);
        assert_eq!(Slice::empty().read(100, whole).unwrap().len(), 0);
        // Past the limit and the bound, sound: served (stored under a
        // larger --message-max-bytes).
        assert_eq!(read(10, First::Whole { max: 1 }), a.len());
        // Past the bound with a CRC that does not match: refused.
        let mut torn = a.clone();
        torn[a.len() - 1] ^= 1;
        slice.file.as_ref().unwrap().write_all_at(&torn, 0).unwrap();
        let refused = slice.read(10, First::Whole { max: 1 });
        assert!(
            matches!(refused, Err(Unreadable::Corrupt { at: 0, len }) if len == a.len() as u64),
            "{refused:?}"
        );
        // A length past the slice: refused, nothing read.
        let short = Slice {
            end: (a.len() - 1) as u64,
            ..slice.clone()
        };
        let refused = short.read(10, whole);
        assert!(
            matches!(refused, Err(Unreadable::Corrupt { at: 0, len }) if len == a.len() as u64),
            "{refused:?}"
        );
    }

    #[test]
    fn a_batch_whose_length_runs_past_the_segment_is_refused_before_allocating() {
        let file = super::super::segment::Place::Anonymous(std::env::temp_dir())
            .create_for_test()
            .unwrap();
        let a = of(3);
        file.write_all_at(&a, 0).unwrap();
        let reader = Reader::new(&file, a.len() as u64);
        assert_eq!(reader.batch(0, a.len()).unwrap(), a);
        // A corrupt length of 2 GiB: an error, not a 2 GiB buffer.
        let error = reader.batch(0, 1 << 31).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidData);
        assert!(reader.batch(u64::MAX, 2).is_err(), "an end past u64");
    }
}
