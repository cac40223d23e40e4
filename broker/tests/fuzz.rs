//! A fuzzer over the wire format, run against the real broker process over
//! loopback: structured frames for every API and version the broker says it
//! serves (written from the request layouts, then mutated: bytes flipped,
//! integers set to their extremes, counts and lengths at their limits,
//! frames cut short or extended, bodies replaced by random bytes, keys and
//! versions that are not served, lengths out of bounds). Each frame is
//! followed by an ApiVersions probe on the same connection, so every frame
//! is known to have been served or to have closed its connection. Meanwhile
//! a bystander connection must keep being answered, and the broker's RSS
//! must stay bounded; at the end the process must be alive.
//!
//! The short run (in `cargo test`) sends 100,000 frames. A long run:
//!
//! ```text
//! PURGATORIO_FUZZ_FRAMES=10000000 PURGATORIO_FUZZ_SEED=7 \
//!     cargo test --release -p purgatorio-broker --test fuzz -- --nocapture
//! ```
//!
//! A frame that kills the broker is written to `target/fuzz-crash-*.bin`
//! and printed; keep it in [`REGRESSIONS`].

use std::io::Write;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};
use kafka_protocol::messages::{ApiKey, ApiVersionsResponse};
use kafka_protocol::protocol::Decodable;

mod common;
use common::{api_versions_frame, read_frame, Broker, PATIENCE};

// The broker's own layouts and sample writer, shared with its unit tests.
#[allow(dead_code)]
#[path = "../src/wire/sample.rs"]
mod sample;
#[allow(dead_code)]
#[path = "../src/wire/scan.rs"]
mod scan;
#[allow(dead_code)]
#[path = "../src/wire/schema.rs"]
mod schema;

use sample::sample;
use scan::request_schema;

/// Frames that once crashed the broker (or, in the issue, were reported to),
/// sent first in every run: `(what, frame with its length prefix)`.
const REGRESSIONS: &[(&str, &[u8])] = &[
    (
        "Metadata v1 claiming 2^31-1 topics (issue 24, item 1)",
        &[
            0, 0, 0, 14, 0, 3, 0, 1, 0, 0, 0, 7, 0, 0, 0x7f, 0xff, 0xff, 0xff,
        ],
    ),
    (
        "Produce v3 claiming 2^31-1 topics",
        &[
            0, 0, 0, 20, 0, 0, 0, 3, 0, 0, 0, 7, 0, 0, 0xff, 0xff, 0, 1, 0, 0, 3, 0xe8, 0x7f, 0xff,
            0xff, 0xff,
        ],
    ),
    (
        "Fetch v4 claiming 2^31-1 topics",
        &[
            0, 0, 0, 31, 0, 1, 0, 4, 0, 0, 0, 7, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 1, 0xf4, 0, 0,
            0, 1, 0, 0x10, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff,
        ],
    ),
    (
        "OffsetCommit v2 claiming 2^31-1 topics",
        &[
            0, 0, 0, 31, 0, 8, 0, 2, 0, 0, 0, 7, 0, 0, 0, 1, b'g', 0xff, 0xff, 0xff, 0xff, 0, 0,
            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0xff, 0xff, 0xff,
        ],
    ),
    (
        "Produce v4, a partition count of 2^31-2^16 (found by this fuzzer in main: \
         'memory allocation of 171793448960 bytes failed')",
        &[
            0, 0, 0, 22, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 0, 1, 0, 127, 255, 0, 0,
        ],
    ),
    (
        "Fetch v6, a count read from a string's bytes (found by this fuzzer in main: \
         'memory allocation of 51539607648 bytes failed')",
        &[
            0, 0, 0, 63, 0, 1, 0, 6, 0, 0, 0, 0, 0, 1, 110, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0,
            1, 0, 1, 0, 32, 0, 0, 1, 0, 1, 102, 0, 0, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 9, 0,
            1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1,
        ],
    ),
];

/// The largest RSS the broker may reach during the run, KiB.
const MAX_RSS_KIB: u64 = 256 * 1024;

