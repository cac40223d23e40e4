//! An HTTP long-poll service on a [`Purgatory`]: Consul's blocking queries.
//!
//! * `PUT /keys/{key}` with the value as its body: sets the key, answers 200
//!   with the write's index in the `X-Index` header (and the body), and
//!   completes every GET parked on the key.
//! * `GET /keys/{key}`: the key's value at once (200, or 404 if it was never
//!   written), with its index in `X-Index` (0 for a missing key).
//! * `GET /keys/{key}?index=N&wait=30s`: a blocking query. If the key's index
//!   is past `N` the answer is immediate; otherwise the request is parked on
//!   the key until a PUT completes it (200 with the new value and index) or
//!   `wait` passes. **On timeout it answers as Consul does: the current
//!   value, with the index unchanged** (200, or 404 if the key still does not
//!   exist), so a client's loop is always "ask with the last index I saw".
//!   `wait` defaults to [`DEFAULT_WAIT`] and is at most [`MAX_WAIT`].
//! * Bad input is answered 400 with a sentence: a bad `index` or `wait`, a
//!   `wait` past the cap, a key over [`MAX_KEY_BYTES`]. A value over
//!   [`MAX_VALUE_BYTES`] is answered 413, and a PUT the store has no room
//!   for ([`StoreLimits`]) 507 with a sentence.
//!
//! A parked GET is a [`DelayedRequest`] in the purgatory; its handler's
//! future, a [`Fetching`], holds it through
//! [`Parked::cancel_on_drop`](purgatorio::Parked::cancel_on_drop), so when
//! the client goes away (hyper drops the handler's future when it reads the
//! end of the connection) the request is withdrawn at once: its timer entry
//! is gone ([`Purgatory::delayed`] counts one fewer) and its answer is never
//! made. Its entry in the key's watch list, which the purgatory would keep
//! until the key's next check or a purge, is swept within [`SWEEP_AFTER`]
//! (by a check of the key, run on the timer; withdrawals meanwhile share
//! it: see `sweep.rs`), so [`Purgatory::watched`] counts one fewer then. The entry of a GET whose
//! wait ended stays until the key's next PUT or a purge (once more than
//! [`DEFAULT_PURGE_INTERVAL`](purgatorio::DEFAULT_PURGE_INTERVAL) such
//! entries are estimated), as in Kafka's purgatory. One PUT completes every
//! request parked on its key, with one lookup of the key.

mod fetching;
mod query;
mod store;
mod sweep;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, RawQuery, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use purgatorio::{BuildError, Completion, DelayedRequest, Purgatory, Timer};

pub use fetching::Fetching;
pub use query::{BadRequest, Query, DEFAULT_WAIT, MAX_KEY_BYTES, MAX_WAIT};
pub use store::{Entry, Store, StoreFull, StoreLimits};
pub use sweep::SWEEP_AFTER;

use sweep::Sweeper;

/// The largest value a PUT may carry (512 KiB, Consul's limit); a larger
/// body is answered 413.
pub const MAX_VALUE_BYTES: usize = 512 * 1024;

/// The response header that carries a key's index (Consul's
/// `X-Consul-Index`).
pub const INDEX_HEADER: &str = "x-index";

/// The long-poll service: the [`Store`] and the purgatory where GETs wait.
/// Cloning is cheap and shares both.
///
/// # Examples
///
/// ```no_run
/// use purgatorio_web::long_poll::LongPoll;
///
/// #[tokio::main]
/// async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
///     let service = LongPoll::new(purgatorio_web::shared_timer())?;
///     let listener = tokio::net::TcpListener::bind("127.0.0.1:8500").await?;
///     axum::serve(listener, service.router()).await?;
///     Ok(())
/// }
/// ```
#[derive(Clone, Debug)]
pub struct LongPoll {
    /// What the clones share (one reference count: a parked GET holds it).
    shared: Arc<Shared>,
}

/// What the clones of a [`LongPoll`] share.
#[derive(Debug)]
struct Shared {
    /// The keys.
    store: Arc<Store>,
    /// The parked GETs, watched by key.
    fetches: Purgatory<Arc<str>, Fetch>,
    /// Takes withdrawn GETs out of the watch lists.
    sweeper: Sweeper,
}

impl LongPoll {
    /// A service with an empty store whose parked requests are timed by
    /// `timer` (shared: the service does not shut it down).
    ///
    /// # Errors
    ///
    /// A [`BuildError`] if the purgatory cannot be built.
    ///
    /// # Examples
    ///
    /// ```
    /// use purgatorio_web::long_poll::LongPoll;
    ///
    /// let service = LongPoll::new(purgatorio_web::shared_timer())?;
    /// assert_eq!(service.purgatory().delayed(), 0);
    /// # Ok::<(), purgatorio::BuildError>(())
    /// ```
    pub fn new(timer: &Timer) -> Result<Self, BuildError> {
        Self::with_limits(timer, StoreLimits::default())
    }

