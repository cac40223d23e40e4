//! [`PurgatoryMetrics`]: a purgatory's gauges and counters.

/// A snapshot of a purgatory's gauges and counters.
///
/// # Examples
///
/// ```
/// # use std::time::Duration;
/// # use purgatorio::{Completion, DelayedOperation, Purgatory};
/// # struct Op;
/// # impl DelayedOperation for Op {
/// #     fn delay(&self) -> Duration { Duration::from_secs(1) }
/// #     fn try_complete(&mut self) -> bool { true }
/// #     fn on_complete(&mut self, _: Completion) {}
/// # }
/// let purgatory: Purgatory<&str, Op> = Purgatory::builder().build().unwrap();
/// assert!(purgatory.try_complete_else_watch(Op, &["k"]).unwrap());
/// assert_eq!(purgatory.metrics().satisfied, 1);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PurgatoryMetrics {
    /// Sum of the lengths of all watch lists.
    pub watched: usize,
    /// Operations waiting in the timer.
    pub delayed: usize,
    /// Operations completed by a successful `try_complete`
    /// ([`Completion::Satisfied`](crate::Completion::Satisfied)).
    pub satisfied: u64,
    /// Operations completed by [`Parked::force_complete`](crate::Parked::force_complete)
    /// ([`Completion::Forced`](crate::Completion::Forced)).
    pub forced: u64,
    /// Operations whose delay passed ([`Completion::Expired`](crate::Completion::Expired)).
    pub expired: u64,
    /// Operations completed by shutdown ([`Completion::ShutDown`](crate::Completion::ShutDown)).
    pub shut_down: u64,
    /// Operations handed back by `cancel_for_key`.
    pub cancelled: u64,
    /// Done entries removed from watch lists by sweeps: the purge job's,
    /// and a `park`'s of a list it doubled (not the ones a
    /// `check_and_complete` of their key removes).
    pub purged: u64,
    /// Panics caught in operation callbacks.
    pub panics: u64,
}
