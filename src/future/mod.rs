//! Async support: the timer's wake-ups as futures, for any executor.
//!
//! * [`Sleep`] and [`Timeout`], from [`Timer::sleep`](crate::Timer::sleep),
//!   [`Timer::sleep_until`](crate::Timer::sleep_until) and
//!   [`Timer::timeout`](crate::Timer::timeout): a sleep's timer entry is the
//!   waker of the task that awaits it, stored in the wheel with no allocation;
//!   the driver wakes the task when the deadline passes, and dropping the
//!   sleep cancels the entry at once.
//! * [`Parked`](crate::Parked) is a future: it resolves with how its operation
//!   ended.
//! * [`Expirations`]: a keyed timer's expired entries as a stream.
//! * [`ShutDown`]: [`Timer::shutdown`](crate::Timer::shutdown) without blocking
//!   the awaiting thread.
//!
//! None of it needs a particular runtime: the futures use only the waker they
//! are polled with. Wakers are woken with no lock of ours held, and a waker is
//! cloned and dropped outside our locks too.

mod expirations;
mod shutdown;
mod sleep;

pub use expirations::{Expirations, NextExpired};
pub use shutdown::ShutDown;
pub use sleep::{Elapsed, Sleep, Timeout};
