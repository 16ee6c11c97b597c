//! The effects the lease operations need, as small traits mirroring the WIT imports
//! (`state-store`, `process-identity`, `entropy`, `clock`).
//!
//! The component implements them over its imports; the native host and the tests implement
//! them directly (real files, in-memory fakes). The operations in [`crate::admission`] and the
//! other lease modules are written only against these traits, so they run — and are tested —
//! the same way everywhere.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use crate::liveness::OwnerFacts;
use crate::records::Owner;

pub use crate::error::{Failure, FailureKind};

/// A store or workspace failure is a storage error of the lease logic.
impl From<Failure> for crate::Error {
    fn from(failure: Failure) -> Self {
        crate::Error::Storage(failure)
    }
}

/// Device and inode of a directory, decimal.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CollectionIdentity {
    /// `st_dev`.
    pub device: String,
    /// `st_ino`.
    pub inode: String,
}

/// The kind of a directory entry (symbolic links are never followed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A directory.
    Directory,
    /// A symbolic link.
    SymbolicLink,
    /// Anything else.
    Other,
}

/// One entry of a collection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollectionEntry {
    /// The name.
    pub name: String,
    /// The kind.
    pub kind: EntryKind,
    /// Sub-directories only.
    pub identity: Option<CollectionIdentity>,
}

/// A collection directory and its entries, sorted by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollectionSnapshot {
    /// The directory's identity.
    pub identity: CollectionIdentity,
    /// Its entries.
    pub entries: Vec<CollectionEntry>,
}

/// Why a file of a batch read is not present (§3.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchInvalid {
    /// Symbolic link, not regular, not owned, or group/other bits.
    UnsafeFile,
    /// Could not be opened or read.
    Unreadable,
    /// Over the per-file bound.
    FileByteBound,
    /// Over the aggregate bound.
    AggregateByteBound,
    /// Changed while read.
    ChangedDuringRead,
    /// Not UTF-8.
    InvalidUtf8,
}

/// One file of a batch read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchStatus {
    /// Its text.
    Present(String),
    /// No such file.
    Absent,
    /// Not readable as a record.
    Invalid(BatchInvalid),
}

/// The private state store (WIT `state-store`): paths relative to the state home.
pub trait Store {
    /// The file's text, `None` when it or a parent is absent; bounded by `max_bytes`.
    fn read_if_present(&mut self, path: &str, max_bytes: u32) -> Result<Option<String>, Failure>;
    /// Creates the file unless it exists; `false` when it existed. Never overwrites.
    fn create_if_absent(&mut self, path: &str, content: &str) -> Result<bool, Failure>;
    /// Replaces the file only if its bytes hash to `expected_sha256` at the swap.
    fn replace_if_unchanged(&mut self, path: &str, expected_sha256: &str, content: &str) -> Result<bool, Failure>;
    /// [`Store::replace_if_unchanged`] without the collection's fsync (WIT
    /// `replace-if-unchanged-lazily`): as atomic, but a power loss or an OS crash may undo the
    /// swap and leave an earlier complete version. Only for changes that such a crash makes
    /// harmless, since every owner is then of an earlier boot (`docs/durability.md`).
    ///
    /// The default syncs anyway: a store that does not distinguish stays correct, only slower.
    fn replace_if_unchanged_lazily(&mut self, path: &str, expected_sha256: &str, content: &str) -> Result<bool, Failure> {
        self.replace_if_unchanged(path, expected_sha256, content)
    }
    /// Removes the file only if its bytes hash to `expected_sha256` at the removal.
    fn remove_if_unchanged(&mut self, path: &str, expected_sha256: &str) -> Result<bool, Failure>;
    /// Creates (0700) or verifies a private directory; returns its identity.
    fn ensure_private_directory(&mut self, path: &str) -> Result<CollectionIdentity, Failure>;
    /// Lists a collection; `None` when absent.
    fn snapshot(&mut self, path: &str, recover_orphans: bool) -> Result<Option<CollectionSnapshot>, Failure>;
    /// Reads files of a collection whose identity must still be `expected`.
    fn read_batch(
        &mut self,
        path: &str,
        names: &[String],
        max_bytes_per_file: u32,
        max_total_bytes: u32,
        expected: &CollectionIdentity,
    ) -> Result<Vec<(String, BatchStatus)>, Failure>;
    /// Takes the lease-creation lock: the lock every process takes while it checks that a
    /// directory is free and leases it (the native host's
    /// `.proclease/locks/directory-lease-creation.lock`). Recovery holds it from its last look
    /// at the collection until a directory is out of its path, so that no lease is made in a
    /// directory being removed (`docs/deviations.md` 24). Not re-entrant: callers pair it with
    /// [`Store::unlock_leasing`] and never nest it. Waits for another holder at most the
    /// operation's bound (a `contended` failure naming the holder then).
    ///
    /// The default takes nothing: for a store no other process shares (an in-memory fake).
    fn lock_leasing(&mut self) -> Result<(), Failure> {
        Ok(())
    }
    /// Releases the lock taken by [`Store::lock_leasing`] (a no-op when it is not held).
    fn unlock_leasing(&mut self) {}
}

