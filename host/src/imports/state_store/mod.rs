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
//!   injected I/O error of this protocol: the same code ([`protocol`], written over the seam
//!   [`crate::seam`]), run over a simulated disk.
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

#[cfg(feature = "cluster")]
pub mod etcd;
pub mod fencing;
pub mod home;
pub(crate) mod lock;
mod wit;

// The protocol itself, written once over the seam (issue #41): `proclease-protocols`.
pub use proclease_protocols::state_store::{
    INTERNAL, MAX_BATCH_FILE_BYTES, MAX_BATCH_NAMES, MAX_BATCH_TOTAL_BYTES, MAX_ENTRIES, MAX_RECORD_BYTES, StoreError, arbitration, check_batch, check_hash, check_size,
    mutation_claim, path, protocol, split,
};

use std::os::fd::AsFd;
use std::sync::Arc;

use proclease_core::{Failure, FailureKind};

use crate::process_identity::ProcessIdentity;
pub(crate) use crate::seam::NativeFs;
use home::StateHome;
pub use protocol::StoreProtocol;

#[doc(hidden)]
#[cfg(feature = "test-seams")]
pub use crate::fsops::fail_next_directory_fsyncs;
pub use proclease_core::effects::{BatchInvalid, BatchStatus, CollectionEntry, CollectionIdentity, CollectionSnapshot, EntryKind};

/// The private state store on one state home: the store's protocol ([`protocol`]) over this
/// machine's file systems and `/proc`.
pub struct StateStore {
    home: StateHome,
    protocol: StoreProtocol<NativeFs, ProcessIdentity>,
}

impl StateStore {
    /// Opens the store on a validated state home, creating `.proclease/{staging,locks}` (0700).
    ///
    /// Errors: the internal directories cannot be created or are unsafe.
    pub fn open(home: StateHome, processes: Arc<ProcessIdentity>) -> Result<Self, StoreError> {
        let dir = home.dir().as_fd().try_clone_to_owned().map_err(|e| StoreError::io(INTERNAL, "dup", e))?;
        let protocol = StoreProtocol::open(NativeFs, dir, processes)?;
        Ok(StateStore { home, protocol })
    }

