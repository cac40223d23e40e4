//! How an operation ended, as the task awaiting its handle reads it: one
//! byte, changed only by read-modify-writes, so the publisher, the awaiting
//! task and the dropped handle are totally ordered. (A handle dropped after
//! the outcome was published, with no task awaiting, only reads it: nobody
//! looks at the byte after that.)

use super::operation::Completion;

/// How a parked operation ended, as [`Parked::outcome`](crate::Parked::outcome)
/// reports it.
///
/// An operation either completed, and then it has a [`Completion`] and its
/// answer was made (unless making it panicked), or it was cancelled or its
/// `try_complete` panicked, and then awaiting its handle resolves to
/// `None`.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use purgatorio::{Completion, DelayedOperation, Outcome, Purgatory};
///
/// struct Wait;
/// impl DelayedOperation for Wait {
///     fn delay(&self) -> Duration { Duration::from_secs(60) }
///     fn try_complete(&mut self) -> bool { false }
///     fn on_complete(&mut self, _: Completion) {}
/// }
///
/// let purgatory: Purgatory<u8, Wait> = Purgatory::builder().build()?;
/// let forced = purgatory.park(Wait, [1])?;
/// let taken_back = purgatory.park(Wait, [1])?;
/// assert_eq!(forced.outcome(), None); // still pending
///
/// assert!(forced.force_complete());
/// assert!(taken_back.cancel().is_some());
/// assert_eq!(forced.outcome(), Some(Outcome::Completed(Completion::Forced)));
/// assert_eq!(taken_back.outcome(), Some(Outcome::Cancelled));
/// assert_eq!(taken_back.outcome().and_then(Outcome::completion), None);
/// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Outcome {
    /// It completed, for this reason, and `on_complete` (or `answer`) ran.
    /// If that panicked, the panic is counted and a request has no answer.
    Completed(Completion),
    /// It was taken back without completing, by
    /// [`Parked::cancel`](crate::Parked::cancel) or
    /// [`Purgatory::cancel_for_key`](crate::Purgatory::cancel_for_key). It
    /// has no answer.
    Cancelled,
    /// Its [`try_complete`](crate::DelayedOperation::try_complete)
    /// panicked: it ended there, without completing, and has no answer
    /// (the panic is counted in the purgatory's metrics).
    Panicked,
}

impl Outcome {
    /// The completion, if it completed; `None` if it was cancelled or its
    /// `try_complete` panicked.
    ///
    /// # Examples
    ///
    /// ```
    /// use purgatorio::{Completion, Outcome};
    ///
    /// let expired = Outcome::Completed(Completion::Expired);
    /// assert_eq!(expired.completion(), Some(Completion::Expired));
    /// assert_eq!(Outcome::Cancelled.completion(), None);
    /// ```
    pub fn completion(self) -> Option<Completion> {
        match self {
            Outcome::Completed(completion) => Some(completion),
            Outcome::Cancelled | Outcome::Panicked => None,
        }
    }
}

/// The bit that says a task stored its waker.
pub(crate) const AWAITED: u8 = 0x80;

/// The bit that says the [`Parked`](super::Parked) handle was dropped:
/// nobody will take the answer.
pub(crate) const GONE: u8 = 0x40;

/// The byte of an operation that ended: 1 if cancelled, [`PANICKED`] if
/// its `try_complete` panicked, else 2 plus the completion's index (0 while
/// pending; [`AWAITED`] and [`GONE`] apart).
pub(crate) fn encode(ended: Outcome) -> u8 {
    match ended {
        Outcome::Cancelled => 1,
        Outcome::Panicked => PANICKED,
        Outcome::Completed(completion) => 2 + completion as u8,
    }
}

/// The byte of an operation whose `try_complete` panicked: past every
/// completion's.
const PANICKED: u8 = 0x20;

// Keep this naming the last `Completion`: its byte must stay below
// `PANICKED`.
const _: () = assert!(2 + (Completion::ShutDown as u8) < PANICKED);

/// How the operation whose byte is `code` ended; `None` while pending.
pub(crate) fn decode(code: u8) -> Option<Outcome> {
    const SATISFIED: u8 = 2 + Completion::Satisfied as u8;
    const FORCED: u8 = 2 + Completion::Forced as u8;
    const EXPIRED: u8 = 2 + Completion::Expired as u8;
    const SHUT_DOWN: u8 = 2 + Completion::ShutDown as u8;
    Some(match code & !(AWAITED | GONE) {
        0 => return None,
        1 => Outcome::Cancelled,
        PANICKED => Outcome::Panicked,
        SATISFIED => Outcome::Completed(Completion::Satisfied),
        FORCED => Outcome::Completed(Completion::Forced),
        EXPIRED => Outcome::Completed(Completion::Expired),
        SHUT_DOWN => Outcome::Completed(Completion::ShutDown),
        other => unreachable!("no outcome is encoded as {other}"),
    })
}

#[cfg(all(test, not(purgatorio_loom)))]
mod tests {
    use super::*;

    #[test]
    fn every_ending_round_trips_beside_the_flag_bits() {
        let all = [
            Outcome::Cancelled,
            Outcome::Panicked,
            Outcome::Completed(Completion::Satisfied),
            Outcome::Completed(Completion::Forced),
            Outcome::Completed(Completion::Expired),
            Outcome::Completed(Completion::ShutDown),
        ];
        for ended in all {
            for flags in [0, AWAITED, GONE, AWAITED | GONE] {
                assert_eq!(
                    decode(encode(ended) | flags),
                    Some(ended),
                    "{ended:?} {flags:#x}"
                );
            }
        }
        assert_eq!(decode(AWAITED | GONE), None);
    }
}
