//! Nothing gives up: a key of the namespace overwritten by another
//! application (a data error) is logged as what it is, not as an outage,
//! and the scheduler and consumer back off and go on, delivering again once
//! the key is mended; `check` lists the keys of another type and the timers
//! a lost index strands, counted in the metrics; a command started before
//! Redis waits for it. All on real redis-server processes and the CLI.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{cli, parse_deliveries, spawn_cli, Server, PATIENCE};
use purgatorio_testkit::{free_port, output_within, wait_for, ChildGuard, TempDir};

/// The text of `file` in `dir` (empty if missing).
fn read(dir: &TempDir, file: &str) -> String {
    std::fs::read_to_string(dir.path().join(file)).unwrap_or_default()
}

/// The ids the CLI consumer printed.
fn delivered(dir: &TempDir) -> Vec<String> {
    parse_deliveries(&read(dir, "consumer"))
        .into_iter()
        .map(|(id, ..)| id)
        .collect()
}

/// Runs a one-shot CLI command; its exit code and stdout.
fn run_cli(url: &str, namespace: &str, args: &[&str]) -> (Option<i32>, String) {
    let out = output_within(
        Command::new(cli())
            .args(["--url", url, "--namespace", namespace])
            .args(args),
        PATIENCE,
    );
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// One command on the test's own connection.
fn redis(server: &Server, args: &[&str]) {
    let mut c = server.raw().unwrap();
    redis::cmd(args[0])
        .arg(&args[1..])
        .query::<redis::Value>(&mut c)
        .unwrap();
}

#[test]
fn a_data_error_is_logged_as_such_and_the_loops_go_on() {
    let server = Server::start_volatile();
    let url = server.url();
    let dir = TempDir::new("purgatorio-redis-trouble");
    let mut scheduler = spawn_cli(&[], &url, "wrong", &["scheduler"], &dir, "scheduler");
    let mut consumer = spawn_cli(
        &[],
        &url,
        "wrong",
        &["consumer", "--name", "c"],
        &dir,
        "consumer",
    );
    let timers = server.timers("wrong");
    let now = timers.server_time_ms().unwrap();
    timers.schedule("before", now, b"p").unwrap();
    wait_for("the first delivery", PATIENCE, || {
        delivered(&dir)
            .contains(&"before".to_string())
            .then_some(())
    });
    // Another application overwrites the stream with a string: the
    // consumer's reads and the scheduler's promotion (a timer is due) meet
    // WRONGTYPE.
    redis(&server, &["DEL", "{wrong}:stream"]);
    redis(&server, &["SET", "{wrong}:stream", "not a stream"]);
    let now = timers.server_time_ms().unwrap();
    timers.schedule("during", now, b"p").unwrap();
    for log in ["scheduler.err", "consumer.err"] {
        wait_for(&format!("the data error in {log}"), PATIENCE, || {
            read(&dir, log)
                .contains("data error, not an outage")
                .then_some(())
        });
    }
    let (code, out) = run_cli(&url, "wrong", &["check"]);
    assert_eq!(code, Some(3), "{out}");
    assert!(
        out.contains("wrong type {wrong}:stream holds a string, not a stream"),
        "{out}"
    );
    // The key mended (deleted): both go on, and the timer due meanwhile is
    // delivered.
    redis(&server, &["DEL", "{wrong}:stream"]);
    wait_for("the delivery after the mend", PATIENCE, || {
        delivered(&dir)
            .contains(&"during".to_string())
            .then_some(())
    });
    for (process, log) in [
        (&mut scheduler, "scheduler.err"),
        (&mut consumer, "consumer.err"),
    ] {
        assert!(
            process.child().try_wait().unwrap().is_none(),
            "{log} exited"
        );
        let text = read(&dir, log);
        assert!(!text.contains("unavailable"), "{log}: {text}");
        assert!(text.contains("calls succeed again"), "{log}: {text}");
        assert_eq!(text.matches("data error").count(), 1, "{log}: {text}");
    }
    let (code, out) = run_cli(&url, "wrong", &["check"]);
    assert_eq!(code, Some(0), "{out}");
}

#[test]
fn timers_stranded_by_a_lost_index_are_counted_and_listed() {
    let server = Server::start_volatile();
    let timers = server.timers("lost");
    let now = timers.server_time_ms().unwrap();
    let ids: Vec<String> = (0..1_200).map(|i| format!("t{i}")).collect();
    let batch: Vec<(&str, u64, &[u8])> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| (id.as_str(), now + 600_000 + i as u64 * 1_000, &b"p"[..]))
        .collect();
    timers.schedule_many(&batch).unwrap();
    assert!(timers.check().unwrap().is_clean());
    assert_eq!(timers.metrics().unwrap().stranded, 0);
    // Another application deletes the index of buckets: every timer is
    // still stored, and no promotion reaches any.
    redis(&server, &["DEL", "{lost}:buckets"]);
    let check = timers.check().unwrap();
    assert!(check.wrong_types.is_empty(), "{check:?}");
    let mut stranded: Vec<String> = check.stranded.iter().map(|s| s.id.clone()).collect();
    stranded.sort();
    let mut want = ids.clone();
    want.sort();
    assert_eq!(stranded, want);
    assert!(check.stranded[0].why.contains("is not in {lost}:buckets"));
    assert_eq!(timers.metrics().unwrap().stranded, 1_200);
    // Overwritten with a string: the key is reported too.
    redis(&server, &["SET", "{lost}:buckets", "x"]);
    let (code, out) = run_cli(&server.url(), "lost", &["check"]);
    assert_eq!(code, Some(3));
    assert!(out.contains("wrong type {lost}:buckets holds a string, not a zset"));
    assert_eq!(out.matches("\nstranded t").count(), 1_200, "{out}");
    assert!(
        out.contains("stranded t7 {lost}:buckets is no sorted set"),
        "{out}"
    );
    // A bucket of one timer overwritten: that timer alone.
    redis(&server, &["DEL", "{lost}:buckets"]);
    let fresh = server.timers("one");
    fresh.schedule("a", now + 600_000, b"p").unwrap();
    fresh.schedule("b", now + 900_000, b"p").unwrap();
    let bucket = format!("{{one}}:b:{}", (now + 900_000) / fresh.config().bucket_ms);
    redis(&server, &["DEL", &bucket]);
    let check = fresh.check().unwrap();
    assert_eq!(check.stranded.len(), 1, "{check:?}");
    assert_eq!(check.stranded[0].id, "b");
}

