//! ApiVersions, Metadata and DescribeCluster: what the broker serves, and
//! where topics are (Metadata creating those it names, if allowed).

use std::collections::HashMap;
use std::sync::Arc;

use kafka_protocol::messages::{
    api_versions_response::ApiVersion, describe_cluster_response, metadata_response,
    ApiVersionsResponse, BrokerId, DescribeClusterRequest, DescribeClusterResponse,
    MetadataRequest, MetadataResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use uuid::Uuid;

use super::{str_bytes, SERVED};
use crate::acls::{authorized, resource};
use crate::broker::Broker;
use crate::topics::{legal_topic_name, RequestQuota};

/// The only broker's id.
pub const NODE: BrokerId = BrokerId(0);

/// The cluster's id, as Metadata and DescribeCluster give it.
pub const CLUSTER_ID: &str = "purgatorio";

/// DescribeCluster's endpoint type of brokers (v1; 2 asks for
/// controllers, which a broker does not describe).
const BROKERS: i8 = 1;

/// ApiVersions: every API and version in [`SERVED`].
pub fn api_versions() -> ApiVersionsResponse {
    let mut response = ApiVersionsResponse::default();
    response.api_keys = SERVED
        .iter()
        .map(|served| {
            let mut v = ApiVersion::default();
            v.api_key = served.key as i16;
            v.min_version = served.min;
            v.max_version = served.max;
            v
        })
        .collect();
    response
}

/// A topic a Metadata request asks for.
enum Wanted {
    /// By name.
    Name(String),
    /// By id (v12+, its name null).
    Id(Uuid),
    /// By both, or by neither (INVALID_REQUEST).
    Invalid,
}

/// Metadata: this broker leads every partition; a topic asked for is
/// created on first use unless the request says not to (v4+), then it is
/// UNKNOWN_TOPIC_OR_PARTITION; past the partition bounds, it is
/// POLICY_VIOLATION. v10+ carry topic ids (v12 asks by id: an unknown
/// one is UNKNOWN_TOPIC_ID), and the authorized operations asked for are
/// everything Kafka defines for the resource (no ACL is enforced).
pub async fn metadata(broker: &Arc<Broker>, request: MetadataRequest) -> MetadataResponse {
    let mut quota = RequestQuota::new(broker.config.partition_limits);
    let mut response = MetadataResponse::default();
    let mut node = metadata_response::MetadataResponseBroker::default();
    node.node_id = NODE;
    node.host = str_bytes(&broker.addr.ip().to_string());
    node.port = i32::from(broker.addr.port());
    response.brokers = vec![node];
    response.controller_id = NODE;
    response.cluster_id = Some(StrBytes::from_static_str(CLUSTER_ID));
    if request.include_cluster_authorized_operations {
        response.cluster_authorized_operations = authorized(resource::CLUSTER);
    }
    let wanted: Vec<Wanted> = match request.topics {
        Some(topics) => topics
            .into_iter()
            .map(|t| match (t.name, t.topic_id.is_nil()) {
                (Some(name), true) => Wanted::Name(name.to_string()),
                (None, false) => Wanted::Id(t.topic_id),
                // Kafka's rule: one or the other (v12 asks by id).
                (Some(_), false) | (None, true) => Wanted::Invalid,
            })
            .collect(),
        None => broker
            .topics
            .read()
            .keys()
            .cloned()
            .map(Wanted::Name)
            .collect(),
    };
    let by_id = if wanted.iter().any(|w| matches!(w, Wanted::Id(_))) {
        broker.topic_names_by_id()
    } else {
        HashMap::new()
    };
    for wanted in wanted {
        let mut topic = metadata_response::MetadataResponseTopic::default();
        let name = match wanted {
            Wanted::Name(name) => name,
            Wanted::Id(id) => match by_id.get(&id) {
                Some(name) => name.clone(),
                None => {
                    topic.topic_id = id;
                    topic.error_code = ResponseError::UnknownTopicId.code();
                    response.topics.push(topic);
                    continue;
                }
            },
            Wanted::Invalid => {
                topic.error_code = ResponseError::InvalidRequest.code();
                response.topics.push(topic);
                continue;
            }
        };
        topic.name = Some(TopicName(str_bytes(&name)));
        let found = if request.allow_auto_topic_creation && broker.config.auto_create_topics {
            broker.topic(&name, &mut quota).await
        } else {
            broker
                .existing_topic(&name)
                .ok_or(ResponseError::UnknownTopicOrPartition)
        };
        match found {
            Ok(t) => {
                topic.topic_id = t.id;
                if request.include_topic_authorized_operations {
                    topic.topic_authorized_operations = authorized(resource::TOPIC);
                }
                topic.partitions = (0..t.partitions.len() as i32)
                    .map(|i| {
                        let mut p = metadata_response::MetadataResponsePartition::default();
                        p.partition_index = i;
                        p.leader_id = NODE;
                        p.replica_nodes = vec![NODE];
                        p.isr_nodes = vec![NODE];
                        p
                    })
                    .collect();
            }
            Err(_) if !legal_topic_name(&name) => {
                topic.error_code = ResponseError::InvalidTopicException.code();
            }
            Err(ResponseError::PolicyViolation) => {
                topic.error_code = ResponseError::PolicyViolation.code();
            }
            Err(_) => topic.error_code = ResponseError::UnknownTopicOrPartition.code(),
        }
        response.topics.push(topic);
    }
    response
}

/// DescribeCluster: this broker alone, the cluster's id, and (if asked)
/// every operation Kafka defines for the cluster (no ACL is enforced);
/// v1's endpoint type must be brokers (INVALID_REQUEST otherwise).
pub fn describe_cluster(
    broker: &Broker,
    request: &DescribeClusterRequest,
) -> DescribeClusterResponse {
    let mut response = DescribeClusterResponse::default();
    response.endpoint_type = request.endpoint_type;
    if request.endpoint_type != BROKERS {
        response.error_code = ResponseError::InvalidRequest.code();
        response.error_message = Some(str_bytes(&format!(
            "endpoint type {} is not served: a broker describes brokers (1)",
            request.endpoint_type
        )));
        return response;
    }
    response.cluster_id = StrBytes::from_static_str(CLUSTER_ID);
    response.controller_id = NODE;
    let mut node = describe_cluster_response::DescribeClusterBroker::default();
    node.broker_id = NODE;
    node.host = str_bytes(&broker.addr.ip().to_string());
    node.port = i32::from(broker.addr.port());
    response.brokers = vec![node];
    if request.include_cluster_authorized_operations {
        response.cluster_authorized_operations = authorized(resource::CLUSTER);
    }
    response
}
