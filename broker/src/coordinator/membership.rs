//! What a group's members ask once joined: their assignment (SyncGroup),
//! to stay (Heartbeat), to go (LeaveGroup); and whether a static member's
//! id is still its instance's (every request of a static member).

use bytes::Bytes;
use kafka_protocol::ResponseError;

use super::group::{GroupWait, Phase, Stage};
use super::{Coordinator, MemberMetadata, Membership, SessionKey, Syncing, DEFAULT_REBALANCE};

impl Coordinator {
    /// SyncGroup: the leader's assignments are stored; a member's own is
    /// returned now, or a parked wait for it.
    ///
    /// # Errors
    ///
    /// UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, ILLEGAL_GENERATION,
    /// REBALANCE_IN_PROGRESS, or COORDINATOR_NOT_AVAILABLE when the
    /// purgatory is shut down.
    pub fn sync(
        &self,
        group_id: &str,
        member: Membership<'_>,
        assignments: Vec<MemberMetadata>,
    ) -> Result<Syncing, ResponseError> {
        let Membership {
            member_id,
            instance,
            generation,
        } = member;
        let Some(group) = self.find(group_id) else {
            return Err(ResponseError::UnknownMemberId);
        };
        let session = {
            let mut g = group.lock();
            let session = g.check_member(member_id, instance)?.session;
            if g.generation != generation {
                return Err(ResponseError::IllegalGeneration);
            }
            if g.phase == Phase::Joining {
                return Err(ResponseError::RebalanceInProgress);
            }
            if member_id == g.leader && g.phase == Phase::Syncing {
                for assignment in assignments {
                    if let Some(m) = g.members.get_mut(&assignment.member_id) {
                        m.assignment = Some(assignment.metadata);
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
            return Ok(Syncing::Assigned(assignment));
        }
        let rebalance = group
            .lock()
            .members
            .get(member_id)
            .map_or(DEFAULT_REBALANCE, |m| m.rebalance);
        let wait = GroupWait {
            group,
            generation,
            member: member_id.to_string(),
            stage: Stage::Sync,
            delay: rebalance,
        };
        self.waits
            .park(wait, [group_id.to_string()])
            .map(Syncing::Waiting)
            .map_err(|_| ResponseError::CoordinatorNotAvailable)
    }

    /// After a parked sync resolved: the member's assignment.
    ///
    /// # Errors
    ///
    /// REBALANCE_IN_PROGRESS, UNKNOWN_MEMBER_ID or FENCED_INSTANCE_ID.
    pub fn synced(&self, group_id: &str, member: Membership<'_>) -> Result<Bytes, ResponseError> {
        let Some(group) = self.find(group_id) else {
            return Err(ResponseError::UnknownMemberId);
        };
        let g = group.lock();
        let m = g.check_member(member.member_id, member.instance)?;
        if g.generation != member.generation {
            return Err(ResponseError::RebalanceInProgress);
        }
        m.assignment
            .clone()
            .ok_or(ResponseError::RebalanceInProgress)
    }

    /// Heartbeat: resets the session.
    ///
    /// # Errors
    ///
    /// UNKNOWN_MEMBER_ID; FENCED_INSTANCE_ID; REBALANCE_IN_PROGRESS
    /// (rejoin) when a rebalance is under way; ILLEGAL_GENERATION.
    pub fn heartbeat(&self, group_id: &str, member: Membership<'_>) -> Result<(), ResponseError> {
        let Some(group) = self.find(group_id) else {
            return Err(ResponseError::UnknownMemberId);
        };
        let member_id = member.member_id;
        let (answer, session) = {
            let g = group.lock();
            match g.check_member(member_id, member.instance) {
                Err(error) => (Err(error), None),
                Ok(m) if g.phase == Phase::Joining => {
                    (Err(ResponseError::RebalanceInProgress), Some(m.session))
                }
                Ok(m) if g.generation != member.generation => {
                    (Err(ResponseError::IllegalGeneration), Some(m.session))
                }
                Ok(m) => (Ok(()), Some(m.session)),
            }
        };
        if let Some(session) = session {
            self.touch(group_id, member_id, session);
        }
        answer
    }

    /// LeaveGroup: the member goes at once; the others rebalance. A static
    /// member may be named by its `instance` alone (an empty member id).
    ///
    /// # Errors
    ///
    /// UNKNOWN_MEMBER_ID; FENCED_INSTANCE_ID when `member_id` is not the
    /// one `instance` has.
    pub fn leave(
        &self,
        group_id: &str,
        member_id: &str,
        instance: Option<&str>,
    ) -> Result<(), ResponseError> {
        let Some(group) = self.find(group_id) else {
            return Err(ResponseError::UnknownMemberId);
        };
        let gone = {
            let mut g = group.lock();
            let gone = match instance.and_then(|i| g.static_members.get(i)) {
                Some(id) if member_id.is_empty() => id.clone(),
                _ => member_id.to_string(),
            };
            g.check_member(&gone, instance)?;
            g.remove_member(&gone);
            gone
        };
        let _ = self.sessions.remove(&SessionKey::new(group_id, &gone));
        let _ = self.waits.check_and_complete(group_id);
        Ok(())
    }

    /// Whether a member may commit offsets (OffsetCommit), as Kafka checks
    /// it: a commit of generation -1 (an admin's, or a consumer's outside
    /// group management) is taken while the group has no member, whatever
    /// member or instance id it names; otherwise one naming no member is
    /// UNKNOWN_MEMBER_ID, and one naming a member must be of the member,
    /// in the group's generation, outside the wait for the leader's
    /// assignment.
    /// A member's commit resets its session.
    ///
    /// # Errors
    ///
    /// UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, ILLEGAL_GENERATION,
    /// REBALANCE_IN_PROGRESS.
    pub fn check_commit(
        &self,
        group_id: &str,
        member: Membership<'_>,
    ) -> Result<(), ResponseError> {
        // A generation below 0 outside a group with members (an admin's
        // commit, or a consumer's outside group management, whatever
        // member or instance id it names) is taken, as Kafka takes it.
        let Some(group) = self.find(group_id) else {
            return if member.generation < 0 {
                Ok(())
            } else {
                Err(ResponseError::IllegalGeneration)
            };
        };
        let session = {
            let g = group.lock();
            if member.generation < 0 && g.members.is_empty() {
                return Ok(());
            }
            if member.generation < 0 && member.member_id.is_empty() && member.instance.is_none() {
                return Err(ResponseError::UnknownMemberId);
            }
            let session = g.check_member(member.member_id, member.instance)?.session;
            if g.generation != member.generation {
                return Err(ResponseError::IllegalGeneration);
            }
            if g.phase == Phase::Syncing {
                return Err(ResponseError::RebalanceInProgress);
            }
            session
        };
        self.touch(group_id, member.member_id, session);
        Ok(())
    }
}
