//! Directories under the workspace roots the user granted (`workspace` import; spec §6A.4 and
//! §3.3 `removePrivateDirectoryTree`).
//!
//! Two primitives, both confined to the granted roots (opened once, as `O_NOFOLLOW`
//! descriptors) and both walking paths component by component without following a symbolic
//! link:
//! * [`Workspace::inspect`] reports the physical facts of a directory (statx: device, inode,
//!   birth time, owner, mode; whether the path is its own realpath). The lease rules over those
//!   facts are the component's.
//! * [`Workspace::remove_tree`] removes a directory tree only while it still has the expected
//!   (device, inode, birth time): it renames the target to a quarantine name in its parent,
//!   re-verifies, and deletes descriptor-relative, never following a symbolic link and never
//!   crossing into another filesystem. Renames into quarantine and scans for quarantines hold
//!   a `flock` on the parent, so concurrent recoveries never miss a tree being removed. An
//!   interrupted quarantine of the same identity is completed only when its remover is provably
//!   dead (or is this process, and no thread of it is still deleting it: a removal that failed
//!   with an I/O error can be retried). Quarantine names are the reference's
//!   (`.io-remove-<pid>-<uuid>.quarantine`), so ghostget and proclease complete each other's.
//!
//! Default roots (when the CLI is given no `--workspace-root`): the user's home directory and
//! the system temporary directory.

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use proclease_core::records::DirectoryIdentity;
use rustix::fs::{AtFlags, Mode, OFlags, RenameFlags, StatxFlags};
use rustix::io::Errno;

use crate::fsops::{self, S_IFDIR, S_IFLNK};

mod paths;
mod wit;

pub use paths::PathKind;

/// The most entries a quarantine scan of a parent directory looks at (§3.3).
pub const MAX_SCAN_ENTRIES: usize = 100_000;
/// The most entries one removal deletes before it gives up (a tree still growing under it).
pub const MAX_REMOVAL_ENTRIES: usize = 10_000_000;

/// A workspace failure; messages name the path and what to do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkspaceError {
    /// The path is not under any granted root (or not an absolute, normalised path).
    #[error("{path}: refused: {reason}")]
    Refused {
        /// The path.
        path: String,
        /// Why, and which flag grants access.
        reason: String,
    },
    /// The identity-bound removal refused; the reference's message.
    #[error("{path}: {message}")]
    IdentityChanged {
        /// The path.
        path: String,
        /// The reference's message (e.g. `recursive removal target changed identity`).
        message: String,
    },
    /// Another process held the lock of the directory's parent (a user's `flock` on it, a
    /// stopped `proclease recover`) past the operation's bound: nothing was removed. The
    /// timeout names the holder.
    #[error("{path}: {timeout}")]
    ParentLocked {
        /// The path being removed.
        path: String,
        /// The wait, and who held the lock.
        timeout: Box<crate::lock_wait::LockTimeout>,
    },
    /// An I/O error.
    #[error("{path}: {operation} failed: {source}")]
    Io {
        /// The path.
        path: String,
        /// What was being done.
        operation: &'static str,
        /// The error.
        source: std::io::Error,
    },
}

fn io_error<'a>(path: &'a str, operation: &'static str) -> impl FnOnce(Errno) -> WorkspaceError + 'a {
    move |e| WorkspaceError::Io { path: path.into(), operation, source: e.into() }
}

fn identity_changed(path: &str, message: &str) -> WorkspaceError {
    WorkspaceError::IdentityChanged { path: path.into(), message: message.into() }
}

pub use proclease_core::effects::DirectoryFacts;

struct GrantedRoot {
    path: PathBuf,
    fd: OwnedFd,
}

/// The granted workspace roots.
pub struct Workspace {
    roots: Vec<GrantedRoot>,
}

impl Workspace {
    /// The roots granted when none is given: `$HOME` and the temporary directory.
    pub fn default_roots() -> Vec<PathBuf> {
        let mut roots = Vec::new();
        if let Some(home) = std::env::var_os("HOME").filter(|h| !h.is_empty()) {
            roots.push(PathBuf::from(home));
        }
        roots.push(std::env::temp_dir());
        roots
    }

