//! The scheduler's steps: promote due timers to the stream, apply the
//! misfire policy to overdue ones.

use super::HELPERS;

/// KEYS: buckets, timer, stream, stats, repeat. ARGV: prefix, limit, how
/// late a timer must be to count as misfired (ms), byte budget. Each timer
/// becomes one stream entry `i <id> r <record as stored> d <deadline>`
/// (read by [`Delivery::from_entry`](crate::Delivery)): three short fields,
/// the record not parsed, since this step's CPU is most of a timer's; a
/// recurring timer's entry also carries its series (`s`), for the
/// acknowledgement that schedules the next occurrence. Moves up to `limit` timers whose
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
local limit, misfire_ms, budget = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local moved, promoted, lag, misfired, bytes, full = 0, 0, -1, 0, 0, 0
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
    -- Records are read 4 first, then twice as many each time, or as many as
    -- the byte budget left holds at the size moved so far if more, at most
    -- 64 a time: small records take few reads, and a call stopped by the
    -- budget has read at most 64 more than it used.
    local n, gone, taken, step = #due / 2, {}, 0, 4
    local misfire_pending, prefix = true, b .. ' '
    while full == 0 and taken < n do
      local ids = {}
      for k = taken + 1, math.min(taken + step, n) do ids[#ids + 1] = due[2 * k - 1] end
      local records = redis.call('HMGET', KEYS[2], unpack(ids))
      local series = {}
      if recurring then series = redis.call('HMGET', KEYS[5], unpack(ids)) end
      for j, id in ipairs(ids) do
        local record = records[j]
        -- No record, or one that says another bucket: a stale member. The
        -- record goes to the stream as stored, not parsed (`Delivery::from_entry`).
        if record and string.find(record, prefix, 1, true) == 1 then
          if bytes + #record > budget and promoted + #gone > 0 then
            full = 1
            break
          end
          bytes = bytes + #record
          local deadline = due[2 * (taken + 1)]
          if series[j] then
            redis.call('XADD', KEYS[3], '*', 'i', id, 'r', record, 'd', deadline, 's', series[j])
          else
            redis.call('XADD', KEYS[3], '*', 'i', id, 'r', record, 'd', deadline)
          end
          gone[#gone + 1] = id
          -- Deadlines come in order: the first is the latest, and the
          -- misfired are the first few.
          if lag < 0 then lag = now - tonumber(deadline) end
          if misfire_pending and now - tonumber(deadline) > misfire_ms then
            misfired = misfired + 1
          else
            misfire_pending = false
          end
        end
        taken = taken + 1
      end
      local fits = math.floor((budget - bytes) / math.max(1, bytes / math.max(1, promoted + #gone)))
      step = math.min(math.max(2 * step, fits), 64)
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
