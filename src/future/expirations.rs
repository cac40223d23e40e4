//! [`Expirations`]: a keyed timer's expired entries as a stream.

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll, Waker};

use crate::keyed::KeyedTimer;
use crate::sync::Mutex;
use crate::timer::{OnShutdown, Timer};

/// What the queue's lock protects.
struct Queue<T> {
    /// Expired entries not yet taken.
    items: VecDeque<T>,
    /// The task waiting for one.
    waker: Option<Waker>,
    /// Whether the keyed timer is gone: no more will come.
    closed: bool,
    /// Whether the stream is gone: expired entries are dropped at once.
    unread: bool,
}

/// The queue between the keyed timer's callback and the stream.
struct Shared<T> {
    /// The queue.
    queue: Mutex<Queue<T>>,
}

impl<T> Shared<T> {
    /// Changes the queue with `f`, then wakes the waiting task, outside the
    /// lock.
    fn push_with(&self, f: impl FnOnce(&mut Queue<T>)) {
        let waker = {
            let mut queue = self.queue.lock();
            f(&mut queue);
            queue.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

/// The timer shut down: no more will come, whether or not the keyed timer
/// is still held.
impl<T: Send> OnShutdown for Shared<T> {
    fn timer_shut_down(&self) {
        self.push_with(|queue| queue.closed = true);
    }
}

/// The keyed timer's callback side: closes the stream when the keyed timer
/// drops it.
struct Sender<T>(Arc<Shared<T>>);

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        self.0.push_with(|queue| queue.closed = true);
    }
}

/// A [`KeyedTimer`]'s expired entries, as a stream (tokio-util's
/// `DelayQueue`, on a shared timer); from [`KeyedTimer::with_expirations`].
///
/// Each expired `(key, value)` is yielded once, soon after it expires, in the
/// order the timer's workers handed them over: deadline order within one
/// batch of the driver's, but entries that two workers expire at the same
/// time may interleave. The stream ends (yields `None`) once every handle
/// of its keyed timer is dropped, or its timer is shut down, and the entries
/// expired before that were taken.
///
/// With the **`stream` feature** (`features = ["stream"]` on this crate) it
/// implements `futures_core::Stream`, so `futures::StreamExt::next` and the
/// other stream combinators work on it; without the feature, `.next()`
/// fails to compile with "the trait `Stream` is not implemented". Either
/// way, [`next_expired`](Self::next_expired) and
/// [`poll_expired`](Self::poll_expired) do the same.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use purgatorio::{KeyedTimer, ManualClock, Timer};
///
/// let clock = ManualClock::new();
/// let timer = Timer::builder().clock(clock.clone()).build()?;
/// let (sessions, mut expired) = KeyedTimer::with_expirations(&timer);
/// sessions.set("ada", 1, Duration::from_secs(10))?;
/// sessions.set("bob", 2, Duration::from_secs(20))?;
/// clock.advance(Duration::from_secs(5));
/// assert!(sessions.reset(&"ada", Duration::from_secs(30))); // a heartbeat
/// clock.advance(Duration::from_secs(15));
/// # use futures_executor::block_on;
/// assert_eq!(block_on(expired.next_expired()), Some(("bob", 2)));
/// drop(sessions);
/// assert_eq!(block_on(expired.next_expired()), None); // the keyed timer is gone
/// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
/// ```
pub struct Expirations<K, V> {
    /// The queue the keyed timer's callback fills.
    shared: Arc<Shared<(K, V)>>,
}

impl<K, V> fmt::Debug for Expirations<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let queue = self.shared.queue.lock();
        f.debug_struct("Expirations")
            .field("ready", &queue.items.len())
            .field("closed", &queue.closed)
            .finish()
    }
}

