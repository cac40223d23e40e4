//! ACLs as Kafka defines them (KIP-140, KIP-290): bindings of a resource
//! pattern to an entry (principal, host, operation, permission), created,
//! listed and deleted by filter. They are **stored, not enforced**: every
//! client may do everything, and the operations a client is authorized
//! for are all those Kafka defines for the resource ([`authorized`]).
//!
//! The codes are Kafka's (`ResourceType`, `PatternType`, `AclOperation`,
//! `AclPermissionType`); the checks and the matching are those of Kafka's
//! `AclControlManager.validateNewAcl`, `ResourcePatternFilter.matches`
//! and `AccessControlEntryFilter.matches`.

use crate::kept::Record;

/// Resource types (Kafka's `ResourceType`).
pub mod resource {
    /// A code Kafka does not know.
    pub const UNKNOWN: i8 = 0;
    /// A filter's "any type".
    pub const ANY: i8 = 1;
    /// A topic.
    pub const TOPIC: i8 = 2;
    /// A consumer group.
    pub const GROUP: i8 = 3;
    /// The cluster.
    pub const CLUSTER: i8 = 4;
    /// A transactional id.
    pub const TRANSACTIONAL_ID: i8 = 5;
    /// A delegation token.
    pub const DELEGATION_TOKEN: i8 = 6;
    /// A user.
    pub const USER: i8 = 7;
}

/// Pattern types (Kafka's `PatternType`).
pub mod pattern {
    /// A code Kafka does not know.
    pub const UNKNOWN: i8 = 0;
    /// A filter's "any pattern type, this exact name".
    pub const ANY: i8 = 1;
    /// A filter's "every pattern that matches this name".
    pub const MATCH: i8 = 2;
    /// The name itself (or `*`, every name).
    pub const LITERAL: i8 = 3;
    /// Every name that starts with it.
    pub const PREFIXED: i8 = 4;
}

/// Operations (Kafka's `AclOperation`).
pub mod operation {
    /// A code Kafka does not know.
    pub const UNKNOWN: i8 = 0;
    /// A filter's "any operation".
    pub const ANY: i8 = 1;
    /// Every operation.
    pub const ALL: i8 = 2;
    /// Read.
    pub const READ: i8 = 3;
    /// Write.
    pub const WRITE: i8 = 4;
    /// Create.
    pub const CREATE: i8 = 5;
    /// Delete.
    pub const DELETE: i8 = 6;
    /// Alter.
    pub const ALTER: i8 = 7;
    /// Describe.
    pub const DESCRIBE: i8 = 8;
    /// Cluster action.
    pub const CLUSTER_ACTION: i8 = 9;
    /// Describe configs.
    pub const DESCRIBE_CONFIGS: i8 = 10;
    /// Alter configs.
    pub const ALTER_CONFIGS: i8 = 11;
    /// Idempotent write.
    pub const IDEMPOTENT_WRITE: i8 = 12;
    /// Create delegation tokens.
    pub const CREATE_TOKENS: i8 = 13;
    /// Describe delegation tokens.
    pub const DESCRIBE_TOKENS: i8 = 14;
    /// Two-phase commit (KIP-939), the last code Kafka defines.
    pub const TWO_PHASE_COMMIT: i8 = 15;
}

/// Permission types (Kafka's `AclPermissionType`).
pub mod permission {
    /// A code Kafka does not know.
    pub const UNKNOWN: i8 = 0;
    /// A filter's "any permission".
    pub const ANY: i8 = 1;
    /// Deny.
    pub const DENY: i8 = 2;
    /// Allow.
    pub const ALLOW: i8 = 3;
}

/// The name of the one cluster resource (Kafka's `kafka-cluster`).
pub const CLUSTER_NAME: &str = "kafka-cluster";

/// The name matching every resource in a LITERAL binding.
pub const WILDCARD: &str = "*";

/// The operations a client is authorized for on a resource of
/// `resource_type`, as Kafka's bit field (bit `n` for operation `n`):
/// every operation Kafka defines for it (`AclEntry.supportedOperations`
/// of Kafka 3), since no ACL is enforced.
pub fn authorized(resource_type: i8) -> i32 {
    use operation::*;
    let operations: &[i8] = match resource_type {
        resource::TOPIC => &[
            READ,
            WRITE,
            CREATE,
            DESCRIBE,
            DELETE,
            ALTER,
            DESCRIBE_CONFIGS,
            ALTER_CONFIGS,
        ],
        resource::GROUP => &[READ, DESCRIBE, DELETE],
        resource::CLUSTER => &[
            CREATE,
            CLUSTER_ACTION,
            DESCRIBE_CONFIGS,
            ALTER_CONFIGS,
            IDEMPOTENT_WRITE,
            ALTER,
            DESCRIBE,
        ],
        resource::TRANSACTIONAL_ID => &[DESCRIBE, WRITE],
        resource::DELEGATION_TOKEN => &[DESCRIBE],
        resource::USER => &[CREATE_TOKENS, DESCRIBE_TOKENS],
        _ => &[],
    };
    operations.iter().fold(0, |bits, &op| bits | 1 << op)
}

