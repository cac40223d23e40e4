//! No bytes a client sends can crash the broker or make it hold much more
//! than it received: counts are checked before anything is reserved,
//! frames grow as their bytes arrive, one request and the requests in
//! flight are bounded, and silent connections are closed. Each against the
//! real broker process.

use std::io::Write;
use std::process::Command;
use std::time::{Duration, Instant};

use bytes::BufMut;
use kafka_protocol::messages::ApiKey;
use purgatorio_testkit::wait_for;

mod common;
use common::{
    api_versions_frame, assert_closed_without_answer, broker_bin, frame, join_frame, read_frame,
    Broker, PATIENCE,
};

/// Requests whose first array claims 2^31 - 1 elements and holds none, for
/// each API the issue names, in an old and a flexible version.
fn huge_counts() -> Vec<(&'static str, bytes::Bytes)> {
    let max = i32::MAX;
    // A compact count: varint of count + 1, here 2^32 - 1 (count 2^32 - 2).
    let compact = [0xff, 0xff, 0xff, 0xff, 0x0f];
    vec![
        (
            "Metadata v1",
            frame(ApiKey::Metadata, 1, |b| b.put_i32(max)),
        ),
        (
            "Metadata v9",
            frame(ApiKey::Metadata, 9, |b| b.put_slice(&compact)),
        ),
        (
            "Produce v3",
            frame(ApiKey::Produce, 3, |b| {
                b.put_i16(-1); // transactional id: null
                b.put_i16(1); // acks
                b.put_i32(1000); // timeout
                b.put_i32(max); // topics
            }),
        ),
        (
            "Produce v9",
            frame(ApiKey::Produce, 9, |b| {
                b.put_u8(0); // transactional id: null
                b.put_i16(1);
                b.put_i32(1000);
                b.put_slice(&compact);
            }),
        ),
        (
            "Fetch v4",
            frame(ApiKey::Fetch, 4, |b| {
                b.put_i32(-1); // replica
                b.put_i32(500); // max wait
                b.put_i32(1); // min bytes
                b.put_i32(1 << 20); // max bytes
                b.put_i8(0); // isolation
                b.put_i32(max); // topics
            }),
        ),
        (
            "Fetch v12",
            frame(ApiKey::Fetch, 12, |b| {
                b.put_i32(-1);
                b.put_i32(500);
                b.put_i32(1);
                b.put_i32(1 << 20);
                b.put_i8(0);
                b.put_i32(0); // session id
                b.put_i32(-1); // session epoch
                b.put_slice(&compact);
            }),
        ),
        (
            "OffsetCommit v2",
            frame(ApiKey::OffsetCommit, 2, |b| {
                b.put_i16(1);
                b.put_slice(b"g"); // group
                b.put_i32(-1); // generation
                b.put_i16(0); // member id ""
                b.put_i64(-1); // retention
                b.put_i32(max); // topics
            }),
        ),
        (
            "OffsetCommit v7",
            frame(ApiKey::OffsetCommit, 7, |b| {
                b.put_i16(1);
                b.put_slice(b"g");
                b.put_i32(-1);
                b.put_i16(0);
                b.put_i16(-1); // group instance id: null
                b.put_i32(max);
            }),
        ),
    ]
}

#[test]
fn a_count_of_two_to_the_31_closes_only_its_connection() {
    let mut broker = Broker::start(1);
    let bystander = broker.connect();
    for (what, bytes) in huge_counts() {
        assert_closed_without_answer(&broker, &bytes);
        assert!(broker.alive(), "{what} killed the broker");
        assert!(broker.answers(), "{what}: a new connection is not answered");
    }
    // A connection opened before is served too.
    let mut bystander = bystander;
    bystander.write_all(&api_versions_frame()).unwrap();
    assert!(read_frame(&mut bystander).is_some());
    assert!(broker.rss_kib() < 64 * 1024, "RSS {} KiB", broker.rss_kib());
    assert_eq!(broker.wait_stat("refused", |v| v >= 8), 8);
}

