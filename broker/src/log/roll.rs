//! Rolling a partition off its lock. The slow part of a roll (fsyncs, file
//! creation, snapshot files) is a [`RollWork`] that the caller runs
//! without the partition's lock and hands back to [`Log::finish`]; under
//! the lock a roll only seals the active segment (its pending index
//! entries written) and installs the spare made ahead (three renames):
//!
//! 1. once the active segment is half full (or there is none, or it
//!    just rolled), a work makes the next segment's files (a [`Spare`]);
//! 2. the append that would pass `--segment-bytes` seals the active
//!    segment and installs the spare; the sealed segment and a snapshot
//!    of the producers are handed to the next work, which fsyncs the
//!    segment, then writes the snapshot;
//! 3. only then is the next spare made (by the same work): at most the
//!    segment before the active one is ever not on disk, which is what a
//!    start checks;
//! 4. an append that finds no spare ready is refused with
//!    [`AppendError::Rolling`]: its caller waits for the work in flight
//!    and appends again.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::partition::{AppendError, Log};
use super::segment::{file_name, Place, Segment, SegmentFiles, Spare};
use crate::producers::Producers;

/// How many snapshots a partition keeps (the newest may be past the end
/// of what a crash left).
pub(super) const KEPT_SNAPSHOTS: usize = 2;

/// A closed segment whose fsync is due.
#[derive(Clone, Debug)]
pub(super) struct Sealed {
    /// Its files.
    files: SegmentFiles,
    /// Its first offset.
    base: i64,
    /// The offset after its last record (the active segment's base).
    next: i64,
}

/// A snapshot of the producers to write.
#[derive(Debug)]
struct SnapshotWrite {
    /// The partition directory.
    dir: PathBuf,
    /// The offset it is taken before.
    offset: i64,
    /// The producers' state, serialized.
    bytes: Vec<u8>,
    /// The older snapshots it makes obsolete (removed once it is written).
    obsolete: Vec<i64>,
}

/// The slow part of rolling a partition, taken under its lock by
/// [`Log::take_work`] and run without it: see the module's steps.
#[derive(Debug)]
pub struct RollWork {
    /// The closed segment to fsync.
    sealed: Option<Sealed>,
    /// The snapshot to write.
    snapshot: Option<SnapshotWrite>,
    /// Where to make the next segment's files, if they are due.
    spare: Option<Place>,
}

/// What a [`RollWork`] did, for [`Log::finish`].
#[derive(Debug)]
pub struct RollDone {
    /// The closed segment it fsynced (its first and next offsets), or why
    /// not.
    synced: Option<io::Result<(i64, i64)>>,
    /// The snapshot it wrote (its offset, and those it removed), or why not.
    snapshot: Option<io::Result<(i64, Vec<i64>)>>,
    /// The next segment's files, or why they could not be made.
    spare: Option<io::Result<Spare>>,
}

impl RollWork {
    /// Whether it makes the next segment's files.
    #[cfg(test)]
    pub fn makes_spare(&self) -> bool {
        self.spare.is_some()
    }

    /// Does it, blocking: the fsync first, then the snapshot, then the
    /// spare, which is made only once the closed segment is on disk.
    pub fn run(self) -> RollDone {
        let synced = self
            .sealed
            .map(|sealed| sealed.files.sync().map(|()| (sealed.base, sealed.next)));
        let snapshot = self.snapshot.map(|s| {
            write_snapshot(&s.dir, s.offset, &s.bytes)?;
            for &old in &s.obsolete {
                // A leftover file costs a few bytes; the next start
                // ignores it unless it is the newest.
                let _ = fs::remove_file(snapshot_path(&s.dir, old));
            }
            Ok((s.offset, s.obsolete))
        });
        let spare = match &synced {
            Some(Err(_)) => None,
            _ => self.spare.map(|place| place.spare()),
        };
        RollDone {
            synced,
            snapshot,
            spare,
        }
    }
}

impl Log {
    /// Seals the active segment and starts a new one at `base` with the
    /// spare made ahead; the sealed segment's fsync and the producers'
    /// snapshot are left to the next [`RollWork`].
    pub(super) fn roll(&mut self, base: i64) -> Result<(), AppendError> {
        let Some(spare) = self.spare.take() else {
            if let Some(e) = self.failed.take() {
                return Err(AppendError::Io(e));
            }
            self.wants_spare = true;
            return Err(AppendError::Rolling);
        };
        if let Some(active) = self.segments.back_mut() {
            if let Err(e) = active.seal() {
                self.spare = Some(spare);
                return Err(AppendError::Io(e));
            }
        }
        let segment = Segment::install(spare, base)?;
        let closed = self
            .segments
            .back()
            .map(|c| (c.base, c.origin + c.size, c.files()));
        self.segments.push_back(segment);
        if let Some((closed_base, end, files)) = closed {
            self.segments.back_mut().expect("just pushed").origin = end;
            match self.place {
                Place::Dir(_) => {
                    self.sealed = Some(Sealed {
                        files,
                        base: closed_base,
                        next: base,
                    });
                }
                // Nothing to fsync.
                Place::Anonymous(_) => self.synced(closed_base, base),
            }
            self.snapshot(base);
        }
        Ok(())
    }

