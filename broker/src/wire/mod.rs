//! The wire: request frames in, answers out.
//!
//! A frame is a big-endian `i32` length and that many bytes. [`Frames`]
//! reads them from one connection under [`Limits`]:
//!
//! * a length outside `8..=max_request_bytes` closes the connection
//!   (Kafka's `socket.request.max.bytes`);
//! * every byte read is charged to one [`Budget`] shared by every
//!   connection (Kafka's `queued.max.request.bytes`) and stays charged
//!   until its request is answered; a connection whose bytes the budget
//!   cannot cover waits, reading nothing more, so the broker holds at most
//!   the budget plus one read ([`READ_CHUNK`]) per connection. A frame
//!   announcing 16 MiB and sending 4 bytes is charged 8 bytes, not 16 MiB;
//!   large frames in progress may hold only the budget's bulk pool, and
//!   small requests still find its reserve ([`budget`]);
//! * one connection holds at most its share of the budget
//!   (`connection_bytes`), or, while it is served nothing, the one request
//!   it is reading and one read: while a request is served, the next is
//!   read ahead only within the share;
//! * a request that has begun arriving and then sends nothing for
//!   `read_timeout` (seconds, not the idle time) is closed, and its bytes
//!   leave the budget;
//! * the buffer grows as bytes arrive, at most doubling what arrived (from
//!   [`SLACK`]), never by the length a frame announces;
//! * a connection silent for `idle` (Kafka's `connections.max.idle.ms`),
//!   between frames or in the middle of one, is closed.
//!
//! Answers go out through [`stream`]: a fetch's large records from their
//! log files, and an answer that makes no progress for `write_timeout`
//! closes its connection; nothing more is read from a connection until its
//! answer is written (Kafka's muting).
//!
//! While a request is served, [`Frames::closed`] reads on only to notice
//! the client going away. Each frame is then walked by [`scan`] against its
//! layout before anything decodes it. [`Answer`] is a response with the
//! versions to encode it in.

use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ResponseHeader, ResponseKind};
use kafka_protocol::protocol::Encodable;
use tokio::io::AsyncReadExt;
use tokio::net::tcp::OwnedReadHalf;

pub use budget::{Budget, Charge};

pub mod budget;
#[cfg(test)]
pub mod sample;
pub mod scan;
pub mod schema;
pub mod stream;

use crate::log::FileRange;
use stream::{Part, Prefix};

/// The smallest request frame: api key, version and correlation id.
pub const MIN_FRAME: usize = 8;

/// The least a connection's buffer reserves at once, bytes.
pub const SLACK: usize = 4096;

/// The most a connection reads at once, bytes.
pub const READ_CHUNK: usize = 64 * 1024;

/// What an answer's buffer starts with beyond a fetch answer's records,
/// bytes: room for the length prefix, the header and most answers.
pub const ANSWER_CAPACITY: usize = 256;

/// The bounds on what clients may make the broker hold.
#[derive(Clone, Debug)]
pub struct Limits {
    /// The largest request frame, bytes.
    pub max_request_bytes: usize,
    /// The bytes of requests read and not yet answered, across every
    /// connection: its size.
    pub queued_bytes: usize,
    /// The same budget: what is left of it.
    pub budget: Budget,
    /// The most of the budget one connection holds, bytes (but for the
    /// one request it reads while it is served nothing).
    pub connection_bytes: usize,
    /// How long a connection may send nothing.
    pub idle: Duration,
    /// How long a request that has begun arriving may send nothing.
    pub read_timeout: Duration,
    /// How long an answer may make no progress.
    pub write_timeout: Duration,
}

impl Limits {
    /// Limits of `max_request_bytes` per frame, `queued_bytes` in total
    /// and `connection_bytes` per connection, `idle` silence between
    /// requests, `read_timeout` within one and `write_timeout` in an
    /// answer.
    pub fn new(
        max_request_bytes: usize,
        queued_bytes: usize,
        connection_bytes: usize,
        idle: Duration,
        read_timeout: Duration,
        write_timeout: Duration,
    ) -> Limits {
        Limits {
            max_request_bytes,
            queued_bytes,
            budget: Budget::new(queued_bytes),
            connection_bytes,
            idle,
            read_timeout,
            write_timeout,
        }
    }
}

