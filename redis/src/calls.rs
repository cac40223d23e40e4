//! Every Redis call of a namespace, written once: how it is built (keys,
//! script, arguments) and how its reply reads. The blocking face runs them
//! on a pooled connection; the async face ([`aio`](crate::aio)) on its
//! connection manager. Nothing here talks to Redis.

use std::time::Duration;

use redis::{Cmd, Pipeline, ScriptInvocation, Value};

use crate::error::name_fault;
use crate::manage::{DeadLetter, InFlight, Pending};
use crate::namespace::Namespace;
use crate::recurring;
use crate::scripts::{BATCH_BYTES, MISFIRE_PAGE, REMOVE_BATCH};
use crate::timers::{chunks, MisfirePage, Promotion, Scheduled};
use crate::{reply, Delivery, Error, Metrics, Misfire, ReplicaAck, Verdict};

/// `TIME`: Redis's clock.
pub(crate) fn time() -> Cmd {
    redis::cmd("TIME")
}

/// Redis's clock, ms since the Unix epoch, from a [`time`] reply.
pub(crate) fn time_ms((secs, micros): (u64, u64)) -> u64 {
    secs * 1000 + micros / 1000
}

/// The schedule script once per chunk of `timers` (already checked), all
/// in one pipeline, each as delivery number `attempt`.
pub(crate) fn schedule(ns: &Namespace, timers: &[(&str, u64, &[u8])], attempt: u32) -> Pipeline {
    let mut pipe = redis::pipe();
    add_schedules(&mut pipe, ns, timers, attempt);
    pipe
}

/// Adds the [`schedule`] calls for `timers` to `pipe`.
fn add_schedules(pipe: &mut Pipeline, ns: &Namespace, timers: &[(&str, u64, &[u8])], attempt: u32) {
    let (keys, scripts) = (&ns.keys, &ns.scripts);
    let hash = scripts.schedule.get_hash();
    for chunk in chunks(timers) {
        let command = pipe
            .cmd("EVALSHA")
            .arg(hash)
            .arg(2)
            .arg(&keys.buckets)
            .arg(&keys.timer)
            .arg(&keys.prefix)
            .arg(ns.config.bucket_ms)
            .arg(&keys.wake);
        for (id, at_ms, payload) in chunk {
            command.arg(*id).arg(*at_ms).arg(attempt).arg(*payload);
        }
        command.ignore();
    }
}

/// Stores recurring timer `id`'s series `spec` and schedules its first
/// occurrence at `first_ms`, in one pipeline (answered as [`schedule`] is).
/// Run again after `NOSCRIPT`, it does the same.
pub(crate) fn schedule_recurring(
    ns: &Namespace,
    id: &str,
    spec: &str,
    first_ms: u64,
    payload: &[u8],
) -> Pipeline {
    let mut pipe = redis::pipe();
    pipe.cmd("HSET")
        .arg(&ns.keys.repeat)
        .arg(id)
        .arg(spec)
        .ignore();
    add_schedules(&mut pipe, ns, &[(id, first_ms, payload)], 1);
    pipe
}

/// Adds `WAIT` to a schedule pipeline when [`Config::replicas_to_ack`](crate::Config::replicas_to_ack)
/// asks for it: it answers once the replicas hold every write the
/// connection made before it, the whole pipeline. Returns what was asked,
/// for [`scheduled`]. The caller gives the call that much longer to
/// answer.
pub(crate) fn add_wait(pipe: &mut Pipeline, ns: &Namespace) -> Option<ReplicaAck> {
    let ack = ns.config.replica_ack?;
    pipe.cmd("WAIT")
        .arg(ack.replicas)
        .arg(ack.timeout.as_millis() as u64);
    Some(ack)
}

/// What a schedule pipeline did, by its replies (`acked`: the `WAIT`
/// answer, when [`add_wait`] added one): stored, and replicated as asked
/// or not.
pub(crate) fn scheduled(wait: Option<ReplicaAck>, acked: &[u32]) -> Scheduled {
    match (wait, acked.first()) {
        (Some(ack), Some(&acked)) if acked < ack.replicas => Scheduled::NotReplicated {
            acked,
            wanted: ack.replicas,
        },
        _ => Scheduled::Stored,
    }
}

