//! The effects an instance of the component gets through its imports: a state store, process
//! identity and entropy, each a `proclease-core` effect trait object.
//!
//! [`Effects::native`] wires the real ones (the cap-std state store, procfs process identity,
//! the OS random source). Tests and embedders substitute their own — an in-memory store, a
//! scripted process table, a fixed boot id — which is how liveness and boot-id seams reach the
//! component: through the imports, never through flags inside it.

use std::sync::Arc;

use proclease_core::effects::{
    BatchStatus, Catalog, Clock, InstalledPlugin, CollectionIdentity, CollectionSnapshot, DirectoryFacts, Entropy, Processes, Store, StoreFailure,
    Workspace, WorkspaceFailure,
};
use proclease_core::records::DirectoryIdentity;
use proclease_core::liveness::OwnerFacts;
use proclease_core::records::Owner;

use crate::plugin_catalog::PluginCatalog;
use crate::process_identity::ProcessIdentity;
use crate::state_store::{StateStore, StoreError};
use crate::workspace::{Workspace as GrantedWorkspace, WorkspaceError};

/// The effect implementations behind one instance's imports.
pub struct Effects {
    /// `state-store`.
    pub store: Box<dyn Store + Send>,
    /// `process-identity`.
    pub processes: Box<dyn Processes + Send>,
    /// `entropy`.
    pub entropy: Box<dyn Entropy + Send>,
    /// `workspace`.
    pub workspace: Box<dyn Workspace + Send>,
    /// `clock`.
    pub clock: Box<dyn Clock + Send>,
    /// `plugin-catalog`.
    pub catalog: Box<dyn Catalog + Send>,
}

impl Effects {
    /// The real effects: `store` (or none: every store call is refused with a message saying a
    /// state home is needed), this host's process identity, the OS random source, the system
    /// clock, and no workspace (every workspace call is refused; see [`Effects::with_workspace`]).
    pub fn native(store: Option<Arc<StateStore>>, processes: Arc<ProcessIdentity>) -> Effects {
        Effects {
            store: match store {
                Some(store) => Box::new(SharedStore(store)),
                None => Box::new(NoStore),
            },
            processes: Box::new(SharedProcesses(processes)),
            entropy: Box::new(OsEntropy),
            workspace: Box::new(NoWorkspace),
            clock: Box::new(SystemClock),
            catalog: Box::new(NoCatalog),
        }
    }

    /// The same effects with `catalog` as the plugin catalog.
    pub fn with_catalog(mut self, catalog: Arc<PluginCatalog>) -> Effects {
        self.catalog = Box::new(SharedCatalog(catalog));
        self
    }

    /// The same effects with directories under `workspace`'s granted roots.
    pub fn with_workspace(mut self, workspace: Arc<GrantedWorkspace>) -> Effects {
        self.workspace = Box::new(SharedWorkspace(workspace));
        self
    }
}

/// A granted workspace shared by several instances.
struct SharedWorkspace(Arc<GrantedWorkspace>);

fn workspace_failure(error: WorkspaceError) -> WorkspaceFailure {
    let message = error.to_string();
    match error {
        WorkspaceError::Refused { .. } => WorkspaceFailure::Refused(message),
        WorkspaceError::IdentityChanged { .. } => WorkspaceFailure::IdentityChanged(message),
        _ => WorkspaceFailure::Io(message),
    }
}

impl Workspace for SharedWorkspace {
    fn inspect(&mut self, path: &str) -> Result<Option<DirectoryFacts>, WorkspaceFailure> {
        self.0.inspect(path).map_err(workspace_failure)
    }

    fn remove_tree(&mut self, path: &str, expected: &DirectoryIdentity) -> Result<bool, WorkspaceFailure> {
        self.0.remove_tree(path, expected).map_err(workspace_failure)
    }

    fn create_private_directory(&mut self, path: &str) -> Result<Vec<String>, WorkspaceFailure> {
        self.0.create_private_directory(path).map_err(workspace_failure)
    }

    fn remove_empty_directory(&mut self, path: &str, expected: Option<&DirectoryIdentity>) -> Result<bool, WorkspaceFailure> {
        self.0.remove_empty_directory(path, expected).map_err(workspace_failure)
    }
}

/// The workspace of an instance that was granted no roots.
struct NoWorkspace;

const NO_WORKSPACE: &str = "no workspace roots were granted: give --workspace-root";

impl Workspace for NoWorkspace {
    fn inspect(&mut self, path: &str) -> Result<Option<DirectoryFacts>, WorkspaceFailure> {
        Err(WorkspaceFailure::Refused(format!("{path}: {NO_WORKSPACE}")))
    }

    fn remove_tree(&mut self, path: &str, _: &DirectoryIdentity) -> Result<bool, WorkspaceFailure> {
        Err(WorkspaceFailure::Refused(format!("{path}: {NO_WORKSPACE}")))
    }

    fn create_private_directory(&mut self, path: &str) -> Result<Vec<String>, WorkspaceFailure> {
        Err(WorkspaceFailure::Refused(format!("{path}: {NO_WORKSPACE}")))
    }

    fn remove_empty_directory(&mut self, path: &str, _: Option<&DirectoryIdentity>) -> Result<bool, WorkspaceFailure> {
        Err(WorkspaceFailure::Refused(format!("{path}: {NO_WORKSPACE}")))
    }
}

/// A plugin catalog shared by several instances.
struct SharedCatalog(Arc<PluginCatalog>);

impl Catalog for SharedCatalog {
    fn installed(&mut self, plugin_id: &str) -> Result<Option<InstalledPlugin>, String> {
        self.0.installed(plugin_id)
    }

