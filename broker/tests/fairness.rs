//! One connection cannot take the broker from the others: requests that
//! stop arriving are closed in seconds and cannot spend the budget small
//! requests need. Each against the real broker process, with a real client
//! beside the stalled connections.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Instant;

mod common;
use common::{api_versions_frame, kcat, read_frame, Broker, PATIENCE};

/// Opens a connection that announces a `announced`-byte request, sends
/// `sent` bytes of it and stops; kept open (by a thread blocked on it)
/// until the broker closes it.
fn stall(broker: &Broker, announced: usize, sent: usize) {
    let mut s = broker.connect();
    std::thread::spawn(move || {
        let mut bytes = (announced as i32).to_be_bytes().to_vec();
        bytes.resize(4 + sent, 0);
        // Blocks while the broker, out of budget, reads no more of it.
        let _ = s.write_all(&bytes);
        let _ = s.read(&mut [0u8; 1]);
    });
}

/// kcat's Metadata round trip; its latency.
fn metadata(broker: &Broker) -> std::time::Duration {
    let started = Instant::now();
    let (ok, out, err) = kcat(&["-b", &broker.addr, "-L", "-m", "10"], b"");
    let took = started.elapsed();
    assert!(ok, "kcat -L was not answered: {out} {err}");
    assert!(out.contains("1 brokers"), "{out}");
    took
}

#[test]
fn three_stalled_large_requests_leave_room_for_a_metadata() {
    const MIB: usize = 1 << 20;
    // A budget of 8 MiB (7 MiB for large frames, 1 MiB kept for small
    // ones) and requests of up to 4 MiB; the read timeout (30 s) is past
    // kcat's 10 s, so that only the budget's reserve can answer it.
    let broker = Broker::start_with(
        1,
        None,
        &[
            "--max-request-bytes",
            &(4 * MIB).to_string(),
            "--queued-max-request-bytes",
            &(8 * MIB).to_string(),
        ],
    );
    let unloaded = metadata(&broker);
    // Three connections each send 3 MiB of a 4 MiB request and stop: 9
    // MiB, more than the budget.
    for _ in 0..3 {
        stall(&broker, 4 * MIB, 3 * MIB);
    }
    broker.wait_stat("budget_free", |free| free <= MIB as u64);
    let loaded = metadata(&broker);
    eprintln!("kcat -L: {unloaded:?} unloaded, {loaded:?} beside three stalled requests");
    // And a raw one on a connection of its own.
    let mut s = broker.connect();
    s.write_all(&api_versions_frame()).unwrap();
    assert!(read_frame(&mut s).is_some());
    assert_eq!(broker.stat("stalled_closed"), 0);
}

#[test]
fn a_request_that_stops_arriving_is_closed_after_the_read_timeout() {
    // The idle time is 10 minutes; the read timeout half a second.
    let broker = Broker::start_with(1, None, &["--request-read-timeout-ms", "500"]);
    let mut stalled = broker.connect();
    stalled.write_all(&(1i32 << 20).to_be_bytes()).unwrap();
    stalled.write_all(&[0; 1000]).unwrap();
    let silent = broker.connect();
    // The stalled request is closed, unanswered...
    let started = Instant::now();
    assert!(read_frame(&mut stalled).is_none(), "answered");
    assert!(started.elapsed() < PATIENCE, "not closed");
    assert_eq!(broker.wait_stat("stalled_closed", |v| v >= 1), 1);
    // ... its bytes gone from the budget, and a connection that sent
    // nothing is not: it is served.
    broker.wait_stat("budget_free", |v| v == 200 << 20);
    let mut silent: TcpStream = silent;
    silent.write_all(&api_versions_frame()).unwrap();
    assert!(
        read_frame(&mut silent).is_some(),
        "the silent one was closed"
    );
    assert_eq!(broker.stat("idle_closed"), 0);
}

/// A Fetch of `version` (4 or 12) of `topic`'s partition 0 from offset 0,
/// of up to `max_bytes`, answered at once.
fn fetch_frame(version: i16, topic: &str, max_bytes: i32) -> bytes::Bytes {
    use kafka_protocol::messages::{fetch_request, ApiKey, FetchRequest, TopicName};
    use kafka_protocol::protocol::{Encodable, StrBytes};
    let mut partition = fetch_request::FetchPartition::default();
    partition.partition_max_bytes = max_bytes;
    let mut t = fetch_request::FetchTopic::default();
    t.topic = TopicName(StrBytes::from_string(topic.to_string()));
    t.partitions = vec![partition];
    let mut request = FetchRequest::default();
    request.max_bytes = max_bytes;
    request.max_wait_ms = 0;
    request.topics = vec![t];
    common::frame(ApiKey::Fetch, version, |b| {
        request.encode(b, version).unwrap()
    })
}

