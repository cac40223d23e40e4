//! Who a group's members are, as Kafka names them: member ids of the form
//! `client.id-UUID`, which assignors order members by; and static
//! membership (KIP-345): a member that joins again under its
//! `group.instance.id` within its session keeps its assignment, and the
//! other members do not rebalance. Through kafka-python (its
//! `group_instance_id`), and through raw requests for what a client does
//! not show (FENCED_INSTANCE_ID, LeaveGroup by instance id).

use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::{
    join_group_request, leave_group_request, ApiKey, HeartbeatRequest, HeartbeatResponse,
    JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest, LeaveGroupResponse, SyncGroupRequest,
    SyncGroupResponse,
};
use kafka_protocol::protocol::{Decodable, StrBytes};
use kafka_protocol::ResponseError;
use purgatorio_testkit::{wait_for, ChildGuard};

mod common;
use common::{ask, Broker, KAFKA_PYTHON, PATIENCE};

/// The session timeout of the static members, ms: long beside a
/// consumer's restart, so that a rejoin within it is the case tested.
const SESSION_MS: &str = "60000";

/// A kafka-python consumer of `group_client.py` in group "statics" on
/// topic "work" with client id `name`, its output appended to `out`.
fn consumer(python: &Path, broker: &Broker, name: &str, out: &Path) -> Command {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(out)
        .unwrap();
    let mut command = Command::new(python);
    command
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/group_client.py"
        ))
        .args(["consume", &broker.addr, "work", "statics", name])
        .stdout(log)
        .stderr(Stdio::null());
    command
}

/// Starts `command`.
fn start(mut command: Command) -> ChildGuard {
    command
        .spawn()
        .map(ChildGuard::new)
        .expect("start a kafka-python consumer")
}

/// [`consumer`], a static member with instance id `instance` (and client
/// id the same).
fn static_consumer(python: &Path, broker: &Broker, instance: &str, out: &Path) -> ChildGuard {
    let mut command = consumer(python, broker, instance, out);
    command
        .env("GROUP_INSTANCE_ID", instance)
        .env("GROUP_SESSION_MS", SESSION_MS);
    start(command)
}

/// The lines of a consumer's output, from line `skip` on, that start with
/// `kind`: their last word (the partitions).
fn events(path: &Path, kind: &str, skip: usize) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .skip(skip)
        .filter(|l| l.starts_with(kind))
        .map(|l| l.split_whitespace().nth(2).unwrap_or("").to_string())
        .collect()
}

/// How many lines a consumer wrote so far.
fn written(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .count()
}

#[test]
fn members_order_as_their_clients_are_named_whoever_joined_first() {
    let python = purgatorio_testkit::python_with(&[KAFKA_PYTHON]);
    let broker = Broker::start_with(4, None, &["--group-initial-rebalance-delay-ms", "0"]);
    broker.create(&["work"]);
    let dir = purgatorio_testkit::TempDir::new("broker-members");
    let (c0_out, c1_out) = (dir.path().join("c0.log"), dir.path().join("c1.log"));
    // c1 joins first and holds every partition...
    let _c1 = start(consumer(&python, &broker, "c1", &c1_out));
    wait_for("c1 with every partition", PATIENCE, || {
        (events(&c1_out, "ASSIGN", 0).pop()? == "0,1,2,3").then_some(())
    });
    // ... then c0: the range assignor, in the client, orders members by
    // id, and Kafka's ids start with the client id, so c0 comes first and
    // takes partitions 0 and 1 (librdkafka's test 0132 counts on it).
    let _c0 = start(consumer(&python, &broker, "c0", &c0_out));
    let (c0, c1) = wait_for("two partitions each", PATIENCE, || {
        let c0 = events(&c0_out, "ASSIGN", 0).pop()?;
        let c1 = events(&c1_out, "ASSIGN", 0).pop()?;
        (c0.len() == 3 && c1.len() == 3).then_some((c0, c1))
    });
    assert_eq!((c0.as_str(), c1.as_str()), ("0,1", "2,3"));
}

