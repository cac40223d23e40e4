//! [`TimeoutLayer`]: `tower::timeout` on a purgatorio [`Timer`].
//!
//! The same middleware as [`tower::timeout::TimeoutLayer`], down to its
//! error: a request that does not answer in time fails with
//! [`tower::timeout::error::Elapsed`] (re-exported here as [`Elapsed`]),
//! boxed in a [`BoxError`], so error handlers written for tower's layer
//! (axum's `HandleErrorLayer`, as the tests check) keep working unchanged. Readiness is the inner service's; the inner service's errors
//! pass through, boxed.
//!
//! What differs is the clock under it. tower's layer makes a
//! `tokio::time::Sleep` per request, and tokio's timer is one lock per
//! runtime, which every worker making timeouts at once contends on. Ours
//! makes a [`purgatorio::Sleep`] per request: it registers nothing until a
//! poll finds the answer pending (a request answered at its first poll never
//! touches the timer), then goes to the wheel shard of the thread that
//! polled it. The `web/README.md` of the repository has what each costs.
//!
//! One [`Timer`] serves a whole server. [`TimeoutLayer::new`] uses
//! [`shared_timer`], built on first use for the process, and
//! [`TimeoutLayer::with_static_timer`] a timer of yours in a `static`: the
//! layer then holds a `&'static Timer`, so cloning the service (axum clones
//! a route's service for every request) moves no reference count that the
//! runtime's workers would share, and a request whose answer is ready at its
//! first poll costs no clock reading at all: its sleep is made at the first
//! poll that finds the answer pending, and the timeout counts from there
//! (hyper and axum poll a response as soon as they make it).
//! [`TimeoutLayer::with_timer`] takes any timer (one on a
//! [`ManualClock`](purgatorio::ManualClock) in tests): the layer holds a
//! clone, a reference count, and each request's sleep is made when it is
//! called.
//!
//! If the timer shuts down while a request waits, the request fails with
//! [`TimerShutDown`]: a server answers it as unavailable rather than as
//! timed out.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use purgatorio::{Executor, Sleep, Timer};
use tower_layer::Layer;
use tower_service::Service;

pub use tower::timeout::error::Elapsed;
pub use tower::BoxError;

/// The timer of [`TimeoutLayer::new`]: one for the process, built on first
/// use and never shut down.
///
/// Its expirations run on its driver thread ([`Executor::Inline`]): every
/// wait of this crate is an awaited future, whose expiry only wakes a task,
/// so no worker pool is needed. The timer is then one OS thread, named
/// `purgatorio-web-driver`. Give it to your purgatories too
/// (`Purgatory::builder().shared_timer(shared_timer())`).
///
/// # Panics
///
/// If the timer's driver thread cannot be started (the OS refuses a thread).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
///
/// let timer = purgatorio_web::shared_timer();
/// assert!(!timer.is_shut_down());
/// let same = purgatorio_web::shared_timer();
/// let sleep = same.sleep(Duration::ZERO);
/// assert!(sleep.is_elapsed());
/// ```
pub fn shared_timer() -> &'static Timer {
    static SHARED: OnceLock<Timer> = OnceLock::new();
    SHARED.get_or_init(|| {
        Timer::builder()
            .thread_name("purgatorio-web")
            .executor(Executor::Inline)
            .build()
            .expect("start the shared timer's driver thread")
    })
}

/// Applies a timeout to every request of the services it wraps; the
/// purgatorio counterpart of [`tower::timeout::TimeoutLayer`].
///
/// # Examples
///
/// An axum router whose handlers get 30 seconds, with tower's own error
/// handling:
///
/// ```
/// use std::time::Duration;
/// use axum::{error_handling::HandleErrorLayer, http::StatusCode, routing::get, Router};
/// use purgatorio_web::{BoxError, Elapsed, TimeoutLayer};
/// use tower::ServiceBuilder;
///
/// async fn timed_out(err: BoxError) -> StatusCode {
///     if err.is::<Elapsed>() {
///         StatusCode::REQUEST_TIMEOUT
///     } else {
///         StatusCode::SERVICE_UNAVAILABLE
///     }
/// }
///
/// let app: Router = Router::new().route("/", get(|| async { "hello" })).layer(
///     ServiceBuilder::new()
///         .layer(HandleErrorLayer::new(timed_out))
///         .layer(TimeoutLayer::new(Duration::from_secs(30))),
/// );
/// # drop(app);
/// ```
#[derive(Clone, Debug)]
pub struct TimeoutLayer {
    /// The timer whose sleeps time the requests.
    timer: TimerRef,
    /// How long a request may take, from its call to its answer.
    timeout: Duration,
}

