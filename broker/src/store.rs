//! `--data-dir`: the partitions' directories, and the group commit.
//!
//! Each partition is a directory `<dir>/<topic>/<partition>/` of segments
//! (see [`crate::log`]). A produce appends under the partition's lock and
//! marks the partition dirty; one task fsyncs every dirty partition's
//! active segment (one fsync covers every produce since the last: a group
//! commit; a segment that rolled was fsynced as it closed), then completes
//! the acks=-1 produces that the fsync covered. At start each partition
//! reads only its last segment's tail ([`Log::open`]). A data directory of
//! the earlier layout (`<topic>/<partition>.log`, one file per partition)
//! is moved into the new one: the file becomes the partition's first
//! segment, indexed at that first start.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::broker::Broker;
use crate::log::segment::file_name;
use crate::log::{Log, TopicPartition};
use crate::offsets::{GroupCommit, OffsetsLog};

/// Where partitions are kept, and which need an fsync.
pub struct Store {
    /// The data directory.
    dir: PathBuf,
    /// The size past which a segment rolls, bytes.
    segment_bytes: u64,
    /// Partitions appended to since their last fsync.
    dirty: Mutex<HashSet<TopicPartition>>,
    /// Committed offsets.
    offsets: Mutex<OffsetsLog>,
    /// Whether commits were appended since the last fsync of `offsets`.
    offsets_dirty: AtomicBool,
    /// Wakes the group commit.
    wake: tokio::sync::Notify,
}

/// What a data directory held.
pub struct Recovered {
    /// The logs of the recovered topics, by name.
    pub topics: HashMap<String, Vec<Log>>,
    /// The groups' live commits.
    pub commits: Vec<GroupCommit>,
}

/// A file or directory of the store that could not be used.
#[derive(Debug)]
pub struct OpenError {
    /// What was being done ("create the data directory", "read", ...).
    pub action: &'static str,
    /// The path it was done to.
    pub path: PathBuf,
    /// Why it failed.
    pub source: std::io::Error,
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "cannot {} {}: {}",
            self.action,
            self.path.display(),
            self.source
        )
    }
}