/// An ACL: a resource pattern bound to an entry.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Acl {
    /// The resource's type ([`resource`]).
    pub resource_type: i8,
    /// The resource's name (or prefix, or `*`).
    pub name: String,
    /// How the name matches ([`pattern`]: LITERAL or PREFIXED).
    pub pattern_type: i8,
    /// Who (`User:alice`).
    pub principal: String,
    /// From where (`*` for anywhere).
    pub host: String,
    /// What ([`operation`]).
    pub operation: i8,
    /// Allowed or denied ([`permission`]).
    pub permission: i8,
}

/// Why an ACL or a filter is refused: INVALID_REQUEST with this message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidAcl(pub String);

impl Acl {
    /// Checks the ACL as Kafka checks a new one.
    ///
    /// # Errors
    ///
    /// [`InvalidAcl`] with Kafka's message: a type, pattern, operation or
    /// permission that is unknown or a filter's (ANY, MATCH), an empty
    /// name, a cluster resource not named `kafka-cluster`, a principal
    /// with no `type:` before its name.
    pub fn check(&self) -> Result<(), InvalidAcl> {
        let invalid = |what: String| Err(InvalidAcl(what));
        if !(resource::TOPIC..=resource::USER).contains(&self.resource_type) {
            return invalid(format!("Invalid resourceType {}", self.resource_type));
        }
        if !matches!(self.pattern_type, pattern::LITERAL | pattern::PREFIXED) {
            return invalid(format!("Invalid patternType {}", self.pattern_type));
        }
        if !(operation::ALL..=operation::TWO_PHASE_COMMIT).contains(&self.operation) {
            return invalid(format!("Invalid operation {}", self.operation));
        }
        if !matches!(self.permission, permission::DENY | permission::ALLOW) {
            return invalid(format!("Invalid permissionType {}", self.permission));
        }
        if self.name.is_empty() {
            return invalid("Resource name should not be empty".into());
        }
        if self.resource_type == resource::CLUSTER && self.name != CLUSTER_NAME {
            return invalid(format!(
                "The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
            ));
        }
        if !self.principal.contains(':') {
            return invalid(format!(
                "Could not parse principal from `{}` (no colon is present separating the \
                 principal type from the principal name)",
                self.principal
            ));
        }
        Ok(())
    }
}

impl Record for Acl {
    fn fields(&self) -> Vec<String> {
        vec![
            self.resource_type.to_string(),
            self.name.clone(),
            self.pattern_type.to_string(),
            self.principal.clone(),
            self.host.clone(),
            self.operation.to_string(),
            self.permission.to_string(),
        ]
    }

    fn from_fields(fields: &[String]) -> Option<Acl> {
        let [resource_type, name, pattern_type, principal, host, operation, permission] = fields
        else {
            return None;
        };
        let acl = Acl {
            resource_type: resource_type.parse().ok()?,
            name: name.clone(),
            pattern_type: pattern_type.parse().ok()?,
            principal: principal.clone(),
            host: host.clone(),
            operation: operation.parse().ok()?,
            permission: permission.parse().ok()?,
        };
        acl.check().ok().map(|()| acl)
    }
}

/// A filter over ACLs (DescribeAcls, DeleteAcls): `None` and the ANY
/// codes match everything.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AclFilter {
    /// The resource type, or ANY.
    pub resource_type: i8,
    /// The resource name, or `None` for any.
    pub name: Option<String>,
    /// LITERAL or PREFIXED (that pattern type and exactly the name), ANY
    /// (any pattern type, exactly the name), or MATCH (every pattern that
    /// matches the name: itself, `*`, its prefixes).
    pub pattern_type: i8,
    /// The principal, or `None` for any.
    pub principal: Option<String>,
    /// The host, or `None` for any.
    pub host: Option<String>,
    /// The operation, or ANY.
    pub operation: i8,
    /// The permission, or ANY.
    pub permission: i8,
}

impl AclFilter {
    /// Checks the filter as Kafka does.
    ///
    /// # Errors
    ///
    /// [`InvalidAcl`] for a code Kafka does not know (UNKNOWN, or past
    /// the last).
    pub fn check(&self) -> Result<(), InvalidAcl> {
        // Every code from the one after UNKNOWN to the last is Kafka's.
        let known = |code: i8, unknown: i8, last: i8| code > unknown && code <= last;
        if !known(self.resource_type, resource::UNKNOWN, resource::USER)
            || !known(self.pattern_type, pattern::UNKNOWN, pattern::PREFIXED)
            || !known(
                self.operation,
                operation::UNKNOWN,
                operation::TWO_PHASE_COMMIT,
            )
            || !known(self.permission, permission::UNKNOWN, permission::ALLOW)
        {
            return Err(InvalidAcl(
                "The filter has an unknown resource type, pattern type, operation or \
                 permission type"
                    .into(),
            ));
        }
        Ok(())
    }

