//! ACLs and SCRAM credentials through raw frames, as librdkafka's 0081
//! uses them: CreateAcls, DescribeAcls and DeleteAcls (v0 and v1: LITERAL
//! and PREFIXED patterns, MATCH and ANY filters), invalid ACLs and
//! filters answered INVALID_REQUEST beside valid ones; SCRAM credentials
//! described (RESOURCE_NOT_FOUND for an unknown user), upserted, refused
//! as Kafka refuses them, deleted; both kept across a restart on a data
//! directory, in files only their owner reads. Requests of many entries
//! (each indexed, not scanned per entry) answered as Kafka answers them.
//! (Main served none of these APIs: it closed the connection.)

use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;

use bytes::Bytes;
use kafka_protocol::messages::{
    alter_user_scram_credentials_request, create_acls_request, delete_acls_request,
    describe_user_scram_credentials_request, AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse, ApiKey, CreateAclsRequest, CreateAclsResponse,
    DeleteAclsRequest, DeleteAclsResponse, DescribeAclsRequest, DescribeAclsResponse,
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use purgatorio_testkit::TempDir;

mod common;
use common::{answer, Broker};

const TOPIC: i8 = 2;
const GROUP: i8 = 3;
const ANY: i8 = 1;
const MATCH: i8 = 2;
const LITERAL: i8 = 3;
const PREFIXED: i8 = 4;
const READ: i8 = 3;
const WRITE: i8 = 4;
const ALLOW: i8 = 3;
const SHA_256: i8 = 1;
const SHA_512: i8 = 2;

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

/// An ACL creation of `principal` allowed `operation` on topic `name`.
fn creation(
    name: &str,
    pattern: i8,
    principal: &str,
    operation: i8,
) -> create_acls_request::AclCreation {
    let mut c = create_acls_request::AclCreation::default();
    c.resource_type = TOPIC;
    c.resource_name = s(name);
    c.resource_pattern_type = pattern;
    c.principal = s(principal);
    c.host = s("*");
    c.operation = operation;
    c.permission_type = ALLOW;
    c
}

/// The error codes of a CreateAcls of `creations`.
fn create(
    s: &mut TcpStream,
    version: i16,
    creations: Vec<create_acls_request::AclCreation>,
) -> Vec<i16> {
    let mut request = CreateAclsRequest::default();
    request.creations = creations;
    let response: CreateAclsResponse = answer(s, ApiKey::CreateAcls, version, request);
    response.results.iter().map(|r| r.error_code).collect()
}

/// DescribeAcls of topic ACLs named `name` (any name: `None`) by
/// `pattern`: (error, [(name, pattern type, principal, operation)]).
fn describe(
    s: &mut TcpStream,
    version: i16,
    name: Option<&str>,
    pattern: i8,
) -> (i16, Vec<(String, i8, String, i8)>) {
    let mut request = DescribeAclsRequest::default();
    request.resource_type_filter = TOPIC;
    request.resource_name_filter = name.map(self::s);
    request.pattern_type_filter = pattern;
    request.principal_filter = None;
    request.host_filter = None;
    request.operation = ANY;
    request.permission_type = ANY;
    let response: DescribeAclsResponse = answer(s, ApiKey::DescribeAcls, version, request);
    let mut acls = Vec::new();
    for r in &response.resources {
        assert_eq!(r.resource_type, TOPIC);
        for a in &r.acls {
            assert_eq!((a.host.as_str(), a.permission_type), ("*", ALLOW));
            acls.push((
                r.resource_name.to_string(),
                r.pattern_type,
                a.principal.to_string(),
                a.operation,
            ));
        }
    }
    acls.sort();
    (response.error_code, acls)
}

/// DeleteAcls of topic ACLs of `principal` by `pattern`: per filter, the
/// error and the names deleted.
fn delete(
    s: &mut TcpStream,
    version: i16,
    filters: &[(i8, i8, Option<&str>)],
) -> Vec<(i16, Vec<String>)> {
    let mut request = DeleteAclsRequest::default();
    request.filters = filters
        .iter()
        .map(|&(resource_type, pattern, principal)| {
            let mut f = delete_acls_request::DeleteAclsFilter::default();
            f.resource_type_filter = resource_type;
            f.pattern_type_filter = pattern;
            f.resource_name_filter = None;
            f.principal_filter = principal.map(self::s);
            f.host_filter = None;
            f.operation = ANY;
            f.permission_type = ANY;
            f
        })
        .collect();
    let response: DeleteAclsResponse = answer(s, ApiKey::DeleteAcls, version, request);
    response
        .filter_results
        .iter()
        .map(|r| {
            let mut names: Vec<String> = r
                .matching_acls
                .iter()
                .map(|a| a.resource_name.to_string())
                .collect();
            names.sort();
            (r.error_code, names)
        })
        .collect()
}

#[test]
fn acls_are_created_described_by_filter_deleted_and_kept() {
    let dir = TempDir::new("broker-acls");
    let broker = Broker::start_in(1, Some(dir.path()));
    let mut c = broker.connect();
    let invalid = ResponseError::InvalidRequest.code();
    // v1: a PREFIXED and a LITERAL ACL, beside four invalid ones.
    let mut empty = creation("", LITERAL, "User:x", READ);
    empty.resource_type = GROUP;
    assert_eq!(
        create(
            &mut c,
            1,
            vec![
                creation("orders_", PREFIXED, "User:test1", READ),
                creation("orders_2", LITERAL, "User:test2", WRITE),
                creation("t", MATCH, "User:x", READ),
                creation("t", LITERAL, "User:x", ANY),
                creation("t", LITERAL, "nobody", READ),
                empty,
            ]
        ),
        [0, 0, invalid, invalid, invalid, invalid]
    );
    // v0 has no pattern type: LITERAL. Made twice, kept once.
    let wildcard = || creation("*", LITERAL, "User:test3", READ);
    assert_eq!(create(&mut c, 0, vec![wildcard(), wildcard()]), [0, 0]);

    let test1 = (
        "orders_".to_string(),
        PREFIXED,
        "User:test1".to_string(),
        READ,
    );
    let test2 = (
        "orders_2".to_string(),
        LITERAL,
        "User:test2".to_string(),
        WRITE,
    );
    let test3 = ("*".to_string(), LITERAL, "User:test3".to_string(), READ);
    // MATCH: every ACL that applies to the topic orders_2.
    assert_eq!(
        describe(&mut c, 1, Some("orders_2"), MATCH),
        (0, vec![test3.clone(), test1.clone(), test2.clone()])
    );
    assert_eq!(
        describe(&mut c, 1, Some("orders_"), ANY),
        (0, vec![test1.clone()])
    );
    assert_eq!(
        describe(&mut c, 1, None, LITERAL),
        (0, vec![test3.clone(), test2.clone()])
    );
    // v0 describes LITERAL ACLs only (its requests have no pattern type).
    assert_eq!(
        describe(&mut c, 0, None, LITERAL).1,
        [test3.clone(), test2.clone()]
    );
    assert_eq!(
        describe(&mut c, 1, Some("payments"), MATCH),
        (0, vec![test3.clone()])
    );
    assert_eq!(describe(&mut c, 1, None, 0), (invalid, vec![]));
    assert_eq!(describe(&mut c, 2, None, ANY).1.len(), 3, "v2, flexible");

    // Kept across a restart.
    let addr = broker.addr.clone();
    drop(broker);
    let broker = Broker::start_on(&addr, 1, Some(dir.path()), &[]);
    let mut c = broker.connect();
    assert_eq!(
        describe(&mut c, 1, None, ANY),
        (0, vec![test3.clone(), test1.clone(), test2.clone()])
    );
    // Per filter: an unknown pattern type refused, test2's deleted, then
    // everything else.
    assert_eq!(
        delete(
            &mut c,
            1,
            &[
                (TOPIC, 0, None),
                (ANY, ANY, Some("User:test2")),
                (GROUP, ANY, None)
            ]
        ),
        [(invalid, vec![]), (0, vec!["orders_2".into()]), (0, vec![])]
    );
    assert_eq!(
        delete(&mut c, 0, &[(TOPIC, LITERAL, None)]),
        [(0, vec!["*".into()])]
    );
    assert_eq!(describe(&mut c, 3, None, ANY), (0, vec![test1]));
    assert_eq!(
        delete(&mut c, 3, &[(ANY, ANY, None)]),
        [(0, vec!["orders_".into()])]
    );
    drop(broker);
    let broker = Broker::start_on(&addr, 1, Some(dir.path()), &[]);
    assert_eq!(describe(&mut broker.connect(), 1, None, ANY), (0, vec![]));
}

/// A user's description: (name, error, [(mechanism, iterations)]).
type Described = (String, i16, Vec<(i8, i32)>);

/// DescribeUserScramCredentials of `users` (none: every user), per user.
fn describe_users(s: &mut TcpStream, users: &[&str]) -> Vec<Described> {
    let mut request = DescribeUserScramCredentialsRequest::default();
    request.users = Some(
        users
            .iter()
            .map(|u| {
                let mut name = describe_user_scram_credentials_request::UserName::default();
                name.name = self::s(u);
                name
            })
            .collect(),
    );
    let response: DescribeUserScramCredentialsResponse =
        answer(s, ApiKey::DescribeUserScramCredentials, 0, request);
    assert_eq!(response.error_code, 0);
    response
        .results
        .iter()
        .map(|r| {
            let mut infos: Vec<(i8, i32)> = r
                .credential_infos
                .iter()
                .map(|i| (i.mechanism, i.iterations))
                .collect();
            infos.sort();
            (r.user.to_string(), r.error_code, infos)
        })
        .collect()
}

/// AlterUserScramCredentials: deletions (user, mechanism), upsertions
/// (user, mechanism, iterations): per user, its error.
fn alter_users(
    s: &mut TcpStream,
    deletions: &[(&str, i8)],
    upsertions: &[(&str, i8, i32)],
) -> Vec<(String, i16)> {
    let mut request = AlterUserScramCredentialsRequest::default();
    request.deletions = deletions
        .iter()
        .map(|&(user, mechanism)| {
            let mut d = alter_user_scram_credentials_request::ScramCredentialDeletion::default();
            d.name = self::s(user);
            d.mechanism = mechanism;
            d
        })
        .collect();
    request.upsertions = upsertions
        .iter()
        .map(|&(user, mechanism, iterations)| {
            let mut u = alter_user_scram_credentials_request::ScramCredentialUpsertion::default();
            u.name = self::s(user);
            u.mechanism = mechanism;
            u.iterations = iterations;
            u.salt = Bytes::from_static(b"s\0lt");
            u.salted_password = Bytes::from_static(&[0, 1, 2, 3, 0xff]);
            u
        })
        .collect();
    let response: AlterUserScramCredentialsResponse =
        answer(s, ApiKey::AlterUserScramCredentials, 0, request);
    response
        .results
        .iter()
        .map(|r| (r.user.to_string(), r.error_code))
        .collect()
}

#[test]
fn scram_credentials_are_stored_described_refused_and_kept_as_kafka_does() {
    let dir = TempDir::new("broker-scram");
    let broker = Broker::start_in(1, Some(dir.path()));
    let mut c = broker.connect();
    let not_found = ResponseError::ResourceNotFound.code();
    let unacceptable = ResponseError::UnacceptableCredential.code();
    let duplicate = ResponseError::DuplicateResource.code();
    assert_eq!(
        describe_users(&mut c, &["alice"]),
        [("alice".into(), not_found, vec![])]
    );
    assert_eq!(
        alter_users(
            &mut c,
            &[("carol", SHA_256)],
            &[
                ("alice", SHA_256, 10_000),
                ("alice", SHA_512, 4096),
                ("bob", SHA_256, 100),
                ("dave", SHA_256, 5000),
                ("dave", SHA_256, 6000),
                ("erin", 9, 5000),
                ("", SHA_256, 5000),
            ]
        ),
        [
            ("carol".into(), not_found),
            ("alice".into(), 0),
            ("bob".into(), unacceptable),
            ("dave".into(), duplicate),
            (
                "erin".into(),
                ResponseError::UnsupportedSaslMechanism.code()
            ),
            ("".into(), unacceptable),
        ]
    );
    let alice = (
        "alice".to_string(),
        0,
        vec![(SHA_256, 10_000), (SHA_512, 4096)],
    );
    assert_eq!(
        describe_users(&mut c, &["alice", "bob"]),
        [alice.clone(), ("bob".into(), not_found, vec![])]
    );
    // Named twice: answered once, as Kafka's ScramImage answers.
    assert_eq!(
        describe_users(&mut c, &["alice", "bob", "alice"]),
        [
            ("alice".into(), duplicate, vec![]),
            ("bob".into(), not_found, vec![])
        ]
    );
    // Kept across a restart; no users asked: every user.
    let addr = broker.addr.clone();
    drop(broker);
    let broker = Broker::start_on(&addr, 1, Some(dir.path()), &[]);
    let mut c = broker.connect();
    assert_eq!(describe_users(&mut c, &[]), [alice]);
    assert_eq!(
        alter_users(&mut c, &[("alice", SHA_512)], &[("alice", SHA_256, 8192)]),
        [("alice".into(), 0)]
    );
    assert_eq!(
        describe_users(&mut c, &["alice"]),
        [("alice".into(), 0, vec![(SHA_256, 8192)])]
    );
    assert_eq!(
        alter_users(&mut c, &[("alice", SHA_256)], &[]),
        [("alice".into(), 0)]
    );
    assert_eq!(describe_users(&mut c, &[]), []);
}

/// The permission bits of `dir`'s `file`.
fn mode(dir: &std::path::Path, file: &str) -> u32 {
    let path = dir.join(file);
    let metadata = std::fs::metadata(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    metadata.permissions().mode() & 0o777
}

#[test]
fn kept_credentials_and_acls_are_readable_by_their_owner_only() {
    let dir = TempDir::new("broker-kept-modes");
    // An ACL file an older broker left readable by all: made private.
    std::fs::write(dir.path().join("@acls"), "").unwrap();
    let everyone = std::fs::Permissions::from_mode(0o644);
    std::fs::set_permissions(dir.path().join("@acls"), everyone).unwrap();
    let broker = Broker::start_in(1, Some(dir.path()));
    assert_eq!(mode(dir.path(), "@acls"), 0o600);
    let mut c = broker.connect();
    assert_eq!(
        alter_users(&mut c, &[], &[("alice", SHA_256, 8192)]),
        [("alice".into(), 0)]
    );
    assert_eq!(mode(dir.path(), "@scram") & 0o077, 0, "@scram");
    assert_eq!(
        create(&mut c, 1, vec![creation("t", LITERAL, "User:alice", READ)]),
        [0]
    );
    assert_eq!(mode(dir.path(), "@acls") & 0o077, 0, "@acls");
}

#[test]
fn requests_of_many_entries_are_answered_as_kafka_answers_them() {
    let broker = Broker::start(1);
    let mut c = broker.connect();
    let users: Vec<String> = (0..2000).map(|i| format!("user{i}")).collect();
    let upsertions: Vec<(&str, i8, i32)> =
        users.iter().map(|u| (u.as_str(), SHA_256, 4096)).collect();
    // Every user upserted once, and user0 also deleted: DUPLICATE_RESOURCE.
    let altered = alter_users(&mut c, &[("user0", SHA_256)], &upsertions);
    assert_eq!(altered.len(), users.len());
    assert_eq!(
        altered[0],
        ("user0".into(), ResponseError::DuplicateResource.code())
    );
    assert!(altered[1..].iter().all(|(_, e)| *e == 0), "{altered:?}");
    // Each user named twice: each answered once, DUPLICATE_RESOURCE.
    let twice: Vec<&str> = users.iter().chain(&users).map(String::as_str).collect();
    let described = describe_users(&mut c, &twice);
    let duplicate = ResponseError::DuplicateResource.code();
    assert_eq!(described.len(), users.len());
    assert!(described
        .iter()
        .zip(&users)
        .all(|(d, u)| d == &(u.clone(), duplicate, vec![])));
    // No users asked: each user with a credential once.
    let every = describe_users(&mut c, &[]);
    assert_eq!(every.len(), users.len() - 1, "user0's was refused");
    assert!(every
        .iter()
        .all(|(_, e, infos)| *e == 0 && infos == &[(SHA_256, 4096)]));

    // ACLs on 1000 topics, two principals each, every one made twice:
    // kept once, grouped by topic.
    let creations = |from: usize| -> Vec<create_acls_request::AclCreation> {
        (from..from + 1000)
            .flat_map(|i| {
                let name = format!("t{}", i % 1000);
                [
                    creation(&name, LITERAL, "User:a", READ),
                    creation(&name, LITERAL, "User:b", WRITE),
                ]
            })
            .collect()
    };
    let made = create(&mut c, 1, [creations(0), creations(1000)].concat());
    assert_eq!(made, vec![0; 4000]);
    let mut request = DescribeAclsRequest::default();
    request.resource_type_filter = TOPIC;
    request.pattern_type_filter = ANY;
    request.resource_name_filter = None;
    request.principal_filter = None;
    request.host_filter = None;
    request.operation = ANY;
    request.permission_type = ANY;
    let response: DescribeAclsResponse = answer(&mut c, ApiKey::DescribeAcls, 1, request);
    assert_eq!(response.error_code, 0);
    assert_eq!(response.resources.len(), 1000);
    for (i, r) in response.resources.iter().enumerate() {
        assert_eq!(r.resource_name.as_str(), format!("t{i}"));
        let principals: Vec<&str> = r.acls.iter().map(|a| a.principal.as_str()).collect();
        assert_eq!(principals, ["User:a", "User:b"], "t{i}");
    }
}
