//! The state every connection shares, and start-up: the listener, the
//! timer and its purgatories, the recovered store, the accept loop.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use parking_lot::RwLock;
use purgatorio::{Executor, Purgatory, Timer};
use tokio::net::TcpListener;

use crate::api::commits::DelayedCommit;
use crate::api::fetch::DelayedFetch;
use crate::api::produce::DelayedProduce;
use crate::coordinator::Coordinator;
use crate::dynamic::DynamicConfig;
use crate::kept::{Kept, Record};
use crate::log::{LazyLog, Log, LogConfig, Topic, TopicPartition};
use crate::producers::ProducerIds;
use crate::scram::Credential;
use crate::store::{Durable, OffsetsKey, Store};
use crate::topics::{Creating, PartitionLimits};
use crate::wire::Limits;

/// What the broker is started with.
#[derive(Clone, Debug)]
pub struct Config {
    /// The address to listen on.
    pub listen: String,
    /// Partitions of a topic created on first use.
    pub partitions: i32,
    /// Whether a Metadata that allows it creates the topics it names
    /// (Kafka's auto.create.topics.enable).
    pub auto_create_topics: bool,
    /// With `Some`, partitions are files here.
    pub data_dir: Option<PathBuf>,
    /// What clients may make the broker hold.
    pub limits: Limits,
    /// The largest record batch accepted, bytes.
    pub message_max_bytes: usize,
    /// The most a fetch answer holds, bytes (but for its first batch).
    pub fetch_max_bytes: usize,
    /// How long the first rebalance of an empty group waits for members.
    pub initial_rebalance_delay: std::time::Duration,
    /// How partitions' logs are kept: segment size and retention.
    pub log: LogConfig,
    /// How often retention looks for segments to delete.
    pub retention_check: std::time::Duration,
    /// The most members a consumer group holds.
    pub group_max_size: usize,
    /// The most partitions one request creates, and the broker holds.
    pub partition_limits: PartitionLimits,
}

/// Everything the connections share.
pub struct Broker {
    /// The topics, by name.
    pub topics: RwLock<HashMap<String, Arc<Topic>>>,
    /// With `--data-dir`: where partitions are kept, and the group commit.
    pub store: Option<Arc<Store>>,
    /// Produces with acks = -1 waiting for the fsync that covers them.
    pub produces: Purgatory<TopicPartition, DelayedProduce>,
    /// OffsetCommits waiting for the offsets log's fsync (`--data-dir`).
    pub commits: Purgatory<OffsetsKey, DelayedCommit>,
    /// Fetches waiting for bytes.
    pub fetches: Purgatory<TopicPartition, DelayedFetch>,
    /// Partitions of a topic created on first use.
    pub partitions: i32,
    /// The address clients reach this broker at.
    pub addr: SocketAddr,
    /// The timer under the purgatories, for its wake-up count.
    pub timer: Timer,
    /// Record batches appended so far.
    pub batches: AtomicU64,
    /// Segments deleted by retention so far.
    pub segments_deleted: AtomicU64,
    /// Consumer groups.
    pub groups: Arc<Coordinator>,
    /// Connections closed over what their client sent (a bad frame or
    /// request).
    pub refused: AtomicU64,
    /// Connections closed for silence.
    pub idle_closed: AtomicU64,
    /// Connections closed for a request that stopped arriving.
    pub stalled_closed: AtomicU64,
    /// Connections closed for an answer that made no progress.
    pub write_stalled: AtomicU64,
    /// Answers that could not be encoded in their version (bugs of ours).
    pub encode_errors: AtomicU64,
    /// What clients may make the broker hold.
    pub limits: Limits,
    /// Hands out producer ids.
    pub producer_ids: ProducerIds,
    /// The largest record batch accepted, bytes.
    pub message_max_bytes: usize,
    /// The most a fetch answer holds, bytes (but for its first batch).
    pub fetch_max_bytes: usize,
    /// What it was started with (DescribeConfigs shows it).
    pub config: Config,
    /// Topics being made, their disk work under way off the topics' lock:
    /// the names reserved, and the partitions the broker will then hold.
    pub creating: parking_lot::Mutex<Creating>,
    /// The ACLs (stored, not enforced; `<data-dir>/@acls`).
    pub acls: Arc<Kept<crate::acls::Acl>>,
    /// The SCRAM credentials (stored, not used; `<data-dir>/@scram`).
    pub scram: Arc<Kept<Credential>>,
    /// The dynamic configs set on the broker (its SASL and TLS settings:
    /// kept and shown, not used; `<data-dir>/@broker-configs`).
    pub dynamic: Arc<Kept<DynamicConfig>>,
}

