//! The group requests; this broker coordinates every group
//! ([`crate::coordinator`]). JoinGroup and SyncGroup wait in the group
//! purgatory; dropped (the client went away), the wait is cancelled, so a
//! client cannot leave waits behind for as long as the rebalance timeout
//! it chose.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::{
    describe_groups_response, join_group_response, leave_group_response, list_groups_response,
    offset_commit_response, offset_fetch_response, DescribeGroupsRequest, DescribeGroupsResponse,
    FindCoordinatorResponse, HeartbeatRequest, HeartbeatResponse, JoinGroupRequest,
    JoinGroupResponse, LeaveGroupRequest, LeaveGroupResponse, ListGroupsRequest,
    ListGroupsResponse, OffsetCommitRequest, OffsetCommitResponse, OffsetFetchRequest,
    OffsetFetchResponse, SyncGroupRequest, SyncGroupResponse, TopicName,
};
use kafka_protocol::ResponseError;

use super::metadata::NODE;
use purgatorio::{Completion, DelayedOperation};

use super::{code, str_bytes, Client, RequestError};
use crate::broker::Broker;
use crate::coordinator::{
    Committed, Join, Joined, Joining, MemberMetadata, Membership, Protocol, Syncing,
};
use crate::log::TopicPartition;
use crate::offsets::{GroupCommit, MAX_METADATA};
use crate::store::OffsetsKey;

/// FindCoordinator: this broker (served up to v3, where the coordinator is
/// in the top-level fields).
pub fn find_coordinator(broker: &Broker) -> FindCoordinatorResponse {
    let mut response = FindCoordinatorResponse::default();
    response.node_id = NODE;
    response.host = str_bytes(&broker.addr.ip().to_string());
    response.port = i32::from(broker.addr.port());
    response
}

/// JoinGroup: answered once the rebalance completes (every known member
/// rejoined, or the rebalance timeout passed); in `version` 4+, a first
/// join (empty member id) is answered at once MEMBER_ID_REQUIRED with the
/// id to join with, as Kafka answers it.
pub async fn join_group(
    broker: &Broker,
    client: &Client,
    version: i16,
    request: JoinGroupRequest,
) -> JoinGroupResponse {
    let session = Duration::from_millis(u64::try_from(request.session_timeout_ms).unwrap_or(0));
    // v0 has no rebalance timeout: the session timeout serves.
    let rebalance = match u64::try_from(request.rebalance_timeout_ms) {
        Ok(ms) if ms > 0 => Duration::from_millis(ms),
        _ => session,
    };
    let join = Join {
        group_id: request.group_id.to_string(),
        member_id: request.member_id.to_string(),
        group_instance_id: request.group_instance_id.as_ref().map(|i| i.to_string()),
        require_member_id: version >= 4,
        protocol_type: request.protocol_type.to_string(),
        protocols: request
            .protocols
            .iter()
            .map(|p| Protocol {
                name: p.name.to_string(),
                metadata: p.metadata.clone(),
            })
            .collect(),
        session,
        rebalance,
        client_id: client.id.clone(),
        client_host: client.host.clone(),
    };
    let group_id = join.group_id.clone();
    let instance = join.group_instance_id.clone();
    match broker.groups.join(join) {
        Ok(Joining::Done(joined)) => join_response(&joined),
        Ok(Joining::Waiting { joined, parked }) => {
            // Dropped (the client went away), the wait is cancelled: the
            // member stays until it rejoins or its session ends, and the
            // rebalance completes without this wait.
            let completion = parked.cancel_on_drop().await;
            join_response(&broker.groups.joined(
                &group_id,
                &joined,
                instance.as_deref(),
                completion,
            ))
        }
        Err(error) => {
            let mut response = JoinGroupResponse::default();
            response.error_code = error.code();
            response.generation_id = -1;
            response.member_id = request.member_id;
            response
        }
    }
}

/// The JoinGroup answer of `joined`.
fn join_response(joined: &Joined) -> JoinGroupResponse {
    let mut r = JoinGroupResponse::default();
    r.error_code = code(joined.error);
    r.generation_id = joined.generation;
    r.protocol_name = Some(str_bytes(&joined.protocol));
    r.leader = str_bytes(&joined.leader);
    r.member_id = str_bytes(&joined.member_id);
    r.members = joined
        .members
        .iter()
        .map(|member| {
            let mut m = join_group_response::JoinGroupResponseMember::default();
            m.member_id = str_bytes(&member.member_id);
            m.group_instance_id = member.group_instance_id.as_deref().map(str_bytes);
            m.metadata = member.metadata.clone();
            m
        })
        .collect();
    r
}

