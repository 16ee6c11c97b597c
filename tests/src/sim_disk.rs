//! A simulated disk that can crash or fail at any step, in the manner of LevelDB's
//! fault-injection environment and ALICE/CrashMonkey's crash states.
//!
//! **The store is the production code.** [`SimFs`] implements the store's system-call seam
//! (`proclease::state_store::seam::Fs`) on this disk, and [`SimDisk`]'s [`Store`] is the shipped
//! protocol ([`StoreProtocol`], `guest/protocols/src/state_store/protocol.rs`) over it: temporaries in
//! `.proclease/staging`, their fsync, link or rename into the collection, the collection's fsync,
//! the reference's mutation claim around each change (§3.5), the undo of a visible change whose
//! collection fsync failed, the recovery of each collection (§3.9) — exactly as the native store
//! runs them. [`SimKernel`] answers the process facts.
//!
//! **So is the workspace**: [`SimDisk`]'s [`Workspace`] is the shipped protocol
//! ([`WorkspaceProtocol`], `guest/protocols/src/workspace/protocol.rs`) over the same disk, with
//! [`WORKSPACE`] granted: a directory renamed into quarantine, re-checked, the parent fsynced,
//! deleted bottom-up, the parent fsynced. And so is the run journal ([`SimDisk::journal_begin`]
//! and its neighbours call `guest/protocols/src/run_journal.rs`): nothing of the
//! host's file protocols is modelled here any more.
//!
//! Every mutating call and every fsync is one numbered **step**. A [`Plan`] can:
//! * **crash after step k**: step k+1 and everything after it never happen (the process is
//!   gone). [`SimDisk::crash`] then keeps either everything (a process crash: the kernel
//!   still has it) or only what was made durable (a power loss: file data as of its last
//!   fsync, directory entries as of their directory's last fsync — the pessimistic POSIX
//!   model, where nothing unsynced survives);
//! * **fail step k** with an errno (ENOSPC, EIO, EXDEV, EACCES): the call does not happen and
//!   returns the error, as the real call would; later steps run normally (a transient fault).
//!
//! Reads (open, stat, read, readdir) are not steps: they change nothing that a crash could
//! tear, and their failures are covered by the real-filesystem tests. A `mkdir` of a name that
//! exists is not a step either, nor any call the kernel answers before changing anything
//! (`EEXIST`, `ENOENT`, `ENOTEMPTY`, `ENOTDIR`). A claim's stage write is not
//! fsynced, and its renames and unlink take no directory fsync, as in the host (a claim's
//! durability never matters: after a power loss its owner is gone, and whichever of its names the
//! disk kept is removed by the next recovery — one whose content the power loss took, because it
//! reads as empty).
//!
//! The disk has one namespace: the state home at [`HOME`] and the granted workspace root at
//! [`WORKSPACE`]. Process liveness comes from a shared set of dead pids ([`SimProcesses`],
//! [`SimKernel`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

use proclease::core::digest::sha256_hex;
use proclease::core::effects::{BatchStatus, CollectionIdentity, CollectionSnapshot, DirectoryFacts, Failure, FinishedRun, Processes, Store, Workspace};
use proclease::core::liveness::{OwnerFacts, OwnerStatus, WitnessState};
use proclease::core::records::{DirectoryIdentity, Owner};
use proclease::lock_wait::{Behind, LockError};
use proclease::protocols::run_journal::{self, JournalEntry, RunJournal};
use proclease::seam::{Errno as SysErrno, FileStat, Fs, IoError, Kernel, Locked, Name, S_IFDIR, S_IFREG};
use proclease::state_store::{self, StoreProtocol};
use proclease::workspace::{self, GrantedRoot, WorkspaceProtocol};

/// The state home's path on the simulated disk.
pub const HOME: &str = "/home";
/// The granted workspace root.
pub const WORKSPACE: &str = "/ws";
/// Where the store stages its temporaries.
pub const STAGING: &str = "/home/.proclease/staging";
/// The run journal's directory (`guest/protocols/src/run_journal.rs`).
pub const JOURNAL: &str = "/home/.proclease/runs";
/// The boot every simulated process runs on.
pub const BOOT: &str = "b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0";

/// An error a step can be made to return.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Errno {
    /// No space left on device.
    Nospc,
    /// I/O error (including on fsync).
    Io,
    /// Cross-device link or rename.
    Xdev,
    /// Permission denied.
    Acces,
}

impl Errno {
    /// Every errno the injector uses.
    pub const ALL: [Errno; 4] = [Errno::Nospc, Errno::Io, Errno::Xdev, Errno::Acces];
}

/// Why a step did not happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// The process is gone (a planned crash).
    Crashed,
    /// The call failed.
    Errno(Errno),
    /// The name exists (`EEXIST`, a real answer, not an injected fault).
    Exists,
    /// No such name (`ENOENT`, a real answer).
    Absent,
    /// The directory is not empty (`ENOTEMPTY`, a real answer).
    NotEmpty,
}

/// What the next run of steps will suffer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Plan {
    /// Crash after this many steps (counted from when the plan was set).
    pub crash_after: Option<u64>,
    /// Fail this step (1-based, counted from when the plan was set) with this errno, once.
    pub fail_at: Option<(u64, Errno)>,
}

/// How a crash treats what was not made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashKind {
    /// The process died; the kernel keeps everything it had accepted.
    Process,
    /// The machine lost power; only fsynced data and fsynced directory entries remain.
    PowerLoss,
}

#[derive(Debug, Clone)]
enum Node {
    File { data: Vec<u8>, synced: Vec<u8> },
    Dir { entries: BTreeMap<String, u64>, synced: BTreeMap<String, u64> },
}

