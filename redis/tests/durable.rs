//! Durable timers against a real `redis-server` (installed if missing),
//! started on a free loopback port in a temporary directory with the
//! append-only file on, and stopped by PID. Every wait is bounded.

mod common;

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use common::{parse_deliveries as parse, Server, PATIENCE};
use purgatorio_redis::{Config, Consumer, Scheduler, Timers, Verdict};
use purgatorio_testkit::{wait_for, ChildGuard, TempDir};

/// What a consumer saw: id → (deadline, Redis time at handling, attempt),
/// every delivery.
type Seen = Arc<Mutex<Vec<(String, u64, u64, u32)>>>;

/// A scheduler node and a consumer on threads of the test.
struct Node {
    consumer: purgatorio_redis::StopHandle,
    scheduler: purgatorio_redis::StopHandle,
    threads: Vec<thread::JoinHandle<()>>,
    seen: Seen,
}

impl Node {
    fn start(timers: &Timers, name: &str) -> Node {
        let scheduler = Scheduler::new(timers.clone());
        let stop_scheduler = scheduler.stop_handle();
        let seen: Seen = Arc::default();
        let mut threads = vec![thread::spawn(move || {
            scheduler.run().expect("scheduler");
        })];
        let consumer = Consumer::new(timers.clone(), name).expect("consumer");
        let stop_consumer = consumer.stop_handle();
        let (timers, record) = (timers.clone(), Arc::clone(&seen));
        threads.push(thread::spawn(move || {
            consumer
                .run(|d| {
                    let now = timers.server_time_ms().expect("TIME");
                    record
                        .lock()
                        .unwrap()
                        .push((d.id.clone(), d.deadline_ms, now, d.attempt));
                    Verdict::Ack
                })
                .expect("consumer");
        }));
        Node {
            consumer: stop_consumer,
            scheduler: stop_scheduler,
            threads,
            seen,
        }
    }

    fn wait_for_deliveries(&self, n: usize) {
        wait_for("the deliveries", PATIENCE, || {
            (self.seen.lock().unwrap().len() >= n).then_some(())
        });
    }

    fn stop(self) -> Vec<(String, u64, u64, u32)> {
        self.consumer.stop();
        self.scheduler.stop();
        for thread in self.threads {
            thread.join().expect("node thread");
        }
        let seen = self.seen.lock().unwrap().clone();
        seen
    }
}

/// Schedules `n` timers `p0…` due from `start_ms` after Redis's now, spread
/// over `spread_ms`; returns their deadlines.
fn schedule(
    timers: &Timers,
    prefix: &str,
    n: u64,
    start_ms: u64,
    spread_ms: u64,
) -> HashMap<String, u64> {
    let base = timers.server_time_ms().unwrap() + start_ms;
    (0..n)
        .map(|i| {
            let id = format!("{prefix}{i}");
            let at = base + i * spread_ms / n;
            timers.schedule(&id, at, id.as_bytes()).unwrap();
            (id, at)
        })
        .collect()
}

fn assert_never_early(seen: &[(String, u64, u64, u32)]) {
    let early: Vec<_> = seen
        .iter()
        .filter(|(_, deadline, now, _)| now < deadline)
        .collect();
    assert!(
        early.is_empty(),
        "delivered before the deadline by Redis time: {early:?}"
    );
}

#[test]
fn every_timer_is_delivered_once_and_never_early_by_redis_time() {
    let server = Server::start("everysec");
    let timers = server.timers("once");
    let deadlines = schedule(&timers, "t", 500, 200, 1_000);
    let node = Node::start(&timers, "c");
    node.wait_for_deliveries(500);
    let seen = node.stop();
    assert_eq!(seen.len(), 500, "exactly once without failures");
    assert_never_early(&seen);
    for (id, deadline, _, attempt) in &seen {
        assert_eq!(deadlines[id], *deadline);
        assert_eq!(*attempt, 1);
    }
    let metrics = timers.metrics().unwrap();
    assert_eq!((metrics.pending, metrics.promoted), (0, 500));
}

#[test]
fn scheduling_an_id_again_moves_it_and_cancel_removes_it() {
    let server = Server::start("everysec");
    let timers = server.timers("moves");
    let now = timers.server_time_ms().unwrap();
    timers.schedule("a", now + 60_000, b"first").unwrap();
    timers.schedule("a", now + 300, b"second").unwrap(); // moved earlier
    timers.schedule("b", now + 200, b"gone").unwrap();
    assert!(timers.cancel("b").unwrap());
    assert!(!timers.cancel("b").unwrap(), "already cancelled");
    assert_eq!(timers.metrics().unwrap().pending, 1);
    let node = Node::start(&timers, "c");
    node.wait_for_deliveries(1);
    // b's deadline passes too; nothing more comes.
    thread::sleep(Duration::from_millis(300));
    let seen = node.stop();
    assert_eq!(seen.len(), 1);
    assert_eq!((seen[0].0.as_str(), seen[0].1), ("a", now + 300));
    assert_never_early(&seen);
}

#[test]
fn timers_survive_a_redis_crash_through_the_append_only_file() {
    // `appendfsync always`: every write is on disk before Redis answers, so
    // a SIGKILL loses nothing. With the default `everysec`, up to about a
    // second of writes acknowledged before the crash can be lost.
    let mut server = Server::start("always");
    let timers = server.timers("crash");
    let deadlines = schedule(&timers, "k", 300, 1_500, 500);
    server.kill();
    server.restart();
    let node = Node::start(&timers, "c");
    node.wait_for_deliveries(300);
    let seen = node.stop();
    assert_never_early(&seen);
    let ids: std::collections::HashSet<_> = seen.iter().map(|s| s.0.clone()).collect();
    assert_eq!(ids.len(), deadlines.len(), "every timer survived");
}

