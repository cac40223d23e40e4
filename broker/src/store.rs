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
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;

use super::{last_delta, Broker, Log};

/// Where partitions are kept, and which need an fsync.
pub struct Store {
    dir: PathBuf,
    dirty: Mutex<HashSet<(String, i32)>>,
    wake: tokio::sync::Notify,
}

/// The logs of a recovered topic.
type Recovered = HashMap<String, Vec<Log>>;

impl Store {
    /// Opens `dir` (creating it) and reads back every partition in it.
    pub fn open(dir: PathBuf) -> std::io::Result<(Store, Recovered)> {
        fs::create_dir_all(&dir)?;
        let mut topics = HashMap::new();
        for entry in fs::read_dir(&dir)? {
            let entry = entry?;
            if !entry.file_type()?.is_dir() {
                continue;
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            let mut logs: Vec<(usize, Log)> = Vec::new();
            for file in fs::read_dir(entry.path())? {
                let path = file?.path();
                let index = path
                    .file_stem()
                    .and_then(|s| s.to_str())
                    .and_then(|s| s.parse::<usize>().ok());
                if let (Some(index), Some("log")) =
                    (index, path.extension().and_then(|e| e.to_str()))
                {
                    logs.push((index, recover(&path)?));
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
                    None => all.push(open_log(&entry.path().join(format!("{i}.log")))?),
                }
            }
            if !all.is_empty() {
                topics.insert(name, all);
            }
        }
        let store = Store {
            dir,
            dirty: Mutex::default(),
            wake: tokio::sync::Notify::new(),
        };
        Ok((store, topics))
    }

    /// Creates the files of a new topic.
    pub fn create(&self, topic: &str, partitions: i32) -> std::io::Result<Vec<Log>> {
        let dir = self.dir.join(topic);
        fs::create_dir_all(&dir)?;
        (0..partitions)
            .map(|i| open_log(&dir.join(format!("{i}.log"))))
            .collect()
    }

    /// A partition was appended to: the next group commit covers it.
    pub fn dirty(&self, topic: &str, partition: i32) {
        self.dirty.lock().insert((topic.to_string(), partition));
        self.wake.notify_one();
    }
}

/// An empty log on a fresh (or truncated) file at `path`.
fn open_log(path: &PathBuf) -> std::io::Result<Log> {
    let file = OpenOptions::new().create(true).append(true).open(path)?;
    Ok(Log {
        file: Some(file),
        ..Log::default()
    })
}

/// Reads a partition's file back; a batch cut short (a crash mid-write) and
/// anything after it are cut off the file.
fn recover(path: &PathBuf) -> std::io::Result<Log> {
    let mut bytes = Vec::new();
    File::open(path)?.read_to_end(&mut bytes)?;
    let mut batches = Vec::new();
    let mut at = 0usize;
    let mut next = 0i64;
    while bytes.len() - at >= 61 {
        let length = i32::from_be_bytes(bytes[at + 8..at + 12].try_into().expect("4 bytes"));
        let Ok(length) = usize::try_from(length) else {
            break;
        };
        let total = 12 + length;
        if total < 61 || at + total > bytes.len() || bytes[at + 16] != 2 {
            break;
        }
        let batch = Bytes::copy_from_slice(&bytes[at..at + total]);
        let base = i64::from_be_bytes(batch[..8].try_into().expect("8 bytes"));
        if base != next {
            break;
        }
        next = base + last_delta(&batch) + 1;
        batches.push((base, batch));
        at += total;
    }
    if at < bytes.len() {
        OpenOptions::new()
            .write(true)
            .open(path)?
            .set_len(at as u64)?;
    }
    let file = OpenOptions::new().append(true).open(path)?;
    Ok(Log {
        batches,
        next,
        file: Some(file),
        durable: next,
    })
}

/// The group commit: fsyncs every dirty partition, then completes the
/// produces the fsync covered. Runs for the broker's life.
pub async fn group_commit(broker: Arc<Broker>) {
    let Some(store) = broker.store.as_ref() else {
        return;
    };
    loop {
        store.wake.notified().await;
        let dirty: Vec<(String, i32)> = store.dirty.lock().drain().collect();
        for (topic, partition) in dirty {
            // What is written now is what this fsync covers.
            let target = broker.with_log(&topic, partition, |log| {
                let file = log.file.as_ref().and_then(|f| f.try_clone().ok());
                (file, log.next)
            });
            let Some((Some(file), covered)) = target else {
                continue;
            };
            let synced = tokio::task::spawn_blocking(move || file.sync_data()).await;
            if matches!(synced, Ok(Ok(()))) {
                broker.with_log(&topic, partition, |log| {
                    log.durable = log.durable.max(covered);
                });
                let _ = broker.produces.check_and_complete(&(topic, partition));
            } else {
                // Try again at the next commit; the produces wait (or time
                // out, answered REQUEST_TIMED_OUT).
                store.dirty(&topic, partition);
            }
        }
    }
}
