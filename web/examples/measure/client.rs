//! What the measurements share: the server child (started, read from
//! `/proc`, stopped by PID) and a raw HTTP/1.1 client, light enough to hold
//! 50,000 connections in the measuring process.

use std::io::BufRead;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use purgatorio_testkit::ChildGuard;
use purgatorio_web::BoxError;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// A `measure serve` child and its ports.
pub struct Server {
    /// The child, killed by PID when dropped.
    child: ChildGuard,
    /// Where it listens.
    pub addrs: Vec<SocketAddr>,
}

impl Server {
    /// Starts `measure serve` with `args`; waits for its ports.
    pub fn start(args: &[&str]) -> Result<Server, BoxError> {
        let child = Command::new(std::env::current_exe()?)
            .arg("serve")
            .args(args)
            .stdout(Stdio::piped())
            .spawn()?;
        let mut child = ChildGuard::new(child);
        let stdout = child.child().stdout.take().ok_or("no stdout")?;
        let mut line = String::new();
        std::io::BufReader::new(stdout).read_line(&mut line)?;
        let ports = line.trim().strip_prefix("ports ").ok_or("no ports line")?;
        let addrs = ports
            .split(',')
            .map(|port| Ok(SocketAddr::from(([127, 0, 0, 1], port.parse()?))))
            .collect::<Result<_, BoxError>>()?;
        Ok(Server { child, addrs })
    }

    /// The child's CPU time (user + system), in seconds.
    pub fn cpu_seconds(&self) -> f64 {
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap_or_default();
        let fields: Vec<f64> = stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .split_whitespace()
            .map(|v| v.parse().unwrap_or(0.0))
            .collect();
        // utime and stime: fields 14 and 15 of the line, 11 and 12 after the name.
        (fields.get(11).unwrap_or(&0.0) + fields.get(12).unwrap_or(&0.0)) / 100.0
    }

    /// The child's resident set, in bytes.
    pub fn rss_bytes(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|kb| kb.split_whitespace().next()?.parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    }

    /// How many GETs wait, by `/stats`.
    pub async fn waiting(&self) -> Result<usize, BoxError> {
        let mut connection = Connection::open(self.addrs[0]).await?;
        let answer = connection.send("GET", "/stats", "").await?;
        Ok(answer.body.trim().parse()?)
    }

    /// Waits until `count` GETs wait, at most `limit`.
    pub async fn until_waiting(&self, count: usize, limit: Duration) -> Result<(), BoxError> {
        let start = Instant::now();
        loop {
            let waiting = self.waiting().await?;
            if waiting == count {
                return Ok(());
            }
            if start.elapsed() > limit {
                return Err(format!("{waiting} GETs wait, not {count}, after {limit:?}").into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// An answer: its status, index header and body.
#[derive(Debug)]
pub struct Answer {
    /// The status code.
    pub status: u16,
    /// `X-Index`, or 0.
    pub index: u64,
    /// The body, as text.
    pub body: String,
}

/// A keep-alive HTTP/1.1 connection.
pub struct Connection {
    /// The socket, buffered for reading answers.
    stream: BufReader<TcpStream>,
}

impl Connection {
    /// Connects to `addr`.
    pub async fn open(addr: SocketAddr) -> std::io::Result<Connection> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(Connection {
            stream: BufReader::new(stream),
        })
    }

    /// Writes a request, without waiting for its answer.
    pub async fn write(&mut self, method: &str, path: &str, body: &str) -> std::io::Result<()> {
        let request = format!(
            "{method} {path} HTTP/1.1\r\nhost: bench\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        self.stream.get_mut().write_all(request.as_bytes()).await
    }

    /// Reads an answer.
    pub async fn read(&mut self) -> Result<Answer, BoxError> {
        let mut line = String::new();
        self.stream.read_line(&mut line).await?;
        let status = line.split_whitespace().nth(1).ok_or("no status")?.parse()?;
        let (mut index, mut length) = (0, 0);
        loop {
            line.clear();
            if self.stream.read_line(&mut line).await? == 0 {
                return Err("the connection closed mid-answer".into());
            }
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            let (name, value) = header.split_once(':').ok_or("a bad header")?;
            match name.to_ascii_lowercase().as_str() {
                "x-index" => index = value.trim().parse()?,
                "content-length" => length = value.trim().parse()?,
                _ => {}
            }
        }
        let mut body = vec![0; length];
        self.stream.read_exact(&mut body).await?;
        Ok(Answer {
            status,
            index,
            body: String::from_utf8(body)?,
        })
    }

    /// Sends a request and reads its answer.
    pub async fn send(&mut self, method: &str, path: &str, body: &str) -> Result<Answer, BoxError> {
        self.write(method, path, body).await?;
        self.read().await
    }
}

/// A multi-thread runtime with 2 workers: the machine's cores.
pub fn two_workers() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
}

/// The `p`-th percentile (0-100) of sorted `values`.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// Milliseconds, to two decimals.
pub fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1e3)
}
