//! The broker's dynamic configs: the SASL and TLS settings Kafka lets an
//! admin change on a running broker (AlterConfigs and
//! IncrementalAlterConfigs of resource BROKER `0`). This broker serves
//! neither SASL nor TLS, so they are **checked, kept and shown, never
//! used**; its other configs are its flags, which no request changes.

use crate::kept::Record;

/// The type of a config's value, as Kafka checks it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Type {
    /// A 64-bit integer.
    Long,
    /// A 16-bit integer.
    Short,
    /// A floating-point number.
    Double,
    /// Text (strings, lists, passwords, class names).
    Text,
}

/// The dynamic configs accepted, with their types: Kafka's reconfigurable
/// SASL settings (`SaslConfigs`, `BrokerSecurityConfigs`) and TLS ones
/// (`SslConfigs.RECONFIGURABLE_CONFIGS`).
const DYNAMIC: &[(&str, Type)] = &[
    ("sasl.enabled.mechanisms", Type::Text),
    ("sasl.jaas.config", Type::Text),
    ("sasl.kerberos.service.name", Type::Text),
    ("sasl.kerberos.kinit.cmd", Type::Text),
    ("sasl.kerberos.ticket.renew.window.factor", Type::Double),
    ("sasl.kerberos.ticket.renew.jitter", Type::Double),
    ("sasl.kerberos.min.time.before.relogin", Type::Long),
    ("sasl.kerberos.principal.to.local.rules", Type::Text),
    ("sasl.login.refresh.window.factor", Type::Double),
    ("sasl.login.refresh.window.jitter", Type::Double),
    ("sasl.login.refresh.min.period.seconds", Type::Short),
    ("sasl.login.refresh.buffer.seconds", Type::Short),
    ("ssl.keystore.type", Type::Text),
    ("ssl.keystore.location", Type::Text),
    ("ssl.keystore.password", Type::Text),
    ("ssl.key.password", Type::Text),
    ("ssl.keystore.key", Type::Text),
    ("ssl.keystore.certificate.chain", Type::Text),
    ("ssl.truststore.type", Type::Text),
    ("ssl.truststore.location", Type::Text),
    ("ssl.truststore.password", Type::Text),
    ("ssl.truststore.certificates", Type::Text),
];

/// A dynamic config set on the broker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DynamicConfig {
    /// Its name, one of Kafka's reconfigurable SASL and TLS settings.
    pub name: String,
    /// Its value.
    pub value: String,
}

impl DynamicConfig {
    /// Checks the config's name and value as Kafka checks them.
    ///
    /// # Errors
    ///
    /// Kafka's message: a name that is not a dynamic config of the
    /// broker's, or a value not of its type.
    pub fn check(&self) -> Result<(), String> {
        let name = &self.name;
        let Some(&(_, kind)) = DYNAMIC.iter().find(|(n, _)| n == name) else {
            return Err(format!(
                "Cannot update these configs dynamically: Set({name}) (this broker's other \
                 configs are its flags)"
            ));
        };
        let value = self.value.trim();
        let fits = match kind {
            Type::Long => value.parse::<i64>().is_ok(),
            Type::Short => value.parse::<i16>().is_ok(),
            Type::Double => value.parse::<f64>().is_ok(),
            Type::Text => true,
        };
        if !fits {
            return Err(format!(
                "Invalid value {} for configuration {name}: not a number",
                self.value
            ));
        }
        Ok(())
    }

    /// Whether its value is secret (DescribeConfigs shows none).
    pub fn is_sensitive(&self) -> bool {
        self.name.ends_with(".password")
            || self.name == "sasl.jaas.config"
            || self.name == "ssl.keystore.key"
    }
}

impl Record for DynamicConfig {
    fn fields(&self) -> Vec<String> {
        vec![self.name.clone(), self.value.clone()]
    }

    fn from_fields(fields: &[String]) -> Option<DynamicConfig> {
        let [name, value] = fields else {
            return None;
        };
        let config = DynamicConfig {
            name: name.clone(),
            value: value.clone(),
        };
        config.check().ok().map(|()| config)
    }
}

/// `configs` with `changes` applied (a name to its new value, or `None`
/// to remove it), all of them replaced first if `replace` (AlterConfigs).
///
/// # Errors
///
/// Kafka's message for the first change refused; nothing is applied.
pub fn altered(
    configs: &[DynamicConfig],
    changes: &[(String, Option<String>)],
    replace: bool,
) -> Result<Vec<DynamicConfig>, String> {
    let mut next = if replace {
        Vec::new()
    } else {
        configs.to_vec()
    };
    for (name, value) in changes {
        next.retain(|c| c.name != *name);
        if let Some(value) = value {
            let config = DynamicConfig {
                name: name.clone(),
                value: value.clone(),
            };
            config.check()?;
            next.push(config);
        }
    }
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(name: &str, value: &str) -> (String, Option<String>) {
        (name.into(), Some(value.into()))
    }

    #[test]
    fn dynamic_configs_are_checked_by_name_and_type() {
        let relogin = "sasl.kerberos.min.time.before.relogin";
        let now = altered(&[], &[set(relogin, "58000")], false).expect("a long");
        assert_eq!(now.len(), 1);
        assert!(altered(&now, &[set(relogin, "soon")], false).is_err());
        assert!(altered(&now, &[set("log.retention.ms", "1")], false).is_err());
        let more = altered(&now, &[set("ssl.key.password", "x")], false).expect("text");
        assert_eq!(more.len(), 2);
        assert!(more[1].is_sensitive());
        let replaced = altered(&more, &[set("ssl.keystore.type", "PKCS12")], true).expect("ok");
        assert_eq!(replaced.len(), 1);
        let removed = altered(&more, &[(relogin.into(), None)], false).expect("ok");
        assert_eq!(removed.len(), 1);
    }
}
