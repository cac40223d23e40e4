//! The log in segment files, through real clients (kcat, the current
//! kafka-python) against the real process: fetches across segment rolls,
//! retention deleting whole segments and moving the earliest offset, a
//! torn tail cut off at restart, ListOffsets by time through the time
//! index after a restart, and a data directory of the earlier layout.

use std::io::Write;
use std::path::Path;

use bytes::Buf;
use kafka_protocol::messages::{fetch_request, ApiKey, FetchRequest, FetchResponse, TopicName};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kafka_protocol::ResponseError;
use purgatorio_testkit::{wait_for, TempDir};

mod common;
use common::{consume, frame, kcat, probe, produce_request, read_frame, Broker, PATIENCE};

/// The segment files (`.log`) of `topic`'s partition 0 under `data`,
/// sorted by base offset, with their sizes (the broker's retention may
/// delete some while they are listed).
fn segments(data: &Path, topic: &str) -> Vec<(String, u64)> {
    let dir = data.join(topic).join("0");
    let mut found: Vec<(String, u64)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("list {}: {e}", dir.display()))
        .filter_map(Result::ok)
        .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
        // A segment that retention deletes between the listing and its
        // size is gone: not listed.
        .filter_map(|e| {
            let len = e.metadata().ok()?.len();
            Some((e.file_name().to_string_lossy().into_owned(), len))
        })
        .collect();
    found.sort();
    found
}

/// Produces `values` to `topic`'s partition 0 with kcat (acks=all, at
/// most 100 messages a batch, so that segments hold many batches).
fn produce(broker: &Broker, topic: &str, values: impl Iterator<Item = String>) {
    let values: Vec<String> = values.collect();
    let values: Vec<&str> = values.iter().map(String::as_str).collect();
    produce_to(broker, topic, 0, 100, &values);
}

/// The error code of a raw Fetch (v12) of `topic`'s partition 0 at
/// `offset`.
fn fetch_error(broker: &Broker, topic: &str, offset: i64) -> i16 {
    let mut partition = fetch_request::FetchPartition::default();
    partition.fetch_offset = offset;
    partition.partition_max_bytes = 1 << 20;
    let mut t = fetch_request::FetchTopic::default();
    t.topic = TopicName(StrBytes::from_string(topic.to_string()));
    t.partitions = vec![partition];
    let mut request = FetchRequest::default();
    request.max_bytes = 1 << 20;
    request.topics = vec![t];
    let mut s = broker.connect();
    s.write_all(&frame(ApiKey::Fetch, 12, |b| {
        request.encode(b, 12).unwrap()
    }))
    .unwrap();
    let mut answer = read_frame(&mut s).unwrap();
    answer.advance(5); // correlation id, header tags
    FetchResponse::decode(&mut answer, 12).unwrap().responses[0].partitions[0].error_code
}

/// What `probe_client.py at` prints for `stamps`, as lines.
fn at(broker: &Broker, topic: &str, stamps: &[&str]) -> Vec<String> {
    let mut args = vec!["at", &broker.addr, topic];
    args.extend_from_slice(stamps);
    probe(&args).lines().map(String::from).collect()
}

#[test]
fn kcat_reads_every_message_back_across_segment_rolls_and_a_restart() {
    let dir = TempDir::new("broker-rolls");
    let broker = Broker::start_with(1, Some(dir.path()), &["--segment-bytes", "8192"]);
    produce(&broker, "rolled", (0..5_000).map(|i| format!("r{i}")));
    let files = segments(dir.path(), "rolled");
    assert!(files.len() >= 5, "{files:?}");
    assert!(
        files.iter().all(|(_, size)| *size <= 8192),
        "a segment passed --segment-bytes: {files:?}"
    );
    let expected: Vec<(i64, String)> = (0..5_000).map(|i| (i, format!("r{i}"))).collect();
    assert_eq!(consume(&broker, "rolled"), expected);
    // After a SIGKILL the closed segments are opened as they are, and
    // offsets go on.
    broker.child.kill();
    let broker = Broker::start_with(1, Some(dir.path()), &["--segment-bytes", "8192"]);
    produce(&broker, "rolled", std::iter::once("after".to_string()));
    let mut expected = expected;
    expected.push((5_000, "after".into()));
    assert_eq!(consume(&broker, "rolled"), expected);
}

