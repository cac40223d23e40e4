//! [`Store`]: the keys, each with its value and the index of its last write.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use parking_lot::Mutex;

/// A key's value and the index of the write that set it.
///
/// # Examples
///
/// ```
/// use purgatorio_web::long_poll::Store;
///
/// let store = Store::default();
/// store.put("config", "v1".into())?;
/// let entry = store.get("config").unwrap();
/// assert_eq!((entry.value.as_ref(), entry.index), (&b"v1"[..], 1));
/// # Ok::<(), purgatorio_web::long_poll::StoreFull>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The value last written.
    pub value: Bytes,
    /// The index of that write: the store's count of writes when it was made.
    pub index: u64,
}

/// The keys of the long-poll service: values in memory, each with the index
/// of its last write (as Consul's `ModifyIndex`). The index counts the
/// store's writes, so it only grows, and a client that saw index `n` of a
/// key waits for a write past `n`.
///
/// The store is bounded ([`StoreLimits`]): a write that would pass its count
/// of keys or its bytes (keys and values) is refused with [`StoreFull`].
///
/// # Examples
///
/// ```
/// use purgatorio_web::long_poll::Store;
///
/// let store = Store::default();
/// assert_eq!(store.put("a", "1".into())?, 1);
/// assert_eq!(store.put("b", "2".into())?, 2);
/// assert_eq!(store.index("a"), 1);
/// assert_eq!(store.index("missing"), 0);
/// assert!(store.newer_than("b", 1).is_some());
/// assert!(store.newer_than("a", 1).is_none());
/// # Ok::<(), purgatorio_web::long_poll::StoreFull>(())
/// ```
#[derive(Debug, Default)]
pub struct Store {
    /// The entries, and the count of writes so far.
    keys: Mutex<Keys>,
    /// What it may hold.
    limits: StoreLimits,
}

/// What the store's lock guards.
#[derive(Debug, Default)]
struct Keys {
    /// Each key's entry.
    entries: HashMap<Arc<str>, Entry>,
    /// The index of the last write.
    last_index: u64,
    /// The bytes of every key and value held.
    bytes: usize,
}

/// How much a [`Store`] may hold: a server's keys come from its clients,
/// so their count and size are bounded.
///
/// # Examples
///
/// ```
/// use purgatorio_web::long_poll::{Store, StoreFull, StoreLimits};
///
/// let store = Store::with_limits(StoreLimits { max_keys: 1, max_bytes: 1 << 20 });
/// store.put("a", "1".into())?;
/// store.put("a", "2".into())?; // the same key: no new one
/// assert_eq!(store.put("b", "1".into()), Err(StoreFull::Keys(1)));
/// # Ok::<(), StoreFull>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreLimits {
    /// The most keys (default 100,000).
    pub max_keys: usize,
    /// The most bytes of keys and values together (default 256 MiB).
    pub max_bytes: usize,
}

impl Default for StoreLimits {
    fn default() -> Self {
        StoreLimits {
            max_keys: 100_000,
            max_bytes: 256 << 20,
        }
    }
}

/// A write the [`Store`] refused: it holds its limit. A PUT is answered 507
/// (Insufficient Storage) with this sentence.
///
/// # Examples
///
/// ```
/// use purgatorio_web::long_poll::StoreFull;
///
/// assert_eq!(StoreFull::Keys(10).to_string(), "the store holds its limit of 10 keys");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreFull {
    /// It holds this many keys, its limit.
    Keys(usize),
    /// The write would pass this many bytes, its limit.
    Bytes(usize),
}

impl fmt::Display for StoreFull {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreFull::Keys(max) => write!(f, "the store holds its limit of {max} keys"),
            StoreFull::Bytes(max) => {
                write!(f, "the write would pass the store's limit of {max} bytes")
            }
        }
    }
}

impl std::error::Error for StoreFull {}

impl IntoResponse for StoreFull {
    fn into_response(self) -> Response {
        (StatusCode::INSUFFICIENT_STORAGE, format!("{self}\n")).into_response()
    }
}

impl Store {
    /// An empty store that holds at most `limits`.
    ///
    /// # Examples
    ///
    /// ```
    /// use purgatorio_web::long_poll::{Store, StoreLimits};
    /// let store = Store::with_limits(StoreLimits { max_keys: 10, max_bytes: 1 << 10 });
    /// assert_eq!(store.limits().max_keys, 10);
    /// ```
    pub fn with_limits(limits: StoreLimits) -> Self {
        Store {
            keys: Mutex::default(),
            limits,
        }
    }

