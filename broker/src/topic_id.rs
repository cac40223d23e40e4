//! A topic's id (Metadata v10+, Kafka's `topicId`): a random UUID drawn
//! when the topic is made, kept in its directory's `@id` file with
//! `--data-dir` (written aside, fsynced, renamed, before the topic
//! exists), so that it is the same across restarts and a topic made again
//! under the name gets a new one, as in Kafka.

use std::io;
use std::path::Path;

use uuid::Uuid;

use crate::log::sync::{sync_dir, sync_file};

/// The file of a topic's id, in its directory.
pub const ID_FILE: &str = "@id";

/// Keeps `id` in the topic directory `dir` (which exists).
///
/// # Errors
///
/// The file could not be written, fsynced or renamed.
pub fn write(dir: &Path, id: Uuid) -> io::Result<()> {
    let aside = dir.join(format!("{ID_FILE}.tmp"));
    let file = std::fs::File::create(&aside)?;
    io::Write::write_all(&mut &file, id.hyphenated().to_string().as_bytes())?;
    sync_file(&file)?;
    std::fs::rename(&aside, dir.join(ID_FILE))?;
    sync_dir(dir)
}

/// The id kept in the topic directory `dir`; a directory of an earlier
/// layout, which has none, is given one (kept).
///
/// # Errors
///
/// The file could not be read or written, or holds no UUID.
pub fn read_or_make(dir: &Path) -> io::Result<Uuid> {
    match std::fs::read_to_string(dir.join(ID_FILE)) {
        Ok(text) => {
            Uuid::parse_str(text.trim()).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let id = Uuid::new_v4();
            write(dir, id)?;
            Ok(id)
        }
        Err(e) => Err(e),
    }
}
