//! `purgatorio-broker`: a small single-node broker that speaks the Kafka
//! wire protocol, for real Kafka clients, with every fetch that waits for
//! data parked in a purgatorio [`Purgatory`].
//!
//! ```text
//! cargo run --release -p purgatorio-broker -- --listen 127.0.0.1:9092
//! kcat -b 127.0.0.1:9092 -t orders -P <<< 'hello'
//! kcat -b 127.0.0.1:9092 -t orders -C -o beginning -e
//! ```
//!
//! What it serves: ApiVersions, Metadata (topics created on first use with
//! `--partitions`), Produce (acks 0, 1 and -1), Fetch (`max_wait_ms`,
//! `min_bytes`, `max_bytes`; a fetch without enough bytes waits in the
//! purgatory until a produce completes it or `max_wait_ms` passes, never
//! earlier), ListOffsets (earliest and latest), and consumer groups (see
//! `group`: joins and syncs wait in a purgatory, sessions are keyed timers).
//! With `--data-dir`, partitions are append-only files and an acks=-1
//! produce waits for the group-commit fsync (`store`); without it they are
//! in memory. Committed offsets are in memory either way. A request of an
//! API or version it does not serve closes the connection, as Kafka does
//! for an unknown one.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use clap::Parser;
use kafka_protocol::messages::{
    api_versions_response::ApiVersion, fetch_response, join_group_response, list_offsets_response,
    metadata_response, offset_commit_response, offset_fetch_response, produce_response, ApiKey,
    ApiVersionsResponse, BrokerId, FetchRequest, FetchResponse, FindCoordinatorResponse,
    HeartbeatResponse, JoinGroupResponse, LeaveGroupResponse, ListOffsetsRequest,
    ListOffsetsResponse, MetadataRequest, MetadataResponse, OffsetCommitResponse,
    OffsetFetchResponse, ProduceRequest, ProduceResponse, RequestHeader, RequestKind,
    ResponseHeader, ResponseKind, SyncGroupResponse, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use parking_lot::{Mutex, RwLock};
use purgatorio::{Completion, DelayedOperation, Purgatory, Timer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedReadHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

mod group;
mod store;
use group::{Coordinator, GroupWait, Joined};

/// The largest request frame accepted; a larger one closes the connection.
const MAX_FRAME: usize = 16 * 1024 * 1024;

/// Kafka's error codes used here.
mod code {
    pub const OFFSET_OUT_OF_RANGE: i16 = 1;
    pub const CORRUPT_MESSAGE: i16 = 2;
    pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
    pub const INVALID_TOPIC: i16 = 17;
    pub const UNSUPPORTED_VERSION: i16 = 35;
    pub const REQUEST_TIMED_OUT: i16 = 7;
    pub const KAFKA_STORAGE_ERROR: i16 = 56;
}

/// The versions served, per API: the ones decoded, encoded and tested here.
const SERVED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 9),
    (ApiKey::Fetch, 4, 12),
    (ApiKey::ListOffsets, 1, 7),
    (ApiKey::Metadata, 0, 9),
    (ApiKey::ApiVersions, 0, 3),
    (ApiKey::FindCoordinator, 0, 3),
    (ApiKey::JoinGroup, 0, 5),
    (ApiKey::SyncGroup, 0, 3),
    (ApiKey::Heartbeat, 0, 3),
    (ApiKey::LeaveGroup, 0, 2),
    (ApiKey::OffsetCommit, 2, 7),
    (ApiKey::OffsetFetch, 1, 7),
];

/// The broker's command line.
#[derive(Parser, Debug)]
#[command(
    version,
    about = "A single-node broker that speaks the Kafka wire protocol; fetches, joins and syncs wait in purgatorio purgatories, sessions are keyed timers. Without --data-dir, partitions are in memory and nothing survives a restart; committed offsets are in memory either way."
)]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:9092")]
    listen: String,
    /// Partitions of a topic created on first use.
    #[arg(long, default_value_t = 1)]
    partitions: i32,
    /// Keep partitions as append-only files here (recovered at start; an
    /// acks=-1 produce is answered once a group-commit fsync covers it).
    /// Without it, partitions are in memory and nothing survives a restart.
    #[arg(long)]
    data_dir: Option<std::path::PathBuf>,
    /// Print a stats line (batches, parked fetches, timer wake-ups) to
    /// stderr this often, ms.
    #[arg(long, default_value_t = 10_000)]
    stats_ms: u64,
}

