//! [`Sleep`] and [`Timeout`]: a timer's deadlines as futures.

use std::fmt;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crate::timer::{BoxTask, HomeShard, Timer};
use crate::wheel::TimerKey;

use crate::time::{Deadline, NEVER};

/// What [`Sleep::deadline`] says of a sleep that never ends: this far from
/// when it was made (about 30 years), where an [`Instant`] can still be
/// represented.
const FAR: Duration = Duration::from_secs(86_400 * 365 * 30);

/// Which waker the wheel holds for a sleep: its data and vtable addresses,
/// what [`Waker::will_wake`] compares. The sleep keeps this rather than a
/// second clone of the waker: a clone costs an atomic increment of the
/// task's count, and its drop a decrement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct WakerId(usize, usize);

impl WakerId {
    /// The identity of `waker`.
    fn of(waker: &Waker) -> Self {
        WakerId(
            waker.data() as usize,
            std::ptr::from_ref(waker.vtable()) as usize,
        )
    }
}

/// A future that completes once the timer's clock passes a deadline; from
/// [`Timer::sleep`] and [`Timer::sleep_until`].
///
/// * **Never early.** It completes only once the timer's clock has read at
///   or after the deadline (at most about a tick after it, plus the time the
///   runtime takes to poll the task again). A clock that is not the system
///   clock and goes back after that does not undo it.
/// * **Lazy and cheap.** Nothing is scheduled until the first poll; then the
///   task's waker itself is the timer's entry, with no allocation. A poll
///   from another task replaces the waker in place.
/// * **No count shared between threads.** A sleep holds the timer's
///   per-thread part (a shard) of the thread that made it, and from its
///   first poll that of the thread that polled it, where its entry goes, as
///   a schedule from that thread would: runtime workers making and polling
///   sleeps at once move no reference count on a line they share.
/// * **Cancel on drop.** Dropping a pending sleep removes its entry at once,
///   so the common timeout, cancelled almost every time, leaves nothing
///   pending: [`Timer::len`] counts only live sleeps.
/// * **Shutdown.** A sleep does not keep its timer running. Once the timer
///   shuts down ([`Timer::shutdown`], or its last handle dropped), every
///   pending sleep completes at once, as [`Purgatory`](crate::Purgatory)
///   operations do, and so does every sleep made or polled afterwards: then
///   [`is_elapsed`](Self::is_elapsed) tells whether the deadline had passed.
///   A loop that sleeps should stop when [`Timer::is_shut_down`] says so.
/// * **Never means never.** A delay too long for an [`Instant`] to hold
///   ([`Duration::MAX`] for one) never elapses, as a task scheduled that far
///   never runs: such a sleep ends only at shutdown, and a
///   [`Timeout`] of it never times out.
/// * **Who wakes it.** The timer's driver thread. On a timer built with
///   [`driver_thread(false)`](crate::TimerBuilder::driver_thread), whoever
///   calls [`Timer::run_due`] or [`Timer::advance_clock`] does: with nobody
///   driving it, a sleep never completes.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use purgatorio::{ManualClock, Timer};
///
/// let clock = ManualClock::new();
/// let timer = Timer::builder().clock(clock.clone()).build()?;
/// let sleep = timer.sleep(Duration::from_millis(50));
/// assert!(!sleep.is_elapsed());
/// clock.advance(Duration::from_millis(50));
/// # use futures_executor::block_on;
/// block_on(sleep); // any executor: tokio, async-std, a plain block_on
/// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
/// ```
#[must_use = "a sleep does nothing unless awaited or polled"]
pub struct Sleep {
    /// The shard its entry goes to (the home of the thread that made it)
    /// and through it the timer's clock: not the timer's threads, so a
    /// sleep does not keep the timer running (the last `Timer` handle shuts
    /// it down, which drains the wheel and so ends every sleep).
    shard: HomeShard<BoxTask>,
    /// When it completes: [`FAR`] away if it never does (see `never`).
    deadline: Instant,
    /// Whether the deadline is past what an `Instant` holds: the sleep then
    /// never elapses, and its entry waits at the tick that never comes.
    never: bool,
    /// Its entry's key in the shard and which waker is stored there, once
    /// polled.
    entry: Option<(TimerKey, WakerId)>,
    /// The entry's mark ([`HomeShard::gone`]), read only while `entry` is
    /// set: once its shard is polled through it, the entry fired (the
    /// timer's clock read past the deadline) and dropping the sleep takes
    /// no lock.
    mark: u64,
    /// Whether its entry fired: the timer saw the deadline pass, even if
    /// a clock that went back reads earlier now.
    fired: bool,
    /// Whether it completed.
    done: bool,
}

