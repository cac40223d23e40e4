//! The partition's log, scenario by scenario: rolls, reads across
//! segments, recovery after crashes, the producers' snapshots.

use super::super::batch::testing::{of, timed};
use super::super::read::First;
use super::super::roll::{snapshot_path, KEPT_SNAPSHOTS};
use super::super::segment::file_name;
use super::*;
use std::fs;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::path::PathBuf;

/// A scratch directory, removed when dropped.
pub(in crate::log) struct Scratch(pub(in crate::log) PathBuf);

impl Scratch {
    pub(in crate::log) fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("pg-partition-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Every batch read from `offset` on, one segment at a time.
pub(in crate::log) fn read_all(log: &Log, mut offset: i64) -> Vec<i64> {
    let mut bases = Vec::new();
    while offset < log.next() {
        let bytes = log
            .slice(offset)
            .unwrap()
            .read(usize::MAX, First::Whole { max: usize::MAX })
            .unwrap();
        let mut at = 0;
        while at < bytes.len() {
            let batch = &bytes[at..];
            let base = i64::from_be_bytes(batch[..8].try_into().unwrap());
            bases.push(base);
            offset = base + last_delta(batch) + 1;
            at += super::super::batch::whole_len(batch).unwrap();
        }
    }
    bases
}

#[test]
fn batches_roll_into_segments_and_read_back_across_them() {
    let dir = Scratch::new("roll");
    let mut log = Log::create(Place::Dir(dir.0.clone()), 1000);
    // No file until the first append.
    assert_eq!(log.segment_count(), 0);
    assert!(log
        .slice(0)
        .unwrap()
        .read(100, First::Whole { max: usize::MAX })
        .unwrap()
        .is_empty());
    assert!(fs::read_dir(&dir.0).unwrap().next().is_none());
    for _ in 0..100 {
        log.append_now(&of(3)).unwrap();
    }
    assert!(log.segment_count() > 5, "{} segments", log.segment_count());
    assert_eq!(log.next(), 300);
    let bases = read_all(&log, 0);
    assert_eq!(bases, (0..100).map(|i| i * 3).collect::<Vec<_>>());
    // From the middle of a batch: that batch.
    assert_eq!(read_all(&log, 151)[0], 150);
    assert!(matches!(log.slice(301), Err(Unreadable::OutOfRange)));
    // The bytes from an offset: a position once, then a subtraction.
    let from = log.position_of(297).unwrap().unwrap();
    assert_eq!(log.end_position() - from, of(3).len() as u64);
    let at_end = log.position_of(300).unwrap().unwrap();
    assert_eq!(log.end_position(), at_end);
    log.append_now(&of(2)).unwrap();
    assert_eq!(
        log.end_position() - from,
        (of(3).len() + of(2).len()) as u64
    );
    assert_eq!(log.position_of(303).unwrap(), None, "past the end");
    let bases = read_all(&log, 0);
    let reopened = Log::open(&dir.0, 1000).unwrap();
    assert_eq!(reopened.segment_count(), log.segment_count());
    assert_eq!(read_all(&reopened, 0), bases);
}

#[test]
fn times_are_found_through_the_time_index_before_and_after_a_restart() {
    let dir = Scratch::new("time");
    let mut log = Log::create(Place::Dir(dir.0.clone()), 4000);
    // 200 batches of two records, timestamps 10 ms apart.
    for i in 0..200i64 {
        log.append_now(&timed(&[i * 20, i * 20 + 10])).unwrap();
    }
    let check = |log: &Log| {
        for ts in [0, 5, 10, 11, 1_234, 3_990, 3_991] {
            let found = log.offset_for_time(ts).unwrap().map(|t| t.offset);
            let expected = (ts + 9) / 10;
            assert_eq!(found, (expected < 400).then_some(expected), "at {ts}");
        }
        let max = log.offset_of_max_time().unwrap().unwrap();
        assert_eq!((max.offset, max.timestamp), (399, 3_990));
    };
    check(&log);
    drop(log);
    check(&Log::open(&dir.0, 4000).unwrap());
}

#[test]
fn after_a_crash_the_indexes_written_and_the_batches_after_them_agree() {
    let dir = Scratch::new("crash");
    let mut log = Log::create(Place::Dir(dir.0.clone()), 8 << 20);
    // About 2.4 MB in one segment: some index entries written, the
    // newest pending in memory, lost with the process.
    for i in 0..30_000i64 {
        log.append_now(&timed(&[i * 2, i * 2 + 1])).unwrap();
    }
    let index = fs::metadata(file_name(&dir.0, 0, "index")).unwrap().len();
    assert!(index > 0 && index < 600 * 8, "{index} bytes of index");
    drop(log);
    let log = Log::open(&dir.0, 8 << 20).unwrap();
    assert_eq!(log.next(), 60_000);
    let max = log.offset_of_max_time().unwrap().unwrap();
    assert_eq!((max.offset, max.timestamp), (59_999, 59_999));
    for ts in [0, 1, 12_345, 40_000, 59_998, 59_999] {
        let found = log.offset_for_time(ts).unwrap().map(|t| t.offset);
        assert_eq!(found, Some(ts), "at {ts}");
    }
    assert_eq!(log.offset_for_time(60_000).unwrap(), None);
    assert_eq!(read_all(&log, 0).len(), 30_000);
}

#[test]
fn a_torn_tail_is_cut_off_and_the_index_rebuilt() {
    let dir = Scratch::new("torn");
    let mut log = Log::create(Place::Dir(dir.0.clone()), 1 << 20);
    for i in 0..500i64 {
        log.append_now(&timed(&[i, i])).unwrap();
    }
    let size = log.size();
    drop(log);
    let path = file_name(&dir.0, 0, "log");
    let file = fs::OpenOptions::new().write(true).open(&path).unwrap();
    // Half of the last batch gone.
    file.set_len(size - 20).unwrap();
    let mut log = Log::open(&dir.0, 1 << 20).unwrap();
    assert_eq!(log.next(), 998);
    assert_eq!(log.append_now(&of(1)).unwrap(), 998);
    drop(log);
    // Garbage after the last batch: its CRC does not match.
    let size = fs::metadata(&path).unwrap().len();
    file.write_all_at(&timed(&[7, 7])[..70], size).unwrap();
    file.write_all_at(&[0xff; 10], size + 64).unwrap();
    let log = Log::open(&dir.0, 1 << 20).unwrap();
    assert_eq!(log.next(), 999);
    assert_eq!(fs::metadata(&path).unwrap().len(), size);
    // The torn batch (timestamp 499) is gone from the time index too.
    assert_eq!(
        log.offset_for_time(498).unwrap().map(|t| t.offset),
        Some(996)
    );
    assert_eq!(log.offset_for_time(499).unwrap(), None);
    assert_eq!(read_all(&log, 0).len(), 500);
}

#[test]
fn producers_are_restored_from_the_last_snapshot_and_the_batches_after_it() {
    let dir = Scratch::new("producers");
    // Snapshots at each roll (every ~1 MiB) and every 128 KiB.
    let mut log = Log::create(Place::Dir(dir.0.clone()), 1 << 20);
    for seq in 0..40_000i32 {
        let mut batch = of(1);
        batch[43..51].copy_from_slice(&7i64.to_be_bytes());
        batch[53..57].copy_from_slice(&seq.to_be_bytes());
        let crc = crc32c::crc32c(&batch[21..]);
        batch[17..21].copy_from_slice(&crc.to_be_bytes());
        assert_eq!(
            log.producers.check(&BatchHeader::of(&batch)),
            crate::producers::Verdict::Append
        );
        log.append_now(&batch).unwrap();
    }
    assert!(log.segment_count() >= 2);
    let snapshots = fs::read_dir(&dir.0)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "snapshot")
        })
        .count();
    assert_eq!(snapshots, KEPT_SNAPSHOTS);
    let expected = log.producers.snapshot();
    drop(log);
    // One past the log's end (what a crash can leave): not used, gone.
    let stale = snapshot_path(&dir.0, 1_000_000);
    fs::write(&stale, Producers::default().snapshot()).unwrap();
    let reopened = Log::open(&dir.0, 1 << 20).unwrap();
    assert_eq!(reopened.producers.snapshot(), expected);
    assert!(!stale.exists());
    // Without any snapshot, every batch is replayed: the same state.
    for e in fs::read_dir(&dir.0).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_some_and(|x| x == "snapshot") {
            fs::remove_file(path).unwrap();
        }
    }
    assert_eq!(
        Log::open(&dir.0, 1 << 20).unwrap().producers.snapshot(),
        expected
    );
}

