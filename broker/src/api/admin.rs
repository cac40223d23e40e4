//! The admin requests: CreateTopics, CreatePartitions, DeleteTopics,
//! DescribeConfigs, AlterConfigs and IncrementalAlterConfigs. Their disk
//! work is the topics module's, off the request path.

use std::sync::Arc;

use kafka_protocol::messages::{
    alter_configs_response, create_partitions_response, create_topics_response,
    delete_topics_response, describe_configs_response, incremental_alter_configs_response,
    AlterConfigsRequest, AlterConfigsResponse, CreatePartitionsRequest, CreatePartitionsResponse,
    CreateTopicsRequest, CreateTopicsResponse, DeleteTopicsRequest, DeleteTopicsResponse,
    DescribeConfigsRequest, DescribeConfigsResponse, IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
};
use kafka_protocol::ResponseError;

use super::metadata::NODE;
use super::str_bytes;
use crate::broker::Broker;
use crate::dynamic::altered;
use crate::log::config::{InvalidConfig, TopicConfig};
use crate::log::Topic;
use crate::topics::{RequestQuota, EXCESSIVE};

/// A CreateTopics replication factor or partition count meaning "the
/// broker's default".
const DEFAULT: i32 = -1;

/// CreateTopics: each topic with its own partition count (-1: the
/// `--partitions` default), a replication factor of 1 (or -1) and its
/// configs (checked: INVALID_CONFIG names what is refused, see
/// [`TopicConfig`]); with `validate_only`, checked and not made. Topics
/// past the request's or the broker's partition bound are
/// POLICY_VIOLATION.
pub async fn create_topics(
    broker: &Arc<Broker>,
    request: &CreateTopicsRequest,
) -> CreateTopicsResponse {
    let mut response = CreateTopicsResponse::default();
    let mut quota = RequestQuota::new(broker.config.partition_limits);
    for topic in &request.topics {
        let mut result = create_topics_response::CreatableTopicResult::default();
        result.name = topic.name.clone();
        let assigned = assigned_partitions(topic);
        let partitions = match assigned {
            Some(Ok(n)) => n,
            _ if topic.num_partitions == DEFAULT => broker.partitions,
            _ => topic.num_partitions,
        };
        // Why a config was refused, in Kafka's words.
        let mut refused = None;
        let config = TopicConfig::parse(
            topic
                .configs
                .iter()
                .map(|c| (c.name.as_str(), c.value.as_deref())),
        );
        let outcome = if !matches!(i32::from(topic.replication_factor), DEFAULT | 1) {
            Err(ResponseError::InvalidReplicationFactor)
        } else if let Some(Err(error)) = assigned {
            Err(error)
        } else if let Err(InvalidConfig(why)) = &config {
            refused = Some(why.clone());
            Err(ResponseError::InvalidConfig)
        } else if request.validate_only {
            broker
                .check_new(&topic.name, partitions)
                .and_then(|()| quota.take(partitions))
        } else {
            let config = config.unwrap_or_default();
            broker
                .create_topic(&topic.name, partitions, config, &mut quota)
                .await
                .map(|_| ())
        };
        match outcome {
            Ok(()) => {
                result.num_partitions = partitions;
                result.replication_factor = 1;
            }
            Err(error) => {
                result.error_code = error.code();
                let message = match error {
                    ResponseError::PolicyViolation => EXCESSIVE.to_string(),
                    _ => refused.unwrap_or_else(|| error.to_string()),
                };
                result.error_message = Some(str_bytes(&message));
                result.num_partitions = -1;
                result.replication_factor = -1;
            }
        }
        response.topics.push(result);
    }
    response
}

/// The partitions a CreateTopics topic's manual replica assignment makes
/// (`None`: it gives none). Kafka's rules: with an assignment the
/// partition count and replication factor are -1 (else INVALID_REQUEST);
/// partitions are numbered from 0 without a gap, each on this broker alone
/// (else INVALID_REPLICA_ASSIGNMENT).
fn assigned_partitions(
    topic: &kafka_protocol::messages::create_topics_request::CreatableTopic,
) -> Option<Result<i32, ResponseError>> {
    if topic.assignments.is_empty() {
        return None;
    }
    if topic.num_partitions != DEFAULT || i32::from(topic.replication_factor) != DEFAULT {
        return Some(Err(ResponseError::InvalidRequest));
    }
    let mut indexes: Vec<i32> = topic
        .assignments
        .iter()
        .map(|a| a.partition_index)
        .collect();
    indexes.sort_unstable();
    let numbered = indexes.iter().enumerate().all(|(i, &p)| p == i as i32);
    let here = topic.assignments.iter().all(|a| a.broker_ids == [NODE]);
    Some(if numbered && here {
        i32::try_from(indexes.len()).map_err(|_| ResponseError::InvalidPartitions)
    } else {
        Err(ResponseError::InvalidReplicaAssignment)
    })
}