/// How long a probe may take before its connection is taken for parked
/// (a fetch or join whose mutated timeout is long) and dropped.
const PROBE_WAIT: Duration = Duration::from_millis(50);

/// xorshift64*: a small, seeded, reproducible generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// The APIs and versions the broker serves, from its ApiVersions answer.
fn served(broker: &Broker) -> Vec<(ApiKey, i16)> {
    let mut s = broker.connect();
    s.write_all(&api_versions_frame()).unwrap();
    let mut answer = read_frame(&mut s).expect("an ApiVersions answer");
    answer.advance(4); // correlation id
    let versions = ApiVersionsResponse::decode(&mut answer, 0).unwrap();
    versions
        .api_keys
        .iter()
        .flat_map(|k| {
            let key = ApiKey::try_from(k.api_key).expect("a known key");
            (k.min_version..=k.max_version).map(move |v| (key, v))
        })
        .collect()
}

/// Integers at their extremes, as a mutation writes them.
const EXTREMES: &[&[u8]] = &[
    &[0x7f, 0xff, 0xff, 0xff],
    &[0x80, 0, 0, 0],
    &[0xff, 0xff, 0xff, 0xff],
    &[0xff, 0xff, 0xff, 0xfe],
    &[0, 0, 0, 0],
    &[0x7f, 0xff],
    &[0x80, 0x00],
    &[0xff, 0xff],
    &[0xff, 0xff, 0xff, 0xff, 0x0f],
    &[0xff, 0xff, 0xff, 0xff, 0xff],
    &[0x80, 0x80, 0x80, 0x80, 0x08],
    &[0xfe, 0xff, 0xff, 0xff, 0x07],
];

/// One fuzzed frame, with its length prefix.
fn fuzzed(rng: &mut Rng, served: &[(ApiKey, i16)], correlation: i32) -> Vec<u8> {
    let (key, version) = served[rng.below(served.len())];
    let schema = request_schema(key).expect("a layout for every API served");
    let header_version = key.request_header_version(version);
    let mut body = Vec::new();
    let mut seed = rng.next() as u8;
    let fill = rng.below(3) as u8;
    sample(
        &schema::REQUEST_HEADER,
        header_version,
        fill,
        &mut seed,
        &mut body,
    );
    body[..2].copy_from_slice(&(key as i16).to_be_bytes());
    body[2..4].copy_from_slice(&version.to_be_bytes());
    body[4..8].copy_from_slice(&correlation.to_be_bytes());
    let header_len = body.len();
    sample(schema, version, fill, &mut seed, &mut body);
    match rng.below(100) {
        // As written: valid.
        0..=9 => {}
        // A few bytes flipped.
        10..=29 => {
            for _ in 0..=rng.below(4) {
                let at = rng.below(body.len());
                body[at] ^= 1 << rng.below(8);
            }
        }
        // An integer, count or length at an extreme.
        30..=54 => {
            let extreme = EXTREMES[rng.below(EXTREMES.len())];
            if body.len() > header_len + extreme.len() {
                let at = header_len + rng.below(body.len() - header_len - extreme.len());
                body[at..at + extreme.len()].copy_from_slice(extreme);
            }
        }
        // Cut short.
        55..=64 => {
            let keep = 8 + rng.below(body.len() - 7);
            body.truncate(keep);
        }
        // Extended with random bytes.
        65..=69 => body.extend((0..rng.below(64)).map(|_| rng.next() as u8)),
        // Random bytes after a valid header.
        70..=84 => {
            body.truncate(header_len);
            body.extend((0..rng.below(96)).map(|_| rng.next() as u8));
        }
        // A key or version not served.
        85..=94 => {
            if rng.below(2) == 0 {
                body[..2].copy_from_slice(&(rng.next() as i16).to_be_bytes());
            } else {
                let bad = [version + 40, -1 - version, i16::MAX, i16::MIN][rng.below(4)];
                body[2..4].copy_from_slice(&bad.to_be_bytes());
            }
        }
        // A length out of bounds: negative, too short, or over the limit.
        _ => {
            let length: i32 = [-1, i32::MIN, 0, 7, i32::MAX, 200 << 20][rng.below(6)];
            let mut out = length.to_be_bytes().to_vec();
            out.extend(&body);
            return out;
        }
    }
    let mut out = (body.len() as i32).to_be_bytes().to_vec();
    out.extend(body);
    out
}

