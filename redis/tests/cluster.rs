//! Redis Cluster for real: a cluster of 3 masters and 3 replicas of
//! `redis-server` processes on loopback ports (`redis-cli --cluster
//! create`), namespaces spread over the masters by their hash tags, and
//! masters SIGKILLed mid-delivery: a replica takes over, delivery resumes,
//! nothing is delivered early, and what asynchronous replication lost is
//! counted, with and without `Config::replicas_to_ack` (`WAIT`).
#![cfg(feature = "cluster")]

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use purgatorio_redis::{Config, Consumer, Error, Scheduled, Scheduler, Timers, Verdict};
use purgatorio_testkit::{wait_for, RedisCluster};

mod common;

/// Node timeout of the test cluster: a master silent this long is failed
/// over.
const NODE_TIMEOUT_MS: u64 = 1_000;

/// Namespaces whose hash tags put one on each master, in the masters'
/// order.
fn one_namespace_per_master(cluster: &RedisCluster, prefix: &str) -> Vec<(String, u16)> {
    let mut found: HashMap<u16, String> = HashMap::new();
    for i in 0..1_000 {
        let namespace = format!("{prefix}{i}");
        let master = cluster
            .master_of_slot(cluster.slot_of(&namespace))
            .expect("every slot is served");
        found.entry(master).or_insert(namespace);
        if found.len() == 3 {
            break;
        }
    }
    assert_eq!(found.len(), 3, "namespaces on every master");
    let mut out: Vec<(String, u16)> = found.into_iter().map(|(m, n)| (n, m)).collect();
    out.sort();
    out
}

fn connect(cluster: &RedisCluster, config: Config) -> Timers {
    let urls = cluster.urls();
    let seeds: Vec<&str> = urls.iter().map(String::as_str).collect();
    Timers::connect_cluster(&seeds, config).expect("connect to the cluster")
}

fn config(namespace: &str) -> Config {
    let mut config = Config::new(namespace);
    config.visibility_timeout = Duration::from_millis(500);
    config.response_timeout = Duration::from_millis(500);
    config
}

/// Deliveries: `id → (deadline, promoted, when it came)`.
type Delivered = HashMap<String, (u64, u64, Instant)>;

/// A scheduler node and a consumer for one namespace, recording each
/// delivery.
struct Running {
    stops: Vec<purgatorio_redis::StopHandle>,
    threads: Vec<thread::JoinHandle<()>>,
    delivered: Arc<Mutex<Delivered>>,
    /// Deliveries of each id.
    counts: Arc<Mutex<HashMap<String, u32>>>,
}

fn run(timers: &Timers) -> Running {
    let scheduler = Scheduler::new(timers.clone());
    let consumer = Consumer::new(timers.clone(), "c").expect("join the group");
    let delivered = Arc::new(Mutex::new(HashMap::new()));
    let counts = Arc::new(Mutex::new(HashMap::new()));
    let record = Arc::clone(&delivered);
    let count = Arc::clone(&counts);
    let stops = vec![scheduler.stop_handle(), consumer.stop_handle()];
    let threads = vec![
        thread::spawn(move || scheduler.run().expect("scheduler")),
        thread::spawn(move || {
            consumer
                .run(|d| {
                    *count.lock().unwrap().entry(d.id.clone()).or_insert(0) += 1;
                    record.lock().unwrap().entry(d.id.clone()).or_insert((
                        d.deadline_ms,
                        d.promoted_ms,
                        Instant::now(),
                    ));
                    Verdict::Ack
                })
                .expect("consumer")
        }),
    ];
    Running {
        stops,
        threads,
        delivered,
        counts,
    }
}

impl Running {
    fn stop(self) -> Delivered {
        for stop in &self.stops {
            stop.stop();
        }
        for thread in self.threads {
            thread.join().unwrap();
        }
        let delivered = self.delivered.lock().unwrap();
        delivered.clone()
    }
}

