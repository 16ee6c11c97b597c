//! The facade: one [`Host`] owns the wiring an embedder needs — a state home with its store and
//! witnesses, the granted workspace, process identity, the plugin catalog and the runtime — and
//! exposes every lease operation, the rules beyond single operations (one lease per directory,
//! the creation lock, recovery that takes turns), stage publication, the survey `doctor` shows,
//! and the [`Supervisor`](crate::supervisor::Supervisor) that runs a recorded command.
//!
//! ```
//! # fn main() -> Result<(), proclease::Error> {
//! # let dir = tempfile::tempdir().unwrap();
//! let host = proclease::Host::builder().state_home(dir.path().join("state")).workspace_root(dir.path()).build()?;
//! let mut admission = host.acquire_admission()?;
//! assert_eq!(host.acquire_admission().err().and_then(|e| e.lease_code()), Some(proclease::core::LeaseCode::AnotherExportIsActive));
//! admission.release()?;
//! # Ok(()) }
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;

use proclease_core::directory_leases::{self as leases, CreationOutcome, Options, Request, Run};
use proclease_core::dispositions::Disposition;
use proclease_core::invocation_leases::{Entry, RepairDecision, RepairReport};
use proclease_core::liveness::{Liveness, OwnerStatus};
use proclease_core::records::Parsed;
use proclease_core::records::invocation_lease::InvocationLease;
use proclease_core::records::portable_identity::PortableIdentity;
use proclease_core::recovery_advice::Step;

use crate::admission::{Admission, survey_admission};
#[cfg(feature = "cluster")]
use crate::cluster::Cluster;
use crate::cluster::StoreAddress;
use crate::directory_lease::{DirectoryLease, recover_directory_creations, recover_each_directory_lease};
use crate::effects::Effects;
use crate::error::{Error, Refusal};
use crate::invocation_lease::{self as invocations, ContainmentController};
use crate::plugin_catalog::{PluginCatalog, Source};
use crate::process_identity::ProcessIdentity;
use crate::process_identity::run_journal;
use crate::runtime::{Runtime, RuntimeConfig};
use crate::state_home::StateHome;
use crate::state_store::StateStore;
use crate::witness::Witnesses;
use crate::workspace::Workspace;

/// How to build a [`Host`]: which state home, which workspace roots, which plugin catalog and
/// which runtime limits. Every choice has a default.
#[derive(Debug, Clone, Default)]
pub struct HostBuilder {
    state_home: Option<PathBuf>,
    workspace_roots: Vec<PathBuf>,
    plugin_catalog: Option<PathBuf>,
    runtime: Option<RuntimeConfig>,
    store: Option<String>,
    cluster_ttl: Option<std::time::Duration>,
    etcd_tls: Option<crate::cluster::EtcdTlsFiles>,
    lock_timeout: Option<std::time::Duration>,
}

impl HostBuilder {
    /// How long one operation of the host (a lease, a recovery, a survey, an acquire) may wait,
    /// in all, for other processes — kernel locks of the state home (the lease-creation lock,
    /// the recovery turn, collection locks) and other programs' mutation claims — before it
    /// fails with [`Error::LockTimeout`] naming the holder; after 1 s a wait says who it waits
    /// for (a `tracing` warning). Default
    /// [`lock_wait::DEFAULT_BOUND`](crate::lock_wait::DEFAULT_BOUND) (10 s).
    pub fn lock_timeout(mut self, bound: std::time::Duration) -> Self {
        self.lock_timeout = Some(bound);
        self
    }

    /// The state home (default: `PROCLEASE_STATE_HOME`, `GHOSTGET_STATE_HOME`,
    /// `$XDG_DATA_HOME/proclease`, `~/.local/share/proclease`). A ghostget state home works as
    /// is. Created (0700) if absent.
    pub fn state_home(mut self, path: impl Into<PathBuf>) -> Self {
        self.state_home = Some(path.into());
        self
    }

    /// Grants a workspace root: directories may be leased, inspected and removed only under the
    /// granted roots (default: the home directory and the temporary directory). Repeatable.
    pub fn workspace_root(mut self, path: impl Into<PathBuf>) -> Self {
        self.workspace_roots.push(path.into());
        self
    }

    /// The plugin catalog file (default: `<state home>/provider-plugins/catalog.json`).
    pub fn plugin_catalog(mut self, file: impl Into<PathBuf>) -> Self {
        self.plugin_catalog = Some(file.into());
        self
    }

    /// Where the export admission and the invocation leases live (§6A.5, §6B): `file` (the
    /// state home, the default) or `etcd://HOST:PORT/PREFIX` — cluster mode (`docs/cluster.md`),
    /// shared by every machine using the same prefix, while directory leases stay in this
    /// machine's state home. Default: `$PROCLEASE_STORE`, else `file`.
    ///
    /// [`HostBuilder::build`] fails with [`ClusterError::NotBuilt`](crate::cluster::ClusterError::NotBuilt) for an etcd address when
    /// this crate was built without feature `cluster` (never falling back to the local store).
    pub fn store(mut self, address: impl Into<String>) -> Self {
        self.store = Some(address.into());
        self
    }

    /// The TTL of this process's presence in cluster mode: how long after a crash its leases
    /// stay held before other machines may take them over (whole seconds, at least 2; default
    /// [`DEFAULT_TTL`](crate::cluster::DEFAULT_TTL), 10 s). It also bounds how long the
    /// process keeps acting when cut off from etcd: three quarters of it.
    pub fn cluster_ttl(mut self, ttl: std::time::Duration) -> Self {
        self.cluster_ttl = Some(ttl);
        self
    }

