//! A topic's own configs (CreateTopics' `configs`), checked as Kafka checks
//! them: an unknown name or a value out of its type or range is
//! INVALID_CONFIG, naming it.
//!
//! | config | what it does here |
//! |---|---|
//! | `retention.ms`, `retention.bytes` | the topic's retention, over `--retention-ms` / `--retention-bytes` |
//! | `segment.bytes` | its segments' size (at least 1,024, as `--segment-bytes`) |
//! | `max.message.bytes` | its largest batch, over `--message-max-bytes` |
//! | `min.insync.replicas` | above 1 (one node holds one replica), an acks=all produce is NOT_ENOUGH_REPLICAS, as Kafka answers it |
//! | `cleanup.policy` | with `compact`, a record without a key is refused (INVALID_RECORD), as Kafka refuses it; the log is not compacted: every record is kept, so Kafka's promise (at least the last record of each key) holds; without `delete` (`compact` alone), retention deletes nothing of it |
//! | every other topic config Kafka defines | checked, kept and shown, not applied |
//!
//! With `--data-dir` the configs set are kept in `<topic>/@config`, one
//! `name=value` a line, and read back at start.

use std::fmt;

use super::Retention;

/// The file of a topic's configs in its directory (a name no partition
/// has).
pub const CONFIG_FILE: &str = "@config";

/// A config's type and range, as Kafka's `TopicConfig` defines it.
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// An integer of at least this (long or int: the range is checked
    /// against `i32` for an int).
    Long(i64),
    /// A 32-bit integer of at least this.
    Int(i64),
    /// `true` or `false`.
    Bool,
    /// A ratio, 0 to 1.
    Ratio,
    /// One of these.
    OneOf(&'static [&'static str]),
    /// `delete`, `compact` or both (comma-separated).
    Policy,
    /// Any text.
    Text,
}

/// Every topic config Kafka defines, with its type.
const KNOWN: &[(&str, Kind)] = &[
    ("cleanup.policy", Kind::Policy),
    (
        "compression.type",
        Kind::OneOf(&["uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"]),
    ),
    ("delete.retention.ms", Kind::Long(0)),
    ("file.delete.delay.ms", Kind::Long(0)),
    ("flush.messages", Kind::Long(1)),
    ("flush.ms", Kind::Long(0)),
    ("follower.replication.throttled.replicas", Kind::Text),
    ("index.interval.bytes", Kind::Int(0)),
    ("leader.replication.throttled.replicas", Kind::Text),
    ("local.retention.bytes", Kind::Long(-2)),
    ("local.retention.ms", Kind::Long(-2)),
    ("max.compaction.lag.ms", Kind::Long(1)),
    ("max.message.bytes", Kind::Int(0)),
    ("message.downconversion.enable", Kind::Bool),
    ("message.format.version", Kind::Text),
    ("message.timestamp.after.max.ms", Kind::Long(0)),
    ("message.timestamp.before.max.ms", Kind::Long(0)),
    ("message.timestamp.difference.max.ms", Kind::Long(0)),
    (
        "message.timestamp.type",
        Kind::OneOf(&["CreateTime", "LogAppendTime"]),
    ),
    ("min.cleanable.dirty.ratio", Kind::Ratio),
    ("min.compaction.lag.ms", Kind::Long(0)),
    ("min.insync.replicas", Kind::Int(1)),
    ("preallocate", Kind::Bool),
    ("remote.storage.enable", Kind::Bool),
    ("retention.bytes", Kind::Long(-1)),
    ("retention.ms", Kind::Long(-1)),
    ("segment.bytes", Kind::Int(1024)),
    ("segment.index.bytes", Kind::Int(4)),
    ("segment.jitter.ms", Kind::Long(0)),
    ("segment.ms", Kind::Long(1)),
    ("unclean.leader.election.enable", Kind::Bool),
];

/// A topic's `cleanup.policy`: `delete`, `compact`, or both.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cleanup {
    /// Retention deletes old segments (`delete`).
    pub delete: bool,
    /// Records are kept by key (`compact`): each must have one.
    pub compact: bool,
}

/// The configs whose value is a list (comma-separated), to which
/// IncrementalAlterConfigs may APPEND and from which it may SUBTRACT,
/// with their defaults.
pub const LISTS: &[(&str, &str)] = &[
    ("cleanup.policy", "delete"),
    ("follower.replication.throttled.replicas", ""),
    ("leader.replication.throttled.replicas", ""),
];

/// A config refused: Kafka's INVALID_CONFIG, with what to say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidConfig(pub String);

impl fmt::Display for InvalidConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InvalidConfig {}

/// A topic's configs: those applied, and every one set.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TopicConfig {
    /// `retention.ms` if set (`Some(None)`: -1, none).
    pub retention_ms: Option<Option<u64>>,
    /// `retention.bytes` if set (`Some(None)`: -1, none).
    pub retention_bytes: Option<Option<u64>>,
    /// `segment.bytes` if set.
    pub segment_bytes: Option<u64>,
    /// `max.message.bytes` if set.
    pub max_message_bytes: Option<usize>,
    /// `min.insync.replicas` if set.
    pub min_insync_replicas: Option<u32>,
    /// `cleanup.policy` if set.
    pub cleanup: Option<Cleanup>,
    /// Every config set, as given, in order.
    pub set: Vec<(String, String)>,
}

