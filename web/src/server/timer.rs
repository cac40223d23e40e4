//! [`HyperTimer`]: a purgatorio [`Timer`] as hyper's timer.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use purgatorio::{Sleep, Timer};

/// A purgatorio [`Timer`] as [`hyper::rt::Timer`]: hyper's own timeouts
/// (the header read timeout, which also closes an idle keep-alive
/// connection) then run on the same wheel, and the same clock, as the
/// server's other timeouts. On a [`ManualClock`](purgatorio::ManualClock)
/// a test moves them all at once.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use hyper::rt::Timer as _;
/// use purgatorio::{ManualClock, Timer};
/// use purgatorio_web::server::HyperTimer;
///
/// let clock = ManualClock::new();
/// let hyper_timer = HyperTimer::new(&Timer::builder().clock(clock.clone()).build()?);
/// let start = hyper_timer.now();
/// clock.advance(Duration::from_secs(5));
/// assert_eq!(hyper_timer.now() - start, Duration::from_secs(5));
/// # Ok::<(), purgatorio::BuildError>(())
/// ```
#[derive(Clone, Debug)]
pub struct HyperTimer(Timer);

impl HyperTimer {
    /// hyper's timer on `timer` (a clone: a reference count).
    ///
    /// # Examples
    ///
    /// ```
    /// let timer = purgatorio_web::server::HyperTimer::new(purgatorio_web::shared_timer());
    /// # drop(timer);
    /// ```
    pub fn new(timer: &Timer) -> Self {
        HyperTimer(timer.clone())
    }
}

impl hyper::rt::Timer for HyperTimer {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(HyperSleep(self.0.sleep(duration)))
    }

    fn sleep_until(&self, deadline: Instant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(HyperSleep(self.0.sleep_until(deadline)))
    }

    fn now(&self) -> Instant {
        self.0.now()
    }
}

/// A purgatorio [`Sleep`] as [`hyper::rt::Sleep`].
#[derive(Debug)]
struct HyperSleep(Sleep);

impl Future for HyperSleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        Pin::new(&mut self.0).poll(cx)
    }
}

impl hyper::rt::Sleep for HyperSleep {}
