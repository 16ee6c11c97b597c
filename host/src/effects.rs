//! The effects an instance of the component gets through its imports: a state store, process
//! identity and entropy, each a `proclease-core` effect trait object.
//!
//! [`Effects::native`] wires the real ones (the cap-std state store, procfs process identity,
//! the OS random source). Tests and embedders substitute their own — an in-memory store, a
//! scripted process table, a fixed boot id — which is how liveness and boot-id seams reach the
//! component: through the imports, never through flags inside it.

use std::sync::Arc;

use proclease_core::effects::{
    BatchStatus, CollectionIdentity, CollectionSnapshot, Entropy, Processes, Store, StoreFailure,
};
use proclease_core::liveness::OwnerStatus;
use proclease_core::records::Owner;

use crate::process_identity::ProcessIdentity;
use crate::state_store::{StateStore, StoreError};

/// The effect implementations behind one instance's imports.
pub struct Effects {
    /// `state-store`.
    pub store: Box<dyn Store + Send>,
    /// `process-identity`.
    pub processes: Box<dyn Processes + Send>,
    /// `entropy`.
    pub entropy: Box<dyn Entropy + Send>,
}

impl Effects {
    /// The real effects: `store` (or none: every store call is refused with a message saying a
    /// state home is needed), this host's process identity, and the OS random source.
    pub fn native(store: Option<Arc<StateStore>>, processes: Arc<ProcessIdentity>) -> Effects {
        Effects {
            store: match store {
                Some(store) => Box::new(SharedStore(store)),
                None => Box::new(NoStore),
            },
            processes: Box::new(SharedProcesses(processes)),
            entropy: Box::new(OsEntropy),
        }
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

    fn owner_status(&mut self, owner: &Owner) -> Result<OwnerStatus, String> {
        self.0.owner_status(owner).map_err(|e| e.0)
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
