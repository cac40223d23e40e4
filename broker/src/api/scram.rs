//! DescribeUserScramCredentials and AlterUserScramCredentials: the
//! credentials of [`crate::scram`], stored and described as Kafka does
//! (no SASL is served, so none is used).

use std::collections::{HashMap, HashSet};
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
/// and iterations of its credentials (RESOURCE_NOT_FOUND if it has none);
/// a user asked for twice or more is answered once, DUPLICATE_RESOURCE
/// (as Kafka's `ScramImage` answers); no users (null or empty): every
/// user that has credentials. Linear in the users and credentials.
pub fn describe_user_scram_credentials(
    broker: &Broker,
    request: &DescribeUserScramCredentialsRequest,
) -> DescribeUserScramCredentialsResponse {
    let credentials = broker.scram.snapshot();
    let mut held: HashMap<&str, Vec<&Credential>> = HashMap::new();
    for c in credentials.iter() {
        held.entry(c.user.as_str()).or_default().push(c);
    }
    let asked: Vec<(&str, bool)> = match request.users.as_deref() {
        Some(users) if !users.is_empty() => once_each(users.iter().map(|u| u.name.as_str())),
        _ => once_each(credentials.iter().map(|c| c.user.as_str()))
            .into_iter()
            .map(|(user, _)| (user, false))
            .collect(),
    };
    let mut response = DescribeUserScramCredentialsResponse::default();
    response.results = asked
        .into_iter()
        .map(|(user, twice)| {
            let mut result =
                describe_user_scram_credentials_response::DescribeUserScramCredentialsResult::default();
            result.user = str_bytes(user);
            let (error, message) = if twice {
                (
                    ResponseError::DuplicateResource,
                    format!(
                        "Cannot describe SCRAM credentials for the same user twice in a single \
                         request: {user}"
                    ),
                )
            } else if let Some(held) = held.get(user) {
                result.credential_infos = held
                    .iter()
                    .map(|c| {
                        let mut info =
                            describe_user_scram_credentials_response::CredentialInfo::default();
                        info.mechanism = c.mechanism;
                        info.iterations = c.iterations;
                        info
                    })
                    .collect();
                return result;
            } else {
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

/// Each of `names` once, in the order first named, with whether it was
/// named twice or more.
fn once_each<'a>(names: impl Iterator<Item = &'a str>) -> Vec<(&'a str, bool)> {
    let mut once: Vec<(&str, bool)> = Vec::new();
    let mut at: HashMap<&str, usize> = HashMap::new();
    for name in names {
        match at.get(name) {
            Some(&i) => once[i].1 = true,
            None => {
                at.insert(name, once.len());
                once.push((name, false));
            }
        }
    }
    once
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

/// A request's alterations, per user in the order first named.
#[derive(Default)]
struct Alterations {
    /// Per user, its alterations.
    users: Vec<UserAlterations>,
    /// The index in `users` of each user's.
    at: HashMap<String, usize>,
    /// Every user and mechanism named so far.
    named: HashSet<(String, i8)>,
}

/// AlterUserScramCredentials: deletions and upsertions, answered per
/// user (a user's alterations apply together or not at all): the same
/// user and mechanism twice is DUPLICATE_RESOURCE, an unknown mechanism
/// UNSUPPORTED_SASL_MECHANISM, an empty name or iterations outside
/// 4,096–16,384 UNACCEPTABLE_CREDENTIAL, deleting a credential that does
/// not exist RESOURCE_NOT_FOUND. Linear in the alterations and
/// credentials.
pub async fn alter_user_scram_credentials(
    broker: &Arc<Broker>,
    request: &AlterUserScramCredentialsRequest,
) -> AlterUserScramCredentialsResponse {
    let mut alterations = Alterations::default();
    for d in &request.deletions {
        let check = check_alteration(&d.name, d.mechanism);
        alterations
            .of(&d.name, d.mechanism, check)
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
        alterations
            .of(&u.name, u.mechanism, check)
            .upsertions
            .push(credential);
    }
    let mut users = alterations.users;
    let names: Vec<String> = users.iter().map(|u| u.user.clone()).collect();
    let applied = broker
        .scram
        .change(move |credentials| {
            // Users are distinct: each user's alterations touch its own
            // credentials only, so each is checked against them as they
            // were, and all are applied at once.
            let held: HashSet<(&str, i8)> = credentials
                .iter()
                .map(|c| (c.user.as_str(), c.mechanism))
                .collect();
            for user in &mut users {
                let exists = |m: &i8| held.contains(&(user.user.as_str(), *m));
                if user.refused.is_none() && !user.deletions.iter().all(exists) {
                    user.refused = Some(Refusal::NotFound);
                }
            }
            let replaced: HashSet<(&str, i8)> = users
                .iter()
                .filter(|u| u.refused.is_none())
                .flat_map(|u| {
                    let upserted = u.upsertions.iter().map(|c| c.mechanism);
                    let mechanisms = u.deletions.iter().copied().chain(upserted);
                    mechanisms.map(|m| (u.user.as_str(), m))
                })
                .collect();
            credentials.retain(|c| !replaced.contains(&(c.user.as_str(), c.mechanism)));
            for user in users.iter_mut().filter(|u| u.refused.is_none()) {
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

impl Alterations {
    /// The entry of `user` (made if new), with the alteration of
    /// `mechanism` counted: refused for `check`'s reason, or as
    /// DUPLICATE_RESOURCE if the user and mechanism were named before (the
    /// first refusal stays, but a duplicate overrides it, as Kafka checks
    /// duplicates first).
    fn of(
        &mut self,
        user: &str,
        mechanism: i8,
        check: Result<(), Refusal>,
    ) -> &mut UserAlterations {
        let at = match self.at.get(user) {
            Some(&at) => at,
            None => {
                self.at.insert(user.to_string(), self.users.len());
                self.users.push(UserAlterations {
                    user: user.to_string(),
                    deletions: Vec::new(),
                    upsertions: Vec::new(),
                    refused: None,
                });
                self.users.len() - 1
            }
        };
        let twice = !self.named.insert((user.to_string(), mechanism));
        let entry = &mut self.users[at];
        if twice {
            entry.refused = Some(Refusal::Twice);
        } else if entry.refused.is_none() {
            entry.refused = check.err();
        }
        entry
    }
}
