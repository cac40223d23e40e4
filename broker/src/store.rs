//! `--data-dir`: the partitions' directories, and the group commit.
//!
//! Each partition is a directory `<dir>/<topic>/<partition>/` of segments
//! (see [`crate::log`]). An acks=-1 produce appends under the partition's
//! lock and marks the partition dirty (acks 0 and 1 do not: they are not
//! promised the disk); one task (`store/group_commit.rs`) fsyncs every
//! dirty partition's active segment, several at once on the blocking pool
//! and beside the offsets log's (one fsync covers every produce since the
//! last: a group commit; a segment that rolled is fsynced after it closed,
//! by the roll's work), then completes the acks=-1 produces that the
//! fsyncs covered. A start lists the partitions and reads none: each is
//! read at its first use ([`LazyLog`]), and then only its last segments'
//! tails ([`Log::open`]). A data directory of the earlier layout
//! (`<topic>/<partition>.log`, one file per partition) is moved into the
//! new one: the file becomes the partition's first segment, indexed at
//! that first start; a file over 4 GiB is refused (a segment's positions
//! are 32-bit), naming it, and left where it is.

mod group_commit;

pub use group_commit::{group_commit, Durable, OffsetsKey};

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::log::config::{TopicConfig, CONFIG_FILE};
use crate::log::segment::file_name;
use crate::log::sync::sync_dir;
use crate::log::{LazyLog, Log, TopicPartition};
use crate::offsets::{GroupCommit, OffsetsLog};

/// How a deleted topic's directory name ends (after `@<n>`: no topic's
/// name holds `@`).
const DELETED: &str = ".deleted";

/// Whether `name`, a directory in the data directory, is a deleted topic's:
/// `<topic>@<n>.deleted`. A topic's own name never holds `@` (Kafka's names
/// are `[a-zA-Z0-9._-]`), so a topic named `orders.deleted` is not one.
fn is_deleted(name: &str) -> bool {
    name.rsplit_once('@').is_some_and(|(_, n)| {
        n.strip_suffix(DELETED)
            .is_some_and(|n| n.parse::<u64>().is_ok())
    })
}

/// The offsets log's name in the data directory (no topic has it).
const OFFSETS_LOG: &str = "@offsets.log";

/// The largest partition file of the earlier layout that can become a
/// segment, bytes: a segment's index positions are 32-bit.
const MAX_LEGACY_FILE: u64 = u32::MAX as u64;

/// Where partitions are kept, and which need an fsync.
pub struct Store {
    /// The data directory.
    dir: PathBuf,
    /// The size past which a segment rolls, bytes.
    segment_bytes: u64,
    /// Partitions with acks=-1 produces waiting for an fsync, with their
    /// logs.
    dirty: Mutex<HashMap<TopicPartition, Arc<LazyLog>>>,
    /// Partitions' fsyncs done by the group commit (a figure of the stats
    /// line).
    pub fsyncs: AtomicU64,
    /// Committed offsets.
    offsets: Mutex<OffsetsLog>,
    /// Whether commits were appended since the last fsync of `offsets`.
    offsets_dirty: AtomicBool,
    /// Whether an fsync of `offsets` failed: no commit is taken after.
    offsets_failed: AtomicBool,
    /// Deleted topics so far, making their directories' new names unique.
    deletions: AtomicU64,
    /// Wakes the group commit.
    wake: tokio::sync::Notify,
}

