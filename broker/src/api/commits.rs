//! The committed offsets' requests: OffsetCommit, OffsetFetch (v8+: of
//! several groups), OffsetDelete; and [`keep`], which writes what they
//! (and DeleteGroups) change to the offsets log and waits for its fsync.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::{
    offset_commit_response, offset_delete_response, offset_fetch_response, OffsetCommitRequest,
    OffsetCommitResponse, OffsetDeleteRequest, OffsetDeleteResponse, OffsetFetchRequest,
    OffsetFetchResponse, TopicName,
};
use kafka_protocol::ResponseError;
use purgatorio::{Completion, DelayedOperation};

use super::{str_bytes, RequestError};
use crate::broker::Broker;
use crate::coordinator::{Committed, Membership, OffsetRemoval};
use crate::log::TopicPartition;
use crate::offsets::{GroupCommit, MAX_METADATA};
use crate::store::OffsetsKey;

/// How long a change waits for the offsets log's fsync (Kafka's
/// `offsets.commit.timeout.ms`); then it is REQUEST_TIMED_OUT.
const COMMIT_TIMEOUT: Duration = Duration::from_secs(5);

/// A change of the committed offsets waiting until the offsets log is
/// fsynced past its records.
pub struct DelayedCommit {
    /// The broker, whose store says what is durable.
    broker: Arc<Broker>,
    /// The records the fsync must cover.
    records: u64,
}

impl DelayedOperation for DelayedCommit {
    fn delay(&self) -> Duration {
        COMMIT_TIMEOUT
    }
    fn try_complete(&mut self) -> bool {
        self.broker
            .store
            .as_ref()
            .is_none_or(|store| store.commits_durable(self.records))
    }
    fn on_complete(&mut self, _: Completion) {}
}

/// Makes `change` in memory and writes the records it returns to the
/// offsets log (with `--data-dir`) in one critical section of the log, so
/// that memory follows the log's order (a commit is seen from then on, as
/// a restart would replay it), then waits for the fsync covering them.
/// Returns what the change returned and whether its records are on disk
/// (always, without `--data-dir`, or with nothing to write).
///
/// # Errors
///
/// [`RequestError::ShuttingDown`] if the commit purgatory refuses the wait.
pub async fn keep<T>(
    broker: &Arc<Broker>,
    change: impl FnOnce() -> (Vec<GroupCommit>, T),
) -> Result<(T, bool), RequestError> {
    let Some(store) = broker.store.as_ref() else {
        return Ok((change().1, true));
    };
    let (written, changed) = store.commit_with(change);
    let records = match written {
        Ok(Some(records)) => records,
        Ok(None) => return Ok((changed, true)),
        Err(_) => return Ok((changed, false)),
    };
    let wait = DelayedCommit {
        broker: Arc::clone(broker),
        records,
    };
    let parked = broker
        .commits
        .park(wait, [OffsetsKey])
        .map_err(|_| RequestError::ShuttingDown)?;
    Ok((changed, parked.await == Some(Completion::Satisfied)))
}

/// Whether `partition` of `topic` exists.
fn exists(broker: &Broker, topic: &str, partition: i32) -> bool {
    let partitions = broker
        .existing_topic(topic)
        .map_or(0, |t| t.partitions.len());
    usize::try_from(partition).is_ok_and(|i| i < partitions)
}

