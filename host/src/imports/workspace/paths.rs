//! The native [`Workspace`](super::Workspace)'s path facts: the protocol's
//! (`proclease_protocols::workspace::paths`) over this machine's file systems.

use std::path::Path;

use super::{PathKind, WorkspaceError};

impl super::Workspace {
    /// What is at `path`, never following a symbolic link ([`WorkspaceProtocol::kind`](super::WorkspaceProtocol::kind)).
    ///
    /// Errors: `path` is not absolute and normalised, or not under a granted root; an I/O error.
    pub fn kind(&self, path: &str) -> Result<PathKind, WorkspaceError> {
        self.protocol.kind(path)
    }

    /// Renames `from` to `to` in `parent` without replacing, durably
    /// ([`WorkspaceProtocol::rename_new`](super::WorkspaceProtocol::rename_new)). `Ok(false)` when `to` exists.
    pub fn rename_new(&self, parent: &str, from: &str, to: &str) -> Result<bool, WorkspaceError> {
        self.protocol.rename_new(parent, from, to)
    }

    /// Which condition of §6A.4 `dir` or its parent misses ([`WorkspaceProtocol::why_not_physical`](super::WorkspaceProtocol::why_not_physical)).
    /// A path that is not UTF-8 cannot be under a granted root: it gets the general condition.
    pub fn why_not_physical(&self, dir: &Path) -> String {
        self.protocol.why_not_physical(&dir.to_string_lossy())
    }
}