    /// Grants `roots` (each resolved with realpath and opened `O_NOFOLLOW`).
    ///
    /// Errors: a root that does not exist or is not a directory.
    pub fn new(roots: &[PathBuf]) -> Result<Workspace, WorkspaceError> {
        let mut granted = Vec::new();
        for root in roots {
            let label = root.display().to_string();
            let path = std::fs::canonicalize(root).map_err(|e| WorkspaceError::Io { path: label.clone(), operation: "realpath of a workspace root", source: e })?;
            let fd = rustix::fs::open(&path, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())
                .map_err(io_error(&label, "open of a workspace root"))?;
            granted.push(GrantedRoot { path, fd });
        }
        Ok(Workspace { roots: granted })
    }

    /// The granted roots, resolved.
    pub fn roots(&self) -> impl Iterator<Item = &Path> {
        self.roots.iter().map(|r| r.path.as_path())
    }

    /// The facts of the directory at `path`; `None` when it (or an ancestor below the root)
    /// does not exist.
    ///
    /// Errors: `path` is not absolute and normalised, or not under a granted root.
    pub fn inspect(&self, path: &str) -> Result<Option<DirectoryFacts>, WorkspaceError> {
        let (root, rest) = self.locate(path, true)?;
        let Some((name, parent)) = rest.split_last() else {
            let stat = statx(&root.fd, "", AtFlags::EMPTY_PATH).map_err(io_error(path, "statx"))?;
            return Ok(stat.map(|s| facts(&s, true)));
        };
        let parent_fd = match walk(&root.fd, parent) {
            Walk::Open(fd) => fd,
            Walk::Absent => return Ok(None),
            Walk::NotPhysical => return Ok(Some(not_physical())),
            Walk::Failed(e) => return Err(io_error(path, "open of an ancestor")(e)),
        };
        let stat = statx(&parent_fd, name, AtFlags::SYMLINK_NOFOLLOW).map_err(io_error(path, "statx"))?;
        Ok(stat.map(|s| facts(&s, fsops::file_kind(u32::from(s.stx_mode)) != S_IFLNK)))
    }

    /// Creates the directory `path` (mode 0700) and any missing ancestors below its granted root,
    /// walking from the root without following a symbolic link. Returns the directories it
    /// created, outermost first (empty when `path` already existed).
    ///
    /// Errors: outside the granted roots; a component that is a symbolic link or not a directory.
    pub fn create_private_directory(&self, path: &str) -> Result<Vec<String>, WorkspaceError> {
        let (root, rest) = self.locate(path, false)?;
        let mut current = root.fd.as_fd().try_clone_to_owned().map_err(|e| WorkspaceError::Io { path: path.into(), operation: "dup", source: e })?;
        let mut created = Vec::new();
        let mut walked = root.path.clone();
        for component in rest {
            walked.push(component);
            let here = walked.display().to_string();
            match rustix::fs::mkdirat(&current, component, Mode::from_raw_mode(0o700)) {
                Ok(()) => created.push(here.clone()),
                Err(Errno::EXIST) => {}
                Err(e) => return Err(io_error(&here, "mkdir")(e)),
            }
            current = match fsops::open_dir(&current, component) {
                Ok(fd) => fd,
                Err(Errno::LOOP) => {
                    return Err(WorkspaceError::Refused { path: here, reason: "is a symbolic link; give the real path".into() });
                }
                Err(Errno::NOTDIR) => return Err(WorkspaceError::Refused { path: here, reason: "is not a directory".into() }),
                Err(e) => return Err(io_error(&here, "open")(e)),
            };
            if created.last() == Some(&here) {
                rustix::fs::fchmod(&current, Mode::from_raw_mode(0o700)).map_err(io_error(&here, "chmod"))?;
            }
        }
        Ok(created)
    }

