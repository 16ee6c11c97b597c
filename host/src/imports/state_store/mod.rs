//! The private state store (`state-store` import; spec §3.3 contracts, adapted to paths
//! relative to the state home).
//!
//! Guarantees, each tested in `tests/state_store.rs`:
//! * **Durable and atomic**: a record is written to a temporary in `.proclease/staging/`,
//!   fsynced, then published by `link` (create: never overwrites) or `rename` (replace), and the
//!   collection directory is fsynced. After a crash at any instant the record is absent, the
//!   complete old version or the complete new version. A change whose collection fsync fails
//!   is undone before the error is returned (the old bytes are put back), so a caller told
//!   "failed" can retry. `tests/tests/crash_states.rs` checks every crash state and every
//!   injected I/O error of this protocol (on a simulated disk taking the same steps).
//! * **Compare-and-swap across processes, ghostget's included**: every mutation of a record holds
//!   the reference's per-leaf mutation claim (§3.5, [`mutation_claim`]), so that a ghostget
//!   writing the same record at the same time never loses an update to proclease or the reverse;
//!   a replace or remove happens only if the bytes on disk hash to the expected sha256 at that
//!   instant. proclease's own writers also take the collection's kernel lock
//!   (`.proclease/locks/`, see `lock`) around the claim, which adds two things the claims
//!   alone do not give: proclease writers queue for each other instead of losing arbitration and
//!   failing, and a listing by proclease (which takes the same lock) never sees a proclease
//!   writer's claim files — the reference refuses a directory-lease collection while one is
//!   there. A claim lost to a live ghostget writer is retried for up to ten seconds.
//! * **Collections hold only records** (and, while a mutation runs, its claim): temporaries and
//!   locks live under `.proclease/`, which no store path can name; a crashed writer's temporary
//!   is removed by a later operation once its writer is provably dead (its pid and process start
//!   id are in the temporary's name). Before every write and listing the store also performs the
//!   reference's crash recovery in the collection (§3.9), so that what a crashed ghostget left
//!   there is cleaned up too (`mutation_claim::recover_directory`).
//! * **No escape**: paths are relative ([`path`]), every directory is opened component by
//!   component without following symbolic links, and must be owned by the user with mode 0700;
//!   every file must be a regular, private, owned file.
//! * **Bounded**: reads take a byte bound; listings at most 10 000 entries; batches at most
//!   1 000 names.

pub(crate) mod arbitration;
#[cfg(feature = "cluster")]
pub mod etcd;
pub mod fencing;
pub mod home;
mod lock;
pub mod mutation_claim;
pub mod path;
mod wit;

use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use proclease_core::liveness::OwnerStatus;
use proclease_core::records::Owner;
use proclease_core::{Failure, FailureKind, digest};
use rustix::fs::AtFlags;
use rustix::io::Errno;

use crate::fsops::{self, S_IFDIR, S_IFLNK, S_IFREG, StableRead};
use crate::process_identity::ProcessIdentity;
use home::StateHome;

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
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
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
        source: std::io::Error,
    },
}

impl StoreError {
    pub(crate) fn io(path: &str, operation: &'static str, source: impl Into<std::io::Error>) -> Self {
        StoreError::Io { path: path.into(), operation, source: source.into() }
    }

    pub(crate) fn unsafe_(path: &str, reason: impl Into<String>) -> Self {
        StoreError::Unsafe { path: path.into(), reason: reason.into() }
    }
}

#[doc(hidden)]
#[cfg(feature = "test-seams")]
pub use crate::fsops::fail_next_directory_fsyncs;
pub use proclease_core::effects::{BatchInvalid, BatchStatus, CollectionEntry, CollectionIdentity, CollectionSnapshot, EntryKind};

fn collection_identity(stat: &rustix::fs::Stat) -> CollectionIdentity {
    CollectionIdentity { device: stat.st_dev.to_string(), inode: stat.st_ino.to_string() }
}

/// The private state store on one state home.
pub struct StateStore {
    home: StateHome,
    staging: OwnedFd,
    locks: OwnedFd,
    processes: Arc<ProcessIdentity>,
    mutation_claims: std::sync::atomic::AtomicBool,
    /// When this handle was opened: the origin of `staging_swept_ms`.
    opened_at: std::time::Instant,
    /// When the staging directory was last swept, in ms since `opened_at` plus one (0: never).
    staging_swept_ms: std::sync::atomic::AtomicU64,
}

/// How often a store handle's writes sweep the staging directory for crashed writers'
/// temporaries (snapshots for recovery always do).
const STAGING_SWEEP_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// Where the store keeps its own files, inside the state home.
const INTERNAL: &str = ".proclease";

