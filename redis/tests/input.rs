//! Bad input, bad settings and far-future deadlines: typed errors with
//! clear messages, refused before Redis is asked, and never a scheduler
//! that spins. Against a real `redis-server`.

mod common;

use std::process::Command;
use std::thread;
use std::time::Duration;

use common::{cli, Server};
use purgatorio_redis::{Config, Consumer, Error, Scheduler, Timers, MAX_DEADLINE_MS};
use purgatorio_testkit::free_port;

#[test]
fn bad_input_and_an_unreachable_redis_are_typed_errors() {
    let mut server = Server::start("everysec");
    let mut config = Config::new("bad");
    config.retries = 2;
    let timers = Timers::connect(&server.url(), config.clone()).unwrap();
    for (id, why) in [
        ("", "empty"),
        ("a\nb", "control character"),
        (&"x".repeat(300), "max_id"),
    ] {
        match timers.schedule(id, 1, b"") {
            Err(e @ Error::InvalidId { .. }) => assert!(e.to_string().contains(why), "{e}"),
            other => panic!("{id:?}: {other:?}"),
        }
    }
    let big = vec![0u8; config.max_payload + 1];
    assert!(matches!(
        timers.schedule("big", 1, &big),
        Err(Error::PayloadTooLarge { .. })
    ));
    assert_eq!(
        timers.metrics().unwrap().pending,
        0,
        "nothing reached Redis"
    );
    server.kill();
    let failed = timers.schedule("late", 1, b"");
    assert!(
        matches!(failed, Err(Error::Unavailable { tries: 2, .. })),
        "{failed:?}"
    );
    let nobody = format!("redis://127.0.0.1:{}", free_port());
    assert!(matches!(
        Timers::connect(&nobody, config),
        Err(Error::Unavailable { .. })
    ));
    // Back up: the same handle works again.
    server.restart();
    timers.schedule("late", 1, b"").unwrap();
}

#[test]
fn a_huge_id_is_cut_in_the_message() {
    let server = Server::start("everysec");
    let timers = server.timers("huge");
    let id = "i".repeat(100_000);
    let error = timers.schedule(&id, 1, b"").unwrap_err();
    let message = error.to_string();
    assert!(
        message.len() < 200,
        "{} bytes: {message:.300}",
        message.len()
    );
    assert!(message.contains("100000 bytes"), "{message}");
}

#[test]
fn far_future_deadlines_are_refused_and_never_make_a_scheduler_spin() {
    let server = Server::start("everysec");
    let timers = server.timers("far");
    for at in [u64::MAX, 1 << 63, MAX_DEADLINE_MS + 1] {
        match timers.schedule("far", at, b"") {
            Err(Error::DeadlineOutOfRange { at_ms, max_ms }) => {
                assert_eq!((at_ms, max_ms), (at, MAX_DEADLINE_MS));
            }
            other => panic!("{at}: {other:?}"),
        }
        assert!(timers
            .schedule_many(&[("ok", 1, b""), ("far", at, b"")])
            .is_err());
    }
    assert_eq!(timers.metrics().unwrap().pending, 0, "nothing was written");
    timers.schedule("latest", MAX_DEADLINE_MS, b"").unwrap();
    // A deadline past 2^63 ms already in Redis (written by another client):
    // the scheduler sleeps, it does not spin.
    let mut raw = server.raw().unwrap();
    redis::pipe()
        .cmd("ZADD")
        .arg("{far}:b:legacy")
        .arg(1.8e19)
        .arg("legacy")
        .cmd("ZADD")
        .arg("{far}:buckets")
        .arg(1.8e19)
        .arg("legacy")
        .query::<()>(&mut raw)
        .unwrap();
    assert!(timers.cancel("latest").unwrap());
    server.reset_stats();
    let scheduler = Scheduler::new(timers.clone());
    let stop = scheduler.stop_handle();
    let running = thread::spawn(move || scheduler.run());
    thread::sleep(Duration::from_secs(1));
    stop.stop();
    running.join().unwrap().unwrap();
    let stats = server.commandstats();
    let calls: u64 = stats.values().map(|(calls, _)| calls).sum();
    assert!(
        calls < 30,
        "an idle scheduler sent {calls} commands: {stats:?}"
    );
}

