//! The group coordinator: consumer groups whose waits are purgatorio's.
//!
//! * **Delayed join.** A JoinGroup that starts or joins a rebalance parks in
//!   a [`Purgatory`] keyed by the group until every known member has
//!   rejoined (then the last join completes the rebalance and the others)
//!   or its rebalance timeout passes (then the members that did not rejoin
//!   are dropped and the rebalance completes with the rest).
//! * **Delayed sync.** A follower's SyncGroup parks until the leader's
//!   assignment arrives.
//! * **Session timeouts.** Each member's session is an entry in a
//!   [`KeyedTimer`]; a heartbeat (or any request of the member) resets it;
//!   its expiry removes the member and starts a rebalance, never before
//!   `session_timeout_ms`.
//! * **Initial delay.** The join that finds a group empty starts a timer
//!   of the group's, `group.initial.rebalance.delay.ms`, whose expiry
//!   completes the first rebalance, so members starting together join one
//!   generation; as in
//!   Kafka, each delay in which a new member joined is followed by another
//!   (the initial delay again, within what is left of the rebalance
//!   timeout), so the rebalance completes after one delay without a new
//!   member.
//!
//! * **Caps.** A first JoinGroup of v4+ (empty member id) is answered
//!   MEMBER_ID_REQUIRED with an id, kept pending for a session, to join
//!   with; a join with an id the group neither has nor handed out is
//!   UNKNOWN_MEMBER_ID; a group holds at most `group.max.size` members and
//!   pending ids (GROUP_MAX_SIZE_REACHED beyond), as Kafka does.
//!
//! * **Static members** (KIP-345). A member with a `group.instance.id`
//!   that joins again with no member id (it restarted) takes its
//!   instance's place under a new id and keeps its assignment; in a stable
//!   group nobody rebalances. Its old id is fenced (FENCED_INSTANCE_ID).
//!
//! This file holds the joins (JoinGroup and the rebalance it waits for);
//! `membership` what members ask once joined (SyncGroup, Heartbeat,
//! LeaveGroup) and who may commit; `group` one group's state machine;
//! `types` what callers exchange with the coordinator; `views` its
//! committed offsets and what ListGroups and DescribeGroups show;
//! `removal` what DeleteGroups and OffsetDelete remove.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use kafka_protocol::ResponseError;
use parking_lot::Mutex;
use purgatorio::{BuildError, Completion, KeyedTimer, Purgatory, Timer};

mod group;
mod membership;
mod removal;
mod types;
mod views;

pub use group::GroupWait;
use group::{Group, Member, Phase, Stage};
pub use removal::OffsetRemoval;
pub use types::{
    Committed, GroupDescription, GroupFigures, GroupListing, Join, Joined, Joining,
    MemberDescription, MemberMetadata, Membership, Protocol, Syncing,
};

/// The shortest session timeout accepted (Kafka's
/// `group.min.session.timeout.ms` is 6 s; clients in tests use less).
const MIN_SESSION: Duration = Duration::from_millis(1);

/// The longest session timeout accepted (Kafka's
/// `group.max.session.timeout.ms`, 30 minutes).
const MAX_SESSION: Duration = Duration::from_secs(1800);

/// A sync's wait when its member is gone (Kafka's default rebalance
/// timeout).
const DEFAULT_REBALANCE: Duration = Duration::from_secs(30);

/// The coordinator of every group.
pub struct Coordinator {
    /// The groups, by id.
    groups: Mutex<HashMap<String, Arc<Mutex<Group>>>>,
    /// Joins and syncs waiting, keyed by group id.
    waits: Purgatory<String, GroupWait>,
    /// The most members (and pending member ids) a group holds (Kafka's
    /// `group.max.size`).
    max_size: usize,
    /// Members' sessions.
    sessions: KeyedTimer<SessionKey, ()>,
    /// The initial delays of groups' first rebalances, by group id.
    initial_delays: KeyedTimer<String, ()>,
    /// The count in the next member id made.
    next_member: AtomicU64,
    /// The random keys member ids are hashed from.
    ids: RandomState,
    /// How long the first rebalance of an empty group waits for more
    /// members (Kafka's `group.initial.rebalance.delay.ms`).
    initial_delay: Duration,
}

