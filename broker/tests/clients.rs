//! The broker against real clients: `kcat` (installed if missing) and raw
//! Kafka-protocol requests encoded with the `kafka-protocol` crate. The
//! broker runs as a child process on a free loopback port and is stopped by
//! PID; every wait is bounded.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    fetch_request, ApiKey, FetchRequest, FetchResponse, RequestHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use purgatorio_testkit::{require_program, wait_for, ChildGuard};

mod common;
use common::{consume, Broker, PATIENCE};

/// The Python Kafka client the tests use: the current major release, with
/// its default settings (an idempotent producer, acks=all).
const KAFKA_PYTHON: &str = "kafka-python>=3";

fn kcat() -> PathBuf {
    require_program("kcat", "kcat")
}

/// Runs kcat with `args`, feeding `input`; returns its stdout.
fn run_kcat(args: &[&str], input: &str) -> String {
    let mut child = Command::new(kcat())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run kcat");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut out = String::new();
            child
                .stdout
                .take()
                .unwrap()
                .read_to_string(&mut out)
                .unwrap();
            let mut err = String::new();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            assert!(status.success(), "kcat {args:?} failed: {err}");
            return out;
        }
        if started.elapsed() > PATIENCE {
            let _ = child.kill();
            panic!("kcat {args:?} hung");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn kcat_produces_ten_thousand_messages_to_three_partitions_and_reads_them_back_in_order() {
    let broker = Broker::start(3);
    let input: String = (0..10_000).map(|i| format!("k{}:m{i}\n", i % 97)).collect();
    run_kcat(
        &["-b", &broker.addr, "-t", "orders", "-P", "-K", ":"],
        &input,
    );
    let mut seen: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for partition in 0..3 {
        let out = run_kcat(
            &[
                "-b",
                &broker.addr,
                "-t",
                "orders",
                "-C",
                "-p",
                &partition.to_string(),
            ]
            .iter()
            .copied()
            .chain(["-o", "beginning", "-e", "-q", "-f", "%p %o %s\\n"])
            .collect::<Vec<_>>(),
            "",
        );
        for line in out.lines() {
            let mut parts = line.split_whitespace();
            let (p, o, m) = (
                parts.next().unwrap(),
                parts.next().unwrap(),
                parts.next().unwrap(),
            );
            assert_eq!(p, partition.to_string());
            let i: u32 = m.trim_start_matches('m').parse().unwrap();
            let offsets = seen.entry(partition).or_default();
            assert_eq!(
                o.parse::<usize>().unwrap(),
                offsets.len(),
                "offsets have no gaps"
            );
            offsets.push(i);
        }
    }
    let mut all: Vec<u32> = seen.values().flatten().copied().collect();
    assert_eq!(seen.len(), 3, "all three partitions were used");
    for (partition, messages) in &seen {
        assert!(
            messages.windows(2).all(|w| w[0] < w[1]),
            "partition {partition} out of order"
        );
    }
    all.sort_unstable();
    assert_eq!(
        all,
        (0..10_000).collect::<Vec<_>>(),
        "exactly the messages produced"
    );
}

/// A raw Fetch (v12) of `topic` partition 0 from `offset`.
fn fetch_frame(topic: &str, offset: i64, max_wait_ms: i32) -> Bytes {
    let version = 12;
    let mut header = RequestHeader::default();
    header.request_api_key = ApiKey::Fetch as i16;
    header.request_api_version = version;
    header.correlation_id = 7;
    header.client_id = Some(StrBytes::from_static_str("test"));
    let mut partition = fetch_request::FetchPartition::default();
    partition.partition = 0;
    partition.fetch_offset = offset;
    partition.partition_max_bytes = 1 << 20;
    let mut t = fetch_request::FetchTopic::default();
    t.topic = TopicName(StrBytes::from_string(topic.to_string()));
    t.partitions = vec![partition];
    let mut request = FetchRequest::default();
    request.max_wait_ms = max_wait_ms;
    request.min_bytes = 1;
    request.max_bytes = 1 << 20;
    request.topics = vec![t];
    let mut body = BytesMut::new();
    header
        .encode(&mut body, ApiKey::Fetch.request_header_version(version))
        .unwrap();
    request.encode(&mut body, version).unwrap();
    let mut frame = BytesMut::new();
    frame.put_i32(body.len() as i32);
    frame.put_slice(&body);
    frame.freeze()
}

/// Reads one response frame and decodes it as a Fetch v12 response.
fn read_fetch(stream: &mut TcpStream) -> FetchResponse {
    let mut length = [0u8; 4];
    stream.read_exact(&mut length).unwrap();
    let mut body = vec![0u8; i32::from_be_bytes(length) as usize];
    stream.read_exact(&mut body).unwrap();
    let mut body = Bytes::from(body);
    let _correlation = body.get_i32();
    // Fetch v12 responses carry header v1: its tagged fields.
    let _tags = body.get_u8();
    FetchResponse::decode(&mut body, 12).unwrap()
}

fn records(response: &FetchResponse) -> usize {
    response.responses[0].partitions[0]
        .records
        .as_ref()
        .map_or(0, |r| r.len())
}

#[test]
fn a_waiting_fetch_is_completed_by_a_produce_and_an_empty_one_waits_max_wait() {
    let broker = Broker::start(1);
    run_kcat(&["-b", &broker.addr, "-t", "poll", "-L"], "");
    // An empty fetch answers after max_wait_ms, never before.
    let mut stream = TcpStream::connect(&broker.addr).unwrap();
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    let asked = Instant::now();
    stream.write_all(&fetch_frame("poll", 0, 300)).unwrap();
    let empty = read_fetch(&mut stream);
    assert!(
        asked.elapsed() >= Duration::from_millis(300),
        "answered early"
    );
    assert_eq!(records(&empty), 0);
    // A fetch that may wait 60 s is answered by the produce, not the clock.
    stream.write_all(&fetch_frame("poll", 0, 60_000)).unwrap();
    broker.wait_stat("parked", |v| v == 1);
    let asked = Instant::now();
    run_kcat(
        &["-b", &broker.addr, "-t", "poll", "-P", "-p", "0"],
        "hello\n",
    );
    let full = read_fetch(&mut stream);
    assert!(
        asked.elapsed() < Duration::from_secs(30),
        "it waited for its deadline"
    );
    assert!(records(&full) > 0);
    assert_eq!(broker.wait_stat("satisfied", |v| v >= 1), 1);
    assert_eq!(broker.stat("expired"), 1, "only the empty fetch expired");
}

#[test]
fn a_thousand_parked_fetches_are_all_answered_and_the_timer_sleeps_meanwhile() {
    let broker = Broker::start(1);
    run_kcat(&["-b", &broker.addr, "-t", "many", "-L"], "");
    let wakeups_before = broker.stat("timer_wakeups");
    let mut streams: Vec<TcpStream> = (0..1_000)
        .map(|_| {
            let mut s = TcpStream::connect(&broker.addr).unwrap();
            s.set_read_timeout(Some(PATIENCE)).unwrap();
            s.write_all(&fetch_frame("many", 0, 60_000)).unwrap();
            s
        })
        .collect();
    broker.wait_stat("parked", |v| v == 1_000);
    // While they wait (their deadlines a minute away) the timer's driver
    // sleeps: a handful of wake-ups at most, from the parking itself.
    std::thread::sleep(Duration::from_millis(500));
    let wakeups_idle = broker.stat("timer_wakeups") - wakeups_before;
    eprintln!("timer wake-ups while 1,000 fetches were parked: {wakeups_idle}");
    assert!(wakeups_idle <= 5, "{wakeups_idle} wake-ups while idle");
    run_kcat(
        &["-b", &broker.addr, "-t", "many", "-P", "-p", "0"],
        "wake\n",
    );
    for stream in &mut streams {
        assert!(records(&read_fetch(stream)) > 0);
    }
    assert_eq!(broker.wait_stat("satisfied", |v| v == 1_000), 1_000);
    assert_eq!(broker.stat("parked"), 0);
}

#[test]
fn a_client_that_disconnects_while_its_fetch_waits_frees_it() {
    let broker = Broker::start(1);
    run_kcat(&["-b", &broker.addr, "-t", "gone", "-L"], "");
    let mut stream = TcpStream::connect(&broker.addr).unwrap();
    stream.write_all(&fetch_frame("gone", 0, 60_000)).unwrap();
    broker.wait_stat("parked", |v| v == 1);
    drop(stream);
    broker.wait_stat("parked", |v| v == 0);
    assert_eq!(broker.stat("cancelled"), 1);
}

#[test]
fn bad_frames_close_only_their_connection() {
    let broker = Broker::start(1);
    run_kcat(
        &["-t", "safe", "-P", "-p", "0", "-b", &broker.addr],
        "kept\n",
    );
    let closed = |bytes: &[u8]| {
        let mut s = TcpStream::connect(&broker.addr).unwrap();
        s.set_read_timeout(Some(PATIENCE)).unwrap();
        let _ = s.write_all(bytes);
        // Whatever the frame claimed, the client sends nothing more.
        let _ = s.shutdown(std::net::Shutdown::Write);
        let mut rest = Vec::new();
        // Closed: end of stream (or a reset), never an answer or a hang.
        match s.read_to_end(&mut rest) {
            Ok(_) => assert!(rest.is_empty(), "answered {rest:?}"),
            Err(e) => assert_ne!(e.kind(), std::io::ErrorKind::WouldBlock, "hung"),
        }
    };
    closed(&i32::MAX.to_be_bytes()); // a frame over the size limit
    closed(&(-5i32).to_be_bytes()); // a negative length
    let mut garbage = 64i32.to_be_bytes().to_vec();
    garbage.extend((0..64u8).map(|i| i.wrapping_mul(37)));
    closed(&garbage); // garbage of a valid length
    let mut unknown = 8i32.to_be_bytes().to_vec();
    unknown.extend([0x7f, 0x00, 0, 0, 0, 0, 0, 1]); // API key 32512
    closed(&unknown);
    let mut truncated = fetch_frame("safe", 0, 100).to_vec();
    truncated.truncate(20);
    closed(&truncated); // the client stops mid-frame
                        // The broker and the data are unaffected.
    let out = run_kcat(
        &[
            "-b",
            &broker.addr,
            "-t",
            "safe",
            "-C",
            "-p",
            "0",
            "-o",
            "beginning",
            "-e",
            "-q",
        ],
        "",
    );
    assert_eq!(out.trim(), "kept");
}

/// A consumer process of `group_client.py` in group "workers" on topic
/// "work", its output in a file.
fn python_consumer(
    python: &std::path::Path,
    broker: &Broker,
    name: &str,
    out: &std::path::Path,
) -> ChildGuard {
    python_consumer_of(python, &broker.addr, "work", name, out)
}

/// A consumer process of `group_client.py` in group "workers" on `topic`.
fn python_consumer_of(
    python: &std::path::Path,
    addr: &str,
    topic: &str,
    name: &str,
    out: &std::path::Path,
) -> ChildGuard {
    consumer_command(python, addr, topic, name, out)
        .spawn()
        .map(ChildGuard::new)
        .expect("start a kafka-python consumer")
}

/// The command of a consumer in group "workers" on `topic`, its output to
/// `out`, for a test to add to before starting it.
fn consumer_command(
    python: &std::path::Path,
    addr: &str,
    topic: &str,
    name: &str,
    out: &std::path::Path,
) -> Command {
    let mut command = Command::new(python);
    command
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/group_client.py"
        ))
        .args(["consume", addr, topic, "workers", name])
        .stdout(std::fs::File::create(out).unwrap())
        .stderr(Stdio::null());
    command
}

