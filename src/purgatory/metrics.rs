//! [`PurgatoryMetrics`]: a purgatory's gauges and counters.

/// A snapshot of a purgatory's gauges and counters.
///
/// # Examples
///
/// ```
/// # use std::time::Duration;
/// # use purgatorio::{DelayedOperation, Purgatory};
/// # struct Op;
/// # impl DelayedOperation for Op {
/// #     fn delay(&self) -> Duration { Duration::from_secs(1) }
/// #     fn try_complete(&mut self) -> bool { true }
/// #     fn on_complete(&mut self) {}
/// # }
/// let purgatory: Purgatory<&str, Op> = Purgatory::builder().build().unwrap();
/// assert!(purgatory.try_complete_else_watch(Op, &["k"]).unwrap());
/// assert_eq!(purgatory.metrics().completed_by_try, 1);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PurgatoryMetrics {
    /// Sum of the lengths of all watch lists.
    pub watched: usize,
    /// Operations waiting in the timer.
    pub delayed: usize,
    /// Operations completed other than by expiry: a successful
    /// `try_complete`, or [`Parked::force_complete`](crate::Parked::force_complete).
    pub completed_by_try: u64,
    /// Operations completed by expiry (including at shutdown).
    pub expired: u64,
    /// Done entries removed from watch lists by purges.
    pub purged: u64,
    /// Panics caught in operation callbacks.
    pub panics: u64,
}
