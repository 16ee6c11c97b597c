//! Cluster mode (`docs/cluster.md`): the export admission and the plugin invocation leases kept
//! in etcd and shared by several machines, every other record in this machine's state home.
//!
//! A [`Host`](crate::Host) built with [`HostBuilder::store`](crate::HostBuilder::store)
//! (`etcd://…`) holds a [`Cluster`]: the etcd store, and this process's presence session,
//! opened just before its first write to etcd (so that no record of this process is ever in etcd
//! while it is not registered). A process identity registers once, so the session belongs to the
//! process, shared by its hosts on that prefix, until it exits or calls [`end_presence`]; a
//! lapsed session is final too (restart the process, as client-go's leader election exits on
//! losing its lease). Its [`ClusterStore`] serves the
//! component's `state-store` import: the two shared collections go to etcd, fenced by the
//! session; everything else (directory leases, creation intents, the plugin catalog, mutation
//! claims and locks) stays in the local file store — a working directory lives on one machine.
//!
//! A process of another boot id is judged by its presence in etcd (registered: alive; absent:
//! gone; etcd unreachable: unknown), through the registry the host's
//! [`ProcessIdentity`](crate::process_identity::ProcessIdentity) was given.

use std::time::Duration;

/// The default TTL of a presence session: how long etcd keeps a crashed owner's presence (and
/// so its leases) before other machines may take over (`docs/cluster.md`).
pub const DEFAULT_TTL: Duration = Duration::from_secs(10);

mod address;
#[cfg(feature = "cluster")]
pub mod epoch;
#[cfg(feature = "cluster")]
pub mod fencing;
#[cfg(feature = "cluster")]
pub mod presence;
#[cfg(feature = "cluster")]
pub mod queue;
pub mod self_fencing;

pub use address::{
    CA_VARIABLE, CERT_VARIABLE, COMMAND_TIMEOUT_VARIABLE, ClusterError, DIAL_TIMEOUT_VARIABLE, EtcdAddress, EtcdTimeouts, EtcdTlsFiles, KEY_VARIABLE, PASSWORD_FILE_VARIABLE,
    PASSWORD_VARIABLE, STORE_VARIABLE, StoreAddress, USER_VARIABLE, password_from_environment, take_password_from_environment, without_credentials,
};

/// The environment variable an exclusive run's command gets beside its fencing token: the store
/// that `proclease fence check` asks — the etcd address (`etcd://…`) in cluster mode, `file:`
/// and the state home's absolute path otherwise ([`crate::api::fencing::FILE_PREFIX`]).
pub const FENCING_STORE_VARIABLE: &str = "PROCLEASE_FENCING_STORE";

/// What [`check_fence`] found of a fencing token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fence {
    /// The token's holder still holds the export admission.
    Current {
        /// The holder's (the supervisor's) pid, on its machine.
        holder_pid: u64,
    },
    /// It does not, and why: released, or held by a later holder.
    Stale(String),
}

#[cfg(feature = "cluster")]
pub(crate) use enabled::shared;
#[cfg(feature = "cluster")]
pub use enabled::{Cluster, ClusterStore, check_fence, end_presence};

#[cfg(feature = "cluster")]
mod enabled {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use proclease_core::effects::{BatchStatus, CollectionIdentity, CollectionSnapshot, Failure, Store};

    use super::ClusterError;
    use crate::cluster::presence::PresenceSession;
    use crate::process_identity::ProcessIdentity;
    use crate::state_store::etcd::EtcdStore;
    use crate::state_store::{StateStore, StoreError, failure};

    /// The presence sessions of this process, by `HOST:PORT/PREFIX`: a process identity
    /// registers once, so its session lives as long as the process (or until [`end_presence`]),
    /// shared by every host of the process on that prefix.
    static SESSIONS: Mutex<std::collections::BTreeMap<String, Arc<PresenceSession>>> = Mutex::new(std::collections::BTreeMap::new());

    /// Ends this process's presence on every cluster: revokes each session (other machines see
    /// this process gone at once instead of a TTL after it exits) once no host uses it any more.
    /// For a process about to exit — `proclease` calls it before it does; a later write to etcd
    /// from this process fails (an identity registers once).
    pub fn end_presence() {
        let sessions = std::mem::take(&mut *SESSIONS.lock().unwrap_or_else(|p| p.into_inner()));
        drop(sessions);
    }

    /// Whether fencing token `token` (what an exclusive run's command gets as
    /// `PROCLEASE_FENCING_TOKEN`) is still its holder's: [`super::fencing::check`].
    ///
    /// Errors: etcd unreachable; a record the reference's readers refuse. Treat any error as
    /// "not current".
    pub fn check_fence(runtime: &crate::Runtime, store: &EtcdStore, token: i64) -> Result<super::Fence, crate::Error> {
        super::fencing::check(runtime, store, token)
    }

