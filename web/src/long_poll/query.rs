//! [`Query`]: a GET's `index` and `wait`, and the key's length, checked.

use std::fmt;
use std::time::Duration;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// The longest wait a request may ask for (10 minutes, Consul's cap); a
/// longer one is refused with 400, not shortened.
pub const MAX_WAIT: Duration = Duration::from_secs(600);

/// The wait of a request that gives an `index` but no `wait` (5 minutes,
/// Consul's default).
pub const DEFAULT_WAIT: Duration = Duration::from_secs(300);

/// The longest key, in bytes after percent-decoding.
///
/// A URI longer than 64 KiB never reaches the service: hyper answers it with
/// 414 (or 431 past its 400 KB head buffer) before any handler runs.
pub const MAX_KEY_BYTES: usize = 1024;

/// A GET's parameters: `index=N` asks to wait for a write past `N`, for at
/// most `wait` (`30s`, `1m30s`, `250ms`; units `ms`, `s`, `m`, `h`).
/// Without `index` the answer is immediate. Other parameters are ignored, as
/// Consul does.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use purgatorio_web::long_poll::{Query, BadRequest};
///
/// let query = Query::parse(Some("index=7&wait=1m30s"))?;
/// assert_eq!(query.index, Some(7));
/// assert_eq!(query.wait, Duration::from_secs(90));
/// assert_eq!(Query::parse(None)?.index, None);
/// assert!(matches!(Query::parse(Some("wait=-1")), Err(BadRequest::Wait(_))));
/// # Ok::<(), BadRequest>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Query {
    /// The index the client has seen; `None`: answer at once.
    pub index: Option<u64>,
    /// How long to wait for a write past `index`.
    pub wait: Duration,
}

/// Why a request was refused: answered 400 with this message.
///
/// # Examples
///
/// ```
/// use purgatorio_web::long_poll::{Query, BadRequest};
///
/// let err = Query::parse(Some("index=abc")).unwrap_err();
/// assert_eq!(err.to_string(), "index must be a whole number from 0 to 2^64-1, not \"abc\"");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BadRequest {
    /// `index` is not a whole number (what it was, cut to 32 bytes).
    Index(String),
    /// `wait` is not a duration such as `30s` (what it was, cut to 32 bytes).
    Wait(String),
    /// `wait` is longer than [`MAX_WAIT`].
    WaitTooLong,
    /// The key is longer than [`MAX_KEY_BYTES`] (its length).
    KeyTooLong(usize),
}

impl fmt::Display for BadRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BadRequest::Index(given) => write!(
                f,
                "index must be a whole number from 0 to 2^64-1, not {given:?}"
            ),
            BadRequest::Wait(given) => write!(
                f,
                "wait must be a duration such as 30s, 1m30s or 250ms (units ms, s, m, h), not {given:?}"
            ),
            BadRequest::WaitTooLong => {
                write!(f, "wait is at most {}s", MAX_WAIT.as_secs())
            }
            BadRequest::KeyTooLong(len) => {
                write!(f, "the key is {len} bytes; at most {MAX_KEY_BYTES}")
            }
        }
    }
}

impl std::error::Error for BadRequest {}

impl IntoResponse for BadRequest {
    fn into_response(self) -> Response {
        (StatusCode::BAD_REQUEST, format!("{self}\n")).into_response()
    }
}

impl Query {
    /// Parses a query string (what follows `?`, if anything).
    ///
    /// # Errors
    ///
    /// [`BadRequest::Index`], [`BadRequest::Wait`] or
    /// [`BadRequest::WaitTooLong`] for a parameter that is not what it
    /// should be.
    ///
    /// # Examples
    ///
    /// ```
    /// use purgatorio_web::long_poll::{Query, BadRequest};
    ///
    /// assert_eq!(Query::parse(Some("wait=10y")), Err(BadRequest::Wait("10y".into())));
    /// assert_eq!(Query::parse(Some("wait=11m")), Err(BadRequest::WaitTooLong));
    /// ```
    pub fn parse(query: Option<&str>) -> Result<Query, BadRequest> {
        let mut parsed = Query {
            index: None,
            wait: DEFAULT_WAIT,
        };
        for pair in query.unwrap_or("").split('&') {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            match name {
                "index" => {
                    let index = value.parse().map_err(|_| BadRequest::Index(cut(value)))?;
                    parsed.index = Some(index);
                }
                "wait" => {
                    let wait = parse_wait(value).ok_or_else(|| BadRequest::Wait(cut(value)))?;
                    if wait > MAX_WAIT {
                        return Err(BadRequest::WaitTooLong);
                    }
                    parsed.wait = wait;
                }
                _ => {}
            }
        }
        Ok(parsed)
    }