/// A member's session: its group and member id.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct SessionKey {
    /// The group.
    group: String,
    /// The member.
    member: String,
}

impl SessionKey {
    fn new(group: &str, member: &str) -> SessionKey {
        SessionKey {
            group: group.to_string(),
            member: member.to_string(),
        }
    }
}

impl Coordinator {
    /// A coordinator on `timer`, delaying the first rebalance of an empty
    /// group by `initial_delay`, with at most `max_size` members a group.
    ///
    /// # Errors
    ///
    /// The [`BuildError`] of its purgatory.
    pub fn new(
        timer: &Timer,
        initial_delay: Duration,
        max_size: usize,
    ) -> Result<Arc<Coordinator>, BuildError> {
        let waits = Purgatory::builder()
            .name("group")
            .shared_timer(timer)
            .build()?;
        Ok(Arc::new_cyclic(|me: &Weak<Coordinator>| {
            let (me, also) = (me.clone(), me.clone());
            let sessions = KeyedTimer::on_timer(timer, move |key: SessionKey, ()| {
                if let Some(coordinator) = me.upgrade() {
                    coordinator.expire(&key.group, &key.member);
                }
            });
            let initial_delays = KeyedTimer::on_timer(timer, move |group: String, ()| {
                if let Some(coordinator) = also.upgrade() {
                    coordinator.initial_delay_passed(&group);
                }
            });
            Coordinator {
                groups: Mutex::default(),
                waits,
                sessions,
                initial_delays,
                next_member: AtomicU64::new(1),
                ids: RandomState::new(),
                initial_delay,
                max_size,
            }
        }))
    }

    /// The group `id`, if it exists.
    fn find(&self, id: &str) -> Option<Arc<Mutex<Group>>> {
        self.groups.lock().get(id).cloned()
    }

    /// The group `id`, created if new.
    fn group(&self, id: &str) -> Arc<Mutex<Group>> {
        Arc::clone(
            self.groups
                .lock()
                .entry(id.to_string())
                .or_insert_with(|| Arc::new(Mutex::new(Group::new()))),
        )
    }

    /// A member's session ran out: it leaves, and the others rebalance.
    fn expire(&self, group_id: &str, member: &str) {
        let Some(group) = self.find(group_id) else {
            return;
        };
        let kept_alive = {
            let mut g = group.lock();
            match g.members.get(member) {
                // A pending id never joined with: it goes.
                None => {
                    g.pending.remove(member);
                    return;
                }
                // Waiting in its JoinGroup (as Kafka keeps a member whose
                // join is pending): the session goes on.
                Some(m) if g.phase == Phase::Joining && m.joined => Some(m.session),
                Some(_) => {
                    g.remove_member(member);
                    None
                }
            }
        };
        match kept_alive {
            Some(session) => self.touch(group_id, member, session),
            None => {
                let _ = self.waits.check_and_complete(group_id);
            }
        }
    }

    /// Resets `member`'s session.
    fn touch(&self, group_id: &str, member: &str, session: Duration) {
        let key = SessionKey::new(group_id, member);
        if !self.sessions.reset(&key, session) {
            let _ = self.sessions.set(key, (), session);
        }
    }