/// What a schedule of `timers` timers did, recorded: the outcome for the
/// log of `namespace`'s handle, and, when it was stored but not replicated
/// in time, the command that counts it in the metrics.
pub(crate) fn record_replication(ns: &Namespace, outcome: Scheduled, timers: usize) -> Option<Cmd> {
    ns.replication
        .record(&ns.config.namespace, outcome, timers as u64);
    let Scheduled::NotReplicated { .. } = outcome else {
        return None;
    };
    let mut count = redis::cmd("HINCRBY");
    count.arg(&ns.keys.stats).arg("not_replicated").arg(timers);
    Some(count)
}

/// `SCRIPT LOAD` of the schedule script, for a [`schedule`] pipeline that
/// Redis answered `NOSCRIPT` (it restarted, or `SCRIPT FLUSH`).
pub(crate) fn load_schedule() -> Cmd {
    let mut load = redis::cmd("SCRIPT");
    load.arg("LOAD").arg(crate::scripts::schedule());
    load
}

/// Whether `error` says a script is not loaded.
pub(crate) fn no_script(error: &redis::RedisError) -> bool {
    error.kind() == redis::ErrorKind::NoScriptError
}

/// Cancels pending timer `id`: 1 if it was pending.
pub(crate) fn cancel<'a>(ns: &'a Namespace, id: &str) -> ScriptInvocation<'a> {
    let (keys, scripts) = (&ns.keys, &ns.scripts);
    let mut call = scripts.cancel.key(&keys.buckets);
    call.key(&keys.timer)
        .key(&keys.repeat)
        .arg(&keys.prefix)
        .arg(id);
    call
}

/// Reads pending timer `id`; see [`pending`].
pub(crate) fn get<'a>(ns: &'a Namespace, id: &str) -> ScriptInvocation<'a> {
    let (keys, scripts) = (&ns.keys, &ns.scripts);
    let mut call = scripts.get.key(&keys.buckets);
    call.key(&keys.timer).arg(&keys.prefix).arg(id);
    call
}

/// The reply of [`get`].
pub(crate) type GetReply = Option<(String, u32, Vec<u8>)>;

/// A [`get`] reply as a [`Pending`] timer.
pub(crate) fn pending(found: GetReply) -> Result<Option<Pending>, Error> {
    found
        .map(|(deadline, attempt, payload)| {
            Ok(Pending {
                deadline_ms: reply::millis(&deadline)? as u64,
                attempt,
                payload,
            })
        })
        .transpose()
}

/// Moves pending timer `id` to `at` (ms, or `now`: Redis's `TIME`): 1 if
/// it was pending.
pub(crate) fn reschedule<'a>(ns: &'a Namespace, id: &str, at: &str) -> ScriptInvocation<'a> {
    let (keys, scripts) = (&ns.keys, &ns.scripts);
    let mut call = scripts.reschedule.key(&keys.buckets);
    call.key(&keys.timer)
        .arg(&keys.prefix)
        .arg(id)
        .arg(at)
        .arg(ns.config.bucket_ms)
        .arg(&keys.wake);
    call
}

/// Up to `max` pending timers, earliest first; see [`listing`].
pub(crate) fn earliest(ns: &Namespace, max: usize) -> ScriptInvocation<'_> {
    let (keys, scripts) = (&ns.keys, &ns.scripts);
    let mut call = scripts.earliest.key(&keys.buckets);
    call.arg(&keys.prefix).arg(max);
    call
}

/// An [`earliest`] reply as `(id, deadline_ms)` pairs.
pub(crate) fn listing(flat: &[String]) -> Result<Vec<(String, u64)>, Error> {
    flat.chunks(2)
        .map(|pair| match pair {
            [id, at] => Ok((id.clone(), reply::millis(at)? as u64)),
            _ => Err(Error::Protocol("an odd listing".into())),
        })
        .collect()
}

/// The due ones of an [`earliest`] listing, by Redis's clock `now_ms`.
pub(crate) fn due(listing: Vec<(String, u64)>, now_ms: u64) -> Vec<(String, u64)> {
    listing
        .into_iter()
        .take_while(|(_, at)| *at <= now_ms)
        .collect()
}

