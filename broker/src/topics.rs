//! Making and deleting topics, off the request path.
//!
//! A topic's disk work (with `--data-dir`, a directory and files per
//! partition and their fsyncs; without it, the anonymous segment files)
//! runs on tokio's blocking pool, outside the topics' lock that every
//! produce and fetch reads: a CreateTopics of 10,000 partitions delays no
//! other request. Its name is reserved first ([`Creating`]), so that two
//! requests cannot make it twice, then the topic is inserted under the
//! write lock, a map insertion. The blocking work finishes and inserts even
//! if the request that asked goes away, so the broker's map and the
//! directory never disagree.
//!
//! Two bounds, with Kafka's error (POLICY_VIOLATION, which Kafka's
//! controller gives a request of more than 10,000 records):
//! [`PartitionLimits::per_request`] on the partitions one request creates
//! (CreateTopics, or Metadata creating the topics it names), and
//! [`PartitionLimits::per_broker`] on the partitions the broker holds.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use kafka_protocol::ResponseError;

use crate::broker::Broker;
use crate::log::config::TopicConfig;
use crate::log::{LazyLog, Log, Place, Topic};
use crate::offsets::GroupCommit;

/// The longest topic name Kafka accepts, bytes.
const MAX_TOPIC_NAME: usize = 249;

/// The most partitions a topic may have (INVALID_PARTITIONS past it).
pub const MAX_PARTITIONS: i32 = 100_000;

/// The message Kafka's controller gives a request past its bound.
pub const EXCESSIVE: &str = "Unable to perform excessively large batch operation.";

/// How many partitions requests may make.
#[derive(Clone, Copy, Debug)]
pub struct PartitionLimits {
    /// The most partitions one request creates.
    pub per_request: usize,
    /// The most partitions the broker holds.
    pub per_broker: usize,
}

/// Topics being made.
#[derive(Debug, Default)]
pub struct Creating {
    /// Their names.
    pub names: HashSet<String>,
    /// The partitions the broker holds, those being made included.
    pub partitions: usize,
}

/// Whether `name` is a legal topic name (Kafka's rule: 1 to 249 of
/// `[a-zA-Z0-9._-]`, and neither "." nor "..", which with `--data-dir`
/// would name the data directory or its parent).
pub fn legal_topic_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && name.len() <= MAX_TOPIC_NAME
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// Partitions one request creates, counted against
/// [`PartitionLimits::per_request`].
#[derive(Debug)]
pub struct RequestQuota {
    /// What is left of the bound.
    left: usize,
}

impl RequestQuota {
    /// The quota of one request under `limits`.
    pub fn new(limits: PartitionLimits) -> RequestQuota {
        RequestQuota {
            left: limits.per_request,
        }
    }

    /// Takes `partitions` from the quota.
    ///
    /// # Errors
    ///
    /// POLICY_VIOLATION if fewer are left (nothing is taken).
    pub fn take(&mut self, partitions: i32) -> Result<(), ResponseError> {
        let n = usize::try_from(partitions).unwrap_or(0);
        self.left = self
            .left
            .checked_sub(n)
            .ok_or(ResponseError::PolicyViolation)?;
        Ok(())
    }
}

impl Broker {
    /// The topic `name`, created with `--partitions` partitions if new
    /// (Metadata's auto-creation), `quota` permitting.
    ///
    /// # Errors
    ///
    /// As [`create_topic`](Self::create_topic) (never TOPIC_ALREADY_EXISTS:
    /// a topic made meanwhile is returned).
    pub async fn topic(
        self: &Arc<Self>,
        name: &str,
        quota: &mut RequestQuota,
    ) -> Result<Arc<Topic>, ResponseError> {
        if let Some(topic) = self.existing_topic(name) {
            return Ok(topic);
        }
        let config = TopicConfig::default();
        match self
            .create_topic(name, self.partitions, config, quota)
            .await
        {
            // Made meanwhile by another request.
            Err(ResponseError::TopicAlreadyExists) => self
                .existing_topic(name)
                .ok_or(ResponseError::UnknownTopicOrPartition),
            made => made,
        }
    }