    /// TLS to etcd in cluster mode: the CA that signed the members' certificates, and a client
    /// certificate for an etcd that requires one (`docs/cluster.md`, "TLS"). Default: the files
    /// `PROCLEASE_ETCD_CA`, `PROCLEASE_ETCD_CERT` and `PROCLEASE_ETCD_KEY` name, else plain text.
    pub fn etcd_tls(mut self, files: crate::cluster::EtcdTlsFiles) -> Self {
        self.etcd_tls = Some(files);
        self
    }

    /// Runtime limits other than the defaults (a dedicated runtime is then compiled for this
    /// host; by default hosts share one).
    pub fn runtime_config(mut self, config: RuntimeConfig) -> Self {
        self.runtime = Some(config);
        self
    }

    /// Opens the state home (creating and claiming it if needed), its store and witness
    /// directory, the workspace and the catalog, and loads the component.
    ///
    /// Errors: [`Error::StateHome`] (no state home, a shared root, an unsafe path);
    /// [`Error::Store`] (its internal directories); [`Error::Workspace`] (a root that is not a
    /// directory); [`Error::Component`] (the component does not load); [`Error::Cluster`] (a
    /// malformed store address, or an etcd one without feature `cluster`); [`Error::Store`]
    /// (etcd unreachable).
    pub fn build(self) -> Result<Host, Error> {
        let address = match &self.store {
            Some(address) => StoreAddress::parse(address)?,
            None => StoreAddress::from_environment()?,
        };
        let (path, _) = StateHome::select(self.state_home.as_deref())?;
        let home = StateHome::open(&path)?;
        // A home where witnesses cannot be kept (read-only) still serves every read, with the
        // /proc proof alone; but starts no command (`spawn_witness` and the run journal refuse),
        // and says so when a directory it cannot trust is there.
        let identity = match Witnesses::open(&home) {
            Ok(witnesses) => ProcessIdentity::with_witnesses(witnesses),
            Err(e) => {
                let present = warn_if_present(&home, ".proclease/witnesses", &e, "no run starts, and no process of this boot can be judged alive or dead");
                ProcessIdentity::without_witnesses(e.to_string(), present)
            }
        };
        let identity = match run_journal::open(&home) {
            Ok(journal) => identity.with_run_journal(journal),
            Err(e) => {
                let present = warn_if_present(&home, ".proclease/runs", &e, "no run starts, and no lease whose run may have finished is recovered");
                identity.without_run_journal(e.to_string(), present)
            }
        };
        let (identity, cluster) = match address {
            StoreAddress::File => (Arc::new(identity), None),
            StoreAddress::Etcd(address) => connect_cluster(&address, identity, self.cluster_ttl.unwrap_or(crate::cluster::DEFAULT_TTL), self.etcd_tls.as_ref())?,
        };
        let store = Arc::new(StateStore::open(home, identity.clone())?);
        let roots = if self.workspace_roots.is_empty() { Workspace::default_roots() } else { self.workspace_roots };
        let workspace = Arc::new(Workspace::new(&roots)?);
        let source = self.plugin_catalog.map_or(Source::StateHome, Source::File);
        let catalog = Arc::new(PluginCatalog::new(store.clone(), source));
        let runtime = match self.runtime {
            Some(config) => HostRuntime::Own(Box::new(Runtime::new(config)?)),
            None => HostRuntime::Shared(Runtime::shared()?),
        };
        let lock_timeout = self.lock_timeout.unwrap_or(crate::lock_wait::DEFAULT_BOUND);
        Ok(Host { runtime, store, identity, workspace, catalog, cluster, lock_timeout })
    }
}

/// Whether the state home's directory `relative`, which could not be opened (`error`), is
/// there; if so, warns once, at start, with what follows (`consequence`). A directory that is
/// absent and cannot be made (a read-only home) is no news: there is nothing in it to read.
fn warn_if_present(home: &StateHome, relative: &str, error: &dyn std::fmt::Display, consequence: &str) -> bool {
    let present = home.path().join(relative).symlink_metadata().is_ok();
    if present {
        tracing::warn!("{}: {error}; {consequence}", home.path().display());
    }
    present
}

/// The etcd store of `address`, and `identity` asking its presence registry about other boots.
#[cfg(feature = "cluster")]
fn connect_cluster(
    address: &crate::cluster::EtcdAddress,
    identity: ProcessIdentity,
    ttl: std::time::Duration,
    tls: Option<&crate::cluster::EtcdTlsFiles>,
) -> Result<(Arc<ProcessIdentity>, Option<Arc<Cluster>>), Error> {
    use crate::cluster::presence::EtcdPresence;
    let store = Arc::new(crate::state_store::etcd::EtcdStore::connect_configured_to(address, tls)?);
    let identity = Arc::new(identity.with_presence_registry(Arc::new(EtcdPresence(store.clone()))));
    let cluster = Arc::new(Cluster::new(store, identity.clone(), ttl));
    Ok((identity, Some(cluster)))
}

#[cfg(not(feature = "cluster"))]
fn connect_cluster(
    address: &crate::cluster::EtcdAddress,
    _: ProcessIdentity,
    _: std::time::Duration,
    _: Option<&crate::cluster::EtcdTlsFiles>,
) -> Result<(Arc<ProcessIdentity>, Option<Arc<Cluster>>), Error> {
    Err(crate::cluster::ClusterError::NotBuilt { address: address.url() }.into())
}

/// Cluster mode is not built in: a host never has a cluster.
#[cfg(not(feature = "cluster"))]
#[derive(Debug)]
pub enum Cluster {}