/// Process identity (WIT `process-identity`, spec §2). Errors are the messages to report
/// (e.g. `exact live process identity is unavailable`).
pub trait Processes {
    /// The current boot id.
    fn current_boot_id(&mut self) -> Result<String, String>;
    /// This process's own identity (the host process, for the component).
    fn self_identity(&mut self) -> Result<Owner, String>;
    /// The identity of live process `pid`.
    fn capture(&mut self, pid: u64) -> Result<Owner, String>;
    /// What can be observed about a recorded process: its witness, the witnesses of what it
    /// started, its `/proc` entry and the host's `/proc` view (the rules that judge them are
    /// [`crate::liveness::judge`]). Errors: the current boot id cannot be read.
    fn probe(&mut self, owner: &Owner) -> Result<OwnerFacts, String>;
    /// What the host's run journal says of the command run under directory lease `lease_id`
    /// (`docs/deviations.md`, "A finished run keeps its directory"): `Some` when the host saw
    /// that command finish — its whole box empty — in the directory of the recorded identity;
    /// `None` when the journal holds nothing finished for it (never supervised by a proclease
    /// here, still running, killed before it finished, or a host without a journal: the
    /// default). Errors: the journal exists but cannot be read (nothing is proven).
    fn finished_run(&mut self, lease_id: &str) -> Result<Option<FinishedRun>, String> {
        let _ = lease_id;
        Ok(None)
    }
    /// Forgets the journal's entry for `lease_id` once its lease is gone (best effort; the
    /// default does nothing).
    fn forget_run(&mut self, lease_id: &str) {
        let _ = lease_id;
    }
}

/// A supervised command that finished, as the host's run journal recorded it when its whole
/// process tree had ended (WIT `process-identity.finished-run`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinishedRun {
    /// The identity of the directory it ran in, as the lease recorded it.
    pub directory_identity: crate::records::DirectoryIdentity,
    /// Its exit code, when it exited.
    pub exit_code: Option<i32>,
    /// The signal that ended it, when one did.
    pub signal: Option<i32>,
}

impl FinishedRun {
    /// Whether the command exited with status 0.
    pub fn succeeded(&self) -> bool {
        self.exit_code == Some(0) && self.signal.is_none()
    }

    /// `exit 0`, `exit 3`, `signal 9`.
    pub fn status_words(&self) -> String {
        match (self.exit_code, self.signal) {
            (Some(code), _) => alloc::format!("exit {code}"),
            (None, Some(signal)) => alloc::format!("signal {signal}"),
            (None, None) => String::from("an unknown status"),
        }
    }
}

/// Randomness (WIT `entropy`).
pub trait Entropy {
    /// `len` random bytes.
    fn random_bytes(&mut self, len: u32) -> Vec<u8>;
}

/// Wall-clock time (WIT `clock`).
pub trait Clock {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&mut self) -> u64;
}

