//! What an admin deletes of a log, through raw requests: records
//! (DeleteRecords moves a partition's log start, inside a segment too, and
//! it survives a restart). Groups and their commits: `group_deletion.rs`.

use std::net::TcpStream;
use std::path::Path;

use bytes::Bytes;
use kafka_protocol::messages::{
    delete_records_request, fetch_request, list_offsets_request, ApiKey, BrokerId,
    DeleteRecordsRequest, DeleteRecordsResponse, FetchRequest, FetchResponse, ListOffsetsRequest,
    ListOffsetsResponse, ProduceResponse, TopicName,
};
use kafka_protocol::protocol::{Decodable, StrBytes};
use purgatorio_testkit::{wait_for, TempDir};

mod common;
use common::{ask, metadata_frame, produce_request, read_frame, record_batch, Broker, PATIENCE};

/// `s` as a topic name.
fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

/// Creates `topics` through a Metadata that may create them.
fn create(s: &mut TcpStream, topics: &[&str]) {
    use std::io::Write;
    s.write_all(&metadata_frame(Some(topics), true)).unwrap();
    read_frame(s).expect("the metadata's answer");
}

/// Produces one batch of `count` records created at `timestamp` to
/// partition 0 of `topic`; its base offset.
fn produce(s: &mut TcpStream, topic: &str, count: usize, timestamp: i64) -> i64 {
    let records: Vec<(Option<Bytes>, Option<Bytes>)> = (0..count)
        .map(|i| (None, Some(Bytes::from(format!("value {i:0>120}")))))
        .collect();
    let request = produce_request(topic, record_batch(0, timestamp, &records), 1);
    let mut answer = ask(s, ApiKey::Produce, 8, request);
    let p = &ProduceResponse::decode(&mut answer, 8).unwrap().responses[0].partition_responses[0];
    assert_eq!(p.error_code, 0);
    p.base_offset
}

/// DeleteRecords v2 of (topic, partition, offset): each answer's (error,
/// low watermark).
fn delete_records(s: &mut TcpStream, partitions: &[(&str, i32, i64)]) -> Vec<(i16, i64)> {
    let mut request = DeleteRecordsRequest::default();
    request.timeout_ms = 5_000;
    request.topics = partitions
        .iter()
        .map(|&(topic, partition, offset)| {
            let mut p = delete_records_request::DeleteRecordsPartition::default();
            p.partition_index = partition;
            p.offset = offset;
            let mut t = delete_records_request::DeleteRecordsTopic::default();
            t.name = name(topic);
            t.partitions = vec![p];
            t
        })
        .collect();
    let mut answer = ask(s, ApiKey::DeleteRecords, 2, request);
    DeleteRecordsResponse::decode(&mut answer, 2)
        .unwrap()
        .topics
        .iter()
        .map(|t| (t.partitions[0].error_code, t.partitions[0].low_watermark))
        .collect()
}

/// ListOffsets v7 of partition 0 of `topic` at `timestamp` (-2:
/// earliest): (error, offset).
fn list_offset(s: &mut TcpStream, topic: &str, timestamp: i64) -> (i16, i64) {
    let mut p = list_offsets_request::ListOffsetsPartition::default();
    p.timestamp = timestamp;
    let mut t = list_offsets_request::ListOffsetsTopic::default();
    t.name = name(topic);
    t.partitions = vec![p];
    let mut request = ListOffsetsRequest::default();
    request.replica_id = BrokerId(-1);
    request.topics = vec![t];
    let mut answer = ask(s, ApiKey::ListOffsets, 7, request);
    let r = ListOffsetsResponse::decode(&mut answer, 7).unwrap();
    let p = &r.topics[0].partitions[0];
    (p.error_code, p.offset)
}

/// A Fetch v12 of partition 0 of `topic` from `offset`: (error, log start
/// answered, whether records came).
fn fetch(s: &mut TcpStream, topic: &str, offset: i64) -> (i16, i64, bool) {
    let mut p = fetch_request::FetchPartition::default();
    p.fetch_offset = offset;
    p.partition_max_bytes = 1 << 20;
    let mut t = fetch_request::FetchTopic::default();
    t.topic = name(topic);
    t.partitions = vec![p];
    let mut request = FetchRequest::default();
    request.replica_id = BrokerId(-1);
    request.max_bytes = 1 << 20;
    request.topics = vec![t];
    let mut answer = ask(s, ApiKey::Fetch, 12, request);
    let r = FetchResponse::decode(&mut answer, 12).unwrap();
    let p = &r.responses[0].partitions[0];
    (
        p.error_code,
        p.log_start_offset,
        p.records.as_ref().is_some_and(|r| !r.is_empty()),
    )
}