enum HostRuntime {
    Shared(&'static Runtime),
    Own(Box<Runtime>),
}

/// An embedder's proclease: everything wired once, every lease operation a method.
pub struct Host {
    runtime: HostRuntime,
    store: Arc<StateStore>,
    identity: Arc<ProcessIdentity>,
    workspace: Arc<Workspace>,
    catalog: Arc<PluginCatalog>,
    cluster: Option<Arc<Cluster>>,
    lock_timeout: std::time::Duration,
}

/// What the admission file is when a reader of the reference refuses it, or it cannot be read
/// as a record at all (over the claim's size bound, not UTF-8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidFile {
    /// The file.
    pub path: PathBuf,
    /// Why a reader refuses it.
    pub error: InvalidReason,
    /// The shell command that moves it out of the way (proclease never deletes it).
    pub set_aside: String,
}

/// Why an admission file is refused ([`InvalidFile::error`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InvalidReason {
    /// The reference's reader refuses its content (its message).
    Refused(proclease_core::LeaseError),
    /// It cannot be read as a record: larger than a claim may be, or not UTF-8 (the store's
    /// failure, e.g. `larger than 16384 bytes`).
    Unreadable(crate::Failure),
}

impl std::fmt::Display for InvalidReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InvalidReason::Refused(error) => write!(f, "{error}"),
            InvalidReason::Unreadable(failure) => write!(f, "{}", failure.message),
        }
    }
}

/// What a recovery did: the directory leases (every entry's outcome), the directory-creation
/// intents of crashed creators, and — when directory recovery did not stop — the invocation
/// tombstones.
#[derive(Debug, Clone)]
pub struct Recovery {
    /// Directory-lease recovery (§6A.6).
    pub directory_leases: Run,
    /// Directory-creation intents finished (or, in a dry run, that would be).
    pub creations: Vec<CreationOutcome>,
    /// Invocation-lease tombstone recovery (§6B.9), when it ran (or, in a dry run, would run):
    /// the counters and each lease id's decision (in a dry run, `Remove` is "would remove").
    pub invocations: Option<(RepairReport, Vec<(String, RepairDecision)>)>,
    /// When directory recovery stopped because a wait for another process reached the bound
    /// ([`HostBuilder::lock_timeout`]): that wait, naming the holder. The stop is then not the
    /// entry's fault: retry once the holder is done (the command line's exit status 5).
    pub lock_timeout: Option<crate::lock_wait::LockTimeout>,
}

/// One invocation lease as the survey shows it.
#[derive(Debug, Clone)]
pub struct InvocationSurvey {
    /// The entry (a snapshot, or an invalid lease id).
    pub entry: Entry,
    /// Its reported owner status (§6B.4), for a valid entry.
    pub status: Option<OwnerStatus>,
    /// What `recover` would do with it (§6B.9 recover mode, as a dry run); `None` when the
    /// directory-lease recovery would stop first.
    pub decision: Option<RepairDecision>,
}

impl InvocationSurvey {
    /// Its disposition: `recoverable` when `recover` would remove it, `active` while its owner
    /// or host is alive, `indeterminate` when neither is proven (a tombstone of this boot),
    /// `None` for an invalid lease (which blocks acquires until repaired by hand). Without a
    /// recovery decision, the owner status alone decides.
    pub fn disposition(&self) -> Option<Disposition> {
        proclease_core::invocation_leases::survey_disposition(self.decision, self.status)
    }
}

/// Everything in the state home and what would become of it: the admission, every directory
/// lease (a recovery dry run), every invocation lease.
#[derive(Debug, Clone)]
pub struct Survey {
    /// The admission, when one is held; or why its file is refused.
    pub admission: Result<Option<proclease_core::admission::Survey>, InvalidFile>,
    /// The directory leases and creation intents, as a recovery would decide them.
    pub recovery: Recovery,
    /// The invocation leases.
    pub invocations: Vec<InvocationSurvey>,
}

// A host is shared between threads (docs/embedding.md says so): keep it `Send + Sync`.
const _: () = {
    const fn shared<T: Send + Sync>() {}
    shared::<Host>();
};

impl Host {
    /// A builder with every default.
    pub fn builder() -> HostBuilder {
        HostBuilder::default()
    }

    /// The runtime the component runs in.
    pub fn runtime(&self) -> &Runtime {
        match &self.runtime {
            HostRuntime::Shared(runtime) => runtime,
            HostRuntime::Own(runtime) => runtime,
        }
    }

    /// The state home's path.
    pub fn state_home(&self) -> &Path {
        self.store.home().path()
    }

    /// The state store.
    pub fn store(&self) -> &Arc<StateStore> {
        &self.store
    }

    /// Process identity (with this state home's witnesses).
    pub fn process_identity(&self) -> &Arc<ProcessIdentity> {
        &self.identity
    }

    /// The granted workspace.
    pub fn workspace(&self) -> &Arc<Workspace> {
        &self.workspace
    }

    /// The plugin catalog (and its mutation lock, §5).
    pub fn catalog(&self) -> &Arc<PluginCatalog> {
        &self.catalog
    }

    /// The cluster, in cluster mode ([`HostBuilder::store`]).
    pub fn cluster(&self) -> Option<&Arc<Cluster>> {
        self.cluster.as_ref()
    }

    /// In cluster mode, what to tell a user of the prefix's epoch when it is not settled
    /// (`cluster::presence`, "Lost cluster state"): a grace that runs because
    /// the etcd cluster held no state of the prefix (new, wiped or restored), or no epoch of this
    /// cluster yet. `None` when settled, and without cluster mode.
    pub fn cluster_epoch_warning(&self) -> Option<String> {
        #[cfg(feature = "cluster")]
        {
            use crate::cluster::presence::{EpochState, epoch_state};
            let cluster = self.cluster.as_ref()?;
            match epoch_state(cluster.store()) {
                Ok(EpochState::Settled) => None,
                Ok(EpochState::Grace(left)) => Some(format!(
                    "cluster state: a grace period runs for {} s more — the etcd cluster held no state of this prefix (new, wiped or restored), \
                     so no process takes a lease until an owner from before can no longer act",
                    left.as_secs()
                )),
                Ok(EpochState::Unknown) => Some(
                    "cluster state: no epoch of this etcd cluster (the prefix is new, or its state was wiped or restored): \
                     the next process that takes a lease first waits one TTL"
                        .into(),
                ),
                Ok(EpochState::Restored(why)) => Some(format!(
                    "cluster state: the etcd cluster {why}: the next process that takes a lease first starts a new epoch and waits one TTL, \
                     and every owner from before finds its session lost"
                )),
                Err(e) => Some(format!("cluster state: unknown ({e})")),
            }
        }
        #[cfg(not(feature = "cluster"))]
        None
    }

