//! The requests served, one module per family and one `async fn` per
//! request; [`serve`] decodes a frame and dispatches it.
//!
//! | module | requests |
//! |---|---|
//! | [`metadata`] | ApiVersions, Metadata, DescribeCluster |
//! | [`acls`] | CreateAcls, DescribeAcls, DeleteAcls (stored, not enforced) |
//! | [`scram`] | DescribeUserScramCredentials, AlterUserScramCredentials (stored, no SASL) |
//! | [`admin`] | CreateTopics, CreatePartitions, DeleteTopics, DescribeConfigs, AlterConfigs, IncrementalAlterConfigs |
//! | [`produce`] | Produce (acks 0, 1, -1; -1 waits for the group commit), InitProducerId |
//! | [`fetch`] | Fetch (waits in the fetch purgatory), ListOffsets |
//! | [`groups`] | FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, ListGroups, DescribeGroups, DeleteGroups |
//! | [`commits`] | OffsetCommit, OffsetFetch, OffsetDelete |
//! | [`records`] | DeleteRecords |
//!
//! A request's wait is an `.await` inside its own function; the connection
//! drops the future when the client goes away, which ends the wait.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind, ResponseKind};
use kafka_protocol::protocol::{Decodable, StrBytes};
use kafka_protocol::ResponseError;

use crate::broker::Broker;
use crate::wire::{scan, Answer};

// The security APIs: their state stored, never enforced or used.
pub mod acls;
pub mod scram;

pub mod admin;
pub mod commits;
pub mod fetch;
pub mod groups;
pub mod metadata;
pub mod produce;
pub mod records;

/// An API and the versions of it served.
#[derive(Clone, Copy, Debug)]
pub struct Served {
    /// The API.
    pub key: ApiKey,
    /// The oldest version served.
    pub min: i16,
    /// The newest version served.
    pub max: i16,
}

impl Served {
    /// `key` from version `min` to `max`.
    pub const fn new(key: ApiKey, min: i16, max: i16) -> Served {
        Served { key, min, max }
    }

    /// Whether `version` is served.
    pub fn serves(&self, version: i16) -> bool {
        (self.min..=self.max).contains(&version)
    }
}

/// The versions served, per API: the ones decoded, encoded and tested here.
pub const SERVED: &[Served] = &[
    Served::new(ApiKey::Produce, 3, 9),
    Served::new(ApiKey::Fetch, 4, 12),
    Served::new(ApiKey::ListOffsets, 1, 7),
    Served::new(ApiKey::Metadata, 0, 12),
    // ACLs, SCRAM credentials, DescribeCluster.
    Served::new(ApiKey::CreateAcls, 0, 3),
    Served::new(ApiKey::DescribeAcls, 0, 3),
    Served::new(ApiKey::DeleteAcls, 0, 3),
    Served::new(ApiKey::DescribeUserScramCredentials, 0, 0),
    Served::new(ApiKey::AlterUserScramCredentials, 0, 0),
    Served::new(ApiKey::DescribeCluster, 0, 1),
    Served::new(ApiKey::ApiVersions, 0, 3),
    Served::new(ApiKey::FindCoordinator, 0, 3),
    Served::new(ApiKey::JoinGroup, 0, 5),
    Served::new(ApiKey::SyncGroup, 0, 3),
    Served::new(ApiKey::Heartbeat, 0, 3),
    Served::new(ApiKey::LeaveGroup, 0, 4),
    Served::new(ApiKey::OffsetCommit, 2, 8),
    Served::new(ApiKey::OffsetFetch, 1, 8),
    Served::new(ApiKey::InitProducerId, 0, 4),
    Served::new(ApiKey::CreateTopics, 0, 5),
    Served::new(ApiKey::DeleteTopics, 0, 5),
    Served::new(ApiKey::ListGroups, 0, 4),
    Served::new(ApiKey::DescribeGroups, 0, 5),
    Served::new(ApiKey::DescribeConfigs, 0, 4),
    Served::new(ApiKey::CreatePartitions, 0, 3),
    Served::new(ApiKey::AlterConfigs, 0, 2),
    Served::new(ApiKey::IncrementalAlterConfigs, 0, 1),
    Served::new(ApiKey::DeleteRecords, 0, 2),
    Served::new(ApiKey::DeleteGroups, 0, 2),
    Served::new(ApiKey::OffsetDelete, 0, 0),
];

/// The entry of `key` in [`SERVED`].
pub fn served(key: ApiKey) -> Option<&'static Served> {
    SERVED.iter().find(|s| s.key == key)
}

