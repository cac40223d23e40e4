//! Outages: a Redis that never answers is a timeout, not a hang; scheduler
//! and consumer processes ride out a SIGKILLed-and-restarted Redis and a
//! Redis stopped (SIGSTOP) for 10 s, log each outage once, and deliver
//! again within a second of Redis answering.

mod common;

use std::collections::HashSet;
use std::io::Read;
use std::net::TcpListener;
use std::process::Command;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use common::{most_subscriptions, parse_deliveries, spawn_cli, Server, PATIENCE};
use purgatorio_redis::{Config, Error, Scheduler, Timers};
use purgatorio_testkit::{wait_for, ChildGuard, TempDir};

/// A server that accepts connections and never answers; returns its url.
fn silent_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("redis://{}", listener.local_addr().unwrap());
    thread::spawn(move || {
        let mut held = Vec::new();
        // Bounded: a test makes a handful of connections.
        for stream in listener.incoming().take(64).flatten() {
            held.push(stream);
        }
    });
    url
}

#[test]
fn a_server_that_never_answers_is_a_timeout_not_a_hang() {
    let url = silent_server();
    let mut config = Config::new("silent");
    config.response_timeout = Duration::from_millis(200);
    config.retries = 2;
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || tx.send(Timers::connect(&url, config).map(|_| ())));
    let result = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("connect hung on a server that never answers");
    match result {
        Err(Error::Unavailable { tries: 2, last }) => assert!(last.is_timeout(), "{last}"),
        other => panic!("{other:?}"),
    }
}

/// Waits up to `limit` for `child` to exit; its code and stderr.
fn exit_within(mut child: ChildGuard, limit: Duration) -> (Option<i32>, String) {
    let status = wait_for("the CLI to give up", limit, || {
        child.child().try_wait().unwrap()
    });
    let mut stderr = String::new();
    if let Some(mut pipe) = child.child().stderr.take() {
        pipe.read_to_string(&mut stderr).unwrap();
    }
    (status.code(), stderr)
}

#[test]
fn the_cli_gives_up_on_a_server_that_never_answers() {
    let url = silent_server();
    for args in [&["schedule", "--count", "1"][..], &["scheduler"]] {
        let child = Command::new(common::cli())
            .args(["--url", &url, "--response-timeout-ms", "200"])
            // Without a deadline a command waits for Redis forever
            // (`tests/trouble.rs`).
            .args(["--wait-ms", "1000"])
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let (code, stderr) = exit_within(ChildGuard::new(child), Duration::from_secs(20));
        assert_eq!(code, Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains("unavailable"), "{args:?}: {stderr}");
    }
}

/// Schedules `n` timers `prefix0…` due from `from_ms` after Redis's now,
/// 5 ms apart.
fn schedule(timers: &Timers, prefix: &str, n: u64, from_ms: u64) {
    let now = timers.server_time_ms().unwrap();
    let ids: Vec<String> = (0..n).map(|i| format!("{prefix}{i}")).collect();
    let batch: Vec<(&str, u64, &[u8])> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| (id.as_str(), now + from_ms + 5 * i as u64, &b"p"[..]))
        .collect();
    timers.schedule_many(&batch).unwrap();
}

/// How many distinct timers the consumer printed.
fn delivered(dir: &TempDir) -> usize {
    let out = std::fs::read_to_string(dir.path().join("consumer")).unwrap_or_default();
    let ids: HashSet<String> = parse_deliveries(&out).into_iter().map(|d| d.0).collect();
    ids.len()
}

/// Waits until `n` are delivered; how long it took.
fn wait_delivered(dir: &TempDir, n: usize) -> Duration {
    let started = Instant::now();
    wait_for(&format!("{n} deliveries"), PATIENCE, || {
        (delivered(dir) >= n).then_some(())
    });
    started.elapsed()
}