    /// The effects behind one instance's imports: this host's store (in cluster mode the
    /// [`ClusterStore`](crate::cluster::ClusterStore): the admission and invocation leases
    /// in etcd), process identity, workspace and catalog. Replace a part to inject a seam (a
    /// scripted process table).
    pub fn effects(&self) -> Effects {
        let effects = Effects::native(Some(self.store.clone()), self.identity.clone()).with_workspace(self.workspace.clone()).with_catalog(self.catalog.clone());
        #[cfg(feature = "cluster")]
        let effects = match &self.cluster {
            Some(cluster) => Effects { store: Box::new(crate::cluster::ClusterStore { local: self.store.clone(), cluster: cluster.clone() }), ..effects },
            None => effects,
        };
        effects
    }

    // ---------- export admission (§6A.5) ----------

    /// Acquires the export admission (§6A.5), taking over a prior claim whose owner is provably
    /// gone.
    ///
    /// Errors: [`Error::Lease`] — `another export is active` (code
    /// [`AnotherExportIsActive`](proclease_core::LeaseCode::AnotherExportIsActive)), `prior
    /// export owner cannot be inspected safely`, a refusal of an invalid `active.json` (see
    /// [`Host::invalid_admission_file`]), …
    pub fn acquire_admission(&self) -> Result<Admission, Error> {
        self.bounded(|| Admission::acquire(self.runtime(), self.effects())).map(|admission| admission.with_lock_timeout(self.lock_timeout))
    }

    /// The admission on disk as a new acquirer would judge it, without changing anything.
    ///
    /// Errors: the refusal of an invalid `active.json`; a store failure.
    pub fn survey_admission(&self) -> Result<Option<proclease_core::admission::Survey>, Error> {
        survey_admission(self.runtime(), self.effects())
    }

    /// When the admission file is one the reference's readers refuse: where it is, why, and how
    /// to set it aside. `None` when it is absent or valid.
    /// In cluster mode the path is the etcd key (`etcd://HOST:PORT/PREFIX/f/…`) and the set-aside
    /// command copies it into the state home with `etcdctl` before deleting it.
    pub fn invalid_admission_file(&self) -> Option<InvalidFile> {
        let error = match self.survey_admission() {
            Err(Error::Lease(error)) => InvalidReason::Refused(error),
            // The record itself, not the store, is the problem: a reader of the reference
            // refuses it as well (`could not safely open …`), and no retry cures it.
            Err(Error::Storage(failure) | Error::System(failure))
                if failure.path.as_deref() == Some(proclease_core::admission::CLAIM_PATH) && failure.kind == crate::FailureKind::Unsafe =>
            {
                InvalidReason::Unreadable(failure)
            }
            _ => return None,
        };
        {
            {
                let path = self.state_home().join(proclease_core::admission::CLAIM_PATH);
                #[cfg(feature = "cluster")]
                if let Some(cluster) = &self.cluster {
                    let (store, key) = (cluster.store(), cluster.store().key_of(proclease_core::admission::CLAIM_PATH));
                    let saved = self.state_home().join(".proclease/set-aside-active.json");
                    let etcdctl = format!("ETCDCTL_API=3 etcdctl --endpoints={}", store.endpoint());
                    let set_aside = format!("{etcdctl} get --print-value-only '{key}' > '{}' && {etcdctl} del '{key}'", saved.display());
                    return Some(InvalidFile { path: PathBuf::from(store.location_of(proclease_core::admission::CLAIM_PATH)), error, set_aside });
                }
                let set_aside = set_aside(self.state_home(), &path, "active.json");
                Some(InvalidFile { path, error, set_aside })
            }
        }
    }

    /// Where the record at store path `path` (e.g. [`CLAIM_PATH`](proclease_core::admission::CLAIM_PATH))
    /// is kept, for a message: its file in the state home, or in cluster mode, for the shared
    /// collections, its etcd key (`etcd://HOST:PORT/PREFIX/f/…`).
    pub fn record_location(&self, path: &str) -> String {
        #[cfg(feature = "cluster")]
        if let Some(cluster) = self.cluster.as_ref().filter(|_| crate::cluster::shared(path)) {
            return cluster.store().location_of(path);
        }
        self.state_home().join(path).display().to_string()
    }

    /// Whether fencing token `token` is still its holder's: [`check_fence`](crate::cluster::check_fence)
    /// on this host's cluster, [`check_file_fence`](crate::api::fencing::check_file_fence) on
    /// its state home otherwise.
    ///
    /// Errors: as those. Treat any error as "not current".
    pub fn fence(&self, token: i64) -> Result<crate::cluster::Fence, Error> {
        #[cfg(feature = "cluster")]
        if let Some(cluster) = &self.cluster {
            return crate::cluster::check_fence(self.runtime(), cluster.store(), token);
        }
        crate::api::fencing::check_file_fence(self.runtime(), &self.store, token)
    }

    /// The store the admission and invocation leases live in: `file` or `etcd://HOST:PORT/PREFIX`.
    pub fn store_address(&self) -> String {
        #[cfg(feature = "cluster")]
        if let Some(cluster) = &self.cluster {
            return cluster.store().address();
        }
        "file".into()
    }

