//! [`Namespace`]: what every handle of one namespace shares, its settings,
//! key names and scripts beside the [`Link`] that carries its calls.

use crate::keys::Keys;
use crate::link::Link;
use crate::replication::Replication;
use crate::scripts::Scripts;
use crate::{Config, Error};

/// What every handle of one namespace shares.
pub(crate) struct Namespace {
    /// The settings.
    pub(crate) config: Config,
    /// The key names.
    pub(crate) keys: Keys,
    /// The scripts.
    pub(crate) scripts: Scripts,
    /// The connections.
    pub(crate) link: Link,
    /// What `WAIT` mode did while replicas were missing.
    pub(crate) replication: Replication,
}

impl Namespace {
    /// `config`'s namespace on the Redis at `url`; connects lazily.
    pub(crate) fn open(url: &str, config: Config) -> Result<Namespace, Error> {
        let link = Link::open(url, &config)?;
        Ok(Namespace::with_link(link, config))
    }

    /// `config`'s namespace on the Redis Cluster that `seeds` belong to;
    /// connects lazily.
    #[cfg(feature = "cluster")]
    pub(crate) fn open_cluster(seeds: &[&str], config: Config) -> Result<Namespace, Error> {
        let keys = Keys::new(&config.namespace);
        let link = Link::open_cluster(seeds, &keys.prefix, &config)?;
        Ok(Namespace::with_link(link, config))
    }

    fn with_link(link: Link, config: Config) -> Namespace {
        Namespace {
            keys: Keys::new(&config.namespace),
            scripts: Scripts::new(),
            config,
            link,
            replication: Replication::default(),
        }
    }
}