#[test]
fn the_cli_refuses_a_start_that_overflows() {
    let server = Server::start("everysec");
    let out = Command::new(cli())
        .args(["--url", &server.url(), "--namespace", "cli", "schedule"])
        .args(["--count", "3", "--start-ms", &u64::MAX.to_string()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("deadline"), "{stderr}");
    assert_eq!(server.timers("cli").metrics().unwrap().pending, 0);
    let out = Command::new(cli())
        .args(["--url", &server.url(), "--namespace", "cli", "schedule"])
        .args(["--count", "3", "--start-ms", "1000", "--spread-ms"])
        .arg(u64::MAX.to_string())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "a spread past the latest deadline"
    );
}

#[test]
fn the_cli_behaves_like_a_cli() {
    let nobody = format!("redis://127.0.0.1:{}", free_port());
    for args in [&["--help"][..], &["scheduler", "--help"], &["--version"]] {
        let out = Command::new(cli())
            .args(["--url", &nobody])
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        assert!(!out.stdout.is_empty());
    }
    for args in [&["--bogus"][..], &["scheduler", "--bogus"], &[]] {
        let out = Command::new(cli()).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("Usage"));
    }
}

#[test]
fn settings_out_of_range_are_refused_by_name() {
    let server = Server::start("everysec");
    let url = server.url();
    let refused = |spoil: fn(&mut Config)| {
        let mut config = Config::new("cfg");
        spoil(&mut config);
        Timers::connect(&url, config).unwrap_err()
    };
    let e = refused(|c| c.promote_batch = 0);
    assert!(
        matches!(
            e,
            Error::InvalidConfig {
                field: "promote_batch",
                ..
            }
        ),
        "{e}"
    );
    let e =
        refused(|c| c.promote_pace = purgatorio_redis::MAX_PROMOTE_PACE + Duration::from_millis(1));
    assert!(
        matches!(
            e,
            Error::InvalidConfig {
                field: "promote_pace",
                ..
            }
        ),
        "{e}"
    );
    let e = refused(|c| c.visibility_timeout = Duration::ZERO);
    assert!(
        matches!(
            e,
            Error::InvalidConfig {
                field: "visibility_timeout",
                ..
            }
        ),
        "{e}"
    );
    for namespace in ["", "a{b}"] {
        let e = Timers::connect(&url, Config::new(namespace)).unwrap_err();
        assert!(matches!(e, Error::InvalidNamespace { .. }), "{e}");
        assert!(e.to_string().starts_with("invalid namespace"), "{e}");
    }
    let timers = server.timers("cfg");
    for name in ["", "a\tb"] {
        let e = Consumer::new(timers.clone(), name).unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidArgument {
                    name: "consumer name",
                    ..
                }
            ),
            "{e}"
        );
    }
    let consumer = Consumer::new(timers, "c").unwrap();
    for e in [
        consumer.poll(Duration::from_millis(1), 0).unwrap_err(),
        consumer.take_over(0).unwrap_err(),
        consumer.read_new(Duration::from_millis(1), 0).unwrap_err(),
    ] {
        assert!(
            matches!(e, Error::InvalidArgument { name: "count", .. }),
            "{e}"
        );
    }
}

#[test]
fn urls_are_checked_before_any_connection() {
    let config = Config::new("url");
    let e = Timers::connect("http://127.0.0.1:1", config.clone()).unwrap_err();
    assert!(matches!(e, Error::InvalidUrl { .. }), "{e}");
    assert!(e.to_string().starts_with("malformed redis url"), "{e}");
    // With the `tls` feature, tests/tls.rs takes rediss:// urls over.
    if cfg!(not(feature = "tls")) {
        let e = Timers::connect("rediss://127.0.0.1:1", config).unwrap_err();
        assert!(matches!(e, Error::TlsUnsupported), "{e}");
        assert!(e.to_string().contains("`tls` feature"), "{e}");
    }
}

