//! The reference's catalog mutation lock (spec §5) on this machine: the protocol is
//! `proclease_protocols::catalog_lock` (written once over the seam); this module runs it on the
//! native store and resolves the plugin store's physical path, which names the lock's claims.

pub use proclease_protocols::catalog_lock::{ALREADY_LOCKED, LOCK_NAME, STORE_DIRECTORIES, STORE_ROOT, lock_target, lock_text};

use crate::state_store::{NativeFs, StateStore};

/// A lock this process published ([`acquire`]), and the guard it holds with it.
pub(crate) struct HeldLock {
    lock: Option<proclease_protocols::catalog_lock::HeldLock<NativeFs>>,
    /// The kernel lock on `.proclease/locks/catalog-mutation.lock` (`docs/deviations.md` 30),
    /// unlocked when dropped, after the lock; `None` where it could not be opened (a read-only
    /// state home).
    guard: Option<std::fs::File>,
}

impl Drop for HeldLock {
    /// Unlocks the guard explicitly: closing it alone would leave it locked while a child
    /// another thread forked still holds the descriptor (until its exec), and the next
    /// acquisition here would be refused `already locked`.
    fn drop(&mut self) {
        if let Some(guard) = &self.guard {
            let _ = guard.unlock();
        }
    }
}

/// Acquires the catalog mutation lock of `store`'s state home (§5 step 3), failing fast
/// ([`proclease_protocols::catalog_lock::acquire`]), under the guard every proclease takes
/// (`docs/deviations.md` 30): held by another, the answer is `already locked` at once; taken,
/// what its last holder noted there and left behind (a trapped portable instance's claim or
/// lock, in any process) is taken over.
///
/// Errors: the protocol's, in the reference's words; the plugin store's root that cannot be
/// resolved.
pub(crate) fn acquire(store: &StateStore, now_ms: i64) -> Result<HeldLock, String> {
    use proclease_protocols::catalog_lock::{GUARD_LOCK, GUARD_NOTE_LENGTH, InProcess};
    use std::os::unix::fs::FileExt as _;

    let physical_root = || {
        use std::os::unix::ffi::OsStringExt as _;
        let physical = std::fs::canonicalize(store.home().path().join(STORE_ROOT)).map_err(|e| format!("{STORE_ROOT}: {e}"))?;
        Ok(physical.into_os_string().into_vec())
    };
    let guard = match store.lock_file(GUARD_LOCK) {
        Ok(file) => match file.try_lock() {
            Ok(()) => Some(file),
            Err(std::fs::TryLockError::WouldBlock) => return Err(ALREADY_LOCKED.into()),
            Err(std::fs::TryLockError::Error(e)) => return Err(format!(".proclease/locks/{GUARD_LOCK}: {e}")),
        },
        // Unopenable (a read-only state home, where the catalog lock cannot be published
        // either): the protocol's own error follows.
        Err(_) => None,
    };
    let lock = match &guard {
        Some(file) => {
            let mut previous = vec![0u8; GUARD_NOTE_LENGTH];
            let read = file.read_at(&mut previous, 0).unwrap_or(0);
            previous.truncate(read);
            let note = |bytes: &[u8]| {
                let _ = file.write_all_at(bytes, 0);
            };
            // `PluginCatalog` counts the lock process-wide and acquires under its mutex; the
            // guard excludes every other acquirer, this process's other hosts included.
            match proclease_protocols::catalog_lock::acquire(store.protocol(), physical_root, now_ms, InProcess::KernelGuard { previous: &previous, note: &note }) {
                Ok(lock) => lock,
                Err(refusal) => {
                    note(&proclease_protocols::catalog_lock::guard_note_cleared());
                    return Err(refusal);
                }
            }
        }
        None => proclease_protocols::catalog_lock::acquire(store.protocol(), physical_root, now_ms, InProcess::Counted)?,
    };
    Ok(HeldLock { lock: Some(lock), guard })
}

/// Releases `lock` (§5 step 5): removes exactly the inode this process published, then lets
/// the guard go.
///
/// Errors: `portable plugin catalog mutation lock changed before release` when the lock is gone
/// or is another inode (which is then left in place).
pub(crate) fn release(store: &StateStore, mut held: HeldLock) -> Result<(), String> {
    use std::os::unix::fs::FileExt as _;
    let released = held.lock.take().map_or(Ok(()), |lock| lock.release(&NativeFs, store.processes()));
    // Released: the note names nothing to take over any more. The guard is unlocked when
    // `held` drops, after this.
    if released.is_ok()
        && let Some(guard) = &held.guard
    {
        let _ = guard.write_all_at(&proclease_protocols::catalog_lock::guard_note_cleared(), 0);
    }
    released
}
