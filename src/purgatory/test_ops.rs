//! Operations the purgatory's unit tests share.

use std::time::Duration;

use super::{Completion, DelayedOperation};

/// An operation that never completes by itself.
pub(super) struct Wait;

impl DelayedOperation for Wait {
    fn delay(&self) -> Duration {
        Duration::from_secs(60)
    }
    fn try_complete(&mut self) -> bool {
        false
    }
    fn on_complete(&mut self, _: Completion) {}
}