impl StateStore {
    /// Opens the store on a validated state home, creating `.proclease/{staging,locks}` (0700).
    ///
    /// Errors: the internal directories cannot be created or are unsafe.
    pub fn open(home: StateHome, processes: Arc<ProcessIdentity>) -> Result<Self, StoreError> {
        let internal = private_dir(home.dir(), INTERNAL, INTERNAL)?;
        let staging = private_dir(&internal, "staging", ".proclease/staging")?;
        let locks = private_dir(&internal, "locks", ".proclease/locks")?;
        Ok(StateStore {
            home,
            staging,
            locks,
            processes,
            mutation_claims: std::sync::atomic::AtomicBool::new(true),
            opened_at: std::time::Instant::now(),
            staging_swept_ms: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// Opens (creating 0600 if absent) the lock file `name` in the store's own lock directory
    /// (`.proclease/locks/`, never inside a collection), for a kernel lock of the caller's.
    pub fn lock_file(&self, name: &str) -> std::io::Result<std::fs::File> {
        if !path::is_safe_name(name) {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "unsafe lock name"));
        }
        let fd = rustix::fs::openat(
            &self.locks,
            name,
            rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CREATE | rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::from_raw_mode(0o600),
        )?;
        Ok(std::fs::File::from(fd))
    }

    /// The directory at `path` below the state home, opened without following symbolic links
    /// and checked like every store directory (owned, mode 0700); `None` when absent.
    pub(crate) fn open_directory(&self, path: &str) -> Result<Option<OwnedFd>, StoreError> {
        let segments = path::segments(path).map_err(|reason| StoreError::Refused { path: path.into(), reason })?;
        self.walk(path, &segments, false)
    }

    /// The process identity the store judges writers with.
    pub(crate) fn processes(&self) -> &ProcessIdentity {
        &self.processes
    }

    /// Benchmarks only: turns the reference's mutation claims off (`false`) or on, to measure
    /// what they cost. Without them a ghostget writing the same record at the same time can
    /// lose an update to proclease or the reverse; never turn them off on a real state home.
    #[doc(hidden)]
    pub fn benchmark_mutation_claims(&self, on: bool) {
        self.mutation_claims.store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// The state home this store writes to.
    pub fn home(&self) -> &StateHome {
        &self.home
    }

    /// The file's text, or `None` when it or a parent directory is absent
    /// (`readPrivateStateFileIfPresent`, §3.3). The file must be a private, owned, regular file
    /// of at most `max_bytes`, unchanged while read, and UTF-8.
    pub fn read_if_present(&self, path: &str, max_bytes: u32) -> Result<Option<String>, StoreError> {
        let (segments, name) = split(path)?;
        let Some(dir) = self.walk(path, &segments, false)? else { return Ok(None) };
        let Some(bytes) = read_record(&dir, name, path, u64::from(max_bytes))? else { return Ok(None) };
        String::from_utf8(bytes).map(Some).map_err(|_| StoreError::unsafe_(path, "not valid UTF-8"))
    }

    /// Creates the file with `content` unless it exists (`createPrivateJsonIfAbsent`, §3.3):
    /// `Ok(true)` when created, `Ok(false)` when a file was already there. Never overwrites.
    /// Missing parent directories are created (0700).
    pub fn create_if_absent(&self, path: &str, content: &str) -> Result<bool, StoreError> {
        let (segments, name) = split(path)?;
        check_size(path, content)?;
        let dir = self.walk(path, &segments, true)?.ok_or_else(|| StoreError::unsafe_(path, "parent vanished"))?;
        let _lock = self.lock(path, &segments, &dir, Some(name))?;
        let temp = self.stage(path, content.as_bytes())?;
        let unlink_temp = || {
            let _ = rustix::fs::unlinkat(&self.staging, &temp, AtFlags::empty());
        };
        let created = self.with_claim(path, &dir, name, || self.link_new(path, &dir, name, &temp));
        unlink_temp();
        created?.ok_or_else(|| StoreError::Contended { path: path.into() })
    }

    /// The create's critical section: links the staged `temp` at `name` and fsyncs `dir`.
    fn link_new(&self, path: &str, dir: &OwnedFd, name: &str, temp: &str) -> Result<bool, StoreError> {
        match rustix::fs::linkat(&self.staging, temp, dir, name, AtFlags::empty()) {
            Ok(()) => {}
            Err(Errno::EXIST) => return Ok(false),
            Err(e) => return Err(StoreError::io(path, "link into the collection", e)),
        }
        if let Err(e) = fsops::fsync_dir(dir) {
            // The caller is told the create failed, so it must not stay visible: unlink the
            // name again (it is still our inode: the record's claim is held).
            if same_inode(&self.staging, temp, dir, name) {
                let _ = rustix::fs::unlinkat(dir, name, AtFlags::empty());
            }
            return Err(StoreError::io(path, "fsync of the collection", e));
        }
        Ok(true)
    }

    /// Runs `mutate` holding the reference's mutation claim on `name` in `dir` (§3.5), after the
    /// crash recovery of `dir` (§3.9). The caller holds the collection's kernel lock, so the
    /// only writers this can lose to are other programs' (a running ghostget): a lost claim is
    /// retried after a short pause for at most [`lock::CLAIM_WAIT`], then `Ok(None)`.
    ///
    /// Errors: the claim protocol's own (an owner that cannot be judged, two holders, a
    /// malformed claim: [`StoreError::Claim`]); this process's identity unavailable; those of
    /// `mutate`.
    fn with_claim<T>(&self, path: &str, dir: &OwnedFd, name: &str, mutate: impl FnOnce() -> Result<T, StoreError>) -> Result<Option<T>, StoreError> {
        if !self.mutation_claims.load(std::sync::atomic::Ordering::Relaxed) {
            return mutate().map(Some);
        }
        // A failed system call keeps its errno (a full or read-only filesystem is told apart from
        // a protocol refusal); a refusal of the protocol keeps the reference's message.
        let claim_error = |e: arbitration::ArbitrationError| match e.io {
            Some(source) => StoreError::Io { path: path.into(), operation: "taking the mutation claim", source },
            None => StoreError::Claim { path: path.into(), reason: e.message.into() },
        };
        let own = mutation_claim::own_identity(&self.processes).map_err(|reason| StoreError::Claim { path: path.into(), reason: reason.into() })?;
        mutation_claim::recover_directory(dir, &self.processes, false).map_err(claim_error)?;
        let kind = mutation_claim::MutationClaim::for_leaf(name);
        let start = std::time::Instant::now();
        let bound = crate::lock_wait::remaining(lock::CLAIM_WAIT);
        let mut pause = std::time::Duration::from_millis(1);
        let held = loop {
            if let Some(held) = arbitration::arbitrate(dir, &kind, &self.processes, &own).map_err(claim_error)? {
                crate::lock_wait::note_taken(&format!("the mutation claim of {path}"));
                break held;
            }
            if start.elapsed() >= bound {
                // Who holds it, for the operation's error: the claim's record names its owner.
                let holder = arbitration::live_holder(dir, &kind, &self.processes).map(crate::lock_wait::process);
                let timeout = crate::lock_wait::LockTimeout {
                    lock: format!("the mutation claim of {path}"),
                    holder,
                    behind: None,
                    waited_ms: start.elapsed().as_millis() as u64,
                    hint: lock::CLAIM_HINT,
                    during: None,
                };
                tracing::warn!("gave up: {timeout}");
                crate::lock_wait::note(&timeout);
                return Ok(None);
            }
            tracing::trace!(path, "another process holds the mutation claim; waiting");
            std::thread::sleep(pause);
            pause = (pause * 2).min(std::time::Duration::from_millis(20));
        };
        let result = mutate();
        arbitration::release(dir, &held.name);
        result.map(Some)
    }

    /// Puts `old` back at `name` after a visible change whose collection fsync failed (the
    /// caller is told the change failed, so it must not stay): a fresh temporary with the old
    /// bytes, published over the name (`rename`, after a replace) or at the emptied name
    /// (`link`, after a removal: it never overwrites a file that appeared meanwhile), and the
    /// collection fsynced again. Best effort: if this fails too, the name holds the old or
    /// the new complete version (or, after a removal, none).
    fn restore(&self, path: &str, dir: &OwnedFd, name: &str, old: &[u8], over_the_name: bool) {
        let Ok(back) = self.stage(path, old) else { return };
        let published = if over_the_name { rustix::fs::renameat(&self.staging, &back, dir, name) } else { rustix::fs::linkat(&self.staging, &back, dir, name, AtFlags::empty()) };
        if published.is_ok() {
            let _ = fsops::fsync_dir(dir);
        }
        let _ = rustix::fs::unlinkat(&self.staging, &back, AtFlags::empty());
    }

    /// Replaces the file with `content` only if its bytes hash to `expected_sha256` at the
    /// instant of the swap (`writePrivateJsonIfUnchanged`, §3.3): `Ok(false)` when the file is
    /// absent or differs.
    pub fn replace_if_unchanged(&self, path: &str, expected_sha256: &str, content: &str) -> Result<bool, StoreError> {
        let (segments, name) = split(path)?;
        check_hash(path, expected_sha256)?;
        check_size(path, content)?;
        let Some(dir) = self.walk(path, &segments, false)? else { return Ok(false) };
        let _lock = self.lock(path, &segments, &dir, Some(name))?;
        let temp = self.stage(path, content.as_bytes())?;
        let replaced = self.with_claim(path, &dir, name, || {
            let Some(old) = read_record(&dir, name, path, MAX_RECORD_BYTES)? else { return Ok(false) };
            if digest::sha256_hex(&old) != expected_sha256 {
                return Ok(false);
            }
            rustix::fs::renameat(&self.staging, &temp, &dir, name).map_err(|e| StoreError::io(path, "rename into the collection", e))?;
            if let Err(e) = fsops::fsync_dir(&dir) {
                self.restore(path, &dir, name, &old, true);
                return Err(StoreError::io(path, "fsync of the collection", e));
            }
            Ok(true)
        });
        // Gone when it was renamed into place; otherwise it is removed here.
        let _ = rustix::fs::unlinkat(&self.staging, &temp, AtFlags::empty());
        Ok(replaced?.unwrap_or(false))
    }

    /// Removes the file only if its bytes hash to `expected_sha256` at the instant of removal
    /// (`removePrivateStateFileIfUnchanged`, §3.3): `Ok(false)` when absent or different.
    pub fn remove_if_unchanged(&self, path: &str, expected_sha256: &str) -> Result<bool, StoreError> {
        let (segments, name) = split(path)?;
        check_hash(path, expected_sha256)?;
        let Some(dir) = self.walk(path, &segments, false)? else { return Ok(false) };
        let _lock = self.lock(path, &segments, &dir, Some(name))?;
        Ok(self.with_claim(path, &dir, name, || self.remove_read(path, &dir, name, expected_sha256))?.unwrap_or(false))
    }

    /// The removal's critical section: reads the record, compares, unlinks the inode read, and
    /// fsyncs `dir` (putting the bytes back if that fails).
    fn remove_read(&self, path: &str, dir: &OwnedFd, name: &str, expected_sha256: &str) -> Result<bool, StoreError> {
        let fd = match fsops::open_read(dir, name) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(false),
            Err(Errno::LOOP) => return Err(StoreError::unsafe_(path, "is a symbolic link; remove it by hand after checking it")),
            Err(e) => return Err(StoreError::io(path, "open", e)),
        };
        let before = rustix::fs::fstat(&fd).map_err(|e| StoreError::io(path, "fstat", e))?;
        if let Some(reason) = fsops::unsafe_file_reason(&before) {
            return Err(StoreError::unsafe_(path, reason));
        }
        let bytes = match fsops::read_stable(&fd, &before, MAX_RECORD_BYTES).map_err(|e| StoreError::io(path, "read", e))? {
            StableRead::Bytes(bytes) => bytes,
            StableRead::TooLarge => return Err(StoreError::unsafe_(path, "larger than a record may be")),
            StableRead::Changed => return Ok(false),
        };
        if digest::sha256_hex(&bytes) != expected_sha256 {
            return Ok(false);
        }
        // Under the claim no cooperating writer can swap the name; still, remove only the inode
        // that was read.
        match fsops::lstat(dir, name).map_err(|e| StoreError::io(path, "lstat", e))? {
            Some(now) if now.st_ino == before.st_ino && now.st_dev == before.st_dev => {}
            _ => return Ok(false),
        }
        rustix::fs::unlinkat(dir, name, AtFlags::empty()).map_err(|e| StoreError::io(path, "unlink", e))?;
        if let Err(e) = fsops::fsync_dir(dir) {
            self.restore(path, dir, name, &bytes, false);
            return Err(StoreError::io(path, "fsync of the collection", e));
        }
        Ok(true)
    }

    /// Creates (mode 0700) each missing directory of `path` and verifies the existing ones
    /// (owned, mode 0700, not a symbolic link); returns the identity of the last
    /// (`ensurePrivateStateDirectory`, §3.3).
    pub fn ensure_private_directory(&self, path: &str) -> Result<CollectionIdentity, StoreError> {
        let segments = path::segments(path).map_err(|reason| StoreError::Refused { path: path.into(), reason })?;
        let dir = self.walk(path, &segments, true)?.ok_or_else(|| StoreError::unsafe_(path, "vanished while created"))?;
        let stat = rustix::fs::fstat(&dir).map_err(|e| StoreError::io(path, "fstat", e))?;
        Ok(collection_identity(&stat))
    }

    /// Lists a collection directory; `None` when it (or a parent) is absent
    /// (`snapshotPrivateStateDirectory`, §3.3). Every listing first performs the crash recovery of
    /// §3.9 in the collection (what crashed ghostget writers left there); with `recover_orphans`,
    /// also the claims of gone owners (§3.5) and proclease's own staged temporaries of provably
    /// dead writers.
    ///
    /// Errors: more than [`MAX_ENTRIES`] entries; an unsafe entry name; a sub-directory that is
    /// not owned with mode 0700.
    pub fn snapshot(&self, path: &str, recover_orphans: bool) -> Result<Option<CollectionSnapshot>, StoreError> {
        let segments = path::segments(path).map_err(|reason| StoreError::Refused { path: path.into(), reason })?;
        if recover_orphans {
            self.remove_dead_temporaries();
        }
        let Some(dir) = self.walk(path, &segments, false)? else { return Ok(None) };
        // proclease's writers hold this lock with their claims: the listing never sees them.
        let _lock = self.lock(path, &segments, &dir, None)?;
        mutation_claim::recover_directory(&dir, &self.processes, recover_orphans).map_err(|e| StoreError::Claim { path: path.into(), reason: e.to_string() })?;
        let stat = rustix::fs::fstat(&dir).map_err(|e| StoreError::io(path, "fstat", e))?;
        let names = fsops::list_names(&dir, MAX_ENTRIES).map_err(|e| match e {
            Some(e) => StoreError::io(path, "list", e),
            None => StoreError::unsafe_(path, format!("the collection has more than {MAX_ENTRIES} entries")),
        })?;
        let mut entries = Vec::with_capacity(names.len());
        for raw in names {
            let name = String::from_utf8(raw.clone()).ok().filter(|n| path::is_safe_name(n)).ok_or_else(|| {
                let shown = raw.escape_ascii().to_string();
                StoreError::unsafe_(path, format!("state directory contains an unsafe entry name (\"{shown}\"): rename or remove it by hand"))
            })?;
            let Some(entry_stat) = fsops::lstat(&dir, &name).map_err(|e| StoreError::io(path, "lstat", e))? else {
                continue; // removed while listed
            };
            let (kind, identity) = match fsops::file_kind(entry_stat.st_mode) {
                S_IFREG => (EntryKind::File, None),
                S_IFLNK => (EntryKind::SymbolicLink, None),
                S_IFDIR => {
                    if entry_stat.st_uid != fsops::euid() || entry_stat.st_mode & 0o777 != 0o700 {
                        return Err(StoreError::unsafe_(path, format!("sub-directory {name} must be owned by you with mode 0700")));
                    }
                    (EntryKind::Directory, Some(collection_identity(&entry_stat)))
                }
                _ => (EntryKind::Other, None),
            };
            entries.push(CollectionEntry { name, kind, identity });
        }
        entries.sort_by(|a, b| proclease_core::js::cmp_utf16(&a.name, &b.name));
        Ok(Some(CollectionSnapshot { identity: collection_identity(&stat), entries }))
    }

    /// Reads files of a collection whose identity must be `expected` before and after
    /// (`readPrivateStateFilesBatch`, §3.3). Results are in request order.
    ///
    /// Errors: bounds out of range (per file ≤ 2 MiB, total ≤ 64 MiB, ≤ 1 000 unique safe names);
    /// the directory absent or no longer `expected`.
    pub fn read_batch(
        &self,
        path: &str,
        names: &[String],
        max_bytes_per_file: u32,
        max_total_bytes: u32,
        expected: &CollectionIdentity,
    ) -> Result<Vec<(String, BatchStatus)>, StoreError> {
        let segments = check_batch(path, names, max_bytes_per_file, max_total_bytes)?;
        let dir = self.walk(path, &segments, false)?.ok_or_else(|| StoreError::unsafe_(path, "private state batch directory is absent"))?;
        let identity = |dir: &OwnedFd| rustix::fs::fstat(dir).map(|s| collection_identity(&s));
        let changed = || StoreError::unsafe_(path, "private state batch directory changed identity");
        if identity(&dir).map_err(|e| StoreError::io(path, "fstat", e))? != *expected {
            return Err(changed());
        }
        let mut remaining = u64::from(max_total_bytes);
        let mut results = Vec::with_capacity(names.len());
        for name in names {
            let status = batch_read_one(&dir, name, u64::from(max_bytes_per_file), &mut remaining);
            results.push((name.clone(), status));
        }
        // The directory must still be the same one at the same path.
        let reopened = self.walk(path, &segments, false)?.ok_or_else(changed)?;
        let now = identity(&reopened).map_err(|e| StoreError::io(path, "fstat", e))?;
        if now != *expected || identity(&dir).ok().as_ref() != Some(expected) {
            return Err(changed());
        }
        Ok(results)
    }

    /// Opens the directory of `segments` below the state home, one component at a time without
    /// following symbolic links, checking each is owned with mode 0700; creates missing ones
    /// when `create`. `None` when one is absent (and not created).
    fn walk(&self, path: &str, segments: &[&str], create: bool) -> Result<Option<OwnedFd>, StoreError> {
        let mut current: OwnedFd = self.home.dir().as_fd().try_clone_to_owned().map_err(|e| StoreError::io(path, "dup", e))?;
        for segment in segments {
            // Open first: the directory nearly always exists, and a `mkdirat` that fails with
            // EEXIST costs as much as the open it precedes.
            let mut opened = fsops::open_dir(&current, segment);
            if create && matches!(opened, Err(Errno::NOENT)) {
                fsops::create_private_dir(&current, segment).map_err(|e| StoreError::io(path, "mkdir", e))?;
                opened = fsops::open_dir(&current, segment);
            }
            let next = match opened {
                Ok(fd) => fd,
                Err(Errno::NOENT) => return Ok(None),
                Err(Errno::LOOP) => {
                    return Err(StoreError::unsafe_(path, format!("{segment} is a symbolic link; the store never follows them")));
                }
                Err(Errno::NOTDIR) => return Err(StoreError::unsafe_(path, format!("{segment} is not a directory"))),
                Err(e) => return Err(StoreError::io(path, "open directory", e)),
            };
            let stat = rustix::fs::fstat(&next).map_err(|e| StoreError::io(path, "fstat", e))?;
            if stat.st_uid != fsops::euid() || stat.st_mode & 0o777 != 0o700 {
                return Err(StoreError::unsafe_(path, format!("directory {segment} must be owned by you with mode 0700 (chmod 700 it if it is yours)")));
            }
            current = next;
        }
        Ok(Some(current))
    }

    /// Takes the lock of the collection that holds `path`'s file (`leaf` in `dir`; `None` for
    /// the collection itself). A wait that is told, or reaches its bound, also names the live
    /// holder of `leaf`'s mutation claim when that is another process than the lock's holder:
    /// the lock's holder is then itself waiting for it (a stopped ghostget), and is not what
    /// holds everyone up.
    fn lock(&self, path: &str, parent: &[&str], dir: &OwnedFd, leaf: Option<&str>) -> Result<lock::CollectionLock, StoreError> {
        let name = format!("{}.lock", digest::identity_digest("proclease-collection-lock", &parent.join("/")));
        let behind = |lock_holder: Option<i32>| {
            let leaf = leaf.filter(|_| self.mutation_claims.load(std::sync::atomic::Ordering::Relaxed))?;
            let kind = mutation_claim::MutationClaim::for_leaf(leaf);
            let claim_holder = arbitration::live_holder(dir, &kind, &self.processes).filter(|pid| Some(*pid) != lock_holder)?;
            Some(crate::lock_wait::Behind { holder: crate::lock_wait::process(claim_holder), lock: format!("the mutation claim of {path}") })
        };
        match lock::lock(&self.locks, &name, &behind).map_err(|e| StoreError::io(path, "lock", e))? {
            lock::Locked::Held(held) => Ok(held),
            lock::Locked::TimedOut => Err(StoreError::Contended { path: path.into() }),
        }
    }

    /// Writes `content` to a fresh, fsynced temporary in the staging directory, named
    /// `<pid>-<process start id>-<uuid>.tmp` so that a later operation can prove its writer dead.
    fn stage(&self, path: &str, content: &[u8]) -> Result<String, StoreError> {
        self.sweep_staging_now_and_then();
        let own = self.processes.self_identity().map_err(|e| StoreError::io(path, "reading this process's identity", std::io::Error::other(e.0)))?;
        let name = format!("{}-{}-{}.tmp", own.pid, own.process_start_id, uuid::Uuid::new_v4());
        fsops::write_new_file(&self.staging, &name, content).map_err(|e| {
            let _ = rustix::fs::unlinkat(&self.staging, &name, AtFlags::empty());
            StoreError::io(path, "write of the temporary", e)
        })?;
        Ok(name)
    }

    /// [`remove_dead_temporaries`](Self::remove_dead_temporaries) at most once per
    /// [`STAGING_SWEEP_INTERVAL`] for this store handle: a writer's own temporaries never
    /// outlive its write, so only crashed writers leave any, and listing the staging directory
    /// before every write (with a `/proc` probe per entry) would tax every mutation for them.
    /// A snapshot with `recover_orphans` (recovery, `doctor`) always sweeps.
    fn sweep_staging_now_and_then(&self) {
        use std::sync::atomic::Ordering;
        let now = self.opened_at.elapsed().as_millis() as u64 + 1;
        let last = self.staging_swept_ms.load(Ordering::Relaxed);
        if last != 0 && now.saturating_sub(last) < STAGING_SWEEP_INTERVAL.as_millis() as u64 {
            return;
        }
        if self.staging_swept_ms.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_ok() {
            self.remove_dead_temporaries();
        }
    }

    /// Removes temporaries whose writer is provably dead (another boot, no such process, or
    /// another process on that pid). A temporary of a live or unknown writer stays.
    fn remove_dead_temporaries(&self) {
        let Ok(names) = fsops::list_names(&self.staging, MAX_ENTRIES) else { return };
        let Ok(boot_id) = self.processes.current_boot_id() else { return };
        for raw in names {
            let Ok(name) = std::str::from_utf8(&raw) else { continue };
            let Some(owner) = temporary_owner(name, &boot_id) else { continue };
            if self.processes.owner_status(&owner).ok() == Some(OwnerStatus::DifferentOrDead) {
                let _ = rustix::fs::unlinkat(&self.staging, name, AtFlags::empty());
            }
        }
    }
}

/// The writer a staging temporary name `<pid>-<start id>-<uuid>.tmp` records, on this boot.
fn temporary_owner(name: &str, boot_id: &str) -> Option<Owner> {
    let stem = name.strip_suffix(".tmp")?;
    let (pid, rest) = stem.split_once('-')?;
    let (start, uuid) = rest.split_once('-')?;
    let pid: u64 = pid.parse().ok().filter(|p| *p > 0)?;
    (proclease_core::js::is_digest(start) && uuid.len() == 36).then(|| Owner { pid, boot_id: boot_id.into(), process_start_id: start.into() })
}

/// Whether `a_name` in `a_dir` and `b_name` in `b_dir` are the same inode.
fn same_inode(a_dir: &OwnedFd, a_name: &str, b_dir: &OwnedFd, b_name: &str) -> bool {
    match (fsops::lstat(a_dir, a_name), fsops::lstat(b_dir, b_name)) {
        (Ok(Some(a)), Ok(Some(b))) => a.st_ino == b.st_ino && a.st_dev == b.st_dev,
        _ => false,
    }
}

/// Splits a record path into its parent directory segments and file name.
pub(crate) fn split(path: &str) -> Result<(Vec<&str>, &str), StoreError> {
    let mut segments = path::segments(path).map_err(|reason| StoreError::Refused { path: path.into(), reason })?;
    if segments.len() < 2 {
        return Err(StoreError::Refused { path: path.into(), reason: "a record must be nested inside a state directory".into() });
    }
    let name = segments.pop().unwrap_or_default();
    Ok((segments, name))
}

/// The checks of a batch read's request, before anything is read (§3.3): the directory's
/// segments, or the reference's refusal.
pub(crate) fn check_batch<'a>(path: &'a str, names: &[String], max_bytes_per_file: u32, max_total_bytes: u32) -> Result<Vec<&'a str>, StoreError> {
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

