//! The log's disk work, through the real process: a broker SIGKILLed at
//! random points while segments roll restarts on a consistent log; a
//! parked fetch costs no file read per produce; only acks=all produces ask
//! for the group commit's fsync; a corrupt batch length in a segment is
//! CORRUPT_MESSAGE, not a buffer of that size; a partition file of the
//! earlier layout over 4 GiB is refused, named, and left as it is.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use bytes::{Buf, Bytes};
use kafka_protocol::messages::{
    fetch_request, fetch_response, ApiKey, FetchRequest, FetchResponse, ProduceResponse, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kafka_protocol::ResponseError;
use purgatorio_testkit::{output_within, wait_for, TempDir};

mod common;
use common::{
    broker_bin, consume, frame, produce_request, read_frame, record_batch, Broker, PATIENCE,
};

/// An uncompressed record batch of `values` at base offset `base`.
fn batch(values: &[String], base: i64) -> Bytes {
    let records: Vec<_> = values
        .iter()
        .map(|v| (None, Some(Bytes::from(v.clone()))))
        .collect();
    record_batch(base, 1_000, &records)
}

/// Produces `values` in one batch to `topic`'s partition 0 on `s` with
/// `acks` (not 0); returns the error code and base offset, `None` if the
/// connection broke.
fn produce(
    s: &mut std::net::TcpStream,
    topic: &str,
    values: &[String],
    acks: i16,
) -> Option<(i16, i64)> {
    let request = produce_request(topic, batch(values, 0), acks);
    s.write_all(&frame(ApiKey::Produce, 7, |b| {
        request.encode(b, 7).unwrap()
    }))
    .ok()?;
    let mut answer = read_frame(s)?;
    answer.advance(4); // correlation id
    let r = ProduceResponse::decode(&mut answer, 7).ok()?;
    let p = &r.responses[0].partition_responses[0];
    Some((p.error_code, p.base_offset))
}

/// A Fetch (v12) of `topic`'s partition 0 from `offset`.
fn fetch_frame(topic: &str, offset: i64, min_bytes: i32, max_wait_ms: i32) -> Bytes {
    fetch_frame_within(topic, offset, min_bytes, max_wait_ms, 1 << 20)
}

/// A Fetch (v12) of `topic`'s partition 0 from `offset`, of at most
/// `max_bytes` (but for a first batch larger than that).
fn fetch_frame_within(
    topic: &str,
    offset: i64,
    min_bytes: i32,
    max_wait_ms: i32,
    max_bytes: i32,
) -> Bytes {
    let mut partition = fetch_request::FetchPartition::default();
    partition.fetch_offset = offset;
    partition.partition_max_bytes = max_bytes;
    let mut t = fetch_request::FetchTopic::default();
    t.topic = TopicName(StrBytes::from_string(topic.to_string()));
    t.partitions = vec![partition];
    let mut request = FetchRequest::default();
    request.max_bytes = 1 << 20;
    request.min_bytes = min_bytes;
    request.max_wait_ms = max_wait_ms;
    request.topics = vec![t];
    frame(ApiKey::Fetch, 12, |b| request.encode(b, 12).unwrap())
}

/// The answer to a Fetch (v12) for its one partition.
fn fetch_answer(s: &mut std::net::TcpStream) -> fetch_response::PartitionData {
    let mut answer = read_frame(s).expect("a fetch answer");
    answer.advance(5); // correlation id, header tags
    let mut r = FetchResponse::decode(&mut answer, 12).unwrap();
    r.responses.remove(0).partitions.remove(0)
}

#[test]
fn a_broker_killed_at_any_point_of_its_rolls_restarts_on_a_consistent_log() {
    let dir = TempDir::new("broker-kill-rolls");
    // Segments of 4 KiB: a roll every few batches, so kills land before,
    // during and after rolls' work (a closed segment's fsync, the next
    // segment's files, the producers' snapshot).
    let args = ["--segment-bytes", "4096", "--retention-ms", "-1"];
    let mut acked: BTreeMap<i64, String> = BTreeMap::new();
    let mut value = 0u64;
    for round in 0..8u64 {
        let mut broker = Broker::start_with(1, Some(dir.path()), &args);
        broker.create(&["killed"]);
        // What the restart holds: offsets from 0 without a gap, every
        // acknowledged record at its offset, values in the order sent.
        let read = if round == 0 {
            Vec::new()
        } else {
            consume(&broker, "killed")
        };
        for (i, (offset, _)) in read.iter().enumerate() {
            assert_eq!(*offset, i as i64, "round {round}: a gap in {read:?}");
        }
        for (offset, v) in &acked {
            assert_eq!(
                read.get(*offset as usize).map(|r| &r.1),
                Some(v),
                "round {round}: acknowledged record {offset} lost"
            );
        }
        let values: Vec<u64> = read.iter().map(|(_, v)| v[1..].parse().unwrap()).collect();
        assert!(
            values.windows(2).all(|w| w[0] < w[1]),
            "round {round}: {values:?}"
        );
        // Produce until the broker dies, acks=1 and acks=all alternating;
        // it is killed from another thread at a point no one chooses.
        let pid = broker.child.id();
        let delay = Duration::from_millis(20 + round * 37 % 150);
        let killer = std::thread::spawn(move || {
            std::thread::sleep(delay);
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        });
        let mut s = broker.connect();
        loop {
            let values: Vec<String> = (0..5).map(|i| format!("v{:012}", value + i)).collect();
            value += 5;
            let acks = if value.is_multiple_of(10) { 1 } else { -1 };
            match produce(&mut s, "killed", &values, acks) {
                Some((0, base)) => {
                    for (i, v) in values.into_iter().enumerate() {
                        acked.insert(base + i as i64, v);
                    }
                }
                Some((code, _)) => panic!("round {round}: produce answered {code}"),
                None => break,
            }
        }
        killer.join().unwrap();
        wait_for("the broker to die", PATIENCE, || {
            (!broker.alive()).then_some(())
        });
    }
    let broker = Broker::start_with(1, Some(dir.path()), &args);
    let read = consume(&broker, "killed");
    assert!(read.len() >= acked.len() && !acked.is_empty());
    for (offset, v) in &acked {
        assert_eq!(read.get(*offset as usize).map(|r| &r.1), Some(v));
    }
    let leftovers: Vec<String> = std::fs::read_dir(dir.path().join("killed/0"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".tmp"))
        .collect();
    assert!(
        leftovers.is_empty(),
        "a crash's leftovers stayed: {leftovers:?}"
    );
}

/// The read system calls the process `pid` made (`syscr` of
/// `/proc/PID/io`: read, pread and the like; not socket receives).
fn read_calls(pid: u32) -> u64 {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap();
    io.lines()
        .find_map(|l| l.strip_prefix("syscr: "))
        .and_then(|v| v.trim().parse().ok())
        .expect("syscr in /proc/PID/io")
}

#[test]
fn a_parked_fetch_costs_no_file_read_per_produce() {
    let broker = Broker::start(1);
    broker.create(&["parked"]);
    let mut p = broker.connect();
    // 8 MB from offset 0: the offset index holds about 2,000 entries in its
    // file, a binary search of about 11 reads.
    let big: Vec<String> = (0..500).map(|_| "b".repeat(1_000)).collect();
    for _ in 0..16 {
        assert_eq!(produce(&mut p, "parked", &big, 1).unwrap().0, 0);
    }
    // A fetch from offset 0 wanting more than there is: it parks.
    let mut f = broker.connect();
    f.write_all(&fetch_frame("parked", 0, 64 << 20, 60_000))
        .unwrap();
    broker.wait_stat("parked", |n| n == 1);
    let before = read_calls(broker.child.id());
    for i in 0..200 {
        let small = [format!("s{i}")];
        assert_eq!(produce(&mut p, "parked", &small, 1).unwrap().0, 0);
    }
    let reads = read_calls(broker.child.id()) - before;
    eprintln!("{reads} read calls for 200 produces beside a parked fetch");
    // Each produce checks the parked fetch; the check is a subtraction.
    assert!(
        reads < 200,
        "{reads} read calls for 200 produces beside a parked fetch"
    );
    assert_eq!(broker.stat("parked"), 1);
}

#[test]
fn only_acks_all_produces_ask_for_the_group_commit_fsync() {
    let dir = TempDir::new("broker-acks-fsync");
    let broker = Broker::start_in(1, Some(dir.path()));
    broker.create(&["acks"]);
    let mut s = broker.connect();
    for i in 0..100 {
        assert_eq!(
            produce(&mut s, "acks", &[format!("one{i}")], 1).unwrap().0,
            0
        );
    }
    assert_eq!(
        broker.stat("partition_fsyncs"),
        0,
        "acks=1 asked for an fsync"
    );
    assert_eq!(
        produce(&mut s, "acks", &["all".to_string()], -1).unwrap(),
        (0, 100)
    );
    assert!(broker.stat("partition_fsyncs") >= 1);
    assert_eq!(broker.stat("durable_acks"), 1);
}

/// The 20-digit name of segment `base`'s file with `extension`.
fn segment_file(dir: &Path, base: i64, extension: &str) -> std::path::PathBuf {
    dir.join(format!("{base:020}.{extension}"))
}

#[test]
fn a_corrupt_batch_length_is_corrupt_message_and_no_buffer_of_that_size() {
    let dir = TempDir::new("broker-huge-length");
    let partition = dir.path().join("huge/0");
    std::fs::create_dir_all(&partition).unwrap();
    // Segment 0, closed (its time index has an entry, so it is opened as
    // it is): 256 MiB (sparse) whose first batch header claims 200 MiB.
    let log = std::fs::File::create(segment_file(&partition, 0, "log")).unwrap();
    log.set_len(256 << 20).unwrap();
    let mut header = [0u8; 61];
    header[8..12].copy_from_slice(&((200i32 << 20) - 12).to_be_bytes());
    header[16] = 2;
    log.write_all_at(&header, 0).unwrap();
    std::fs::write(segment_file(&partition, 0, "timeindex"), [0u8; 12]).unwrap();
    // Segments 1 and 2: a record each.
    for base in [1i64, 2] {
        let mut b = batch(&[format!("r{base}")], 0).to_vec();
        b[..8].copy_from_slice(&base.to_be_bytes());
        std::fs::write(segment_file(&partition, base, "log"), b).unwrap();
    }
    let broker = Broker::start_with(1, Some(dir.path()), &["--retention-ms", "-1"]);
    let mut s = broker.connect();
    s.write_all(&fetch_frame("huge", 0, 1, 0)).unwrap();
    let answer = fetch_answer(&mut s);
    assert_eq!(answer.error_code, ResponseError::CorruptMessage.code());
    assert!(answer.records.is_none_or(|r| r.is_empty()));
    let peak = broker.peak_kib();
    assert!(peak < 64 * 1024, "peak RSS {peak} KiB");
    // The sound segments are read as ever.
    s.write_all(&fetch_frame("huge", 1, 1, 0)).unwrap();
    let answer = fetch_answer(&mut s);
    assert_eq!(answer.error_code, 0);
    assert_eq!(answer.high_watermark, 3);
    assert!(answer.records.is_some_and(|r| !r.is_empty()));
}

#[test]
fn a_partition_file_of_the_earlier_layout_over_4_gib_is_refused_by_name() {
    let dir = TempDir::new("broker-big-legacy");
    std::fs::create_dir_all(dir.path().join("big")).unwrap();
    let old = dir.path().join("big/0.log");
    let file = std::fs::File::create(&old).unwrap();
    let b = batch(&["first".to_string()], 0);
    file.write_all_at(&b, 0).unwrap();
    // Sparse: 4 GiB and a byte, on no disk.
    let len = u64::from(u32::MAX) + 1;
    file.set_len(len).unwrap();
    let output = output_within(
        Command::new(broker_bin())
            .args(["--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.path()),
        PATIENCE,
    );
    let err = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{err}");
    assert!(err.contains(&old.display().to_string()), "{err}");
    assert!(err.contains("4 GiB"), "{err}");
    assert_eq!(
        std::fs::metadata(&old).unwrap().len(),
        len,
        "the file was touched"
    );
    assert!(!segment_file(&dir.path().join("big/0"), 0, "log").exists());
}

#[test]
fn a_batch_stored_under_a_larger_message_max_bytes_is_served_after_the_limit_is_lowered() {
    let dir = TempDir::new("broker-lowered-max");
    let value = "v".repeat(3000);
    let broker = Broker::start_with(1, Some(dir.path()), &[]);
    broker.create(&["lowered"]);
    let mut s = broker.connect();
    assert_eq!(
        produce(&mut s, "lowered", std::slice::from_ref(&value), -1).unwrap(),
        (0, 0)
    );
    drop(s);
    drop(broker);
    let broker = Broker::start_with(1, Some(dir.path()), &["--message-max-bytes", "1000"]);
    let mut s = broker.connect();
    // Over the new limit: refused on the way in, served on the way out.
    assert_eq!(
        produce(&mut s, "lowered", std::slice::from_ref(&value), -1)
            .unwrap()
            .0,
        ResponseError::MessageTooLarge.code()
    );
    // A fetch of less than the batch: its first batch whole, as Kafka
    // answers it, though past today's --message-max-bytes.
    s.write_all(&fetch_frame_within("lowered", 0, 1, 0, 100))
        .unwrap();
    let answer = fetch_answer(&mut s);
    assert_eq!(answer.error_code, 0);
    assert!(answer.records.is_some_and(|r| r.len() > 3000));
    assert_eq!(consume(&broker, "lowered"), [(0, value)]);
}
