//! An async long-poll service on tokio: a reader waits up to N ms for data
//! on a topic, a writer's append completes every reader waiting on it. Each
//! wait is an operation parked in a [`Purgatory`], awaited as a future.
//!
//! ```text
//! cargo run --example long_poll -- 127.0.0.1:7070
//! ```
//!
//! The protocol is one line per request and one line per answer:
//!
//! * `APPEND <topic> <text>` → `OK <offset>`: appends `text` (the rest of
//!   the line) to `topic`.
//! * `READ <topic> <offset> <max_wait_ms>` → `DATA <offset> <text>` as soon
//!   as the topic has a record at `offset`, or `TIMEOUT` once `max_wait_ms`
//!   passed without one (never before).
//! * Anything else → `ERR <reason>`. A line longer than 4 KiB closes the
//!   connection after `ERR line too long`.
//!
//! A client that closes the connection (or just its sending side) while its
//! read waits cancels the read. Requests sent ahead of their answers queue
//! up, 16 at most. Try it with `nc 127.0.0.1 7070` in two terminals.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use parking_lot::Mutex;
use purgatorio::{Completion, DelayedRequest, Purgatory};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::OwnedReadHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

/// The longest request line accepted.
const MAX_LINE: usize = 4096;

/// The longest wait a reader may ask for.
const MAX_WAIT: Duration = Duration::from_secs(300);

/// The topics: append-only lists of records.
#[derive(Default)]
struct Topics {
    logs: Mutex<HashMap<String, Vec<String>>>,
}

impl Topics {
    /// The record at `offset` of `topic`, if it exists yet.
    fn get(&self, topic: &str, offset: usize) -> Option<String> {
        self.logs.lock().get(topic)?.get(offset).cloned()
    }

    /// Appends `text` to `topic`; returns its offset.
    fn append(&self, topic: &str, text: &str) -> usize {
        let mut logs = self.logs.lock();
        let log = logs.entry(topic.to_string()).or_default();
        log.push(text.to_string());
        log.len() - 1
    }
}

/// A read waiting for a record: done once the record exists. Its answer is
/// the record, or `None` at `max_wait`.
struct Read {
    topics: Arc<Topics>,
    topic: String,
    offset: usize,
    max_wait: Duration,
}

impl DelayedRequest for Read {
    type Output = Option<String>;
    fn delay(&self) -> Duration {
        self.max_wait
    }
    fn try_complete(&mut self) -> bool {
        self.topics.get(&self.topic, self.offset).is_some()
    }
    fn answer(&mut self, _: Completion) -> Option<String> {
        self.topics.get(&self.topic, self.offset)
    }
}

/// The service: the topics and the purgatory where reads wait.
#[derive(Clone)]
struct Service {
    topics: Arc<Topics>,
    reads: Purgatory<String, Read>,
}

impl Service {
    fn new() -> Self {
        let reads = Purgatory::builder()
            .name("long-poll")
            .build()
            .expect("default purgatory");
        Service {
            topics: Arc::default(),
            reads,
        }
    }

    /// Answers one request line.
    async fn answer(&self, line: &str) -> String {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["APPEND", topic, ..] => {
                let text = after_words(line, 2);
                let offset = self.topics.append(topic, text);
                let _ = self.reads.check_and_complete(*topic);
                format!("OK {offset}\n")
            }
            ["READ", topic, offset, max_wait] => {
                let (Ok(offset), Ok(max_wait)) = (offset.parse(), max_wait.parse()) else {
                    return "ERR offset and max_wait_ms must be numbers\n".into();
                };
                let max_wait = Duration::from_millis(max_wait);
                if max_wait > MAX_WAIT {
                    return format!("ERR max_wait_ms is at most {}\n", MAX_WAIT.as_millis());
                }
                self.read(topic, offset, max_wait).await
            }
            _ => {
                "ERR expected APPEND <topic> <text> or READ <topic> <offset> <max_wait_ms>\n".into()
            }
        }
    }

    /// Waits up to `max_wait` for record `offset` of `topic`.
    async fn read(&self, topic: &str, offset: usize, max_wait: Duration) -> String {
        let read = Read {
            topics: Arc::clone(&self.topics),
            topic: topic.to_string(),
            offset,
            max_wait,
        };
        // Dropped (the client went away), the read is cancelled at once.
        let parked = match self.reads.park(read, [topic.to_string()]) {
            Ok(parked) => parked.cancel_on_drop(),
            Err(_) => return "ERR shutting down\n".into(),
        };
        match parked.await {
            Some(Some(text)) => format!("DATA {offset} {text}\n"),
            Some(None) if self.reads.is_shut_down() => "ERR shutting down\n".into(),
            Some(None) => "TIMEOUT\n".into(),
            None => "ERR shutting down\n".into(),
        }
    }

    /// Serves one connection until it closes. Requests are read on a task
    /// of their own, so the end of the connection is noticed even while a
    /// read waits (and cancels it); requests sent ahead queue up.
    async fn serve(&self, stream: TcpStream) {
        // One write per answer, sent at once: no Nagle delay.
        let _ = stream.set_nodelay(true);
        let (reader, mut writer) = stream.into_split();
        let (requests_tx, mut requests) = mpsc::channel(16);
        let (gone_tx, mut gone) = watch::channel(false);
        let reading = tokio::spawn(read_requests(reader, requests_tx, gone_tx));
        while let Some(request) = requests.recv().await {
            let line = match request {
                Incoming::Line(line) => line,
                Incoming::TooLong => {
                    // The reader discards what follows for a moment, so
                    // this answer is not lost to a reset.
                    let _ = writer.write_all(b"ERR line too long\n").await;
                    let _ = writer.shutdown().await;
                    return;
                }
            };
            let answer = match std::str::from_utf8(&line) {
                Ok(text) => {
                    let answer = self.answer(text.trim_end());
                    tokio::pin!(answer);
                    tokio::select! {
                        // An answer that is ready wins over a close.
                        biased;
                        answer = &mut answer => answer,
                        // The client closed (or half-closed) the connection:
                        // dropping the answer cancels a waiting read.
                        _ = gone.wait_for(|gone| *gone) => break,
                    }
                }
                Err(_) => "ERR requests are UTF-8 text\n".into(),
            };
            if writer.write_all(answer.as_bytes()).await.is_err() {
                break;
            }
        }
        reading.abort();
    }
}

