//! A partition's log: record batches with their base offsets rewritten, in
//! offset order, and the arithmetic on record-batch headers that produce,
//! fetch and recovery share.
//!
//! A record batch (magic 2) starts with a fixed 61-byte header:
//!
//! ```text
//! 0  base offset (i64)      8  batch length (i32, bytes after this field)
//! 12 leader epoch (i32)    16  magic (i8, 2)      17 crc (u32)
//! 21 attributes (i16)      23  last offset delta (i32)
//! 27 first timestamp (i64) 35  max timestamp (i64)
//! 43 producer id (i64)     51  producer epoch (i16)
//! 53 base sequence (i32)   57  record count (i32)  61 records…
//! ```

use bytes::{Bytes, BytesMut};

/// The length of a record batch's header, bytes; a shorter batch is corrupt.
pub const BATCH_HEADER: usize = 61;

/// A topic and partition: the key of every wait on a partition.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TopicPartition {
    /// The topic's name.
    pub topic: String,
    /// The partition's index.
    pub partition: i32,
}

impl TopicPartition {
    /// The key of `topic`'s `partition`.
    pub fn new(topic: impl Into<String>, partition: i32) -> TopicPartition {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }
}

/// A position in a partition: what a waiting fetch or produce needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Position {
    /// The partition.
    pub at: TopicPartition,
    /// The offset.
    pub offset: i64,
}

/// One record batch as stored: its base offset and its bytes (offset
/// rewritten).
#[derive(Clone, Debug)]
pub struct Stored {
    /// The offset of its first record.
    pub base: i64,
    /// The whole batch, header included.
    pub bytes: Bytes,
}

impl Stored {
    /// The offset of its last record.
    pub fn last_offset(&self) -> i64 {
        self.base + last_delta(&self.bytes)
    }
}

/// The producer fields of a record batch's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchHeader {
    /// Its producer id (-1: none).
    pub producer_id: i64,
    /// Its producer epoch.
    pub producer_epoch: i16,
    /// The sequence of its first record.
    pub base_sequence: i32,
    /// Its last offset delta (records - 1).
    pub last_offset_delta: i32,
}

impl BatchHeader {
    /// The header of `batch`, which holds a whole header.
    pub fn of(batch: &[u8]) -> BatchHeader {
        debug_assert!(batch.len() >= BATCH_HEADER, "a {}-byte batch", batch.len());
        let i32_at = |at: usize| {
            i32::from_be_bytes([batch[at], batch[at + 1], batch[at + 2], batch[at + 3]])
        };
        BatchHeader {
            producer_id: i64::from_be_bytes(batch[43..51].try_into().expect("8 bytes")),
            producer_epoch: i16::from_be_bytes([batch[51], batch[52]]),
            base_sequence: i32_at(53),
            last_offset_delta: i32_at(23),
        }
    }

    /// The sequence of its last record (sequences wrap at `i32::MAX`).
    pub fn last_sequence(&self) -> i32 {
        let last = i64::from(self.base_sequence) + i64::from(self.last_offset_delta);
        if last > i64::from(i32::MAX) {
            (last - i64::from(i32::MAX) - 1) as i32
        } else {
            last as i32
        }
    }
}

/// One partition's log.
#[derive(Default)]
pub struct Log {
    /// The batches, in offset order.
    pub batches: Vec<Stored>,
    /// The next offset to assign (the high watermark).
    pub next: i64,
    /// With `--data-dir`: the partition's append-only file.
    pub file: Option<std::fs::File>,
    /// With `--data-dir`: offsets below this are on disk (fsynced).
    pub durable: i64,
    /// Its idempotent producers' sequences.
    pub producers: crate::producers::Producers,
}

impl Log {
    /// The index of the first batch holding `offset` or later.
    pub fn first_batch_from(&self, offset: i64) -> usize {
        self.batches.partition_point(|b| b.last_offset() < offset)
    }

    /// Bytes available from `offset` on.
    pub fn bytes_from(&self, offset: i64) -> usize {
        let start = self.first_batch_from(offset);
        self.batches[start..].iter().map(|b| b.bytes.len()).sum()
    }
}

/// A record found by time: its offset and timestamp.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timed {
    /// The record's offset.
    pub offset: i64,
    /// Its timestamp, ms.
    pub timestamp: i64,
}

