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
//!    segment, writes the snapshot, then fsyncs the directory (the
//!    renames: only then does the closed segment count as on disk; a
//!    failed fsync fails the partition, [`Log::fail`]);
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
use super::sync::{sync_dir, sync_file};
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
    /// The partition directory, fsynced after the files: the roll's
    /// renames (the active segment's names) are durable only then.
    dir: PathBuf,
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
    /// The closed segment it fsynced, and the directory after it (the
    /// segment's first and next offsets), or why not.
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
        let mut synced = self.sealed.map(|sealed| {
            sealed.files.sync().map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!(
                        "fsync of segment {} of {}: {e}",
                        sealed.base,
                        sealed.dir.display()
                    ),
                )
            })?;
            Ok((sealed.base, sealed.next, sealed.dir))
        });
        let mut snapshot = self.snapshot.map(|s| {
            write_snapshot(&s.dir, s.offset, &s.bytes)?;
            for &old in &s.obsolete {
                // A leftover file costs a few bytes; the next start
                // ignores it unless it is the newest.
                let _ = fs::remove_file(snapshot_path(&s.dir, old));
            }
            Ok((s.offset, s.obsolete, s.dir))
        });
        // One directory fsync for the roll's renames (the active segment's
        // names: the closed segment counts as synced only after it) and
        // the snapshot's: a snapshot is a shortcut, not data, and its
        // failure is not the partition's (a start replays the batches a
        // lost snapshot covered).
        let dir = match (&synced, &snapshot) {
            (Some(Ok((.., dir))), _) | (_, Some(Ok((.., dir)))) => Some(dir.clone()),
            _ => None,
        };
        if let Some(Err(e)) = dir.as_deref().map(sync_dir) {
            if let Some(Ok(_)) = synced {
                synced = Some(Err(io::Error::new(e.kind(), e.to_string())));
            }
            if let Some(Ok(_)) = snapshot {
                snapshot = Some(Err(e));
            }
        }
        let synced = synced.map(|r| r.map(|(base, next, _)| (base, next)));
        let snapshot = snapshot.map(|r| r.map(|(offset, obsolete, _)| (offset, obsolete)));
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
            match &self.place {
                Place::Dir(dir) => {
                    self.sealed = Some(Sealed {
                        files,
                        base: closed_base,
                        next: base,
                        dir: dir.clone(),
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
    /// succeeded. A failed fsync fails the log ([`Log::fail`]); a spare
    /// that could not be made is reported to the append waiting for it,
    /// if any, and made again when the next work is taken; a spare made
    /// clears an earlier failure (the disk recovered).
    pub fn finish(&mut self, done: RollDone) -> bool {
        self.working = false;
        let mut ok = true;
        match done.synced {
            Some(Ok((base, next))) => {
                if self.sealed.as_ref().is_some_and(|s| s.base == base) {
                    self.sealed = None;
                }
                // The directory's fsync covered the renames that installed
                // the segment at `next`.
                self.named = self.named.max(next);
                self.synced(base, next);
            }
            Some(Err(e)) => {
                self.fail(&e);
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
                self.failed = None;
            }
            Some(Err(e)) => {
                if std::mem::take(&mut self.wants_spare) {
                    self.failed = Some(e);
                }
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
        if std::mem::take(&mut self.wants_spare) {
            self.failed = Some(io::Error::other("the roll work did not finish"));
        }
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
    sync_file(&file)?;
    // Its name is made durable by the work's directory fsync.
    fs::rename(&tmp, &path)
}

/// The producers' state before `offset`, if its snapshot is there and
/// intact.
pub(super) fn read_snapshot(dir: &Path, offset: i64) -> Option<Producers> {
    Producers::from_snapshot(&fs::read(snapshot_path(dir, offset)).ok()?)
}

#[cfg(test)]
mod tests {
    use super::super::batch::testing::of;
    use super::super::partition::tests::{names, read_all, Scratch};
    use super::super::sync::seam;
    use super::super::Topic;
    use super::*;

    /// The group commit's step for `log`, on this thread.
    fn group_commit(log: &mut Log) {
        if let Some(target) = log.sync_target() {
            let result = target.run();
            log.target_synced(&target, result);
        }
    }

    /// Appends until an append needs the next segment and finds no spare.
    fn append_until_rolling(log: &mut Log) -> AppendError {
        loop {
            if let Err(e) = log.append(&of(1)) {
                return e;
            }
        }
    }

    #[test]
    fn a_failed_spare_is_a_typed_error_for_the_append_that_waited_and_forgotten_once_made() {
        let dir = Scratch::new("spare-fails");
        let mut log = Log::create(Place::Dir(dir.0.clone()), 1000);
        // A directory in the spare's way: the spare cannot be made.
        let blocker = dir.0.join("spare.index.tmp");
        fs::create_dir(&blocker).unwrap();
        assert!(matches!(log.append(&of(1)), Err(AppendError::Rolling)));
        log.work_now();
        match log.append(&of(1)) {
            Err(AppendError::Io(e)) => assert_eq!(e.kind(), io::ErrorKind::IsADirectory),
            other => panic!("{other:?}"),
        }
        fs::remove_dir(&blocker).unwrap();
        // Reported once: the next append waits for the next try.
        assert!(matches!(log.append(&of(1)), Err(AppendError::Rolling)));
        log.work_now();
        assert_eq!(log.append(&of(1)).unwrap(), 0);
        // Half full, with nobody waiting: a spare that fails is made again
        // later, and its failure reported to nobody.
        let work = loop {
            log.append(&of(1)).unwrap();
            match log.take_work() {
                Some(work) if work.makes_spare() => break work,
                // The producers' snapshot.
                Some(work) => assert!(log.finish(work.run())),
                None => {}
            }
        };
        fs::create_dir(&blocker).unwrap();
        assert!(!log.finish(work.run()));
        fs::remove_dir(&blocker).unwrap();
        log.work_now();
        // The roll uses the spare; the next roll finds none made yet (its
        // work is not run): it waits, with no stale error.
        assert!(matches!(
            append_until_rolling(&mut log),
            AppendError::Rolling
        ));
        assert_eq!(log.segment_count(), 2, "one roll happened");
        log.work_now();
        // Rolled: the spare was made meanwhile, so the roll went through.
        let rolled = append_until_rolling(&mut log);
        assert!(matches!(rolled, AppendError::Rolling), "{rolled}");
        assert_eq!(log.segment_count(), 3);
    }

    #[test]
    fn a_failed_fsync_fails_the_log_for_good() {
        let dir = Scratch::new("fsync-fails");
        let mut log = Log::create(Place::Dir(dir.0.clone()), 1 << 20);
        for _ in 0..10 {
            log.append_now(&of(1)).unwrap();
        }
        group_commit(&mut log);
        assert_eq!(log.durable(), 10);
        log.append_now(&of(1)).unwrap();
        seam::install(seam::Record {
            fail_files: true,
            ..Default::default()
        });
        let target = log.sync_target().unwrap();
        let result = target.run();
        assert!(result.is_err());
        log.target_synced(&target, result);
        // The disk "recovers": a second fsync would return 0 for bytes the
        // kernel dropped. Nothing moves again.
        seam::install(seam::Record::default());
        assert!(log.is_failed());
        assert!(log.sync_target().is_none(), "never fsynced again");
        log.synced(target.base, target.covered);
        assert_eq!(log.durable(), 10);
        assert!(matches!(log.append(&of(1)), Err(AppendError::Failed)));
        // A restart recovers what the disk holds.
        drop(log);
        assert_eq!(Log::open(&dir.0, 1 << 20).unwrap().next(), 11);
    }

    #[test]
    fn a_failed_fsync_of_a_closed_segment_fails_the_log() {
        let dir = Scratch::new("roll-fsync-fails");
        let mut log = Log::create(Place::Dir(dir.0.clone()), 1000);
        log.append_now(&of(1)).unwrap();
        log.work_now();
        // Roll, leaving the closed segment's fsync due.
        loop {
            match log.append(&of(1)) {
                Ok(_) if log.segment_count() == 2 => break,
                Ok(_) => {}
                Err(AppendError::Rolling) => log.work_now(),
                Err(e) => panic!("{e}"),
            }
        }
        let durable = log.durable();
        seam::install(seam::Record {
            fail_files: true,
            ..Default::default()
        });
        log.work_now();
        seam::install(seam::Record::default());
        assert!(log.is_failed());
        log.work_now();
        assert_eq!(log.durable(), durable);
        assert!(matches!(log.append(&of(1)), Err(AppendError::Failed)));
    }

    #[test]
    fn a_deleted_topics_roll_work_makes_no_file() {
        let dir = Scratch::new("deleted");
        let mut log = Log::create(Place::Dir(dir.0.clone()), 1000);
        assert!(matches!(log.append(&of(1)), Err(AppendError::Rolling)));
        let work = log.take_work().unwrap();
        let topic = Topic::new(vec![crate::log::LazyLog::open(log)], Default::default());
        topic.retire();
        // Its directory may be a new topic's by now.
        assert!(topic.run_work(work).is_none());
        assert!(names(&dir.0).is_empty());
        let mut log = topic.partitions[0].lock();
        assert!(matches!(log.append(&of(1)), Err(AppendError::Failed)));
    }

    /// Runs `steps` appends with the group commit after every `commit`-th,
    /// then a power loss as the fsyncs left it; every acknowledged offset
    /// must read back.
    fn survives_a_power_loss(name: &str, steps: usize, commit: usize) {
        let dir = Scratch::new(name);
        seam::install(seam::Record::default());
        let mut log = Log::create(Place::Dir(dir.0.clone()), 1000);
        let mut acked = 0;
        for i in 1..=steps {
            log.append_now(&of(1)).unwrap();
            if i % commit == 0 {
                group_commit(&mut log);
                acked = log.durable();
                // The roll work runs inline here: a group commit makes
                // everything appended so far durable (else this test would
                // pass with nothing acknowledged).
                assert_eq!(acked, i as i64, "{name}: the group commit moved durable");
            }
        }
        drop(log);
        seam::power_loss(&dir.0);
        let log = Log::open(&dir.0, 1000).unwrap();
        assert!(
            log.next() >= acked,
            "{name}: {} after the loss, {acked} acknowledged",
            log.next()
        );
        assert_eq!(
            read_all(&log, 0),
            (0..log.next()).collect::<Vec<_>>(),
            "{name}: a gap"
        );
        // What a start counts as durable survives the next loss too.
        let durable = log.durable();
        drop(log);
        seam::power_loss(&dir.0);
        let log = Log::open(&dir.0, 1000).unwrap();
        assert!(log.next() >= durable, "{name}: {} < {durable}", log.next());
    }

    #[test]
    fn every_acknowledged_record_survives_a_power_loss() {
        // A batch of `of(1)` is ~70 bytes: a roll every ~14 appends.
        for steps in [1, 2, 13, 14, 15, 16, 29, 30, 31, 44, 60] {
            for commit in [1, 3, 7, 20] {
                survives_a_power_loss(&format!("loss-{steps}-{commit}"), steps, commit);
            }
        }
    }

    #[test]
    fn a_start_counts_as_durable_only_what_it_fsynced() {
        let dir = Scratch::new("start-durable");
        seam::install(seam::Record::default());
        let mut log = Log::create(Place::Dir(dir.0.clone()), 1000);
        // No group commit: nothing of the active segment is fsynced.
        for _ in 0..40 {
            log.append_now(&of(1)).unwrap();
        }
        drop(log);
        let log = Log::open(&dir.0, 1000).unwrap();
        assert_eq!(log.durable(), 40);
        drop(log);
        seam::power_loss(&dir.0);
        assert_eq!(Log::open(&dir.0, 1000).unwrap().next(), 40);
    }
}