    /// This process's membership of a cluster: the etcd store and, once it wrote there, its
    /// presence session.
    pub struct Cluster {
        store: Arc<EtcdStore>,
        identity: Arc<ProcessIdentity>,
        ttl: Duration,
        session: Mutex<Option<Arc<PresenceSession>>>,
    }

    impl std::fmt::Debug for Cluster {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("Cluster").field("store", &self.store).field("ttl", &self.ttl).finish_non_exhaustive()
        }
    }

    impl Cluster {
        /// A cluster on `store` for the process `identity` describes (which must ask `store`'s
        /// presence registry about other boots), with presence sessions of `ttl` (whole
        /// seconds, at least 2).
        pub fn new(store: Arc<EtcdStore>, identity: Arc<ProcessIdentity>, ttl: Duration) -> Cluster {
            Cluster { store, identity, ttl, session: Mutex::new(None) }
        }

        /// The etcd store.
        pub fn store(&self) -> &Arc<EtcdStore> {
            &self.store
        }

        /// The presence sessions' TTL.
        pub fn ttl(&self) -> Duration {
            self.ttl
        }

        /// This process's presence session, registering it first if this is the process's
        /// first write to etcd; every later write of the store is fenced by it.
        ///
        /// Errors: etcd unreachable; this identity registered before ([`StoreError::Unsafe`]:
        /// a process registers once); the session lapsed ([`StoreError::Unsafe`]: this process
        /// may no longer write — another machine may take over its leases).
        pub fn session(&self) -> Result<Arc<PresenceSession>, StoreError> {
            let mut session = self.session.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(open) = session.as_ref() {
                if !open.is_live() {
                    let why = open.lost().unwrap_or_else(|| "etcd acknowledged no renewal in time".into());
                    return Err(StoreError::unsafe_(
                        open.key(),
                        format!(
                            "this process's cluster presence lapsed ({why}; etcd at {}), so it may no longer write: \
                             another machine may take over its leases; nothing was changed. A process registers once: restart it to take part again",
                            self.store.endpoint()
                        ),
                    ));
                }
                return Ok(open.clone());
            }
            // One presence per process and cluster prefix: a process identity registers once, so
            // every host of this process on the same prefix shares one session.
            let mut sessions = SESSIONS.lock().unwrap_or_else(|p| p.into_inner());
            let scope = format!("{}{}", self.store.endpoint(), self.store.prefix());
            let opened = match sessions.get(&scope) {
                Some(shared) => shared.clone(),
                None => {
                    let own = self.identity.self_identity().map_err(|e| StoreError::unsafe_("presence", e.0))?;
                    let opened = Arc::new(PresenceSession::open(self.store.clone(), &own, self.ttl)?);
                    tracing::info!(key = opened.key(), lease = opened.lease_id(), ttl_s = opened.ttl().as_secs(), "registered this process's cluster presence");
                    sessions.insert(scope, opened.clone());
                    opened
                }
            };
            opened.fence(&self.store);
            *session = Some(opened.clone());
            Ok(opened)
        }

        /// The presence session, when this process has one (it wrote to etcd).
        pub fn open_session(&self) -> Option<Arc<PresenceSession>> {
            self.session.lock().unwrap_or_else(|p| p.into_inner()).clone()
        }

        /// The error a supervisor reports after it killed its command because the session
        /// was silent past its TTL (`silent`).
        pub fn session_overran(&self, silent: Duration) -> ClusterError {
            let silent = Duration::from_millis(u64::try_from(silent.as_millis()).unwrap_or(u64::MAX));
            ClusterError::SessionOverran { endpoint: self.store.endpoint().into(), silent, ttl: self.ttl }
        }

        /// The error a supervisor reports after it killed its command because the session was
        /// lost (`reason`: [`PresenceSession::lost`]).
        pub fn state_lost(&self, reason: String) -> ClusterError {
            ClusterError::StateLost { endpoint: self.store.endpoint().into(), reason }
        }

        /// The error a supervisor reports after it stopped its command because the session
        /// lapsed.
        pub fn session_lost(&self, what: impl Into<String>) -> ClusterError {
            ClusterError::SessionLost { endpoint: self.store.endpoint().into(), silent: self.ttl - self.ttl / 4, what: what.into() }
        }
    }

    /// Whether `path` is in a collection several machines share: the export admission (§6A.5)
    /// and the plugin invocation leases (§6B).
    pub(crate) fn shared(path: &str) -> bool {
        [proclease_core::admission::DIRECTORY, proclease_core::invocation_leases::DIRECTORY]
            .iter()
            .any(|dir| path.strip_prefix(dir).is_some_and(|rest| rest.is_empty() || rest.starts_with('/')))
    }

    /// The component's `state-store` import in cluster mode: the shared collections (the
    /// admission, the invocation leases) in etcd — a write first makes sure this process's
    /// presence is registered, and is fenced by it — and every other path in the local file
    /// store.
    pub struct ClusterStore {
        /// The state home's store.
        pub local: Arc<StateStore>,
        /// The cluster.
        pub cluster: Arc<Cluster>,
    }

    impl ClusterStore {
        /// The etcd store, for a write of `path`: the presence session first, and etcd's state
        /// still the one it registered in ([`PresenceSession::confirm_state`]: a restored etcd
        /// brings back this session's lease with the state of its backup).
        fn for_write(&self, path: &str) -> Result<&EtcdStore, Failure> {
            let session = self.cluster.session().map_err(failure)?;
            session.confirm_state().map_err(|unconfirmed| {
                let endpoint = self.cluster.store.endpoint();
                failure(match unconfirmed {
                    crate::cluster::presence::Unconfirmed::Lost(why) => StoreError::unsafe_(
                        path,
                        format!("this process's cluster state is lost ({why}; etcd at {endpoint}), so it may no longer write: another machine may take over its leases; nothing was changed"),
                    ),
                    crate::cluster::presence::Unconfirmed::NoAnswer(bound) => StoreError::Unreachable {
                        path: path.into(),
                        operation: "confirming the cluster state",
                        message: format!(
                            "etcd at {endpoint} did not confirm within {} that its state is still the one this process registered in (a restore from a backup would bring back this process's lease), so nothing was written; retry once etcd answers",
                            humantime::format_duration(bound)
                        ),
                    },
                })
            })?;
            Ok(&self.cluster.store)
        }
    }

    impl Store for ClusterStore {
        fn read_if_present(&mut self, path: &str, max_bytes: u32) -> Result<Option<String>, Failure> {
            if shared(path) { self.cluster.store.read_if_present(path, max_bytes) } else { self.local.read_if_present(path, max_bytes) }.map_err(failure)
        }

        fn create_if_absent(&mut self, path: &str, content: &str) -> Result<bool, Failure> {
            if shared(path) { self.for_write(path)?.create_if_absent(path, content) } else { self.local.create_if_absent(path, content) }.map_err(failure)
        }

        fn replace_if_unchanged(&mut self, path: &str, expected_sha256: &str, content: &str) -> Result<bool, Failure> {
            if shared(path) { self.for_write(path)?.replace_if_unchanged(path, expected_sha256, content) } else { self.local.replace_if_unchanged(path, expected_sha256, content) }
                .map_err(failure)
        }

        fn replace_if_unchanged_lazily(&mut self, path: &str, expected_sha256: &str, content: &str) -> Result<bool, Failure> {
            // etcd's writes are durable whatever is asked: only the local store can skip a sync.
            if shared(path) {
                return self.replace_if_unchanged(path, expected_sha256, content);
            }
            self.local.replace_if_unchanged_lazily(path, expected_sha256, content).map_err(failure)
        }

        fn remove_if_unchanged(&mut self, path: &str, expected_sha256: &str) -> Result<bool, Failure> {
            if shared(path) { self.for_write(path)?.remove_if_unchanged(path, expected_sha256) } else { self.local.remove_if_unchanged(path, expected_sha256) }.map_err(failure)
        }

        fn ensure_private_directory(&mut self, path: &str) -> Result<CollectionIdentity, Failure> {
            if shared(path) { self.cluster.store.ensure_private_directory(path) } else { self.local.ensure_private_directory(path) }.map_err(failure)
        }

        fn snapshot(&mut self, path: &str, recover_orphans: bool) -> Result<Option<CollectionSnapshot>, Failure> {
            if shared(path) { self.cluster.store.snapshot(path) } else { self.local.snapshot(path, recover_orphans) }.map_err(failure)
        }

        fn read_batch(
            &mut self,
            path: &str,
            names: &[String],
            max_bytes_per_file: u32,
            max_total_bytes: u32,
            expected: &CollectionIdentity,
        ) -> Result<Vec<(String, BatchStatus)>, Failure> {
            if shared(path) {
                self.cluster.store.read_batch(path, names, max_bytes_per_file, max_total_bytes, expected)
            } else {
                self.local.read_batch(path, names, max_bytes_per_file, max_total_bytes, expected)
            }
            .map_err(failure)
        }

        // Directory leases are local: the local lease-creation lock.
        fn lock_leasing(&mut self) -> Result<(), Failure> {
            crate::state_store::take_leasing_lock(&self.local)
        }

        fn unlock_leasing(&mut self) {
            crate::state_store::release_leasing_lock();
        }
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn the_admission_and_invocation_leases_are_shared_and_nothing_else() {
            for path in [
                "recovery/beeper-message-like-me-export-admission",
                "recovery/beeper-message-like-me-export-admission/active.json",
                "provider-plugin-state/.invocations",
                "provider-plugin-state/.invocations/3f1c9a52-8d2e-4b7a-9c1d-2e5f6a7b8c9d.json",
            ] {
                assert!(super::shared(path), "{path}");
            }
            for path in [
                "recovery/beeper-message-like-me-directory-leases/x.json",
                "recovery/beeper-message-like-me-export-admission-other/active.json",
                "provider-plugin-state",
                "provider-plugins/catalog.json",
                "recovery",
            ] {
                assert!(!super::shared(path), "{path}");
            }
        }
    }
}