/// The records of a Fetch answer of `version` for its one partition.
fn fetched(version: i16, mut answer: bytes::Bytes) -> bytes::Bytes {
    use bytes::Buf;
    use kafka_protocol::messages::FetchResponse;
    use kafka_protocol::protocol::Decodable;
    answer.advance(if version >= 12 { 5 } else { 4 }); // header
    let mut r = FetchResponse::decode(&mut answer, version).unwrap();
    assert!(
        !answer.has_remaining(),
        "{} bytes after the answer",
        answer.len()
    );
    let p = r.responses.remove(0).partitions.remove(0);
    assert_eq!(p.error_code, 0);
    p.records.unwrap_or_default()
}

#[test]
fn fetches_never_read_hold_no_records_and_close_after_the_write_timeout() {
    const MIB: usize = 1 << 20;
    // 24 MiB of 1 KiB records: an answer larger than what the kernel's
    // socket buffers take, so the broker's write of it stalls.
    let broker = Broker::start_with(1, None, &["--write-timeout-ms", "2000"]);
    let line = "r".repeat(1023) + "\n";
    let input = line.repeat(24 * 1024);
    let (ok, _, err) = kcat(
        &["-b", &broker.addr, "-t", "big", "-P", "-p", "0"],
        input.as_bytes(),
    );
    assert!(ok, "kcat failed: {err}");
    // Whole answers, streamed from the log in both records' encodings.
    let mut whole = Vec::new();
    for version in [4, 12] {
        let mut s = broker.connect();
        s.write_all(&fetch_frame(version, "big", 32 * MIB as i32))
            .unwrap();
        let records = fetched(version, read_frame(&mut s).expect("an answer"));
        assert!(records.len() > 24 * 1000 * 1024, "{} bytes", records.len());
        whole.push(records);
    }
    assert_eq!(whole[0], whole[1]);
    let before = broker.rss_kib();
    // Eight clients fetch it all and read only the answer's length.
    let unread: Vec<TcpStream> = (0..8)
        .map(|i| {
            let mut s = broker.connect();
            s.write_all(&fetch_frame([4, 12][i % 2], "big", 32 * MIB as i32))
                .unwrap();
            let mut length = [0u8; 4];
            s.read_exact(&mut length).unwrap();
            assert!(i32::from_be_bytes(length) > 24 * 1000 * 1024);
            s
        })
        .collect();
    let during = broker.rss_kib();
    // A consumer beside them reads every record.
    assert_eq!(common::consume(&broker, "big").len(), 24 * 1024);
    eprintln!(
        "RSS {before} KiB, {during} KiB with eight unread 24 MiB answers (d0e9184 buffered each twice)"
    );
    assert!(
        during < before + 64 * 1024,
        "RSS {before} KiB, then {during} KiB: unread answers held in memory"
    );
    // They make no progress: closed after the write timeout.
    assert_eq!(broker.wait_stat("write_stalled", |v| v >= 8), 8);
    drop(unread);
}

#[test]
fn a_connection_reads_ahead_only_within_its_share() {
    const MIB: usize = 1 << 20;
    // A budget of 8 MiB, a share of 10 % (838,860 bytes).
    let broker = Broker::start_with(
        1,
        None,
        &[
            "--max-request-bytes",
            &(2 * MIB).to_string(),
            "--queued-max-request-bytes",
            &(8 * MIB).to_string(),
            "--queued-max-request-share",
            "10",
        ],
    );
    let share = (8 * MIB / 100 * 10) as u64;
    let s = broker.connect();
    // A fetch that waits 5 s for data, then a whole 2 MiB request behind
    // it, read ahead while the fetch waits.
    let mut fetch = fetch_frame(12, "none", 1024).to_vec();
    fetch_wait(&mut fetch, 5_000);
    let mut ahead = (2 * MIB as i32).to_be_bytes().to_vec();
    ahead.resize(4 + 2 * MIB, 0);
    let writer = {
        let mut s = s.try_clone().unwrap();
        std::thread::spawn(move || {
            let _ = s.write_all(&fetch);
            let _ = s.write_all(&ahead);
        })
    };
    broker.wait_stat("parked", |n| n == 1);
    let total = 8 * MIB as u64;
    broker.wait_stat("budget_free", |free| free < total - share / 2);
    let least = (0..5).map(|_| broker.stat("budget_free")).min().unwrap();
    eprintln!("budget free while the fetch waits: {least} of {total}, share {share}");
    assert!(
        least + share + 1024 >= total,
        "the connection holds {} bytes, its share is {share}",
        total - least
    );
    drop(s.shutdown(std::net::Shutdown::Both));
    let _ = writer.join();
}

/// Sets a Fetch (v12) frame's `max_wait_ms` (after the length, the
/// header and the replica id).
fn fetch_wait(frame: &mut [u8], ms: i32) {
    // Length 4, api key 2, version 2, correlation 4, client id 2 + 4,
    // header tags 1, replica id 4.
    let at = 4 + 2 + 2 + 4 + 2 + 4 + 1 + 4;
    frame[at..at + 4].copy_from_slice(&ms.to_be_bytes());
}
