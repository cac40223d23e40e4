//! `TimeoutLayer` against tower's own timeout semantics, on a manual clock:
//! an answer in time passes, a late one fails with tower's `Elapsed`, the
//! inner service's errors pass through, readiness is the inner service's,
//! and axum's `HandleErrorLayer` sees the same error as with tower's layer.
//! Time moves only when a test advances the clock.

use std::time::Duration;

use axum::error_handling::HandleErrorLayer;
use axum::http::{Request, StatusCode};
use axum::routing::get;
use axum::Router;
use purgatorio::{Executor, ManualClock, Timer};
use purgatorio_web::{BoxError, Elapsed, TimeoutLayer, TimerShutDown};
use tokio_test::{assert_pending, assert_ready, assert_ready_err, assert_ready_ok, task};
use tower::{ServiceBuilder, ServiceExt};
use tower_test::mock;

/// The timeout every test's layer gives a request.
const TIMEOUT: Duration = Duration::from_millis(100);

/// A timer on a manual clock, driven by the test (`run_due`): no thread
/// wakes anything behind the test's back.
fn manual_timer() -> (ManualClock, Timer) {
    let clock = ManualClock::new();
    let timer = Timer::builder()
        .clock(clock.clone())
        .driver_thread(false)
        .executor(Executor::Inline)
        .build()
        .expect("a timer");
    (clock, timer)
}

/// An error of the inner service's own.
#[derive(Debug)]
struct Refused;

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("refused")
    }
}

impl std::error::Error for Refused {}

/// A request through the layer (on a manual timer) to tower-test's mock,
/// its answer polled once and pending.
struct Waiting {
    clock: ManualClock,
    timer: Timer,
    /// The answer, on a task that tracks its wake-ups.
    response:
        task::Spawn<purgatorio_web::ResponseFuture<mock::future::ResponseFuture<&'static str>>>,
    /// The mock's side of the request, to answer it.
    send: mock::SendResponse<&'static str>,
    /// Keeps the mock alive.
    _handle: mock::Handle<&'static str, &'static str>,
}

impl Waiting {
    async fn new() -> Waiting {
        let (clock, timer) = manual_timer();
        let layer = TimeoutLayer::with_timer(&timer, TIMEOUT);
        let (mut service, mut handle) = mock::spawn_layer::<&str, &str, _>(layer);
        assert_ready_ok!(service.poll_ready());
        let mut response = task::spawn(service.call("ping"));
        let (request, send) = handle.next_request().await.expect("the request");
        assert_eq!(request, "ping");
        assert_pending!(response.poll());
        Waiting {
            clock,
            timer,
            response,
            send,
            _handle: handle,
        }
    }
}

#[tokio::test]
async fn an_answer_in_time_passes_and_leaves_no_timer_entry() {
    let mut w = Waiting::new().await;
    assert_eq!(w.timer.len(), 1, "a pending answer is timed");
    w.clock.advance(TIMEOUT - Duration::from_millis(1));
    w.timer.run_due();
    assert!(!w.response.is_woken(), "woken before the timeout");
    assert_pending!(w.response.poll());
    w.send.send_response("pong");
    assert!(w.response.is_woken(), "the answer wakes the task");
    assert_eq!(assert_ready_ok!(w.response.poll()), "pong");
    assert_eq!(w.timer.len(), 0, "the answer took its timer entry away");
}

#[tokio::test]
async fn a_late_answer_fails_with_towers_elapsed_once_the_timer_wakes_it() {
    let mut w = Waiting::new().await;
    w.clock.advance(TIMEOUT);
    w.timer.run_due();
    assert!(w.response.is_woken(), "the timer wakes the waiting task");
    let err = assert_ready_err!(w.response.poll());
    assert!(err.is::<Elapsed>(), "tower's error type: {err}");
    assert_eq!(err.to_string(), "request timed out");
    // The inner service's answer, after the timeout, goes nowhere.
    w.send.send_response("too late");
    assert_eq!(w.timer.len(), 0);
}

#[tokio::test]
async fn the_inner_services_errors_pass_through() {
    let Waiting {
        mut response, send, ..
    } = Waiting::new().await;
    send.send_error(Refused);
    let err = assert_ready_err!(response.poll());
    assert!(err.is::<Refused>(), "the inner error, boxed: {err}");
    assert!(!err.is::<Elapsed>());
}