#[test]
fn namespaces_spread_over_the_masters_deliver_on_each() {
    let cluster = RedisCluster::start(3, 1, NODE_TIMEOUT_MS);
    let namespaces = one_namespace_per_master(&cluster, "spread");
    let mut runs = Vec::new();
    for (namespace, master) in &namespaces {
        let timers = connect(&cluster, config(namespace));
        let now = timers.server_time_ms().unwrap();
        let ids: Vec<String> = (0..200).map(|i| format!("t{i}")).collect();
        let batch: Vec<(&str, u64, &[u8])> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| (id.as_str(), now + 200 + i as u64, &b"p"[..]))
            .collect();
        timers.schedule_many(&batch).unwrap();
        // The namespace's keys are on its master, and only there.
        let keys = cluster.cli(*master, &["KEYS", &format!("{{{namespace}}}:*")]);
        assert!(keys.contains(":timer"), "{namespace} on {master}: {keys}");
        // The CLI schedules into the same namespace through any node.
        let out = purgatorio_testkit::output_within(
            std::process::Command::new(common::cli())
                .args(["--cluster", "--url", &cluster.urls().join(",")])
                .args(["--namespace", namespace, "schedule", "--count", "50"])
                .args(["--start-ms", "200", "--spread-ms", "100", "--prefix", "cli"]),
            Duration::from_secs(30),
        );
        assert!(out.status.success(), "{out:?}");
        runs.push((timers.clone(), run(&timers)));
    }
    for (timers, running) in runs {
        wait_for("every delivery", Duration::from_secs(30), || {
            (running.delivered.lock().unwrap().len() == 250).then_some(())
        });
        let delivered = running.stop();
        assert!(delivered
            .values()
            .all(|(deadline, promoted, _)| promoted >= deadline));
        assert_eq!(timers.metrics().unwrap().pending, 0);
    }
}

/// What one failover did to a namespace.
#[derive(Debug)]
struct Failover {
    /// Schedules that returned `Ok`.
    acknowledged: usize,
    /// Schedules stored but not replicated in time
    /// (`Scheduled::NotReplicated`).
    not_replicated: usize,
    /// Acknowledged and never delivered.
    lost: usize,
    /// Delivered before their deadline by Redis's clock.
    early: usize,
    /// From the kill to the first delivery after it, s.
    resumed_after: f64,
    /// Timers delivered more than once.
    duplicated: usize,
    /// Timers first delivered while the replica was behind: from the cut
    /// (with `Lag::None`, the kill), less 0.5 s for deliveries whose
    /// acknowledgement was on its way, to the kill. The duplicates are
    /// among them.
    in_window: usize,
    /// Duplicated timers that are not: none if a duplicate comes only
    /// from what the replica did not receive.
    duplicated_outside: usize,
}

/// How the replica falls behind before its master is killed.
#[derive(Clone, Copy, Debug)]
enum Lag {
    /// It does not: the master killed mid-stream.
    None,
    /// Cut off for 1 s before the kill: stopped with SIGSTOP, and its link
    /// closed by the master (`CLIENT KILL TYPE replica`), so that it cannot
    /// reconnect until it is continued, after the kill. What the master
    /// acknowledged in that second never reaches it: asynchronous
    /// replication's window, made wide (a replica partitioned away, or
    /// lagging).
    Cut,
}

