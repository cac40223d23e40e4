//! `--data-dir`: committed offsets in an internal log, `@offsets.log` (a
//! name no topic can have), so a group resumes at its commits after a
//! restart or a SIGKILL.
//!
//! Each commit is appended as one record:
//!
//! ```text
//! u32 length of the rest
//! u16 group length, group   u16 topic length, topic   i32 partition
//! i64 offset                i32 metadata length (-1: none), metadata
//! i32 leader epoch          u8 tombstone (1: the commit is deleted)
//! ```
//!
//! (The last two fields are absent from the records of earlier builds:
//! epoch -1, no tombstone.) A topic's deletion is a record of partition -1
//! (no commit has one) and an empty group: the commits of that topic
//! before it are forgotten. A group's deletion (DeleteGroups) is a record
//! of partition -2 and an empty topic: the group's commits before it are
//! forgotten. OffsetDelete writes a tombstone per partition.
//!
//! An OffsetCommit is answered once the store's group commit has fsynced
//! the file past its records (the same fsync as acks=all produces). At
//! start the file is read back (a record cut short by a crash, and anything
//! after it, is cut off; a later commit of a partition overrides an
//! earlier one) and, when most of it is overridden commits, rewritten with
//! only the live ones.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use crate::coordinator::Committed;
use crate::log::TopicPartition;

/// The longest commit metadata string kept, bytes (Kafka's
/// `offset.metadata.max.bytes`); a longer one is OFFSET_METADATA_TOO_LARGE.
pub const MAX_METADATA: usize = 4096;

/// A group's commit of one partition, as the file keeps it.
#[derive(Clone, Debug)]
pub struct GroupCommit {
    /// The group.
    pub group: String,
    /// The commit.
    pub committed: Committed,
    /// Whether it deletes the group's commit of the partition instead
    /// (OffsetDelete).
    pub tombstone: bool,
}

/// The partition of a record that says its topic was deleted.
const TOPIC_DELETED: i32 = -1;

/// The partition of a record that says its group was deleted.
const GROUP_DELETED: i32 = -2;

impl GroupCommit {
    /// `group`'s commit.
    pub fn new(group: &str, committed: Committed) -> GroupCommit {
        GroupCommit {
            group: group.to_string(),
            committed,
            tombstone: false,
        }
    }

    /// The record saying `topic` was deleted.
    pub fn topic_deleted(topic: &str) -> GroupCommit {
        GroupCommit::new("", Committed::none(topic, TOPIC_DELETED))
    }

    /// The record saying `group` was deleted, its commits with it.
    pub fn group_deleted(group: &str) -> GroupCommit {
        GroupCommit::new(group, Committed::none("", GROUP_DELETED))
    }

    /// The record deleting `group`'s commit of `at` (OffsetDelete).
    pub fn offset_deleted(group: &str, at: &TopicPartition) -> GroupCommit {
        GroupCommit {
            tombstone: true,
            ..GroupCommit::new(group, Committed::none(&at.topic, at.partition))
        }
    }

    /// Applies it to the live commits, by group and partition.
    fn apply(self, live: &mut HashMap<(String, TopicPartition), GroupCommit>) {
        match self.committed.partition {
            TOPIC_DELETED => live.retain(|(_, at), _| at.topic != self.committed.topic),
            GROUP_DELETED => live.retain(|(group, _), _| *group != self.group),
            partition => {
                let key = (
                    self.group.clone(),
                    TopicPartition::new(self.committed.topic.clone(), partition),
                );
                if self.tombstone {
                    live.remove(&key);
                } else {
                    live.insert(key, self);
                }
            }
        }
    }
}

/// The offsets log.
pub struct OffsetsLog {
    /// Its path.
    path: PathBuf,
    /// The file, appended to.
    file: File,
    /// Records written so far.
    pub written: u64,
    /// Records covered by an fsync.
    pub durable: u64,
}