/// Up to `max` entries the group delivered and nobody acknowledged, oldest
/// first (`XPENDING` extended form; `NOGROUP` before the group exists);
/// read with [`held_rows`].
pub(crate) fn held(ns: &Namespace, max: usize) -> Cmd {
    let keys = &ns.keys;
    let mut pending = redis::cmd("XPENDING");
    pending
        .arg(&keys.stream)
        .arg(&keys.group)
        .arg("-")
        .arg("+")
        .arg(max);
    pending
}

/// A row of [`held`]: entry, consumer, idle ms, deliveries.
pub(crate) type HeldRow = (String, String, u64, u32);

/// The rows of a [`held`] reply; malformed rows are skipped.
pub(crate) fn held_rows(reply: &Value) -> Vec<HeldRow> {
    let Value::Array(rows) = reply else {
        return Vec::new();
    };
    rows.iter()
        .filter_map(|row| match row {
            Value::Array(cells) => match cells.as_slice() {
                [Value::BulkString(entry), Value::BulkString(consumer), Value::Int(idle), Value::Int(count)] => {
                    Some((
                        String::from_utf8_lossy(entry).into_owned(),
                        String::from_utf8_lossy(consumer).into_owned(),
                        u64::try_from(*idle).unwrap_or(0),
                        u32::try_from(*count).unwrap_or(u32::MAX),
                    ))
                }
                _ => None,
            },
            _ => None,
        })
        .collect()
}

/// Reads the stream entries of `rows`, one `XRANGE` each, in one pipeline.
pub(crate) fn read_entries(ns: &Namespace, rows: &[HeldRow]) -> Pipeline {
    let mut pipe = redis::pipe();
    for (entry, ..) in rows {
        pipe.cmd("XRANGE")
            .arg(&ns.keys.stream)
            .arg(entry)
            .arg(entry);
    }
    pipe
}

/// The [`InFlight`] timers of `rows` and their [`read_entries`] replies (an
/// entry trimmed meanwhile is left out).
pub(crate) fn in_flight_of(rows: Vec<HeldRow>, entries: &[Value]) -> Vec<InFlight> {
    rows.into_iter()
        .zip(entries)
        .filter_map(|((_, consumer, idle_ms, deliveries), read)| {
            let (entry, fields) = reply::entries(read).pop()?;
            let timer = Delivery::from_entry(entry, &fields);
            Some(InFlight {
                id: timer.id,
                consumer,
                idle_ms,
                deliveries,
                deadline_ms: timer.deadline_ms,
                attempt: timer.attempt,
            })
        })
        .collect()
}

/// Up to `max` entries of the dead-letter stream, oldest first; see
/// [`dead_letters_of`].
pub(crate) fn dead_letters(ns: &Namespace, max: usize) -> Cmd {
    let mut read = redis::cmd("XRANGE");
    read.arg(&ns.keys.dead)
        .arg("-")
        .arg("+")
        .arg("COUNT")
        .arg(max);
    read
}

/// A [`dead_letters`] reply as [`DeadLetter`]s.
pub(crate) fn dead_letters_of(read: &Value) -> Vec<DeadLetter> {
    reply::entries(read)
        .into_iter()
        .map(|(entry, fields)| DeadLetter {
            id: String::from_utf8_lossy(reply::field(&fields, "id").unwrap_or_default())
                .into_owned(),
            payload: reply::field(&fields, "payload")
                .unwrap_or_default()
                .to_vec(),
            deadline_ms: reply::number_field(&fields, "deadline"),
            attempt: u32::try_from(reply::number_field(&fields, "attempt")).unwrap_or(u32::MAX),
            entry,
        })
        .collect()
}

/// Moves the dead letter at `entry` back to pending, due now; answers as
/// [`DeadLetterRetry::from_reply`](crate::DeadLetterRetry) reads.
pub(crate) fn revive<'a>(ns: &'a Namespace, entry: &str) -> ScriptInvocation<'a> {
    let (keys, scripts) = (&ns.keys, &ns.scripts);
    let mut call = scripts.revive.key(&keys.buckets);
    call.key(&keys.timer)
        .key(&keys.dead)
        .arg(&keys.prefix)
        .arg(ns.config.bucket_ms)
        .arg(&keys.wake)
        .arg(entry)
        .arg("now");
    call
}