    /// Opens (creating 0600 if absent) the lock file `name` in the store's own lock directory
    /// (`.proclease/locks/`, never inside a collection), for a kernel lock of the caller's.
    pub fn lock_file(&self, name: &str) -> std::io::Result<std::fs::File> {
        if !path::is_safe_name(name) {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "unsafe lock name"));
        }
        let fd = rustix::fs::openat(
            self.protocol.locks(),
            name,
            rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CREATE | rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::from_raw_mode(0o600),
        )?;
        Ok(std::fs::File::from(fd))
    }

    /// The store's protocol, for protocols built on it (the catalog lock).
    pub(crate) fn protocol(&self) -> &StoreProtocol<NativeFs, ProcessIdentity> {
        &self.protocol
    }

    /// The process identity the store judges writers with.
    pub(crate) fn processes(&self) -> &ProcessIdentity {
        self.protocol.kernel()
    }

    /// Benchmarks only: turns the reference's mutation claims off (`false`) or on, to measure
    /// what they cost. Without them a ghostget writing the same record at the same time can
    /// lose an update to proclease or the reverse; never turn them off on a real state home.
    #[doc(hidden)]
    pub fn benchmark_mutation_claims(&self, on: bool) {
        self.protocol.benchmark_mutation_claims(on);
    }

    /// The state home this store writes to.
    pub fn home(&self) -> &StateHome {
        &self.home
    }

    /// The file's text, or `None` when it or a parent directory is absent
    /// (`readPrivateStateFileIfPresent`, §3.3). The file must be a private, owned, regular file
    /// of at most `max_bytes`, unchanged while read, and UTF-8.
    pub fn read_if_present(&self, path: &str, max_bytes: u32) -> Result<Option<String>, StoreError> {
        self.protocol.read_if_present(path, max_bytes)
    }

    /// Creates the file with `content` unless it exists (`createPrivateJsonIfAbsent`, §3.3):
    /// `Ok(true)` when created, `Ok(false)` when a file was already there. Never overwrites.
    /// Missing parent directories are created (0700).
    pub fn create_if_absent(&self, path: &str, content: &str) -> Result<bool, StoreError> {
        self.protocol.create_if_absent(path, content)
    }

    /// Replaces the file with `content` only if its bytes hash to `expected_sha256` at the
    /// instant of the swap (`writePrivateJsonIfUnchanged`, §3.3): `Ok(false)` when the file is
    /// absent or differs.
    pub fn replace_if_unchanged(&self, path: &str, expected_sha256: &str, content: &str) -> Result<bool, StoreError> {
        self.protocol.replace_if_unchanged(path, expected_sha256, content)
    }

    /// [`Self::replace_if_unchanged`] without the collection's fsync: as atomic, and the new
    /// bytes synced before the swap, but a power loss or an OS crash may undo it (leaving an
    /// earlier complete version). Only for changes that such a crash makes harmless
    /// (`docs/durability.md`).
    pub fn replace_if_unchanged_lazily(&self, path: &str, expected_sha256: &str, content: &str) -> Result<bool, StoreError> {
        self.protocol.replace_if_unchanged_lazily(path, expected_sha256, content)
    }

    /// Removes the file only if its bytes hash to `expected_sha256` at the instant of removal
    /// (`removePrivateStateFileIfUnchanged`, §3.3): `Ok(false)` when absent or different.
    pub fn remove_if_unchanged(&self, path: &str, expected_sha256: &str) -> Result<bool, StoreError> {
        self.protocol.remove_if_unchanged(path, expected_sha256)
    }

    /// Creates (mode 0700) each missing directory of `path` and verifies the existing ones
    /// (owned, mode 0700, not a symbolic link); returns the identity of the last
    /// (`ensurePrivateStateDirectory`, §3.3).
    pub fn ensure_private_directory(&self, path: &str) -> Result<CollectionIdentity, StoreError> {
        self.protocol.ensure_private_directory(path)
    }

    /// Lists a collection directory; `None` when it (or a parent) is absent
    /// (`snapshotPrivateStateDirectory`, §3.3); see [`StoreProtocol::snapshot`].
    ///
    /// Errors: more than [`MAX_ENTRIES`] entries; an unsafe entry name; a sub-directory that is
    /// not owned with mode 0700.
    pub fn snapshot(&self, path: &str, recover_orphans: bool) -> Result<Option<CollectionSnapshot>, StoreError> {
        self.protocol.snapshot(path, recover_orphans)
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
        self.protocol.read_batch(path, names, max_bytes_per_file, max_total_bytes, expected)
    }
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

pub use proclease_protocols::state_store::{LEASING_LOCK, RECOVERY_LOCK};

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
pub fn failure(error: StoreError) -> Failure {
    error.failure()
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

    fn replace_if_unchanged_lazily(&mut self, path: &str, expected_sha256: &str, content: &str) -> Result<bool, proclease_core::effects::Failure> {
        self.store.replace_if_unchanged_lazily(path, expected_sha256, content).map_err(failure)
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

#[cfg(test)]
mod tests {
    use super::NativeFs;
    use super::arbitration::{self, ClaimKind};
    use super::mutation_claim::MutationClaim;
    use proclease_core::records::Owner;

    #[test]
    fn a_claim_text_is_byte_exact_and_read_back_only_when_exact() {
        let owner = Owner { pid: 4242, boot_id: "a".repeat(64), process_start_id: "b".repeat(64) };
        let claim = MutationClaim::for_leaf("active.json");
        let id = "3f1c9a52-8d2e-4b7a-9c1d-2e5f6a7b8c9d";
        let text = <MutationClaim as ClaimKind<NativeFs>>::content(&claim, id, &owner);
        assert_eq!(
            text,
            format!(
                "{{\"kind\":\"io-state-mutation-claim\",\"schemaVersion\":1,\"targetSha256\":\"7090835e861362df23825dadcaeccaa91ec32490e69ec9f97b7f74b3c43a797e\",\"claimId\":\"{id}\",\"pid\":4242,\"bootId\":\"{}\",\"processStartId\":\"{}\"}}\n",
                "a".repeat(64),
                "b".repeat(64)
            )
        );
        let owner_in = arbitration::owner_in::<NativeFs>;
        assert_eq!(owner_in(&claim, id, &text), Some(owner));
        assert_eq!(owner_in(&claim, id, text.trim_end()), None);
        assert_eq!(owner_in(&claim, "3f1c9a52-8d2e-4b7a-9c1d-2e5f6a7b8c9e", &text), None);
    }
}
