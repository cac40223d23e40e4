//! `rediss://` against a real `redis-server` listening for TLS only, with a
//! throwaway CA and server certificate made by the `openssl` CLI in a
//! temporary directory: a timer scheduled over TLS is delivered; a client
//! that does not trust the server's CA is refused at once with a clear
//! error; CA settings that cannot work are typed errors before any
//! connection. Built with the `tls` feature only.

#![cfg(feature = "tls")]

mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::thread;
use std::time::Duration;

use common::{cli, PATIENCE};
use purgatorio_redis::{Config, Consumer, Error, Scheduler, Timers};
use purgatorio_testkit::{
    free_port, output_within, require_program, spawn_on_free_port, wait_for, ChildGuard, TempDir,
};

/// The keys' algorithm, as `openssl req -newkey` takes it: P-256, quick to
/// make.
const KEY: &str = "ec -pkeyopt ec_paramgen_curve:prime256v1";

/// A CA and a server certificate it signed, for `127.0.0.1`, in a
/// temporary directory: `ca.crt`, `ca.key`, `server.crt`, `server.key`.
struct Certificates {
    dir: TempDir,
}

impl Certificates {
    /// Makes the CA `ca` and the server's certificate.
    fn new() -> Certificates {
        let certificates = Certificates {
            dir: TempDir::new("purgatorio-redis-tls"),
        };
        certificates.make_ca("ca");
        certificates.openssl(&format!(
            "req -newkey {KEY} -nodes -keyout server.key -out server.csr -subj /CN=127.0.0.1"
        ));
        std::fs::write(
            certificates.path("server.ext"),
            "subjectAltName = IP:127.0.0.1\n\
             basicConstraints = CA:FALSE\n\
             extendedKeyUsage = serverAuth\n",
        )
        .expect("write server.ext");
        certificates.openssl(
            "x509 -req -in server.csr -CA ca.crt -CAkey ca.key -set_serial 2 -days 2 \
             -extfile server.ext -out server.crt",
        );
        certificates
    }

    /// Makes a self-signed CA named `name`: `<name>.crt`, `<name>.key`.
    fn make_ca(&self, name: &str) {
        self.openssl(&format!(
            "req -x509 -newkey {KEY} -nodes -days 2 -subj /CN=purgatorio-test-{name} \
             -keyout {name}.key -out {name}.crt"
        ));
    }

    /// Runs `openssl` with the words of `args` in the directory; panics
    /// with its stderr if it fails.
    fn openssl(&self, args: &str) {
        let openssl = require_program("openssl", "openssl");
        let output = output_within(
            Command::new(openssl)
                .args(args.split_whitespace())
                .current_dir(self.dir.path()),
            PATIENCE,
        );
        assert!(
            output.status.success(),
            "openssl {args}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// The file `name` in the directory.
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The contents of `name`.
    fn read(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.path(name)).expect("read a certificate")
    }
}

/// A `redis-server` of the test's own, listening for TLS only on a free
/// loopback port, stopped by PID on drop.
struct TlsServer {
    _guard: ChildGuard,
    /// Its TLS port.
    port: u16,
}

impl TlsServer {
    /// Starts one presenting `certificates`' server certificate; waits
    /// until it answers a client that trusts their CA.
    fn start(certificates: &Certificates) -> TlsServer {
        let binary = require_program("redis-server", "redis-server");
        let file = |name: &str| certificates.path(name).display().to_string();
        let (guard, port) = spawn_on_free_port(
            "redis-server over TLS",
            |port| {
                let mut command = Command::new(&binary);
                command
                    .args(["--port", "0", "--tls-port", &port.to_string()])
                    .args(["--bind", "127.0.0.1"])
                    .args(["--tls-cert-file", &file("server.crt")])
                    .args(["--tls-key-file", &file("server.key")])
                    .args(["--tls-ca-cert-file", &file("ca.crt")])
                    .args(["--tls-auth-clients", "no"])
                    .args(["--dir", &certificates.dir.path().display().to_string()])
                    .args(["--appendonly", "no", "--save", ""])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null());
                command
            },
            // A server that presents the CA's certificate is this one.
            |port, _pid| {
                let url = format!("rediss://127.0.0.1:{port}");
                Timers::connect(&url, trusting(certificates, "ready")).is_ok()
            },
        );
        TlsServer {
            _guard: guard,
            port,
        }
    }

    /// `rediss://127.0.0.1:<port>`.
    fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}", self.port)
    }
}

/// A config for `namespace` that trusts `certificates`' CA.
fn trusting(certificates: &Certificates, namespace: &str) -> Config {
    let mut config = Config::new(namespace);
    config.tls_ca_pem = Some(certificates.read("ca.crt"));
    config
}

#[test]
fn a_timer_scheduled_over_tls_is_delivered() {
    let certificates = Certificates::new();
    let server = TlsServer::start(&certificates);
    let timers = Timers::connect(&server.url(), trusting(&certificates, "tls")).unwrap();
    let scheduler = Scheduler::new(timers.clone());
    let stop = scheduler.stop_handle();
    let running = thread::spawn(move || scheduler.run());
    let consumer = Consumer::new(timers.clone(), "worker-1").unwrap();
    let at = timers.server_time_ms().unwrap() + 100;
    timers.schedule("over-tls", at, b"sealed").unwrap();

    let delivery = wait_for("the delivery over TLS", PATIENCE, || {
        consumer
            .poll(Duration::from_millis(100), 1)
            .unwrap()
            .into_iter()
            .next()
    });
    assert_eq!(delivery.id, "over-tls");
    assert_eq!(delivery.payload, b"sealed");
    assert_eq!(delivery.deadline_ms, at);
    consumer.ack_all(&[delivery]).unwrap();
    assert_eq!(timers.metrics().unwrap().pending, 0);
    stop.stop();
    running.join().unwrap().unwrap();
}