/// `--replicas-to-ack`: a schedule no replica acknowledges in time (a
/// standalone Redis has none) is stored all the same, and the command says
/// how many were not replicated and succeeds (round 2 exited 1, as for a
/// failure); `--replica-ack-timeout-ms` alone is refused.
#[test]
fn the_cli_waits_for_the_replicas_asked_for() {
    let server = Server::start_volatile();
    let schedule = |extra: &[&str]| {
        Command::new(cli())
            .args(["--url", &server.url(), "--namespace", "acks"])
            .args(extra)
            .args(["schedule", "--count", "3"])
            .output()
            .unwrap()
    };
    let out = schedule(&["--replicas-to-ack", "1", "--replica-ack-timeout-ms", "50"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(
        stdout.contains("3 stored but not replicated in time"),
        "{stdout}"
    );
    assert_eq!(server.timers("acks").metrics().unwrap().pending, 3);
    let out = schedule(&[]);
    assert!(out.status.success(), "{out:?}");
    let out = schedule(&["--replicas-to-ack", "1", "--replica-ack-timeout-ms", "0"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("replica_ack"), "{stderr}");
    // A timeout without the replicas to wait for would change nothing: a
    // usage error, and nothing scheduled.
    let out = Command::new(cli())
        .args(["--url", &server.url(), "--namespace", "acks-alone"])
        .args(["--replica-ack-timeout-ms", "50", "schedule", "--count", "3"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--replicas-to-ack"), "{stderr}");
    assert_eq!(server.timers("acks-alone").metrics().unwrap().pending, 0);
}

/// `recurring`: a series scheduled from the CLI is pending with its
/// payload, and acknowledging an occurrence schedules the next one; a
/// cron expression in a `--tz` zone is scheduled; a bad cron expression, an
/// unknown zone, `--tz` without `--cron`, or neither `--every-ms` nor
/// `--cron` is refused.
#[test]
fn the_cli_schedules_recurring_timers() {
    let server = Server::start_volatile();
    let recurring = |extra: &[&str]| {
        Command::new(cli())
            .args(["--url", &server.url(), "--namespace", "clir", "recurring"])
            .args(extra)
            .output()
            .unwrap()
    };
    let out = recurring(&["--id", "tick", "--every-ms", "100", "--payload", "hi"]);
    assert!(out.status.success(), "{out:?}");
    let timers = server.timers("clir");
    let first = timers.get("tick").unwrap().expect("pending");
    assert_eq!(first.payload, b"hi");
    assert!(String::from_utf8_lossy(&out.stdout).contains(&first.deadline_ms.to_string()));
    let node = Scheduler::new(timers.clone());
    let consumer = Consumer::new(timers.clone(), "c").unwrap();
    let delivery = purgatorio_testkit::wait_for("the first occurrence", common::PATIENCE, || {
        while node.step().unwrap() == purgatorio_redis::Step::Again {}
        consumer.poll(Duration::from_millis(10), 1).unwrap().pop()
    });
    assert_eq!(
        (delivery.id.as_str(), &delivery.payload[..]),
        ("tick", &b"hi"[..])
    );
    consumer.ack_all(&[delivery]).unwrap();
    let next = timers.get("tick").unwrap().expect("the next occurrence");
    assert!(
        next.deadline_ms > first.deadline_ms,
        "{next:?} after {first:?}"
    );

    let out = recurring(&["--id", "bad", "--cron", "not a cron"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    // A time zone: an IANA name, and only with --cron.
    let out = recurring(&[
        "--id",
        "nine",
        "--cron",
        "0 9 * * *",
        "--tz",
        "Europe/Berlin",
    ]);
    assert!(out.status.success(), "{out:?}");
    assert!(timers.get("nine").unwrap().is_some());
    let out = recurring(&[
        "--id",
        "bad",
        "--cron",
        "0 9 * * *",
        "--tz",
        "Europe/Atlantis",
    ]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let out = recurring(&["--id", "bad", "--every-ms", "100", "--tz", "Europe/Berlin"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let out = recurring(&["--id", "none"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert_eq!(timers.get("bad").unwrap(), None);
}