/// The files of `dir`, sorted.
pub(in crate::log) fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn a_roll_under_the_lock_only_installs_files_made_and_fsyncs_done_off_it() {
    let dir = Scratch::new("off-lock");
    let mut log = Log::create(Place::Dir(dir.0.clone()), 1000);
    // The first append makes no file: it waits for the work.
    assert!(matches!(log.append(&of(3)), Err(AppendError::Rolling)));
    assert!(names(&dir.0).is_empty());
    let work = log.take_work().expect("the first segment's files are due");
    assert!(log.take_work().is_none(), "one work at a time");
    // The work owns all it needs: it runs without the log (the lock).
    let done = std::thread::spawn(move || work.run()).join().unwrap();
    assert_eq!(
        names(&dir.0),
        ["spare.index.tmp", "spare.log.tmp", "spare.timeindex.tmp"]
    );
    assert!(log.finish(done));
    assert_eq!(log.append(&of(3)).unwrap(), 0);
    // Half full: the next segment's files are due; while they are
    // made, appends go on until one needs them.
    let mut appended = 3;
    let spare = loop {
        match log.take_work() {
            Some(work) if work.makes_spare() => break work,
            // The producers' snapshot, every eighth of a segment.
            Some(work) => assert!(log.finish(work.run())),
            None => {}
        }
        assert_eq!(log.append(&of(3)).unwrap(), appended);
        appended += 3;
    };
    let last = loop {
        match log.append(&of(3)) {
            Ok(base) => assert_eq!(base, appended),
            Err(e) => break e,
        }
        appended += 3;
    };
    assert!(matches!(last, AppendError::Rolling), "{last}");
    assert!(log.take_work().is_none(), "one work at a time");
    assert_eq!(log.segment_count(), 1);
    assert!(log.finish(spare.run()));
    // The roll: the spare installed under its base offset's names; the
    // closed segment is not yet durable: its fsync is the next work.
    assert_eq!(log.append(&of(3)).unwrap(), appended);
    assert_eq!(log.segment_count(), 2);
    let base = file_name(&dir.0, appended, "log");
    assert!(base.exists() && !dir.0.join("spare.log.tmp").exists());
    assert!(log.durable() < appended);
    // The group commit's fsync of the active segment must not pass the
    // closed one's.
    log.synced(appended, appended + 3);
    assert!(log.durable() < appended);
    let work = log.take_work().expect("the closed segment's fsync");
    assert!(!snapshot_path(&dir.0, appended).exists());
    assert_eq!(
        log.append(&of(3)).unwrap(),
        appended + 3,
        "appends go on meanwhile"
    );
    assert!(log.finish(work.run()));
    assert_eq!(log.durable(), appended + 3, "both fsyncs joined");
    assert!(
        snapshot_path(&dir.0, appended).exists(),
        "the roll's snapshot, written by the work"
    );
}

