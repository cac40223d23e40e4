//! Time: one clock and its few conversions, and the wheel's settings.
//!
//! - [`ticks`]: nanoseconds since an origin ↔ ticks (deadlines round up,
//!   readings down, both saturating); pure arithmetic, shared by both
//!   timers.
//! - [`source`]: the thread-safe timer's clock, origin and resolution;
//!   [`Instant`](std::time::Instant)s meet nanoseconds only there.
//! - [`limits`]: the wheel's settings, their defaults, and every
//!   configuration limit.

mod limits;
mod source;
mod ticks;

pub(crate) use limits::{wheel_setters, Invalid, WheelConfig};
pub use limits::{
    DEFAULT_TICK, DEFAULT_WHEEL_SIZE, MAX_SHARDS, MAX_TICK, MAX_WATCH_SHARDS, MAX_WHEEL_SIZE,
    MAX_WORKERS, MIN_TICK, MIN_WHEEL_SIZE,
};
pub(crate) use source::{is_system_clock, Deadline, TimeSource};
pub(crate) use ticks::{nanos, Due, Resolution, NEVER};