    /// Whether `acl` matches the filter.
    pub fn matches(&self, acl: &Acl) -> bool {
        self.matches_pattern(acl) && self.matches_entry(acl)
    }

    /// Kafka's `ResourcePatternFilter.matches`.
    fn matches_pattern(&self, acl: &Acl) -> bool {
        if self.resource_type != resource::ANY && self.resource_type != acl.resource_type {
            return false;
        }
        if !matches!(self.pattern_type, pattern::ANY | pattern::MATCH)
            && self.pattern_type != acl.pattern_type
        {
            return false;
        }
        let Some(name) = &self.name else {
            return true;
        };
        if self.pattern_type == pattern::ANY || self.pattern_type == acl.pattern_type {
            return *name == acl.name;
        }
        // MATCH: the patterns that would apply to the resource `name`.
        match acl.pattern_type {
            pattern::LITERAL => *name == acl.name || acl.name == WILDCARD,
            pattern::PREFIXED => name.starts_with(&acl.name),
            _ => false,
        }
    }

    /// Kafka's `AccessControlEntryFilter.matches`.
    fn matches_entry(&self, acl: &Acl) -> bool {
        self.principal.as_ref().is_none_or(|p| *p == acl.principal)
            && self.host.as_ref().is_none_or(|h| *h == acl.host)
            && (self.operation == operation::ANY || self.operation == acl.operation)
            && (self.permission == permission::ANY || self.permission == acl.permission)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(name: &str, pattern_type: i8, operation: i8) -> Acl {
        Acl {
            resource_type: resource::TOPIC,
            name: name.into(),
            pattern_type,
            principal: "User:test1".into(),
            host: "*".into(),
            operation,
            permission: permission::ALLOW,
        }
    }

    fn filter(name: Option<&str>, pattern_type: i8) -> AclFilter {
        AclFilter {
            resource_type: resource::ANY,
            name: name.map(str::to_string),
            pattern_type,
            principal: None,
            host: None,
            operation: operation::ANY,
            permission: permission::ANY,
        }
    }

    #[test]
    fn patterns_match_as_kafka_matches_them() {
        let literal = acl("orders", pattern::LITERAL, operation::READ);
        let prefixed = acl("ord", pattern::PREFIXED, operation::READ);
        let wildcard = acl("*", pattern::LITERAL, operation::READ);
        let all = [&literal, &prefixed, &wildcard];
        let hits = |f: AclFilter| all.iter().filter(|a| f.matches(a)).count();
        assert_eq!(hits(filter(None, pattern::ANY)), 3);
        assert_eq!(hits(filter(None, pattern::LITERAL)), 2);
        assert_eq!(hits(filter(None, pattern::PREFIXED)), 1);
        assert_eq!(hits(filter(Some("orders"), pattern::MATCH)), 3);
        assert_eq!(hits(filter(Some("orders"), pattern::ANY)), 1);
        assert_eq!(hits(filter(Some("ord"), pattern::ANY)), 1);
        assert_eq!(hits(filter(Some("ord"), pattern::LITERAL)), 0);
        assert_eq!(hits(filter(Some("payments"), pattern::MATCH)), 1);
        let mut write = filter(None, pattern::ANY);
        write.operation = operation::WRITE;
        assert_eq!(hits(write), 0);
        let mut other = filter(None, pattern::ANY);
        other.principal = Some("User:test2".into());
        assert_eq!(hits(other), 0);
    }

    #[test]
    fn a_new_acl_is_checked_as_kafka_checks_it() {
        assert_eq!(acl("t", pattern::LITERAL, operation::READ).check(), Ok(()));
        assert!(acl("t", pattern::MATCH, operation::READ).check().is_err());
        assert!(acl("t", pattern::LITERAL, operation::ANY).check().is_err());
        assert!(acl("t", pattern::LITERAL, 16).check().is_err());
        assert!(acl("", pattern::LITERAL, operation::READ).check().is_err());
        let mut cluster = acl("c", pattern::LITERAL, operation::ALTER);
        cluster.resource_type = resource::CLUSTER;
        assert!(cluster.check().is_err());
        cluster.name = CLUSTER_NAME.into();
        assert_eq!(cluster.check(), Ok(()));
        let mut nobody = acl("t", pattern::LITERAL, operation::READ);
        nobody.principal = "alice".into();
        assert!(nobody.check().is_err());
        let mut any = filter(None, pattern::ANY);
        assert_eq!(any.check(), Ok(()));
        any.permission = permission::UNKNOWN;
        assert!(any.check().is_err());
    }

    #[test]
    fn authorized_operations_are_kafka_s_per_resource() {
        assert_eq!(authorized(resource::TOPIC).count_ones(), 8);
        assert_eq!(
            authorized(resource::GROUP),
            1 << operation::READ | 1 << operation::DESCRIBE | 1 << operation::DELETE
        );
        assert_eq!(authorized(resource::CLUSTER).count_ones(), 7);
        assert_eq!(authorized(resource::CLUSTER) & 1 << operation::READ, 0);
    }
}