/// What a data directory held.
pub struct Recovered {
    /// The logs of the recovered topics, by name, none read yet.
    pub topics: HashMap<String, Vec<LazyLog>>,
    /// The configs of those that set any (`<topic>/@config`).
    pub configs: HashMap<String, TopicConfig>,
    /// Their ids (`<topic>/@id`).
    pub ids: HashMap<String, uuid::Uuid>,
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
    /// Opens `dir` (creating it) and lists every partition in it, with
    /// segments of `segment_bytes`; reads none of them (see [`LazyLog`]).
    ///
    /// # Errors
    ///
    /// [`OpenError`] naming the directory or file that could not be created,
    /// listed, read or truncated.
    pub fn open(dir: PathBuf, segment_bytes: u64) -> Result<(Store, Recovered), OpenError> {
        fs::create_dir_all(&dir).doing("create the data directory", &dir)?;
        let mut topics = HashMap::new();
        let mut configs = HashMap::new();
        let mut ids = HashMap::new();
        for entry in fs::read_dir(&dir).doing("list the data directory", &dir)? {
            let entry = entry.doing("list the data directory", &dir)?;
            let path = entry.path();
            if !entry.file_type().doing("inspect", &path)?.is_dir() {
                continue;
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            if is_deleted(&name) {
                // A deleted topic whose removal did not finish; never a
                // topic again, whatever is left of it.
                if let Err(e) = fs::remove_dir_all(&path) {
                    eprintln!("warning: cannot remove {}: {e}", path.display());
                }
                continue;
            }
            let config = read_config(&path)?;
            let segment_bytes = config.segment_bytes.unwrap_or(segment_bytes);
            let mut count = 0usize;
            let mut migrated = false;
            for file in fs::read_dir(&path).doing("list the topic directory", &path)? {
                let file = file.doing("list the topic directory", &path)?;
                let file_name = file.file_name();
                let file_name = Path::new(&file_name);
                let Some(index) = file_name
                    .file_stem()
                    .and_then(|s| s.to_str())
                    .and_then(|s| s.parse::<usize>().ok())
                    // A stray name past the partition bound is not ours: it
                    // must not make the start create that many partitions.
                    .filter(|&index| index < crate::topics::MAX_PARTITIONS as usize)
                else {
                    continue;
                };
                match file_name.extension().and_then(|e| e.to_str()) {
                    // The entry's type as the listing gives it: no stat
                    // per partition.
                    None if file.file_type().doing("inspect", &file.path())?.is_dir() => {}
                    Some("log") => {
                        migrate(&file.path(), &path.join(index.to_string()))?;
                        migrated = true;
                    }
                    _ => continue,
                }
                count = count.max(index + 1);
            }
            if migrated {
                // The partition directories made, the files migrated out.
                sync_dir(&path).doing("fsync", &path)?;
            }
            // Partitions are numbered from 0 without gaps: one lost is made
            // again at its opening. None is read now (see `LazyLog`).
            let topic: Arc<Path> = Arc::from(path.as_path());
            let logs: Vec<LazyLog> = (0..count)
                .map(|i| LazyLog::closed(Arc::clone(&topic), i, segment_bytes))
                .collect();
            if !logs.is_empty() {
                let id = crate::topic_id::read_or_make(&path)
                    .doing("read the topic id", &path.join(crate::topic_id::ID_FILE))?;
                ids.insert(name.clone(), id);
                if !config.set.is_empty() {
                    configs.insert(name.clone(), config);
                }
                topics.insert(name, logs);
            }
        }
        let offsets_path = dir.join(OFFSETS_LOG);
        let (offsets, commits) = OffsetsLog::open(&offsets_path).doing("read", &offsets_path)?;
        // The data directory made, the deleted topics removed, the offsets
        // log's name on disk.
        sync_dir(&dir).doing("fsync", &dir)?;
        let store = Store {
            dir,
            segment_bytes,
            dirty: Mutex::default(),
            fsyncs: AtomicU64::new(0),
            offsets: Mutex::new(offsets),
            offsets_dirty: AtomicBool::new(false),
            offsets_failed: AtomicBool::new(false),
            deletions: AtomicU64::new(0),
            wake: tokio::sync::Notify::new(),
        };
        Ok((
            store,
            Recovered {
                topics,
                configs,
                ids,
                commits,
            },
        ))
    }

    /// Creates the directories of a new topic, its id's file, and its
    /// configs' file if it sets any.
    ///
    /// # Errors
    ///
    /// [`OpenError`] naming the directory or file that could not be made.
    pub fn create(
        &self,
        topic: &str,
        partitions: i32,
        config: &TopicConfig,
        id: uuid::Uuid,
    ) -> Result<Vec<Log>, OpenError> {
        let dir = self.dir.join(topic);
        fs::create_dir_all(&dir).doing("create the topic directory", &dir)?;
        crate::topic_id::write(&dir, id).doing("write the topic id", &dir)?;
        if !config.set.is_empty() {
            self.write_config(topic, config)?;
        }
        let logs = self.create_partitions(topic, 0..partitions, config)?;
        sync_dir(&self.dir).doing("fsync", &self.dir)?;
        Ok(logs)
    }

    /// Keeps `topic`'s configs in `<topic>/@config` (none: the file is
    /// removed): written aside, fsynced, renamed over, the directory
    /// fsynced, so a crash leaves the old configs or the new.
    ///
    /// # Errors
    ///
    /// [`OpenError`] naming the file that could not be written, renamed or
    /// removed.
    pub fn write_config(&self, topic: &str, config: &TopicConfig) -> Result<(), OpenError> {
        let dir = self.dir.join(topic);
        let path = dir.join(CONFIG_FILE);
        if config.set.is_empty() {
            match fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(e).doing("remove", &path);
                }
                _ => {}
            }
        } else {
            let aside = dir.join(format!("{CONFIG_FILE}.tmp"));
            let file = fs::File::create(&aside).doing("create", &aside)?;
            std::io::Write::write_all(&mut &file, config.to_file().as_bytes())
                .doing("write", &aside)?;
            crate::log::sync::sync_file(&file).doing("fsync", &aside)?;
            fs::rename(&aside, &path).doing("rename", &aside)?;
        }
        sync_dir(&dir).doing("fsync", &dir)
    }

    /// Creates the partition directories `indexes` of `topic`
    /// (CreatePartitions, or a new topic's) and fsyncs their names.
    ///
    /// # Errors
    ///
    /// [`OpenError`] naming the directory that could not be made.
    pub fn create_partitions(
        &self,
        topic: &str,
        indexes: std::ops::Range<i32>,
        config: &TopicConfig,
    ) -> Result<Vec<Log>, OpenError> {
        let dir = self.dir.join(topic);
        let segment_bytes = config.segment_bytes.unwrap_or(self.segment_bytes);
        let logs = indexes
            .map(|i| open_partition(&dir.join(i.to_string()), segment_bytes))
            .collect::<Result<Vec<_>, _>>()?;
        // The new names, before any record in them can be acknowledged.
        sync_dir(&dir).doing("fsync", &dir)?;
        Ok(logs)
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
    /// [`OpenError`] naming the offsets log, if the write failed or an
    /// fsync of it did before.
    pub fn commit(&self, commits: &[GroupCommit]) -> Result<u64, OpenError> {
        let (written, _) = self.commit_with(|| (commits.to_vec(), ()));
        Ok(written?.unwrap_or(0))
    }

    /// Makes a change of the groups in memory and appends the records it
    /// returns to the offsets log, both under the log's lock: changes
    /// reach memory in the order of their records in the log, so what a
    /// restart replays is what was seen. Returns the count of records the
    /// fsync must cover (`None` if the change wrote none) beside what the
    /// change returned; the change stays in memory if the append fails.
    ///
    /// # Errors
    ///
    /// [`OpenError`] naming the offsets log, if the write failed or an
    /// fsync of it did before.
    pub fn commit_with<T>(
        &self,
        change: impl FnOnce() -> (Vec<GroupCommit>, T),
    ) -> (Result<Option<u64>, OpenError>, T) {
        let mut offsets = self.offsets.lock();
        let (commits, changed) = change();
        if commits.is_empty() {
            return (Ok(None), changed);
        }
        let path = offsets.path().to_path_buf();
        if self.offsets_failed.load(Ordering::Acquire) {
            let failed = Err(std::io::Error::other("an fsync failed")).doing("append to", &path);
            return (failed, changed);
        }
        let written = match offsets.append(&commits).doing("append to", &path) {
            Ok(written) => written,
            Err(e) => return (Err(e), changed),
        };
        drop(offsets);
        self.offsets_dirty.store(true, Ordering::Release);
        self.wake.notify_one();
        (Ok(Some(written)), changed)
    }

    /// Whether the offsets log is fsynced past `records`.
    pub fn commits_durable(&self, records: u64) -> bool {
        self.offsets.lock().durable >= records
    }

    /// Deletes a topic's files: its directory is renamed, at once and
    /// durably, to `<topic>@<n>.deleted` (a name no topic has, so a topic
    /// of the same name can be made at once), then removed off the caller's
    /// thread (a start removes one whose removal did not finish).
    ///
    /// # Errors
    ///
    /// [`OpenError`] naming the directory that could not be renamed.
    pub fn delete(&self, topic: &str) -> Result<(), OpenError> {
        let dir = self.dir.join(topic);
        let gone = loop {
            let n = self.deletions.fetch_add(1, Ordering::Relaxed);
            let gone = self.dir.join(format!("{topic}@{n}{DELETED}"));
            if !gone.exists() {
                break gone;
            }
        };
        fs::rename(&dir, &gone).doing("rename the topic directory", &dir)?;
        sync_dir(&self.dir).doing("fsync", &self.dir)?;
        std::thread::spawn(move || {
            if let Err(e) = fs::remove_dir_all(&gone) {
                eprintln!("warning: cannot remove {}: {e}", gone.display());
            }
        });
        Ok(())
    }

    /// An acks=-1 produce waits for `at`, whose log is `log`, to be on
    /// disk: the next group commit covers it.
    pub fn dirty(&self, at: &TopicPartition, log: &Arc<LazyLog>) {
        self.dirty.lock().insert(at.clone(), Arc::clone(log));
        self.wake.notify_one();
    }
}

