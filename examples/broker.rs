//! A tiny broker that parks fetches in a purgatory, like Kafka's.
//!
//! ```text
//! cargo run --example broker -- 9092     # or 0 for any free port
//! ```
//!
//! Line protocol over TCP (one request per line, one answer per line):
//!
//! ```text
//! PRODUCE <topic> <payload>                          -> OFFSET <offset>
//! FETCH <topic> <offset> <min_bytes> <max_wait_ms>   -> DATA <how> <next_offset> <bytes> [<payload>,<payload>,...]
//! anything else                                      -> ERR <reason>
//! ```
//!
//! A fetch answers at once (`how` = `now`) when `min_bytes` of payload are
//! available from `offset`; otherwise it parks in the purgatory, watched on
//! its topic, until a produce brings enough bytes (`completed`) or
//! `max_wait_ms` passes (`expired`, with whatever there is).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Duration;

use parking_lot::Mutex;
use purgatorio::{DelayedOperation, Purgatory};

/// The largest `max_wait_ms` accepted (five minutes).
const MAX_WAIT_MS: u64 = 300_000;

/// Topic logs: topic → messages, in offset order.
#[derive(Default)]
pub struct Logs {
    topics: Mutex<HashMap<String, Vec<String>>>,
}

impl Logs {
    /// Appends a message; returns its offset.
    fn append(&self, topic: &str, payload: &str) -> usize {
        let mut topics = self.topics.lock();
        let log = topics.entry(topic.to_string()).or_default();
        log.push(payload.to_string());
        log.len() - 1
    }

    /// The messages from `offset` on, and their total size in bytes.
    fn read(&self, topic: &str, offset: usize) -> (Vec<String>, usize) {
        let topics = self.topics.lock();
        let messages: Vec<String> = topics
            .get(topic)
            .map(|log| log.iter().skip(offset).cloned().collect())
            .unwrap_or_default();
        let bytes = messages.iter().map(String::len).sum();
        (messages, bytes)
    }
}

/// A fetch waiting for `min_bytes` from `offset`.
pub struct DelayedFetch {
    logs: Arc<Logs>,
    topic: String,
    offset: usize,
    min_bytes: usize,
    max_wait: Duration,
    /// Set when `try_complete` found enough bytes.
    satisfied: bool,
    /// Where the connection waits for its answer.
    reply: mpsc::Sender<String>,
}

impl DelayedOperation for DelayedFetch {
    fn delay(&self) -> Duration {
        self.max_wait
    }

    fn try_complete(&mut self) -> bool {
        let (_, bytes) = self.logs.read(&self.topic, self.offset);
        self.satisfied = bytes >= self.min_bytes;
        self.satisfied
    }

    fn on_complete(&mut self) {
        let how = if self.satisfied {
            "completed"
        } else {
            "expired"
        };
        let answer = data(&self.logs, &self.topic, self.offset, how);
        // The client may have gone; nothing to do then.
        let _ = self.reply.send(answer);
    }
}

/// A `DATA` answer with what is available from `offset`.
fn data(logs: &Logs, topic: &str, offset: usize, how: &str) -> String {
    let (messages, bytes) = logs.read(topic, offset);
    let next = offset + messages.len();
    if messages.is_empty() {
        format!("DATA {how} {next} 0")
    } else {
        format!("DATA {how} {next} {bytes} {}", messages.join(","))
    }
}

/// The broker: logs and the fetch purgatory.
pub struct Broker {
    logs: Arc<Logs>,
    fetches: Purgatory<String, DelayedFetch>,
}

impl Broker {
    /// A broker with empty logs.
    pub fn new() -> Result<Arc<Broker>, purgatorio::BuildError> {
        let fetches = Purgatory::builder()
            .timer(purgatorio::Timer::builder().thread_name("broker-fetch"))
            .build()?;
        Ok(Arc::new(Broker {
            logs: Arc::new(Logs::default()),
            fetches,
        }))
    }

    /// Answers one request line.
    pub fn handle(&self, line: &str) -> String {
        let mut words = line.trim_end().splitn(3, ' ');
        match words.next() {
            Some("PRODUCE") => {
                let (Some(topic), Some(payload)) = (words.next(), words.next()) else {
                    return "ERR usage: PRODUCE <topic> <payload>".into();
                };
                let offset = self.logs.append(topic, payload);
                // Wake the fetches parked on this topic.
                if let Err(e) = self.fetches.check_and_complete(&topic.to_string()) {
                    return format!("ERR {e}");
                }
                format!("OFFSET {offset}")
            }
            Some("FETCH") => match self.fetch(line) {
                Ok(answer) => answer,
                Err(reason) => format!("ERR {reason}"),
            },
            Some("") | None => "ERR empty request".into(),
            Some(other) => format!("ERR unknown command {other:?}"),
        }
    }

    /// Handles `FETCH <topic> <offset> <min_bytes> <max_wait_ms>`.
    fn fetch(&self, line: &str) -> Result<String, String> {
        let parts: Vec<&str> = line.split_whitespace().collect();
        let [_, topic, offset, min_bytes, max_wait_ms] = parts[..] else {
            return Err("usage: FETCH <topic> <offset> <min_bytes> <max_wait_ms>".into());
        };
        let number = |s: &str, what: &str| {
            s.parse::<u64>()
                .map_err(|_| format!("{what} must be a whole number, got {s:?}"))
        };
        let offset = number(offset, "offset")? as usize;
        let min_bytes = number(min_bytes, "min_bytes")? as usize;
        let max_wait_ms = number(max_wait_ms, "max_wait_ms")?;
        if max_wait_ms > MAX_WAIT_MS {
            return Err(format!("max_wait_ms must be at most {MAX_WAIT_MS}"));
        }
        let (tx, rx) = mpsc::channel();
        let op = DelayedFetch {
            logs: Arc::clone(&self.logs),
            topic: topic.to_string(),
            offset,
            min_bytes,
            max_wait: Duration::from_millis(max_wait_ms),
            satisfied: false,
            reply: tx,
        };
        match self
            .fetches
            .try_complete_else_watch(op, &[topic.to_string()])
        {
            Ok(true) => {
                // Completed before parking: its on_complete already answered.
                let answer = rx.recv().map_err(|e| e.to_string())?;
                Ok(answer.replacen("DATA completed", "DATA now", 1))
            }
            // Parked: wait for completion or expiry.
            Ok(false) => rx.recv().map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        }
    }
}

/// Serves one connection until the client hangs up.
fn connection(broker: Arc<Broker>, stream: TcpStream) -> std::io::Result<()> {
    let mut writer = stream.try_clone()?;
    for line in BufReader::new(stream).lines() {
        let line = match line {
            Ok(line) => line,
            // Not UTF-8: answer and go on with the next line.
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                writeln!(writer, "ERR request is not UTF-8")?;
                continue;
            }
            Err(e) => return Err(e),
        };
        let answer = broker.handle(&line);
        writeln!(writer, "{answer}")?;
    }
    Ok(())
}

/// Accepts connections forever, one thread each.
pub fn serve(listener: TcpListener, broker: Arc<Broker>) {
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let broker = Arc::clone(&broker);
        thread::spawn(move || {
            let _ = connection(broker, stream);
        });
    }
}

#[allow(dead_code)]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let port: u16 = match std::env::args().nth(1) {
        Some(p) => p
            .parse()
            .map_err(|_| format!("port must be 0..=65535, got {p:?}"))?,
        None => 9092,
    };
    let listener = TcpListener::bind(("127.0.0.1", port))?;
    println!("listening on {}", listener.local_addr()?);
    serve(listener, Broker::new()?);
    Ok(())
}