/// One partition's log: record batches with their base offsets rewritten.
#[derive(Default)]
struct Log {
    /// `(base offset, batch)`, in offset order.
    batches: Vec<(i64, Bytes)>,
    /// The next offset to assign (the high watermark).
    next: i64,
    /// With `--data-dir`: the partition's append-only file.
    file: Option<std::fs::File>,
    /// With `--data-dir`: offsets below this are on disk (fsynced).
    durable: i64,
}

impl Log {
    /// Bytes available from `offset` on.
    fn bytes_from(&self, offset: i64) -> usize {
        let start = self
            .batches
            .partition_point(|(base, b)| base + last_delta(b) < offset);
        self.batches[start..].iter().map(|(_, b)| b.len()).sum()
    }
}

/// The last offset delta of a record batch (bytes 23..27).
fn last_delta(batch: &[u8]) -> i64 {
    i64::from(i32::from_be_bytes(
        batch[23..27].try_into().expect("4 bytes"),
    ))
}

/// A topic: its partitions.
struct Topic {
    partitions: Vec<Mutex<Log>>,
}

/// Everything the connections share.
struct Broker {
    topics: RwLock<HashMap<String, Arc<Topic>>>,
    /// With `--data-dir`: where partitions are kept, and the group commit.
    store: Option<store::Store>,
    /// Produces with acks = -1 waiting for the fsync that covers them.
    produces: Purgatory<(String, i32), DelayedProduce>,
    partitions: i32,
    addr: SocketAddr,
    /// Fetches waiting for bytes, keyed by (topic, partition).
    fetches: Purgatory<(String, i32), DelayedFetch>,
    /// The timer under the purgatory, for its wake-up count.
    timer: Timer,
    /// Messages appended so far (record batches).
    batches: AtomicU64,
    /// Consumer groups.
    groups: Arc<Coordinator>,
}

impl Broker {
    /// The topic `name`, created with `--partitions` partitions if new.
    fn topic(&self, name: &str) -> Option<Arc<Topic>> {
        if name.is_empty()
            || name.len() > 249
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        {
            return None;
        }
        if let Some(topic) = self.topics.read().get(name) {
            return Some(Arc::clone(topic));
        }
        let mut topics = self.topics.write();
        if let Some(topic) = topics.get(name) {
            return Some(Arc::clone(topic));
        }
        let logs = match &self.store {
            Some(store) => store.create(name, self.partitions).ok()?,
            None => (0..self.partitions).map(|_| Log::default()).collect(),
        };
        let topic = Arc::new(Topic {
            partitions: logs.into_iter().map(Mutex::new).collect(),
        });
        topics.insert(name.to_string(), Arc::clone(&topic));
        Some(topic)
    }

    /// The log of `topic`'s `partition`, if both exist.
    fn with_log<R>(&self, topic: &str, partition: i32, f: impl FnOnce(&mut Log) -> R) -> Option<R> {
        let topic = self.topics.read().get(topic).cloned()?;
        let log = topic.partitions.get(usize::try_from(partition).ok()?)?;
        let mut log = log.lock();
        Some(f(&mut log))
    }
}

/// A produce with acks = -1 waiting until the fsyncs cover its offsets.
struct DelayedProduce {
    broker: Arc<Broker>,
    /// (topic, partition, the offset after its records).
    wants: Vec<(String, i32, i64)>,
    timeout: Duration,
}

impl DelayedOperation for DelayedProduce {
    fn delay(&self) -> Duration {
        self.timeout
    }
    fn try_complete(&mut self) -> bool {
        self.wants.iter().all(|(t, p, until)| {
            self.broker
                .with_log(t, *p, |log| log.durable >= *until)
                .unwrap_or(true)
        })
    }
    fn on_complete(&mut self, _: Completion) {}
}

/// A fetch waiting until its partitions hold `min_bytes` from its offsets.
struct DelayedFetch {
    broker: Arc<Broker>,
    wants: Vec<(String, i32, i64)>,
    min_bytes: usize,
    max_wait: Duration,
}

impl DelayedFetch {
    fn available(&self) -> usize {
        self.wants
            .iter()
            .map(|(t, p, offset)| {
                self.broker
                    .with_log(t, *p, |log| log.bytes_from(*offset))
                    .unwrap_or(0)
            })
            .sum()
    }
}

impl DelayedOperation for DelayedFetch {
    fn delay(&self) -> Duration {
        self.max_wait
    }
    fn try_complete(&mut self) -> bool {
        self.available() >= self.min_bytes
    }
    // The connection's task answers once the parked fetch resolves.
    fn on_complete(&mut self, _: Completion) {}
}