    /// Creates the topic `name` with `partitions` partitions and its
    /// (checked) `config`, its disk work on the blocking pool.
    ///
    /// # Errors
    ///
    /// INVALID_TOPIC_EXCEPTION for an illegal name, INVALID_PARTITIONS
    /// outside `1..=MAX_PARTITIONS`, TOPIC_ALREADY_EXISTS (or being made),
    /// POLICY_VIOLATION past the request's or the broker's partition
    /// bound, or KAFKA_STORAGE_ERROR if its files cannot be made.
    pub async fn create_topic(
        self: &Arc<Self>,
        name: &str,
        partitions: i32,
        config: TopicConfig,
        quota: &mut RequestQuota,
    ) -> Result<Arc<Topic>, ResponseError> {
        self.check_new(name, partitions)?;
        quota.take(partitions)?;
        self.reserve(name, partitions)?;
        let broker = Arc::clone(self);
        let name = name.to_string();
        tokio::task::spawn_blocking(move || broker.make(name, partitions, config))
            .await
            .map_err(|_| ResponseError::KafkaStorageError)?
    }

    /// Whether a topic `name` of `partitions` could be made now.
    ///
    /// # Errors
    ///
    /// As [`create_topic`](Self::create_topic), but for the request's
    /// bound and the files.
    pub fn check_new(&self, name: &str, partitions: i32) -> Result<(), ResponseError> {
        if !legal_topic_name(name) {
            return Err(ResponseError::InvalidTopicException);
        }
        if !(1..=MAX_PARTITIONS).contains(&partitions) {
            return Err(ResponseError::InvalidPartitions);
        }
        if self.existing_topic(name).is_some() || self.creating.lock().names.contains(name) {
            return Err(ResponseError::TopicAlreadyExists);
        }
        let held = self.creating.lock().partitions;
        if held + partitions as usize > self.config.partition_limits.per_broker {
            return Err(ResponseError::PolicyViolation);
        }
        Ok(())
    }

    /// Reserves `name` and its partitions.
    fn reserve(&self, name: &str, partitions: i32) -> Result<(), ResponseError> {
        // The topics' read lock inside the reservations' lock: the order
        // `make` keeps too (it takes the write lock after releasing this).
        let mut creating = self.creating.lock();
        if self.topics.read().contains_key(name) || creating.names.contains(name) {
            return Err(ResponseError::TopicAlreadyExists);
        }
        let held = creating.partitions + partitions as usize;
        if held > self.config.partition_limits.per_broker {
            return Err(ResponseError::PolicyViolation);
        }
        creating.partitions = held;
        creating.names.insert(name.to_string());
        Ok(())
    }

    /// The blocking work of a reserved topic: its logs made, the topic
    /// inserted, the reservation released (its partitions too if the
    /// files could not be made).
    fn make(
        &self,
        name: String,
        partitions: i32,
        config: TopicConfig,
    ) -> Result<Arc<Topic>, ResponseError> {
        let segment_bytes = config
            .segment_bytes
            .unwrap_or(self.config.log.segment_bytes);
        let id = uuid::Uuid::new_v4();
        let logs = match &self.store {
            Some(store) => store
                .create(&name, partitions, &config, id)
                .map_err(|_| ResponseError::KafkaStorageError),
            None => Ok((0..partitions)
                .map(|_| Log::create(Place::Anonymous(std::env::temp_dir()), segment_bytes))
                .collect()),
        };
        let made = logs.map(|logs| {
            let logs = logs.into_iter().map(LazyLog::open).collect();
            let topic = Arc::new(Topic::new(logs, config).with_id(id));
            self.topics.write().insert(name.clone(), Arc::clone(&topic));
            topic
        });
        let mut creating = self.creating.lock();
        creating.names.remove(&name);
        if made.is_err() {
            creating.partitions -= partitions as usize;
        }
        made
    }