#[test]
fn the_cli_schedules_over_tls_with_its_ca() {
    let certificates = Certificates::new();
    let server = TlsServer::start(&certificates);
    let ca = certificates.path("ca.crt").display().to_string();
    let args = [
        "--url",
        &server.url(),
        "--namespace",
        "cli",
        "--tls-ca",
        &ca,
    ];
    let output = output_within(
        Command::new(cli())
            .args(args)
            .args(["schedule", "--count", "3"]),
        PATIENCE,
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let timers = Timers::connect(&server.url(), trusting(&certificates, "cli")).unwrap();
    assert_eq!(timers.metrics().unwrap().pending, 3);

    // Without its CA: refused, with the fix in the message, exit code 1.
    let args = ["--url", &server.url(), "--namespace", "cli"];
    let output = output_within(
        Command::new(cli())
            .args(args)
            .args(["schedule", "--count", "1"]),
        PATIENCE,
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("tls_ca_pem"), "{stderr}");
}

#[test]
fn a_server_whose_ca_is_not_trusted_is_refused_at_once() {
    let certificates = Certificates::new();
    certificates.make_ca("other");
    let server = TlsServer::start(&certificates);

    // The system's roots, then another CA: neither signed the server's
    // certificate. Each is refused on the first try, not retried as an
    // outage, and says where a private CA goes.
    let mut other = Config::new("tls");
    other.tls_ca_pem = Some(certificates.read("other.crt"));
    for config in [Config::new("tls"), other] {
        match Timers::connect(&server.url(), config) {
            Err(e @ Error::TlsCertificate(_)) => {
                let message = e.to_string();
                assert!(message.contains("invalid peer certificate"), "{message}");
                assert!(message.contains("Config::tls_ca_pem"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn ca_settings_that_cannot_work_are_typed_errors() {
    let certificates = Certificates::new();
    // Nothing listens there: each is refused before any connection.
    let url = format!("rediss://127.0.0.1:{}", free_port());
    let garbled = "-----BEGIN CERTIFICATE-----\n%%%%\n-----END CERTIFICATE-----\n";
    let not_a_certificate = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
    for (pem, why) in [
        (&b""[..], "no PEM certificate"),
        (b"not a certificate", "no PEM certificate"),
        (&certificates.read("ca.key"), "no PEM certificate"),
        (garbled.as_bytes(), "not valid PEM"),
        (not_a_certificate.as_bytes(), "not a CA certificate"),
    ] {
        let mut config = Config::new("tls");
        config.tls_ca_pem = Some(pem.to_vec());
        match Timers::connect(&url, config) {
            Err(
                e @ Error::InvalidConfig {
                    field: "tls_ca_pem",
                    ..
                },
            ) => assert!(e.to_string().contains(why), "{e}"),
            other => panic!("{pem:?}: {other:?}"),
        }
    }
    let plain = format!("redis://127.0.0.1:{}", free_port());
    match Timers::connect(&plain, trusting(&certificates, "tls")) {
        Err(
            e @ Error::InvalidConfig {
                field: "tls_ca_pem",
                ..
            },
        ) => assert!(e.to_string().contains("rediss://"), "{e}"),
        other => panic!("{other:?}"),
    }
}

/// The async face over TLS: its connection manager, a consumer's reading
/// connection and a scheduler's Pub/Sub connection all trust the CA in
/// the config; a server whose CA is not trusted is refused at once.
#[cfg(feature = "tokio")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_async_face_speaks_tls() {
    use futures_util::StreamExt;
    use purgatorio_redis::aio;

    let certificates = Certificates::new();
    certificates.make_ca("other");
    let server = tokio::task::block_in_place(|| TlsServer::start(&certificates));
    let timers = aio::Timers::connect(&server.url(), trusting(&certificates, "async-tls"))
        .await
        .unwrap();
    let node = tokio::spawn(aio::Scheduler::new(timers.clone()).run());
    let consumer = aio::Consumer::new(timers.clone(), "worker-1")
        .await
        .unwrap();
    let at = timers.server_time_ms().await.unwrap() + 100;
    timers.schedule("over-tls", at, b"sealed").await.unwrap();
    let delivery = tokio::time::timeout(PATIENCE, consumer.deliveries().next())
        .await
        .expect("the delivery over TLS")
        .unwrap()
        .unwrap();
    assert_eq!(delivery.id, "over-tls");
    assert_eq!(delivery.payload, b"sealed");
    assert!(delivery.promoted_ms >= at);
    delivery.ack().await.unwrap();
    assert_eq!(timers.metrics().await.unwrap().unacknowledged, 0);
    node.abort();

    let mut other = Config::new("async-tls");
    other.tls_ca_pem = Some(certificates.read("other.crt"));
    match aio::Timers::connect(&server.url(), other).await {
        Err(e @ Error::TlsCertificate(_)) => {
            assert!(e.to_string().contains("Config::tls_ca_pem"), "{e}");
        }
        other => panic!("{other:?}"),
    }
}