#[test]
fn frames_that_announce_much_and_send_little_cost_what_arrived() {
    let mut broker = Broker::start(1);
    assert!(broker.answers());
    let (before, reserved_before) = (broker.rss_kib(), broker.data_kib());
    // 200 connections each announce a 16 MiB request and send 4 bytes of it.
    let mut stalled: Vec<_> = (0..200)
        .map(|_| {
            let mut s = broker.connect();
            s.write_all(&(16i32 << 20).to_be_bytes()).unwrap();
            s.write_all(&[0, 3, 0, 1]).unwrap();
            s
        })
        .collect();
    for s in &mut stalled {
        s.flush().unwrap();
    }
    assert!(broker.answers());
    let (during, reserved) = (broker.rss_kib(), broker.data_kib());
    drop(stalled);
    assert!(broker.answers());
    let after = broker.rss_kib();
    eprintln!(
        "RSS before {before} KiB, with 200 stalled 16 MiB frames {during} KiB, after {after} KiB; \
         reserved {reserved_before} KiB, then {reserved} KiB"
    );
    assert!(
        reserved < reserved_before + 64 * 1024,
        "reserved {reserved_before} KiB, then {reserved} KiB on 1,600 bytes"
    );
    assert!(
        during < before + 32 * 1024,
        "RSS grew from {before} to {during} KiB on 1,600 bytes"
    );
    assert!(broker.alive());
}

#[test]
fn a_request_over_max_request_bytes_closes_its_connection() {
    let broker = Broker::start_with(1, None, &["--max-request-bytes", "1024"]);
    assert_closed_without_answer(&broker, &2048i32.to_be_bytes());
    // One of 1024 bytes is served: a Metadata request for one long name.
    // Header 14 bytes (client id "test"), count 4, length 2: 1,024 in all.
    let name = "t".repeat(1024 - 14 - 4 - 2);
    let request = frame(ApiKey::Metadata, 1, |b| {
        b.put_i32(1);
        b.put_i16(name.len() as i16);
        b.put_slice(name.as_bytes());
    });
    assert_eq!(request.len(), 4 + 1024);
    let mut s = broker.connect();
    s.write_all(&request).unwrap();
    assert!(read_frame(&mut s).is_some());
}