fn python_produce(python: &std::path::Path, broker: &Broker, first: u32, count: u32) {
    python_produce_to(python, &broker.addr, "work", first, count);
}

/// Produces the values `first..first + count` to `topic` with kafka-python.
fn python_produce_to(python: &std::path::Path, addr: &str, topic: &str, first: u32, count: u32) {
    let status = Command::new(python)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/group_client.py"
        ))
        .args([
            "produce",
            addr,
            topic,
            &first.to_string(),
            &count.to_string(),
        ])
        .status()
        .expect("run the kafka-python producer");
    assert!(status.success());
}

/// The lines of a consumer's output that start with `kind`, split.
fn lines(path: &std::path::Path, kind: &str) -> Vec<Vec<String>> {
    lines_from(path, kind, 0)
}

/// Like [`lines`], skipping the first `skip` lines of the output.
fn lines_from(path: &std::path::Path, kind: &str, skip: usize) -> Vec<Vec<String>> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .skip(skip)
        .filter(|l| l.starts_with(kind))
        .map(|l| l.split_whitespace().skip(1).map(String::from).collect())
        .collect()
}

/// The partitions of a consumer's last assignment (`None` before its
/// first).
fn assigned(path: &std::path::Path) -> Option<Vec<String>> {
    let last = lines(path, "ASSIGN").pop()?;
    Some(
        last.get(1)
            .map(|parts| parts.split(',').map(String::from).collect())
            .unwrap_or_default(),
    )
}