/// Why a connection stops reading frames.
#[derive(Debug)]
pub enum FrameError {
    /// The announced length is outside `8..=max`.
    Length {
        /// The length announced.
        announced: i64,
        /// The largest accepted.
        max: usize,
    },
    /// Nothing arrived for the idle time.
    Idle(Duration),
    /// A request began arriving, then nothing more for the read timeout.
    Stalled(Duration),
    /// The client went away mid-frame, or the socket failed.
    Io(std::io::Error),
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::Length { announced, max } => {
                write!(
                    f,
                    "a frame of {announced} bytes (accepted: {MIN_FRAME}..={max})"
                )
            }
            FrameError::Idle(idle) => write!(f, "nothing arrived for {idle:?}"),
            FrameError::Stalled(wait) => {
                write!(f, "a request stopped arriving for {wait:?}")
            }
            FrameError::Io(e) => write!(f, "cannot read a frame: {e}"),
        }
    }
}

impl std::error::Error for FrameError {}

/// A request frame (without its length prefix) and its charge to the
/// budget, released when the frame is dropped.
pub struct Frame {
    /// The frame's bytes.
    pub bytes: Bytes,
    /// Its charge; dropped once the request is answered.
    pub charge: Charge,
}

/// The request frames of one connection.
pub struct Frames {
    /// The connection's read half.
    reader: OwnedReadHalf,
    /// Bytes read and not yet handed out as frames.
    buf: BytesMut,
    /// The limits.
    limits: Limits,
    /// The charge of the bytes in `buf`, but for `owed`.
    charge: Charge,
    /// Bytes read and not yet charged.
    owed: usize,
    /// The charge of the frame last handed out, until the next is asked
    /// for (its request is then answered).
    serving: usize,
    /// Whether the client has gone (end of stream or an error).
    gone: bool,
}

impl Frames {
    /// Frames read from `reader` under `limits`.
    pub fn new(reader: OwnedReadHalf, limits: Limits) -> Frames {
        Frames {
            reader,
            buf: BytesMut::new(),
            limits,
            charge: Charge::default(),
            owed: 0,
            serving: 0,
            gone: false,
        }
    }