/// SyncGroup: the leader's assignments are stored; a follower's answer
/// waits for them.
pub async fn sync_group(broker: &Broker, request: SyncGroupRequest) -> SyncGroupResponse {
    let assignments = request
        .assignments
        .iter()
        .map(|a| MemberMetadata {
            member_id: a.member_id.to_string(),
            group_instance_id: None,
            metadata: a.assignment.clone(),
        })
        .collect();
    let group = request.group_id.as_str();
    let member = Membership {
        member_id: &request.member_id,
        instance: request.group_instance_id.as_deref(),
        generation: request.generation_id,
    };
    let assigned = match broker.groups.sync(group, member, assignments) {
        Ok(Syncing::Assigned(assignment)) => Ok(assignment),
        Ok(Syncing::Waiting(parked)) => {
            let _ = parked.cancel_on_drop().await;
            broker.groups.synced(group, member)
        }
        Err(error) => Err(error),
    };
    let mut response = SyncGroupResponse::default();
    match assigned {
        Ok(assignment) => response.assignment = assignment,
        Err(error) => response.error_code = error.code(),
    }
    response
}

/// Heartbeat: resets the member's session.
pub fn heartbeat(broker: &Broker, request: &HeartbeatRequest) -> HeartbeatResponse {
    let mut response = HeartbeatResponse::default();
    let member = Membership {
        member_id: &request.member_id,
        instance: request.group_instance_id.as_deref(),
        generation: request.generation_id,
    };
    response.error_code = code(broker.groups.heartbeat(&request.group_id, member).err());
    response
}

/// LeaveGroup: the member goes (v0-2), or each member named, by member id
/// or by `group.instance.id` (v3+, each with its own error); the others
/// rebalance.
pub fn leave_group(
    broker: &Broker,
    version: i16,
    request: &LeaveGroupRequest,
) -> LeaveGroupResponse {
    let mut response = LeaveGroupResponse::default();
    let group = request.group_id.as_str();
    if version < 3 {
        response.error_code = code(broker.groups.leave(group, &request.member_id, None).err());
        return response;
    }
    response.members = request
        .members
        .iter()
        .map(|m| {
            let left = broker
                .groups
                .leave(group, &m.member_id, m.group_instance_id.as_deref());
            let mut member = leave_group_response::MemberResponse::default();
            member.member_id = m.member_id.clone();
            member.group_instance_id = m.group_instance_id.clone();
            member.error_code = code(left.err());
            member
        })
        .collect();
    response
}

/// How long an OffsetCommit waits for the offsets log's fsync (Kafka's
/// `offsets.commit.timeout.ms`); then it is REQUEST_TIMED_OUT.
const COMMIT_TIMEOUT: Duration = Duration::from_secs(5);

/// An OffsetCommit waiting until the offsets log is fsynced past its
/// records.
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

/// OffsetCommit: every partition's offset and metadata string is kept for
/// the group (with `--data-dir`, answered once the offsets log is fsynced);
/// a partition that does not exist is UNKNOWN_TOPIC_OR_PARTITION, a
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
    // v7+: a static member's commit under an id its instance no longer
    // has is refused (KIP-345), every partition with the error.
    let fenced = request.group_instance_id.as_deref().and_then(|instance| {
        broker
            .groups
            .check_instance(&request.group_id, &request.member_id, instance)
            .err()
    });
    let mut kept = Vec::new();
    for topic in &request.topics {
        let mut t = offset_commit_response::OffsetCommitResponseTopic::default();
        t.name = topic.name.clone();
        let partitions = broker
            .existing_topic(&topic.name)
            .map_or(0, |t| t.partitions.len());
        for p in &topic.partitions {
            let mut pr = offset_commit_response::OffsetCommitResponsePartition::default();
            pr.partition_index = p.partition_index;
            let metadata = p.committed_metadata.as_ref().map(|m| m.to_string());
            if let Some(error) = fenced {
                pr.error_code = error.code();
            } else if !usize::try_from(p.partition_index).is_ok_and(|i| i < partitions) {
                pr.error_code = ResponseError::UnknownTopicOrPartition.code();
            } else if metadata.as_ref().is_some_and(|m| m.len() > MAX_METADATA) {
                pr.error_code = ResponseError::OffsetMetadataTooLarge.code();
            } else {
                kept.push(GroupCommit {
                    group: request.group_id.to_string(),
                    committed: Committed {
                        topic: topic.name.to_string(),
                        partition: p.partition_index,
                        offset: p.committed_offset,
                        metadata,
                    },
                });
            }
            t.partitions.push(pr);
        }
        response.topics.push(t);
    }
    let durable = match &broker.store {
        Some(store) if !kept.is_empty() => match store.commit(&kept) {
            Ok(records) => {
                let wait = DelayedCommit {
                    broker: Arc::clone(broker),
                    records,
                };
                let parked = broker
                    .commits
                    .park(wait, [OffsetsKey])
                    .map_err(|_| RequestError::ShuttingDown)?;
                parked.await == Some(Completion::Satisfied)
            }
            Err(_) => false,
        },
        _ => true,
    };
    for commit in kept {
        broker.groups.commit(&commit.group, commit.committed);
    }
    if !durable {
        for t in &mut response.topics {
            for p in &mut t.partitions {
                if p.error_code == 0 {
                    p.error_code = ResponseError::RequestTimedOut.code();
                }
            }
        }
    }
    Ok(response)
}

