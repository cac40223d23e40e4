//! CreateAcls, DescribeAcls and DeleteAcls: the broker's ACLs (see
//! [`crate::acls`]), stored and answered as Kafka answers them, never
//! enforced.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use kafka_protocol::messages::{
    create_acls_response, delete_acls_response, describe_acls_response, CreateAclsRequest,
    CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse, DescribeAclsRequest,
    DescribeAclsResponse,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::str_bytes;
use crate::acls::{Acl, AclFilter, InvalidAcl};
use crate::broker::Broker;

/// The error and message of a refused ACL or filter.
fn refused(InvalidAcl(message): InvalidAcl) -> (i16, Option<StrBytes>) {
    (
        ResponseError::InvalidRequest.code(),
        Some(str_bytes(&message)),
    )
}

/// The error and message of ACLs that could not be kept on disk.
fn unkept(error: &std::io::Error) -> (i16, Option<StrBytes>) {
    (
        ResponseError::KafkaStorageError.code(),
        Some(str_bytes(&format!("cannot keep the ACLs: {error}"))),
    )
}

/// The error and message of an ACL or filter of a request: refused
/// (`outcome`), or not kept (`kept`), or none.
fn error_of<T, U>(
    outcome: Result<T, InvalidAcl>,
    kept: &std::io::Result<U>,
) -> Option<(i16, Option<StrBytes>)> {
    match (outcome, kept) {
        (Err(invalid), _) => Some(refused(invalid)),
        (Ok(_), Err(e)) => Some(unkept(e)),
        (Ok(_), Ok(_)) => None,
    }
}

/// A filter of its request's fields (the names `None` for any).
fn filter(
    resource_type: i8,
    name: Option<&StrBytes>,
    pattern_type: i8,
    principal: Option<&StrBytes>,
    host: Option<&StrBytes>,
    operation: i8,
    permission: i8,
) -> AclFilter {
    AclFilter {
        resource_type,
        name: name.map(|n| n.to_string()),
        pattern_type,
        principal: principal.map(|p| p.to_string()),
        host: host.map(|h| h.to_string()),
        operation,
        permission,
    }
}

/// CreateAcls: each ACL checked (INVALID_REQUEST with Kafka's message)
/// and kept; one that exists already is kept once, as Kafka keeps a set.
pub async fn create_acls(broker: &Arc<Broker>, request: &CreateAclsRequest) -> CreateAclsResponse {
    let checked: Vec<Result<Acl, InvalidAcl>> = request
        .creations
        .iter()
        .map(|c| {
            let acl = Acl {
                resource_type: c.resource_type,
                name: c.resource_name.to_string(),
                pattern_type: c.resource_pattern_type,
                principal: c.principal.to_string(),
                host: c.host.to_string(),
                operation: c.operation,
                permission: c.permission_type,
            };
            acl.check().map(|()| acl)
        })
        .collect();
    let new: Vec<Acl> = checked.iter().filter_map(|c| c.clone().ok()).collect();
    let kept = if new.is_empty() {
        Ok(())
    } else {
        broker
            .acls
            .change(move |acls| {
                let mut kept: HashSet<&Acl> = acls.iter().collect();
                let fresh: Vec<Acl> = new.iter().filter(|a| kept.insert(a)).cloned().collect();
                acls.extend(fresh);
            })
            .await
    };
    let mut response = CreateAclsResponse::default();
    response.results = checked
        .into_iter()
        .map(|outcome| {
            let mut result = create_acls_response::AclCreationResult::default();
            if let Some((code, message)) = error_of(outcome, &kept) {
                result.error_code = code;
                result.error_message = message;
            }
            result
        })
        .collect();
    response
}

