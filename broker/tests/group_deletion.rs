//! What an admin deletes of the groups, through raw requests: groups
//! (DeleteGroups) and committed offsets (OffsetDelete), with Kafka's
//! errors, kept across a restart; who may commit (OffsetCommit),
//! OffsetFetch v8 of several groups and the leader epochs of commits; and
//! a member's metadata that cannot be read.

use std::net::TcpStream;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    join_group_request, offset_commit_request, offset_delete_request, offset_fetch_request,
    sync_group_request, ApiKey, ConsumerProtocolSubscription, DeleteGroupsRequest,
    DeleteGroupsResponse, DescribeGroupsRequest, DescribeGroupsResponse, GroupId, JoinGroupRequest,
    JoinGroupResponse, OffsetCommitRequest, OffsetCommitResponse, OffsetDeleteRequest,
    OffsetDeleteResponse, OffsetFetchRequest, OffsetFetchResponse, SyncGroupRequest,
    SyncGroupResponse, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kafka_protocol::ResponseError;
use purgatorio_testkit::TempDir;

mod common;
use common::{ask, receive, send, Broker};

/// UNKNOWN_TOPIC_OR_PARTITION's code.
const UNKNOWN_PARTITION: i16 = 3;

/// `s` as a topic name.
fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

/// A consumer's subscription to `topics`, as its JoinGroup carries it.
fn subscription(topics: &[&str]) -> Bytes {
    let mut sub = ConsumerProtocolSubscription::default();
    sub.topics = topics
        .iter()
        .map(|t| StrBytes::from_string(t.to_string()))
        .collect();
    let mut out = BytesMut::new();
    out.put_i16(0);
    sub.encode(&mut out, 0).unwrap();
    out.freeze()
}

/// A member of `group` subscribed to `topics`, joined and synced alone:
/// (member id, generation).
fn member_of(s: &mut TcpStream, group: &str, topics: &[&str]) -> (String, i32) {
    member_with(s, group, subscription(topics))
}

/// A member of consumer group `group` with `metadata` (its subscription,
/// as it says), joined and synced alone: (member id, generation).
fn member_with(s: &mut TcpStream, group: &str, metadata: Bytes) -> (String, i32) {
    let mut protocol = join_group_request::JoinGroupRequestProtocol::default();
    protocol.name = StrBytes::from_static_str("range");
    protocol.metadata = metadata;
    let mut request = JoinGroupRequest::default();
    request.group_id = GroupId(StrBytes::from_string(group.to_string()));
    request.session_timeout_ms = 60_000;
    request.rebalance_timeout_ms = 60_000;
    request.protocol_type = StrBytes::from_static_str("consumer");
    request.protocols = vec![protocol];
    // v3: no MEMBER_ID_REQUIRED round.
    let mut answer = ask(s, ApiKey::JoinGroup, 3, request);
    let joined = JoinGroupResponse::decode(&mut answer, 3).unwrap();
    assert_eq!(joined.error_code, 0);
    let mut assignment = sync_group_request::SyncGroupRequestAssignment::default();
    assignment.member_id = joined.member_id.clone();
    let mut sync = SyncGroupRequest::default();
    sync.group_id = GroupId(StrBytes::from_string(group.to_string()));
    sync.generation_id = joined.generation_id;
    sync.member_id = joined.member_id.clone();
    sync.assignments = vec![assignment];
    let mut answer = ask(s, ApiKey::SyncGroup, 3, sync);
    assert_eq!(
        SyncGroupResponse::decode(&mut answer, 3)
            .unwrap()
            .error_code,
        0
    );
    (joined.member_id.to_string(), joined.generation_id)
}

/// An OffsetCommit v8 to `group` by `member` in `generation` (an admin's:
/// "" and -1) of (topic, offset) on partition 0, with leader epoch 3: each
/// partition's error.
fn commit(
    s: &mut TcpStream,
    group: &str,
    member: &str,
    generation: i32,
    offsets: &[(&str, i64)],
) -> Vec<i16> {
    commit_as(s, commit_request(group, member, generation, offsets))
}

