//! `--data-dir`: partitions as append-only files, and the group commit.
//!
//! Each partition is `<dir>/<topic>/<partition>.log`: its record batches, as
//! served, one after another. A produce appends under the partition's lock
//! and marks the partition dirty; one task fsyncs every dirty partition
//! (one fsync covers every produce since the last: a group commit), then
//! completes the acks=-1 produces that the fsync covered. At start the files
//! are read back; a batch cut short by a crash is cut off.

use std::collections::{HashMap, HashSet};
use std::fs::{self, File, OpenOptions};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;

use crate::broker::Broker;
use crate::log::{batch_len, BatchHeader, Log, Stored, TopicPartition};
use crate::offsets::{GroupCommit, OffsetsLog};
use crate::producers::Producers;

/// Where partitions are kept, and which need an fsync.
pub struct Store {
    /// The data directory.
    dir: PathBuf,
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
    /// Opens `dir` (creating it) and reads back every partition in it.
    ///
    /// # Errors
    ///
    /// [`OpenError`] naming the directory or file that could not be created,
    /// listed, read or truncated.
    pub fn open(dir: PathBuf) -> Result<(Store, Recovered), OpenError> {
        fs::create_dir_all(&dir).doing("create the data directory", &dir)?;
        let mut topics = HashMap::new();
        for entry in fs::read_dir(&dir).doing("list the data directory", &dir)? {
            let entry = entry.doing("list the data directory", &dir)?;
            let path = entry.path();
            if !entry.file_type().doing("inspect", &path)?.is_dir() {
                continue;
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            let mut logs: Vec<(usize, Log)> = Vec::new();
            for file in fs::read_dir(&path).doing("list the topic directory", &path)? {
                let file = file.doing("list the topic directory", &path)?.path();
                let index = file
                    .file_stem()
                    .and_then(|s| s.to_str())
                    .and_then(|s| s.parse::<usize>().ok());
                if let (Some(index), Some("log")) =
                    (index, file.extension().and_then(|e| e.to_str()))
                {
                    logs.push((index, recover(&file)?));
                }
            }
            logs.sort_by_key(|(i, _)| *i);
            // Partitions are numbered from 0 without gaps; recreate any lost.
            let count = logs.last().map_or(0, |(i, _)| i + 1);
            let mut by_index: HashMap<usize, Log> = logs.into_iter().collect();
            let mut all = Vec::with_capacity(count);
            for i in 0..count {
                match by_index.remove(&i) {
                    Some(log) => all.push(log),
                    None => all.push(open_log(&path.join(format!("{i}.log")))?),
                }
            }
            if !all.is_empty() {
                topics.insert(name, all);
            }
        }
        let offsets_path = dir.join("@offsets.log");
        let (offsets, commits) = OffsetsLog::open(&offsets_path).doing("read", &offsets_path)?;
        let store = Store {
            dir,
            dirty: Mutex::default(),
            offsets: Mutex::new(offsets),
            offsets_dirty: AtomicBool::new(false),
            wake: tokio::sync::Notify::new(),
        };
        Ok((store, Recovered { topics, commits }))
    }

    /// Creates the files of a new topic.
    ///
    /// # Errors
    ///
    /// [`OpenError`] naming the directory or file that could not be made.
    pub fn create(&self, topic: &str, partitions: i32) -> Result<Vec<Log>, OpenError> {
        let dir = self.dir.join(topic);
        fs::create_dir_all(&dir).doing("create the topic directory", &dir)?;
        (0..partitions)
            .map(|i| open_log(&dir.join(format!("{i}.log"))))
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

/// An empty log on a fresh (or truncated) file at `path`.
fn open_log(path: &Path) -> Result<Log, OpenError> {
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .doing("open", path)?;
    Ok(Log {
        file: Some(file),
        ..Log::default()
    })
}

/// Reads a partition's file back; a batch cut short (a crash mid-write) and
/// anything after it are cut off the file.
fn recover(path: &Path) -> Result<Log, OpenError> {
    let mut bytes = Vec::new();
    File::open(path)
        .and_then(|mut f| f.read_to_end(&mut bytes))
        .doing("read", path)?;
    let bytes = Bytes::from(bytes);
    let mut batches = Vec::new();
    let mut producers = Producers::default();
    let mut at = 0usize;
    let mut next = 0i64;
    while let Some(total) = batch_len(&bytes[at..]) {
        let batch = bytes.slice(at..at + total);
        let base = i64::from_be_bytes(batch[..8].try_into().expect("a whole header"));
        if base != next {
            break;
        }
        let stored = Stored { base, bytes: batch };
        next = stored.last_offset() + 1;
        producers.appended(&BatchHeader::of(&stored.bytes), base);
        batches.push(stored);
        at += total;
    }
    if at < bytes.len() {
        OpenOptions::new()
            .write(true)
            .open(path)
            .and_then(|f| f.set_len(at as u64))
            .doing("truncate the torn tail of", path)?;
    }
    let file = OpenOptions::new()
        .append(true)
        .open(path)
        .doing("open", path)?;
    Ok(Log {
        batches,
        next,
        file: Some(file),
        durable: next,
        producers,
    })
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
            let target = broker.with_log(&at.topic, at.partition, |log| {
                let file = log.file.as_ref().and_then(|f| f.try_clone().ok());
                (file, log.next)
            });
            let Some((Some(file), covered)) = target else {
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