/// One promotion step (at most `promote_batch` timers and [`BATCH_BYTES`]
/// of records); see [`promotion`].
pub(crate) fn promote(ns: &Namespace, misfire_after: Duration) -> ScriptInvocation<'_> {
    let (keys, scripts) = (&ns.keys, &ns.scripts);
    let mut call = scripts.promote.key(&keys.buckets);
    call.key(&keys.timer)
        .key(&keys.stream)
        .key(&keys.stats)
        .key(&keys.repeat)
        .arg(&keys.prefix)
        .arg(ns.config.promote_batch)
        .arg(misfire_after.as_millis() as u64)
        .arg(BATCH_BYTES);
    call
}

/// The reply of [`promote`]: moved, next deadline (`-1`: none), now, 1 if
/// it stopped at a limit.
pub(crate) type PromoteReply = (u64, String, String, u8);

/// A [`promote`] reply as a [`Promotion`].
pub(crate) fn promotion((moved, next, now, full): PromoteReply) -> Result<Promotion, Error> {
    let next = reply::millis(&next)?;
    Ok(Promotion {
        next_deadline_ms: (next >= 0.0).then_some(next as u64),
        now_ms: reply::millis(&now)? as u64,
        full: full == 1,
        moved,
    })
}

/// One page of the misfire policy for timers more than `late` overdue (at
/// most [`MISFIRE_PAGE`] timers and [`BATCH_BYTES`] of records);
/// `None` for [`Misfire::FireNow`], which sends nothing (promotion delivers
/// and counts them). See [`misfire_page`].
pub(crate) fn misfire(ns: &Namespace, late: Duration) -> Option<ScriptInvocation<'_>> {
    let (keys, scripts, config) = (&ns.keys, &ns.scripts, &ns.config);
    let (policy, delay) = match config.misfire {
        Misfire::FireNow => return None,
        Misfire::Skip => ("skip", 0),
        Misfire::Reschedule(d) => ("reschedule", d.as_millis() as u64),
    };
    let mut call = scripts.misfire.key(&keys.buckets);
    call.key(&keys.timer)
        .key(&keys.stats)
        .key(&keys.repeat)
        .arg(&keys.prefix)
        .arg(policy)
        .arg(late.as_millis() as u64)
        .arg(delay)
        .arg(config.bucket_ms)
        .arg(MISFIRE_PAGE)
        .arg(BATCH_BYTES);
    Some(call)
}

/// The reply of [`misfire`]: how many timers, 1 if the page stopped at a
/// limit (count or bytes).
pub(crate) type MisfireReply = (u64, u8);

/// A [`misfire`] reply: a page stopped at a limit means there may be more.
pub(crate) fn misfire_page((_found, full): MisfireReply) -> MisfirePage {
    if full == 1 {
        MisfirePage::More
    } else {
        MisfirePage::Done
    }
}

/// The figures of [`Metrics`]; with `group`, also the consumer group's
/// summary (which fails with `NOGROUP` before the group exists).
pub(crate) fn metrics(ns: &Namespace, group: bool) -> Pipeline {
    let keys = &ns.keys;
    let mut pipe = redis::pipe();
    pipe.cmd("HLEN")
        .arg(&keys.timer)
        .cmd("HGETALL")
        .arg(&keys.stats)
        .cmd("XLEN")
        .arg(&keys.dead);
    if group {
        pipe.cmd("XPENDING").arg(&keys.stream).arg(&keys.group);
    }
    pipe
}

/// The reply of [`metrics`] without the group: timers pending, the
/// counters, dead letters.
pub(crate) type MetricsReply = (u64, Vec<(String, u64)>, u64);

/// The reply of [`metrics`] with the group: as [`MetricsReply`], then the
/// group's summary.
pub(crate) type MetricsGroupReply = (u64, Vec<(String, u64)>, u64, Value);

/// A [`metrics`] reply as [`Metrics`] (`unacked`: the group's summary, or
/// nil).
pub(crate) fn metrics_of((pending, stats, dead): MetricsReply, unacked: &Value) -> Metrics {
    let stat = |name: &str| stats.iter().find(|(k, _)| k == name).map_or(0, |(_, v)| *v);
    Metrics {
        pending,
        promoted: stat("promoted"),
        promotion_lag_ms: stat("lag_ms"),
        redelivered: stat("redelivered"),
        dead_letters: dead,
        misfired: stat("misfired"),
        unacknowledged: reply::pending_count(unacked),
        stranded: stat("stranded"),
        not_replicated: stat("not_replicated"),
    }
}