#[tokio::test]
async fn readiness_and_its_errors_are_the_inner_services() {
    let (_clock, timer) = manual_timer();
    let layer = TimeoutLayer::with_timer(&timer, TIMEOUT);
    let (mut service, mut handle) = mock::spawn_layer::<&str, &str, _>(layer);
    handle.allow(0);
    assert_pending!(service.poll_ready());
    handle.allow(1);
    assert!(
        service.is_woken(),
        "the inner service's readiness wakes the caller"
    );
    assert_ready_ok!(service.poll_ready());
    let _response = service.call("one");
    assert_pending!(service.poll_ready(), "one call allowed, no more");
    handle.send_error(Refused);
    let err = assert_ready_err!(service.poll_ready());
    assert!(
        err.is::<Refused>(),
        "the inner readiness error, boxed: {err}"
    );
    assert_eq!(timer.len(), 0, "readiness is never timed");
}

#[tokio::test]
async fn a_timer_shut_down_first_is_not_a_timeout() {
    let mut waiting = Waiting::new().await;
    waiting.timer.shutdown();
    assert!(
        waiting.response.is_woken(),
        "the shutdown wakes the waiting task"
    );
    let err = assert_ready_err!(waiting.response.poll());
    assert!(!err.is::<Elapsed>(), "not tower's timeout: {err}");
    assert!(err.is::<TimerShutDown>(), "{err}");
}

/// An axum handler that never answers, under axum's `HandleErrorLayer`:
/// the error handler written for `tower::timeout` maps ours to 408.
#[tokio::test]
async fn axums_handle_error_layer_sees_towers_error() {
    async fn to_status(err: BoxError) -> StatusCode {
        if err.is::<Elapsed>() {
            StatusCode::REQUEST_TIMEOUT
        } else {
            StatusCode::INTERNAL_SERVER_ERROR
        }
    }
    let (clock, timer) = manual_timer();
    let app = Router::new()
        .route("/slow", get(std::future::pending::<&'static str>))
        .route("/fast", get(|| async { "fast" }))
        .layer(
            ServiceBuilder::new()
                .layer(HandleErrorLayer::new(to_status))
                .layer(TimeoutLayer::with_timer(&timer, TIMEOUT)),
        );
    let get = |uri| {
        Request::get(uri)
            .body(axum::body::Body::empty())
            .expect("a request")
    };
    let fast = app.clone().oneshot(get("/fast")).await.expect("infallible");
    assert_eq!(fast.status(), StatusCode::OK);

    let mut slow = task::spawn(app.oneshot(get("/slow")));
    assert_pending!(slow.poll());
    clock.advance(TIMEOUT);
    timer.run_due();
    let slow = assert_ready!(slow.poll()).expect("infallible");
    assert_eq!(slow.status(), StatusCode::REQUEST_TIMEOUT);
}

/// A layer on a `static` timer (as `TimeoutLayer::new`'s) makes a request's
/// sleep at the first poll that finds the answer pending, and times it
/// from there.
#[tokio::test]
async fn on_a_static_timer_the_sleep_is_made_at_the_first_pending_poll() {
    static TIMER: std::sync::OnceLock<(ManualClock, Timer)> = std::sync::OnceLock::new();
    let (clock, timer) = TIMER.get_or_init(manual_timer);
    let layer = TimeoutLayer::with_static_timer(timer, TIMEOUT);
    let (mut service, mut handle) = mock::spawn_layer::<&str, &str, _>(layer);

    assert_ready_ok!(service.poll_ready());
    let mut early = task::spawn(service.call("early"));
    let (_, send) = handle.next_request().await.expect("the request");
    send.send_response("at once");
    assert_eq!(assert_ready_ok!(early.poll()), "at once");
    assert_eq!(
        timer.len(),
        0,
        "an answer ready at once made no timer entry"
    );

    assert_ready_ok!(service.poll_ready());
    let mut late = task::spawn(service.call("late"));
    let (_, _unanswered) = handle.next_request().await.expect("the request");
    clock.advance(TIMEOUT); // before the first poll: not counted
    assert_pending!(late.poll());
    assert_eq!(timer.len(), 1, "the first pending poll registered it");
    clock.advance(TIMEOUT - Duration::from_millis(1));
    timer.run_due();
    assert_pending!(late.poll());
    clock.advance(Duration::from_millis(1));
    timer.run_due();
    assert!(late.is_woken(), "the timer wakes it");
    let err = assert_ready_err!(late.poll());
    assert!(err.is::<Elapsed>(), "{err}");
}