#[test]
fn a_restarted_static_kafka_python_consumer_gets_its_partitions_back_without_a_rebalance() {
    let python = purgatorio_testkit::python_with(&[KAFKA_PYTHON]);
    let broker = Broker::start_with(4, None, &["--group-initial-rebalance-delay-ms", "0"]);
    broker.create(&["work"]);
    let dir = purgatorio_testkit::TempDir::new("broker-static");
    let (a_out, b_out) = (dir.path().join("a.log"), dir.path().join("b.log"));
    let _a = static_consumer(&python, &broker, "a", &a_out);
    let b = static_consumer(&python, &broker, "b", &b_out);
    // Settled: two partitions each, together all four.
    let before = wait_for("a and b with two partitions each", PATIENCE, || {
        let a = events(&a_out, "ASSIGN", 0).pop()?;
        let b = events(&b_out, "ASSIGN", 0).pop()?;
        let mut all: Vec<&str> = a.split(',').chain(b.split(',')).collect();
        all.sort_unstable();
        (all == ["0", "1", "2", "3"] && a.len() == 3).then_some(b)
    });
    let a_seen = written(&a_out);
    let b_seen = written(&b_out);
    // b dies without a word (no LeaveGroup) and comes back at once under
    // the same instance id, well within its 60 s session.
    b.kill();
    let restarted = Instant::now();
    let _b = static_consumer(&python, &broker, "b", &b_out);
    let after = wait_for("b's assignment after its restart", PATIENCE, || {
        // A rebalance would first take a's partitions (a prints REVOKE
        // before it joins again, and the rebalance needs a's join).
        let revoked = events(&a_out, "REVOKE", a_seen);
        assert!(
            revoked.is_empty(),
            "a was revoked {revoked:?}: b's rejoin rebalanced the group"
        );
        events(&b_out, "ASSIGN", b_seen).pop()
    });
    let took = restarted.elapsed();
    eprintln!("b had its partitions back {took:?} after its restart");
    assert_eq!(after, before, "b's partitions before and after its restart");
    assert!(
        took < Duration::from_millis(SESSION_MS.parse().unwrap()),
        "b's partitions came back only after its session ({took:?}), so by its expiry"
    );
    assert_eq!(events(&a_out, "REVOKE", a_seen), Vec::<String>::new());
    assert_eq!(events(&a_out, "ASSIGN", a_seen), Vec::<String>::new());
    assert_eq!(broker.stat("sessions_expired"), 0);
}

/// A JoinGroup v5 of static member `instance` with `member` (empty on a
/// first join): (error, generation, member id, leader).
fn join(s: &mut TcpStream, member: &str, instance: &str) -> (i16, i32, String, String) {
    let mut protocol = join_group_request::JoinGroupRequestProtocol::default();
    protocol.name = StrBytes::from_static_str("range");
    protocol.metadata = Bytes::from_static(b"\0\0\0\0\0\0");
    let mut request = JoinGroupRequest::default();
    request.group_id = StrBytes::from_static_str("fenced").into();
    request.session_timeout_ms = 60_000;
    request.rebalance_timeout_ms = 60_000;
    request.member_id = StrBytes::from_string(member.to_string());
    request.group_instance_id = Some(StrBytes::from_string(instance.to_string()));
    request.protocol_type = StrBytes::from_static_str("consumer");
    request.protocols = vec![protocol];
    let mut answer = ask(s, ApiKey::JoinGroup, 5, request);
    let r = JoinGroupResponse::decode(&mut answer, 5).unwrap();
    (
        r.error_code,
        r.generation_id,
        r.member_id.to_string(),
        r.leader.to_string(),
    )
}