#[test]
fn schedulers_and_consumers_ride_out_a_restart_and_a_stall() {
    let mut server = Server::start("always");
    let dir = TempDir::new("purgatorio-redis-outage");
    let url = server.url();
    let _scheduler = spawn_cli(&[], &url, "outage", &["scheduler"], &dir, "scheduler");
    let _consumer = spawn_cli(
        &[],
        &url,
        "outage",
        &["consumer", "--name", "c"],
        &dir,
        "consumer",
    );
    let timers = server.timers("outage");
    schedule(&timers, "a", 100, 300);
    wait_delivered(&dir, 100);

    // Outage 1: SIGKILL, 3 s down, restart from the append-only file. The
    // timers come due while Redis is down.
    schedule(&timers, "b", 100, 500);
    // The scheduler hears of them (Pub/Sub) and waits for the first.
    thread::sleep(Duration::from_millis(200));
    server.kill();
    thread::sleep(Duration::from_secs(3));
    server.restart();
    let after_restart = wait_delivered(&dir, 101);
    wait_delivered(&dir, 200);

    // Outage 2: Redis stopped for 10 s (a network stall: connections stay
    // open, nothing answers).
    schedule(&timers, "c", 100, 500);
    thread::sleep(Duration::from_millis(200));
    server.signal("STOP");
    thread::sleep(Duration::from_secs(10));
    server.signal("CONT");
    let after_stall = wait_delivered(&dir, 201);
    wait_delivered(&dir, 300);
    eprintln!(
        "first delivery {after_restart:?} after the restart, {after_stall:?} after the stall"
    );

    let out = std::fs::read_to_string(dir.path().join("consumer")).unwrap();
    if std::env::var_os("OUTAGE_DEBUG").is_some() {
        eprintln!("{out}");
    }
    let early: Vec<_> = parse_deliveries(&out)
        .into_iter()
        .filter(|(_, deadline, promoted)| promoted < deadline)
        .collect();
    assert!(early.is_empty(), "early: {early:?}");
    // Each outage is logged once by each process that saw it, with its
    // end: the scheduler, waiting for timers due in each outage, sees both;
    // the consumer, blocked in a read that outlasts the stall, may see only
    // the restart.
    // A process in its backoff when Redis came back logs the end at its
    // next try (at most 500 ms later), which may come after the last
    // delivery (a call it had given up on may have done the work).
    let counts = |log: &str| {
        let text = std::fs::read_to_string(dir.path().join(log)).unwrap();
        let down = text.matches("retrying with backoff").count();
        let up = text.matches("answers again").count();
        (text, down, up)
    };
    wait_for("each outage's end logged", PATIENCE, || {
        ["scheduler.err", "consumer.err"]
            .iter()
            .all(|log| {
                let (_, down, up) = counts(log);
                down == up
            })
            .then_some(())
    });
    for (log, least) in [("scheduler.err", 2), ("consumer.err", 1)] {
        let (text, down, up) = counts(log);
        assert!(
            (least..=2).contains(&down) && down == up,
            "{log}: {down} outages and {up} recoveries logged:\n{text}"
        );
    }
    // The scheduler's wake listener loses its subscription with the
    // restart (the stall leaves its connection open and quiet), and logs
    // that once, then once that it listens again (as soon as Redis
    // confirms the new subscription).
    let text = std::fs::read_to_string(dir.path().join("scheduler.err")).unwrap();
    let lost = text.matches("subscription lost").count();
    let again = text.matches("subscribed again").count();
    assert!(
        (1..=2).contains(&lost) && lost == again,
        "the wake listener logged {lost} losses and {again} subscriptions again:\n{text}"
    );
}

#[test]
fn a_consumer_creates_its_group_again_when_redis_comes_back_empty() {
    let mut server = Server::start_volatile();
    let timers = server.timers("empty");
    let node = purgatorio_redis::Scheduler::new(timers.clone());
    let stop_node = node.stop_handle();
    let scheduler = thread::spawn(move || node.run().unwrap());
    let consumer = purgatorio_redis::Consumer::new(timers.clone(), "c").unwrap();
    let stop_consumer = consumer.stop_handle();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = std::sync::Arc::clone(&seen);
    let consuming = thread::spawn(move || {
        consumer.run(|d| {
            record.lock().unwrap().push(d.id.clone());
            purgatorio_redis::Verdict::Ack
        })
    });
    schedule(&timers, "before", 10, 100);
    wait_for("the first deliveries", PATIENCE, || {
        (seen.lock().unwrap().len() >= 10).then_some(())
    });
    // Redis restarts with nothing: no stream, no consumer group.
    server.kill();
    server.restart();
    schedule(&timers, "after", 10, 100);
    wait_for("deliveries after the restart", PATIENCE, || {
        (seen.lock().unwrap().len() >= 20).then_some(())
    });
    stop_consumer.stop();
    stop_node.stop();
    consuming.join().unwrap().expect("the consumer kept going");
    scheduler.join().unwrap();
}

/// A wake subscription the server drops at once (here `CLIENT KILL TYPE
/// pubsub` every 5 ms for a second and more) is made again with backoff,
/// not at once each time; once the drops stop, the node listens again and
/// a schedule wakes it.
#[test]
fn a_dropped_wake_subscription_is_made_again_with_backoff() {
    let server = Server::start_volatile();
    let timers = server.timers("resub");
    let node = Scheduler::new(timers.clone());
    let stop = node.stop_handle();
    let running = thread::spawn(move || node.run());
    wait_for("the subscription", PATIENCE, || {
        (server.subscribers("resub") == 1).then_some(())
    });
    let mut c = server.raw().unwrap();
    let mut killed = 0;
    let started = Instant::now();
    for _ in 0..200 {
        killed += Server::kill_subscriptions(&mut c);
        thread::sleep(Duration::from_millis(5));
    }
    let allowed = most_subscriptions(started.elapsed());
    // Subscribing again at once would be one subscription per kill (200).
    assert!(
        killed <= allowed,
        "{killed} subscriptions killed in 200 tries over {:?}, at most {allowed} with backoff",
        started.elapsed()
    );
    wait_for("the subscription again", PATIENCE, || {
        (server.subscribers("resub") == 1).then_some(())
    });
    let now = timers.server_time_ms().unwrap();
    timers.schedule("woken", now + 100, b"p").unwrap();
    wait_for("the promotion", PATIENCE, || {
        (timers.metrics().ok()?.promoted == 1).then_some(())
    });
    stop.stop();
    running.join().unwrap().unwrap();
}
