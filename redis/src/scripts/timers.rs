//! The steps of one timer or one batch: schedule, cancel, get, list the
//! earliest, reschedule.

use super::HELPERS;

/// KEYS: buckets, timer. ARGV: prefix, bucket width ms, wake channel, then
/// `id, deadline ms, attempt, payload` for each timer (at most
/// [`SCHEDULE_BATCH`](super::SCHEDULE_BATCH)). Schedules each, or moves it if pending (a later
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
-- Bucket number → its name: a batch spans few buckets, and formatting one
-- costs more than looking it up.
local names = {}
for _, id in ipairs(ids) do
  local i = last[id]
  local deadline, attempt, payload = ARGV[5 + 4 * i], ARGV[6 + 4 * i], ARGV[7 + 4 * i]
  local d = tonumber(deadline)
  local n = math.floor(d / width)
  local b = names[n]
  if not b then
    b = string.format('%d', n)
    names[n] = b
  end
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
