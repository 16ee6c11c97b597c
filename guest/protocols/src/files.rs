//! File-level steps the protocols are built from, over the seam ([`Fs`]): reading a file
//! that must not change while read, creating a durable private directory, writing a new file,
//! listing names, removing a tree.

use crate::prelude::*;
use crate::seam::{Errno, FileStat, Fs, S_IFDIR, S_IFREG};

/// Why a regular state file is not safe to trust, or `None` when it is: a regular file owned by
/// this user with no group or other permission bits (§3.2).
pub fn unsafe_file_reason(stat: &FileStat, euid: u32) -> Option<&'static str> {
    if stat.kind() != S_IFREG {
        Some("not a regular file")
    } else if stat.uid != euid {
        Some("not owned by the current user")
    } else if stat.mode & 0o077 != 0 {
        Some("readable or writable by group or others (expected mode 0600)")
    } else {
        None
    }
}

/// What reading a file stably gave.
pub enum StableRead {
    /// The bytes, unchanged between the two `fstat`s around the read.
    Bytes(Vec<u8>),
    /// Larger than the bound.
    TooLarge,
    /// The file changed while it was read.
    Changed,
    /// The bytes read, while only the file's status changed: its ctime moved, but not its
    /// device, inode, size, mtime or mode. A link, unlink or rename of the file does that (a
    /// writer replacing it, or removing it, while it was read); so does an in-place writer that
    /// puts the mtime back. Only a caller that checks which it was may use the bytes
    /// (`read_record`, `docs/deviations.md` 32); to every other caller this is [`Self::Changed`].
    StatusChanged(Vec<u8>),
}

/// The fields whose change between two `fstat`s means a file changed while it was read
/// (§3.2): device, inode, size, mtime, ctime, mode.
fn fingerprint(stat: &FileStat) -> StatFingerprint {
    StatFingerprint { dev: stat.dev, ino: stat.ino, size: stat.size, mtime: stat.mtime, ctime: stat.ctime, mode: stat.mode }
}

/// [`fingerprint`]'s fields.
#[derive(PartialEq, Eq)]
struct StatFingerprint {
    dev: u64,
    ino: u64,
    size: i64,
    mtime: (i64, i64),
    ctime: (i64, i64),
    mode: u32,
}

/// Reads at most `max_bytes` from an open file whose `fstat` was `before`, checking that it did
/// not change meanwhile.
pub fn read_stable<F: Fs + ?Sized>(fs: &F, file: &F::File, before: &FileStat, max_bytes: u64) -> Result<StableRead, Errno> {
    if before.size < 0 || before.size as u64 > max_bytes {
        return Ok(StableRead::TooLarge);
    }
    let bytes = fs.read_up_to(file, max_bytes + 1, before.size as u64)?;
    if bytes.len() as u64 > max_bytes {
        return Ok(StableRead::TooLarge);
    }
    let after = fs.stat_file(file)?;
    if bytes.len() as i64 != after.size {
        return Ok(StableRead::Changed);
    }
    if fingerprint(before) != fingerprint(&after) {
        let status_only = (StatFingerprint { ctime: after.ctime, ..fingerprint(before) }) == fingerprint(&after);
        return Ok(if status_only { StableRead::StatusChanged(bytes) } else { StableRead::Changed });
    }
    Ok(StableRead::Bytes(bytes))
}

/// Creates `name` exclusively (mode 0600), writes `bytes` and, with `sync`, fsyncs it. A file
/// left behind by a failure is the caller's to unlink.
pub fn write_new_file<F: Fs + ?Sized>(fs: &F, dir: &F::Dir, name: &str, bytes: &[u8], sync: bool) -> Result<(), Errno> {
    let file = fs.create_file(dir, name)?;
    fs.write_all(&file, bytes)?;
    if sync {
        fs.sync_file(&file)?;
    }
    Ok(())
}

/// Creates directory `name` (mode 0700) durably: the directory and its parent are fsynced, so
/// that its entry survives a power loss. `Ok(false)` when the name already exists. A directory
/// that could not be made durable is removed again, so that a retry creates (and fsyncs) it
/// anew instead of finding it and trusting it.
pub fn create_private_dir<F: Fs + ?Sized>(fs: &F, dir: &F::Dir, name: &str) -> Result<bool, Errno> {
    let made = match fs.make_dir(dir, name) {
        Ok(made) => made,
        Err(Errno::EXIST) => return Ok(false),
        Err(e) => return Err(e),
    };
    if let Err(e) = fs.sync_dir(&made).and_then(|()| fs.sync_dir(dir)) {
        let _ = fs.remove_dir(dir, name);
        return Err(e);
    }
    Ok(true)
}

