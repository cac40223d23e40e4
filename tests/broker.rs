//! The broker example over real sockets on loopback: parked fetches answered
//! by completion and by timeout, several clients, malformed input.

#[path = "../examples/broker.rs"]
#[allow(dead_code)]
mod broker;

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::thread;
use std::time::Duration;

/// Starts a broker on an ephemeral loopback port.
fn start() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let broker = broker::Broker::new().unwrap();
    thread::spawn(move || broker::serve(listener, broker));
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
