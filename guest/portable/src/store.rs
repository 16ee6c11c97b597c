//! The `state-store` export: each function runs the store's protocol
//! ([`StoreProtocol`]) on the state home the host granted (`state-home`), over [`SysFs`] and
//! [`SysKernel`], and converts with the conversions it shares with the component. The store is
//! opened at the first call that succeeds in opening it, and kept.

use alloc::format;
use alloc::string::{String, ToString as _};
use alloc::sync::Arc;
use alloc::vec::Vec;

use proclease_core::effects::{Failure, FailureKind};

use proclease_protocols::state_store::{LEASING_LOCK, RECOVERY_LOCK, StoreError, StoreProtocol};

use crate::bindings::proclease::lease::state_store as ss;
use crate::bindings::proclease::lease::sys_fs::Lock;
use crate::convert::{batch_to_wit, collection_identity_from_wit, collection_identity_to_wit, failure_to_wit, snapshot_to_wit};
use crate::sys::{LockFile, SysFs, SysKernel, Wait, Waited, wait_for};

/// The exports' implementation.
pub struct PortableStore;

crate::generated::export!(PortableStore with_types_in crate::generated);

type Store = StoreProtocol<SysFs, SysKernel>;

static STORE: spin::Once<Store> = spin::Once::new();

/// The lease-creation lock a caller took with `lock-leasing` (`Some(None)`: taken where the
/// host has no kernel locks).
static LEASING: spin::Mutex<Option<Option<Lock>>> = spin::Mutex::new(None);

/// The store on the granted state home, opened once.
fn store() -> Result<&'static Store, ss::Failure> {
    opened().map_err(wit)
}

/// The store on the granted state home, opened at the first call that succeeds and kept.
///
/// Errors: the store's, when the granted state home cannot be opened as one.
pub fn opened() -> Result<&'static Store, StoreError> {
    if let Some(store) = STORE.get() {
        return Ok(store);
    }
    let opened = StoreProtocol::open(SysFs, crate::bindings::proclease::lease::sys_fs::state_home(), Arc::new(SysKernel))?;
    Ok(STORE.call_once(|| opened))
}

fn wit(error: StoreError) -> ss::Failure {
    failure_to_wit(error.failure())
}

impl crate::bindings::proclease::lease::store_advice::Guest for PortableStore {
    fn creation_intents_left(path: String) -> Vec<String> {
        let Ok(store) = opened() else { return Vec::new() };
        let home = String::from_utf8_lossy(&crate::bindings::proclease::lease::sys_fs::state_home_path()).into_owned();
        store.creation_intents_left(&path, &home)
    }
}

impl ss::Guest for PortableStore {
    fn read_if_present(path: String, max_bytes: u32) -> Result<ss::StoredFile, ss::Failure> {
        Ok(ss::StoredFile { text: store()?.read_if_present(&path, max_bytes).map_err(wit)? })
    }

    fn create_if_absent(path: String, content: String) -> Result<bool, ss::Failure> {
        store()?.create_if_absent(&path, &content).map_err(wit)
    }

    fn replace_if_unchanged(path: String, expected_sha256: String, content: String) -> Result<bool, ss::Failure> {
        store()?.replace_if_unchanged(&path, &expected_sha256, &content).map_err(wit)
    }

    fn replace_if_unchanged_lazily(path: String, expected_sha256: String, content: String) -> Result<bool, ss::Failure> {
        store()?.replace_if_unchanged_lazily(&path, &expected_sha256, &content).map_err(wit)
    }

    fn remove_if_unchanged(path: String, expected_sha256: String) -> Result<bool, ss::Failure> {
        store()?.remove_if_unchanged(&path, &expected_sha256).map_err(wit)
    }

    fn ensure_private_directory(path: String) -> Result<ss::CollectionIdentity, ss::Failure> {
        store()?.ensure_private_directory(&path).map(collection_identity_to_wit).map_err(wit)
    }