/// Encodes `commit` as a record (length first).
fn encode(commit: &GroupCommit) -> Vec<u8> {
    let c = &commit.committed;
    let mut body = Vec::new();
    for text in [&commit.group, &c.topic] {
        let text = &text.as_bytes()[..text.len().min(usize::from(u16::MAX))];
        body.extend((text.len() as u16).to_be_bytes());
        body.extend(text);
    }
    body.extend(c.partition.to_be_bytes());
    body.extend(c.offset.to_be_bytes());
    match &c.metadata {
        Some(m) => {
            body.extend((m.len() as i32).to_be_bytes());
            body.extend(m.as_bytes());
        }
        None => body.extend((-1i32).to_be_bytes()),
    }
    body.extend(c.leader_epoch.to_be_bytes());
    body.push(u8::from(commit.tombstone));
    let mut record = (body.len() as u32).to_be_bytes().to_vec();
    record.extend(body);
    record
}

/// A cursor over the file's bytes.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len())?;
        let taken = &self.bytes[self.at..end];
        self.at = end;
        Some(taken)
    }

    fn text(&mut self, n: usize) -> Option<String> {
        String::from_utf8(self.take(n)?.to_vec()).ok()
    }

    fn u16(&mut self) -> Option<usize> {
        Some(usize::from(u16::from_be_bytes(
            self.take(2)?.try_into().ok()?,
        )))
    }

    fn i32(&mut self) -> Option<i32> {
        Some(i32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }

    /// One record, or `None` at a torn or malformed one.
    fn record(&mut self) -> Option<GroupCommit> {
        let length = usize::try_from(u32::from_be_bytes(self.take(4)?.try_into().ok()?)).ok()?;
        let mut body = Reader {
            bytes: self.take(length)?,
            at: 0,
        };
        let n = body.u16()?;
        let group = body.text(n)?;
        let n = body.u16()?;
        let topic = body.text(n)?;
        let partition = body.i32()?;
        let offset = i64::from_be_bytes(body.take(8)?.try_into().ok()?);
        let metadata = match body.i32()? {
            -1 => None,
            n => Some(body.text(usize::try_from(n).ok()?)?),
        };
        // Absent from the records of earlier builds.
        let leader_epoch = body.i32().unwrap_or(-1);
        let tombstone = body.take(1).is_some_and(|b| b[0] == 1);
        Some(GroupCommit {
            group,
            committed: Committed {
                topic,
                partition,
                offset,
                metadata,
                leader_epoch,
            },
            tombstone,
        })
    }
}

