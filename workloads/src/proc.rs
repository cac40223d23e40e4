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
