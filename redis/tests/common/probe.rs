//! The kernel's scheduler figures of a thread (`/proc/<pid>/task/<tid>/schedstat`):
//! the CPU time redis-server's main thread spends on a call, for
//! `examples/call_cpu.rs`.

use std::thread;
use std::time::Duration;

/// The kernel's scheduler figures of one thread
/// (`/proc/<pid>/task/<tid>/schedstat`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sched {
    /// Time on a CPU, ns (`sum_exec_runtime`).
    pub cpu_ns: u64,
    /// Time runnable but waiting for a CPU, ns (`run_delay`).
    pub waited_ns: u64,
    /// Time slices run.
    pub slices: u64,
}

/// redis-server's main thread, as the kernel's scheduler sees it.
pub struct Probe {
    /// `/proc/<pid>/task/<pid>/`.
    dir: String,
}

impl Probe {
    /// The probe of `pid`'s main thread, if this kernel keeps its figures.
    pub fn new(pid: u32) -> Option<Probe> {
        let probe = Probe {
            dir: format!("/proc/{pid}/task/{pid}/"),
        };
        let sched = probe.read()?;
        (sched.slices > 0).then_some(probe)
    }

    fn read(&self) -> Option<Sched> {
        let text = std::fs::read_to_string(format!("{}schedstat", self.dir)).ok()?;
        let mut fields = text.split_whitespace().map(str::parse::<u64>);
        Some(Sched {
            cpu_ns: fields.next()?.ok()?,
            waited_ns: fields.next()?.ok()?,
            slices: fields.next()?.ok()?,
        })
    }

    /// Whether the thread sleeps (state `S` in its `stat`).
    fn sleeping(&self) -> bool {
        std::fs::read_to_string(format!("{}stat", self.dir))
            .ok()
            .and_then(|stat| {
                let (_, rest) = stat.rsplit_once(')')?;
                rest.split_whitespace().next().map(|state| state == "S")
            })
            .unwrap_or(false)
    }

    /// One reading of the figures, with the thread's state just before and
    /// just after it.
    fn sample(&self) -> Sample {
        let asleep_before = self.sleeping();
        let sched = self.read().expect("schedstat");
        let asleep_after = self.sleeping();
        Sample {
            asleep_before,
            sched,
            asleep_after,
        }
    }

    /// The figures once the thread sleeps and they hold still; see
    /// [`settle`].
    pub fn settled(&self) -> Sched {
        let mut samples = std::iter::repeat_with(|| {
            let sample = self.sample();
            thread::sleep(Duration::from_micros(50));
            sample
        });
        settle(samples.by_ref().take(100_000))
            .unwrap_or_else(|| panic!("redis-server did not settle: {:?}", samples.next()))
    }
}

/// A reading of a thread's figures, with its state either side.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    /// The thread slept (state `S`) just before the reading.
    pub asleep_before: bool,
    /// The figures.
    pub sched: Sched,
    /// The thread slept just after the reading.
    pub asleep_after: bool,
}

/// The first exact figures among `samples`: two readings in a row, each
/// taken while the thread was seen asleep both before and after it, that
/// agree in every figure (the time slices too). The kernel brings a
/// thread's `sum_exec_runtime` up to date when it stops running, not while
/// it runs (a running thread's figure lags by up to a scheduler tick): a
/// reading with the thread asleep either side holds its last slice whole,
/// and the same slice count in both readings says it did not run between
/// them. A reading seen asleep only after it may have been taken while it
/// ran, stale.
pub fn settle(samples: impl IntoIterator<Item = Sample>) -> Option<Sched> {
    let mut last: Option<Sched> = None;
    for sample in samples {
        let asleep = sample.asleep_before && sample.asleep_after;
        if asleep && last == Some(sample.sched) {
            return last;
        }
        last = asleep.then_some(sample.sched);
    }
    None
}