/// The disk's state (clones of [`SimDisk`] share it).
#[derive(Debug, Clone)]
pub struct DiskState {
    nodes: BTreeMap<u64, Node>,
    next_inode: u64,
    plan: Plan,
    steps: u64,
    crashed: bool,
    /// The pid of the process doing the operations (names temporaries and quarantines).
    pub actor: u64,
    /// Names of the steps taken since the plan was set, for failure messages.
    pub trace: Vec<&'static str>,
    /// Every content published into a collection (linked or renamed there) since the plan
    /// was set: the complete versions a record may hold after a crash.
    pub published: Vec<Vec<u8>>,
    /// Every record path (`/home/…`) a removal unlinked since the plan was set: the only
    /// records that may be absent part-way through an operation that keeps them.
    pub unlinked: Vec<String>,
    /// A deliberately broken store, for the suite's own check: a directory fsync that directly
    /// follows a `link` is taken as a step but makes nothing durable, as if the store's create
    /// path had no directory sync ([`SimDisk::lose_directory_syncs_after_links`]).
    lose_sync_after_link: bool,
}

/// The simulated disk: a [`Store`] on [`HOME`] and a [`Workspace`] on [`WORKSPACE`].
#[derive(Debug, Clone)]
pub struct SimDisk {
    state: Arc<Mutex<DiskState>>,
    dead: Arc<Mutex<BTreeSet<u64>>>,
    /// The run journal entries the simulated supervisors hold open, by lease id (a fork starts
    /// with none).
    journal_entries: Arc<Mutex<BTreeMap<String, JournalEntry<SimFs>>>>,
}

const ROOT: u64 = 1;

type Step<T> = Result<T, Fault>;

impl DiskState {
    fn new() -> Self {
        let mut state = DiskState {
            nodes: BTreeMap::new(),
            next_inode: ROOT,
            plan: Plan::default(),
            steps: 0,
            crashed: false,
            actor: 1,
            trace: Vec::new(),
            published: Vec::new(),
            unlinked: Vec::new(),
            lose_sync_after_link: false,
        };
        state.nodes.insert(ROOT, Node::Dir { entries: BTreeMap::new(), synced: BTreeMap::new() });
        for path in [HOME, "/home/.proclease", STAGING, "/home/.proclease/locks", JOURNAL, WORKSPACE] {
            let (parent, name) = split_path(path);
            let parent = state.lookup(parent).unwrap_or(ROOT);
            let inode = state.new_dir();
            state.entries_mut(parent).insert(name.into(), inode);
        }
        state.sync_all();
        state
    }

    /// Makes everything durable (as after `sync`).
    fn sync_all(&mut self) {
        for node in self.nodes.values_mut() {
            match node {
                Node::File { data, synced } => *synced = data.clone(),
                Node::Dir { entries, synced } => *synced = entries.clone(),
            }
        }
    }

    fn new_dir(&mut self) -> u64 {
        self.next_inode += 1;
        self.nodes.insert(self.next_inode, Node::Dir { entries: BTreeMap::new(), synced: BTreeMap::new() });
        self.next_inode
    }

    fn new_file(&mut self) -> u64 {
        self.next_inode += 1;
        self.nodes.insert(self.next_inode, Node::File { data: Vec::new(), synced: Vec::new() });
        self.next_inode
    }

    fn entries(&self, dir: u64) -> Option<&BTreeMap<String, u64>> {
        match self.nodes.get(&dir) {
            Some(Node::Dir { entries, .. }) => Some(entries),
            _ => None,
        }
    }

    fn entries_mut(&mut self, dir: u64) -> &mut BTreeMap<String, u64> {
        match self.nodes.get_mut(&dir) {
            Some(Node::Dir { entries, .. }) => entries,
            _ => panic!("simulated disk: inode {dir} is not a directory"),
        }
    }

    fn is_dir(&self, inode: u64) -> bool {
        matches!(self.nodes.get(&inode), Some(Node::Dir { .. }))
    }

    fn lookup(&self, path: &str) -> Option<u64> {
        let mut current = ROOT;
        for segment in path.split('/').filter(|s| !s.is_empty()) {
            current = *self.entries(current)?.get(segment)?;
        }
        Some(current)
    }

    fn child(&self, dir: u64, name: &str) -> Option<u64> {
        self.entries(dir)?.get(name).copied()
    }

    fn data(&self, inode: u64) -> Option<&[u8]> {
        match self.nodes.get(&inode) {
            Some(Node::File { data, .. }) => Some(data),
            _ => None,
        }
    }

    /// `Err(Crashed)` once the planned crash happened: a dead process gets no answer.
    fn alive(&self) -> Step<()> {
        if self.crashed { Err(Fault::Crashed) } else { Ok(()) }
    }

    /// Takes one step named `what`, or reports the planned fault.
    fn step(&mut self, what: &'static str) -> Step<()> {
        if self.crashed {
            return Err(Fault::Crashed);
        }
        if self.plan.crash_after.is_some_and(|after| self.steps >= after) {
            self.crashed = true;
            return Err(Fault::Crashed);
        }
        self.steps += 1;
        self.trace.push(what);
        if let Some((at, errno)) = self.plan.fail_at
            && at == self.steps
        {
            return Err(Fault::Errno(errno));
        }
        Ok(())
    }

    // ---- system calls (each one step) ----

    /// `mkdir`: a step, unless the name exists (`EEXIST` is answered before anything changes, so
    /// no crash or fault can fall there: the store's opening asks for its own directories each
    /// time).
    fn mkdir(&mut self, parent: u64, name: &str) -> Step<u64> {
        self.alive()?;
        if self.child(parent, name).is_some() {
            return Err(Fault::Exists);
        }
        self.step("mkdir")?;
        let inode = self.new_dir();
        self.entries_mut(parent).insert(name.into(), inode);
        Ok(inode)
    }

