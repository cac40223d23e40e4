//! The long-poll service through a real HTTP client (reqwest) on a loopback
//! port. The purgatory's timer runs on a manual clock, so a wait ends when
//! a test advances it; every wait of a test is bounded by `PATIENCE`.

use std::net::SocketAddr;
use std::time::Duration;

use purgatorio::{ManualClock, Timer};
use purgatorio_web::long_poll::{
    LongPoll, INDEX_HEADER, MAX_KEY_BYTES, MAX_VALUE_BYTES, SWEEP_AFTER,
};
use reqwest::StatusCode;

mod common;
use common::{bounded, until};

/// How many GETs park on one key.
const CROWD: usize = 2_000;

/// How many GETs stay parked on a key while others leave it.
const STAYING: usize = 3;

/// How many clients leave a key at once.
const LEAVING: usize = 50;

/// The service on a loopback port, its purgatory timed by a manual clock.
struct Server {
    /// Where it listens.
    addr: SocketAddr,
    /// The service, for its gauges.
    service: LongPoll,
    /// The clock of its timer.
    clock: ManualClock,
    /// The purgatory's timer.
    timer: Timer,
}

impl Server {
    async fn start() -> Server {
        let clock = ManualClock::new();
        let timer = Timer::builder()
            .clock(clock.clone())
            .build()
            .expect("a timer");
        let service = LongPoll::new(&timer).expect("the service");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a port");
        let addr = listener.local_addr().expect("its address");
        let router = service.router();
        tokio::spawn(async move { axum::serve(listener, router).await });
        Server {
            addr,
            service,
            clock,
            timer,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Waits until `parked` GETs wait in the purgatory: armed in its timer.
    /// (A GET completed by a PUT, or withdrawn, also leaves its key's watch
    /// list at once; one whose wait ended stays there, inert, until the
    /// key's next PUT or a purge, as in Kafka's purgatory.)
    async fn until_parked(&self, parked: usize) {
        let purgatory = self.service.purgatory();
        until(&format!("{parked} parked GETs"), || {
            purgatory.delayed() == parked
        })
        .await;
    }
}

/// A response's status, index header and body.
async fn read(response: reqwest::Response) -> (StatusCode, u64, String) {
    let status = response.status();
    let index = response
        .headers()
        .get(INDEX_HEADER)
        .and_then(|value| value.to_str().ok()?.parse().ok())
        .unwrap_or(u64::MAX);
    let body = bounded("body", response.text()).await.expect("a body");
    (status, index, body)
}

async fn put(client: &reqwest::Client, server: &Server, key: &str, value: &str) -> u64 {
    let request = client
        .put(server.url(&format!("/keys/{key}")))
        .body(value.to_string());
    let (status, index, body) = read(bounded("PUT", request.send()).await.expect("PUT")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, format!("{index}\n"));
    index
}

async fn get(client: reqwest::Client, url: String) -> (StatusCode, u64, String) {
    read(bounded("GET", client.get(url).send()).await.expect("GET")).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_past_the_index_answers_at_once_and_one_at_it_waits_for_the_put() {
    let server = Server::start().await;
    let client = reqwest::Client::new();
    assert_eq!(
        get(client.clone(), server.url("/keys/config")).await,
        (StatusCode::NOT_FOUND, 0, "no such key\n".into())
    );
    let first = put(&client, &server, "config", "v1").await;
    let seen = get(client.clone(), server.url("/keys/config?index=0&wait=1m")).await;
    assert_eq!(seen, (StatusCode::OK, first, "v1".into()), "at once");

    let waiting = tokio::spawn({
        let (client, url) = (
            client.clone(),
            server.url(&format!("/keys/config?index={first}&wait=1m")),
        );
        get(client, url)
    });
    server.until_parked(1).await;
    put(&client, &server, "other", "x").await;
    assert_eq!(server.service.purgatory().delayed(), 1, "another key's PUT");
    let second = put(&client, &server, "config", "v2").await;
    let answer = bounded("the parked answer", waiting)
        .await
        .expect("the GET");
    assert_eq!(answer, (StatusCode::OK, second, "v2".into()));
    server.until_parked(0).await;
    assert_eq!(server.service.purgatory().metrics().satisfied, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_its_wait_a_get_answers_with_the_current_value_and_index() {
    let server = Server::start().await;
    let client = reqwest::Client::new();
    let index = put(&client, &server, "config", "v1").await;
    let present = tokio::spawn({
        let (client, url) = (
            client.clone(),
            server.url(&format!("/keys/config?index={index}&wait=30s")),
        );
        get(client, url)
    });
    let missing = tokio::spawn({
        let (client, url) = (client.clone(), server.url("/keys/nothing?index=0&wait=30s"));
        get(client, url)
    });
    server.until_parked(2).await;
    server.clock.advance(Duration::from_secs(29));
    tokio::task::yield_now().await;
    assert!(
        !present.is_finished() && !missing.is_finished(),
        "answered before the wait"
    );
    server.clock.advance(Duration::from_secs(1));
    let present = bounded("the expired GET", present).await.expect("the GET");
    assert_eq!(
        present,
        (StatusCode::OK, index, "v1".into()),
        "unchanged, as Consul"
    );
    let missing = bounded("the expired GET", missing).await.expect("the GET");
    assert_eq!(missing, (StatusCode::NOT_FOUND, 0, "no such key\n".into()));
    assert_eq!(server.service.purgatory().metrics().expired, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_put_answers_thousands_of_gets_parked_on_its_key() {
    let server = Server::start().await;
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(CROWD)
        .build()
        .expect("a client");
    let url = server.url("/keys/crowded?index=0&wait=5m");
    let gets: Vec<_> = (0..CROWD)
        .map(|_| tokio::spawn(get(client.clone(), url.clone())))
        .collect();
    server.until_parked(CROWD).await;
    assert_eq!(server.service.purgatory().keys(), 1);
    let index = put(&client, &server, "crowded", "news").await;
    for waiting in gets {
        let answer = bounded("a parked answer", waiting).await.expect("the GET");
        assert_eq!(answer, (StatusCode::OK, index, "news".into()));
    }
    server.until_parked(0).await;
    assert_eq!(
        server.service.purgatory().watched(),
        0,
        "the PUT emptied the watch list"
    );
    assert_eq!(server.service.purgatory().metrics().satisfied, CROWD as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_disconnects_withdraws_its_get_at_once() {
    let server = Server::start().await;
    let purgatory = server.service.purgatory();
    let client = reqwest::Client::new();
    let url = server.url("/keys/quiet?index=0&wait=5m");
    let staying: Vec<_> = (0..STAYING)
        .map(|_| tokio::spawn(get(client.clone(), url.clone())))
        .collect();
    server.until_parked(STAYING).await;
    let before = (purgatory.watched(), purgatory.delayed());
    assert_eq!(before, (STAYING, STAYING));
    // A client (and so a connection) each, all parked on the same key.
    let leaving: Vec<_> = (0..LEAVING)
        .map(|_| {
            let (client, url) = (reqwest::Client::new(), url.clone());
            tokio::spawn(async move { client.get(url).send().await })
        })
        .collect();
    server.until_parked(STAYING + LEAVING).await;
    assert_eq!(purgatory.watched(), STAYING + LEAVING);
    // Aborting the tasks drops the clients' requests and connections.
    for task in &leaving {
        task.abort();
    }
    // They leave the timer at once, and their key's watch list by a sweep
    // due `SWEEP_AFTER` later (scheduled before the first withdrawal):
    // both gauges come back, with no PUT and no purge.
    until("the withdrawn GETs gone from the timer", || {
        purgatory.delayed() == STAYING
    })
    .await;
    server.clock.advance(SWEEP_AFTER);
    until("the withdrawn GETs gone from the watch list", || {
        (purgatory.watched(), purgatory.delayed()) == before
    })
    .await;
    let metrics = purgatory.metrics();
    assert_eq!((metrics.cancelled, metrics.expired), (LEAVING as u64, 0));
    assert_eq!(metrics.purged, 0, "swept, not purged");
    // The staying GETs still wait, and the next PUT answers them.
    let index = put(&client, &server, "quiet", "v").await;
    for answer in staying {
        let answer = bounded("a staying GET", answer).await.expect("the GET");
        assert_eq!(answer, (StatusCode::OK, index, "v".into()));
    }
    server.until_parked(0).await;
    assert_eq!(purgatory.watched(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_answered_400_with_a_sentence() {
    let server = Server::start().await;
    let client = reqwest::Client::new();
    for (query, says) in [
        ("wait=-1", "wait must be a duration such as 30s"),
        ("wait=10y", "wait must be a duration such as 30s"),
        ("index=1&wait=11m", "wait is at most 600s"),
        ("index=abc", "index must be a whole number"),
        ("index=-3", "index must be a whole number"),
    ] {
        let (status, _, body) = get(client.clone(), server.url(&format!("/keys/k?{query}"))).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {body}");
        assert!(body.starts_with(says), "{query}: {body}");
    }
    let long = "k".repeat(MAX_KEY_BYTES + 1);
    let (status, _, body) = get(client.clone(), server.url(&format!("/keys/{long}"))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        body,
        format!("the key is {} bytes; at most {MAX_KEY_BYTES}\n", long.len())
    );
    let request = client.put(server.url(&format!("/keys/{long}"))).body("v");
    let (status, _, _) = read(bounded("PUT", request.send()).await.expect("PUT")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    // A 1 MB key: HTTP clients refuse to send a URI over 64 KiB, so it goes
    // raw. It is past what hyper reads of a request head (about 400 KB):
    // hyper answers 431 before any handler runs, and the service lives on.
    assert_eq!(
        raw_status_line(&server, &"k".repeat(1 << 20)).await,
        "HTTP/1.1 431 Request Header Fields Too Large"
    );
    let big_value = "v".repeat(MAX_VALUE_BYTES + 1);
    let request = client.put(server.url("/keys/k")).body(big_value);
    let (status, _, _) = read(bounded("PUT", request.send()).await.expect("PUT")).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);

    assert_eq!(server.service.store().index("k"), 0, "nothing was written");
    assert_eq!(put(&client, &server, "k", "fine").await, 1);
    server.until_parked(0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timer_shut_down_answers_parked_gets_503() {
    let server = Server::start().await;
    let client = reqwest::Client::new();
    let waiting = tokio::spawn(get(client.clone(), server.url("/keys/k?index=0&wait=1m")));
    server.until_parked(1).await;
    server.timer.shutdown_async().await;
    let (status, _, body) = bounded("the parked answer", waiting)
        .await
        .expect("the GET");
    assert_eq!(
        (status, body.as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n")
    );
    let (status, _, _) = get(client, server.url("/keys/k?index=0&wait=1m")).await;
    assert_eq!(
        status,
        StatusCode::SERVICE_UNAVAILABLE,
        "refused once shut down"
    );
}

/// The status line of the answer to `GET /keys/{key}`, sent on a plain
/// socket.
async fn raw_status_line(server: &Server, key: &str) -> String {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let mut stream = bounded("a connection", tokio::net::TcpStream::connect(server.addr))
        .await
        .expect("connect");
    let request = format!("GET /keys/{key} HTTP/1.1\r\nhost: test\r\n\r\n");
    // hyper may answer and close before it read everything: a failed write
    // is expected then.
    let _ = bounded("the request written", stream.write_all(request.as_bytes())).await;
    let mut line = String::new();
    let mut reader = BufReader::new(stream);
    bounded("a status line", reader.read_line(&mut line))
        .await
        .expect("an answer");
    line.trim_end().to_string()
}
