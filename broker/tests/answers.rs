//! The protocol answers as Kafka gives them, each through a real client
//! where one exists (kcat, the current kafka-python), else through raw
//! requests: MESSAGE_TOO_LARGE, Fetch's `max_bytes`, Metadata's
//! `allow_auto_topic_creation`, OffsetCommit to an unknown topic and its
//! metadata string, and start-up errors that name the path.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use bytes::Buf;
use kafka_protocol::messages::{
    fetch_request, ApiKey, FetchRequest, FetchResponse, JoinGroupResponse, MetadataResponse,
    TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kafka_protocol::ResponseError;

mod common;
use common::{
    broker_bin, frame, join_frame, join_frame_of, kcat, metadata_frame, probe, read_frame, Broker,
};

#[test]
fn a_message_over_message_max_bytes_is_answered_message_too_large() {
    let broker = Broker::start_with(1, None, &["--message-max-bytes", "20000"]);
    let big = vec![b'x'; 30_000];
    let (_, _, err) = kcat(
        &[
            "-b",
            &broker.addr,
            "-t",
            "big",
            "-P",
            "-p",
            "0",
            "-X",
            "message.max.bytes=100000",
        ],
        &big,
    );
    assert!(err.contains("Message size too large"), "kcat said: {err}");
    // Answered, not closed: the refusals were answers on a live connection.
    assert_eq!(broker.stat("refused"), 0);
    let (ok, _, err) = kcat(
        &["-b", &broker.addr, "-t", "big", "-P", "-p", "0"],
        b"small\n",
    );
    assert!(ok, "{err}");
    let (_, out, _) = kcat(
        &[
            "-b",
            &broker.addr,
            "-t",
            "big",
            "-C",
            "-p",
            "0",
            "-o",
            "beginning",
            "-e",
            "-q",
        ],
        b"",
    );
    assert_eq!(out.trim(), "small");
}

/// A Fetch v12 of partitions 0..3 of `topic` from offset 0.
fn fetch_all(topic: &str, max_bytes: i32) -> bytes::Bytes {
    let mut t = fetch_request::FetchTopic::default();
    t.topic = TopicName(StrBytes::from_string(topic.to_string()));
    t.partitions = (0..3)
        .map(|p| {
            let mut partition = fetch_request::FetchPartition::default();
            partition.partition = p;
            partition.partition_max_bytes = 1 << 20;
            partition
        })
        .collect();
    let mut request = FetchRequest::default();
    request.max_bytes = max_bytes;
    request.topics = vec![t];
    frame(ApiKey::Fetch, 12, |b| request.encode(b, 12).unwrap())
}

/// A broker with one 1,000-byte message in each of the 3 partitions of
/// "wide", started with `extra` arguments.
fn three_wide_batches(extra: &[&str]) -> Broker {
    let broker = Broker::start_with(3, None, extra);
    for p in 0..3 {
        let value = format!("{}\n", "v".repeat(1000));
        let (ok, _, err) = kcat(
            &["-b", &broker.addr, "-t", "wide", "-P", "-p", &p.to_string()],
            value.as_bytes(),
        );
        assert!(ok, "{err}");
    }
    broker
}

/// The records' sizes per partition of a fetch of "wide" with `max_bytes`.
fn fetched_sizes(broker: &Broker, max_bytes: i32) -> Vec<usize> {
    let mut s = broker.connect();
    s.write_all(&fetch_all("wide", max_bytes)).unwrap();
    let mut answer = read_frame(&mut s).unwrap();
    answer.advance(5); // correlation id, header tags
    let response = FetchResponse::decode(&mut answer, 12).unwrap();
    response.responses[0]
        .partitions
        .iter()
        .map(|p| p.records.as_ref().map_or(0, |r| r.len()))
        .collect()
}

#[test]
fn a_fetch_answer_stays_within_max_bytes_but_for_its_first_batch() {
    let broker = three_wide_batches(&[]);
    let sizes = fetched_sizes(&broker, 1 << 20);
    assert!(sizes.iter().all(|&n| n > 1000), "{sizes:?}");
    // 1,500 bytes hold one batch of about 1,070: the others stay out.
    let sizes = fetched_sizes(&broker, 1500);
    assert_eq!(sizes.iter().filter(|&&n| n > 0).count(), 1, "{sizes:?}");
    // Even 1 byte gets the first batch, so a large one is never stuck.
    let sizes = fetched_sizes(&broker, 1);
    assert_eq!(sizes.iter().filter(|&&n| n > 0).count(), 1, "{sizes:?}");
}

#[test]
fn the_broker_bounds_a_fetch_answer_whatever_the_request_asks() {
    let broker = three_wide_batches(&["--fetch-max-bytes", "1500"]);
    let sizes = fetched_sizes(&broker, i32::MAX);
    assert_eq!(sizes.iter().filter(|&&n| n > 0).count(), 1, "{sizes:?}");
}

/// A Metadata v9 request for `topic`.
fn ask_metadata(broker: &Broker, topic: Option<&str>, create: bool) -> MetadataResponse {
    let mut s = broker.connect();
    s.write_all(&metadata_frame(
        topic.as_ref().map(std::slice::from_ref),
        create,
    ))
    .unwrap();
    let mut answer = read_frame(&mut s).unwrap();
    answer.advance(5);
    MetadataResponse::decode(&mut answer, 9).unwrap()
}

#[test]
fn metadata_creates_a_topic_only_when_allowed() {
    let broker = Broker::start(1);
    let refused = ask_metadata(&broker, Some("absent"), false);
    assert_eq!(
        refused.topics[0].error_code, 3,
        "UNKNOWN_TOPIC_OR_PARTITION"
    );
    let all = ask_metadata(&broker, None, true);
    assert!(all.topics.is_empty(), "it was created anyway");
    let created = ask_metadata(&broker, Some("absent"), true);
    assert_eq!(created.topics[0].error_code, 0);
    assert_eq!(created.topics[0].partitions.len(), 1);
}

#[test]
fn offset_commit_keeps_the_metadata_and_refuses_an_unknown_topic() {
    let broker = Broker::start(1);
    let (ok, _, err) = kcat(&["-b", &broker.addr, "-L", "-t", "committed"], b"");
    assert!(ok, "{err}");
    let out = probe(&["commit", &broker.addr, "committed", "readers"]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "COMMITTED 5 kept", "{out}");
    assert!(lines[1].starts_with("UNKNOWN refused"), "{out}");
}

#[test]
fn start_up_errors_name_what_failed_and_the_path() {
    let dir = purgatorio_testkit::TempDir::new("broker-start");
    let file: PathBuf = dir.path().join("a-file");
    std::fs::write(&file, b"not a directory").unwrap();
    let output = Command::new(broker_bin())
        .args(["--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(err.contains("data directory"), "{err}");
    assert!(err.contains(&file.display().to_string()), "{err}");
    assert!(!err.contains("listen"), "{err}");
    // A listen address that cannot be bound says so.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let output = Command::new(broker_bin())
        .args(["--listen", &addr])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(err.contains(&format!("cannot listen on {addr}")), "{err}");
    let mut unused = String::new();
    let _ = std::io::empty().read_to_string(&mut unused);
}

#[test]
fn offsets_for_times_finds_the_first_record_at_or_after_the_time() {
    let broker = Broker::start(1);
    let out = probe(&["times", &broker.addr, "timed"]);
    // Ten records, timestamps 1,000..10,000 ms, offsets 0..9, in one batch.
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "AT 0 0 1000",
            "AT 3500 3 4000",
            "AT 10000 9 10000",
            "AT 20000 none"
        ],
        "{out}"
    );
}

#[test]
fn topics_are_created_with_their_own_partition_counts_and_deleted() {
    let dir = purgatorio_testkit::TempDir::new("broker-topics");
    let broker = Broker::start_in(1, Some(dir.path()));
    let out = probe(&["topics", &broker.addr]);
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "PARTITIONS five 5",
            "PARTITIONS one 1",
            "AGAIN TopicAlreadyExistsError",
            "HUGE InvalidPartitionsError",
            "AFTER five none"
        ],
        "{out}"
    );
    assert!(!dir.path().join("five").exists(), "its files stayed");
    // Its partition directory; segment files come with the first record.
    assert!(dir.path().join("one/0").is_dir());
}

