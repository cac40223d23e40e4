//! Answers written in parts: a fetch answer's large records stay in their
//! log files and are sent from there (`sendfile`, Kafka's `FileRecords`),
//! so an answer a client does not read costs the broker its header, not
//! its records.
//!
//! The response is encoded with a [`Marker`] in place of each streamed
//! partition's records; [`splice`] then cuts the encoded frame at each
//! marker into [`Part`]s, rewriting the records' length prefix for the
//! file range's length. A marker is 16 bytes: a random number drawn once
//! per process, which no client knows, and the range's index; markers are
//! found in order, each after the one before.
//!
//! [`write()`] writes the parts, each step bounded by the write timeout: an
//! answer that makes no progress for it closes the connection.

use std::io;
use std::os::fd::AsFd;
use std::sync::OnceLock;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use tokio::io::{AsyncWriteExt, Interest};
use tokio::net::tcp::OwnedWriteHalf;

use super::EncodeError;
use crate::log::FileRange;

/// Bytes of a [`Marker`].
const MARKER_LEN: usize = 16;

/// The most one `sendfile` call sends, bytes.
const SEND_CHUNK: usize = 1024 * 1024;

/// What stands in an encoded answer for the records of one file range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Marker([u8; MARKER_LEN]);

impl Marker {
    /// The marker of the `index`th range of an answer.
    pub fn new(index: usize) -> Marker {
        static NONCE: OnceLock<u64> = OnceLock::new();
        let nonce = *NONCE.get_or_init(|| {
            use std::hash::{BuildHasher, Hasher};
            // Seeded from the OS's randomness, per process.
            std::collections::hash_map::RandomState::new()
                .build_hasher()
                .finish()
        });
        let mut bytes = [0u8; MARKER_LEN];
        bytes[..8].copy_from_slice(&nonce.to_be_bytes());
        bytes[8..].copy_from_slice(&(index as u64).to_be_bytes());
        Marker(bytes)
    }

    /// The marker as records' bytes.
    pub fn bytes(&self) -> Bytes {
        Bytes::copy_from_slice(&self.0)
    }
}

/// A piece of an answer frame.
#[derive(Clone, Debug)]
pub enum Part {
    /// Bytes in memory.
    Bytes(Bytes),
    /// Bytes of a log file.
    File(FileRange),
}

/// How the records' length is written before them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prefix {
    /// A big-endian `i32` (non-flexible versions).
    Int32,
    /// An unsigned varint of the length plus one (flexible versions).
    Compact,
}

impl Prefix {
    /// Writes the prefix of `len` bytes of records.
    fn put(self, buf: &mut BytesMut, len: u64) -> Result<(), String> {
        match self {
            Prefix::Int32 => {
                buf.put_i32(i32::try_from(len).map_err(|e| e.to_string())?);
            }
            Prefix::Compact => {
                let mut v = len + 1;
                while v >= 0x80 {
                    buf.put_u8((v as u8) | 0x80);
                    v >>= 7;
                }
                buf.put_u8(v as u8);
            }
        }
        Ok(())
    }

    /// Bytes of the prefix of a marker.
    fn marker_prefix_len(self) -> usize {
        match self {
            Prefix::Int32 => 4,
            // 17 as a varint.
            Prefix::Compact => 1,
        }
    }
}

/// Cuts `frame` (length prefix first, as encoded with [`Marker::new`]`(i)`
/// for the `i`th of `ranges`) into parts with the ranges in the markers'
/// places, and rewrites the frame's length.
///
/// # Errors
///
/// [`EncodeError`] (of `version`) if a marker is not found or the frame
/// grows past `i32::MAX` bytes.
pub fn splice(
    frame: Bytes,
    ranges: Vec<FileRange>,
    prefix: Prefix,
    version: i16,
) -> Result<Vec<Part>, EncodeError> {
    let fail = |reason: String| EncodeError { version, reason };
    let mut parts = Vec::with_capacity(2 * ranges.len() + 1);
    let mut total = frame.len() as u64 - 4;
    let mut from = 4;
    let mut head = BytesMut::new();
    for (index, range) in ranges.into_iter().enumerate() {
        let marker = Marker::new(index);
        let at = find(&frame[from..], &marker.0)
            .map(|i| from + i)
            .filter(|&at| at >= from + prefix.marker_prefix_len())
            .ok_or_else(|| fail(format!("the marker of range {index} is not in the answer")))?;
        head.extend_from_slice(&frame[from..at - prefix.marker_prefix_len()]);
        let before = head.len();
        prefix.put(&mut head, range.len).map_err(fail)?;
        total = total - (prefix.marker_prefix_len() + MARKER_LEN) as u64
            + (head.len() - before) as u64
            + range.len;
        parts.push(Part::Bytes(head.split().freeze()));
        parts.push(Part::File(range));
        from = at + MARKER_LEN;
    }
    parts.push(Part::Bytes(frame.slice(from..)));
    let total = i32::try_from(total).map_err(|e| fail(e.to_string()))?;
    let mut first = BytesMut::with_capacity(4);
    first.put_i32(total);
    parts.insert(0, Part::Bytes(first.freeze()));
    Ok(parts)
}

