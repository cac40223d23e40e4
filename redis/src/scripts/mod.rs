//! The server-side steps, each one atomic Lua script whose work is bounded
//! by construction.
//!
//! Keys, all under one hash tag so that a Redis Cluster keeps a namespace
//! in one slot (see `redis/README.md`):
//!
//! | key | type | holds |
//! |---|---|---|
//! | `{ns}:buckets` | sorted set | bucket number → earliest deadline in it (ms) |
//! | `{ns}:b:<n>` | sorted set | timer id → deadline (ms), for bucket `n` |
//! | `{ns}:timer` | hash | timer id → `"<bucket> <attempt> <payload>"` |
//! | `{ns}:stream` | stream | due timers, for the consumer group |
//! | `{ns}:dead` | stream | timers that failed every attempt |
//! | `{ns}:stats` | hash | `promoted`, `lag_ms`, `redelivered`, `misfired` |
//! | `{ns}:repeat` | hash | recurring timer id → its series (see `recurring.rs`) |
//! | `{ns}:wake` | channel | a deadline earlier than every other was scheduled |
//!
//! One hash field per timer holds everything but its deadline (the score in
//! its bucket), so a batch of timers is read with one `HMGET` and removed
//! with one `HDEL`, and a bucket's due timers, always its first by score,
//! leave with one `ZREMRANGEBYRANK`.
//!
//! The bounds (Redis runs a script alone, so its work is everyone's wait):
//!
//! | script | work per call |
//! |---|---|
//! | schedule | `n` timers ≤ [`SCHEDULE_BATCH`] and ≤ [`BATCH_BYTES`] of ids and payloads (a larger timer alone): `O(n log N)`, one `ZADD` and one `ZADD LT` per bucket touched |
//! | cancel, get, reschedule | one timer: `O(log N)` |
//! | earliest (listing) | ≤ 1,000 timers from ≤ 1,000 buckets |
//! | promote | ≤ `promote_batch` ≤ [`MAX_PROMOTE_BATCH`](crate::MAX_PROMOTE_BATCH) timers, as many buckets looked at, and ≤ [`BATCH_BYTES`] of records beyond the first: one `XADD` each, `O(log N)` per bucket; called again while a call stops at a limit |
//! | misfire | ≤ [`MISFIRE_PAGE`] timers, as many buckets looked at (a stale bucket score is fixed and the next bucket looked at), and, rescheduling, ≤ [`BATCH_BYTES`] beyond the first; called again while a page stops at a limit |
//! | remove (acknowledge, dead-letter) | ≤ [`REMOVE_BATCH`] entries, then one `XTRIM MINID ~`, which frees at most 100 stream nodes (Redis's own cap for `~`) |
//!
//! | file | its scripts |
//! |---|---|
//! | `timers.rs` | schedule, cancel, get, earliest, reschedule |
//! | `promote.rs` | promote, misfire |
//! | `stream.rs` | remove, extend, acknowledge (a recurring occurrence), revive |
//! | `check.rs` | check |

mod check;
mod promote;
mod stream;
mod timers;

pub(crate) use check::check;
pub(crate) use promote::{misfire, promote};
pub(crate) use stream::{acknowledge, extend, remove, revive};
pub(crate) use timers::{cancel, earliest, get, reschedule, schedule};

/// The scripts, loaded once per process (`EVALSHA`, `EVAL` on a miss).
pub(crate) struct Scripts {
    /// [`schedule`].
    pub(crate) schedule: redis::Script,
    /// [`cancel`].
    pub(crate) cancel: redis::Script,
    /// [`get`].
    pub(crate) get: redis::Script,
    /// [`reschedule`].
    pub(crate) reschedule: redis::Script,
    /// [`extend`].
    pub(crate) extend: redis::Script,
    /// [`remove`].
    pub(crate) remove: redis::Script,
    /// [`earliest`].
    pub(crate) earliest: redis::Script,
    /// [`promote`].
    pub(crate) promote: redis::Script,
    /// [`misfire`].
    pub(crate) misfire: redis::Script,
    /// [`acknowledge`].
    pub(crate) recur: redis::Script,
    /// [`revive`].
    pub(crate) revive: redis::Script,
    /// [`check`].
    pub(crate) check: redis::Script,
}

