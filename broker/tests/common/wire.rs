//! Raw Kafka frames for the broker's tests and its bench (which includes
//! this file by path): a request with its header and length, and an
//! answer's body.

use std::io::{Read, Write};
use std::net::TcpStream;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    metadata_request, produce_request, ApiKey, MetadataRequest, ProduceRequest, RequestHeader,
    ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

/// A request frame: length, header (v1 or v2 as the version needs), body.
pub fn frame(key: ApiKey, version: i16, body: impl FnOnce(&mut BytesMut)) -> Bytes {
    let mut header = RequestHeader::default();
    header.request_api_key = key as i16;
    header.request_api_version = version;
    header.correlation_id = 7;
    header.client_id = Some(StrBytes::from_static_str("test"));
    let mut buf = BytesMut::new();
    header
        .encode(&mut buf, key.request_header_version(version))
        .unwrap();
    body(&mut buf);
    let mut out = BytesMut::new();
    out.put_i32(buf.len() as i32);
    out.put_slice(&buf);
    out.freeze()
}

/// A Metadata (v9) of `topics` (`None`: every topic), creating those that
/// do not exist if `create` (the one request that creates topics).
pub fn metadata_frame(topics: Option<&[&str]>, create: bool) -> Bytes {
    let mut request = MetadataRequest::default();
    request.topics = topics.map(|names| {
        names
            .iter()
            .map(|name| {
                let mut t = metadata_request::MetadataRequestTopic::default();
                t.name = Some(TopicName(StrBytes::from_string(name.to_string())));
                t
            })
            .collect()
    });
    request.allow_auto_topic_creation = create;
    frame(ApiKey::Metadata, 9, |b| request.encode(b, 9).unwrap())
}

/// Reads one answer frame (without its length); `None` if the connection
/// closed or nothing came within the read timeout.
pub fn read_frame(stream: &mut TcpStream) -> Option<Bytes> {
    let mut length = [0u8; 4];
    stream.read_exact(&mut length).ok()?;
    let mut body = vec![0u8; usize::try_from(i32::from_be_bytes(length)).ok()?];
    stream.read_exact(&mut body).ok()?;
    Some(Bytes::from(body))
}

/// A Produce request of `records` (a record batch) to `topic`'s partition
/// 0 with `acks`, waiting at most 30 s for them.
pub fn produce_request(topic: &str, records: Bytes, acks: i16) -> ProduceRequest {
    let mut partition = produce_request::PartitionProduceData::default();
    partition.records = Some(records);
    let mut t = produce_request::TopicProduceData::default();
    t.name = TopicName(StrBytes::from_string(topic.to_string()));
    t.partition_data = vec![partition];
    let mut request = ProduceRequest::default();
    request.acks = acks;
    request.timeout_ms = 30_000;
    request.topic_data = vec![t];
    request
}

/// A request of `key` and `version` with `body`, sent on `s`; the
/// answer's body (past its header).
#[allow(dead_code)] // the bench, which includes this file, does not ask
pub fn ask(s: &mut TcpStream, key: ApiKey, version: i16, body: impl Encodable) -> Bytes {
    send(s, key, version, body);
    receive(s, key, version)
}

/// A request of `key` and `version` with `body`, sent on `s`; its answer
/// is left to [`receive`].
#[allow(dead_code)] // the bench, which includes this file, does not ask
pub fn send(s: &mut TcpStream, key: ApiKey, version: i16, body: impl Encodable) {
    s.write_all(&frame(key, version, |b| body.encode(b, version).unwrap()))
        .unwrap();
}

/// The next answer on `s`, to a request of `key` and `version`: its body
/// (past its header).
#[allow(dead_code)] // the bench, which includes this file, does not ask
pub fn receive(s: &mut TcpStream, key: ApiKey, version: i16) -> Bytes {
    let mut answer = read_frame(s).expect("an answer");
    ResponseHeader::decode(&mut answer, key.response_header_version(version)).unwrap();
    answer
}

/// An uncompressed record batch (magic 2) at base offset `base` of
/// `records`, (key, value) each, all created at `timestamp` ms.
pub fn record_batch(
    base: i64,
    timestamp: i64,
    records: &[(Option<Bytes>, Option<Bytes>)],
) -> Bytes {
    use kafka_protocol::records::{
        Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };
    let records: Vec<Record> = records
        .iter()
        .enumerate()
        .map(|(i, (key, value))| Record {
            transactional: false,
            control: false,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: base + i as i64,
            sequence: -1,
            timestamp,
            key: key.clone(),
            value: value.clone(),
            headers: Default::default(),
        })
        .collect();
    let mut out = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression: Compression::None,
    };
    RecordBatchEncoder::encode(&mut out, &records, &options).expect("a batch encodes");
    out.freeze()
}

/// `body` (an answer [`ask`] gave) decoded as `version` of its response,
/// to its last byte.
#[allow(dead_code)] // the bench, which includes this file, does not ask
pub fn decoded<R: kafka_protocol::protocol::Decodable>(mut body: Bytes, version: i16) -> R {
    let response = R::decode(&mut body, version).unwrap();
    assert!(body.is_empty(), "v{version}: {} bytes left", body.len());
    response
}

/// `request` sent on `s` as `key` v`version`; its answer, decoded to its
/// last byte.
#[allow(dead_code)] // the bench, which includes this file, does not ask
pub fn answer<R: kafka_protocol::protocol::Decodable>(
    s: &mut TcpStream,
    key: ApiKey,
    version: i16,
    request: impl Encodable,
) -> R {
    decoded(ask(s, key, version, request), version)
}
