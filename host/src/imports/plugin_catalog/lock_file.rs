//! The reference's catalog mutation lock (spec §5) on this machine: the protocol is
//! `proclease_protocols::catalog_lock` (written once over the seam); this module runs it on the
//! native store and resolves the plugin store's physical path, which names the lock's claims.

pub use proclease_protocols::catalog_lock::{ALREADY_LOCKED, LOCK_NAME, STORE_DIRECTORIES, STORE_ROOT, lock_target, lock_text};

use crate::state_store::{NativeFs, StateStore};

/// A lock this process published ([`acquire`]), with its guard.
pub(crate) type HeldLock = proclease_protocols::catalog_lock::HeldLock<NativeFs>;

/// Acquires the catalog mutation lock of `store`'s state home (§5 step 3), failing fast, under
/// the guard every proclease takes ([`proclease_protocols::catalog_lock::acquire`],
/// `docs/deviations.md` 30).
///
/// Errors: the protocol's, in the reference's words; the plugin store's root that cannot be
/// resolved.
pub(crate) fn acquire(store: &StateStore, now_ms: i64) -> Result<HeldLock, String> {
    let physical_root = || {
        use std::os::unix::ffi::OsStringExt as _;
        let physical = std::fs::canonicalize(store.home().path().join(STORE_ROOT)).map_err(|e| format!("{STORE_ROOT}: {e}"))?;
        Ok(physical.into_os_string().into_vec())
    };
    // `PluginCatalog` counts the lock process-wide and acquires under its mutex.
    proclease_protocols::catalog_lock::acquire(store.protocol(), physical_root, now_ms, proclease_protocols::catalog_lock::InProcess::Counted)
}

/// Releases `lock` (§5 step 5): removes exactly the inode this process published, then lets
/// the guard go.
///
/// Errors: `portable plugin catalog mutation lock changed before release` when the lock is gone
/// or is another inode (which is then left in place).
pub(crate) fn release(store: &StateStore, lock: HeldLock) -> Result<(), String> {
    lock.release(&NativeFs, store.processes())
}