impl Log {
    /// The first record with a timestamp at or after `timestamp` (ms), as
    /// ListOffsets answers it: batches are skipped by their max timestamp,
    /// then the records of an uncompressed batch are read one by one (in a
    /// compressed batch, its first offset and max timestamp answer).
    pub fn offset_for_time(&self, timestamp: i64) -> Option<Timed> {
        self.batches.iter().find_map(|batch| {
            let bytes = &batch.bytes;
            if max_timestamp(bytes) < timestamp {
                return None;
            }
            let exact = records(bytes).and_then(|mut records| {
                records.find(|r| r.timestamp >= timestamp).map(|r| Timed {
                    offset: batch.base + r.offset_delta,
                    timestamp: r.timestamp,
                })
            });
            Some(exact.unwrap_or(Timed {
                offset: batch.base,
                timestamp: max_timestamp(bytes),
            }))
        })
    }

    /// The record with the largest timestamp (the first of equals).
    pub fn offset_of_max_time(&self) -> Option<Timed> {
        let mut best: Option<Timed> = None;
        for batch in &self.batches {
            let max = max_timestamp(&batch.bytes);
            if best.is_some_and(|b| b.timestamp >= max) {
                continue;
            }
            let exact = records(&batch.bytes)
                .and_then(|mut records| records.find(|r| r.timestamp == max))
                .map_or(batch.last_offset(), |r| batch.base + r.offset_delta);
            best = Some(Timed {
                offset: exact,
                timestamp: max,
            });
        }
        best
    }
}

/// A batch's max timestamp (bytes 35..43).
fn max_timestamp(batch: &[u8]) -> i64 {
    i64::from_be_bytes(batch[35..43].try_into().expect("a whole header"))
}

/// What ListOffsets needs of a record.
#[derive(Clone, Copy, Debug)]
struct RecordTime {
    /// Its offset delta in the batch.
    offset_delta: i64,
    /// Its timestamp, ms.
    timestamp: i64,
}

/// The records of an uncompressed batch with create-time timestamps, read
/// lazily; `None` for a compressed or log-append-time batch. A malformed
/// record ends the iteration.
fn records(batch: &[u8]) -> Option<impl Iterator<Item = RecordTime> + '_> {
    let attributes = i16::from_be_bytes([batch[21], batch[22]]);
    // Bits 0-2: the codec; bit 3: log-append time.
    if attributes & 0x0f != 0 {
        return None;
    }
    let first = i64::from_be_bytes(batch[27..35].try_into().expect("a whole header"));
    let mut at = BATCH_HEADER;
    Some(std::iter::from_fn(move || {
        let length = usize::try_from(varint(batch, &mut at)?).ok()?;
        let end = at.checked_add(length).filter(|&end| end <= batch.len())?;
        let mut field = at + 1; // attributes
        let timestamp_delta = varint(batch, &mut field)?;
        let offset_delta = varint(batch, &mut field)?;
        at = end;
        Some(RecordTime {
            offset_delta,
            timestamp: first.saturating_add(timestamp_delta),
        })
    }))
}

/// A zigzag varint (a record field), at most ten bytes; moves `at` past it.
fn varint(bytes: &[u8], at: &mut usize) -> Option<i64> {
    let mut raw = 0u64;
    for i in 0..10 {
        let b = *bytes.get(*at)?;
        *at += 1;
        raw |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            return Some((raw >> 1) as i64 ^ -((raw & 1) as i64));
        }
    }
    None
}

/// A topic: its partitions.
pub struct Topic {
    /// Its partitions' logs, by index.
    pub partitions: Vec<parking_lot::Mutex<Log>>,
}

impl Topic {
    /// A topic of these logs.
    pub fn new(logs: Vec<Log>) -> Topic {
        Topic {
            partitions: logs.into_iter().map(parking_lot::Mutex::new).collect(),
        }
    }
}

/// The last offset delta of a record batch (bytes 23..27). The caller has
/// checked that `batch` holds a whole header.
pub fn last_delta(batch: &[u8]) -> i64 {
    debug_assert!(batch.len() >= BATCH_HEADER, "a {}-byte batch", batch.len());
    i64::from(i32::from_be_bytes([
        batch[23], batch[24], batch[25], batch[26],
    ]))
}

/// The length of the batch starting `rest`, header included, if `rest`
/// starts with a whole, well-formed magic-2 batch.
pub fn batch_len(rest: &[u8]) -> Option<usize> {
    if rest.len() < BATCH_HEADER {
        return None;
    }
    let length =
        usize::try_from(i32::from_be_bytes([rest[8], rest[9], rest[10], rest[11]])).ok()?;
    let total = 12usize.checked_add(length)?;
    (total >= BATCH_HEADER && total <= rest.len() && rest[16] == 2 && last_delta(rest) >= 0)
        .then_some(total)
}

