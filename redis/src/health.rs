//! How a node rides out trouble: the backoff between tries, the log of
//! each change in Redis's health (once per outage, once per data error, and
//! once when calls succeed again), and the wait for Redis at start.
//!
//! Two kinds of trouble, logged as what they are:
//!
//! | kind | what it is | logged |
//! |---|---|---|
//! | outage | Redis down, unreachable, not answering ([`Error::Unavailable`]) | `redis unavailable (…); retrying with backoff` … `redis answers again after` |
//! | data error | Redis answered but a key of the namespace holds another type (`WRONGTYPE`), or the consumer group is missing ([`Error::is_data_error`]) | `data error, not an outage (…); backing off` … `calls succeed again after` |
//! | refused | Redis refused the call otherwise (`NOAUTH`, a script error) | `redis refused the call (…); backing off` … `calls succeed again after` |
//!
//! Both are tried again with the same backoff, forever: a loop never
//! gives up. A data error often strands timers (an index key overwritten by
//! another application): `Timers::check` lists them.

use std::time::{Duration, Instant};

use crate::Error;

/// The first wait after a failed call, ms; it doubles per failure.
const BACKOFF_FIRST_MS: u64 = 50;

/// The longest wait between two tries: the most a node lags behind Redis
/// answering again (see `redis/README.md`, "Outages").
pub const MAX_BACKOFF: Duration = Duration::from_millis(500);

/// A wait before try number `failures + 1` of a failed call: 50 ms
/// doubling, at most [`MAX_BACKOFF`].
pub(crate) fn backoff(failures: u32) -> Duration {
    Duration::from_millis(BACKOFF_FIRST_MS << failures.saturating_sub(1).min(10)).min(MAX_BACKOFF)
}

/// What a failing loop is riding out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Trouble {
    /// Redis does not answer.
    Outage,
    /// A key of the namespace holds another type, or the group is
    /// missing.
    Data,
    /// Redis refuses the call otherwise.
    Refused,
}

impl Trouble {
    fn of(error: &Error) -> Trouble {
        if error.is_unavailable() {
            Trouble::Outage
        } else if error.is_data_error() {
            Trouble::Data
        } else {
            Trouble::Refused
        }
    }
}

/// A node's view of Redis's health, so that a long-running loop logs each
/// change once (down or refusing, then answering again) rather than each
/// failed call.
#[derive(Debug)]
pub(crate) struct Health {
    /// Who is speaking in the log: `scheduler of payments`,
    /// `consumer worker-1`.
    who: String,
    /// The trouble being ridden out and when it began.
    trouble: Option<(Trouble, Instant)>,
    /// Failed calls in a row.
    failures: u32,
}

impl Health {
    /// Redis is presumed up.
    pub(crate) fn new(who: String) -> Health {
        Health {
            who,
            trouble: None,
            failures: 0,
        }
    }

    /// A call failed with `error`: logs the trouble if it is new (or of
    /// another kind than the last), and returns how long to wait before the
    /// next try.
    pub(crate) fn failed(&mut self, error: &Error) -> Duration {
        let trouble = Trouble::of(error);
        if self.trouble.map(|(t, _)| t) != Some(trouble) {
            self.trouble = Some((trouble, Instant::now()));
            let most = MAX_BACKOFF.as_millis();
            match (trouble, error) {
                (Trouble::Outage, Error::Unavailable { last, .. }) => log::warn!(
                    "{}: redis unavailable ({last}); retrying with backoff up to {most} ms",
                    self.who
                ),
                (Trouble::Outage, other) => log::warn!(
                    "{}: redis unavailable ({other}); retrying with backoff up to {most} ms",
                    self.who
                ),
                (Trouble::Data, error) => log::warn!(
                    "{}: data error, not an outage ({error}); backing off up to {most} ms and \
                     trying again (`purgatorio-redis check` lists the timers it strands)",
                    self.who
                ),
                (Trouble::Refused, error) => log::warn!(
                    "{}: {error}; backing off up to {most} ms and trying again",
                    self.who
                ),
            }
        }
        self.failures += 1;
        backoff(self.failures)
    }

    /// A call succeeded: logs the end of the trouble.
    pub(crate) fn answered(&mut self) {
        self.failures = 0;
        if let Some((trouble, since)) = self.trouble.take() {
            let secs = since.elapsed().as_secs_f64();
            match trouble {
                Trouble::Outage => {
                    log::warn!("{}: redis answers again after {secs:.1} s", self.who);
                }
                Trouble::Data | Trouble::Refused => {
                    log::warn!("{}: calls succeed again after {secs:.1} s", self.who);
                }
            }
        }
    }
}

