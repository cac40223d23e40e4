//! [`Scheduler`]: a node that moves due timers to the stream.
//!
//! A node runs the promotion step, then sleeps on purgatorio's in-memory
//! [`Timer`](purgatorio::Timer) until the next deadline Redis reported, or
//! until a message on the wake channel says an earlier deadline arrived.
//! The listener of that channel runs on a thread of its own and only sends
//! [`Wake::Check`] to the node's loop.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use crate::health::Health;
use crate::link::Tries;
use crate::resubscribe::Resubscribe;
use crate::stop::Wake;
use crate::timers::{MisfirePage, Promotion};
use crate::{Error, StopHandle, Timers};

/// How late a timer must be, when a node starts, to count as misfired.
pub(crate) const MISFIRE_AFTER: Duration = Duration::from_secs(1);

/// A scheduler node: moves due timers to the stream. Run any number.
pub struct Scheduler {
    /// The namespace.
    timers: Timers,
    /// Wake-ups of the node's loop.
    wake: (Sender<Wake>, Receiver<Wake>),
    /// Set once the node is asked to stop.
    stopped: Arc<AtomicBool>,
    /// How far the node's start has got: misfires first, then promotion.
    start: Start,
}

/// What one [`Scheduler::step`] leaves the node to do.
///
/// # Examples
///
/// ```no_run
/// # use purgatorio_redis::*;
/// # let timers = Timers::connect("redis://127.0.0.1:6379", Config::new("payments"))?;
/// let node = Scheduler::new(timers);
/// match node.step()? {
///     Step::Again => println!("more is due: step again at once"),
///     Step::Sleep(wait) => println!("the next deadline is {wait:?} away"),
///     Step::Idle => println!("nothing pending"),
/// }
/// # Ok::<(), purgatorio_redis::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// The step stopped at a limit (a full page of misfires, a full batch
    /// of promotions) or finished the misfires: step again at once.
    Again,
    /// Nothing more is due: the next deadline is this far ahead by Redis's
    /// clock (at most [`MAX_SLEEP`]); step again then at the latest.
    ///
    /// [`Scheduler::run`] is also woken early when a timer is scheduled
    /// before that deadline, by a wake listener of its own; a loop driven
    /// by hand is not, so a timer scheduled meanwhile waits for its next
    /// step: step as often as that lateness allows.
    Sleep(Duration),
    /// Nothing is pending. [`Scheduler::run`] waits for its wake listener
    /// (and asks Redis again after [`MAX_SLEEP`] at most, in case a
    /// wake-up was lost); a loop driven by hand hears no wake-ups, so it
    /// should step again within [`MAX_SLEEP`], sooner as lateness allows.
    Idle,
}

impl Step {
    /// What a promotion step leaves to do. The node's own clock is never
    /// read: a wait is Redis's distance to the next deadline, and at least
    /// `pace` ([`Config::promote_pace`](crate::Config::promote_pace)) after
    /// a step that moved timers, so that timers coming due one after
    /// another go in batches.
    pub(crate) fn after(promotion: Promotion, pace: Duration) -> Step {
        if promotion.full {
            return Step::Again;
        }
        match promotion.next_deadline_ms {
            Some(next) => {
                let wait = sleep_until(next, promotion.now_ms);
                Step::Sleep(if promotion.moved > 0 {
                    wait.max(pace)
                } else {
                    wait
                })
            }
            None => Step::Idle,
        }
    }
}

/// How far a node's start has got: until a page of the misfire policy
/// comes back short, each step applies the policy; only then does it
/// promote. The order is what makes [`Misfire::Skip`](crate::Misfire::Skip)
/// hold: a step that promoted before the misfires were all handled would
/// deliver timers the policy drops. Shared by both faces' steps.
#[derive(Debug, Default)]
pub(crate) struct Start {
    /// Set once a misfire page came back short.
    misfires_done: AtomicBool,
}

impl Start {
    /// Whether the next step applies the misfire policy rather than
    /// promote.
    pub(crate) fn misfires_pending(&self) -> bool {
        !self.misfires_done.load(Ordering::Relaxed)
    }

    /// What a misfire page leaves to do: step again at once, to promote
    /// once the page came back short, or for the next page.
    pub(crate) fn after_misfires(&self, page: MisfirePage) -> Step {
        if page == MisfirePage::Done {
            self.misfires_done.store(true, Ordering::Relaxed);
        }
        Step::Again
    }
}

/// What a node's loop does after a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wait {
    /// Step again at once.
    None,
    /// Step again after this long, or when woken.
    For(Duration),
    /// Step again when woken.
    Woken,
}

