//! Fetch and ListOffsets: reading the logs. A fetch without `min_bytes`
//! waits in the fetch purgatory, keyed by its partitions, until a produce
//! completes it or `max_wait_ms` passes (never earlier); a client that goes
//! away cancels it.

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::{
    fetch_response, list_offsets_response, FetchRequest, FetchResponse, ListOffsetsRequest,
    ListOffsetsResponse,
};
use kafka_protocol::ResponseError;
use purgatorio::{Completion, DelayedOperation};

use super::RequestError;
use crate::broker::Broker;
use crate::log::{FileRange, First, Log, Position, Records, Timed, TopicPartition, Unreadable};
use crate::wire::stream::Marker;

/// ListOffsets' timestamp asking for the high watermark.
const LATEST: i64 = -1;

/// ListOffsets' timestamp asking for the log start.
const EARLIEST: i64 = -2;

/// ListOffsets' timestamp asking for the record with the largest
/// timestamp (v7+).
const MAX_TIMESTAMP: i64 = -3;

/// A fetch waiting until its partitions hold `min_bytes` from its offsets.
pub struct DelayedFetch {
    /// The broker, whose logs it reads.
    broker: Arc<Broker>,
    /// The partitions and offsets it reads from.
    wants: Vec<Want>,
    /// The request's `min_bytes` (at least 1).
    min_bytes: usize,
    /// The request's `max_wait_ms`.
    max_wait: Duration,
}

/// A partition a parked fetch reads from.
struct Want {
    /// The partition and the offset.
    position: Position,
    /// Where the batch holding the offset starts in the partition's bytes,
    /// once the offset is in the log ([`Log::position_of`]).
    from: Option<u64>,
}

impl Want {
    /// Bytes `log` holds for it. With `min_bytes` 1, any record past its
    /// offset is enough and no file is read; else the position of its
    /// batch is looked up once (an index search), and every check after
    /// that, one per produce to the partition, is a subtraction.
    fn available(offset: i64, from: &mut Option<u64>, log: &Log, min_bytes: usize) -> u64 {
        if offset < log.start() || offset > log.next() {
            return 0;
        }
        if min_bytes <= 1 {
            return u64::from(offset < log.next());
        }
        let from = match *from {
            Some(from) => from,
            None => match log.position_of(offset) {
                Ok(Some(position)) => *from.insert(position),
                _ => return 0,
            },
        };
        log.end_position().saturating_sub(from)
    }
}

impl DelayedFetch {
    /// Whether `min_bytes` are available to it now.
    fn enough(&mut self) -> bool {
        let mut available = 0u64;
        let (broker, min_bytes) = (&self.broker, self.min_bytes);
        self.wants.iter_mut().any(|Want { position, from }| {
            let at = &position.at;
            available += broker
                .with_log(&at.topic, at.partition, |log| {
                    Want::available(position.offset, from, log, min_bytes)
                })
                .unwrap_or(0);
            available >= min_bytes as u64
        })
    }
}

impl DelayedOperation for DelayedFetch {
    fn delay(&self) -> Duration {
        self.max_wait
    }
    fn try_complete(&mut self) -> bool {
        self.enough()
    }
    // The connection's task answers once the parked fetch resolves.
    fn on_complete(&mut self, _: Completion) {}
}

/// Fetch: waits (unless `max_wait_ms` is 0) until `min_bytes` are there or
/// `max_wait_ms` passes, then answers with what is there: the response,
/// and the file ranges to stream in the places of its markers.
///
/// # Errors
///
/// [`RequestError::ShuttingDown`] if the fetch purgatory refuses the wait.
pub async fn fetch(
    broker: &Arc<Broker>,
    request: FetchRequest,
) -> Result<(FetchResponse, Vec<FileRange>), RequestError> {
    let wants: Vec<Position> = request
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| Position {
                at: TopicPartition::new(t.topic.as_str(), p.partition),
                offset: p.fetch_offset,
            })
        })
        .collect();
    let unread = broker.unread(wants.iter().map(|w| (w.at.topic.as_str(), w.at.partition)));
    crate::log::LazyLog::ready(unread).await;
    if !wants.is_empty() && request.max_wait_ms > 0 {
        let keys: Vec<TopicPartition> = wants.iter().map(|w| w.at.clone()).collect();
        let wait = DelayedFetch {
            broker: Arc::clone(broker),
            wants: wants
                .into_iter()
                .map(|position| Want {
                    position,
                    from: None,
                })
                .collect(),
            min_bytes: usize::try_from(request.min_bytes).unwrap_or(0).max(1),
            max_wait: Duration::from_millis(u64::try_from(request.max_wait_ms).unwrap_or(0)),
        };
        // Dropped (the client went away), it cancels the wait.
        let parked = broker
            .fetches
            .park(wait, &keys)
            .map_err(|_| RequestError::ShuttingDown)?
            .cancel_on_drop();
        let _ = parked.await;
    }
    Ok(response(broker, &request))
}