/// Validates the record batches of a produce and rewrites their base
/// offsets from `next`; returns them and the offset after them, or `None`
/// for a malformed set.
fn assign_offsets(records: &[u8], mut next: i64) -> Option<(Vec<(i64, Bytes)>, i64)> {
    let mut out = Vec::new();
    let mut rest = records;
    while !rest.is_empty() {
        if rest.len() < 61 {
            return None;
        }
        let length = usize::try_from(i32::from_be_bytes(rest[8..12].try_into().ok()?)).ok()?;
        let total = 12usize.checked_add(length)?;
        if total < 61 || total > rest.len() || rest[16] != 2 {
            return None;
        }
        let delta = last_delta(&rest[..total]);
        if delta < 0 {
            return None;
        }
        let mut batch = BytesMut::from(&rest[..total]);
        batch[..8].copy_from_slice(&next.to_be_bytes());
        out.push((next, batch.freeze()));
        next += delta + 1;
        rest = &rest[total..];
    }
    Some((out, next))
}

impl Broker {
    fn api_versions(&self) -> ApiVersionsResponse {
        let mut response = ApiVersionsResponse::default();
        response.api_keys = SERVED
            .iter()
            .map(|(key, min, max)| {
                let mut v = ApiVersion::default();
                v.api_key = *key as i16;
                v.min_version = *min;
                v.max_version = *max;
                v
            })
            .collect();
        response
    }

    fn metadata(&self, request: MetadataRequest) -> MetadataResponse {
        let mut response = MetadataResponse::default();
        let mut broker = metadata_response::MetadataResponseBroker::default();
        broker.node_id = BrokerId(0);
        broker.host = StrBytes::from_string(self.addr.ip().to_string());
        broker.port = i32::from(self.addr.port());
        response.brokers = vec![broker];
        response.controller_id = BrokerId(0);
        response.cluster_id = Some(StrBytes::from_static_str("purgatorio"));
        let names: Vec<String> = match request.topics {
            Some(topics) => topics
                .into_iter()
                .filter_map(|t| t.name.map(|n| n.to_string()))
                .collect(),
            None => self.topics.read().keys().cloned().collect(),
        };
        for name in names {
            let mut topic = metadata_response::MetadataResponseTopic::default();
            topic.name = Some(TopicName(StrBytes::from_string(name.clone())));
            match self.topic(&name) {
                Some(t) => {
                    topic.partitions = (0..t.partitions.len() as i32)
                        .map(|i| {
                            let mut p = metadata_response::MetadataResponsePartition::default();
                            p.partition_index = i;
                            p.leader_id = BrokerId(0);
                            p.replica_nodes = vec![BrokerId(0)];
                            p.isr_nodes = vec![BrokerId(0)];
                            p
                        })
                        .collect();
                }
                None => topic.error_code = code::INVALID_TOPIC,
            }
            response.topics.push(topic);
        }
        response
    }

    fn produce(&self, request: &ProduceRequest) -> ProduceResponse {
        let mut response = ProduceResponse::default();
        let mut completed = Vec::new();
        for topic_data in &request.topic_data {
            let name = topic_data.name.to_string();
            let topic = self.topic(&name);
            let mut topic_response = produce_response::TopicProduceResponse::default();
            topic_response.name = topic_data.name.clone();
            for partition in &topic_data.partition_data {
                let mut p = produce_response::PartitionProduceResponse::default();
                p.index = partition.index;
                p.log_append_time_ms = -1;
                let log = topic
                    .as_ref()
                    .and_then(|t| t.partitions.get(usize::try_from(partition.index).ok()?));
                match (log, partition.records.as_deref()) {
                    (None, _) => p.error_code = code::UNKNOWN_TOPIC_OR_PARTITION,
                    (Some(log), records) => {
                        let mut log = log.lock();
                        match assign_offsets(records.unwrap_or_default(), log.next) {
                            Some((batches, next)) => {
                                if let Some(file) = log.file.as_mut() {
                                    let written = batches
                                        .iter()
                                        .try_for_each(|(_, b)| std::io::Write::write_all(file, b));
                                    if written.is_err() {
                                        p.error_code = code::KAFKA_STORAGE_ERROR;
                                        topic_response.partition_responses.push(p);
                                        continue;
                                    }
                                    if let Some(store) = &self.store {
                                        store.dirty(&name, partition.index);
                                    }
                                }
                                p.base_offset = log.next;
                                self.batches
                                    .fetch_add(batches.len() as u64, Ordering::Relaxed);
                                log.batches.extend(batches);
                                log.next = next;
                                completed.push((name.clone(), partition.index));
                            }
                            None => p.error_code = code::CORRUPT_MESSAGE,
                        }
                    }
                }
                topic_response.partition_responses.push(p);
            }
            response.responses.push(topic_response);
        }
        // The new bytes may complete fetches waiting on these partitions.
        for key in completed {
            let _ = self.fetches.check_and_complete(&key);
        }
        response
    }