/// How a frame ended.
enum Outcome {
    /// Served: the probe behind it was answered.
    Served,
    /// The broker closed the connection over it.
    Closed,
    /// Still waiting (a long timeout): the connection is dropped.
    Parked,
}

/// Sends `frame` and a probe behind it on `stream`; reads until the probe
/// is answered or the connection ends.
fn send(stream: &mut TcpStream, frame: &[u8], probe: &Bytes, probe_id: i32) -> Outcome {
    let mut both = frame.to_vec();
    both.extend_from_slice(probe);
    if stream.write_all(&both).is_err() {
        return Outcome::Closed;
    }
    let started = Instant::now();
    loop {
        match read_frame(stream) {
            Some(answer) if answer.len() >= 4 => {
                if i32::from_be_bytes(answer[..4].try_into().unwrap()) == probe_id {
                    return Outcome::Served;
                }
            }
            Some(_) => panic!("an answer without a correlation id"),
            None if started.elapsed() >= PROBE_WAIT => {
                // A read timeout, or the end of the stream.
                let mut byte = [0u8; 1];
                stream.set_nonblocking(true).unwrap();
                let closed = matches!(std::io::Read::read(stream, &mut byte), Ok(0));
                return if closed {
                    Outcome::Closed
                } else {
                    Outcome::Parked
                };
            }
            None => return Outcome::Closed,
        }
    }
}

/// A fresh fuzzing connection, or `None` if the broker is gone.
fn connect(addr: &str) -> Option<TcpStream> {
    let s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(PROBE_WAIT)).unwrap();
    s.set_nodelay(true).unwrap();
    Some(s)
}

/// The probe frame: an ApiVersions v0 request with correlation `id`.
fn probe(id: i32) -> Bytes {
    let mut frame = api_versions_frame().to_vec();
    frame[8..12].copy_from_slice(&id.to_be_bytes());
    Bytes::from(frame)
}

