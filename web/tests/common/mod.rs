//! What the HTTP tests share: every wait bounded by `PATIENCE`.

use std::future::Future;
use std::time::{Duration, Instant};

/// The most any step of a test waits for before it fails.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// Waits, a millisecond at a time and at most `PATIENCE`, until `done`.
pub async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < PATIENCE, "gave up waiting for {what}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// `future`, or a failure after `PATIENCE`.
pub async fn bounded<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(PATIENCE, future)
        .await
        .unwrap_or_else(|_| panic!("no {what} within {PATIENCE:?}"))
}
