//! A simulated disk that can crash or fail at any step: the fault-injecting implementation of
//! the state store and workspace primitives (the [`Store`] and [`Workspace`] traits the real
//! cap-std/rustix implementations also provide), in the manner of LevelDB's fault-injection
//! environment and ALICE/CrashMonkey's crash states.
//!
//! Each primitive runs as the same sequence of system calls the host's implementation makes
//! (`host/src/state_store/mod.rs`, `host/src/workspace.rs`): write a temporary in
//! `.proclease/staging`, fsync it, link or rename it into the collection, fsync the collection,
//! unlink the temporary; take and release the reference's mutation claim around each record
//! change (§3.5); undo a visible change whose collection fsync failed; quarantine a
//! directory by renaming it, fsync the parent, delete bottom-up, fsync the parent. Every
//! mutating call and every fsync is one numbered **step**. A [`Plan`] can:
//! * **crash after step k**: step k+1 and everything after it never happen (the process is
//!   gone). [`SimDisk::crash`] then keeps either everything (a process crash: the kernel
//!   still has it) or only what was made durable (a power loss: file data as of its last
//!   fsync, directory entries as of their directory's last fsync — the pessimistic POSIX
//!   model, where nothing unsynced survives);
//! * **fail step k** with an errno (ENOSPC, EIO, EXDEV, EACCES): the call does not happen and
//!   returns the error, as the real call would; later steps run normally (a transient fault).
//!
//! Reads (open, stat, read, readdir) are not steps: they change nothing that a crash could
//! tear, and their failures are covered by the real-filesystem tests. A claim's stage write is
//! one step, not fsynced; its renames and its unlink are steps without a directory fsync, as in
//! the host (a claim's durability never matters: after a power loss its owner is gone, and
//! whichever of its names the disk kept is removed by the next recovery — one whose content the
//! power loss took, because it reads as empty).
//!
//! The disk has one namespace: the state home at [`HOME`] and the granted workspace root at
//! [`WORKSPACE`]. Process liveness comes from a shared set of dead pids ([`SimProcesses`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

use proclease::core::digest::sha256_hex;
use proclease::core::effects::{
    BatchStatus, CollectionEntry, CollectionIdentity, CollectionSnapshot, DirectoryFacts, EntryKind, Failure, FinishedRun, Processes, Store, Workspace,
};
use proclease::core::liveness::{OwnerFacts, OwnerStatus, WitnessState};
use proclease::core::records::{DirectoryIdentity, Owner};

/// The state home's path on the simulated disk.
pub const HOME: &str = "/home";
/// The granted workspace root.
pub const WORKSPACE: &str = "/ws";
/// Where the store stages its temporaries.
pub const STAGING: &str = "/home/.proclease/staging";
/// The run journal's directory (`host/src/imports/process_identity/run_journal.rs`).
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

    fn text(self) -> &'static str {
        match self {
            Errno::Nospc => "No space left on device (os error 28)",
            Errno::Io => "Input/output error (os error 5)",
            Errno::Xdev => "Invalid cross-device link (os error 18)",
            Errno::Acces => "Permission denied (os error 13)",
        }
    }
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
    /// Another live process holds the record's mutation claim.
    Contended,
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
    next_unique: u64,
    /// Quarantines this actor is deleting right now (an abandoned one of its own may be
    /// completed by it, as the host does).
    removing: BTreeSet<String>,
    /// Names of the steps taken since the plan was set, for failure messages.
    pub trace: Vec<&'static str>,
    /// Every content published into a collection (linked or renamed there) since the plan
    /// was set: the complete versions a record may hold after a crash.
    pub published: Vec<Vec<u8>>,
    /// Every record path (`/home/…`) a removal unlinked since the plan was set: the only
    /// records that may be absent part-way through an operation that keeps them.
    pub unlinked: Vec<String>,
}

/// The simulated disk: a [`Store`] on [`HOME`] and a [`Workspace`] on [`WORKSPACE`].
#[derive(Debug, Clone)]
pub struct SimDisk {
    state: Arc<Mutex<DiskState>>,
    dead: Arc<Mutex<BTreeSet<u64>>>,
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
            next_unique: 0,
            removing: BTreeSet::new(),
            trace: Vec::new(),
            published: Vec::new(),
            unlinked: Vec::new(),
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