/// Counts of what the frames did.
#[derive(Default)]
struct Counts {
    served: AtomicU64,
    closed: AtomicU64,
    parked: AtomicU64,
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn no_frame_crashes_the_broker_starves_a_bystander_or_grows_its_memory() {
    // Most frames go to a broker in memory, the rest to one with a data
    // directory (files made and removed by topic names from the wire, the
    // group commit, the offsets log).
    let frames = env("PURGATORIO_FUZZ_FRAMES", 100_000);
    let seed = env("PURGATORIO_FUZZ_SEED", 24);
    fuzz(Broker::start(2), frames * 3 / 5, seed);
    let dir = purgatorio_testkit::TempDir::new("broker-fuzz");
    let data = dir.path().join("data");
    fuzz(Broker::start_in(2, Some(&data)), frames * 2 / 5, seed + 1);
    // Nothing was written outside the data directory.
    let beside: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(beside, ["data"], "files beside the data directory");
}

/// Sends `frames` fuzzed frames (seeded by `seed`) to `broker`, with the
/// checks above.
fn fuzz(mut broker: Broker, frames: u64, seed: u64) {
    let workers = 16u64;
    let served = Arc::new(served(&broker));
    assert!(served.len() > 40, "served: {served:?}");
    eprintln!(
        "fuzzing {} API versions with {frames} frames, seed {seed}",
        served.len()
    );

    // The regressions first, each on its own connection.
    for (what, frame) in REGRESSIONS {
        let mut s = connect(&broker.addr).unwrap();
        let probe_id = 0x7fff_0000;
        let outcome = send(&mut s, frame, &probe(probe_id), probe_id);
        assert!(matches!(outcome, Outcome::Closed), "{what}: not refused");
        assert!(broker.alive(), "{what} killed the broker");
    }

    let counts = Arc::new(Counts::default());
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let threads: Vec<_> = (0..workers)
        .map(|w| {
            let (served, counts, stop) =
                (Arc::clone(&served), Arc::clone(&counts), Arc::clone(&stop));
            let addr = broker.addr.clone();
            std::thread::spawn(move || {
                let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (w + 1) << 32 | 1);
                let mut stream = connect(&addr);
                // The last frames sent: suspects if the broker dies.
                let mut last = std::collections::VecDeque::new();
                for i in 0..frames / workers {
                    if stop.load(Ordering::Relaxed) {
                        return Some(last);
                    }
                    let correlation = (i & 0x3fff_ffff) as i32;
                    let frame = fuzzed(&mut rng, &served, correlation);
                    if last.len() == 3 {
                        last.pop_front();
                    }
                    last.push_back(frame.clone());
                    let probe_id = 0x4000_0000 | correlation;
                    let Some(s) = stream.as_mut() else {
                        return Some(last);
                    };
                    match send(s, &frame, &probe(probe_id), probe_id) {
                        Outcome::Served => {
                            counts.served.fetch_add(1, Ordering::Relaxed);
                            continue;
                        }
                        Outcome::Closed => counts.closed.fetch_add(1, Ordering::Relaxed),
                        Outcome::Parked => counts.parked.fetch_add(1, Ordering::Relaxed),
                    };
                    stream = connect(&addr);
                    if stream.is_none() {
                        // The broker is gone: these frames may be why.
                        return Some(last);
                    }
                }
                None
            })
        })
        .collect();

    // The bystander: one connection, asked every 100 ms, always answered.
    let mut bystander = broker.connect();
    let mut max_rss = 0;
    let mut bystander_answered = true;
    while !threads.iter().all(|t| t.is_finished()) {
        let asked = Instant::now();
        bystander_answered = bystander.write_all(&api_versions_frame()).is_ok()
            && read_frame(&mut bystander).is_some()
            && asked.elapsed() < PATIENCE;
        if !broker.alive() || !bystander_answered {
            stop.store(true, Ordering::Relaxed);
            break;
        }
        max_rss = max_rss.max(broker.rss_kib());
        if max_rss > MAX_RSS_KIB {
            stop.store(true, Ordering::Relaxed);
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    if !bystander_answered {
        // It may be dying: give it a moment to be seen dead.
        let deadline = Instant::now() + Duration::from_secs(2);
        while broker.alive() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    let suspects: Vec<Vec<u8>> = threads
        .into_iter()
        .filter_map(|t| t.join().unwrap())
        .flatten()
        .collect();
    if !broker.alive() {
        for (i, frame) in suspects.iter().enumerate() {
            let path = purgatorio_testkit::target_dir().join(format!("fuzz-crash-{seed}-{i}.bin"));
            let _ = std::fs::write(&path, frame);
            eprintln!("suspect frame {}", path.display());
        }
        panic!("the broker died; each connection's last frames are in target/fuzz-crash-*.bin");
    }
    let total = counts.served.load(Ordering::Relaxed)
        + counts.closed.load(Ordering::Relaxed)
        + counts.parked.load(Ordering::Relaxed);
    eprintln!(
        "{total} frames in {:?}: {} served, {} closed their connection, {} parked; broker RSS at most {max_rss} KiB",
        started.elapsed(),
        counts.served.load(Ordering::Relaxed),
        counts.closed.load(Ordering::Relaxed),
        counts.parked.load(Ordering::Relaxed),
    );
    assert!(bystander_answered, "the bystander was not answered");
    assert!(max_rss <= MAX_RSS_KIB, "RSS reached {max_rss} KiB");
    assert_eq!(total, frames / workers * workers, "every frame was sent");
    assert!(broker.answers());
    assert_eq!(
        broker.stat("encode_errors"),
        0,
        "answers that could not be encoded"
    );
}
