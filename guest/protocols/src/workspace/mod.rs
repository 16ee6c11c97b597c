//! The workspace's protocol (spec §6A.4, §3.3 `removePrivateDirectoryTree`), written once over
//! the seam ([`crate::seam`]): directory facts, private directory creation, remove-if-empty and
//! the identity-bound quarantine removal ([`protocol`]), and what a path is ([`paths`]).
//! `proclease`'s `workspace` runs it over rustix and documents the guarantees; the crash-state
//! suite runs it over a simulated disk.

pub mod paths;
pub mod protocol;

use crate::prelude::*;
use proclease_core::effects::{Failure, FailureKind};

use crate::seam::Errno;

pub use paths::PathKind;
pub use protocol::{GrantedRoot, WorkspaceProtocol};

/// The most entries a quarantine scan of a parent directory looks at (§3.3).
pub const MAX_SCAN_ENTRIES: usize = 100_000;
/// The most entries one removal deletes before it gives up (a tree still growing under it).
pub const MAX_REMOVAL_ENTRIES: usize = 10_000_000;

/// A workspace failure; messages name the path and what to do.
// Not `#[non_exhaustive]`: the host maps every variant to a failure kind, and a new one must
// make it decide.
#[derive(Debug, thiserror::Error)]
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
        timeout: Box<crate::waits::LockTimeout>,
    },
    /// An I/O error.
    #[error("{path}: {operation} failed: {source}")]
    Io {
        /// The path.
        path: String,
        /// What was being done.
        operation: &'static str,
        /// The error.
        source: crate::os_error::IoError,
    },
}

impl WorkspaceError {
    /// The error as it crosses the boundary (the `failure` of `wit/proclease.wit`): its kind,
    /// its whole message, its path and, for an I/O error, its operation and errno.
    pub fn failure(&self) -> Failure {
        let message = self.to_string();
        match self {
            WorkspaceError::Refused { path, .. } => Failure { path: Some(path.clone()), ..Failure::new(FailureKind::Refused, message) },
            WorkspaceError::IdentityChanged { path, .. } => Failure { path: Some(path.clone()), ..Failure::new(FailureKind::IdentityChanged, message) },
            WorkspaceError::Io { path, operation, source } => source.failure(path, operation, message),
            WorkspaceError::ParentLocked { path, .. } => {
                Failure { path: Some(path.clone()), operation: Some("lock of the parent".into()), ..Failure::new(FailureKind::Contended, message) }
            }
        }
    }
}

/// An I/O error of `operation` on `path`, for `map_err`.
pub fn io_error<'a>(path: &'a str, operation: &'static str) -> impl FnOnce(Errno) -> WorkspaceError + 'a {
    move |e| WorkspaceError::Io { path: path.into(), operation, source: e.into() }
}

/// The identity-bound removal's refusal at `path`, with the reference's `message`.
pub fn identity_changed(path: &str, message: &str) -> WorkspaceError {
    WorkspaceError::IdentityChanged { path: path.into(), message: message.into() }
}

pub use proclease_core::effects::DirectoryFacts;