    /// A GET's key and query string, checked: [`check_key`](Self::check_key)
    /// then [`parse`](Self::parse).
    ///
    /// # Errors
    ///
    /// As those two.
    ///
    /// # Examples
    ///
    /// ```
    /// use purgatorio_web::long_poll::Query;
    ///
    /// assert_eq!(Query::of_get("config", Some("index=3"))?.index, Some(3));
    /// assert!(Query::of_get(&"k".repeat(2000), None).is_err());
    /// # Ok::<(), purgatorio_web::long_poll::BadRequest>(())
    /// ```
    pub fn of_get(key: &str, query: Option<&str>) -> Result<Query, BadRequest> {
        Self::check_key(key)?;
        Self::parse(query)
    }

    /// Checks a key's length.
    ///
    /// # Errors
    ///
    /// [`BadRequest::KeyTooLong`] past [`MAX_KEY_BYTES`].
    ///
    /// # Examples
    ///
    /// ```
    /// use purgatorio_web::long_poll::{Query, BadRequest, MAX_KEY_BYTES};
    ///
    /// assert!(Query::check_key("config").is_ok());
    /// let long = "k".repeat(MAX_KEY_BYTES + 1);
    /// assert_eq!(Query::check_key(&long), Err(BadRequest::KeyTooLong(MAX_KEY_BYTES + 1)));
    /// ```
    pub fn check_key(key: &str) -> Result<(), BadRequest> {
        if key.len() > MAX_KEY_BYTES {
            return Err(BadRequest::KeyTooLong(key.len()));
        }
        Ok(())
    }
}

/// `value`, cut to 32 bytes at a character boundary, for an error message.
fn cut(value: &str) -> String {
    let mut end = value.len().min(32);
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    value[..end].to_string()
}

/// A duration as one or more `<digits><unit>` groups (`1m30s`), units `ms`,
/// `s`, `m`, `h`; `None` for anything else, a sign or an overflow.
fn parse_wait(text: &str) -> Option<Duration> {
    let mut rest = text;
    let mut total = Duration::ZERO;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit())?;
        let (number, tail) = rest.split_at(digits);
        let number: u64 = number.parse().ok()?;
        let units = tail
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(units);
        let one = match unit {
            "ms" => Duration::from_millis(1),
            "s" => Duration::from_secs(1),
            "m" => Duration::from_secs(60),
            "h" => Duration::from_secs(3600),
            _ => return None,
        };
        total = total.checked_add(one.checked_mul(u32::try_from(number).ok()?)?)?;
        rest = tail;
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_parse_in_groups_and_everything_else_is_refused() {
        let ms = Duration::from_millis;
        assert_eq!(parse_wait("0s"), Some(ms(0)));
        assert_eq!(parse_wait("250ms"), Some(ms(250)));
        assert_eq!(parse_wait("30s"), Some(ms(30_000)));
        assert_eq!(parse_wait("1m30s"), Some(ms(90_000)));
        assert_eq!(parse_wait("1h"), Some(ms(3_600_000)));
        for bad in [
            "",
            "-1",
            "-1s",
            "10y",
            "30",
            "s",
            "1.5s",
            "1m30",
            "+1s",
            "99999999999s",
            "1 s",
        ] {
            assert_eq!(parse_wait(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn errors_quote_at_most_32_bytes_of_the_input() {
        let long = "é".repeat(40);
        let Err(BadRequest::Index(quoted)) = Query::parse(Some(&format!("index={long}"))) else {
            panic!("a bad index");
        };
        assert!(quoted.len() <= 32 && long.starts_with(&quoted), "{quoted}");
        assert_eq!(
            Query::parse(Some("wait=10m&index=3&x=y&flag")),
            Ok(Query {
                index: Some(3),
                wait: MAX_WAIT
            })
        );
    }
}