/// How many lines of a consumer's output precede its last `ASSIGN` line.
fn before_last_assignment(path: &std::path::Path) -> usize {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .enumerate()
        .filter(|(_, l)| l.starts_with("ASSIGN"))
        .map(|(i, _)| i)
        .last()
        .unwrap_or(0)
}

#[test]
fn a_kafka_python_group_survives_a_killed_consumer_without_losing_a_committed_message() {
    let python = purgatorio_testkit::python_with(&[KAFKA_PYTHON]);
    let broker = Broker::start(4);
    let dir = purgatorio_testkit::TempDir::new("broker-group");
    let (a_out, b_out) = (dir.path().join("a.log"), dir.path().join("b.log"));
    python_produce(&python, &broker, 0, 100);
    let a = python_consumer(&python, &broker, "A", &a_out);
    let _b = python_consumer(&python, &broker, "B", &b_out);
    let consumed = || lines(&a_out, "REC").len() + lines(&b_out, "REC").len();
    // Both members hold partitions, and everything so far is consumed.
    wait_for("two members with two partitions each", PATIENCE, || {
        (assigned(&a_out)?.len() == 2 && assigned(&b_out)?.len() == 2).then_some(())
    });
    python_produce(&python, &broker, 100, 100);
    wait_for("the first 200 messages", PATIENCE, || {
        (consumed() >= 200).then_some(())
    });
    let a_partitions = assigned(&a_out).unwrap();
    // A dies without a word; more messages arrive, some for its partitions.
    a.kill();
    let killed = Instant::now();
    python_produce(&python, &broker, 200, 100);
    // A's partitions move to B only once A's session (6 s) ran out. A's
    // last heartbeat was at most 0.5 s before the kill.
    wait_for("B to take over every partition", PATIENCE, || {
        (assigned(&b_out)?.len() == 4).then_some(())
    });
    let moved_after = killed.elapsed();
    eprintln!("A's partitions moved to B {moved_after:?} after the kill");
    // (A lower bound with room for a late heartbeat of A: never early.)
    assert!(
        moved_after >= Duration::from_secs(5),
        "moved after only {moved_after:?}"
    );
    assert!(broker.stat("sessions_expired") >= 1);
    wait_for("all 300 messages", PATIENCE, || {
        let values: std::collections::HashSet<String> = lines(&a_out, "REC")
            .into_iter()
            .chain(lines(&b_out, "REC"))
            .map(|r| r[3].clone())
            .collect();
        (values.len() == 300).then_some(())
    });
    // On each partition B took over, B starts exactly where A's last
    // commit left off: nothing committed is lost or delivered again. Only
    // what B read after the takeover counts: before the two members first
    // settled, B may have read some of these partitions itself.
    let takeover = lines(&b_out, "ASSIGN").len();
    assert!(takeover >= 2);
    let b_records = lines_from(&b_out, "REC", before_last_assignment(&b_out));
    for partition in &a_partitions {
        let committed = lines(&a_out, "COMMIT")
            .into_iter()
            .filter(|c| &c[1] == partition)
            .map(|c| c[2].parse::<i64>().unwrap())
            .max()
            .unwrap_or(0);
        let first_by_b = b_records
            .iter()
            .filter(|r| &r[1] == partition)
            .map(|r| r[2].parse::<i64>().unwrap())
            .min();
        if let Some(first) = first_by_b {
            assert_eq!(
                first,
                committed,
                "partition {partition}: B started at {first}, A had committed {committed} \
                 (A's assignments {:?}, B's {:?})",
                lines(&a_out, "ASSIGN"),
                lines(&b_out, "ASSIGN"),
            );
        }
    }
}