/// Whether `error` says the consumer group does not exist.
pub(crate) fn no_group(error: &redis::RedisError) -> bool {
    error.code() == Some("NOGROUP")
}

/// Creates the consumer group (and the stream); `BUSYGROUP` if it exists.
pub(crate) fn create_group(ns: &Namespace) -> Cmd {
    let keys = &ns.keys;
    let mut create = redis::cmd("XGROUP");
    create
        .arg("CREATE")
        .arg(&keys.stream)
        .arg(&keys.group)
        .arg("0")
        .arg("MKSTREAM");
    create
}

/// Whether a [`create_group`] error says the group exists already.
pub(crate) fn group_exists(error: &redis::RedisError) -> bool {
    error.code() == Some("BUSYGROUP")
}

/// Takes over up to `max` entries idle longer than the visibility timeout,
/// for consumer `name`; read with [`reply::autoclaim_entries`].
pub(crate) fn autoclaim(ns: &Namespace, name: &str, max: usize) -> Cmd {
    let keys = &ns.keys;
    let mut claim = redis::cmd("XAUTOCLAIM");
    claim
        .arg(&keys.stream)
        .arg(&keys.group)
        .arg(name)
        .arg(ns.config.visibility_timeout.as_millis() as u64)
        .arg("0-0")
        .arg("COUNT")
        .arg(max);
    claim
}

/// Reads up to `max` new entries for consumer `name`, blocking up to
/// `block_ms`; read with [`reply::read_group_entries`].
pub(crate) fn read_group(ns: &Namespace, name: &str, max: usize, block_ms: u64) -> Cmd {
    let keys = &ns.keys;
    let mut read = redis::cmd("XREADGROUP");
    read.arg("GROUP")
        .arg(&keys.group)
        .arg(name)
        .arg("COUNT")
        .arg(max)
        .arg("BLOCK")
        .arg(block_ms)
        .arg("STREAMS")
        .arg(&keys.stream)
        .arg(">");
    read
}

/// What a take-over asks once [`autoclaim`] claimed `claimed`: how many
/// times the group delivered each entry (`XPENDING` of it; Redis counts
/// each take-over), and one [`Metrics::redelivered`] count for all, in one
/// pipeline; read with [`taken_over`].
pub(crate) fn take_over_counts(ns: &Namespace, claimed: &[reply::Entry]) -> Pipeline {
    let keys = &ns.keys;
    let mut pipe = redis::pipe();
    for (entry, _) in claimed {
        pipe.cmd("XPENDING")
            .arg(&keys.stream)
            .arg(&keys.group)
            .arg(entry)
            .arg(entry)
            .arg(1);
    }
    pipe.cmd("HINCRBY")
        .arg(&keys.stats)
        .arg("redelivered")
        .arg(claimed.len())
        .ignore();
    pipe
}

/// The entries a consumer took over from another, split by
/// [`taken_over`].
#[derive(Debug, Default)]
pub(crate) struct TakenOver {
    /// To deliver, as their next attempt.
    pub(crate) deliveries: Vec<Delivery>,
    /// Past [`Config::max_attempts`](crate::Config::max_attempts): for the
    /// dead-letter stream ([`removals`] with each as its own letter).
    pub(crate) dead: Vec<Delivery>,
}

/// The `claimed` entries as deliveries, by the [`take_over_counts`]
/// replies `counts` (one per entry): each delivery of an entry by the
/// group counts as an attempt, and an entry past the last attempt is dead.
pub(crate) fn taken_over(
    ns: &Namespace,
    claimed: Vec<reply::Entry>,
    counts: &[Value],
) -> Result<TakenOver, Error> {
    if counts.len() != claimed.len() {
        return Err(Error::Protocol(format!(
            "{} delivery counts for {} entries taken over",
            counts.len(),
            claimed.len()
        )));
    }
    let mut out = TakenOver::default();
    for ((entry, fields), count) in claimed.into_iter().zip(counts) {
        let deliveries = reply::pending_delivery_count(count)?;
        let mut delivery = Delivery::from_entry(entry, &fields);
        delivery.attempt = delivery
            .attempt
            .saturating_add(deliveries.saturating_sub(1));
        if delivery.attempt > ns.config.max_attempts {
            out.dead.push(delivery);
        } else {
            out.deliveries.push(delivery);
        }
    }
    Ok(out)
}

