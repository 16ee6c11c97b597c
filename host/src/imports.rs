//! The component's imports, one module per WIT interface, each a plain trait impl that
//! forwards to the instance's [`Effects`](crate::effects::Effects) with type conversions only.

use proclease_core::effects::{BatchInvalid, BatchStatus, CollectionIdentity, EntryKind, StoreFailure};

use wasmtime::component::Resource;

use crate::bindings::proclease::lease::{clock, entropy, plugin_catalog, process_identity, state_store as ss, types as t, workspace as ws};
use crate::convert;
use crate::runtime::HostState;

impl t::Host for HostState {}

fn store_error(failure: StoreFailure) -> ss::StoreError {
    match failure {
        StoreFailure::Contended(m) => ss::StoreError::Contended(m),
        StoreFailure::Refused(m) => ss::StoreError::Refused(m),
        StoreFailure::Unsafe(m) => ss::StoreError::Unsafe(m),
        StoreFailure::Io(m) => ss::StoreError::Io(m),
    }
}

fn identity(i: CollectionIdentity) -> ss::CollectionIdentity {
    ss::CollectionIdentity { device: i.device, inode: i.inode }
}

impl ss::Host for HostState {
    fn read_if_present(&mut self, path: String, max_bytes: u32) -> Result<Option<String>, ss::StoreError> {
        self.effects.store.read_if_present(&path, max_bytes).map_err(store_error)
    }

    fn create_if_absent(&mut self, path: String, content: String) -> Result<bool, ss::StoreError> {
        self.effects.store.create_if_absent(&path, &content).map_err(store_error)
    }

    fn replace_if_unchanged(&mut self, path: String, expected_sha256: String, content: String) -> Result<bool, ss::StoreError> {
        self.effects.store.replace_if_unchanged(&path, &expected_sha256, &content).map_err(store_error)
    }

    fn remove_if_unchanged(&mut self, path: String, expected_sha256: String) -> Result<bool, ss::StoreError> {
        self.effects.store.remove_if_unchanged(&path, &expected_sha256).map_err(store_error)
    }

    fn ensure_private_directory(&mut self, path: String) -> Result<ss::CollectionIdentity, ss::StoreError> {
        self.effects.store.ensure_private_directory(&path).map(identity).map_err(store_error)
    }

    fn snapshot(&mut self, path: String, recover_orphans: bool) -> Result<Option<ss::CollectionSnapshot>, ss::StoreError> {
        let snapshot = self.effects.store.snapshot(&path, recover_orphans).map_err(store_error)?;
        Ok(snapshot.map(|s| ss::CollectionSnapshot {
            identity: identity(s.identity),
            entries: s
                .entries
                .into_iter()
                .map(|e| ss::CollectionEntry {
                    name: e.name,
                    kind: match e.kind {
                        EntryKind::File => ss::EntryKind::File,
                        EntryKind::Directory => ss::EntryKind::Directory,
                        EntryKind::SymbolicLink => ss::EntryKind::SymbolicLink,
                        EntryKind::Other => ss::EntryKind::Other,
                    },
                    identity: e.identity.map(identity),
                })
                .collect(),
        }))
    }

    fn read_batch(
        &mut self,
        path: String,
        names: Vec<String>,
        max_bytes_per_file: u32,
        max_total_bytes: u32,
        expected: ss::CollectionIdentity,
    ) -> Result<Vec<ss::BatchEntry>, ss::StoreError> {
        let expected = CollectionIdentity { device: expected.device, inode: expected.inode };
        let entries = self
            .effects
            .store
            .read_batch(&path, &names, max_bytes_per_file, max_total_bytes, &expected)
            .map_err(store_error)?;
        Ok(entries
            .into_iter()
            .map(|(name, status)| ss::BatchEntry {
                name,
                status: match status {
                    BatchStatus::Present(text) => ss::BatchStatus::Present(text),
                    BatchStatus::Absent => ss::BatchStatus::Absent,
                    BatchStatus::Invalid(reason) => ss::BatchStatus::Invalid(match reason {
                        BatchInvalid::UnsafeFile => ss::BatchInvalidReason::UnsafeFile,
                        BatchInvalid::Unreadable => ss::BatchInvalidReason::Unreadable,
                        BatchInvalid::FileByteBound => ss::BatchInvalidReason::FileByteBound,
                        BatchInvalid::AggregateByteBound => ss::BatchInvalidReason::AggregateByteBound,
                        BatchInvalid::ChangedDuringRead => ss::BatchInvalidReason::ChangedDuringRead,
                        BatchInvalid::InvalidUtf8 => ss::BatchInvalidReason::InvalidUtf8,
                    }),
                },
            })
            .collect())
    }
}