#[test]
fn commands_started_before_redis_wait_for_it() {
    let port = free_port();
    let url = format!("redis://127.0.0.1:{port}");
    let dir = TempDir::new("purgatorio-redis-late");
    let _scheduler = spawn_cli(&[], &url, "late", &["scheduler"], &dir, "scheduler");
    let _consumer = spawn_cli(
        &[],
        &url,
        "late",
        &["consumer", "--name", "c"],
        &dir,
        "consumer",
    );
    let schedule = ChildGuard::new(
        Command::new(cli())
            .args(["--url", &url, "--namespace", "late"])
            .args(["schedule", "--count", "3", "--start-ms", "100"])
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("schedule.err")).unwrap())
            .spawn()
            .unwrap(),
    );
    for log in ["scheduler.err", "consumer.err", "schedule.err"] {
        wait_for(&format!("{log} to say it waits"), PATIENCE, || {
            read(&dir, log).contains("redis unavailable").then_some(())
        });
    }
    // Each waited well past what the retries of a call allow (0.8 s).
    std::thread::sleep(Duration::from_secs(1));
    let _server = Server::start_on("volatile", [port]);
    let mut schedule = schedule;
    let status = wait_for("the schedule command", PATIENCE, || {
        schedule.child().try_wait().unwrap()
    });
    assert!(status.success(), "{}", read(&dir, "schedule.err"));
    wait_for("the three deliveries", PATIENCE, || {
        (delivered(&dir).len() >= 3).then_some(())
    });
    for log in ["scheduler.err", "consumer.err", "schedule.err"] {
        assert!(read(&dir, log).contains("answers again"), "{log}");
    }
}
