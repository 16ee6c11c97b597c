//! In-memory effects for the conformance runner and the lease tests: a state store with
//! compare-and-swap semantics, a scripted process table with a fixed boot id, and counting
//! entropy. The same fakes serve the native runs (as `&mut dyn` traits) and the component runs
//! (boxed into the host's `Effects`), so both paths see identical facts.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use proclease::core::digest::sha256_hex;
use proclease::core::effects::{
    BatchStatus, Catalog, Clock, CollectionEntry, CollectionIdentity, CollectionSnapshot, DirectoryFacts, Entropy, EntryKind, Failure, InstalledPlugin, Processes, Store, Workspace,
};
use proclease::core::liveness::{OwnerFacts, OwnerStatus};
use proclease::core::records::DirectoryIdentity;
use proclease::core::records::Owner;
use proclease::effects::Effects;

/// What the memory store holds; tests reach in through [`MemoryStore::state`].
#[derive(Debug, Default)]
pub struct MemoryState {
    /// File path → text.
    pub files: BTreeMap<String, String>,
    /// Directory path → identity.
    pub directories: BTreeMap<String, CollectionIdentity>,
    /// When set, the next conditional write or removal reports that the file changed (and
    /// clears the flag).
    pub fail_next_cas: bool,
    next_inode: u64,
}

/// An in-memory state store (cheap to clone: clones share the state).
#[derive(Debug, Clone, Default)]
pub struct MemoryStore(Arc<Mutex<MemoryState>>);

impl MemoryStore {
    /// The shared state.
    pub fn state(&self) -> MutexGuard<'_, MemoryState> {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Puts `text` at `path` (and its directories).
    pub fn put(&self, path: &str, text: &str) {
        let mut state = self.state();
        ensure_directories(&mut state, parent(path));
        state.files.insert(path.into(), text.into());
    }

    /// The text at `path`.
    pub fn get(&self, path: &str) -> Option<String> {
        self.state().files.get(path).cloned()
    }
}

fn parent(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(p, _)| p)
}

fn ensure_directories(state: &mut MemoryState, path: &str) -> CollectionIdentity {
    let mut prefix = String::new();
    let mut identity = CollectionIdentity { device: "1".into(), inode: "1".into() };
    for segment in path.split('/').filter(|s| !s.is_empty()) {
        if !prefix.is_empty() {
            prefix.push('/');
        }
        prefix.push_str(segment);
        if !state.directories.contains_key(&prefix) {
            state.next_inode += 1;
            let inode = (1000 + state.next_inode).to_string();
            state.directories.insert(prefix.clone(), CollectionIdentity { device: "1".into(), inode });
        }
        identity = state.directories[&prefix].clone();
    }
    identity
}

impl Store for MemoryStore {
    fn read_if_present(&mut self, path: &str, max_bytes: u32) -> Result<Option<String>, Failure> {
        match self.state().files.get(path) {
            Some(text) if text.len() > max_bytes as usize => Err(Failure::unsafe_(format!("{path}: larger than {max_bytes} bytes"))),
            other => Ok(other.cloned()),
        }
    }

    fn create_if_absent(&mut self, path: &str, content: &str) -> Result<bool, Failure> {
        let mut state = self.state();
        ensure_directories(&mut state, parent(path));
        if state.files.contains_key(path) {
            return Ok(false);
        }
        state.files.insert(path.into(), content.into());
        Ok(true)
    }

