//! The state store's protocol (spec §3.3, §3.5, §3.9), written once over the seam
//! ([`crate::seam`]): compare-and-swap of records through a staging directory, the reference's
//! per-leaf mutation claims ([`mutation_claim`], arbitrated by [`arbitration`]), the collection
//! recovery, and the store's path rules ([`path`]). `proclease`'s `state_store` runs it over
//! rustix and documents the guarantees; the crash-state suite runs it over a simulated disk.

pub mod arbitration;
mod intents_left;
pub mod mutation_claim;
pub mod path;
pub mod protocol;

use proclease_core::effects::{Failure, FailureKind};

use crate::os_error::IoError;
use crate::prelude::*;
use core::time::Duration;

pub use protocol::StoreProtocol;

/// The most entries a collection listing returns (§3.3 snapshot).
pub const MAX_ENTRIES: usize = 10_000;
/// The most names one batch read takes (§3.3 batch).
pub const MAX_BATCH_NAMES: usize = 1_000;
/// The largest record the store writes or reads for a compare-and-swap: 2 MiB (§3.2).
pub const MAX_RECORD_BYTES: u64 = 2 << 20;
/// The largest per-file bound of a batch read: 2 MiB; aggregate: 64 MiB (§3.3).
pub const MAX_BATCH_FILE_BYTES: u32 = 2 << 20;
/// The largest aggregate bound of a batch read.
pub const MAX_BATCH_TOTAL_BYTES: u32 = 64 << 20;

/// A store failure. Messages name the store path and what the user can do.
// Not `#[non_exhaustive]`: the host maps every variant to a failure kind, and a new one must
// make it decide.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Another live writer held the collection's lock longer than the store waits (the
    /// reference's `state file mutation is already active`).
    #[error("{path}: state file mutation is already active (another process, proclease or ghostget, is writing this record); retry in a moment")]
    Contended {
        /// The store path.
        path: String,
    },
    /// The path is not a safe relative path inside the state layout.
    #[error("{path}: refused: {reason}")]
    Refused {
        /// The store path as given.
        path: String,
        /// Why.
        reason: String,
    },
    /// Something on disk is not safe to trust; nothing was changed.
    #[error("{path}: unsafe: {reason}")]
    Unsafe {
        /// The store path.
        path: String,
        /// What is wrong and how to fix it.
        reason: String,
    },
    /// The reference's mutation-claim protocol refused to go on (§3.5: an owner that cannot be
    /// judged, two holders, a malformed claim, …); nothing was changed.
    #[error("{path}: {reason}")]
    Claim {
        /// The store path.
        path: String,
        /// The reference's message, and the cause.
        reason: String,
    },
    /// The store could not be reached or did not answer within its bound (cluster mode's
    /// etcd): the message names the endpoint and whether a write may have been applied.
    #[error("{path}: {operation} failed: {message}")]
    Unreachable {
        /// The store path.
        path: String,
        /// What the store was doing.
        operation: &'static str,
        /// Which endpoint, after how long, and what to do.
        message: String,
    },
    /// An I/O error.
    #[error("{path}: {operation} failed: {source}")]
    Io {
        /// The store path.
        path: String,
        /// What the store was doing.
        operation: &'static str,
        /// The error.
        source: IoError,
    },
}

impl StoreError {
    /// An I/O error of `operation` on `path`.
    pub fn io(path: &str, operation: &'static str, source: impl Into<IoError>) -> Self {
        StoreError::Io { path: path.into(), operation, source: source.into() }
    }

    /// Something at `path` is not safe to trust, and why.
    pub fn unsafe_(path: &str, reason: impl Into<String>) -> Self {
        StoreError::Unsafe { path: path.into(), reason: reason.into() }
    }

    /// The error as it crosses the boundary (the `failure` of `wit/proclease.wit`): its kind,
    /// its whole message, and its path, operation and errno where it has them.
    pub fn failure(&self) -> Failure {
        let message = self.to_string();
        let at = |kind, path: &str| Failure { path: Some(path.into()), ..Failure::new(kind, message.clone()) };
        match self {
            StoreError::Contended { path } => at(FailureKind::Contended, path),
            StoreError::Refused { path, .. } => at(FailureKind::Refused, path),
            StoreError::Unsafe { path, .. } | StoreError::Claim { path, .. } => at(FailureKind::Unsafe, path),
            StoreError::Unreachable { path, operation, .. } => Failure { operation: Some((*operation).into()), ..at(FailureKind::Unreachable, path) },
            StoreError::Io { path, operation, source } => source.failure(path, operation, message),
        }
    }
}

