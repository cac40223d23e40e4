//! What librdkafka's 0081 describes beside the ACLs, through raw frames:
//! topic ids (Metadata v10+: one per topic, the same across requests and
//! restarts, a new one for a topic made again, v12 asking by id), the
//! authorized operations of topics, the cluster and groups (everything
//! Kafka defines for each: no ACL is enforced), DescribeCluster, and the
//! broker's dynamic SASL configs set by AlterConfigs and shown by
//! DescribeConfigs. (Main served Metadata up to v9 with no ids,
//! DescribeCluster not at all, and refused every broker config.)

use std::net::TcpStream;

use kafka_protocol::messages::{
    alter_configs_request, describe_configs_request, metadata_request, AlterConfigsRequest,
    AlterConfigsResponse, ApiKey, DescribeClusterRequest, DescribeClusterResponse,
    DescribeConfigsRequest, DescribeConfigsResponse, DescribeGroupsRequest, DescribeGroupsResponse,
    GroupId, MetadataRequest, MetadataResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use purgatorio_testkit::TempDir;
use uuid::Uuid;

mod common;
use common::{answer, Broker};

/// Kafka's operation codes, as bits of an authorized-operations field.
const READ: i32 = 1 << 3;
const WRITE: i32 = 1 << 4;
const CREATE: i32 = 1 << 5;
const DELETE: i32 = 1 << 6;
const ALTER: i32 = 1 << 7;
const DESCRIBE: i32 = 1 << 8;
const CLUSTER_ACTION: i32 = 1 << 9;
const DESCRIBE_CONFIGS: i32 = 1 << 10;
const ALTER_CONFIGS: i32 = 1 << 11;
const IDEMPOTENT_WRITE: i32 = 1 << 12;

/// The field's value when authorized operations were not asked for.
const NOT_ASKED: i32 = i32::MIN;

/// A Metadata of `version` for `topics` (by name, or by id), not creating
/// any, with the authorized operations asked for if `operations`.
fn metadata(
    s: &mut TcpStream,
    version: i16,
    topics: &[(Option<&str>, Uuid)],
    operations: bool,
) -> MetadataResponse {
    let mut request = MetadataRequest::default();
    request.topics = Some(
        topics
            .iter()
            .map(|&(name, id)| {
                let mut t = metadata_request::MetadataRequestTopic::default();
                t.name = name.map(|n| TopicName(StrBytes::from_string(n.to_string())));
                t.topic_id = id;
                t
            })
            .collect(),
    );
    request.allow_auto_topic_creation = false;
    request.include_topic_authorized_operations = operations;
    request.include_cluster_authorized_operations = operations && version <= 10;
    answer(s, ApiKey::Metadata, version, request)
}

/// The id Metadata v10 gives `topic`.
fn id_of(s: &mut TcpStream, topic: &str) -> Uuid {
    let response = metadata(s, 10, &[(Some(topic), Uuid::nil())], false);
    assert_eq!(response.topics[0].error_code, 0, "{topic}");
    response.topics[0].topic_id
}

#[test]
fn topics_have_ids_that_last_and_metadata_finds_them_by_id() {
    let dir = TempDir::new("broker-topic-ids");
    let broker = Broker::start_in(1, Some(dir.path()));
    broker.create(&["orders", "payments"]);
    let mut c = broker.connect();
    let orders = id_of(&mut c, "orders");
    let payments = id_of(&mut c, "payments");
    assert!(
        !orders.is_nil() && orders != payments,
        "{orders} {payments}"
    );
    assert_eq!(id_of(&mut c, "orders"), orders);

    // v12 by id: the topic named; an unknown id UNKNOWN_TOPIC_ID.
    let unknown = Uuid::from_u128(42);
    let by_id = metadata(&mut c, 12, &[(None, payments), (None, unknown)], true);
    let named = &by_id.topics[0];
    assert_eq!(named.name.as_ref().map(|n| n.as_str()), Some("payments"));
    assert_eq!((named.error_code, named.topic_id), (0, payments));
    assert_eq!(
        named.topic_authorized_operations,
        READ | WRITE | CREATE | DESCRIBE | DELETE | ALTER | DESCRIBE_CONFIGS | ALTER_CONFIGS
    );
    assert_eq!(
        by_id.topics[1].error_code,
        ResponseError::UnknownTopicId.code()
    );
    let plain = metadata(&mut c, 12, &[(Some("orders"), Uuid::nil())], false);
    assert_eq!(plain.topics[0].topic_authorized_operations, NOT_ASKED);

    // The cluster's operations (asked through Metadata v10, as
    // librdkafka's DescribeCluster does).
    let cluster = metadata(&mut c, 10, &[], true).cluster_authorized_operations;
    let expected = CREATE
        | CLUSTER_ACTION
        | DESCRIBE_CONFIGS
        | ALTER_CONFIGS
        | IDEMPOTENT_WRITE
        | ALTER
        | DESCRIBE;
    assert_eq!(cluster, expected);

    // Kept across a restart; a topic made again gets a new id.
    let addr = broker.addr.clone();
    drop(broker);
    let broker = Broker::start_on(&addr, 1, Some(dir.path()), &[]);
    let mut c = broker.connect();
    assert_eq!(id_of(&mut c, "orders"), orders);
    assert_eq!(id_of(&mut c, "payments"), payments);
    let mut delete = kafka_protocol::messages::DeleteTopicsRequest::default();
    delete.topic_names = vec![TopicName(StrBytes::from_static_str("orders"))];
    let deleted: kafka_protocol::messages::DeleteTopicsResponse =
        answer(&mut c, ApiKey::DeleteTopics, 4, delete);
    assert_eq!(deleted.responses[0].error_code, 0);
    broker.create(&["orders"]);
    let again = id_of(&mut c, "orders");
    assert!(again != orders && !again.is_nil(), "{again}");
}

#[test]
fn the_cluster_and_groups_are_described_with_every_operation() {
    let broker = Broker::start(1);
    let mut c = broker.connect();
    for version in [0, 1] {
        let mut request = DescribeClusterRequest::default();
        request.include_cluster_authorized_operations = true;
        let cluster: DescribeClusterResponse =
            answer(&mut c, ApiKey::DescribeCluster, version, request);
        assert_eq!(cluster.error_code, 0);
        assert_eq!(cluster.cluster_id.as_str(), "purgatorio");
        assert_eq!(cluster.brokers.len(), 1);
        assert_eq!(
            format!("{}:{}", cluster.brokers[0].host, cluster.brokers[0].port),
            broker.addr
        );
        assert_eq!(cluster.cluster_authorized_operations.count_ones(), 7);
    }
    let mut controllers = DescribeClusterRequest::default();
    controllers.endpoint_type = 2;
    let refused: DescribeClusterResponse = answer(&mut c, ApiKey::DescribeCluster, 1, controllers);
    assert_eq!(refused.error_code, ResponseError::InvalidRequest.code());

    let mut request = DescribeGroupsRequest::default();
    request.groups = vec![GroupId(StrBytes::from_static_str("g"))];
    request.include_authorized_operations = true;
    let groups: DescribeGroupsResponse = answer(&mut c, ApiKey::DescribeGroups, 5, request.clone());
    assert_eq!(
        groups.groups[0].authorized_operations,
        READ | DESCRIBE | DELETE
    );
    request.include_authorized_operations = false;
    let groups: DescribeGroupsResponse = answer(&mut c, ApiKey::DescribeGroups, 5, request);
    assert_eq!(groups.groups[0].authorized_operations, NOT_ASKED);
}

/// DescribeConfigs' resource types.
const TOPIC: i8 = 2;
const GROUP: i8 = 32;
const BROKER: i8 = 4;

/// AlterConfigs of broker `name`'s configs to `configs`: the error code.
fn alter_broker(s: &mut TcpStream, name: &str, configs: &[(&str, &str)]) -> i16 {
    let mut resource = alter_configs_request::AlterConfigsResource::default();
    resource.resource_type = BROKER;
    resource.resource_name = StrBytes::from_string(name.to_string());
    resource.configs = configs
        .iter()
        .map(|(n, v)| {
            let mut c = alter_configs_request::AlterableConfig::default();
            c.name = StrBytes::from_string(n.to_string());
            c.value = Some(StrBytes::from_string(v.to_string()));
            c
        })
        .collect();
    let mut request = AlterConfigsRequest::default();
    request.resources = vec![resource];
    let response: AlterConfigsResponse = answer(s, ApiKey::AlterConfigs, 1, request);
    response.responses[0].error_code
}

/// A config as DescribeConfigs shows it: value, source, read-only,
/// sensitive.
type Shown = (Option<String>, i8, bool, bool);

/// DescribeConfigs (v1) of `resource_type` `name`: its error and the
/// config `key` if shown.
fn describe_config(
    s: &mut TcpStream,
    resource_type: i8,
    name: &str,
    key: &str,
) -> (i16, Option<Shown>) {
    let mut resource = describe_configs_request::DescribeConfigsResource::default();
    resource.resource_type = resource_type;
    resource.resource_name = StrBytes::from_string(name.to_string());
    resource.configuration_keys = None;
    let mut request = DescribeConfigsRequest::default();
    request.resources = vec![resource];
    let response: DescribeConfigsResponse = answer(s, ApiKey::DescribeConfigs, 1, request);
    let result = &response.results[0];
    let config = result
        .configs
        .iter()
        .find(|c| c.name.as_str() == key)
        .map(|c| {
            (
                c.value.as_ref().map(|v| v.to_string()),
                c.config_source,
                c.read_only,
                c.is_sensitive,
            )
        });
    (result.error_code, config)
}

#[test]
fn the_broker_s_dynamic_sasl_configs_are_kept_and_shown_its_flags_are_not_altered() {
    let dir = TempDir::new("broker-dynamic-configs");
    let broker = Broker::start_in(1, Some(dir.path()));
    let mut c = broker.connect();
    let relogin = "sasl.kerberos.min.time.before.relogin";
    assert_eq!(alter_broker(&mut c, "0", &[(relogin, "58000")]), 0);
    let invalid = ResponseError::InvalidRequest.code();
    assert_eq!(alter_broker(&mut c, "0", &[(relogin, "soon")]), invalid);
    assert_eq!(
        alter_broker(&mut c, "0", &[("log.retention.ms", "1")]),
        invalid
    );
    assert_eq!(alter_broker(&mut c, "1", &[(relogin, "1")]), invalid);
    let shown = (Some("58000".to_string()), 2, false, false);
    assert_eq!(
        describe_config(&mut c, BROKER, "0", relogin),
        (0, Some(shown.clone()))
    );
    // A flag stays read-only.
    let flag = describe_config(&mut c, BROKER, "0", "num.partitions").1;
    assert_eq!(flag.map(|f| (f.1, f.2)), Some((4, true)));
    // A group's configs (Kafka 4's) are INVALID_REQUEST, as Kafka 3 answers.
    assert_eq!(describe_config(&mut c, GROUP, "g", "x").0, invalid);
    assert_eq!(
        describe_config(&mut c, TOPIC, "nope", "x").0,
        ResponseError::UnknownTopicOrPartition.code()
    );
    // Kept across a restart; AlterConfigs replaces them all, a password
    // is not shown.
    let addr = broker.addr.clone();
    drop(broker);
    let broker = Broker::start_on(&addr, 1, Some(dir.path()), &[]);
    let mut c = broker.connect();
    assert_eq!(
        describe_config(&mut c, BROKER, "0", relogin),
        (0, Some(shown))
    );
    assert_eq!(
        alter_broker(&mut c, "0", &[("ssl.key.password", "secret")]),
        0
    );
    assert_eq!(describe_config(&mut c, BROKER, "0", relogin), (0, None));
    assert_eq!(
        describe_config(&mut c, BROKER, "0", "ssl.key.password"),
        (0, Some((None, 2, false, true)))
    );
}
