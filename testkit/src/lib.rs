//! Test support for the workspace members that test against real components
//! (a `redis-server`, `kcat`, a Python Kafka client).
//!
//! The README's test command must work on a fresh machine, so a test that needs
//! a program installs it when it is missing ([`require_program`],
//! [`python_with`]) and fails loudly when it cannot: nothing is skipped because
//! a component is absent. Servers run as children on loopback in a temporary
//! directory ([`TempDir`], [`free_port`]) and are stopped by PID
//! ([`ChildGuard`]).

use std::fs;
use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The workspace's `target/` directory, where the virtual environment and the
/// install lock live.
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"),
    }
}

/// Finds `program` on the `PATH`.
pub fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

/// Runs `script` with `sh -c` under an exclusive lock on `target/<lock>`
/// (`flock(1)`, from util-linux), so test binaries running at once install one
/// at a time. Panics with the script's output when it fails.
fn run_locked(lock: &str, script: &str) {
    let dir = target_dir();
    fs::create_dir_all(&dir).expect("create target/");
    let output = Command::new("flock")
        .arg("--timeout=900")
        .arg(dir.join(lock))
        .args(["sh", "-c", script])
        .output()
        .unwrap_or_else(|e| panic!("run flock (util-linux) for `{script}`: {e}"));
    assert!(
        output.status.success(),
        "`{script}` failed ({}):\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The path of `program`, installing the Debian package `package` with
/// `apt-get` when the program is missing (as root, or through `sudo`).
///
/// Panics, saying what to install, when it is missing and cannot be installed:
/// a test that needs a real component never skips silently.
pub fn require_program(program: &str, package: &str) -> PathBuf {
    if let Some(path) = which(program).or_else(|| sbin(program)) {
        return path;
    }
    let sudo = if is_root() { "" } else { "sudo -n " };
    run_locked(
        "apt.lock",
        &format!(
            "command -v {program} >/dev/null || {{ \
             export DEBIAN_FRONTEND=noninteractive; \
             {sudo}apt-get -o DPkg::Lock::Timeout=300 install -y -q {package} \
             || {{ {sudo}apt-get -o DPkg::Lock::Timeout=300 update -q && \
                   {sudo}apt-get -o DPkg::Lock::Timeout=300 install -y -q {package}; }}; }}"
        ),
    );
    which(program)
        .or_else(|| sbin(program))
        .unwrap_or_else(|| panic!("`{program}` is still missing after installing {package}"))
}

fn sbin(program: &str) -> Option<PathBuf> {
    ["/usr/sbin", "/usr/bin", "/sbin", "/usr/local/bin"]
        .iter()
        .map(|dir| Path::new(dir).join(program))
        .find(|p| p.is_file())
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// A Python interpreter in a virtual environment under `target/venv` that has
/// `packages` (pip requirement strings, such as `"kafka-python==2.0.2"`),
/// creating the environment and installing what is missing.
pub fn python_with(packages: &[&str]) -> PathBuf {
    let venv = target_dir().join("venv");
    let python = venv.join("bin/python");
    let system = which("python3").expect("python3 is needed to create target/venv");
    let list = packages
        .iter()
        .map(|p| format!("'{p}'"))
        .collect::<Vec<_>>()
        .join(" ");
    run_locked(
        "venv.lock",
        &format!(
            "set -e; [ -x '{py}' ] || '{system}' -m venv '{venv}'; \
             '{py}' -m pip install -q --disable-pip-version-check {list}",
            py = python.display(),
            system = system.display(),
            venv = venv.display(),
        ),
    );
    python
}

/// A directory `target/<name>` with the npm packages `packages` (npm specs,
/// such as `"bullmq@5"`) installed in its `node_modules`, installing what is
/// missing; `None` when `node` or `npm` is not on the `PATH`.
///
/// The one component the tests do not install themselves: a Node.js
/// toolchain is large, and what needs it (the side-by-side comparison with a
/// JavaScript library) is a measurement, not a check of our code.
pub fn node_modules_with(name: &str, packages: &[&str]) -> Option<PathBuf> {
    which("node")?;
    let npm = which("npm")?;
    let dir = target_dir().join(name);
    fs::create_dir_all(&dir).expect("create the npm directory under target/");
    // Installed once: a package already in node_modules is not asked of
    // the registry again.
    let missing: Vec<&str> = packages
        .iter()
        .copied()
        .filter(|spec| !dir.join("node_modules").join(npm_name(spec)).is_dir())
        .collect();
    if !missing.is_empty() {
        let list = missing
            .iter()
            .map(|p| format!("'{p}'"))
            .collect::<Vec<_>>()
            .join(" ");
        run_locked(
            "npm.lock",
            &format!(
                "set -e; cd '{dir}'; [ -f package.json ] || '{npm}' init -y >/dev/null; \
                 '{npm}' install --silent --no-audit --no-fund {list}",
                dir = dir.display(),
                npm = npm.display(),
            ),
        );
    }
    Some(dir)
}

/// The package name of an npm spec: `bullmq` of `bullmq@5`, `@scope/x` of
/// `@scope/x@1`.
fn npm_name(spec: &str) -> &str {
    match spec.rfind('@') {
        Some(at) if at > 0 => &spec[..at],
        _ => spec,
    }
}

/// A loopback port that was free a moment ago (bound, read and released).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind 127.0.0.1:0")
        .port()
}

/// The process id of the Redis answering on loopback `port`, if one
/// answers within a second (`INFO server`, inline).
pub fn redis_pid(port: u16) -> Option<u32> {
    use std::io::Write;
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    stream.write_all(b"INFO server\r\n").ok()?;
    let mut seen = Vec::new();
    let mut chunk = [0u8; 4096];
    // Bounded: `INFO server` is a few KiB.
    while seen.len() < 64 << 10 {
        let n = stream.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        seen.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&seen);
        if let Some(pid) = text
            .lines()
            .find_map(|line| line.strip_prefix("process_id:"))
            .filter(|_| text.contains("\r\nrun_id:"))
        {
            return pid.trim().parse().ok();
        }
    }
    None
}

/// How many ports [`spawn_on_free_port`] tries.
const PORT_TRIES: usize = 10;

/// Starts a server on a loopback port that was free a moment ago, and
/// returns once it answers, with its port. A port found free by
/// [`free_port`] can be taken by another process (another test) before the
/// server binds it; such a server exits, or a stranger answers in its
/// place, so each try waits until `ready(port, pid)` says the server on
/// `port` answers as process `pid` (the child's) or the child exits, and
/// then starts it again on another port.
///
/// `command(port)` is the server's command for `port`.
///
/// # Panics
///
/// When the server cannot be started, exits on [`PORT_TRIES`] ports in a
/// row, or does not answer within a minute.
pub fn spawn_on_free_port(
    what: &str,
    command: impl FnMut(u16) -> Command,
    ready: impl FnMut(u16, u32) -> bool,
) -> (ChildGuard, u16) {
    spawn_on_ports(
        what,
        std::iter::repeat_with(free_port).take(PORT_TRIES),
        command,
        ready,
    )
}

/// [`spawn_on_free_port`] on the ports `ports` yields, in turn.
///
/// # Panics
///
/// As [`spawn_on_free_port`], when `ports` runs out.
pub fn spawn_on_ports(
    what: &str,
    ports: impl IntoIterator<Item = u16>,
    mut command: impl FnMut(u16) -> Command,
    mut ready: impl FnMut(u16, u32) -> bool,
) -> (ChildGuard, u16) {
    let mut tried = Vec::new();
    for port in ports {
        let child = command(port)
            .spawn()
            .unwrap_or_else(|e| panic!("start {what}: {e}"));
        let mut guard = ChildGuard::new(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if ready(port, guard.id()) {
                return (guard, port);
            }
            if let Ok(Some(_exited)) = guard.child().try_wait() {
                break; // the port was taken: another one
            }
            assert!(
                Instant::now() < deadline,
                "{what} on port {port} did not answer within a minute"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        tried.push(port);
    }
    panic!("{what} exited at once on ports {tried:?}");
}

/// A directory under the system's temporary directory, removed on drop.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    /// Creates a fresh, empty directory whose name starts with `prefix`.
    pub fn new(prefix: &str) -> TempDir {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let path = std::env::temp_dir().join(format!(
            "{prefix}-{}-{nanos}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        fs::create_dir_all(&path).unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
        TempDir(path)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// A child process that is killed (`SIGKILL`, by PID) and reaped on drop, so a
/// failing test leaves no server behind.
#[derive(Debug)]
pub struct ChildGuard(Option<Child>);

impl ChildGuard {
    /// Guards `child`.
    pub fn new(child: Child) -> ChildGuard {
        ChildGuard(Some(child))
    }

    /// The child's PID.
    pub fn id(&self) -> u32 {
        self.0.as_ref().map_or(0, Child::id)
    }

    /// The child itself, for its pipes.
    pub fn child(&mut self) -> &mut Child {
        self.0.as_mut().expect("the child was already stopped")
    }

    /// Sends `signal` (a name `kill(1)` knows: `TERM`, `KILL`, `STOP`, `CONT`)
    /// to the child by PID.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.id().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} {} failed", self.id());
    }

    /// Sends `SIGKILL` and reaps the child; returns its exit status.
    pub fn kill(mut self) -> std::process::ExitStatus {
        let mut child = self.0.take().expect("the child was already stopped");
        let _ = child.kill();
        child.wait().expect("wait for the child")
    }

    /// Sends `SIGTERM` and waits up to `grace` for the child to exit, then
    /// `SIGKILL`; returns its exit status.
    pub fn stop(mut self, grace: Duration) -> std::process::ExitStatus {
        let mut child = self.0.take().expect("the child was already stopped");
        let _ = Command::new("kill").arg(child.id().to_string()).status();
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                return status;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = child.kill();
        child.wait().expect("wait for the child")
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Runs `command` to its end with its standard output and error captured
/// (and no standard input), for at most `limit`; kills it by PID and panics
/// naming it when time runs out, so a program that should stop at once but
/// starts working instead fails the test quickly.
pub fn output_within(command: &mut Command, limit: Duration) -> Output {
    let what = format!("{command:?} to exit");
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start {command:?}: {e}"));
    let mut guard = ChildGuard::new(child);
    // Read both pipes while waiting, so a chatty child never blocks on a
    // full pipe.
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            bytes
        })
    };
    let stdout = drain(guard.child().stdout.take().map(|p| Box::new(p) as _));
    let stderr = drain(guard.child().stderr.take().map(|p| Box::new(p) as _));
    let status = wait_for(&what, limit, || guard.child().try_wait().ok().flatten());
    Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    }
}

/// Polls `ready` every 10 ms until it returns `Some`, for at most `limit`;
/// panics naming `what` when time runs out. Every wait in a test is bounded.
pub fn wait_for<T>(what: &str, limit: Duration, mut ready: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = ready() {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "gave up after {limit:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// One `redis-server` of a [`RedisCluster`].
#[derive(Debug)]
pub struct ClusterNode {
    /// Its client port on 127.0.0.1.
    pub port: u16,
    /// The process, until killed.
    guard: Option<ChildGuard>,
}

/// A real Redis Cluster of `redis-server` processes on loopback ports, in a
/// temporary directory, made with `redis-cli --cluster create` and stopped
/// by PID on drop (installed with apt when missing).
///
/// The nodes keep nothing on disk (no RDB, no AOF), sync replicas at once
/// (`repl-diskless-sync-delay 0`), and let any replica fail over
/// (`cluster-replica-validity-factor 0`), so that a test's failover is
/// decided by `cluster-node-timeout` alone.
#[derive(Debug)]
pub struct RedisCluster {
    /// The nodes, masters first.
    nodes: Vec<ClusterNode>,
    /// Their directories.
    dir: TempDir,
}

impl RedisCluster {
    /// Starts `masters` masters with `replicas` replicas each and a node
    /// timeout of `node_timeout_ms`; returns once every node reports
    /// `cluster_state:ok` and every replica is in sync with its master.
    /// One master alone (no replica) takes every slot itself; otherwise
    /// `redis-cli --cluster create` needs at least 3 masters.
    ///
    /// # Panics
    ///
    /// When `redis-server` or `redis-cli` is missing and cannot be
    /// installed, for 2 masters or 1 with replicas, or when the cluster is
    /// not ready within a minute.
    pub fn start(masters: usize, replicas: usize, node_timeout_ms: u64) -> RedisCluster {
        let server = require_program("redis-server", "redis-server");
        let dir = TempDir::new("purgatorio-cluster");
        let nodes: Vec<ClusterNode> = (0..masters * (1 + replicas))
            .map(|_| {
                let (guard, port) = spawn_on_free_port(
                    "a cluster node",
                    |port| {
                        let bus = free_port();
                        let node_dir = dir.path().join(port.to_string());
                        fs::create_dir_all(&node_dir).expect("create a node's directory");
                        let mut command = Command::new(&server);
                        command
                            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                            .args([
                                "--cluster-enabled",
                                "yes",
                                "--cluster-port",
                                &bus.to_string(),
                            ])
                            .args(["--cluster-config-file", "nodes.conf"])
                            .args(["--cluster-node-timeout", &node_timeout_ms.to_string()])
                            .args(["--cluster-replica-validity-factor", "0"])
                            .args(["--repl-diskless-sync-delay", "0"])
                            .args(["--appendonly", "no", "--save", ""])
                            .arg("--dir")
                            .arg(&node_dir)
                            .stdout(Stdio::null())
                            .stderr(Stdio::null());
                        command
                    },
                    |port, pid| redis_pid(port) == Some(pid),
                );
                ClusterNode {
                    port,
                    guard: Some(guard),
                }
            })
            .collect();
        let cluster = RedisCluster { nodes, dir };
        for node in &cluster.nodes {
            wait_for("a cluster node to answer", Duration::from_secs(30), || {
                (cluster.cli(node.port, &["PING"]).trim() == "PONG").then_some(())
            });
        }
        if masters == 1 && replicas == 0 {
            // `redis-cli --cluster create` needs 3 masters: one takes
            // every slot itself.
            let port = cluster.nodes[0].port;
            let out = cluster.cli(port, &["CLUSTER", "ADDSLOTSRANGE", "0", "16383"]);
            assert_eq!(out.trim(), "OK", "CLUSTER ADDSLOTSRANGE: {out}");
        } else {
            assert!(
                masters >= 3,
                "redis-cli --cluster create needs 3 masters or more"
            );
            let mut create = Command::new(require_program("redis-cli", "redis-tools"));
            create.arg("--cluster").arg("create");
            for node in &cluster.nodes {
                create.arg(format!("127.0.0.1:{}", node.port));
            }
            create.args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"]);
            let out = output_within(&mut create, Duration::from_secs(60));
            assert!(
                out.status.success(),
                "redis-cli --cluster create failed:\n{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        cluster.wait_until_ready(Duration::from_secs(60));
        cluster
    }

    /// Waits until every live node reports `cluster_state:ok` and every live
    /// replica's link to its master is up.
    ///
    /// # Panics
    ///
    /// When that takes longer than `limit`.
    pub fn wait_until_ready(&self, limit: Duration) {
        wait_for("the cluster to be ready", limit, || {
            self.live_ports()
                .into_iter()
                .all(|port| {
                    let replication = self.cli(port, &["INFO", "replication"]);
                    self.cli(port, &["CLUSTER", "INFO"])
                        .contains("cluster_state:ok")
                        && (replication.contains("role:master")
                            || replication.contains("master_link_status:up"))
                })
                .then_some(())
        });
    }

    /// The client ports of the nodes still running.
    pub fn live_ports(&self) -> Vec<u16> {
        self.nodes
            .iter()
            .filter(|node| node.guard.is_some())
            .map(|node| node.port)
            .collect()
    }

    /// `redis://127.0.0.1:<port>` for every node still running.
    pub fn urls(&self) -> Vec<String> {
        self.live_ports()
            .into_iter()
            .map(|port| format!("redis://127.0.0.1:{port}"))
            .collect()
    }

    /// Runs `redis-cli -p <port> <args>` and returns what it printed
    /// (panics if it runs longer than 15 s).
    pub fn cli(&self, port: u16, args: &[&str]) -> String {
        let mut command = Command::new(require_program("redis-cli", "redis-tools"));
        command.args(["-p", &port.to_string()]).args(args);
        let out = output_within(&mut command, Duration::from_secs(15));
        String::from_utf8_lossy(&out.stdout).replace('\r', "")
    }

    /// The master of hash slot `slot` as a live node sees it
    /// (`CLUSTER NODES`), if any.
    pub fn master_of_slot(&self, slot: u16) -> Option<u16> {
        let asked = *self.live_ports().first()?;
        let nodes = self.cli(asked, &["CLUSTER", "NODES"]);
        nodes.lines().find_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let flags = fields.get(2)?;
            if !flags.split(',').any(|f| f == "master") || flags.contains("fail") {
                return None;
            }
            let port: u16 = fields.get(1)?.split(['@', ':']).nth(1)?.parse().ok()?;
            fields.iter().skip(8).find_map(|range| {
                let (start, end) = match range.split_once('-') {
                    Some((start, end)) => (start.parse().ok()?, end.parse().ok()?),
                    None => {
                        let only: u16 = range.parse().ok()?;
                        (only, only)
                    }
                };
                (start..=end).contains(&slot).then_some(port)
            })
        })
    }

    /// The client ports of the replicas of the master at `port`, as it
    /// reports them (`INFO replication`).
    pub fn replicas_of(&self, port: u16) -> Vec<u16> {
        self.cli(port, &["INFO", "replication"])
            .lines()
            .filter(|line| line.starts_with("slave"))
            .filter_map(|line| {
                line.split(',')
                    .find_map(|field| field.strip_prefix("port="))?
                    .parse()
                    .ok()
            })
            .collect()
    }

    /// The hash slot of `key` (`CLUSTER KEYSLOT`).
    pub fn slot_of(&self, key: &str) -> u16 {
        let asked = self.live_ports()[0];
        self.cli(asked, &["CLUSTER", "KEYSLOT", key])
            .trim()
            .parse()
            .expect("CLUSTER KEYSLOT answers a number")
    }

    /// The node at `port`'s PID.
    ///
    /// # Panics
    ///
    /// When it is not running.
    pub fn pid(&self, port: u16) -> u32 {
        self.node(port).guard.as_ref().expect("running").id()
    }

    /// Sends `signal` (`STOP`, `CONT`) to the node at `port`.
    ///
    /// # Panics
    ///
    /// When it is not running.
    pub fn signal(&self, port: u16, signal: &str) {
        self.node(port)
            .guard
            .as_ref()
            .expect("running")
            .signal(signal);
    }

    /// Kills the node at `port` with `SIGKILL`, by PID.
    ///
    /// # Panics
    ///
    /// When it is not running.
    pub fn kill(&mut self, port: u16) {
        let node = self
            .nodes
            .iter_mut()
            .find(|node| node.port == port)
            .expect("a node of the cluster");
        node.guard.take().expect("running").kill();
    }

    /// Where the nodes keep their files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn node(&self, port: u16) -> &ClusterNode {
        self.nodes
            .iter()
            .find(|node| node.port == port)
            .expect("a node of the cluster")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_npm_spec_names_its_package() {
        assert_eq!(npm_name("bullmq@5"), "bullmq");
        assert_eq!(npm_name("bullmq"), "bullmq");
        assert_eq!(npm_name("@scope/pkg@1.2"), "@scope/pkg");
        assert_eq!(npm_name("@scope/pkg"), "@scope/pkg");
    }

    #[test]
    fn a_temporary_directory_is_removed_on_drop() {
        let dir = TempDir::new("testkit");
        let path = dir.path().to_path_buf();
        fs::write(path.join("f"), b"x").unwrap();
        drop(dir);
        assert!(!path.exists());
    }

    #[test]
    fn output_within_captures_what_the_child_printed() {
        let out = output_within(
            Command::new("sh").args(["-c", "echo out; echo err >&2; exit 3"]),
            Duration::from_secs(10),
        );
        assert_eq!(out.status.code(), Some(3));
        assert_eq!(out.stdout, b"out\n");
        assert_eq!(out.stderr, b"err\n");
    }

    #[test]
    #[should_panic(expected = "gave up after")]
    fn output_within_gives_up_on_a_child_that_runs_on() {
        output_within(Command::new("sleep").arg("600"), Duration::from_millis(200));
    }

    #[test]
    fn a_guarded_child_is_killed_on_drop() {
        let guard = ChildGuard::new(Command::new("sleep").arg("600").spawn().unwrap());
        let pid = guard.id();
        drop(guard);
        assert!(!Path::new(&format!("/proc/{pid}")).exists());
    }

    #[test]
    fn a_present_program_is_found_without_installing() {
        assert!(require_program("sh", "dash").ends_with("sh"));
    }

    #[test]
    fn waiting_is_bounded() {
        let result = std::panic::catch_unwind(|| {
            wait_for("never", Duration::from_millis(50), || None::<()>)
        });
        assert!(result.is_err());
        assert_eq!(wait_for("now", Duration::from_secs(1), || Some(7)), 7);
    }
}
