//! What the tests of `purgatorio-redis` share: a real `redis-server`
//! (installed if missing) on a free loopback port in a temporary directory,
//! stopped by PID, and the CLI binary.

#![allow(dead_code)] // each test binary uses its own part

pub mod backlog;
pub mod probe;

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::time::Duration;

use purgatorio_redis::{Config, Timers};
use purgatorio_testkit::{
    free_port, redis_pid, require_program, spawn_on_ports, ChildGuard, TempDir,
};

/// The longest any single wait of a test lasts.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// A `redis-server` of the test's own.
pub struct Server {
    guard: Option<ChildGuard>,
    pub port: u16,
    dir: TempDir,
    fsync: &'static str,
}

impl Server {
    /// Starts one that keeps nothing on disk: a restart empties it.
    pub fn start_volatile() -> Server {
        Server::start("volatile")
    }

    /// Starts one; `fsync` is its `appendfsync` policy (`volatile`: no
    /// append-only file at all).
    pub fn start(fsync: &'static str) -> Server {
        Server::start_on(fsync, std::iter::repeat_with(free_port).take(10))
    }

    /// Starts one on the first of `ports` where it stays up and answers as
    /// itself (a port found free may be taken before redis-server binds
    /// it: see [`spawn_on_ports`]).
    pub fn start_on(fsync: &'static str, ports: impl IntoIterator<Item = u16>) -> Server {
        let mut server = Server {
            guard: None,
            port: 0,
            dir: TempDir::new("purgatorio-redis"),
            fsync,
        };
        server.spawn(ports);
        server
    }

    /// (Re)starts the server on the same port and directory.
    pub fn restart(&mut self) {
        self.spawn([self.port]);
    }

    /// Starts redis-server on the first of `ports` that works.
    fn spawn(&mut self, ports: impl IntoIterator<Item = u16>) {
        let binary = require_program("redis-server", "redis-server");
        let (dir, fsync) = (self.dir.path().display().to_string(), self.fsync);
        let (guard, port) = spawn_on_ports(
            "redis-server",
            ports,
            |port| {
                let mut command = Command::new(&binary);
                command
                    .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                    .args(["--dir", &dir])
                    .args(if fsync == "volatile" {
                        ["--appendonly", "no", "--appendfsync", "no", "--save", ""]
                    } else {
                        ["--appendonly", "yes", "--appendfsync", fsync, "--save", ""]
                    })
                    .stdout(Stdio::null())
                    .stderr(Stdio::null());
                command
            },
            |port, pid| redis_pid(port) == Some(pid),
        );
        self.guard = Some(guard);
        self.port = port;
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.guard.as_ref().expect("running").id()
    }

    /// Kills it with SIGKILL.
    pub fn kill(&mut self) {
        if let Some(guard) = self.guard.take() {
            guard.kill();
        }
    }

    /// Sends it `signal` (`STOP`, `CONT`).
    pub fn signal(&self, signal: &str) {
        self.guard.as_ref().expect("running").signal(signal);
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// A plain connection, for the test's own look at the keys.
    pub fn raw(&self) -> redis::RedisResult<redis::Connection> {
        redis::Client::open(self.url())?.get_connection_with_timeout(Duration::from_secs(2))
    }

    /// Timers of `namespace` with a 500 ms visibility timeout.
    pub fn timers(&self, namespace: &str) -> Timers {
        let mut config = Config::new(namespace);
        config.visibility_timeout = Duration::from_millis(500);
        Timers::connect(&self.url(), config).expect("connect")
    }

    /// `INFO commandstats`: command (lowercase) → (calls, µs of Redis CPU).
    pub fn commandstats(&self) -> HashMap<String, (u64, u64)> {
        let mut c = self.raw().expect("connect");
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut c)
            .unwrap();
        parse_commandstats(&info)
    }

    /// Wake subscriptions of `namespace`.
    pub fn subscribers(&self, namespace: &str) -> i64 {
        let mut c = self.raw().unwrap();
        let (_, count): (String, i64) = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(format!("{{{namespace}}}:wake"))
            .query(&mut c)
            .unwrap();
        count
    }

    /// `CLIENT KILL TYPE pubsub` on `c`: how many subscriptions it dropped.
    pub fn kill_subscriptions(c: &mut redis::Connection) -> i64 {
        redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("pubsub")
            .query(c)
            .unwrap()
    }

    /// `CONFIG RESETSTAT`.
    pub fn reset_stats(&self) {
        let mut c = self.raw().expect("connect");
        redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query::<()>(&mut c)
            .unwrap();
    }
}

/// Parses `cmdstat_evalsha:calls=3,usec=120,...` lines.
pub fn parse_commandstats(info: &str) -> HashMap<String, (u64, u64)> {
    info.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("cmdstat_")?;
            let (name, fields) = rest.split_once(':')?;
            let field = |key: &str| -> Option<u64> {
                fields
                    .split(',')
                    .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))?
                    .parse()
                    .ok()
            };
            Some((name.to_string(), (field("calls")?, field("usec")?)))
        })
        .collect()
}

/// The CLI binary.
pub fn cli() -> &'static str {
    // `option_env!`: `examples/call_cpu.rs` shares this module, and Cargo
    // sets the variable for tests only; the example never calls this.
    #[allow(clippy::option_env_unwrap)]
    option_env!("CARGO_BIN_EXE_purgatorio-redis").expect("the CLI, built for tests")
}

/// Spawns the CLI with `args` against `url`/`namespace`, stdout to `out` and
/// stderr to `out`.err in `dir`; `wrapper` runs it under another program
/// (`faketime`).
pub fn spawn_cli(
    wrapper: &[&str],
    url: &str,
    namespace: &str,
    args: &[&str],
    dir: &TempDir,
    out: &str,
) -> ChildGuard {
    let stdout = std::fs::File::create(dir.path().join(out)).unwrap();
    let stderr = std::fs::File::create(dir.path().join(format!("{out}.err"))).unwrap();
    let mut command = match wrapper.split_first() {
        Some((program, rest)) => {
            let mut command = Command::new(program);
            command.args(rest).arg(cli());
            command
        }
        None => Command::new(cli()),
    };
    ChildGuard::new(
        command
            .args(["--url", url, "--namespace", namespace])
            .args(args)
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .expect("start the CLI"),
    )
}

/// One line of a CLI consumer: `id deadline promoted attempt`.
pub fn parse_deliveries(out: &str) -> Vec<(String, u64, u64)> {
    out.lines()
        .filter_map(|line| {
            let mut parts = line.split_whitespace();
            Some((
                parts.next()?.to_string(),
                parts.next()?.parse().ok()?,
                parts.next()?.parse().ok()?,
            ))
        })
        .collect()
}

/// The first wait of a wake listener's backoff after a failed or young
/// subscription (`MAX_BACKOFF`'s docs: 50 ms doubling).
pub const FIRST_BACKOFF: Duration = Duration::from_millis(50);

/// The most subscriptions a wake listener makes in `elapsed` (the one it
/// held when the time began included) when each is dropped: each after the
/// first follows a backoff of at least [`FIRST_BACKOFF`], or, had one
/// lasted [`purgatorio_redis::MAX_BACKOFF`] and counted as good, came at
/// once after that longer life (a message would also prove one good, and
/// the tests publish none meanwhile). Bounded by the time that passed, so a
/// loaded machine that stretches the test's loop is allowed as many more.
pub fn most_subscriptions(elapsed: Duration) -> i64 {
    1 + (elapsed.as_millis() / FIRST_BACKOFF.as_millis()) as i64
}