impl TopicConfig {
    /// The configs `entries` (name, value) checked.
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] for an unknown name, a value missing or out of
    /// its type or range, or `cleanup.policy` with `compact`.
    pub fn parse<'a>(
        entries: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
    ) -> Result<TopicConfig, InvalidConfig> {
        let mut config = TopicConfig::default();
        for (name, value) in entries {
            let Some(&(_, kind)) = KNOWN.iter().find(|(known, _)| *known == name) else {
                return Err(InvalidConfig(format!("Unknown topic config name: {name}")));
            };
            let value = value.ok_or_else(|| {
                InvalidConfig(format!(
                    "Null value not supported for topic configs: {name}"
                ))
            })?;
            let number = check(name, value, kind)?;
            let bound = |n: i64| u64::try_from(n).ok();
            match name {
                "retention.ms" => config.retention_ms = number.map(bound),
                "retention.bytes" => config.retention_bytes = number.map(bound),
                "segment.bytes" => config.segment_bytes = number.and_then(bound),
                "max.message.bytes" => {
                    config.max_message_bytes = number.and_then(|n| usize::try_from(n).ok());
                }
                "min.insync.replicas" => {
                    config.min_insync_replicas = number.and_then(|n| u32::try_from(n).ok());
                }
                "cleanup.policy" => {
                    let has = |policy| value.split(',').any(|p| p.trim() == policy);
                    config.cleanup = Some(Cleanup {
                        delete: has("delete"),
                        compact: has("compact"),
                    });
                }
                _ => {}
            }
            config.set.retain(|(set, _)| set != name);
            config.set.push((name.to_string(), value.to_string()));
        }
        Ok(config)
    }

    /// The topic's retention over the broker's (none if its
    /// `cleanup.policy` lacks `delete`).
    pub fn retention(&self, broker: &Retention) -> Retention {
        if self.cleanup.is_some_and(|c| !c.delete) {
            return Retention {
                ms: None,
                bytes: None,
            };
        }
        Retention {
            ms: self.retention_ms.unwrap_or(broker.ms),
            bytes: self.retention_bytes.unwrap_or(broker.bytes),
        }
    }

    /// Whether its `cleanup.policy` holds `delete` (the default): else
    /// DeleteRecords is refused (POLICY_VIOLATION), as Kafka refuses it.
    pub fn deletes(&self) -> bool {
        self.cleanup.is_none_or(|c| c.delete)
    }

    /// Whether its `cleanup.policy` holds `compact`: a record without a
    /// key is refused.
    pub fn compacted(&self) -> bool {
        self.cleanup.is_some_and(|c| c.compact)
    }

    /// The value of the list config `name` after IncrementalAlterConfigs'
    /// APPEND (`append`: the items of `items` not in it added) or
    /// SUBTRACT (those of `items` removed), from its own value or else
    /// its default.
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] if `name` is not a list config.
    pub fn list_altered(
        &self,
        name: &str,
        items: &str,
        append: bool,
    ) -> Result<String, InvalidConfig> {
        let Some(&(_, default)) = LISTS.iter().find(|(list, _)| *list == name) else {
            return Err(InvalidConfig(format!(
                "Config value append is not allowed for config key: {name}"
            )));
        };
        let current = self
            .set
            .iter()
            .find(|(set, _)| set == name)
            .map_or(default, |(_, value)| value.as_str());
        fn split(list: &str) -> Vec<&str> {
            list.split(',')
                .map(str::trim)
                .filter(|i| !i.is_empty())
                .collect()
        }
        let mut list = split(current);
        for item in split(items) {
            if append && !list.contains(&item) {
                list.push(item);
            } else if !append {
                list.retain(|i| *i != item);
            }
        }
        Ok(list.join(","))
    }

    /// The configs as `<topic>/@config` keeps them.
    pub fn to_file(&self) -> String {
        self.set
            .iter()
            .map(|(name, value)| format!("{name}={value}\n"))
            .collect()
    }

    /// The configs of a `<topic>/@config` file.
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] for a line that is not `name=value` or a config
    /// refused as [`parse`](Self::parse) refuses it.
    pub fn from_file(text: &str) -> Result<TopicConfig, InvalidConfig> {
        let entries = text
            .lines()
            .filter(|line| !line.is_empty())
            .map(|line| {
                line.split_once('=')
                    .map(|(name, value)| (name, Some(value)))
                    .ok_or_else(|| InvalidConfig(format!("not name=value: {line:?}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        TopicConfig::parse(entries)
    }
}

/// Checks `value` of the config `name` against its `kind`; its number,
/// for a numeric one.
fn check(name: &str, value: &str, kind: Kind) -> Result<Option<i64>, InvalidConfig> {
    let invalid = |why: &str| {
        InvalidConfig(format!(
            "Invalid value {value} for configuration {name}: {why}"
        ))
    };
    match kind {
        Kind::Long(min) | Kind::Int(min) => {
            let n: i64 = value.trim().parse().map_err(|_| invalid("not a number"))?;
            if matches!(kind, Kind::Int(_)) && i32::try_from(n).is_err() {
                return Err(invalid("not a 32-bit number"));
            }
            if n < min {
                return Err(invalid(&format!("Value must be at least {min}")));
            }
            Ok(Some(n))
        }
        Kind::Bool => match value.trim().to_ascii_lowercase().as_str() {
            "true" | "false" => Ok(None),
            _ => Err(invalid("Expected value to be either true or false")),
        },
        Kind::Ratio => match value.trim().parse::<f64>() {
            Ok(r) if (0.0..=1.0).contains(&r) => Ok(None),
            _ => Err(invalid("Value must be a number from 0 to 1")),
        },
        Kind::OneOf(allowed) => {
            if allowed.contains(&value) {
                Ok(None)
            } else {
                Err(invalid(&format!(
                    "String must be one of: {}",
                    allowed.join(", ")
                )))
            }
        }
        Kind::Policy => {
            let policies: Vec<&str> = value.split(',').map(str::trim).collect();
            if policies.iter().any(|p| !matches!(*p, "delete" | "compact")) {
                return Err(invalid("String must be one of: delete, compact"));
            }
            Ok(None)
        }
        Kind::Text => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(entries: &[(&str, &str)]) -> Result<TopicConfig, InvalidConfig> {
        TopicConfig::parse(entries.iter().map(|(n, v)| (*n, Some(*v))))
    }

    #[test]
    fn known_configs_are_checked_and_the_applied_ones_kept() {
        let config = parse(&[
            ("retention.ms", "60000"),
            ("retention.bytes", "-1"),
            ("segment.bytes", "4096"),
            ("max.message.bytes", "2048"),
            ("min.insync.replicas", "2"),
            ("cleanup.policy", "delete"),
            ("compression.type", "lz4"),
            ("preallocate", "TRUE"),
        ])
        .unwrap();
        assert_eq!(config.retention_ms, Some(Some(60_000)));
        assert_eq!(config.retention_bytes, Some(None));
        assert_eq!(config.segment_bytes, Some(4096));
        assert_eq!(config.max_message_bytes, Some(2048));
        assert_eq!(config.min_insync_replicas, Some(2));
        let broker = Retention {
            ms: Some(1),
            bytes: Some(2),
        };
        let retention = config.retention(&broker);
        assert_eq!((retention.ms, retention.bytes), (Some(60_000), None));
        assert_eq!(TopicConfig::from_file(&config.to_file()), Ok(config));
    }

    #[test]
    fn compact_refuses_keyless_records_and_compact_alone_turns_retention_off() {
        let broker = Retention {
            ms: Some(1),
            bytes: Some(2),
        };
        let both = parse(&[("cleanup.policy", "delete,compact")]).unwrap();
        assert!(both.compacted());
        assert_eq!(both.retention(&broker).ms, Some(1));
        let compact = parse(&[("cleanup.policy", "compact"), ("retention.ms", "5")]).unwrap();
        assert!(compact.compacted());
        let kept = compact.retention(&broker);
        assert_eq!((kept.ms, kept.bytes), (None, None), "every record is kept");
        assert!(!parse(&[("cleanup.policy", "delete")]).unwrap().compacted());
        assert!(!TopicConfig::default().compacted());
    }

    #[test]
    fn a_list_config_is_appended_to_and_subtracted_from_its_value_or_default() {
        let none = TopicConfig::default();
        let appended = none
            .list_altered("cleanup.policy", "compact", true)
            .unwrap();
        assert_eq!(appended, "delete,compact");
        let both = parse(&[("cleanup.policy", &appended)]).unwrap();
        assert_eq!(
            both.list_altered("cleanup.policy", "compact", true)
                .unwrap(),
            appended
        );
        assert_eq!(
            both.list_altered("cleanup.policy", "compact", false)
                .unwrap(),
            "delete"
        );
        let refused = none.list_altered("retention.ms", "1", true).unwrap_err();
        assert!(refused.0.contains("retention.ms"), "{refused}");
    }

    #[test]
    fn unknown_names_and_bad_values_are_invalid_config_naming_them() {
        for (entry, says) in [
            (
                ("no.such.config", "1"),
                "Unknown topic config name: no.such.config",
            ),
            (("retention.ms", "banana"), "retention.ms"),
            (("retention.ms", "-2"), "at least -1"),
            (("segment.bytes", "100"), "at least 1024"),
            (("segment.bytes", "4294967296"), "32-bit"),
            (("preallocate", "yes"), "true or false"),
            (("cleanup.policy", ""), "delete, compact"),
            (("cleanup.policy", "shred"), "delete, compact"),
            (("message.timestamp.type", "Now"), "CreateTime"),
            (("min.cleanable.dirty.ratio", "2"), "0 to 1"),
        ] {
            let refused = parse(&[entry]).unwrap_err();
            assert!(refused.0.contains(says), "{entry:?}: {refused}");
        }
        let null = TopicConfig::parse([("retention.ms", None)]).unwrap_err();
        assert!(null.0.contains("Null value"), "{null}");
    }
}