    // ---------- directory leases (§6A.6) ----------

    /// Leases an existing directory as the reference does (§6A.6 create): it must be a private
    /// directory of the user under a granted root.
    ///
    /// Errors: the request and identity refusals of §6A.6 ([`Error::Lease`]).
    pub fn lease_directory(&self, request: &Request) -> Result<DirectoryLease, Error> {
        self.bounded(|| DirectoryLease::create(self.runtime(), self.effects(), request)).map(|lease| lease.with_lock_timeout(self.lock_timeout))
    }

    /// Leases a directory that nothing else uses — what `proclease run` leases: the directory is
    /// created (mode 0700, with its missing ancestors, the intent recorded first) or must be
    /// empty; it may be neither the state home nor hold or lie inside it; and no other lease
    /// (live or not) may claim it — the check and the creation hold one lock
    /// (`.proclease/locks/directory-lease-creation.lock`), so that two such calls never lease
    /// one directory twice (the recovery of one would delete the other's).
    ///
    /// Errors: [`Error::Refused`] ([`Refusal::NewDirectory`]: state home, not a directory, not
    /// empty, already leased — the component's check and words; [`Refusal::NotUtf8`]: a state
    /// home path that is not UTF-8); [`Error::Lease`] (the §6A.6 refusals); [`Error::Storage`]
    /// for the workspace's reads and the store; [`Error::LockTimeout`] when the lease-creation
    /// lock's wait reached the host's bound.
    ///
    /// ```
    /// # fn main() -> Result<(), proclease::Error> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let host = proclease::Host::builder().state_home(dir.path().join("state")).workspace_root(dir.path()).build()?;
    /// use proclease::core::directory_leases::Request;
    /// use proclease::core::records::directory_lease::Role;
    /// let work = dir.path().join("jobs/build");
    /// let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as f64;
    /// // `recover_after_ms`: the instant (ms since the epoch) after which a crashed launch may be recovered.
    /// let request = Request { role: Role::RawWorking, path: work.to_str().unwrap().into(), output_root: None, recover_after_ms: now_ms + 60_000.0, now_ms: None };
    /// let mut lease = host.lease_new_directory(&request)?;
    /// assert!(work.is_dir());
    /// // One lease per directory: a second one is refused while the first is held.
    /// use proclease::core::directory_leases::RefusalKind;
    /// assert!(matches!(
    ///     host.lease_new_directory(&request),
    ///     Err(proclease::Error::Refused(proclease::Refusal::NewDirectory { kind: RefusalKind::AlreadyLeased, .. }))
    /// ));
    /// lease.release()?; // the directory stays: it is the owner's result
    /// assert!(work.is_dir());
    /// # Ok(()) }
    /// ```
    pub fn lease_new_directory(&self, request: &Request) -> Result<DirectoryLease, Error> {
        self.bounded(|| self.lease_new_directory_now(request))
    }

    fn lease_new_directory_now(&self, request: &Request) -> Result<DirectoryLease, Error> {
        let Some(home) = self.state_home().to_str() else {
            return Err(Refusal::NotUtf8 { path: self.state_home().to_path_buf() }.into());
        };
        Ok(DirectoryLease::lease_new(self.runtime(), self.effects(), request, home)?.with_lock_timeout(self.lock_timeout))
    }

    /// Says which of the §6A.4 conditions `dir` or its parent misses, when a lease of `dir` was
    /// refused with `… is not an owned physical directory`
    /// ([`LeaseCode::DirectoryLeaseTargetIsNotAnOwnedPhysicalDirectory`](proclease_core::LeaseCode)):
    /// a parent that is not the user's or that group or others can write (a shared `/tmp`), or
    /// a directory that is not the user's, mode 0700, reached without symbolic links.
    /// A relative or unnormalised `dir` (as a user typed it) is taken from the current directory.
    pub fn why_not_physical(&self, dir: &Path) -> String {
        match crate::state_home::lexical_absolute(dir) {
            Ok(absolute) => self.workspace.why_not_physical(&absolute),
            Err(_) => self.workspace.why_not_physical(dir),
        }
    }

    /// Publishes a stage to its output: renames `stage` to `output` in their common parent
    /// (never overwriting) and makes the rename durable (fsync of the parent).
    ///
    /// Errors: [`Refusal::OutputNotSibling`], [`Refusal::OutputExists`]; [`Error::Workspace`]
    /// for a parent outside the granted roots ([`HostBuilder::workspace_root`]) or reached
    /// through a symbolic link; [`Error::File`] for the rename or fsync, and for a path that is
    /// not UTF-8.
    ///
    /// ```
    /// # fn main() -> Result<(), proclease::Error> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let host = proclease::Host::builder().state_home(dir.path().join("state")).workspace_root(dir.path()).build()?;
    /// std::fs::create_dir(dir.path().join(".stage")).unwrap();
    /// host.publish_stage(&dir.path().join(".stage"), &dir.path().join("v2"))?;
    /// assert!(dir.path().join("v2").is_dir() && !dir.path().join(".stage").exists());
    /// # Ok(()) }
    /// ```
    pub fn publish_stage(&self, stage: &Path, output: &Path) -> Result<(), Error> {
        let parent = stage.parent().ok_or_else(|| Refusal::OutputNotSibling { output: output.into(), stage: stage.into() })?;
        if output.parent() != Some(parent) {
            return Err(Refusal::OutputNotSibling { output: output.into(), stage: stage.into() }.into());
        }
        let (Some(from), Some(to)) = (stage.file_name(), output.file_name()) else {
            return Err(Refusal::OutputNotSibling { output: output.into(), stage: stage.into() }.into());
        };
        let (Some(parent_text), Some(from), Some(to)) = (parent.to_str(), from.to_str(), to.to_str()) else {
            return Err(Error::File { path: stage.to_path_buf(), message: "the path is not UTF-8".into() });
        };
        match self.workspace.rename_new(parent_text, from, to) {
            Ok(true) => Ok(()),
            Ok(false) => Err(Refusal::OutputExists { output: output.into() }.into()),
            Err(crate::workspace::WorkspaceError::Io { operation: "rename", source, .. }) => {
                Err(Error::File { path: stage.to_path_buf(), message: format!("cannot publish to {}: {source}", output.display()) })
            }
            Err(crate::workspace::WorkspaceError::Io { operation: "fsync", source, .. }) => Err(Error::File { path: parent.to_path_buf(), message: format!("fsync: {source}") }),
            Err(other) => Err(other.into()),
        }
    }

