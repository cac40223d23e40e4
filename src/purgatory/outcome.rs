//! How an operation ended, as the task awaiting its handle reads it: one
//! byte, changed only by read-modify-writes, so the publisher, the awaiting
//! task and the dropped handle are totally ordered. (A handle dropped after
//! the outcome was published, with no task awaiting, only reads it: nobody
//! looks at the byte after that.)

use super::operation::Completion;

/// How an operation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ended {
    /// It completed, for this reason: its answer was made.
    Completed(Completion),
    /// It ended without completing: taken back by a cancel, or its
    /// `try_complete` panicked. No answer.
    Withdrawn,
}

impl Ended {
    /// The completion, if it completed.
    pub(crate) fn completion(self) -> Option<Completion> {
        match self {
            Ended::Completed(completion) => Some(completion),
            Ended::Withdrawn => None,
        }
    }
}

/// The bit that says a task stored its waker.
pub(crate) const AWAITED: u8 = 0x80;

/// The bit that says the [`Parked`](super::Parked) handle was dropped:
/// nobody will take the answer.
pub(crate) const GONE: u8 = 0x40;

/// The byte of an operation that ended: 1 if withdrawn, else 2 plus the
/// completion's index (0 while pending; [`AWAITED`] and [`GONE`] apart).
pub(crate) fn encode(ended: Ended) -> u8 {
    match ended {
        Ended::Withdrawn => 1,
        Ended::Completed(completion) => 2 + completion as u8,
    }
}

/// How the operation whose byte is `code` ended; `None` while pending.
pub(crate) fn decode(code: u8) -> Option<Ended> {
    const SATISFIED: u8 = 2 + Completion::Satisfied as u8;
    const FORCED: u8 = 2 + Completion::Forced as u8;
    const EXPIRED: u8 = 2 + Completion::Expired as u8;
    const SHUT_DOWN: u8 = 2 + Completion::ShutDown as u8;
    Some(match code & !(AWAITED | GONE) {
        0 => return None,
        1 => Ended::Withdrawn,
        SATISFIED => Ended::Completed(Completion::Satisfied),
        FORCED => Ended::Completed(Completion::Forced),
        EXPIRED => Ended::Completed(Completion::Expired),
        SHUT_DOWN => Ended::Completed(Completion::ShutDown),
        other => unreachable!("no outcome is encoded as {other}"),
    })
}

#[cfg(all(test, not(purgatorio_loom)))]
mod tests {
    use super::*;

    #[test]
    fn every_ending_round_trips_beside_the_flag_bits() {
        let all = [
            Ended::Withdrawn,
            Ended::Completed(Completion::Satisfied),
            Ended::Completed(Completion::Forced),
            Ended::Completed(Completion::Expired),
            Ended::Completed(Completion::ShutDown),
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
