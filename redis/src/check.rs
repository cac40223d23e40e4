//! [`Timers::check`]: what a data error strands. Another application that
//! overwrites or deletes one of the namespace's keys (its index of buckets,
//! a bucket, the stream) leaves timers that no promotion reaches; the loops
//! log the data error and go on, and the check lists those timers by id,
//! and the keys that hold another type than this crate writes there.

use redis::Value;

use crate::scripts::CHECK_PAGE;
use crate::{Error, Timers};

/// A timer that no promotion reaches, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stranded {
    /// The timer's id.
    pub id: String,
    /// Why: `not in {ns}:b:123`, `{ns}:buckets is no sorted set`, `bucket
    /// 123 is not in {ns}:buckets`.
    pub why: String,
}

/// A key of the namespace that holds another type than this crate writes
/// there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WrongType {
    /// The key.
    pub key: String,
    /// What it holds (`TYPE`): `string`, `list`, …
    pub holds: String,
    /// What this crate keeps there.
    pub expected: &'static str,
}

/// What [`Timers::check`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Check {
    /// The keys of another type.
    pub wrong_types: Vec<WrongType>,
    /// The stranded timers.
    pub stranded: Vec<Stranded>,
    /// The timer hash itself is unreadable (no hash): why. No timer could
    /// be looked at.
    pub records_unreadable: Option<String>,
}

impl Check {
    /// Whether nothing is wrong.
    pub fn is_clean(&self) -> bool {
        self.wrong_types.is_empty() && self.stranded.is_empty() && self.records_unreadable.is_none()
    }
}

impl Timers {
    /// Looks for what a data error strands: keys of the namespace that hold
    /// another type than this crate writes there (`TYPE` of each), and
    /// timers whose bucket does not hold them or whose bucket the index
    /// does not hold (no promotion reaches them), listed by id. Reads the
    /// timer records in pages of 500 (`HSCAN`), one bounded script call
    /// each; a long namespace takes many calls. Records the count of
    /// stranded timers in [`Metrics::stranded`](crate::Metrics::stranded).
    /// Changes nothing else: the repair (deleting a stray key, scheduling
    /// the stranded ids again) is the operator's.
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] after the retries.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use purgatorio_redis::*;
    /// # let timers = Timers::connect("redis://127.0.0.1:6379", Config::new("payments"))?;
    /// let check = timers.check()?;
    /// for timer in &check.stranded {
    ///     println!("stranded {}: {}", timer.id, timer.why);
    /// }
    /// # Ok::<(), purgatorio_redis::Error>(())
    /// ```
    pub fn check(&self) -> Result<Check, Error> {
        let ns = &self.ns;
        let keys = &ns.keys;
        let expected = [
            (&keys.buckets, "zset"),
            (&keys.timer, "hash"),
            (&keys.stream, "stream"),
            (&keys.dead, "stream"),
            (&keys.stats, "hash"),
            (&keys.repeat, "hash"),
        ];
        let mut types = redis::pipe();
        for (key, _) in expected {
            types.cmd("TYPE").arg(key);
        }
        let held: Vec<String> = ns.link.with_connection(|c| types.query(c))?;
        let mut check = Check {
            wrong_types: expected
                .iter()
                .zip(held)
                .filter(|((_, want), holds)| holds != "none" && holds != want)
                .map(|((key, want), holds)| WrongType {
                    key: key.to_string(),
                    holds,
                    expected: want,
                })
                .collect(),
            ..Check::default()
        };
        let mut cursor = "0".to_string();
        loop {
            let mut page = ns.scripts.check.key(&keys.buckets);
            page.key(&keys.timer)
                .arg(&keys.prefix)
                .arg(&cursor)
                .arg(CHECK_PAGE);
            let reply: Vec<Value> = ns.link.with_connection(|c| page.invoke(c))?;
            let text = |v: &Value| match v {
                Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                Value::SimpleString(s) => s.clone(),
                other => format!("{other:?}"),
            };
            let mut fields = reply.iter().map(text);
            cursor = fields
                .next()
                .ok_or_else(|| Error::Protocol("an empty check reply".into()))?;
            while let (Some(id), Some(why)) = (fields.next(), fields.next()) {
                if id.is_empty() {
                    check.records_unreadable = Some(why);
                } else {
                    check.stranded.push(Stranded { id, why });
                }
            }
            if cursor == "0" {
                break;
            }
        }
        // The count, for the metrics; a stats key of another type is
        // reported above and left alone.
        let count = check.stranded.len();
        let _ = ns.link.with_connection(|c| {
            redis::cmd("HSET")
                .arg(&keys.stats)
                .arg("stranded")
                .arg(count)
                .query::<()>(c)
        });
        Ok(check)
    }
}