#[test]
fn with_a_data_dir_every_acknowledged_message_survives_a_killed_broker() {
    let dir = purgatorio_testkit::TempDir::new("broker-data");
    let broker = Broker::start_in(1, Some(dir.path()));
    let input: String = (0..1_000).map(|i| format!("d{i}\n")).collect();
    // acks=all: each produce is answered once a group-commit fsync covers it.
    run_kcat(
        &[
            "-b",
            &broker.addr,
            "-t",
            "durable",
            "-P",
            "-p",
            "0",
            "-X",
            "acks=all",
        ],
        &input,
    );
    // They were answered through the group commit (the produce purgatory).
    assert!(broker.wait_stat("durable_acks", |v| v >= 1) >= 1);
    broker.child.kill(); // SIGKILL: no chance to flush anything more
    let broker = Broker::start_in(1, Some(dir.path()));
    run_kcat(
        &[
            "-b",
            &broker.addr,
            "-t",
            "durable",
            "-P",
            "-p",
            "0",
            "-X",
            "acks=all",
        ],
        "after\n",
    );
    let read = consume(&broker, "durable");
    assert_eq!(
        read.len(),
        1_001,
        "every acknowledged message, then the new one"
    );
    for (i, (offset, value)) in read.iter().enumerate().take(1_000) {
        assert_eq!(
            (*offset, value.as_str()),
            (i as i64, format!("d{i}").as_str())
        );
    }
    assert_eq!(
        read[1_000],
        (1_000, "after".to_string()),
        "offsets go on after the restart"
    );
}

