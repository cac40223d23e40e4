//! Produce and InitProducerId: record batches appended with offsets
//! assigned, an idempotent producer's duplicates answered with their
//! original offset and its gaps refused (see [`crate::producers`]); with
//! acks = -1 and `--data-dir`, the answer waits in the produce purgatory
//! until a group-commit fsync covers every record (only such a produce
//! asks for one: acks 0 and 1 are answered once the records are written,
//! as Kafka answers them, and reach the disk with a later fsync or their
//! segment's). A batch that needs a new segment whose files are still
//! being made waits for them without the partition's lock
//! ([`crate::roller`]).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::{
    produce_response, InitProducerIdRequest, InitProducerIdResponse, ProduceRequest,
    ProduceResponse, ProducerId,
};
use kafka_protocol::ResponseError;
use purgatorio::{Completion, DelayedOperation};

use super::RequestError;
use crate::broker::Broker;
use crate::log::batch::{keyless, split_batches, Keys};
use crate::log::{AppendError, BatchHeader, LazyLog, Log, Position, Topic, TopicPartition};
use crate::producers::{Verdict, NO_PRODUCER};

/// A produce with acks = -1 waiting until the fsyncs cover its offsets.
pub struct DelayedProduce {
    /// The broker, whose logs say what is durable.
    broker: Arc<Broker>,
    /// Per partition appended to, the offset after its records.
    wants: Vec<Position>,
    /// The request's `timeout_ms`.
    timeout: Duration,
}

impl DelayedOperation for DelayedProduce {
    fn delay(&self) -> Duration {
        self.timeout
    }
    fn try_complete(&mut self) -> bool {
        self.wants.iter().all(|want| {
            self.broker
                .with_log(&want.at.topic, want.at.partition, |log| {
                    // A failed log's answer is KAFKA_STORAGE_ERROR, now.
                    log.durable() >= want.offset || log.is_failed()
                })
                .unwrap_or(true)
        })
    }
    fn on_complete(&mut self, _: Completion) {}
}

/// Produce: appends, then answers (acks 1), answers nothing (acks 0,
/// `None`), or answers once the records are on disk (acks -1 with
/// `--data-dir`; REQUEST_TIMED_OUT if `timeout_ms` passes first).
///
/// # Errors
///
/// [`RequestError::ShuttingDown`] if the produce purgatory refuses the wait.
pub async fn produce(
    broker: &Arc<Broker>,
    request: ProduceRequest,
) -> Result<Option<ProduceResponse>, RequestError> {
    let (mut response, appended) = append(broker, &request).await;
    if request.acks == 0 {
        return Ok(None);
    }
    if request.acks != -1 || broker.store.is_none() || appended.is_empty() {
        return Ok(Some(response));
    }
    let keys: Vec<TopicPartition> = appended.iter().map(|p| p.at.clone()).collect();
    let wait = DelayedProduce {
        broker: Arc::clone(broker),
        wants: appended,
        timeout: request_timeout(&request),
    };
    let parked = broker
        .produces
        .park(wait, &keys)
        .map_err(|_| RequestError::ShuttingDown)?;
    let satisfied = parked.await == Some(Completion::Satisfied);
    for t in &mut response.responses {
        for p in &mut t.partition_responses {
            if p.error_code != 0 {
                continue;
            }
            // A log failed while the produce waited: its records may be
            // lost, whatever a later fsync says. A topic deleted while it
            // waited took the records with it.
            let failed = broker.with_log(t.name.as_str(), p.index, |log| log.is_failed());
            if failed == Some(true) {
                p.error_code = ResponseError::KafkaStorageError.code();
            } else if failed.is_none() {
                p.error_code = ResponseError::UnknownTopicOrPartition.code();
            } else if !satisfied {
                p.error_code = ResponseError::RequestTimedOut.code();
            }
        }
    }
    Ok(Some(response))
}

/// The request's `timeout_ms` (a negative one is none).
fn request_timeout(request: &ProduceRequest) -> Duration {
    Duration::from_millis(u64::try_from(request.timeout_ms).unwrap_or(0))
}

