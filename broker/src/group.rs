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

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use purgatorio::{Completion, DelayedOperation, KeyedTimer, Parked, Purgatory, Timer};

/// Kafka's error codes for groups.
pub mod code {
    pub const ILLEGAL_GENERATION: i16 = 22;
    pub const INCONSISTENT_GROUP_PROTOCOL: i16 = 23;
    pub const UNKNOWN_MEMBER_ID: i16 = 25;
    pub const INVALID_SESSION_TIMEOUT: i16 = 26;
    pub const REBALANCE_IN_PROGRESS: i16 = 27;
    pub const COORDINATOR_NOT_AVAILABLE: i16 = 15;
}

/// A member of a group.
#[derive(Clone)]
struct Member {
    protocols: Vec<(String, Bytes)>,
    session: Duration,
    rebalance: Duration,
    /// Whether it (re)joined the rebalance under way.
    joined: bool,
    assignment: Option<Bytes>,
}

/// Where a group is.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    Empty,
    /// Waiting for members to (re)join.
    Joining,
    /// Joined; waiting for the leader's assignment.
    Syncing,
    Stable,
}

/// What a JoinGroup learns when its rebalance completes.
#[derive(Clone)]
pub struct Joined {
    pub error: i16,
    pub generation: i32,
    pub protocol: String,
    pub leader: String,
    pub member_id: String,
    /// The members and their metadata, for the leader only.
    pub members: Vec<(String, Bytes)>,
}

/// One group's state.
struct Group {
    phase: Phase,
    generation: i32,
    protocol_type: String,
    protocol: String,
    leader: String,
    members: BTreeMap<String, Member>,
    /// Committed offsets: (topic, partition) → offset.
    offsets: HashMap<(String, i32), i64>,
}

impl Group {
    fn new() -> Group {
        Group {
            phase: Phase::Empty,
            generation: 0,
            protocol_type: String::new(),
            protocol: String::new(),
            leader: String::new(),
            members: BTreeMap::new(),
            offsets: HashMap::new(),
        }
    }

    /// Starts a rebalance: every member must join again.
    fn start_rebalance(&mut self) {
        self.phase = if self.members.is_empty() {
            Phase::Empty
        } else {
            Phase::Joining
        };
        for member in self.members.values_mut() {
            member.joined = false;
            member.assignment = None;
        }
    }

    /// Completes the rebalance under way with the members that joined.
    fn complete_join(&mut self) {
        self.members.retain(|_, m| m.joined);
        if self.members.is_empty() {
            self.phase = Phase::Empty;
            return;
        }
        self.generation += 1;
        // The first protocol of the leader that every member offers.
        let leader = self.members.keys().next().cloned().unwrap_or_default();
        let first = &self.members[&leader].protocols;
        self.protocol = first
            .iter()
            .map(|(name, _)| name.clone())
            .find(|name| {
                self.members
                    .values()
                    .all(|m| m.protocols.iter().any(|(n, _)| n == name))
            })
            .unwrap_or_default();
        self.leader = leader;
        self.phase = Phase::Syncing;
    }

    fn joined(&self, member_id: &str) -> Joined {
        let members = if member_id == self.leader {
            self.members
                .iter()
                .map(|(id, m)| {
                    let metadata = m
                        .protocols
                        .iter()
                        .find(|(n, _)| *n == self.protocol)
                        .map(|(_, md)| md.clone())
                        .unwrap_or_default();
                    (id.clone(), metadata)
                })
                .collect()
        } else {
            Vec::new()
        };
        Joined {
            error: 0,
            generation: self.generation,
            protocol: self.protocol.clone(),
            leader: self.leader.clone(),
            member_id: member_id.to_string(),
            members,
        }
    }
}

/// A JoinGroup or SyncGroup waiting on its group.
pub struct GroupWait {
    group: Arc<Mutex<Group>>,
    /// For a join: the generation it waits to pass. For a sync: the
    /// generation whose assignment it waits for.
    generation: i32,
    sync_of: Option<String>,
    delay: Duration,
}

impl DelayedOperation for GroupWait {
    fn delay(&self) -> Duration {
        self.delay
    }
    fn try_complete(&mut self) -> bool {
        let group = self.group.lock();
        match &self.sync_of {
            None => group.generation > self.generation || group.phase == Phase::Empty,
            Some(member) => {
                group.generation != self.generation
                    || group
                        .members
                        .get(member)
                        .is_none_or(|m| m.assignment.is_some())
            }
        }
    }
    fn on_complete(&mut self, _: Completion) {}
}

