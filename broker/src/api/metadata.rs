//! ApiVersions and Metadata: what the broker serves, and where topics are
//! (Metadata creating those it names, if allowed).

use std::sync::Arc;

use kafka_protocol::messages::{
    api_versions_response::ApiVersion, metadata_response, ApiVersionsResponse, BrokerId,
    MetadataRequest, MetadataResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::{str_bytes, SERVED};
use crate::broker::Broker;
use crate::topics::{legal_topic_name, RequestQuota};

/// The only broker's id.
pub const NODE: BrokerId = BrokerId(0);

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

/// Metadata: this broker leads every partition; a topic asked for is
/// created on first use unless the request says not to (v4+), then it is
/// UNKNOWN_TOPIC_OR_PARTITION; past the partition bounds, it is
/// POLICY_VIOLATION.
pub async fn metadata(broker: &Arc<Broker>, request: MetadataRequest) -> MetadataResponse {
    let mut quota = RequestQuota::new(broker.config.partition_limits);
    let mut response = MetadataResponse::default();
    let mut node = metadata_response::MetadataResponseBroker::default();
    node.node_id = NODE;
    node.host = str_bytes(&broker.addr.ip().to_string());
    node.port = i32::from(broker.addr.port());
    response.brokers = vec![node];
    response.controller_id = NODE;
    response.cluster_id = Some(StrBytes::from_static_str("purgatorio"));
    let names: Vec<String> = match request.topics {
        Some(topics) => topics
            .into_iter()
            .filter_map(|t| t.name.map(|n| n.to_string()))
            .collect(),
        None => broker.topics.read().keys().cloned().collect(),
    };
    for name in names {
        let mut topic = metadata_response::MetadataResponseTopic::default();
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
