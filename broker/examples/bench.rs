//! Measures `purgatorio-broker` from outside, as a client would:
//! produce-to-consume latency with a long-poll fetch, the broker's CPU per
//! message, its wake-ups and CPU while 1,000 fetches sit parked, what
//! idle long-polling consumers cost (CPU and context switches per expired
//! fetch, from `/proc/PID/task/*`), and, on request, its memory while
//! gigabytes pass through it and its restart time beside that data
//! (`--only volume`), and produce latency while segments roll on a data
//! directory (`--only roll`).
//!
//! ```text
//! cargo build --release -p purgatorio-broker
//! cargo run --release -p purgatorio-broker --example bench -- --help
//! cargo run --release -p purgatorio-broker --example bench
//! cargo run --release -p purgatorio-broker --example bench -- --only idle --bin OTHER-BUILD
//! cargo run --release -p purgatorio-broker --example bench -- --only volume --volume-gib 10 \
//!     --data-dir /tmp/pg-volume --segment-bytes 268435456 --retention-bytes 4294967296
//! ```

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};
use clap::{Parser, ValueEnum};
use kafka_protocol::messages::ProduceResponse;
use kafka_protocol::messages::{fetch_request, ApiKey, FetchRequest, TopicName};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
#[path = "../tests/common/wire.rs"]
mod wire;
use wire::{frame, metadata_frame};

fn produce(topic: &str, records: usize) -> Bytes {
    produce_values(
        topic,
        records,
        Bytes::from_static(b"0123456789abcdef0123456789abcdef"),
    )
}

/// A produce (acks=1) of `records` records of `value` in one batch.
fn produce_values(topic: &str, records: usize, value: Bytes) -> Bytes {
    // Now: retention by time (7 days) keeps them.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let batch = vec![(None, Some(value)); records];
    let request = wire::produce_request(topic, wire::record_batch(0, now, &batch), 1);
    frame(ApiKey::Produce, 7, |b| request.encode(b, 7).unwrap())
}

fn fetch(topic: &str, offset: i64, max_wait_ms: i32) -> Bytes {
    let mut partition = fetch_request::FetchPartition::default();
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
    frame(ApiKey::Fetch, 11, |b| request.encode(b, 11).unwrap())
}

/// An answer's body; the bench stops if the broker closed the connection.
fn read_frame(s: &mut TcpStream) -> Bytes {
    wire::read_frame(s).expect("the broker answered")
}

/// The broker process's CPU time, seconds.
fn cpu(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

/// The broker process's CPU time, seconds, to the nanosecond: the run
/// time of each of its threads (`/proc/PID/task/*/schedstat`, user and
/// kernel) summed, where [`cpu`] counts 10 ms ticks. A thread that exits
/// in between is missed, so it is for windows in which none does (the
/// idle scenario); without schedstat, it falls back to [`cpu`].
fn cpu_fine(pid: u32) -> f64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return cpu(pid);
    };
    let mut ns = 0u64;
    for task in tasks.filter_map(Result::ok) {
        let Ok(schedstat) = std::fs::read_to_string(task.path().join("schedstat")) else {
            return cpu(pid);
        };
        ns += schedstat
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
    }
    ns as f64 / 1e9
}

/// What to measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Scenario {
    /// Produce-to-consume latency through a long poll.
    Latency,
    /// Broker CPU per produced message.
    Cpu,
    /// 1,000 fetches parked: wake-ups and CPU.
    Parked,
    /// Idle long-polling consumers: CPU and context switches per expiry.
    Idle,
    /// Gigabytes through the broker (1 MB batches, a consumer reading
    /// behind the producer): its RSS along the way, then its restart time
    /// on that data beside an empty data directory. Not in the default
    /// set.
    Volume,
    /// Produce round trips (acks=1, 5 KB batches) on a data directory with
    /// 1 MiB segments, a roll every ~100 produces: the latency
    /// percentiles, whose tail is the produces that rolled. Not in the
    /// default set.
    Roll,
}

/// The bench's command line.
#[derive(Parser, Debug)]
#[command(about = "Measures a purgatorio-broker binary from outside, as a client would.")]
struct Args {
    /// The broker binary to start (build it with --release first).
    #[arg(long, default_value = "target/release/purgatorio-broker")]
    bin: PathBuf,
    /// Run only these scenarios (default: all).
    #[arg(long, value_enum, value_delimiter = ',')]
    only: Vec<Scenario>,
    /// Idle consumers, each long-polling an empty partition.
    #[arg(long, default_value_t = 100)]
    idle_consumers: usize,
    /// Their fetches' max_wait_ms.
    #[arg(long, default_value_t = 500)]
    idle_wait_ms: i32,
    /// How long the idle scenario measures, s.
    #[arg(long, default_value_t = 10)]
    idle_secs: u64,
    /// Start the idle consumers spread evenly over one long poll, so that
    /// their fetches arrive one at a time (as a Python client's do), not
    /// in step.
    #[arg(long)]
    idle_spread: bool,
    /// How much the volume scenario produces, GiB.
    #[arg(long, default_value_t = 10)]
    volume_gib: u64,
    /// The volume scenario's data directory (emptied first); without it,
    /// the broker runs without --data-dir and no restart is measured.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// The volume scenario's --retention-bytes (what stays on disk; not
    /// passed if not given, for builds without it).
    #[arg(long)]
    retention_bytes: Option<u64>,
    /// The volume scenario's --segment-bytes (not passed if not given);
    /// the roll scenario's (1 MiB if not given).
    #[arg(long)]
    segment_bytes: Option<u64>,
}