pub(crate) fn check_hash(path: &str, expected: &str) -> Result<(), StoreError> {
    if proclease_core::js::is_digest(expected) { Ok(()) } else { Err(StoreError::Refused { path: path.into(), reason: "expected private state content hash is invalid".into() }) }
}

pub(crate) fn check_size(path: &str, content: &str) -> Result<(), StoreError> {
    if content.len() as u64 > MAX_RECORD_BYTES {
        return Err(StoreError::Refused { path: path.into(), reason: format!("content exceeds {MAX_RECORD_BYTES} bytes") });
    }
    Ok(())
}

/// Reads a record file: `None` when absent; an error when unsafe or oversized. A file that
/// changed while it was read (another process replaced or removed it: renames and unlinks
/// change its ctime) is read again, a few times, so that a reader racing a writer sees the old
/// file, the new one, or none — and only a file that keeps changing is an error.
fn read_record(dir: &OwnedFd, name: &str, path: &str, max_bytes: u64) -> Result<Option<Vec<u8>>, StoreError> {
    const ATTEMPTS: usize = 4;
    for _ in 0..ATTEMPTS {
        let fd = match fsops::open_read(dir, name) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(Errno::LOOP) => return Err(StoreError::unsafe_(path, "is a symbolic link; the store never follows them")),
            Err(e) => return Err(StoreError::io(path, "open", e)),
        };
        let stat = rustix::fs::fstat(&fd).map_err(|e| StoreError::io(path, "fstat", e))?;
        if let Some(reason) = fsops::unsafe_file_reason(&stat) {
            return Err(StoreError::unsafe_(path, reason));
        }
        match fsops::read_stable(&fd, &stat, max_bytes).map_err(|e| StoreError::io(path, "read", e))? {
            StableRead::Bytes(bytes) => return Ok(Some(bytes)),
            StableRead::TooLarge => return Err(StoreError::unsafe_(path, format!("larger than {max_bytes} bytes"))),
            StableRead::Changed => continue,
        }
    }
    Err(StoreError::unsafe_(path, "state file changed while it was read, again and again; retry when its writers are done"))
}