/// The configs a topic directory keeps (none: the broker's).
fn read_config(dir: &Path) -> Result<TopicConfig, OpenError> {
    let path = dir.join(CONFIG_FILE);
    match fs::read_to_string(&path) {
        Ok(text) => TopicConfig::from_file(&text)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
            .doing("read", &path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(TopicConfig::default()),
        Err(e) => Err(e).doing("read", &path),
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
///
/// # Errors
///
/// [`OpenError`] naming `old` if it is over 4 GiB (a segment's positions
/// are 32-bit; the file is left as it is), if the partition directory
/// already has a first segment, or if it cannot be moved.
fn migrate(old: &Path, dir: &Path) -> Result<(), OpenError> {
    let len = fs::metadata(old).doing("inspect", old)?.len();
    if len > MAX_LEGACY_FILE {
        return Err(OpenError {
            action: "move into its partition directory",
            path: old.to_path_buf(),
            source: std::io::Error::new(
                std::io::ErrorKind::FileTooLarge,
                format!(
                    "a partition file of the earlier layout of {len} bytes is over the 4 GiB a segment can hold; \
                     split it at a batch boundary (the later part named by its first offset, as <partition>/<offset>.log) \
                     or start a broker of the earlier layout on it"
                ),
            ),
        });
    }
    fs::create_dir_all(dir).doing("create the partition directory", dir)?;
    let first = file_name(dir, 0, "log");
    let same_file = |a: &Path, b: &Path| {
        use std::os::unix::fs::MetadataExt;
        matches!((fs::metadata(a), fs::metadata(b)), (Ok(a), Ok(b)) if a.ino() == b.ino() && a.dev() == b.dev())
    };
    if same_file(old, &first) {
        // A migration's rename whose removal of the old name a crash lost.
        return fs::remove_file(old).doing("remove the migrated", old);
    }
    if first.exists() {
        return Err(OpenError {
            action: "move into its partition directory",
            path: old.to_path_buf(),
            source: std::io::Error::from(std::io::ErrorKind::AlreadyExists),
        });
    }
    fs::rename(old, &first).doing("move into its partition directory", old)?;
    // The new name first: a crash leaves it, with or without the old one.
    sync_dir(dir).doing("fsync", dir)?;
    let topic = old.parent().unwrap_or(dir);
    sync_dir(topic).doing("fsync", topic)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deleted_topic_is_renamed_away_at_once_and_its_leftovers_removed_at_start() {
        let dir = std::env::temp_dir().join(format!("pg-store-{}-deleted", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let (store, _) = Store::open(dir.clone(), 1 << 20).unwrap();
        let none = TopicConfig::default();
        let mut logs = store.create("t", 2, &none, uuid::Uuid::nil()).unwrap();
        logs[0]
            .append_now(&crate::log::batch::testing::of(1))
            .unwrap();
        drop(logs);
        store.delete("t").unwrap();
        // The name is free at once: a new topic of it starts empty.
        assert!(!dir.join("t").exists());
        let logs = store.create("t", 1, &none, uuid::Uuid::nil()).unwrap();
        assert_eq!(logs[0].next(), 0);
        drop(logs);
        drop(store);
        // A removal that did not finish (or had not yet): gone at start,
        // and no topic comes back from it.
        fs::create_dir_all(dir.join("t@7.deleted/0")).unwrap();
        let (_, recovered) = Store::open(dir.clone(), 1 << 20).unwrap();
        assert!(!dir.join("t@7.deleted").exists());
        assert_eq!(recovered.topics.keys().collect::<Vec<_>>(), ["t"]);
        assert_eq!(recovered.topics["t"].len(), 1);
        fs::remove_dir_all(&dir).unwrap();
    }

    /// A topic whose own name ends in `.deleted` is a topic like any other:
    /// its records survive a restart.
    #[test]
    fn a_topic_named_like_a_deleted_one_survives_a_restart() {
        let dir = std::env::temp_dir().join(format!("pg-store-{}-named", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let (store, _) = Store::open(dir.clone(), 1 << 20).unwrap();
        let mut logs = store
            .create(
                "orders.deleted",
                1,
                &TopicConfig::default(),
                uuid::Uuid::nil(),
            )
            .unwrap();
        logs[0]
            .append_now(&crate::log::batch::testing::of(1))
            .unwrap();
        drop(logs);
        drop(store);
        let (_, recovered) = Store::open(dir.clone(), 1 << 20).unwrap();
        assert_eq!(recovered.topics["orders.deleted"][0].lock().next(), 1);
        assert!(is_deleted("orders@3.deleted"));
        assert!(!is_deleted("orders.deleted") && !is_deleted("a@b.deleted"));
        fs::remove_dir_all(&dir).unwrap();
    }
}
