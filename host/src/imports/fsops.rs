//! Single-component, descriptor-relative file operations of the native host: what the seam's
//! native implementation (`seam/native.rs`) is built from, and what the parts not yet on the seam
//! (witnesses, dead-man records, the fencing counter's writes, the catalog lock file) still call.
//! Every name passed here is one already-validated entry name (no `/`), resolved relative to a
//! directory descriptor, and never followed if it is a symbolic link.

use std::io::Write as _;
use std::os::fd::{AsFd, OwnedFd};

use rustix::fs::{AtFlags, Mode, OFlags, Stat};
use rustix::io::Errno;

use crate::seam::NativeFs;
use crate::seam::files::{self, PrivateDirError};

/// The effective uid of this process: "owned" means owned by it.
pub(crate) fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// `S_IFMT` bits of a mode.
pub(crate) fn file_kind(mode: u32) -> u32 {
    mode & 0o170000
}

pub(crate) const S_IFREG: u32 = 0o100000;
pub(crate) const S_IFLNK: u32 = 0o120000;

/// `lstat` of `name` in `dir`; `None` when absent.
pub(crate) fn lstat(dir: impl AsFd, name: &str) -> rustix::io::Result<Option<Stat>> {
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) => Ok(Some(stat)),
        Err(Errno::NOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Creates `name` in `dir` exclusively (`O_CREAT|O_EXCL|O_NOFOLLOW`, mode 0600), writes
/// `bytes` and fsyncs it.
pub(crate) fn write_new_file(dir: impl AsFd, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    create_and_write(dir, name, bytes)?.sync_all()
}

/// The creation and write of [`write_new_file`]: the open file, not yet synced.
fn create_and_write(dir: impl AsFd, name: &str, bytes: &[u8]) -> std::io::Result<std::fs::File> {
    let fd = rustix::fs::openat(dir, name, OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::from_raw_mode(0o600))?;
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o600))?;
    let mut file = std::fs::File::from(fd);
    file.write_all(bytes)?;
    Ok(file)
}

/// fsync of a directory, making the entries created, renamed or removed in it durable.
pub(crate) fn fsync_dir(dir: impl AsFd) -> std::io::Result<()> {
    #[cfg(feature = "test-seams")]
    if FAILING_DIRECTORY_FSYNCS.with(|n| n.replace(n.get().saturating_sub(1)) > 0) {
        return Err(std::io::Error::from_raw_os_error(5)); // EIO, as a failing disk reports it
    }
    rustix::fs::fsync(dir)?;
    Ok(())
}

/// fsync of a directory after the catalog lock's publication or release (§5), or after the
/// §3.9 recovery removed a dead writer's leftovers. Not subject to the fault seam, which targets
/// the record changes' own fsyncs. (The claims' renames and unlinks — the state mutation claims
/// and the catalog lock's claims, which share `state_store::arbitration` — are not fsynced at
/// all: `arbitration::advance` says why.)
pub(crate) fn fsync_claim_dir(dir: impl AsFd) -> std::io::Result<()> {
    rustix::fs::fsync(dir)?;
    Ok(())
}