    // ---------- recovery ----------

    /// Directory-lease recovery (§6A.6) with `options`, one recoverer at a time (a kernel lock,
    /// `.proclease/locks/directory-lease-recovery.lock`, so each reports exactly what it did;
    /// not for a dry run). A lease another program recovered meanwhile is reported as already
    /// recovered when `options.concurrent`.
    ///
    /// Errors: `… directory recovery time is invalid`; a component failure. Refusals are in the
    /// run ([`Run::stopped`]).
    pub fn recover_directory_leases(&self, options: Options) -> Result<Run, Error> {
        self.bounded(|| {
            let _turn = if options.dry_run { None } else { Some(self.recovery_turn()?) };
            recover_each_directory_lease(self.runtime(), self.effects(), None, options)
        })
    }

    /// Everything a `proclease recover` does: directory leases (with `options`), the creation
    /// intents of crashed creators, and — when directory recovery did not stop and this is not a
    /// dry run — invocation tombstones whose owners are provably gone (§6B.9 recover mode).
    ///
    /// Errors: as [`Host::recover_directory_leases`]; a failure at the creation intents or the
    /// invocation leases (the catalog lock's, `portable plugin catalog mutation is already
    /// locked`, while another process mutates the plugin catalog) after the directory leases
    /// were dealt with is [`Error::RecoveryIncomplete`], carrying what was done.
    ///
    /// ```
    /// # fn main() -> Result<(), proclease::Error> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let host = proclease::Host::builder().state_home(dir.path().join("state")).workspace_root(dir.path()).build()?;
    /// let recovery = host.recover(proclease::core::directory_leases::Options::default())?;
    /// assert!(recovery.directory_leases.outcomes.is_empty() && recovery.directory_leases.stopped.is_none());
    /// # Ok(()) }
    /// ```
    pub fn recover(&self, options: Options) -> Result<Recovery, Error> {
        let mut done = None;
        let recovery = self.bounded(|| self.recover_now(options, &mut done));
        recovery.map_err(|error| match done {
            Some((step, done)) => Error::RecoveryIncomplete { step, done: Box::new(done), error: Box::new(error) },
            None => error,
        })
    }

    /// [`Host::recover`]'s steps; `done` is set to the step that failed and what was recovered
    /// before it, when a step after the directory leases fails.
    fn recover_now(&self, options: Options, done: &mut Option<(Step, Recovery)>) -> Result<Recovery, Error> {
        let _turn = if options.dry_run { None } else { Some(self.recovery_turn()?) };
        let dry_run = options.dry_run;
        let directory_leases = recover_each_directory_lease(self.runtime(), self.effects(), None, options)?;
        // A wait that reached its bound and stopped recovery, or made it leave a lease as it is.
        let refused = directory_leases.stopped.is_some() || directory_leases.outcomes.iter().any(|o| matches!(o.action, proclease_core::directory_leases::Action::Skip(_)));
        let lock_timeout = if refused { crate::lock_wait::Operation::timed_out() } else { None };
        let mut recovery = Recovery { directory_leases, creations: Vec::new(), invocations: None, lock_timeout };
        if !dry_run {
            // Records of supervisors that died while their dead-man timer was armed: `doctor`
            // said so; nothing else depends on them.
            for (path, _) in self.dead_man_leftovers() {
                let _ = std::fs::remove_file(path);
            }
        }
        // The directories removed (and the intents finished) stay reported when a later step fails.
        match recover_directory_creations(self.runtime(), self.effects(), dry_run) {
            Ok(creations) => recovery.creations = creations,
            Err(error) => {
                *done = Some((Step::CreationIntents, recovery));
                return Err(error);
            }
        }
        if recovery.directory_leases.stopped.is_none() {
            let invocations = match dry_run {
                false => invocations::repair_invocation_leases(self.runtime(), self.effects(), true),
                true => invocations::preview_invocation_repair(self.runtime(), self.effects(), true),
            };
            match invocations {
                Ok(invocations) => recovery.invocations = Some(invocations),
                Err(error) => {
                    *done = Some((Step::InvocationLeases, recovery));
                    return Err(error);
                }
            }
        }
        Ok(recovery)
    }

    /// The dead-man records (`supervisor::dead_man_record`) in the state home whose
    /// supervisor is gone: each supervisor died while its cluster dead-man timer was armed.
    pub fn dead_man_leftovers(&self) -> Vec<(PathBuf, crate::supervisor::dead_man_record::Armed)> {
        // The boot id alone: this process's own identity would take a witness, which a
        // read-only `doctor` has no use for and would leave behind.
        let current = self.identity.current_boot_id().ok();
        crate::supervisor::dead_man_record::leftovers(self.state_home(), |owner| {
            current.as_deref() == Some(owner.boot_id.as_str()) && self.identity.capture(owner.pid).is_ok_and(|now| now.process_start_id == owner.process_start_id)
        })
    }