/// A request line, or news that one was too long.
enum Incoming {
    Line(Vec<u8>),
    TooLong,
}

/// Reads request lines into `requests` until the connection ends, then says
/// so on `gone`. A line over [`MAX_LINE`] ends it too, after the rest of the
/// input is discarded for a moment.
async fn read_requests(
    reader: OwnedReadHalf,
    requests: mpsc::Sender<Incoming>,
    gone: watch::Sender<bool>,
) {
    let mut reader = BufReader::new(reader);
    loop {
        let mut line = Vec::new();
        let mut limited = (&mut reader).take(MAX_LINE as u64 + 1);
        match limited.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => break,
            Ok(_) if line.len() > MAX_LINE => {
                let _ = requests.send(Incoming::TooLong).await;
                let (mut rest, mut sink) = ((&mut reader).take(1 << 20), tokio::io::sink());
                let drain = tokio::io::copy(&mut rest, &mut sink);
                let _ = tokio::time::timeout(Duration::from_secs(1), drain).await;
                break;
            }
            Ok(_) => {
                if requests.send(Incoming::Line(line)).await.is_err() {
                    break;
                }
            }
        }
    }
    let _ = gone.send(true);
}

/// `line` after its first `n` words and the whitespace that follows them.
fn after_words(line: &str, n: usize) -> &str {
    let mut rest = line.trim_start();
    for _ in 0..n {
        let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        rest = rest[end..].trim_start();
    }
    rest
}

/// Listens on `addr`; returns the bound address and the service.
async fn start(addr: &str) -> std::io::Result<(SocketAddr, Service)> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let service = Service::new();
    let accepting = service.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let service = accepting.clone();
            tokio::spawn(async move { service.serve(stream).await });
        }
    });
    Ok((local, service))
}

/// An async long-poll service on tokio: reads wait in a purgatory until a
/// record arrives or their `max_wait_ms` passes.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// The address to listen on.
    #[arg(default_value = "127.0.0.1:7070")]
    listen: String,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let (local, _service) = match start(&args.listen).await {
        Ok(started) => started,
        Err(e) => {
            eprintln!("error: cannot listen on {}: {e}", args.listen);
            return ExitCode::FAILURE;
        }
    };
    println!(
        "long-poll service on {local}; APPEND <topic> <text> | READ <topic> <offset> <max_wait_ms>"
    );
    std::future::pending::<()>().await;
    ExitCode::SUCCESS
}

/// The command line. `cargo test` builds this example as a test only, so
/// `tests/cli.rs` cannot run it as a program: its parser is tested here.
#[cfg(test)]
mod command_line {
    use super::*;