    /// Removes the directory `path` if it is empty and, when `expected` is given, still that
    /// directory (device, inode, birth time) — `rmdir` through its granted root, no symbolic
    /// link followed. `Ok(false)` when it is absent, another directory, or not empty. Used to
    /// undo [`Self::create_private_directory`] and by the recovery of creation intents.
    ///
    /// Errors: outside the granted roots; an I/O error other than "not empty".
    pub fn remove_empty_directory(&self, path: &str, expected: Option<&DirectoryIdentity>) -> Result<bool, WorkspaceError> {
        let (root, rest) = self.locate(path, false)?;
        let Some((name, parent)) = rest.split_last() else { return Ok(false) };
        let Walk::Open(fd) = walk(&root.fd, parent) else { return Ok(false) };
        let Some(stat) = statx(&fd, name, AtFlags::SYMLINK_NOFOLLOW).map_err(io_error(path, "statx"))? else { return Ok(false) };
        if fsops::file_kind(u32::from(stat.stx_mode)) != fsops::S_IFDIR || expected.is_some_and(|e| fsops::directory_identity(&stat) != *e) {
            return Ok(false);
        }
        match rustix::fs::unlinkat(&fd, *name, AtFlags::REMOVEDIR) {
            Ok(()) => Ok(true),
            Err(Errno::NOENT | Errno::NOTEMPTY | Errno::EXIST) => Ok(false),
            Err(e) => Err(io_error(path, "rmdir")(e)),
        }
    }

    /// Whether the directory `path` (which must exist) has no entries.
    pub fn is_empty_directory(&self, path: &str) -> Result<bool, WorkspaceError> {
        let (root, rest) = self.locate(path, true)?;
        let fd = match walk(&root.fd, &rest) {
            Walk::Open(fd) => fd,
            Walk::Absent => return Ok(true),
            Walk::NotPhysical => {
                return Err(WorkspaceError::Refused {
                    path: path.into(),
                    reason: "a path component (a directory on the way, or the directory itself) is a symbolic link or not a directory".into(),
                });
            }
            Walk::Failed(e) => return Err(io_error(path, "open")(e)),
        };
        Ok(fsops::some_names(&fd, 1).map_err(io_error(path, "list"))?.is_empty())
    }

    /// Removes the directory tree at `path` only while it is still `expected`; completes an
    /// interrupted quarantine of `expected` whose remover is provably dead. `Ok(true)` when a
    /// tree was removed, `Ok(false)` when neither the target nor a quarantine of it exists.
    ///
    /// Errors (the reference's messages): `recursive removal target is too broad`,
    /// `recursive removal parent is absent for an identity-bound target`, `directory path no
    /// longer matches its validated identity`, `recursive removal target changed identity`,
    /// `recursive removal quarantine is not a private current-user directory`, `recursive
    /// removal quarantine owner is live or cannot be proven dead`, `recursive removal identity
    /// has multiple quarantine paths`, `recursive removal recovery exceeds its 100000 entry
    /// bound`; refusals outside the granted roots.
    pub fn remove_tree(&self, path: &str, expected: &DirectoryIdentity) -> Result<bool, WorkspaceError> {
        if path.split('/').filter(|s| !s.is_empty()).count() < 2 {
            return Err(identity_changed(path, "private recursive removal target is too broad"));
        }
        let (root, rest) = self.locate(path, false)?;
        let Some((name, parent)) = rest.split_last() else {
            return Err(identity_changed(path, "private recursive removal target is too broad"));
        };
        let parent_fd = match walk(&root.fd, parent) {
            Walk::Open(fd) => fd,
            Walk::Absent => return Err(identity_changed(path, "recursive removal parent is absent for an identity-bound target")),
            Walk::NotPhysical => return Err(identity_changed(path, "directory path no longer matches its validated identity")),
            Walk::Failed(e) => return Err(io_error(path, "open of the parent")(e)),
        };
        // Renames into and out of quarantine, and the scan for quarantines, happen under the
        // parent's lock: a scan racing a rename could otherwise see neither the target nor its
        // quarantine and report "nothing left" while the tree is still being removed.
        let guard = ParentLock::take(&parent_fd, path)?;
        match statx(&parent_fd, name, AtFlags::SYMLINK_NOFOLLOW).map_err(io_error(path, "statx"))? {
            Some(stat) => {
                if !is_private_owned_dir(&stat) || !matches(&stat, expected) {
                    return Err(identity_changed(path, "recursive removal target changed identity"));
                }
                self.quarantine_and_delete(path, &parent_fd, name, expected, guard)?;
                Ok(true)
            }
            None => self.complete_quarantine(path, &parent_fd, expected, guard),
        }
    }

