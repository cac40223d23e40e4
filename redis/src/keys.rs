//! The key names of a namespace, all under its hash tag `{ns}` so that a
//! Redis Cluster keeps them in one slot (the table: `scripts/mod.rs`).

/// The key names of one namespace.
#[derive(Debug)]
pub(crate) struct Keys {
    /// `{namespace}`: the hash tag every key starts with.
    pub(crate) prefix: String,
    /// The sorted set of non-empty buckets, scored by earliest deadline.
    pub(crate) buckets: String,
    /// Timer id → `"<bucket> <attempt> <payload>"`.
    pub(crate) timer: String,
    /// The stream of due timers.
    pub(crate) stream: String,
    /// The dead-letter stream.
    pub(crate) dead: String,
    /// The counters.
    pub(crate) stats: String,
    /// Recurring timers: id → series.
    pub(crate) repeat: String,
    /// The Pub/Sub channel that wakes scheduler nodes.
    pub(crate) wake: String,
    /// The stream's consumer group.
    pub(crate) group: String,
}

impl Keys {
    /// The names for `namespace`.
    pub(crate) fn new(namespace: &str) -> Keys {
        let prefix = format!("{{{namespace}}}");
        let key = |name: &str| format!("{prefix}:{name}");
        Keys {
            buckets: key("buckets"),
            timer: key("timer"),
            stream: key("stream"),
            dead: key("dead"),
            stats: key("stats"),
            repeat: key("repeat"),
            wake: key("wake"),
            group: "purgatorio".to_string(),
            prefix,
        }
    }
}