/// Whether the stray file a crash would leave in `topic`'s `partition`
/// (a name ending `.tmp`, which a partition's opening removes) is there.
fn stray(data: &Path, topic: &str, partition: i32) -> bool {
    data.join(topic)
        .join(partition.to_string())
        .join("stray.tmp")
        .exists()
}

/// Produces `values` to `topic`'s `partition` with kcat (acks=all, at
/// most `batch` messages a batch).
fn produce_to(broker: &Broker, topic: &str, partition: i32, batch: usize, values: &[&str]) {
    let input: String = values.iter().map(|v| format!("{v}\n")).collect();
    let (p, batch) = (partition.to_string(), format!("batch.num.messages={batch}"));
    let args = [
        "-b",
        &broker.addr,
        "-t",
        topic,
        "-P",
        "-p",
        &p,
        "-X",
        "acks=all",
        "-X",
        &batch,
    ];
    let (ok, _, err) = kcat(&args, input.as_bytes());
    assert!(ok, "kcat failed: {err}");
}

/// A restart reads no partition: each is read at its first use (d0e9184
/// read all of them before it listened, 57 s for 100,000 empty ones).
/// What was written before the restart is read after it, and a
/// partition no client used since answers as it did. Then retention,
/// with no client at all, still reaches a partition holding data.
#[test]
fn a_restart_reads_a_partition_at_its_first_use_and_data_survives_it() {
    let dir = TempDir::new("broker-lazy");
    let flags = [
        "--segment-bytes",
        "1024",
        "--retention-ms",
        "-1",
        "--retention-bytes",
        "-1",
    ];
    let broker = Broker::start_with(3, Some(dir.path()), &flags);
    produce_to(&broker, "lazy", 0, 10, &["a", "b"]);
    let old: Vec<String> = (0..200).map(|i| format!("old-{i:03}")).collect();
    let old: Vec<&str> = old.iter().map(String::as_str).collect();
    produce_to(&broker, "lazy", 2, 10, &old);
    broker.child.kill();
    for partition in 0..3 {
        let dir = dir.path().join("lazy").join(partition.to_string());
        std::fs::write(dir.join("stray.tmp"), b"left by a crash").unwrap();
    }
    let broker = Broker::start_with(3, Some(dir.path()), &flags);
    let (ok, listed, err) = kcat(&["-b", &broker.addr, "-L", "-t", "lazy"], b"");
    assert!(ok && listed.contains("3 partitions"), "{listed} {err}");
    assert!(
        (0..3).all(|p| stray(dir.path(), "lazy", p)),
        "the start (or Metadata) read a partition"
    );
    assert_eq!(
        consume(&broker, "lazy"),
        [(0, "a".to_string()), (1, "b".to_string())]
    );
    assert!(
        !stray(dir.path(), "lazy", 0),
        "partition 0 was read at its use"
    );
    assert!(stray(dir.path(), "lazy", 1) && stray(dir.path(), "lazy", 2));
    // Never used before: empty, and appended to from offset 0.
    assert_eq!(common::consume_partition(&broker, "lazy", 1), []);
    produce_to(&broker, "lazy", 1, 10, &["first"]);
    assert_eq!(
        common::consume_partition(&broker, "lazy", 1),
        [(0, "first".to_string())]
    );
    // Its first use a produce: offsets go on after the 200 before.
    produce_to(&broker, "lazy", 2, 10, &["new"]);
    let read = common::consume_partition(&broker, "lazy", 2);
    assert_eq!(read.len(), 201);
    assert_eq!(read[200], (200, "new".to_string()));
    assert_eq!(read[0], (0, "old-000".to_string()));
    broker.child.kill();
    // Retention of 1 KiB, checked every 50 ms: partition 2, which no
    // client uses, gives up its old segments.
    std::fs::write(dir.path().join("lazy/2/stray.tmp"), b"again").unwrap();
    let retained = [
        "--segment-bytes",
        "1024",
        "--retention-bytes",
        "1024",
        "--retention-check-interval-ms",
        "50",
    ];
    let broker = Broker::start_with(3, Some(dir.path()), &retained);
    broker.wait_stat("segments_deleted", |n| n >= 1);
    assert!(!stray(dir.path(), "lazy", 2), "the cleaner read it");
}