    /// What it may hold.
    ///
    /// # Examples
    ///
    /// ```
    /// use purgatorio_web::long_poll::{Store, StoreLimits};
    /// assert_eq!(Store::default().limits(), StoreLimits::default());
    /// ```
    pub fn limits(&self) -> StoreLimits {
        self.limits
    }

    /// Sets `key` to `value`; returns the write's index.
    ///
    /// # Errors
    ///
    /// [`StoreFull`] if a new key would pass the count of keys, or the
    /// value the bytes, of [`limits`](Self::limits); the store is then
    /// unchanged. The store keeps a copy of `value`: a slice of a larger
    /// buffer does not keep the buffer.
    ///
    /// # Examples
    ///
    /// ```
    /// let store = purgatorio_web::long_poll::Store::default();
    /// assert_eq!(store.put("k", "v".into()), Ok(1));
    /// ```
    pub fn put(&self, key: &str, value: Bytes) -> Result<u64, StoreFull> {
        // A body's bytes may be a slice of a connection's read buffer: the
        // store keeps a copy of its own, so it holds what it counts.
        let value = Bytes::copy_from_slice(&value);
        // Declared after `value`: a refusal releases the lock before the
        // value is freed.
        let mut keys = self.keys.lock();
        // The bytes held without this key's present entry.
        let others = match keys.entries.get(key) {
            Some(old) => keys.bytes - key.len() - old.value.len(),
            None if keys.entries.len() >= self.limits.max_keys => {
                return Err(StoreFull::Keys(self.limits.max_keys));
            }
            None => keys.bytes,
        };
        let bytes = others.saturating_add(key.len() + value.len());
        if bytes > self.limits.max_bytes {
            return Err(StoreFull::Bytes(self.limits.max_bytes));
        }
        keys.bytes = bytes;
        keys.last_index += 1;
        let index = keys.last_index;
        let entry = Entry { value, index };
        let old = match keys.entries.get_mut(key) {
            Some(old) => Some(std::mem::replace(old, entry)),
            None => keys.entries.insert(key.into(), entry),
        };
        drop(keys);
        // The old value is freed after the lock.
        drop(old);
        Ok(index)
    }

    /// The bytes of every key and value held.
    ///
    /// # Examples
    ///
    /// ```
    /// let store = purgatorio_web::long_poll::Store::default();
    /// store.put("k", "value".into())?;
    /// assert_eq!(store.bytes(), 6);
    /// # Ok::<(), purgatorio_web::long_poll::StoreFull>(())
    /// ```
    pub fn bytes(&self) -> usize {
        self.keys.lock().bytes
    }

    /// The entry of `key`, if it was ever written.
    ///
    /// # Examples
    ///
    /// ```
    /// let store = purgatorio_web::long_poll::Store::default();
    /// assert!(store.get("k").is_none());
    /// ```
    pub fn get(&self, key: &str) -> Option<Entry> {
        self.keys.lock().entries.get(key).cloned()
    }

    /// The index of the last write to `key`; 0 if it was never written.
    ///
    /// # Examples
    ///
    /// ```
    /// let store = purgatorio_web::long_poll::Store::default();
    /// store.put("k", "v".into())?;
    /// assert_eq!(store.index("k"), 1);
    /// # Ok::<(), purgatorio_web::long_poll::StoreFull>(())
    /// ```
    pub fn index(&self, key: &str) -> u64 {
        self.keys.lock().entries.get(key).map_or(0, |e| e.index)
    }

    /// `key` as the store holds it, shared (no copy of a key already
    /// written); a new one for a key never written.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// let store = purgatorio_web::long_poll::Store::default();
    /// store.put("k", "v".into())?;
    /// assert!(Arc::ptr_eq(&store.shared_key("k"), &store.shared_key("k")));
    /// assert_eq!(&*store.shared_key("new"), "new");
    /// # Ok::<(), purgatorio_web::long_poll::StoreFull>(())
    /// ```
    pub fn shared_key(&self, key: &str) -> Arc<str> {
        let keys = self.keys.lock();
        match keys.entries.get_key_value(key) {
            Some((shared, _)) => Arc::clone(shared),
            None => key.into(),
        }
    }

    /// The entry of `key` if its last write is past `index`.
    ///
    /// # Examples
    ///
    /// ```
    /// let store = purgatorio_web::long_poll::Store::default();
    /// store.put("k", "v".into())?;
    /// assert!(store.newer_than("k", 0).is_some());
    /// assert!(store.newer_than("k", 1).is_none());
    /// # Ok::<(), purgatorio_web::long_poll::StoreFull>(())
    /// ```
    pub fn newer_than(&self, key: &str, index: u64) -> Option<Entry> {
        self.get(key).filter(|entry| entry.index > index)
    }
}