impl Broker {
    /// The topic `name`, if it exists (never created).
    pub fn existing_topic(&self, name: &str) -> Option<Arc<Topic>> {
        self.topics.read().get(name).cloned()
    }

    /// The logs of the partitions named (topic, index) that exist and
    /// were not read yet (none: no allocation, the usual case). A request
    /// reads them with [`LazyLog::ready`] before it calls
    /// [`with_log`](Self::with_log), so that no runtime thread reads a
    /// partition's files at its first use.
    pub fn unread<'a>(
        &self,
        partitions: impl IntoIterator<Item = (&'a str, i32)>,
    ) -> Vec<Arc<LazyLog>> {
        let topics = self.topics.read();
        partitions
            .into_iter()
            .filter_map(|(topic, partition)| {
                let topic = topics.get(topic)?;
                topic.partitions.get(usize::try_from(partition).ok()?)
            })
            .filter(|log| !log.is_open())
            .cloned()
            .collect()
    }

    /// Runs `f` on the log of `topic`'s `partition`, if both exist (read
    /// first if it was not: see [`unread`](Self::unread)).
    pub fn with_log<R>(
        &self,
        topic: &str,
        partition: i32,
        f: impl FnOnce(&mut Log) -> R,
    ) -> Option<R> {
        let topic = self.topics.read().get(topic).cloned()?;
        let log = topic.partitions.get(usize::try_from(partition).ok()?)?;
        let mut log = log.lock();
        Some(f(&mut log))
    }
}

/// The group commit's fsyncs complete the produces and commits that wait
/// for them.
impl Durable for Broker {
    fn partition_synced(&self, at: &TopicPartition) {
        let _ = self.produces.check_and_complete(at);
    }

    fn offsets_synced(&self) {
        let _ = self.commits.check_and_complete(&OffsetsKey);
    }
}