    fn fetch_response(&self, request: &FetchRequest) -> FetchResponse {
        let mut response = FetchResponse::default();
        let mut budget = usize::try_from(request.max_bytes).unwrap_or(usize::MAX);
        for topic in &request.topics {
            let mut t = fetch_response::FetchableTopicResponse::default();
            t.topic = topic.topic.clone();
            for partition in &topic.partitions {
                let mut p = fetch_response::PartitionData::default();
                p.partition_index = partition.partition;
                let limit = usize::try_from(partition.partition_max_bytes)
                    .unwrap_or(0)
                    .min(budget);
                let found = self.with_log(&topic.topic, partition.partition, |log| {
                    p.high_watermark = log.next;
                    p.last_stable_offset = log.next;
                    p.log_start_offset = 0;
                    if partition.fetch_offset > log.next || partition.fetch_offset < 0 {
                        p.error_code = code::OFFSET_OUT_OF_RANGE;
                        return;
                    }
                    let start = log
                        .batches
                        .partition_point(|(base, b)| base + last_delta(b) < partition.fetch_offset);
                    let mut records = BytesMut::new();
                    for (_, batch) in &log.batches[start..] {
                        // At least one batch, even over the limit, as Kafka does.
                        if !records.is_empty() && records.len() + batch.len() > limit {
                            break;
                        }
                        records.put_slice(batch);
                    }
                    budget = budget.saturating_sub(records.len());
                    p.records = Some(records.freeze());
                });
                if found.is_none() {
                    p.error_code = code::UNKNOWN_TOPIC_OR_PARTITION;
                }
                t.partitions.push(p);
            }
            response.responses.push(t);
        }
        response
    }

    fn list_offsets(&self, request: &ListOffsetsRequest) -> ListOffsetsResponse {
        let mut response = ListOffsetsResponse::default();
        for topic in &request.topics {
            let mut t = list_offsets_response::ListOffsetsTopicResponse::default();
            t.name = topic.name.clone();
            let _ = self.topic(&topic.name);
            for partition in &topic.partitions {
                let mut p = list_offsets_response::ListOffsetsPartitionResponse::default();
                p.partition_index = partition.partition_index;
                p.timestamp = -1;
                // Latest (-1) is the high watermark; earliest (-2), and any
                // timestamp (no index by time is kept), is the log start.
                let found = self.with_log(&topic.name, partition.partition_index, |log| {
                    if partition.timestamp == -1 {
                        log.next
                    } else {
                        0
                    }
                });
                match found {
                    Some(offset) => p.offset = offset,
                    None => p.error_code = code::UNKNOWN_TOPIC_OR_PARTITION,
                }
                t.partitions.push(p);
            }
            response.topics.push(t);
        }
        response
    }
}

/// A request frame, or news that the connection ends.
enum Frame {
    Request(Bytes),
    /// Over [`MAX_FRAME`], or unreadable: close after the answers so far.
    Bad,
}

/// Reads frames into `frames` until the connection ends; then says so on
/// `gone`.
async fn read_frames(
    mut reader: OwnedReadHalf,
    frames: mpsc::Sender<Frame>,
    gone: watch::Sender<bool>,
) {
    loop {
        let mut length = [0u8; 4];
        if reader.read_exact(&mut length).await.is_err() {
            break;
        }
        let length = i32::from_be_bytes(length);
        let Ok(length) = usize::try_from(length) else {
            let _ = frames.send(Frame::Bad).await;
            break;
        };
        if !(8..=MAX_FRAME).contains(&length) {
            let _ = frames.send(Frame::Bad).await;
            break;
        }
        let mut frame = vec![0u8; length];
        if reader.read_exact(&mut frame).await.is_err() {
            break;
        }
        if frames
            .send(Frame::Request(Bytes::from(frame)))
            .await
            .is_err()
        {
            break;
        }
    }
    let _ = gone.send(true);
}

/// An answer: the response and the versions to encode it with.
struct Answer {
    correlation_id: i32,
    header_version: i16,
    version: i16,
    response: ResponseKind,
}