#[test]
fn retention_deletes_whole_old_segments_and_the_earliest_offset_moves() {
    let dir = TempDir::new("broker-retention");
    let broker = Broker::start_with(
        1,
        Some(dir.path()),
        &[
            "--segment-bytes",
            "8192",
            "--retention-bytes",
            "30000",
            "--retention-ms",
            "600000",
            "--retention-check-interval-ms",
            "50",
        ],
    );
    // By size: 5,000 messages, about 50 KB.
    produce(&broker, "sized", (0..5_000).map(|i| format!("s{i:05}")));
    // Retention runs every 50 ms, after (or while) the produce goes on.
    let kept = wait_for("retention to keep about 30,000 bytes", PATIENCE, || {
        let kept = segments(dir.path(), "sized");
        let bytes: u64 = kept.iter().map(|(_, size)| size).sum();
        (bytes - kept[0].1 < 30_000).then_some(kept)
    });
    let bytes: u64 = kept.iter().map(|(_, size)| size).sum();
    assert!(bytes >= 30_000, "kept only {bytes} bytes in {kept:?}");
    assert!(broker.stat("segments_deleted") >= 1);
    let read = consume(&broker, "sized");
    let earliest = read[0].0;
    assert!(earliest > 0, "nothing was deleted");
    assert_eq!(
        read,
        (earliest..5_000)
            .map(|i| (i, format!("s{i:05}")))
            .collect::<Vec<_>>(),
        "the rest is read from the new earliest offset"
    );
    assert_eq!(
        at(&broker, "sized", &[]),
        [format!("EARLIEST {earliest}"), "LATEST 5000".to_string()]
    );
    assert_eq!(
        fetch_error(&broker, "sized", earliest - 1),
        ResponseError::OffsetOutOfRange.code()
    );
    assert_eq!(fetch_error(&broker, "sized", earliest), 0);
    // By time: 1,000 records an hour old, then 1,000 of now; the old
    // segments go (retention 10 min), the one holding new records stays.
    let out = probe(&[
        "produce_timed",
        &broker.addr,
        "timed",
        "1000",
        "now-3600000",
        "1",
    ]);
    assert_eq!(out.trim(), "DONE");
    let out = probe(&["produce_timed", &broker.addr, "timed", "1000", "now-0", "1"]);
    assert_eq!(out.trim(), "DONE");
    let earliest = wait_for("old segments to go", PATIENCE, || {
        let lines = at(&broker, "timed", &[]);
        let earliest: i64 = lines[0].strip_prefix("EARLIEST ")?.parse().ok()?;
        (earliest > 0).then_some(earliest)
    });
    assert!(
        earliest <= 1_000,
        "a segment of new records went: {earliest}"
    );
    assert!(
        at(&broker, "timed", &[]).contains(&"LATEST 2000".to_string()),
        "the latest offset stays"
    );
}

#[test]
fn a_torn_tail_is_cut_off_at_restart_and_offsets_go_on_from_there() {
    let dir = TempDir::new("broker-torn");
    let broker = Broker::start_with(1, Some(dir.path()), &["--segment-bytes", "16384"]);
    produce(&broker, "torn", (0..3_000).map(|i| format!("t{i}")));
    // Batch by batch, so the last batch is small.
    for i in 3_000..3_003 {
        produce(&broker, "torn", std::iter::once(format!("t{i}")));
    }
    broker.child.kill();
    // The broker is stopped: cut the last segment mid-batch.
    let files = segments(dir.path(), "torn");
    assert!(files.len() >= 2, "{files:?}");
    let (last, size) = files.last().unwrap().clone();
    let path = dir.path().join("torn/0").join(&last);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(size - 5)
        .unwrap();
    let broker = Broker::start_with(1, Some(dir.path()), &["--segment-bytes", "16384"]);
    let read = consume(&broker, "torn");
    let expected: Vec<(i64, String)> = (0..3_002).map(|i| (i, format!("t{i}"))).collect();
    assert_eq!(read, expected, "all but the torn batch");
    assert!(
        std::fs::metadata(&path).unwrap().len() < size - 5,
        "the torn bytes stayed"
    );
    produce(&broker, "torn", std::iter::once("after".to_string()));
    assert_eq!(
        consume(&broker, "torn").last(),
        Some(&(3_002, "after".to_string())),
        "the next offset follows the last whole batch"
    );
}