    /// The length of the frame at the head of the buffer, once its prefix
    /// is there.
    fn announced(&self) -> Result<Option<usize>, FrameError> {
        if self.buf.len() < 4 {
            return Ok(None);
        }
        let announced = i32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]);
        match usize::try_from(announced) {
            Ok(length) if (MIN_FRAME..=self.limits.max_request_bytes).contains(&length) => {
                Ok(Some(length))
            }
            _ => Err(FrameError::Length {
                announced: i64::from(announced),
                max: self.limits.max_request_bytes,
            }),
        }
    }

    /// Charges the bytes read and not yet charged, waiting while the
    /// budget is spent. Cancel-safe: what is not charged stays owed.
    async fn settle(&mut self) {
        // Bytes of a frame whose length is not read yet are at most a
        // first read's, small.
        let small = match self.announced() {
            Ok(Some(length)) => self.limits.budget.is_small(length + 4),
            _ => true,
        };
        while self.owed > 0 {
            let n = u32::try_from(self.owed.min(READ_CHUNK)).unwrap_or(u32::MAX);
            let charge = self.limits.budget.charge(n, small).await;
            // (Were the budget closed, the charge would be empty.)
            self.owed -= n as usize;
            self.charge.merge(charge);
        }
    }

    /// Reads once, to make room for `want` more bytes: growing the buffer by
    /// at most what it holds (from [`SLACK`]) if it lacks that room, then
    /// reading as much as its room takes (at most [`READ_CHUNK`]); false at
    /// the end of the stream.
    ///
    /// Reading into all the room, not just the `want` bytes of a length
    /// prefix, takes a small request in one read instead of two, and a
    /// short read tells tokio the socket is drained, so that
    /// [`closed`](Self::closed) then waits for readiness without another
    /// read.
    async fn fill(&mut self, want: usize) -> Result<bool, std::io::Error> {
        self.fill_within(want, READ_CHUNK).await
    }

    /// [`fill`](Self::fill), reading at most `most` bytes (at least 1).
    async fn fill_within(&mut self, want: usize, most: usize) -> Result<bool, std::io::Error> {
        let want = want.clamp(1, READ_CHUNK).min(self.buf.len().max(SLACK));
        if self.buf.capacity() - self.buf.len() < want {
            self.buf.reserve(want.max(SLACK));
        }
        let limit = (self.buf.capacity() - self.buf.len())
            .min(READ_CHUNK)
            .min(most.max(1));
        match (&mut self.reader)
            .take(limit as u64)
            .read_buf(&mut self.buf)
            .await
        {
            Ok(0) => {
                self.gone = true;
                Ok(false)
            }
            Ok(read) => {
                self.owed += read;
                Ok(true)
            }
            Err(e) => {
                self.gone = true;
                Err(e)
            }
        }
    }

    /// The head frame once it is whole and charged, or the bytes it still
    /// lacks.
    async fn step(&mut self) -> Result<Result<Frame, usize>, FrameError> {
        self.settle().await;
        let Some(length) = self.announced()? else {
            return Ok(Err(4 - self.buf.len()));
        };
        if self.buf.len() < 4 + length {
            return Ok(Err(4 + length - self.buf.len()));
        }
        let large = self.buf.capacity() > READ_CHUNK;
        self.buf.advance(4);
        let bytes = self.buf.split_to(length).freeze();
        if large {
            // What is left shares the frame's allocation: copy it out, so
            // that a large frame's memory goes when the frame does, not when
            // the connection does.
            self.buf = BytesMut::from(&self.buf[..]);
        }
        let charge = self.charge.split(4 + length);
        self.serving = charge.bytes();
        Ok(Ok(Frame { bytes, charge }))
    }

    /// The next request frame, or `None` when the client closed the
    /// connection between frames.
    ///
    /// # Errors
    ///
    /// [`FrameError`] for a length out of bounds, silence for the idle
    /// time, or a client gone mid-frame.
    pub async fn next(&mut self) -> Result<Option<Frame>, FrameError> {
        // The last frame is answered.
        self.serving = 0;
        let idle = self.limits.idle;
        loop {
            // Waiting for the budget is not the client's silence: only the
            // idle time bounds it.
            let step = tokio::time::timeout(idle, self.step())
                .await
                .map_err(|_| FrameError::Idle(idle))?;
            let want = match step? {
                Ok(frame) => return Ok(Some(frame)),
                Err(want) => want,
            };
            if self.gone {
                return self.ended();
            }
            // Within a request, silence is cut short: its bytes hold the
            // budget.
            let (wait, error) = if self.buf.is_empty() {
                (idle, FrameError::Idle(idle))
            } else {
                let wait = self.limits.read_timeout.min(idle);
                (wait, FrameError::Stalled(wait))
            };
            let filled = match tokio::time::timeout(wait, self.fill(want)).await {
                Ok(filled) => filled,
                Err(_) => return Err(error),
            };
            if !filled.map_err(FrameError::Io)? {
                return self.ended();
            }
        }
    }

    /// The stream ended: cleanly between frames, or cut mid-frame.
    fn ended(&self) -> Result<Option<Frame>, FrameError> {
        if self.buf.is_empty() {
            Ok(None)
        } else {
            Err(FrameError::Io(std::io::ErrorKind::UnexpectedEof.into()))
        }
    }

    /// Resolves once the client goes away; meanwhile reads on until the
    /// next frame is whole (a read may take more than it lacks, as
    /// [`fill`](Self::fill) does), charging what it reads (and only waiting
    /// once the budget is spent, the connection's share is reached, or the
    /// next frame is whole). Cancel-safe: bytes read stay buffered for
    /// [`next`](Self::next).
    pub async fn closed(&mut self) {
        loop {
            self.settle().await;
            let want = match self.announced() {
                Ok(None) => 4 - self.buf.len(),
                Ok(Some(length)) if self.buf.len() < 4 + length => 4 + length - self.buf.len(),
                // Whole, or out of bounds: `next` will say.
                _ => break,
            };
            // The connection's share: the request in service and what is
            // read of the next.
            let held = self.serving + self.charge.bytes() + self.owed;
            let room = self.limits.connection_bytes.saturating_sub(held);
            if room == 0 {
                break;
            }
            if self.gone || !matches!(self.fill_within(want, room).await, Ok(true)) {
                return;
            }
        }
        std::future::pending::<()>().await;
    }
}