impl Answer {
    fn encode(&self) -> Option<Bytes> {
        let mut body = BytesMut::new();
        let mut header = ResponseHeader::default();
        header.correlation_id = self.correlation_id;
        header.encode(&mut body, self.header_version).ok()?;
        if let Err(e) = self.response.encode(&mut body, self.version) {
            // A bug of ours, not the client's: say so, and close.
            eprintln!("error: cannot encode a v{} response: {e}", self.version);
            return None;
        }
        let mut frame = BytesMut::with_capacity(body.len() + 4);
        frame.put_i32(body.len() as i32);
        frame.put_slice(&body);
        Some(frame.freeze())
    }
}

/// What a request needs from the connection.
enum Outcome {
    Answer(Answer),
    /// acks = 0: no answer.
    Silent,
    /// A fetch to park, answered when it resolves.
    Park(Box<FetchRequest>, Answer),
    /// A JoinGroup or SyncGroup parked in the group purgatory.
    Wait(Waiting, Answer),
    /// A produce (acks = -1) to answer once its records are on disk.
    Persist(ProduceResponse, Vec<(String, i32, i64)>, Duration, Answer),
    /// Close the connection.
    Close,
}

/// A group request waiting in the group purgatory.
enum Waiting {
    Join {
        group: String,
        joined: Joined,
        parked: purgatorio::Parked<GroupWait>,
    },
    Sync {
        group: String,
        member: String,
        generation: i32,
        parked: purgatorio::Parked<GroupWait>,
    },
}

fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

fn join_response(joined: &Joined) -> JoinGroupResponse {
    let mut r = JoinGroupResponse::default();
    r.error_code = joined.error;
    r.generation_id = joined.generation;
    r.protocol_name = Some(str_bytes(&joined.protocol));
    r.leader = str_bytes(&joined.leader);
    r.member_id = str_bytes(&joined.member_id);
    r.members = joined
        .members
        .iter()
        .map(|(id, metadata)| {
            let mut m = join_group_response::JoinGroupResponseMember::default();
            m.member_id = str_bytes(id);
            m.metadata = metadata.clone();
            m
        })
        .collect();
    r
}

fn sync_response(result: Result<Bytes, i16>) -> SyncGroupResponse {
    let mut r = SyncGroupResponse::default();
    match result {
        Ok(assignment) => r.assignment = assignment,
        Err(code) => r.error_code = code,
    }
    r
}