#[test]
fn an_idempotent_producer_retrying_across_a_killed_broker_appends_each_record_once() {
    let python = purgatorio_testkit::python_with(&[KAFKA_PYTHON]);
    let dir = purgatorio_testkit::TempDir::new("broker-idempotent");
    let broker = Broker::start_in(1, Some(dir.path()));
    let addr = broker.addr.clone();
    let count = 3_000;
    let out = dir.path().join("producer.out");
    let mut producer = ChildGuard::new(
        Command::new(&python)
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/group_client.py"
            ))
            .args(["produce_paced", &addr, "once", "0", &count.to_string(), "1"])
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the kafka-python producer"),
    );
    // Mid-stream, the broker dies without a word and comes back.
    broker.wait_stat("batches", |v| v >= 20);
    broker.child.kill();
    let broker = Broker::start_on(&addr, 1, Some(dir.path()), &[]);
    let status = wait_for("the producer to finish", Duration::from_secs(120), || {
        producer.child().try_wait().unwrap()
    });
    assert!(status.success(), "the producer failed");
    assert_eq!(std::fs::read_to_string(&out).unwrap().trim(), "DONE");
    let read = run_kcat(
        &[
            "-b",
            &broker.addr,
            "-t",
            "once",
            "-C",
            "-p",
            "0",
            "-o",
            "beginning",
            "-e",
            "-q",
            "-f",
            "%s\\n",
        ],
        "",
    );
    let mut seen: Vec<u32> = read.lines().map(|l| l.parse().unwrap()).collect();
    let total = seen.len();
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(
        total,
        seen.len(),
        "{} records appended twice",
        total - seen.len()
    );
    assert_eq!(seen, (0..count).collect::<Vec<_>>(), "every record, once");
}