/// What finishing a delivery with a [`Verdict`] takes, the same on both
/// faces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Finish {
    /// Acknowledge it ([`removals`]).
    Ack,
    /// Its last attempt failed: move it to the dead-letter stream
    /// ([`removals`] with it as the letter).
    DeadLetter,
    /// Schedule its next attempt this many ms after Redis's now (as
    /// attempt + 1), then acknowledge it.
    Retry {
        /// The delay, ms.
        delay_ms: u64,
    },
}

/// What `verdict` on `delivery` takes.
///
/// # Errors
///
/// [`Error::DeadlineOutOfRange`] for a retry delay past
/// [`MAX_DELAY_MS`](crate::MAX_DELAY_MS).
pub(crate) fn finish(
    ns: &Namespace,
    delivery: &Delivery,
    verdict: Verdict,
) -> Result<Finish, Error> {
    match verdict {
        Verdict::Ack => Ok(Finish::Ack),
        Verdict::RetryLater(_) if delivery.attempt >= ns.config.max_attempts => {
            Ok(Finish::DeadLetter)
        }
        Verdict::RetryLater(delay) => Ok(Finish::Retry {
            delay_ms: retry_delay_ms(delay)?,
        }),
    }
}

/// The calls that remove `deliveries` from the stream, adding `letter` to
/// the dead-letter stream in the same atomic step: the one way entries
/// leave the stream. Plain timers go [`REMOVE_BATCH`] to a call; each
/// occurrence of a recurring timer goes alone, through the call that also
/// schedules its next occurrence (`recurring.rs`). Each answers a number.
pub(crate) fn removals<'a>(
    ns: &'a Namespace,
    deliveries: &[Delivery],
    letter: Option<&Delivery>,
) -> Vec<ScriptInvocation<'a>> {
    let (recurring, plain): (Vec<&Delivery>, Vec<&Delivery>) =
        deliveries.iter().partition(|d| d.series.is_some());
    let mut calls: Vec<ScriptInvocation<'a>> = plain
        .chunks(REMOVE_BATCH)
        .map(|chunk| remove(ns, chunk, letter))
        .collect();
    calls.extend(recurring.into_iter().map(|d| acknowledge(ns, d, letter)));
    calls
}

/// Acknowledges occurrence `delivery` of a recurring timer (adding
/// `letter` to the dead-letter stream) and schedules the next occurrence.
fn acknowledge<'a>(
    ns: &'a Namespace,
    delivery: &Delivery,
    letter: Option<&Delivery>,
) -> ScriptInvocation<'a> {
    let (keys, scripts) = (&ns.keys, &ns.scripts);
    let series = delivery.series.as_deref().unwrap_or_default();
    let next = recurring::next_occurrence(series, delivery.deadline_ms, delivery.promoted_ms);
    let mut call = scripts.recur.key(&keys.buckets);
    call.key(&keys.timer)
        .key(&keys.repeat)
        .key(&keys.stream)
        .key(&keys.dead)
        .arg(&keys.prefix)
        .arg(ns.config.bucket_ms)
        .arg(&keys.wake)
        .arg(&keys.group)
        .arg(&delivery.id)
        .arg(series)
        .arg(next.map(|ms| ms.to_string()).unwrap_or_default())
        .arg(&delivery.payload);
    add_letter(&mut call, letter);
    call.arg(&delivery.entry);
    call
}

/// The dead letter's arguments: `0`, or `8` and its field-value pairs.
fn add_letter(call: &mut ScriptInvocation<'_>, letter: Option<&Delivery>) {
    match letter {
        Some(letter) => {
            call.arg(8)
                .arg("id")
                .arg(&letter.id)
                .arg("payload")
                .arg(&letter.payload)
                .arg("deadline")
                .arg(letter.deadline_ms)
                .arg("attempt")
                .arg(letter.attempt);
        }
        None => {
            call.arg(0);
        }
    }
}

/// Removes plain `deliveries` (at most [`REMOVE_BATCH`]) from the stream,
/// adding `letter` to the dead-letter stream in the same atomic step.
fn remove<'a>(
    ns: &'a Namespace,
    deliveries: &[&Delivery],
    letter: Option<&Delivery>,
) -> ScriptInvocation<'a> {
    let (keys, scripts) = (&ns.keys, &ns.scripts);
    let mut call = scripts.remove.key(&keys.stream);
    call.key(&keys.dead).arg(&keys.group);
    add_letter(&mut call, letter);
    for delivery in deliveries {
        call.arg(&delivery.entry);
    }
    call
}