/// Why [`private_dir`] or [`open_private_dir_if_present`] refused or failed. The callers word
/// it (each names its own directory in its own message form).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrivateDirError {
    /// A system call failed: `step` is `mkdir`, `open` or `fstat`. `open` with `LOOP` means
    /// the name is a symbolic link, which is never followed.
    Step {
        /// The step: `mkdir`, `open` or `fstat`.
        step: &'static str,
        /// Its error.
        errno: Errno,
    },
    /// It exists but is not a private directory of this user: another owner than the
    /// effective uid, or a mode other than exactly 0700.
    NotPrivate,
}

/// How an I/O-style caller words [`PrivateDirError::NotPrivate`] (the store words its own).
pub const NOT_PRIVATE: &str = "must be a directory owned by you with mode 0700 (chmod 700 it)";

/// Creates (mode 0700, durably: [`create_private_dir`]) or opens the directory `name` in
/// `parent`, and checks that it is a private directory of this user: not a symbolic link,
/// owned by the effective uid, mode exactly 0700. The one home of this rule for the state
/// home's own directories (`.proclease`, its `staging`, `locks`, `runs`, `fence`, `queues`
/// and `witnesses` directories).
///
/// Errors: [`PrivateDirError`]; nothing created is left behind by a failed creation.
pub fn private_dir<F: Fs + ?Sized>(fs: &F, parent: &F::Dir, name: &str) -> Result<F::Dir, PrivateDirError> {
    create_private_dir(fs, parent, name).map_err(|errno| PrivateDirError::Step { step: "mkdir", errno })?;
    open_private_dir_if_present(fs, parent, name)?.ok_or(PrivateDirError::Step { step: "open", errno: Errno::NOENT })
}

/// The private directory `name` in `parent` if it exists ([`private_dir`]'s checks), `None`
/// when absent. Creates nothing: for readers such as `doctor` or a fence check.
///
/// Errors: [`PrivateDirError`] (steps `open` and `fstat`).
pub fn open_private_dir_if_present<F: Fs + ?Sized>(fs: &F, parent: &F::Dir, name: &str) -> Result<Option<F::Dir>, PrivateDirError> {
    let dir = match fs.open_dir(parent, name) {
        Ok(dir) => dir,
        Err(Errno::NOENT) => return Ok(None),
        Err(errno) => return Err(PrivateDirError::Step { step: "open", errno }),
    };
    let stat = fs.stat_dir(&dir).map_err(|errno| PrivateDirError::Step { step: "fstat", errno })?;
    if stat.uid != fs.euid() || stat.mode & 0o777 != 0o700 {
        return Err(PrivateDirError::NotPrivate);
    }
    Ok(Some(dir))
}

/// The UTF-8 names in `dir` that start with `prefix`; `Err(None)` when more than `bound` names
/// (UTF-8 or not) start with it.
pub fn names_starting_with<F: Fs + ?Sized>(fs: &F, dir: &F::Dir, prefix: &str, bound: usize) -> Result<Vec<String>, Option<Errno>> {
    let names = fs.read_names(dir, bound, prefix.as_bytes())?;
    Ok(names.into_iter().filter_map(|name| String::from_utf8(name).ok()).collect())
}

/// Removes the directory `name` and everything below it, bottom-up, without following a
/// symbolic link. Errors: the first failing call; a tree deeper than 256 levels (`LOOP`).
pub fn remove_tree<F: Fs + ?Sized>(fs: &F, dir: &F::Dir, name: &str) -> Result<(), Errno> {
    fn empty<F: Fs + ?Sized>(fs: &F, dir: &F::Dir, depth: usize) -> Result<(), Errno> {
        if depth > 256 {
            return Err(Errno::LOOP);
        }
        loop {
            // A bounded batch at a time: removed, then the directory is read again.
            let names = fs.first_names(dir, 1024)?;
            if names.is_empty() {
                return Ok(());
            }
            for name in &names {
                match fs.lstat(dir, name)? {
                    Some(stat) if stat.kind() == S_IFDIR => {
                        let child = fs.open_dir(dir, name)?;
                        empty(fs, &child, depth + 1)?;
                        fs.remove_dir(dir, name)?;
                    }
                    Some(_) => fs.unlink(dir, name)?,
                    None => {}
                }
            }
        }
    }
    let top = fs.open_dir(dir, name)?;
    empty(fs, &top, 0)?;
    fs.remove_dir(dir, name)
}