/// DescribeAcls: the ACLs the filter matches, grouped by resource pattern
/// in the order they were made; a filter with an unknown code is
/// INVALID_REQUEST.
pub fn describe_acls(broker: &Broker, request: &DescribeAclsRequest) -> DescribeAclsResponse {
    let mut response = DescribeAclsResponse::default();
    let wanted = filter(
        request.resource_type_filter,
        request.resource_name_filter.as_ref(),
        request.pattern_type_filter,
        request.principal_filter.as_ref(),
        request.host_filter.as_ref(),
        request.operation,
        request.permission_type,
    );
    if let Err(invalid) = wanted.check() {
        (response.error_code, response.error_message) = refused(invalid);
        return response;
    }
    let acls = broker.acls.snapshot();
    // The index in the answer of each resource pattern's group.
    let mut groups: HashMap<(i8, &str, i8), usize> = HashMap::new();
    for acl in acls.iter().filter(|a| wanted.matches(a)) {
        let pattern = (acl.resource_type, acl.name.as_str(), acl.pattern_type);
        let at = *groups.entry(pattern).or_insert_with(|| {
            let mut resource = describe_acls_response::DescribeAclsResource::default();
            resource.resource_type = acl.resource_type;
            resource.resource_name = str_bytes(&acl.name);
            resource.pattern_type = acl.pattern_type;
            response.resources.push(resource);
            response.resources.len() - 1
        });
        let mut entry = describe_acls_response::AclDescription::default();
        entry.principal = str_bytes(&acl.principal);
        entry.host = str_bytes(&acl.host);
        entry.operation = acl.operation;
        entry.permission_type = acl.permission;
        response.resources[at].acls.push(entry);
    }
    response
}

/// DeleteAcls: per filter, the ACLs it matches deleted and listed (a
/// filter with an unknown code is INVALID_REQUEST and deletes nothing).
pub async fn delete_acls(broker: &Arc<Broker>, request: &DeleteAclsRequest) -> DeleteAclsResponse {
    let filters: Vec<Result<AclFilter, InvalidAcl>> = request
        .filters
        .iter()
        .map(|f| {
            let wanted = filter(
                f.resource_type_filter,
                f.resource_name_filter.as_ref(),
                f.pattern_type_filter,
                f.principal_filter.as_ref(),
                f.host_filter.as_ref(),
                f.operation,
                f.permission_type,
            );
            wanted.check().map(|()| wanted)
        })
        .collect();
    let valid: Vec<AclFilter> = filters.iter().filter_map(|f| f.clone().ok()).collect();
    // Per valid filter, the ACLs it deleted (an ACL two filters match is
    // listed under both, as Kafka lists it).
    let deleted = broker
        .acls
        .change(move |acls| {
            let matched: Vec<Vec<Acl>> = valid
                .iter()
                .map(|f| acls.iter().filter(|a| f.matches(a)).cloned().collect())
                .collect();
            acls.retain(|a| !valid.iter().any(|f| f.matches(a)));
            matched
        })
        .await;
    let mut matched = match &deleted {
        Ok(matched) => matched.clone().into_iter(),
        Err(_) => Vec::new().into_iter(),
    };
    let mut response = DeleteAclsResponse::default();
    response.filter_results = filters
        .into_iter()
        .map(|outcome| {
            let mut result = delete_acls_response::DeleteAclsFilterResult::default();
            match error_of(outcome, &deleted) {
                Some((code, message)) => {
                    result.error_code = code;
                    result.error_message = message;
                }
                None => {
                    result.matching_acls = matched
                        .next()
                        .unwrap_or_default()
                        .into_iter()
                        .map(|acl| {
                            let mut m = delete_acls_response::DeleteAclsMatchingAcl::default();
                            m.resource_type = acl.resource_type;
                            m.resource_name = str_bytes(&acl.name);
                            m.pattern_type = acl.pattern_type;
                            m.principal = str_bytes(&acl.principal);
                            m.host = str_bytes(&acl.host);
                            m.operation = acl.operation;
                            m.permission_type = acl.permission;
                            m
                        })
                        .collect();
                }
            }
            result
        })
        .collect();
    response
}