#[test]
fn with_a_data_dir_a_group_resumes_at_its_commits_after_a_killed_broker() {
    let python = purgatorio_testkit::python_with(&[KAFKA_PYTHON]);
    let dir = purgatorio_testkit::TempDir::new("broker-commits");
    let data = dir.path().join("data");
    let broker = Broker::start_in(1, Some(&data));
    python_produce_to(&python, &broker.addr, "kept", 0, 100);
    let a_out = dir.path().join("a.log");
    let a = python_consumer_of(&python, &broker.addr, "kept", "A", &a_out);
    wait_for("A to commit all 100", PATIENCE, || {
        lines(&a_out, "COMMIT")
            .iter()
            .any(|c| c[2] == "100")
            .then_some(())
    });
    a.kill();
    broker.child.kill();
    let broker = Broker::start_in(1, Some(&data));
    python_produce_to(&python, &broker.addr, "kept", 100, 50);
    let b_out = dir.path().join("b.log");
    let _b = python_consumer_of(&python, &broker.addr, "kept", "B", &b_out);
    wait_for("B to read the 50 new records", PATIENCE, || {
        (lines(&b_out, "REC").len() >= 50).then_some(())
    });
    std::thread::sleep(Duration::from_millis(500));
    let offsets: Vec<i64> = lines(&b_out, "REC")
        .iter()
        .map(|r| r[2].parse().unwrap())
        .collect();
    assert_eq!(offsets.first(), Some(&100), "B did not start at A's commit");
    assert_eq!(offsets.len(), 50, "B read {} records", offsets.len());
}

#[test]
fn consumers_starting_together_join_one_generation_after_the_initial_delay() {
    let python = purgatorio_testkit::python_with(&[KAFKA_PYTHON]);
    // A 10 s delay (Kafka's default is 3 s): room for a client that a
    // loaded machine slows between the go and its JoinGroup. The first
    // join starts it; the second, a new member within it, extends it by
    // another 10 s (as Kafka does), so the rebalance completes once 10 s
    // passed without a new member: however the two joins are spread, as
    // long as they are less than 10 s apart, they land in one generation.
    let broker = Broker::start_with(4, None, &["--group-initial-rebalance-delay-ms", "10000"]);
    let dir = purgatorio_testkit::TempDir::new("broker-initial");
    let (a_out, b_out) = (dir.path().join("a.log"), dir.path().join("b.log"));
    python_produce(&python, &broker, 0, 10);
    // Both members wait, consumer made, until `go` exists: then they join
    // together, whatever their interpreters took to start on a loaded
    // machine (starting B "a second later" once let A's join time out the
    // delay alone when A's interpreter was slow).
    let go = dir.path().join("go");
    let _a = consumer_command(&python, &broker.addr, "work", "A", &a_out)
        .env("GROUP_CLIENT_GO", &go)
        .spawn()
        .map(ChildGuard::new)
        .expect("start a kafka-python consumer");
    let _b = consumer_command(&python, &broker.addr, "work", "B", &b_out)
        .env("GROUP_CLIENT_GO", &go)
        .spawn()
        .map(ChildGuard::new)
        .expect("start a kafka-python consumer");
    wait_for("both members to be ready to join", PATIENCE, || {
        (!lines(&a_out, "READY").is_empty() && !lines(&b_out, "READY").is_empty()).then_some(())
    });
    let started = Instant::now();
    std::fs::write(&go, b"go").unwrap();
    wait_for(
        "both members to hold two partitions",
        Duration::from_secs(60),
        || (assigned(&a_out)?.len() == 2 && assigned(&b_out)?.len() == 2).then_some(()),
    );
    let settled = started.elapsed();
    assert!(
        settled >= Duration::from_secs(20),
        "settled after {settled:?}: the delay was not extended"
    );
    // One generation to start with: neither member was first given all
    // four partitions (without the delay, A is, and then gives two up).
    // The delay (10 s) is longer than A's session timeout (6 s): a member
    // waiting in its JoinGroup is kept alive, as Kafka keeps it.
    let logs = || {
        let read = |p: &std::path::Path| std::fs::read_to_string(p).unwrap_or_default();
        format!("A:\n{}B:\n{}", read(&a_out), read(&b_out))
    };
    for out in [&a_out, &b_out] {
        let first = lines(out, "ASSIGN")[0].clone();
        assert_eq!(
            first.get(1).map(|p| p.split(',').count()),
            Some(2),
            "{first:?}\n{}",
            logs()
        );
    }
}
