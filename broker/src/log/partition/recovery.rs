//! A partition's log read back at start: see the table in [`super`]'s
//! docs of what a start reads.

use std::collections::VecDeque;
use std::fs;
use std::io;
use std::path::Path;

use super::super::batch::BatchHeader;
use super::super::roll::{read_snapshot, snapshot_path};
use super::super::segment::{file_name, Place, Segment};
use super::super::sync::{sync_dir, sync_file};
use super::start::{read_start, START_FILE};
use super::Log;

impl Log {
    /// The log in the partition directory `dir` (see the module's table of
    /// what a start reads); an empty directory is an empty log.
    ///
    /// # Errors
    ///
    /// A file could not be listed, opened, read, cut or removed.
    pub fn open(dir: &Path, segment_bytes: u64) -> io::Result<Log> {
        let (mut bases, mut snapshots, mut indexes) = (Vec::new(), Vec::new(), Vec::new());
        // Whether a file a crash left was removed (its removal to be made
        // durable).
        let mut removed = false;
        // Whether DeleteRecords moved its start (listed, so that an empty
        // partition's reading stays one directory listing).
        let mut has_start = false;
        for entry in fs::read_dir(dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else {
                continue;
            };
            if name.ends_with(".tmp") {
                // A snapshot or a spare segment a crash left half made.
                fs::remove_file(entry.path())?;
                removed = true;
                continue;
            }
            if name == START_FILE {
                has_start = true;
                continue;
            }
            let Some((stem, extension)) = name.split_once('.') else {
                continue;
            };
            match (stem.parse::<i64>(), extension) {
                (Ok(base), "log") => bases.push(base),
                (Ok(offset), "snapshot") => snapshots.push(offset),
                (Ok(base), "index" | "timeindex") => indexes.push((base, entry.path())),
                _ => {}
            }
        }
        let start = if has_start { read_start(dir)? } else { None };
        bases.sort_unstable();
        snapshots.sort_unstable();
        // Indexes without their log: a roll's renames cut short by a crash
        // (the log is renamed last).
        for (base, path) in indexes {
            if bases.binary_search(&base).is_err() {
                fs::remove_file(path)?;
                removed = true;
            }
        }
        let mut segments = VecDeque::with_capacity(bases.len());
        let trusted = bases.len().saturating_sub(2);
        for (i, &base) in bases[..trusted].iter().enumerate() {
            let mut segment = Segment::open_closed(dir, base)?;
            segment.next = bases[i + 1];
            segments.push_back(segment);
        }
        match bases[trusted..] {
            [] => {
                // What a crash left half made is gone for good. An empty
                // partition, the usual case, costs no fsync.
                if removed {
                    sync_dir(dir)?;
                }
                let place = Place::Dir(dir.to_path_buf());
                return Ok(match start {
                    Some(start) => Log::empty_from(place, segment_bytes, start),
                    None => Log::create(place, segment_bytes),
                });
            }
            [last] => segments.push_back(Segment::recover(dir, last)?),
            [closed, last] => {
                // The closed segment's fsync may not have finished.
                let mut segment = Segment::recover(dir, closed)?;
                segment.seal()?;
                segment.files().sync()?;
                let follows = segment.next == last;
                segments.push_back(segment);
                if follows {
                    segments.push_back(Segment::recover(dir, last)?);
                } else {
                    // Its tail was lost: the last segment's offsets no
                    // longer follow, and it goes.
                    for extension in ["log", "index", "timeindex"] {
                        fs::remove_file(file_name(dir, last, extension))?;
                    }
                }
            }
            _ => unreachable!("at most two segments are recovered"),
        }
        let mut origin = 0;
        for segment in &mut segments {
            segment.origin = origin;
            origin += segment.size;
        }
        // What is durable from here on is what is on disk now: the last
        // segment (its recovered bytes, its cut) and the removals and
        // names of the directory.
        let last = segments.back_mut().expect("a segment at least");
        sync_file(&last.log_file())?;
        let (next, named) = (last.next, last.base);
        // A snapshot past what the crash left describes batches that are
        // gone: removed, lest the log grow past it again.
        for &offset in snapshots.iter().filter(|&&offset| offset > next) {
            fs::remove_file(snapshot_path(dir, offset))?;
        }
        snapshots.retain(|&offset| offset <= next);
        // The producers: the newest intact snapshot, then the batches after
        // it (none: every batch, from nothing known).
        let (from, mut producers) = snapshots
            .iter()
            .rev()
            .find_map(|&offset| Some((offset, read_snapshot(dir, offset)?)))
            .unwrap_or_default();
        let mut replay = |h: &BatchHeader, base| producers.appended(h, base);
        for segment in segments.iter().filter(|s| s.next > from) {
            segment.replay_from(from, &mut replay)?;
        }
        let mut log = Log::create(Place::Dir(dir.to_path_buf()), segment_bytes);
        log.segments = segments;
        log.producers = producers;
        log.snapshots = snapshots.into();
        if let Some(start) = start.filter(|&start| start > next) {
            // DeleteRecords moved the start past what the crash left (records
            // acknowledged with acks=1, lost): every record below it is gone
            // either way, and the log goes on from it, as Kafka's does.
            for segment in std::mem::take(&mut log.segments) {
                segment.delete()?;
            }
            for offset in log.snapshots.drain(..) {
                // (A segment's deletion removed the snapshot at its base.)
                match fs::remove_file(snapshot_path(dir, offset)) {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                    _ => {}
                }
            }
            sync_dir(dir)?;
            return Ok(Log::empty_from(
                Place::Dir(dir.to_path_buf()),
                segment_bytes,
                start,
            ));
        }
        log.deleted_below = start.unwrap_or(0);
        sync_dir(dir)?;
        log.named = named;
        log.durable = next;
        Ok(log)
    }
}