    /// Takes the recovery turn (waiting for another recoverer); released when dropped.
    fn recovery_turn(&self) -> Result<std::fs::File, Error> {
        use crate::state_store::RECOVERY_LOCK;
        let path = self.state_home().join(".proclease/locks").join(RECOVERY_LOCK);
        let file = self.store.lock_file(RECOVERY_LOCK).map_err(|e| Error::File { path: path.clone(), message: e.to_string() })?;
        self.take_lock(&file, RECOVERY_LOCK)?;
        Ok(file)
    }

    /// The bound of every wait for another process within one operation of this host
    /// ([`HostBuilder::lock_timeout`]).
    pub fn lock_timeout(&self) -> std::time::Duration {
        self.lock_timeout
    }

    /// Runs `operation` within one bound for all its waits ([`lock_wait::Operation`](crate::lock_wait::Operation):
    /// joined when one is already open on this thread). An error the operation ended in after a
    /// wait reached the bound is that wait's [`Error::LockTimeout`], naming the holder, with the
    /// error's own words in it.
    pub(crate) fn bounded<T>(&self, operation: impl FnOnce() -> Result<T, Error>) -> Result<T, Error> {
        let _operation = crate::lock_wait::Operation::begin(self.lock_timeout);
        operation().map_err(|error| match crate::lock_wait::Operation::timed_out() {
            // The wait's own timeout, as a lock taken through an import reports it: said once.
            Some(timeout) if is_the_wait(&error) => Error::LockTimeout(timeout),
            Some(timeout) if waited_out(&error) => Error::LockTimeout(crate::lock_wait::LockTimeout { during: Some(crate::lock_wait::during(error)), ..timeout }),
            _ => error,
        })
    }

    /// Takes the kernel lock of `file` (`name` in `.proclease/locks/`), waiting at most the
    /// host's lock timeout for another holder, and saying who it is after 1 s.
    fn take_lock(&self, file: &std::fs::File, name: &str) -> Result<(), Error> {
        let label = self.state_home().join(".proclease/locks").join(name);
        crate::lock_wait::lock(file, &label.display().to_string(), self.lock_timeout).map_err(|e| match e {
            crate::lock_wait::LockError::TimedOut(timeout) => Error::LockTimeout(timeout),
            crate::lock_wait::LockError::Io(e) => Error::File { path: label, message: e.to_string() },
        })
    }

    /// What is in the state home and what would become of it, changing nothing (`doctor`).
    ///
    /// Errors: a store or component failure; [`Error::LockTimeout`] when a wait for another
    /// process's lock reached the host's lock timeout (naming the holder).
    ///
    /// ```
    /// # fn main() -> Result<(), proclease::Error> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let host = proclease::Host::builder().state_home(dir.path().join("state")).workspace_root(dir.path()).build()?;
    /// let _admission = host.acquire_admission()?;
    /// let survey = host.survey()?;
    /// let held = survey.admission.expect("a valid claim").expect("held");
    /// assert_eq!(held.disposition, proclease::core::dispositions::Disposition::Active);
    /// # Ok(()) }
    /// ```
    pub fn survey(&self) -> Result<Survey, Error> {
        // A survey whose wait for a lock reached the bound would show a held collection as
        // refused: it fails instead, naming the holder.
        self.bounded(|| {
            let survey = self.survey_now()?;
            match crate::lock_wait::Operation::timed_out() {
                Some(timeout) => Err(Error::LockTimeout(crate::lock_wait::LockTimeout {
                    during: Some(crate::lock_wait::during(Error::system(proclease_core::recovery_advice::SURVEY_INCOMPLETE))),
                    ..timeout
                })),
                None => Ok(survey),
            }
        })
    }

    fn survey_now(&self) -> Result<Survey, Error> {
        let admission = match self.survey_admission() {
            Ok(survey) => Ok(survey),
            Err(Error::Lease(_)) => Err(self.invalid_admission_file().ok_or_else(|| Error::system("the admission file changed while it was surveyed"))?),
            Err(other) => match self.invalid_admission_file() {
                // Too large, not UTF-8: a row of its own, and the rest of the survey goes on.
                Some(invalid) if matches!(invalid.error, InvalidReason::Unreadable(_)) => Err(invalid),
                _ => return Err(other),
            },
        };
        let recovery = self.recover(Options { dry_run: true, past_bound: true, ..Options::default() }).map_err(|error| match error {
            // The survey shows no partial recovery: it fails as the step did.
            Error::RecoveryIncomplete { error, .. } => *error,
            other => other,
        })?;
        let decisions: std::collections::HashMap<String, RepairDecision> = recovery.invocations.iter().flat_map(|(_, decisions)| decisions.iter().cloned()).collect();
        let mut invocations = Vec::new();
        for entry in self.invocation_leases()? {
            let (status, id) = match &entry {
                Entry::Valid(snapshot) => (Some(self.invocation_status(snapshot)?), snapshot.record.lease_id.as_str()),
                Entry::Invalid(id) => (None, id.as_str()),
            };
            let decision = decisions.get(id).copied();
            invocations.push(InvocationSurvey { entry, status, decision });
        }
        Ok(Survey { admission, recovery, invocations })
    }

    // ---------- invocation leases (§6B) ----------