/// Context switches of every thread of `pid` so far (voluntary and not).
fn context_switches(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .filter_map(Result::ok)
        .filter_map(|t| std::fs::read_to_string(t.path().join("status")).ok())
        .flat_map(|status| {
            status
                .lines()
                .filter(|l| l.contains("ctxt_switches:"))
                .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .collect::<Vec<_>>()
        })
        .sum()
}

/// A figure from a stats line.
fn stat(line: &str, name: &str) -> u64 {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// A status figure of `pid`, KiB (`VmRSS:`, `VmHWM:`).
fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// A broker started with `extra` arguments on a free port, until it
/// listens; returns it, its address, and how long it took to listen.
fn start(bin: &str, extra: &[String]) -> (std::process::Child, String, Duration) {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let started = Instant::now();
    let mut child = Command::new(bin)
        .args(["--listen", &addr, "--stats-ms", "60000"])
        .args(extra)
        .stderr(Stdio::inherit())
        .stdout(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("start {bin}: {e}"));
    let mut s = loop {
        if let Ok(s) = TcpStream::connect(&addr) {
            break s;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("{bin} {extra:?} exited before listening: {status}");
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    let took = started.elapsed();
    // The topics produced to, made through Metadata (the one request that
    // creates topics).
    s.write_all(&metadata_frame(
        Some(&["volume", "roll", "lat", "cpu"]),
        true,
    ))
    .unwrap();
    read_frame(&mut s);
    (child, addr, took)
}

/// The volume scenario: `args.volume_gib` GiB of 1 MB batches (1,000
/// records of 1,000 bytes, acks=1) produced while a consumer fetches
/// behind them, 1 MiB at a time; the broker's RSS every GiB, its peak;
/// then, with a data directory, its restart time on what is kept beside
/// one on an empty directory (three restarts each, alternated).
fn volume(args: &Args) {
    let bin = args.bin.display().to_string();
    let mut extra: Vec<String> = Vec::new();
    if let Some(bytes) = args.segment_bytes {
        extra.extend(["--segment-bytes".into(), bytes.to_string()]);
    }
    if let Some(bytes) = args.retention_bytes {
        extra.extend([
            "--retention-bytes".into(),
            bytes.to_string(),
            "--retention-check-interval-ms".into(),
            "1000".into(),
        ]);
    }
    if let Some(dir) = &args.data_dir {
        let _ = std::fs::remove_dir_all(dir);
        extra.extend(["--data-dir".into(), dir.display().to_string()]);
    }
    let (mut child, addr, _) = start(&bin, &extra);
    let pid = child.id();
    let connect = || {
        let s = TcpStream::connect(&addr).unwrap();
        s.set_nodelay(true).unwrap();
        s
    };
    let (mut producer, mut consumer) = (connect(), connect());
    let request = produce_values("volume", 1_000, Bytes::from(vec![b'v'; 1_000]));
    let per_request = request.len() as u64;
    let requests = (args.volume_gib << 30) / per_request;
    let started = Instant::now();
    let mut read = 0u64;
    let mut offset = 0i64;
    for i in 1..=requests {
        producer.write_all(&request).unwrap();
        let mut answer = read_frame(&mut producer);
        answer.advance(4); // correlation id
        let produced = ProduceResponse::decode(&mut answer, 7).expect("a produce answer");
        let code = produced.responses[0].partition_responses[0].error_code;
        assert_eq!(code, 0, "produce {i} refused: error {code}");
        // The consumer reads the batch just produced (from the page cache).
        consumer.write_all(&fetch("volume", offset, 0)).unwrap();
        let mut answer = read_frame(&mut consumer);
        answer.advance(4);
        read += answer.len() as u64;
        offset += 1_000;
        if (i * per_request) >> 30 != ((i - 1) * per_request) >> 30 {
            let rss = status_kib(pid, "VmRSS:");
            println!(
                "volume: {} GiB produced, {} GiB fetched, RSS {} MiB, {:.0} MB/s",
                (i * per_request) >> 30,
                read >> 30,
                rss / 1024,
                (i * per_request) as f64 / started.elapsed().as_secs_f64() / 1e6
            );
        }
    }
    println!(
        "volume: {:.2} GB produced and {:.2} GB fetched in {:.1} s; broker RSS at the end {} MiB, peak {} MiB (VmHWM)",
        (requests * per_request) as f64 / 1e9,
        read as f64 / 1e9,
        started.elapsed().as_secs_f64(),
        status_kib(pid, "VmRSS:") / 1024,
        status_kib(pid, "VmHWM:") / 1024,
    );
    drop((producer, consumer));
    let _ = child.kill();
    let _ = child.wait();
    let Some(dir) = &args.data_dir else {
        return;
    };
    let kept: u64 = walk(dir);
    let empty = dir.with_extension("empty");
    let _ = std::fs::remove_dir_all(&empty);
    for round in 1..=3 {
        for (name, data) in [("kept", dir), ("empty", &empty)] {
            let (mut child, _, took) =
                start(&bin, &["--data-dir".into(), data.display().to_string()]);
            println!(
                "restart {round}: {name} data directory ({:.2} GB): listening after {took:?}",
                if name == "kept" {
                    kept as f64 / 1e9
                } else {
                    0.0
                }
            );
            let _ = child.kill();
            let _ = child.wait();
        }
    }
    let _ = std::fs::remove_dir_all(&empty);
}

/// The bytes of the files under `dir`.
fn walk(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| match e.metadata() {
                    Ok(m) if m.is_dir() => walk(&e.path()),
                    Ok(m) => m.len(),
                    Err(_) => 0,
                })
                .sum()
        })
        .unwrap_or(0)
}