    /// Takes the producers' state before `offset`, for the next
    /// [`RollWork`] to write (with `--data-dir`).
    pub(super) fn snapshot(&mut self, offset: i64) {
        self.since_snapshot = 0;
        if let Place::Dir(_) = self.place {
            self.snapshot_due = Some((offset, self.producers.snapshot()));
        }
    }

    /// The slow work due (see the module's steps), if any and none is out:
    /// the caller runs it without the lock ([`RollWork::run`], blocking)
    /// and hands the outcome to [`finish`](Self::finish).
    pub fn take_work(&mut self) -> Option<RollWork> {
        if self.working {
            return None;
        }
        // A partition that just rolled gets its next spare as soon as the
        // closed segment is on disk (it is busy); another once its active
        // segment is half full.
        let spare_due = self.spare.is_none()
            && (self.wants_spare
                || self.sealed.is_some()
                || self
                    .segments
                    .back()
                    .is_some_and(|active| active.size >= self.segment_bytes / 2));
        if self.sealed.is_none() && self.snapshot_due.is_none() && !spare_due {
            return None;
        }
        self.working = true;
        let snapshot = match (&self.place, self.snapshot_due.take()) {
            (Place::Dir(dir), Some((offset, bytes))) => {
                let newer = self.snapshots.iter().filter(|&&o| o != offset).count() + 1;
                Some(SnapshotWrite {
                    dir: dir.clone(),
                    offset,
                    bytes,
                    obsolete: self
                        .snapshots
                        .iter()
                        .copied()
                        .filter(|&o| o != offset)
                        .take(newer.saturating_sub(KEPT_SNAPSHOTS))
                        .collect(),
                })
            }
            _ => None,
        };
        Some(RollWork {
            sealed: self.sealed.clone(),
            snapshot,
            spare: spare_due.then(|| self.place.clone()),
        })
    }

    /// Takes back what a [`RollWork`] did; returns whether all of it
    /// succeeded (a failure is reported to the next append that needs a
    /// roll, and the work is tried again when the next one is taken).
    pub fn finish(&mut self, done: RollDone) -> bool {
        self.working = false;
        let mut ok = true;
        match done.synced {
            Some(Ok((base, next))) => {
                if self.sealed.as_ref().is_some_and(|s| s.base == base) {
                    self.sealed = None;
                }
                self.synced(base, next);
            }
            Some(Err(e)) => {
                self.failed = Some(e);
                ok = false;
            }
            None => {}
        }
        match done.snapshot {
            Some(Ok((offset, obsolete))) => {
                self.snapshots
                    .retain(|o| *o != offset && !obsolete.contains(o));
                self.snapshots.push_back(offset);
            }
            // The next snapshot will do.
            Some(Err(_)) => ok = false,
            None => {}
        }
        match done.spare {
            Some(Ok(spare)) => {
                self.spare = Some(spare);
                self.wants_spare = false;
            }
            Some(Err(e)) => {
                self.failed = Some(e);
                self.wants_spare = false;
                ok = false;
            }
            None => {}
        }
        ok
    }

    /// Gives up a [`RollWork`] that did not come back (it panicked): the
    /// next take tries again.
    pub fn abandon_work(&mut self) {
        self.working = false;
        self.wants_spare = false;
        self.failed = Some(io::Error::other("the roll work did not finish"));
    }
}

/// The snapshot file of the producers' state before `offset`.
pub(super) fn snapshot_path(dir: &Path, offset: i64) -> PathBuf {
    file_name(dir, offset, "snapshot")
}

/// Writes a snapshot of the producers' state before `offset`: to a
/// temporary file, then renamed, so a snapshot is whole or absent (a
/// start removes a temporary one, ignores one past what the log holds, and
/// one whose CRC does not match).
fn write_snapshot(dir: &Path, offset: i64, bytes: &[u8]) -> io::Result<()> {
    let path = snapshot_path(dir, offset);
    let tmp = path.with_extension("snapshot.tmp");
    let mut file = File::create(&tmp)?;
    file.write_all(bytes)?;
    // On disk before its name: after a crash the name never points at a
    // partial file.
    file.sync_data()?;
    fs::rename(&tmp, &path)
}

/// The producers' state before `offset`, if its snapshot is there and
/// intact.
pub(super) fn read_snapshot(dir: &Path, offset: i64) -> Option<Producers> {
    Producers::from_snapshot(&fs::read(snapshot_path(dir, offset)).ok()?)
}