#[test]
fn groups_are_listed_and_described_and_configs_are_described() {
    let broker = Broker::start_with(
        1,
        None,
        &[
            "--group-initial-rebalance-delay-ms",
            "0",
            "--message-max-bytes",
            "500000",
        ],
    );
    let out = probe(&["groups", &broker.addr, "watched"]);
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "LISTED watchers Stable",
            "DESCRIBED watchers Stable range 1 probe-1 /127.0.0.1",
            "CONFIG max.message.bytes 500000",
            "CONFIG socket.request.max.bytes 104857600",
        ],
        "{out}"
    );
    assert_eq!(broker.stat("encode_errors"), 0);
}

#[test]
fn the_topics_dot_and_dot_dot_are_refused_and_touch_no_directory() {
    let dir = purgatorio_testkit::TempDir::new("broker-dots");
    let data = dir.path().join("data");
    let broker = Broker::start_in(1, Some(&data));
    for name in [".", ".."] {
        let answer = ask_metadata(&broker, Some(name), true);
        assert_eq!(
            answer.topics[0].error_code, 17,
            "{name}: INVALID_TOPIC_EXCEPTION"
        );
    }
    // Nothing was written beside or above the data directory.
    assert!(!dir.path().join("0.log").exists());
    assert!(!data.join("0.log").exists());
    assert!(data.exists());
}