/// Appends every partition's batches; returns the answer and, per partition
/// appended to, the offset after its records. Completes the fetches waiting
/// on those partitions.
async fn append(
    broker: &Arc<Broker>,
    request: &ProduceRequest,
) -> (ProduceResponse, Vec<Position>) {
    let mut response = ProduceResponse::default();
    let mut appended = Vec::new();
    // What waits for a new segment waits no longer than the request allows.
    let deadline = tokio::time::Instant::now() + request_timeout(request);
    for topic_data in &request.topic_data {
        let name = topic_data.name.to_string();
        // Only Metadata creates topics (Kafka's rule): a produce to one
        // that does not exist is UNKNOWN_TOPIC_OR_PARTITION.
        let topic = broker.existing_topic(&name);
        let mut topic_response = produce_response::TopicProduceResponse::default();
        topic_response.name = topic_data.name.clone();
        for partition in &topic_data.partition_data {
            let mut p = produce_response::PartitionProduceResponse::default();
            p.index = partition.index;
            p.log_append_time_ms = -1;
            let at = TopicPartition::new(name.clone(), partition.index);
            let records = partition.records.as_deref().unwrap_or_default();
            let target = topic.as_ref().and_then(|topic| {
                let log = topic
                    .partitions
                    .get(usize::try_from(partition.index).ok()?)?;
                Some(Target {
                    topic,
                    log,
                    at: &at,
                })
            });
            let outcome = match target {
                None => Err(ResponseError::UnknownTopicOrPartition),
                Some(target) if target.topic.config.compacted() => {
                    match keyless_refused(&at, records) {
                        Some(refused) => {
                            p.error_message = Some(super::str_bytes(&refused.message));
                            p.record_errors = refused.records;
                            Err(ResponseError::InvalidRecord)
                        }
                        None => {
                            append_partition(broker, target, records, request.acks, deadline).await
                        }
                    }
                }
                Some(target) => {
                    append_partition(broker, target, records, request.acks, deadline).await
                }
            };
            match outcome {
                Err(error) => p.error_code = error.code(),
                Ok(Appended { base_offset, next }) => {
                    p.base_offset = base_offset;
                    appended.push(Position { at, offset: next });
                }
            }
            topic_response.partition_responses.push(p);
        }
        response.responses.push(topic_response);
    }
    // The new bytes may complete fetches waiting on these partitions.
    for position in &appended {
        let _ = broker.fetches.check_and_complete(&position.at);
    }
    (response, appended)
}

/// A partition's records refused by a compacted topic.
struct KeylessRefused {
    /// The partition's message.
    message: String,
    /// Each record refused, by its index in the partition's records, and
    /// why (Produce v8+ carries them; librdkafka fails those records with
    /// INVALID_RECORD and the others of the batch with
    /// `_INVALID_DIFFERENT_RECORD`).
    records: Vec<produce_response::BatchIndexAndErrorMessage>,
}

/// Kafka's refusal of `records` to a compacted topic's partition `at` if
/// any has no key (the whole set is refused, as Kafka refuses it). The
/// records of a compressed batch are not opened, so not checked; a
/// malformed one is refused. Malformed batches are left to the append to
/// refuse (CORRUPT_MESSAGE).
fn keyless_refused(at: &TopicPartition, records: &[u8]) -> Option<KeylessRefused> {
    let why = format!(
        "Compacted topic cannot accept message without key in topic partition {}-{}.",
        at.topic, at.partition
    );
    let mut refused = Vec::new();
    let mut first = 0i32;
    for batch in split_batches(records)? {
        let count = BatchHeader::of(batch).last_offset_delta.saturating_add(1);
        match keyless(batch) {
            Keys::Missing(indexes) => refused.extend(indexes.into_iter().map(|i| first + i)),
            Keys::Unread => {}
            Keys::Malformed => refused.push(first),
        }
        first = first.saturating_add(count);
    }
    if refused.is_empty() {
        return None;
    }
    let message = format!(
        "One or more records have been rejected due to {} record errors in total: {why}",
        refused.len()
    );
    let records = refused
        .into_iter()
        .map(|index| {
            let mut e = produce_response::BatchIndexAndErrorMessage::default();
            e.batch_index = index;
            e.batch_index_error_message = Some(super::str_bytes(&why));
            e
        })
        .collect();
    Some(KeylessRefused { message, records })
}

/// The partition a produce appends to.
#[derive(Clone, Copy)]
struct Target<'a> {
    /// Its topic (whose `rolled` wakes a produce waiting for a segment).
    topic: &'a Arc<Topic>,
    /// Its log.
    log: &'a Arc<LazyLog>,
    /// Its key.
    at: &'a TopicPartition,
}