    fn create_file(&mut self, dir: u64, name: &str) -> Step<u64> {
        self.step("create")?;
        if self.child(dir, name).is_some() {
            return Err(Fault::Exists);
        }
        let inode = self.new_file();
        self.entries_mut(dir).insert(name.into(), inode);
        Ok(inode)
    }

    fn write(&mut self, inode: u64, bytes: &[u8]) -> Step<()> {
        self.step("write")?;
        if let Some(Node::File { data, .. }) = self.nodes.get_mut(&inode) {
            data.extend_from_slice(bytes);
        }
        Ok(())
    }

    fn fsync(&mut self, inode: u64, what: &'static str) -> Step<()> {
        self.step(what)?;
        match self.nodes.get_mut(&inode) {
            Some(Node::File { data, synced }) => *synced = data.clone(),
            Some(Node::Dir { entries, synced }) => *synced = entries.clone(),
            None => {}
        }
        Ok(())
    }

    /// `link`: a step, unless the kernel answers first (`ENOENT`, `EEXIST`: nothing changes).
    fn link(&mut self, from_dir: u64, from: &str, to_dir: u64, to: &str) -> Step<()> {
        self.alive()?;
        let inode = self.child(from_dir, from).ok_or(Fault::Absent)?;
        if self.child(to_dir, to).is_some() {
            return Err(Fault::Exists);
        }
        self.step("link")?;
        self.entries_mut(to_dir).insert(to.into(), inode);
        Ok(())
    }

    /// Records the content now at `name` in `dir` as published into a collection.
    fn note_published(&mut self, dir: u64, name: &str) {
        if let Some(data) = self.child(dir, name).and_then(|inode| self.data(inode)).map(<[u8]>::to_vec) {
            self.published.push(data);
        }
    }

    /// `rename`: a step, unless the kernel answers first (`ENOENT`, `EEXIST` without replace).
    fn rename(&mut self, from_dir: u64, from: &str, to_dir: u64, to: &str, noreplace: bool) -> Step<()> {
        self.alive()?;
        let inode = self.child(from_dir, from).ok_or(Fault::Absent)?;
        if noreplace && self.child(to_dir, to).is_some() {
            return Err(Fault::Exists);
        }
        self.step("rename")?;
        self.entries_mut(from_dir).remove(from);
        self.entries_mut(to_dir).insert(to.into(), inode);
        Ok(())
    }

    /// `unlink` or `rmdir`: a step, unless the kernel answers first (`ENOENT`, `ENOTEMPTY`).
    fn unlink(&mut self, dir: u64, name: &str, what: &'static str) -> Step<()> {
        self.alive()?;
        let inode = self.child(dir, name).ok_or(Fault::Absent)?;
        if self.entries(inode).is_some_and(|e| !e.is_empty()) {
            return Err(Fault::NotEmpty);
        }
        self.step(what)?;
        self.entries_mut(dir).remove(name);
        Ok(())
    }
}

/// The identity the simulated disk reports for directory inode `inode`.
pub fn identity_of(inode: u64) -> DirectoryIdentity {
    DirectoryIdentity { device: "2049".into(), inode: inode.to_string(), birthtime_ns: (1_700_000_000_000_000_000u64 + inode).to_string() }
}

/// The birth time of `inode`, (s, ns): [`identity_of`]'s.
fn birth_of(inode: u64) -> (i64, i64) {
    let ns = 1_700_000_000_000_000_000u64 + inode;
    ((ns / 1_000_000_000) as i64, (ns % 1_000_000_000) as i64)
}

fn split_path(path: &str) -> (&str, &str) {
    path.rsplit_once('/').map(|(p, n)| (if p.is_empty() { "/" } else { p }, n)).unwrap_or(("/", path))
}

/// A fault of a write outside the protocols (a command's own output), as a failure.
fn workspace_failure(path: &str, fault: Fault) -> Failure {
    match fault {
        Fault::Crashed => Failure::io(format!("{path}: the process crashed")),
        fault => Failure::io(format!("{path}: {}", std::io::Error::from(errno(fault)))),
    }
}

/// What is on the disk, as the tests compare it: every file (path → bytes) and every directory
/// (path → inode), below the root.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Listing {
    /// Files.
    pub files: BTreeMap<String, Vec<u8>>,
    /// Directories.
    pub directories: BTreeMap<String, u64>,
}

impl Listing {
    /// The records: files under the state home outside `.proclease`, mutation claims and their
    /// stages aside.
    pub fn records(&self) -> BTreeMap<&str, &[u8]> {
        self.files
            .iter()
            .filter(|(p, _)| p.starts_with("/home/") && !p.starts_with("/home/.proclease/") && !p.contains("/.io-mutation-"))
            .map(|(p, d)| (p.as_str(), d.as_slice()))
            .collect()
    }

    /// Mutation claims and claim stages (§3.5) anywhere under the state home.
    pub fn claims(&self) -> Vec<&str> {
        self.files.keys().filter(|p| p.contains("/.io-mutation-")).map(String::as_str).collect()
    }

    /// The run journal's entries: lease id → bytes.
    pub fn journal(&self) -> BTreeMap<String, Vec<u8>> {
        let prefix = format!("{JOURNAL}/");
        self.files.iter().filter_map(|(path, bytes)| Some((path.strip_prefix(&prefix)?.strip_suffix(".run")?.to_owned(), bytes.clone()))).collect()
    }

    /// Temporaries left in the staging directory.
    pub fn temporaries(&self) -> Vec<&str> {
        self.files.keys().filter(|p| p.starts_with("/home/.proclease/staging/")).map(String::as_str).collect()
    }

    /// Quarantines left under the workspace.
    pub fn quarantines(&self) -> Vec<&str> {
        self.directories.keys().chain(self.files.keys()).filter(|p| p.contains("/.io-remove-")).map(String::as_str).collect()
    }
}

