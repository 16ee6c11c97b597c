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
//!
//! The protocol is written once over the system-call seam ([`protocol`], `crate::seam`); this
//! module's [`Workspace`] runs it over rustix, and `tests/tests/crash_states.rs` runs the same code
//! over a simulated disk that crashes or fails at every call.

use std::path::{Path, PathBuf};

use proclease_core::records::DirectoryIdentity;
use rustix::fs::{Mode, OFlags};

use crate::process_identity::ProcessIdentity;
use crate::seam::NativeFs;

mod paths;
mod wit;

// The protocol itself, written once over the seam (issue #41): `proclease-protocols`.
pub use proclease_protocols::workspace::{
    DirectoryFacts, GrantedRoot, MAX_REMOVAL_ENTRIES, MAX_SCAN_ENTRIES, PathKind, WorkspaceError, WorkspaceProtocol, identity_changed, io_error, protocol,
};

/// The granted workspace roots: the workspace's protocol ([`protocol`]) over this machine's
/// file systems.
pub struct Workspace {
    pub(crate) protocol: WorkspaceProtocol<NativeFs, ProcessIdentity>,
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

    /// Grants `roots` (each resolved with realpath and opened `O_NOFOLLOW`). A root whose
    /// resolved path is not UTF-8 is left out, with a warning: lease paths are text (the records
    /// hold them as JSON strings), so no leased directory can be named under it anyway.
    ///
    /// Errors: a root that does not exist or is not a directory.
    pub fn new(roots: &[PathBuf]) -> Result<Workspace, WorkspaceError> {
        let mut granted = Vec::new();
        for root in roots {
            let label = root.display().to_string();
            let path = std::fs::canonicalize(root).map_err(|e| WorkspaceError::Io { path: label.clone(), operation: "realpath of a workspace root", source: e.into() })?;
            let dir = rustix::fs::open(&path, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())
                .map_err(|e| io_error(&label, "open of a workspace root")(e.into()))?;
            let Ok(path) = path.into_os_string().into_string() else {
                tracing::warn!(root = %label, "workspace root left out: its resolved path is not UTF-8, so no leased directory can be named under it");
                continue;
            };
            granted.push(GrantedRoot { path, dir });
        }
        Ok(Workspace { protocol: WorkspaceProtocol::new(NativeFs, ProcessIdentity::new(), granted, crate::state_store::release_leasing_lock) })
    }

    /// The granted roots, resolved.
    pub fn roots(&self) -> impl Iterator<Item = &Path> {
        self.protocol.roots().map(Path::new)
    }

    /// The facts of the directory at `path`; `None` when it (or an ancestor below the root)
    /// does not exist.
    ///
    /// Errors: `path` is not absolute and normalised, or not under a granted root.
    pub fn inspect(&self, path: &str) -> Result<Option<DirectoryFacts>, WorkspaceError> {
        self.protocol.inspect(path)
    }

    /// Creates the directory `path` (mode 0700) and any missing ancestors below its granted root,
    /// walking from the root without following a symbolic link. Returns the directories it
    /// created, outermost first (empty when `path` already existed).
    ///
    /// Errors: outside the granted roots; a component that is a symbolic link or not a directory.
    pub fn create_private_directory(&self, path: &str) -> Result<Vec<String>, WorkspaceError> {
        self.protocol.create_private_directory(path)
    }

    /// Removes the directory `path` if it is empty and, when `expected` is given, still that
    /// directory (device, inode, birth time) — `rmdir` through its granted root, no symbolic
    /// link followed. `Ok(false)` when it is absent, another directory, or not empty. Used to
    /// undo [`Self::create_private_directory`] and by the recovery of creation intents.
    ///
    /// Errors: outside the granted roots; an I/O error other than "not empty".
    pub fn remove_empty_directory(&self, path: &str, expected: Option<&DirectoryIdentity>) -> Result<bool, WorkspaceError> {
        self.protocol.remove_empty_directory(path, expected)
    }

    /// Whether the directory `path` (which must exist) has no entries.
    pub fn is_empty_directory(&self, path: &str) -> Result<bool, WorkspaceError> {
        self.protocol.is_empty_directory(path)
    }

    /// Removes the directory tree at `path` only while it is still `expected`; completes an
    /// interrupted quarantine of `expected` whose remover is provably dead. `Ok(true)` when a
    /// tree was removed, `Ok(false)` when neither the target nor a quarantine of it exists.
    /// See [`WorkspaceProtocol::remove_tree`] for the reference's messages.
    pub fn remove_tree(&self, path: &str, expected: &DirectoryIdentity) -> Result<bool, WorkspaceError> {
        self.protocol.remove_tree(path, expected)
    }
}

/// The granted workspace as the component's effect ([`proclease_core::effects::Workspace`]),
/// shared by several instances; its failures as the WIT `failure` record.
pub struct SharedWorkspace(pub std::sync::Arc<Workspace>);

/// `error` as it crosses the boundary: its kind, its message, its path and, for an I/O error, its
/// operation and errno.
pub fn failure(error: WorkspaceError) -> proclease_core::Failure {
    error.failure()
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

    fn kind(&mut self, path: &str) -> Result<proclease_core::effects::PathKind, proclease_core::effects::Failure> {
        self.0.kind(path).map_err(failure)
    }

    fn is_empty_directory(&mut self, path: &str) -> Result<bool, proclease_core::effects::Failure> {
        self.0.is_empty_directory(path).map_err(failure)
    }
}