/// What a partition's append did.
struct Appended {
    /// The offset of the first batch (for a duplicate, where it was first
    /// appended).
    base_offset: i64,
    /// The offset after the partition's records.
    next: i64,
}

/// Why a partition's batches stopped being appended.
enum Stalled {
    /// The next batch waits for a new segment's files.
    Rolling,
    /// The produce is refused with this error.
    Refused(ResponseError),
}

/// Appends a partition's batches, each unless its producer's sequences say
/// it is a duplicate (then the answer is the original offset). A batch
/// that needs a new segment not made yet waits, without the lock, for the
/// roll work to come back, then goes on. With acks = -1 the partition is
/// marked for the group commit.
///
/// # Errors
///
/// CORRUPT_MESSAGE for malformed batches (or a CRC that does not match),
/// MESSAGE_TOO_LARGE for a batch over the topic's `max.message.bytes` (else
/// `--message-max-bytes`), NOT_ENOUGH_REPLICAS for acks=-1 to a topic whose
/// `min.insync.replicas` is above 1, the
/// producer's refusal (OUT_OF_ORDER_SEQUENCE_NUMBER,
/// INVALID_PRODUCER_EPOCH), KAFKA_STORAGE_ERROR if the segment files
/// cannot be written or made (or the log is failed), REQUEST_TIMED_OUT if
/// a new segment is not made by the request's `timeout_ms`.
async fn append_partition(
    broker: &Arc<Broker>,
    target: Target<'_>,
    records: &[u8],
    acks: i16,
    deadline: tokio::time::Instant,
) -> Result<Appended, ResponseError> {
    let config = &target.topic.config;
    // One node holds one replica: more in sync cannot be had (Kafka's
    // answer when the in-sync replicas are fewer than the topic asks).
    if acks == -1 && config.min_insync_replicas.is_some_and(|n| n > 1) {
        return Err(ResponseError::NotEnoughReplicas);
    }
    let batches = split_batches(records).ok_or(ResponseError::CorruptMessage)?;
    let max = config.max_message_bytes.unwrap_or(broker.message_max_bytes);
    if batches.iter().any(|b| b.len() > max) {
        return Err(ResponseError::MessageTooLarge);
    }
    // Its first use since the start reads it, off the runtime.
    LazyLog::ready([Arc::clone(target.log)]).await;
    let mut rest = batches.as_slice();
    let mut base_offset = None;
    loop {
        // Made before the log is looked at, so that a roll work coming
        // back in between still wakes this produce.
        let rolled = target.topic.rolled.notified();
        let (stalled, work, next, durable) = {
            let mut log = target.log.lock();
            let stalled =
                append_batches(broker, &mut log, &mut rest, &mut base_offset, target.at).err();
            (stalled, log.take_work(), log.next(), log.durable())
        };
        if let Some(work) = work {
            crate::roller::spawn(broker, Arc::clone(target.topic), target.at.clone(), work);
        }
        match stalled {
            Some(Stalled::Rolling) => {
                // The batches before stay appended (as after any refusal
                // part-way); the rest is answered REQUEST_TIMED_OUT.
                if tokio::time::timeout_at(deadline, rolled).await.is_err() {
                    return Err(ResponseError::RequestTimedOut);
                }
            }
            Some(Stalled::Refused(error)) => return Err(error),
            None => {
                // A duplicate's answer, too, waits until the log is durable
                // up to here (its original may not be yet).
                if acks == -1 && durable < next {
                    if let Some(store) = &broker.store {
                        store.dirty(target.at, target.log);
                    }
                }
                return Ok(Appended {
                    base_offset: base_offset.unwrap_or(next),
                    next,
                });
            }
        }
    }
}

