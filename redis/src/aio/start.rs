//! [`wait_for_redis`]: the async face's wait for Redis at start.

use std::future::Future;
use std::time::Duration;

use crate::health::{Next, Patience};
use crate::Error;

/// Runs `attempt` (a connect, a consumer joining its group) until it
/// succeeds, waiting for Redis as the loops ride out an outage: the async
/// twin of [`crate::wait_for_redis`], with the same backoff (50 ms
/// doubling, at most [`MAX_BACKOFF`](crate::MAX_BACKOFF)), the same log as
/// `who`, the same errors worth waiting for (Redis unavailable, a data
/// error), and `deadline` bounding the wait (`None`: forever).
///
/// # Errors
///
/// The last error once `deadline` passes; at once, an error no wait
/// mends (bad input, a refused password or TLS certificate).
///
/// # Examples
///
/// ```no_run
/// use purgatorio_redis::{aio, Config};
///
/// # #[tokio::main] async fn main() -> Result<(), purgatorio_redis::Error> {
/// // Started before Redis: waits for it, forever.
/// let timers = aio::wait_for_redis("worker-1", None, || {
///     aio::Timers::connect("redis://127.0.0.1:6379", Config::new("payments"))
/// })
/// .await?;
/// let consumer =
///     aio::wait_for_redis("worker-1", None, || aio::Consumer::new(timers.clone(), "worker-1"))
///         .await?;
/// # drop(consumer);
/// # Ok(()) }
/// ```
pub async fn wait_for_redis<T, F, Fut>(
    who: &str,
    deadline: Option<Duration>,
    mut attempt: F,
) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Error>>,
{
    let mut patience = Patience::new(who, deadline);
    loop {
        match patience.after(attempt().await) {
            Ok(value) => return Ok(value),
            Err(Next::Wait(wait)) => tokio::time::sleep(wait).await,
            Err(Next::GiveUp(e)) => return Err(e),
        }
    }
}
