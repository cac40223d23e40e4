//! Idempotent producers: producer ids, and per partition each producer's
//! epoch and the sequences of its last [`KEPT_BATCHES`] batches.
//!
//! A batch of an idempotent producer carries its producer id, epoch and
//! base sequence (record `i` has sequence `base + i`). Per partition and
//! producer, Kafka's rules:
//!
//! | batch | answer |
//! |---|---|
//! | the same sequences as one of the last five kept | a duplicate: the original base offset, nothing appended |
//! | base = last sequence + 1 (or 0 for a producer new here) | appended, kept |
//! | an older epoch than the producer's | INVALID_PRODUCER_EPOCH |
//! | a newer epoch starting at sequence 0 | appended; the producer's state restarts |
//! | anything else (a gap, a reorder) | OUT_OF_ORDER_SEQUENCE_NUMBER |
//!
//! The state lives in each partition's [`Log`](crate::log::Log), under its
//! lock. With `--data-dir` it is snapshotted when a segment rolls and
//! every eighth of a segment (`<offset>.snapshot`: the state before that
//! offset; see [`crate::log::partition`]) and rebuilt at start from the
//! newest snapshot and the batches after it (their headers keep id, epoch
//! and sequences). Producer ids come from
//! [`ProducerIds`]: with `--data-dir`, blocks of ids are reserved in a file
//! before any id of the block is handed out, so no id is given twice across
//! restarts.

use std::collections::{HashMap, VecDeque};
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use kafka_protocol::ResponseError;
use parking_lot::Mutex;

use crate::log::batch::BatchHeader;

/// How many of a producer's last batches a partition keeps (Kafka's five:
/// the most a producer may have in flight).
pub const KEPT_BATCHES: usize = 5;

/// How many producer ids a block reserves in the ids file.
const ID_BLOCK: i64 = 1024;

/// The producer id of a batch without one.
pub const NO_PRODUCER: i64 = -1;

/// A batch kept for duplicate detection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Kept {
    /// Its first sequence.
    first: i32,
    /// Its last sequence.
    last: i32,
    /// The offset it was appended at.
    base_offset: i64,
}

/// One producer's state in one partition.
#[derive(Clone, Debug, Default)]
struct Producer {
    /// Its epoch.
    epoch: i16,
    /// Its last batches, oldest first.
    kept: VecDeque<Kept>,
}

/// What to do with a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Append it (a batch without a producer, or the next in sequence).
    Append,
    /// Already appended at this base offset: answer with it, append nothing.
    Duplicate(i64),
    /// Refuse it.
    Refuse(ResponseError),
}

/// The idempotent producers of one partition.
#[derive(Clone, Debug, Default)]
pub struct Producers {
    /// By producer id.
    by_id: HashMap<i64, Producer>,
}

/// The sequence after `last` (sequences wrap from `i32::MAX` to 0).
fn after(last: i32) -> i32 {
    if last == i32::MAX {
        0
    } else {
        last + 1
    }
}

impl Producers {
    /// What to do with `batch`, which would be appended at `base_offset`.
    /// Does not change the state; [`appended`](Self::appended) does.
    pub fn check(&self, batch: &BatchHeader) -> Verdict {
        if batch.producer_id == NO_PRODUCER {
            return Verdict::Append;
        }
        let Some(producer) = self.by_id.get(&batch.producer_id) else {
            // New here: its first batch in this partition starts at 0.
            return if batch.base_sequence == 0 {
                Verdict::Append
            } else {
                Verdict::Refuse(ResponseError::OutOfOrderSequenceNumber)
            };
        };
        if batch.producer_epoch < producer.epoch {
            return Verdict::Refuse(ResponseError::InvalidProducerEpoch);
        }
        if batch.producer_epoch > producer.epoch {
            return if batch.base_sequence == 0 {
                Verdict::Append
            } else {
                Verdict::Refuse(ResponseError::OutOfOrderSequenceNumber)
            };
        }
        let last = batch.last_sequence();
        if let Some(kept) = producer
            .kept
            .iter()
            .find(|k| k.first == batch.base_sequence && k.last == last)
        {
            return Verdict::Duplicate(kept.base_offset);
        }
        match producer.kept.back() {
            Some(newest) if batch.base_sequence == after(newest.last) => Verdict::Append,
            None if batch.base_sequence == 0 => Verdict::Append,
            _ => Verdict::Refuse(ResponseError::OutOfOrderSequenceNumber),
        }
    }

    /// Records that `batch` was appended at `base_offset` (after
    /// [`check`](Self::check) said [`Verdict::Append`], or at recovery).
    pub fn appended(&mut self, batch: &BatchHeader, base_offset: i64) {
        if batch.producer_id == NO_PRODUCER {
            return;
        }
        let producer = self.by_id.entry(batch.producer_id).or_default();
        if batch.producer_epoch != producer.epoch {
            producer.epoch = batch.producer_epoch;
            producer.kept.clear();
        }
        if producer.kept.len() == KEPT_BATCHES {
            producer.kept.pop_front();
        }
        producer.kept.push_back(Kept {
            first: batch.base_sequence,
            last: batch.last_sequence(),
            base_offset,
        });
    }

