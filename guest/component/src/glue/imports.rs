//! The effect traits of `proclease-core`, implemented over the component's WIT imports.

use alloc::string::String;
use alloc::vec::Vec;

use proclease_core::effects::{
    BatchInvalid, BatchStatus, CollectionEntry, CollectionIdentity, CollectionSnapshot, Entropy, EntryKind, Processes, Store,
    StoreFailure,
};
use proclease_core::liveness::{OwnerFacts, ProcRead, ProcView, WitnessState};
use proclease_core::records::Owner;

use super::bindings::proclease::lease::{entropy, process_identity, state_store as ss};
use super::convert::{owner, owner_in};

/// The `state-store` import.
pub(crate) struct ImportedStore;

fn failure(e: ss::StoreError) -> StoreFailure {
    match e {
        ss::StoreError::Contended(m) => StoreFailure::Contended(m),
        ss::StoreError::Refused(m) => StoreFailure::Refused(m),
        ss::StoreError::Unsafe(m) => StoreFailure::Unsafe(m),
        ss::StoreError::Io(m) => StoreFailure::Io(m),
    }
}

fn identity(i: ss::CollectionIdentity) -> CollectionIdentity {
    CollectionIdentity { device: i.device, inode: i.inode }
}

impl Store for ImportedStore {
    fn read_if_present(&mut self, path: &str, max_bytes: u32) -> Result<Option<String>, StoreFailure> {
        ss::read_if_present(path, max_bytes).map_err(failure)
    }

    fn create_if_absent(&mut self, path: &str, content: &str) -> Result<bool, StoreFailure> {
        ss::create_if_absent(path, content).map_err(failure)
    }

    fn replace_if_unchanged(&mut self, path: &str, expected_sha256: &str, content: &str) -> Result<bool, StoreFailure> {
        ss::replace_if_unchanged(path, expected_sha256, content).map_err(failure)
    }

    fn remove_if_unchanged(&mut self, path: &str, expected_sha256: &str) -> Result<bool, StoreFailure> {
        ss::remove_if_unchanged(path, expected_sha256).map_err(failure)
    }

    fn ensure_private_directory(&mut self, path: &str) -> Result<CollectionIdentity, StoreFailure> {
        ss::ensure_private_directory(path).map(identity).map_err(failure)
    }

    fn snapshot(&mut self, path: &str, recover_orphans: bool) -> Result<Option<CollectionSnapshot>, StoreFailure> {
        let snapshot = ss::snapshot(path, recover_orphans).map_err(failure)?;
        Ok(snapshot.map(|s| CollectionSnapshot {
            identity: identity(s.identity),
            entries: s
                .entries
                .into_iter()
                .map(|e| CollectionEntry {
                    name: e.name,
                    kind: match e.kind {
                        ss::EntryKind::File => EntryKind::File,
                        ss::EntryKind::Directory => EntryKind::Directory,
                        ss::EntryKind::SymbolicLink => EntryKind::SymbolicLink,
                        ss::EntryKind::Other => EntryKind::Other,
                    },
                    identity: e.identity.map(identity),
                })
                .collect(),
        }))
    }

    fn read_batch(
        &mut self,
        path: &str,
        names: &[String],
        max_bytes_per_file: u32,
        max_total_bytes: u32,
        expected: &CollectionIdentity,
    ) -> Result<Vec<(String, BatchStatus)>, StoreFailure> {
        let expected = ss::CollectionIdentity { device: expected.device.clone(), inode: expected.inode.clone() };
        let entries = ss::read_batch(path, names, max_bytes_per_file, max_total_bytes, &expected).map_err(failure)?;
        Ok(entries
            .into_iter()
            .map(|e| {
                let status = match e.status {
                    ss::BatchStatus::Present(text) => BatchStatus::Present(text),
                    ss::BatchStatus::Absent => BatchStatus::Absent,
                    ss::BatchStatus::Invalid(reason) => BatchStatus::Invalid(match reason {
                        ss::BatchInvalidReason::UnsafeFile => BatchInvalid::UnsafeFile,
                        ss::BatchInvalidReason::Unreadable => BatchInvalid::Unreadable,
                        ss::BatchInvalidReason::FileByteBound => BatchInvalid::FileByteBound,
                        ss::BatchInvalidReason::AggregateByteBound => BatchInvalid::AggregateByteBound,
                        ss::BatchInvalidReason::ChangedDuringRead => BatchInvalid::ChangedDuringRead,
                        ss::BatchInvalidReason::InvalidUtf8 => BatchInvalid::InvalidUtf8,
                    }),
                };
                (e.name, status)
            })
            .collect())
    }
}

/// The `process-identity` import.
pub(crate) struct ImportedProcesses;

impl Processes for ImportedProcesses {
    fn current_boot_id(&mut self) -> Result<String, String> {
        process_identity::current_boot_id()
    }

    fn self_identity(&mut self) -> Result<Owner, String> {
        process_identity::self_identity().map(owner_in)
    }

    fn capture(&mut self, pid: u64) -> Result<Owner, String> {
        process_identity::capture(pid).map(owner_in)
    }

