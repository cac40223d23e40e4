//! One group's state: its members, its phase in a rebalance, and the
//! wait of a JoinGroup or SyncGroup on it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes};
use kafka_protocol::ResponseError;
use parking_lot::Mutex;
use purgatorio::{Completion, DelayedOperation};

use super::types::{Committed, Joined, MemberMetadata, Protocol};
use crate::log::TopicPartition;

/// A member of a group.
#[derive(Clone)]
pub(super) struct Member {
    /// The protocols it offers, in its order of preference.
    pub(super) protocols: Vec<Protocol>,
    /// Its session timeout.
    pub(super) session: Duration,
    /// Its rebalance timeout.
    pub(super) rebalance: Duration,
    /// Whether it (re)joined the rebalance under way.
    pub(super) joined: bool,
    /// Its assignment in the current generation, once the leader sent it.
    pub(super) assignment: Option<Bytes>,
    /// The client id its JoinGroup carried.
    pub(super) client_id: String,
    /// The address it joined from.
    pub(super) client_host: String,
    /// Its `group.instance.id`, if it is a static member (KIP-345).
    pub(super) instance: Option<String>,
}

/// Where a group is.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Phase {
    Empty,
    /// Waiting for members to (re)join.
    Joining,
    /// Joined; waiting for the leader's assignment.
    Syncing,
    Stable,
}

impl Phase {
    /// The phase in Kafka's words (ListGroups, DescribeGroups).
    pub(super) fn state(self) -> &'static str {
        match self {
            Phase::Empty => "Empty",
            Phase::Joining => "PreparingRebalance",
            Phase::Syncing => "CompletingRebalance",
            Phase::Stable => "Stable",
        }
    }
}

/// One group's state.
pub(super) struct Group {
    /// Where it is in its rebalance.
    pub(super) phase: Phase,
    /// Its generation, bumped by every completed rebalance.
    pub(super) generation: i32,
    /// The members' protocol type ("consumer").
    pub(super) protocol_type: String,
    /// The protocol chosen at the last rebalance.
    pub(super) protocol: String,
    /// The leader's member id.
    pub(super) leader: String,
    /// Its members, by id.
    pub(super) members: BTreeMap<String, Member>,
    /// Member ids handed out with MEMBER_ID_REQUIRED, not yet joined
    /// with (each goes when it joins or its session passes).
    pub(super) pending: HashSet<String>,
    /// The static members' ids, by `group.instance.id`.
    pub(super) static_members: HashMap<String, String>,
    /// Committed offsets.
    pub(super) offsets: HashMap<TopicPartition, Committed>,
    /// Whether the rebalance under way is the initial one of an empty
    /// group, completed only once the initial delay passed.
    pub(super) initial: bool,
    /// Whether a new member joined since the initial delay started or was
    /// last extended.
    pub(super) new_member_added: bool,
    /// How much longer the initial delay may be extended (what is left of
    /// the rebalance timeout).
    pub(super) initial_remaining: Duration,
}

impl Group {
    /// An empty group.
    pub(super) fn new() -> Group {
        Group {
            phase: Phase::Empty,
            generation: 0,
            protocol_type: String::new(),
            protocol: String::new(),
            leader: String::new(),
            members: BTreeMap::new(),
            pending: HashSet::new(),
            static_members: HashMap::new(),
            offsets: HashMap::new(),
            initial: false,
            new_member_added: false,
            initial_remaining: Duration::ZERO,
        }
    }