impl Default for SimDisk {
    fn default() -> Self {
        Self::new()
    }
}

impl SimDisk {
    /// A disk with an empty state home and workspace root, all durable.
    pub fn new() -> Self {
        SimDisk { state: Arc::new(Mutex::new(DiskState::new())), dead: Arc::new(Mutex::new(BTreeSet::new())), journal_entries: Arc::default() }
    }

    /// An independent copy (same contents, same dead set contents, fresh sharing).
    pub fn fork(&self) -> Self {
        SimDisk {
            state: Arc::new(Mutex::new(self.state().clone())),
            dead: Arc::new(Mutex::new(self.dead.lock().unwrap_or_else(|p| p.into_inner()).clone())),
            journal_entries: Arc::default(),
        }
    }

    /// The shared state.
    pub fn state(&self) -> MutexGuard<'_, DiskState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Marks `pid` dead (or alive again with `false`).
    pub fn set_dead(&self, pid: u64, dead: bool) {
        let mut set = self.dead.lock().unwrap_or_else(|p| p.into_inner());
        if dead {
            set.insert(pid);
        } else {
            set.remove(&pid);
        }
    }

    /// The process table over this disk's dead set, for the process `pid`.
    pub fn processes(&self, pid: u64) -> SimProcesses {
        SimProcesses { pid, dead: self.dead.clone(), state: self.state.clone() }
    }

    /// Sets the plan and restarts the step count and trace.
    pub fn plan(&self, plan: Plan) {
        let mut state = self.state();
        state.plan = plan;
        state.steps = 0;
        state.crashed = false;
        state.trace.clear();
        state.published.clear();
        state.unlinked.clear();
    }

    /// Steps taken since the plan was set.
    pub fn steps(&self) -> u64 {
        self.state().steps
    }

    /// Whether the planned crash happened.
    pub fn crashed(&self) -> bool {
        self.state().crashed
    }

    /// Makes everything durable.
    pub fn sync_all(&self) {
        self.state().sync_all();
    }

    /// Crashes: keeps everything ([`CrashKind::Process`]) or only what was durable
    /// ([`CrashKind::PowerLoss`]); clears the plan.
    pub fn crash(&self, kind: CrashKind) {
        let mut state = self.state();
        if kind == CrashKind::PowerLoss {
            for node in state.nodes.values_mut() {
                match node {
                    Node::File { data, synced } => *data = synced.clone(),
                    Node::Dir { entries, synced } => *entries = synced.clone(),
                }
            }
        }
        state.plan = Plan::default();
        state.crashed = false;
    }

    /// Breaks the store on purpose (`true`): every directory fsync that directly follows a
    /// `link` makes nothing durable, as a store whose create path lost its collection sync
    /// would. For the check that the crash-state suite notices such a store.
    pub fn lose_directory_syncs_after_links(&self, lose: bool) {
        self.state().lose_sync_after_link = lose;
    }

    /// Sets the acting process (names of its temporaries and quarantines).
    pub fn act_as(&self, pid: u64) {
        let mut state = self.state();
        state.actor = pid;
    }

    /// Everything reachable from the root.
    pub fn listing(&self) -> Listing {
        let state = self.state();
        let mut listing = Listing::default();
        let mut stack = vec![(String::new(), ROOT)];
        while let Some((path, inode)) = stack.pop() {
            let Some(entries) = state.entries(inode) else { continue };
            for (name, child) in entries {
                let child_path = format!("{path}/{name}");
                match state.nodes.get(child) {
                    Some(Node::Dir { .. }) => {
                        listing.directories.insert(child_path.clone(), *child);
                        stack.push((child_path, *child));
                    }
                    Some(Node::File { data, .. }) => {
                        listing.files.insert(child_path, data.clone());
                    }
                    None => {}
                }
            }
        }
        listing
    }

    /// Creates a file with `content` at absolute `path` outside any protocol (a command's
    /// output in a leased directory); one step per call, like the command's own writes.
    pub fn write_file(&self, path: &str, content: &[u8]) -> Result<(), Failure> {
        let mut state = self.state();
        let (parent, name) = split_path(path);
        let dir = state.lookup(parent).ok_or_else(|| Failure::io(format!("{path}: no such directory")))?;
        let inode = state.create_file(dir, name).map_err(|f| workspace_failure(path, f))?;
        state.write(inode, content).map_err(|f| workspace_failure(path, f))
    }
}

/// What a journal entry's bytes say: `Some` only for a complete `finished` entry of
/// `lease_id` (the production parser, `run_journal::parse`).
pub fn parse_journal(bytes: &[u8], lease_id: &str) -> Option<FinishedRun> {
    run_journal::parse(bytes, lease_id)
}

/// The production run journal over the disk `state`.
fn run_journal_on(state: &Arc<Mutex<DiskState>>) -> Result<RunJournal<SimFs>, String> {
    let home = state.lock().unwrap_or_else(|p| p.into_inner()).lookup(HOME).ok_or("the simulated state home is gone")?;
    RunJournal::open_at(SimFs { state: state.clone() }, &home).map_err(|e| e.to_string())
}

impl SimDisk {
    /// The supervisor's `RunJournal::begin` before the command starts (the production code):
    /// create the entry exclusively and write it (each a step, neither synced: `finished` makes
    /// the entry durable); a failure after the create unlinks it again.
    pub fn journal_begin(&self, lease_id: &str, directory: &DirectoryIdentity) -> Result<(), String> {
        let failed = |e: String| format!("cannot start the run journal: {e}");
        let entry = run_journal_on(&self.state).map_err(failed)?.begin(lease_id, directory).map_err(|e| failed(e.to_string()))?;
        self.journal_entries.lock().unwrap_or_else(|p| p.into_inner()).insert(lease_id.to_owned(), entry);
        Ok(())
    }