/// Why the broker could not start.
#[derive(Debug)]
pub enum StartError {
    /// The listen address could not be bound.
    Listen(String, std::io::Error),
    /// The timer or a purgatory could not be built.
    Timer(purgatorio::BuildError),
    /// The data directory could not be opened or read.
    Store(crate::store::OpenError),
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::Listen(addr, e) => write!(f, "cannot listen on {addr}: {e}"),
            StartError::Timer(e) => write!(f, "cannot start the timer: {e}"),
            StartError::Store(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for StartError {}

/// Starts a broker: binds, recovers `--data-dir`, and accepts connections on
/// the current tokio runtime. Returns its shared state.
///
/// # Errors
///
/// [`StartError`] naming what failed: the listen address, the timer, or the
/// data directory (with the path).
pub async fn start(config: &Config) -> Result<Arc<Broker>, StartError> {
    let (store, recovered, mut configs, ids, commits) = match &config.data_dir {
        Some(dir) => {
            let (store, recovered) =
                Store::open(dir.clone(), config.log.segment_bytes).map_err(StartError::Store)?;
            (
                Some(Arc::new(store)),
                recovered.topics,
                recovered.configs,
                recovered.ids,
                recovered.commits,
            )
        }
        None => (
            None,
            HashMap::new(),
            HashMap::new(),
            HashMap::new(),
            Vec::new(),
        ),
    };
    let listener = TcpListener::bind(&config.listen)
        .await
        .map_err(|e| StartError::Listen(config.listen.clone(), e))?;
    let addr = listener
        .local_addr()
        .map_err(|e| StartError::Listen(config.listen.clone(), e))?;
    // No timer thread: the timer is driven by a task of this runtime (see
    // `drive_timer`), and expirations run inline where it runs. Each wakes
    // one connection's task (or resets a group), microseconds, so an
    // expired fetch's task is woken on the thread tokio woke for the
    // deadline, and no other thread is woken on the way.
    let timer = Timer::builder()
        .thread_name("broker-timer")
        .driver_thread(false)
        .executor(Executor::Inline)
        .build()
        .map_err(StartError::Timer)?;
    tokio::spawn(drive_timer(timer.clone()));
    let fetches = Purgatory::builder()
        .name("fetch")
        .shared_timer(&timer)
        .build()
        .map_err(StartError::Timer)?;
    let produces = Purgatory::builder()
        .name("produce")
        .shared_timer(&timer)
        .build()
        .map_err(StartError::Timer)?;
    let commit_waits = Purgatory::builder()
        .name("commit")
        .shared_timer(&timer)
        .build()
        .map_err(StartError::Timer)?;
    let groups = Coordinator::new(
        &timer,
        config.initial_rebalance_delay,
        config.group_max_size,
    )
    .map_err(StartError::Timer)?;
    // Commits of a topic that is gone (its deletion's record not yet
    // durable at a crash) are not restored.
    groups.restore(
        commits
            .into_iter()
            .filter(|c| recovered.contains_key(&c.committed.topic))
            .collect(),
    );
    let producer_ids = match &store {
        Some(store) => {
            // Only without the ids file (an earlier layout's data
            // directory) are the logs read for the ids they hold, once.
            let seen = || {
                recovered
                    .values()
                    .flatten()
                    .filter_map(|log| log.lock().producers.max_id())
                    .max()
            };
            let path = store.producer_ids_path();
            ProducerIds::open(&path, seen).map_err(|source| {
                StartError::Store(crate::store::OpenError {
                    action: "read",
                    path,
                    source,
                })
            })?
        }
        None => ProducerIds::in_memory(0),
    };
    let acls = kept(config.data_dir.as_deref(), "@acls")?;
    let scram = kept(config.data_dir.as_deref(), "@scram")?;
    let dynamic = kept(config.data_dir.as_deref(), "@broker-configs")?;
    let topics: HashMap<String, Arc<Topic>> = recovered
        .into_iter()
        .map(|(name, logs)| {
            let config = configs.remove(&name).unwrap_or_default();
            let topic = Topic::new(logs, config);
            let topic = match ids.get(&name) {
                Some(&id) => topic.with_id(id),
                None => topic,
            };
            (name, Arc::new(topic))
        })
        .collect();
    let partitions_held = topics.values().map(|t| t.partitions.len()).sum();
    let broker = Arc::new(Broker {
        topics: RwLock::new(topics),
        store,
        produces,
        fetches,
        partitions: config.partitions,
        addr,
        groups,
        commits: commit_waits,
        timer,
        batches: AtomicU64::new(0),
        segments_deleted: AtomicU64::new(0),
        refused: AtomicU64::new(0),
        idle_closed: AtomicU64::new(0),
        stalled_closed: AtomicU64::new(0),
        write_stalled: AtomicU64::new(0),
        encode_errors: AtomicU64::new(0),
        limits: config.limits.clone(),
        producer_ids,
        message_max_bytes: config.message_max_bytes,
        fetch_max_bytes: config.fetch_max_bytes,
        config: config.clone(),
        creating: parking_lot::Mutex::new(Creating {
            names: Default::default(),
            partitions: partitions_held,
        }),
        acls,
        scram,
        dynamic,
    });
    if let Some(store) = &broker.store {
        let waiters: Arc<dyn Durable> = Arc::clone(&broker) as _;
        tokio::spawn(crate::store::group_commit(Arc::clone(store), waiters));
    }
    tokio::spawn(crate::cleaner::retain(Arc::clone(&broker)));
    tokio::spawn(crate::connection::accept(listener, Arc::clone(&broker)));
    Ok(broker)
}

/// The set of records kept in `dir`'s `file` (a name no topic can have)
/// with `--data-dir`, else in memory.
fn kept<T: Record>(dir: Option<&Path>, file: &str) -> Result<Arc<Kept<T>>, StartError> {
    let Some(dir) = dir else {
        return Ok(Arc::new(Kept::in_memory()));
    };
    let path = dir.join(file);
    match Kept::open(path.clone()) {
        Ok(kept) => Ok(Arc::new(kept)),
        Err(source) => Err(StartError::Store(crate::store::OpenError {
            action: "read",
            path,
            source,
        })),
    }
}

/// Drives the broker's timer for its life: passes over what is due, and
/// between them tokio's sleep until the next due bucket (or a schedule of
/// an earlier one).
async fn drive_timer(timer: Timer) {
    timer.drive(|at| tokio::time::sleep_until(at.into())).await;
}