#[test]
fn offsets_for_times_go_through_the_time_index_after_a_restart() {
    let dir = TempDir::new("broker-times");
    // Retention by time would delete records of 1970 at once.
    let start = |dir: &Path| {
        Broker::start_with(
            1,
            Some(dir),
            &["--segment-bytes", "4096", "--retention-ms", "-1"],
        )
    };
    let broker = start(dir.path());
    // 2,000 records 10 ms apart from t = 1,000,000 ms, in many batches
    // and segments.
    let out = probe(&[
        "produce_timed",
        &broker.addr,
        "clock",
        "2000",
        "1000000",
        "10",
    ]);
    assert_eq!(out.trim(), "DONE");
    assert!(segments(dir.path(), "clock").len() >= 5);
    broker.child.kill();
    let broker = start(dir.path());
    let stamps = ["0", "1000000", "1000001", "1004567", "1019990", "1019991"];
    assert_eq!(
        at(&broker, "clock", &stamps),
        [
            "EARLIEST 0",
            "LATEST 2000",
            "AT 0 0 1000000",
            "AT 1000000 0 1000000",
            "AT 1000001 1 1000010",
            "AT 1004567 457 1004570",
            "AT 1019990 1999 1019990",
            "AT 1019991 none",
        ]
    );
}

#[test]
fn a_partition_file_of_the_earlier_layout_becomes_its_first_segment() {
    let dir = TempDir::new("broker-layout");
    // `<topic>/<partition>.log`: three batches of ten records, as the
    // broker before segments wrote them.
    let mut old = bytes::BytesMut::new();
    for batch in 0..3i64 {
        let records: Vec<_> = (0..10)
            .map(|i| {
                (
                    None,
                    Some(bytes::Bytes::from(format!("o{}", batch * 10 + i))),
                )
            })
            .collect();
        old.extend_from_slice(&common::record_batch(batch * 10, 1_000, &records));
    }
    std::fs::create_dir_all(dir.path().join("old")).unwrap();
    std::fs::write(dir.path().join("old/0.log"), &old).unwrap();
    let broker = Broker::start_with(1, Some(dir.path()), &["--retention-ms", "-1"]);
    assert!(!dir.path().join("old/0.log").exists());
    assert!(dir.path().join("old/0/00000000000000000000.log").exists());
    produce(&broker, "old", std::iter::once("new".to_string()));
    let mut expected: Vec<(i64, String)> = (0..30).map(|i| (i, format!("o{i}"))).collect();
    expected.push((30, "new".into()));
    assert_eq!(consume(&broker, "old"), expected);
}

#[test]
fn without_a_data_dir_segments_are_files_no_directory_shows() {
    let broker = Broker::start_with(1, None, &["--segment-bytes", "8192"]);
    produce(&broker, "anonymous", (0..3_000).map(|i| format!("a{i}")));
    let expected: Vec<(i64, String)> = (0..3_000).map(|i| (i, format!("a{i}"))).collect();
    assert_eq!(consume(&broker, "anonymous"), expected);
    // Several segments' files are open, and none has a name: they go
    // with the process, however it ends.
    let prefix = format!(".purgatorio-broker-{}-", broker.child.id());
    let named: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .collect();
    assert!(named.is_empty(), "{named:?}");
    let open = std::fs::read_dir(format!("/proc/{}/fd", broker.child.id()))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|target| target.to_string_lossy().contains(&prefix))
        .count();
    assert!(open >= 3 * 3, "{open} segment files open");
}

#[test]
fn a_batch_whose_crc_does_not_match_is_corrupt_message_and_not_stored() {
    use kafka_protocol::messages::ProduceResponse;
    let broker = Broker::start(1);
    broker.create(&["checked"]);
    let produce = |flip: bool| {
        let value = bytes::Bytes::from_static(b"intact");
        let mut batch =
            bytes::BytesMut::from(&common::record_batch(0, 1_000, &[(None, Some(value))])[..]);
        if flip {
            // A byte of the value, after the CRC was computed.
            let last = batch.len() - 2;
            batch[last] ^= 0x20;
        }
        let request = produce_request("checked", batch.freeze(), 1);
        let mut s = broker.connect();
        s.write_all(&frame(ApiKey::Produce, 7, |b| {
            request.encode(b, 7).unwrap()
        }))
        .unwrap();
        let mut answer = read_frame(&mut s).unwrap();
        answer.advance(4);
        let r = ProduceResponse::decode(&mut answer, 7).unwrap();
        r.responses[0].partition_responses[0].error_code
    };
    assert_eq!(produce(true), ResponseError::CorruptMessage.code());
    assert_eq!(produce(false), 0);
    assert_eq!(consume(&broker, "checked"), [(0, "intact".to_string())]);
}