    fn probe(&mut self, recorded: &Owner) -> Result<OwnerFacts, String> {
        process_identity::probe(&owner(recorded.clone())).map(facts_in)
    }
}

fn witness_in(w: process_identity::WitnessState) -> WitnessState {
    match w {
        process_identity::WitnessState::Absent => WitnessState::Absent,
        process_identity::WitnessState::Held => WitnessState::Held,
        process_identity::WitnessState::Free => WitnessState::Free,
        process_identity::WitnessState::Untestable => WitnessState::Untestable,
    }
}

fn facts_in(f: process_identity::OwnerFacts) -> OwnerFacts {
    OwnerFacts {
        boot_id: f.boot_id,
        witness: witness_in(f.witness),
        recorded_pid_namespace: f.recorded_pid_namespace,
        spawned: witness_in(f.spawned),
        stat: match f.stat {
            process_identity::ProcRead::Stat(text) => ProcRead::Stat(text),
            process_identity::ProcRead::Missing => ProcRead::Missing,
            process_identity::ProcRead::Unreadable => ProcRead::Unreadable,
        },
        tasks: f.tasks,
        view: ProcView {
            pid_namespace: f.view.pid_namespace,
            boottime_offset_ns: f.view.boottime_offset_ns,
            clock_ticks_per_second: f.view.clock_ticks_per_second,
        },
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

fn workspace_failure(e: super::bindings::proclease::lease::workspace::WorkspaceError) -> proclease_core::effects::WorkspaceFailure {
    use super::bindings::proclease::lease::workspace::WorkspaceError as E;
    use proclease_core::effects::WorkspaceFailure as F;
    match e {
        E::Refused(m) => F::Refused(m),
        E::Io(m) => F::Io(m),
        E::IdentityChanged(m) => F::IdentityChanged(m),
    }
}

impl proclease_core::effects::Workspace for ImportedWorkspace {
    fn inspect(&mut self, path: &str) -> Result<Option<proclease_core::effects::DirectoryFacts>, proclease_core::effects::WorkspaceFailure> {
        let facts = super::bindings::proclease::lease::workspace::inspect(path).map_err(workspace_failure)?;
        Ok(facts.map(|f| proclease_core::effects::DirectoryFacts {
            canonical: f.canonical,
            is_directory: f.is_directory,
            owned: f.owned,
            mode: f.mode,
            identity: proclease_core::records::DirectoryIdentity {
                device: f.identity.device,
                inode: f.identity.inode,
                birthtime_ns: f.identity.birthtime_ns,
            },
        }))
    }

    fn remove_tree(
        &mut self,
        path: &str,
        expected: &proclease_core::records::DirectoryIdentity,
    ) -> Result<bool, proclease_core::effects::WorkspaceFailure> {
        let expected = super::bindings::proclease::lease::types::DirectoryIdentity {
            device: expected.device.clone(),
            inode: expected.inode.clone(),
            birthtime_ns: expected.birthtime_ns.clone(),
        };
        super::bindings::proclease::lease::workspace::remove_tree(path, &expected).map_err(workspace_failure)
    }

    fn create_private_directory(&mut self, path: &str) -> Result<Vec<String>, proclease_core::effects::WorkspaceFailure> {
        super::bindings::proclease::lease::workspace::create_private_directory(path).map_err(workspace_failure)
    }

    fn remove_empty_directory(
        &mut self,
        path: &str,
        expected: Option<&proclease_core::records::DirectoryIdentity>,
    ) -> Result<bool, proclease_core::effects::WorkspaceFailure> {
        let expected = expected.map(|e| super::bindings::proclease::lease::types::DirectoryIdentity {
            device: e.device.clone(),
            inode: e.inode.clone(),
            birthtime_ns: e.birthtime_ns.clone(),
        });
        super::bindings::proclease::lease::workspace::remove_empty_directory(path, expected.as_ref()).map_err(workspace_failure)
    }
}

/// The `clock` import.
pub(crate) struct ImportedClock;

impl proclease_core::effects::Clock for ImportedClock {
    fn now_ms(&mut self) -> u64 {
        super::bindings::proclease::lease::clock::now_ms()
    }
}

/// The `plugin-catalog` import; the held lock levels are resources the host releases on drop.
#[derive(Default)]
pub(crate) struct ImportedCatalog {
    held: Vec<super::bindings::proclease::lease::plugin_catalog::CatalogLock>,
}

impl proclease_core::effects::Catalog for ImportedCatalog {
    fn installed(&mut self, plugin_id: &str) -> Result<Option<proclease_core::effects::InstalledPlugin>, String> {
        let installed = super::bindings::proclease::lease::plugin_catalog::installed(plugin_id)?;
        Ok(installed.map(|p| proclease_core::effects::InstalledPlugin {
            plugin_id: p.plugin_id,
            version: p.version,
            host_api_version: p.host_api_version,
            bundle_sha256: p.bundle_sha256,
            manifest_sha256: p.manifest_sha256,
        }))
    }

    fn lock(&mut self) -> Result<(), String> {
        self.held.push(super::bindings::proclease::lease::plugin_catalog::lock()?);
        Ok(())
    }

    fn unlock(&mut self) {
        drop(self.held.pop());
    }
}