/// OffsetCommit: every partition's offset, leader epoch and metadata
/// string is kept for the group (with `--data-dir`, answered once the
/// offsets log is fsynced). Who may commit is Kafka's rule
/// ([`check_commit`](crate::coordinator::Coordinator::check_commit): a
/// commit of no member to a group with members is UNKNOWN_MEMBER_ID); a
/// partition that does not exist is UNKNOWN_TOPIC_OR_PARTITION, a
/// metadata string over 4 KiB OFFSET_METADATA_TOO_LARGE.
///
/// # Errors
///
/// [`RequestError::ShuttingDown`] if the commit purgatory refuses the wait.
pub async fn offset_commit(
    broker: &Arc<Broker>,
    request: OffsetCommitRequest,
) -> Result<OffsetCommitResponse, RequestError> {
    let mut response = OffsetCommitResponse::default();
    let member = Membership {
        member_id: &request.member_id,
        instance: request.group_instance_id.as_deref(),
        generation: request.generation_id_or_member_epoch,
    };
    let refused = broker.groups.check_commit(&request.group_id, member).err();
    let mut kept = Vec::new();
    for topic in &request.topics {
        let mut t = offset_commit_response::OffsetCommitResponseTopic::default();
        t.name = topic.name.clone();
        for p in &topic.partitions {
            let mut pr = offset_commit_response::OffsetCommitResponsePartition::default();
            pr.partition_index = p.partition_index;
            let metadata = p.committed_metadata.as_ref().map(|m| m.to_string());
            if let Some(error) = refused {
                pr.error_code = error.code();
            } else if !exists(broker, &topic.name, p.partition_index) {
                pr.error_code = ResponseError::UnknownTopicOrPartition.code();
            } else if metadata.as_ref().is_some_and(|m| m.len() > MAX_METADATA) {
                pr.error_code = ResponseError::OffsetMetadataTooLarge.code();
            } else {
                kept.push(GroupCommit::new(
                    &request.group_id,
                    Committed {
                        topic: topic.name.to_string(),
                        partition: p.partition_index,
                        offset: p.committed_offset,
                        metadata,
                        leader_epoch: p.committed_leader_epoch,
                    },
                ));
            }
            t.partitions.push(pr);
        }
        response.topics.push(t);
    }
    let ((), durable) = keep(broker, || {
        for commit in &kept {
            broker
                .groups
                .commit(&commit.group, commit.committed.clone());
        }
        (kept, ())
    })
    .await?;
    if !durable {
        for p in response.topics.iter_mut().flat_map(|t| &mut t.partitions) {
            if p.error_code == 0 {
                p.error_code = ResponseError::RequestTimedOut.code();
            }
        }
    }
    Ok(response)
}

/// The commits of `group` asked for (`None`: all of them), by topic; a
/// partition without one is offset -1.
fn committed_of(
    broker: &Broker,
    group: &str,
    asked: Option<impl Iterator<Item = (String, Vec<i32>)>>,
) -> BTreeMap<String, Vec<Committed>> {
    let mut by_topic: BTreeMap<String, Vec<Committed>> = BTreeMap::new();
    match asked {
        Some(topics) => {
            for (name, partitions) in topics {
                for partition in partitions {
                    let at = TopicPartition::new(name.clone(), partition);
                    let committed = broker
                        .groups
                        .committed(group, &at)
                        .unwrap_or_else(|| Committed::none(&name, partition));
                    by_topic.entry(name.clone()).or_default().push(committed);
                }
            }
        }
        None => {
            for committed in broker.groups.all_committed(group) {
                by_topic
                    .entry(committed.topic.clone())
                    .or_default()
                    .push(committed);
            }
        }
    }
    by_topic
}

/// OffsetFetch: the group's committed offsets (-1 where none), leader
/// epochs and metadata strings, of the partitions asked for or of all; in
/// v8+ of each group asked for.
pub fn offset_fetch(
    broker: &Broker,
    version: i16,
    request: &OffsetFetchRequest,
) -> OffsetFetchResponse {
    let mut response = OffsetFetchResponse::default();
    if version < 8 {
        let asked = request.topics.as_ref().map(|topics| {
            topics
                .iter()
                .map(|t| (t.name.to_string(), t.partition_indexes.clone()))
        });
        for (name, offsets) in committed_of(broker, &request.group_id, asked) {
            let mut t = offset_fetch_response::OffsetFetchResponseTopic::default();
            t.name = TopicName(str_bytes(&name));
            for committed in offsets {
                let mut p = offset_fetch_response::OffsetFetchResponsePartition::default();
                p.partition_index = committed.partition;
                p.committed_offset = committed.offset;
                p.committed_leader_epoch = committed.leader_epoch;
                p.metadata = Some(str_bytes(committed.metadata.as_deref().unwrap_or("")));
                t.partitions.push(p);
            }
            response.topics.push(t);
        }
        return response;
    }
    for group in &request.groups {
        let asked = group.topics.as_ref().map(|topics| {
            topics
                .iter()
                .map(|t| (t.name.to_string(), t.partition_indexes.clone()))
        });
        let mut g = offset_fetch_response::OffsetFetchResponseGroup::default();
        g.group_id = group.group_id.clone();
        for (name, offsets) in committed_of(broker, &group.group_id, asked) {
            let mut t = offset_fetch_response::OffsetFetchResponseTopics::default();
            t.name = TopicName(str_bytes(&name));
            for committed in offsets {
                let mut p = offset_fetch_response::OffsetFetchResponsePartitions::default();
                p.partition_index = committed.partition;
                p.committed_offset = committed.offset;
                p.committed_leader_epoch = committed.leader_epoch;
                p.metadata = Some(str_bytes(committed.metadata.as_deref().unwrap_or("")));
                t.partitions.push(p);
            }
            g.topics.push(t);
        }
        response.groups.push(g);
    }
    response
}

