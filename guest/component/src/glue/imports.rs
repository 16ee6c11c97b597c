//! The effect traits of `proclease-core`, implemented over the component's WIT imports (the
//! conversions are the shared layer's, `wit/convert.rs`).

use alloc::string::String;
use alloc::vec::Vec;

use proclease_core::effects::{
    BatchStatus, Catalog, Clock, CollectionIdentity, CollectionSnapshot, DirectoryFacts, Entropy, Failure, FinishedRun, InstalledPlugin, PathKind, Processes, Store, Workspace,
};
use proclease_core::liveness::OwnerFacts;
use proclease_core::records::{DirectoryIdentity, Owner};

use super::bindings::proclease::lease::{clock, entropy, plugin_catalog, process_identity, state_store as ss, workspace as ws};
use crate::convert::{
    batch_from_wit, collection_identity_from_wit, collection_identity_to_wit, directory_facts_from_wit, directory_identity_to_wit, facts_from_wit, failure_from_wit,
    finished_run_from_wit, installed_from_wit, owner_from_wit, owner_to_wit, snapshot_from_wit,
};

/// The `state-store` import.
pub(crate) struct ImportedStore;

impl Store for ImportedStore {
    fn read_if_present(&mut self, path: &str, max_bytes: u32) -> Result<Option<String>, Failure> {
        ss::read_if_present(path, max_bytes).map(|file| file.text).map_err(failure_from_wit)
    }

    fn create_if_absent(&mut self, path: &str, content: &str) -> Result<bool, Failure> {
        ss::create_if_absent(path, content).map_err(failure_from_wit)
    }

    fn replace_if_unchanged(&mut self, path: &str, expected_sha256: &str, content: &str) -> Result<bool, Failure> {
        ss::replace_if_unchanged(path, expected_sha256, content).map_err(failure_from_wit)
    }

    fn replace_if_unchanged_lazily(&mut self, path: &str, expected_sha256: &str, content: &str) -> Result<bool, Failure> {
        ss::replace_if_unchanged_lazily(path, expected_sha256, content).map_err(failure_from_wit)
    }

    fn remove_if_unchanged(&mut self, path: &str, expected_sha256: &str) -> Result<bool, Failure> {
        ss::remove_if_unchanged(path, expected_sha256).map_err(failure_from_wit)
    }

    fn ensure_private_directory(&mut self, path: &str) -> Result<CollectionIdentity, Failure> {
        ss::ensure_private_directory(path).map(collection_identity_from_wit).map_err(failure_from_wit)
    }

    fn snapshot(&mut self, path: &str, recover_orphans: bool) -> Result<Option<CollectionSnapshot>, Failure> {
        Ok(ss::snapshot(path, recover_orphans).map_err(failure_from_wit)?.snapshot.map(snapshot_from_wit))
    }

    fn read_batch(
        &mut self,
        path: &str,
        names: &[String],
        max_bytes_per_file: u32,
        max_total_bytes: u32,
        expected: &CollectionIdentity,
    ) -> Result<Vec<(String, BatchStatus)>, Failure> {
        let expected = collection_identity_to_wit(expected.clone());
        Ok(batch_from_wit(ss::read_batch(path, names, max_bytes_per_file, max_total_bytes, &expected).map_err(failure_from_wit)?))
    }

    fn lock_leasing(&mut self) -> Result<(), Failure> {
        ss::lock_leasing().map(|_| ()).map_err(failure_from_wit)
    }

    fn unlock_leasing(&mut self) {
        ss::unlock_leasing();
    }
}

/// The `process-identity` import.
pub(crate) struct ImportedProcesses;

impl Processes for ImportedProcesses {
    fn current_boot_id(&mut self) -> Result<String, String> {
        process_identity::current_boot_id()
    }

    fn self_identity(&mut self) -> Result<Owner, String> {
        process_identity::self_identity().map(owner_from_wit)
    }

    fn capture(&mut self, pid: u64) -> Result<Owner, String> {
        process_identity::capture(pid).map(owner_from_wit)
    }

    fn probe(&mut self, recorded: &Owner) -> Result<OwnerFacts, String> {
        process_identity::probe(&owner_to_wit(recorded.clone())).map(facts_from_wit)
    }

    fn finished_run(&mut self, lease_id: &str) -> Result<Option<FinishedRun>, String> {
        process_identity::finished_run(lease_id).map(|entry| entry.outcome.map(finished_run_from_wit))
    }

    fn forget_run(&mut self, lease_id: &str) {
        process_identity::forget_run(lease_id)
    }
}

/// The `entropy` import.
pub(crate) struct ImportedEntropy;

impl Entropy for ImportedEntropy {
    fn random_bytes(&mut self, len: u32) -> Vec<u8> {
        entropy::random_bytes(len)
    }
}

/// The `workspace` import.
pub(crate) struct ImportedWorkspace;

impl Workspace for ImportedWorkspace {
    fn inspect(&mut self, path: &str) -> Result<Option<DirectoryFacts>, Failure> {
        Ok(ws::inspect(path).map_err(failure_from_wit)?.facts.map(directory_facts_from_wit))
    }

    fn remove_tree(&mut self, path: &str, expected: &DirectoryIdentity) -> Result<bool, Failure> {
        ws::remove_tree(path, &directory_identity_to_wit(expected.clone())).map_err(failure_from_wit)
    }

    fn create_private_directory(&mut self, path: &str) -> Result<Vec<String>, Failure> {
        ws::create_private_directory(path).map_err(failure_from_wit)
    }

    fn remove_empty_directory(&mut self, path: &str, expected: Option<&DirectoryIdentity>) -> Result<bool, Failure> {
        let expected = expected.cloned().map(directory_identity_to_wit);
        ws::remove_empty_directory(path, expected.as_ref()).map_err(failure_from_wit)
    }

    fn kind(&mut self, path: &str) -> Result<PathKind, Failure> {
        Ok(match ws::kind(path).map_err(failure_from_wit)? {
            ws::PathKind::Absent => PathKind::Absent,
            ws::PathKind::Directory => PathKind::Directory,
            ws::PathKind::SymbolicLink => PathKind::SymbolicLink,
            ws::PathKind::Other => PathKind::Other,
            ws::PathKind::Unreachable => PathKind::Unreachable,
        })
    }

    fn is_empty_directory(&mut self, path: &str) -> Result<bool, Failure> {
        ws::is_empty_directory(path).map_err(failure_from_wit)
    }
}

/// The `clock` import.
pub(crate) struct ImportedClock;

impl Clock for ImportedClock {
    fn now_ms(&mut self) -> u64 {
        clock::now_ms()
    }
}

/// The `plugin-catalog` import; the held lock levels are resources the host releases on drop.
#[derive(Default)]
pub(crate) struct ImportedCatalog {
    held: Vec<plugin_catalog::CatalogLock>,
}

impl Catalog for ImportedCatalog {
    fn installed(&mut self, plugin_id: &str) -> Result<Option<InstalledPlugin>, String> {
        Ok(plugin_catalog::installed(plugin_id)?.plugin.map(installed_from_wit))
    }

    fn lock(&mut self) -> Result<(), String> {
        self.held.push(plugin_catalog::lock()?);
        Ok(())
    }

    fn unlock(&mut self) {
        drop(self.held.pop());
    }
}