impl TimeoutLayer {
    /// A layer that gives every request `timeout`, timed by [`shared_timer`]:
    /// the drop-in for `tower::timeout::TimeoutLayer::new(timeout)`.
    ///
    /// # Panics
    ///
    /// As [`shared_timer`], on its first use.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower::ServiceBuilder;
    ///
    /// let service = ServiceBuilder::new()
    ///     .layer(purgatorio_web::TimeoutLayer::new(Duration::from_secs(5)))
    ///     .service_fn(|name: String| async move { Ok::<_, std::io::Error>(format!("hello {name}")) });
    /// # drop(service);
    /// ```
    pub fn new(timeout: Duration) -> Self {
        Self::with_static_timer(shared_timer(), timeout)
    }

    /// A layer that gives every request `timeout`, timed by a timer of
    /// yours that lives in a `static`: nothing is counted when the service
    /// is cloned, and a request answered at its first poll reads no clock.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::OnceLock;
    /// use std::time::Duration;
    /// use purgatorio::Timer;
    /// use purgatorio_web::TimeoutLayer;
    ///
    /// static TIMER: OnceLock<Timer> = OnceLock::new();
    /// let timer = TIMER.get_or_init(|| Timer::builder().thread_name("api").build().unwrap());
    /// let layer = TimeoutLayer::with_static_timer(timer, Duration::from_secs(5));
    /// assert_eq!(layer.timeout(), Duration::from_secs(5));
    /// ```
    pub fn with_static_timer(timer: &'static Timer, timeout: Duration) -> Self {
        TimeoutLayer {
            timer: TimerRef::Static(timer),
            timeout,
        }
    }

    /// A layer that gives every request `timeout`, timed by `timer` (a
    /// clone of it is kept: a reference count, moved each time the service
    /// is cloned). Each request's sleep is made when it is called.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use purgatorio::Timer;
    /// use purgatorio_web::TimeoutLayer;
    ///
    /// let timer = Timer::builder().thread_name("api-timer").build()?;
    /// let layer = TimeoutLayer::with_timer(&timer, Duration::from_millis(250));
    /// assert_eq!(layer.timeout(), Duration::from_millis(250));
    /// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    /// ```
    pub fn with_timer(timer: &Timer, timeout: Duration) -> Self {
        TimeoutLayer {
            timer: TimerRef::Owned(timer.clone()),
            timeout,
        }
    }

    /// How long each request may take.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let layer = purgatorio_web::TimeoutLayer::new(Duration::from_secs(1));
    /// assert_eq!(layer.timeout(), Duration::from_secs(1));
    /// ```
    pub fn timeout(&self) -> Duration {
        self.timeout
    }
}

impl<S> Layer<S> for TimeoutLayer {
    type Service = Timeout<S>;

    fn layer(&self, inner: S) -> Timeout<S> {
        Timeout {
            inner,
            timer: self.timer.clone(),
            timeout: self.timeout,
        }
    }
}

/// A service whose requests fail with [`Elapsed`] if `inner` takes longer
/// than the timeout to answer; made by [`TimeoutLayer`]. The purgatorio
/// counterpart of [`tower::timeout::Timeout`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use purgatorio_web::{Elapsed, Timeout};
/// use tower::{service_fn, ServiceExt};
///
/// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
/// let slow = service_fn(|()| std::future::pending::<Result<(), std::io::Error>>());
/// let timer = purgatorio_web::shared_timer();
/// let err = Timeout::new(slow, timer, Duration::from_millis(5)).oneshot(()).await.unwrap_err();
/// assert!(err.is::<Elapsed>());
/// # });
/// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
/// ```
#[derive(Clone, Debug)]
pub struct Timeout<S> {
    /// The service whose answers are timed.
    inner: S,
    /// The timer whose sleeps time them.
    timer: TimerRef,
    /// How long a request may take.
    timeout: Duration,
}

impl<S> Timeout<S> {
    /// Wraps `inner`: its requests get `timeout`, timed by `timer`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use purgatorio_web::Timeout;
    ///
    /// let echo = tower::service_fn(|s: String| async move { Ok::<_, std::io::Error>(s) });
    /// let timed = Timeout::new(echo, purgatorio_web::shared_timer(), Duration::from_secs(1));
    /// # drop(timed);
    /// ```
    pub fn new(inner: S, timer: &Timer, timeout: Duration) -> Self {
        TimeoutLayer::with_timer(timer, timeout).layer(inner)
    }