/// Where `needle` first occurs in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Writes `parts` to `writer`, each step (a write, or a `sendfile`) bounded
/// by `timeout`.
///
/// # Errors
///
/// The socket's error; [`io::ErrorKind::TimedOut`] if a step made no
/// progress within `timeout`; [`io::ErrorKind::UnexpectedEof`] if a file
/// range ends early (it never does: its batches were whole when taken).
pub async fn write(
    writer: &mut OwnedWriteHalf,
    parts: &[Part],
    timeout: Duration,
) -> io::Result<()> {
    let stalled = || io::Error::new(io::ErrorKind::TimedOut, "the answer made no progress");
    for part in parts {
        match part {
            Part::Bytes(bytes) => {
                let mut done = 0;
                while done < bytes.len() {
                    let n = tokio::time::timeout(timeout, writer.write(&bytes[done..]))
                        .await
                        .map_err(|_| stalled())??;
                    if n == 0 {
                        return Err(io::ErrorKind::WriteZero.into());
                    }
                    done += n;
                }
            }
            Part::File(range) => {
                let (mut at, end) = (range.start, range.start + range.len);
                while at < end {
                    let socket = writer.as_ref();
                    tokio::time::timeout(timeout, socket.writable())
                        .await
                        .map_err(|_| stalled())??;
                    let count = usize::try_from(end - at)
                        .unwrap_or(usize::MAX)
                        .min(SEND_CHUNK);
                    let sent = socket.try_io(Interest::WRITABLE, || {
                        rustix::fs::sendfile(socket.as_fd(), &*range.file, Some(&mut at), count)
                            .map_err(io::Error::from)
                    });
                    match sent {
                        Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                        Ok(_) => {}
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(e),
                    }
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(len: u64) -> FileRange {
        let file = tempfile_of(len);
        FileRange {
            file: std::sync::Arc::new(file),
            start: 0,
            len,
        }
    }

    fn tempfile_of(len: u64) -> std::fs::File {
        let file = crate::log::Place::Anonymous(std::env::temp_dir())
            .create_for_test()
            .unwrap();
        file.set_len(len).unwrap();
        file
    }

    #[test]
    fn splice_puts_each_range_in_its_marker_s_place_with_its_length() {
        for (prefix, marker_prefix, expected) in [
            (Prefix::Int32, vec![0, 0, 0, 16], vec![0, 0, 1, 0]),
            // 257 as a varint: 0x81 0x02.
            (Prefix::Compact, vec![17], vec![0x81, 0x02]),
        ] {
            let mut frame = BytesMut::new();
            frame.put_i32(0);
            frame.put_slice(b"head");
            frame.put_slice(&marker_prefix);
            frame.put_slice(&Marker::new(0).0);
            frame.put_slice(b"tail");
            let parts = splice(frame.freeze(), vec![range(256)], prefix, 12).unwrap();
            let Part::Bytes(length) = &parts[0] else {
                panic!("{parts:?}")
            };
            let total = 4 + expected.len() + 256 + 4;
            assert_eq!(&length[..], &(total as i32).to_be_bytes(), "{prefix:?}");
            let Part::Bytes(head) = &parts[1] else {
                panic!("{parts:?}")
            };
            assert_eq!(&head[..4], b"head");
            assert_eq!(&head[4..], &expected[..], "{prefix:?}");
            assert!(matches!(&parts[2], Part::File(r) if r.len == 256));
            assert!(matches!(&parts[3], Part::Bytes(b) if &b[..] == b"tail"));
        }
        let mut frame = BytesMut::new();
        frame.put_i32(0);
        frame.put_slice(b"no marker");
        assert!(splice(frame.freeze(), vec![range(1)], Prefix::Int32, 4).is_err());
    }
}