/// The wait after a step of a node's loop, either face: a failed step is
/// logged (once per outage) and tried again after `health`'s backoff.
pub(crate) fn wait_after(health: &mut Health, step: Result<Step, Error>) -> Wait {
    match step {
        Ok(step) => {
            health.answered();
            match step {
                Step::Again => Wait::None,
                Step::Sleep(wait) => Wait::For(wait),
                Step::Idle => Wait::Woken,
            }
        }
        Err(e) => Wait::For(health.failed(&e)),
    }
}

/// The longest a node sleeps without asking Redis, however far the next
/// deadline: a safety net for a wake-up lost with a dropped connection.
pub const MAX_SLEEP: Duration = Duration::from_secs(60);

/// How long to sleep until `next_ms` when Redis's clock reads `now_ms`:
/// their difference measured in Redis's clock (this node's clock is never
/// read), saturating, at most [`MAX_SLEEP`].
pub(crate) fn sleep_until(next_ms: u64, now_ms: u64) -> Duration {
    Duration::from_millis(next_ms.saturating_sub(now_ms)).min(MAX_SLEEP)
}

impl fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scheduler")
            .field("timers", &self.timers)
            .finish()
    }
}

impl Scheduler {
    /// A node for `timers`' namespace.
    pub fn new(timers: Timers) -> Scheduler {
        Scheduler {
            timers,
            wake: crossbeam_channel::unbounded(),
            stopped: Arc::new(AtomicBool::new(false)),
            start: Start::default(),
        }
    }

