//! The `plugin-catalog` export: the state home's catalog file and the reference's catalog
//! mutation lock (spec §5), run by `proclease_protocols::{plugin_catalog, catalog_lock}` on the
//! store the host granted, over [`SysFs`] and [`SysKernel`] — the same protocol the native host
//! runs, so ghostget, the native host and every runtime that loads the artifact exclude each
//! other.
//!
//! **Within one process** (`docs/deviations.md` 30). The lock is re-entrant within this instance
//! (a count of the levels handed out). Before this instance acquires it, it takes a kernel lock
//! of its own, `.proclease/locks/catalog-mutation.lock` (one attempt: held means another
//! instance, here or in another process, holds or is taking the catalog lock, and the answer is
//! the reference's `portable plugin catalog mutation is already locked`), and keeps it while it
//! holds the catalog lock. So another instance of this process never shares the lock, and a
//! lock or claim recorded with this process's identity while the guard is free was left by an
//! instance that no longer runs (a trap: its host released its handles) and is taken over.
//! Where the host has no kernel locks (`unsupported`), such a lock is judged as any live
//! holder's: it refuses until this process exits.

use alloc::string::{String, ToString as _};
use alloc::vec::Vec;

use proclease_protocols::catalog_lock::{self, HeldLock, InProcess, STORE_ROOT};
use proclease_protocols::plugin_catalog;

use crate::bindings::proclease::lease::clock;
use crate::bindings::proclease::lease::sys_fs::{self, Lock, LockAttempt};
use crate::generated::exports::proclease::lease::plugin_catalog as pc;
use crate::store::{PortableStore, opened};
use crate::sys::{SysFs, SysKernel};

/// The guard's file in the store's `.proclease/locks/`.
pub const GUARD_LOCK: &str = "catalog-mutation.lock";

/// The catalog lock this instance holds: the lock file it published, its guard (`None` where
/// the host has no kernel locks), and how many levels are handed out.
struct Held {
    lock: HeldLock<SysFs>,
    guard: Option<Lock>,
    levels: usize,
}

static HELD: spin::Mutex<Option<Held>> = spin::Mutex::new(None);

/// One level of the lock, released when the component drops it.
pub struct CatalogLevel;

impl pc::GuestCatalogLock for CatalogLevel {}

impl Drop for CatalogLevel {
    /// Releases one level; the last removes exactly the lock file this instance published (a
    /// lock another process removed or replaced meanwhile is left as found), then the guard.
    fn drop(&mut self) {
        let mut held = HELD.lock();
        let Some(current) = held.as_mut() else { return };
        current.levels -= 1;
        if current.levels == 0
            && let Some(Held { lock, guard, .. }) = held.take()
        {
            let _ = lock.release(&SysFs, &SysKernel);
            drop(guard);
        }
    }
}

impl pc::Guest for PortableStore {
    type CatalogLock = CatalogLevel;

    fn installed(plugin_id: String) -> Result<pc::Installation, String> {
        let store = opened().map_err(|e| e.to_string())?;
        let plugin = plugin_catalog::installed_in_state_home(store, &plugin_id)?;
        Ok(pc::Installation {
            plugin: plugin.map(|p| pc::InstalledPlugin {
                plugin_id: p.plugin_id,
                version: p.version,
                host_api_version: p.host_api_version,
                bundle_sha256: p.bundle_sha256,
                manifest_sha256: p.manifest_sha256,
            }),
        })
    }

    fn lock() -> Result<pc::CatalogLock, String> {
        let mut held = HELD.lock();
        if let Some(current) = held.as_mut() {
            current.levels += 1;
            return Ok(pc::CatalogLock::new(CatalogLevel));
        }
        let store = opened().map_err(|e| e.to_string())?;
        let guard = match store.locks().try_lock(GUARD_LOCK.as_bytes()) {
            Ok(LockAttempt::Taken(lock)) => Some(lock),
            Ok(LockAttempt::Unsupported) => None,
            Ok(LockAttempt::Held) => return Err(catalog_lock::ALREADY_LOCKED.into()),
            Err(code) => {
                let error = proclease_protocols::seam::Errno::from_raw(i32::from(code));
                return Err(alloc::format!(".proclease/locks/{GUARD_LOCK}: {error}"));
            }
        };
        let in_process = if guard.is_some() { InProcess::KernelGuard } else { InProcess::Nothing };
        let physical_root = || {
            let mut path: Vec<u8> = sys_fs::state_home_path();
            path.push(b'/');
            path.extend_from_slice(STORE_ROOT.as_bytes());
            Ok(path)
        };
        let now_ms = i64::try_from(clock::now_ms()).unwrap_or(i64::MAX);
        let lock = catalog_lock::acquire(store, physical_root, now_ms, in_process)?;
        *held = Some(Held { lock, guard, levels: 1 });
        Ok(pc::CatalogLock::new(CatalogLevel))
    }
}
