//! The record batch: the arithmetic on its header that produce, fetch,
//! the indexes and recovery share, and the records inside an uncompressed
//! one (for ListOffsets by time).
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
//!
//! The CRC (CRC-32C) covers everything from the attributes on, so the
//! broker may rewrite the base offset without touching it.

/// The length of a record batch's header, bytes; a shorter batch is corrupt.
pub const BATCH_HEADER: usize = 61;

/// The bytes before the batch length's end: base offset and length.
pub const LENGTH_PREFIX: usize = 12;

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
        BatchHeader {
            producer_id: i64_at(batch, 43),
            producer_epoch: i16::from_be_bytes([batch[51], batch[52]]),
            base_sequence: i32_at(batch, 53),
            last_offset_delta: i32_at(batch, 23),
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

/// The big-endian i32 at `at` of `bytes`, which holds it.
fn i32_at(bytes: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

/// The big-endian i64 at `at` of `bytes`, which holds it.
fn i64_at(bytes: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

/// A batch's base offset (bytes 0..8); `batch` holds at least 8 bytes.
pub fn base_offset(batch: &[u8]) -> i64 {
    i64_at(batch, 0)
}

/// The whole length of the batch that `prefix` starts (its first
/// [`LENGTH_PREFIX`] bytes), header included; `None` if negative.
pub fn whole_len(prefix: &[u8]) -> Option<usize> {
    let length = usize::try_from(i32_at(prefix, 8)).ok()?;
    LENGTH_PREFIX.checked_add(length)
}

/// The last offset delta of a record batch (bytes 23..27). The caller has
/// checked that `batch` holds a whole header.
pub fn last_delta(batch: &[u8]) -> i64 {
    debug_assert!(batch.len() >= BATCH_HEADER, "a {}-byte batch", batch.len());
    i64::from(i32_at(batch, 23))
}

/// A batch's max timestamp (bytes 35..43); `batch` holds a whole header.
pub fn max_timestamp(batch: &[u8]) -> i64 {
    i64_at(batch, 35)
}

/// The length of the batch starting `rest`, header included, if `rest`
/// starts with a whole, well-formed magic-2 batch (the CRC is not checked:
/// see [`crc_matches`]).
pub fn batch_len(rest: &[u8]) -> Option<usize> {
    if rest.len() < BATCH_HEADER {
        return None;
    }
    let total = whole_len(rest)?;
    (total >= BATCH_HEADER && total <= rest.len() && rest[16] == 2 && last_delta(rest) >= 0)
        .then_some(total)
}

/// Whether a whole batch's CRC-32C (bytes 17..21) matches its bytes from
/// the attributes on.
pub fn crc_matches(batch: &[u8]) -> bool {
    batch.len() >= BATCH_HEADER
        && crc32c::crc32c(&batch[21..])
            == u32::from_be_bytes([batch[17], batch[18], batch[19], batch[20]])
}

/// Splits the record batches of a produce; `None` for a malformed set or a
/// batch whose CRC does not match (stored, it would be cut off as torn at
/// the next recovery, with everything after it).
pub fn split_batches(records: &[u8]) -> Option<Vec<&[u8]>> {
    let mut batches = Vec::new();
    let mut rest = records;
    while !rest.is_empty() {
        let total = batch_len(rest)?;
        let batch = &rest[..total];
        if !crc_matches(batch) {
            return None;
        }
        batches.push(batch);
        rest = &rest[total..];
    }
    Some(batches)
}

/// A record found by time: its offset and timestamp.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timed {
    /// The record's offset.
    pub offset: i64,
    /// Its timestamp, ms.
    pub timestamp: i64,
}

/// The first record of `batch` (whole, stored: base offset rewritten) with
/// a timestamp at or after `timestamp` and an offset at least `from`, if
/// its max timestamp reaches it. The records of an uncompressed batch are
/// read one by one (none may qualify); in a compressed one, its first
/// offset (or `from`) and max timestamp answer.
pub fn first_at_or_after(batch: &[u8], timestamp: i64, from: i64) -> Option<Timed> {
    let max = max_timestamp(batch);
    if max < timestamp || base_offset(batch) + last_delta(batch) < from {
        return None;
    }
    let base = base_offset(batch);
    match records(batch) {
        Some(mut records) => records
            .find(|r| r.timestamp >= timestamp && base + r.offset_delta >= from)
            .map(|r| Timed {
                offset: base + r.offset_delta,
                timestamp: r.timestamp,
            }),
        None => Some(Timed {
            offset: base.max(from),
            timestamp: max,
        }),
    }
}

/// The record of `batch` holding its max timestamp (the first of equals;
/// the batch's last offset when its records cannot be read).
pub fn record_of_max_time(batch: &[u8]) -> Timed {
    let max = max_timestamp(batch);
    let base = base_offset(batch);
    let offset = records(batch)
        .and_then(|mut records| records.find(|r| r.timestamp == max))
        .map_or(base + last_delta(batch), |r| base + r.offset_delta);
    Timed {
        offset,
        timestamp: max,
    }
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
    let first = i64_at(batch, 27);
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

/// What a compacted topic's check found of a batch's keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Keys {
    /// Every record's key was read: the indexes (in the batch) of those
    /// without one.
    Missing(Vec<i32>),
    /// A compressed batch: its records are not opened here, so not
    /// checked.
    Unread,
    /// A record's fields run past it.
    Malformed,
}

/// The records of `batch` without a key (a compacted topic refuses them,
/// as Kafka does): read record by record in an uncompressed batch.
pub fn keyless(batch: &[u8]) -> Keys {
    let attributes = i16::from_be_bytes([batch[21], batch[22]]);
    // Bits 0-2: the codec.
    if attributes & 0x07 != 0 {
        return Keys::Unread;
    }
    let mut missing = Vec::new();
    let mut at = BATCH_HEADER;
    let mut index = 0;
    while at < batch.len() {
        let key = (|| {
            let length = usize::try_from(varint(batch, &mut at)?).ok()?;
            let end = at.checked_add(length).filter(|&end| end <= batch.len())?;
            let mut field = at + 1; // attributes
            varint(batch, &mut field)?; // timestamp delta
            varint(batch, &mut field)?; // offset delta
            let key = varint(batch, &mut field).filter(|_| field <= end)?;
            at = end;
            Some(key)
        })();
        match key {
            Some(key) if key < 0 => missing.push(index),
            Some(_) => {}
            None => return Keys::Malformed,
        }
        index += 1;
    }
    Keys::Missing(missing)
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

/// Test batches, shared by the log's unit tests.
#[cfg(test)]
pub mod testing {
    use super::BATCH_HEADER;

    /// An uncompressed batch at base 0 of records with these timestamps
    /// (ms), each with a null key and value, its CRC set.
    pub fn timed(timestamps: &[i64]) -> Vec<u8> {
        let first = timestamps.first().copied().unwrap_or(0);
        let mut b = vec![0u8; BATCH_HEADER];
        b[16] = 2;
        b[23..27].copy_from_slice(&(timestamps.len() as i32 - 1).to_be_bytes());
        b[27..35].copy_from_slice(&first.to_be_bytes());
        let max = timestamps.iter().copied().max().unwrap_or(first);
        b[35..43].copy_from_slice(&max.to_be_bytes());
        b[43..51].copy_from_slice(&(-1i64).to_be_bytes());
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
        let crc = crc32c::crc32c(&b[21..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        b
    }

    /// A batch of `records` records, timestamps 0.
    pub fn of(records: usize) -> Vec<u8> {
        timed(&vec![0; records])
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{of, timed};
    use super::*;

    #[test]
    fn keyless_records_are_found_by_index_and_a_compressed_batch_is_unread() {
        // The test batches' records have null keys.
        assert_eq!(keyless(&of(3)), Keys::Missing(vec![0, 1, 2]));
        let mut compressed = of(2);
        compressed[22] = 1; // gzip
        assert_eq!(keyless(&compressed), Keys::Unread);
        let mut cut = of(2);
        cut.truncate(cut.len() - 2);
        assert_eq!(keyless(&cut), Keys::Malformed);
    }

    #[test]
    fn batches_are_split_and_checked() {
        let mut two = of(3);
        two.extend(of(2));
        let batches = split_batches(&two).unwrap();
        assert_eq!(batches.len(), 2);
        assert_eq!(last_delta(batches[1]), 1);
    }

    #[test]
    fn a_malformed_batch_is_refused() {
        let whole = of(1);
        assert!(split_batches(&whole[..60]).is_none(), "short header");
        let mut magic = of(1);
        magic[16] = 1;
        assert!(split_batches(&magic).is_none(), "old magic");
        let mut long = of(1);
        long[8..12].copy_from_slice(&i32::MAX.to_be_bytes());
        assert!(split_batches(&long).is_none(), "length past the end");
        let mut negative = of(1);
        negative[23..27].copy_from_slice(&(-1i32).to_be_bytes());
        assert!(split_batches(&negative).is_none(), "negative delta");
        let mut flipped = of(2);
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        assert!(split_batches(&flipped).is_none(), "crc");
        let mut rebased = of(2);
        rebased[..8].copy_from_slice(&77i64.to_be_bytes());
        assert!(crc_matches(&rebased), "the base offset is outside the crc");
    }

    #[test]
    fn a_time_finds_the_first_record_at_or_after_it() {
        let mut batch = timed(&[1000, 2000, 3000]);
        batch[..8].copy_from_slice(&10i64.to_be_bytes());
        let at = |ts| first_at_or_after(&batch, ts, 0).map(|t| (t.offset, t.timestamp));
        assert_eq!(at(0), Some((10, 1000)));
        assert_eq!(at(1000), Some((10, 1000)));
        assert_eq!(at(1001), Some((11, 2000)));
        assert_eq!(at(3000), Some((12, 3000)));
        assert_eq!(at(3001), None);
        // Not below the log start, which DeleteRecords moved into it.
        let from = |ts, from| first_at_or_after(&batch, ts, from).map(|t| (t.offset, t.timestamp));
        assert_eq!(from(0, 11), Some((11, 2000)));
        assert_eq!(from(2500, 11), Some((12, 3000)));
        assert_eq!(from(0, 13), None);
        let max = record_of_max_time(&timed(&[5, 9, 9, 1]));
        assert_eq!((max.offset, max.timestamp), (1, 9));
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