/// The roll scenario: 20,000 produces of 100 records (about 5 KB, acks=1)
/// to one partition of a broker on a fresh data directory with segments of
/// `--segment-bytes` (1 MiB: about 190 rolls), each timed from the request
/// to its answer.
fn roll(args: &Args) {
    let bin = args.bin.display().to_string();
    let dir = std::env::temp_dir().join(format!("pg-bench-roll-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let extra: Vec<String> = vec![
        "--data-dir".into(),
        dir.display().to_string(),
        "--segment-bytes".into(),
        args.segment_bytes.unwrap_or(1 << 20).to_string(),
    ];
    let (mut child, addr, _) = start(&bin, &extra);
    let mut producer = TcpStream::connect(&addr).unwrap();
    producer.set_nodelay(true).unwrap();
    let request = produce("roll", 100);
    let mut latencies = Vec::with_capacity(20_000);
    for _ in 0..20_000 {
        let sent = Instant::now();
        producer.write_all(&request).unwrap();
        read_frame(&mut producer);
        latencies.push(sent.elapsed());
    }
    let segments = std::fs::read_dir(dir.join("roll/0"))
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
                .count()
        })
        .unwrap_or(0);
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
    println!(
        "produce round trip while segments roll ({segments} segments, 20,000 produces of 100 records, acks=1, --data-dir): p50 {:?}, p99 {:?}, p99.9 {:?}, max {:?}",
        at(0.5),
        at(0.99),
        at(0.999),
        at(1.0)
    );
}

