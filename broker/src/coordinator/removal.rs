//! What the admin requests remove: a whole group (DeleteGroups) and a
//! group's commits of some partitions (OffsetDelete), under Kafka's rules.
//! The callers write what was removed to the offsets log.

use kafka_protocol::ResponseError;

use super::group::Phase;
use super::Coordinator;
use crate::log::TopicPartition;

/// What OffsetDelete did to one partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OffsetRemoval {
    /// Its commit was deleted.
    Deleted,
    /// It had no commit: nothing to delete (no error either, as in Kafka).
    NoCommit,
    /// A member subscribes to its topic: its commit stays
    /// (GROUP_SUBSCRIBED_TO_TOPIC).
    Subscribed,
}

impl Coordinator {
    /// DeleteGroups of `group_id`: an empty group goes, its commits with
    /// it; its id is then unknown (DescribeGroups: "Dead").
    ///
    /// # Errors
    ///
    /// INVALID_GROUP_ID for an empty id, GROUP_ID_NOT_FOUND for a group
    /// that does not exist, NON_EMPTY_GROUP for one with members.
    pub fn delete_group(&self, group_id: &str) -> Result<(), ResponseError> {
        if group_id.is_empty() {
            return Err(ResponseError::InvalidGroupId);
        }
        // The groups' lock, then the group's: a join that finds the group
        // from now on makes a new one. (One that found it before and locks
        // it after joins the removed group; its next request is
        // UNKNOWN_MEMBER_ID, and it joins again.)
        let mut groups = self.groups.lock();
        let group = groups.get(group_id).ok_or(ResponseError::GroupIdNotFound)?;
        {
            let g = group.lock();
            if !g.members.is_empty() || g.phase != Phase::Empty {
                return Err(ResponseError::NonEmptyGroup);
            }
        }
        groups.remove(group_id);
        Ok(())
    }

    /// OffsetDelete of `partitions` (each of an existing topic): in an
    /// empty group every commit named goes; in a consumer group with
    /// members, those of topics no member subscribes to. One outcome per
    /// partition, in order.
    ///
    /// # Errors
    ///
    /// INVALID_GROUP_ID for an empty id, GROUP_ID_NOT_FOUND for a group
    /// that does not exist; NON_EMPTY_GROUP
    /// for a group with members whose subscriptions cannot be read (not a
    /// consumer group).
    pub fn delete_offsets(
        &self,
        group_id: &str,
        partitions: &[TopicPartition],
    ) -> Result<Vec<OffsetRemoval>, ResponseError> {
        if group_id.is_empty() {
            return Err(ResponseError::InvalidGroupId);
        }
        let group = self.find(group_id).ok_or(ResponseError::GroupIdNotFound)?;
        let mut g = group.lock();
        let subscribed = if g.members.is_empty() {
            None
        } else {
            let asked = partitions.iter().map(|at| at.topic.as_str()).collect();
            Some(
                g.subscribed_among(&asked)
                    .ok_or(ResponseError::NonEmptyGroup)?,
            )
        };
        Ok(partitions
            .iter()
            .map(|at| {
                if subscribed.as_ref().is_some_and(|s| s.contains(&at.topic)) {
                    OffsetRemoval::Subscribed
                } else if g.offsets.remove(at).is_some() {
                    OffsetRemoval::Deleted
                } else {
                    OffsetRemoval::NoCommit
                }
            })
            .collect())
    }
}
