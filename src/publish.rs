//! Publishing to the `metrics` facade (the `metrics` feature), so that any
//! `metrics` exporter (Prometheus and the rest) sees the crate's figures with
//! no glue.
//!
//! Handles are registered once, when a timer, purgatory or keyed timer is
//! built, with the recorder installed then, and updated at each event.
//! Without the feature these types are zero-sized and every method does
//! nothing, so call sites need no `cfg`.
//!
//! | name | kind | labels | what |
//! |---|---|---|---|
//! | `purgatorio_timer_scheduled_total` | counter | `timer` | tasks scheduled |
//! | `purgatorio_timer_cancelled_total` | counter | `timer` | tasks cancelled |
//! | `purgatorio_timer_expired_total` | counter | `timer` | tasks handed to the executor |
//! | `purgatorio_timer_panicked_total` | counter | `timer` | tasks that panicked |
//! | `purgatorio_timer_wakeups_total` | counter | `timer` | driver wake-ups |
//! | `purgatorio_timer_backlog` | gauge | `timer` | tasks handed over, not yet taken up |
//! | `purgatorio_timer_lateness_seconds` | histogram | `timer` | start time minus deadline |
//! | `purgatorio_purgatory_completed_total` | counter | `purgatory`, `completion` (`satisfied`, `forced`, `expired`, `shut_down`) | operations completed |
//! | `purgatorio_purgatory_cancelled_total` | counter | `purgatory` | operations handed back by `cancel_for_key` |
//! | `purgatorio_purgatory_purged_total` | counter | `purgatory` | done entries swept from watch lists (by the purge job or a `park`) |
//! | `purgatorio_purgatory_panics_total` | counter | `purgatory` | callbacks that panicked |
//! | `purgatorio_keyed_events_total` | counter | `keyed_timer`, `event` (`inserted`, `moved`, `removed`, `expired`, `panicked`) | what happened to keys |
//!
//! The `timer` label is the timer's thread-name prefix; `purgatory` is the
//! purgatory's [`name`](crate::PurgatoryBuilder::name); `keyed_timer` is the
//! keyed timer's timer's thread-name prefix.

use std::time::Duration;

/// A timer's published figures.
#[derive(Debug)]
pub(crate) struct TimerFigures {
    /// The handles.
    #[cfg(feature = "metrics")]
    handles: timer::Handles,
}

impl TimerFigures {
    /// Registers the figures of the timer named `name`.
    pub(crate) fn new(name: &str) -> Self {
        #[cfg(not(feature = "metrics"))]
        let _ = name;
        TimerFigures {
            #[cfg(feature = "metrics")]
            handles: timer::Handles::new(name),
        }
    }

    /// `n` tasks scheduled.
    #[inline]
    pub(crate) fn scheduled(&self, n: u64) {
        #[cfg(feature = "metrics")]
        self.handles.scheduled.increment(n);
        #[cfg(not(feature = "metrics"))]
        let _ = n;
    }

    /// `n` tasks cancelled.
    #[inline]
    pub(crate) fn cancelled(&self, n: u64) {
        #[cfg(feature = "metrics")]
        self.handles.cancelled.increment(n);
        #[cfg(not(feature = "metrics"))]
        let _ = n;
    }

    /// `n` tasks handed to the executor.
    #[inline]
    pub(crate) fn expired(&self, n: u64) {
        #[cfg(feature = "metrics")]
        self.handles.expired.increment(n);
        #[cfg(not(feature = "metrics"))]
        let _ = n;
    }

    /// A task panicked.
    #[inline]
    pub(crate) fn panicked(&self) {
        #[cfg(feature = "metrics")]
        self.handles.panicked.increment(1);
    }

    /// The driver woke up.
    #[inline]
    pub(crate) fn wakeup(&self) {
        #[cfg(feature = "metrics")]
        self.handles.wakeups.increment(1);
    }

    /// The backlog changed by `delta`.
    #[inline]
    pub(crate) fn backlog(&self, delta: f64) {
        #[cfg(feature = "metrics")]
        self.handles.backlog.increment(delta);
        #[cfg(not(feature = "metrics"))]
        let _ = delta;
    }

    /// A task started `lag` after its deadline.
    #[inline]
    pub(crate) fn lateness(&self, lag: Duration) {
        #[cfg(feature = "metrics")]
        self.handles.lateness.record(lag.as_secs_f64());
        #[cfg(not(feature = "metrics"))]
        let _ = lag;
    }
}

/// A purgatory's published figures.
#[derive(Debug, Default)]
pub(crate) struct PurgatoryFigures {
    /// The handles.
    #[cfg(feature = "metrics")]
    handles: Option<purgatory::Handles>,
}

impl PurgatoryFigures {
    /// Registers the figures of the purgatory named `name`.
    pub(crate) fn new(name: &str) -> Self {
        #[cfg(not(feature = "metrics"))]
        let _ = name;
        PurgatoryFigures {
            #[cfg(feature = "metrics")]
            handles: Some(purgatory::Handles::new(name)),
        }
    }