impl process_identity::Host for HostState {
    fn current_boot_id(&mut self) -> Result<String, String> {
        self.effects.processes.current_boot_id()
    }

    fn self_identity(&mut self) -> Result<t::Owner, String> {
        self.effects.processes.self_identity().map(convert::owner_out)
    }

    fn capture(&mut self, pid: u64) -> Result<t::Owner, String> {
        self.effects.processes.capture(pid).map(convert::owner_out)
    }

    fn probe(&mut self, owner: t::Owner) -> Result<process_identity::OwnerFacts, String> {
        self.effects.processes.probe(&convert::owner(owner)).map(convert::facts_out)
    }
}

impl entropy::Host for HostState {
    fn random_bytes(&mut self, len: u32) -> Vec<u8> {
        // Bounded: ids need 16 bytes; a guest asking for more than 4 KiB gets 4 KiB.
        self.effects.entropy.random_bytes(len.min(4096))
    }
}

impl ws::Host for HostState {
    fn inspect(&mut self, path: String) -> Result<Option<ws::DirectoryFacts>, ws::WorkspaceError> {
        let facts = self.effects.workspace.inspect(&path).map_err(workspace_error)?;
        Ok(facts.map(|f| ws::DirectoryFacts {
            canonical: f.canonical,
            is_directory: f.is_directory,
            owned: f.owned,
            mode: f.mode,
            identity: convert::directory_identity_out(f.identity),
        }))
    }

    fn remove_tree(&mut self, path: String, expected: t::DirectoryIdentity) -> Result<bool, ws::WorkspaceError> {
        let expected = convert::directory_identity(expected);
        self.effects.workspace.remove_tree(&path, &expected).map_err(workspace_error)
    }

    fn create_private_directory(&mut self, path: String) -> Result<Vec<String>, ws::WorkspaceError> {
        self.effects.workspace.create_private_directory(&path).map_err(workspace_error)
    }

    fn remove_empty_directory(&mut self, path: String, expected: Option<t::DirectoryIdentity>) -> Result<bool, ws::WorkspaceError> {
        let expected = expected.map(convert::directory_identity);
        self.effects.workspace.remove_empty_directory(&path, expected.as_ref()).map_err(workspace_error)
    }
}

fn workspace_error(failure: proclease_core::effects::WorkspaceFailure) -> ws::WorkspaceError {
    use proclease_core::effects::WorkspaceFailure as F;
    match failure {
        F::Refused(m) => ws::WorkspaceError::Refused(m),
        F::Io(m) => ws::WorkspaceError::Io(m),
        F::IdentityChanged(m) => ws::WorkspaceError::IdentityChanged(m),
    }
}

impl clock::Host for HostState {
    fn now_ms(&mut self) -> u64 {
        self.effects.clock.now_ms()
    }
}

/// The most levels of the catalog lock one instance may hold at once.
pub(crate) const MAX_CATALOG_LOCK_LEVELS: usize = 64;

impl plugin_catalog::HostCatalogLock for HostState {
    fn drop(&mut self, lock: Resource<plugin_catalog::CatalogLock>) -> wasmtime::Result<()> {
        // Each resource is one level of the lock; dropping it (the guest's `unlock`, or the
        // instance going away) releases that level.
        if self.catalog_levels.remove(&lock.rep()) {
            self.effects.catalog.unlock();
        }
        Ok(())
    }
}

impl plugin_catalog::Host for HostState {
    fn installed(&mut self, plugin_id: String) -> Result<Option<plugin_catalog::InstalledPlugin>, String> {
        let installed = self.effects.catalog.installed(&plugin_id)?;
        Ok(installed.map(|p| plugin_catalog::InstalledPlugin {
            plugin_id: p.plugin_id,
            version: p.version,
            host_api_version: p.host_api_version,
            bundle_sha256: p.bundle_sha256,
            manifest_sha256: p.manifest_sha256,
        }))
    }

    fn lock(&mut self) -> Result<Resource<plugin_catalog::CatalogLock>, String> {
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