#[cfg(feature = "test-seams")]
thread_local! {
    /// How many more directory fsyncs on this thread are to fail (see
    /// [`fail_next_directory_fsyncs`]).
    static FAILING_DIRECTORY_FSYNCS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Test seam: the next `count` directory fsyncs of record changes made by this thread (not
/// those of mutation claims) fail with EIO, as on a
/// failing disk — the one fault a test cannot make a real filesystem produce on demand. Used by
/// `tests/tests/real_faults.rs` to drive the store's undo paths on real files. Only with the
/// `test-seams` feature.
#[cfg(feature = "test-seams")]
pub fn fail_next_directory_fsyncs(count: u32) {
    FAILING_DIRECTORY_FSYNCS.with(|n| n.set(count));
}

/// [`crate::seam::files::private_dir`] on a borrowed descriptor: creates (0700, fsynced with
/// its parent) or opens `name` in `parent` as a private directory of this user.
///
/// Errors: `(operation, error)` — the step that failed (`mkdir`, `open`, `fstat`, `check`) and
/// its error; `check` when the directory is another user's or has another mode.
pub(crate) fn private_dir(parent: impl AsFd, name: &str) -> Result<OwnedFd, (&'static str, std::io::Error)> {
    files::private_dir(&NativeFs, &NativeFs::borrow(parent.as_fd()), name).map_err(worded)
}

/// [`crate::seam::files::open_private_dir_if_present`] on a borrowed descriptor: the private
/// directory `name` in `parent` if it exists, `None` when absent. Creates nothing.
///
/// Errors: as [`private_dir`]'s `open`, `fstat` and `check` steps.
pub(crate) fn open_private_dir_if_present(parent: impl AsFd, name: &str) -> Result<Option<OwnedFd>, (&'static str, std::io::Error)> {
    files::open_private_dir_if_present(&NativeFs, &NativeFs::borrow(parent.as_fd()), name).map_err(worded)
}

/// A [`PrivateDirError`] as the failing step and an I/O error.
fn worded(error: PrivateDirError) -> (&'static str, std::io::Error) {
    match error {
        PrivateDirError::Step { step, errno } => (step, errno.into()),
        PrivateDirError::NotPrivate => ("check", std::io::Error::other(files::NOT_PRIVATE)),
    }
}

pub(crate) fn open_dir(dir: impl AsFd + Copy, name: &str) -> rustix::io::Result<OwnedFd> {
    match rustix::fs::openat(dir, name, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty()) {
        Err(Errno::NOTDIR) => match lstat(dir, name) {
            Ok(Some(stat)) if file_kind(stat.st_mode) == S_IFLNK => Err(Errno::LOOP),
            _ => Err(Errno::NOTDIR),
        },
        other => other,
    }
}

/// The names in a directory (without `.` and `..`), as raw bytes, at most `bound` of them.
/// `Err(None)` means the bound was exceeded.
pub(crate) fn list_names(dir: impl AsFd, bound: usize) -> Result<Vec<Vec<u8>>, Option<std::io::Error>> {
    names_where(dir, bound, |name| name != b"." && name != b"..")
}

/// The names in a directory that start with `prefix` and are UTF-8, at most `bound` of them
/// (`Err(None)` beyond), without copying the others — the claim listings run on every
/// mutation, in collections of thousands of records.
pub(crate) fn names_starting_with(dir: impl AsFd, prefix: &str, bound: usize) -> Result<Vec<String>, Option<std::io::Error>> {
    let names = names_where(dir, bound, |name| name.starts_with(prefix.as_bytes()) && std::str::from_utf8(name).is_ok())?;
    Ok(names.into_iter().filter_map(|name| String::from_utf8(name).ok()).collect())
}

/// The names in a directory that `keep` accepts, at most `bound` of them (`Err(None)` beyond);
/// the others are never copied.
pub(crate) fn names_where(dir: impl AsFd, bound: usize, keep: impl Fn(&[u8]) -> bool) -> Result<Vec<Vec<u8>>, Option<std::io::Error>> {
    let mut reader = dir_reader(dir).map_err(|e| Some(e.into()))?;
    let mut names = Vec::new();
    while let Some(entry) = reader.read() {
        let entry = entry.map_err(|e| Some(e.into()))?;
        let name = entry.file_name().to_bytes();
        if !keep(name) {
            continue;
        }
        if names.len() == bound {
            return Err(None);
        }
        names.push(name.to_vec());
    }
    Ok(names)
}

/// A reader of `dir`'s entries from the start, on a description of its own (so that readers of
/// one directory never share a position). One `openat(".")`: `Dir::read_from` would open
/// another on top of it, and ask for its flags first — three system calls more per listing, and
/// a `run` lists its collections about a hundred times.
fn dir_reader(dir: impl AsFd) -> rustix::io::Result<rustix::fs::Dir> {
    let fd = rustix::fs::openat(dir, ".", OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
    rustix::fs::Dir::new(fd)
}

/// The first `at_most` names in a directory (without `.` and `..`), as raw bytes — for
/// consumers that remove what they read and then read again.
pub(crate) fn some_names(dir: impl AsFd, at_most: usize) -> rustix::io::Result<Vec<Vec<u8>>> {
    let mut reader = dir_reader(dir)?;
    let mut names = Vec::new();
    while names.len() < at_most {
        let Some(entry) = reader.read() else { break };
        let name = entry?.file_name().to_bytes().to_vec();
        if name != b"." && name != b".." {
            names.push(name);
        }
    }
    Ok(names)
}

/// `st_dev` as `stat(2)` (and Node) report it, from statx's major/minor pair.
pub(crate) fn device_of(stat: &rustix::fs::Statx) -> u64 {
    rustix::fs::makedev(stat.stx_dev_major, stat.stx_dev_minor)
}
