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
use purgatorio::{Completion, DelayedOperation, Purgatory};

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
    /// Where the connection waits for its answer.
    reply: mpsc::Sender<String>,
}

impl DelayedOperation for DelayedFetch {
    fn delay(&self) -> Duration {
        self.max_wait
    }

    fn try_complete(&mut self) -> bool {
        let (_, bytes) = self.logs.read(&self.topic, self.offset);
        bytes >= self.min_bytes
    }

    fn on_complete(&mut self, completion: Completion) {
        let how = if completion.is_timeout() {
            "expired"
        } else {
            "completed"
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

/// The broker over real sockets on loopback: parked fetches answered by
/// completion and by timeout, several clients, malformed input. `cargo test`
/// runs them (`test = true` in `Cargo.toml`).
#[cfg(test)]
mod tests {
    use super::{serve, Broker};
    use std::io::{BufRead, BufReader, Write};
    use std::net::{SocketAddr, TcpListener, TcpStream};
    use std::thread;
    use std::time::Duration;

    /// Starts a broker on an ephemeral loopback port.
    fn start() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let broker = Broker::new().unwrap();
        thread::spawn(move || serve(listener, broker));
        addr
    }

    /// A line-protocol client.
    struct Client {
        writer: TcpStream,
        reader: BufReader<TcpStream>,
    }

    impl Client {
        fn connect(addr: SocketAddr) -> Client {
            let stream = TcpStream::connect(addr).unwrap();
            // A bound so that a bug fails the test instead of hanging it.
            stream
                .set_read_timeout(Some(Duration::from_secs(30)))
                .unwrap();
            Client {
                writer: stream.try_clone().unwrap(),
                reader: BufReader::new(stream),
            }
        }

        fn send(&mut self, line: &str) {
            writeln!(self.writer, "{line}").unwrap();
        }

        fn recv(&mut self) -> String {
            let mut line = String::new();
            self.reader.read_line(&mut line).unwrap();
            line.trim_end().to_string()
        }

        fn ask(&mut self, line: &str) -> String {
            self.send(line);
            self.recv()
        }
    }

    #[test]
    fn fetch_with_enough_data_answers_at_once() {
        let addr = start();
        let mut c = Client::connect(addr);
        assert_eq!(c.ask("PRODUCE t hello"), "OFFSET 0");
        assert_eq!(c.ask("PRODUCE t world"), "OFFSET 1");
        assert_eq!(c.ask("FETCH t 0 10 5000"), "DATA now 2 10 hello,world");
        assert_eq!(c.ask("FETCH t 1 1 5000"), "DATA now 2 5 world");
    }

    #[test]
    fn parked_fetch_is_completed_by_a_produce_from_another_client() {
        let addr = start();
        let mut consumer = Client::connect(addr);
        let mut producer = Client::connect(addr);
        consumer.send("FETCH orders 0 8 60000");
        // The fetch parks (nothing to read); the produce completes it.
        assert_eq!(producer.ask("PRODUCE orders abc"), "OFFSET 0");
        assert_eq!(producer.ask("PRODUCE orders defgh"), "OFFSET 1");
        assert_eq!(consumer.recv(), "DATA completed 2 8 abc,defgh");
    }

    #[test]
    fn parked_fetch_expires_with_what_there_is() {
        let addr = start();
        let mut c = Client::connect(addr);
        assert_eq!(c.ask("PRODUCE slow x"), "OFFSET 0");
        assert_eq!(c.ask("FETCH slow 0 100 50"), "DATA expired 1 1 x");
        assert_eq!(c.ask("FETCH empty 0 1 20"), "DATA expired 0 0");
    }

    #[test]
    fn several_clients_park_on_several_topics() {
        let addr = start();
        let consumers: Vec<_> = (0..8)
            .map(|i| {
                thread::spawn(move || {
                    let mut c = Client::connect(addr);
                    c.ask(&format!("FETCH topic{} 0 3 60000", i % 4))
                })
            })
            .collect();
        // Let the consumers connect and park; whatever the timing, each fetch
        // is answered by completion: either parked and woken, or served at once.
        let mut producer = Client::connect(addr);
        thread::sleep(Duration::from_millis(50));
        for t in 0..4 {
            assert_eq!(producer.ask(&format!("PRODUCE topic{t} xyz")), "OFFSET 0");
        }
        for c in consumers {
            let answer = c.join().unwrap();
            assert!(
                answer == "DATA completed 1 3 xyz" || answer == "DATA now 1 3 xyz",
                "{answer}"
            );
        }
    }

    #[test]
    fn malformed_requests_get_errors_and_the_connection_survives() {
        let addr = start();
        let mut c = Client::connect(addr);
        for bad in [
            "",
            "HELLO",
            "PRODUCE",
            "PRODUCE onlytopic",
            "FETCH t",
            "FETCH t x 1 1",
            "FETCH t 0 -1 1",
            "FETCH t 0 1 99999999999",
        ] {
            let answer = c.ask(bad);
            assert!(answer.starts_with("ERR "), "{bad:?} -> {answer}");
        }
        c.writer.write_all(b"\xff\xfe\n").unwrap();
        assert_eq!(c.recv(), "ERR request is not UTF-8");
        assert_eq!(c.ask("PRODUCE t ok"), "OFFSET 0");
        // The server survives a client that vanishes mid-fetch.
        let mut gone = Client::connect(addr);
        gone.send("FETCH t 1 1 30");
        drop(gone);
        let mut other = Client::connect(addr);
        assert_eq!(other.ask("FETCH t 0 1 1000"), "DATA now 1 2 ok");
    }
}
