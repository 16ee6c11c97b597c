//! The workspace's protocol, written once over the seam ([`Fs`], [`Kernel`]): directory facts,
//! private directory creation, and the identity-bound removal of a tree through a quarantine
//! (spec §3.3 `removePrivateDirectoryTree`, §6A.4). The guarantees are those of [`super`]'s
//! module docs.
//!
//! The native workspace (`proclease`'s `Workspace`) runs it over rustix; `tests/tests/crash_states.rs`
//! runs the same code over a simulated disk that crashes or fails at every call.

use crate::prelude::*;
use proclease_core::records::DirectoryIdentity;

use super::{DirectoryFacts, MAX_REMOVAL_ENTRIES, MAX_SCAN_ENTRIES, WorkspaceError, identity_changed, io_error};
use crate::seam::{Errno, FileStat, Fs, Kernel, S_IFDIR, S_IFLNK};

/// A granted root: its resolved path and an open handle on it.
pub struct GrantedRoot<D> {
    /// The root's path, resolved (realpath): absolute, normalised, UTF-8.
    pub path: String,
    /// The root, opened without following a symbolic link.
    pub dir: D,
}

/// The workspace's protocol over the granted roots, on the file system `F` and the kernel `K`.
pub struct WorkspaceProtocol<F: Fs, K: Kernel> {
    fs: F,
    kernel: K,
    roots: Vec<GrantedRoot<F::Dir>>,
    /// Called once a tree being removed is out of its path (renamed into its quarantine): the
    /// native host releases the lease-creation lock a recovery holds (`docs/deviations.md` 24).
    out_of_its_path: fn(),
}

impl<F: Fs, K: Kernel> WorkspaceProtocol<F, K> {
    /// The file system the workspace is on.
    pub fn fs(&self) -> &F {
        &self.fs
    }

    /// The protocol over `roots` (resolved and opened by the caller); `out_of_its_path` runs
    /// when a tree being removed has left its path.
    pub fn new(fs: F, kernel: K, roots: Vec<GrantedRoot<F::Dir>>, out_of_its_path: fn()) -> Self {
        WorkspaceProtocol { fs, kernel, roots, out_of_its_path }
    }

    /// The granted roots, resolved.
    pub fn roots(&self) -> impl Iterator<Item = &str> {
        self.roots.iter().map(|r| r.path.as_str())
    }

    /// The facts of the directory at `path`; `None` when it (or an ancestor below the root)
    /// does not exist.
    ///
    /// Errors: `path` is not absolute and normalised, or not under a granted root.
    pub fn inspect(&self, path: &str) -> Result<Option<DirectoryFacts>, WorkspaceError> {
        let (root, rest) = self.locate(path, true)?;
        let Some((name, parent)) = rest.split_last() else {
            let stat = self.fs.stat_dir(&root.dir).map_err(io_error(path, "statx"))?;
            return Ok(Some(facts(&stat, true, self.fs.euid())));
        };
        let parent_fd = match walk(&self.fs, &root.dir, parent) {
            Walk::Open(fd) => fd,
            Walk::Absent => return Ok(None),
            Walk::NotPhysical => return Ok(Some(not_physical())),
            Walk::Failed(e) => return Err(io_error(path, "open of an ancestor")(e)),
        };
        let stat = self.fs.lstat(&parent_fd, *name).map_err(io_error(path, "statx"))?;
        Ok(stat.map(|s| facts(&s, s.kind() != S_IFLNK, self.fs.euid())))
    }