    fn unique(&mut self) -> u64 {
        self.next_unique += 1;
        self.next_unique
    }

    // ---- system calls (each one step) ----

    fn mkdir(&mut self, parent: u64, name: &str) -> Step<u64> {
        self.step("mkdir")?;
        if self.child(parent, name).is_some() {
            return Err(Fault::Exists);
        }
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

    fn link(&mut self, from_dir: u64, from: &str, to_dir: u64, to: &str) -> Step<()> {
        self.step("link")?;
        let inode = self.child(from_dir, from).ok_or(Fault::Errno(Errno::Io))?;
        if self.child(to_dir, to).is_some() {
            return Err(Fault::Exists);
        }
        self.entries_mut(to_dir).insert(to.into(), inode);
        self.note_published(inode);
        Ok(())
    }

    fn note_published(&mut self, inode: u64) {
        if let Some(data) = self.data(inode).map(<[u8]>::to_vec) {
            self.published.push(data);
        }
    }

    fn rename(&mut self, from_dir: u64, from: &str, to_dir: u64, to: &str, noreplace: bool) -> Step<()> {
        self.step("rename")?;
        let inode = self.child(from_dir, from).ok_or(Fault::Errno(Errno::Io))?;
        if noreplace && self.child(to_dir, to).is_some() {
            return Err(Fault::Exists);
        }
        self.entries_mut(from_dir).remove(from);
        self.entries_mut(to_dir).insert(to.into(), inode);
        self.note_published(inode);
        Ok(())
    }

    fn unlink(&mut self, dir: u64, name: &str, what: &'static str) -> Step<()> {
        self.step(what)?;
        let inode = self.child(dir, name).ok_or(Fault::Errno(Errno::Io))?;
        if self.entries(inode).is_some_and(|e| !e.is_empty()) {
            return Err(Fault::Errno(Errno::Io)); // ENOTEMPTY
        }
        self.entries_mut(dir).remove(name);
        Ok(())
    }

    // ---- the store's protocol (host/src/state_store/mod.rs) ----

    /// `walk`: the directory of `segments` below the home, creating missing ones when `create`
    /// (`fsops::create_private_dir`: mkdir, fsync it, fsync the parent; rmdir again if a later
    /// call fails).
    fn walk(&mut self, segments: &[&str], create: bool) -> Step<Option<u64>> {
        let mut current = self.lookup(HOME).ok_or(Fault::Errno(Errno::Io))?;
        for segment in segments {
            if create && self.child(current, segment).is_none() {
                let made = self.mkdir(current, segment)?;
                let synced = self.fsync(made, "fsync new directory").and_then(|()| self.fsync(current, "fsync parent"));
                if let Err(fault) = synced {
                    let _ = self.unlink(current, segment, "rmdir (undo)");
                    return Err(fault);
                }
            }
            match self.child(current, segment) {
                Some(next) if self.is_dir(next) => current = next,
                Some(_) => return Err(Fault::Errno(Errno::Io)),
                None => return Ok(None),
            }
        }
        Ok(Some(current))
    }

    fn staging(&self) -> Step<u64> {
        self.lookup(STAGING).ok_or(Fault::Errno(Errno::Io))
    }

    /// `stage`: removes dead writers' temporaries, then writes a fresh fsynced temporary
    /// (unlinked again if writing it fails).
    fn stage(&mut self, content: &[u8], dead: &BTreeSet<u64>) -> Step<String> {
        self.remove_dead_temporaries(dead);
        let staging = self.staging()?;
        let unique = self.unique();
        let name = format!("{}-{unique}.tmp", self.actor);
        let inode = self.create_file(staging, &name)?;
        if let Err(fault) = self.write(inode, content).and_then(|()| self.fsync(inode, "fsync temporary")) {
            let _ = self.unlink(staging, &name, "unlink temporary (undo)");
            return Err(fault);
        }
        Ok(name)
    }

    fn remove_dead_temporaries(&mut self, dead: &BTreeSet<u64>) {
        let Ok(staging) = self.staging() else { return };
        let names: Vec<String> = self.entries(staging).map(|e| e.keys().cloned().collect()).unwrap_or_default();
        for name in names {
            let pid = name.split('-').next().and_then(|p| p.parse::<u64>().ok());
            if pid.is_some_and(|pid| dead.contains(&pid)) {
                let _ = self.unlink(staging, &name, "unlink dead temporary");
            }
        }
    }

    // ---- the mutation claim (host/src/imports/state_store/mutation_claim.rs) ----

    /// One step: writes `bytes` to the new claim stage `inode`, not fsynced (as the host:
    /// `mutation_claim`), so a power loss can keep the claim's name without its content.
    fn write_claim_stage(&mut self, inode: u64, bytes: &[u8]) -> Step<()> {
        self.step("write claim stage")?;
        if let Some(Node::File { data, .. }) = self.nodes.get_mut(&inode) {
            data.extend_from_slice(bytes);
        }
        Ok(())
    }

    /// Whether the claim file `inode` lost its content in a crash (empty or zeros): removed as
    /// stale, as the host does (`arbitration::lost_in_a_crash`).
    fn claim_lost(&self, inode: u64) -> bool {
        self.data(inode).is_some_and(|data| data.iter().all(|b| *b == 0))
    }

    /// One step: renames `from` to `to` in `dir` (never over a name), without fsyncing `dir`
    /// (the host does not: `arbitration::advance`).
    fn rename_claim(&mut self, dir: u64, from: &str, to: &str) -> Step<()> {
        self.step("rename claim")?;
        let inode = self.child(dir, from).ok_or(Fault::Errno(Errno::Io))?;
        if self.child(dir, to).is_some() {
            return Err(Fault::Exists);
        }
        self.entries_mut(dir).remove(from);
        self.entries_mut(dir).insert(to.into(), inode);
        Ok(())
    }

    /// The owner pid a claim or claim stage file records.
    fn claim_owner(&self, inode: u64) -> Option<u64> {
        let value: serde_json::Value = serde_json::from_slice(self.data(inode)?).ok()?;
        value["pid"].as_u64()
    }

    /// The §3.9 recovery a store operation performs in `dir` first: mutation stages of dead
    /// owners (by full identity, or by the pid in the name when the stage is empty), and with
    /// `claims` every claim of a dead owner. Best effort, one step per removal.
    fn recover_dir(&mut self, dir: u64, dead: &BTreeSet<u64>, claims: bool) {
        let names: Vec<(String, u64)> = self.entries(dir).map(|e| e.iter().map(|(n, i)| (n.clone(), *i)).collect()).unwrap_or_default();
        for (name, inode) in names {
            let owner = if let Some(rest) = name.strip_prefix(".io-mutation-stage-") {
                self.claim_owner(inode).or_else(|| rest.strip_suffix(".tmp")?.rsplit('-').next()?.parse().ok())
            } else if claims && name.starts_with(".io-mutation-") {
                if self.claim_lost(inode) {
                    let _ = self.unlink(dir, &name, "unlink claim lost in a crash");
                    continue;
                }
                self.claim_owner(inode)
            } else {
                continue;
            };
            if owner.is_some_and(|pid| dead.contains(&pid)) {
                let _ = self.unlink(dir, &name, "unlink dead claim");
            }
        }
    }

    /// Takes the mutation claim of leaf `name` in `dir` as the host does (after the §3.9
    /// recovery): removes dead owners' claims of the same target, publishes a stage, renames it
    /// to waiting, candidate, held. The simulated disk has one writer at a time, so a claim of a
    /// live other owner is contention, never a race. A failure removes what was published.
    fn claim(&mut self, dir: u64, name: &str, dead: &BTreeSet<u64>) -> Step<String> {
        self.recover_dir(dir, dead, false);
        let target = proclease::state_store::mutation_claim::target_sha256(name);
        let prefix = format!(".io-mutation-{target}-");
        let existing: Vec<(String, u64)> = self.entries(dir).map(|e| e.iter().filter(|(n, _)| n.starts_with(&prefix)).map(|(n, i)| (n.clone(), *i)).collect()).unwrap_or_default();
        for (claim, inode) in existing {
            if self.claim_lost(inode) {
                self.unlink(dir, &claim, "unlink claim lost in a crash")?;
                continue;
            }
            match self.claim_owner(inode) {
                // A dead owner's, or this process's own whose release failed: stale.
                Some(pid) if dead.contains(&pid) || pid == self.actor => self.unlink(dir, &claim, "unlink dead claim")?,
                _ => return Err(Fault::Contended),
            }
        }
        let id = format!("00000000-0000-4000-8000-{:012x}", self.unique());
        let owner = Owner { pid: self.actor, boot_id: BOOT.into(), process_start_id: format!("{:064x}", self.actor) };
        let text = proclease::state_store::mutation_claim::claim_text(&target, &id, &owner);
        let stage = format!(".io-mutation-stage-{id}-{}.tmp", self.actor);
        let inode = self.create_file(dir, &stage)?;
        let mut current = stage.clone();
        let published = (|| -> Step<()> {
            self.write_claim_stage(inode, text.as_bytes())?;
            for phase in ["waiting", "candidate", "held"] {
                let next = format!("{prefix}{phase}-{id}.lock");
                self.rename_claim(dir, &current, &next)?;
                current = next;
            }
            Ok(())
        })();
        match published {
            Ok(()) => Ok(current),
            Err(fault) => {
                let _ = self.unlink(dir, &current, "unlink claim (undo)");
                Err(fault)
            }
        }
    }

    /// Releases a claim: one step (the unlink, not fsynced), best effort.
    fn release(&mut self, dir: u64, claim: &str) {
        let _ = self.unlink(dir, claim, "unlink claim");
    }

    fn create_if_absent(&mut self, segments: &[&str], name: &str, content: &[u8], dead: &BTreeSet<u64>) -> Step<bool> {
        let dir = self.walk(segments, true)?.ok_or(Fault::Errno(Errno::Io))?;
        let temp = self.stage(content, dead)?;
        let staging = self.staging()?;
        let claim = match self.claim(dir, name, dead) {
            Ok(claim) => claim,
            Err(fault) => {
                let _ = self.unlink(staging, &temp, "unlink temporary (undo)");
                return Err(fault);
            }
        };
        let created = self.link_new(dir, name, staging, &temp);
        self.release(dir, &claim);
        let _ = self.unlink(staging, &temp, "unlink temporary");
        created
    }

    /// The create's critical section (under the claim): link, fsync the collection (undoing
    /// the link when that fails).
    fn link_new(&mut self, dir: u64, name: &str, staging: u64, temp: &str) -> Step<bool> {
        match self.link(staging, temp, dir, name) {
            Ok(()) => {}
            Err(Fault::Exists) => return Ok(false),
            Err(fault) => return Err(fault),
        }
        if let Err(fault) = self.fsync(dir, "fsync collection") {
            // Undo the visible create: the caller is told it failed, so it must not stay.
            let _ = self.unlink(dir, name, "unlink record (undo)");
            return Err(fault);
        }
        Ok(true)
    }

    fn replace_if_unchanged(&mut self, segments: &[&str], name: &str, expected: &str, content: &[u8], dead: &BTreeSet<u64>) -> Step<bool> {
        let Some(dir) = self.walk(segments, false)? else { return Ok(false) };
        let temp = self.stage(content, dead)?;
        let staging = self.staging()?;
        let claim = match self.claim(dir, name, dead) {
            Ok(claim) => claim,
            Err(fault) => {
                let _ = self.unlink(staging, &temp, "unlink temporary (undo)");
                return Err(fault);
            }
        };
        let replaced = (|| -> Step<bool> {
            let Some(old) = self.child(dir, name).and_then(|i| self.data(i)).map(<[u8]>::to_vec) else { return Ok(false) };
            if sha256_hex(&old) != expected {
                return Ok(false);
            }
            self.rename(staging, &temp, dir, name, false)?;
            if let Err(fault) = self.fsync(dir, "fsync collection") {
                self.restore(dir, name, &old, true, dead);
                return Err(fault);
            }
            Ok(true)
        })();
        self.release(dir, &claim);
        if replaced != Ok(true) {
            let _ = self.unlink(staging, &temp, "unlink temporary");
        }
        replaced
    }

    /// The store's `restore`: the old bytes staged again and published over the name
    /// (`rename`, after a replace) or at the emptied name (`link`, after a removal), the
    /// collection fsynced, the temporary unlinked. Best effort.
    fn restore(&mut self, dir: u64, name: &str, old: &[u8], over_the_name: bool, dead: &BTreeSet<u64>) {
        let (Ok(back), Ok(staging)) = (self.stage(old, dead), self.staging()) else { return };
        let published = if over_the_name { self.rename(staging, &back, dir, name, false) } else { self.link(staging, &back, dir, name) };
        if published.is_ok() {
            let _ = self.fsync(dir, "fsync collection (undo)");
        }
        let _ = self.unlink(staging, &back, "unlink temporary (undo)");
    }

    fn remove_if_unchanged(&mut self, segments: &[&str], name: &str, expected: &str, dead: &BTreeSet<u64>) -> Step<bool> {
        let Some(dir) = self.walk(segments, false)? else { return Ok(false) };
        let claim = self.claim(dir, name, dead)?;
        let removed = (|| -> Step<bool> {
            let Some(old) = self.child(dir, name).and_then(|i| self.data(i)).map(<[u8]>::to_vec) else { return Ok(false) };
            if sha256_hex(&old) != expected {
                return Ok(false);
            }
            self.unlink(dir, name, "unlink record")?;
            self.unlinked.push(format!("{HOME}/{}/{name}", segments.join("/")));
            if let Err(fault) = self.fsync(dir, "fsync collection") {
                self.restore(dir, name, &old, false, dead);
                return Err(fault);
            }
            Ok(true)
        })();
        self.release(dir, &claim);
        removed
    }

    // ---- the workspace's protocol (host/src/workspace.rs) ----

    fn facts(&self, inode: u64) -> DirectoryFacts {
        DirectoryFacts { canonical: true, is_directory: self.is_dir(inode), owned: true, mode: 0o700, identity: identity_of(inode) }
    }

    fn quarantine_and_delete(&mut self, parent: u64, name: &str) -> Step<()> {
        let unique = self.unique();
        let quarantine = format!(".io-remove-{}-{unique}.quarantine", self.actor);
        self.rename(parent, name, parent, &quarantine, true)?;
        self.removing.insert(quarantine.clone());
        let result = self.fsync(parent, "fsync parent").and_then(|()| self.delete_tree(parent, &quarantine)).and_then(|()| self.fsync(parent, "fsync parent"));
        self.removing.remove(&quarantine);
        result
    }

    /// Deletes bottom-up, as `delete_tree` does (files, then each emptied directory).
    fn delete_tree(&mut self, parent: u64, name: &str) -> Step<()> {
        let Some(inode) = self.child(parent, name) else { return Ok(()) };
        if self.is_dir(inode) {
            let children: Vec<String> = self.entries(inode).map(|e| e.keys().cloned().collect()).unwrap_or_default();
            for child in children {
                self.delete_tree(inode, &child)?;
            }
            self.unlink(parent, name, "rmdir")
        } else {
            self.unlink(parent, name, "unlink file")
        }
    }
}

/// The identity the simulated disk reports for directory inode `inode`.
pub fn identity_of(inode: u64) -> DirectoryIdentity {
    DirectoryIdentity { device: "2049".into(), inode: inode.to_string(), birthtime_ns: (1_700_000_000_000_000_000u64 + inode).to_string() }
}

fn split_path(path: &str) -> (&str, &str) {
    path.rsplit_once('/').map(|(p, n)| (if p.is_empty() { "/" } else { p }, n)).unwrap_or(("/", path))
}

fn store_failure(path: &str, fault: Fault) -> Failure {
    match fault {
        Fault::Crashed => Failure::io(format!("{path}: the process crashed")),
        Fault::Errno(errno) => Failure::io(format!("{path}: {}", errno.text())),
        Fault::Exists => Failure::io(format!("{path}: File exists (os error 17)")),
        Fault::Contended => Failure::contended(format!("{path}: state file mutation is already active")),
    }
}

fn workspace_failure(path: &str, fault: Fault) -> Failure {
    match fault {
        Fault::Crashed => Failure::io(format!("{path}: the process crashed")),
        Fault::Errno(errno) => Failure::io(format!("{path}: {}", errno.text())),
        Fault::Exists => Failure::io(format!("{path}: File exists (os error 17)")),
        Fault::Contended => Failure::io(format!("{path}: contended")),
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
        SimDisk { state: Arc::new(Mutex::new(DiskState::new())), dead: Arc::new(Mutex::new(BTreeSet::new())) }
    }

    /// An independent copy (same contents, same dead set contents, fresh sharing).
    pub fn fork(&self) -> Self {
        SimDisk { state: Arc::new(Mutex::new(self.state().clone())), dead: Arc::new(Mutex::new(self.dead.lock().unwrap_or_else(|p| p.into_inner()).clone())) }
    }

    /// The shared state.
    pub fn state(&self) -> MutexGuard<'_, DiskState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn dead(&self) -> BTreeSet<u64> {
        self.dead.lock().unwrap_or_else(|p| p.into_inner()).clone()
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
        state.removing.clear();
    }