    /// Starts a rebalance: every member must join again.
    pub(super) fn start_rebalance(&mut self) {
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

    /// Removes `member_id` (whose session ended, or who left); whether it
    /// was a member. The others rebalance; a rebalance under way goes on
    /// without it (those who rejoined stay rejoined), and completes if
    /// every member left has rejoined.
    pub(super) fn remove_member(&mut self, member_id: &str) -> bool {
        let Some(member) = self.members.remove(member_id) else {
            return false;
        };
        if let Some(instance) = member.instance {
            self.static_members.remove(&instance);
        }
        if self.phase != Phase::Joining {
            self.start_rebalance();
        } else if !self.initial && self.members.values().all(|m| m.joined) {
            self.complete_join();
        }
        true
    }

    /// `member_id`, checked against the static member of `instance` if it
    /// names one.
    ///
    /// # Errors
    ///
    /// UNKNOWN_MEMBER_ID for an id (or an instance) the group does not
    /// have; FENCED_INSTANCE_ID for an id `instance` no longer has.
    pub(super) fn check_member(
        &self,
        member_id: &str,
        instance: Option<&str>,
    ) -> Result<&Member, ResponseError> {
        if let Some(instance) = instance {
            match self.static_members.get(instance) {
                None => return Err(ResponseError::UnknownMemberId),
                Some(id) if id != member_id => return Err(ResponseError::FencedInstanceId),
                Some(_) => {}
            }
        }
        self.members
            .get(member_id)
            .ok_or(ResponseError::UnknownMemberId)
    }

    /// Completes the rebalance under way with the members that joined,
    /// and the static members that did not (as Kafka keeps them: they
    /// come back with their `group.instance.id`, or their session ends).
    /// With no member joined it stays under way, as Kafka postpones it.
    pub(super) fn complete_join(&mut self) {
        self.initial = false;
        self.members.retain(|_, m| m.joined || m.instance.is_some());
        if self.members.is_empty() {
            self.phase = Phase::Empty;
            return;
        }
        // The leader stays if it rejoined; else the first member (by id)
        // that did, as Kafka elects another when its leader did not.
        let leader = match self.members.get(&self.leader) {
            Some(m) if m.joined => self.leader.clone(),
            _ => match self.members.iter().find(|(_, m)| m.joined) {
                Some((id, _)) => id.clone(),
                None => return,
            },
        };
        self.generation += 1;
        self.leader = leader;
        self.protocol = self.select_protocol();
        self.phase = Phase::Syncing;
    }

    /// The protocol a rebalance would choose now: the leader's first that
    /// every member offers.
    pub(super) fn select_protocol(&self) -> String {
        let Some(leader) = self.members.get(&self.leader) else {
            return String::new();
        };
        leader
            .protocols
            .iter()
            .map(|p| p.name.clone())
            .find(|name| {
                self.members
                    .values()
                    .all(|m| m.protocols.iter().any(|p| p.name == *name))
            })
            .unwrap_or_default()
    }

    /// Moves static member `instance` from `old_id` to `new_id` (it
    /// restarted and joined again), with what it joined with now; its
    /// assignment stays. The id it had, if it was a member.
    pub(super) fn replace_static(
        &mut self,
        instance: &str,
        new_id: &str,
        member: Member,
    ) -> Option<String> {
        let old_id = self.static_members.get(instance)?.clone();
        let old = self.members.remove(&old_id)?;
        self.members.insert(
            new_id.to_string(),
            Member {
                assignment: old.assignment,
                ..member
            },
        );
        self.static_members
            .insert(instance.to_string(), new_id.to_string());
        if self.leader == old_id {
            self.leader = new_id.to_string();
        }
        Some(old_id)
    }

    /// Which of `asked` its members subscribe to, read from their metadata
    /// for the group's protocol (a consumer group's
    /// `ConsumerProtocolSubscription`); `None` if a member's cannot be
    /// read, or the group is not a consumer group. Only names asked for
    /// are kept: what is made is bounded by the request, whatever a
    /// member's metadata says.
    pub(super) fn subscribed_among(&self, asked: &HashSet<&str>) -> Option<HashSet<String>> {
        if self.protocol_type != "consumer" {
            return None;
        }
        let mut topics = HashSet::new();
        for member in self.members.values() {
            let metadata = &member
                .protocols
                .iter()
                .find(|p| p.name == self.protocol)?
                .metadata;
            for_each_subscribed(metadata, |topic| {
                if asked.contains(topic) && !topics.contains(topic) {
                    topics.insert(topic.to_string());
                }
            })?;
        }
        Some(topics)
    }

    /// What `member_id` learns of the generation just completed (the
    /// leader also gets every member's metadata).
    pub(super) fn joined(&self, member_id: &str) -> Joined {
        let members = if member_id == self.leader {
            self.members
                .iter()
                .map(|(id, m)| MemberMetadata {
                    member_id: id.clone(),
                    group_instance_id: m.instance.clone(),
                    metadata: m
                        .protocols
                        .iter()
                        .find(|p| p.name == self.protocol)
                        .map(|p| p.metadata.clone())
                        .unwrap_or_default(),
                })
                .collect()
        } else {
            Vec::new()
        };
        Joined {
            error: None,
            generation: self.generation,
            protocol: self.protocol.clone(),
            leader: self.leader.clone(),
            member_id: member_id.to_string(),
            members,
        }
    }
}

/// Calls `topic` with each topic of a `ConsumerProtocolSubscription` (a
/// version `i16`, then an array of `i16`-length strings; what follows is
/// ignored), read by hand and in place: the bytes are the client's, never
/// pre-scanned, and a decoder would reserve room for the array's count
/// before reading it. `None` if they cannot be read (the names already
/// given then mean nothing): a negative version, a count beyond the bytes
/// left, a null or non-UTF-8 name, or too few bytes.
fn for_each_subscribed(mut metadata: &[u8], mut topic: impl FnMut(&str)) -> Option<()> {
    if metadata.remaining() < 6 || metadata.get_i16() < 0 {
        return None;
    }
    let count = usize::try_from(metadata.get_i32()).ok()?;
    // Each name takes at least its two length bytes.
    if count > metadata.remaining() / 2 {
        return None;
    }
    for _ in 0..count {
        if metadata.remaining() < 2 {
            return None;
        }
        let len = usize::try_from(metadata.get_i16()).ok()?;
        let name = metadata.get(..len)?;
        topic(std::str::from_utf8(name).ok()?);
        metadata.advance(len);
    }
    Some(())
}

/// What a [`GroupWait`] waits for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Stage {
    /// A JoinGroup: the rebalance to complete.
    Join,
    /// A SyncGroup: the leader's assignment.
    Sync,
}