impl std::error::Error for OpenError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// Attaches what was done, and to which path, to an I/O result.
trait Context<T> {
    fn doing(self, action: &'static str, path: &Path) -> Result<T, OpenError>;
}

impl<T> Context<T> for std::io::Result<T> {
    fn doing(self, action: &'static str, path: &Path) -> Result<T, OpenError> {
        self.map_err(|source| OpenError {
            action,
            path: path.to_path_buf(),
            source,
        })
    }
}

impl Store {
    /// Opens `dir` (creating it) and every partition in it, with segments
    /// of `segment_bytes`.
    ///
    /// # Errors
    ///
    /// [`OpenError`] naming the directory or file that could not be created,
    /// listed, read or truncated.
    pub fn open(dir: PathBuf, segment_bytes: u64) -> Result<(Store, Recovered), OpenError> {
        fs::create_dir_all(&dir).doing("create the data directory", &dir)?;
        let mut topics = HashMap::new();
        for entry in fs::read_dir(&dir).doing("list the data directory", &dir)? {
            let entry = entry.doing("list the data directory", &dir)?;
            let path = entry.path();
            if !entry.file_type().doing("inspect", &path)?.is_dir() {
                continue;
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            let mut count = 0usize;
            for file in fs::read_dir(&path).doing("list the topic directory", &path)? {
                let file = file.doing("list the topic directory", &path)?.path();
                let Some(index) = file
                    .file_stem()
                    .and_then(|s| s.to_str())
                    .and_then(|s| s.parse::<usize>().ok())
                    // A stray name past the partition bound is not ours: it
                    // must not make the start create that many partitions.
                    .filter(|&index| index < crate::broker::MAX_PARTITIONS as usize)
                else {
                    continue;
                };
                match file.extension().and_then(|e| e.to_str()) {
                    None if file.is_dir() => {}
                    Some("log") => migrate(&file, &path.join(index.to_string()))?,
                    _ => continue,
                }
                count = count.max(index + 1);
            }
            // Partitions are numbered from 0 without gaps; recreate any lost.
            let logs = (0..count)
                .map(|i| open_partition(&path.join(i.to_string()), segment_bytes))
                .collect::<Result<Vec<_>, _>>()?;
            if !logs.is_empty() {
                topics.insert(name, logs);
            }
        }
        let offsets_path = dir.join("@offsets.log");
        let (offsets, commits) = OffsetsLog::open(&offsets_path).doing("read", &offsets_path)?;
        let store = Store {
            dir,
            segment_bytes,
            dirty: Mutex::default(),
            offsets: Mutex::new(offsets),
            offsets_dirty: AtomicBool::new(false),
            wake: tokio::sync::Notify::new(),
        };
        Ok((store, Recovered { topics, commits }))
    }

    /// Creates the directories of a new topic.
    ///
    /// # Errors
    ///
    /// [`OpenError`] naming the directory or file that could not be made.
    pub fn create(&self, topic: &str, partitions: i32) -> Result<Vec<Log>, OpenError> {
        let dir = self.dir.join(topic);
        (0..partitions)
            .map(|i| open_partition(&dir.join(i.to_string()), self.segment_bytes))
            .collect()
    }

    /// The file reserving producer ids: a name no topic can have.
    pub fn producer_ids_path(&self) -> PathBuf {
        self.dir.join("@producer-ids")
    }

    /// Appends group commits to the offsets log; returns the count of
    /// records the fsync must cover for them to be durable.
    ///
    /// # Errors
    ///
    /// [`OpenError`] naming the offsets log, if the write failed.
    pub fn commit(&self, commits: &[GroupCommit]) -> Result<u64, OpenError> {
        let mut offsets = self.offsets.lock();
        let path = offsets.path().to_path_buf();
        let written = offsets.append(commits).doing("append to", &path)?;
        drop(offsets);
        self.offsets_dirty.store(true, Ordering::Release);
        self.wake.notify_one();
        Ok(written)
    }

    /// Whether the offsets log is fsynced past `records`.
    pub fn commits_durable(&self, records: u64) -> bool {
        self.offsets.lock().durable >= records
    }

    /// Removes the files of a deleted topic.
    ///
    /// # Errors
    ///
    /// [`OpenError`] naming the directory that could not be removed.
    pub fn delete(&self, topic: &str) -> Result<(), OpenError> {
        let dir = self.dir.join(topic);
        fs::remove_dir_all(&dir).doing("remove the topic directory", &dir)
    }

    /// A partition was appended to: the next group commit covers it.
    pub fn dirty(&self, at: &TopicPartition) {
        self.dirty.lock().insert(at.clone());
        self.wake.notify_one();
    }
}

/// The partition directory `dir`, made if missing, opened.
fn open_partition(dir: &Path, segment_bytes: u64) -> Result<Log, OpenError> {
    fs::create_dir_all(dir).doing("create the partition directory", dir)?;
    Log::open(dir, segment_bytes).doing("open the partition", dir)
}

/// Moves a partition file of the earlier layout, `old`, into the
/// partition directory `dir` as its first segment (its indexes are built
/// as the last segment's are at every start).
fn migrate(old: &Path, dir: &Path) -> Result<(), OpenError> {
    fs::create_dir_all(dir).doing("create the partition directory", dir)?;
    let first = file_name(dir, 0, "log");
    if first.exists() {
        return Err(OpenError {
            action: "move into its partition directory",
            path: old.to_path_buf(),
            source: std::io::Error::from(std::io::ErrorKind::AlreadyExists),
        });
    }
    fs::rename(old, &first).doing("move into its partition directory", old)
}

/// The key of every OffsetCommit waiting for the offsets log's fsync.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OffsetsKey;

/// The group commit: fsyncs every dirty partition and the offsets log,
/// then completes the produces and commits the fsyncs covered. Runs for the
/// broker's life.
pub async fn group_commit(broker: Arc<Broker>) {
    let Some(store) = broker.store.as_ref() else {
        return;
    };
    loop {
        store.wake.notified().await;
        let dirty: Vec<TopicPartition> = store.dirty.lock().drain().collect();
        for at in dirty {
            // What is written now is what this fsync covers.
            let target = broker.with_log(&at.topic, at.partition, |log| log.sync_target());
            let Some(Some((file, covered))) = target else {
                continue;
            };
            let synced = tokio::task::spawn_blocking(move || file.sync_data()).await;
            if matches!(synced, Ok(Ok(()))) {
                broker.with_log(&at.topic, at.partition, |log| {
                    log.durable = log.durable.max(covered);
                });
                let _ = broker.produces.check_and_complete(&at);
            } else {
                // Try again at the next commit; the produces wait (or time
                // out, answered REQUEST_TIMED_OUT).
                store.dirty(&at);
            }
        }
        if store.offsets_dirty.swap(false, Ordering::AcqRel) {
            let target = store.offsets.lock().to_sync();
            let synced = match target {
                Ok((file, covered)) => tokio::task::spawn_blocking(move || file.sync_data())
                    .await
                    .ok()
                    .and_then(Result::ok)
                    .map(|()| covered),
                Err(_) => None,
            };
            match synced {
                Some(covered) => {
                    let mut offsets = store.offsets.lock();
                    offsets.durable = offsets.durable.max(covered);
                    drop(offsets);
                    let _ = broker.commits.check_and_complete(&OffsetsKey);
                }
                // Again at the next commit; the commits wait or time out.
                None => store.offsets_dirty.store(true, Ordering::Release),
            }
        }
    }
}