    /// Grows the topic `name` to `count` partitions (CreatePartitions),
    /// the new partitions' disk work on the blocking pool; with
    /// `validate_only`, only checked.
    ///
    /// # Errors
    ///
    /// UNKNOWN_TOPIC_OR_PARTITION (also if it is deleted meanwhile),
    /// INVALID_PARTITIONS if `count` is not above its partitions or is past
    /// `MAX_PARTITIONS`, POLICY_VIOLATION past the request's or the
    /// broker's bound, INVALID_REQUEST while it is being grown by another
    /// request, KAFKA_STORAGE_ERROR if the files cannot be made.
    pub async fn create_partitions(
        self: &Arc<Self>,
        name: &str,
        count: i32,
        validate_only: bool,
        quota: &mut RequestQuota,
    ) -> Result<(), ResponseError> {
        let topic = self
            .existing_topic(name)
            .ok_or(ResponseError::UnknownTopicOrPartition)?;
        let have = i32::try_from(topic.partitions.len()).unwrap_or(i32::MAX);
        if count <= have || count > MAX_PARTITIONS {
            return Err(ResponseError::InvalidPartitions);
        }
        quota.take(count - have)?;
        {
            let mut creating = self.creating.lock();
            if creating.names.contains(name) {
                return Err(ResponseError::InvalidRequest);
            }
            let held = creating.partitions + (count - have) as usize;
            if held > self.config.partition_limits.per_broker {
                return Err(ResponseError::PolicyViolation);
            }
            if validate_only {
                return Ok(());
            }
            creating.partitions = held;
            creating.names.insert(name.to_string());
        }
        let broker = Arc::clone(self);
        let name = name.to_string();
        tokio::task::spawn_blocking(move || broker.grow(&name, &topic, have..count))
            .await
            .map_err(|_| ResponseError::KafkaStorageError)?
    }

    /// The blocking work of [`create_partitions`](Self::create_partitions):
    /// the new logs made under the topic's liveness (a deletion waits for
    /// it), the grown topic put in its place if it is still there, the
    /// reservation released.
    fn grow(
        &self,
        name: &str,
        topic: &Arc<Topic>,
        indexes: std::ops::Range<i32>,
    ) -> Result<(), ResponseError> {
        let more = indexes.len();
        let made = {
            let live = topic.live.read();
            let logs = if !*live {
                Err(ResponseError::UnknownTopicOrPartition)
            } else if let Some(store) = &self.store {
                store
                    .create_partitions(name, indexes, &topic.config)
                    .map_err(|_| ResponseError::KafkaStorageError)
            } else {
                let segment_bytes = topic
                    .config
                    .segment_bytes
                    .unwrap_or(self.config.log.segment_bytes);
                Ok(indexes
                    .map(|_| Log::create(Place::Anonymous(std::env::temp_dir()), segment_bytes))
                    .collect())
            };
            logs.and_then(|logs| {
                let mut topics = self.topics.write();
                match topics.get_mut(name) {
                    // Still the topic grown (not deleted, or deleted and
                    // made again, meanwhile).
                    Some(current) if Arc::ptr_eq(current, topic) => {
                        *current = Arc::new(topic.rebuilt(logs, topic.config.clone()));
                        Ok(())
                    }
                    _ => Err(ResponseError::UnknownTopicOrPartition),
                }
            })
        };
        let mut creating = self.creating.lock();
        creating.names.remove(name);
        if made.is_err() {
            creating.partitions -= more;
        }
        made
    }