/// Schedules timers 1 s ahead in batches of 20 every 10 ms while a
/// scheduler node and a consumer deliver them; after 1 s (and the `lag`)
/// SIGKILLs the namespace's master; schedules on for 1 s after a replica
/// took over, then waits for the deliveries (every acknowledged one, or 3 s
/// past the last deadline).
fn failover(cluster: &mut RedisCluster, namespace: &str, config: Config, lag: Lag) -> Failover {
    let slot = cluster.slot_of(namespace);
    let master = cluster.master_of_slot(slot).unwrap();
    let replica = cluster.replicas_of(master)[0];
    let timers = connect(cluster, config);
    let running = run(&timers);
    let stop_scheduling = Arc::new(AtomicBool::new(false));
    let scheduling = {
        let timers = timers.clone();
        let stop = Arc::clone(&stop_scheduling);
        thread::spawn(move || {
            let (mut acknowledged, mut refused, mut next) = (Vec::new(), 0, 0u64);
            while !stop.load(Ordering::SeqCst) {
                let Ok(now) = timers.server_time_ms() else {
                    continue;
                };
                let ids: Vec<String> = (next..next + 20).map(|i| format!("t{i}")).collect();
                next += 20;
                let batch: Vec<(&str, u64, &[u8])> = ids
                    .iter()
                    .map(|id| (id.as_str(), now + 1_000, &b"p"[..]))
                    .collect();
                match timers.schedule_many(&batch) {
                    Ok(Scheduled::Stored) => {
                        acknowledged.extend(ids.into_iter().map(|id| (id, now + 1_000)));
                    }
                    Ok(Scheduled::NotReplicated { .. }) => refused += batch.len(),
                    Err(e) => assert!(e.is_unavailable(), "{e}"),
                }
                thread::sleep(Duration::from_millis(10));
            }
            (acknowledged, refused)
        })
    };
    thread::sleep(Duration::from_secs(1));
    let cut = matches!(lag, Lag::Cut).then(Instant::now);
    if let Lag::Cut = lag {
        cluster.signal(replica, "STOP");
        let killed = cluster.cli(master, &["CLIENT", "KILL", "TYPE", "replica"]);
        assert_eq!(killed.trim(), "1", "the replica's link closed");
        thread::sleep(Duration::from_secs(1));
    }
    cluster.kill(master);
    let killed = Instant::now();
    let behind = cut.unwrap_or(killed);
    if let Lag::Cut = lag {
        cluster.signal(replica, "CONT");
    }
    wait_for("a replica to take over", Duration::from_secs(20), || {
        cluster
            .master_of_slot(slot)
            .filter(|new| *new != master)
            .map(|_| ())
    });
    thread::sleep(Duration::from_secs(1));
    stop_scheduling.store(true, Ordering::SeqCst);
    let (acknowledged, not_replicated) = scheduling.join().unwrap();
    let last_deadline = acknowledged.iter().map(|(_, at)| *at).max().unwrap_or(0);
    // Every acknowledged timer delivered, or its deadline 3 s past.
    wait_for("the deliveries", Duration::from_secs(20), || {
        let delivered = running.delivered.lock().unwrap();
        let all = acknowledged
            .iter()
            .all(|(id, _)| delivered.contains_key(id));
        let late = timers.server_time_ms().ok()? > last_deadline + 3_000;
        (all || late).then_some(())
    });
    let counts = Arc::clone(&running.counts);
    let delivered = running.stop();
    let counts = counts.lock().unwrap();
    // Duplicates come only from the window in which the replica was
    // behind: a promotion or an acknowledgement it never received is done
    // again by the new master.
    let window = behind - Duration::from_millis(500)..killed;
    let in_window: HashSet<&String> = delivered
        .iter()
        .filter(|(_, (_, _, at))| window.contains(at))
        .map(|(id, _)| id)
        .collect();
    let duplicated: Vec<&String> = counts
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(id, _)| id)
        .collect();
    let outside = duplicated
        .iter()
        .filter(|id| !in_window.contains(**id))
        .count();
    let lost = acknowledged
        .iter()
        .filter(|(id, _)| !delivered.contains_key(id))
        .count();
    let early = delivered
        .values()
        .filter(|(deadline, promoted, _)| promoted < deadline)
        .count();
    let resumed_after = delivered
        .values()
        .map(|(_, _, at)| *at)
        .filter(|at| *at > killed)
        .min()
        .map_or(f64::NAN, |at| (at - killed).as_secs_f64());
    let ids: HashSet<&String> = acknowledged.iter().map(|(id, _)| id).collect();
    assert_eq!(ids.len(), acknowledged.len());
    Failover {
        acknowledged: acknowledged.len(),
        not_replicated,
        lost,
        early,
        resumed_after,
        duplicated: duplicated.len(),
        in_window: in_window.len(),
        duplicated_outside: outside,
    }
}

