//! DeleteRecords: a partition's log start moved up to an offset (Kafka's
//! `deleteRecords`), inside a segment too; the segments wholly below it
//! go at retention's next check ([`crate::cleaner`]).

use std::sync::Arc;

use kafka_protocol::messages::{
    delete_records_response, DeleteRecordsRequest, DeleteRecordsResponse,
};
use kafka_protocol::ResponseError;

use crate::broker::Broker;
use crate::log::{LazyLog, RaisedStart};

/// The offset that asks for the high watermark (Kafka's
/// `DeleteRecordsRequest.HIGH_WATERMARK`).
const HIGH_WATERMARK: i64 = -1;

/// A partition whose start moved, to write to its file.
struct Moved {
    /// Its topic.
    topic: Arc<crate::log::Topic>,
    /// Its index.
    index: usize,
    /// Where it is in the answer: topic, partition.
    at: (usize, usize),
}

/// DeleteRecords: each partition's log start raised to its offset (-1:
/// the high watermark), answered with the start it has then (its low
/// watermark); with `--data-dir` once the new starts are on disk. An
/// offset past the high watermark (or below -1) is OFFSET_OUT_OF_RANGE, a
/// partition that does not exist UNKNOWN_TOPIC_OR_PARTITION, a topic whose
/// `cleanup.policy` lacks `delete` POLICY_VIOLATION, a failed partition or
/// a start that could not be written KAFKA_STORAGE_ERROR.
pub async fn delete_records(
    broker: &Arc<Broker>,
    request: &DeleteRecordsRequest,
) -> DeleteRecordsResponse {
    let unread = broker.unread(request.topics.iter().flat_map(|t| {
        t.partitions
            .iter()
            .map(|p| (t.name.as_str(), p.partition_index))
    }));
    LazyLog::ready(unread).await;
    let mut response = DeleteRecordsResponse::default();
    let mut moved = Vec::new();
    for (ti, topic) in request.topics.iter().enumerate() {
        let mut t = delete_records_response::DeleteRecordsTopicResult::default();
        t.name = topic.name.clone();
        let found = broker.existing_topic(&topic.name);
        for (pi, partition) in topic.partitions.iter().enumerate() {
            let mut p = delete_records_response::DeleteRecordsPartitionResult::default();
            p.partition_index = partition.partition_index;
            p.low_watermark = -1;
            let index = usize::try_from(partition.partition_index).ok();
            let log = found
                .as_ref()
                .zip(index)
                .and_then(|(t, i)| t.partitions.get(i));
            let raised = match (&found, log) {
                (Some(topic), Some(_)) if !topic.config.deletes() => {
                    Err(ResponseError::PolicyViolation)
                }
                (Some(_), Some(log)) => {
                    let mut log = log.lock();
                    let offset = match partition.offset {
                        HIGH_WATERMARK => log.next(),
                        offset => offset,
                    };
                    match log.raise_start(offset) {
                        RaisedStart::Moved(start) => {
                            moved.push(Moved {
                                topic: Arc::clone(found.as_ref().expect("matched")),
                                index: index.expect("matched"),
                                at: (ti, pi),
                            });
                            Ok(start)
                        }
                        RaisedStart::Kept(start) => Ok(start),
                        RaisedStart::OutOfRange => Err(ResponseError::OffsetOutOfRange),
                        RaisedStart::Failed => Err(ResponseError::KafkaStorageError),
                    }
                }
                _ => Err(ResponseError::UnknownTopicOrPartition),
            };
            match raised {
                Ok(start) => p.low_watermark = start,
                Err(error) => p.error_code = error.code(),
            }
            t.partitions.push(p);
        }
        response.topics.push(t);
    }
    if broker.store.is_some() && !moved.is_empty() {
        for (at, saved) in save_starts(moved).await {
            if let Err(e) = saved {
                eprintln!("warning: cannot write a log start: {e}");
                let p = &mut response.topics[at.0].partitions[at.1];
                p.error_code = ResponseError::KafkaStorageError.code();
                p.low_watermark = -1;
            }
        }
    }
    response
}

/// Writes the moved starts to their files, on the blocking pool; each
/// answer's place with how its write went.
async fn save_starts(moved: Vec<Moved>) -> Vec<((usize, usize), std::io::Result<()>)> {
    let places: Vec<(usize, usize)> = moved.iter().map(|m| m.at).collect();
    let written = tokio::task::spawn_blocking(move || {
        moved
            .iter()
            .map(|m| m.topic.save_start(m.index))
            .collect::<Vec<_>>()
    })
    .await;
    match written {
        Ok(results) => places.into_iter().zip(results).collect(),
        Err(e) => places
            .into_iter()
            .map(|at| (at, Err(std::io::Error::other(e.to_string()))))
            .collect(),
    }
}
