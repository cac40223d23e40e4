//! Fsyncs, in one place: a file's bytes ([`sync_file`]) and a directory's
//! names ([`sync_dir`]). A new name (a segment installed by a roll, a
//! snapshot renamed, a partition directory made) is durable only once its
//! directory is fsynced; the bytes of a file only once the file is.
//!
//! A failed fsync is never retried and trusted: after an I/O error Linux
//! drops the dirty pages it could not write and marks them clean, so the
//! next fsync returns 0 for bytes that are gone. A caller treats an error
//! as the end of what it can promise ([`super::Log::fail`]).
//!
//! In tests a `seam` sits in front of both: it can fail them, and it
//! records what each made durable (the length of each file, the names of
//! each directory), so that a test can model a power loss by reverting
//! a directory to that state.

use std::fs::File;
use std::io;
use std::path::Path;

/// Fsyncs `file`'s data.
///
/// # Errors
///
/// The fsync failed: what was written since the last good one may be lost.
pub fn sync_file(file: &File) -> io::Result<()> {
    #[cfg(test)]
    if let Some(outcome) = seam::before_file(file) {
        return outcome;
    }
    file.sync_data()?;
    #[cfg(test)]
    seam::file_synced(file);
    Ok(())
}

/// Fsyncs the directory `dir`: the names made, renamed or removed in it
/// so far survive a power loss.
///
/// # Errors
///
/// It could not be opened or fsynced; the error names it.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    let named = |e: io::Error| io::Error::new(e.kind(), format!("fsync of {}: {e}", dir.display()));
    #[cfg(test)]
    if let Some(outcome) = seam::before_dir(dir) {
        return outcome.map_err(named);
    }
    File::open(dir).and_then(|d| d.sync_all()).map_err(named)?;
    #[cfg(test)]
    seam::dir_synced(dir);
    Ok(())
}

/// The test seam in front of the fsyncs of this thread.
#[cfg(test)]
pub mod seam {
    use std::cell::RefCell;
    use std::collections::HashMap;
    use std::ffi::OsString;
    use std::fs::{self, File};
    use std::io;
    use std::os::unix::fs::MetadataExt;
    use std::path::{Path, PathBuf};

    /// What the fsyncs of a thread made durable, and which to fail.
    #[derive(Debug, Default)]
    pub struct Record {
        /// Per file (by inode), the length its last fsync covered.
        pub files: HashMap<u64, u64>,
        /// Per directory, its names (and their inodes) at its last fsync.
        pub dirs: HashMap<PathBuf, HashMap<OsString, u64>>,
        /// Fail the fsyncs of files with EIO.
        pub fail_files: bool,
    }

    thread_local! {
        /// This thread's record, while one is installed.
        static RECORD: RefCell<Option<Record>> = const { RefCell::new(None) };
    }

    /// Records (and fails, if asked) this thread's fsyncs from now on.
    pub fn install(record: Record) {
        RECORD.with(|r| *r.borrow_mut() = Some(record));
    }

    /// Runs `f` on this thread's record, if one is installed.
    pub fn with<R>(f: impl FnOnce(&mut Record) -> R) -> Option<R> {
        RECORD.with(|r| r.borrow_mut().as_mut().map(f))
    }

    /// A failure in place of the file's fsync, if one is asked for.
    pub(super) fn before_file(_: &File) -> Option<io::Result<()>> {
        with(|r| r.fail_files)
            .unwrap_or(false)
            .then(|| Err(io::Error::from_raw_os_error(5)))
    }

    /// A failure in place of the directory's fsync (none is asked for yet).
    pub(super) fn before_dir(_: &Path) -> Option<io::Result<()>> {
        None
    }

    /// Notes the length `file`'s fsync covered.
    pub(super) fn file_synced(file: &File) {
        if let Ok(meta) = file.metadata() {
            with(|r| r.files.insert(meta.ino(), meta.len()));
        }
    }

    /// Notes the names `dir`'s fsync made durable.
    pub(super) fn dir_synced(dir: &Path) {
        let Ok(entries) = fs::read_dir(dir) else {
            return;
        };
        let names = entries
            .filter_map(Result::ok)
            .filter_map(|e| Some((e.file_name(), e.metadata().ok()?.ino())))
            .collect();
        with(|r| r.dirs.insert(dir.to_path_buf(), names));
    }

    /// A power loss of the flat directory `dir` as the record has it: only
    /// the names of its last fsync are left, each file cut to what its
    /// last fsync covered (a name never fsynced, or a file whose name is
    /// lost, is gone; a file never fsynced is empty).
    pub fn power_loss(dir: &Path) {
        let record = with(std::mem::take).expect("a record is installed");
        let names = record.dirs.get(dir).cloned().unwrap_or_default();
        // The surviving files' bytes, read before the directory is redone.
        let mut kept = Vec::new();
        let mut by_inode: HashMap<u64, Vec<u8>> = HashMap::new();
        for entry in fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let ino = entry.metadata().unwrap().ino();
            let mut bytes = fs::read(entry.path()).unwrap();
            bytes.truncate(record.files.get(&ino).copied().unwrap_or(0) as usize);
            by_inode.insert(ino, bytes);
        }
        for (name, ino) in names {
            if let Some(bytes) = by_inode.get(&ino) {
                kept.push((name, bytes.clone()));
            }
        }
        fs::remove_dir_all(dir).unwrap();
        fs::create_dir_all(dir).unwrap();
        for (name, bytes) in kept {
            fs::write(dir.join(name), bytes).unwrap();
        }
    }
}
