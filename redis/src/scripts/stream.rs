//! The steps on the stream: remove entries (acknowledge, dead-letter) and
//! trim, extend a delivery's visibility, acknowledge a recurring timer's
//! occurrence (scheduling the next), revive a dead letter.

use super::{HELPERS, PUT, TRIM};

/// KEYS: stream, dead. ARGV: group, `k` (0, or 8 for a dead letter), then
/// `k` field-value arguments of the dead letter's `XADD`, then the entries
/// (at most [`REMOVE_BATCH`](super::REMOVE_BATCH)). Adds the dead letter if any, acknowledges the
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

/// KEYS: buckets, timer, repeat, stream, dead. ARGV: prefix, bucket width
/// ms, wake channel, group, id, series, next deadline ms (`""`: none),
/// payload, `k` (0, or 8 for a dead letter), `k` field-value arguments of
/// the dead letter, the entry. Acknowledges a recurring timer's occurrence
/// (adding the dead letter if any) and, if this call removed the entry
/// from the group's pending list, the series is still the delivered one,
/// and no timer of the id is pending (a retry), schedules the next
/// occurrence; then trims the stream as `remove` does. Returns 1 if the
/// entry was acknowledged here.
pub(crate) fn acknowledge() -> String {
    format!(
        "{HELPERS}{TRIM}{PUT}{}",
        r"
local width, wake, group = tonumber(ARGV[2]), ARGV[3], ARGV[4]
local id, series, nxt, payload = ARGV[5], ARGV[6], ARGV[7], ARGV[8]
local k = tonumber(ARGV[9])
if k > 0 then redis.call('XADD', KEYS[5], '*', unpack(ARGV, 10, 9 + k)) end
local entry = ARGV[10 + k]
local acked = redis.call('XACK', KEYS[4], group, entry)
if acked == 1 and nxt ~= '' and redis.call('HGET', KEYS[3], id) == series
    and redis.call('HEXISTS', KEYS[2], id) == 0 then
  put(id, nxt, payload, width, wake)
end
trim(KEYS[4], group)
return acked
"
    )
}

/// KEYS: buckets, timer, dead. ARGV: prefix, bucket width ms, wake channel,
/// dead-letter entry, deadline ms (or `now`: Redis's `TIME`). Moves the
/// dead letter back to pending as a first attempt and removes it from the
/// dead-letter stream. 1 if moved, 0 if no such dead letter, -1 if a timer
/// of its id is pending (left alone).
pub(crate) fn revive() -> String {
    format!(
        "{HELPERS}{PUT}{}",
        r"
local entry = ARGV[4]
local found = redis.call('XRANGE', KEYS[3], entry, entry)
if #found == 0 then return 0 end
local fields, id, payload = found[1][2], nil, ''
for i = 1, #fields, 2 do
  if fields[i] == 'id' then id = fields[i + 1] end
  if fields[i] == 'payload' then payload = fields[i + 1] end
end
if not id then return 0 end
if redis.call('HEXISTS', KEYS[2], id) == 1 then return -1 end
local at = ARGV[5]
if at == 'now' then at = string.format('%d', server_ms()) end
put(id, at, payload, tonumber(ARGV[2]), ARGV[3])
redis.call('XDEL', KEYS[3], entry)
return 1
"
    )
}