fn batch_read_one(dir: &OwnedFd, name: &str, per_file: u64, remaining: &mut u64) -> BatchStatus {
    let fd = match fsops::open_read(dir, name) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return BatchStatus::Absent,
        Err(Errno::LOOP) => return BatchStatus::Invalid(BatchInvalid::UnsafeFile),
        Err(_) => return BatchStatus::Invalid(BatchInvalid::Unreadable),
    };
    let Ok(stat) = rustix::fs::fstat(&fd) else { return BatchStatus::Invalid(BatchInvalid::Unreadable) };
    if fsops::unsafe_file_reason(&stat).is_some() {
        return BatchStatus::Invalid(BatchInvalid::UnsafeFile);
    }
    let size = u64::try_from(stat.st_size).unwrap_or(u64::MAX);
    if size > per_file {
        return BatchStatus::Invalid(BatchInvalid::FileByteBound);
    }
    if size > *remaining {
        return BatchStatus::Invalid(BatchInvalid::AggregateByteBound);
    }
    let bytes = match fsops::read_stable(&fd, &stat, per_file) {
        Ok(StableRead::Bytes(bytes)) => bytes,
        Ok(StableRead::TooLarge) => return BatchStatus::Invalid(BatchInvalid::FileByteBound),
        Ok(StableRead::Changed) => return BatchStatus::Invalid(BatchInvalid::ChangedDuringRead),
        Err(_) => return BatchStatus::Invalid(BatchInvalid::Unreadable),
    };
    // The name must still be this inode.
    match fsops::lstat(dir, name) {
        Ok(Some(now)) if now.st_ino == stat.st_ino && now.st_dev == stat.st_dev => {}
        _ => return BatchStatus::Invalid(BatchInvalid::ChangedDuringRead),
    }
    *remaining -= bytes.len() as u64;
    match String::from_utf8(bytes) {
        Ok(text) => BatchStatus::Present(text),
        Err(_) => BatchStatus::Invalid(BatchInvalid::InvalidUtf8),
    }
}

