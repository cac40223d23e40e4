//! [`Resubscribe`]: when a scheduler node's wake listener (either face's)
//! subscribes again after losing its subscription, and what it logs.

use std::time::{Duration, Instant};

use crate::health::{backoff, MAX_BACKOFF};

/// When a wake listener subscribes again, and what it logs.
///
/// A subscription that the server ends at once (a proxy or a
/// `client-output-buffer-limit` that drops it, a `CLIENT KILL` loop) counts
/// as a failure like a refused connection: the listener backs off (50 ms
/// doubling, at most [`MAX_BACKOFF`]) instead of
/// subscribing again at once, forever. A subscription counts as good once a
/// message arrived on it or it lasted [`MAX_BACKOFF`];
/// losing a good one subscribes again at once.
///
/// The log: a loss is logged when it begins a run of failures (or ends a
/// good subscription other than by the read timeout, the usual end of a
/// quiet one); its end is logged as soon as Redis confirms a subscription
/// again. Losses of young subscriptions later in the same run are not
/// logged, nor their ends, until a subscription proves good: a drop loop
/// writes two lines, not two per drop.
///
/// The caller supplies the time (`now`): the backoff and the log are
/// tested on a manual clock.
#[derive(Debug)]
pub(crate) struct Resubscribe {
    /// Who is speaking in the log: `wake listener of payments`.
    who: String,
    /// Failures in a row since the last good subscription.
    failures: u32,
    /// When the logged loss happened, until its end is logged.
    lost_since: Option<Instant>,
    /// When the current subscription was confirmed.
    subscribed_at: Option<Instant>,
    /// The current subscription proved good.
    good: bool,
}

/// What [`Resubscribe`] logged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Notice {
    /// `subscription lost`.
    Lost,
    /// `subscribed again after`, this long after the loss.
    Again(Duration),
}

impl Resubscribe {
    /// The state of `namespace`'s listener before its first subscription.
    pub(crate) fn new(namespace: &str) -> Resubscribe {
        Resubscribe {
            who: format!("wake listener of {namespace}"),
            failures: 0,
            lost_since: None,
            subscribed_at: None,
            good: false,
        }
    }

    /// How long to wait before the next subscription, if at all.
    pub(crate) fn wait(&self) -> Option<Duration> {
        (self.failures > 0).then(|| backoff(self.failures))
    }

    /// Connecting or subscribing failed at `now` with `error`.
    pub(crate) fn failed(&mut self, now: Instant, error: redis::RedisError) -> Option<Notice> {
        self.failures += 1;
        if self.failures == 1 {
            self.log_loss(now, &error)
        } else {
            None
        }
    }

    /// Logs a loss at `now`, unless one is logged and not yet ended.
    fn log_loss(&mut self, now: Instant, error: &redis::RedisError) -> Option<Notice> {
        if self.lost_since.is_some() {
            return None;
        }
        self.lost_since = Some(now);
        log::warn!(
            "{}: subscription lost ({error}); subscribing again with backoff up to {} ms",
            self.who,
            MAX_BACKOFF.as_millis()
        );
        Some(Notice::Lost)
    }

    /// Redis confirmed a subscription at `now`: ends a logged loss.
    pub(crate) fn subscribed(&mut self, now: Instant) -> Option<Notice> {
        self.good = false;
        self.subscribed_at = Some(now);
        let since = self.lost_since.take()?;
        let after = now.saturating_duration_since(since);
        log::warn!(
            "{}: subscribed again after {:.1} s",
            self.who,
            after.as_secs_f64()
        );
        Some(Notice::Again(after))
    }

    /// A message arrived: the subscription is good.
    pub(crate) fn heard(&mut self) {
        self.good = true;
        self.failures = 0;
    }

    /// The subscription ended at `now` with `error`: a good one is made
    /// again at once (after silence as long as the read timeout, the usual
    /// end of a quiet one, without a word), a young one after a backoff.
    pub(crate) fn lost(&mut self, now: Instant, error: redis::RedisError) -> Option<Notice> {
        let lasted = self
            .subscribed_at
            .take()
            .is_some_and(|at| now.saturating_duration_since(at) >= MAX_BACKOFF);
        if !(self.good || lasted) {
            return self.failed(now, error);
        }
        self.heard();
        if error.is_timeout() {
            None
        } else {
            self.log_loss(now, &error)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error of kind `kind`, as the listener meets them.
    fn error(kind: std::io::ErrorKind) -> redis::RedisError {
        std::io::Error::from(kind).into()
    }

    #[test]
    fn a_lost_subscription_backs_off_and_logs_each_end_once() {
        use std::io::ErrorKind::{ConnectionRefused, ConnectionReset, TimedOut};
        let ms = Duration::from_millis;
        let t0 = Instant::now();
        let mut again = Resubscribe::new("ns");
        assert_eq!(again.wait(), None);
        assert_eq!(again.subscribed(t0), None, "nothing was lost");
        again.heard();
        // A good subscription lost: logged, subscribed again at once.
        let down = t0 + ms(10_000);
        assert_eq!(again.lost(down, error(ConnectionReset)), Some(Notice::Lost));
        assert_eq!(again.wait(), None);
        // Redis down: refusals back off, 50 ms doubling up to 500 ms, and
        // the outage is not logged again.
        let mut waits = Vec::new();
        for i in 0..6 {
            assert_eq!(again.failed(down + ms(i), error(ConnectionRefused)), None);
            waits.push(again.wait().unwrap().as_millis());
        }
        assert_eq!(waits, [50, 100, 200, 400, 500, 500]);
        // Confirmed again: its end is logged then, not at a first message.
        let up = down + ms(5_000);
        assert_eq!(again.subscribed(up), Some(Notice::Again(ms(5_000))));
        // Dropped young: a failure of the same run, still backing off, and
        // not logged; nor is the next confirmation.
        assert_eq!(again.lost(up + ms(10), error(ConnectionReset)), None);
        assert_eq!(again.wait(), Some(MAX_BACKOFF));
        assert_eq!(again.subscribed(up + ms(600)), None);
        // It lasts MAX_BACKOFF and ends in the read timeout of a quiet
        // link: good, made again at once, without a word.
        let quiet = up + ms(600) + MAX_BACKOFF;
        assert_eq!(again.lost(quiet, error(TimedOut)), None);
        assert_eq!(again.wait(), None);
        // A fresh drop loop from a young first subscription: one loss, one
        // end, then silence while it goes on.
        let mut loop_ = Resubscribe::new("ns");
        let t1 = t0 + ms(100_000);
        assert_eq!(loop_.subscribed(t1), None);
        assert_eq!(
            loop_.lost(t1 + ms(5), error(ConnectionReset)),
            Some(Notice::Lost)
        );
        assert_eq!(loop_.wait(), Some(ms(50)));
        assert_eq!(loop_.subscribed(t1 + ms(60)), Some(Notice::Again(ms(55))));
        let mut at = t1 + ms(60);
        for _ in 0..10 {
            assert_eq!(loop_.lost(at + ms(10), error(ConnectionReset)), None);
            at += ms(10) + loop_.wait().unwrap();
            assert_eq!(loop_.subscribed(at), None);
        }
        // A message proves the subscription good: failures forgotten.
        loop_.heard();
        assert_eq!(loop_.wait(), None);
    }
}