#[test]
fn an_unacknowledged_delivery_is_taken_over_retried_later_and_dead_lettered() {
    let server = Server::start("everysec");
    let mut config = Config::new("retry");
    config.visibility_timeout = Duration::from_millis(200);
    config.max_attempts = 3;
    let timers = Timers::connect(&server.url(), config).unwrap();
    let now = timers.server_time_ms().unwrap();
    timers.schedule("job", now, b"work").unwrap();
    let scheduler = Scheduler::new(timers.clone());
    let stop = scheduler.stop_handle();
    let running = thread::spawn(move || scheduler.run().unwrap());

    // A consumer takes it and dies without acknowledging.
    let dead = Consumer::new(timers.clone(), "dies").unwrap();
    let first = wait_for("the first delivery", PATIENCE, || {
        dead.poll(Duration::from_millis(100), 10).unwrap().pop()
    });
    assert_eq!(first.attempt, 1);
    drop(dead);
    // Another takes it over, but only after the visibility timeout.
    let alive = Consumer::new(timers.clone(), "alive").unwrap();
    let second = wait_for("the take-over", PATIENCE, || {
        alive.take_over(10).unwrap().pop()
    });
    assert_eq!((second.id.as_str(), second.attempt), ("job", 2));
    // It asks for a retry 300 ms later: delivered again, not before.
    let asked = timers.server_time_ms().unwrap();
    alive
        .finish(&second, Verdict::RetryLater(Duration::from_millis(300)))
        .unwrap();
    let third = wait_for("the retry", PATIENCE, || {
        alive.poll(Duration::from_millis(100), 10).unwrap().pop()
    });
    assert_eq!(third.attempt, 3);
    assert!(third.deadline_ms >= asked + 300);
    assert!(timers.server_time_ms().unwrap() >= third.deadline_ms);
    // The last attempt fails too: dead-lettered.
    alive
        .finish(&third, Verdict::RetryLater(Duration::from_millis(1)))
        .unwrap();
    let metrics = timers.metrics().unwrap();
    assert_eq!((metrics.dead_letters, metrics.pending), (1, 0));
    assert_eq!(metrics.redelivered, 1);
    stop.stop();
    running.join().unwrap();
}

#[test]
fn processes_killed_mid_run_lose_nothing() {
    let server = Server::start("everysec");
    let binary = common::cli();
    let url = server.url();
    let dir = TempDir::new("purgatorio-redis-procs");
    let spawn = |args: &[&str], out: &str| {
        let file = std::fs::File::create(dir.path().join(out)).unwrap();
        ChildGuard::new(
            Command::new(binary)
                .args(["--url", &url, "--namespace", "procs"])
                .args(args)
                .stdout(file)
                .stderr(Stdio::null())
                .spawn()
                .expect("start a node"),
        )
    };
    let consumer = |name: &str, out: &str| {
        spawn(
            &["consumer", "--name", name, "--visibility-ms", "1000"],
            out,
        )
    };
    let schedulers: Vec<_> = (0..3)
        .map(|i| spawn(&["scheduler"], &format!("s{i}.log")))
        .collect();
    let mut consumers = vec![consumer("c0", "c0.log"), consumer("c1", "c1.log")];
    let total = 20_000u64;
    let scheduled = Command::new(binary)
        .args(["--url", &url, "--namespace", "procs", "schedule", "--count"])
        .arg(total.to_string())
        .args(["--start-ms", "500", "--spread-ms", "5000"])
        .output()
        .unwrap();
    assert!(scheduled.status.success());
    thread::sleep(Duration::from_millis(2_000));
    // Kill a scheduler and a consumer mid-run, then start them again.
    let mut schedulers = schedulers;
    schedulers.remove(0).kill();
    consumers.remove(0).kill();
    let killed_output = std::fs::read_to_string(dir.path().join("c0.log")).unwrap();
    schedulers.push(spawn(&["scheduler"], "s3.log"));
    consumers.push(consumer("c0", "c0-again.log"));
    let logs = ["c0.log", "c1.log", "c0-again.log"];
    let read_all = || -> Vec<(String, u64, u64)> {
        logs.iter()
            .flat_map(|log| {
                parse(&std::fs::read_to_string(dir.path().join(log)).unwrap_or_default())
            })
            .collect()
    };
    let seen = wait_for(
        "every timer to be delivered",
        Duration::from_secs(60),
        || {
            let seen = read_all();
            let ids: std::collections::HashSet<_> = seen.iter().map(|s| s.0.clone()).collect();
            (ids.len() as u64 == total).then_some(seen)
        },
    );
    let early = seen
        .iter()
        .filter(|(_, deadline, now)| now < deadline)
        .count();
    let mut count: HashMap<&str, usize> = HashMap::new();
    for (id, _, _) in &seen {
        *count.entry(id).or_default() += 1;
    }
    let duplicates: Vec<&str> = count
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(id, _)| *id)
        .collect();
    let killed: std::collections::HashSet<String> =
        parse(&killed_output).into_iter().map(|s| s.0).collect();
    eprintln!(
        "{total} timers, {} deliveries, {} duplicates, {early} early",
        seen.len(),
        duplicates.len()
    );
    assert_eq!(
        early, 0,
        "a delivery came before its deadline by Redis time"
    );
    for id in &duplicates {
        assert!(
            killed.contains(*id),
            "{id} was delivered twice but not to the consumer that was killed"
        );
    }
    // Everything delivered was acknowledged (bounded wait for the last acks).
    let timers = server.timers("procs");
    wait_for("the last acknowledgements", PATIENCE, || {
        let m = timers.metrics().ok()?;
        (m.pending == 0 && m.unacknowledged == 0).then_some(())
    });
    drop(consumers);
    drop(schedulers);
}