    fn replace_if_unchanged(&mut self, path: &str, expected_sha256: &str, content: &str) -> Result<bool, Failure> {
        let mut state = self.state();
        if std::mem::take(&mut state.fail_next_cas) {
            return Ok(false);
        }
        match state.files.get(path) {
            Some(current) if sha256_hex(current.as_bytes()) == expected_sha256 => {
                state.files.insert(path.into(), content.into());
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    fn remove_if_unchanged(&mut self, path: &str, expected_sha256: &str) -> Result<bool, Failure> {
        let mut state = self.state();
        if std::mem::take(&mut state.fail_next_cas) {
            return Ok(false);
        }
        match state.files.get(path) {
            Some(current) if sha256_hex(current.as_bytes()) == expected_sha256 => {
                state.files.remove(path);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    fn ensure_private_directory(&mut self, path: &str) -> Result<CollectionIdentity, Failure> {
        Ok(ensure_directories(&mut self.state(), path))
    }

    fn snapshot(&mut self, path: &str, _recover_orphans: bool) -> Result<Option<CollectionSnapshot>, Failure> {
        let state = self.state();
        let Some(identity) = state.directories.get(path).cloned() else { return Ok(None) };
        let prefix = format!("{path}/");
        let mut entries: Vec<CollectionEntry> = state
            .files
            .keys()
            .filter_map(|k| k.strip_prefix(&prefix))
            .filter(|rest| !rest.contains('/'))
            .map(|name| CollectionEntry { name: name.into(), kind: EntryKind::File, identity: None })
            .collect();
        entries.extend(state.directories.iter().filter_map(|(k, id)| {
            let name = k.strip_prefix(&prefix).filter(|rest| !rest.contains('/'))?;
            Some(CollectionEntry { name: name.into(), kind: EntryKind::Directory, identity: Some(id.clone()) })
        }));
        entries.sort_by(|a, b| proclease::core::js::cmp_utf16(&a.name, &b.name));
        Ok(Some(CollectionSnapshot { identity, entries }))
    }

    fn read_batch(
        &mut self,
        path: &str,
        names: &[String],
        max_bytes_per_file: u32,
        _max_total_bytes: u32,
        expected: &CollectionIdentity,
    ) -> Result<Vec<(String, BatchStatus)>, Failure> {
        let state = self.state();
        if state.directories.get(path) != Some(expected) {
            return Err(Failure::unsafe_(format!("{path}: private state batch directory changed identity")));
        }
        Ok(names
            .iter()
            .map(|name| {
                let bytes = state.files.get(&format!("{path}/{name}")).map(String::as_bytes);
                (name.clone(), batch_status(bytes, max_bytes_per_file))
            })
            .collect())
    }
}

/// What a batch read reports for one file of an in-memory store: absent, over the per-file
/// bound, not UTF-8, or its text (the in-memory stores share this).
pub fn batch_status(bytes: Option<&[u8]>, max_bytes_per_file: u32) -> BatchStatus {
    use proclease::core::effects::BatchInvalid;
    match bytes {
        None => BatchStatus::Absent,
        Some(bytes) if bytes.len() > max_bytes_per_file as usize => BatchStatus::Invalid(BatchInvalid::FileByteBound),
        Some(bytes) => match std::str::from_utf8(bytes) {
            Ok(text) => BatchStatus::Present(text.into()),
            Err(_) => BatchStatus::Invalid(BatchInvalid::InvalidUtf8),
        },
    }
}

/// Answers owner-status probes.
pub type StatusOracle = Box<dyn FnMut(&Owner) -> OwnerStatus + Send>;

/// Answers probes with the facts a host would observe.
pub type FactsOracle = Box<dyn FnMut(&Owner) -> OwnerFacts + Send>;

/// The scripted process table.
pub struct Script {
    /// What `current_boot_id` returns.
    pub boot_id: Result<String, String>,
    /// What `self_identity` returns.
    pub own: Owner,
    /// What `capture` returns; `None` means a capture must not happen (it errors loudly).
    pub capture: Option<Result<Owner, String>>,
    /// Answers probes with a status (as the reference's injected `inspect` does).
    pub status: StatusOracle,
    /// Answers probes with facts instead (witnesses, `/proc`), when set.
    pub facts: Option<FactsOracle>,
    /// Every owner probed, in order.
    pub probed: Vec<Owner>,
    /// How many times the current boot id was asked for.
    pub boot_lookups: usize,
}

/// A scripted process table (clones share the script).
#[derive(Clone)]
pub struct ScriptedProcesses(Arc<Mutex<Script>>);

/// The owner the fakes use for "this process".
pub fn own_owner() -> Owner {
    Owner { pid: 4242, boot_id: "e".repeat(64), process_start_id: "f".repeat(64) }
}

impl ScriptedProcesses {
    /// A table on boot `boot_id` where every probe answers `status`.
    pub fn new(boot_id: &str, status: OwnerStatus) -> Self {
        Self::with_oracle(boot_id, Box::new(move |_| status))
    }

    /// A table whose probes are answered by `oracle`.
    pub fn with_oracle(boot_id: &str, oracle: StatusOracle) -> Self {
        ScriptedProcesses(Arc::new(Mutex::new(Script {
            boot_id: Ok(boot_id.into()),
            own: Owner { boot_id: boot_id.into(), ..own_owner() },
            capture: None,
            status: oracle,
            facts: None,
            probed: Vec::new(),
            boot_lookups: 0,
        })))
    }

    /// The shared script.
    pub fn script(&self) -> MutexGuard<'_, Script> {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Processes for ScriptedProcesses {
    fn current_boot_id(&mut self) -> Result<String, String> {
        let mut script = self.script();
        script.boot_lookups += 1;
        script.boot_id.clone()
    }

    fn self_identity(&mut self) -> Result<Owner, String> {
        Ok(self.script().own.clone())
    }

    fn capture(&mut self, pid: u64) -> Result<Owner, String> {
        match self.script().capture.clone() {
            Some(result) => result.map(|owner| Owner { pid, ..owner }),
            None => Err(format!("test script: capture({pid}) must not be reached")),
        }
    }

    /// The oracle's status as the facts that imply it ([`OwnerFacts::implying`]: no witness,
    /// nothing of spawned processes), or the facts oracle's facts when one is set.
    fn probe(&mut self, owner: &Owner) -> Result<OwnerFacts, String> {
        let mut script = self.script();
        script.probed.push(owner.clone());
        if let Some(facts) = script.facts.as_mut() {
            return Ok(facts(owner));
        }
        let status = (script.status)(owner);
        Ok(OwnerFacts::implying(owner, status))
    }
}

/// Entropy that counts: every id differs, runs are reproducible.
#[derive(Debug, Clone, Default)]
pub struct CountingEntropy(Arc<Mutex<u64>>);

impl Entropy for CountingEntropy {
    fn random_bytes(&mut self, len: u32) -> Vec<u8> {
        let mut counter = self.0.lock().unwrap_or_else(|p| p.into_inner());
        *counter += 1;
        let seed = counter.to_be_bytes();
        (0..len as usize).map(|i| seed[i % 8] ^ (i as u8).wrapping_mul(31)).collect()
    }
}

/// An in-memory workspace: absolute directory paths and their facts (clones share it).
#[derive(Debug, Clone, Default)]
pub struct MemoryWorkspace(Arc<Mutex<BTreeMap<String, DirectoryFacts>>>);

impl MemoryWorkspace {
    /// The directories.
    pub fn directories(&self) -> MutexGuard<'_, BTreeMap<String, DirectoryFacts>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds a private, owned, physical directory with inode `inode`.
    pub fn add(&self, path: &str, inode: u64) -> DirectoryFacts {
        let facts = DirectoryFacts {
            canonical: true,
            is_directory: true,
            owned: true,
            mode: 0o700,
            identity: DirectoryIdentity { device: "2049".into(), inode: inode.to_string(), birthtime_ns: (1_700_000_000_000_000_000u64 + inode).to_string() },
        };
        self.directories().insert(path.into(), facts.clone());
        facts
    }
}

impl Workspace for MemoryWorkspace {
    fn inspect(&mut self, path: &str) -> Result<Option<DirectoryFacts>, Failure> {
        Ok(self.directories().get(path).cloned())
    }

    fn remove_tree(&mut self, path: &str, expected: &DirectoryIdentity) -> Result<bool, Failure> {
        let mut directories = self.directories();
        match directories.get(path) {
            None => Ok(false),
            Some(facts) if facts.identity != *expected => Err(Failure::identity_changed(format!("{path}: recursive removal target changed identity"))),
            Some(_) => {
                let below = format!("{path}/");
                directories.retain(|p, _| p != path && !p.starts_with(&below));
                Ok(true)
            }
        }
    }

    fn create_private_directory(&mut self, path: &str) -> Result<Vec<String>, Failure> {
        let mut created = Vec::new();
        let mut walked = String::new();
        for segment in path.split('/').filter(|s| !s.is_empty()) {
            walked.push('/');
            walked.push_str(segment);
            if !self.directories().contains_key(&walked) {
                let inode = 100_000 + self.directories().len() as u64;
                self.add(&walked, inode);
                created.push(walked.clone());
            }
        }
        Ok(created)
    }

    fn remove_empty_directory(&mut self, path: &str, expected: Option<&DirectoryIdentity>) -> Result<bool, Failure> {
        let mut directories = self.directories();
        let below = format!("{path}/");
        let empty = !directories.keys().any(|p| p.starts_with(&below));
        match directories.get(path) {
            Some(facts) if empty && expected.is_none_or(|e| *e == facts.identity) => {
                directories.remove(path);
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}

/// An in-memory plugin catalog with a lock that another "process" can hold.
#[derive(Debug, Clone, Default)]
pub struct MemoryCatalog(Arc<Mutex<CatalogState>>);

/// What the memory catalog holds.
#[derive(Debug, Default)]
pub struct CatalogState {
    /// Installed, enabled plugins by id.
    pub plugins: BTreeMap<String, InstalledPlugin>,
    /// Another process holds the lock: `lock` fails fast.
    pub held_elsewhere: bool,
    /// This process's lock depth.
    pub depth: usize,
    /// Every `lock` that succeeded.
    pub acquisitions: usize,
}

impl MemoryCatalog {
    /// The shared state.
    pub fn state(&self) -> MutexGuard<'_, CatalogState> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Catalog for MemoryCatalog {
    fn installed(&mut self, plugin_id: &str) -> Result<Option<InstalledPlugin>, String> {
        Ok(self.state().plugins.get(plugin_id).cloned())
    }

    fn lock(&mut self) -> Result<(), String> {
        let mut state = self.state();
        if state.held_elsewhere {
            return Err("portable plugin catalog mutation is already locked".into());
        }
        state.depth += 1;
        state.acquisitions += 1;
        Ok(())
    }

    fn unlock(&mut self) {
        let mut state = self.state();
        state.depth = state.depth.saturating_sub(1);
    }
}

/// A clock that reads what the test sets (ms).
#[derive(Debug, Clone, Default)]
pub struct FixedClock(pub Arc<Mutex<u64>>);

impl Clock for FixedClock {
    fn now_ms(&mut self) -> u64 {
        *self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One set of fakes, usable natively and as a component's effects.
#[derive(Clone)]
pub struct FakeWorld {
    /// The store.
    pub store: MemoryStore,
    /// The process table.
    pub processes: ScriptedProcesses,
    /// The entropy.
    pub entropy: CountingEntropy,
    /// The workspace.
    pub workspace: MemoryWorkspace,
    /// The clock.
    pub clock: FixedClock,
    /// The plugin catalog.
    pub catalog: MemoryCatalog,
}

impl FakeWorld {
    /// A world on boot `boot_id` whose probes answer `status`.
    pub fn new(boot_id: &str, status: OwnerStatus) -> Self {
        Self::with_processes(ScriptedProcesses::new(boot_id, status))
    }

    /// A world around a given process table.
    pub fn with_processes(processes: ScriptedProcesses) -> Self {
        FakeWorld {
            store: MemoryStore::default(),
            processes,
            entropy: CountingEntropy::default(),
            workspace: MemoryWorkspace::default(),
            clock: FixedClock::default(),
            catalog: MemoryCatalog::default(),
        }
    }

    /// The same fakes as a component's effects.
    pub fn effects(&self) -> Effects {
        Effects {
            store: Box::new(self.store.clone()),
            processes: Box::new(self.processes.clone()),
            entropy: Box::new(self.entropy.clone()),
            workspace: Box::new(self.workspace.clone()),
            clock: Box::new(self.clock.clone()),
            catalog: Box::new(self.catalog.clone()),
        }
    }
}

/// Real process identity with the reference's two test seams (§6A.5 step 1): an injected
/// liveness answer for recorded owners and an injected current boot id. Capture and the
/// process's own identity stay real.
#[derive(Clone)]
pub struct SeamedProcesses {
    real: Arc<proclease::process_identity::ProcessIdentity>,
    inspect: Option<Arc<Mutex<StatusOracle>>>,
    boot_id: Option<String>,
}

impl SeamedProcesses {
    /// No seams: the real thing.
    pub fn real(real: Arc<proclease::process_identity::ProcessIdentity>) -> Self {
        SeamedProcesses { real, inspect: None, boot_id: None }
    }

    /// Every recorded owner answers `status`.
    pub fn inspect(mut self, status: OwnerStatus) -> Self {
        self.inspect = Some(Arc::new(Mutex::new(Box::new(move |_: &Owner| status))));
        self
    }

    /// Recorded owners are answered by `oracle`.
    pub fn inspect_with(mut self, oracle: StatusOracle) -> Self {
        self.inspect = Some(Arc::new(Mutex::new(oracle)));
        self
    }

    /// The current boot id is `boot_id`.
    pub fn boot(mut self, boot_id: &str) -> Self {
        self.boot_id = Some(boot_id.into());
        self
    }
}

impl Processes for SeamedProcesses {
    fn current_boot_id(&mut self) -> Result<String, String> {
        match &self.boot_id {
            Some(boot_id) => Ok(boot_id.clone()),
            None => self.real.current_boot_id().map_err(|e| e.0),
        }
    }

    fn self_identity(&mut self) -> Result<Owner, String> {
        self.real.self_identity().map_err(|e| e.0)
    }

    fn capture(&mut self, pid: u64) -> Result<Owner, String> {
        self.real.capture(pid).map_err(|e| e.0)
    }

    fn probe(&mut self, owner: &Owner) -> Result<OwnerFacts, String> {
        match &self.inspect {
            Some(oracle) => Ok(OwnerFacts::implying(owner, (oracle.lock().unwrap_or_else(|p| p.into_inner()))(owner))),
            None => self.real.probe(owner).map_err(|e| e.0),
        }
    }

    fn finished_run(&mut self, lease_id: &str) -> Result<Option<proclease::core::effects::FinishedRun>, String> {
        self.real.run_journal().map_or(Ok(None), |journal| journal.finished_run(lease_id))
    }

    fn forget_run(&mut self, lease_id: &str) {
        if let Some(journal) = self.real.run_journal() {
            journal.forget(lease_id);
        }
    }
}

/// A real state home in a temporary directory, opened through the facade, and effects over it.
pub struct RealHome {
    /// Keeps the directory alive.
    pub dir: tempfile::TempDir,
    /// The state home path.
    pub home: std::path::PathBuf,
    /// The facade on it, granting the temporary directory as the one workspace root.
    pub host: proclease::Host,
    /// The host's store.
    pub store: Arc<proclease::state_store::StateStore>,
    /// The host's process identity (with the home's witnesses).
    pub identity: Arc<proclease::process_identity::ProcessIdentity>,
    /// The host's workspace: the temporary directory granted as its one root.
    pub workspace: Arc<proclease::workspace::Workspace>,
    /// The host's plugin catalog: `provider-plugins/catalog.json` in the state home.
    pub catalog: Arc<proclease::plugin_catalog::PluginCatalog>,
}

impl RealHome {
    /// A fresh state home at `<tempdir>/state`.
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = dir.path().join("state");
        let host = proclease::Host::builder().state_home(&home).workspace_root(dir.path()).build().expect("host");
        let (store, identity, workspace, catalog) = (host.store().clone(), host.process_identity().clone(), host.workspace().clone(), host.catalog().clone());
        RealHome { dir, home, host, store, identity, workspace, catalog }
    }

    /// Effects over this home with the given process seams (and the temporary directory as
    /// the granted workspace).
    pub fn effects(&self, processes: SeamedProcesses) -> Effects {
        let mut effects = self.real_effects();
        effects.processes = Box::new(processes);
        effects
    }

    /// Effects over this home with real process identity, granting the temporary directory
    /// (which holds the state home and the tests' working directories) as the workspace.
    pub fn real_effects(&self) -> Effects {
        self.host.effects()
    }

    /// Real process identity, to add seams to.
    pub fn processes(&self) -> SeamedProcesses {
        SeamedProcesses::real(self.identity.clone())
    }
}

impl Default for RealHome {
    fn default() -> Self {
        Self::new()
    }
}