    /// The largest producer id seen, if any.
    pub fn max_id(&self) -> Option<i64> {
        self.by_id.keys().copied().max()
    }

    /// Its state as bytes, for a snapshot file: per producer its id,
    /// epoch and kept batches, then a CRC-32C of it all.
    pub fn snapshot(&self) -> Vec<u8> {
        let mut bytes = (self.by_id.len() as u32).to_be_bytes().to_vec();
        for (id, producer) in &self.by_id {
            bytes.extend(id.to_be_bytes());
            bytes.extend(producer.epoch.to_be_bytes());
            bytes.push(producer.kept.len() as u8);
            for kept in &producer.kept {
                bytes.extend(kept.first.to_be_bytes());
                bytes.extend(kept.last.to_be_bytes());
                bytes.extend(kept.base_offset.to_be_bytes());
            }
        }
        let crc = crc32c::crc32c(&bytes);
        bytes.extend(crc.to_be_bytes());
        bytes
    }

    /// The state a [`snapshot`](Self::snapshot) holds; `None` if the bytes
    /// are not a whole, intact snapshot.
    pub fn from_snapshot(bytes: &[u8]) -> Option<Producers> {
        let (body, crc) = bytes.split_at_checked(bytes.len().checked_sub(4)?)?;
        if crc32c::crc32c(body).to_be_bytes() != crc {
            return None;
        }
        let mut rest = body;
        let mut take = |n: usize| -> Option<&[u8]> {
            let (taken, after) = rest.split_at_checked(n)?;
            rest = after;
            Some(taken)
        };
        let count = u32::from_be_bytes(take(4)?.try_into().ok()?);
        let mut by_id = HashMap::new();
        for _ in 0..count {
            let id = i64::from_be_bytes(take(8)?.try_into().ok()?);
            let epoch = i16::from_be_bytes(take(2)?.try_into().ok()?);
            let n = take(1)?[0];
            let mut kept = VecDeque::new();
            for _ in 0..n.min(KEPT_BATCHES as u8) {
                let field = take(16)?;
                kept.push_back(Kept {
                    first: i32::from_be_bytes(field[..4].try_into().ok()?),
                    last: i32::from_be_bytes(field[4..8].try_into().ok()?),
                    base_offset: i64::from_be_bytes(field[8..].try_into().ok()?),
                });
            }
            by_id.insert(id, Producer { epoch, kept });
        }
        Some(Producers { by_id })
    }
}

/// Hands out producer ids, never the same twice (with a file, across
/// restarts too).
pub struct ProducerIds {
    /// The next id, and the end of the block reserved.
    next: Mutex<IdBlock>,
    /// With `--data-dir`: the file holding the end of the reserved block.
    file: Option<PathBuf>,
}

/// The ids reserved and not yet handed out.
struct IdBlock {
    /// The next id to hand out.
    next: i64,
    /// The first id not reserved.
    end: i64,
}

impl ProducerIds {
    /// Ids from `first` on, without a file.
    pub fn in_memory(first: i64) -> ProducerIds {
        ProducerIds {
            next: Mutex::new(IdBlock {
                next: first,
                end: i64::MAX,
            }),
            file: None,
        }
    }

    /// Ids past what `path` reserved. Without the file (a data directory
    /// of an earlier layout, or a new one), past `seen()`, the largest id
    /// in the logs, which then reads every partition; the file is then
    /// written, so that the next start reads none.
    ///
    /// # Errors
    ///
    /// The file exists and cannot be read or holds no number, or it cannot
    /// be written.
    pub fn open(path: &Path, seen: impl FnOnce() -> Option<i64>) -> std::io::Result<ProducerIds> {
        let first = match fs::read_to_string(path) {
            Ok(text) => text.trim().parse::<i64>().map_err(std::io::Error::other)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let first = seen().map_or(0, |id| id + 1);
                reserve(path, first)?;
                first
            }
            Err(e) => return Err(e),
        };
        Ok(ProducerIds {
            next: Mutex::new(IdBlock {
                next: first,
                end: first,
            }),
            file: Some(path.to_path_buf()),
        })
    }

    /// A fresh producer id.
    ///
    /// # Errors
    ///
    /// The ids file could not be written and synced.
    pub fn next(&self) -> std::io::Result<i64> {
        let mut block = self.next.lock();
        if block.next == block.end {
            let end = block.end + ID_BLOCK;
            if let Some(path) = &self.file {
                // Reserved on disk before any id of the block is out.
                reserve(path, end)?;
            }
            block.end = end;
        }
        let id = block.next;
        block.next += 1;
        Ok(id)
    }
}