    /// JoinGroup: the answer now, or a parked wait to await first.
    ///
    /// A static member (one with a `group.instance.id`) joining with no
    /// member id takes the place of the member its instance had, under a
    /// new id, keeping its assignment: in a stable group whose protocol it
    /// does not change it is answered at once with the generation under
    /// way, and no other member rebalances (Kafka's KIP-345).
    ///
    /// # Errors
    ///
    /// INVALID_SESSION_TIMEOUT, INCONSISTENT_GROUP_PROTOCOL,
    /// UNKNOWN_MEMBER_ID for an id the group neither has nor handed out
    /// (or an instance id it does not know), FENCED_INSTANCE_ID for a
    /// static member's id its instance no longer has,
    /// GROUP_MAX_SIZE_REACHED, or COORDINATOR_NOT_AVAILABLE when the
    /// purgatory is shut down. (MEMBER_ID_REQUIRED is an answer: it
    /// carries the id to join with.)
    pub fn join(&self, join: Join) -> Result<Joining, ResponseError> {
        let Join {
            group_id,
            member_id,
            group_instance_id: instance,
            require_member_id,
            protocol_type,
            protocols,
            session,
            rebalance,
            client_id,
            client_host,
        } = join;
        let (group_id, member_id) = (group_id.as_str(), member_id.as_str());
        if !(MIN_SESSION..=MAX_SESSION).contains(&session) {
            return Err(ResponseError::InvalidSessionTimeout);
        }
        let group = self.group(group_id);
        let first_join = member_id.is_empty();
        let member_id = if first_join {
            // Kafka's form, `client.id` (or the instance id) and a UUID:
            // assignors order members by id, so members order as their
            // clients are named.
            self.member_id(instance.as_deref().unwrap_or(&client_id))
        } else {
            member_id.to_string()
        };
        // Static members are never asked to join again with an id.
        if first_join && require_member_id && instance.is_none() {
            {
                let mut g = group.lock();
                if g.members.len() + g.pending.len() >= self.max_size {
                    return Err(ResponseError::GroupMaxSizeReached);
                }
                g.pending.insert(member_id.clone());
            }
            self.touch(group_id, &member_id, session);
            return Ok(Joining::Done(Joined {
                error: Some(ResponseError::MemberIdRequired),
                generation: -1,
                protocol: String::new(),
                leader: String::new(),
                member_id,
                members: Vec::new(),
            }));
        }
        let member = Member {
            protocols,
            session,
            rebalance,
            joined: true,
            assignment: None,
            client_id,
            client_host,
            instance: instance.clone(),
        };
        let (waiting_generation, complete_now, starts_initial, replaced) = {
            let mut g = group.lock();
            if !first_join && instance.is_some() {
                g.check_member(&member_id, instance.as_deref())?;
            }
            let replaced = match &instance {
                Some(instance) if first_join => {
                    let leader = g.leader.clone();
                    let replaced = g.replace_static(instance, &member_id, member.clone());
                    if let Some(old) = &replaced {
                        if g.phase == Phase::Stable && g.select_protocol() == g.protocol {
                            let mut joined = g.joined(&member_id);
                            drop(g);
                            // The leader as it was: a rejoining leader
                            // syncs as a follower and gets what it had.
                            joined.leader = leader;
                            joined.members.clear();
                            // (Outside the group's lock: ending the old
                            // id's waits reads the group.)
                            self.replaced(group_id, old, &member_id, session);
                            return Ok(Joining::Done(joined));
                        }
                    }
                    replaced
                }
                _ => None,
            };
            let known = g.members.contains_key(&member_id);
            let was_pending = g.pending.remove(&member_id);
            if !known && !was_pending && !first_join {
                return Err(ResponseError::UnknownMemberId);
            }
            if !known && g.members.len() + g.pending.len() >= self.max_size {
                return Err(ResponseError::GroupMaxSizeReached);
            }
            if !g.members.is_empty() && g.protocol_type != protocol_type {
                return Err(ResponseError::InconsistentGroupProtocol);
            }
            g.protocol_type = protocol_type;
            // The first join of an empty group starts Kafka's initial
            // delay: the members starting together join one generation.
            let starts_initial = g.phase == Phase::Empty && !self.initial_delay.is_zero();
            if starts_initial {
                g.initial = true;
                g.new_member_added = false;
                g.initial_remaining = rebalance.saturating_sub(self.initial_delay.min(rebalance));
            } else if g.initial && !known {
                g.new_member_added = true;
            }
            // A new member, or a rejoin of a settled group: rebalance.
            if g.phase != Phase::Joining {
                g.start_rebalance();
            }
            if let Some(instance) = &instance {
                g.static_members.insert(instance.clone(), member_id.clone());
            }
            g.members.insert(member_id.clone(), member);
            // As in Kafka, the first member to join leads, while it stays.
            if !g.members.contains_key(&g.leader) {
                g.leader.clone_from(&member_id);
            }
            g.phase = Phase::Joining;
            let all = g.members.values().all(|m| m.joined) && !g.initial;
            let generation = g.generation;
            if all {
                g.complete_join();
            }
            (generation, all, starts_initial, replaced)
        };
        match replaced {
            Some(old) => self.replaced(group_id, &old, &member_id, session),
            None => self.touch(group_id, &member_id, session),
        }
        if starts_initial {
            // The group's own timer, not this member's wait: the delay
            // ends (or is extended) whatever becomes of this request.
            let delay = self.initial_delay.min(rebalance);
            let _ = self.initial_delays.set(group_id.to_string(), (), delay);
        }
        if complete_now {
            let _ = self.waits.check_and_complete(group_id);
            return Ok(Joining::Done(group.lock().joined(&member_id)));
        }
        let joined = Joined {
            error: None,
            generation: waiting_generation,
            protocol: String::new(),
            leader: String::new(),
            member_id,
            members: Vec::new(),
        };
        self.park_join(&group, group_id, joined, rebalance)
    }