/// Opens (creating 0700 if absent) a private directory of the store's own.
fn private_dir(parent: impl AsFd + Copy, name: &str, label: &str) -> Result<OwnedFd, StoreError> {
    fsops::create_private_dir(parent, name).map_err(|e| StoreError::io(label, "mkdir", e))?;
    let fd = fsops::open_dir(parent, name).map_err(|e| match e {
        Errno::LOOP => StoreError::unsafe_(label, "is a symbolic link"),
        e => StoreError::io(label, "open", e),
    })?;
    let stat = rustix::fs::fstat(&fd).map_err(|e| StoreError::io(label, "fstat", e))?;
    if stat.st_uid != fsops::euid() || stat.st_mode & 0o777 != 0o700 {
        return Err(StoreError::unsafe_(label, "must be owned by you with mode 0700"));
    }
    Ok(fd)
}

/// The state store as the component's effect ([`proclease_core::effects::Store`]): a store
/// shared by several instances, its failures as the WIT `failure` record.
pub struct SharedStore {
    store: Arc<StateStore>,
}

impl SharedStore {
    /// `store` as an effect.
    pub fn new(store: Arc<StateStore>) -> SharedStore {
        SharedStore { store }
    }
}

/// The kernel lock every lease of a new directory is made under, in `.proclease/locks/`: the
/// native `run`'s check that a directory is free and its lease ([`crate::Host::lease_new_directory`]),
/// and recovery from its last look at the collection until the directory it removes is out of
/// its path (`docs/deviations.md` 24).
pub const LEASING_LOCK: &str = "directory-lease-creation.lock";