    fn lock(&mut self) -> Result<(), String> {
        self.0.lock()
    }

    fn unlock(&mut self) {
        self.0.unlock()
    }
}

/// The catalog of an instance that was given none.
struct NoCatalog;

const NO_CATALOG: &str = "no plugin catalog: give --state-home (its provider-plugins/catalog.json) or --plugin-catalog";

impl Catalog for NoCatalog {
    fn installed(&mut self, _: &str) -> Result<Option<InstalledPlugin>, String> {
        Err(NO_CATALOG.into())
    }

    fn lock(&mut self) -> Result<(), String> {
        Err(NO_CATALOG.into())
    }

    fn unlock(&mut self) {}
}

/// The system's wall clock.
struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&mut self) -> u64 {
        let since_epoch = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX)
    }
}

/// A state store shared by several instances.
struct SharedStore(Arc<StateStore>);

fn failure(error: StoreError) -> StoreFailure {
    let message = error.to_string();
    match error {
        StoreError::Contended { .. } => StoreFailure::Contended(message),
        StoreError::Refused { .. } => StoreFailure::Refused(message),
        StoreError::Unsafe { .. } => StoreFailure::Unsafe(message),
        _ => StoreFailure::Io(message),
    }
}

impl Store for SharedStore {
    fn read_if_present(&mut self, path: &str, max_bytes: u32) -> Result<Option<String>, StoreFailure> {
        self.0.read_if_present(path, max_bytes).map_err(failure)
    }

    fn create_if_absent(&mut self, path: &str, content: &str) -> Result<bool, StoreFailure> {
        self.0.create_if_absent(path, content).map_err(failure)
    }

    fn replace_if_unchanged(&mut self, path: &str, expected_sha256: &str, content: &str) -> Result<bool, StoreFailure> {
        self.0.replace_if_unchanged(path, expected_sha256, content).map_err(failure)
    }

    fn remove_if_unchanged(&mut self, path: &str, expected_sha256: &str) -> Result<bool, StoreFailure> {
        self.0.remove_if_unchanged(path, expected_sha256).map_err(failure)
    }

    fn ensure_private_directory(&mut self, path: &str) -> Result<CollectionIdentity, StoreFailure> {
        self.0.ensure_private_directory(path).map_err(failure)
    }

    fn snapshot(&mut self, path: &str, recover_orphans: bool) -> Result<Option<CollectionSnapshot>, StoreFailure> {
        self.0.snapshot(path, recover_orphans).map_err(failure)
    }

    fn read_batch(
        &mut self,
        path: &str,
        names: &[String],
        max_bytes_per_file: u32,
        max_total_bytes: u32,
        expected: &CollectionIdentity,
    ) -> Result<Vec<(String, BatchStatus)>, StoreFailure> {
        self.0.read_batch(path, names, max_bytes_per_file, max_total_bytes, expected).map_err(failure)
    }
}

/// The store of an instance that was given no state home.
struct NoStore;

const NO_STORE: &str = "no state home: give --state-home or set PROCLEASE_STATE_HOME";

impl Store for NoStore {
    fn read_if_present(&mut self, _: &str, _: u32) -> Result<Option<String>, StoreFailure> {
        Err(StoreFailure::Refused(NO_STORE.into()))
    }

    fn create_if_absent(&mut self, _: &str, _: &str) -> Result<bool, StoreFailure> {
        Err(StoreFailure::Refused(NO_STORE.into()))
    }

    fn replace_if_unchanged(&mut self, _: &str, _: &str, _: &str) -> Result<bool, StoreFailure> {
        Err(StoreFailure::Refused(NO_STORE.into()))
    }

    fn remove_if_unchanged(&mut self, _: &str, _: &str) -> Result<bool, StoreFailure> {
        Err(StoreFailure::Refused(NO_STORE.into()))
    }

    fn ensure_private_directory(&mut self, _: &str) -> Result<CollectionIdentity, StoreFailure> {
        Err(StoreFailure::Refused(NO_STORE.into()))
    }

    fn snapshot(&mut self, _: &str, _: bool) -> Result<Option<CollectionSnapshot>, StoreFailure> {
        Err(StoreFailure::Refused(NO_STORE.into()))
    }

    fn read_batch(&mut self, _: &str, _: &[String], _: u32, _: u32, _: &CollectionIdentity) -> Result<Vec<(String, BatchStatus)>, StoreFailure> {
        Err(StoreFailure::Refused(NO_STORE.into()))
    }
}

/// Process identity shared by several instances (its caches too).
struct SharedProcesses(Arc<ProcessIdentity>);

impl Processes for SharedProcesses {
    fn current_boot_id(&mut self) -> Result<String, String> {
        self.0.current_boot_id().map_err(|e| e.0)
    }

    fn self_identity(&mut self) -> Result<Owner, String> {
        self.0.self_identity().map_err(|e| e.0)
    }

    fn capture(&mut self, pid: u64) -> Result<Owner, String> {
        self.0.capture(pid).map_err(|e| e.0)
    }

    fn probe(&mut self, owner: &Owner) -> Result<OwnerFacts, String> {
        self.0.probe(owner).map_err(|e| e.0)
    }
}

/// The operating system's random source.
struct OsEntropy;

impl Entropy for OsEntropy {
    fn random_bytes(&mut self, len: u32) -> Vec<u8> {
        let mut bytes = vec![0u8; len as usize];
        // A failing OS random source is unrecoverable for id generation; wasmtime turns a
        // host panic into a trap of this call, never a silent weak id.
        getrandom::fill(&mut bytes).expect("the operating system's random source failed");
        bytes
    }
}
