//! [`Deliveries`]: an async consumer's due timers as a
//! [`Stream`](futures_core::Stream), riding out outages.

use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_core::Stream;
use tokio::time::Instant;

use crate::aio::consumer::Shared;
use crate::aio::Delivery;
use crate::health::Health;
use crate::link::Tries;
use crate::{calls, Error};

/// Deliveries read per blocking read of a [`Deliveries`] stream.
const READ_BATCH: usize = 100;

/// The stream of a consumer's deliveries, from
/// [`Consumer::deliveries`](super::Consumer::deliveries).
pub struct Deliveries {
    /// The state machine behind it.
    inner: Pin<Box<dyn Stream<Item = Result<Delivery, Error>> + Send>>,
}

impl fmt::Debug for Deliveries {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("aio::Deliveries").finish_non_exhaustive()
    }
}

impl Deliveries {
    /// The stream of consumer `shared`'s deliveries.
    pub(super) fn new(shared: Arc<Shared>) -> Deliveries {
        let health = Health::new(format!("consumer {}", shared.name));
        let feed = Feed {
            shared,
            buffer: VecDeque::new(),
            next_take_over: Instant::now(),
            health,
            pause: false,
        };
        Deliveries {
            inner: Box::pin(futures_util::stream::unfold(feed, Feed::next)),
        }
    }
}

impl Stream for Deliveries {
    type Item = Result<Delivery, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}

/// The state of a [`Deliveries`] stream between items.
struct Feed {
    /// The consumer.
    shared: Arc<Shared>,
    /// Read and not yet yielded.
    buffer: VecDeque<crate::Delivery>,
    /// When to look for abandoned entries next.
    next_take_over: Instant,
    /// Redis's health, for logging each outage once.
    health: Health,
    /// Whether the last item was an error: the next read waits
    /// [`MAX_BACKOFF`](crate::MAX_BACKOFF) first, so a caller that goes on
    /// after an error Redis keeps giving (a key of the wrong type) does not
    /// spin.
    pause: bool,
}

impl Feed {
    /// The next item, riding out outages.
    async fn next(mut self) -> Option<(Result<Delivery, Error>, Feed)> {
        if std::mem::take(&mut self.pause) {
            tokio::time::sleep(crate::MAX_BACKOFF).await;
        }
        loop {
            if let Some(timer) = self.buffer.pop_front() {
                let delivery = Delivery::new(timer, Arc::clone(&self.shared));
                return Some((Ok(delivery), self));
            }
            match self.fill().await {
                Ok(()) => self.health.answered(),
                Err(e) if e.is_unavailable() => tokio::time::sleep(self.health.failed(&e)).await,
                Err(Error::Redis(e)) if calls::no_group(&e) => {
                    // Redis came back without its data: the group is gone.
                    log::warn!(
                        "consumer {}: the consumer group is gone; creating it",
                        self.shared.name
                    );
                    if let Err(e) = self.shared.create_group(Tries::Once).await {
                        tokio::time::sleep(self.health.failed(&e)).await;
                    }
                }
                Err(e) => {
                    // Logged as what it is (once), yielded, and the next
                    // read waits: the stream goes on.
                    self.health.failed(&e);
                    self.pause = true;
                    return Some((Err(e), self));
                }
            }
        }
    }

    /// Reads into the buffer: abandoned entries when it is time to look,
    /// else new ones, blocking until the next look at the latest.
    async fn fill(&mut self) -> Result<(), Error> {
        let shared = &self.shared;
        shared.flush(Tries::Once).await?;
        if Instant::now() >= self.next_take_over {
            let taken = shared.take_over(READ_BATCH, Tries::Once).await?;
            self.next_take_over = Instant::now() + shared.look_every;
            if !taken.is_empty() {
                self.buffer.extend(taken);
                return Ok(());
            }
        }
        let block = self
            .next_take_over
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1));
        self.buffer
            .extend(shared.read_new(block, READ_BATCH).await?);
        Ok(())
    }
}