/// A SyncGroup v3 of `member` (the leader, assigning `assignment` to
/// itself): the error and the assignment answered.
fn sync(
    s: &mut TcpStream,
    member: &str,
    generation: i32,
    assignment: &'static [u8],
) -> (i16, Bytes) {
    let mut request = SyncGroupRequest::default();
    request.group_id = StrBytes::from_static_str("fenced").into();
    request.generation_id = generation;
    request.member_id = StrBytes::from_string(member.to_string());
    request.group_instance_id = Some(StrBytes::from_static_str("one"));
    if !assignment.is_empty() {
        let mut own =
            kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment::default();
        own.member_id = StrBytes::from_string(member.to_string());
        own.assignment = Bytes::from_static(assignment);
        request.assignments = vec![own];
    }
    let mut answer = ask(s, ApiKey::SyncGroup, 3, request);
    let r = SyncGroupResponse::decode(&mut answer, 3).unwrap();
    (r.error_code, r.assignment)
}

/// A Heartbeat v3 of `member` of instance "one": its error.
fn heartbeat(s: &mut TcpStream, member: &str, generation: i32) -> i16 {
    let mut request = HeartbeatRequest::default();
    request.group_id = StrBytes::from_static_str("fenced").into();
    request.generation_id = generation;
    request.member_id = StrBytes::from_string(member.to_string());
    request.group_instance_id = Some(StrBytes::from_static_str("one"));
    let mut answer = ask(s, ApiKey::Heartbeat, 3, request);
    HeartbeatResponse::decode(&mut answer, 3)
        .unwrap()
        .error_code
}

#[test]
fn a_static_members_old_id_is_fenced_and_leave_group_names_it_by_instance() {
    let broker = Broker::start_with(1, None, &["--group-initial-rebalance-delay-ms", "0"]);
    let mut s = broker.connect();
    // A static member's first join needs no MEMBER_ID_REQUIRED round.
    let (error, generation, first, leader) = join(&mut s, "", "one");
    assert_eq!(
        (error, generation),
        (0, 1),
        "a static member's first join (error {:?})",
        ResponseError::try_from_code(error)
    );
    assert_eq!(leader, first);
    assert!(first.starts_with("one-"), "member id {first}");
    assert_eq!(
        sync(&mut s, &first, 1, b"mine"),
        (0, Bytes::from_static(b"mine"))
    );
    // The instance restarts: a new id, the same generation, answered at
    // once; the old leader id is given, so it syncs as a follower and gets
    // what it had.
    let (error, generation, second, leader) = join(&mut s, "", "one");
    assert_eq!((error, generation), (0, 1));
    assert_ne!(second, first);
    assert_eq!(leader, first);
    assert_eq!(
        sync(&mut s, &second, 1, b""),
        (0, Bytes::from_static(b"mine"))
    );
    // The old id is a zombie now: fenced, in every request.
    let fenced = ResponseError::FencedInstanceId.code();
    assert_eq!(heartbeat(&mut s, &first, 1), fenced);
    assert_eq!(sync(&mut s, &first, 1, b"").0, fenced);
    assert_eq!(join(&mut s, &first, "one").0, fenced);
    assert_eq!(heartbeat(&mut s, &second, 1), 0);
    // LeaveGroup v3 by instance id alone: the member goes.
    let mut leave = LeaveGroupRequest::default();
    leave.group_id = StrBytes::from_static_str("fenced").into();
    let mut by_instance = leave_group_request::MemberIdentity::default();
    by_instance.group_instance_id = Some(StrBytes::from_static_str("one"));
    leave.members = vec![by_instance];
    let mut answer = ask(&mut s, ApiKey::LeaveGroup, 3, leave);
    let r = LeaveGroupResponse::decode(&mut answer, 3).unwrap();
    assert_eq!(r.error_code, 0);
    assert_eq!(r.members.len(), 1);
    assert_eq!(r.members[0].error_code, 0);
    assert_eq!(
        heartbeat(&mut s, &second, 1),
        ResponseError::UnknownMemberId.code()
    );
}
