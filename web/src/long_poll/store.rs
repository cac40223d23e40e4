//! [`Store`]: the keys, each with its value and the index of its last write.

use std::collections::HashMap;
use std::sync::Arc;

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
/// store.put("config", "v1".into());
/// let entry = store.get("config").unwrap();
/// assert_eq!((entry.value.as_ref(), entry.index), (&b"v1"[..], 1));
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
/// # Examples
///
/// ```
/// use purgatorio_web::long_poll::Store;
///
/// let store = Store::default();
/// assert_eq!(store.put("a", "1".into()), 1);
/// assert_eq!(store.put("b", "2".into()), 2);
/// assert_eq!(store.index("a"), 1);
/// assert_eq!(store.index("missing"), 0);
/// assert!(store.newer_than("b", 1).is_some());
/// assert!(store.newer_than("a", 1).is_none());
/// ```
#[derive(Debug, Default)]
pub struct Store {
    /// The entries, and the count of writes so far.
    keys: Mutex<Keys>,
}

/// What the store's lock guards.
#[derive(Debug, Default)]
struct Keys {
    /// Each key's entry.
    entries: HashMap<Arc<str>, Entry>,
    /// The index of the last write.
    last_index: u64,
}

impl Store {
    /// Sets `key` to `value`; returns the write's index.
    ///
    /// # Examples
    ///
    /// ```
    /// let store = purgatorio_web::long_poll::Store::default();
    /// assert_eq!(store.put("k", "v".into()), 1);
    /// ```
    pub fn put(&self, key: &str, value: Bytes) -> u64 {
        let mut keys = self.keys.lock();
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
        index
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
    /// store.put("k", "v".into());
    /// assert_eq!(store.index("k"), 1);
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
    /// store.put("k", "v".into());
    /// assert!(Arc::ptr_eq(&store.shared_key("k"), &store.shared_key("k")));
    /// assert_eq!(&*store.shared_key("new"), "new");
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
    /// store.put("k", "v".into());
    /// assert!(store.newer_than("k", 0).is_some());
    /// assert!(store.newer_than("k", 1).is_none());
    /// ```
    pub fn newer_than(&self, key: &str, index: u64) -> Option<Entry> {
        self.get(key).filter(|entry| entry.index > index)
    }
}