/// The `.log` files' base offsets in `dir`, sorted.
fn segment_bases(dir: &Path) -> Vec<i64> {
    let mut bases: Vec<i64> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_suffix(".log")?.parse().ok()
        })
        .collect();
    bases.sort_unstable();
    bases
}

/// OFFSET_OUT_OF_RANGE's code.
const OUT_OF_RANGE: i16 = 1;
/// UNKNOWN_TOPIC_OR_PARTITION's code.
const UNKNOWN_PARTITION: i16 = 3;

#[test]
fn delete_records_moves_the_log_start_inside_a_segment_and_a_restart_keeps_it() {
    let dir = TempDir::new("broker-delete-records");
    // Small segments, and retention looking often: the segments wholly
    // below the new start go, the one holding it stays.
    let flags = [
        "--segment-bytes",
        "1024",
        "--retention-check-interval-ms",
        "100",
    ];
    let broker = Broker::start_with(1, Some(dir.path()), &flags);
    let mut s = broker.connect();
    create(&mut s, &["wiped"]);
    // 100 records in batches of 10 (offsets 10k..10k+9, created now:
    // retention by time keeps them), a segment each (a batch is over
    // 1 KiB).
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    for k in 0..10 {
        assert_eq!(produce(&mut s, "wiped", 10, now + k), 10 * k);
    }
    let partition = dir.path().join("wiped/0");
    assert!(segment_bases(&partition).len() > 3, "several segments");

    // 35 is inside the batch at 30, inside a segment.
    assert_eq!(delete_records(&mut s, &[("wiped", 0, 35)]), [(0, 35)]);
    assert_eq!(list_offset(&mut s, "wiped", -2), (0, 35));
    assert_eq!(fetch(&mut s, "wiped", 34).0, OUT_OF_RANGE);
    assert_eq!(fetch(&mut s, "wiped", 35), (0, 35, true));
    // A time before every record finds the first at or past the start.
    assert_eq!(list_offset(&mut s, "wiped", 0), (0, 35));
    // Kafka's answers: below the start it stays; past the high watermark,
    // or below -1, OFFSET_OUT_OF_RANGE; no such partition or topic.
    let answers = delete_records(
        &mut s,
        &[
            ("wiped", 0, 20),
            ("wiped", 0, 101),
            ("wiped", 0, -1001),
            ("wiped", 7, 1),
            ("nowhere", 0, 1),
        ],
    );
    assert_eq!(
        answers,
        [
            (0, 35),
            (OUT_OF_RANGE, -1),
            (OUT_OF_RANGE, -1),
            (UNKNOWN_PARTITION, -1),
            (UNKNOWN_PARTITION, -1),
        ]
    );
    // Retention deletes the segments wholly below 35, not the one
    // holding it.
    let bases = wait_for("the segments below the start to go", PATIENCE, || {
        let bases = segment_bases(&partition);
        bases.get(1).is_none_or(|&b| b > 35).then_some(bases)
    });
    assert!(
        bases[0] <= 35,
        "the segment holding the start stays: {bases:?}"
    );
    assert_eq!(list_offset(&mut s, "wiped", -2), (0, 35));

    // A restart keeps the start (written crash-safely: no .tmp stays).
    let addr = broker.addr.clone();
    drop((s, broker));
    assert!(partition.join("log-start-offset").exists());
    assert!(!partition.join("log-start-offset.tmp").exists());
    let broker = Broker::start_on(&addr, 1, Some(dir.path()), &flags);
    let mut s = broker.connect();
    assert_eq!(list_offset(&mut s, "wiped", -2), (0, 35));
    assert_eq!(fetch(&mut s, "wiped", 34).0, OUT_OF_RANGE);
    // -1: up to the high watermark, every record; the log goes on there.
    assert_eq!(delete_records(&mut s, &[("wiped", 0, -1)]), [(0, 100)]);
    assert_eq!(fetch(&mut s, "wiped", 100), (0, 100, false));
    assert_eq!(produce(&mut s, "wiped", 1, now), 100);
    drop((s, broker));
    let broker = Broker::start_on(&addr, 1, Some(dir.path()), &flags);
    let mut s = broker.connect();
    assert_eq!(list_offset(&mut s, "wiped", -2), (0, 100));
    assert_eq!(list_offset(&mut s, "wiped", -1), (0, 101));
}

#[test]
fn delete_records_moves_the_start_without_a_data_dir_too() {
    let broker = Broker::start(1);
    let mut s = broker.connect();
    create(&mut s, &["kept"]);
    for _ in 0..3 {
        produce(&mut s, "kept", 5, 1_000);
    }
    assert_eq!(delete_records(&mut s, &[("kept", 0, 7)]), [(0, 7)]);
    assert_eq!(list_offset(&mut s, "kept", -2), (0, 7));
    assert_eq!(fetch(&mut s, "kept", 6).0, OUT_OF_RANGE);
}