/// OffsetDelete: the group's commits of the partitions named go, as
/// Kafka deletes them: all of them in an empty group; in a consumer group
/// with members, those of topics no member subscribes to (the others
/// GROUP_SUBSCRIBED_TO_TOPIC); each partition named is answered in its
/// place, one named twice too. A partition that does not exist is
/// UNKNOWN_TOPIC_OR_PARTITION; an empty group id is INVALID_GROUP_ID, a
/// group that does not exist GROUP_ID_NOT_FOUND, one with members whose
/// subscriptions cannot be read (no consumer group, or metadata that does
/// not parse) NON_EMPTY_GROUP (for the whole answer). With `--data-dir`,
/// answered once the deletions are on disk.
///
/// # Errors
///
/// [`RequestError::ShuttingDown`] if the commit purgatory refuses the wait.
pub async fn offset_delete(
    broker: &Arc<Broker>,
    request: &OffsetDeleteRequest,
) -> Result<OffsetDeleteResponse, RequestError> {
    let mut response = OffsetDeleteResponse::default();
    // Each partition named, in order (`None`: it does not exist); one may
    // be named twice, and each is answered from its own place.
    let named: Vec<Option<TopicPartition>> = request
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| {
                let at = TopicPartition::new(t.name.as_str(), p.partition_index);
                exists(broker, &at.topic, at.partition).then_some(at)
            })
        })
        .collect();
    let existing: Vec<TopicPartition> = named.iter().flatten().cloned().collect();
    let (removed, durable) = keep(broker, || {
        match broker.groups.delete_offsets(&request.group_id, &existing) {
            Ok(removed) => {
                let tombstones = existing
                    .iter()
                    .zip(&removed)
                    .filter(|(_, &removal)| removal == OffsetRemoval::Deleted)
                    .map(|(at, _)| GroupCommit::offset_deleted(&request.group_id, at))
                    .collect();
                (tombstones, Ok(removed))
            }
            Err(error) => (Vec::new(), Err(error)),
        }
    })
    .await?;
    let mut removed = match removed {
        Ok(removed) => removed.into_iter(),
        Err(error) => {
            response.error_code = error.code();
            return Ok(response);
        }
    };
    let mut named = named.into_iter();
    for topic in &request.topics {
        let mut t = offset_delete_response::OffsetDeleteResponseTopic::default();
        t.name = topic.name.clone();
        for p in &topic.partitions {
            let mut pr = offset_delete_response::OffsetDeleteResponsePartition::default();
            pr.partition_index = p.partition_index;
            pr.error_code = match named.next().flatten().and_then(|_| removed.next()) {
                None => ResponseError::UnknownTopicOrPartition.code(),
                Some(OffsetRemoval::Subscribed) => ResponseError::GroupSubscribedToTopic.code(),
                Some(OffsetRemoval::Deleted) if !durable => ResponseError::RequestTimedOut.code(),
                Some(_) => 0,
            };
            t.partitions.push(pr);
        }
        response.topics.push(t);
    }
    Ok(response)
}
