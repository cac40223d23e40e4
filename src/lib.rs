//! purgatorio (draft)
mod clock;
mod delay_queue;
mod error;
mod local;
mod timer;
mod wheel;

pub use clock::{Clock, ClockWaker, ManualClock, SystemClock};
pub use error::{
    BuildError, ScheduleError, MAX_SHARDS, MAX_TICK, MAX_WHEEL_SIZE, MAX_WORKERS, MIN_TICK,
    MIN_WHEEL_SIZE,
};
pub use local::{
    Advance, Expired, LocalTimer, LocalTimerBuilder, DEFAULT_TICK, DEFAULT_WHEEL_SIZE,
};
pub use timer::{BoxTask, Metrics, Task, Timer, TimerBuilder, TimerHandle};
pub use wheel::TimerKey;
