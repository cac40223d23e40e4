//! The long-poll service the tokio way, to measure beside ours: each GET
//! subscribes to its key's `tokio::sync::watch` channel and waits for an
//! index past its own under `tokio::time::timeout`; a PUT sends the new
//! index. Same routes, parameters and answers as `long_poll::LongPoll`.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, RawQuery, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use parking_lot::Mutex;
use purgatorio_web::long_poll::{entry_response, written_response, Query, Store, MAX_VALUE_BYTES};
use tokio::sync::watch;

/// The keys, and a channel per key that GETs have waited on.
#[derive(Clone, Default)]
pub struct WatchLongPoll {
    /// The keys.
    store: Arc<Store>,
    /// Each waited-on key's channel of its latest index.
    channels: Arc<Mutex<HashMap<Arc<str>, watch::Sender<u64>>>>,
}

impl WatchLongPoll {
    /// The same routes as `LongPoll::router`.
    pub fn router(&self) -> Router {
        Router::new()
            .route("/keys/{key}", get(get_key).put(put_key))
            .layer(DefaultBodyLimit::max(MAX_VALUE_BYTES))
            .with_state(self.clone())
    }

    /// The same routes, with a GET handler that frees the request's strings
    /// before it waits, as `long_poll`'s does.
    pub fn lean_router(&self) -> Router {
        Router::new()
            .route("/keys/{key}", get(get_key_lean).put(put_key))
            .layer(DefaultBodyLimit::max(MAX_VALUE_BYTES))
            .with_state(self.clone())
    }

    /// GETs waiting: the channels' receivers.
    pub fn waiting(&self) -> usize {
        let channels = self.channels.lock();
        channels.values().map(watch::Sender::receiver_count).sum()
    }

    /// A receiver of `key`'s channel, made with the key's index if new.
    fn subscribe(&self, key: &str) -> watch::Receiver<u64> {
        let mut channels = self.channels.lock();
        if let Some(sender) = channels.get(key) {
            return sender.subscribe();
        }
        let (sender, receiver) = watch::channel(self.store.index(key));
        channels.insert(key.into(), sender);
        receiver
    }
}

/// `GET /keys/{key}`.
async fn get_key(
    State(service): State<WatchLongPoll>,
    Path(key): Path<String>,
    RawQuery(query): RawQuery,
) -> Response {
    let query = match Query::of_get(&key, query.as_deref()) {
        Ok(query) => query,
        Err(bad) => return bad.into_response(),
    };
    if let Some(seen) = query.index {
        let mut changes = service.subscribe(&key);
        let _ = tokio::time::timeout(query.wait, changes.wait_for(|&index| index > seen)).await;
    }
    entry_response(service.store.get(&key))
}

/// `GET /keys/{key}`, holding only the service and the shared key while it
/// waits.
fn get_key_lean(
    State(service): State<WatchLongPoll>,
    Path(key): Path<String>,
    RawQuery(query): RawQuery,
) -> impl Future<Output = Response> {
    let query = Query::of_get(&key, query.as_deref());
    let key = service.store.shared_key(&key);
    async move {
        let query = match query {
            Ok(query) => query,
            Err(bad) => return bad.into_response(),
        };
        if let Some(seen) = query.index {
            let mut changes = service.subscribe(&key);
            let _ = tokio::time::timeout(query.wait, changes.wait_for(|&index| index > seen)).await;
        }
        entry_response(service.store.get(&key))
    }
}

/// `PUT /keys/{key}`.
async fn put_key(
    State(service): State<WatchLongPoll>,
    Path(key): Path<String>,
    value: Bytes,
) -> Response {
    if let Err(bad) = Query::check_key(&key) {
        return bad.into_response();
    }
    let index = match service.store.put(&key, value) {
        Ok(index) => index,
        Err(full) => return full.into_response(),
    };
    if let Some(sender) = service.channels.lock().get(key.as_str()) {
        sender.send_replace(index);
    }
    written_response(index)
}
