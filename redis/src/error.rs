//! The crate's one error type.

use std::fmt;

/// How many characters of a refused id, name or url an error keeps: enough
/// to recognise it, never a 100 KB echo.
const PREVIEW_CHARS: usize = 48;

/// The first [`PREVIEW_CHARS`] characters of `text`, with `…` when cut.
pub(crate) fn preview(text: &str) -> String {
    match text.char_indices().nth(PREVIEW_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

/// What is wrong with a name (a timer id, a namespace, a consumer name):
/// empty, over `max` bytes (`too_long` says so in the error), or holding
/// a control character; `None` if nothing. The one check of a name: each
/// kind adds its own rules after it (a namespace refuses braces).
pub(crate) fn name_fault(name: &str, max: usize, too_long: &'static str) -> Option<&'static str> {
    if name.is_empty() {
        Some("empty")
    } else if name.len() > max {
        Some(too_long)
    } else if name.chars().any(char::is_control) {
        Some("holds a control character")
    } else {
        None
    }
}

/// Errors: bad input is refused before Redis is asked; Redis failures are
/// retried with backoff before they are reported.
#[derive(Debug)]
pub enum Error {
    /// An empty id, one over [`Config::max_id`](crate::Config::max_id)
    /// bytes, or one with a control character.
    InvalidId {
        /// The id's first characters.
        preview: String,
        /// Its length, bytes.
        len: usize,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A namespace that is empty, too long, or holds a brace or a control
    /// character (it becomes the keys' hash tag).
    InvalidNamespace {
        /// The namespace's first characters.
        preview: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A [`Config`](crate::Config) setting out of its range.
    InvalidConfig {
        /// The setting.
        field: &'static str,
        /// Its range.
        why: &'static str,
    },
    /// An argument out of its range (a count of 0, an empty consumer name).
    InvalidArgument {
        /// The argument.
        name: &'static str,
        /// Its range.
        why: &'static str,
    },
    /// A deadline past [`MAX_DEADLINE_MS`](crate::MAX_DEADLINE_MS), or a
    /// delay that would put one there.
    DeadlineOutOfRange {
        /// The deadline asked for, ms since the Unix epoch (saturated).
        at_ms: u64,
        /// The latest deadline accepted.
        max_ms: u64,
    },
    /// A payload over [`Config::max_payload`](crate::Config::max_payload)
    /// bytes.
    PayloadTooLarge {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The url is not a `redis://host:port/db` url.
    InvalidUrl {
        /// The url's first characters.
        preview: String,
        /// What the parser said.
        source: redis::RedisError,
    },
    /// A `rediss://` url, but this crate is built without its `tls`
    /// feature.
    TlsUnsupported,
    /// The TLS handshake refused the server's certificate: signed by no
    /// trusted CA (a private CA goes in
    /// [`Config::tls_ca_pem`](crate::Config)), expired, or for another
    /// host. Not retried.
    TlsCertificate(redis::RedisError),
    /// Redis refused the call (a script error, a wrong type).
    Redis(redis::RedisError),
    /// Redis could not be reached, or did not answer within
    /// [`Config::response_timeout`](crate::Config::response_timeout),
    /// after [`Config::retries`](crate::Config::retries) tries.
    Unavailable {
        /// How many tries.
        tries: u32,
        /// The last failure.
        last: redis::RedisError,
    },
    /// Redis answered something this crate does not understand.
    Protocol(String),
}

impl Error {
    /// Whether this is [`Error::Unavailable`]: Redis down, unreachable or
    /// not answering, worth trying again later.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Error::Unavailable { .. })
    }

    /// Whether this is a data error: Redis refused the call because a key
    /// of the namespace holds another type than this crate writes there
    /// (`WRONGTYPE`: another application overwrote it) or the consumer
    /// group is missing (`NOGROUP`). Not an outage; it may mend (an
    /// operator deletes the stray key), so the loops back off and try
    /// again, and [`Timers::check`](crate::Timers::check) lists the timers
    /// it strands.
    ///
    /// # Examples
    ///
    /// ```
    /// use purgatorio_redis::Error;
    ///
    /// let wrong = redis::RedisError::from((redis::ErrorKind::TypeError, "WRONGTYPE"));
    /// assert!(Error::Redis(wrong).is_data_error());
    /// ```
    pub fn is_data_error(&self) -> bool {
        let Error::Redis(e) = self else { return false };
        matches!(e.code(), Some("WRONGTYPE" | "NOGROUP"))
            || e.kind() == redis::ErrorKind::TypeError
            || e.to_string().contains("WRONGTYPE")
    }

    /// `error` as a failure no retry mends: a refused TLS certificate, or
    /// Redis refusing the call.
    pub(crate) fn refused(error: redis::RedisError) -> Error {
        if certificate_refused(&error) {
            Error::TlsCertificate(error)
        } else {
            Error::Redis(error)
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidId { preview, len, why } => {
                write!(f, "invalid timer id {preview:?} ({len} bytes): {why}")
            }
            Error::InvalidNamespace { preview, why } => {
                write!(f, "invalid namespace {preview:?}: {why}")
            }
            Error::InvalidConfig { field, why } => write!(f, "invalid config: {field} {why}"),
            Error::InvalidArgument { name, why } => write!(f, "invalid {name}: {why}"),
            Error::DeadlineOutOfRange { at_ms, max_ms } => write!(
                f,
                "deadline of {at_ms} ms since the epoch is past the latest accepted, {max_ms}"
            ),
            Error::PayloadTooLarge { len, max } => {
                write!(f, "payload of {len} bytes is over the limit of {max}")
            }
            Error::InvalidUrl { preview, source } => {
                write!(f, "malformed redis url {preview:?}: {source}")
            }
            Error::TlsUnsupported => f.write_str(
                "rediss:// needs TLS: build purgatorio-redis with its `tls` feature, \
                 or use redis:// through a TLS tunnel",
            ),
            Error::TlsCertificate(e) => write!(
                f,
                "redis's TLS certificate was refused ({e}); \
                 a private CA goes in Config::tls_ca_pem"
            ),
            Error::Redis(e) => write!(f, "redis refused the call: {e}"),
            Error::Unavailable { tries, last } => {
                write!(f, "redis unavailable after {tries} tries: {last}")
            }
            Error::Protocol(what) => write!(f, "unexpected reply from redis: {what}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::InvalidUrl { source, .. }
            | Error::Redis(source)
            | Error::TlsCertificate(source) => Some(source),
            Error::Unavailable { last, .. } => Some(last),
            _ => None,
        }
    }
}

/// Whether `error` is the server's TLS certificate refused: signed by no
/// trusted CA, expired, or for another host. No retry mends that.
pub(crate) fn certificate_refused(error: &redis::RedisError) -> bool {
    // `redis` 0.27 keeps the `io::Error` that carries rustls's error to
    // itself (no `source`), so its text is all there is to go by; rustls
    // words every certificate error so.
    error.is_io_error() && error.to_string().contains("invalid peer certificate")
}

/// Whether `error` is worth another try (the connection, not the call).
pub(crate) fn transient(error: &redis::RedisError) -> bool {
    !certificate_refused(error) && transient_kind(error)
}

/// Whether `error` is of a kind worth another try.
fn transient_kind(error: &redis::RedisError) -> bool {
    error.is_io_error()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
        || error.is_timeout()
        || matches!(
            error.kind(),
            redis::ErrorKind::BusyLoadingError
                | redis::ErrorKind::TryAgain
                // A failover or resharding under way: the next connection
                // asks the cluster where the namespace's slot went.
                | redis::ErrorKind::Moved
                | redis::ErrorKind::Ask
                | redis::ErrorKind::ClusterDown
                | redis::ErrorKind::MasterDown
                | redis::ErrorKind::ReadOnly
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_refused_empty_too_long_or_with_a_control_character() {
        assert_eq!(name_fault("", 4, "long"), Some("empty"));
        assert_eq!(name_fault("abcd", 4, "long"), None);
        assert_eq!(name_fault("abcde", 4, "long"), Some("long"));
        assert_eq!(
            name_fault("a\nb", 4, "long"),
            Some("holds a control character")
        );
        // Bytes, not characters: "é" is two.
        assert_eq!(name_fault("éé", 4, "long"), None);
        assert_eq!(name_fault("ééé", 4, "long"), Some("long"));
    }

    #[test]
    fn a_long_id_is_cut_in_messages() {
        let id = "x".repeat(100_000);
        let error = Error::InvalidId {
            preview: preview(&id),
            len: id.len(),
            why: "longer than 256 bytes",
        };
        let message = error.to_string();
        assert!(message.len() < 200, "{message}");
        assert!(message.contains("100000 bytes"), "{message}");
        assert_eq!(preview("short"), "short");
        assert_eq!(preview(&"é".repeat(60)).chars().count(), PREVIEW_CHARS + 1);
    }
}
