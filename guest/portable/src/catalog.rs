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
//! Before it publishes its claim and its lock, an instance notes both in the guard's file
//! (`catalog_lock::guard_note`); the guard's next holder, in any process, takes over exactly
//! those if it finds them, for their publisher let the guard go without releasing them. Where
//! the host has no kernel locks (`unsupported`), a lock of this process is judged as any live
//! holder's: it refuses until this process exits.

use alloc::string::{String, ToString as _};
use alloc::vec::Vec;

use proclease_protocols::catalog_lock::{self, HeldLock, InProcess, STORE_ROOT};
use proclease_protocols::plugin_catalog;

use crate::bindings::proclease::lease::sys_fs;
use crate::bindings::proclease::lease::{clock, sys_kernel};
use crate::generated::exports::proclease::lease::plugin_catalog as pc;
use crate::store::{PortableStore, opened};
use crate::sys::{SysFs, SysKernel};

/// The catalog lock this instance holds (its guard within it) and how many levels are handed
/// out.
struct Held {
    lock: HeldLock<SysFs>,
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
            && let Some(Held { lock, .. }) = held.take()
            // A copy of this instance in a forked child never removes its parent's lock; its
            // guard goes all the same.
            && published_here(&lock)
        {
            let _ = lock.release(&SysFs, &SysKernel);
        }
    }
}

/// Whether `lock` was published by this process, not by the parent of a forked child that
/// runs a copy of this instance.
fn published_here(lock: &HeldLock<SysFs>) -> bool {
    lock.owner().pid == u64::from(sys_kernel::pid())
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
            if !published_here(&current.lock) {
                return Err(alloc::format!(
                    "{}: this instance holds the lock for pid {}, and was copied into a forked child (pid {}): make a host of the child's own",
                    catalog_lock::ALREADY_LOCKED,
                    current.lock.owner().pid,
                    sys_kernel::pid()
                ));
            }
            current.levels += 1;
            return Ok(pc::CatalogLock::new(CatalogLevel));
        }
        let store = opened().map_err(|e| e.to_string())?;
        let physical_root = || {
            let mut path: Vec<u8> = sys_fs::state_home_path();
            path.push(b'/');
            path.extend_from_slice(STORE_ROOT.as_bytes());
            Ok(path)
        };
        let now_ms = i64::try_from(clock::now_ms()).unwrap_or(i64::MAX);
        let lock = catalog_lock::acquire(store, physical_root, now_ms, InProcess::Instances)?;
        *held = Some(Held { lock, levels: 1 });
        Ok(pc::CatalogLock::new(CatalogLevel))
    }
}