    /// Sets the acting process (names of its temporaries and quarantines).
    pub fn act_as(&self, pid: u64) {
        let mut state = self.state();
        state.actor = pid;
        state.removing.clear();
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

/// A run journal entry's bytes as the simulated supervisor writes them: `running`, or
/// `finished <exit code> <device> <inode> <birth time>` — the same facts as the host's JSON
/// record (`run_journal.rs`), in a form the model can read back without it.
fn journal_record(directory: &DirectoryIdentity, exit_code: Option<i32>) -> Vec<u8> {
    match exit_code {
        None => b"running".to_vec(),
        Some(code) => format!("finished {code} {} {} {}", directory.device, directory.inode, directory.birthtime_ns).into_bytes(),
    }
}

/// What a journal entry's bytes say: `Some` only for a complete `finished` entry.
pub fn parse_journal(bytes: &[u8]) -> Option<FinishedRun> {
    let text = std::str::from_utf8(bytes).ok()?;
    let mut words = text.strip_prefix("finished ")?.split(' ');
    let exit_code = words.next()?.parse().ok()?;
    let directory_identity = DirectoryIdentity { device: words.next()?.into(), inode: words.next()?.into(), birthtime_ns: words.next()?.into() };
    Some(FinishedRun { directory_identity, exit_code: Some(exit_code), signal: None })
}

impl SimDisk {
    /// The supervisor's `RunJournal::begin` before the command starts: create the entry
    /// exclusively, write it, fsync it and the journal directory (each a step); a failure after
    /// the create unlinks it again (`unlink journal (undo)`).
    pub fn journal_begin(&self, lease_id: &str, directory: &DirectoryIdentity) -> Result<(), String> {
        let mut state = self.state();
        let failed = |f: Fault| format!("cannot start the run journal: {}", store_failure(lease_id, f).message());
        let dir = state.lookup(JOURNAL).ok_or_else(|| failed(Fault::Errno(Errno::Io)))?;
        let name = format!("{lease_id}.run");
        let inode = state.create_file(dir, &name).map_err(failed)?;
        let written =
            state.write(inode, &journal_record(directory, None)).and_then(|()| state.fsync(inode, "fsync journal")).and_then(|()| state.fsync(dir, "fsync journal directory"));
        if let Err(fault) = written {
            let _ = state.unlink(dir, &name, "unlink journal (undo)");
            return Err(failed(fault));
        }
        Ok(())
    }

    /// The supervisor's `JournalEntry::finished` once the command's tree has ended: the entry
    /// is overwritten in place (`journal overwrite`: the kernel has it) and `fdatasync`ed
    /// (`fdatasync journal`: the disk has it); no new block, inode or directory entry.
    pub fn journal_finish(&self, lease_id: &str, directory: &DirectoryIdentity, exit_code: i32) -> Result<(), String> {
        let mut state = self.state();
        let failed = |f: Fault| format!("the run journal could not record the end: {}", store_failure(lease_id, f).message());
        let inode = state.lookup(&format!("{JOURNAL}/{lease_id}.run")).ok_or_else(|| failed(Fault::Errno(Errno::Io)))?;
        state.step("journal overwrite").map_err(failed)?;
        if let Some(Node::File { data, .. }) = state.nodes.get_mut(&inode) {
            *data = journal_record(directory, Some(exit_code));
        }
        state.fsync(inode, "fdatasync journal").map_err(failed)
    }

    /// The supervisor's `RunJournal::forget` after a release (best effort, one step).
    pub fn journal_forget(&self, lease_id: &str) {
        self.state().forget_journal(lease_id);
    }

    /// The journal entries on the disk now: lease id → bytes.
    pub fn journal(&self) -> BTreeMap<String, Vec<u8>> {
        self.listing().journal()
    }
}

impl DiskState {
    fn forget_journal(&mut self, lease_id: &str) {
        let name = format!("{lease_id}.run");
        if let Some(dir) = self.lookup(JOURNAL).filter(|dir| self.child(*dir, &name).is_some()) {
            let _ = self.unlink(dir, &name, "unlink journal");
        }
    }
}

fn store_split(path: &str) -> Result<(Vec<&str>, &str), Failure> {
    let mut segments: Vec<&str> = path.split('/').collect();
    if segments.len() < 2 || segments.iter().any(|s| s.is_empty() || *s == "." || *s == ".." || *s == ".proclease") {
        return Err(Failure::refused(format!("{path}: refused")));
    }
    let name = segments.pop().unwrap_or_default();
    Ok((segments, name))
}

impl Store for SimDisk {
    fn read_if_present(&mut self, path: &str, max_bytes: u32) -> Result<Option<String>, Failure> {
        let state = self.state();
        let Some(inode) = state.lookup(&format!("{HOME}/{path}")) else { return Ok(None) };
        let data = state.data(inode).ok_or_else(|| Failure::unsafe_(format!("{path}: not a regular file")))?;
        if data.len() > max_bytes as usize {
            return Err(Failure::unsafe_(format!("{path}: larger than {max_bytes} bytes")));
        }
        String::from_utf8(data.to_vec()).map(Some).map_err(|_| Failure::unsafe_(format!("{path}: not valid UTF-8")))
    }

    fn create_if_absent(&mut self, path: &str, content: &str) -> Result<bool, Failure> {
        let (segments, name) = store_split(path)?;
        let dead = self.dead();
        self.state().create_if_absent(&segments, name, content.as_bytes(), &dead).map_err(|f| store_failure(path, f))
    }

    fn replace_if_unchanged(&mut self, path: &str, expected_sha256: &str, content: &str) -> Result<bool, Failure> {
        let (segments, name) = store_split(path)?;
        let dead = self.dead();
        self.state().replace_if_unchanged(&segments, name, expected_sha256, content.as_bytes(), &dead).map_err(|f| store_failure(path, f))
    }

    fn remove_if_unchanged(&mut self, path: &str, expected_sha256: &str) -> Result<bool, Failure> {
        let (segments, name) = store_split(path)?;
        let dead = self.dead();
        self.state().remove_if_unchanged(&segments, name, expected_sha256, &dead).map_err(|f| store_failure(path, f))
    }

    fn ensure_private_directory(&mut self, path: &str) -> Result<CollectionIdentity, Failure> {
        let segments: Vec<&str> = path.split('/').collect();
        let dir = self.state().walk(&segments, true).map_err(|f| store_failure(path, f))?;
        let dir = dir.ok_or_else(|| Failure::unsafe_(format!("{path}: vanished while created")))?;
        Ok(CollectionIdentity { device: "2049".into(), inode: dir.to_string() })
    }

    fn snapshot(&mut self, path: &str, recover_orphans: bool) -> Result<Option<CollectionSnapshot>, Failure> {
        let dead = self.dead();
        let mut state = self.state();
        if recover_orphans {
            state.remove_dead_temporaries(&dead);
        }
        let Some(dir) = state.lookup(&format!("{HOME}/{path}")) else { return Ok(None) };
        state.recover_dir(dir, &dead, recover_orphans);
        let entries = state.entries(dir).ok_or_else(|| Failure::unsafe_(format!("{path}: not a directory")))?;
        let mut listed: Vec<CollectionEntry> = entries
            .iter()
            .map(|(name, inode)| {
                let is_dir = state.is_dir(*inode);
                CollectionEntry {
                    name: name.clone(),
                    kind: if is_dir { EntryKind::Directory } else { EntryKind::File },
                    identity: is_dir.then(|| CollectionIdentity { device: "2049".into(), inode: inode.to_string() }),
                }
            })
            .collect();
        listed.sort_by(|a, b| proclease::core::js::cmp_utf16(&a.name, &b.name));
        Ok(Some(CollectionSnapshot { identity: CollectionIdentity { device: "2049".into(), inode: dir.to_string() }, entries: listed }))
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
        let dir = state.lookup(&format!("{HOME}/{path}"));
        if dir.map(|d| d.to_string()).as_ref() != Some(&expected.inode) {
            return Err(Failure::unsafe_(format!("{path}: private state batch directory changed identity")));
        }
        let dir = dir.unwrap_or(ROOT);
        Ok(names
            .iter()
            .map(|name| {
                let bytes = state.child(dir, name).and_then(|i| state.data(i));
                (name.clone(), crate::fakes::batch_status(bytes, max_bytes_per_file))
            })
            .collect())
    }
}

impl Workspace for SimDisk {
    fn inspect(&mut self, path: &str) -> Result<Option<DirectoryFacts>, Failure> {
        let state = self.state();
        Ok(state.lookup(path).map(|inode| state.facts(inode)))
    }

    /// The host's `Workspace::create_private_directory`: creates each missing directory of
    /// absolute `path` (mode 0700; no fsync, as the host does not); the paths created.
    fn create_private_directory(&mut self, path: &str) -> Result<Vec<String>, Failure> {
        let mut state = self.state();
        let mut current = ROOT;
        let mut walked = String::new();
        let mut created = Vec::new();
        for segment in path.split('/').filter(|s| !s.is_empty()) {
            walked.push('/');
            walked.push_str(segment);
            current = match state.child(current, segment) {
                Some(next) => next,
                None => {
                    let made = state.mkdir(current, segment).map_err(|f| workspace_failure(path, f))?;
                    created.push(walked.clone());
                    made
                }
            };
        }
        Ok(created)
    }

    /// The host's `Workspace::remove_empty_directory`: `rmdir` of an empty directory that is
    /// still `expected`.
    fn remove_empty_directory(&mut self, path: &str, expected: Option<&DirectoryIdentity>) -> Result<bool, Failure> {
        let mut state = self.state();
        let (parent, name) = split_path(path);
        let Some(dir) = state.lookup(parent) else { return Ok(false) };
        let Some(target) = state.child(dir, name) else { return Ok(false) };
        if !state.is_dir(target) || expected.is_some_and(|e| identity_of(target) != *e) || !state.entries(target).is_none_or(|e| e.is_empty()) {
            return Ok(false);
        }
        state.unlink(dir, name, "rmdir").map_err(|f| workspace_failure(path, f))?;
        Ok(true)
    }

    fn remove_tree(&mut self, path: &str, expected: &DirectoryIdentity) -> Result<bool, Failure> {
        let dead = self.dead();
        let mut state = self.state();
        let (parent_path, name) = split_path(path);
        let parent = state.lookup(parent_path).ok_or_else(|| Failure::identity_changed(format!("{path}: recursive removal parent is absent for an identity-bound target")))?;
        if let Some(target) = state.child(parent, name) {
            if !state.is_dir(target) || identity_of(target) != *expected {
                return Err(Failure::identity_changed(format!("{path}: recursive removal target changed identity")));
            }
            state.quarantine_and_delete(parent, name).map_err(|f| workspace_failure(path, f))?;
            return Ok(true);
        }
        // Complete an interrupted quarantine of exactly `expected` whose remover is provably
        // dead (or is this process, no longer removing it).
        let mut found = None;
        for (entry, inode) in state.entries(parent).cloned().unwrap_or_default() {
            let Some(pid) = entry.strip_prefix(".io-remove-").and_then(|r| r.split('-').next()).and_then(|p| p.parse::<u64>().ok()) else { continue };
            if identity_of(inode) != *expected {
                continue;
            }
            if found.is_some() {
                return Err(Failure::identity_changed(format!("{path}: recursive removal identity has multiple quarantine paths")));
            }
            found = Some((entry, pid));
        }
        let Some((quarantine, pid)) = found else { return Ok(false) };
        let abandoned_own = pid == state.actor && !state.removing.contains(&quarantine);
        if !dead.contains(&pid) && !abandoned_own {
            return Err(Failure::identity_changed(format!("{path}: recursive removal quarantine owner is live or cannot be proven dead")));
        }
        state.quarantine_and_delete(parent, &quarantine).map_err(|f| workspace_failure(path, f))?;
        Ok(true)
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

    /// The run journal's entry on the disk (a read, not a step).
    fn finished_run(&mut self, lease_id: &str) -> Result<Option<FinishedRun>, String> {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let entry = state.lookup(&format!("{JOURNAL}/{lease_id}.run"));
        Ok(entry.and_then(|inode| state.data(inode)).and_then(parse_journal))
    }

    /// Recovery forgets the entry of a claim it removed (one step, best effort).
    fn forget_run(&mut self, lease_id: &str) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).forget_journal(lease_id);
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