/// An OffsetCommit v8 to `group` by `member` in `generation` of (topic,
/// offset) on partition 0, with leader epoch 3.
fn commit_request(
    group: &str,
    member: &str,
    generation: i32,
    offsets: &[(&str, i64)],
) -> OffsetCommitRequest {
    let mut request = OffsetCommitRequest::default();
    request.group_id = GroupId(StrBytes::from_string(group.to_string()));
    request.member_id = StrBytes::from_string(member.to_string());
    request.generation_id_or_member_epoch = generation;
    request.topics = offsets
        .iter()
        .map(|&(topic, offset)| {
            let mut p = offset_commit_request::OffsetCommitRequestPartition::default();
            p.committed_offset = offset;
            p.committed_leader_epoch = 3;
            let mut t = offset_commit_request::OffsetCommitRequestTopic::default();
            t.name = name(topic);
            t.partitions = vec![p];
            t
        })
        .collect();
    request
}

/// `request` sent as an OffsetCommit v8: each topic's error.
fn commit_as(s: &mut TcpStream, request: OffsetCommitRequest) -> Vec<i16> {
    let answer = ask(s, ApiKey::OffsetCommit, 8, request);
    commit_errors(answer)
}

/// The errors of an OffsetCommit v8's answer, one per topic.
fn commit_errors(mut answer: Bytes) -> Vec<i16> {
    OffsetCommitResponse::decode(&mut answer, 8)
        .unwrap()
        .topics
        .iter()
        .map(|t| t.partitions[0].error_code)
        .collect()
}

/// An OffsetFetch v8 of partition 0 of `topics` for each of `groups`:
/// per group, per topic, (offset, leader epoch).
fn committed(s: &mut TcpStream, groups: &[&str], topics: &[&str]) -> Vec<Vec<(i64, i32)>> {
    let mut request = OffsetFetchRequest::default();
    request.groups = groups
        .iter()
        .map(|group| {
            let mut g = offset_fetch_request::OffsetFetchRequestGroup::default();
            g.group_id = GroupId(StrBytes::from_string(group.to_string()));
            g.topics = Some(
                topics
                    .iter()
                    .map(|topic| {
                        let mut t = offset_fetch_request::OffsetFetchRequestTopics::default();
                        t.name = name(topic);
                        t.partition_indexes = vec![0];
                        t
                    })
                    .collect(),
            );
            g
        })
        .collect();
    let mut answer = ask(s, ApiKey::OffsetFetch, 8, request);
    let r = OffsetFetchResponse::decode(&mut answer, 8).unwrap();
    r.groups
        .iter()
        .map(|g| {
            topics
                .iter()
                .map(|topic| {
                    let t = g.topics.iter().find(|t| t.name.as_str() == *topic).unwrap();
                    let p = &t.partitions[0];
                    (p.committed_offset, p.committed_leader_epoch)
                })
                .collect()
        })
        .collect()
}

/// DeleteGroups v2 of `groups`: each one's error.
fn delete_groups(s: &mut TcpStream, groups: &[&str]) -> Vec<i16> {
    let mut request = DeleteGroupsRequest::default();
    request.groups_names = groups
        .iter()
        .map(|g| GroupId(StrBytes::from_string(g.to_string())))
        .collect();
    let mut answer = ask(s, ApiKey::DeleteGroups, 2, request);
    DeleteGroupsResponse::decode(&mut answer, 2)
        .unwrap()
        .results
        .iter()
        .map(|r| r.error_code)
        .collect()
}

/// OffsetDelete v0 of partition 0 of `topics` in `group`: the group's
/// error and each partition's.
fn delete_offsets(s: &mut TcpStream, group: &str, topics: &[&str]) -> (i16, Vec<i16>) {
    let mut request = OffsetDeleteRequest::default();
    request.group_id = GroupId(StrBytes::from_string(group.to_string()));
    request.topics = topics
        .iter()
        .map(|topic| {
            let mut t = offset_delete_request::OffsetDeleteRequestTopic::default();
            t.name = name(topic);
            t.partitions = vec![offset_delete_request::OffsetDeleteRequestPartition::default()];
            t
        })
        .collect();
    let mut answer = ask(s, ApiKey::OffsetDelete, 0, request);
    let r = OffsetDeleteResponse::decode(&mut answer, 0).unwrap();
    let partitions = r
        .topics
        .iter()
        .map(|t| t.partitions[0].error_code)
        .collect();
    (r.error_code, partitions)
}

/// The state DescribeGroups v5 gives `group`.
fn state(s: &mut TcpStream, group: &str) -> String {
    let mut request = DescribeGroupsRequest::default();
    request.groups = vec![GroupId(StrBytes::from_string(group.to_string()))];
    let mut answer = ask(s, ApiKey::DescribeGroups, 5, request);
    DescribeGroupsResponse::decode(&mut answer, 5)
        .unwrap()
        .groups[0]
        .group_state
        .to_string()
}