impl fmt::Debug for Sleep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sleep")
            .field("deadline", &self.deadline)
            .field("registered", &self.entry.is_some())
            .field("done", &self.done)
            .finish()
    }
}

impl Sleep {
    /// A sleep on `timer` until `deadline`; `None`: never, and then
    /// [`deadline`](Self::deadline) says [`FAR`] from `now`.
    #[inline]
    fn new(timer: &Timer, deadline: Option<Instant>, now: Instant) -> Self {
        Sleep {
            shard: timer.driver().home_shard(),
            deadline: deadline.unwrap_or_else(|| now.checked_add(FAR).unwrap_or(now)),
            never: deadline.is_none(),
            entry: None,
            mark: 0,
            fired: false,
            done: false,
        }
    }

    /// When the sleep completes. A sleep that never does (its delay was too
    /// long for an [`Instant`], such as [`Duration::MAX`]) says about 30
    /// years from when it was made.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let timer = purgatorio::Timer::builder().build()?;
    /// let at = timer.now() + Duration::from_secs(1);
    /// assert_eq!(timer.sleep_until(at).deadline(), at);
    /// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    /// ```
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Whether the timer's clock has reached the deadline, or the sleep
    /// ended because its entry fired (which it does only once the clock
    /// read past the deadline: a clock that went back since does not undo
    /// that).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let timer = purgatorio::Timer::builder().build()?;
    /// assert!(timer.sleep(Duration::ZERO).is_elapsed());
    /// assert!(!timer.sleep(Duration::from_secs(60)).is_elapsed());
    /// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    /// ```
    pub fn is_elapsed(&self) -> bool {
        !self.never && (self.fired || self.shard.time().read() >= self.deadline)
    }

    /// Moves the deadline to `deadline`, keeping the sleep's entry (and its
    /// waker) if it has one; the sleep is pending again if the new deadline
    /// is in the future. For a session timeout that every heartbeat pushes back.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let timer = purgatorio::Timer::builder().build()?;
    /// let mut idle = timer.sleep(Duration::from_secs(30));
    /// idle.reset(timer.now() + Duration::from_secs(60)); // a heartbeat
    /// assert!(!idle.is_elapsed());
    /// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    /// ```
    pub fn reset(&mut self, deadline: Instant) {
        self.deadline = deadline;
        self.never = false;
        self.done = false;
        self.fired = false;
        if let Some((key, _)) = self.entry {
            match self.shard.reschedule(key, Deadline::At(deadline)) {
                // Moved: its mark is the new tick's.
                Some((mark, _wake)) => self.mark = mark,
                // It fired: the next poll schedules a fresh entry.
                None => self.entry = None,
            }
        }
    }

    /// Whether its entry `key` left the wheel although the clock read
    /// `instant`, before the deadline: it fired (setting `fired`) before a
    /// clock that is not the system clock went back, or the timer shut
    /// down. Forgets the entry if so. The shard's mark answers without a
    /// lock when it can; the shard itself is asked only when the clock
    /// reads behind one of its passes (the system clock never goes back),
    /// which it does after such a pass fired the entry. Without this, the
    /// sleep would wait for an entry that is gone.
    fn entry_left(&mut self, key: TimerKey, instant: Instant) -> bool {
        let left = self.shard.gone(self.mark)
            || (!self.shard.time().is_system()
                && self.shard.behind_a_pass(instant)
                && !self.shard.contains(key));
        if left {
            self.forget_left_entry();
        }
        left
    }

    /// Forgets the entry, which left the wheel: it fired (its shard was
    /// polled through its mark, or the timer is still open, since nothing
    /// else removes an entry) or the timer shut down (which marks it closed
    /// before it drains).
    fn forget_left_entry(&mut self) {
        self.fired = self.shard.gone(self.mark) || !self.shard.is_closed();
        self.entry = None;
    }

    /// Removes the sleep's entry, if it has one, without waking anyone.
    /// Returns whether the shard says it fired.
    fn cancel(&mut self) -> bool {
        if let Some((key, _)) = self.entry.take() {
            // An entry that fired has left the wheel: no lock to find that.
            if self.shard.gone(self.mark) {
                return true;
            }
            if let Some(task) = self.shard.cancel(key) {
                task.disarm();
            }
        }
        false
    }