    /// Acquires an invocation lease for `identity` and `run_id` under the catalog lock (§6B.5).
    ///
    /// Errors: [`Error::Lease`] — the identity and run id messages, `portable plugin catalog
    /// mutation is already locked`, the plugin changed or was disabled, the three blocking
    /// messages, …
    ///
    /// ```
    /// # fn main() -> Result<(), proclease::Error> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let (a, b, c) = ("a".repeat(64), "b".repeat(64), "c".repeat(64));
    /// let catalog = dir.path().join("catalog.json");
    /// std::fs::write(&catalog, format!(r#"{{"schemaVersion":1,"plugins":[{{"pluginId":"portable-test","version":"1.0.0",
    ///     "hostApiVersion":1,"bundleSha256":"{a}","manifestSha256":"{b}","enabled":true}}]}}"#)).unwrap();
    /// let host = proclease::Host::builder().state_home(dir.path().join("state")).plugin_catalog(&catalog).build()?;
    /// let identity = proclease::core::records::portable_identity::parse_value(&serde_json::json!({
    ///     "pluginId": "portable-test", "pluginVersion": "1.0.0", "hostApiVersion": 1, "bundleSha256": a,
    ///     "manifestSha256": b, "adapterId": "portable-test", "transport": "provider-api", "surfaceId": "portable-test",
    ///     "operation": "records.read", "contractVersion": 1, "descriptorSha256": c,
    /// }))?;
    /// let lease = host.acquire_invocation(&identity, "3f1c9a52-8d2e-4b7a-9c1d-2e5f6a7b8c9d")?;
    /// assert_eq!(host.invocation_leases()?.len(), 1);
    /// // No plugin host was started; cleanup is complete, and only then may the lease go.
    /// let mut containment = host.containment(&lease)?;
    /// containment.cleanup_complete()?;
    /// host.release_invocation(&containment.current()?)?;
    /// assert!(host.invocation_leases()?.is_empty());
    /// # Ok(()) }
    /// ```
    pub fn acquire_invocation(&self, identity: &PortableIdentity, run_id: &str) -> Result<Parsed<InvocationLease>, Error> {
        self.bounded(|| invocations::acquire_invocation_lease(self.runtime(), self.effects(), identity, run_id))
    }

    /// The containment controller of a lease (§6B.7).
    ///
    /// Errors: `portable invocation lease snapshot is not content-bound`.
    pub fn containment(&self, snapshot: &Parsed<InvocationLease>) -> Result<ContainmentController, Error> {
        ContainmentController::create(self.runtime(), self.effects(), snapshot)
    }

    /// Releases a lease after durable cleanup completion (§6B.8).
    ///
    /// Errors: the §6B.8 refusals.
    pub fn release_invocation(&self, current: &Parsed<InvocationLease>) -> Result<(), Error> {
        self.bounded(|| invocations::release_invocation_lease(self.runtime(), self.effects(), current))
    }

    /// The invocation-lease collection in name order (§6B.3).
    pub fn invocation_leases(&self) -> Result<Vec<Entry>, Error> {
        invocations::list_invocation_leases(self.runtime(), self.effects())
    }

    /// The reported owner status of a lease (§6B.4).
    pub fn invocation_status(&self, snapshot: &Parsed<InvocationLease>) -> Result<OwnerStatus, Error> {
        invocations::invocation_lease_status(self.runtime(), self.effects(), snapshot)
    }

    /// Repairs the collection under the catalog lock (§6B.9); `recover_tombstones` also clears
    /// tombstones only a dead owner or a reboot explains.
    pub fn repair_invocations(&self, recover_tombstones: bool) -> Result<(RepairReport, Vec<(String, RepairDecision)>), Error> {
        self.bounded(|| invocations::repair_invocation_leases(self.runtime(), self.effects(), recover_tombstones))
    }

    // ---------- processes ----------

    /// What probing `owner` proves, with this state home's witnesses.
    ///
    /// Errors: [`Error::Identity`] when the current boot id cannot be read.
    ///
    /// ```
    /// # fn main() -> Result<(), proclease::Error> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let host = proclease::Host::builder().state_home(dir.path().join("state")).workspace_root(dir.path()).build()?;
    /// let me = host.process_identity().self_identity()?;
    /// assert_eq!(host.liveness(&me)?.status, proclease::core::liveness::OwnerStatus::ExactLiveOwner);
    /// # Ok(()) }
    /// ```
    pub fn liveness(&self, owner: &proclease_core::records::Owner) -> Result<Liveness, Error> {
        Ok(self.identity.liveness(owner)?)
    }

    /// Gives up this process's witness and its free spawn witnesses, once it holds no lease any
    /// more (`docs/witness.md`).
    pub fn retire(&self) {
        crate::supervisor::retire(&self.identity);
    }
}

/// The shell command that moves `path` out of the way into the state home's `.proclease/`.
/// Whether `error` is one a wait that timed out can have caused: a contended or unsafe write
/// as the component words it (`… could not be … safely`, `… after bounded contention`,
/// `… failed safely`) or a store failure. A definite refusal (`another export is active`, a
/// directory already leased, an invalid record) is never a wait's, and keeps its own code.
/// Whether `error` is a lock wait's own timeout (a `contended` failure in its words, `waited N ms
/// for …`), not an error that followed one.
fn is_the_wait(error: &Error) -> bool {
    matches!(error, Error::Storage(failure) if failure.kind == proclease_core::FailureKind::Contended && failure.message.starts_with("waited "))
}

fn waited_out(error: &Error) -> bool {
    match error {
        Error::Lease(lease) => {
            let name = lease.code().name();
            name.ends_with("-safely") || name.ends_with("-bounded-contention")
        }
        Error::Storage(_) | Error::Store(crate::state_store::StoreError::Contended { .. }) => true,
        _ => false,
    }
}

pub(crate) fn set_aside(home: &Path, path: &Path, name: &str) -> String {
    leases::set_aside(&home.display().to_string(), &path.display().to_string(), name)
}

/// The path of an entry of the directory-lease collection.
pub fn lease_entry_path(home: &Path, name: &str) -> PathBuf {
    home.join(leases::DIRECTORY).join(name)
}

/// The shell command that sets entry `name` of the directory-lease collection aside.
pub fn set_aside_lease_entry(home: &Path, name: &str) -> String {
    leases::set_aside_lease_entry(&home.display().to_string(), name)
}