/// Members joining group `group` (rebalance timeout `rebalance_ms`) at
/// these times after `start`, each on its own connection: each answer's
/// generation, the number of members the leader was given, and when it
/// came.
fn join_at(
    broker: &Broker,
    group: &'static str,
    rebalance_ms: i32,
    start: Instant,
    at_ms: &[u64],
) -> Vec<std::thread::JoinHandle<(i32, usize, Duration)>> {
    at_ms
        .iter()
        .map(|&at| {
            let mut s = broker.connect();
            std::thread::spawn(move || {
                let due = start + Duration::from_millis(at);
                std::thread::sleep(due.saturating_duration_since(Instant::now()));
                s.write_all(&join_frame(group, "", rebalance_ms)).unwrap();
                let mut answer = read_frame(&mut s).expect("a JoinGroup answer");
                answer.advance(4); // correlation id
                let r = JoinGroupResponse::decode(&mut answer, 1).unwrap();
                assert_eq!(r.error_code, 0);
                (r.generation_id, r.members.len(), start.elapsed())
            })
        })
        .collect()
}

#[test]
fn the_initial_delay_is_extended_while_new_members_join_up_to_the_rebalance_timeout() {
    let broker = Broker::start_with(1, None, &["--group-initial-rebalance-delay-ms", "3000"]);
    let start = Instant::now();
    // Joins at 0, 1 s (in the first delay) and 4 s (in the second): each
    // delay with a new member is followed by another, so the rebalance
    // completes when the third delay ends, at 9 s. (Each join has 2 s of
    // room to be late.)
    let growing = join_at(&broker, "growing", 60_000, start, &[0, 1_000, 4_000]);
    // Joins at 0 and 1 s with a 4.5 s rebalance timeout: the extension
    // stops there (at 4.5 s, not 6 s).
    let capped = join_at(&broker, "capped", 4_500, start, &[0, 1_000]);
    for (name, joins, members, earliest, latest) in [
        ("growing", growing, 3, 9_000, None),
        ("capped", capped, 2, 4_500, Some(6_000)),
    ] {
        let answers: Vec<(i32, usize, Duration)> =
            joins.into_iter().map(|j| j.join().unwrap()).collect();
        assert!(
            answers.iter().all(|a| a.0 == 1),
            "{name}: one generation: {answers:?}"
        );
        assert_eq!(
            answers.iter().map(|a| a.1).max(),
            Some(members),
            "{name}: the leader was given every member: {answers:?}"
        );
        for (_, _, when) in &answers {
            assert!(
                *when >= Duration::from_millis(earliest),
                "{name}: answered after {when:?}"
            );
            if let Some(latest) = latest {
                assert!(
                    *when < Duration::from_millis(latest),
                    "{name}: extended past the rebalance timeout: {when:?}"
                );
            }
        }
    }
}

#[test]
fn the_initial_delay_ends_even_if_the_member_that_started_it_went_away() {
    let broker = Broker::start_with(1, None, &["--group-initial-rebalance-delay-ms", "3000"]);
    let start = Instant::now();
    // A starts the delay and goes away; B joins within it.
    let mut a = broker.connect();
    a.write_all(&join_frame("orphan", "", 60_000)).unwrap();
    broker.wait_stat("group_waits", |n| n == 1);
    drop(a);
    let b = join_at(&broker, "orphan", 60_000, start, &[0]);
    let (generation, members, when) = b.into_iter().next().unwrap().join().unwrap();
    // The group's own timer ended the delay (extended once, by B's join),
    // not B's 60 s rebalance timeout; A, whose session runs, is in it and
    // leads (B, not the leader, is given no member list).
    assert_eq!((generation, members), (1, 0));
    assert!(when >= Duration::from_millis(6_000), "after {when:?}");
}

