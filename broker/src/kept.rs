//! A small set of records kept whole in one file of the data directory
//! (the ACLs, the SCRAM credentials, the broker's dynamic configs), or in
//! memory without one.
//!
//! The file holds one record a line, its fields separated by tabs and
//! escaped (`\\`, `\t`, `\n`). A change is rare (an admin request): it
//! writes the whole set aside, fsyncs it, renames it over the file and
//! fsyncs the directory, on the blocking pool, so a crash leaves the old
//! set or the new, and no runtime thread waits for the disk. Changes are
//! serialised by a lock of their own (taken only on the blocking pool);
//! readers take a snapshot, an `Arc`, and never wait for a write. The
//! files (and their asides) are their owner's only, mode 0600: the SCRAM
//! credentials and the broker's dynamic configs hold secrets.

use std::io;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use crate::log::sync::{sync_dir, sync_file};

/// A record kept in a [`Kept`] file: its fields, as text.
pub trait Record: Clone + PartialEq + Send + Sync + 'static {
    /// The record's fields, in order.
    fn fields(&self) -> Vec<String>;

    /// The record of these fields, or `None` if they do not make one.
    fn from_fields(fields: &[String]) -> Option<Self>;
}

/// A set of records, kept in a file with `--data-dir`.
pub struct Kept<T> {
    /// The records as they are now.
    now: RwLock<Arc<Vec<T>>>,
    /// Serialises the changes, so that the file ends as memory does.
    writer: Mutex<()>,
    /// The file, with `--data-dir`.
    file: Option<PathBuf>,
}

impl<T: Record> Kept<T> {
    /// An empty set, kept in memory only.
    pub fn in_memory() -> Kept<T> {
        Kept {
            now: RwLock::new(Arc::new(Vec::new())),
            writer: Mutex::new(()),
            file: None,
        }
    }

    /// The set kept in `file` (empty if it does not exist yet); a file
    /// others could read (written by an older broker) is made its
    /// owner's only.
    ///
    /// # Errors
    ///
    /// The file cannot be read or made private, or a line of it is not a
    /// record (the error names the line).
    pub fn open(file: PathBuf) -> io::Result<Kept<T>> {
        let text = match std::fs::File::open(&file) {
            Ok(mut opened) => {
                if opened.metadata()?.permissions().mode() & !PRIVATE & 0o777 != 0 {
                    opened.set_permissions(std::fs::Permissions::from_mode(PRIVATE))?;
                }
                let mut text = String::new();
                io::Read::read_to_string(&mut opened, &mut text)?;
                text
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(e),
        };
        let records = text
            .lines()
            .enumerate()
            .map(|(n, line)| {
                T::from_fields(&split(line)).ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("line {} is not a record", n + 1),
                    )
                })
            })
            .collect::<io::Result<Vec<T>>>()?;
        Ok(Kept {
            now: RwLock::new(Arc::new(records)),
            writer: Mutex::new(()),
            file: Some(file),
        })
    }

    /// The records as they are now.
    pub fn snapshot(&self) -> Arc<Vec<T>> {
        Arc::clone(&self.now.read())
    }

    /// Applies `change` to the records and keeps the result (in the file
    /// first, on the blocking pool, with `--data-dir`; nothing is written
    /// if nothing changed); `change` returns what the caller answers.
    ///
    /// # Errors
    ///
    /// The file could not be written: nothing changed.
    pub async fn change<R: Send + 'static>(
        self: &Arc<Self>,
        change: impl FnOnce(&mut Vec<T>) -> R + Send + 'static,
    ) -> io::Result<R> {
        if self.file.is_none() {
            return self.change_now(change);
        }
        let kept = Arc::clone(self);
        tokio::task::spawn_blocking(move || kept.change_now(change))
            .await
            .map_err(io::Error::other)?
    }

    /// [`change`](Self::change), blocking.
    fn change_now<R>(&self, change: impl FnOnce(&mut Vec<T>) -> R) -> io::Result<R> {
        let _writer = self.writer.lock();
        let now = self.snapshot();
        let mut next = Vec::clone(&now);
        let outcome = change(&mut next);
        if next == *now {
            // Nothing changed (a deletion that matched nothing): no write.
            return Ok(outcome);
        }
        if let Some(file) = &self.file {
            write(file, &next)?;
        }
        *self.now.write() = Arc::new(next);
        Ok(outcome)
    }
}

