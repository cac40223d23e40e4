//! [`StopHandle`]: stops a running [`Scheduler`](crate::Scheduler) or
//! [`Consumer`](crate::Consumer) from another thread, at once, even while it
//! sleeps or waits in a blocking read.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;

use crate::link::Tries;
use crate::namespace::Namespace;

/// What wakes a scheduler node.
pub(crate) enum Wake {
    /// A deadline may be due (the in-memory timer fired, or Pub/Sub said an
    /// earlier deadline was scheduled).
    Check,
    /// [`StopHandle::stop`].
    Stop,
}

/// No connection is blocked (the value of [`Blocked`] between reads).
pub(crate) const NOT_BLOCKED: i64 = -1;

/// The Redis client id of the connection a consumer is blocked on, or
/// [`NOT_BLOCKED`].
pub(crate) type Blocked = Arc<AtomicI64>;

/// How long [`StopHandle::stop`] keeps unblocking a consumer whose blocking
/// read has not reached Redis yet.
const UNBLOCK_PATIENCE: Duration = Duration::from_secs(2);

/// How a stop reaches the loop.
#[derive(Clone)]
enum Target {
    /// A scheduler's wake-up channel.
    Scheduler(Sender<Wake>),
    /// A consumer's blocking read, cut short by `CLIENT UNBLOCK`.
    Consumer {
        /// For the `CLIENT UNBLOCK` call.
        ns: Arc<Namespace>,
        /// The blocked connection.
        blocked: Blocked,
    },
}

/// Stops a running [`Scheduler`](crate::Scheduler) or
/// [`Consumer`](crate::Consumer) from another thread. Cheap to clone.
#[derive(Clone)]
pub struct StopHandle {
    /// Set once stopped; the loops check it between steps.
    stopped: Arc<AtomicBool>,
    /// How to interrupt a wait.
    target: Target,
}

impl std::fmt::Debug for StopHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let of = match self.target {
            Target::Scheduler(_) => "scheduler",
            Target::Consumer { .. } => "consumer",
        };
        f.debug_struct("StopHandle")
            .field("of", &of)
            .field("stopped", &self.is_stopped())
            .finish()
    }
}

impl StopHandle {
    /// A handle for a scheduler node's loop.
    pub(crate) fn scheduler(stopped: Arc<AtomicBool>, wake: Sender<Wake>) -> StopHandle {
        StopHandle {
            stopped,
            target: Target::Scheduler(wake),
        }
    }

    /// A handle for a consumer's loop.
    pub(crate) fn consumer(
        stopped: Arc<AtomicBool>,
        ns: Arc<Namespace>,
        blocked: Blocked,
    ) -> StopHandle {
        StopHandle {
            stopped,
            target: Target::Consumer { ns, blocked },
        }
    }

    /// Asks the loop to stop; it returns from `run` promptly (a consumer
    /// finishes the delivery in hand first).
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        match &self.target {
            Target::Scheduler(wake) => {
                let _ = wake.send(Wake::Stop);
            }
            Target::Consumer { ns, blocked } => {
                // The consumer publishes its connection before it checks the
                // flag, then blocks: if it missed the flag, its id is here.
                // Its read may not have reached Redis yet (UNBLOCK answers
                // 0), so try until it is unblocked or gone.
                let since = Instant::now();
                loop {
                    let id = blocked.load(Ordering::SeqCst);
                    if id == NOT_BLOCKED || since.elapsed() > UNBLOCK_PATIENCE {
                        return;
                    }
                    let unblocked = ns.link.call(Tries::Once, |c| {
                        redis::cmd("CLIENT").arg("UNBLOCK").arg(id).query::<i64>(c)
                    });
                    match unblocked {
                        Ok(1) | Err(_) => return,
                        Ok(_) => thread::sleep(Duration::from_millis(5)),
                    }
                }
            }
        }
    }

    /// Whether [`stop`](Self::stop) was called.
    pub fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }
}