/// Whether a call at start is worth trying again: Redis unavailable, or a
/// data error (either may mend while one waits: Redis starts, an operator
/// deletes a stray key). Bad input, a refused password or TLS certificate
/// are not.
fn worth_waiting(error: &Error) -> bool {
    error.is_unavailable() || error.is_data_error()
}

/// Runs `attempt` (a connect, a consumer joining its group) until it
/// succeeds, waiting for Redis as a loop rides out an outage: while it
/// fails with Redis unavailable or a data error, it is tried again with
/// the same backoff (50 ms doubling, at most [`MAX_BACKOFF`]), the trouble
/// and its end logged once each as `who`. `deadline` bounds the wait (from
/// now); `None` waits forever. The CLI's commands start through it
/// (`--wait-ms`).
///
/// # Errors
///
/// The last error once `deadline` passes; at once, an error no wait
/// mends (bad input, a refused password or TLS certificate).
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use purgatorio_redis::{wait_for_redis, Config, Consumer, Timers};
///
/// // Started before Redis: waits for it, a minute at most.
/// let minute = Some(Duration::from_secs(60));
/// let timers = wait_for_redis("worker-1", minute, || {
///     Timers::connect("redis://127.0.0.1:6379", Config::new("payments"))
/// })?;
/// let consumer = wait_for_redis("worker-1", minute, || Consumer::new(timers.clone(), "worker-1"))?;
/// # Ok::<(), purgatorio_redis::Error>(())
/// ```
pub fn wait_for_redis<T>(
    who: &str,
    deadline: Option<Duration>,
    mut attempt: impl FnMut() -> Result<T, Error>,
) -> Result<T, Error> {
    let mut patience = Patience::new(who, deadline);
    loop {
        match patience.after(attempt()) {
            Ok(value) => return Ok(value),
            Err(Next::Wait(wait)) => std::thread::sleep(wait),
            Err(Next::GiveUp(e)) => return Err(e),
        }
    }
}

/// The state of a wait for Redis at start, either face's: the log, the
/// backoff, the deadline.
pub(crate) struct Patience {
    /// The log of the trouble met.
    health: Health,
    /// When to give up, if ever.
    until: Option<Instant>,
}

/// What comes after a failed try at start.
pub(crate) enum Next {
    /// Try again after this long.
    Wait(Duration),
    /// Give up with this error.
    GiveUp(Error),
}

impl Patience {
    /// A wait logged as `who`, bounded by `deadline` from now if any.
    pub(crate) fn new(who: &str, deadline: Option<Duration>) -> Patience {
        Patience {
            health: Health::new(who.to_string()),
            until: deadline.map(|d| Instant::now() + d),
        }
    }

    /// What to do after a try that gave `outcome`.
    pub(crate) fn after<T>(&mut self, outcome: Result<T, Error>) -> Result<T, Next> {
        match outcome {
            Ok(value) => {
                self.health.answered();
                Ok(value)
            }
            Err(e) if worth_waiting(&e) => {
                let wait = self.health.failed(&e);
                match self.until {
                    Some(until) if Instant::now() + wait >= until => Err(Next::GiveUp(e)),
                    _ => Err(Next::Wait(wait)),
                }
            }
            Err(e) => Err(Next::GiveUp(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_to_its_cap() {
        let waits: Vec<u64> = (1..=6).map(|f| backoff(f).as_millis() as u64).collect();
        assert_eq!(waits, [50, 100, 200, 400, 500, 500]);
        assert_eq!(backoff(u32::MAX), MAX_BACKOFF);
    }

    #[test]
    fn waiting_gives_up_at_once_on_bad_input_and_at_the_deadline_otherwise() {
        let mut tries = 0;
        let refused: Result<(), Error> = wait_for_redis("t", None, || {
            tries += 1;
            Err(Error::InvalidArgument {
                name: "count",
                why: "must be at least 1",
            })
        });
        assert!(matches!(refused, Err(Error::InvalidArgument { .. })));
        assert_eq!(tries, 1);
        let mut tries = 0;
        let down: Result<(), Error> = wait_for_redis("t", Some(Duration::ZERO), || {
            tries += 1;
            Err(Error::Unavailable {
                tries: 1,
                last: std::io::Error::from(std::io::ErrorKind::ConnectionRefused).into(),
            })
        });
        assert!(matches!(down, Err(Error::Unavailable { .. })));
        assert_eq!(tries, 1);
        let mut tries = 0;
        let mended = wait_for_redis("t", None, || {
            tries += 1;
            if tries < 3 {
                Err(Error::Redis(redis::RedisError::from((
                    redis::ErrorKind::TypeError,
                    "WRONGTYPE",
                ))))
            } else {
                Ok(tries)
            }
        });
        assert_eq!(mended.unwrap(), 3);
    }
}
