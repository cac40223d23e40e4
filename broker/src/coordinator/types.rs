//! What the coordinator's callers exchange with it: joins and their
//! outcomes, commits, and what ListGroups and DescribeGroups show.

use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::ResponseError;
use purgatorio::Parked;

use super::group::GroupWait;

/// A partition assignment protocol a member offers, with its metadata.
#[derive(Clone, Debug)]
pub struct Protocol {
    /// The protocol's name ("range", "roundrobin", ...).
    pub name: String,
    /// The member's metadata for it (its subscription).
    pub metadata: Bytes,
}

/// A member's metadata for the chosen protocol, as the leader sees it.
#[derive(Clone, Debug)]
pub struct MemberMetadata {
    /// The member's id.
    pub member_id: String,
    /// Its `group.instance.id`, if it is a static member.
    pub group_instance_id: Option<String>,
    /// Its metadata for the group's protocol.
    pub metadata: Bytes,
}

/// What a JoinGroup learns when its rebalance completes.
#[derive(Clone, Debug)]
pub struct Joined {
    /// Why the member is not in the group, if it is not.
    pub error: Option<ResponseError>,
    /// The generation it joined.
    pub generation: i32,
    /// The protocol chosen.
    pub protocol: String,
    /// The leader's member id.
    pub leader: String,
    /// The member's id (assigned by the coordinator on a first join).
    pub member_id: String,
    /// The members and their metadata, for the leader only.
    pub members: Vec<MemberMetadata>,
}

/// A JoinGroup, as the coordinator needs it.
#[derive(Clone, Debug)]
pub struct Join {
    /// The group.
    pub group_id: String,
    /// The member's id, empty on its first join.
    pub member_id: String,
    /// Its `group.instance.id` (JoinGroup v5+), if it is a static member
    /// (KIP-345): one that joins again under it keeps its assignment.
    pub group_instance_id: Option<String>,
    /// Whether a first join (empty member id) is answered
    /// MEMBER_ID_REQUIRED with an id to join with (JoinGroup v4+).
    pub require_member_id: bool,
    /// The protocol type ("consumer").
    pub protocol_type: String,
    /// The protocols it offers, in its order of preference.
    pub protocols: Vec<Protocol>,
    /// Its session timeout.
    pub session: Duration,
    /// Its rebalance timeout.
    pub rebalance: Duration,
    /// The client id of the request.
    pub client_id: String,
    /// The address the request came from.
    pub client_host: String,
}

/// Who a request of a member says it is (SyncGroup, Heartbeat,
/// OffsetCommit).
#[derive(Clone, Copy, Debug)]
pub struct Membership<'a> {
    /// Its member id.
    pub member_id: &'a str,
    /// Its `group.instance.id`, if it is a static member.
    pub instance: Option<&'a str>,
    /// The generation it is in.
    pub generation: i32,
}

/// A group, as ListGroups shows it.
#[derive(Clone, Debug)]
pub struct GroupListing {
    /// The group's id.
    pub group_id: String,
    /// Its protocol type ("consumer").
    pub protocol_type: String,
    /// Its state, in Kafka's words.
    pub state: &'static str,
}

/// A group, as DescribeGroups shows it.
#[derive(Clone, Debug)]
pub struct GroupDescription {
    /// Its state, in Kafka's words.
    pub state: &'static str,
    /// Its protocol type ("consumer").
    pub protocol_type: String,
    /// The protocol chosen ("range", ...).
    pub protocol: String,
    /// Its members.
    pub members: Vec<MemberDescription>,
}

/// A member, as DescribeGroups shows it.
#[derive(Clone, Debug)]
pub struct MemberDescription {
    /// The member's id.
    pub member_id: String,
    /// Its `group.instance.id`, if it is a static member.
    pub group_instance_id: Option<String>,
    /// Its client id.
    pub client_id: String,
    /// The address it joined from.
    pub client_host: String,
    /// Its metadata for the group's protocol.
    pub metadata: Bytes,
    /// Its assignment, if the leader sent it.
    pub assignment: Bytes,
}

/// A JoinGroup's outcome.
pub enum Joining {
    /// The rebalance completed with this join.
    Done(Joined),
    /// The join waits for the other members (or the rebalance timeout);
    /// then [`Coordinator::joined`](super::Coordinator::joined) answers it.
    Waiting {
        /// Where the member stands meanwhile.
        joined: Joined,
        /// The wait.
        parked: Parked<GroupWait>,
    },
}

/// A SyncGroup's outcome.
pub enum Syncing {
    /// The member's assignment.
    Assigned(Bytes),
    /// The member waits for the leader's assignment; then
    /// [`Coordinator::synced`](super::Coordinator::synced) answers it.
    Waiting(Parked<GroupWait>),
}

/// A committed offset of a group.
#[derive(Clone, Debug)]
pub struct Committed {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The offset committed.
    pub offset: i64,
    /// The commit's metadata string, as the client gave it.
    pub metadata: Option<String>,
    /// The leader epoch the client gave with it (OffsetCommit v6+; -1:
    /// none), answered back by OffsetFetch v5+.
    pub leader_epoch: i32,
}

impl Committed {
    /// No commit of `topic`'s `partition`: offset -1, no metadata, no
    /// epoch (as OffsetFetch answers a partition without one).
    pub fn none(topic: &str, partition: i32) -> Committed {
        Committed {
            topic: topic.to_string(),
            partition,
            offset: -1,
            metadata: None,
            leader_epoch: -1,
        }
    }
}

/// The group purgatory's figures.
#[derive(Clone, Copy, Debug)]
pub struct GroupFigures {
    /// Joins and syncs waiting now.
    pub parked: usize,
    /// Waits completed by their group.
    pub satisfied: u64,
    /// Waits that reached their deadline.
    pub expired: u64,
}
