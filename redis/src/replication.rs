//! What `WAIT` mode ([`Config::replicas_to_ack`](crate::Config::replicas_to_ack))
//! did while the replicas it asks for were missing: a master left without
//! its replicas (after a failover, until a replica rejoins) stores and
//! delivers every schedule, and answers each with
//! [`Scheduled::NotReplicated`]. A handle logs the start of such a spell
//! once, counts the timers, and logs once, when replicas acknowledge again,
//! how long it lasted and how many timers were stored but not replicated
//! meanwhile; the count also goes to the namespace's metrics
//! ([`Metrics::not_replicated`](crate::Metrics::not_replicated)).

use std::sync::Mutex;
use std::time::Instant;

use crate::Scheduled;

/// A spell of schedules not replicated in time.
#[derive(Debug)]
struct Shortfall {
    /// When the first came.
    since: Instant,
    /// Timers stored but not replicated since.
    timers: u64,
}

/// One handle's view of its schedules' replication.
#[derive(Debug, Default)]
pub(crate) struct Replication {
    /// The current spell, if the last schedule was not replicated in time.
    shortfall: Mutex<Option<Shortfall>>,
}

impl Replication {
    /// Records a schedule of `timers` timers of namespace `namespace` and
    /// its `outcome`; logs the start and the end of a spell (after the
    /// lock is released: a logger is user code).
    pub(crate) fn record(&self, namespace: &str, outcome: Scheduled, timers: u64) {
        let notice = {
            let mut shortfall = self.shortfall.lock().expect("replication");
            match (outcome, shortfall.as_mut()) {
                (Scheduled::NotReplicated { .. }, Some(spell)) => {
                    spell.timers += timers;
                    None
                }
                (Scheduled::NotReplicated { acked, wanted }, None) => {
                    *shortfall = Some(Shortfall {
                        since: Instant::now(),
                        timers,
                    });
                    Some(format!(
                        "{namespace}: schedules are stored but not replicated in time \
                         ({acked} of {wanted} replicas acknowledged): the master delivers \
                         them, a failover now may lose them; counting until replicas \
                         acknowledge again"
                    ))
                }
                (Scheduled::Stored, _) => shortfall.take().map(|spell| {
                    format!(
                        "{namespace}: replicas acknowledge schedules again after {:.1} s; \
                         {} timers were stored but not replicated in time meanwhile \
                         (delivered; a failover then could have lost them)",
                        spell.since.elapsed().as_secs_f64(),
                        spell.timers
                    )
                }),
            }
        };
        if let Some(notice) = notice {
            log::warn!("{notice}");
        }
    }
}