#[test]
fn a_killed_master_fails_over_and_wait_bounds_what_is_lost() {
    let started = Instant::now();
    let mut cluster = RedisCluster::start(3, 1, NODE_TIMEOUT_MS);
    let namespaces = one_namespace_per_master(&cluster, "failover");
    eprintln!(
        "cluster of 3 masters, 3 replicas ready in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    // Asynchronous replication, as it comes: the master killed mid-stream.
    let (ns, _) = &namespaces[0];
    let plain = failover(&mut cluster, ns, config(ns), Lag::None);
    eprintln!("killed master, no WAIT: {plain:?}");
    // Its window made wide: the replica cut off for the last second.
    let (ns, _) = &namespaces[1];
    let lagging = failover(&mut cluster, ns, config(ns), Lag::Cut);
    eprintln!("killed master, replica cut off for 1 s, no WAIT: {lagging:?}");
    // The same with WAIT for one replica.
    let (ns, _) = &namespaces[2];
    let waited = config(ns).replicas_to_ack(1, Duration::from_millis(200));
    let with_wait = failover(&mut cluster, ns, waited, Lag::Cut);
    eprintln!("killed master, replica cut off for 1 s, WAIT 1: {with_wait:?}");
    eprintln!("in {:.1} s", started.elapsed().as_secs_f64());

    for outcome in [&plain, &lagging, &with_wait] {
        assert_eq!(outcome.early, 0, "{outcome:?}");
        assert!(outcome.acknowledged > 0, "{outcome:?}");
        // Duplicates come only from the window in which the replica was
        // behind: a promotion or an acknowledgement it never received is
        // done again by the new master (at most every timer delivered in
        // that window, redelivered once).
        assert_eq!(outcome.duplicated_outside, 0, "{outcome:?}");
        assert!(outcome.duplicated <= outcome.in_window, "{outcome:?}");
    }
    // (With WAIT, what was acknowledged was due before the kill, and the
    // new master has no replica to acknowledge more.)
    for outcome in [&plain, &lagging] {
        assert!(
            outcome.resumed_after < 10.0,
            "delivery resumed: {outcome:?}"
        );
    }
    assert!(
        lagging.lost > 0,
        "a replica cut off loses what the master acknowledged: {lagging:?}"
    );
    assert_eq!(with_wait.lost, 0, "{with_wait:?}");
    assert!(with_wait.not_replicated > 0, "{with_wait:?}");
}

/// Schedules/s and deliveries/s of `namespaces` namespaces on a cluster of
/// `masters` masters (no replicas): each namespace gets `per` timers from
/// its own thread (`schedule_many`, 10,000 per call), all due within 0.5 s,
/// and one scheduler node and two consumers.
fn throughput(masters: usize, namespaces: usize, per: usize) -> (f64, f64) {
    let cluster = RedisCluster::start(masters, 0, 5_000);
    let names: Vec<String> = if masters == 1 {
        (0..namespaces).map(|i| format!("bench{i}")).collect()
    } else {
        one_namespace_per_master(&cluster, "bench")
            .into_iter()
            .map(|(namespace, _)| namespace)
            .collect()
    };
    let handles: Vec<Timers> = names
        .iter()
        .map(|namespace| connect(&cluster, Config::new(namespace)))
        .collect();
    let first_due = handles[0].server_time_ms().unwrap() + 6_000;
    let due_at = Instant::now() + Duration::from_millis(6_000);
    let started = Instant::now();
    let scheduling: Vec<_> = handles
        .iter()
        .map(|timers| {
            let timers = timers.clone();
            thread::spawn(move || {
                let ids: Vec<String> = (0..per).map(|i| format!("t{i}")).collect();
                for chunk in ids.chunks(10_000) {
                    let batch: Vec<(&str, u64, &[u8])> = chunk
                        .iter()
                        .enumerate()
                        .map(|(i, id)| (id.as_str(), first_due + (i as u64 % 500), &b"p"[..]))
                        .collect();
                    timers.schedule_many(&batch).unwrap();
                }
            })
        })
        .collect();
    for thread in scheduling {
        thread.join().unwrap();
    }
    let schedules = (namespaces * per) as f64 / started.elapsed().as_secs_f64();
    assert!(Instant::now() < due_at, "scheduling took longer than 6 s");
    let delivered = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut stops = Vec::new();
    let mut threads = Vec::new();
    for timers in &handles {
        let scheduler = Scheduler::new(timers.clone());
        stops.push(scheduler.stop_handle());
        threads.push(thread::spawn(move || scheduler.run().unwrap()));
        for c in 0..2 {
            let consumer = Consumer::new(timers.clone(), &format!("c{c}")).unwrap();
            stops.push(consumer.stop_handle());
            let count = Arc::clone(&delivered);
            threads.push(thread::spawn(move || {
                consumer
                    .run(|_| {
                        count.fetch_add(1, Ordering::Relaxed);
                        Verdict::Ack
                    })
                    .unwrap()
            }));
        }
    }
    let total = namespaces * per;
    wait_for("every delivery", Duration::from_secs(120), || {
        (delivered.load(Ordering::Relaxed) >= total).then_some(())
    });
    let deliveries = total as f64 / (Instant::now() - due_at).as_secs_f64();
    for stop in stops {
        stop.stop();
    }
    for thread in threads {
        thread.join().unwrap();
    }
    (schedules, deliveries)
}

/// The figures of `redis/README.md`: throughput with 1 and with 3 masters,
/// 3 namespaces of 100,000 timers each, alternated over 2 rounds. Run
/// alone, in release:
/// `cargo test --release -p purgatorio-redis --test cluster -- --ignored --nocapture`
#[test]
#[ignore = "a benchmark: run it alone, in release"]
fn throughput_grows_with_masters() {
    for round in 1..=2 {
        for masters in [1, 3] {
            let (schedules, deliveries) = throughput(masters, 3, 100_000);
            eprintln!(
                "round {round}, {masters} master(s), 3 namespaces x 100,000 timers: \
                 {schedules:.0} schedules/s, {deliveries:.0} deliveries/s"
            );
        }
    }
}

#[test]
fn bad_cluster_seeds_are_typed_errors() {
    assert!(matches!(
        Timers::connect_cluster(&[], Config::new("ns")),
        Err(Error::InvalidArgument { name: "seeds", .. })
    ));
    assert!(matches!(
        Timers::connect_cluster(&["redis://127.0.0.1:1/2"], Config::new("ns")),
        Err(Error::InvalidUrl { .. })
    ));
    // A Redis that is not a cluster node says so at once.
    let server = common::Server::start_volatile();
    match Timers::connect_cluster(&[&server.url()], Config::new("ns")) {
        Err(Error::Redis(e)) => assert!(e.to_string().contains("cluster"), "{e}"),
        other => panic!("{other:?}"),
    }
}

/// What `replicas_to_ack(1, …)` costs a schedule on a healthy cluster of 3
/// masters and 3 replicas: single schedules (a round trip each, then the
/// replica's) and pipelined batches, without and with it, alternated over
/// 3 rounds. Run alone, in release:
/// `cargo test --release -p purgatorio-redis --test cluster -- --ignored --nocapture wait_costs`
#[test]
#[ignore = "a benchmark: run it alone, in release"]
fn wait_costs() {
    let cluster = RedisCluster::start(3, 1, 5_000);
    for round in 1..=3 {
        for wait in [false, true] {
            let namespace = format!("cost{round}{wait}");
            let mut config = Config::new(&namespace);
            if wait {
                config = config.replicas_to_ack(1, Duration::from_secs(1));
            }
            let timers = connect(&cluster, config);
            let at = timers.server_time_ms().unwrap() + 3_600_000;
            let started = Instant::now();
            for i in 0..2_000 {
                timers.schedule(&format!("one{i}"), at, b"p").unwrap();
            }
            let single_us = started.elapsed().as_secs_f64() * 1e6 / 2_000.0;
            let ids: Vec<String> = (0..100_000).map(|i| format!("many{i}")).collect();
            let started = Instant::now();
            for chunk in ids.chunks(10_000) {
                let batch: Vec<(&str, u64, &[u8])> = chunk
                    .iter()
                    .map(|id| (id.as_str(), at, &b"p"[..]))
                    .collect();
                timers.schedule_many(&batch).unwrap();
            }
            let many = 100_000.0 / started.elapsed().as_secs_f64();
            eprintln!(
                "round {round}, WAIT 1: {wait}: schedule {single_us:.0} µs each; \
                 schedule_many {many:.0} schedules/s"
            );
        }
    }
}