thread_local! {
    /// The lease-creation lock a component call on this thread holds
    /// ([`Store::lock_leasing`](proclease_core::effects::Store::lock_leasing)). Per thread, as a
    /// component call runs on its caller's thread: the workspace's removal releases it as soon
    /// as the directory is renamed to its quarantine ([`release_leasing_lock`]), so that runs
    /// elsewhere do not wait while a large tree is deleted.
    static LEASING: std::cell::RefCell<Option<std::fs::File>> = const { std::cell::RefCell::new(None) };
}

/// Takes `store`'s [`LEASING_LOCK`] for this thread (nothing when this thread holds it),
/// waiting at most what is left of the operation's bound ([`lock_wait`](crate::lock_wait)),
/// saying after 1 s who holds it.
///
/// Errors: a `contended` failure naming the holder at the bound; an I/O failure opening or
/// locking the file.
pub(crate) fn take_leasing_lock(store: &StateStore) -> Result<(), Failure> {
    if LEASING.with(|held| held.borrow().is_some()) {
        return Ok(());
    }
    let label = store.home().path().join(".proclease/locks").join(LEASING_LOCK).display().to_string();
    let file = store.lock_file(LEASING_LOCK).map_err(|e| failure(StoreError::io(&label, "open of the lease-creation lock", e)))?;
    match crate::lock_wait::lock(&file, &label, crate::lock_wait::operation_bound(lock::WAIT)) {
        Ok(()) => {
            LEASING.with(|held| *held.borrow_mut() = Some(file));
            Ok(())
        }
        Err(crate::lock_wait::LockError::TimedOut(timeout)) => Err(Failure { path: Some(label), ..Failure::new(FailureKind::Contended, timeout.to_string()) }),
        Err(crate::lock_wait::LockError::Io(e)) => Err(failure(StoreError::io(&label, "lock of the lease-creation lock", e))),
    }
}