    /// One step of the node, one script call in Redis: until a misfire
    /// page comes back short, a page of the misfire policy (at most 500
    /// timers); then a promotion of at
    /// most [`Config::promote_batch`](crate::Config::promote_batch) due
    /// timers. [`run`](Self::run) is this step in a loop with its waits;
    /// calling it directly drives a node by hand (a test, or a loop of
    /// one's own), one try per call.
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] if Redis did not answer (one try);
    /// [`Error::Redis`] if it refused the call.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use purgatorio_redis::*;
    /// # let timers = Timers::connect("redis://127.0.0.1:6379", Config::new("payments"))?;
    /// let node = Scheduler::new(timers);
    /// // Everything due now, in bounded steps:
    /// while node.step()? == Step::Again {}
    /// # Ok::<(), purgatorio_redis::Error>(())
    /// ```
    pub fn step(&self) -> Result<Step, Error> {
        if self.start.misfires_pending() {
            let page = self.timers.handle_misfires(MISFIRE_AFTER)?;
            return Ok(self.start.after_misfires(page));
        }
        let pace = self.timers.config().promote_pace;
        let promotion = self.timers.promote(MISFIRE_AFTER)?;
        Ok(Step::after(promotion, pace))
    }

    /// A handle that stops [`run`](Self::run).
    pub fn stop_handle(&self) -> StopHandle {
        StopHandle::scheduler(Arc::clone(&self.stopped), self.wake.0.clone())
    }

    /// Runs the node until stopped: handles misfires once, then promotes
    /// due timers and sleeps until the next deadline or a wake-up.
    ///
    /// It never gives up: a failed step is tried again with backoff (50 ms
    /// doubling, at most [`MAX_BACKOFF`](crate::MAX_BACKOFF)), whether Redis
    /// is down (an outage) or refuses the step (a data error: a key of the
    /// namespace overwritten with another type); each is logged once as
    /// what it is, and its end once (`log` crate).
    ///
    /// # Errors
    ///
    /// [`Error::Protocol`] if the in-memory timer cannot start; otherwise
    /// none: it returns `Ok` once stopped.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use purgatorio_redis::*;
    /// # let timers = Timers::connect("redis://127.0.0.1:6379", Config::new("payments"))?;
    /// let node = Scheduler::new(timers);
    /// let stop = node.stop_handle();
    /// let running = std::thread::spawn(move || node.run());
    /// // … later:
    /// stop.stop();
    /// running.join().expect("scheduler")?;
    /// # Ok::<(), purgatorio_redis::Error>(())
    /// ```
    pub fn run(&self) -> Result<(), Error> {
        let timer = purgatorio::Timer::builder()
            .thread_name("redis-scheduler")
            .build()
            .map_err(|e| Error::Protocol(e.to_string()))?;
        let listener = self.listen();
        let mut health = Health::new(format!("scheduler of {}", self.timers.config().namespace));
        let mut armed: Option<purgatorio::TimerHandle> = None;
        while !self.stopped.load(Ordering::SeqCst) {
            let wait = match wait_after(&mut health, self.step()) {
                Wait::None => continue, // more may be due: no sleep
                Wait::For(wait) => Some(wait),
                Wait::Woken => None,
            };
            if let Some(old) = armed.take() {
                drop(old.cancel());
            }
            if let Some(wait) = wait {
                let tx = self.wake.0.clone();
                armed = timer
                    .schedule(wait, move || {
                        let _ = tx.send(Wake::Check);
                    })
                    .ok();
            }
            match self.wake.1.recv() {
                Ok(Wake::Check) => {
                    // Coalesce wake-ups that arrived meanwhile.
                    while let Ok(Wake::Check) = self.wake.1.try_recv() {}
                }
                Ok(Wake::Stop) | Err(_) => break,
            }
        }
        self.stopped.store(true, Ordering::SeqCst);
        // Wake the listener so that it notices. If Redis does not take the
        // message, the listener is left to notice on its own (it holds
        // only its connection and a clone of the namespace).
        let published = self.timers.ns.link.call(Tries::Once, |c| {
            redis::cmd("PUBLISH")
                .arg(&self.timers.ns.keys.wake)
                .arg("stop")
                .query::<i64>(c)
        });
        if published.is_ok() {
            drop(listener.join());
        }
        Ok(())
    }

    /// Listens on the wake channel on a thread of its own: each message
    /// wakes the node. A lost subscription is made again with backoff
    /// ([`Resubscribe`](crate::resubscribe::Resubscribe)), logged once per outage.
    fn listen(&self) -> thread::JoinHandle<()> {
        let ns = Arc::clone(&self.timers.ns);
        let wake = self.wake.0.clone();
        let stopped = Arc::clone(&self.stopped);
        thread::Builder::new()
            .name("redis-wake".into())
            .spawn(move || {
                let mut again = Resubscribe::new(&ns.config.namespace);
                while !stopped.load(Ordering::SeqCst) {
                    if let Some(wait) = again.wait() {
                        thread::sleep(wait);
                    }
                    let connection = ns.link.connect().and_then(|c| {
                        // Silence longer than this is a dead link: listen
                        // again on a fresh connection.
                        c.set_read_timeout(Some(MAX_SLEEP))?;
                        Ok(c)
                    });
                    let mut connection = match connection {
                        Ok(connection) => connection,
                        Err(e) => {
                            again.failed(Instant::now(), e);
                            continue;
                        }
                    };
                    let mut pubsub = connection.as_pubsub();
                    if let Err(e) = pubsub.subscribe(&ns.keys.wake) {
                        again.failed(Instant::now(), e);
                        continue;
                    }
                    // `subscribe` returned once Redis confirmed it.
                    again.subscribed(Instant::now());
                    // Subscribed: whatever was scheduled before is seen by
                    // the next promotion step.
                    let _ = wake.send(Wake::Check);
                    // A stop published before the subscription took is seen
                    // here; one published after it arrives as a message.
                    if stopped.load(Ordering::SeqCst) {
                        return;
                    }
                    let lost = loop {
                        match pubsub.get_message() {
                            Ok(_message) => {
                                if stopped.load(Ordering::SeqCst) {
                                    return;
                                }
                                again.heard();
                                let _ = wake.send(Wake::Check);
                            }
                            Err(e) => break e,
                        }
                    };
                    again.lost(Instant::now(), lost);
                }
            })
            .expect("spawn the wake listener")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_that_moved_timers_waits_at_least_the_pace() {
        let pace = Duration::from_millis(10);
        let step = |moved, next, full| {
            let promotion = Promotion {
                next_deadline_ms: next,
                now_ms: 1_000,
                full,
                moved,
            };
            Step::after(promotion, pace)
        };
        assert_eq!(step(5, Some(1_001), false), Step::Sleep(pace));
        assert_eq!(
            step(5, Some(1_050), false),
            Step::Sleep(Duration::from_millis(50))
        );
        // Nothing moved: the next deadline's own wait (a wake-up, a
        // deadline just ahead); a full step: again at once.
        assert_eq!(
            step(0, Some(1_001), false),
            Step::Sleep(Duration::from_millis(1))
        );
        assert_eq!(step(250, Some(1_000), true), Step::Again);
        assert_eq!(step(5, None, false), Step::Idle);
    }

    #[test]
    fn the_sleep_saturates_and_is_capped() {
        assert_eq!(sleep_until(1_500, 1_000), Duration::from_millis(500));
        assert_eq!(sleep_until(1_000, 1_500), Duration::ZERO);
        assert_eq!(sleep_until(u64::MAX, 1_000), MAX_SLEEP);
        assert_eq!(sleep_until(u64::MAX, 0), MAX_SLEEP);
    }
}
