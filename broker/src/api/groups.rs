//! The group requests; this broker coordinates every group
//! ([`crate::coordinator`]). JoinGroup and SyncGroup wait in the group
//! purgatory; dropped (the client went away), the wait is cancelled, so a
//! client cannot leave waits behind for as long as the rebalance timeout
//! it chose.

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::{
    delete_groups_response, describe_groups_response, join_group_response, leave_group_response,
    list_groups_response, DeleteGroupsRequest, DeleteGroupsResponse, DescribeGroupsRequest,
    DescribeGroupsResponse, FindCoordinatorResponse, HeartbeatRequest, HeartbeatResponse,
    JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest, LeaveGroupResponse, ListGroupsRequest,
    ListGroupsResponse, SyncGroupRequest, SyncGroupResponse,
};
use kafka_protocol::ResponseError;

use super::metadata::NODE;

use super::{code, commits, str_bytes, Client, RequestError};
use crate::broker::Broker;
use crate::coordinator::{Join, Joined, Joining, MemberMetadata, Membership, Protocol, Syncing};
use crate::offsets::GroupCommit;

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

/// DeleteGroups: each empty group goes with its committed offsets (with
/// `--data-dir`, answered once that is on disk); one with members is
/// NON_EMPTY_GROUP, one that does not exist GROUP_ID_NOT_FOUND.
///
/// # Errors
///
/// [`RequestError::ShuttingDown`] if the commit purgatory refuses the wait.
pub async fn delete_groups(
    broker: &Arc<Broker>,
    request: &DeleteGroupsRequest,
) -> Result<DeleteGroupsResponse, RequestError> {
    let (deleted, durable) = commits::keep(broker, || {
        let deleted: Vec<Result<(), ResponseError>> = request
            .groups_names
            .iter()
            .map(|id| broker.groups.delete_group(id))
            .collect();
        let records = request
            .groups_names
            .iter()
            .zip(&deleted)
            .filter(|(_, d)| d.is_ok())
            .map(|(id, _)| GroupCommit::group_deleted(id))
            .collect();
        (records, deleted)
    })
    .await?;
    let mut response = DeleteGroupsResponse::default();
    response.results = request
        .groups_names
        .iter()
        .zip(deleted)
        .map(|(id, deleted)| {
            let mut result = delete_groups_response::DeletableGroupResult::default();
            result.group_id = id.clone();
            result.error_code = match deleted {
                Ok(()) if !durable => ResponseError::RequestTimedOut.code(),
                d => code(d.err()),
            };
            result
        })
        .collect();
    Ok(response)
}