impl OffsetsLog {
    /// Opens (creating) the log at `path`; returns it and the live commits.
    ///
    /// # Errors
    ///
    /// The file cannot be read, truncated, rewritten or opened.
    pub fn open(path: &Path) -> std::io::Result<(OffsetsLog, Vec<GroupCommit>)> {
        let mut bytes = Vec::new();
        match File::open(path) {
            Ok(mut f) => {
                f.read_to_end(&mut bytes)?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let mut reader = Reader {
            bytes: &bytes,
            at: 0,
        };
        let mut live: HashMap<(String, TopicPartition), GroupCommit> = HashMap::new();
        let mut records = 0usize;
        let mut good = 0;
        while let Some(commit) = reader.record() {
            commit.apply(&mut live);
            records += 1;
            good = reader.at;
        }
        let live: Vec<GroupCommit> = live.into_values().collect();
        if records > 2 * live.len() + 1024 {
            // Mostly overridden commits: keep only the live ones.
            let tmp = path.with_extension("tmp");
            let mut file = File::create(&tmp)?;
            for commit in &live {
                file.write_all(&encode(commit))?;
            }
            crate::log::sync::sync_file(&file)?;
            // The new name is made durable with the data directory's fsync
            // that `Store::open` does after this.
            fs::rename(&tmp, path)?;
        } else if good < bytes.len() {
            OpenOptions::new()
                .write(true)
                .open(path)?
                .set_len(good as u64)?;
        }
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        let log = OffsetsLog {
            path: path.to_path_buf(),
            file,
            written: 0,
            durable: 0,
        };
        Ok((log, live))
    }

    /// Appends `commits`; returns how many records the file then holds
    /// since start (the fsync covering them makes them durable).
    ///
    /// # Errors
    ///
    /// The write failed.
    pub fn append(&mut self, commits: &[GroupCommit]) -> std::io::Result<u64> {
        let bytes: Vec<u8> = commits.iter().flat_map(encode).collect();
        self.file.write_all(&bytes)?;
        self.written += commits.len() as u64;
        Ok(self.written)
    }

    /// A handle to fsync, and the records it will cover.
    pub fn to_sync(&self) -> std::io::Result<(File, u64)> {
        Ok((self.file.try_clone()?, self.written))
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn commit(group: &str, partition: i32, offset: i64, metadata: Option<&str>) -> GroupCommit {
        GroupCommit::new(
            group,
            Committed {
                offset,
                metadata: metadata.map(String::from),
                ..Committed::none("t", partition)
            },
        )
    }

    #[test]
    fn commits_are_read_back_the_latest_winning_and_a_torn_tail_cut() {
        let dir = std::env::temp_dir().join(format!("offsets-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("@offsets.log");
        let (mut log, live) = OffsetsLog::open(&path).unwrap();
        assert!(live.is_empty());
        log.append(&[commit("g", 0, 5, Some("m")), commit("g", 1, 7, None)])
            .unwrap();
        log.append(&[commit("g", 0, 9, None)]).unwrap();
        drop(log);
        // A torn record at the end.
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&[0, 0, 0, 40, 0, 1]).unwrap();
        drop(f);
        let (_, mut live) = OffsetsLog::open(&path).unwrap();
        live.sort_by_key(|c| c.committed.partition);
        let got: Vec<(i32, i64)> = live
            .iter()
            .map(|c| (c.committed.partition, c.committed.offset))
            .collect();
        assert_eq!(got, [(0, 9), (1, 7)]);
        let len = fs::metadata(&path).unwrap().len();
        assert_eq!(
            len as usize,
            3 * encode(&commit("g", 0, 9, None)).len() + 1,
            "the torn tail is cut"
        );
        // The topic deleted, then committed to again: only the later commit.
        let (mut log, _) = OffsetsLog::open(&path).unwrap();
        log.append(&[GroupCommit::topic_deleted("t"), commit("g", 1, 2, None)])
            .unwrap();
        drop(log);
        let (_, live) = OffsetsLog::open(&path).unwrap();
        let got: Vec<(i32, i64)> = live
            .iter()
            .map(|c| (c.committed.partition, c.committed.offset))
            .collect();
        assert_eq!(got, [(1, 2)]);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn deletions_and_leader_epochs_are_read_back_and_old_records_still_read() {
        let dir = std::env::temp_dir().join(format!("offsets-del-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("@offsets.log");
        // A record of an earlier build: no leader epoch, no tombstone byte.
        let mut old = encode(&commit("old", 0, 4, None));
        old.truncate(old.len() - 5);
        let body = old.len() as u32 - 4;
        old[..4].copy_from_slice(&body.to_be_bytes());
        fs::write(&path, &old).unwrap();
        let (mut log, live) = OffsetsLog::open(&path).unwrap();
        assert_eq!(live.len(), 1);
        assert_eq!(
            (live[0].committed.offset, live[0].committed.leader_epoch),
            (4, -1)
        );
        let mut epoch = commit("g", 0, 5, None);
        epoch.committed.leader_epoch = 7;
        let at = TopicPartition::new("t", 1);
        log.append(&[
            epoch,
            commit("g", 1, 6, None),
            commit("gone", 0, 8, None),
            GroupCommit::offset_deleted("g", &at),
            GroupCommit::group_deleted("gone"),
        ])
        .unwrap();
        drop(log);
        let (_, mut live) = OffsetsLog::open(&path).unwrap();
        live.sort_by(|a, b| a.group.cmp(&b.group));
        let got: Vec<(&str, i32, i64, i32)> = live
            .iter()
            .map(|c| {
                let c2 = &c.committed;
                (c.group.as_str(), c2.partition, c2.offset, c2.leader_epoch)
            })
            .collect();
        assert_eq!(got, [("g", 0, 5, 7), ("old", 0, 4, -1)]);
        fs::remove_dir_all(&dir).unwrap();
    }
}
