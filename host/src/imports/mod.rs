//! The component's imports, one module per WIT interface (the way wasmtime's WASI host is laid
//! out): each holds the native implementation of its interface, the adapter that serves the
//! component's effect trait from it (`Shared…`), and its WIT glue (`wit.rs`: `impl Host for
//! HostState`, forwarding each function to the instance's [`Effects`]).
//!
//! [`Effects`] says which implementation serves each import of one instance. The facade
//! ([`crate::Host`]) wires the real ones; tests and embedders substitute their own — an
//! in-memory store, a scripted process table, a fixed boot id — which is how liveness and
//! boot-id seams reach the component: through the imports, never through flags inside it.

use std::sync::Arc;

use proclease_core::effects::{
    BatchStatus, Catalog, Clock, CollectionIdentity, CollectionSnapshot, DirectoryFacts, Entropy, Failure, InstalledPlugin, Processes, Store, Workspace,
};
use proclease_core::records::DirectoryIdentity;

pub mod clock;
pub mod cluster;
pub mod entropy;
pub(crate) mod fsops;
pub mod lock_wait;
pub mod plugin_catalog;
pub mod process_identity;
pub mod seam;
pub mod state_store;
pub mod workspace;

use crate::bindings::proclease::lease::types;
use crate::runtime::HostState;

impl types::Host for HostState {}

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
    /// clock, and no workspace or catalog (every call is refused; see
    /// [`Effects::with_workspace`], [`Effects::with_catalog`]).
    pub fn native(store: Option<Arc<state_store::StateStore>>, processes: Arc<process_identity::ProcessIdentity>) -> Effects {
        Effects {
            store: match store {
                Some(store) => Box::new(state_store::SharedStore::new(store)),
                None => Box::new(NoStore),
            },
            processes: Box::new(process_identity::SharedProcesses(processes)),
            entropy: Box::new(entropy::OsEntropy),
            workspace: Box::new(NoWorkspace),
            clock: Box::new(clock::SystemClock),
            catalog: Box::new(NoCatalog),
        }
    }

    /// Effects that serve nothing: every store, process, workspace and catalog call is refused
    /// (the clock and the random source stay). What an idle pooled instance holds between two
    /// uses, so that it keeps no state home, descriptor or process table of its last user.
    pub(crate) fn detached() -> Effects {
        Effects {
            store: Box::new(NoStore),
            processes: Box::new(NoProcesses),
            entropy: Box::new(entropy::OsEntropy),
            workspace: Box::new(NoWorkspace),
            clock: Box::new(clock::SystemClock),
            catalog: Box::new(NoCatalog),
        }
    }

    /// The same effects with `catalog` as the plugin catalog.
    pub fn with_catalog(mut self, catalog: Arc<plugin_catalog::PluginCatalog>) -> Effects {
        self.catalog = Box::new(plugin_catalog::SharedCatalog(catalog));
        self
    }

    /// The same effects with directories under `workspace`'s granted roots.
    pub fn with_workspace(mut self, workspace: Arc<workspace::Workspace>) -> Effects {
        self.workspace = Box::new(workspace::SharedWorkspace(workspace));
        self
    }
}

/// The workspace of an instance that was granted no roots.
struct NoWorkspace;

const NO_WORKSPACE: &str = "no workspace roots were granted: give `--workspace-root DIR` (command line) or `HostBuilder::workspace_root(DIR)` (library)";

impl Workspace for NoWorkspace {
    fn inspect(&mut self, path: &str) -> Result<Option<DirectoryFacts>, Failure> {
        Err(Failure::refused(format!("{path}: {NO_WORKSPACE}")))
    }

    fn remove_tree(&mut self, path: &str, _: &DirectoryIdentity) -> Result<bool, Failure> {
        Err(Failure::refused(format!("{path}: {NO_WORKSPACE}")))
    }

    fn create_private_directory(&mut self, path: &str) -> Result<Vec<String>, Failure> {
        Err(Failure::refused(format!("{path}: {NO_WORKSPACE}")))
    }

    fn remove_empty_directory(&mut self, path: &str, _: Option<&DirectoryIdentity>) -> Result<bool, Failure> {
        Err(Failure::refused(format!("{path}: {NO_WORKSPACE}")))
    }

    fn kind(&mut self, path: &str) -> Result<proclease_core::effects::PathKind, Failure> {
        Err(Failure::refused(format!("{path}: {NO_WORKSPACE}")))
    }

    fn is_empty_directory(&mut self, path: &str) -> Result<bool, Failure> {
        Err(Failure::refused(format!("{path}: {NO_WORKSPACE}")))
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

/// The process table of an idle pooled instance ([`Effects::detached`]).
struct NoProcesses;

const NO_PROCESSES: &str = "this instance is idle: it was given no process identity";

impl Processes for NoProcesses {
    fn current_boot_id(&mut self) -> Result<String, String> {
        Err(NO_PROCESSES.into())
    }

    fn self_identity(&mut self) -> Result<proclease_core::records::Owner, String> {
        Err(NO_PROCESSES.into())
    }

    fn capture(&mut self, _: u64) -> Result<proclease_core::records::Owner, String> {
        Err(NO_PROCESSES.into())
    }

    fn probe(&mut self, _: &proclease_core::records::Owner) -> Result<proclease_core::liveness::OwnerFacts, String> {
        Err(NO_PROCESSES.into())
    }
}

/// The store of an instance that was given no state home.
struct NoStore;

const NO_STORE: &str = "no state home: give --state-home or set PROCLEASE_STATE_HOME";

impl Store for NoStore {
    fn read_if_present(&mut self, _: &str, _: u32) -> Result<Option<String>, Failure> {
        Err(Failure::refused(NO_STORE))
    }

    fn create_if_absent(&mut self, _: &str, _: &str) -> Result<bool, Failure> {
        Err(Failure::refused(NO_STORE))
    }

    fn replace_if_unchanged(&mut self, _: &str, _: &str, _: &str) -> Result<bool, Failure> {
        Err(Failure::refused(NO_STORE))
    }

    fn remove_if_unchanged(&mut self, _: &str, _: &str) -> Result<bool, Failure> {
        Err(Failure::refused(NO_STORE))
    }

    fn ensure_private_directory(&mut self, _: &str) -> Result<CollectionIdentity, Failure> {
        Err(Failure::refused(NO_STORE))
    }

    fn snapshot(&mut self, _: &str, _: bool) -> Result<Option<CollectionSnapshot>, Failure> {
        Err(Failure::refused(NO_STORE))
    }

    fn read_batch(&mut self, _: &str, _: &[String], _: u32, _: u32, _: &CollectionIdentity) -> Result<Vec<(String, BatchStatus)>, Failure> {
        Err(Failure::refused(NO_STORE))
    }
}