/// What a request gets back.
pub enum Reply {
    /// An answer to send.
    Answer(Box<Answer>),
    /// No answer (a produce with acks = 0).
    Silent,
}

/// A request that closes its connection (as Kafka closes it).
#[derive(Debug)]
pub enum RequestError {
    /// An API key Kafka does not define, or one not served.
    UnknownApi(i16),
    /// A version of a served API that is not served.
    UnsupportedVersion {
        /// The API.
        key: ApiKey,
        /// The version asked for.
        version: i16,
    },
    /// Bytes that do not decode as the request they claim to be.
    Malformed {
        /// The API.
        key: ApiKey,
        /// The version.
        version: i16,
        /// What the decoder said.
        reason: String,
    },
    /// The broker is shutting down: its purgatories refuse new waits.
    ShuttingDown,
}

impl std::fmt::Display for RequestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RequestError::UnknownApi(key) => write!(f, "api key {key} is not served"),
            RequestError::UnsupportedVersion { key, version } => {
                write!(f, "{key:?} v{version} is not served")
            }
            RequestError::Malformed {
                key,
                version,
                reason,
            } => write!(f, "a malformed {key:?} v{version} request: {reason}"),
            RequestError::ShuttingDown => write!(f, "the broker is shutting down"),
        }
    }
}

impl std::error::Error for RequestError {}

/// Who sent a request.
#[derive(Clone, Debug)]
pub struct Client {
    /// The request header's client id.
    pub id: String,
    /// The connection's peer address, as Kafka shows it (`/127.0.0.1`).
    pub host: String,
}

/// A decoded request's header: what its answer needs.
#[derive(Clone, Copy, Debug)]
pub struct Header {
    /// The API.
    pub key: ApiKey,
    /// The version.
    pub version: i16,
    /// The correlation id.
    pub correlation_id: i32,
}

impl Header {
    /// `response` as the answer to this request.
    pub fn answer(&self, response: ResponseKind) -> Answer {
        Answer {
            correlation_id: self.correlation_id,
            // ApiVersions answers always carry header v0.
            header_version: if self.key == ApiKey::ApiVersions {
                0
            } else {
                self.key.response_header_version(self.version)
            },
            version: self.version,
            response,
            streamed: Vec::new(),
        }
    }
}

/// `s` as the protocol's string.
pub fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// The code of `error`, or 0 for none.
pub fn code(error: Option<ResponseError>) -> i16 {
    error.map_or(0, |e| e.code())
}

