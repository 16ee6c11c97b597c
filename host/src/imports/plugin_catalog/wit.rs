//! The `plugin-catalog` import's WIT glue: the installed identity and the catalog lock, each
//! level of which is a `catalog-lock` resource the component drops to release it.

use wasmtime::component::Resource;

use crate::bindings::proclease::lease::plugin_catalog as pc;
use crate::convert::installed_to_wit;
use crate::runtime::HostState;

/// The most levels of the catalog lock one instance may hold at once.
pub(crate) const MAX_CATALOG_LOCK_LEVELS: usize = 64;

impl pc::HostCatalogLock for HostState {
    fn drop(&mut self, lock: Resource<pc::CatalogLock>) -> wasmtime::Result<()> {
        // Each resource is one level of the lock; dropping it (the guest's `unlock`, or the
        // instance going away) releases that level.
        if self.catalog_levels.remove(&lock.rep()) {
            self.effects.catalog.unlock();
        }
        Ok(())
    }
}

impl pc::Host for HostState {
    fn installed(&mut self, plugin_id: String) -> Result<pc::Installation, String> {
        Ok(pc::Installation { plugin: self.effects.catalog.installed(&plugin_id)?.map(installed_to_wit) })
    }

    fn lock(&mut self) -> Result<Resource<pc::CatalogLock>, String> {
        // The lease algorithms nest the lock at most twice; a component taking it without end
        // would grow the host's memory until its deadline.
        if self.catalog_levels.len() >= MAX_CATALOG_LOCK_LEVELS {
            return Err(format!("portable plugin catalog lock is already held {MAX_CATALOG_LOCK_LEVELS} times over by this component"));
        }
        self.effects.catalog.lock()?;
        self.next_catalog_level += 1;
        let rep = self.next_catalog_level;
        self.catalog_levels.insert(rep);
        Ok(Resource::new_own(rep))
    }
}