    /// Renames `name` to a fresh quarantine in the parent, re-verifies it, releases the
    /// parent's lock, and deletes it.
    fn quarantine_and_delete(&self, path: &str, parent: &OwnedFd, name: &str, expected: &DirectoryIdentity, guard: ParentLock) -> Result<(), WorkspaceError> {
        let quarantine = format!(".io-remove-{}-{}.quarantine", std::process::id(), uuid::Uuid::new_v4());
        let _removing = Removing::start(&quarantine);
        rustix::fs::renameat_with(parent, name, parent, &quarantine, RenameFlags::NOREPLACE).map_err(io_error(path, "rename to quarantine"))?;
        let moved = statx(parent, &quarantine, AtFlags::SYMLINK_NOFOLLOW).map_err(io_error(path, "statx of the quarantine"))?;
        if !moved.as_ref().is_some_and(|s| is_private_owned_dir(s) && matches(s, expected)) {
            // Swapped between the check and the rename: put it back untouched.
            let _ = rustix::fs::renameat_with(parent, &quarantine, parent, name, RenameFlags::NOREPLACE);
            return Err(identity_changed(path, "recursive removal target changed identity"));
        }
        drop(guard);
        // The tree is out of its path: a recovery that held the lease-creation lock from its
        // last look at the leases until now lets new leases be made while the tree is deleted
        // (docs/deviations.md 24); nothing can be leased inside a quarantine.
        crate::state_store::release_leasing_lock();
        fsops::fsync_dir(parent).map_err(|e| WorkspaceError::Io { path: path.into(), operation: "fsync of the parent", source: e })?;
        let device = moved.map(|s| fsops::device_of(&s)).unwrap_or_default();
        let mut budget = MAX_REMOVAL_ENTRIES;
        delete_tree(parent, &quarantine, device, &mut budget).map_err(|e| match e {
            Errno::XDEV => io_error(path, "removal (a filesystem is mounted inside the tree: unmount it, then recover again)")(e),
            e => io_error(path, "removal")(e),
        })?;
        fsops::fsync_dir(parent).map_err(|e| WorkspaceError::Io { path: path.into(), operation: "fsync of the parent", source: e })
    }

    /// §3.3 (c): the target is absent; finish an interrupted quarantine of exactly `expected`
    /// whose remover is provably dead.
    fn complete_quarantine(&self, path: &str, parent: &OwnedFd, expected: &DirectoryIdentity, guard: ParentLock) -> Result<bool, WorkspaceError> {
        let names = fsops::list_names(parent, MAX_SCAN_ENTRIES).map_err(|e| match e {
            Some(e) => WorkspaceError::Io { path: path.into(), operation: "scan of the parent", source: e },
            None => identity_changed(path, &format!("recursive removal recovery exceeds its {MAX_SCAN_ENTRIES} entry bound")),
        })?;
        let mut found: Option<(String, u32)> = None;
        for raw in names {
            let Ok(name) = String::from_utf8(raw) else { continue };
            let Some(pid) = quarantine_pid(&name) else { continue };
            let Some(stat) = statx(parent, &name, AtFlags::SYMLINK_NOFOLLOW).map_err(io_error(path, "statx"))? else { continue };
            if !matches(&stat, expected) {
                continue;
            }
            if !is_private_owned_dir(&stat) {
                return Err(identity_changed(path, "recursive removal quarantine is not a private current-user directory"));
            }
            if found.is_some() {
                return Err(identity_changed(path, "recursive removal identity has multiple quarantine paths"));
            }
            found = Some((name, pid));
        }
        let Some((name, pid)) = found else { return Ok(false) };
        // A quarantine of this process that no thread of it is deleting was left by a removal
        // that failed (an I/O error): this process may finish it.
        let abandoned_own = pid == std::process::id() && !Removing::is_active(&name);
        if !abandoned_own && !definitely_dead(pid) {
            return Err(identity_changed(path, "recursive removal quarantine owner is live or cannot be proven dead"));
        }
        self.quarantine_and_delete(path, parent, &name, expected, guard)?;
        Ok(true)
    }

