//! Produce: record batches appended with offsets assigned; with acks = -1
//! and `--data-dir`, the answer waits in the produce purgatory until a
//! group-commit fsync covers every record.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::{produce_response, ProduceRequest, ProduceResponse};
use kafka_protocol::ResponseError;
use purgatorio::{Completion, DelayedOperation};

use super::RequestError;
use crate::broker::Broker;
use crate::log::{assign_offsets, Position, TopicPartition};

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
                    log.durable >= want.offset
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
    let (mut response, appended) = append(broker, &request);
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
        timeout: Duration::from_millis(u64::try_from(request.timeout_ms).unwrap_or(0)),
    };
    let parked = broker
        .produces
        .park(wait, &keys)
        .map_err(|_| RequestError::ShuttingDown)?;
    if parked.await != Some(Completion::Satisfied) {
        for t in &mut response.responses {
            for p in &mut t.partition_responses {
                if p.error_code == 0 {
                    p.error_code = ResponseError::RequestTimedOut.code();
                }
            }
        }
    }
    Ok(Some(response))
}

/// Appends every partition's batches; returns the answer and, per partition
/// appended to, the offset after its records. Completes the fetches waiting
/// on those partitions.
fn append(broker: &Broker, request: &ProduceRequest) -> (ProduceResponse, Vec<Position>) {
    let mut response = ProduceResponse::default();
    let mut appended = Vec::new();
    for topic_data in &request.topic_data {
        let name = topic_data.name.to_string();
        let topic = broker.topic(&name);
        let mut topic_response = produce_response::TopicProduceResponse::default();
        topic_response.name = topic_data.name.clone();
        for partition in &topic_data.partition_data {
            let mut p = produce_response::PartitionProduceResponse::default();
            p.index = partition.index;
            p.log_append_time_ms = -1;
            let log = topic
                .as_ref()
                .and_then(|t| t.partitions.get(usize::try_from(partition.index).ok()?));
            let Some(log) = log else {
                p.error_code = ResponseError::UnknownTopicOrPartition.code();
                topic_response.partition_responses.push(p);
                continue;
            };
            let at = TopicPartition::new(name.clone(), partition.index);
            let mut log = log.lock();
            let records = partition.records.as_deref().unwrap_or_default();
            match assign_offsets(records, log.next) {
                None => p.error_code = ResponseError::CorruptMessage.code(),
                Some(assigned) => {
                    if let Some(file) = log.file.as_mut() {
                        let written = assigned
                            .batches
                            .iter()
                            .try_for_each(|b| std::io::Write::write_all(file, &b.bytes));
                        if written.is_err() {
                            p.error_code = ResponseError::KafkaStorageError.code();
                            topic_response.partition_responses.push(p);
                            continue;
                        }
                        if let Some(store) = &broker.store {
                            store.dirty(&at);
                        }
                    }
                    p.base_offset = log.next;
                    broker
                        .batches
                        .fetch_add(assigned.batches.len() as u64, Ordering::Relaxed);
                    log.batches.extend(assigned.batches);
                    log.next = assigned.next;
                    appended.push(Position {
                        at,
                        offset: assigned.next,
                    });
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