/// The coordinator of every group.
pub struct Coordinator {
    groups: Mutex<HashMap<String, Arc<Mutex<Group>>>>,
    waits: Purgatory<String, GroupWait>,
    sessions: KeyedTimer<(String, String), ()>,
    next_member: AtomicU64,
}

impl Coordinator {
    /// A coordinator on `timer`.
    pub fn new(timer: &Timer) -> Arc<Coordinator> {
        Arc::new_cyclic(|me: &Weak<Coordinator>| {
            let me = me.clone();
            let sessions =
                KeyedTimer::on_timer(timer, move |(group, member): (String, String), ()| {
                    if let Some(coordinator) = me.upgrade() {
                        coordinator.expire(&group, &member);
                    }
                });
            Coordinator {
                groups: Mutex::default(),
                waits: Purgatory::builder()
                    .name("group")
                    .shared_timer(timer)
                    .build()
                    .expect("group purgatory"),
                sessions,
                next_member: AtomicU64::new(1),
            }
        })
    }

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
        let group = self.group(group_id);
        {
            let mut g = group.lock();
            if g.members.remove(member).is_none() {
                return;
            }
            g.start_rebalance();
        }
        let _ = self.waits.check_and_complete(group_id);
    }

    /// Resets `member`'s session.
    fn touch(&self, group_id: &str, member: &str, session: Duration) {
        let key = (group_id.to_string(), member.to_string());
        if !self.sessions.reset(&key, session) {
            let _ = self.sessions.set(key, (), session);
        }
    }

    /// JoinGroup: returns the answer now, or a parked wait to await first.
    #[allow(clippy::too_many_arguments)]
    pub fn join(
        &self,
        group_id: &str,
        member_id: &str,
        protocol_type: &str,
        protocols: Vec<(String, Bytes)>,
        session: Duration,
        rebalance: Duration,
    ) -> Result<(Joined, Option<Parked<GroupWait>>), i16> {
        if session < Duration::from_millis(1) || session > Duration::from_secs(1800) {
            return Err(code::INVALID_SESSION_TIMEOUT);
        }
        let group = self.group(group_id);
        let member_id = if member_id.is_empty() {
            format!(
                "member-{}",
                self.next_member.fetch_add(1, Ordering::Relaxed)
            )
        } else {
            member_id.to_string()
        };
        let (waiting_generation, complete_now) = {
            let mut g = group.lock();
            if !g.members.is_empty() && g.protocol_type != protocol_type {
                return Err(code::INCONSISTENT_GROUP_PROTOCOL);
            }
            g.protocol_type = protocol_type.to_string();
            if !g.members.contains_key(&member_id) || g.phase != Phase::Joining {
                // A new member, or a rejoin of a settled group: rebalance.
                if g.phase != Phase::Joining {
                    g.start_rebalance();
                }
            }
            g.members.insert(
                member_id.clone(),
                Member {
                    protocols,
                    session,
                    rebalance,
                    joined: true,
                    assignment: None,
                },
            );
            g.phase = Phase::Joining;
            let all = g.members.values().all(|m| m.joined);
            let generation = g.generation;
            if all {
                g.complete_join();
            }
            (generation, all)
        };
        self.touch(group_id, &member_id, session);
        if complete_now {
            let _ = self.waits.check_and_complete(group_id);
            return Ok((group.lock().joined(&member_id), None));
        }
        let wait = GroupWait {
            group: Arc::clone(&group),
            generation: waiting_generation,
            sync_of: None,
            delay: rebalance,
        };
        let parked = self
            .waits
            .park(wait, [group_id.to_string()])
            .map_err(|_| code::COORDINATOR_NOT_AVAILABLE)?;
        let joined = Joined {
            error: 0,
            generation: waiting_generation,
            protocol: String::new(),
            leader: String::new(),
            member_id,
            members: Vec::new(),
        };
        Ok((joined, Some(parked)))
    }

    /// After a parked join resolved: completes the rebalance if its timeout
    /// passed first (dropping members that did not rejoin), and answers.
    pub fn joined(
        &self,
        group_id: &str,
        waited: &Joined,
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
        if !g.members.contains_key(&waited.member_id) {
            let mut gone = waited.clone();
            gone.error = code::UNKNOWN_MEMBER_ID;
            return gone;
        }
        g.joined(&waited.member_id)
    }

    /// SyncGroup: the leader's assignments are stored; a member's own is
    /// returned now, or a parked wait for it.
    pub fn sync(
        &self,
        group_id: &str,
        member_id: &str,
        generation: i32,
        assignments: Vec<(String, Bytes)>,
    ) -> Result<Result<Bytes, Parked<GroupWait>>, i16> {
        let group = self.group(group_id);
        let session = {
            let mut g = group.lock();
            let Some(member) = g.members.get(member_id) else {
                return Err(code::UNKNOWN_MEMBER_ID);
            };
            let session = member.session;
            if g.generation != generation {
                return Err(code::ILLEGAL_GENERATION);
            }
            if g.phase == Phase::Joining {
                return Err(code::REBALANCE_IN_PROGRESS);
            }
            if member_id == g.leader && g.phase == Phase::Syncing {
                for (id, assignment) in assignments {
                    if let Some(m) = g.members.get_mut(&id) {
                        m.assignment = Some(assignment);
                    }
                }
                for m in g.members.values_mut() {
                    m.assignment.get_or_insert_with(Bytes::new);
                }
                g.phase = Phase::Stable;
            }
            session
        };
        self.touch(group_id, member_id, session);
        let _ = self.waits.check_and_complete(group_id);
        if let Some(assignment) = group
            .lock()
            .members
            .get(member_id)
            .and_then(|m| m.assignment.clone())
        {
            return Ok(Ok(assignment));
        }
        let rebalance = group
            .lock()
            .members
            .get(member_id)
            .map_or(Duration::from_secs(30), |m| m.rebalance);
        let wait = GroupWait {
            group,
            generation,
            sync_of: Some(member_id.to_string()),
            delay: rebalance,
        };
        self.waits
            .park(wait, [group_id.to_string()])
            .map(Err)
            .map_err(|_| code::COORDINATOR_NOT_AVAILABLE)
    }

    /// After a parked sync resolved: the member's assignment, or why not.
    pub fn synced(&self, group_id: &str, member_id: &str, generation: i32) -> Result<Bytes, i16> {
        let group = self.group(group_id);
        let g = group.lock();
        if g.generation != generation {
            return Err(code::REBALANCE_IN_PROGRESS);
        }
        match g.members.get(member_id) {
            None => Err(code::UNKNOWN_MEMBER_ID),
            Some(m) => m.assignment.clone().ok_or(code::REBALANCE_IN_PROGRESS),
        }
    }

    /// Heartbeat: resets the session; tells a member to rejoin when a
    /// rebalance is under way.
    pub fn heartbeat(&self, group_id: &str, member_id: &str, generation: i32) -> i16 {
        let group = self.group(group_id);
        let (error, session) = {
            let g = group.lock();
            match g.members.get(member_id) {
                None => (code::UNKNOWN_MEMBER_ID, None),
                Some(m) if g.phase == Phase::Joining => {
                    (code::REBALANCE_IN_PROGRESS, Some(m.session))
                }
                Some(m) if g.generation != generation => {
                    (code::ILLEGAL_GENERATION, Some(m.session))
                }
                Some(m) => (0, Some(m.session)),
            }
        };
        if let Some(session) = session {
            self.touch(group_id, member_id, session);
        }
        error
    }

    /// LeaveGroup: the member goes at once; the others rebalance.
    pub fn leave(&self, group_id: &str, member_id: &str) -> i16 {
        let _ = self
            .sessions
            .remove(&(group_id.to_string(), member_id.to_string()));
        let group = self.group(group_id);
        {
            let mut g = group.lock();
            if g.members.remove(member_id).is_none() {
                return code::UNKNOWN_MEMBER_ID;
            }
            g.start_rebalance();
        }
        let _ = self.waits.check_and_complete(group_id);
        0
    }

    /// OffsetCommit of one partition.
    pub fn commit(&self, group_id: &str, topic: &str, partition: i32, offset: i64) {
        self.group(group_id)
            .lock()
            .offsets
            .insert((topic.to_string(), partition), offset);
    }

    /// The committed offset of a partition, or -1.
    pub fn committed(&self, group_id: &str, topic: &str, partition: i32) -> i64 {
        self.group(group_id)
            .lock()
            .offsets
            .get(&(topic.to_string(), partition))
            .copied()
            .unwrap_or(-1)
    }

    /// Every committed (topic, partition, offset) of a group.
    pub fn all_committed(&self, group_id: &str) -> Vec<(String, i32, i64)> {
        self.group(group_id)
            .lock()
            .offsets
            .iter()
            .map(|((t, p), o)| (t.clone(), *p, *o))
            .collect()
    }

    /// Groups' purgatory figures: (parked, satisfied, expired).
    pub fn figures(&self) -> (usize, u64, u64) {
        let m = self.waits.metrics();
        (self.waits.delayed(), m.satisfied, m.expired)
    }

    /// Members whose session expired so far.
    pub fn sessions_expired(&self) -> u64 {
        self.sessions.metrics().expired
    }
}