    /// The granted root `path` lies in, and the components below it. `allow_root` lets `path`
    /// be the root itself (inspection of a lease's parent).
    fn locate<'a>(&self, path: &'a str, allow_root: bool) -> Result<(&GrantedRoot, Vec<&'a str>), WorkspaceError> {
        if !proclease_core::records::directory_lease::is_bounded_path(path) {
            return Err(WorkspaceError::Refused { path: path.into(), reason: "not an absolute, normalised path (no trailing /, //, . or ..)".into() });
        }
        for root in &self.roots {
            let Ok(rest) = Path::new(path).strip_prefix(&root.path) else { continue };
            let rest: Vec<&'a str> = path[path.len() - rest.as_os_str().len()..].split('/').filter(|s| !s.is_empty()).collect();
            if rest.is_empty() && !allow_root {
                continue;
            }
            return Ok((root, rest));
        }
        let roots: Vec<String> = self.roots.iter().map(|r| r.path.display().to_string()).collect();
        Err(WorkspaceError::Refused {
            path: path.into(),
            reason: format!(
                "outside the granted workspace roots ({}); grant its parent (`--workspace-root DIR` on the command line, `HostBuilder::workspace_root(DIR)` in the library)",
                roots.join(", ")
            ),
        })
    }
}

enum Walk {
    Open(OwnedFd),
    Absent,
    /// A component is a symbolic link or not a directory.
    NotPhysical,
    Failed(Errno),
}

/// Opens `components` below `root`, one at a time, never following a symbolic link.
fn walk(root: &OwnedFd, components: &[&str]) -> Walk {
    let mut current = match root.as_fd().try_clone_to_owned() {
        Ok(fd) => fd,
        Err(e) => return Walk::Failed(Errno::from_io_error(&e).unwrap_or(Errno::IO)),
    };
    for component in components {
        current = match fsops::open_dir(&current, component) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Walk::Absent,
            Err(Errno::LOOP | Errno::NOTDIR) => return Walk::NotPhysical,
            Err(e) => return Walk::Failed(e),
        };
    }
    Walk::Open(current)
}