/// Sends a JoinGroup of `version` on `s` and reads its answer: (error
/// code, generation, member id).
fn join_on(
    s: &mut std::net::TcpStream,
    version: i16,
    group: &str,
    member: &str,
    rebalance_ms: i32,
) -> (i16, i32, String) {
    s.write_all(&join_frame_of(version, group, member, rebalance_ms))
        .unwrap();
    let mut answer = read_frame(s).expect("a JoinGroup answer");
    answer.advance(4); // correlation id (no tags before v6)
    let r = JoinGroupResponse::decode(&mut answer, version).unwrap();
    (r.error_code, r.generation_id, r.member_id.to_string())
}

#[test]
fn joins_need_a_member_id_from_v4_and_a_group_holds_at_most_group_max_size() {
    let broker = Broker::start_with(
        1,
        None,
        &[
            "--group-initial-rebalance-delay-ms",
            "0",
            "--group-max-size",
            "2",
        ],
    );
    let mut a = broker.connect();
    // v4, no member id: MEMBER_ID_REQUIRED with the id to join with.
    let (error, generation, id) = join_on(&mut a, 4, "capped", "", 60_000);
    assert_eq!(error, ResponseError::MemberIdRequired.code());
    assert_eq!(generation, -1);
    assert!(!id.is_empty());
    // Joining with it: the group's first generation, A alone.
    assert_eq!(
        join_on(&mut a, 4, "capped", &id, 60_000),
        (0, 1, id.clone())
    );
    // An id the group neither has nor handed out.
    let mut stranger = broker.connect();
    let (error, _, _) = join_on(&mut stranger, 4, "capped", "made-up", 60_000);
    assert_eq!(error, ResponseError::UnknownMemberId.code());
    // B (v1: an id at once) makes two; its join waits for A to rejoin.
    let mut b = broker.connect();
    b.write_all(&join_frame("capped", "", 60_000)).unwrap();
    broker.wait_stat("group_waits", |n| n == 1);
    // A third member, in either version, is one too many.
    let mut c = broker.connect();
    let (error, _, _) = join_on(&mut c, 4, "capped", "", 60_000);
    assert_eq!(error, ResponseError::GroupMaxSizeReached.code());
    let (error, _, _) = join_on(&mut c, 1, "capped", "", 60_000);
    assert_eq!(error, ResponseError::GroupMaxSizeReached.code());
    // A rejoins: generation 2, A and B; C's pending id never counted.
    let (error, generation, _) = join_on(&mut a, 4, "capped", &id, 60_000);
    assert_eq!((error, generation), (0, 2));
}

#[test]
fn a_member_leaving_during_a_rebalance_lets_it_complete_with_those_who_rejoined() {
    use kafka_protocol::messages::LeaveGroupRequest;
    let broker = Broker::start_with(1, None, &["--group-initial-rebalance-delay-ms", "0"]);
    let mut a = broker.connect();
    let (error, generation, a_id) = join_on(&mut a, 1, "leaving", "", 60_000);
    assert_eq!((error, generation), (0, 1));
    // B's join starts a rebalance that waits for A to rejoin (up to 60 s)...
    let mut b = broker.connect();
    b.write_all(&join_frame("leaving", "", 60_000)).unwrap();
    broker.wait_stat("group_waits", |n| n == 1);
    // ... and A leaves instead: B, the only member left, has rejoined, so
    // the rebalance completes at once (it used to start over, and B's
    // join waited out its rebalance timeout).
    let mut leave = LeaveGroupRequest::default();
    leave.group_id = StrBytes::from_static_str("leaving").into();
    leave.member_id = StrBytes::from_string(a_id);
    a.write_all(&frame(ApiKey::LeaveGroup, 0, |buf| {
        leave.encode(buf, 0).unwrap()
    }))
    .unwrap();
    assert!(read_frame(&mut a).is_some());
    let mut answer = read_frame(&mut b).expect("B's join answered");
    answer.advance(4);
    let r = JoinGroupResponse::decode(&mut answer, 1).unwrap();
    assert_eq!((r.error_code, r.generation_id), (0, 2));
}