/// OffsetFetch: the group's committed offsets (-1 where none) and their
/// metadata strings, of the partitions asked for or of all.
pub fn offset_fetch(broker: &Broker, request: &OffsetFetchRequest) -> OffsetFetchResponse {
    let mut response = OffsetFetchResponse::default();
    let mut by_topic: BTreeMap<String, Vec<Committed>> = BTreeMap::new();
    match &request.topics {
        Some(topics) => {
            for t in topics {
                let name = t.name.to_string();
                for &partition in &t.partition_indexes {
                    let at = TopicPartition::new(name.clone(), partition);
                    let committed =
                        broker
                            .groups
                            .committed(&request.group_id, &at)
                            .unwrap_or(Committed {
                                topic: name.clone(),
                                partition,
                                offset: -1,
                                metadata: None,
                            });
                    by_topic.entry(name.clone()).or_default().push(committed);
                }
            }
        }
        None => {
            for committed in broker.groups.all_committed(&request.group_id) {
                by_topic
                    .entry(committed.topic.clone())
                    .or_default()
                    .push(committed);
            }
        }
    }
    for (name, offsets) in by_topic {
        let mut t = offset_fetch_response::OffsetFetchResponseTopic::default();
        t.name = TopicName(str_bytes(&name));
        for committed in offsets {
            let mut pr = offset_fetch_response::OffsetFetchResponsePartition::default();
            pr.partition_index = committed.partition;
            pr.committed_offset = committed.offset;
            pr.metadata = Some(str_bytes(committed.metadata.as_deref().unwrap_or("")));
            t.partitions.push(pr);
        }
        response.topics.push(t);
    }
    response
}

/// DescribeGroups' answer when authorized operations were not asked for.
const NO_AUTHORIZED_OPERATIONS: i32 = i32::MIN;

/// ListGroups: every group with its protocol type and (v4+) state,
/// filtered by the states asked for.
pub fn list_groups(broker: &Broker, request: &ListGroupsRequest) -> ListGroupsResponse {
    let mut response = ListGroupsResponse::default();
    response.groups = broker
        .groups
        .list()
        .into_iter()
        .filter(|g| {
            request.states_filter.is_empty()
                || request.states_filter.iter().any(|s| s.as_str() == g.state)
        })
        .map(|g| {
            let mut listed = list_groups_response::ListedGroup::default();
            listed.group_id = str_bytes(&g.group_id).into();
            listed.protocol_type = str_bytes(&g.protocol_type);
            listed.group_state = str_bytes(g.state);
            listed
        })
        .collect();
    response
}

/// DescribeGroups: each group's state, protocol and members (client id,
/// host, metadata, assignment); a group that does not exist is "Dead".
pub fn describe_groups(broker: &Broker, request: &DescribeGroupsRequest) -> DescribeGroupsResponse {
    let mut response = DescribeGroupsResponse::default();
    for id in &request.groups {
        let mut described = describe_groups_response::DescribedGroup::default();
        described.group_id = id.clone();
        described.authorized_operations = if request.include_authorized_operations {
            crate::acls::authorized(crate::acls::resource::GROUP)
        } else {
            NO_AUTHORIZED_OPERATIONS
        };
        match broker.groups.describe(id) {
            Some(group) => {
                described.group_state = str_bytes(group.state);
                described.protocol_type = str_bytes(&group.protocol_type);
                described.protocol_data = str_bytes(&group.protocol);
                described.members = group
                    .members
                    .into_iter()
                    .map(|m| {
                        let mut member = describe_groups_response::DescribedGroupMember::default();
                        member.member_id = str_bytes(&m.member_id);
                        member.group_instance_id = m.group_instance_id.as_deref().map(str_bytes);
                        member.client_id = str_bytes(&m.client_id);
                        member.client_host = str_bytes(&m.client_host);
                        member.member_metadata = m.metadata;
                        member.member_assignment = m.assignment;
                        member
                    })
                    .collect();
            }
            None => described.group_state = str_bytes("Dead"),
        }
        response.groups.push(described);
    }
    response
}