fn statx(dir: impl AsFd, name: &str, flags: AtFlags) -> Result<Option<rustix::fs::Statx>, Errno> {
    match rustix::fs::statx(dir, name, flags, StatxFlags::BASIC_STATS | StatxFlags::BTIME) {
        Ok(stat) => Ok(Some(stat)),
        Err(Errno::NOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

fn facts(stat: &rustix::fs::Statx, canonical: bool) -> DirectoryFacts {
    let mode = u32::from(stat.stx_mode);
    DirectoryFacts {
        canonical,
        is_directory: fsops::file_kind(mode) == S_IFDIR,
        owned: stat.stx_uid == fsops::euid(),
        mode: mode & 0o7777,
        identity: fsops::directory_identity(stat),
    }
}

fn not_physical() -> DirectoryFacts {
    DirectoryFacts { canonical: false, is_directory: false, owned: false, mode: 0, identity: DirectoryIdentity { device: "0".into(), inode: "0".into(), birthtime_ns: "0".into() } }
}

fn is_private_owned_dir(stat: &rustix::fs::Statx) -> bool {
    let mode = u32::from(stat.stx_mode);
    fsops::file_kind(mode) == S_IFDIR && stat.stx_uid == fsops::euid() && mode & 0o777 == 0o700
}

/// Identity equality: device and inode, and birth time (§6A.4).
fn matches(stat: &rustix::fs::Statx, expected: &DirectoryIdentity) -> bool {
    fsops::directory_identity(stat) == *expected
}

/// `^\.io-remove-([1-9][0-9]{0,9})-<uuid v4>\.quarantine$` → the remover's pid.
fn quarantine_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(".io-remove-")?.strip_suffix(".quarantine")?;
    let (pid, uuid) = rest.split_once('-')?;
    let valid_pid = !pid.is_empty() && pid.len() <= 10 && !pid.starts_with('0') && pid.bytes().all(|c| c.is_ascii_digit());
    (valid_pid && proclease_core::js::is_uuid_v4(uuid)).then(|| pid.parse().ok()).flatten()
}

/// A kernel `flock` on a directory (through a descriptor of its own, so it is released when
/// dropped, or when the process dies). Serialises proclease processes' renames into and out of
/// quarantine with their scans for quarantines in that directory; ghostget does not take it.
/// Anyone may take it (a user's `flock ~/jobs …`), so the wait for it is bounded and voiced
/// like every wait for another process ([`crate::lock_wait`], `docs/deviations.md` 21): it says
/// after 1 s who holds it and gives up at the operation's bound, naming the holder.
struct ParentLock(#[allow(dead_code)] std::fs::File);

/// How long a removal waits for its parent's lock outside a bounded operation.
const PARENT_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

impl ParentLock {
    fn take(parent: &OwnedFd, path: &str) -> Result<ParentLock, WorkspaceError> {
        let fd = rustix::fs::openat(parent, ".", OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty()).map_err(io_error(path, "open of the parent"))?;
        let file = std::fs::File::from(fd);
        let label = format!("the lock of {}'s parent directory", path);
        match crate::lock_wait::lock(&file, &label, crate::lock_wait::operation_bound(PARENT_LOCK_WAIT)) {
            Ok(()) => Ok(ParentLock(file)),
            Err(crate::lock_wait::LockError::TimedOut(timeout)) => Err(WorkspaceError::ParentLocked { path: path.into(), timeout: Box::new(timeout) }),
            Err(crate::lock_wait::LockError::Io(e)) => Err(WorkspaceError::Io { path: path.into(), operation: "lock of the parent", source: e }),
        }
    }
}

/// The quarantines this process is deleting right now (names carry a fresh UUID, so a name
/// alone identifies one). Lets [`Workspace::remove_tree`] tell this process's abandoned
/// quarantines (a removal that failed and returned) from ones another thread is deleting.
static REMOVING: std::sync::Mutex<std::collections::BTreeSet<String>> = std::sync::Mutex::new(std::collections::BTreeSet::new());

/// Membership of [`REMOVING`] for the life of one removal.
struct Removing(String);

impl Removing {
    fn start(name: &str) -> Removing {
        REMOVING.lock().unwrap_or_else(|p| p.into_inner()).insert(name.to_owned());
        Removing(name.to_owned())
    }

    fn is_active(name: &str) -> bool {
        REMOVING.lock().unwrap_or_else(|p| p.into_inner()).contains(name)
    }
}

impl Drop for Removing {
    fn drop(&mut self) {
        REMOVING.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.0);
    }
}

/// The kernel says no such process (`kill(pid, 0)` → `ESRCH`). Anything else is not proof.
fn definitely_dead(pid: u32) -> bool {
    let Some(pid) = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw) else { return true };
    rustix::process::test_kill_process(pid) == Err(Errno::SRCH)
}

/// How deep a deletion descends while holding directory descriptors; deeper subtrees are
/// first moved up into the quarantine root (a rename inside the quarantine, never outside it),
/// so any depth is deleted with a bounded number of open descriptors and no recursion.
const MAX_OPEN_DEPTH: usize = 64;
/// How many names a deletion reads from a directory at a time (it deletes them, then reads
/// again), so a directory of any size is deleted in bounded memory.
const NAMES_PER_READ: usize = 4096;

/// Deletes the tree `name` in `parent` (a quarantine the caller identified), descriptor-relative
/// and iteratively: directories are opened `O_NOFOLLOW` (a directory swapped for a symbolic link
/// is unlinked as a link, its target untouched), names are raw bytes (any name works), a
/// directory on another device (a mount point) is refused, and at most [`MAX_OPEN_DEPTH`]
/// descriptors are open at once. Fails with the cause (EXDEV for a mount point, ENOSPC when the
/// tree exceeds [`MAX_REMOVAL_ENTRIES`]).
fn delete_tree(parent: &OwnedFd, name: &str, device: u64, budget: &mut usize) -> Result<(), Errno> {
    let root = fsops::open_dir(parent, name)?;
    if rustix::fs::fstat(&root)?.st_dev != device {
        return Err(Errno::XDEV);
    }
    let mut flattened = 0u64;
    // Each frame: an open directory whose entries are being removed.
    let mut stack: Vec<OwnedFd> = vec![root];
    while let Some(top) = stack.last() {
        let names = fsops::some_names(top, NAMES_PER_READ)?;
        if names.is_empty() {
            // Empty: remove it from its parent (the frame below), or finish at the root.
            let done = stack.pop();
            drop(done);
            continue;
        }
        for raw in names {
            *budget = budget.checked_sub(1).ok_or(Errno::NOSPC)?;
            let entry = std::ffi::CString::new(raw).map_err(|_| Errno::INVAL)?;
            let top = stack.last().ok_or(Errno::INVAL)?;
            let stat = match rustix::fs::statat(top, entry.as_c_str(), AtFlags::SYMLINK_NOFOLLOW) {
                Ok(stat) => stat,
                Err(Errno::NOENT) => continue,
                Err(e) => return Err(e),
            };
            if fsops::file_kind(stat.st_mode) == S_IFDIR && stat.st_dev != device {
                // A mount point (stat sees the mounted root): never touch another filesystem.
                return Err(Errno::XDEV);
            }
            if fsops::file_kind(stat.st_mode) != S_IFDIR {
                match rustix::fs::unlinkat(top, entry.as_c_str(), AtFlags::empty()) {
                    Ok(()) | Err(Errno::NOENT) => continue,
                    Err(Errno::ISDIR) => {} // swapped for a directory: handled below
                    Err(e) => return Err(e),
                }
            }
            // A directory: remove it if empty, else descend (or flatten when too deep).
            match rustix::fs::unlinkat(top, entry.as_c_str(), AtFlags::REMOVEDIR) {
                Ok(()) | Err(Errno::NOENT) => continue,
                Err(Errno::NOTEMPTY | Errno::EXIST) => {}
                Err(Errno::NOTDIR) => {
                    rustix::fs::unlinkat(top, entry.as_c_str(), AtFlags::empty())?;
                    continue;
                }
                Err(e) => return Err(e),
            }
            if stack.len() >= MAX_OPEN_DEPTH {
                flattened += 1;
                let moved = std::ffi::CString::new(format!(".proclease-flat-{flattened}-{}", uuid::Uuid::new_v4())).map_err(|_| Errno::INVAL)?;
                rustix::fs::renameat_with(top, entry.as_c_str(), &stack[0], moved.as_c_str(), RenameFlags::NOREPLACE)?;
                continue;
            }
            let child = match rustix::fs::openat(top, entry.as_c_str(), OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty()) {
                Ok(child) => child,
                // Swapped for a symbolic link or a file since the lstat: unlink that instead.
                Err(Errno::LOOP | Errno::NOTDIR) => {
                    rustix::fs::unlinkat(top, entry.as_c_str(), AtFlags::empty())?;
                    continue;
                }
                Err(Errno::NOENT) => continue,
                Err(e) => return Err(e),
            };
            if rustix::fs::fstat(&child)?.st_dev != device {
                return Err(Errno::XDEV);
            }
            stack.push(child);
            break;
        }
    }
    // Every directory below is gone; the frames were only descriptors. Remove the emptied
    // directories bottom-up by walking again (each is now empty or holds only emptied ones).
    remove_emptied(parent, name, budget)
}

/// Removes the (now file-free) directory tree `name` in `parent`: `rmdir` bottom-up, iteratively
/// with the same bounds as [`delete_tree`].
fn remove_emptied(parent: &OwnedFd, name: &str, budget: &mut usize) -> Result<(), Errno> {
    loop {
        match rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR) {
            Ok(()) | Err(Errno::NOENT) => return Ok(()),
            Err(Errno::NOTEMPTY | Errno::EXIST) => {}
            Err(e) => return Err(e),
        }
        // Descend to a leaf directory and remove it; repeat from the top.
        let mut stack: Vec<OwnedFd> = vec![fsops::open_dir(parent, name)?];
        loop {
            let top = stack.last().ok_or(Errno::INVAL)?;
            let names = fsops::some_names(top, 1)?;
            let Some(raw) = names.into_iter().next() else { break };
            *budget = budget.checked_sub(1).ok_or(Errno::NOSPC)?;
            let entry = std::ffi::CString::new(raw).map_err(|_| Errno::INVAL)?;
            match rustix::fs::unlinkat(top, entry.as_c_str(), AtFlags::REMOVEDIR) {
                Ok(()) | Err(Errno::NOENT) => continue,
                Err(Errno::NOTDIR) => {
                    rustix::fs::unlinkat(top, entry.as_c_str(), AtFlags::empty())?;
                    continue;
                }
                Err(Errno::NOTEMPTY | Errno::EXIST) if stack.len() < MAX_OPEN_DEPTH => {
                    let child = rustix::fs::openat(top, entry.as_c_str(), OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())?;
                    stack.push(child);
                }
                Err(Errno::NOTEMPTY | Errno::EXIST) => {
                    let moved = std::ffi::CString::new(format!(".proclease-flat-{}", uuid::Uuid::new_v4())).map_err(|_| Errno::INVAL)?;
                    rustix::fs::renameat_with(top, entry.as_c_str(), &stack[0], moved.as_c_str(), RenameFlags::NOREPLACE)?;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// The granted workspace as the component's effect ([`proclease_core::effects::Workspace`]),
/// shared by several instances; its failures as the WIT `failure` record.
pub struct SharedWorkspace(pub std::sync::Arc<Workspace>);

fn failure(error: WorkspaceError) -> proclease_core::Failure {
    failure_of(&error)
}

/// [`failure`] of a borrowed error.
pub(crate) fn failure_of(error: &WorkspaceError) -> proclease_core::Failure {
    use proclease_core::{Failure, FailureKind};
    let message = error.to_string();
    match error {
        WorkspaceError::Refused { path, .. } => Failure { path: Some(path.clone()), ..Failure::new(FailureKind::Refused, message) },
        WorkspaceError::IdentityChanged { path, .. } => Failure { path: Some(path.clone()), ..Failure::new(FailureKind::IdentityChanged, message) },
        WorkspaceError::Io { path, operation, source } => crate::error::io_failure(path, operation, source, message),
        WorkspaceError::ParentLocked { path, .. } => {
            Failure { path: Some(path.clone()), operation: Some("lock of the parent".into()), ..Failure::new(FailureKind::Contended, message) }
        }
    }
}

impl proclease_core::effects::Workspace for SharedWorkspace {
    fn inspect(&mut self, path: &str) -> Result<Option<DirectoryFacts>, proclease_core::effects::Failure> {
        self.0.inspect(path).map_err(failure)
    }

    fn remove_tree(&mut self, path: &str, expected: &DirectoryIdentity) -> Result<bool, proclease_core::effects::Failure> {
        self.0.remove_tree(path, expected).map_err(failure)
    }

    fn create_private_directory(&mut self, path: &str) -> Result<Vec<String>, proclease_core::effects::Failure> {
        self.0.create_private_directory(path).map_err(failure)
    }

    fn remove_empty_directory(&mut self, path: &str, expected: Option<&DirectoryIdentity>) -> Result<bool, proclease_core::effects::Failure> {
        self.0.remove_empty_directory(path, expected).map_err(failure)
    }
}