    /// Completes the sleep. An entry that fired before, say, a shutdown
    /// (which does not move the mark) makes it elapsed, whatever a clock
    /// gone back reads.
    fn complete(&mut self) -> Poll<()> {
        self.done = true;
        self.fired |= self.cancel();
        Poll::Ready(())
    }
}

impl Future for Sleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if this.done || this.shard.is_closed() {
            return this.complete();
        }
        // Every poll reads the clock, the first one too: a sleep first
        // polled after its deadline is ready at once, as `is_elapsed` says.
        let instant = this.shard.time().read();
        if !this.never && instant >= this.deadline {
            return this.complete();
        }
        if let Some((key, waker)) = this.entry.take() {
            let polled_by = WakerId::of(cx.waker());
            if waker == polled_by {
                this.entry = Some((key, waker));
                if this.entry_left(key, instant) {
                    return this.complete();
                }
                return Poll::Pending;
            }
            // Polled from another task: swap the waker in place.
            match this.shard.replace(key, BoxTask::waker(cx.waker().clone())) {
                Ok(old) => {
                    old.disarm();
                    this.entry = Some((key, polled_by));
                    return Poll::Pending;
                }
                Err(task) => task.disarm(),
            }
            // The entry left the wheel: it fired or the timer shut down.
            // Both end the sleep.
            this.forget_left_entry();
            return this.complete();
        }
        // The clock read before the deadline: its tick is the deadline's,
        // rounded up, with no need to convert the reading too.
        let tick = if this.never {
            NEVER
        } else {
            let time = this.shard.time();
            time.resolution().ceil(time.since_origin(this.deadline))
        };
        this.register(tick, cx)
    }
}

impl Sleep {
    /// Files the sleep's first entry, due at `tick`, with the polling
    /// task's waker: pending, or complete if the timer refused it (it shut
    /// down).
    fn register(&mut self, tick: u64, cx: &Context<'_>) -> Poll<()> {
        let waker = BoxTask::waker(cx.waker().clone());
        // No lock is held here: the driver's wake-up, if owed, goes at once.
        let inserted = self.shard.insert(tick, waker).map(|(key, mark, wake)| {
            drop(wake);
            (key, mark)
        });
        match inserted {
            Ok((key, mark)) => {
                self.entry = Some((key, WakerId::of(cx.waker())));
                self.mark = mark;
                Poll::Pending
            }
            Err(refused) => {
                refused.disarm();
                self.complete()
            }
        }
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        self.cancel();
    }
}

/// The error of a [`Timeout`] whose deadline passed first.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use purgatorio::{ManualClock, Timer};
///
/// let clock = ManualClock::new();
/// let timer = Timer::builder().clock(clock.clone()).build()?;
/// let never = std::future::pending::<()>();
/// let timeout = timer.timeout(Duration::from_millis(10), never);
/// clock.advance(Duration::from_millis(10));
/// # use futures_executor::block_on;
/// let elapsed = block_on(timeout).unwrap_err();
/// assert!(!elapsed.is_shut_down());
/// assert_eq!(elapsed.to_string(), "deadline has elapsed");
/// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Elapsed {
    /// Whether the timer was shut down before the deadline.
    shut_down: bool,
}

impl Elapsed {
    /// Whether the timeout ended because the timer was shut down (before
    /// its deadline), not because its deadline passed.
    ///
    /// # Examples
    ///
    /// See [`Elapsed`].
    pub fn is_shut_down(&self) -> bool {
        self.shut_down
    }
}

impl fmt::Display for Elapsed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.shut_down {
            f.write_str("the timer shut down before the deadline")
        } else {
            f.write_str("deadline has elapsed")
        }
    }
}

impl std::error::Error for Elapsed {}

pin_project_lite::pin_project! {
    /// A future with a deadline, from [`Timer::timeout`] and
    /// [`Timer::timeout_at`]: its value if it completes first, [`Elapsed`]
    /// once the deadline passes.
    ///
    /// The inner future is polled first, so a value ready at the deadline
    /// wins. The deadline's entry is scheduled only if the inner future is
    /// pending at its first poll, and cancelled as soon as the timeout
    /// completes or is dropped.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let timer = purgatorio::Timer::builder().build()?;
    /// # use futures_executor::block_on;
    /// let answer = block_on(timer.timeout(Duration::from_secs(5), async { 42 }));
    /// assert_eq!(answer, Ok(42));
    /// assert_eq!(timer.len(), 0); // nothing left pending
    /// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    /// ```
    #[must_use = "a timeout does nothing unless awaited or polled"]
    #[derive(Debug)]
    pub struct Timeout<F> {
        #[pin]
        future: F,
        sleep: Sleep,
    }
}