/// A JoinGroup or SyncGroup waiting on its group; it also ends when its
/// member leaves the group (it left, or its static instance joined again
/// under a new id).
pub struct GroupWait {
    /// The group.
    pub(super) group: Arc<Mutex<Group>>,
    /// For a join: the generation it waits to pass. For a sync: the
    /// generation whose assignment it waits for.
    pub(super) generation: i32,
    /// The member waiting.
    pub(super) member: String,
    /// What it waits for.
    pub(super) stage: Stage,
    /// Its deadline: the rebalance timeout.
    pub(super) delay: Duration,
}

impl DelayedOperation for GroupWait {
    fn delay(&self) -> Duration {
        self.delay
    }
    fn try_complete(&mut self) -> bool {
        let group = self.group.lock();
        let Some(member) = group.members.get(&self.member) else {
            return true;
        };
        match self.stage {
            Stage::Join => group.generation > self.generation || group.phase == Phase::Empty,
            Stage::Sync => group.generation != self.generation || member.assignment.is_some(),
        }
    }
    fn on_complete(&mut self, _: Completion) {}
}

#[cfg(test)]
mod tests {
    use super::for_each_subscribed;

    /// The topics `metadata` names, in order, if it can be read.
    fn subscription_topics(metadata: &[u8]) -> Option<Vec<String>> {
        let mut topics = Vec::new();
        for_each_subscribed(metadata, |t| topics.push(t.to_string()))?;
        Some(topics)
    }
    use bytes::BytesMut;
    use kafka_protocol::messages::ConsumerProtocolSubscription;
    use kafka_protocol::protocol::{Encodable, StrBytes};

    fn encoded(version: i16, topics: &[&str]) -> Vec<u8> {
        let subscription = ConsumerProtocolSubscription::default().with_topics(
            topics
                .iter()
                .map(|t| StrBytes::from_string(t.to_string()))
                .collect(),
        );
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&version.to_be_bytes());
        subscription.encode(&mut buf, version).unwrap();
        buf.to_vec()
    }

    #[test]
    fn a_subscription_encoded_by_kafka_protocol_is_read_in_every_version() {
        for version in 0..=3 {
            let topics = subscription_topics(&encoded(version, &["a", "bb"]));
            assert_eq!(topics, Some(vec!["a".to_string(), "bb".to_string()]));
        }
    }

    #[test]
    fn a_count_beyond_the_bytes_left_is_unreadable_not_reserved() {
        assert_eq!(subscription_topics(&[0, 0, 0x7f, 0xff, 0xff, 0xff]), None);
        assert_eq!(subscription_topics(&[0, 0, 0, 0, 0, 2, 0, 0]), None);
    }

    #[test]
    fn short_null_or_negative_parts_are_unreadable() {
        assert_eq!(subscription_topics(&[]), None);
        assert_eq!(subscription_topics(&[0, 0, 0]), None);
        assert_eq!(subscription_topics(&[0xff, 0xff, 0, 0, 0, 0]), None);
        assert_eq!(subscription_topics(&[0, 0, 0xff, 0xff, 0xff, 0xff]), None);
        assert_eq!(subscription_topics(&[0, 0, 0, 0, 0, 1, 0xff, 0xff]), None);
        assert_eq!(subscription_topics(&[0, 0, 0, 0, 0, 1, 0, 3, b'a']), None);
        assert_eq!(subscription_topics(&[0, 0, 0, 0, 0, 1, 0, 1, 0xff]), None);
        assert_eq!(subscription_topics(&[0, 0, 0, 0, 0, 0]), Some(vec![]));
    }
}
