//! The coordinator's committed offsets, and what ListGroups, DescribeGroups
//! and the stats line show of its groups.

use std::sync::Arc;

use parking_lot::Mutex;

use super::group::Group;
use super::{
    Committed, Coordinator, GroupDescription, GroupFigures, GroupListing, MemberDescription,
};
use crate::log::TopicPartition;

impl Coordinator {
    /// Puts back the commits a data directory kept.
    pub fn restore(&self, commits: Vec<crate::offsets::GroupCommit>) {
        for commit in commits {
            self.commit(&commit.group, commit.committed);
        }
    }

    /// OffsetCommit of one partition: its offset and metadata string.
    pub fn commit(&self, group_id: &str, committed: Committed) {
        let at = TopicPartition::new(committed.topic.clone(), committed.partition);
        self.group(group_id).lock().offsets.insert(at, committed);
    }

    /// Forgets every group's commits of `topic` (deleted).
    pub fn forget_topic(&self, topic: &str) {
        let groups: Vec<Arc<Mutex<Group>>> = self.groups.lock().values().cloned().collect();
        for group in groups {
            group.lock().offsets.retain(|at, _| at.topic != topic);
        }
    }

    /// The committed offset of a partition, if any.
    pub fn committed(&self, group_id: &str, at: &TopicPartition) -> Option<Committed> {
        self.find(group_id)?.lock().offsets.get(at).cloned()
    }

    /// Every committed offset of a group.
    pub fn all_committed(&self, group_id: &str) -> Vec<Committed> {
        self.find(group_id)
            .map(|g| g.lock().offsets.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Every group, as ListGroups shows them.
    pub fn list(&self) -> Vec<GroupListing> {
        let groups: Vec<(String, Arc<Mutex<Group>>)> = self
            .groups
            .lock()
            .iter()
            .map(|(id, g)| (id.clone(), Arc::clone(g)))
            .collect();
        groups
            .into_iter()
            .map(|(group_id, g)| {
                let g = g.lock();
                GroupListing {
                    group_id,
                    protocol_type: g.protocol_type.clone(),
                    state: g.phase.state(),
                }
            })
            .collect()
    }

    /// The group `id`, as DescribeGroups shows it, if it exists.
    pub fn describe(&self, id: &str) -> Option<GroupDescription> {
        let group = self.find(id)?;
        let g = group.lock();
        Some(GroupDescription {
            state: g.phase.state(),
            protocol_type: g.protocol_type.clone(),
            protocol: g.protocol.clone(),
            members: g
                .members
                .iter()
                .map(|(member_id, m)| MemberDescription {
                    member_id: member_id.clone(),
                    group_instance_id: m.instance.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    metadata: m
                        .protocols
                        .iter()
                        .find(|p| p.name == g.protocol)
                        .map(|p| p.metadata.clone())
                        .unwrap_or_default(),
                    assignment: m.assignment.clone().unwrap_or_default(),
                })
                .collect(),
        })
    }

    /// The group purgatory's figures.
    pub fn figures(&self) -> GroupFigures {
        let m = self.waits.metrics();
        GroupFigures {
            parked: self.waits.delayed(),
            satisfied: m.satisfied,
            expired: m.expired,
        }
    }

    /// Members whose session expired so far.
    pub fn sessions_expired(&self) -> u64 {
        self.sessions.metrics().expired
    }
}