    fn snapshot(path: String, recover_orphans: bool) -> Result<ss::CollectionListing, ss::Failure> {
        Ok(ss::CollectionListing { snapshot: store()?.snapshot(&path, recover_orphans).map_err(wit)?.map(snapshot_to_wit) })
    }

    fn read_batch(path: String, names: Vec<String>, max_bytes_per_file: u32, max_total_bytes: u32, expected: ss::CollectionIdentity) -> Result<Vec<ss::BatchEntry>, ss::Failure> {
        let expected = collection_identity_from_wit(expected);
        store()?.read_batch(&path, &names, max_bytes_per_file, max_total_bytes, &expected).map(batch_to_wit).map_err(wit)
    }

    /// Takes `.proclease/locks/directory-lease-creation.lock` until `unlock-leasing` (nothing
    /// when already held), waiting at most the host's bound (`sys-kernel.lock-wait-ns`);
    /// `held: false` where the host has no kernel locks.
    fn lock_leasing() -> Result<ss::LeasingLock, ss::Failure> {
        take_named_lock(&LEASING, LEASING_LOCK, "lock of the lease-creation lock").map(|held| ss::LeasingLock { held })
    }

    fn unlock_leasing() {
        release_leasing_lock();
    }
}

/// Releases the lease-creation lock `lock-leasing` took, if held (dropping the host's lock
/// handle releases the kernel lock).
pub fn release_leasing_lock() {
    LEASING.lock().take();
}

/// Takes the kernel lock `name` of `.proclease/locks/` into `slot` until it is emptied (nothing
/// when `slot` already holds it), waiting at most the host's bound (`sys-kernel.lock-wait-ns`)
/// and naming its holder (`wait_for`); whether a lock is held (false where the host has no
/// kernel locks). `what` names the system call's purpose in an I/O failure.
///
/// Errors: `contended` with the wait's words at the bound (given to `sys-kernel.lock-timed-out`
/// too); the store's I/O failure.
fn take_named_lock(slot: &spin::Mutex<Option<Option<Lock>>>, name: &str, what: &'static str) -> Result<bool, ss::Failure> {
    let mut slot = slot.lock();
    if let Some(held) = slot.as_ref() {
        return Ok(held.is_some());
    }
    let store = store()?;
    // Named by its absolute path, as the native host names it: which state home is blocked.
    let home = String::from_utf8_lossy(&crate::bindings::proclease::lease::sys_fs::state_home_path()).into_owned();
    let label = format!("{}/.proclease/locks/{name}", home.trim_end_matches('/'));
    let waited = Waited { label: &label, file: LockFile::Named(store.locks(), name.as_bytes()), behind: &|_| None };
    match wait_for(&waited, || store.locks().try_lock(name.as_bytes())) {
        Ok(Wait::Taken(lock)) => {
            let held = lock.is_some();
            *slot = Some(lock);
            Ok(held)
        }
        Ok(Wait::TimedOut(timeout)) => {
            let message = timeout.to_string();
            // The host keeps an operation's first timeout (exit status 5, naming the holder);
            // the failure says it, as the native host's does.
            crate::bindings::proclease::lease::sys_kernel::lock_timed_out(&message);
            Err(failure_to_wit(Failure { path: Some(label), ..Failure::new(FailureKind::Contended, message) }))
        }
        Err(e) => Err(wit(StoreError::io(&label, what, e))),
    }
}

/// The recovery turn `recovery-turn.take` took (`Some(None)`: taken where the host has no
/// kernel locks).
static RECOVERY_TURN: spin::Mutex<Option<Option<Lock>>> = spin::Mutex::new(None);

impl crate::bindings::proclease::lease::recovery_turn::Guest for PortableStore {
    /// Takes `.proclease/locks/directory-lease-recovery.lock` until `end`.
    fn take() -> Result<crate::bindings::proclease::lease::recovery_turn::Turn, ss::Failure> {
        take_named_lock(&RECOVERY_TURN, RECOVERY_LOCK, "lock of the recovery turn").map(|held| crate::bindings::proclease::lease::recovery_turn::Turn { held })
    }

    fn end() {
        RECOVERY_TURN.lock().take();
    }
}