    /// The inner service.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let timed = purgatorio_web::Timeout::new(7, purgatorio_web::shared_timer(), Duration::ZERO);
    /// assert_eq!(*timed.get_ref(), 7);
    /// ```
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let mut timed = purgatorio_web::Timeout::new(7, purgatorio_web::shared_timer(), Duration::ZERO);
    /// *timed.get_mut() += 1;
    /// assert_eq!(timed.into_inner(), 8);
    /// ```
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The inner service, unwrapped.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let timed = purgatorio_web::Timeout::new("inner", purgatorio_web::shared_timer(), Duration::ZERO);
    /// assert_eq!(timed.into_inner(), "inner");
    /// ```
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, Request> Service<Request> for Timeout<S>
where
    S: Service<Request>,
    S::Error: Into<BoxError>,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request) -> ResponseFuture<S::Future> {
        let sleep = match &self.timer {
            TimerRef::Static(timer) => Deadline::Later(timer, self.timeout),
            TimerRef::Owned(timer) => Deadline::Armed(timer.sleep(self.timeout)),
        };
        ResponseFuture {
            response: self.inner.call(request),
            sleep,
        }
    }
}

/// The timer of a layer: a `static` one, or a handle of any.
#[derive(Clone, Debug)]
enum TimerRef {
    /// [`TimeoutLayer::new`], [`TimeoutLayer::with_static_timer`].
    Static(&'static Timer),
    /// [`TimeoutLayer::with_timer`].
    Owned(Timer),
}

/// A response's sleep: made, or to be made at the first poll that finds the
/// answer pending.
#[derive(Debug)]
enum Deadline {
    /// Not made yet: the timer and the timeout.
    Later(&'static Timer, Duration),
    /// Made (registered from its first poll on).
    Armed(Sleep),
    /// The answer came: the sleep was dropped, which took its timer entry
    /// away at once.
    Done,
}

pin_project_lite::pin_project! {
    /// The answer of a [`Timeout`] service: the inner service's, or
    /// [`Elapsed`] once the timeout passed without one.
    ///
    /// The inner future is polled first, so an answer ready at the same
    /// poll as the deadline wins, and one ready at its first poll never
    /// registers with the timer.
    ///
    /// # Panics
    ///
    /// If polled again after it completed, as most futures do.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use purgatorio_web::{ResponseFuture, Timeout};
    /// use tower::Service;
    ///
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let echo = tower::service_fn(|n: u32| async move { Ok::<_, std::io::Error>(n + 1) });
    /// let mut timed = Timeout::new(echo, purgatorio_web::shared_timer(), Duration::from_secs(1));
    /// let answer: ResponseFuture<_> = timed.call(41);
    /// assert_eq!(answer.await?, 42);
    /// # Ok::<(), purgatorio_web::BoxError>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    /// ```
    #[derive(Debug)]
    #[must_use = "a response does nothing unless awaited or polled"]
    pub struct ResponseFuture<F> {
        // The inner service's answer.
        #[pin]
        response: F,
        // What times it.
        sleep: Deadline,
    }
}

impl<F, T, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<T, E>>,
    E: Into<BoxError>,
{
    type Output = Result<T, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(answer) = this.response.poll(cx) {
            *this.sleep = Deadline::Done;
            return Poll::Ready(answer.map_err(Into::into));
        }
        if let Deadline::Later(timer, timeout) = *this.sleep {
            *this.sleep = Deadline::Armed(timer.sleep(timeout));
        }
        let Deadline::Armed(sleep) = this.sleep else {
            panic!("a timeout's response polled after it completed");
        };
        ready!(Pin::new(&mut *sleep).poll(cx));
        // A sleep ends before its deadline only when the timer shut down.
        let err: BoxError = if sleep.is_elapsed() {
            Elapsed::new().into()
        } else {
            TimerShutDown.into()
        };
        *this.sleep = Deadline::Done;
        Poll::Ready(Err(err))
    }
}

/// The error of a request still waiting when the layer's timer shut down:
/// not a timeout, so not [`Elapsed`]; a server answers it as unavailable.
///
/// # Examples
///
/// ```
/// use purgatorio_web::TimerShutDown;
/// assert_eq!(TimerShutDown.to_string(), "the timer shut down before the answer came");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimerShutDown;

impl fmt::Display for TimerShutDown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the timer shut down before the answer came")
    }
}

impl std::error::Error for TimerShutDown {}
