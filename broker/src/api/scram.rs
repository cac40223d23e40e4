//! DescribeUserScramCredentials and AlterUserScramCredentials: the
//! credentials of [`crate::scram`], stored and described as Kafka does
//! (no SASL is served, so none is used).

use std::sync::Arc;

use kafka_protocol::messages::{
    alter_user_scram_credentials_response, describe_user_scram_credentials_response,
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse,
};
use kafka_protocol::ResponseError;

use super::str_bytes;
use crate::broker::Broker;
use crate::scram::{check_alteration, Credential, Refusal};

/// DescribeUserScramCredentials: each user asked for with the mechanism
/// and iterations of its credentials (RESOURCE_NOT_FOUND if it has none,
/// DUPLICATE_RESOURCE if asked for twice); no users (null or empty):
/// every user that has credentials.
pub fn describe_user_scram_credentials(
    broker: &Broker,
    request: &DescribeUserScramCredentialsRequest,
) -> DescribeUserScramCredentialsResponse {
    let credentials = broker.scram.snapshot();
    let asked: Vec<String> = match request.users.as_deref() {
        Some(users) if !users.is_empty() => users.iter().map(|u| u.name.to_string()).collect(),
        _ => {
            let mut all: Vec<String> = Vec::new();
            for c in credentials.iter() {
                if !all.contains(&c.user) {
                    all.push(c.user.clone());
                }
            }
            all
        }
    };
    let mut response = DescribeUserScramCredentialsResponse::default();
    response.results = asked
        .iter()
        .map(|user| {
            let mut result =
                describe_user_scram_credentials_response::DescribeUserScramCredentialsResult::default();
            result.user = str_bytes(user);
            let (error, message) = if asked.iter().filter(|u| *u == user).count() > 1 {
                (
                    ResponseError::DuplicateResource,
                    format!(
                        "Cannot describe SCRAM credentials for the same user twice in a single \
                         request: {user}"
                    ),
                )
            } else {
                result.credential_infos = credentials
                    .iter()
                    .filter(|c| c.user == *user)
                    .map(|c| {
                        let mut info =
                            describe_user_scram_credentials_response::CredentialInfo::default();
                        info.mechanism = c.mechanism;
                        info.iterations = c.iterations;
                        info
                    })
                    .collect();
                if !result.credential_infos.is_empty() {
                    return result;
                }
                (
                    ResponseError::ResourceNotFound,
                    format!("Attempt to describe a user credential that does not exist: {user}"),
                )
            };
            result.error_code = error.code();
            result.error_message = Some(str_bytes(&message));
            result
        })
        .collect();
    response
}

/// A user's alterations in one request.
struct UserAlterations {
    /// The user.
    user: String,
    /// The mechanisms whose credentials are deleted.
    deletions: Vec<i8>,
    /// The credentials set.
    upsertions: Vec<Credential>,
    /// Why they are refused, if they are.
    refused: Option<Refusal>,
}

/// AlterUserScramCredentials: deletions and upsertions, answered per
/// user (a user's alterations apply together or not at all): the same
/// user and mechanism twice is DUPLICATE_RESOURCE, an unknown mechanism
/// UNSUPPORTED_SASL_MECHANISM, an empty name or iterations outside
/// 4,096–16,384 UNACCEPTABLE_CREDENTIAL, deleting a credential that does
/// not exist RESOURCE_NOT_FOUND.
pub async fn alter_user_scram_credentials(
    broker: &Arc<Broker>,
    request: &AlterUserScramCredentialsRequest,
) -> AlterUserScramCredentialsResponse {
    let mut users: Vec<UserAlterations> = Vec::new();
    let mut named: Vec<(String, i8)> = Vec::new();
    for d in &request.deletions {
        let check = check_alteration(&d.name, d.mechanism);
        alteration(&mut users, &mut named, &d.name, d.mechanism, check)
            .deletions
            .push(d.mechanism);
    }
    for u in &request.upsertions {
        let credential = Credential {
            user: u.name.to_string(),
            mechanism: u.mechanism,
            iterations: u.iterations,
            salt: u.salt.to_vec(),
            salted_password: u.salted_password.to_vec(),
        };
        let check = credential.check();
        alteration(&mut users, &mut named, &u.name, u.mechanism, check)
            .upsertions
            .push(credential);
    }
    let names: Vec<String> = users.iter().map(|u| u.user.clone()).collect();
    let applied = broker
        .scram
        .change(move |credentials| {
            for user in &mut users {
                let exists = |m: &i8| {
                    credentials
                        .iter()
                        .any(|c| c.user == user.user && c.mechanism == *m)
                };
                if user.refused.is_none() && !user.deletions.iter().all(exists) {
                    user.refused = Some(Refusal::NotFound);
                }
                if user.refused.is_some() {
                    continue;
                }
                credentials.retain(|c| {
                    c.user != user.user
                        || !(user.deletions.contains(&c.mechanism)
                            || user.upsertions.iter().any(|u| u.mechanism == c.mechanism))
                });
                credentials.append(&mut user.upsertions);
            }
            users
        })
        .await;
    let outcomes: Vec<(String, Option<(ResponseError, String)>)> = match applied {
        Ok(users) => users
            .into_iter()
            .map(|u| {
                let error = u.refused.map(|refused| {
                    let code = match refused {
                        Refusal::Unacceptable(_) => ResponseError::UnacceptableCredential,
                        Refusal::UnknownMechanism => ResponseError::UnsupportedSaslMechanism,
                        Refusal::Twice => ResponseError::DuplicateResource,
                        Refusal::NotFound => ResponseError::ResourceNotFound,
                    };
                    (code, refused.to_string())
                });
                (u.user, error)
            })
            .collect(),
        Err(e) => names
            .into_iter()
            .map(|user| {
                let why = format!("cannot keep the credentials: {e}");
                (user, Some((ResponseError::KafkaStorageError, why)))
            })
            .collect(),
    };
    let mut response = AlterUserScramCredentialsResponse::default();
    response.results = outcomes
        .into_iter()
        .map(|(user, error)| {
            let mut result =
                alter_user_scram_credentials_response::AlterUserScramCredentialsResult::default();
            result.user = str_bytes(&user);
            if let Some((code, message)) = error {
                result.error_code = code.code();
                result.error_message = Some(str_bytes(&message));
            }
            result
        })
        .collect();
    response
}

/// The entry of `user` in `users` (made if new), with the alteration of
/// `mechanism` counted: refused for `check`'s reason, or as DUPLICATE_RESOURCE
/// if the user and mechanism were named before (the first refusal stays,
/// but a duplicate overrides it, as Kafka checks duplicates first).
fn alteration<'a>(
    users: &'a mut Vec<UserAlterations>,
    named: &mut Vec<(String, i8)>,
    user: &str,
    mechanism: i8,
    check: Result<(), Refusal>,
) -> &'a mut UserAlterations {
    let at = match users.iter().position(|u| u.user == user) {
        Some(at) => at,
        None => {
            users.push(UserAlterations {
                user: user.to_string(),
                deletions: Vec::new(),
                upsertions: Vec::new(),
                refused: None,
            });
            users.len() - 1
        }
    };
    let key = (user.to_string(), mechanism);
    let twice = named.contains(&key);
    named.push(key);
    let entry = &mut users[at];
    if twice {
        entry.refused = Some(Refusal::Twice);
    } else if entry.refused.is_none() {
        entry.refused = check.err();
    }
    entry
}