    #[test]
    fn help_exits_0_and_unknown_arguments_exit_2_with_usage() {
        let help = Args::try_parse_from(["long_poll", "--help"]).unwrap_err();
        assert_eq!(help.exit_code(), 0);
        assert!(help.to_string().contains("Usage: long_poll"), "{help}");
        let bogus = Args::try_parse_from(["long_poll", "--bogus"]).unwrap_err();
        assert_eq!(bogus.exit_code(), 2);
        assert!(bogus.to_string().contains("Usage: long_poll"), "{bogus}");
        let args = Args::try_parse_from(["long_poll"]).unwrap();
        assert_eq!(args.listen, "127.0.0.1:7070");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;
    use tokio::io::BufReader;

    const PATIENCE: Duration = Duration::from_secs(20);

    /// A client connection: send a line, read a line.
    struct Client {
        reader: BufReader<tokio::net::tcp::OwnedReadHalf>,
        writer: tokio::net::tcp::OwnedWriteHalf,
    }

    impl Client {
        async fn connect(addr: SocketAddr) -> Client {
            let (reader, writer) = TcpStream::connect(addr).await.unwrap().into_split();
            Client {
                reader: BufReader::new(reader),
                writer,
            }
        }

        async fn send(&mut self, line: &str) {
            self.writer.write_all(line.as_bytes()).await.unwrap();
        }

        async fn recv(&mut self) -> String {
            let mut line = String::new();
            tokio::time::timeout(PATIENCE, self.reader.read_line(&mut line))
                .await
                .expect("no answer")
                .unwrap();
            line
        }
    }

    async fn until(what: &str, mut done: impl FnMut() -> bool) {
        let start = Instant::now();
        while !done() {
            assert!(start.elapsed() < PATIENCE, "gave up waiting for {what}");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_append_completes_the_waiting_read() {
        let (addr, service) = start("127.0.0.1:0").await.unwrap();
        let mut reader = Client::connect(addr).await;
        reader.send("READ news 0 60000\n").await;
        until("the read to park", || service.reads.delayed() == 1).await;
        let mut writer = Client::connect(addr).await;
        writer.send("APPEND news hello world\n").await;
        assert_eq!(writer.recv().await, "OK 0\n");
        assert_eq!(reader.recv().await, "DATA 0 hello world\n");
        let metrics = service.reads.metrics();
        assert_eq!(
            (metrics.satisfied, metrics.expired),
            (1, 0),
            "completed, not timed out"
        );
        // A record already there is answered at once; answers keep coming
        // on the same connection.
        reader.send("READ news 0 60000\n").await;
        assert_eq!(reader.recv().await, "DATA 0 hello world\n");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn an_empty_read_answers_after_max_wait_never_before() {
        let (addr, service) = start("127.0.0.1:0").await.unwrap();
        let mut client = Client::connect(addr).await;
        let asked = Instant::now();
        client.send("READ empty 0 50\n").await;
        assert_eq!(client.recv().await, "TIMEOUT\n");
        assert!(
            asked.elapsed() >= Duration::from_millis(50),
            "answered early"
        );
        assert_eq!(service.reads.metrics().expired, 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_client_that_goes_away_frees_its_read() {
        let (addr, service) = start("127.0.0.1:0").await.unwrap();
        let mut client = Client::connect(addr).await;
        client.send("READ quiet 0 60000\n").await;
        until("the read to park", || service.reads.delayed() == 1).await;
        drop(client);
        until("the read to be cancelled", || service.reads.delayed() == 0).await;
        assert_eq!(service.reads.metrics().cancelled, 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_client_that_sends_ahead_and_goes_away_frees_its_read() {
        let (addr, service) = start("127.0.0.1:0").await.unwrap();
        let mut client = Client::connect(addr).await;
        client.send("READ quiet 0 60000\nHELLO\n").await;
        until("the read to park", || service.reads.delayed() == 1).await;
        drop(client);
        until("the read to be cancelled", || service.reads.delayed() == 0).await;
    }

    #[tokio::test(flavor = "current_thread")]
    async fn requests_sent_ahead_are_answered_in_order_and_text_keeps_its_spaces() {
        let (addr, _service) = start("127.0.0.1:0").await.unwrap();
        let mut client = Client::connect(addr).await;
        client
            .send("APPEND  t   two  words \nREAD t 0 1000\nAPPEND\tt\tx\nREAD t 1 0\n")
            .await;
        assert_eq!(client.recv().await, "OK 0\n");
        assert_eq!(client.recv().await, "DATA 0 two  words\n");
        assert_eq!(client.recv().await, "OK 1\n");
        assert_eq!(client.recv().await, "DATA 1 x\n");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_hundred_parked_readers_are_all_answered_by_one_append() {
        let (addr, service) = start("127.0.0.1:0").await.unwrap();
        let mut readers = Vec::new();
        for _ in 0..100 {
            let mut client = Client::connect(addr).await;
            client.send("READ busy 0 60000\n").await;
            readers.push(client);
        }
        until("every read to park", || service.reads.delayed() == 100).await;
        let mut writer = Client::connect(addr).await;
        writer.send("APPEND busy x\n").await;
        assert_eq!(writer.recv().await, "OK 0\n");
        for reader in &mut readers {
            assert_eq!(reader.recv().await, "DATA 0 x\n");
        }
        assert_eq!(service.reads.metrics().satisfied, 100);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn bad_requests_get_errors_and_a_long_line_closes_the_connection() {
        let (addr, _service) = start("127.0.0.1:0").await.unwrap();
        let mut client = Client::connect(addr).await;
        client.send("HELLO\n").await;
        assert!(client.recv().await.starts_with("ERR expected"));
        client.send("READ t x 10\n").await;
        assert!(client.recv().await.starts_with("ERR offset"));
        client.send("READ t 0 999999999\n").await;
        assert!(client.recv().await.starts_with("ERR max_wait_ms"));
        client
            .send(&format!("APPEND t {}\n", "y".repeat(10 * MAX_LINE)))
            .await;
        assert_eq!(client.recv().await, "ERR line too long\n");
        let mut rest = Vec::new();
        let closed = tokio::time::timeout(PATIENCE, client.reader.read_to_end(&mut rest)).await;
        assert!(
            closed.is_ok(),
            "the connection is closed (end of stream or reset)"
        );
        assert!(rest.len() < 64, "the long line is not echoed back");
    }
}