impl<K, V> Expirations<K, V> {
    /// The next expired entry if one is ready; `Ready(None)` once the keyed
    /// timer is gone and nothing is left; otherwise registers `cx`'s waker.
    ///
    /// # Examples
    ///
    /// See [`Expirations`]; [`next_expired`](Self::next_expired) is this as a future.
    pub fn poll_expired(&mut self, cx: &mut Context<'_>) -> Poll<Option<(K, V)>> {
        let old = {
            let mut queue = self.shared.queue.lock();
            if let Some(item) = queue.items.pop_front() {
                return Poll::Ready(Some(item));
            }
            if queue.closed {
                return Poll::Ready(None);
            }
            if queue
                .waker
                .as_ref()
                .is_some_and(|w| w.will_wake(cx.waker()))
            {
                return Poll::Pending;
            }
            queue.waker.take()
        };
        // Clone and drop wakers outside the lock: they are the runtime's code.
        drop(old);
        let new = cx.waker().clone();
        let mut queue = self.shared.queue.lock();
        if let Some(item) = queue.items.pop_front() {
            drop(queue);
            drop(new);
            return Poll::Ready(Some(item));
        }
        if queue.closed {
            return Poll::Ready(None);
        }
        let displaced = queue.waker.replace(new);
        drop(queue);
        drop(displaced);
        Poll::Pending
    }

    /// The next expired entry; `None` once the keyed timer is gone and
    /// nothing is left.
    ///
    /// # Examples
    ///
    /// See [`Expirations`].
    pub fn next_expired(&mut self) -> NextExpired<'_, K, V> {
        NextExpired { stream: self }
    }

    /// The number of expired entries ready to be taken.
    ///
    /// # Examples
    ///
    /// ```
    /// use purgatorio::{KeyedTimer, Timer};
    /// let timer = Timer::builder().build()?;
    /// let (_sessions, expired) = KeyedTimer::<u32, ()>::with_expirations(&timer);
    /// assert_eq!(expired.ready(), 0);
    /// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    /// ```
    pub fn ready(&self) -> usize {
        self.shared.queue.lock().items.len()
    }
}

impl<K, V> Drop for Expirations<K, V> {
    fn drop(&mut self) {
        // Entries that expire from now on are dropped at once instead of
        // piling up; those already queued go now, after the lock.
        let (items, waker) = {
            let mut queue = self.shared.queue.lock();
            queue.unread = true;
            (std::mem::take(&mut queue.items), queue.waker.take())
        };
        drop((items, waker));
    }
}

/// The future of [`Expirations::next_expired`].
#[derive(Debug)]
#[must_use = "a future does nothing unless awaited or polled"]
pub struct NextExpired<'a, K, V> {
    /// The stream.
    stream: &'a mut Expirations<K, V>,
}

impl<K, V> Future for NextExpired<'_, K, V> {
    type Output = Option<(K, V)>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.get_mut().stream.poll_expired(cx)
    }
}

/// With the `stream` feature: `StreamExt::next` and every other stream
/// combinator work on the expirations.
#[cfg(feature = "stream")]
#[cfg_attr(docsrs, doc(cfg(feature = "stream")))]
impl<K, V> futures_core::Stream for Expirations<K, V> {
    type Item = (K, V);

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<(K, V)>> {
        self.get_mut().poll_expired(cx)
    }
}

impl<K, V> KeyedTimer<K, V>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Send + 'static,
{
    /// A keyed timer on `timer` whose expired entries come out of the
    /// returned stream instead of a callback (see [`Expirations`]).
    ///
    /// # Examples
    ///
    /// See [`Expirations`].
    pub fn with_expirations(timer: &Timer) -> (Self, Expirations<K, V>) {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue {
                items: VecDeque::new(),
                waker: None,
                closed: false,
                unread: false,
            }),
        });
        let hook: Weak<dyn OnShutdown> = Arc::downgrade(&shared) as Weak<dyn OnShutdown>;
        timer.on_shutdown(hook);
        let sender = Sender(Arc::clone(&shared));
        let keyed = KeyedTimer::on_timer(timer, move |key, value| {
            let mut unread = None;
            sender.0.push_with(|queue| {
                if queue.unread {
                    unread = Some((key, value));
                } else {
                    queue.items.push_back((key, value));
                }
            });
            // Nobody reads the stream any more: dropped here, after the lock.
            drop(unread);
        });
        (keyed, Expirations { shared })
    }
}