    /// An operation completed; `kind` is the index of its completion in
    /// `COMPLETIONS` (this module stays below the purgatory).
    #[inline]
    pub(crate) fn completed(&self, kind: usize) {
        #[cfg(feature = "metrics")]
        if let Some(h) = &self.handles {
            h.completed[kind].increment(1);
        }
        #[cfg(not(feature = "metrics"))]
        let _ = kind;
    }

    /// An operation handed back by `cancel_for_key`.
    #[inline]
    pub(crate) fn cancelled(&self) {
        #[cfg(feature = "metrics")]
        if let Some(h) = &self.handles {
            h.cancelled.increment(1);
        }
    }

    /// `n` done entries purged.
    #[inline]
    pub(crate) fn purged(&self, n: u64) {
        #[cfg(feature = "metrics")]
        if let Some(h) = &self.handles {
            h.purged.increment(n);
        }
        #[cfg(not(feature = "metrics"))]
        let _ = n;
    }

    /// A callback panicked.
    #[inline]
    pub(crate) fn panicked(&self) {
        #[cfg(feature = "metrics")]
        if let Some(h) = &self.handles {
            h.panics.increment(1);
        }
    }
}

/// The `completion` label values, in the order of
/// [`Completion`](crate::Completion)'s variants.
#[cfg(feature = "metrics")]
const COMPLETIONS: [&str; 4] = ["satisfied", "forced", "expired", "shut_down"];

/// What happened to a keyed timer's key.
#[derive(Clone, Copy, Debug)]
pub(crate) enum KeyEvent {
    /// Inserted by `set`.
    Inserted,
    /// Moved to a new deadline.
    Moved,
    /// Removed without expiring.
    Removed,
    /// Expired.
    Expired,
    /// Its callback panicked.
    Panicked,
}

/// A keyed timer's published figures.
#[derive(Debug)]
pub(crate) struct KeyedFigures {
    /// The handles, by [`KeyEvent`].
    #[cfg(feature = "metrics")]
    events: [metrics::Counter; 5],
}

impl KeyedFigures {
    /// Registers the figures of the keyed timer named `name`.
    pub(crate) fn new(name: &str) -> Self {
        #[cfg(not(feature = "metrics"))]
        let _ = name;
        KeyedFigures {
            #[cfg(feature = "metrics")]
            events: ["inserted", "moved", "removed", "expired", "panicked"].map(|event| {
                metrics::counter!(
                    "purgatorio_keyed_events_total",
                    "keyed_timer" => name.to_string(),
                    "event" => event
                )
            }),
        }
    }

    /// `n` keys had `event`.
    #[inline]
    pub(crate) fn event(&self, event: KeyEvent, n: u64) {
        #[cfg(feature = "metrics")]
        self.events[event as usize].increment(n);
        #[cfg(not(feature = "metrics"))]
        let _ = (event, n);
    }
}

/// The timer's handles.
#[cfg(feature = "metrics")]
mod timer {
    use metrics::{Counter, Gauge, Histogram};

    /// One timer's registered handles.
    #[derive(Debug)]
    pub(super) struct Handles {
        pub(super) scheduled: Counter,
        pub(super) cancelled: Counter,
        pub(super) expired: Counter,
        pub(super) panicked: Counter,
        pub(super) wakeups: Counter,
        pub(super) backlog: Gauge,
        pub(super) lateness: Histogram,
    }

    impl Handles {
        /// Registers them with the recorder installed now.
        pub(super) fn new(name: &str) -> Self {
            let label = || ("timer", name.to_string());
            Handles {
                scheduled: metrics::counter!("purgatorio_timer_scheduled_total", &[label()]),
                cancelled: metrics::counter!("purgatorio_timer_cancelled_total", &[label()]),
                expired: metrics::counter!("purgatorio_timer_expired_total", &[label()]),
                panicked: metrics::counter!("purgatorio_timer_panicked_total", &[label()]),
                wakeups: metrics::counter!("purgatorio_timer_wakeups_total", &[label()]),
                backlog: metrics::gauge!("purgatorio_timer_backlog", &[label()]),
                lateness: metrics::histogram!("purgatorio_timer_lateness_seconds", &[label()]),
            }
        }
    }
}

/// The purgatory's handles.
#[cfg(feature = "metrics")]
mod purgatory {
    use metrics::Counter;

    /// One purgatory's registered handles.
    #[derive(Debug)]
    pub(super) struct Handles {
        pub(super) completed: [Counter; 4],
        pub(super) cancelled: Counter,
        pub(super) purged: Counter,
        pub(super) panics: Counter,
    }

    impl Handles {
        /// Registers them with the recorder installed now.
        pub(super) fn new(name: &str) -> Self {
            let label = || ("purgatory", name.to_string());
            Handles {
                completed: super::COMPLETIONS.map(|how| {
                    metrics::counter!(
                        "purgatorio_purgatory_completed_total",
                        "purgatory" => name.to_string(),
                        "completion" => how
                    )
                }),
                cancelled: metrics::counter!("purgatorio_purgatory_cancelled_total", &[label()]),
                purged: metrics::counter!("purgatorio_purgatory_purged_total", &[label()]),
                panics: metrics::counter!("purgatorio_purgatory_panics_total", &[label()]),
            }
        }
    }
}