    /// Creates the directory `path` (mode 0700) and any missing ancestors below its granted root,
    /// walking from the root without following a symbolic link. Returns the directories it
    /// created, outermost first (empty when `path` already existed).
    ///
    /// Errors: outside the granted roots; a component that is a symbolic link or not a directory.
    pub fn create_private_directory(&self, path: &str) -> Result<Vec<String>, WorkspaceError> {
        let (root, rest) = self.locate(path, false)?;
        let mut current = self.fs.duplicate(&root.dir).map_err(io_error(path, "dup"))?;
        let mut created = Vec::new();
        let mut walked = root.path.clone();
        for component in rest {
            if !walked.ends_with('/') {
                walked.push('/');
            }
            walked.push_str(component);
            let here = walked.clone();
            current = match self.fs.make_dir(&current, component) {
                Ok(made) => {
                    created.push(here.clone());
                    made
                }
                Err(Errno::EXIST) => match self.fs.open_dir(&current, component) {
                    Ok(fd) => fd,
                    Err(Errno::LOOP) => {
                        return Err(WorkspaceError::Refused { path: here, reason: "is a symbolic link; give the real path".into() });
                    }
                    Err(Errno::NOTDIR) => return Err(WorkspaceError::Refused { path: here, reason: "is not a directory".into() }),
                    Err(e) => return Err(io_error(&here, "open")(e)),
                },
                Err(e) => return Err(io_error(&here, "mkdir")(e)),
            };
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
        let Walk::Open(fd) = walk(&self.fs, &root.dir, parent) else { return Ok(false) };
        let Some(stat) = self.fs.lstat(&fd, *name).map_err(io_error(path, "statx"))? else { return Ok(false) };
        if stat.kind() != S_IFDIR || expected.is_some_and(|e| stat.directory_identity() != *e) {
            return Ok(false);
        }
        match self.fs.remove_dir(&fd, *name) {
            Ok(()) => Ok(true),
            Err(Errno::NOENT | Errno::NOTEMPTY | Errno::EXIST) => Ok(false),
            Err(e) => Err(io_error(path, "rmdir")(e)),
        }
    }

    /// Whether the directory `path` (which must exist) has no entries.
    pub fn is_empty_directory(&self, path: &str) -> Result<bool, WorkspaceError> {
        let (root, rest) = self.locate(path, true)?;
        let fd = match walk(&self.fs, &root.dir, &rest) {
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
        Ok(self.fs.first_names(&fd, 1).map_err(io_error(path, "list"))?.is_empty())
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
        let parent_fd = match walk(&self.fs, &root.dir, parent) {
            Walk::Open(fd) => fd,
            Walk::Absent => return Err(identity_changed(path, "recursive removal parent is absent for an identity-bound target")),
            Walk::NotPhysical => return Err(identity_changed(path, "directory path no longer matches its validated identity")),
            Walk::Failed(e) => return Err(io_error(path, "open of the parent")(e)),
        };
        // Renames into and out of quarantine, and the scan for quarantines, happen under the
        // parent's lock: a scan racing a rename could otherwise see neither the target nor its
        // quarantine and report "nothing left" while the tree is still being removed.
        let guard = self.lock_parent(&parent_fd, path)?;
        match self.fs.lstat(&parent_fd, *name).map_err(io_error(path, "statx"))? {
            Some(stat) => {
                if !self.is_private_owned_dir(&stat) || !matches(&stat, expected) {
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
    fn quarantine_and_delete(&self, path: &str, parent: &F::Dir, name: &str, expected: &DirectoryIdentity, guard: F::Lock) -> Result<(), WorkspaceError> {
        let quarantine = format!(".io-remove-{}-{}.quarantine", self.kernel.pid(), self.kernel.new_uuid());
        let _removing = Removing::start(&quarantine);
        self.fs.rename(parent, name, parent, &quarantine, false).map_err(io_error(path, "rename to quarantine"))?;
        let moved = self.fs.lstat(parent, &quarantine).map_err(io_error(path, "statx of the quarantine"))?;
        if !moved.as_ref().is_some_and(|s| self.is_private_owned_dir(s) && matches(s, expected)) {
            // Swapped between the check and the rename: put it back untouched.
            let _ = self.fs.rename(parent, &quarantine, parent, name, false);
            return Err(identity_changed(path, "recursive removal target changed identity"));
        }
        drop(guard);
        // The tree is out of its path: a recovery that held the lease-creation lock from its
        // last look at the leases until now lets new leases be made while the tree is deleted
        // (docs/deviations.md 24); nothing can be leased inside a quarantine.
        (self.out_of_its_path)();
        self.fs.sync_dir(parent).map_err(io_error(path, "fsync of the parent"))?;
        let device = moved.map(|s| s.dev).unwrap_or_default();
        let mut budget = MAX_REMOVAL_ENTRIES;
        delete_tree(&self.fs, &self.kernel, parent, &quarantine, device, &mut budget).map_err(|e| match e {
            Errno::XDEV => io_error(path, "removal (a filesystem is mounted inside the tree: unmount it, then recover again)")(e),
            e => io_error(path, "removal")(e),
        })?;
        self.fs.sync_dir(parent).map_err(io_error(path, "fsync of the parent"))
    }

    /// §3.3 (c): the target is absent; finish an interrupted quarantine of exactly `expected`
    /// whose remover is provably dead.
    fn complete_quarantine(&self, path: &str, parent: &F::Dir, expected: &DirectoryIdentity, guard: F::Lock) -> Result<bool, WorkspaceError> {
        let names = self.fs.read_names(parent, MAX_SCAN_ENTRIES, b"").map_err(|e| match e {
            Some(e) => io_error(path, "scan of the parent")(e),
            None => identity_changed(path, &format!("recursive removal recovery exceeds its {MAX_SCAN_ENTRIES} entry bound")),
        })?;
        let mut found: Option<(String, u32)> = None;
        for raw in names {
            let Ok(name) = String::from_utf8(raw) else { continue };
            let Some(pid) = quarantine_pid(&name) else { continue };
            let Some(stat) = self.fs.lstat(parent, &name).map_err(io_error(path, "statx"))? else { continue };
            if !matches(&stat, expected) {
                continue;
            }
            if !self.is_private_owned_dir(&stat) {
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
        let abandoned_own = pid == self.kernel.pid() && !Removing::is_active(&name);
        if !abandoned_own && !self.definitely_dead(pid) {
            return Err(identity_changed(path, "recursive removal quarantine owner is live or cannot be proven dead"));
        }
        self.quarantine_and_delete(path, parent, &name, expected, guard)?;
        Ok(true)
    }

    /// The granted root `path` lies in, and the components below it. `allow_root` lets `path`
    /// be the root itself (inspection of a lease's parent).
    pub fn locate<'a>(&self, path: &'a str, allow_root: bool) -> Result<(&GrantedRoot<F::Dir>, Vec<&'a str>), WorkspaceError> {
        if !proclease_core::records::directory_lease::is_bounded_path(path) {
            return Err(WorkspaceError::Refused { path: path.into(), reason: "not an absolute, normalised path (no trailing /, //, . or ..)".into() });
        }
        for root in &self.roots {
            let Some(rest) = below(path, &root.path) else { continue };
            let rest: Vec<&'a str> = rest.split('/').filter(|s| !s.is_empty()).collect();
            if rest.is_empty() && !allow_root {
                continue;
            }
            return Ok((root, rest));
        }
        let roots: Vec<&str> = self.roots.iter().map(|r| r.path.as_str()).collect();
        Err(WorkspaceError::Refused {
            path: path.into(),
            reason: format!(
                "outside the granted workspace roots ({}); grant its parent (`--workspace-root DIR` on the command line, `HostBuilder::workspace_root(DIR)` in the library)",
                roots.join(", ")
            ),
        })
    }

    /// Takes the kernel lock of a removal's parent directory. Serialises proclease processes'
    /// renames into and out of quarantine with their scans for quarantines in that directory;
    /// ghostget does not take it. Anyone may take it (a user's `flock ~/jobs …`), so the wait
    /// for it is bounded and voiced like every wait for another process (the host's `lock_wait`,
    /// `docs/deviations.md` 21): it says after 1 s who holds it and gives up at the operation's
    /// bound, naming the holder.
    fn lock_parent(&self, parent: &F::Dir, path: &str) -> Result<F::Lock, WorkspaceError> {
        let label = format!("the lock of {path}'s parent directory");
        self.fs.lock_directory(parent, &label).map_err(|e| match e {
            crate::waits::LockError::TimedOut(timeout) => WorkspaceError::ParentLocked { path: path.into(), timeout: Box::new(timeout) },
            crate::waits::LockError::Io(e) => WorkspaceError::Io { path: path.into(), operation: "lock of the parent", source: e },
        })
    }

    /// A directory of this user with mode 0700.
    fn is_private_owned_dir(&self, stat: &FileStat) -> bool {
        stat.kind() == S_IFDIR && stat.uid == self.fs.euid() && stat.mode & 0o777 == 0o700
    }

    /// The kernel says no such process (`kill(pid, 0)` → `ESRCH`); a pid `kill` cannot address
    /// names no process. Anything else is not proof.
    fn definitely_dead(&self, pid: u32) -> bool {
        i32::try_from(pid).is_err() || self.kernel.pid_gone(u64::from(pid))
    }
}

/// Where a walk from a granted root ([`walk`]) ended.
pub enum Walk<D> {
    /// At the directory, open.
    Open(D),
    /// A component does not exist.
    Absent,
    /// A component is a symbolic link or not a directory.
    NotPhysical,
    /// A system call failed.
    Failed(Errno),
}

/// Opens `components` below `root`, one at a time, never following a symbolic link.
pub fn walk<F: Fs>(fs: &F, root: &F::Dir, components: &[&str]) -> Walk<F::Dir> {
    let mut current = match fs.duplicate(root) {
        Ok(fd) => fd,
        Err(e) => return Walk::Failed(e),
    };
    for component in components {
        current = match fs.open_dir(&current, *component) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Walk::Absent,
            Err(Errno::LOOP | Errno::NOTDIR) => return Walk::NotPhysical,
            Err(e) => return Walk::Failed(e),
        };
    }
    Walk::Open(current)
}

fn facts(stat: &FileStat, canonical: bool, euid: u32) -> DirectoryFacts {
    DirectoryFacts { canonical, is_directory: stat.kind() == S_IFDIR, owned: stat.uid == euid, mode: stat.mode & 0o7777, identity: stat.directory_identity() }
}

fn not_physical() -> DirectoryFacts {
    DirectoryFacts { canonical: false, is_directory: false, owned: false, mode: 0, identity: DirectoryIdentity { device: "0".into(), inode: "0".into(), birthtime_ns: "0".into() } }
}

/// Identity equality: device and inode, and birth time (§6A.4).
fn matches(stat: &FileStat, expected: &DirectoryIdentity) -> bool {
    stat.directory_identity() == *expected
}

/// `^\.io-remove-([1-9][0-9]{0,9})-<uuid v4>\.quarantine$` → the remover's pid.
fn quarantine_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(".io-remove-")?.strip_suffix(".quarantine")?;
    let (pid, uuid) = rest.split_once('-')?;
    let valid_pid = !pid.is_empty() && pid.len() <= 10 && !pid.starts_with('0') && pid.bytes().all(|c| c.is_ascii_digit());
    (valid_pid && proclease_core::js::is_uuid_v4(uuid)).then(|| pid.parse().ok()).flatten()
}

/// The part of the absolute, normalised `path` below `root` (component-wise, as
/// `Path::strip_prefix`: `/a/bc` is not below `/a/b`): `""` for the root itself.
fn below<'a>(path: &'a str, root: &str) -> Option<&'a str> {
    let root = root.trim_end_matches('/');
    let rest = path.strip_prefix(root)?;
    if rest.is_empty() { Some(rest) } else { rest.strip_prefix('/') }
}

/// The quarantines this process is deleting right now (names carry a fresh UUID, so a name
/// alone identifies one). Lets [`Workspace::remove_tree`] tell this process's abandoned
/// quarantines (a removal that failed and returned) from ones another thread is deleting.
/// A spin lock (no `std` here): each holder only inserts, looks up or removes one name.
static REMOVING: spin::Mutex<alloc::collections::BTreeSet<String>> = spin::Mutex::new(alloc::collections::BTreeSet::new());

/// Membership of [`REMOVING`] for the life of one removal.
struct Removing(String);

impl Removing {
    fn start(name: &str) -> Removing {
        REMOVING.lock().insert(name.to_owned());
        Removing(name.to_owned())
    }

    fn is_active(name: &str) -> bool {
        REMOVING.lock().contains(name)
    }
}

impl Drop for Removing {
    fn drop(&mut self) {
        REMOVING.lock().remove(&self.0);
    }
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
fn delete_tree<F: Fs, K: Kernel>(fs: &F, kernel: &K, parent: &F::Dir, name: &str, device: u64, budget: &mut usize) -> Result<(), Errno> {
    let root = fs.open_dir(parent, name)?;
    if fs.stat_dir(&root)?.dev != device {
        return Err(Errno::XDEV);
    }
    let mut flattened = 0u64;
    // Each frame: an open directory whose entries are being removed.
    let mut stack: Vec<F::Dir> = vec![root];
    while let Some(top) = stack.last() {
        let names = fs.first_names(top, NAMES_PER_READ)?;
        if names.is_empty() {
            // Empty: remove it from its parent (the frame below), or finish at the root.
            let done = stack.pop();
            drop(done);
            continue;
        }
        for entry in names {
            *budget = budget.checked_sub(1).ok_or(Errno::NOSPC)?;
            let top = stack.last().ok_or(Errno::INVAL)?;
            let stat = match fs.lstat(top, &entry)? {
                Some(stat) => stat,
                None => continue,
            };
            if stat.kind() == S_IFDIR && stat.dev != device {
                // A mount point (stat sees the mounted root): never touch another filesystem.
                return Err(Errno::XDEV);
            }
            if stat.kind() != S_IFDIR {
                match fs.unlink(top, &entry) {
                    Ok(()) | Err(Errno::NOENT) => continue,
                    Err(Errno::ISDIR) => {} // swapped for a directory: handled below
                    Err(e) => return Err(e),
                }
            }
            // A directory: remove it if empty, else descend (or flatten when too deep).
            match fs.remove_dir(top, &entry) {
                Ok(()) | Err(Errno::NOENT) => continue,
                Err(Errno::NOTEMPTY | Errno::EXIST) => {}
                Err(Errno::NOTDIR) => {
                    fs.unlink(top, &entry)?;
                    continue;
                }
                Err(e) => return Err(e),
            }
            if stack.len() >= MAX_OPEN_DEPTH {
                flattened += 1;
                let moved = format!(".proclease-flat-{flattened}-{}", kernel.new_uuid());
                fs.rename(top, &entry, &stack[0], &moved, false)?;
                continue;
            }
            let child = match fs.open_dir(top, &entry) {
                Ok(child) => child,
                // Swapped for a symbolic link or a file since the lstat: unlink that instead.
                Err(Errno::LOOP | Errno::NOTDIR) => {
                    fs.unlink(top, &entry)?;
                    continue;
                }
                Err(Errno::NOENT) => continue,
                Err(e) => return Err(e),
            };
            if fs.stat_dir(&child)?.dev != device {
                return Err(Errno::XDEV);
            }
            stack.push(child);
            break;
        }
    }
    // Every directory below is gone; the frames were only descriptors. Remove the emptied
    // directories bottom-up by walking again (each is now empty or holds only emptied ones).
    remove_emptied(fs, kernel, parent, name, budget)
}

/// Removes the (now file-free) directory tree `name` in `parent`: `rmdir` bottom-up, iteratively
/// with the same bounds as [`delete_tree`].
fn remove_emptied<F: Fs, K: Kernel>(fs: &F, kernel: &K, parent: &F::Dir, name: &str, budget: &mut usize) -> Result<(), Errno> {
    loop {
        match fs.remove_dir(parent, name) {
            Ok(()) | Err(Errno::NOENT) => return Ok(()),
            Err(Errno::NOTEMPTY | Errno::EXIST) => {}
            Err(e) => return Err(e),
        }
        // Descend to a leaf directory and remove it; repeat from the top.
        let mut stack: Vec<F::Dir> = vec![fs.open_dir(parent, name)?];
        loop {
            let top = stack.last().ok_or(Errno::INVAL)?;
            let names = fs.first_names(top, 1)?;
            let Some(entry) = names.into_iter().next() else { break };
            *budget = budget.checked_sub(1).ok_or(Errno::NOSPC)?;
            match fs.remove_dir(top, &entry) {
                Ok(()) | Err(Errno::NOENT) => continue,
                Err(Errno::NOTDIR) => {
                    fs.unlink(top, &entry)?;
                    continue;
                }
                Err(Errno::NOTEMPTY | Errno::EXIST) if stack.len() < MAX_OPEN_DEPTH => {
                    let child = fs.open_dir(top, &entry)?;
                    stack.push(child);
                }
                Err(Errno::NOTEMPTY | Errno::EXIST) => {
                    let moved = format!(".proclease-flat-{}", kernel.new_uuid());
                    fs.rename(top, &entry, &stack[0], &moved, false)?;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    /// Component-wise, as `Path::strip_prefix` (the std call this replaced): a root is no prefix
    /// of a sibling that merely starts with its name.
    #[test]
    fn below_matches_whole_components() {
        let cases =
            [("/a/b", "/a/b", Some("")), ("/a/b/c/d", "/a/b", Some("c/d")), ("/a/bc", "/a/b", None), ("/a", "/a/b", None), ("/a/b", "/", Some("a/b")), ("/", "/", Some(""))];
        for (path, root, expected) in cases {
            assert_eq!(super::below(path, root), expected, "{path} below {root}");
            let std = std::path::Path::new(path).strip_prefix(root).ok().map(|p| p.to_str().unwrap_or_default());
            assert_eq!(expected, std, "{path} below {root}: std says otherwise");
        }
    }
}