/// The answer to a fetch: each partition's batches from its offset within
/// `partition_max_bytes` and what is left of `max_bytes` (at most
/// `--fetch-max-bytes`). Only the first
/// batch of the whole answer may exceed them (as Kafka does, so that a
/// batch larger than the limits is still delivered). Large records are
/// left in their files: a [`Marker`] stands in the response for each, and
/// the ranges come beside it.
fn response(broker: &Broker, request: &FetchRequest) -> (FetchResponse, Vec<FileRange>) {
    let mut response = FetchResponse::default();
    let mut streamed = Vec::new();
    // The broker's own bound (Kafka's fetch.max.bytes): a small request
    // cannot make it copy the whole log into one answer.
    let mut budget = usize::try_from(request.max_bytes)
        .unwrap_or(0)
        .min(broker.fetch_max_bytes);
    // Whether the answer holds a batch yet.
    let answered = &mut false;
    for topic in &request.topics {
        let mut t = fetch_response::FetchableTopicResponse::default();
        t.topic = topic.topic.clone();
        for partition in &topic.partitions {
            let mut p = fetch_response::PartitionData::default();
            p.partition_index = partition.partition;
            let limit = usize::try_from(partition.partition_max_bytes)
                .unwrap_or(0)
                .min(budget);
            // Where to read, under the partition's lock; the read after.
            let found = broker.with_log(&topic.topic, partition.partition, |log| {
                p.high_watermark = log.next();
                p.last_stable_offset = log.next();
                p.log_start_offset = log.start();
                log.slice(partition.fetch_offset)
            });
            // Only the answer's first batch may pass the limit, up to its
            // segment's end: one past --message-max-bytes (stored under a
            // larger limit) is served once its CRC is checked, or its
            // consumers would loop on it; a corrupt length is an error, not
            // a buffer of that size.
            let first = if *answered {
                First::Within
            } else {
                First::Whole {
                    max: broker.message_max_bytes,
                }
            };
            let read = match found.map(|slice| slice?.serve(limit, first)) {
                None => Err(ResponseError::UnknownTopicOrPartition),
                Some(Ok(records)) => Ok(records),
                Some(Err(Unreadable::OutOfRange)) => Err(ResponseError::OffsetOutOfRange),
                Some(Err(e)) => {
                    eprintln!(
                        "warning: cannot read {}-{}: {e}",
                        topic.topic.as_str(),
                        partition.partition
                    );
                    Err(match e {
                        Unreadable::Corrupt { .. } => ResponseError::CorruptMessage,
                        _ => ResponseError::KafkaStorageError,
                    })
                }
            };
            match read {
                Ok(records) => {
                    budget = budget.saturating_sub(records.len() as usize);
                    *answered |= !records.is_empty();
                    p.records = Some(match records {
                        Records::Inline(bytes) => bytes,
                        Records::File(range) => {
                            streamed.push(range);
                            Marker::new(streamed.len() - 1).bytes()
                        }
                    });
                }
                Err(error) => p.error_code = error.code(),
            }
            t.partitions.push(p);
        }
        response.responses.push(t);
    }
    (response, streamed)
}

/// ListOffsets: latest (-1) is the high watermark, earliest (-2) the log
/// start (which retention moves), max-timestamp (-3) the record with the
/// largest timestamp, and a timestamp the first record at or after it
/// (offset -1 if none), found through the segments' time indexes. A topic
/// that does not exist is UNKNOWN_TOPIC_OR_PARTITION (never created).
pub async fn list_offsets(broker: &Broker, request: &ListOffsetsRequest) -> ListOffsetsResponse {
    let unread = broker.unread(request.topics.iter().flat_map(|t| {
        t.partitions
            .iter()
            .map(|p| (t.name.as_str(), p.partition_index))
    }));
    crate::log::LazyLog::ready(unread).await;
    let mut response = ListOffsetsResponse::default();
    for topic in &request.topics {
        let mut t = list_offsets_response::ListOffsetsTopicResponse::default();
        t.name = topic.name.clone();
        for partition in &topic.partitions {
            let mut p = list_offsets_response::ListOffsetsPartitionResponse::default();
            p.partition_index = partition.partition_index;
            let found = broker.with_log(&topic.name, partition.partition_index, |log| {
                let timed = match partition.timestamp {
                    LATEST => Ok(Some(Timed {
                        offset: log.next(),
                        timestamp: -1,
                    })),
                    EARLIEST => Ok(Some(Timed {
                        offset: log.start(),
                        timestamp: -1,
                    })),
                    MAX_TIMESTAMP => log.offset_of_max_time(),
                    at => log.offset_for_time(at),
                };
                timed.map(|t| {
                    t.unwrap_or(Timed {
                        offset: -1,
                        timestamp: -1,
                    })
                })
            });
            match found {
                Some(Ok(timed)) => {
                    p.offset = timed.offset;
                    p.timestamp = timed.timestamp;
                }
                failed => {
                    let error = match failed {
                        None => ResponseError::UnknownTopicOrPartition,
                        _ => ResponseError::KafkaStorageError,
                    };
                    p.error_code = error.code();
                    p.offset = -1;
                    p.timestamp = -1;
                }
            }
            t.partitions.push(p);
        }
        response.topics.push(t);
    }
    response
}