    /// The supervisor's `JournalEntry::finished` once the command's tree has ended (the
    /// production code): the entry is overwritten in place (`journal overwrite`: the kernel has
    /// it), `fdatasync`ed (`fdatasync journal`) and its directory fsynced (`fsync journal
    /// directory`: the disk has it).
    pub fn journal_finish(&self, lease_id: &str, exit_code: i32) -> Result<(), String> {
        let failed = |e: String| format!("the run journal could not record the end: {e}");
        let entries = self.journal_entries.lock().unwrap_or_else(|p| p.into_inner());
        let entry = entries.get(lease_id).ok_or_else(|| failed("no entry was begun".into()))?;
        entry.finished(Some(exit_code), None).map_err(|e| failed(e.to_string()))
    }

    /// The supervisor's `RunJournal::forget` after a release (best effort, one step).
    pub fn journal_forget(&self, lease_id: &str) {
        self.journal_entries.lock().unwrap_or_else(|p| p.into_inner()).remove(lease_id);
        if let Ok(journal) = run_journal_on(&self.state) {
            journal.forget(lease_id);
        }
    }

    /// The journal entries on the disk now: lease id → bytes.
    pub fn journal(&self) -> BTreeMap<String, Vec<u8>> {
        self.listing().journal()
    }
}

impl SimDisk {
    /// The production store's protocol over this disk, acting as the current actor
    /// ([`SimDisk::act_as`]).
    pub fn store(&self) -> Result<StoreProtocol<SimFs, SimKernel>, Failure> {
        let home = self.state().lookup(HOME).ok_or_else(|| Failure::io(format!("{HOME}: the simulated state home is gone")))?;
        let actor = self.state().actor;
        StoreProtocol::open(SimFs { state: self.state.clone() }, home, Arc::new(SimKernel::new(actor, self.dead.clone()))).map_err(state_store::failure)
    }
}

/// The state store of [`SimDisk`]: the production protocol ([`StoreProtocol`]) over [`SimFs`].
impl Store for SimDisk {
    fn read_if_present(&mut self, path: &str, max_bytes: u32) -> Result<Option<String>, Failure> {
        self.store()?.read_if_present(path, max_bytes).map_err(state_store::failure)
    }

    fn create_if_absent(&mut self, path: &str, content: &str) -> Result<bool, Failure> {
        self.store()?.create_if_absent(path, content).map_err(state_store::failure)
    }

    fn replace_if_unchanged(&mut self, path: &str, expected_sha256: &str, content: &str) -> Result<bool, Failure> {
        self.store()?.replace_if_unchanged(path, expected_sha256, content).map_err(state_store::failure)
    }

    fn replace_if_unchanged_lazily(&mut self, path: &str, expected_sha256: &str, content: &str) -> Result<bool, Failure> {
        self.store()?.replace_if_unchanged_lazily(path, expected_sha256, content).map_err(state_store::failure)
    }

    fn remove_if_unchanged(&mut self, path: &str, expected_sha256: &str) -> Result<bool, Failure> {
        self.store()?.remove_if_unchanged(path, expected_sha256).map_err(state_store::failure)
    }

    fn ensure_private_directory(&mut self, path: &str) -> Result<CollectionIdentity, Failure> {
        self.store()?.ensure_private_directory(path).map_err(state_store::failure)
    }

    fn snapshot(&mut self, path: &str, recover_orphans: bool) -> Result<Option<CollectionSnapshot>, Failure> {
        self.store()?.snapshot(path, recover_orphans).map_err(state_store::failure)
    }

    fn read_batch(
        &mut self,
        path: &str,
        names: &[String],
        max_bytes_per_file: u32,
        max_total_bytes: u32,
        expected: &CollectionIdentity,
    ) -> Result<Vec<(String, BatchStatus)>, Failure> {
        self.store()?.read_batch(path, names, max_bytes_per_file, max_total_bytes, expected).map_err(state_store::failure)
    }
}

/// The simulated disk as the store's file system (the seam's [`Fs`]): every mutating call is a
/// step ([`Plan`]) that can crash or fail; reads are not. Handles are inode numbers.
#[derive(Debug, Clone)]
pub struct SimFs {
    state: Arc<Mutex<DiskState>>,
}

impl SimFs {
    fn state(&self) -> MutexGuard<'_, DiskState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The errno a fault is reported with through the seam (a crash: `EIO`; the process is gone and
/// nothing it does next takes effect).
fn errno(fault: Fault) -> SysErrno {
    match fault {
        Fault::Crashed => SysErrno::IO,
        Fault::Exists => SysErrno::EXIST,
        Fault::Absent => SysErrno::NOENT,
        Fault::NotEmpty => SysErrno::NOTEMPTY,
        Fault::Errno(Errno::Nospc) => SysErrno::NOSPC,
        Fault::Errno(Errno::Io) => SysErrno::IO,
        Fault::Errno(Errno::Xdev) => SysErrno::XDEV,
        Fault::Errno(Errno::Acces) => SysErrno::ACCESS,
    }
}

impl DiskState {
    /// What `stat` says of `inode`: device 2049, the inode, mode 0700 for a directory and 0600
    /// for a file, owned by uid 0 (the simulated user).
    fn stat_of(&self, inode: u64) -> Option<FileStat> {
        let (mode, size) = match self.nodes.get(&inode)? {
            Node::Dir { .. } => (S_IFDIR | 0o700, 0),
            Node::File { data, .. } => (S_IFREG | 0o600, data.len() as i64),
        };
        Some(FileStat { dev: 2049, ino: inode, size, mtime: (0, 0), ctime: (0, 0), mode, uid: 0, birth: Some(birth_of(inode)) })
    }

