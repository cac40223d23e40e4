//! The bounded server's edges, through raw TCP and reqwest on loopback
//! ports: a client that sends half its headers, half its body, never reads
//! its answers, or comes one connection too many. Every timeout runs on a
//! manual clock, so a test moves time; every wait is bounded by `PATIENCE`.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use purgatorio::{ManualClock, Timer};
use purgatorio_web::long_poll::{LongPoll, StoreLimits};
use purgatorio_web::server::Server;
use reqwest::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

mod common;
use common::{bounded, until, PATIENCE};

/// The timeouts the tests give the server.
const TIMEOUT: Duration = Duration::from_secs(10);

/// The long-poll service behind a [`Server`] on a loopback port, every
/// timeout on a manual clock.
struct Served {
    /// Where it listens.
    addr: SocketAddr,
    /// The server, for its gauges.
    server: Server,
    /// The service, for its store.
    service: LongPoll,
    /// The clock of every timeout.
    clock: ManualClock,
    /// The timer of every timeout.
    timer: Timer,
}

impl Served {
    async fn start(limits: StoreLimits, shape: impl FnOnce(Server) -> Server) -> Served {
        let clock = ManualClock::new();
        let timer = Timer::builder()
            .clock(clock.clone())
            .build()
            .expect("a timer");
        let service = LongPoll::with_limits(&timer, limits).expect("the service");
        let server = shape(
            Server::new(&timer)
                .header_read_timeout(TIMEOUT)
                .body_timeout(TIMEOUT)
                .write_timeout(TIMEOUT),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a port");
        let addr = listener.local_addr().expect("its address");
        let (serving, app) = (server.clone(), service.router());
        tokio::spawn(async move { serving.serve(listener, app).await });
        Served {
            addr,
            server,
            service,
            clock,
            timer,
        }
    }

    async fn default() -> Served {
        Served::start(StoreLimits::default(), |server| server).await
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Waits until the timer holds `armed` sleeps: the timeouts a test is
    /// about to pass have started.
    async fn until_armed(&self, armed: usize) {
        until(&format!("{armed} armed timeouts"), || {
            self.timer.len() == armed
        })
        .await;
    }

    /// Advances the clock by `step` until `done`, at most `PATIENCE`.
    async fn advance_until(&self, what: &str, step: Duration, mut done: impl FnMut() -> bool) {
        let start = Instant::now();
        while !done() {
            assert!(start.elapsed() < PATIENCE, "gave up waiting for {what}");
            self.clock.advance(step);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// A raw connection that has sent `bytes`, once the server counts it.
    async fn raw(&self, bytes: &[u8]) -> TcpStream {
        let before = self.server.open_connections();
        let mut tcp = bounded("a connection", TcpStream::connect(self.addr))
            .await
            .expect("connect");
        tcp.write_all(bytes).await.expect("write");
        until("the server to count the connection", || {
            self.server.open_connections() > before
        })
        .await;
        tcp
    }
}

/// Everything the server sends on `tcp` until it closes it.
async fn read_to_close(tcp: &mut TcpStream) -> String {
    let mut answer = Vec::new();
    bounded("the server to close", tcp.read_to_end(&mut answer))
        .await
        .expect("read");
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_sends_half_its_headers_is_closed_at_the_header_timeout() {
    let served = Served::default().await;
    let mut tcp = served.raw(b"GET /keys/a HTTP/1.1\r\nHost: x\r\n").await;
    served.until_armed(1).await;
    served.clock.advance(TIMEOUT - Duration::from_millis(1));
    // Not yet: a request that completes now is still answered.
    tcp.write_all(b"\r\n")
        .await
        .expect("the rest of the headers");
    let mut head = [0; 12];
    bounded("the answer", tcp.read_exact(&mut head))
        .await
        .expect("read");
    assert_eq!(&head, b"HTTP/1.1 404");
    // The connection is idle now: its next request's headers get the
    // timeout, counted afresh.
    served.until_armed(1).await;
    served.clock.advance(TIMEOUT);
    read_to_close(&mut tcp).await;
    until("the connection to close", || {
        served.server.open_connections() == 0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_limit_wait_until_one_closes() {
    let served = Served::start(StoreLimits::default(), |server| server.max_connections(2)).await;
    let first = served.raw(b"").await;
    let _second = served.raw(b"").await;
    let url = served.url("/keys/a");
    let third = tokio::spawn(async move { reqwest::get(url).await.map(|r| r.status()) });
    // While both are held, the third waits in the listen queue. (On a slow
    // machine this check can pass without the limit; it cannot fail with it.)
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!third.is_finished(), "a third connection was served");
    assert_eq!(served.server.open_connections(), 2);
    drop(first);
    let status = bounded("the third answer", third)
        .await
        .expect("task")
        .expect("GET");
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_does_not_arrive_in_time_is_cut_off_and_its_bytes_given_back() {
    let served = Served::default().await;
    let mut tcp = served
        .raw(b"PUT /keys/a HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789")
        .await;
    // Charged: its bytes, and 64 for the frame.
    until("the body's first bytes", || {
        served.server.body_bytes_held() == 74
    })
    .await;
    served.until_armed(1).await;
    // A byte now and then does not extend the body's time.
    served.clock.advance(TIMEOUT / 2);
    tcp.write_all(b"a").await.expect("write");
    until("the byte", || served.server.body_bytes_held() == 74 + 65).await;
    served.clock.advance(TIMEOUT / 2);
    let answer = read_to_close(&mut tcp).await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(
        answer.contains("did not arrive within 10000 ms"),
        "{answer}"
    );
    assert_eq!(served.server.body_bytes_held(), 0);
    assert_eq!(
        served.service.store().index("a"),
        0,
        "half a body was stored"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_past_the_budget_are_refused_until_room_comes_back() {
    let served = Served::start(StoreLimits::default(), |server| {
        server.max_body_bytes(64 * 1024)
    })
    .await;
    let mut slow = served
        .raw(b"PUT /keys/slow HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n")
        .await;
    slow.write_all(&[b'x'; 60 * 1024]).await.expect("write");
    until("the slow body's bytes", || {
        served.server.body_bytes_held() >= 60 * 1024
    })
    .await;
    // A connection per request: the clock's advances close idle ones.
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .expect("a client");
    let put = || {
        client
            .put(served.url("/keys/k"))
            .body(vec![b'v'; 10 * 1024])
            .send()
    };
    let refused = bounded("a PUT", put()).await.expect("PUT");
    assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
    let sentence = refused.text().await.expect("body");
    assert!(sentence.contains("retry later"), "{sentence}");
    // The slow body is cut off; its bytes come back.
    served
        .advance_until("the slow body's cut-off", TIMEOUT, || {
            served.server.body_bytes_held() == 0
        })
        .await;
    read_to_close(&mut slow).await;
    let written = bounded("a PUT", put()).await.expect("PUT");
    assert_eq!(written.status(), StatusCode::OK);
    assert_eq!(served.server.body_bytes_held(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_is_cut_off_at_the_write_timeout() {
    let served = Served::start(StoreLimits::default(), |server| {
        server.header_read_timeout(Duration::from_secs(3600))
    })
    .await;
    served
        .service
        .put("big", vec![b'v'; 512 * 1024].into())
        .expect("room");
    // 64 pipelined GETs of 512 KiB, never read: 32 MiB, more than the
    // sockets' buffers hold.
    let request = b"GET /keys/big HTTP/1.1\r\nHost: x\r\n\r\n";
    let _stalled = served.raw(&request.repeat(64)).await;
    // The writes stall once the buffers are full; each advance passes the
    // timeout of a stall that began before it.
    served
        .advance_until("the stalled reader's cut-off", TIMEOUT, || {
            served.server.open_connections() == 0
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_limit_per_address_are_closed_at_once() {
    let served = Served::start(StoreLimits::default(), |server| {
        server.max_connections_per_ip(2)
    })
    .await;
    let first = served.raw(b"").await;
    let _second = served.raw(b"").await;
    let mut third = bounded("a connection", TcpStream::connect(served.addr))
        .await
        .expect("connect");
    assert_eq!(read_to_close(&mut third).await, "");
    assert_eq!(served.server.refused_connections(), 1);
    drop(first);
    until("the first to close", || {
        served.server.open_connections() == 1
    })
    .await;
    let status = bounded("GET", reqwest::get(served.url("/keys/a")))
        .await
        .expect("GET");
    assert_eq!(status.status(), StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_lets_a_parked_get_finish_then_returns() {
    let clock = ManualClock::new();
    let timer = Timer::builder()
        .clock(clock.clone())
        .build()
        .expect("a timer");
    let service = LongPoll::new(&timer).expect("the service");
    service.put("k", "v1".into()).expect("room");
    let server = Server::new(&timer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let addr = listener.local_addr().expect("its address");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (serving, app) = (server.clone(), service.router());
    let served = tokio::spawn(async move {
        let signal = async {
            let _ = stopped.await;
        };
        serving.serve_with_shutdown(listener, app, signal).await
    });
    let url = format!("http://{addr}/keys/k?index=1&wait=60s");
    let parked = tokio::spawn(async move { reqwest::get(url).await?.text().await });
    until("the GET to park", || service.purgatory().delayed() == 1).await;
    stop.send(()).expect("the server listens");
    // It stops accepting; the parked GET still waits for its answer.
    until("the listener to close", || {
        std::net::TcpStream::connect(addr).is_err()
    })
    .await;
    assert!(!served.is_finished(), "returned with a request in flight");
    service.put("k", "v2".into()).expect("room");
    let answer = bounded("the answer", parked)
        .await
        .expect("task")
        .expect("GET");
    assert_eq!(answer, "v2");
    bounded("serve to return", served)
        .await
        .expect("task")
        .expect("no accept error");
    assert_eq!(server.open_connections(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_past_the_stores_limits_is_answered_507() {
    let limits = StoreLimits {
        max_keys: 2,
        max_bytes: 1024,
    };
    let served = Served::start(limits, |server| server).await;
    let client = reqwest::Client::new();
    let put = |key: &str, len: usize| {
        client
            .put(served.url(&format!("/keys/{key}")))
            .body(vec![b'v'; len])
            .send()
    };
    for key in ["a", "b"] {
        assert_eq!(
            bounded("PUT", put(key, 10)).await.expect("PUT").status(),
            StatusCode::OK
        );
    }
    let full = bounded("PUT", put("c", 10)).await.expect("PUT");
    assert_eq!(full.status(), StatusCode::INSUFFICIENT_STORAGE);
    assert_eq!(
        full.text().await.expect("body"),
        "the store holds its limit of 2 keys\n"
    );
    // A key already held may change, within the bytes.
    assert_eq!(
        bounded("PUT", put("a", 500)).await.expect("PUT").status(),
        StatusCode::OK
    );
    let big = bounded("PUT", put("b", 600)).await.expect("PUT");
    assert_eq!(big.status(), StatusCode::INSUFFICIENT_STORAGE);
    assert_eq!(served.service.store().bytes(), 2 + 500 + 10);
}