#[test]
fn silent_and_stalled_connections_are_closed_after_the_idle_time() {
    let broker = Broker::start_with(1, None, &["--connections-max-idle-ms", "300"]);
    let mut silent = broker.connect();
    let mut stalled = broker.connect();
    stalled.write_all(&api_versions_frame()[..6]).unwrap();
    let mut busy = broker.connect();
    let started = Instant::now();
    // A connection that keeps asking stays open past the idle time.
    while started.elapsed() < Duration::from_millis(900) {
        busy.write_all(&api_versions_frame()).unwrap();
        assert!(
            read_frame(&mut busy).is_some(),
            "the busy connection closed"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The other two were closed, without an answer.
    assert!(read_frame(&mut silent).is_none());
    assert!(read_frame(&mut stalled).is_none());
    assert_eq!(broker.wait_stat("idle_closed", |v| v >= 2), 2);
}

#[test]
fn a_request_that_does_not_fit_the_budget_waits_for_it() {
    let broker = Broker::start_with(
        1,
        None,
        &[
            "--max-request-bytes",
            "1000",
            "--queued-max-request-bytes",
            "1000",
        ],
    );
    // A holds 804 bytes of the budget with a frame it never finishes:
    // nearly all of the 875 bytes that frames larger than the reserve
    // (1000 / 8) may hold.
    let mut a = broker.connect();
    a.write_all(&950i32.to_be_bytes()).unwrap();
    a.write_all(&[0; 800]).unwrap();
    broker.wait_stat("budget_free", |v| v == 196);
    // B's 300-byte request is larger than the reserve and does not fit
    // the rest: it waits, unanswered...
    let name = "b".repeat(300 - 14 - 6);
    let request = frame(ApiKey::Metadata, 1, |b| {
        b.put_i32(1);
        b.put_i16(name.len() as i16);
        b.put_slice(name.as_bytes());
    });
    let mut b = broker.connect();
    b.write_all(&request).unwrap();
    b.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    assert!(read_frame(&mut b).is_none(), "answered beyond the budget");
    // ... while a small one is answered from the reserve...
    let mut c = broker.connect();
    c.write_all(&api_versions_frame()).unwrap();
    assert!(read_frame(&mut c).is_some(), "the reserve did not serve");
    // ... and B once A goes away and its bytes leave the budget.
    drop(a);
    b.set_read_timeout(Some(PATIENCE)).unwrap();
    assert!(read_frame(&mut b).is_some(), "never answered");
    broker.wait_stat("budget_free", |v| v == 1000);
}

#[test]
fn help_runs_nothing_and_unknown_arguments_exit_2_with_usage() {
    let help = Command::new(broker_bin()).arg("--help").output().unwrap();
    assert_eq!(help.status.code(), Some(0));
    let text = String::from_utf8_lossy(&help.stdout);
    for flag in [
        "--max-request-bytes",
        "--queued-max-request-bytes",
        "--connections-max-idle-ms",
        "--queued-max-request-share",
        "--request-read-timeout-ms",
    ] {
        assert!(text.contains(flag), "--help does not mention {flag}");
    }
    let started = Instant::now();
    let unknown = Command::new(broker_bin())
        .arg("--no-such-flag")
        .output()
        .unwrap();
    assert_eq!(unknown.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("Usage"));
    let small = Command::new(broker_bin())
        .args([
            "--max-request-bytes",
            "2000",
            "--queued-max-request-bytes",
            "1000",
        ])
        .output()
        .unwrap();
    assert_eq!(small.status.code(), Some(2), "a budget below one request");
    assert!(started.elapsed() < PATIENCE);
    wait_for("nothing", Duration::from_secs(1), || Some(()));
}

#[test]
fn a_join_whose_client_goes_away_leaves_no_wait_behind() {
    let broker = Broker::start_with(1, None, &["--group-initial-rebalance-delay-ms", "0"]);
    // A joins alone: answered at once, generation 1.
    let mut a = broker.connect();
    a.write_all(&join_frame("g", "", 60_000)).unwrap();
    assert!(read_frame(&mut a).is_some());
    // B's join starts a rebalance that waits for A (for up to 24 days)...
    let mut b = broker.connect();
    b.write_all(&join_frame("g", "", i32::MAX)).unwrap();
    broker.wait_stat("group_waits", |v| v == 1);
    // ... and B goes away: its wait goes with it (the sessions, 60 s, and
    // the rebalance timeout are far off).
    drop(b);
    broker.wait_stat("group_waits", |v| v == 0);
    drop(a);
}

#[test]
fn a_large_request_s_buffer_is_not_kept_by_its_connection() {
    let broker = Broker::start(1);
    assert!(broker.answers());
    let before = broker.rss_kib();
    // Four connections each send a 32 MiB produce (refused: over
    // --message-max-bytes) and then stay open and silent. The memory of
    // each request is free once it is answered, and reused by the next; a
    // connection that kept its request's buffer would hold 4 x 32 MiB.
    let records = vec![7u8; 32 << 20];
    let request = frame(ApiKey::Produce, 3, |b| {
        b.put_i16(-1); // transactional id
        b.put_i16(1); // acks
        b.put_i32(1000); // timeout
        b.put_i32(1); // one topic
        b.put_i16(3);
        b.put_slice(b"big");
        b.put_i32(1); // one partition
        b.put_i32(0);
        b.put_i32(records.len() as i32);
        b.put_slice(&records);
    });
    let open: Vec<_> = (0..4)
        .map(|_| {
            let mut s = broker.connect();
            s.write_all(&request).unwrap();
            assert!(read_frame(&mut s).is_some(), "not answered");
            s
        })
        .collect();
    let after = broker.rss_kib();
    eprintln!("RSS {before} KiB before four 32 MiB requests, {after} KiB after their answers");
    assert!(
        after < before + 96 * 1024,
        "RSS {before} KiB before, {after} KiB after: the connections kept their requests"
    );
    drop(open);
}