    /// The path of directory `inode` below the root, if it is reachable.
    fn path_of(&self, inode: u64) -> Option<String> {
        let mut stack = vec![(String::new(), ROOT)];
        while let Some((path, dir)) = stack.pop() {
            if dir == inode {
                return Some(if path.is_empty() { "/".into() } else { path });
            }
            for (name, child) in self.entries(dir).into_iter().flatten() {
                if self.is_dir(*child) {
                    stack.push((format!("{path}/{name}"), *child));
                }
            }
        }
        None
    }

    /// Whether `name` in `dir` is a record's name (in the state home, outside `.proclease`, not
    /// one of the claims' or recovery's `.io-` names).
    fn record_path(&self, dir: u64, name: &str) -> Option<String> {
        let path = format!("{}/{name}", self.path_of(dir)?);
        (path.starts_with("/home/") && !path.starts_with("/home/.proclease/") && !name.starts_with(".io-")).then_some(path)
    }
}

impl Fs for SimFs {
    type Dir = u64;
    type File = u64;
    type Lock = ();

    fn euid(&self) -> u32 {
        0
    }

    fn duplicate(&self, dir: &u64) -> Result<u64, SysErrno> {
        Ok(*dir)
    }

    fn open_dir(&self, dir: &u64, name: &(impl Name + ?Sized)) -> Result<u64, SysErrno> {
        let state = self.state();
        match state.child(*dir, text(name)?) {
            None => Err(SysErrno::NOENT),
            Some(inode) if state.is_dir(inode) => Ok(inode),
            Some(_) => Err(SysErrno::NOTDIR),
        }
    }

    fn stat_dir(&self, dir: &u64) -> Result<FileStat, SysErrno> {
        self.state().stat_of(*dir).ok_or(SysErrno::NOENT)
    }

    fn lstat(&self, dir: &u64, name: &(impl Name + ?Sized)) -> Result<Option<FileStat>, SysErrno> {
        let state = self.state();
        Ok(state.child(*dir, text(name)?).and_then(|inode| state.stat_of(inode)))
    }

    fn open_file(&self, dir: &u64, name: &(impl Name + ?Sized)) -> Result<u64, SysErrno> {
        self.state().child(*dir, text(name)?).ok_or(SysErrno::NOENT)
    }

    /// As `fstat`: no birth time.
    fn stat_file(&self, file: &u64) -> Result<FileStat, SysErrno> {
        self.state().stat_of(*file).map(|stat| FileStat { birth: None, ..stat }).ok_or(SysErrno::NOENT)
    }

    fn read_up_to(&self, file: &u64, limit: u64, _: u64) -> Result<Vec<u8>, SysErrno> {
        let state = self.state();
        let data = state.data(*file).ok_or(SysErrno::ISDIR)?;
        Ok(data[..data.len().min(usize::try_from(limit).unwrap_or(usize::MAX))].to_vec())
    }

    fn read_names(&self, dir: &u64, bound: usize, prefix: &[u8]) -> Result<Vec<Vec<u8>>, Option<SysErrno>> {
        let state = self.state();
        let entries = state.entries(*dir).ok_or(Some(SysErrno::NOTDIR))?;
        let names: Vec<Vec<u8>> = entries.keys().map(|n| n.as_bytes().to_vec()).filter(|n| n.starts_with(prefix)).collect();
        if names.len() > bound {
            return Err(None);
        }
        Ok(names)
    }

    fn create_file(&self, dir: &u64, name: &(impl Name + ?Sized)) -> Result<u64, SysErrno> {
        self.state().create_file(*dir, text(name)?).map_err(errno)
    }

    fn write_all(&self, file: &u64, bytes: &[u8]) -> Result<(), SysErrno> {
        self.state().write(*file, bytes).map_err(errno)
    }

    /// One step: `journal overwrite` when it rewrites bytes the file already has (the run
    /// journal's in-place update), else `write`.
    fn write_at(&self, file: &u64, bytes: &[u8], offset: u64) -> Result<(), SysErrno> {
        let mut state = self.state();
        let offset = usize::try_from(offset).map_err(|_| SysErrno::FBIG)?;
        let in_place = state.data(*file).is_some_and(|data| data.len() >= offset + bytes.len());
        state.step(if in_place { "journal overwrite" } else { "write" }).map_err(errno)?;
        if let Some(Node::File { data, .. }) = state.nodes.get_mut(file) {
            if data.len() < offset + bytes.len() {
                data.resize(offset + bytes.len(), 0);
            }
            data[offset..offset + bytes.len()].copy_from_slice(bytes);
        }
        Ok(())
    }

    fn sync_file(&self, file: &u64) -> Result<(), SysErrno> {
        self.state().fsync(*file, "fsync file").map_err(errno)
    }

    /// One step, `fdatasync journal` (only the run journal asks for it).
    fn sync_file_data(&self, file: &u64) -> Result<(), SysErrno> {
        self.state().fsync(*file, "fdatasync journal").map_err(errno)
    }

    fn make_dir(&self, dir: &u64, name: &(impl Name + ?Sized)) -> Result<u64, SysErrno> {
        self.state().mkdir(*dir, text(name)?).map_err(errno)
    }

    /// One step: `fsync journal directory` for the run journal's (only its `finished` asks),
    /// else `fsync directory`.
    fn sync_dir(&self, dir: &u64) -> Result<(), SysErrno> {
        let mut state = self.state();
        if state.lose_sync_after_link && state.trace.last() == Some(&"link") {
            return state.step("fsync directory").map_err(errno);
        }
        let what = if state.lookup(JOURNAL) == Some(*dir) { "fsync journal directory" } else { "fsync directory" };
        state.fsync(*dir, what).map_err(errno)
    }

