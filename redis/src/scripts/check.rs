//! The look for what a data error strands (`Timers::check`).

use super::HELPERS;

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