/// Serves a group request (the coordinator is this broker).
fn serve_group(
    broker: &Broker,
    request: RequestKind,
    answer: impl Fn(ResponseKind) -> Answer,
) -> Outcome {
    let groups = &broker.groups;
    match request {
        RequestKind::FindCoordinator(r) => {
            // This broker coordinates every group (served up to v3, where
            // the coordinator is in the top-level fields).
            let _ = r;
            let mut resp = FindCoordinatorResponse::default();
            resp.node_id = BrokerId(0);
            resp.host = str_bytes(&broker.addr.ip().to_string());
            resp.port = i32::from(broker.addr.port());
            Outcome::Answer(answer(ResponseKind::FindCoordinator(resp)))
        }
        RequestKind::JoinGroup(r) => {
            let protocols = r
                .protocols
                .iter()
                .map(|p| (p.name.to_string(), p.metadata.clone()))
                .collect();
            let session = Duration::from_millis(u64::try_from(r.session_timeout_ms).unwrap_or(0));
            // v0 has no rebalance timeout: the session timeout serves.
            let rebalance = match u64::try_from(r.rebalance_timeout_ms) {
                Ok(ms) if ms > 0 => Duration::from_millis(ms),
                _ => session,
            };
            match groups.join(
                &r.group_id,
                &r.member_id,
                &r.protocol_type,
                protocols,
                session,
                rebalance,
            ) {
                Ok((joined, None)) => {
                    Outcome::Answer(answer(ResponseKind::JoinGroup(join_response(&joined))))
                }
                Ok((joined, Some(parked))) => Outcome::Wait(
                    Waiting::Join {
                        group: r.group_id.to_string(),
                        joined,
                        parked,
                    },
                    answer(ResponseKind::JoinGroup(JoinGroupResponse::default())),
                ),
                Err(code) => {
                    let mut resp = JoinGroupResponse::default();
                    resp.error_code = code;
                    resp.generation_id = -1;
                    resp.member_id = r.member_id.clone();
                    Outcome::Answer(answer(ResponseKind::JoinGroup(resp)))
                }
            }
        }
        RequestKind::SyncGroup(r) => {
            let assignments = r
                .assignments
                .iter()
                .map(|a| (a.member_id.to_string(), a.assignment.clone()))
                .collect();
            match groups.sync(&r.group_id, &r.member_id, r.generation_id, assignments) {
                Ok(Ok(assignment)) => Outcome::Answer(answer(ResponseKind::SyncGroup(
                    sync_response(Ok(assignment)),
                ))),
                Ok(Err(parked)) => Outcome::Wait(
                    Waiting::Sync {
                        group: r.group_id.to_string(),
                        member: r.member_id.to_string(),
                        generation: r.generation_id,
                        parked,
                    },
                    answer(ResponseKind::SyncGroup(SyncGroupResponse::default())),
                ),
                Err(code) => {
                    Outcome::Answer(answer(ResponseKind::SyncGroup(sync_response(Err(code)))))
                }
            }
        }
        RequestKind::Heartbeat(r) => {
            let mut resp = HeartbeatResponse::default();
            resp.error_code = groups.heartbeat(&r.group_id, &r.member_id, r.generation_id);
            Outcome::Answer(answer(ResponseKind::Heartbeat(resp)))
        }
        RequestKind::LeaveGroup(r) => {
            let mut resp = LeaveGroupResponse::default();
            resp.error_code = groups.leave(&r.group_id, &r.member_id);
            Outcome::Answer(answer(ResponseKind::LeaveGroup(resp)))
        }
        RequestKind::OffsetCommit(r) => {
            let mut resp = OffsetCommitResponse::default();
            for topic in &r.topics {
                let mut t = offset_commit_response::OffsetCommitResponseTopic::default();
                t.name = topic.name.clone();
                for p in &topic.partitions {
                    groups.commit(
                        &r.group_id,
                        &topic.name,
                        p.partition_index,
                        p.committed_offset,
                    );
                    let mut pr = offset_commit_response::OffsetCommitResponsePartition::default();
                    pr.partition_index = p.partition_index;
                    t.partitions.push(pr);
                }
                resp.topics.push(t);
            }
            Outcome::Answer(answer(ResponseKind::OffsetCommit(resp)))
        }
        RequestKind::OffsetFetch(r) => {
            let mut resp = OffsetFetchResponse::default();
            let wanted: Vec<(String, Vec<i32>)> = match &r.topics {
                Some(topics) => topics
                    .iter()
                    .map(|t| (t.name.to_string(), t.partition_indexes.clone()))
                    .collect(),
                None => {
                    let mut by_topic: HashMap<String, Vec<i32>> = HashMap::new();
                    for (t, p, _) in groups.all_committed(&r.group_id) {
                        by_topic.entry(t).or_default().push(p);
                    }
                    by_topic.into_iter().collect()
                }
            };
            for (name, partitions) in wanted {
                let mut t = offset_fetch_response::OffsetFetchResponseTopic::default();
                t.name = TopicName(str_bytes(&name));
                for p in partitions {
                    let mut pr = offset_fetch_response::OffsetFetchResponsePartition::default();
                    pr.partition_index = p;
                    pr.committed_offset = groups.committed(&r.group_id, &name, p);
                    pr.metadata = Some(StrBytes::from_static_str(""));
                    t.partitions.push(pr);
                }
                resp.topics.push(t);
            }
            Outcome::Answer(answer(ResponseKind::OffsetFetch(resp)))
        }
        _ => Outcome::Close,
    }
}