/// The mode of a kept file: its owner's only (the SCRAM credentials and
/// the broker's dynamic configs hold secrets).
const PRIVATE: u32 = 0o600;

/// Writes `records` over `file`: aside (readable by its owner only),
/// fsynced, renamed, the directory fsynced.
fn write<T: Record>(file: &Path, records: &[T]) -> io::Result<()> {
    let mut text = String::new();
    for record in records {
        let fields: Vec<String> = record.fields().iter().map(|f| escape(f)).collect();
        text.push_str(&fields.join("\t"));
        text.push('\n');
    }
    let mut aside = file.as_os_str().to_owned();
    aside.push(".tmp");
    let aside = PathBuf::from(aside);
    let out = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(PRIVATE)
        .open(&aside)?;
    // An aside left by a crash keeps the mode it was made with: set it.
    out.set_permissions(std::fs::Permissions::from_mode(PRIVATE))?;
    io::Write::write_all(&mut &out, text.as_bytes())?;
    sync_file(&out)?;
    std::fs::rename(&aside, file)?;
    sync_dir(file.parent().unwrap_or(Path::new(".")))
}

/// `field` with its backslashes, tabs and line ends escaped.
fn escape(field: &str) -> String {
    let mut out = String::with_capacity(field.len());
    for c in field.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
    out
}

/// The fields of a line, unescaped.
fn split(line: &str) -> Vec<String> {
    line.split('\t')
        .map(|field| {
            let mut out = String::with_capacity(field.len());
            let mut chars = field.chars();
            while let Some(c) = chars.next() {
                if c != '\\' {
                    out.push(c);
                    continue;
                }
                match chars.next() {
                    Some('t') => out.push('\t'),
                    Some('n') => out.push('\n'),
                    Some('r') => out.push('\r'),
                    Some(other) => out.push(other),
                    None => {}
                }
            }
            out
        })
        .collect()
}

/// `bytes` as lower-case hex (a record's binary field).
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The bytes of `hex` text, or `None` if it is not hex.
pub fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaped_fields_split_back_to_themselves() {
        let fields = ["a\tb", "c\\d\n", "", "\\t", "é\r"];
        let line: Vec<String> = fields.iter().map(|f| escape(f)).collect();
        let line = line.join("\t");
        assert!(!line.contains('\n'), "{line:?}");
        assert_eq!(split(&line), fields);
    }

    /// A record of one field.
    #[derive(Clone, Debug, PartialEq)]
    struct Line(String);

    impl Record for Line {
        fn fields(&self) -> Vec<String> {
            vec![self.0.clone()]
        }

        fn from_fields(fields: &[String]) -> Option<Line> {
            Some(Line(fields.first()?.clone()))
        }
    }

    #[test]
    fn a_kept_file_is_its_owner_s_only_even_over_an_open_aside() {
        let dir = purgatorio_testkit::TempDir::new("broker-kept-aside");
        let file = dir.path().join("@secret");
        // An aside a crash left, readable by all.
        let aside = dir.path().join("@secret.tmp");
        std::fs::write(&aside, "old\n").unwrap();
        std::fs::set_permissions(&aside, std::fs::Permissions::from_mode(0o644)).unwrap();
        let kept: Kept<Line> = Kept::open(file.clone()).unwrap();
        kept.change_now(|lines| lines.push(Line("secret".into())))
            .unwrap();
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, PRIVATE);
        let again: Kept<Line> = Kept::open(file).unwrap();
        assert_eq!(*again.snapshot(), [Line("secret".into())]);
    }

    #[test]
    fn hex_round_trips_and_refuses_what_is_not_hex() {
        assert_eq!(
            unhex(&hex(&[0, 1, 0xab, 0xff])),
            Some(vec![0, 1, 0xab, 0xff])
        );
        assert_eq!(unhex("abc"), None);
        assert_eq!(unhex("zz"), None);
        assert_eq!(unhex("é1"), None);
    }
}
