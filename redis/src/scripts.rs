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

/// KEYS: buckets, timer. ARGV: prefix, bucket width ms, wake channel, then
/// `id, deadline ms, attempt, payload` for each timer (at most
/// [`SCHEDULE_BATCH`]). Schedules each, or moves it if pending (a later
/// entry of the same id wins); publishes on the wake channel when the
/// earliest deadline of all moved earlier. Returns how many.
pub(crate) fn schedule() -> String {
    format!(
        "{HELPERS}{}",
        r"
local width, wake = tonumber(ARGV[2]), ARGV[3]
local n = (#ARGV - 3) / 4
-- The last entry of each id wins.
local last, ids = {}, {}
for i = 0, n - 1 do
  local id = ARGV[4 + 4 * i]
  if not last[id] then ids[#ids + 1] = id end
  last[id] = i
end
-- Timers that move leave their old bucket.
local touched = {}
local olds = redis.call('HMGET', KEYS[2], unpack(ids))
for k, record in ipairs(olds) do
  if record then
    local b = parse(record)
    redis.call('ZREM', bucket_key(b), ids[k])
    touched[b] = true
  end
end
local earliest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local members, lowest, records = {}, {}, {}
local min_all = nil
for _, id in ipairs(ids) do
  local i = last[id]
  local deadline, attempt, payload = ARGV[5 + 4 * i], ARGV[6 + 4 * i], ARGV[7 + 4 * i]
  local d = tonumber(deadline)
  local b = string.format('%d', math.floor(d / width))
  local list = members[b]
  if not list then list = {}; members[b] = list end
  list[#list + 1] = deadline
  list[#list + 1] = id
  if not lowest[b] or d < lowest[b] then lowest[b] = d end
  if not min_all or d < min_all then min_all = d end
  records[#records + 1] = id
  records[#records + 1] = b .. ' ' .. attempt .. ' ' .. payload
end
for b, list in pairs(members) do
  redis.call('ZADD', bucket_key(b), unpack(list))
  redis.call('ZADD', KEYS[1], 'LT', string.format('%d', lowest[b]), b)
  touched[b] = nil
end
redis.call('HSET', KEYS[2], unpack(records))
for b in pairs(touched) do refresh(b) end
if #earliest == 0 or min_all < tonumber(earliest[2]) then
  redis.call('PUBLISH', wake, string.format('%d', min_all))
end
return #ids
"
    )
}

/// KEYS: buckets, timer, repeat. ARGV: prefix, id. Cancels timer `id` and
/// ends its series if it recurs. 1 if it was pending or recurring, else 0.
pub(crate) fn cancel() -> String {
    format!(
        "{HELPERS}{}",
        r"
local id = ARGV[2]
local series = redis.call('HDEL', KEYS[3], id)
local record = redis.call('HGET', KEYS[2], id)
if not record then return series end
local b = parse(record)
redis.call('ZREM', bucket_key(b), id)
refresh(b)
redis.call('HDEL', KEYS[2], id)
return 1
"
    )
}

/// KEYS: buckets, timer. ARGV: prefix, id. `{deadline, attempt, payload}`
/// of pending timer `id`, or nil.
pub(crate) fn get() -> String {
    format!(
        "{HELPERS}{}",
        r"
local id = ARGV[2]
local record = redis.call('HGET', KEYS[2], id)
if not record then return nil end
local b, attempt, payload = parse(record)
local deadline = redis.call('ZSCORE', bucket_key(b), id)
return {deadline, attempt, payload}
"
    )
}

/// KEYS: buckets. ARGV: prefix, limit. Up to `limit` pending timers,
/// earliest deadline first: `{id, deadline, id, deadline, …}`. Reads at most
/// `limit` buckets.
pub(crate) fn earliest() -> String {
    format!(
        "{HELPERS}{}",
        r"
local limit = tonumber(ARGV[2])
local out = {}
local buckets = redis.call('ZRANGE', KEYS[1], 0, limit - 1)
for _, b in ipairs(buckets) do
  local need = limit - #out / 2
  if need <= 0 then break end
  local timers = redis.call('ZRANGE', bucket_key(b), 0, need - 1, 'WITHSCORES')
  for _, v in ipairs(timers) do out[#out + 1] = v end
end
return out
"
    )
}

/// KEYS: buckets, timer. ARGV: prefix, id, new deadline ms (or `now`: the
/// server's `TIME`), bucket width ms, wake channel. Moves pending timer `id` to the new deadline, keeping
/// its payload and attempt; publishes on the wake channel when it is now the
/// earliest of all. 1 if it was pending, else 0.
pub(crate) fn reschedule() -> String {
    format!(
        "{HELPERS}{}",
        r"
local id, at = ARGV[2], ARGV[3]
local record = redis.call('HGET', KEYS[2], id)
if not record then return 0 end
if at == 'now' then at = string.format('%d', server_ms()) end
local deadline = tonumber(at)
local old, attempt, payload = parse(record)
redis.call('ZREM', bucket_key(old), id)
refresh(old)
local earliest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local b = string.format('%d', math.floor(deadline / tonumber(ARGV[4])))
redis.call('ZADD', bucket_key(b), at, id)
redis.call('ZADD', KEYS[1], 'LT', at, b)
redis.call('HSET', KEYS[2], id, b .. ' ' .. attempt .. ' ' .. payload)
if #earliest == 0 or deadline < tonumber(earliest[2]) then
  redis.call('PUBLISH', ARGV[5], at)
end
return 1
"
    )
}

/// KEYS: stream, dead. ARGV: group, `k` (0, or 8 for a dead letter), then
/// `k` field-value arguments of the dead letter's `XADD`, then the entries
/// (at most [`REMOVE_BATCH`]). Adds the dead letter if any, acknowledges the
/// entries, and trims the stream below the oldest entry still pending (with
/// none pending, below the group's last delivered entry): everything below
/// it was delivered and acknowledged, since a group delivers in id order.
/// `XTRIM MINID ~` frees whole stream nodes, far cheaper than `XDEL` of
/// each entry. Returns how many were acknowledged.
pub(crate) fn remove() -> String {
    r"
--TRIM--
local k = tonumber(ARGV[2])
if k > 0 then redis.call('XADD', KEYS[2], '*', unpack(ARGV, 3, 2 + k)) end
local entries = {unpack(ARGV, 3 + k)}
local acked = redis.call('XACK', KEYS[1], ARGV[1], unpack(entries))
trim(KEYS[1], ARGV[1])
return acked
"
    .replace("--TRIM--", TRIM)
}

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

/// The most entries one [`remove`] call takes.
pub(crate) const REMOVE_BATCH: usize = 1_000;

/// KEYS: stream. ARGV: group, consumer, entry. Restarts the entry's idle
/// time if `consumer` still holds it (`XCLAIM … 0 … JUSTID`: the delivery
/// count stays); 1 if so, else 0. One script, so that no other consumer can
/// take the entry over between the look and the claim.
pub(crate) fn extend() -> String {
    r"
local held = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1, ARGV[2])
if #held == 0 then return 0 end
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[3], 'JUSTID')
return 1
"
    .to_string()
}

/// KEYS: buckets, timer, stream, stats, repeat. ARGV: prefix, limit, how
/// late a timer must be to count as misfired (ms), byte budget. A recurring
/// timer's entry carries its series (`repeat`), for the acknowledgement
/// that schedules the next occurrence. Moves up to `limit` timers whose
/// deadline is at or before the server's `TIME` to the stream, in one
/// atomic step, and stops early once the records moved pass the byte
/// budget (the first timer always moves, whatever its size). Returns
/// `{timers taken from the buckets, next deadline or -1, server time, 1 if
/// it stopped at a limit (call again) else 0}`.
pub(crate) fn promote() -> String {
    format!(
        "{HELPERS}{}",
        r"
local now = server_ms()
local now_s = string.format('%d', now)
local limit, misfire_ms, budget = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local moved, promoted, lag, misfired, bytes, full = 0, 0, 0, 0, 0, 0
-- Series are looked up only while some timer recurs: most namespaces
-- have none, and the look is a command per batch of records.
local recurring = redis.call('HLEN', KEYS[5]) > 0
-- Buckets looked at: a stale bucket score (none is left stale by any
-- step, but one could be written by hand) costs a look and moves nothing,
-- so looks are bounded too.
local looks = 0
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
while full == 0 and moved < limit and looks < limit and #first > 0 and tonumber(first[2]) <= now do
  looks = looks + 1
  local b = first[1]
  local due = redis.call('ZRANGEBYSCORE', bucket_key(b), '-inf', now, 'WITHSCORES', 'LIMIT', 0, limit - moved)
  if #due == 0 then
    refresh(b) -- a stale bucket score: fix it and look again
  else
    -- Records are read 4, 8, 16, … (at most 64) at a time, so that a call
    -- stopped by the byte budget has read at most twice what it used.
    local n, gone, taken, step = #due / 2, {}, 0, 4
    while full == 0 and taken < n do
      local ids = {}
      for k = taken + 1, math.min(taken + step, n) do ids[#ids + 1] = due[2 * k - 1] end
      step = math.min(step * 2, 64)
      local records = redis.call('HMGET', KEYS[2], unpack(ids))
      local series = {}
      if recurring then series = redis.call('HMGET', KEYS[5], unpack(ids)) end
      for j, id in ipairs(ids) do
        local record = records[j]
        local rb, attempt, payload
        if record then rb, attempt, payload = parse(record) end
        -- No record, or one that says another bucket: a stale member.
        if rb == b then
          if bytes + #record > budget and promoted + #gone > 0 then
            full = 1
            break
          end
          bytes = bytes + #record
          local deadline = due[2 * (taken + 1)]
          -- The arguments written out, no table per timer: this loop is
          -- most of a promotion's CPU.
          if series[j] then
            redis.call('XADD', KEYS[3], '*', 'id', id, 'payload', payload, 'deadline', deadline,
              'attempt', attempt, 'promoted', now_s, 'repeat', series[j])
          else
            redis.call('XADD', KEYS[3], '*', 'id', id, 'payload', payload, 'deadline', deadline,
              'attempt', attempt, 'promoted', now_s)
          end
          gone[#gone + 1] = id
          local late = now - tonumber(deadline)
          if late > lag then lag = late end
          if late > misfire_ms then misfired = misfired + 1 end
        end
        taken = taken + 1
      end
    end
    -- The timers taken are the bucket's first by score.
    if taken > 0 then redis.call('ZREMRANGEBYRANK', bucket_key(b), 0, taken - 1) end
    if #gone > 0 then redis.call('HDEL', KEYS[2], unpack(gone)) end
    moved = moved + taken
    promoted = promoted + #gone
    refresh(b)
  end
  first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
end
if moved >= limit or looks >= limit then full = 1 end
if promoted > 0 then
  redis.call('HINCRBY', KEYS[4], 'promoted', promoted)
  redis.call('HSET', KEYS[4], 'lag_ms', string.format('%d', lag))
  if misfired > 0 then redis.call('HINCRBY', KEYS[4], 'misfired', misfired) end
end
local next_deadline = '-1'
if #first > 0 then next_deadline = first[2] end
return {moved, next_deadline, string.format('%d', now), full}
"
    )
}

/// KEYS: buckets, timer, stats, repeat. ARGV: prefix, policy (`skip` or
/// `reschedule`), how late a timer must be to count as misfired (ms), the
/// delay for `reschedule` (ms), bucket width (ms), limit, byte budget.
/// Applies the policy to up to `limit` misfired timers, earliest first,
/// stopping early once the records rescheduled pass the byte budget (the
/// first always moves); returns `{how many, 1 if it stopped at a limit
/// (call again) else 0}`. Each handled timer leaves the overdue range, so a
/// second node never counts it again. `skip` drops no recurring timer: its
/// occurrence is made due now instead, so that the acknowledgement of its
/// delivery goes on with the series (dropped, the series would end unseen).
pub(crate) fn misfire() -> String {
    format!(
        "{HELPERS}{}",
        r"
local policy, now = ARGV[2], server_ms()
local cutoff = now - tonumber(ARGV[3])
local later, width, limit = now + tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local budget = tonumber(ARGV[7])
local later_s = string.format('%d', later)
local nb = string.format('%d', math.floor(later / width))
local found, bytes, full = 0, 0, 0
-- Buckets looked at: a stale bucket score (one that says overdue while its
-- bucket holds nothing overdue) is fixed and the next bucket looked at, so
-- that one stale score does not hide the misfired timers behind it; looks
-- are bounded as the page is.
local looks = 0
while full == 0 and found < limit and looks < limit do
  looks = looks + 1
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  if #first == 0 or tonumber(first[2]) > cutoff then break end
  local b = first[1]
  local late = redis.call('ZRANGEBYSCORE', bucket_key(b), '-inf', cutoff, 'LIMIT', 0, limit - found)
  if #late == 0 then
    refresh(b)
  else
    local members, moved, recurring = {}, {}, {}
    if policy == 'skip' then
      local series = redis.call('HMGET', KEYS[4], unpack(late))
      local drop = {}
      for k, id in ipairs(late) do
        if series[k] then recurring[#recurring + 1] = id else drop[#drop + 1] = id end
      end
      if #drop > 0 then redis.call('HDEL', KEYS[2], unpack(drop)) end
    else
      -- Only the records that fit the budget move in this call; they are
      -- read 4, 8, 16, … (at most 64) at a time, as in promote.
      local taken, step = 0, 4
      while full == 0 and taken < #late do
        local ids = {}
        for k = taken + 1, math.min(taken + step, #late) do ids[#ids + 1] = late[k] end
        step = math.min(step * 2, 64)
        local records = redis.call('HMGET', KEYS[2], unpack(ids))
        for j, id in ipairs(ids) do
          local record = records[j]
          if record then
            if bytes + #record > budget and found + taken > 0 then
              full = 1
              break
            end
            bytes = bytes + #record
            local _, attempt, payload = parse(record)
            members[#members + 1] = later_s
            members[#members + 1] = id
            moved[#moved + 1] = id
            moved[#moved + 1] = nb .. ' ' .. attempt .. ' ' .. payload
          end
          taken = taken + 1
        end
      end
      late = {unpack(late, 1, taken)}
    end
    -- The late timers are the bucket's first by score: they leave it before
    -- any goes back in (the new bucket may be this one).
    if #late > 0 then redis.call('ZREMRANGEBYRANK', bucket_key(b), 0, #late - 1) end
    if #members > 0 then
      redis.call('ZADD', bucket_key(nb), unpack(members))
      redis.call('ZADD', KEYS[1], 'LT', later_s, nb)
      redis.call('HSET', KEYS[2], unpack(moved))
    end
    if #recurring > 0 then
      local records = redis.call('HMGET', KEYS[2], unpack(recurring))
      local now_s = string.format('%d', now)
      local nowb = string.format('%d', math.floor(now / width))
      local due, kept = {}, {}
      for k, id in ipairs(recurring) do
        if records[k] then
          local _, attempt, payload = parse(records[k])
          due[#due + 1] = now_s
          due[#due + 1] = id
          kept[#kept + 1] = id
          kept[#kept + 1] = nowb .. ' ' .. attempt .. ' ' .. payload
        end
      end
      if #due > 0 then
        redis.call('ZADD', bucket_key(nowb), unpack(due))
        redis.call('ZADD', KEYS[1], 'LT', now_s, nowb)
        redis.call('HSET', KEYS[2], unpack(kept))
      end
    end
    found = found + #late
    refresh(b)
  end
end
if found >= limit or looks >= limit then full = 1 end
if found > 0 then redis.call('HINCRBY', KEYS[3], 'misfired', found) end
return {found, full}
"
    )
}

/// The most timer records one [`check`] call reads (`HSCAN … COUNT`).
pub(crate) const CHECK_PAGE: usize = 500;

/// KEYS: buckets, timer. ARGV: prefix, cursor, count. One page of an
/// `HSCAN` of the timer records: each timer whose bucket does not hold it,
/// or whose bucket the index (`buckets`) does not hold, is stranded (no
/// promotion reaches it). Keys of another type are read with `pcall`, so
/// that a key overwritten by another application is reported, not fatal.
/// Returns `{next cursor, id, why, id, why, …}`, or `{'0', '', why}` if the
/// timer hash itself is no hash.
pub(crate) fn check() -> String {
    format!(
        "{HELPERS}{}",
        r"
local page = redis.pcall('HSCAN', KEYS[2], ARGV[2], 'COUNT', ARGV[3])
if page.err then return {'0', '', KEYS[2] .. ': ' .. page.err} end
local index = redis.call('TYPE', KEYS[1])['ok']
local indexed = {}
local out = {page[1]}
local fields = page[2]
for i = 1, #fields, 2 do
  local id, record = fields[i], fields[i + 1]
  local b = string.match(record, '^(%d+) ')
  local why = nil
  if not b then
    why = 'its record is unreadable'
  else
    local key = bucket_key(b)
    local score = redis.pcall('ZSCORE', key, id)
    if type(score) == 'table' and score.err then
      why = key .. ' is no sorted set'
    elseif not score then
      why = 'not in ' .. key
    elseif index ~= 'zset' and index ~= 'none' then
      why = KEYS[1] .. ' is no sorted set'
    else
      if indexed[b] == nil then indexed[b] = redis.call('ZSCORE', KEYS[1], b) ~= false end
      if not indexed[b] then why = 'bucket ' .. b .. ' is not in ' .. KEYS[1] end
    end
  end
  if why then
    out[#out + 1] = id
    out[#out + 1] = why
  end
end
return out
"
    )
}