    /// A step named `fsync after recovery`: the store makes what its recovery removed durable,
    /// best effort.
    fn sync_dir_for_claims(&self, dir: &u64) -> Result<(), SysErrno> {
        self.state().fsync(*dir, "fsync after recovery").map_err(errno)
    }

    fn link(&self, from_dir: &u64, from: &(impl Name + ?Sized), to_dir: &u64, to: &(impl Name + ?Sized)) -> Result<(), SysErrno> {
        let (from, to) = (text(from)?, text(to)?);
        let mut state = self.state();
        state.link(*from_dir, from, *to_dir, to).map_err(errno)?;
        if state.record_path(*to_dir, to).is_some() {
            state.note_published(*to_dir, to);
        }
        Ok(())
    }

    fn rename(&self, from_dir: &u64, from: &(impl Name + ?Sized), to_dir: &u64, to: &(impl Name + ?Sized), replace: bool) -> Result<(), SysErrno> {
        let (from, to) = (text(from)?, text(to)?);
        let mut state = self.state();
        state.rename(*from_dir, from, *to_dir, to, !replace).map_err(errno)?;
        if state.record_path(*to_dir, to).is_some() {
            state.note_published(*to_dir, to);
        }
        Ok(())
    }

    /// One step, named for what it removes: `unlink temporary` (in the staging directory),
    /// `unlink claim` (a mutation claim or its stage), `unlink record` (another file of the
    /// state home), `unlink file` (in the workspace). `ISDIR` for a directory.
    fn unlink(&self, dir: &u64, name: &(impl Name + ?Sized)) -> Result<(), SysErrno> {
        let name = text(name)?;
        let mut state = self.state();
        if state.child(*dir, name).is_some_and(|inode| state.is_dir(inode)) {
            return Err(SysErrno::ISDIR);
        }
        let record = state.record_path(*dir, name);
        let what = if state.lookup(STAGING) == Some(*dir) {
            "unlink temporary"
        } else if state.lookup(JOURNAL) == Some(*dir) {
            "unlink journal"
        } else if name.starts_with(".io-mutation-") {
            "unlink claim"
        } else if state.path_of(*dir).is_some_and(|path| path.starts_with(HOME)) {
            "unlink record"
        } else {
            "unlink file"
        };
        state.unlink(*dir, name, what).map_err(errno)?;
        if let Some(path) = record {
            state.unlinked.push(path);
        }
        Ok(())
    }

    /// One step (`rmdir`) for an empty directory: `NOTEMPTY` or `NOTDIR` are answered before any
    /// change.
    fn remove_dir(&self, dir: &u64, name: &(impl Name + ?Sized)) -> Result<(), SysErrno> {
        let name = text(name)?;
        let mut state = self.state();
        match state.child(*dir, name) {
            None => return Err(SysErrno::NOENT),
            Some(inode) if !state.is_dir(inode) => return Err(SysErrno::NOTDIR),
            Some(inode) if state.entries(inode).is_some_and(|e| !e.is_empty()) => return Err(SysErrno::NOTEMPTY),
            Some(_) => {}
        }
        state.unlink(*dir, name, "rmdir").map_err(errno)
    }

    fn first_names(&self, dir: &u64, at_most: usize) -> Result<Vec<Vec<u8>>, SysErrno> {
        let state = self.state();
        let entries = state.entries(*dir).ok_or(SysErrno::NOTDIR)?;
        Ok(entries.keys().take(at_most).map(|n| n.as_bytes().to_vec()).collect())
    }

    /// One process at a time acts on the simulated disk: the lock is always free.
    fn lock_directory(&self, _: &u64, _: &str) -> Result<(), LockError> {
        Ok(())
    }

    /// Nothing is recorded: this disk's locks are granted at once and exclude nothing, and a
    /// note is proof of abandonment only to a holder that excludes its writer. (A simulated
    /// writer is never abandoned alive: it crashes with its process.)
    fn note_in_lock(&self, _: &(), _: &[u8]) -> Result<(), SysErrno> {
        Ok(())
    }

    fn lock_note(&self, _: &(), _: usize) -> Result<Vec<u8>, SysErrno> {
        Ok(Vec::new())
    }

    /// One writer at a time acts on the simulated disk: the lock is always free.
    fn try_lock(&self, _: &u64, _: &(impl Name + ?Sized)) -> Result<Option<()>, SysErrno> {
        Ok(Some(()))
    }

    /// One writer at a time acts on the simulated disk: the lock is always free.
    fn lock(&self, _: &u64, _: &(impl Name + ?Sized), _: &dyn Fn(Option<i32>) -> Option<Behind>) -> Result<Locked<()>, IoError> {
        Ok(Locked::Held(()))
    }
}

/// The kernel of the simulated processes, for the store acting as `pid`: every process runs on
/// [`BOOT`] with the start id [`owner`] gives it, and is gone once marked dead.
#[derive(Debug, Clone)]
pub struct SimKernel {
    pid: u64,
    dead: Arc<Mutex<BTreeSet<u64>>>,
    /// Its monotonic clock, ns: it advances only when the protocol pauses.
    clock_ns: Arc<std::sync::atomic::AtomicU64>,
}

/// A name through the seam as the simulated disk's text (every name it holds is UTF-8).
fn text(name: &(impl Name + ?Sized)) -> Result<&str, SysErrno> {
    std::str::from_utf8(name.as_ref()).map_err(|_| SysErrno::ILSEQ)
}

impl SimKernel {
    fn new(pid: u64, dead: Arc<Mutex<BTreeSet<u64>>>) -> SimKernel {
        SimKernel { pid, dead, clock_ns: Arc::default() }
    }

    fn is_dead(&self, pid: u64) -> bool {
        self.dead.lock().unwrap_or_else(|p| p.into_inner()).contains(&pid)
    }
}

impl Kernel for SimKernel {
    fn pid(&self) -> u32 {
        u32::try_from(self.pid).unwrap_or(u32::MAX)
    }