impl<F> Timeout<F> {
    /// The inner future, given back.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let timer = purgatorio::Timer::builder().build()?;
    /// let timeout = timer.timeout(Duration::from_secs(1), std::future::ready(7));
    /// let _ready: std::future::Ready<i32> = timeout.into_inner();
    /// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    /// ```
    pub fn into_inner(self) -> F {
        self.future
    }

    /// The inner future.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let timer = purgatorio::Timer::builder().build()?;
    /// let timeout = timer.timeout(Duration::from_secs(1), std::future::ready(7));
    /// let _: &std::future::Ready<i32> = timeout.get_ref();
    /// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    /// ```
    pub fn get_ref(&self) -> &F {
        &self.future
    }

    /// The inner future, mutably (before the timeout is pinned).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let timer = purgatorio::Timer::builder().build()?;
    /// let mut timeout = timer.timeout(Duration::from_secs(1), std::future::ready(7));
    /// let _: &mut std::future::Ready<i32> = timeout.get_mut();
    /// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    /// ```
    pub fn get_mut(&mut self) -> &mut F {
        &mut self.future
    }

    /// When the timeout elapses.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let timer = purgatorio::Timer::builder().build()?;
    /// let at = timer.now() + Duration::from_secs(1);
    /// assert_eq!(timer.timeout_at(at, async {}).deadline(), at);
    /// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    /// ```
    pub fn deadline(&self) -> Instant {
        self.sleep.deadline
    }
}

impl<F: Future> Future for Timeout<F> {
    type Output = Result<F::Output, Elapsed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(value) = this.future.poll(cx) {
            this.sleep.cancel();
            return Poll::Ready(Ok(value));
        }
        match Pin::new(&mut *this.sleep).poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(Elapsed {
                shut_down: !this.sleep.is_elapsed(),
            })),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// The timer's deadlines as futures.
impl Timer {
    /// A future that completes `delay` from now on the timer's clock
    /// (tokio's `sleep`, on this timer). See [`Sleep`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let timer = purgatorio::Timer::builder().build()?;
    /// # use futures_executor::block_on;
    /// let start = std::time::Instant::now();
    /// block_on(timer.sleep(Duration::from_millis(20)));
    /// assert!(start.elapsed() >= Duration::from_millis(20));
    /// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    /// ```
    #[inline]
    pub fn sleep(&self, delay: Duration) -> Sleep {
        let now = self.now();
        Sleep::new(self, now.checked_add(delay), now)
    }

    /// A future that completes once the timer's clock reaches `deadline`.
    /// See [`Sleep`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let timer = purgatorio::Timer::builder().build()?;
    /// # use futures_executor::block_on;
    /// let at = timer.now() + Duration::from_millis(20);
    /// block_on(timer.sleep_until(at));
    /// assert!(timer.now() >= at);
    /// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    /// ```
    pub fn sleep_until(&self, deadline: Instant) -> Sleep {
        Sleep::new(self, Some(deadline), deadline)
    }

    /// `future`, unless `delay` passes first: then [`Elapsed`]. See
    /// [`Timeout`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let timer = purgatorio::Timer::builder().build()?;
    /// # use futures_executor::block_on;
    /// let slow = timer.sleep(Duration::from_secs(60));
    /// let outcome = block_on(timer.timeout(Duration::from_millis(10), slow));
    /// assert!(outcome.is_err());
    /// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    /// ```
    pub fn timeout<F: IntoFuture>(&self, delay: Duration, future: F) -> Timeout<F::IntoFuture> {
        Timeout {
            future: future.into_future(),
            sleep: self.sleep(delay),
        }
    }

    /// `future`, unless the timer's clock reaches `deadline` first. See
    /// [`Timeout`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let timer = purgatorio::Timer::builder().build()?;
    /// # use futures_executor::block_on;
    /// let at = timer.now() + Duration::from_secs(1);
    /// assert_eq!(block_on(timer.timeout_at(at, async { "fast" })), Ok("fast"));
    /// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    /// ```
    pub fn timeout_at<F: IntoFuture>(
        &self,
        deadline: Instant,
        future: F,
    ) -> Timeout<F::IntoFuture> {
        Timeout {
            future: future.into_future(),
            sleep: self.sleep_until(deadline),
        }
    }
}

#[cfg(all(test, not(purgatorio_loom)))]
mod tests;
