//! Process statistics from Linux's `/proc`, for the examples, the benches
//! and the peers report. Elsewhere every figure reads as 0.

/// Process CPU time (user + system) in seconds.
pub fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name, which is in parentheses.
    let rest = stat.rsplit(')').next().unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of the full line: 11 and 12 here.
    (ticks(11) + ticks(12)) / 100.0
}

/// CPU time of the calling thread in seconds, to the nanosecond (the
/// scheduler's own count, `/proc/thread-self/schedstat`).
pub fn thread_cpu_seconds() -> f64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0.0, |ns| ns / 1e9)
}

/// A `/proc/self/status` memory field in MiB: `"VmRSS:"` for the current
/// resident set, `"VmHWM:"` for its peak.
pub fn status_mib(field: &str) -> f64 {
    status_kib(field) as f64 / 1024.0
}

/// The current resident set size in bytes.
pub fn rss_bytes() -> u64 {
    status_kib("VmRSS:") * 1024
}

/// How many of this process's threads are named starting with `prefix`
/// (Linux's names are cut to 15 bytes).
pub fn threads_named(prefix: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|tasks| {
            tasks
                .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
                .filter(|name| name.starts_with(prefix))
                .count()
        })
        .unwrap_or(0)
}

/// A `/proc/self/status` memory field in KiB.
fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse().ok())
        .unwrap_or(0)
}

/// The system load averages over 1, 5 and 15 minutes (`/proc/loadavg`):
/// runnable and waiting tasks, this process's own included.
pub fn load_average() -> [f64; 3] {
    parse_load_average(&std::fs::read_to_string("/proc/loadavg").unwrap_or_default())
}

/// The first three fields of `/proc/loadavg`'s text; 0 for each missing one.
fn parse_load_average(text: &str) -> [f64; 3] {
    let mut fields = text
        .split_whitespace()
        .map(|v| v.parse::<f64>().unwrap_or(0.0));
    [(); 3].map(|()| fields.next().unwrap_or(0.0))
}

/// CPU time, in seconds, that the whole machine has spent busy since it
/// booted, summed over its CPUs (`/proc/stat`): every state but idle and
/// waiting for I/O. Less this process's [`cpu_seconds`] over the same span,
/// it is what other processes (and other guests, as steal) took.
pub fn machine_busy_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(cpu) = stat.lines().find_map(|l| l.strip_prefix("cpu ")) else {
        return 0.0;
    };
    // user nice system idle iowait irq softirq steal (guest time is already
    // in user and nice).
    let ticks: Vec<f64> = cpu
        .split_whitespace()
        .take(8)
        .map(|v| v.parse().unwrap_or(0.0))
        .collect();
    let idle: f64 = ticks.iter().skip(3).take(2).sum();
    (ticks.iter().sum::<f64>() - idle) / 100.0
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn the_machine_was_busy_at_least_as_long_as_this_process() {
        // Spin long enough to show in 10 ms clock ticks.
        let start = std::time::Instant::now();
        while start.elapsed() < std::time::Duration::from_millis(30) {
            std::hint::black_box(0);
        }
        let (ours, machine) = (cpu_seconds(), machine_busy_seconds());
        assert!(ours > 0.0, "process CPU {ours}");
        assert!(
            machine >= ours,
            "machine {machine} s, this process {ours} s"
        );
    }

    #[test]
    fn load_averages_are_parsed() {
        let line = "0.54 1.59 12.26 1/88 12749\n";
        assert_eq!(parse_load_average(line), [0.54, 1.59, 12.26]);
        assert_eq!(parse_load_average(""), [0.0; 3]);
        assert!(load_average().iter().all(|v| v.is_finite() && *v >= 0.0));
    }
}