/// How long one write waits for another program's mutation claim on the same record (a live
/// ghostget holds one for a single write): the reference's callers retry a contended write
/// (admission acquire: 8 attempts), so a claim that stays is refused in about a second.
pub const CLAIM_WAIT: Duration = Duration::from_millis(125);

/// What to do about another program's mutation claim that stays.
pub const CLAIM_HINT: &str = "another program (ghostget, or a proclease that predates kernel locks) is writing this record; retry once it is done, and if its claim stays, that program is stuck: end it (a dead holder's claim is removed by the next write)";

/// The kernel lock every lease of a new directory is made under, in `.proclease/locks/`: the
/// native `run`'s check that a directory is free and its lease (`Host::lease_new_directory`),
/// and recovery from its last look at the collection until the directory it removes is out of
/// its path (`docs/deviations.md` 24).
pub const LEASING_LOCK: &str = "directory-lease-creation.lock";

/// The recovery turn, in `.proclease/locks/`: every recoverer (`recover`, of any host) holds it
/// while it recovers, so that each reports exactly what it did (a lease another recovered
/// meanwhile is reported as already recovered). A dry run does not take it.
pub const RECOVERY_LOCK: &str = "directory-lease-recovery.lock";

/// Where the store keeps its own files, inside the state home.
pub const INTERNAL: &str = ".proclease";

/// Splits a record path into its parent directory segments and file name.
pub fn split(path: &str) -> Result<(Vec<&str>, &str), StoreError> {
    let mut segments = path::segments(path).map_err(|reason| StoreError::Refused { path: path.into(), reason })?;
    if segments.len() < 2 {
        return Err(StoreError::Refused { path: path.into(), reason: "a record must be nested inside a state directory".into() });
    }
    let name = segments.pop().unwrap_or_default();
    Ok((segments, name))
}

/// The checks of a batch read's request, before anything is read (§3.3): the directory's
/// segments, or the reference's refusal.
pub fn check_batch<'a>(path: &'a str, names: &[String], max_bytes_per_file: u32, max_total_bytes: u32) -> Result<Vec<&'a str>, StoreError> {
    let refused = |reason: &str| StoreError::Refused { path: path.into(), reason: reason.into() };
    let segments = path::segments(path).map_err(|reason| StoreError::Refused { path: path.into(), reason })?;
    if max_bytes_per_file > MAX_BATCH_FILE_BYTES {
        return Err(refused("private state batch per-file byte bound is invalid"));
    }
    if max_total_bytes > MAX_BATCH_TOTAL_BYTES {
        return Err(refused("private state batch aggregate byte bound is invalid"));
    }
    if names.len() > MAX_BATCH_NAMES {
        return Err(refused("private state batch file count is invalid"));
    }
    if names.iter().any(|n| !path::is_safe_name(n)) {
        return Err(refused("private state batch contains an invalid file name"));
    }
    let mut unique: Vec<&String> = names.iter().collect();
    unique.sort();
    unique.dedup();
    if unique.len() != names.len() {
        return Err(refused("private state batch file names must be unique"));
    }
    Ok(segments)
}

/// The reference's refusal of an expected hash that is no sha256 hex digest (§3.3).
pub fn check_hash(path: &str, expected: &str) -> Result<(), StoreError> {
    if proclease_core::js::is_digest(expected) { Ok(()) } else { Err(StoreError::Refused { path: path.into(), reason: "expected private state content hash is invalid".into() }) }
}

/// The refusal of content larger than [`MAX_RECORD_BYTES`].
pub fn check_size(path: &str, content: &str) -> Result<(), StoreError> {
    if content.len() as u64 > MAX_RECORD_BYTES {
        return Err(StoreError::Refused { path: path.into(), reason: format!("content exceeds {MAX_RECORD_BYTES} bytes") });
    }
    Ok(())
}