/// Writes `end`, the first id not reserved, to the ids file `path`:
/// written aside, fsynced, renamed over, the directory fsynced.
fn reserve(path: &Path, end: i64) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut file = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(&tmp)?;
    file.write_all(end.to_string().as_bytes())?;
    crate::log::sync::sync_file(&file)?;
    fs::rename(&tmp, path)?;
    // The new name durable too: a reservation that rolled back after a
    // power loss would hand out its ids again.
    if let Some(dir) = path.parent() {
        crate::log::sync::sync_dir(dir)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(id: i64, epoch: i16, base: i32, records: i32) -> BatchHeader {
        BatchHeader {
            producer_id: id,
            producer_epoch: epoch,
            base_sequence: base,
            last_offset_delta: records - 1,
        }
    }

    #[test]
    fn the_next_batch_appends_a_kept_one_is_a_duplicate_and_a_gap_is_refused() {
        let mut p = Producers::default();
        assert_eq!(
            p.check(&batch(7, 0, 3, 1)),
            Verdict::Refuse(ResponseError::OutOfOrderSequenceNumber)
        );
        assert_eq!(p.check(&batch(7, 0, 0, 3)), Verdict::Append);
        p.appended(&batch(7, 0, 0, 3), 100);
        assert_eq!(p.check(&batch(7, 0, 0, 3)), Verdict::Duplicate(100));
        assert_eq!(p.check(&batch(7, 0, 3, 2)), Verdict::Append);
        p.appended(&batch(7, 0, 3, 2), 103);
        assert_eq!(
            p.check(&batch(7, 0, 6, 1)),
            Verdict::Refuse(ResponseError::OutOfOrderSequenceNumber)
        );
        assert_eq!(p.check(&batch(7, 0, 3, 2)), Verdict::Duplicate(103));
        // Another producer is independent.
        assert_eq!(p.check(&batch(8, 0, 0, 1)), Verdict::Append);
    }

    #[test]
    fn only_the_last_five_batches_are_kept() {
        let mut p = Producers::default();
        for i in 0..6 {
            p.appended(&batch(1, 0, i, 1), i64::from(i));
        }
        assert_eq!(
            p.check(&batch(1, 0, 0, 1)),
            Verdict::Refuse(ResponseError::OutOfOrderSequenceNumber)
        );
        assert_eq!(p.check(&batch(1, 0, 1, 1)), Verdict::Duplicate(1));
        assert_eq!(p.check(&batch(1, 0, 6, 1)), Verdict::Append);
    }

    #[test]
    fn epochs_fence_older_ones_and_restart_sequences() {
        let mut p = Producers::default();
        p.appended(&batch(1, 2, 0, 5), 0);
        assert_eq!(
            p.check(&batch(1, 1, 5, 1)),
            Verdict::Refuse(ResponseError::InvalidProducerEpoch)
        );
        assert_eq!(
            p.check(&batch(1, 3, 5, 1)),
            Verdict::Refuse(ResponseError::OutOfOrderSequenceNumber)
        );
        assert_eq!(p.check(&batch(1, 3, 0, 1)), Verdict::Append);
        p.appended(&batch(1, 3, 0, 1), 5);
        assert_eq!(p.check(&batch(1, 3, 1, 1)), Verdict::Append);
    }

    #[test]
    fn sequences_wrap_at_the_largest_i32() {
        let mut p = Producers::default();
        p.appended(&batch(1, 0, 0, 1), 0);
        p.by_id.get_mut(&1).unwrap().kept.back_mut().unwrap().last = i32::MAX;
        assert_eq!(p.check(&batch(1, 0, 0, 1)), Verdict::Append);
    }

    #[test]
    fn ids_are_never_handed_out_twice_across_restarts() {
        let dir = std::env::temp_dir().join(format!("producer-ids-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("producer-ids");
        let first = ProducerIds::open(&path, || None).unwrap();
        let a = first.next().unwrap();
        let b = first.next().unwrap();
        assert_eq!((a, b), (0, 1));
        drop(first);
        let second =
            ProducerIds::open(&path, || unreachable!("the file says what is reserved")).unwrap();
        assert!(
            second.next().unwrap() >= ID_BLOCK,
            "ids of the reserved block are not reused"
        );
        // A data directory without the file: past the ids its logs hold,
        // and the file written, so the next start reads no log.
        let legacy = dir.join("legacy-ids");
        let third = ProducerIds::open(&legacy, || Some(5000)).unwrap();
        assert_eq!(third.next().unwrap(), 5001, "nor ids seen in the logs");
        drop(third);
        let fourth = ProducerIds::open(&legacy, || unreachable!("the file is there")).unwrap();
        assert!(fourth.next().unwrap() > 5001);
        fs::remove_dir_all(&dir).unwrap();
    }
}