/// Decodes and serves one request frame (without its length prefix; at
/// least 8 bytes), waiting where the request waits.
///
/// # Errors
///
/// [`RequestError`] for a request to close the connection over.
pub async fn serve(
    broker: &Arc<Broker>,
    peer: SocketAddr,
    mut frame: Bytes,
) -> Result<Reply, RequestError> {
    let api_key = i16::from_be_bytes([frame[0], frame[1]]);
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    let key = ApiKey::try_from(api_key).map_err(|()| RequestError::UnknownApi(api_key))?;
    let served = served(key).ok_or(RequestError::UnknownApi(api_key))?;
    if key == ApiKey::ApiVersions && version > served.max {
        // Kafka's rule: an unknown ApiVersions version is answered in v0,
        // with UNSUPPORTED_VERSION and the versions served.
        let correlation_id = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
        let mut response = metadata::api_versions();
        response.error_code = ResponseError::UnsupportedVersion.code();
        let header = Header {
            key,
            version: 0,
            correlation_id,
        };
        return Ok(Reply::Answer(Box::new(
            header.answer(ResponseKind::ApiVersions(response)),
        )));
    }
    if !served.serves(version) {
        return Err(RequestError::UnsupportedVersion { key, version });
    }
    let malformed = |reason: String| RequestError::Malformed {
        key,
        version,
        reason,
    };
    // Nothing decodes a frame before its every count and length has been
    // checked against the bytes left.
    let schema = scan::request_schema(key).ok_or(RequestError::UnknownApi(api_key))?;
    scan::scan_request(&frame, key.request_header_version(version), schema, version)
        .map_err(|e| malformed(e.to_string()))?;
    let decoded = RequestHeader::decode(&mut frame, key.request_header_version(version))
        .map_err(|e| malformed(e.to_string()))?;
    let request =
        RequestKind::decode(key, &mut frame, version).map_err(|e| malformed(e.to_string()))?;
    let header = Header {
        key,
        version,
        correlation_id: decoded.correlation_id,
    };
    // Only a join keeps who asked: every other request (a long poll
    // expiring, above all) skips formatting the peer's address.
    let client = || Client {
        id: decoded.client_id.as_deref().unwrap_or_default().to_string(),
        host: format!("/{}", peer.ip()),
    };
    let response = match request {
        RequestKind::ApiVersions(_) => ResponseKind::ApiVersions(metadata::api_versions()),
        RequestKind::Metadata(r) => ResponseKind::Metadata(metadata::metadata(broker, r).await),
        // ACLs, SCRAM credentials, DescribeCluster.
        RequestKind::CreateAcls(r) => ResponseKind::CreateAcls(acls::create_acls(broker, &r).await),
        RequestKind::DescribeAcls(r) => ResponseKind::DescribeAcls(acls::describe_acls(broker, &r)),
        RequestKind::DeleteAcls(r) => ResponseKind::DeleteAcls(acls::delete_acls(broker, &r).await),
        RequestKind::DescribeUserScramCredentials(r) => ResponseKind::DescribeUserScramCredentials(
            scram::describe_user_scram_credentials(broker, &r),
        ),
        RequestKind::AlterUserScramCredentials(r) => ResponseKind::AlterUserScramCredentials(
            scram::alter_user_scram_credentials(broker, &r).await,
        ),
        RequestKind::DescribeCluster(r) => {
            ResponseKind::DescribeCluster(metadata::describe_cluster(broker, &r))
        }
        RequestKind::CreateTopics(r) => {
            ResponseKind::CreateTopics(admin::create_topics(broker, &r).await)
        }
        RequestKind::AlterConfigs(r) => {
            ResponseKind::AlterConfigs(admin::alter_configs(broker, &r).await)
        }
        RequestKind::IncrementalAlterConfigs(r) => ResponseKind::IncrementalAlterConfigs(
            admin::incremental_alter_configs(broker, &r).await,
        ),
        RequestKind::CreatePartitions(r) => {
            ResponseKind::CreatePartitions(admin::create_partitions(broker, &r).await)
        }
        RequestKind::DeleteTopics(r) => {
            ResponseKind::DeleteTopics(admin::delete_topics(broker, &r))
        }
        RequestKind::Produce(r) => match produce::produce(broker, r).await? {
            Some(response) => ResponseKind::Produce(response),
            None => return Ok(Reply::Silent),
        },
        RequestKind::InitProducerId(r) => {
            ResponseKind::InitProducerId(produce::init_producer_id(broker, &r))
        }
        RequestKind::Fetch(r) => {
            let (response, streamed) = fetch::fetch(broker, r).await?;
            let mut answer = header.answer(ResponseKind::Fetch(response));
            answer.streamed = streamed;
            return Ok(Reply::Answer(Box::new(answer)));
        }
        RequestKind::ListOffsets(r) => {
            ResponseKind::ListOffsets(fetch::list_offsets(broker, &r).await)
        }
        RequestKind::FindCoordinator(_) => {
            ResponseKind::FindCoordinator(groups::find_coordinator(broker))
        }
        RequestKind::JoinGroup(r) => {
            ResponseKind::JoinGroup(groups::join_group(broker, &client(), version, r).await)
        }
        RequestKind::ListGroups(r) => ResponseKind::ListGroups(groups::list_groups(broker, &r)),
        RequestKind::DescribeGroups(r) => {
            ResponseKind::DescribeGroups(groups::describe_groups(broker, &r))
        }
        RequestKind::DescribeConfigs(r) => {
            ResponseKind::DescribeConfigs(admin::describe_configs(broker, version, &r))
        }
        RequestKind::SyncGroup(r) => ResponseKind::SyncGroup(groups::sync_group(broker, r).await),
        RequestKind::Heartbeat(r) => ResponseKind::Heartbeat(groups::heartbeat(broker, &r)),
        RequestKind::LeaveGroup(r) => {
            ResponseKind::LeaveGroup(groups::leave_group(broker, version, &r))
        }
        RequestKind::OffsetCommit(r) => {
            ResponseKind::OffsetCommit(commits::offset_commit(broker, r).await?)
        }
        RequestKind::OffsetFetch(r) => {
            ResponseKind::OffsetFetch(commits::offset_fetch(broker, version, &r))
        }
        RequestKind::DeleteRecords(r) => {
            ResponseKind::DeleteRecords(records::delete_records(broker, &r).await)
        }
        RequestKind::DeleteGroups(r) => {
            ResponseKind::DeleteGroups(groups::delete_groups(broker, &r).await?)
        }
        RequestKind::OffsetDelete(r) => {
            ResponseKind::OffsetDelete(commits::offset_delete(broker, &r).await?)
        }
        _ => return Err(RequestError::UnknownApi(api_key)),
    };
    Ok(Reply::Answer(Box::new(header.answer(response))))
}