    /// Gives the topic `name` (`topic`, as the caller found it) the configs
    /// `config` (AlterConfigs, IncrementalAlterConfigs): kept in its
    /// directory on the blocking pool, its segments' size set for its
    /// logs' next rolls, then a topic of the same logs with them put in
    /// its place.
    ///
    /// # Errors
    ///
    /// UNKNOWN_TOPIC_OR_PARTITION if it is deleted meanwhile,
    /// INVALID_REQUEST while another request grows or alters it,
    /// KAFKA_STORAGE_ERROR if its configs' file cannot be written.
    pub async fn reconfigure(
        self: &Arc<Self>,
        name: &str,
        topic: Arc<Topic>,
        config: TopicConfig,
    ) -> Result<(), ResponseError> {
        if !self.creating.lock().names.insert(name.to_string()) {
            return Err(ResponseError::InvalidRequest);
        }
        let broker = Arc::clone(self);
        let name = name.to_string();
        tokio::task::spawn_blocking(move || {
            let done = broker.install_config(&name, &topic, config);
            broker.creating.lock().names.remove(&name);
            done
        })
        .await
        .map_err(|_| ResponseError::KafkaStorageError)?
    }

    /// The blocking work of [`reconfigure`](Self::reconfigure), under the
    /// topic's liveness (a deletion waits for it).
    fn install_config(
        &self,
        name: &str,
        topic: &Arc<Topic>,
        config: TopicConfig,
    ) -> Result<(), ResponseError> {
        let live = topic.live.read();
        if !*live {
            return Err(ResponseError::UnknownTopicOrPartition);
        }
        if let Some(store) = &self.store {
            store
                .write_config(name, &config)
                .map_err(|_| ResponseError::KafkaStorageError)?;
        }
        let segment_bytes = config
            .segment_bytes
            .unwrap_or(self.config.log.segment_bytes);
        for log in &topic.partitions {
            log.set_segment_bytes(segment_bytes);
        }
        let mut topics = self.topics.write();
        match topics.get_mut(name) {
            Some(current) if Arc::ptr_eq(current, topic) => {
                *current = Arc::new(topic.rebuilt(Vec::new(), config));
                Ok(())
            }
            _ => Err(ResponseError::UnknownTopicOrPartition),
        }
    }

    /// The name of each topic by its id (Metadata v12 asks by id: one
    /// map a request, not one scan an id asked).
    pub fn topic_names_by_id(&self) -> HashMap<uuid::Uuid, String> {
        self.topics
            .read()
            .iter()
            .map(|(name, topic)| (topic.id, name.clone()))
            .collect()
    }

    /// Deletes the topic `name`, its files and every group's commits of
    /// it (Kafka's rule: a topic made again under the name starts with
    /// none).
    ///
    /// # Errors
    ///
    /// UNKNOWN_TOPIC_OR_PARTITION, or KAFKA_STORAGE_ERROR if its files
    /// cannot be removed (the topic is gone from the broker anyway).
    pub fn delete_topic(&self, name: &str) -> Result<(), ResponseError> {
        let removed = self
            .topics
            .write()
            .remove(name)
            .ok_or(ResponseError::UnknownTopicOrPartition)?;
        self.creating.lock().partitions -= removed.partitions.len();
        removed.retire();
        self.groups.forget_topic(name);
        if let Some(store) = &self.store {
            // Before the files go: a crash in between leaves the topic
            // without commits, never a later topic of the name with these.
            store
                .commit(&[GroupCommit::topic_deleted(name)])
                .map_err(|_| ResponseError::KafkaStorageError)?;
            store
                .delete(name)
                .map_err(|_| ResponseError::KafkaStorageError)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_names_follow_kafka_s_rule() {
        for legal in ["orders", "a.b_c-9", "...", "-", &"t".repeat(249)] {
            assert!(legal_topic_name(legal), "{legal:?}");
        }
        for illegal in [
            "",
            ".",
            "..",
            "a/b",
            "a b",
            "é",
            "@offsets.log",
            &"t".repeat(250),
        ] {
            assert!(!legal_topic_name(illegal), "{illegal:?}");
        }
    }

    #[test]
    fn a_request_s_quota_takes_what_is_left_or_nothing() {
        let mut quota = RequestQuota::new(PartitionLimits {
            per_request: 10,
            per_broker: 100,
        });
        assert!(quota.take(8).is_ok());
        assert_eq!(quota.take(3), Err(ResponseError::PolicyViolation));
        assert!(quota.take(2).is_ok());
        assert_eq!(quota.take(1), Err(ResponseError::PolicyViolation));
    }
}