/// Releases the lease-creation lock this thread holds, if any (closing the only descriptor of
/// the open file releases its `flock`).
pub(crate) fn release_leasing_lock() {
    LEASING.with(|held| held.borrow_mut().take());
}

/// `error` as it crosses the boundary: its kind, its message, and its path, operation and errno
/// where it has them.
pub(crate) fn failure(error: StoreError) -> Failure {
    failure_of(&error)
}

/// [`failure`] of a borrowed error.
pub(crate) fn failure_of(error: &StoreError) -> Failure {
    let message = error.to_string();
    let at = |kind, path: &str| Failure { path: Some(path.into()), ..Failure::new(kind, message.clone()) };
    match error {
        StoreError::Contended { path } => at(FailureKind::Contended, path),
        StoreError::Refused { path, .. } => at(FailureKind::Refused, path),
        StoreError::Unsafe { path, .. } | StoreError::Claim { path, .. } => at(FailureKind::Unsafe, path),
        StoreError::Unreachable { path, operation, .. } => Failure { operation: Some((*operation).into()), ..at(FailureKind::Unreachable, path) },
        StoreError::Io { path, operation, source } => crate::error::io_failure(path, operation, source, message),
    }
}

impl proclease_core::effects::Store for SharedStore {
    fn read_if_present(&mut self, path: &str, max_bytes: u32) -> Result<Option<String>, proclease_core::effects::Failure> {
        self.store.read_if_present(path, max_bytes).map_err(failure)
    }

