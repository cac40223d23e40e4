//! Topics as Kafka keeps them: only Metadata (with
//! `allow_auto_topic_creation`) creates one; a Produce or ListOffsets to a
//! topic that does not exist is UNKNOWN_TOPIC_OR_PARTITION; a deleted
//! topic's committed offsets go with it (also across a restart); and a
//! transactional producer is told the feature is unavailable
//! (UNSUPPORTED_VERSION), not that it lacks an authorization. Through
//! kafka-python where it asks, raw frames otherwise.

use std::io::Write;

use bytes::Buf;
use kafka_protocol::messages::{
    list_offsets_request, produce_request, ApiKey, ListOffsetsRequest, ListOffsetsResponse,
    MetadataResponse, ProduceRequest, ProduceResponse, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kafka_protocol::ResponseError;
use purgatorio_testkit::TempDir;

mod common;
use common::{frame, metadata_frame, probe, read_frame, Broker};

/// The error code of a Produce (v7, acks 1) of one empty partition's data
/// to `topic`.
fn produce_error(broker: &Broker, topic: &str) -> i16 {
    let mut partition = produce_request::PartitionProduceData::default();
    partition.records = Some(bytes::Bytes::new());
    let mut t = produce_request::TopicProduceData::default();
    t.name = TopicName(StrBytes::from_string(topic.to_string()));
    t.partition_data = vec![partition];
    let mut request = ProduceRequest::default();
    request.acks = 1;
    request.timeout_ms = 5_000;
    request.topic_data = vec![t];
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
