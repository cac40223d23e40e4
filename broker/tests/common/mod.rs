//! What the broker's tests share: the broker as a child process on a free
//! loopback port (stopped by PID), its stats line, and raw frames.

#![allow(dead_code)] // each test binary uses its own part

mod wire;
#[allow(unused_imports)] // the binaries that ask through raw requests use it
pub use wire::ask;
#[allow(unused_imports)] // the binaries that produce record batches use it
pub use wire::record_batch;
#[allow(unused_imports)] // `decoded`: the binaries of the admin APIs use it
pub use wire::{answer, decoded, frame, metadata_frame, produce_request, read_frame};
#[allow(unused_imports)] // the binaries that pipeline requests use them
pub use wire::{receive, send};

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::ApiKey;
use purgatorio_testkit::{free_port, wait_for, ChildGuard};

/// How long any wait of a test may last.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// The broker binary under test: `PURGATORIO_BROKER_BIN` if set (to run
/// the tests against another build, such as an older commit's), else this
/// package's.
pub fn broker_bin() -> PathBuf {
    std::env::var_os("PURGATORIO_BROKER_BIN")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_purgatorio-broker")))
}

/// The broker, its address, and the last stats line it printed.
pub struct Broker {
    /// The process.
    pub child: ChildGuard,
    /// Its `host:port`.
    pub addr: String,
    /// Its last stats line.
    stats: Arc<Mutex<String>>,
}

impl Broker {
    /// A broker with in-memory partitions, `partitions` per topic.
    pub fn start(partitions: u32) -> Broker {
        Broker::start_with(partitions, None, &[])
    }

    /// A broker keeping its partitions in `data_dir`, if given.
    pub fn start_in(partitions: u32, data_dir: Option<&Path>) -> Broker {
        Broker::start_with(partitions, data_dir, &[])
    }

    /// A broker with more command-line arguments.
    /// A free port may be taken by another process before the broker
    /// binds it: the broker then exits, and it is tried on another.
    pub fn start_with(partitions: u32, data_dir: Option<&Path>, extra: &[&str]) -> Broker {
        for _ in 0..5 {
            let addr = format!("127.0.0.1:{}", free_port());
            if let Some(broker) = Broker::try_start_on(&addr, partitions, data_dir, extra) {
                return broker;
            }
        }
        panic!("no free port kept long enough for the broker to listen on it, five times");
    }

    /// A broker listening on `addr` (say, a killed one's).
    pub fn start_on(
        addr: &str,
        partitions: u32,
        data_dir: Option<&Path>,
        extra: &[&str],
    ) -> Broker {
        Broker::try_start_on(addr, partitions, data_dir, extra).unwrap_or_else(|| {
            panic!("the broker exited before listening on {addr} (taken by another process?)")
        })
    }

    /// A broker listening on `addr`; `None` if it exited first (the
    /// address taken: whoever answers there is not this broker, which
    /// only counts as listening once it wrote its first stats line).
    fn try_start_on(
        addr: &str,
        partitions: u32,
        data_dir: Option<&Path>,
        extra: &[&str],
    ) -> Option<Broker> {
        let addr = addr.to_string();
        let mut command = Command::new(broker_bin());
        if let Some(dir) = data_dir {
            command.arg("--data-dir").arg(dir);
        }
        let mut child = ChildGuard::new(
            command
                .args(["--listen", &addr, "--partitions", &partitions.to_string()])
                .args(["--stats-ms", "50"])
                .args(extra)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("start the broker"),
        );
        let stderr = child.child().stderr.take().expect("stderr");
        let stats = Arc::new(Mutex::new(String::new()));
        let last = Arc::clone(&stats);
        let started = Arc::new(AtomicBool::new(false));
        let stats_seen = Arc::clone(&started);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.starts_with("stats:") {
                    stats_seen.store(true, Ordering::Release);
                }
                *last.lock().unwrap() = line;
            }
        });
        let listening = wait_for("the broker to listen", PATIENCE, || {
            if child.child().try_wait().ok().flatten().is_some() {
                return Some(false);
            }
            (started.load(Ordering::Acquire) && TcpStream::connect(&addr).is_ok()).then_some(true)
        });
        listening.then_some(Broker { child, addr, stats })
    }

    /// A figure from the latest stats line, after a fresh one arrived.
    pub fn stat(&self, name: &str) -> u64 {
        let seen = self.stats.lock().unwrap().clone();
        wait_for("a fresh stats line", PATIENCE, || {
            let now = self.stats.lock().unwrap().clone();
            (now != seen && !now.is_empty()).then_some(())
        });
        let line = self.stats.lock().unwrap().clone();
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {line:?}"))
    }

    /// Waits until the stat `name` satisfies `ok`.
    pub fn wait_stat(&self, name: &str, ok: impl Fn(u64) -> bool) -> u64 {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let v = self.stat(name);
            if ok(v) {
                return v;
            }
            assert!(Instant::now() < deadline, "{name} stayed at {v}");
        }
    }

    /// The process's resident set, KiB (`VmRSS`).
    pub fn rss_kib(&self) -> u64 {
        self.status_kib("VmRSS:")
    }

    /// The most the process's resident set has been, KiB (`VmHWM`).
    pub fn peak_kib(&self) -> u64 {
        self.status_kib("VmHWM:")
    }

    /// The process's allocated address space, KiB (`VmData`: what it
    /// reserved, touched or not).
    pub fn data_kib(&self) -> u64 {
        self.status_kib("VmData:")
    }

    /// A figure of `/proc/PID/status`, KiB.
    fn status_kib(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("the broker is running");
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("no {field} in /proc/PID/status"))
    }

    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.child().try_wait(), Ok(None))
    }

    /// A connection with every read bounded by [`PATIENCE`].
    pub fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(&self.addr).unwrap();
        s.set_read_timeout(Some(PATIENCE)).unwrap();
        s
    }

    /// Creates `topics` (with the broker's `--partitions`) through
    /// Metadata, the one request that creates topics.
    pub fn create(&self, topics: &[&str]) {
        let mut s = self.connect();
        s.write_all(&metadata_frame(Some(topics), true)).unwrap();
        assert!(read_frame(&mut s).is_some(), "Metadata not answered");
    }

    /// Whether a fresh connection is answered (an ApiVersions round trip).
    pub fn answers(&self) -> bool {
        let mut s = self.connect();
        s.write_all(&api_versions_frame()).is_ok() && read_frame(&mut s).is_some()
    }
}