    fn create_if_absent(&mut self, path: &str, content: &str) -> Result<bool, proclease_core::effects::Failure> {
        self.store.create_if_absent(path, content).map_err(failure)
    }

    fn replace_if_unchanged(&mut self, path: &str, expected_sha256: &str, content: &str) -> Result<bool, proclease_core::effects::Failure> {
        self.store.replace_if_unchanged(path, expected_sha256, content).map_err(failure)
    }

    fn remove_if_unchanged(&mut self, path: &str, expected_sha256: &str) -> Result<bool, proclease_core::effects::Failure> {
        self.store.remove_if_unchanged(path, expected_sha256).map_err(failure)
    }

    fn ensure_private_directory(&mut self, path: &str) -> Result<CollectionIdentity, proclease_core::effects::Failure> {
        self.store.ensure_private_directory(path).map_err(failure)
    }

    fn snapshot(&mut self, path: &str, recover_orphans: bool) -> Result<Option<CollectionSnapshot>, proclease_core::effects::Failure> {
        self.store.snapshot(path, recover_orphans).map_err(failure)
    }

    fn read_batch(
        &mut self,
        path: &str,
        names: &[String],
        max_bytes_per_file: u32,
        max_total_bytes: u32,
        expected: &CollectionIdentity,
    ) -> Result<Vec<(String, BatchStatus)>, proclease_core::effects::Failure> {
        self.store.read_batch(path, names, max_bytes_per_file, max_total_bytes, expected).map_err(failure)
    }

    fn lock_leasing(&mut self) -> Result<(), proclease_core::effects::Failure> {
        take_leasing_lock(&self.store)
    }

    fn unlock_leasing(&mut self) {
        release_leasing_lock();
    }
}