/// CreatePartitions: each topic grown to its `count` (with
/// `validate_only`, checked only); an assignment, if given, must place
/// each new partition on this broker alone (else
/// INVALID_REPLICA_ASSIGNMENT).
pub async fn create_partitions(
    broker: &Arc<Broker>,
    request: &CreatePartitionsRequest,
) -> CreatePartitionsResponse {
    let mut response = CreatePartitionsResponse::default();
    let mut quota = RequestQuota::new(broker.config.partition_limits);
    for topic in &request.topics {
        let mut result = create_partitions_response::CreatePartitionsTopicResult::default();
        result.name = topic.name.clone();
        let have = broker
            .existing_topic(&topic.name)
            .map_or(0, |t| t.partitions.len());
        let placed = topic.assignments.as_ref().is_none_or(|assignments| {
            usize::try_from(topic.count).is_ok_and(|count| assignments.len() + have == count)
                && assignments.iter().all(|a| a.broker_ids == [NODE])
        });
        let outcome = if placed {
            broker
                .create_partitions(&topic.name, topic.count, request.validate_only, &mut quota)
                .await
        } else {
            Err(ResponseError::InvalidReplicaAssignment)
        };
        if let Err(error) = outcome {
            result.error_code = error.code();
            let message = match error {
                ResponseError::PolicyViolation => EXCESSIVE.to_string(),
                _ => error.to_string(),
            };
            result.error_message = Some(str_bytes(&message));
        }
        response.results.push(result);
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

/// DescribeConfigs' resource type of a topic.
const TOPIC_RESOURCE: i8 = 2;

/// DescribeConfigs' resource type of a broker.
const BROKER_RESOURCE: i8 = 4;

/// DescribeConfigs' source of a value set at start-up (a static broker
/// config).
const STATIC_BROKER_CONFIG: i8 = 4;

/// DescribeConfigs' source of a default value.
const DEFAULT_CONFIG: i8 = 5;

/// DescribeConfigs' source of a topic's own value.
const DYNAMIC_TOPIC_CONFIG: i8 = 1;

/// DescribeConfigs' source of a value set on this broker at run time.
const DYNAMIC_BROKER_CONFIG: i8 = 2;

/// A config name and its value, as DescribeConfigs shows it.
struct ConfigEntry {
    /// The name, in Kafka's words.
    name: String,
    /// The value (`None`: a secret, not shown).
    value: Option<String>,
    /// Where its value comes from: [`DYNAMIC_TOPIC_CONFIG`],
    /// [`STATIC_BROKER_CONFIG`] or [`DEFAULT_CONFIG`].
    source: i8,
}

/// The configs of a topic: the five applied, its own value if set, else
/// the broker's; then every other config it set.
fn topic_configs(broker: &Broker, topic: &Topic) -> Vec<ConfigEntry> {
    let own = &topic.config;
    let retention = own.retention(&broker.config.log.retention);
    // The topic's own value, else the broker's (`otherwise`).
    let entry = |name: &str, value: String, otherwise: i8| ConfigEntry {
        name: name.to_string(),
        value: Some(value),
        source: if own.set.iter().any(|(n, _)| n == name) {
            DYNAMIC_TOPIC_CONFIG
        } else {
            otherwise
        },
    };
    let mut entries = vec![
        entry(
            "cleanup.policy",
            own.set
                .iter()
                .find(|(n, _)| n == "cleanup.policy")
                .map_or("delete".into(), |(_, v)| v.clone()),
            DEFAULT_CONFIG,
        ),
        entry(
            "max.message.bytes",
            own.max_message_bytes
                .unwrap_or(broker.message_max_bytes)
                .to_string(),
            STATIC_BROKER_CONFIG,
        ),
        entry("retention.ms", signed(retention.ms), STATIC_BROKER_CONFIG),
        entry(
            "retention.bytes",
            signed(retention.bytes),
            STATIC_BROKER_CONFIG,
        ),
        entry(
            "segment.bytes",
            own.segment_bytes
                .unwrap_or(broker.config.log.segment_bytes)
                .to_string(),
            STATIC_BROKER_CONFIG,
        ),
    ];
    for (name, value) in &own.set {
        if !entries.iter().any(|e| &e.name == name) {
            entries.push(entry(name, value.clone(), DYNAMIC_TOPIC_CONFIG));
        }
    }
    entries
}

/// A bound as Kafka writes it: -1 for none.
fn signed(bound: Option<u64>) -> String {
    bound.map_or_else(|| "-1".to_string(), |b| b.to_string())
}

/// The broker's configs: the limits it was started with.
fn broker_configs(broker: &Broker) -> Vec<ConfigEntry> {
    let c = &broker.config;
    let set = |name: &str, value: String| ConfigEntry {
        name: name.to_string(),
        value: Some(value),
        source: STATIC_BROKER_CONFIG,
    };
    vec![
        set("num.partitions", c.partitions.to_string()),
        set("message.max.bytes", c.message_max_bytes.to_string()),
        set("fetch.max.bytes", c.fetch_max_bytes.to_string()),
        set(
            "socket.request.max.bytes",
            c.limits.max_request_bytes.to_string(),
        ),
        set(
            "queued.max.request.bytes",
            c.limits.queued_bytes.to_string(),
        ),
        set(
            "queued.max.request.share.bytes",
            c.limits.connection_bytes.to_string(),
        ),
        set(
            "request.read.timeout.ms",
            c.limits.read_timeout.as_millis().to_string(),
        ),
        set(
            "write.timeout.ms",
            c.limits.write_timeout.as_millis().to_string(),
        ),
        set(
            "connections.max.idle.ms",
            c.limits.idle.as_millis().to_string(),
        ),
        set(
            "group.initial.rebalance.delay.ms",
            c.initial_rebalance_delay.as_millis().to_string(),
        ),
        set("group.max.size", c.group_max_size.to_string()),
        set(
            "max.partitions.per.request",
            c.partition_limits.per_request.to_string(),
        ),
        set("max.partitions", c.partition_limits.per_broker.to_string()),
        set("log.segment.bytes", c.log.segment_bytes.to_string()),
        set("log.retention.ms", signed(c.log.retention.ms)),
        set("log.retention.bytes", signed(c.log.retention.bytes)),
        set(
            "log.retention.check.interval.ms",
            c.retention_check.as_millis().to_string(),
        ),
        set(
            "log.dirs",
            c.data_dir
                .as_ref()
                .map_or(String::new(), |d| d.display().to_string()),
        ),
    ]
    .into_iter()
    .chain(broker.dynamic.snapshot().iter().map(|d| ConfigEntry {
        name: d.name.clone(),
        // Kafka shows no sensitive value.
        value: if d.is_sensitive() {
            None
        } else {
            Some(d.value.clone())
        },
        source: DYNAMIC_BROKER_CONFIG,
    }))
    .collect()
}

/// DescribeConfigs (of `version`): a topic's configs or the broker's
/// (resource "0"), all or the keys asked for; a topic's are alterable
/// (AlterConfigs), the broker's read-only.
pub fn describe_configs(
    broker: &Broker,
    version: i16,
    request: &DescribeConfigsRequest,
) -> DescribeConfigsResponse {
    let mut response = DescribeConfigsResponse::default();
    for resource in &request.resources {
        let mut result = describe_configs_response::DescribeConfigsResult::default();
        result.resource_type = resource.resource_type;
        result.resource_name = resource.resource_name.clone();
        let entries = match resource.resource_type {
            TOPIC_RESOURCE => broker
                .existing_topic(&resource.resource_name)
                .map(|topic| topic_configs(broker, &topic))
                .ok_or(ResponseError::UnknownTopicOrPartition),
            BROKER_RESOURCE if matches!(resource.resource_name.as_str(), "0" | "") => {
                Ok(broker_configs(broker))
            }
            BROKER_RESOURCE => Err(ResponseError::InvalidRequest),
            _ => Err(ResponseError::InvalidRequest),
        };
        match entries {
            Ok(entries) => {
                result.configs = entries
                    .into_iter()
                    .filter(|e| {
                        resource
                            .configuration_keys
                            .as_ref()
                            .is_none_or(|keys| keys.iter().any(|k| k.as_str() == e.name))
                    })
                    .map(|e| {
                        let mut config =
                            describe_configs_response::DescribeConfigsResourceResult::default();
                        config.name = str_bytes(&e.name);
                        config.value = e.value.as_deref().map(str_bytes);
                        config.is_sensitive = e.value.is_none();
                        // A topic's configs are altered by AlterConfigs; the
                        // broker's are its flags, but for its dynamic ones.
                        config.read_only = resource.resource_type != TOPIC_RESOURCE
                            && e.source != DYNAMIC_BROKER_CONFIG;
                        // Only v0 has is_default; later ones say it
                        // with the source.
                        config.is_default = version == 0 && e.source == DEFAULT_CONFIG;
                        config.config_source = e.source;
                        config
                    })
                    .collect();
            }
            Err(error) => {
                result.error_code = error.code();
                result.error_message = Some(str_bytes(&error.to_string()));
            }
        }
        response.results.push(result);
    }
    response
}

/// IncrementalAlterConfigs' operation that sets a config.
const SET: i8 = 0;

/// IncrementalAlterConfigs' operation that removes a config (back to the
/// broker's).
const DELETE: i8 = 1;

/// IncrementalAlterConfigs' operation that adds items to a list config.
const APPEND: i8 = 2;

/// IncrementalAlterConfigs' operation that removes items from a list
/// config.
const SUBTRACT: i8 = 3;

/// An alteration refused: the error and what to say.
struct Refused {
    /// The error.
    error: ResponseError,
    /// Its message.
    message: String,
}

impl From<ResponseError> for Refused {
    fn from(error: ResponseError) -> Refused {
        Refused {
            error,
            message: error.to_string(),
        }
    }
}

impl From<InvalidConfig> for Refused {
    fn from(InvalidConfig(message): InvalidConfig) -> Refused {
        Refused {
            error: ResponseError::InvalidConfig,
            message,
        }
    }
}

/// Alters the configs of the resource `name` of `resource_type` to what
/// `alter` makes of its current ones (checked as CreateTopics checks them);
/// with `validate_only`, checks only. Only topics' configs change here
/// (the broker's dynamic ones in [`alter_broker`]).
async fn alter(
    broker: &Arc<Broker>,
    resource_type: i8,
    name: &str,
    validate_only: bool,
    alter: impl FnOnce(&TopicConfig) -> Result<TopicConfig, InvalidConfig>,
) -> Result<(), Refused> {
    if resource_type != TOPIC_RESOURCE {
        return Err(Refused {
            error: ResponseError::InvalidRequest,
            message: "only topic configs can be altered: the broker's are its flags".into(),
        });
    }
    let topic = broker
        .existing_topic(name)
        .ok_or(ResponseError::UnknownTopicOrPartition)?;
    let config = alter(&topic.config)?;
    if !validate_only {
        broker.reconfigure(name, topic, config).await?;
    }
    Ok(())
}

/// Alters the broker's dynamic configs (resource `name` "0": see
/// [`crate::dynamic`]) by `changes` (a name to its value, or `None` to
/// remove it), all of them replaced first if `replace` (AlterConfigs);
/// with `validate_only`, checks only.
async fn alter_broker(
    broker: &Arc<Broker>,
    name: &str,
    validate_only: bool,
    changes: Result<Vec<(String, Option<String>)>, Refused>,
    replace: bool,
) -> Result<(), Refused> {
    let invalid = |message: String| Refused {
        error: ResponseError::InvalidRequest,
        message,
    };
    if name != NODE.0.to_string() {
        return Err(invalid(format!(
            "only broker {} has configs to alter (no cluster-wide defaults are kept)",
            NODE.0
        )));
    }
    let changes = changes?;
    let check = altered(&broker.dynamic.snapshot(), &changes, replace);
    if let Err(message) = check {
        return Err(invalid(format!(
            "Invalid config value for resource {name}: {message}"
        )));
    }
    if validate_only {
        return Ok(());
    }
    let kept = broker
        .dynamic
        .change(move |configs| {
            // Checked again against the configs as they are now.
            altered(configs, &changes, replace).map(|next| *configs = next)
        })
        .await;
    match kept {
        Ok(Ok(())) => Ok(()),
        Ok(Err(message)) => Err(invalid(message)),
        Err(e) => Err(Refused {
            error: ResponseError::KafkaStorageError,
            message: format!("cannot keep the broker's configs: {e}"),
        }),
    }
}

/// AlterConfigs: each topic's configs replaced by those given (checked;
/// INVALID_CONFIG names what is refused).
pub async fn alter_configs(
    broker: &Arc<Broker>,
    request: &AlterConfigsRequest,
) -> AlterConfigsResponse {
    let mut response = AlterConfigsResponse::default();
    for resource in &request.resources {
        let outcome = if resource.resource_type == BROKER_RESOURCE {
            let changes = resource
                .configs
                .iter()
                .map(|c| (c.name.to_string(), c.value.as_ref().map(|v| v.to_string())))
                .collect();
            alter_broker(
                broker,
                &resource.resource_name,
                request.validate_only,
                Ok(changes),
                true,
            )
            .await
        } else {
            alter(
                broker,
                resource.resource_type,
                &resource.resource_name,
                request.validate_only,
                |_| {
                    TopicConfig::parse(
                        resource
                            .configs
                            .iter()
                            .map(|c| (c.name.as_str(), c.value.as_deref())),
                    )
                },
            )
            .await
        };
        let mut result = alter_configs_response::AlterConfigsResourceResponse::default();
        result.resource_type = resource.resource_type;
        result.resource_name = resource.resource_name.clone();
        if let Err(refused) = outcome {
            result.error_code = refused.error.code();
            result.error_message = Some(str_bytes(&refused.message));
        }
        response.responses.push(result);
    }
    response
}

/// IncrementalAlterConfigs: each topic's configs set (SET), removed
/// (DELETE), or, for a list config (`cleanup.policy`), added to (APPEND)
/// or subtracted from (SUBTRACT) one by one, the rest kept; APPEND or
/// SUBTRACT on another config is INVALID_CONFIG, as Kafka answers it.
pub async fn incremental_alter_configs(
    broker: &Arc<Broker>,
    request: &IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigsResponse {
    let mut response = IncrementalAlterConfigsResponse::default();
    for resource in &request.resources {
        let outcome = if resource.resource_type == BROKER_RESOURCE {
            let changes = resource
                .configs
                .iter()
                .map(|c| match (c.config_operation, &c.value) {
                    (SET, Some(value)) => Ok((c.name.to_string(), Some(value.to_string()))),
                    (DELETE, _) => Ok((c.name.to_string(), None)),
                    (op, _) => Err(Refused {
                        error: ResponseError::InvalidRequest,
                        message: format!(
                            "operation {op} on {}: a broker config is only SET or DELETEd",
                            c.name
                        ),
                    }),
                })
                .collect();
            alter_broker(
                broker,
                &resource.resource_name,
                request.validate_only,
                changes,
                false,
            )
            .await
        } else {
            alter(
                broker,
                resource.resource_type,
                &resource.resource_name,
                request.validate_only,
                |old| {
                    let mut now = old.clone();
                    for c in &resource.configs {
                        let name = c.name.to_string();
                        let listed = match (c.config_operation, c.value.as_deref()) {
                            (op @ (APPEND | SUBTRACT), Some(items)) => {
                                Some(now.list_altered(&name, items, op == APPEND)?)
                            }
                            _ => None,
                        };
                        let set = &mut now.set;
                        set.retain(|(n, _)| *n != name);
                        match (c.config_operation, c.value.as_deref()) {
                            (APPEND | SUBTRACT, Some(_)) => {
                                set.push((name, listed.unwrap_or_default()));
                            }
                            (SET, Some(value)) => set.push((name, value.to_string())),
                            (SET | APPEND | SUBTRACT, None) => {
                                return Err(InvalidConfig(format!(
                                    "Null value not supported for topic configs: {name}"
                                )))
                            }
                            (DELETE, _) => {}
                            (op, _) => {
                                return Err(InvalidConfig(format!(
                                    "unknown operation {op} on {name}"
                                )))
                            }
                        }
                        // Each operation sees the ones before it.
                        now = TopicConfig::parse(
                            now.set.iter().map(|(n, v)| (n.as_str(), Some(v.as_str()))),
                        )?;
                    }
                    Ok(now)
                },
            )
            .await
        };
        let mut result =
            incremental_alter_configs_response::AlterConfigsResourceResponse::default();
        result.resource_type = resource.resource_type;
        result.resource_name = resource.resource_name.clone();
        if let Err(refused) = outcome {
            result.error_code = refused.error.code();
            result.error_message = Some(str_bytes(&refused.message));
        }
        response.responses.push(result);
    }
    response
}
