//! The crate's one error type.

use std::fmt;

/// Errors: bad input is refused before Redis is asked; Redis failures are
/// retried with backoff before they are reported.
#[derive(Debug)]
pub enum Error {
    /// An empty id, one over [`Config::max_id`](crate::Config::max_id)
    /// bytes, or one with a control character.
    InvalidId(String),
    /// A payload over [`Config::max_payload`](crate::Config::max_payload)
    /// bytes.
    PayloadTooLarge {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Redis refused the call (a script error, a wrong type).
    Redis(redis::RedisError),
    /// Redis could not be reached after
    /// [`Config::retries`](crate::Config::retries) tries.
    Unavailable {
        /// How many tries.
        tries: u32,
        /// The last failure.
        last: redis::RedisError,
    },
    /// Redis answered something this crate does not understand.
    Protocol(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidId(id) => write!(f, "invalid timer id {id:?}"),
            Error::PayloadTooLarge { len, max } => {
                write!(f, "payload of {len} bytes is over the limit of {max}")
            }
            Error::Redis(e) => write!(f, "redis refused the call: {e}"),
            Error::Unavailable { tries, last } => {
                write!(f, "redis unavailable after {tries} tries: {last}")
            }
            Error::Protocol(what) => write!(f, "unexpected reply from redis: {what}"),
        }
    }
}

impl std::error::Error for Error {}
