//! The figures published to the `metrics` facade (`--features metrics`),
//! read back from a real recorder, `metrics-util`'s debugging one.
#![cfg(feature = "metrics")]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use purgatorio::{Completion, DelayedOperation, KeyedTimer, ManualClock, Purgatory, Timer};

/// Upper bound for waiting on the workers.
const PATIENCE: Duration = Duration::from_secs(20);

/// One reading of every figure (the debugging recorder's snapshot drains
/// its counters, so take it once).
type Reading = Vec<(
    metrics_util::CompositeKey,
    Option<metrics::Unit>,
    Option<metrics::SharedString>,
    DebugValue,
)>;

/// A counter's value in `reading`, by name and labels.
fn counter(reading: &Reading, name: &str, labels: &[(&str, &str)]) -> u64 {
    reading
        .iter()
        .find_map(|(key, _, _, value)| {
            let key = key.key();
            let matches = key.name() == name
                && labels
                    .iter()
                    .all(|(k, v)| key.labels().any(|l| l.key() == *k && l.value() == *v));
            match (matches, value) {
                (true, DebugValue::Counter(n)) => Some(*n),
                _ => None,
            }
        })
        .unwrap_or(0)
}

/// Waits until `f` holds, bounded.
fn wait_until(what: &str, f: impl Fn() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < PATIENCE, "gave up waiting for {what}");
        std::thread::yield_now();
    }
}

struct Gate(Arc<AtomicBool>);

impl DelayedOperation for Gate {
    fn delay(&self) -> Duration {
        Duration::from_millis(10)
    }
    fn try_complete(&mut self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
    fn on_complete(&mut self, _: Completion) {}
}

#[test]
fn timers_purgatories_and_keyed_timers_publish_under_their_names() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let clock = ManualClock::new();
    let (timer, fetches, sessions) = metrics::with_local_recorder(&recorder, || {
        let timer = Timer::builder()
            .clock(clock.clone())
            .thread_name("pubtimer")
            .build()
            .unwrap();
        let fetches: Purgatory<u32, Gate> = Purgatory::builder()
            .name("fetch")
            .shared_timer(&timer)
            .build()
            .unwrap();
        let sessions = KeyedTimer::on_timer(&timer, |_: u32, _: ()| ());
        (timer, fetches, sessions)
    });
    let ready = Arc::new(AtomicBool::new(false));
    fetches
        .try_complete_else_watch(Gate(Arc::clone(&ready)), [1])
        .unwrap();
    fetches
        .try_complete_else_watch(Gate(Arc::new(AtomicBool::new(false))), [2])
        .unwrap();
    ready.store(true, Ordering::SeqCst);
    assert_eq!(fetches.check_and_complete(&1).unwrap(), 1);
    sessions.set(7, (), Duration::from_millis(10)).unwrap();
    clock.advance(Duration::from_millis(10));
    wait_until("the expiries", || {
        fetches.metrics().expired == 1 && sessions.metrics().expired == 1
    });

    let reading: Reading = snapshotter.snapshot().into_vec();
    let timer_label = [("timer", "pubtimer")];
    assert_eq!(
        counter(&reading, "purgatorio_timer_scheduled_total", &timer_label),
        3
    );
    assert_eq!(
        counter(&reading, "purgatorio_timer_cancelled_total", &timer_label),
        1
    );
    assert_eq!(
        counter(&reading, "purgatorio_timer_expired_total", &timer_label),
        2
    );
    for (completion, n) in [("satisfied", 1), ("expired", 1), ("forced", 0)] {
        assert_eq!(
            counter(
                &reading,
                "purgatorio_purgatory_completed_total",
                &[("purgatory", "fetch"), ("completion", completion)]
            ),
            n,
            "{completion}"
        );
    }
    for (event, n) in [("inserted", 1), ("expired", 1), ("removed", 0)] {
        assert_eq!(
            counter(
                &reading,
                "purgatorio_keyed_events_total",
                &[("keyed_timer", "pubtimer"), ("event", event)]
            ),
            n,
            "{event}"
        );
    }
    drop((fetches, sessions, timer));
}