    /// [`new`](Self::new), with a store that holds at most `limits`: a PUT
    /// past them is answered 507 ([`StoreFull`]).
    ///
    /// # Errors
    ///
    /// A [`BuildError`] if the purgatory cannot be built.
    ///
    /// # Examples
    ///
    /// ```
    /// use purgatorio_web::long_poll::{LongPoll, StoreLimits};
    ///
    /// let limits = StoreLimits { max_keys: 1_000, max_bytes: 16 << 20 };
    /// let service = LongPoll::with_limits(purgatorio_web::shared_timer(), limits)?;
    /// assert_eq!(service.store().limits(), limits);
    /// # Ok::<(), purgatorio::BuildError>(())
    /// ```
    pub fn with_limits(timer: &Timer, limits: StoreLimits) -> Result<Self, BuildError> {
        let fetches = Purgatory::builder()
            .name("long-poll")
            .shared_timer(timer)
            .build()?;
        Ok(LongPoll {
            shared: Arc::new(Shared {
                store: Arc::new(Store::with_limits(limits)),
                fetches,
                sweeper: Sweeper::new(timer),
            }),
        })
    }

    /// The routes `GET /keys/{key}` and `PUT /keys/{key}` on this service.
    ///
    /// # Examples
    ///
    /// ```
    /// let service = purgatorio_web::long_poll::LongPoll::new(purgatorio_web::shared_timer())?;
    /// let app: axum::Router = service.router();
    /// # drop(app);
    /// # Ok::<(), purgatorio::BuildError>(())
    /// ```
    pub fn router(&self) -> Router {
        Router::new()
            .route("/keys/{key}", get(get_key).put(put_key))
            .layer(DefaultBodyLimit::max(MAX_VALUE_BYTES))
            .with_state(self.clone())
    }

    /// The keys.
    ///
    /// # Examples
    ///
    /// ```
    /// let service = purgatorio_web::long_poll::LongPoll::new(purgatorio_web::shared_timer())?;
    /// service.put("k", "v".into())?;
    /// assert_eq!(service.store().index("k"), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn store(&self) -> &Store {
        &self.shared.store
    }

    /// The purgatory where GETs wait: its [`watched`](Purgatory::watched)
    /// and [`delayed`](Purgatory::delayed) gauges count them, its
    /// [`metrics`](Purgatory::metrics) how they ended.
    ///
    /// # Examples
    ///
    /// ```
    /// let service = purgatorio_web::long_poll::LongPoll::new(purgatorio_web::shared_timer())?;
    /// assert_eq!(service.purgatory().watched(), 0);
    /// # Ok::<(), purgatorio::BuildError>(())
    /// ```
    pub fn purgatory(&self) -> &Purgatory<Arc<str>, Fetch> {
        &self.shared.fetches
    }

    /// Sets `key` to `value` and completes the GETs parked on it, as a PUT
    /// does; returns the write's index.
    ///
    /// # Errors
    ///
    /// [`StoreFull`] if the store holds its limits; nothing changed.
    ///
    /// # Examples
    ///
    /// ```
    /// let service = purgatorio_web::long_poll::LongPoll::new(purgatorio_web::shared_timer())?;
    /// assert_eq!(service.put("k", "v1".into())?, 1);
    /// assert_eq!(service.put("k", "v2".into())?, 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn put(&self, key: &str, value: Bytes) -> Result<u64, StoreFull> {
        let index = self.store().put(key, value)?;
        // After the store's lock is released: `try_complete` takes it.
        // Shut down: the parked GETs were already answered.
        let _ = self.purgatory().check_and_complete(key);
        Ok(index)
    }

    /// The answer to a GET of `key` with `query`: at once, or once a write
    /// past `query.index` or the wait comes. Dropped before it resolves, the
    /// future withdraws the parked request.
    ///
    /// # Examples
    ///
    /// ```
    /// use purgatorio_web::long_poll::{LongPoll, Query};
    ///
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let service = LongPoll::new(purgatorio_web::shared_timer())?;
    /// let answer = service.fetch("k", Query::parse(None)?).await;
    /// assert_eq!(answer.status(), axum::http::StatusCode::NOT_FOUND);
    /// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    /// ```
    pub fn fetch(&self, key: &str, query: Query) -> Fetching {
        let store = self.store();
        let Some(seen) = query.index else {
            return Fetching::now(store.get(key));
        };
        if let Some(newer) = store.newer_than(key, seen) {
            return Fetching::now(Some(newer));
        }
        // One copy of the key for the store, the request and its watch.
        let key = store.shared_key(key);
        let fetch = Fetch::new(&self.shared.store, &key, seen, query.wait);
        match self.purgatory().park(fetch, [Arc::clone(&key)]) {
            Ok(parked) => Fetching::waiting(self.clone(), key, parked.cancel_on_drop()),
            Err(_) => Fetching::shutting_down(),
        }
    }

    /// Has the GETs withdrawn from `key` taken out of its watch list
    /// within [`SWEEP_AFTER`] (see [`Sweeper`]).
    fn sweep_soon(&self, key: Arc<str>) {
        self.shared.sweeper.sweep_soon(key, self);
    }

    /// Checks every key with a withdrawn GET: a check drops the key's done
    /// entries (on the timer, from [`Sweeper::sweep_soon`]).
    fn sweep_due(&self) {
        for key in self.shared.sweeper.take_due() {
            // Shut down: nothing is left to sweep.
            let _ = self.purgatory().check_and_complete(&*key);
        }
    }
}

