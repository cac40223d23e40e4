//! The floor under an idle long poll: a server that does nothing but wait.
//!
//! ```sh
//! cargo build --release -p purgatorio-broker --example wake_floor
//! target/venv/bin/python broker/examples/wake_floor.py --bin target/release/examples/wake_floor
//! ```
//!
//! Each connection sends a frame (a 4-byte big-endian length and that many
//! bytes); the server sleeps `--delay-ms` on tokio's timer and answers with
//! a frame of `--answer-bytes`, then reads the next. It decodes nothing,
//! parks nothing and keeps no log: what a request costs it is the wake-up
//! for its arrival, a read, a timer and a write. Measured beside the broker
//! with the same client pattern, it says how much of the broker's CPU per
//! expired fetch any server pays that sleeps between requests.
//!
//! Flags: `--listen ADDR` (default 127.0.0.1:0; the address is printed on
//! stdout), `--threads N` (0: tokio's current-thread runtime; else a
//! multi-thread runtime with N workers, default 2, as the broker runs).

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The largest frame a client may send.
const MAX_FRAME: usize = 1 << 20;

/// The flags.
struct Flags {
    listen: String,
    threads: usize,
    delay: Duration,
    answer_bytes: usize,
}

fn flags() -> Result<Flags, String> {
    let mut flags = Flags {
        listen: "127.0.0.1:0".into(),
        threads: 2,
        delay: Duration::from_millis(500),
        answer_bytes: 100,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = || value.parse::<u64>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--listen" => flags.listen = value.clone(),
            "--threads" => flags.threads = number()? as usize,
            "--delay-ms" => flags.delay = Duration::from_millis(number()?),
            "--answer-bytes" => flags.answer_bytes = number()? as usize,
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    Ok(flags)
}

/// Answers one connection's frames, each after the delay, until it closes
/// or sends a frame out of bounds.
async fn serve(mut stream: TcpStream, delay: Duration, answer: Vec<u8>) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let mut buf = Vec::new();
    loop {
        let len = match stream.read_u32().await {
            Ok(len) => len as usize,
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        };
        if len > MAX_FRAME {
            return Err(std::io::Error::other("frame too large"));
        }
        buf.resize(len, 0);
        stream.read_exact(&mut buf).await?;
        tokio::time::sleep(delay).await;
        stream.write_all(&answer).await?;
    }
}

async fn run(flags: Flags) -> std::io::Result<()> {
    let listener = TcpListener::bind(&flags.listen).await?;
    println!("{}", listener.local_addr()?);
    let mut answer = (flags.answer_bytes as u32).to_be_bytes().to_vec();
    answer.resize(4 + flags.answer_bytes, 0);
    loop {
        let (stream, _) = listener.accept().await?;
        tokio::spawn(serve(stream, flags.delay, answer.clone()));
    }
}

fn main() {
    let flags = match flags() {
        Ok(flags) => flags,
        Err(e) => {
            eprintln!("wake_floor: {e}");
            std::process::exit(2);
        }
    };
    let runtime = match flags.threads {
        0 => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        n => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(n)
            .enable_all()
            .build(),
    };
    let result = runtime.and_then(|runtime| runtime.block_on(run(flags)));
    if let Err(e) = result {
        eprintln!("wake_floor: {e}");
        std::process::exit(1);
    }
}