#[test]
fn a_start_removes_what_a_crash_left_half_made() {
    let dir = Scratch::new("leftovers");
    let mut log = Log::create(Place::Dir(dir.0.clone()), 1 << 20);
    log.append_now(&of(2)).unwrap();
    drop(log);
    for leftover in [
        "00000000000000000002.snapshot.tmp",
        "spare.log.tmp",
        "spare.index.tmp",
    ] {
        fs::write(dir.0.join(leftover), b"half").unwrap();
    }
    // A roll's renames cut short: indexes without their log.
    fs::write(file_name(&dir.0, 9, "index"), b"").unwrap();
    fs::write(file_name(&dir.0, 9, "timeindex"), b"").unwrap();
    let log = Log::open(&dir.0, 1 << 20).unwrap();
    assert_eq!(log.next(), 2);
    assert_eq!(
        names(&dir.0),
        [
            "00000000000000000000.index",
            "00000000000000000000.log",
            "00000000000000000000.timeindex"
        ]
    );
}

#[test]
fn a_closed_segment_that_lost_its_tail_takes_the_segment_after_it_along() {
    let dir = Scratch::new("lost-tail");
    let mut log = Log::create(Place::Dir(dir.0.clone()), 1000);
    for _ in 0..30 {
        log.append_now(&of(1)).unwrap();
    }
    let bases: Vec<i64> = log.segments.iter().map(|s| s.base).collect();
    assert!(bases.len() >= 3, "{bases:?}");
    drop(log);
    // A power loss before the closed segment's fsync: its last batch
    // is gone, so the active segment's offsets no longer follow.
    let closed = bases[bases.len() - 2];
    let path = file_name(&dir.0, closed, "log");
    let len = fs::metadata(&path).unwrap().len();
    let file = fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(len - 1).unwrap();
    let active = bases[bases.len() - 1];
    let log = Log::open(&dir.0, 1000).unwrap();
    assert_eq!(log.next(), active - 1);
    assert_eq!(log.segment_count(), bases.len() - 1);
    assert!(!file_name(&dir.0, active, "log").exists());
    assert_eq!(read_all(&log, 0), (0..active - 1).collect::<Vec<_>>());
}

