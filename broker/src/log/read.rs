//! Reading a segment's log file: the [`Slice`] a fetch reads after the
//! partition's lock is released, and the chunked [`Reader`] that scans
//! walk batch headers with (recovery, lookups by offset and time, the
//! producers' replay).

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use bytes::Bytes;

use super::batch::{whole_len, BATCH_HEADER, LENGTH_PREFIX};

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

    /// Its whole batches from the start within `limit` bytes; with
    /// `whole_first`, the first batch even if it is larger.
    ///
    /// # Errors
    ///
    /// A read of the log file failed.
    pub fn read(&self, limit: usize, whole_first: bool) -> io::Result<Bytes> {
        let Some(file) = &self.file else {
            return Ok(Bytes::new());
        };
        let available = self.len();
        let mut want = (limit as u64).min(available);
        if whole_first && available >= LENGTH_PREFIX as u64 {
            let mut prefix = [0u8; LENGTH_PREFIX];
            file.read_exact_at(&mut prefix, self.start)?;
            let first = whole_len(&prefix).map_or(0, |n| n as u64);
            want = want.max(first.min(available));
        }
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
        let read = |limit, whole_first| slice.read(limit, whole_first).unwrap().len();
        assert_eq!(
            read(a.len() + b.len() - 1, false),
            a.len(),
            "the second cut"
        );
        assert_eq!(read(usize::MAX, false), a.len() + b.len());
        assert_eq!(read(10, true), a.len(), "the first whole, past the limit");
        assert_eq!(read(10, false), 0);
        assert_eq!(Slice::empty().read(100, true).unwrap().len(), 0);
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
