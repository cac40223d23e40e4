//! ApiVersions, Metadata, CreateTopics and DeleteTopics: what the broker
//! serves, where topics are, and making and removing them.

use kafka_protocol::messages::{
    api_versions_response::ApiVersion, create_topics_response, delete_topics_response,
    metadata_response, ApiVersionsResponse, BrokerId, CreateTopicsRequest, CreateTopicsResponse,
    DeleteTopicsRequest, DeleteTopicsResponse, MetadataRequest, MetadataResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::{str_bytes, SERVED};
use crate::broker::{legal_topic_name, Broker};

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
/// UNKNOWN_TOPIC_OR_PARTITION.
pub fn metadata(broker: &Broker, request: MetadataRequest) -> MetadataResponse {
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
        let found = if request.allow_auto_topic_creation {
            broker.topic(&name)
        } else {
            broker.existing_topic(&name)
        };
        match found {
            Some(t) => {
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
            None if !legal_topic_name(&name) => {
                topic.error_code = ResponseError::InvalidTopicException.code();
            }
            None => topic.error_code = ResponseError::UnknownTopicOrPartition.code(),
        }
        response.topics.push(topic);
    }
    response
}

/// A CreateTopics replication factor or partition count meaning "the
/// broker's default".
const DEFAULT: i32 = -1;

/// CreateTopics: each topic with its own partition count (-1: the
/// `--partitions` default) and a replication factor of 1 (or -1); with
/// `validate_only`, checked and not made.
pub fn create_topics(broker: &Broker, request: &CreateTopicsRequest) -> CreateTopicsResponse {
    let mut response = CreateTopicsResponse::default();
    for topic in &request.topics {
        let mut result = create_topics_response::CreatableTopicResult::default();
        result.name = topic.name.clone();
        let partitions = if topic.num_partitions == DEFAULT {
            broker.partitions
        } else {
            topic.num_partitions
        };
        let outcome = if !matches!(i32::from(topic.replication_factor), DEFAULT | 1) {
            Err(ResponseError::InvalidReplicationFactor)
        } else if !topic.assignments.is_empty() {
            Err(ResponseError::InvalidReplicaAssignment)
        } else if request.validate_only {
            match broker.existing_topic(&topic.name) {
                Some(_) => Err(ResponseError::TopicAlreadyExists),
                None if !legal_topic_name(&topic.name) => Err(ResponseError::InvalidTopicException),
                None if !(1..=crate::broker::MAX_PARTITIONS).contains(&partitions) => {
                    Err(ResponseError::InvalidPartitions)
                }
                None => Ok(()),
            }
        } else {
            broker.create_topic(&topic.name, partitions).map(|_| ())
        };
        match outcome {
            Ok(()) => {
                result.num_partitions = partitions;
                result.replication_factor = 1;
            }
            Err(error) => {
                result.error_code = error.code();
                result.error_message = Some(str_bytes(&error.to_string()));
                result.num_partitions = -1;
                result.replication_factor = -1;
            }
        }
        response.topics.push(result);
    }
    response
}

/// DeleteTopics: each topic and its files go.
pub fn delete_topics(broker: &Broker, request: &DeleteTopicsRequest) -> DeleteTopicsResponse {
    let mut response = DeleteTopicsResponse::default();
    for name in &request.topic_names {
        let mut result = delete_topics_response::DeletableTopicResult::default();
        result.name = Some(name.clone());
        if let Err(error) = broker.delete_topic(name) {
            result.error_code = error.code();
        }
        response.responses.push(result);
    }
    response
}