impl Scripts {
    /// Every script, hashed (sent on first use).
    pub(crate) fn new() -> Scripts {
        Scripts {
            schedule: redis::Script::new(&schedule()),
            cancel: redis::Script::new(&cancel()),
            get: redis::Script::new(&get()),
            reschedule: redis::Script::new(&reschedule()),
            extend: redis::Script::new(&extend()),
            remove: redis::Script::new(&remove()),
            earliest: redis::Script::new(&earliest()),
            promote: redis::Script::new(&promote()),
            misfire: redis::Script::new(&misfire()),
            recur: redis::Script::new(&acknowledge()),
            revive: redis::Script::new(&revive()),
            check: redis::Script::new(&check()),
        }
    }
}

/// The most timers one schedule script takes ([`Timers::schedule_many`](crate::Timers::schedule_many)
/// splits a longer list).
pub(crate) const SCHEDULE_BATCH: usize = 250;

/// The most record bytes (payloads, with ids) one script call writes: a
/// schedule call takes this much payload (a longer batch is split), a
/// promote or misfire call moves this much beyond its first timer. With
/// the default 64 KiB payloads a full batch of 250 would otherwise copy
/// 16 MiB inside Redis in one call (32 MiB, a batch of 500, took
/// 190–280 ms, `redis/README.md`);
/// 256 KiB costs about 1 ms.
pub(crate) const BATCH_BYTES: usize = 256 << 10;

/// The most misfired timers one misfire script handles.
pub(crate) const MISFIRE_PAGE: usize = 500;

/// The most entries one [`remove`] call takes.
pub(crate) const REMOVE_BATCH: usize = 1_000;

/// The most timer records one [`check`] call reads (`HSCAN … COUNT`).
pub(crate) const CHECK_PAGE: usize = 500;

/// Shared Lua helpers: bucket keys, re-keying a bucket to its earliest
/// deadline (or dropping it once empty), reading a timer's record.
pub(crate) const HELPERS: &str = r"
local prefix = ARGV[1]
local function bucket_key(b) return prefix .. ':b:' .. b end
local function refresh(b)
  local first = redis.call('ZRANGE', bucket_key(b), 0, 0, 'WITHSCORES')
  if #first == 0 then
    redis.call('ZREM', KEYS[1], b)
  else
    redis.call('ZADD', KEYS[1], first[2], b)
  end
end
-- A record is '<bucket> <attempt> <payload>': returns bucket, attempt,
-- payload.
local function parse(record)
  local b, attempt, at = string.match(record, '^(%d+) (%d+) ()')
  return b, attempt, string.sub(record, at)
end
local function server_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
";

/// Lua: `trim(stream, group)` trims the stream below the oldest entry
/// still pending (with none pending, below the group's last delivered
/// entry). Shared by [`remove`] and the recurring timers' acknowledgement.
pub(crate) const TRIM: &str = r"
local function trim(stream, group_name)
  local pending = redis.call('XPENDING', stream, group_name)
  local minid = pending[2]
  if pending[1] == 0 then
    -- Nothing pending: everything the group delivered is acknowledged.
    for _, group in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
      local name, last
      for i = 1, #group, 2 do
        if group[i] == 'name' then name = group[i + 1] end
        if group[i] == 'last-delivered-id' then last = group[i + 1] end
      end
      if name == group_name then minid = last end
    end
  end
  -- With `~` and no LIMIT, Redis frees at most 100 stream nodes' worth of
  -- entries (100 x stream-node-max-entries, 10,000 by default) per call: a
  -- trim held back by one long-pending entry catches up over the next calls.
  if minid then redis.call('XTRIM', stream, 'MINID', '~', minid) end
end
";

/// Lua: `put(id, at, payload, width, wake)` schedules timer `id` (not
/// pending) at `at` as its first attempt; publishes on `wake` when it is
/// the earliest of all. `KEYS[1]`, `KEYS[2]`: buckets, timer.
pub(crate) const PUT: &str = r"
local function put(id, at, payload, width, wake)
  local d = tonumber(at)
  local earliest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  local b = string.format('%d', math.floor(d / width))
  redis.call('ZADD', bucket_key(b), at, id)
  redis.call('ZADD', KEYS[1], 'LT', at, b)
  redis.call('HSET', KEYS[2], id, b .. ' 1 ' .. payload)
  if #earliest == 0 or d < tonumber(earliest[2]) then
    redis.call('PUBLISH', wake, at)
  end
end
";
