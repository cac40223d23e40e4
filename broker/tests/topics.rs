//! Topics as Kafka keeps them: only Metadata (with
//! `allow_auto_topic_creation`) creates one; a Produce or ListOffsets to a
//! topic that does not exist is UNKNOWN_TOPIC_OR_PARTITION; a deleted
//! topic's committed offsets go with it (also across a restart); and a
//! transactional producer is told the feature is unavailable
//! (UNSUPPORTED_VERSION), not that it lacks an authorization; the
//! partitions one request creates and the broker holds are bounded
//! (POLICY_VIOLATION); a topic's disk work stops no other request; and
//! with `--auto-create-topics false` only CreateTopics creates one.
//! Through kafka-python where it asks, raw frames otherwise.

use std::io::Write;
use std::time::Instant;

use bytes::Buf;
use kafka_protocol::messages::{
    create_topics_request, list_offsets_request, ApiKey, CreateTopicsRequest, CreateTopicsResponse,
    ListOffsetsRequest, ListOffsetsResponse, MetadataResponse, ProduceResponse, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kafka_protocol::ResponseError;
use purgatorio_testkit::TempDir;

mod common;
use common::{frame, metadata_frame, probe, produce_request, read_frame, Broker, PATIENCE};

/// The error code of a Produce (v7, acks 1) of one empty partition's data
/// to `topic`.
fn produce_error(broker: &Broker, topic: &str) -> i16 {
    let request = produce_request(topic, bytes::Bytes::new(), 1);
    let mut s = broker.connect();
    s.write_all(&frame(ApiKey::Produce, 7, |b| {
        request.encode(b, 7).unwrap()
    }))
    .unwrap();
    let mut answer = read_frame(&mut s).expect("a produce answer");
    answer.advance(4);
    let r = ProduceResponse::decode(&mut answer, 7).unwrap();
    r.responses[0].partition_responses[0].error_code
}

/// The error code of a ListOffsets (v5, latest) of `topic`'s partition 0.
fn list_offsets_error(broker: &Broker, topic: &str) -> i16 {
    let mut partition = list_offsets_request::ListOffsetsPartition::default();
    partition.timestamp = -1;
    let mut t = list_offsets_request::ListOffsetsTopic::default();
    t.name = TopicName(StrBytes::from_string(topic.to_string()));
    t.partitions = vec![partition];
    let mut request = ListOffsetsRequest::default();
    request.replica_id = (-1).into();
    request.topics = vec![t];
    let mut s = broker.connect();
    s.write_all(&frame(ApiKey::ListOffsets, 5, |b| {
        request.encode(b, 5).unwrap()
    }))
    .unwrap();
    let mut answer = read_frame(&mut s).expect("a list offsets answer");
    answer.advance(4);
    let r = ListOffsetsResponse::decode(&mut answer, 5).unwrap();
    r.topics[0].partitions[0].error_code
}

/// The partitions of `topic` by a Metadata that creates nothing (`None`:
/// it does not exist).
fn partitions(broker: &Broker, topic: &str) -> Option<usize> {
    let mut s = broker.connect();
    s.write_all(&metadata_frame(Some(&[topic]), false)).unwrap();
    let mut answer = read_frame(&mut s).unwrap();
    answer.advance(5);
    let r = MetadataResponse::decode(&mut answer, 9).unwrap();
    (r.topics[0].error_code == 0).then(|| r.topics[0].partitions.len())
}

#[test]
fn only_metadata_creates_topics() {
    let broker = Broker::start(4);
    let unknown = ResponseError::UnknownTopicOrPartition.code();
    assert_eq!(produce_error(&broker, "absent"), unknown);
    assert_eq!(list_offsets_error(&broker, "absent"), unknown);
    assert_eq!(partitions(&broker, "absent"), None, "created by them");
    // Metadata allowed to create does, with --partitions.
    broker.create(&["made"]);
    assert_eq!(partitions(&broker, "made"), Some(4));
    assert_eq!(produce_error(&broker, "made"), 0);
    assert_eq!(list_offsets_error(&broker, "made"), 0);
}

#[test]
fn with_auto_creation_off_only_create_topics_creates() {
    let broker = Broker::start_with(4, None, &["--auto-create-topics", "false"]);
    // A Metadata allowed to create is answered UNKNOWN_TOPIC_OR_PARTITION,
    // as Kafka with auto.create.topics.enable=false answers it.
    broker.create(&["absent"]);
    assert_eq!(partitions(&broker, "absent"), None, "created by Metadata");
    assert_eq!(create_topics(&broker, &[("made", 2)]), [(0, String::new())]);
    assert_eq!(partitions(&broker, "made"), Some(2));
}

#[test]
fn a_deleted_topic_s_commits_go_with_it_across_a_restart() {
    let dir = TempDir::new("broker-recreate");
    let broker = Broker::start_in(4, Some(dir.path()));
    let out = probe(&["recreate", &broker.addr, "again", "readers"]);
    // The topic made again holds no commit: the group reads from 0, not
    // from the 40 committed before the deletion.
    assert!(out.contains("COMMITTED none"), "{out}");
    assert!(out.contains("FIRST 0\n"), "{out}");
    let addr = broker.addr.clone();
    drop(broker);
    let broker = Broker::start_on(&addr, 4, Some(dir.path()), &[]);
    let out = probe(&["committed", &broker.addr, "again", "readers"]);
    assert!(out.contains("COMMITTED none"), "after a restart: {out}");
}

#[test]
fn a_transactional_producer_is_told_transactions_are_unavailable() {
    let broker = Broker::start(1);
    let out = probe(&["transactions", &broker.addr]);
    // kafka-python: "Unexpected error in InitProducerIdResponse: [Error
    // 35] UnsupportedVersionError" (d0e9184: Error 53,
    // TransactionalIdAuthorizationFailedError).
    assert!(out.contains("[Error 35] UnsupportedVersionError"), "{out}");
}

/// A CreateTopics (v4) of `topics`, (name, partitions).
fn create_topics_frame(topics: &[(&str, i32)]) -> bytes::Bytes {
    let mut request = CreateTopicsRequest::default();
    request.timeout_ms = 60_000;
    request.topics = topics
        .iter()
        .map(|(name, partitions)| {
            let mut t = create_topics_request::CreatableTopic::default();
            t.name = TopicName(StrBytes::from_string(name.to_string()));
            t.num_partitions = *partitions;
            t.replication_factor = 1;
            t
        })
        .collect();
    frame(ApiKey::CreateTopics, 4, |b| request.encode(b, 4).unwrap())
}

/// Each topic's error code and message from a CreateTopics (v4).
fn create_topics(broker: &Broker, topics: &[(&str, i32)]) -> Vec<(i16, String)> {
    let mut s = broker.connect();
    s.write_all(&create_topics_frame(topics)).unwrap();
    let mut answer = read_frame(&mut s).expect("a create topics answer");
    answer.advance(4);
    let r = CreateTopicsResponse::decode(&mut answer, 4).unwrap();
    r.topics
        .iter()
        .map(|t| {
            let message = t.error_message.as_deref().unwrap_or_default();
            (t.error_code, message.to_string())
        })
        .collect()
}

#[test]
fn partitions_past_the_request_s_or_the_broker_s_bound_are_policy_violation() {
    let broker = Broker::start_with(
        4,
        None,
        &[
            "--max-partitions-per-request",
            "10",
            "--max-partitions",
            "15",
        ],
    );
    let policy = ResponseError::PolicyViolation.code();
    // 8 + 8 in one request: the second passes the request's 10.
    let answers = create_topics(&broker, &[("a", 8), ("b", 8)]);
    assert_eq!(answers[0].0, 0);
    assert_eq!(answers[1].0, policy, "{answers:?}");
    assert!(answers[1].1.contains("excessively large"), "{answers:?}");
    // 8 more would make 16 on a broker bounded at 15; 7 make 15.
    assert_eq!(create_topics(&broker, &[("c", 8)])[0].0, policy);
    assert_eq!(create_topics(&broker, &[("d", 7)])[0].0, 0);
    assert_eq!(partitions(&broker, "c"), None);
    // Metadata's auto-creation (4 partitions) is bounded too.
    let mut s = broker.connect();
    s.write_all(&metadata_frame(Some(&["e"]), true)).unwrap();
    let mut answer = read_frame(&mut s).unwrap();
    answer.advance(5);
    let r = MetadataResponse::decode(&mut answer, 9).unwrap();
    assert_eq!(r.topics[0].error_code, policy);
    // Deleting a topic gives its partitions back.
    let mut admin = broker.connect();
    let mut delete = kafka_protocol::messages::DeleteTopicsRequest::default();
    delete.topic_names = vec![TopicName(StrBytes::from_static_str("a"))];
    delete.timeout_ms = 5_000;
    admin
        .write_all(&frame(ApiKey::DeleteTopics, 3, |b| {
            delete.encode(b, 3).unwrap()
        }))
        .unwrap();
    assert!(read_frame(&mut admin).is_some());
    assert_eq!(create_topics(&broker, &[("c", 8)])[0].0, 0);
}

#[test]
fn a_large_create_topics_stops_no_other_request() {
    let dir = TempDir::new("broker-wide-create");
    let broker = Broker::start_in(1, Some(dir.path()));
    broker.create(&["existing"]);
    // A asks for 500 partitions: seconds of directories, files and fsyncs
    // in a debug build.
    let mut a = broker.connect();
    a.write_all(&create_topics_frame(&[("wide", 500)])).unwrap();
    let started = Instant::now();
    while !dir.path().join("wide").exists() {
        assert!(started.elapsed() < PATIENCE, "the creation never began");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    // Meanwhile B's Metadata of an existing topic, which reads the topics'
    // lock, is answered again and again (d0e9184 held that lock through
    // the disk work: B waited for all of it).
    a.set_nonblocking(true).unwrap();
    let pending = |a: &std::net::TcpStream| matches!(a.peek(&mut [0u8; 1]), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock);
    let mut b = broker.connect();
    let mut answered_meanwhile = 0;
    while pending(&a) && started.elapsed() < PATIENCE {
        b.write_all(&metadata_frame(Some(&["existing"]), false))
            .unwrap();
        assert!(read_frame(&mut b).is_some());
        if pending(&a) {
            answered_meanwhile += 1;
        }
    }
    a.set_nonblocking(false).unwrap();
    let answers = {
        let mut answer = read_frame(&mut a).expect("the creation's answer");
        answer.advance(4);
        CreateTopicsResponse::decode(&mut answer, 4).unwrap()
    };
    assert_eq!(answers.topics[0].error_code, 0);
    eprintln!("{answered_meanwhile} Metadata round trips while 500 partitions were made");
    assert!(
        answered_meanwhile >= 5,
        "{answered_meanwhile} answers while the topic was made"
    );
    assert_eq!(partitions(&broker, "wide"), Some(500));
}

#[test]
fn topic_configs_are_checked_applied_and_kept() {
    let dir = TempDir::new("broker-topic-configs");
    // Retention looks every 100 ms; the broker's own keeps 7 days.
    let args = ["--retention-check-interval-ms", "100"];
    let broker = Broker::start_with(1, Some(dir.path()), &args);
    let out = probe(&["configs", &broker.addr]);
    for line in [
        "CREATED kept",
        "CREATED two",
        "REFUSED unknown InvalidConfigurationError",
        "REFUSED banana InvalidConfigurationError",
        "CREATED compacted",
        "KEYLESS InvalidRecordError",
        "KEYED accepted",
        "DESCRIBED kept retention.ms 3600000",
        "DESCRIBED kept segment.bytes 4096",
        "BIG MessageSizeTooLargeError",
        "ALL NotEnoughReplicasError",
    ] {
        assert!(out.contains(line), "no {line:?} in {out}");
    }
    // segment.bytes and retention.ms applied: records two hours old fill
    // 4 KiB segments, and all but the active one go within a second or so.
    let out = probe(&[
        "produce_timed",
        &broker.addr,
        "kept",
        "2000",
        "now-7200000",
        "1",
    ]);
    assert!(out.contains("DONE"), "{out}");
    let started = Instant::now();
    loop {
        let out = probe(&["at", &broker.addr, "kept"]);
        let earliest: i64 = out
            .lines()
            .find_map(|l| l.strip_prefix("EARLIEST "))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{out}"));
        if earliest > 0 {
            break;
        }
        assert!(
            started.elapsed() < PATIENCE,
            "retention.ms not applied: {out}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    // Kept across a restart.
    let addr = broker.addr.clone();
    drop(broker);
    let broker = Broker::start_on(&addr, 1, Some(dir.path()), &args);
    let out = probe(&["describe", &broker.addr, "kept"]);
    assert!(out.contains("retention.ms 3600000"), "{out}");
    assert!(out.contains("segment.bytes 4096"), "{out}");
}

#[test]
fn a_replica_assignment_naming_this_broker_is_accepted() {
    let broker = Broker::start(1);
    let out = probe(&["assign", &broker.addr]);
    // librdkafka 0081 too: d0e9184 refused every assignment.
    assert!(out.contains("PLACED 2"), "{out}");
    assert!(
        out.contains("ELSEWHERE InvalidReplicationAssignmentError"),
        "{out}"
    );
}

#[test]
fn create_partitions_grows_a_topic_and_the_growth_is_kept() {
    let dir = TempDir::new("broker-grow");
    let broker = Broker::start_in(1, Some(dir.path()));
    let out = probe(&["grow", &broker.addr]);
    // librdkafka 0044, 0069, 0112; d0e9184 did not serve CreatePartitions.
    for line in ["GROWN 4", "SENT 3 0", "SHRINK InvalidPartitionsError"] {
        assert!(out.contains(line), "no {line:?} in {out}");
    }
    let addr = broker.addr.clone();
    drop(broker);
    let broker = Broker::start_on(&addr, 1, Some(dir.path()), &[]);
    let out = probe(&["partitions", &broker.addr, "grown"]);
    assert!(out.contains("PARTITIONS grown 4"), "after a restart: {out}");
    assert_eq!(common::consume_partition(&broker, "grown", 3).len(), 1);
}

#[test]
fn a_topic_s_configs_are_altered_checked_and_kept() {
    let dir = TempDir::new("broker-alter");
    let broker = Broker::start_in(1, Some(dir.path()));
    let out = probe(&["alter", &broker.addr]);
    // IncrementalAlterConfigs, then AlterConfigs (librdkafka 0011 and 0092
    // ask for them; d0e9184 served neither).
    for line in [
        "DESCRIBED altered retention.ms 1000",
        "DESCRIBED altered segment.bytes 4096",
        "DESCRIBED altered retention.ms 2000",
        "BAD [Error 40] InvalidConfigurationError: Unknown topic config name: no.such",
    ] {
        assert!(out.contains(line), "no {line:?} in {out}");
    }
    let addr = broker.addr.clone();
    drop(broker);
    let broker = Broker::start_on(&addr, 1, Some(dir.path()), &[]);
    let out = probe(&["describe", &broker.addr, "altered"]);
    assert!(out.contains("retention.ms 2000"), "after a restart: {out}");
    assert!(out.contains("segment.bytes 4096"), "after a restart: {out}");
}
