//! SCRAM credentials (KIP-554): per user and mechanism, the salt, the
//! salted password and the iterations a client computed, checked as Kafka
//! checks them and kept. They are **stored, not used**: the broker serves
//! no SASL, so no client authenticates with them.

use crate::kept::{hex, unhex, Record};

/// SCRAM-SHA-256's code.
pub const SHA_256: i8 = 1;

/// SCRAM-SHA-512's code.
pub const SHA_512: i8 = 2;

/// The fewest iterations Kafka accepts (both mechanisms).
pub const MIN_ITERATIONS: i32 = 4096;

/// The most iterations Kafka accepts.
pub const MAX_ITERATIONS: i32 = 16384;

/// A user's credential for one mechanism.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credential {
    /// The user.
    pub user: String,
    /// [`SHA_256`] or [`SHA_512`].
    pub mechanism: i8,
    /// The iterations of the salted password.
    pub iterations: i32,
    /// The salt.
    pub salt: Vec<u8>,
    /// The password salted and hashed `iterations` times (by the client).
    pub salted_password: Vec<u8>,
}

impl Credential {
    /// Checks an upsertion as Kafka does.
    ///
    /// # Errors
    ///
    /// [`Refusal`]: an unknown mechanism (UNSUPPORTED_SASL_MECHANISM),
    /// an empty user name or iterations out of bounds
    /// (UNACCEPTABLE_CREDENTIAL).
    pub fn check(&self) -> Result<(), Refusal> {
        check_alteration(&self.user, self.mechanism)?;
        if self.iterations < MIN_ITERATIONS {
            return Err(Refusal::Unacceptable("Too few iterations"));
        }
        if self.iterations > MAX_ITERATIONS {
            return Err(Refusal::Unacceptable("Too many iterations"));
        }
        Ok(())
    }
}

/// Checks what every alteration (deletion or upsertion) names.
///
/// # Errors
///
/// [`Refusal`] for an empty user name or an unknown mechanism.
pub fn check_alteration(user: &str, mechanism: i8) -> Result<(), Refusal> {
    if user.is_empty() {
        return Err(Refusal::Unacceptable("Username must not be empty"));
    }
    if !matches!(mechanism, SHA_256 | SHA_512) {
        return Err(Refusal::UnknownMechanism);
    }
    Ok(())
}

/// Why a user's alterations are refused (all of them: Kafka applies a
/// user's alterations together or not at all).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// UNACCEPTABLE_CREDENTIAL, with Kafka's message.
    Unacceptable(&'static str),
    /// UNSUPPORTED_SASL_MECHANISM.
    UnknownMechanism,
    /// DUPLICATE_RESOURCE: the same user and mechanism twice.
    Twice,
    /// RESOURCE_NOT_FOUND: a deletion of a credential that does not
    /// exist.
    NotFound,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Refusal::Unacceptable(why) => why,
            Refusal::UnknownMechanism => "Unknown SCRAM mechanism",
            Refusal::Twice => "A user credential cannot be altered twice in the same request",
            Refusal::NotFound => "Attempt to delete a user credential that does not exist",
        })
    }
}

impl std::error::Error for Refusal {}

impl Record for Credential {
    fn fields(&self) -> Vec<String> {
        vec![
            self.user.clone(),
            self.mechanism.to_string(),
            self.iterations.to_string(),
            hex(&self.salt),
            hex(&self.salted_password),
        ]
    }

    fn from_fields(fields: &[String]) -> Option<Credential> {
        let [user, mechanism, iterations, salt, salted_password] = fields else {
            return None;
        };
        let credential = Credential {
            user: user.clone(),
            mechanism: mechanism.parse().ok()?,
            iterations: iterations.parse().ok()?,
            salt: unhex(salt)?,
            salted_password: unhex(salted_password)?,
        };
        credential.check().ok().map(|()| credential)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn credential(user: &str, mechanism: i8, iterations: i32) -> Credential {
        Credential {
            user: user.into(),
            mechanism,
            iterations,
            salt: b"salt".to_vec(),
            salted_password: vec![0, 1, 2],
        }
    }

    #[test]
    fn upsertions_are_checked_as_kafka_checks_them() {
        assert_eq!(credential("alice", SHA_256, 4096).check(), Ok(()));
        assert_eq!(credential("alice", SHA_512, 16384).check(), Ok(()));
        assert_eq!(
            credential("alice", SHA_256, 4095).check(),
            Err(Refusal::Unacceptable("Too few iterations"))
        );
        assert_eq!(
            credential("alice", SHA_256, 16385).check(),
            Err(Refusal::Unacceptable("Too many iterations"))
        );
        assert_eq!(
            credential("alice", 0, 8192).check(),
            Err(Refusal::UnknownMechanism)
        );
        assert!(credential("", SHA_256, 8192).check().is_err());
    }

    #[test]
    fn a_credential_is_kept_as_fields_and_read_back() {
        let c = credential("bob\twith a tab", SHA_512, 8192);
        assert_eq!(Credential::from_fields(&c.fields()), Some(c));
        assert_eq!(Credential::from_fields(&["x".into()]), None);
    }
}
