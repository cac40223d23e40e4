//! `cleanup.policy=compact` as librdkafka's 0011 uses it, through raw
//! frames: APPENDed with IncrementalAlterConfigs, shown by
//! DescribeConfigs; a batch holding a record without a key is refused
//! whole with INVALID_RECORD, the record named in `record_errors`, and a
//! batch of keyed records appended; SUBTRACTed, the keyless record is
//! taken again. (Main refused `compact` and the APPEND operation.)

use std::io::Write;
use std::net::TcpStream;

use bytes::{Buf, Bytes};
use kafka_protocol::messages::{
    describe_configs_request, incremental_alter_configs_request, ApiKey, DescribeConfigsRequest,
    DescribeConfigsResponse, IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
    ProduceResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kafka_protocol::ResponseError;

mod common;
use common::{frame, produce_request, read_frame, record_batch, Broker};

/// DescribeConfigs' and IncrementalAlterConfigs' resource type of a topic.
const TOPIC: i8 = 2;

/// IncrementalAlterConfigs' APPEND.
const APPEND: i8 = 2;

/// IncrementalAlterConfigs' SUBTRACT.
const SUBTRACT: i8 = 3;

/// An uncompressed batch of records with these keys (value "v" each).
fn batch(keys: &[Option<&str>]) -> Bytes {
    let records: Vec<_> = keys
        .iter()
        .map(|key| {
            let key = key.map(|k| Bytes::from(k.to_string()));
            (key, Some(Bytes::from_static(b"v")))
        })
        .collect();
    record_batch(0, 1_000, &records)
}

/// The answer to a Produce v8 (acks 1) of `keys` to `topic`'s partition 0.
fn produce(s: &mut TcpStream, topic: &str, keys: &[Option<&str>]) -> ProduceResponse {
    let request = produce_request(topic, batch(keys), 1);
    s.write_all(&frame(ApiKey::Produce, 8, |b| {
        request.encode(b, 8).unwrap()
    }))
    .unwrap();
    let mut answer = read_frame(s).expect("the produce's answer");
    answer.advance(4); // correlation id
    ProduceResponse::decode(&mut answer, 8).unwrap()
}

/// The error code of an IncrementalAlterConfigs v0 of `topic`'s
/// `cleanup.policy` by `op` with `value`.
fn alter_policy(s: &mut TcpStream, topic: &str, op: i8, value: &str) -> i16 {
    let mut config = incremental_alter_configs_request::AlterableConfig::default();
    config.name = StrBytes::from_static_str("cleanup.policy");
    config.config_operation = op;
    config.value = Some(StrBytes::from_string(value.to_string()));
    let mut resource = incremental_alter_configs_request::AlterConfigsResource::default();
    resource.resource_type = TOPIC;
    resource.resource_name = StrBytes::from_string(topic.to_string());
    resource.configs = vec![config];
    let mut request = IncrementalAlterConfigsRequest::default();
    request.resources = vec![resource];
    s.write_all(&frame(ApiKey::IncrementalAlterConfigs, 0, |b| {
        request.encode(b, 0).unwrap()
    }))
    .unwrap();
    let mut answer = read_frame(s).expect("the alteration's answer");
    answer.advance(4);
    IncrementalAlterConfigsResponse::decode(&mut answer, 0)
        .unwrap()
        .responses[0]
        .error_code
}

/// `topic`'s `cleanup.policy` as DescribeConfigs v1 shows it.
fn policy(s: &mut TcpStream, topic: &str) -> String {
    let mut resource = describe_configs_request::DescribeConfigsResource::default();
    resource.resource_type = TOPIC;
    resource.resource_name = StrBytes::from_string(topic.to_string());
    resource.configuration_keys = Some(vec![StrBytes::from_static_str("cleanup.policy")]);
    let mut request = DescribeConfigsRequest::default();
    request.resources = vec![resource];
    s.write_all(&frame(ApiKey::DescribeConfigs, 1, |b| {
        request.encode(b, 1).unwrap()
    }))
    .unwrap();
    let mut answer = read_frame(s).expect("the description");
    answer.advance(4);
    let described = DescribeConfigsResponse::decode(&mut answer, 1).unwrap();
    described.results[0]
        .configs
        .iter()
        .find(|c| c.name.as_str() == "cleanup.policy")
        .and_then(|c| c.value.as_ref())
        .map(|v| v.to_string())
        .unwrap_or_default()
}

#[test]
fn a_compacted_topic_refuses_a_batch_with_a_keyless_record_naming_it() {
    let broker = Broker::start(1);
    broker.create(&["keyed"]);
    let mut s = broker.connect();
    assert_eq!(alter_policy(&mut s, "keyed", APPEND, "compact"), 0);
    assert_eq!(policy(&mut s, "keyed"), "delete,compact");
    let refused = produce(&mut s, "keyed", &[Some("a"), None, Some("c"), None]);
    let p = &refused.responses[0].partition_responses[0];
    assert_eq!(p.error_code, ResponseError::InvalidRecord.code());
    let named: Vec<i32> = p.record_errors.iter().map(|e| e.batch_index).collect();
    assert_eq!(named, [1, 3], "the keyless records, by index");
    let why = p.record_errors[0].batch_index_error_message.as_deref();
    assert!(
        why.is_some_and(|m| m.contains("without key")),
        "Kafka's message: {why:?}"
    );
    let keyed = produce(&mut s, "keyed", &[Some("a"), Some("b")]);
    let p = &keyed.responses[0].partition_responses[0];
    assert_eq!(
        (p.error_code, p.base_offset),
        (0, 0),
        "the refused batch took no offset"
    );
    assert_eq!(alter_policy(&mut s, "keyed", SUBTRACT, "compact"), 0);
    assert_eq!(policy(&mut s, "keyed"), "delete");
    let keyless = produce(&mut s, "keyed", &[None]);
    let p = &keyless.responses[0].partition_responses[0];
    assert_eq!((p.error_code, p.base_offset), (0, 2));
}