/// An ApiVersions v0 request.
pub fn api_versions_frame() -> Bytes {
    frame(ApiKey::ApiVersions, 0, |_| {})
}

/// Sends `bytes` on a fresh connection, shuts the write half, and asserts
/// the broker closes the connection without an answer and without hanging.
pub fn assert_closed_without_answer(broker: &Broker, bytes: &[u8]) {
    let mut s = broker.connect();
    let _ = s.write_all(bytes);
    let _ = s.shutdown(std::net::Shutdown::Write);
    let mut rest = Vec::new();
    match s.read_to_end(&mut rest) {
        Ok(_) => assert!(rest.is_empty(), "answered {rest:?}"),
        Err(e) => assert_ne!(e.kind(), std::io::ErrorKind::WouldBlock, "hung"),
    }
}

/// The Python Kafka client, as in `clients.rs`.
pub const KAFKA_PYTHON: &str = "kafka-python>=3";

/// Runs kcat with `args` on `input`; returns (success, stdout, stderr).
/// Its input is fed and its output drained while it runs, so that more
/// than a pipe's buffer of either never blocks it.
pub fn kcat(args: &[&str], input: &[u8]) -> (bool, String, String) {
    let mut child = ChildGuard::new(
        Command::new(purgatorio_testkit::require_program("kcat", "kcat"))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run kcat"),
    );
    let mut stdin = child.child().stdin.take().unwrap();
    let input = input.to_vec();
    let feed = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            String::from_utf8_lossy(&bytes).into_owned()
        })
    };
    let stdout = drain(Box::new(child.child().stdout.take().unwrap()));
    let stderr = drain(Box::new(child.child().stderr.take().unwrap()));
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.child().try_wait().unwrap() {
            break status;
        }
        assert!(started.elapsed() < PATIENCE, "kcat {args:?} hung");
        std::thread::sleep(Duration::from_millis(10));
    };
    let _ = feed.join();
    (
        status.success(),
        stdout.join().unwrap_or_default(),
        stderr.join().unwrap_or_default(),
    )
}

/// Runs `probe_client.py` with `args`; returns its stdout.
pub fn probe(args: &[&str]) -> String {
    let python = purgatorio_testkit::python_with(&[KAFKA_PYTHON]);
    let mut child = Command::new(python)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/probe_client.py"
        ))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run probe_client.py");
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        assert!(
            started.elapsed() < PATIENCE,
            "probe_client.py {args:?} hung"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "probe_client.py {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A JoinGroup v1 of `member` (empty: a new member) to `group` with a
/// rebalance timeout of `rebalance_ms`.
pub fn join_frame(group: &str, member: &str, rebalance_ms: i32) -> bytes::Bytes {
    join_frame_of(1, group, member, rebalance_ms)
}

/// A JoinGroup of `version` (1 to 5), as [`join_frame`].
pub fn join_frame_of(version: i16, group: &str, member: &str, rebalance_ms: i32) -> bytes::Bytes {
    use kafka_protocol::messages::{join_group_request, JoinGroupRequest};
    use kafka_protocol::protocol::{Encodable, StrBytes};
    let mut protocol = join_group_request::JoinGroupRequestProtocol::default();
    protocol.name = StrBytes::from_static_str("range");
    protocol.metadata = bytes::Bytes::from_static(b"\0\0\0\0\0\0");
    let mut request = JoinGroupRequest::default();
    request.group_id = StrBytes::from_string(group.to_string()).into();
    request.session_timeout_ms = 60_000;
    request.rebalance_timeout_ms = rebalance_ms;
    request.member_id = StrBytes::from_string(member.to_string());
    request.protocol_type = StrBytes::from_static_str("consumer");
    request.protocols = vec![protocol];
    frame(ApiKey::JoinGroup, version, |b| {
        request.encode(b, version).unwrap()
    })
}

/// Everything kcat reads of `topic`'s partition 0 from the beginning:
/// (offset, value) pairs.
pub fn consume(broker: &Broker, topic: &str) -> Vec<(i64, String)> {
    consume_partition(broker, topic, 0)
}

/// Everything kcat reads of `topic`'s `partition` from the beginning:
/// (offset, value) pairs.
pub fn consume_partition(broker: &Broker, topic: &str, partition: i32) -> Vec<(i64, String)> {
    let partition = partition.to_string();
    let (ok, out, err) = kcat(
        &[
            "-b",
            &broker.addr,
            "-t",
            topic,
            "-C",
            "-p",
            &partition,
            "-o",
            "beginning",
            "-e",
            "-q",
            "-f",
            "%o %s\\n",
        ],
        b"",
    );
    assert!(ok, "kcat failed: {err}");
    out.lines()
        .map(|l| {
            let (offset, value) = l.split_once(' ').unwrap();
            (offset.parse().unwrap(), value.to_string())
        })
        .collect()
}