/// Decodes and serves one request, except for waiting.
fn serve(broker: &Broker, mut frame: Bytes) -> Outcome {
    let api_key = frame.slice(0..2).get_i16();
    let version = frame.slice(2..4).get_i16();
    let Ok(key) = ApiKey::try_from(api_key) else {
        return Outcome::Close;
    };
    let served = SERVED.iter().find(|(k, _, _)| *k == key);
    if key == ApiKey::ApiVersions && served.is_some_and(|(_, _, max)| version > *max) {
        // Kafka's rule: an unknown ApiVersions version is answered in v0,
        // with UNSUPPORTED_VERSION and the versions served.
        let correlation_id = frame.slice(4..8).get_i32();
        let mut response = broker.api_versions();
        response.error_code = code::UNSUPPORTED_VERSION;
        return Outcome::Answer(Answer {
            correlation_id,
            header_version: 0,
            version: 0,
            response: ResponseKind::ApiVersions(response),
        });
    }
    let Some(_) = served.filter(|(_, min, max)| (*min..=*max).contains(&version)) else {
        return Outcome::Close;
    };
    let Ok(header) = RequestHeader::decode(&mut frame, key.request_header_version(version)) else {
        return Outcome::Close;
    };
    let Ok(request) = RequestKind::decode(key, &mut frame, version) else {
        return Outcome::Close;
    };
    let answer = |response| Answer {
        correlation_id: header.correlation_id,
        // ApiVersions answers always carry header v0.
        header_version: if key == ApiKey::ApiVersions {
            0
        } else {
            key.response_header_version(version)
        },
        version,
        response,
    };
    match request {
        RequestKind::ApiVersions(_) => {
            Outcome::Answer(answer(ResponseKind::ApiVersions(broker.api_versions())))
        }
        RequestKind::Metadata(r) => {
            Outcome::Answer(answer(ResponseKind::Metadata(broker.metadata(r))))
        }
        RequestKind::Produce(r) => {
            let response = broker.produce(&r);
            if r.acks == 0 {
                Outcome::Silent
            } else if r.acks == -1 && broker.store.is_some() {
                // Answered once a group-commit fsync covers every record.
                let wants = response
                    .responses
                    .iter()
                    .flat_map(|t| {
                        t.partition_responses
                            .iter()
                            .filter(|p| p.error_code == 0)
                            .filter_map(|p| {
                                let next = broker.with_log(&t.name, p.index, |log| log.next)?;
                                Some((t.name.to_string(), p.index, next))
                            })
                    })
                    .collect();
                let timeout = Duration::from_millis(u64::try_from(r.timeout_ms).unwrap_or(0));
                Outcome::Persist(
                    response,
                    wants,
                    timeout,
                    answer(ResponseKind::Produce(ProduceResponse::default())),
                )
            } else {
                Outcome::Answer(answer(ResponseKind::Produce(response)))
            }
        }
        RequestKind::Fetch(r) => {
            let placeholder = answer(ResponseKind::Fetch(FetchResponse::default()));
            Outcome::Park(Box::new(r), placeholder)
        }
        RequestKind::ListOffsets(r) => {
            Outcome::Answer(answer(ResponseKind::ListOffsets(broker.list_offsets(&r))))
        }
        other => serve_group(broker, other, answer),
    }
}

/// Serves one connection until it closes.
async fn connection(broker: Arc<Broker>, stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let (reader, mut writer) = stream.into_split();
    let (frames_tx, mut frames) = mpsc::channel(64);
    let (gone_tx, mut gone) = watch::channel(false);
    let reading = tokio::spawn(read_frames(reader, frames_tx, gone_tx));
    while let Some(frame) = frames.recv().await {
        let Frame::Request(frame) = frame else { break };
        let answer = match serve(&broker, frame) {
            Outcome::Answer(answer) => answer,
            Outcome::Silent => continue,
            Outcome::Close => break,
            Outcome::Persist(mut response, wants, timeout, mut answer) => {
                let keys: Vec<(String, i32)> =
                    wants.iter().map(|(t, p, _)| (t.clone(), *p)).collect();
                let produce = DelayedProduce {
                    broker: Arc::clone(&broker),
                    wants,
                    timeout,
                };
                let outcome = match broker.produces.park(produce, &keys) {
                    Ok(parked) => tokio::select! {
                        biased;
                        outcome = parked => outcome,
                        _ = gone.wait_for(|g| *g) => break,
                    },
                    Err(_) => break,
                };
                if outcome != Some(Completion::Satisfied) {
                    for t in &mut response.responses {
                        for p in &mut t.partition_responses {
                            if p.error_code == 0 {
                                p.error_code = code::REQUEST_TIMED_OUT;
                            }
                        }
                    }
                }
                answer.response = ResponseKind::Produce(response);
                answer
            }
            Outcome::Wait(waiting, mut answer) => {
                // The group's wait, unless the client goes away first
                // (the wait is dropped; its deadline still bounds it).
                answer.response = match waiting {
                    Waiting::Join {
                        group,
                        joined,
                        parked,
                    } => {
                        let completion = tokio::select! {
                            biased;
                            completion = parked => completion,
                            _ = gone.wait_for(|g| *g) => break,
                        };
                        ResponseKind::JoinGroup(join_response(
                            &broker.groups.joined(&group, &joined, completion),
                        ))
                    }
                    Waiting::Sync {
                        group,
                        member,
                        generation,
                        parked,
                    } => {
                        tokio::select! {
                            biased;
                            _ = parked => {}
                            _ = gone.wait_for(|g| *g) => break,
                        }
                        ResponseKind::SyncGroup(sync_response(
                            broker.groups.synced(&group, &member, generation),
                        ))
                    }
                };
                answer
            }
            Outcome::Park(request, mut answer) => {
                let wants: Vec<(String, i32, i64)> = request
                    .topics
                    .iter()
                    .flat_map(|t| {
                        t.partitions
                            .iter()
                            .map(|p| (t.topic.to_string(), p.partition, p.fetch_offset))
                    })
                    .collect();
                let keys: Vec<(String, i32)> =
                    wants.iter().map(|(t, p, _)| (t.clone(), *p)).collect();
                let fetch = DelayedFetch {
                    broker: Arc::clone(&broker),
                    wants,
                    min_bytes: usize::try_from(request.min_bytes).unwrap_or(0).max(1),
                    max_wait: Duration::from_millis(
                        u64::try_from(request.max_wait_ms).unwrap_or(0),
                    ),
                };
                if !keys.is_empty() && request.max_wait_ms > 0 {
                    match broker.fetches.park(fetch, &keys) {
                        Ok(parked) => {
                            let parked = parked.cancel_on_drop();
                            tokio::select! {
                                biased;
                                _ = parked => {}
                                // The client went away: dropping the parked
                                // fetch cancels it.
                                _ = gone.wait_for(|g| *g) => break,
                            }
                        }
                        Err(_) => break,
                    }
                }
                answer.response = ResponseKind::Fetch(broker.fetch_response(&request));
                answer
            }
        };
        let Some(bytes) = answer.encode() else { break };
        if writer.write_all(&bytes).await.is_err() {
            break;
        }
    }
    reading.abort();
}