#[test]
fn groups_and_their_commits_are_deleted_as_kafka_deletes_them_across_a_restart() {
    let dir = TempDir::new("broker-delete-groups");
    let flags = ["--group-initial-rebalance-delay-ms", "0"];
    let broker = Broker::start_with(1, Some(dir.path()), &flags);
    let mut s = broker.connect();
    broker.create(&["a", "b"]);
    // An admin's commits (no member, generation -1) to groups without
    // members: taken, with their leader epochs.
    assert_eq!(
        commit(&mut s, "idle", "", -1, &[("a", 10), ("b", 20)]),
        [0, 0]
    );
    assert_eq!(commit(&mut s, "kept", "", -1, &[("a", 30)]), [0]);
    // A group with a member subscribed to "a".
    let (member, generation) = member_of(&mut s, "busy", &["a"]);
    assert_eq!(
        commit(&mut s, "busy", &member, generation, &[("a", 5), ("b", 6)]),
        [0, 0]
    );
    // Who may commit to it: Kafka's rules.
    let unknown = ResponseError::UnknownMemberId.code();
    let illegal = ResponseError::IllegalGeneration.code();
    assert_eq!(commit(&mut s, "busy", "", -1, &[("a", 1)]), [unknown]);
    assert_eq!(
        commit(&mut s, "busy", &member, generation + 1, &[("a", 1)]),
        [illegal]
    );
    assert_eq!(
        commit(&mut s, "busy", "someone", generation, &[("a", 1)]),
        [unknown]
    );
    assert_eq!(
        committed(&mut s, &["idle", "busy", "kept"], &["a", "b"]),
        [
            vec![(10, 3), (20, 3)],
            vec![(5, 3), (6, 3)],
            vec![(30, 3), (-1, -1)]
        ]
    );

    // OffsetDelete: "a" is subscribed to, "b" not; no such topic; no such
    // group.
    assert_eq!(
        delete_offsets(&mut s, "busy", &["a", "b", "nowhere"]),
        (
            0,
            vec![
                ResponseError::GroupSubscribedToTopic.code(),
                0,
                UNKNOWN_PARTITION
            ]
        )
    );
    assert_eq!(
        delete_offsets(&mut s, "ghost", &["a"]).0,
        ResponseError::GroupIdNotFound.code()
    );
    assert_eq!(
        delete_offsets(&mut s, "", &["a"]).0,
        ResponseError::InvalidGroupId.code()
    );
    // DeleteGroups: an empty group goes with its commits; one with a
    // member stays; one that does not exist is not found.
    assert_eq!(
        delete_groups(&mut s, &["idle", "busy", "ghost"]),
        [
            0,
            ResponseError::NonEmptyGroup.code(),
            ResponseError::GroupIdNotFound.code()
        ]
    );
    assert_eq!(state(&mut s, "idle"), "Dead");
    let after = [
        vec![(-1, -1), (-1, -1)],
        vec![(5, 3), (-1, -1)],
        vec![(30, 3), (-1, -1)],
    ];
    assert_eq!(
        committed(&mut s, &["idle", "busy", "kept"], &["a", "b"]),
        after
    );
    assert_eq!(
        delete_groups(&mut s, &["idle"]),
        [ResponseError::GroupIdNotFound.code()]
    );

    // The deletions are kept across a restart.
    let addr = broker.addr.clone();
    drop((s, broker));
    let broker = Broker::start_on(&addr, 1, Some(dir.path()), &flags);
    let mut s = broker.connect();
    assert_eq!(
        committed(&mut s, &["idle", "busy", "kept"], &["a", "b"]),
        after
    );
    assert_eq!(state(&mut s, "idle"), "Dead");
    // The member is gone with the restart: the group is empty, and goes.
    assert_eq!(delete_groups(&mut s, &["busy"]), [0]);
}

#[test]
fn a_member_metadata_that_cannot_be_read_is_an_unknown_subscription_not_a_crash() {
    let flags = ["--group-initial-rebalance-delay-ms", "0"];
    let mut broker = Broker::start_with(1, None, &flags);
    broker.create(&["a"]);
    let mut s = broker.connect();
    // Version 0, then a topic count of i32::MAX with nothing behind it.
    let hostile = Bytes::from_static(&[0, 0, 0x7f, 0xff, 0xff, 0xff]);
    member_with(&mut s, "hostile", hostile);
    assert_eq!(
        delete_offsets(&mut s, "hostile", &["a"]).0,
        ResponseError::NonEmptyGroup.code()
    );
    // Two topics said, one there.
    member_with(
        &mut s,
        "short",
        Bytes::from_static(&[0, 0, 0, 0, 0, 2, 0, 1, b'a']),
    );
    assert_eq!(
        delete_offsets(&mut s, "short", &["a"]).0,
        ResponseError::NonEmptyGroup.code()
    );
    assert!(broker.alive() && broker.answers());
}