#[test]
fn a_start_raised_inside_a_segment_hides_the_records_below_it_and_is_read_back() {
    let dir = Scratch::new("start");
    let mut log = Log::create(Place::Dir(dir.0.clone()), 1000);
    for _ in 0..10 {
        log.append_now(&of(10)).unwrap();
    }
    assert_eq!(log.raise_start(101), RaisedStart::OutOfRange);
    assert_eq!(log.raise_start(-1), RaisedStart::OutOfRange);
    assert_eq!(log.raise_start(35), RaisedStart::Moved(35));
    assert_eq!(log.raise_start(20), RaisedStart::Kept(35));
    assert_eq!(log.start(), 35);
    assert!(matches!(log.slice(34), Err(Unreadable::OutOfRange)));
    // The batch holding 35 is served whole, from its base (as Kafka does).
    assert_eq!(read_all(&log, 35).first(), Some(&30));
    // Not written yet: the caller writes it off the lock.
    assert_eq!(Log::open(&dir.0, 1000).unwrap().start(), 0);
    log.start_file().unwrap().unwrap().write().unwrap();
    assert!(!dir.0.join("log-start-offset.tmp").exists());
    drop(log);
    let reopened = Log::open(&dir.0, 1000).unwrap();
    assert_eq!((reopened.start(), reopened.next()), (35, 100));
    // A start past what a crash left of the log (its last batches, acks=1,
    // lost): the log is emptied at the start, and goes on from it.
    std::fs::write(dir.0.join("log-start-offset"), "250\n").unwrap();
    let mut emptied = Log::open(&dir.0, 1000).unwrap();
    assert_eq!((emptied.start(), emptied.next()), (250, 250));
    assert_eq!(emptied.append_now(&of(1)).unwrap(), 250);
    assert_eq!(
        emptied.durable(),
        250,
        "nothing below the start to wait for"
    );
    // A file that holds no offset is an error naming it, not a guess.
    std::fs::write(dir.0.join("log-start-offset"), "banana").unwrap();
    let error = Log::open(&dir.0, 1000).unwrap_err().to_string();
    assert!(
        error.contains("log-start-offset holds no offset"),
        "{error}"
    );
}

#[test]
fn a_failed_log_with_a_directory_has_no_start_to_write_and_says_so() {
    let dir = Scratch::new("failed-start");
    let mut log = Log::create(Place::Dir(dir.0.clone()), 1000);
    log.append_now(&of(10)).unwrap();
    assert_eq!(log.raise_start(5), RaisedStart::Moved(5));
    log.fail(&std::io::Error::other("a test's failure"));
    assert!(log.start_file().is_err());
    // Without a directory there is nothing to keep: no error.
    let anonymous = Log::create(Place::Anonymous(dir.0.clone()), 1000);
    assert!(anonymous.start_file().unwrap().is_none());
}
