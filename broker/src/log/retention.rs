//! Retention: which closed segments a partition gives up, as Kafka's
//! `retention.ms` and `retention.bytes` decide it. Only whole closed
//! segments go, oldest first; the active segment stays, so the log start
//! offset moves by whole segments.
//!
//! | setting | a segment goes when |
//! |---|---|
//! | `retention.ms` | its largest timestamp is older than now minus it |
//! | `retention.bytes` | the log without it still holds at least that many bytes |
//! | (always) | its records are all below the log start that DeleteRecords set |

use super::partition::Log;
use super::segment::Segment;

/// What a partition keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    /// Keep segments with records younger than this, ms (`None`: forever).
    pub ms: Option<u64>,
    /// Keep at most about this many bytes (`None`: no bound).
    pub bytes: Option<u64>,
}

impl Log {
    /// Takes the closed segments that `retention` gives up at `now_ms`
    /// (wall-clock ms, as record timestamps are), and those wholly below
    /// the log start DeleteRecords set, out of the log, oldest first,
    /// advancing its start offset; the caller deletes their files after
    /// releasing the partition's lock.
    pub fn expire(&mut self, now_ms: i64, retention: &Retention) -> Vec<Segment> {
        let mut size = self.size();
        let mut gone = Vec::new();
        while self.segments.len() > 1 {
            let oldest = &self.segments[0];
            let deleted = oldest.next <= self.deleted_below;
            let by_time = retention.ms.is_some_and(|ms| {
                let horizon = now_ms.saturating_sub(i64::try_from(ms).unwrap_or(i64::MAX));
                oldest.max_time.is_some_and(|m| m.timestamp < horizon)
            });
            let by_size = retention
                .bytes
                .is_some_and(|bytes| size - oldest.size >= bytes);
            if !(deleted || by_time || by_size) {
                break;
            }
            size -= oldest.size;
            gone.extend(self.segments.pop_front());
        }
        gone
    }
}

#[cfg(test)]
mod tests {
    use super::super::batch::testing::timed;
    use super::super::segment::Place;
    use super::*;

    fn log_of(timestamps: impl Iterator<Item = i64>) -> Log {
        let mut log = Log::create(Place::Anonymous(std::env::temp_dir()), 500);
        for ts in timestamps {
            log.append_now(&timed(&[ts])).unwrap();
        }
        log
    }

    #[test]
    fn old_segments_go_by_time_and_the_start_moves() {
        let mut log = log_of(0..100);
        let segments = log.segment_count();
        let keep_all = Retention {
            ms: Some(1_000),
            bytes: None,
        };
        assert!(log.expire(1_000, &keep_all).is_empty());
        let gone = log.expire(1_050, &keep_all);
        assert!(!gone.is_empty());
        assert!(gone.iter().all(|s| s.max_time.unwrap().timestamp < 50));
        assert_eq!(log.start(), gone.last().unwrap().next);
        assert_eq!(log.segment_count(), segments - gone.len());
        // Never the active segment, however old.
        log.expire(i64::MAX, &keep_all);
        assert_eq!(log.segment_count(), 1);
        assert_eq!(log.next(), 100);
    }

    #[test]
    fn segments_go_by_size_while_the_rest_still_holds_the_bound() {
        let mut log = log_of(0..100);
        let bound = log.size() / 2;
        let gone = log.expire(
            0,
            &Retention {
                ms: None,
                bytes: Some(bound),
            },
        );
        assert!(!gone.is_empty());
        assert!(log.size() >= bound);
        assert!(log.size() - log.segments[0].size < bound);
        assert!(Log::expire(
            &mut log_of(0..10),
            0,
            &Retention {
                ms: None,
                bytes: None
            }
        )
        .is_empty());
    }
}
