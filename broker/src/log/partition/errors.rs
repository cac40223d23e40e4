//! Why a partition's read or append failed.

use std::io;

/// Why a read could not be served.
#[derive(Debug)]
pub enum Unreadable {
    /// The offset is before the log start or past its end.
    OutOfRange,
    /// The files could not be read.
    Io(io::Error),
    /// The batch at byte `at` of its segment claims `len` bytes: fewer
    /// than a header, more than its segment holds, or more than any batch
    /// the broker accepts (nothing that large is read).
    Corrupt {
        /// Where the batch starts in its segment.
        at: u64,
        /// Its whole length as its header gives it.
        len: u64,
    },
}

impl From<io::Error> for Unreadable {
    fn from(e: io::Error) -> Unreadable {
        Unreadable::Io(e)
    }
}

impl std::fmt::Display for Unreadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unreadable::OutOfRange => write!(f, "offset out of range"),
            Unreadable::Io(e) => write!(f, "{e}"),
            Unreadable::Corrupt { at, len } => write!(
                f,
                "the batch at byte {at} of its segment claims {len} bytes, which no batch stored has"
            ),
        }
    }
}

impl std::error::Error for Unreadable {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Unreadable::Io(e) => Some(e),
            _ => None,
        }
    }
}

/// Why an append did not happen; either way the log is as it was.
#[derive(Debug)]
pub enum AppendError {
    /// The batch needs a new segment whose files are still being made:
    /// run (or wait for) the partition's [`RollWork`](crate::log::roll::RollWork), then append again.
    Rolling,
    /// A write failed, or the roll work this append waited for did
    /// (reported once; the next append tries again).
    Io(io::Error),
    /// The log is failed for good ([`Log::fail`](super::Log::fail)): an fsync failed, or
    /// its topic was deleted.
    Failed,
}

impl From<io::Error> for AppendError {
    fn from(e: io::Error) -> AppendError {
        AppendError::Io(e)
    }
}

impl std::fmt::Display for AppendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AppendError::Rolling => write!(f, "the next segment is not made yet"),
            AppendError::Io(e) => write!(f, "{e}"),
            AppendError::Failed => write!(f, "the partition's log is failed"),
        }
    }
}

impl std::error::Error for AppendError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            AppendError::Io(e) => Some(e),
            AppendError::Rolling | AppendError::Failed => None,
        }
    }
}