/// A fresh lowercase UUID v4 from 16 random bytes (RFC 9562 §5.4: version 4, variant 10).
pub fn uuid_v4(entropy: &mut dyn Entropy) -> String {
    let mut bytes = entropy.random_bytes(16);
    bytes.resize(16, 0);
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let mut out = String::with_capacity(36);
    for (i, b) in bytes.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            out.push('-');
        }
        let _ = core::fmt::Write::write_fmt(&mut out, format_args!("{b:02x}"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed(u8);
    impl Entropy for Fixed {
        fn random_bytes(&mut self, len: u32) -> Vec<u8> {
            alloc::vec![self.0; len as usize]
        }
    }

    #[test]
    fn uuids_are_lowercase_v4() {
        for byte in [0x00, 0xff, 0x5a] {
            assert!(crate::js::is_uuid_v4(&uuid_v4(&mut Fixed(byte))));
        }
    }
}

/// The physical facts of a directory path (WIT `workspace.directory-facts`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectoryFacts {
    /// The path is its own realpath (no symbolic link on it).
    pub canonical: bool,
    /// A real directory (not a symbolic link).
    pub is_directory: bool,
    /// Owned by the host process's user.
    pub owned: bool,
    /// Permission bits.
    pub mode: u32,
    /// Device, inode, birth time (`"0"` when the filesystem reports none).
    pub identity: crate::records::DirectoryIdentity,
}

/// Directories under the granted workspace roots (WIT `workspace`).
pub trait Workspace {
    /// The facts of `path`; `None` when it does not exist.
    fn inspect(&mut self, path: &str) -> Result<Option<DirectoryFacts>, Failure>;
    /// Removes the tree at `path` only while it is still `expected` (completing an interrupted
    /// quarantine of it whose remover is provably dead); `false` when nothing of it exists.
    fn remove_tree(&mut self, path: &str, expected: &crate::records::DirectoryIdentity) -> Result<bool, Failure>;
    /// Creates `path` (mode 0700) and its missing ancestors below its granted root without
    /// following a symbolic link; returns the directories created, outermost first (none when
    /// `path` existed).
    fn create_private_directory(&mut self, path: &str) -> Result<Vec<String>, Failure>;
    /// Removes `path` only if it is an empty directory and, when `expected` is given, still that
    /// directory (`rmdir`); `false` when it is absent, another directory, or not empty.
    fn remove_empty_directory(&mut self, path: &str, expected: Option<&crate::records::DirectoryIdentity>) -> Result<bool, Failure>;
    /// What is at `path`, never following a symbolic link. The default cannot tell (an
    /// `unavailable` failure): for a fake whose callers never lease a new directory.
    fn kind(&mut self, path: &str) -> Result<PathKind, Failure> {
        Err(Failure::unavailable(format!("{path}: this workspace cannot tell what is at a path")))
    }
    /// Whether the directory `path` has no entries (`true` when it is absent). The default
    /// cannot tell, as [`Workspace::kind`].
    fn is_empty_directory(&mut self, path: &str) -> Result<bool, Failure> {
        Err(Failure::unavailable(format!("{path}: this workspace cannot tell whether a directory is empty")))
    }
}

/// What is at a workspace path (WIT `workspace.path-kind`), never following a symbolic link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathKind {
    /// Nothing (or an ancestor is missing).
    Absent,
    /// A directory.
    Directory,
    /// A symbolic link (never followed).
    SymbolicLink,
    /// A file, socket, device or pipe.
    Other,
    /// An ancestor below the granted root is a symbolic link or not a directory: the path
    /// cannot be reached physically.
    Unreachable,
}

/// The installed identity of an enabled plugin (§5 `loadInstalledPortableProviderPlugin`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstalledPlugin {
    /// `package.manifest.id`.
    pub plugin_id: String,
    /// `package.manifest.version`.
    pub version: String,
    /// `package.manifest.hostApiVersion`.
    pub host_api_version: u32,
    /// `package.bundleSha256`.
    pub bundle_sha256: String,
    /// `package.manifestSha256`.
    pub manifest_sha256: String,
}

/// The plugin catalog and its mutation lock (WIT `plugin-catalog`, §5).
pub trait Catalog {
    /// The enabled installation of `plugin_id`; `None` when absent or disabled. Errors: the
    /// store's or verification's message, as is.
    fn installed(&mut self, plugin_id: &str) -> Result<Option<InstalledPlugin>, String>;
    /// Takes the catalog mutation lock (re-entrant within one process), failing fast with
    /// `portable plugin catalog mutation is already locked` while another live process holds it.
    fn lock(&mut self) -> Result<(), String>;
    /// Releases one level of the lock taken by [`Catalog::lock`].
    fn unlock(&mut self);
}
