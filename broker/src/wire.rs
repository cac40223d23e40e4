//! The wire: request frames in, answers out.
//!
//! A frame is a big-endian `i32` length and that many bytes. [`Frames`]
//! reads them from one connection into a buffer that grows as bytes arrive
//! (never by the length a frame announces), refuses a length outside
//! `8..=max`, and keeps reading ahead while a request is served only to
//! notice the client going away ([`Frames::closed`]). [`Answer`] is a
//! response with the versions to encode it in.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ResponseHeader, ResponseKind};
use kafka_protocol::protocol::Encodable;
use tokio::io::AsyncReadExt;
use tokio::net::tcp::OwnedReadHalf;

/// The smallest request frame: api key, version and correlation id.
pub const MIN_FRAME: usize = 8;

/// How many bytes a connection reads at a time, at most.
const READ_CHUNK: usize = 64 * 1024;

/// Bytes read ahead of the request being served, at most; past this the
/// connection stops reading until the request is answered.
const READ_AHEAD: usize = 64 * 1024;

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
            FrameError::Io(e) => write!(f, "cannot read a frame: {e}"),
        }
    }
}

impl std::error::Error for FrameError {}

/// The request frames of one connection.
pub struct Frames {
    /// The connection's read half.
    reader: OwnedReadHalf,
    /// Bytes read and not yet handed out as frames.
    buf: BytesMut,
    /// The largest frame accepted, bytes.
    max_frame: usize,
    /// Whether the client has gone (end of stream or an error).
    gone: bool,
}

impl Frames {
    /// Frames read from `reader`, each at most `max_frame` bytes.
    pub fn new(reader: OwnedReadHalf, max_frame: usize) -> Frames {
        Frames {
            reader,
            buf: BytesMut::new(),
            max_frame,
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
            Ok(length) if (MIN_FRAME..=self.max_frame).contains(&length) => Ok(Some(length)),
            _ => Err(FrameError::Length {
                announced: i64::from(announced),
                max: self.max_frame,
            }),
        }
    }

    /// Reads once, up to `want` more bytes; false at the end of the stream.
    async fn fill(&mut self, want: usize) -> Result<bool, std::io::Error> {
        self.buf.reserve(want.clamp(1, READ_CHUNK));
        let read = (&mut self.reader)
            .take(want.clamp(1, READ_CHUNK) as u64)
            .read_buf(&mut self.buf)
            .await;
        match read {
            Ok(0) => {
                self.gone = true;
                Ok(false)
            }
            Ok(_) => Ok(true),
            Err(e) => {
                self.gone = true;
                Err(e)
            }
        }
    }

    /// The next request frame (without its length), or `None` when the
    /// client closed the connection between frames.
    ///
    /// # Errors
    ///
    /// [`FrameError`] for a length out of bounds, or a client gone mid-frame.
    pub async fn next(&mut self) -> Result<Option<Bytes>, FrameError> {
        loop {
            let want = match self.announced()? {
                Some(length) if self.buf.len() >= 4 + length => {
                    self.buf.advance(4);
                    return Ok(Some(self.buf.split_to(length).freeze()));
                }
                Some(length) => 4 + length - self.buf.len(),
                None => 4 - self.buf.len(),
            };
            if self.gone || !self.fill(want).await.map_err(FrameError::Io)? {
                return if self.buf.is_empty() {
                    Ok(None)
                } else {
                    Err(FrameError::Io(std::io::ErrorKind::UnexpectedEof.into()))
                };
            }
        }
    }

    /// Resolves once the client goes away; meanwhile reads ahead (at most
    /// [`READ_AHEAD`] bytes, then it only waits). Cancel-safe: bytes read
    /// stay buffered for [`next`](Self::next).
    pub async fn closed(&mut self) {
        while !self.gone && self.buf.len() < READ_AHEAD {
            if !matches!(self.fill(READ_AHEAD - self.buf.len()).await, Ok(true)) {
                return;
            }
        }
        if !self.gone {
            std::future::pending::<()>().await;
        }
    }
}

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
    /// The answer's frame: length, header, response.
    ///
    /// # Errors
    ///
    /// [`EncodeError`] if the response does not fit its version.
    pub fn encode(&self) -> Result<Bytes, EncodeError> {
        let fail = |reason: String| EncodeError {
            version: self.version,
            reason,
        };
        let mut frame = BytesMut::new();
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