    /// A static member's instance moved from `old` to `new`: the old id's
    /// session ends, the new one's starts, and the old id's waits end
    /// (answered FENCED_INSTANCE_ID).
    fn replaced(&self, group_id: &str, old: &str, new: &str, session: Duration) {
        let _ = self.sessions.remove(&SessionKey::new(group_id, old));
        self.touch(group_id, new, session);
        let _ = self.waits.check_and_complete(group_id);
    }

    /// A fresh member id, `prefix-UUID` as Kafka makes it (the UUID's bits
    /// from the process's random hasher keys and a count).
    fn member_id(&self, prefix: &str) -> String {
        let n = self.next_member.fetch_add(1, Ordering::Relaxed);
        let (high, low) = (self.ids.hash_one(n), self.ids.hash_one(!n));
        format!(
            "{prefix}-{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
            high >> 32,
            (high >> 16) & 0xffff,
            high & 0xfff,
            0x8000 | (low >> 48) & 0x3fff,
            low & 0xffff_ffff_ffff,
        )
    }

    /// Parks `joined`'s member's join on its group for `delay`.
    ///
    /// # Errors
    ///
    /// COORDINATOR_NOT_AVAILABLE when the purgatory is shut down.
    fn park_join(
        &self,
        group: &Arc<Mutex<Group>>,
        group_id: &str,
        joined: Joined,
        delay: Duration,
    ) -> Result<Joining, ResponseError> {
        let wait = GroupWait {
            group: Arc::clone(group),
            generation: joined.generation,
            member: joined.member_id.clone(),
            stage: Stage::Join,
            delay,
        };
        let parked = self
            .waits
            .park(wait, [group_id.to_string()])
            .map_err(|_| ResponseError::CoordinatorNotAvailable)?;
        Ok(Joining::Waiting { joined, parked })
    }

    /// After a parked join resolved: completes the rebalance if its timeout
    /// passed first (dropping members that did not rejoin), and answers;
    /// a member no longer in the group is UNKNOWN_MEMBER_ID, or
    /// FENCED_INSTANCE_ID if its `instance` joined again under another id.
    pub fn joined(
        &self,
        group_id: &str,
        waited: &Joined,
        instance: Option<&str>,
        completion: Option<Completion>,
    ) -> Joined {
        let group = self.group(group_id);
        let expired = matches!(completion, Some(Completion::Expired));
        {
            let mut g = group.lock();
            if expired && g.generation == waited.generation && g.phase == Phase::Joining {
                g.complete_join();
            }
        }
        if expired {
            let _ = self.waits.check_and_complete(group_id);
        }
        let g = group.lock();
        if let Err(error) = g.check_member(&waited.member_id, instance) {
            let mut gone = waited.clone();
            gone.error = Some(error);
            return gone;
        }
        g.joined(&waited.member_id)
    }

    /// The initial delay of `group_id`'s first rebalance passed: another
    /// delay if a new member joined during it (and the rebalance timeout
    /// leaves room), else the rebalance completes with the members that
    /// joined. Runs on the timer's thread; no user code.
    fn initial_delay_passed(&self, group_id: &str) {
        let Some(group) = self.find(group_id) else {
            return;
        };
        let again = {
            let mut g = group.lock();
            if !g.initial || g.phase != Phase::Joining {
                return;
            }
            let delay = self.initial_delay.min(g.initial_remaining);
            if g.new_member_added && !delay.is_zero() {
                g.initial_remaining -= delay;
                g.new_member_added = false;
                Some(delay)
            } else {
                g.complete_join();
                None
            }
        };
        match again {
            Some(delay) => {
                let _ = self.initial_delays.set(group_id.to_string(), (), delay);
            }
            None => {
                let _ = self.waits.check_and_complete(group_id);
            }
        }
    }
}