/// A parked GET: done once its key's index is past the one the client saw.
/// Made by [`LongPoll::fetch`]; public as the operation type of
/// [`LongPoll::purgatory`].
///
/// # Examples
///
/// ```
/// let service = purgatorio_web::long_poll::LongPoll::new(purgatorio_web::shared_timer())?;
/// let parked: &purgatorio::Purgatory<_, purgatorio_web::long_poll::Fetch> = service.purgatory();
/// assert_eq!(parked.keys(), 0);
/// # Ok::<(), purgatorio::BuildError>(())
/// ```
#[derive(Debug)]
pub struct Fetch {
    /// Where the key lives.
    store: Arc<Store>,
    /// The key, shared with the purgatory's watch list.
    key: Arc<str>,
    /// The index the client saw.
    seen: u64,
    /// How long it waits, in milliseconds (a `u32`, not a `Duration`: 8
    /// bytes less in every parked GET; saturated at 49 days).
    wait_ms: u32,
}

impl Fetch {
    /// A GET of `key` in `store` past index `seen`, for at most `wait`.
    fn new(store: &Arc<Store>, key: &Arc<str>, seen: u64, wait: Duration) -> Self {
        Fetch {
            store: Arc::clone(store),
            key: Arc::clone(key),
            seen,
            wait_ms: u32::try_from(wait.as_millis()).unwrap_or(u32::MAX),
        }
    }
}

impl DelayedRequest for Fetch {
    /// How it ended; the handler then reads the key's entry.
    type Output = Completion;

    fn delay(&self) -> Duration {
        Duration::from_millis(u64::from(self.wait_ms))
    }

    fn try_complete(&mut self) -> bool {
        self.store.index(&self.key) > self.seen
    }

    fn answer(&mut self, completion: Completion) -> Completion {
        completion
    }
}

/// The answer to a GET: 200 with the entry's value, or 404 for a key never
/// written; the index in [`INDEX_HEADER`] either way (0 for a missing key).
///
/// # Examples
///
/// ```
/// use axum::http::StatusCode;
/// use purgatorio_web::long_poll::{entry_response, Entry, INDEX_HEADER};
///
/// let found = entry_response(Some(Entry { value: "v".into(), index: 7 }));
/// assert_eq!(found.status(), StatusCode::OK);
/// assert_eq!(found.headers()[INDEX_HEADER], "7");
/// assert_eq!(entry_response(None).status(), StatusCode::NOT_FOUND);
/// ```
pub fn entry_response(entry: Option<Entry>) -> Response {
    let (index, response) = match entry {
        Some(entry) => (entry.index, entry.value.into_response()),
        None => (0, (StatusCode::NOT_FOUND, "no such key\n").into_response()),
    };
    with_index(response, index)
}

/// The answer to a PUT: 200 with the write's index, in the body and in
/// [`INDEX_HEADER`].
///
/// # Examples
///
/// ```
/// let written = purgatorio_web::long_poll::written_response(3);
/// assert_eq!(written.headers()["x-index"], "3");
/// ```
pub fn written_response(index: u64) -> Response {
    with_index(format!("{index}\n").into_response(), index)
}

/// `response` with `index` in [`INDEX_HEADER`].
fn with_index(mut response: Response, index: u64) -> Response {
    response
        .headers_mut()
        .insert(INDEX_HEADER, HeaderValue::from(index));
    response
}

/// `GET /keys/{key}`. Not an `async fn`, whose future would hold its
/// arguments for as long as the client waits: they are used, and freed,
/// before the request parks.
fn get_key(
    State(service): State<LongPoll>,
    Path(key): Path<String>,
    RawQuery(query): RawQuery,
) -> Fetching {
    match Query::of_get(&key, query.as_deref()) {
        Ok(query) => service.fetch(&key, query),
        Err(bad) => Fetching::refused(bad),
    }
}

/// `PUT /keys/{key}`.
async fn put_key(
    State(service): State<LongPoll>,
    Path(key): Path<String>,
    value: Bytes,
) -> Response {
    match Query::check_key(&key) {
        Ok(()) => match service.put(&key, value) {
            Ok(index) => written_response(index),
            Err(full) => full.into_response(),
        },
        Err(bad) => bad.into_response(),
    }
}