/// Splits the record batches of a produce; `None` for a malformed set.
pub fn split_batches(records: &[u8]) -> Option<Vec<&[u8]>> {
    let mut batches = Vec::new();
    let mut rest = records;
    while !rest.is_empty() {
        let total = batch_len(rest)?;
        batches.push(&rest[..total]);
        rest = &rest[total..];
    }
    Some(batches)
}

/// `batch` stored at `base`: its base offset rewritten.
pub fn stored_at(batch: &[u8], base: i64) -> Stored {
    let mut bytes = BytesMut::from(batch);
    bytes[..8].copy_from_slice(&base.to_be_bytes());
    Stored {
        base,
        bytes: bytes.freeze(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(records: i32) -> Vec<u8> {
        let mut b = vec![0u8; BATCH_HEADER];
        b[8..12].copy_from_slice(&((BATCH_HEADER - 12) as i32).to_be_bytes());
        b[16] = 2;
        b[23..27].copy_from_slice(&(records - 1).to_be_bytes());
        b
    }

    #[test]
    fn batches_are_split_and_stored_with_their_offsets() {
        let mut two = batch(3);
        two.extend(batch(2));
        let batches = split_batches(&two).unwrap();
        assert_eq!(batches.len(), 2);
        let second = stored_at(batches[1], 13);
        assert_eq!(&second.bytes[..8], &13i64.to_be_bytes());
        assert_eq!(second.last_offset(), 14);
    }

    #[test]
    fn a_malformed_batch_is_refused() {
        let whole = batch(1);
        assert!(split_batches(&whole[..60]).is_none(), "short header");
        let mut magic = batch(1);
        magic[16] = 1;
        assert!(split_batches(&magic).is_none(), "old magic");
        let mut long = batch(1);
        long[8..12].copy_from_slice(&i32::MAX.to_be_bytes());
        assert!(split_batches(&long).is_none(), "length past the end");
        let mut negative = batch(1);
        negative[23..27].copy_from_slice(&(-1i32).to_be_bytes());
        assert!(split_batches(&negative).is_none(), "negative delta");
    }

    /// An uncompressed batch of records with these timestamps (ms).
    fn timed(first: i64, timestamps: &[i64]) -> Vec<u8> {
        let mut b = batch(timestamps.len() as i32);
        b[27..35].copy_from_slice(&first.to_be_bytes());
        let max = timestamps.iter().copied().max().unwrap();
        b[35..43].copy_from_slice(&max.to_be_bytes());
        let zigzag = |v: i64, out: &mut Vec<u8>| {
            let mut z = ((v << 1) ^ (v >> 63)) as u64;
            while z >= 0x80 {
                out.push(z as u8 | 0x80);
                z >>= 7;
            }
            out.push(z as u8);
        };
        for (i, ts) in timestamps.iter().enumerate() {
            let mut record = vec![0u8]; // attributes
            zigzag(ts - first, &mut record);
            zigzag(i as i64, &mut record);
            zigzag(-1, &mut record); // key: null
            zigzag(-1, &mut record); // value: null
            zigzag(0, &mut record); // headers
            zigzag(record.len() as i64, &mut b);
            b.extend(record);
        }
        let length = (b.len() - 12) as i32;
        b[8..12].copy_from_slice(&length.to_be_bytes());
        b
    }

    #[test]
    fn a_time_finds_the_first_record_at_or_after_it() {
        let mut log = Log::default();
        for (first, times) in [(1000, vec![1000, 2000, 3000]), (4000, vec![4000, 5000])] {
            let stored = stored_at(&timed(first, &times), log.next);
            log.next = stored.last_offset() + 1;
            log.batches.push(stored);
        }
        let at = |ts| log.offset_for_time(ts).map(|t| (t.offset, t.timestamp));
        assert_eq!(at(0), Some((0, 1000)));
        assert_eq!(at(1000), Some((0, 1000)));
        assert_eq!(at(1001), Some((1, 2000)));
        assert_eq!(at(3500), Some((3, 4000)));
        assert_eq!(at(5000), Some((4, 5000)));
        assert_eq!(at(5001), None);
        let max = log.offset_of_max_time().unwrap();
        assert_eq!((max.offset, max.timestamp), (4, 5000));
    }

    #[test]
    fn sequences_wrap_past_the_largest_i32() {
        let header = BatchHeader {
            producer_id: 1,
            producer_epoch: 0,
            base_sequence: i32::MAX - 1,
            last_offset_delta: 3,
        };
        assert_eq!(header.last_sequence(), 1);
    }
}