/// Starts a broker on `listen`; returns its address and state.
async fn start(
    listen: &str,
    partitions: i32,
    data_dir: Option<std::path::PathBuf>,
) -> std::io::Result<(SocketAddr, Arc<Broker>)> {
    let listener = TcpListener::bind(listen).await?;
    let addr = listener.local_addr()?;
    let timer = Timer::builder()
        .thread_name("broker-timer")
        .build()
        .map_err(std::io::Error::other)?;
    let fetches = Purgatory::builder()
        .name("fetch")
        .shared_timer(&timer)
        .build()
        .map_err(std::io::Error::other)?;
    let produces = Purgatory::builder()
        .name("produce")
        .shared_timer(&timer)
        .build()
        .map_err(std::io::Error::other)?;
    let (store, recovered) = match data_dir {
        Some(dir) => {
            let (store, topics) = store::Store::open(dir)?;
            (Some(store), topics)
        }
        None => (None, HashMap::new()),
    };
    let topics = recovered
        .into_iter()
        .map(|(name, logs)| {
            let topic = Topic {
                partitions: logs.into_iter().map(Mutex::new).collect(),
            };
            (name, Arc::new(topic))
        })
        .collect();
    let broker = Arc::new(Broker {
        topics: RwLock::new(topics),
        store,
        produces,
        partitions,
        addr,
        fetches,
        groups: Coordinator::new(&timer),
        timer,
        batches: AtomicU64::new(0),
    });
    if broker.store.is_some() {
        tokio::spawn(store::group_commit(Arc::clone(&broker)));
    }
    let accepting = Arc::clone(&broker);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(connection(Arc::clone(&accepting), stream));
        }
    });
    Ok((addr, broker))
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    if args.partitions < 1 {
        eprintln!("error: --partitions must be at least 1");
        std::process::exit(2);
    }
    let (addr, broker) = match start(&args.listen, args.partitions, args.data_dir.clone()).await {
        Ok(started) => started,
        Err(e) => {
            eprintln!("error: cannot listen on {}: {e}", args.listen);
            std::process::exit(1);
        }
    };
    match &args.data_dir {
        Some(dir) => println!(
            "purgatorio-broker listening on {addr} (partitions in {})",
            dir.display()
        ),
        None => println!("purgatorio-broker listening on {addr} (in-memory partitions)"),
    }
    // Report the timer's wake-ups and the parked fetches: the proof that it
    // does not wake between deadlines.
    let every = Duration::from_millis(args.stats_ms.max(1));
    for seq in 1u64.. {
        tokio::time::sleep(every).await;
        let m = broker.timer.metrics();
        let f = broker.fetches.metrics();
        eprintln!(
            "stats: seq={seq} batches={} parked={} satisfied={} expired={} cancelled={} timer_wakeups={} group_waits={} sessions_expired={} durable_acks={}",
            broker.batches.load(Ordering::Relaxed),
            broker.fetches.delayed(),
            f.satisfied,
            f.expired,
            f.cancelled,
            m.wakeups,
            broker.groups.figures().0,
            broker.groups.sessions_expired(),
            broker.produces.metrics().satisfied
        );
    }
}