/// Appends the batches of `rest` in order under the partition's lock,
/// moving `rest` past each one appended or found a duplicate.
fn append_batches(
    broker: &Broker,
    log: &mut Log,
    rest: &mut &[&[u8]],
    base_offset: &mut Option<i64>,
    at: &TopicPartition,
) -> Result<(), Stalled> {
    while let Some((&batch, after)) = rest.split_first() {
        match log.producers.check(&BatchHeader::of(batch)) {
            Verdict::Refuse(error) => return Err(Stalled::Refused(error)),
            Verdict::Duplicate(original) => {
                base_offset.get_or_insert(original);
            }
            Verdict::Append => match log.append(batch) {
                Ok(base) => {
                    base_offset.get_or_insert(base);
                    broker.batches.fetch_add(1, Ordering::Relaxed);
                }
                Err(AppendError::Rolling) => return Err(Stalled::Rolling),
                // Logged once, when the log failed.
                Err(AppendError::Failed) => {
                    return Err(Stalled::Refused(ResponseError::KafkaStorageError))
                }
                Err(e @ AppendError::Io(_)) => {
                    eprintln!(
                        "warning: cannot append to {}-{}: {e}",
                        at.topic, at.partition
                    );
                    return Err(Stalled::Refused(ResponseError::KafkaStorageError));
                }
            },
        }
        *rest = after;
    }
    Ok(())
}

/// InitProducerId: a fresh producer id with epoch 0, or (v3+, for a
/// producer that gives its id and epoch) the same id with the next epoch.
/// Transactions are not served: a transactional id is answered
/// UNSUPPORTED_VERSION, as Kafka answers it when its inter-broker protocol
/// predates transactions (not an authorization error).
pub fn init_producer_id(
    broker: &Broker,
    request: &InitProducerIdRequest,
) -> InitProducerIdResponse {
    let mut response = InitProducerIdResponse::default();
    if request.transactional_id.is_some() {
        response.error_code = ResponseError::UnsupportedVersion.code();
        response.producer_id = ProducerId(NO_PRODUCER);
        response.producer_epoch = -1;
        return response;
    }
    if request.producer_id.0 >= 0 && (0..i16::MAX - 1).contains(&request.producer_epoch) {
        response.producer_id = request.producer_id;
        response.producer_epoch = request.producer_epoch + 1;
        return response;
    }
    match broker.producer_ids.next() {
        Ok(id) => {
            response.producer_id = ProducerId(id);
            response.producer_epoch = 0;
        }
        Err(_) => {
            response.error_code = ResponseError::KafkaStorageError.code();
            response.producer_id = ProducerId(NO_PRODUCER);
            response.producer_epoch = -1;
        }
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::{start, Config};
    use crate::log::batch::testing::of;
    use crate::log::{LogConfig, Retention};
    use kafka_protocol::messages::{produce_request, TopicName};
    use kafka_protocol::protocol::StrBytes;

    #[test]
    fn a_produce_waiting_for_a_segment_that_never_comes_is_answered_request_timed_out() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let config = Config {
                listen: "127.0.0.1:0".into(),
                partitions: 1,
                auto_create_topics: true,
                data_dir: None,
                limits: crate::wire::Limits::new(
                    1 << 20,
                    1 << 20,
                    1 << 20,
                    Duration::from_secs(60),
                    Duration::from_secs(60),
                    Duration::from_secs(60),
                ),
                message_max_bytes: 1 << 20,
                fetch_max_bytes: 1 << 20,
                initial_rebalance_delay: Duration::ZERO,
                log: LogConfig {
                    segment_bytes: 1 << 20,
                    retention: Retention {
                        ms: None,
                        bytes: None,
                    },
                },
                retention_check: Duration::from_secs(60),
                group_max_size: 10,
                partition_limits: crate::topics::PartitionLimits {
                    per_request: 10,
                    per_broker: 10,
                },
            };
            let broker = start(&config).await.unwrap();
            let mut quota = crate::topics::RequestQuota::new(config.partition_limits);
            let topic = broker
                .create_topic("stuck", 1, Default::default(), &mut quota)
                .await
                .unwrap();
            {
                // A roll work that never comes back (a disk that hangs):
                // the partition's first segment is never made.
                let mut log = topic.partitions[0].lock();
                assert!(matches!(log.append(&of(1)), Err(AppendError::Rolling)));
                drop(log.take_work().expect("the first segment's work"));
            }
            let mut partition = produce_request::PartitionProduceData::default();
            partition.records = Some(of(1).into());
            let mut t = produce_request::TopicProduceData::default();
            t.name = TopicName(StrBytes::from_static_str("stuck"));
            t.partition_data = vec![partition];
            let mut request = ProduceRequest::default();
            request.acks = 1;
            request.timeout_ms = 10;
            request.topic_data = vec![t];
            let answer = produce(&broker, request).await.unwrap().unwrap();
            assert_eq!(
                answer.responses[0].partition_responses[0].error_code,
                ResponseError::RequestTimedOut.code()
            );
        });
    }
}