fn main() {
    let args = Args::parse();
    if args.only.contains(&Scenario::Volume) {
        volume(&args);
    }
    if args.only.contains(&Scenario::Roll) {
        roll(&args);
    }
    let on_request = |s: Scenario| matches!(s, Scenario::Volume | Scenario::Roll);
    let wants = |s: Scenario| !on_request(s) && (args.only.is_empty() || args.only.contains(&s));
    if !args.only.is_empty() && args.only.iter().all(|s| on_request(*s)) {
        return;
    }
    let bin = args.bin.display().to_string();

    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let mut child = Command::new(&bin)
        .args(["--listen", &addr, "--stats-ms", "1000"])
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("start {bin} (build it with --release first): {e}"));
    let pid = child.id();
    let stats = Arc::new(Mutex::new(String::new()));
    let last = Arc::clone(&stats);
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            *last.lock().unwrap() = line;
        }
    });
    // Every wait bounded: the broker listening within 30 s, each answer
    // within a minute (the longest long poll here is 30 s).
    let started = Instant::now();
    let connect = || loop {
        if let Ok(s) = TcpStream::connect(&addr) {
            s.set_nodelay(true).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
            return s;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{bin} did not listen on {addr} within 30 s"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    // The topics the scenarios use, made through Metadata (the one request
    // that creates topics): a produce to a topic that is not there is
    // refused, and a fetch of one waits its whole time.
    let mut admin = connect();
    admin
        .write_all(&metadata_frame(
            Some(&["lat", "cpu", "parked", "quiet"]),
            true,
        ))
        .unwrap();
    read_frame(&mut admin);

    if wants(Scenario::Latency) {
        // Produce-to-consume latency: a fetch waits (long poll), a produce
        // of one record completes it; from sending the produce to the
        // answer.
        let (mut producer, mut consumer) = (connect(), connect());
        producer.write_all(&produce("lat", 1)).unwrap();
        read_frame(&mut producer);
        let mut latencies = Vec::new();
        for offset in 1..=2_000i64 {
            consumer.write_all(&fetch("lat", offset, 10_000)).unwrap();
            std::thread::sleep(Duration::from_micros(200)); // let it park
            let sent = Instant::now();
            producer.write_all(&produce("lat", 1)).unwrap();
            let mut answer = read_frame(&mut consumer);
            latencies.push(sent.elapsed());
            answer.advance(4);
            read_frame(&mut producer);
        }
        latencies.sort();
        let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
        println!(
            "produce-to-consume latency (long poll), 2,000 records: p50 {:?}, p99 {:?}, max {:?}",
            at(0.5),
            at(0.99),
            at(1.0)
        );
    }

    if wants(Scenario::Cpu) {
        // The broker's CPU per message: 200,000 records, 100 per request.
        let mut producer = connect();
        let before = cpu(pid);
        let started = Instant::now();
        let request = produce("cpu", 100);
        for _ in 0..2_000 {
            producer.write_all(&request).unwrap();
            read_frame(&mut producer);
        }
        let produce_secs = started.elapsed().as_secs_f64();
        let per_message_ns = (cpu(pid) - before) * 1e9 / 200_000.0;
        println!(
            "broker CPU per message: {per_message_ns:.0} ns (200,000 records, 100 per produce, acks=1; {:.0} messages/s from one client)",
            200_000.0 / produce_secs
        );
    }

    if wants(Scenario::Parked) {
        // 1,000 fetches parked for 30 s, nothing produced: wake-ups and CPU
        // over 5 s.
        let parked: Vec<TcpStream> = (0..1_000)
            .map(|_| {
                let mut s = connect();
                s.write_all(&fetch("parked", 0, 30_000)).unwrap();
                s
            })
            .collect();
        std::thread::sleep(Duration::from_secs(2));
        let (w0, c0) = (stat(&stats.lock().unwrap(), "timer_wakeups"), cpu(pid));
        std::thread::sleep(Duration::from_secs(5));
        let (w1, c1) = (stat(&stats.lock().unwrap(), "timer_wakeups"), cpu(pid));
        println!(
            "1,000 fetches parked, nothing produced, over 5 s: {} timer wake-ups, {:.2} s of broker CPU",
            w1 - w0,
            c1 - c0
        );
        drop(parked);
    }

    if wants(Scenario::Idle) {
        // Idle consumers: each long-polls an empty partition again as soon
        // as its fetch expires empty.
        let stop = Arc::new(AtomicBool::new(false));
        // Fetches answered, counted by the clients (nothing is produced, so
        // every one expired): the broker's own stats line would cost CPU.
        let answered = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let consumers: Vec<_> = (0..args.idle_consumers)
            .map(|i| {
                let mut s = connect();
                let (stop, answered) = (Arc::clone(&stop), Arc::clone(&answered));
                let wait = args.idle_wait_ms;
                let spread = args.idle_spread.then(|| {
                    let step =
                        u64::try_from(wait).unwrap_or(0) * 1_000 / args.idle_consumers as u64;
                    Duration::from_micros(step * i as u64)
                });
                std::thread::spawn(move || {
                    if let Some(offset) = spread {
                        std::thread::sleep(offset);
                    }
                    while !stop.load(Ordering::Relaxed) {
                        s.write_all(&fetch("quiet", 0, wait)).unwrap();
                        read_frame(&mut s);
                        answered.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        std::thread::sleep(Duration::from_secs(2));
        let expired = || answered.load(Ordering::Relaxed);
        let (e0, c0, s0) = (expired(), cpu_fine(pid), context_switches(pid));
        let started = Instant::now();
        std::thread::sleep(Duration::from_secs(args.idle_secs));
        let (e1, c1, s1) = (expired(), cpu_fine(pid), context_switches(pid));
        let secs = started.elapsed().as_secs_f64();
        let fetches = (e1 - e0).max(1) as f64;
        println!(
            "{} idle consumers ({} ms long polls) over {secs:.1} s: {:.3} % of a core, {:.1} µs of broker CPU and {:.2} context switches per expired fetch ({} expired)",
            args.idle_consumers,
            args.idle_wait_ms,
            (c1 - c0) * 100.0 / secs,
            (c1 - c0) * 1e6 / fetches,
            (s1 - s0) as f64 / fetches,
            e1 - e0
        );
        stop.store(true, Ordering::Relaxed);
        for c in consumers {
            let _ = c.join();
        }
    }
    let _ = child.kill();
    let _ = child.wait();
}