/// Restarts the visibility timeout of `entry` if consumer `name` still
/// holds it: 1 if so.
pub(crate) fn extend<'a>(ns: &'a Namespace, name: &str, entry: &str) -> ScriptInvocation<'a> {
    let (keys, scripts) = (&ns.keys, &ns.scripts);
    let mut call = scripts.extend.key(&keys.stream);
    call.arg(&keys.group).arg(name).arg(entry);
    call
}

/// A retry `delay` as ms, refused past [`MAX_DELAY_MS`](crate::MAX_DELAY_MS).
pub(crate) fn retry_delay_ms(delay: Duration) -> Result<u64, Error> {
    let delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
    if delay_ms > crate::MAX_DELAY_MS {
        return Err(Error::DeadlineOutOfRange {
            at_ms: u64::MAX,
            max_ms: crate::MAX_DEADLINE_MS,
        });
    }
    Ok(delay_ms)
}

/// Refuses a consumer name that is empty, over
/// [`MAX_CONSUMER_NAME`](crate::MAX_CONSUMER_NAME) bytes, or holds a control
/// character.
pub(crate) fn check_consumer_name(name: &str) -> Result<(), Error> {
    let Some(why) = name_fault(name, crate::MAX_CONSUMER_NAME, "longer than 256 bytes") else {
        return Ok(());
    };
    Err(Error::InvalidArgument {
        name: "consumer name",
        why,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A namespace whose link never connects (none of these tests calls Redis).
    fn ns() -> Namespace {
        Namespace::open("redis://127.0.0.1:1", crate::Config::new("t")).expect("a valid url")
    }

    fn entry(id: &str, attempt: u32) -> reply::Entry {
        let fields = vec![
            ("id".to_string(), id.as_bytes().to_vec()),
            ("attempt".to_string(), attempt.to_string().into_bytes()),
        ];
        (format!("1-{id}"), fields)
    }

    /// An `XPENDING` row saying the group delivered the entry `count` times.
    fn delivered(count: i64) -> Value {
        Value::Array(vec![Value::Array(vec![
            Value::BulkString(b"1-0".to_vec()),
            Value::BulkString(b"c".to_vec()),
            Value::Int(10),
            Value::Int(count),
        ])])
    }

    #[test]
    fn each_delivery_of_an_entry_taken_over_is_an_attempt_and_the_last_is_dead() {
        let ns = ns(); // max_attempts 5
        let claimed = vec![entry("a", 1), entry("b", 4), entry("c", 1)];
        let counts = [delivered(2), delivered(3), Value::Array(vec![])];
        let taken = taken_over(&ns, claimed, &counts).unwrap();
        let attempts = |ds: &[Delivery]| -> Vec<(String, u32)> {
            ds.iter().map(|d| (d.id.clone(), d.attempt)).collect()
        };
        assert_eq!(
            attempts(&taken.deliveries),
            [("a".to_string(), 2), ("c".to_string(), 1)]
        );
        assert_eq!(attempts(&taken.dead), [("b".to_string(), 6)]);
        let short = taken_over(&ns, vec![entry("a", 1)], &[]);
        assert!(matches!(short, Err(Error::Protocol(_))), "{short:?}");
    }

    #[test]
    fn a_verdict_is_an_ack_a_retry_or_a_dead_letter() {
        let ns = ns();
        let at = |attempt: u32| {
            let (entry, fields) = entry("a", attempt);
            Delivery::from_entry(entry, &fields)
        };
        let later = Verdict::RetryLater(Duration::from_millis(250));
        assert_eq!(finish(&ns, &at(1), Verdict::Ack).unwrap(), Finish::Ack);
        assert_eq!(
            finish(&ns, &at(4), later).unwrap(),
            Finish::Retry { delay_ms: 250 }
        );
        assert_eq!(finish(&ns, &at(5), later).unwrap(), Finish::DeadLetter);
        let too_far = Verdict::RetryLater(Duration::from_secs(u64::MAX));
        assert!(matches!(
            finish(&ns, &at(1), too_far),
            Err(Error::DeadlineOutOfRange { .. })
        ));
    }
}