    fn self_identity(&self) -> Result<Owner, String> {
        Ok(owner(self.pid))
    }

    fn current_boot_id(&self) -> Result<String, String> {
        Ok(BOOT.into())
    }

    fn owner_status(&self, recorded: &Owner) -> Result<OwnerStatus, String> {
        Ok(if *recorded != owner(recorded.pid) || self.is_dead(recorded.pid) { OwnerStatus::DifferentOrDead } else { OwnerStatus::ExactLiveOwner })
    }

    fn pid_gone(&self, pid: u64) -> bool {
        self.is_dead(pid)
    }

    /// Simulated time: it passes only in a pause.
    fn monotonic(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(self.clock_ns.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// Random, as on a real machine: the explorer does not choose names.
    fn random_bytes(&self) -> [u8; 16] {
        uuid::Uuid::new_v4().into_bytes()
    }

    /// Returns at once, and the simulated clock advances by `duration`.
    fn pause(&self, duration: std::time::Duration) {
        let ns = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
        self.clock_ns.fetch_add(ns, std::sync::atomic::Ordering::Relaxed);
    }
}

impl SimDisk {
    /// The production workspace's protocol over this disk, with the root [`WORKSPACE`] granted,
    /// acting as the current actor ([`SimDisk::act_as`]).
    pub fn workspace(&self) -> Result<WorkspaceProtocol<SimFs, SimKernel>, Failure> {
        let root = self.state().lookup(WORKSPACE).ok_or_else(|| Failure::io(format!("{WORKSPACE}: the simulated workspace root is gone")))?;
        let kernel = SimKernel::new(self.state().actor, self.dead.clone());
        let roots = vec![GrantedRoot { path: WORKSPACE.into(), dir: root }];
        Ok(WorkspaceProtocol::new(SimFs { state: self.state.clone() }, kernel, roots, || {}))
    }
}

/// The workspace of [`SimDisk`]: the production protocol ([`WorkspaceProtocol`]) over [`SimFs`].
impl Workspace for SimDisk {
    fn inspect(&mut self, path: &str) -> Result<Option<DirectoryFacts>, Failure> {
        self.workspace()?.inspect(path).map_err(workspace::failure)
    }

    fn create_private_directory(&mut self, path: &str) -> Result<Vec<String>, Failure> {
        self.workspace()?.create_private_directory(path).map_err(workspace::failure)
    }

    fn remove_empty_directory(&mut self, path: &str, expected: Option<&DirectoryIdentity>) -> Result<bool, Failure> {
        self.workspace()?.remove_empty_directory(path, expected).map_err(workspace::failure)
    }

    fn remove_tree(&mut self, path: &str, expected: &DirectoryIdentity) -> Result<bool, Failure> {
        self.workspace()?.remove_tree(path, expected).map_err(workspace::failure)
    }

    fn kind(&mut self, path: &str) -> Result<proclease::core::effects::PathKind, Failure> {
        self.workspace()?.kind(path).map_err(workspace::failure)
    }

    fn is_empty_directory(&mut self, path: &str) -> Result<bool, Failure> {
        self.workspace()?.is_empty_directory(path).map_err(workspace::failure)
    }
}

/// Process identity over the disk's dead set: every process runs on [`BOOT`]; its start id is
/// derived from its pid; it is `different-or-dead` once marked dead, `exact-live` before.
#[derive(Debug, Clone)]
pub struct SimProcesses {
    pid: u64,
    dead: Arc<Mutex<BTreeSet<u64>>>,
    /// The disk, for the run journal.
    state: Arc<Mutex<DiskState>>,
}

/// The identity of simulated process `pid`.
pub fn owner(pid: u64) -> Owner {
    Owner { pid, boot_id: BOOT.into(), process_start_id: sha256_hex(format!("start-{pid}").as_bytes()) }
}

impl Processes for SimProcesses {
    fn current_boot_id(&mut self) -> Result<String, String> {
        Ok(BOOT.into())
    }

    fn self_identity(&mut self) -> Result<Owner, String> {
        Ok(owner(self.pid))
    }

    fn capture(&mut self, pid: u64) -> Result<Owner, String> {
        if self.dead.lock().unwrap_or_else(|p| p.into_inner()).contains(&pid) {
            return Err("exact live process identity is unavailable".into());
        }
        Ok(owner(pid))
    }

    /// The run journal's entry on the disk (the production reader; reads are not steps).
    fn finished_run(&mut self, lease_id: &str) -> Result<Option<FinishedRun>, String> {
        run_journal_on(&self.state)?.finished_run(lease_id)
    }

    /// Recovery forgets the entry of a claim it removed (the production code: one step, best
    /// effort).
    fn forget_run(&mut self, lease_id: &str) {
        if let Ok(journal) = run_journal_on(&self.state) {
            journal.forget(lease_id);
        }
    }

    /// Every simulated process holds a witness (`docs/witness.md`): held while it lives, free
    /// once it is dead. A recorded identity that is not the process on that pid has none, and
    /// `/proc` shows the pid's own process. Processes start nothing unrecorded (no spawn
    /// witnesses).
    fn probe(&mut self, recorded: &Owner) -> Result<OwnerFacts, String> {
        let dead = self.dead.lock().unwrap_or_else(|p| p.into_inner()).contains(&recorded.pid);
        if *recorded != owner(recorded.pid) {
            return Ok(OwnerFacts::implying(recorded, OwnerStatus::DifferentOrDead));
        }
        let mut facts = OwnerFacts::implying(recorded, if dead { OwnerStatus::DifferentOrDead } else { OwnerStatus::ExactLiveOwner });
        facts.witness = if dead { WitnessState::Free } else { WitnessState::Held };
        Ok(facts)
    }
}