/// Fetch's first flexible version (compact records).
const FETCH_FIRST_FLEXIBLE: i16 = 12;

/// An answer: a response and the versions to encode it in.
pub struct Answer {
    /// The request's correlation id.
    pub correlation_id: i32,
    /// The response header's version.
    pub header_version: i16,
    /// The response's version (the request's).
    pub version: i16,
    /// The response.
    pub response: ResponseKind,
    /// File ranges sent in the places of the response's records that
    /// hold [`stream::Marker::new`]`(i)`, for the `i`th.
    pub streamed: Vec<FileRange>,
}

/// A response that cannot be encoded in its version: a bug of ours.
#[derive(Debug)]
pub struct EncodeError {
    /// The version asked for.
    pub version: i16,
    /// What the encoder said.
    pub reason: String,
}

impl std::fmt::Display for EncodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "cannot encode a v{} response: {}",
            self.version, self.reason
        )
    }
}

impl std::error::Error for EncodeError {}

impl Answer {
    /// The answer's frame in parts to write: length, header, response,
    /// with the streamed file ranges in their markers' places.
    ///
    /// # Errors
    ///
    /// [`EncodeError`] if the response does not fit its version.
    pub fn encode_parts(self) -> Result<Vec<Part>, EncodeError> {
        let frame = self.encode()?;
        if self.streamed.is_empty() {
            return Ok(vec![Part::Bytes(frame)]);
        }
        // Fetch's records are compact bytes from its first flexible
        // version.
        let prefix = if self.version >= FETCH_FIRST_FLEXIBLE {
            Prefix::Compact
        } else {
            Prefix::Int32
        };
        stream::splice(frame, self.streamed, prefix, self.version)
    }

    /// The answer's frame: length, header, response (markers, not file
    /// ranges, in the places of streamed records).
    ///
    /// # Errors
    ///
    /// [`EncodeError`] if the response does not fit its version.
    fn encode(&self) -> Result<Bytes, EncodeError> {
        let fail = |reason: String| EncodeError {
            version: self.version,
            reason,
        };
        // Sized once: a fetch answer by what it holds (its records are
        // copied in once, not through every doubling of the buffer), any
        // other by what most answers take.
        let body = match &self.response {
            ResponseKind::Fetch(fetch) => fetch
                .compute_size(self.version)
                .map_err(|e| fail(e.to_string()))?,
            _ => 0,
        };
        let mut frame = BytesMut::with_capacity(ANSWER_CAPACITY + body);
        frame.put_i32(0);
        let mut header = ResponseHeader::default();
        header.correlation_id = self.correlation_id;
        header
            .encode(&mut frame, self.header_version)
            .map_err(|e| fail(e.to_string()))?;
        self.response
            .encode(&mut frame, self.version)
            .map_err(|e| fail(e.to_string()))?;
        let length = i32::try_from(frame.len() - 4).map_err(|e| fail(e.to_string()))?;
        frame[..4].copy_from_slice(&length.to_be_bytes());
        Ok(frame.freeze())
    }
}
