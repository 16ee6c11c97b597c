//! The `state-store` import's WIT glue: each function forwards to the instance's store effect
//! ([`Effects::store`](crate::effects::Effects::store)), converting with the shared layer.

use crate::bindings::proclease::lease::state_store as ss;
use crate::convert::{batch_to_wit, collection_identity_from_wit, collection_identity_to_wit, failure_to_wit, snapshot_to_wit};
use crate::runtime::HostState;

impl ss::Host for HostState {
    fn read_if_present(&mut self, path: String, max_bytes: u32) -> Result<ss::StoredFile, ss::Failure> {
        self.effects.store.read_if_present(&path, max_bytes).map(|text| ss::StoredFile { text }).map_err(failure_to_wit)
    }

    fn create_if_absent(&mut self, path: String, content: String) -> Result<bool, ss::Failure> {
        self.effects.store.create_if_absent(&path, &content).map_err(failure_to_wit)
    }

    fn replace_if_unchanged(&mut self, path: String, expected_sha256: String, content: String) -> Result<bool, ss::Failure> {
        self.effects.store.replace_if_unchanged(&path, &expected_sha256, &content).map_err(failure_to_wit)
    }

    fn replace_if_unchanged_lazily(&mut self, path: String, expected_sha256: String, content: String) -> Result<bool, ss::Failure> {
        self.effects.store.replace_if_unchanged_lazily(&path, &expected_sha256, &content).map_err(failure_to_wit)
    }

    fn remove_if_unchanged(&mut self, path: String, expected_sha256: String) -> Result<bool, ss::Failure> {
        self.effects.store.remove_if_unchanged(&path, &expected_sha256).map_err(failure_to_wit)
    }

    fn ensure_private_directory(&mut self, path: String) -> Result<ss::CollectionIdentity, ss::Failure> {
        self.effects.store.ensure_private_directory(&path).map(collection_identity_to_wit).map_err(failure_to_wit)
    }

    fn snapshot(&mut self, path: String, recover_orphans: bool) -> Result<ss::CollectionListing, ss::Failure> {
        Ok(ss::CollectionListing { snapshot: self.effects.store.snapshot(&path, recover_orphans).map_err(failure_to_wit)?.map(snapshot_to_wit) })
    }

    fn read_batch(
        &mut self,
        path: String,
        names: Vec<String>,
        max_bytes_per_file: u32,
        max_total_bytes: u32,
        expected: ss::CollectionIdentity,
    ) -> Result<Vec<ss::BatchEntry>, ss::Failure> {
        let expected = collection_identity_from_wit(expected);
        let entries = self.effects.store.read_batch(&path, &names, max_bytes_per_file, max_total_bytes, &expected).map_err(failure_to_wit)?;
        if let Some(served) = self.served_texts.as_mut() {
            for (name, status) in &entries {
                if let proclease_core::effects::BatchStatus::Present(text) = status {
                    served.insert(format!("{path}/{name}"), text.clone());
                }
            }
        }
        Ok(batch_to_wit(entries))
    }

    fn lock_leasing(&mut self) -> Result<ss::LeasingLock, ss::Failure> {
        self.effects.store.lock_leasing().map(|()| ss::LeasingLock { held: true }).map_err(failure_to_wit)
    }

    fn unlock_leasing(&mut self) {
        self.effects.store.unlock_leasing();
    }
}
