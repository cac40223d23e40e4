//! The server-side steps, each one atomic Lua script.
//!
//! Keys, all under one hash tag so that a Redis Cluster keeps a namespace
//! in one slot (see `docs/redis.md`):
//!
//! | key | type | holds |
//! |---|---|---|
//! | `{ns}:buckets` | sorted set | bucket number → earliest deadline in it (ms) |
//! | `{ns}:b:<n>` | sorted set | timer id → deadline (ms), for bucket `n` |
//! | `{ns}:payload` | hash | timer id → payload |
//! | `{ns}:where` | hash | timer id → its bucket |
//! | `{ns}:attempt` | hash | timer id → the attempt it will be delivered as |
//! | `{ns}:stream` | stream | due timers, for the consumer group |
//! | `{ns}:dead` | stream | timers that failed every attempt |
//! | `{ns}:stats` | hash | `promoted`, `lag_ms`, `redelivered`, `misfired` |
//! | `{ns}:wake` | channel | a deadline earlier than every other was scheduled |

/// Shared Lua helpers: bucket keys, and re-keying a bucket to its earliest
/// deadline (or dropping it once empty).
const HELPERS: &str = r"
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
local function unlink(id)
  local old = redis.call('HGET', KEYS[3], id)
  if not old then return false end
  redis.call('ZREM', bucket_key(old), id)
  refresh(old)
  return true
end
local function server_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
";

/// KEYS: buckets, payload, where, attempt. ARGV: prefix, id, deadline ms,
/// payload, attempt, bucket width ms, wake channel. Schedules or moves `id`;
/// publishes on the wake channel when the deadline is the earliest of all.
pub(crate) fn schedule() -> String {
    format!(
        "{HELPERS}{}",
        r"
local id, deadline = ARGV[2], tonumber(ARGV[3])
unlink(id)
local earliest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local b = string.format('%d', math.floor(deadline / tonumber(ARGV[6])))
redis.call('ZADD', bucket_key(b), deadline, id)
redis.call('ZADD', KEYS[1], 'LT', deadline, b)
redis.call('HSET', KEYS[2], id, ARGV[4])
redis.call('HSET', KEYS[3], id, b)
redis.call('HSET', KEYS[4], id, ARGV[5])
if #earliest == 0 or deadline < tonumber(earliest[2]) then
  redis.call('PUBLISH', ARGV[7], ARGV[3])
end
return 1
"
    )
}

/// KEYS: buckets, payload, where, attempt. ARGV: prefix, id. 1 if `id` was
/// pending and is now gone, else 0.
pub(crate) fn cancel() -> String {
    format!(
        "{HELPERS}{}",
        r"
local id = ARGV[2]
if not unlink(id) then return 0 end
redis.call('HDEL', KEYS[2], id)
redis.call('HDEL', KEYS[3], id)
redis.call('HDEL', KEYS[4], id)
return 1
"
    )
}

/// KEYS: buckets, payload, where, attempt, stream, stats. ARGV: prefix,
/// limit. Moves up to `limit` timers whose deadline is at or before the
/// server's `TIME` to the stream, in one atomic step. Returns `{moved, next
/// deadline or -1, server time}`.
pub(crate) fn promote() -> String {
    format!(
        "{HELPERS}{}",
        r"
local now = server_ms()
local limit = tonumber(ARGV[2])
local moved, lag = 0, 0
while moved < limit do
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  if #first == 0 or tonumber(first[2]) > now then break end
  local b = first[1]
  local due = redis.call('ZRANGEBYSCORE', bucket_key(b), '-inf', now, 'WITHSCORES', 'LIMIT', 0, limit - moved)
  for i = 1, #due, 2 do
    local id, deadline = due[i], due[i + 1]
    local payload = redis.call('HGET', KEYS[2], id) or ''
    local attempt = redis.call('HGET', KEYS[4], id) or '1'
    redis.call('XADD', KEYS[5], '*', 'id', id, 'payload', payload, 'deadline', deadline,
      'attempt', attempt, 'promoted', string.format('%d', now))
    redis.call('ZREM', bucket_key(b), id)
    redis.call('HDEL', KEYS[2], id)
    redis.call('HDEL', KEYS[3], id)
    redis.call('HDEL', KEYS[4], id)
    moved = moved + 1
    lag = math.max(lag, now - tonumber(deadline))
  end
  refresh(b)
end
if moved > 0 then
  redis.call('HINCRBY', KEYS[6], 'promoted', moved)
  redis.call('HSET', KEYS[6], 'lag_ms', string.format('%d', lag))
end
local nxt = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local next_deadline = '-1'
if #nxt > 0 then next_deadline = nxt[2] end
return {moved, next_deadline, string.format('%d', now)}
"
    )
}

/// KEYS: buckets, payload, where, attempt, stats. ARGV: prefix, policy
/// (`fire`, `skip` or `reschedule`), how late a timer must be to count as
/// misfired (ms), the delay for `reschedule` (ms), bucket width (ms), limit.
/// Applies the policy to up to `limit` misfired timers; returns how many.
pub(crate) fn misfire() -> String {
    format!(
        "{HELPERS}{}",
        r"
local policy, cutoff = ARGV[2], server_ms() - tonumber(ARGV[3])
local later, width, limit = server_ms() + tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local found = 0
local buckets = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', cutoff)
for _, b in ipairs(buckets) do
  local late = redis.call('ZRANGEBYSCORE', bucket_key(b), '-inf', cutoff, 'LIMIT', 0, limit - found)
  for _, id in ipairs(late) do
    found = found + 1
    if policy == 'skip' then
      redis.call('ZREM', bucket_key(b), id)
      redis.call('HDEL', KEYS[2], id)
      redis.call('HDEL', KEYS[3], id)
      redis.call('HDEL', KEYS[4], id)
    elseif policy == 'reschedule' then
      redis.call('ZREM', bucket_key(b), id)
      local nb = string.format('%d', math.floor(later / width))
      redis.call('ZADD', bucket_key(nb), later, id)
      redis.call('ZADD', KEYS[1], 'LT', later, nb)
      redis.call('HSET', KEYS[3], id, nb)
    end
  end
  refresh(b)
  if found >= limit then break end
end
redis.call('HINCRBY', KEYS[5], 'misfired', found)
return found
"
    )
}