#[test]
fn an_offset_delete_naming_a_partition_twice_keeps_its_tombstone_across_a_restart() {
    let dir = TempDir::new("broker-delete-twice");
    let broker = Broker::start_in(1, Some(dir.path()));
    broker.create(&["a"]);
    let mut s = broker.connect();
    assert_eq!(commit(&mut s, "twice", "", -1, &[("a", 10)]), [0]);
    assert_eq!(
        delete_offsets(&mut s, "twice", &["a", "a"]),
        (0, vec![0, 0])
    );
    assert_eq!(committed(&mut s, &["twice"], &["a"]), [vec![(-1, -1)]]);
    let addr = broker.addr.clone();
    drop((s, broker));
    let broker = Broker::start_on(&addr, 1, Some(dir.path()), &[]);
    let mut s = broker.connect();
    assert_eq!(committed(&mut s, &["twice"], &["a"]), [vec![(-1, -1)]]);
}

#[test]
fn commits_racing_group_deletions_are_seen_as_a_restart_replays_them() {
    const GROUPS: usize = 30;
    let dir = TempDir::new("broker-commit-race");
    let broker = Broker::start_in(1, Some(dir.path()));
    broker.create(&["a"]);
    let (mut s1, mut s2) = (broker.connect(), broker.connect());
    let groups: Vec<String> = (0..GROUPS).map(|i| format!("race-{i}")).collect();
    for group in &groups {
        assert_eq!(commit(&mut s1, group, "", -1, &[("a", 1)]), [0]);
        // A commit, and a deletion of its group sent while it waits for
        // its fsync (or before it): either order is fine, as long as what
        // is seen is what the offsets log replays.
        send(
            &mut s1,
            ApiKey::OffsetCommit,
            8,
            commit_request(group, "", -1, &[("a", 2)]),
        );
        let mut request = DeleteGroupsRequest::default();
        request.groups_names = vec![GroupId(StrBytes::from_string(group.clone()))];
        send(&mut s2, ApiKey::DeleteGroups, 2, request);
        assert_eq!(
            commit_errors(receive(&mut s1, ApiKey::OffsetCommit, 8)),
            [0]
        );
        receive(&mut s2, ApiKey::DeleteGroups, 2);
    }
    let names: Vec<&str> = groups.iter().map(String::as_str).collect();
    let seen = committed(&mut s1, &names, &["a"]);
    let addr = broker.addr.clone();
    drop((s1, s2, broker));
    let broker = Broker::start_on(&addr, 1, Some(dir.path()), &[]);
    let mut s = broker.connect();
    assert_eq!(committed(&mut s, &names, &["a"]), seen);
}

#[test]
fn a_commit_outside_group_management_is_taken_while_the_group_has_no_member() {
    let flags = ["--group-initial-rebalance-delay-ms", "0"];
    let broker = Broker::start_with(1, None, &flags);
    broker.create(&["a"]);
    let mut s = broker.connect();
    let with_instance = |group: &str, member: &str| {
        let mut request = commit_request(group, member, -1, &[("a", 1)]);
        request.group_instance_id = Some(StrBytes::from_static_str("instance"));
        request
    };
    // No group: taken whatever member or instance it names.
    assert_eq!(commit(&mut s, "absent", "someone", -1, &[("a", 1)]), [0]);
    assert_eq!(commit_as(&mut s, with_instance("absent-too", "")), [0]);
    // A group without members (made by the commits above): the same.
    assert_eq!(commit_as(&mut s, with_instance("absent", "someone")), [0]);
    assert_eq!(
        committed(&mut s, &["absent", "absent-too"], &["a"]),
        [vec![(1, 3)], vec![(1, 3)]]
    );
    // A group with a member: a commit outside it is refused.
    member_of(&mut s, "busy", &["a"]);
    let unknown = ResponseError::UnknownMemberId.code();
    assert_eq!(commit(&mut s, "busy", "", -1, &[("a", 1)]), [unknown]);
    assert_eq!(
        commit(&mut s, "busy", "someone", -1, &[("a", 1)]),
        [unknown]
    );
    assert_eq!(commit_as(&mut s, with_instance("busy", "")), [unknown]);
}
