//! Kernel-lock witnesses (`docs/witness.md`): the proof, beside the reference's `/proc`
//! identity, that a recorded process — and every process it handed its witness to — is alive
//! or gone, in any PID or time namespace and whatever `/proc` hides.
//!
//! A witness is a small file under `<state home>/.proclease/witnesses/<boot id>/` on which its
//! holder keeps an exclusive `flock`. The kernel releases the lock when the last descriptor of
//! it closes, that is when the holder and every process that inherited the descriptor are gone.
//! Probing is a non-blocking shared lock test: refused → held → alive; granted → free → every
//! holder is gone.
//!
//! - `<pid>-<process start id>.witness`: the witness of that identity. For this process (an
//!   owner), taken when its identity is first used ([`Witnesses::hold`]) and kept open, close-on-
//!   exec, for the life of the process. For a process it starts, the same inode as the spawn
//!   witness below, linked under the child's identity when the child is captured.
//! - `<pid>-<process start id>.spawn-<uuid>`: a witness this identity took for a process it
//!   was about to start ([`Witnesses::spawn`]); the child inherits it (and hands it to its own
//!   children); the parent closes its copy once the child runs.
//! - `<pid>-<process start id>.cgroup-<uuid>`, linked as `<pid>-<process start id>.cgroup`
//!   with the child's witness: the cgroup v2 its tree runs in, when one was made
//!   (`cgroup_tree`; [`SpawnWitness::record_cgroup`]).
//!
//! Every witness is locked before it gets its name (it is created under a temporary name,
//! locked, then hard-linked), so a named witness that is free really is abandoned. Witnesses
//! need no fsync: after a power loss every process they speak of is from another boot, which the
//! boot id already proves. The directory of another boot is removed when this boot's is first
//! created. This module only observes and keeps files; what the observations prove is
//! `proclease-core`'s `liveness`.

use std::collections::HashMap;
use std::fs::{File, TryLockError};
use std::io::{Read as _, Write as _};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::{Mutex, OnceLock};

use proclease_core::liveness::{TreeState, WitnessState};
use proclease_core::records::Owner;
use rustix::fs::{AtFlags, Mode, OFlags};
use rustix::io::Errno;

use crate::fsops;
use crate::state_store::home::StateHome;

/// The witness directory, inside the state home's `.proclease/`.
const DIRECTORY: &str = "witnesses";
/// The witness directory's path in the state home (for messages).
const ROOT: &str = ".proclease/witnesses";
/// The largest witness file read.
const MAX_WITNESS_BYTES: u64 = 4096;

/// A witness failure: the message names the file and what to do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WitnessError {
    /// A file operation failed.
    #[error("{path}: {operation} failed: {source}")]
    Io {
        /// The path in the state home.
        path: String,
        /// What was being done.
        operation: &'static str,
        /// The error.
        source: std::io::Error,
    },
    /// Another live process holds the witness of this very identity (same pid, boot and start
    /// tick: two processes in different PID namespaces started in the same clock tick).
    #[error(
        "{path}: another live process holds the witness of this identity (pid {pid} in another PID \
         namespace, started in the same clock tick); it cannot be told apart from this one: start this one again"
    )]
    Collision {
        /// The witness path in the state home.
        path: String,
        /// The shared pid.
        pid: u64,
    },
}

fn io<'a>(path: &'a str, operation: &'static str) -> impl FnOnce(Errno) -> WitnessError + 'a {
    move |e| WitnessError::Io { path: path.into(), operation, source: e.into() }
}

/// The namespaces a witness records about its holder (its content), for a `/proc` fallback when
/// its lock cannot be tested.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Namespaces {
    /// The PID namespace the holder's pid is relative to (nsfs inode number).
    pub pid: u64,
    /// The holder's time namespace (nsfs inode number), for diagnostics.
    pub time: u64,
    /// Its boottime offset, ns.
    pub boottime_offset_ns: i64,
}

/// Whether `owner`'s digests can name witness files (64 lowercase hex each: nothing a guest
/// passes can reach outside the witness directory).
fn nameable(owner: &Owner) -> bool {
    proclease_core::js::is_digest(&owner.boot_id) && proclease_core::js::is_digest(&owner.process_start_id)
}

/// The name of the witness of `owner`.
fn identity_name(owner: &Owner) -> String {
    format!("{}-{}.witness", owner.pid, owner.process_start_id)
}

/// Where the witness of `owner` is in the state home at `home`
/// (`<home>/.proclease/witnesses/<boot id>/<pid>-<start>.witness`), whether or not it exists;
/// `None` for an identity that names no witness (not digests). For a waiter that watches it
/// (`wait_queue`): its lock is dropped, and the file closed for writing, when its holder dies.
pub fn path_in(home: &std::path::Path, owner: &Owner) -> Option<std::path::PathBuf> {
    nameable(owner).then(|| home.join(ROOT).join(&owner.boot_id).join(identity_name(owner)))
}

/// The prefix of the spawn witnesses `owner` took.
fn spawn_prefix(owner: &Owner) -> String {
    format!("{}-{}.spawn-", owner.pid, owner.process_start_id)
}

/// What a witness file says, canonical JSON + `\n` (keys sorted). `file` is the witness's own
/// `(st_dev, st_ino)` as its creator sees it: its lock domain (see [`test`]).
fn content(holder: &Owner, role: &str, ns: &Namespaces, file: (u64, u64)) -> String {
    format!(
        "{{\"bootId\":\"{}\",\"boottimeOffsetNs\":{},\"device\":\"{}\",\"inode\":\"{}\",\"kind\":\"proclease-witness\",\"pid\":{},\"pidNamespace\":\"{}\",\"processStartId\":\"{}\",\"role\":\"{role}\",\"schemaVersion\":1,\"timeNamespace\":\"{}\"}}\n",
        holder.boot_id, ns.boottime_offset_ns, file.0, file.1, holder.pid, ns.pid, holder.process_start_id, ns.time
    )
}

/// The witnesses this process holds for itself, one per witness directory: kept open for the
/// life of the process (a witness that closed while records name its holder would prove it
/// dead). Keyed by the directory's device and inode and the witness name.
static HELD: Mutex<Vec<Held>> = Mutex::new(Vec::new());

/// One held witness: its directory's (device, inode), its name, its open file.
type Held = ((u64, u64), String, File);

fn lock_held() -> std::sync::MutexGuard<'static, Vec<Held>> {
    HELD.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The witness directory of one state home.
pub struct Witnesses {
    /// `.proclease/witnesses`.
    root: OwnedFd,
    /// Its device and inode (the key of [`HELD`]).
    key: (u64, u64),
    /// This boot's directory, once opened: (boot id, fd).
    boot: OnceLock<(String, OwnedFd)>,
    /// Set once the directories of other boots were removed.
    swept: OnceLock<()>,
    /// Spawn witnesses of children not yet captured: pid → spawn witness name.
    pending: Mutex<HashMap<u64, String>>,
}

impl std::fmt::Debug for Witnesses {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Witnesses").field("key", &self.key).finish_non_exhaustive()
    }
}

impl Witnesses {
    /// Opens (creating, mode 0700) `.proclease/witnesses` in the state home.
    ///
    /// Errors: the directory cannot be created, or it is not a private directory of the user.
    pub fn open(home: &StateHome) -> Result<Witnesses, WitnessError> {
        let internal = private_dir(home.dir(), ".proclease", ".proclease")?;
        let root = private_dir(&internal, DIRECTORY, ROOT)?;
        let stat = rustix::fs::fstat(&root).map_err(io(ROOT, "fstat"))?;
        Ok(Witnesses { root, key: (stat.st_dev, stat.st_ino), boot: OnceLock::new(), swept: OnceLock::new(), pending: Mutex::new(HashMap::new()) })
    }

    /// This boot's directory (created on first use; the directories of other boots are removed
    /// then: every process they speak of is gone).
    fn boot_dir(&self, boot_id: &str) -> Result<&OwnedFd, WitnessError> {
        let fd = match self.existing_boot_dir(boot_id)? {
            Some(fd) => fd,
            None => {
                let fd = private_dir(&self.root, boot_id, &format!("{ROOT}/{boot_id}"))?;
                let _ = self.boot.set((boot_id.into(), fd));
                self.existing_boot_dir(boot_id)?.ok_or_else(|| WitnessError::Io {
                    path: format!("{ROOT}/{boot_id}"),
                    operation: "open",
                    source: std::io::Error::other("the boot id changed while this process ran"),
                })?
            }
        };
        if self.swept.set(()).is_ok() {
            self.remove_other_boots(boot_id);
        }
        Ok(fd)
    }

    /// The directory of this boot if it exists (probes never create it): `None` only when it
    /// is absent, or when the boot id is not the one this process knows (a boot that changed
    /// while it ran).
    ///
    /// Errors: it is there but cannot be opened, or is not a private directory of the user (a
    /// symbolic link, another owner or mode). A witness in it may be the only proof that a
    /// process still runs: such a directory is never taken for an empty one.
    fn existing_boot_dir(&self, boot_id: &str) -> Result<Option<&OwnedFd>, WitnessError> {
        match self.boot.get() {
            Some((boot, fd)) if boot == boot_id => Ok(Some(fd)),
            Some(_) => Ok(None),
            None => {
                let path = || format!("{ROOT}/{boot_id}");
                let Some(fd) = fsops::open_private_dir_if_present(&self.root, boot_id).map_err(|(operation, source)| WitnessError::Io { path: path(), operation, source })? else {
                    return Ok(None);
                };
                let _ = self.boot.set((boot_id.into(), fd));
                self.existing_boot_dir(boot_id)
            }
        }
    }

    fn remove_other_boots(&self, boot_id: &str) {
        let Ok(names) = fsops::list_names(&self.root, 10_000) else { return };
        for name in names {
            let Ok(name) = String::from_utf8(name) else { continue };
            if name != boot_id
                && proclease_core::js::is_digest(&name)
                && let Ok(dir) = fsops::open_dir(&self.root, &name)
            {
                if let Ok(files) = fsops::list_names(&dir, 100_000) {
                    for file in files {
                        let _ = rustix::fs::unlinkat(&dir, file.as_slice(), AtFlags::empty());
                    }
                }
                let _ = rustix::fs::unlinkat(&self.root, name.as_str(), AtFlags::REMOVEDIR);
            }
        }
    }

    /// Creates a witness for `holder` in role `role`, locked, under `name`; returns its open,
    /// locked file (close-on-exec). A free file already at `name` (left by an earlier holder of
    /// this name that is gone) is replaced; a held one is a [`WitnessError::Collision`].
    fn create(&self, holder: &Owner, role: &str, ns: &Namespaces, name: &str) -> Result<File, WitnessError> {
        if !nameable(holder) {
            return Err(WitnessError::Io { path: ROOT.into(), operation: "name", source: std::io::Error::other("not a process identity") });
        }
        let dir = self.boot_dir(&holder.boot_id)?;
        let path = format!("{ROOT}/{}/{name}", holder.boot_id);
        let temp = format!(".tmp-{}", uuid::Uuid::new_v4());
        let fd = rustix::fs::openat(dir, temp.as_str(), OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::from_raw_mode(0o600))
            .map_err(io(&path, "create"))?;
        let mut file = File::from(fd);
        let unlink_temp = || {
            let _ = rustix::fs::unlinkat(dir, temp.as_str(), AtFlags::empty());
        };
        let written = rustix::fs::fstat(&file).map_err(std::io::Error::from).and_then(|stat| file.write_all(content(holder, role, ns, (stat.st_dev, stat.st_ino)).as_bytes()));
        if let Err(e) = written {
            unlink_temp();
            return Err(WitnessError::Io { path, operation: "write", source: e });
        }
        // A filesystem without flock still gets the file (an `untestable` witness that records
        // the namespaces for the /proc proof); any other error is a failure.
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::Error(e)) if lock_unsupported(&e) => {}
            Err(TryLockError::Error(e)) => {
                unlink_temp();
                return Err(WitnessError::Io { path, operation: "flock", source: e });
            }
            Err(TryLockError::WouldBlock) => {
                unlink_temp();
                return Err(WitnessError::Io { path, operation: "flock", source: std::io::Error::other("a fresh file was locked") });
            }
        }
        let linked = match rustix::fs::linkat(dir, temp.as_str(), dir, name, AtFlags::empty()) {
            Err(Errno::EXIST) => match test(dir, name) {
                // Abandoned by an earlier holder of the same name: take its place.
                Ok(WitnessState::Free | WitnessState::Absent) => rustix::fs::renameat(dir, temp.as_str(), dir, name),
                _ => {
                    unlink_temp();
                    return Err(WitnessError::Collision { path, pid: holder.pid });
                }
            },
            other => other.map(|()| unlink_temp()),
        };
        if let Err(e) = linked {
            unlink_temp();
            return Err(io(&path, "link")(e));
        }
        Ok(file)
    }

    /// Takes this process's own witness for its identity `own`, once per state home, and keeps
    /// it for the life of the process.
    ///
    /// Errors: the witness cannot be created, or another live process holds a witness of the
    /// same identity.
    pub fn hold(&self, own: &Owner, ns: &Namespaces) -> Result<(), WitnessError> {
        let name = identity_name(own);
        if lock_held().iter().any(|(key, held, _)| *key == self.key && *held == name) {
            return Ok(());
        }
        let file = self.create(own, "owner", ns, &name)?;
        lock_held().push((self.key, name, file));
        Ok(())
    }

    /// Gives up this process's own witness: its name is removed, so later probes of `own` use
    /// the `/proc` proof alone. Call only once no record names `own` any more (everything it
    /// held was released). Also removes the free spawn witnesses it took.
    pub fn retire(&self, own: &Owner) {
        let name = identity_name(own);
        let mut held = lock_held();
        if let Some(at) = held.iter().position(|(key, n, _)| *key == self.key && *n == name) {
            if let Ok(Some(dir)) = self.existing_boot_dir(&own.boot_id) {
                let _ = rustix::fs::unlinkat(dir, name.as_str(), AtFlags::empty());
            }
            // Its name is gone, so closing it proves nothing to anyone; a later use of this
            // identity takes a new witness.
            let _ = held.remove(at);
        }
        drop(held);
        self.remove_free_spawns(own);
    }

    /// Removes the spawn witnesses `spawner` took whose locks are free, with the identity names
    /// of the children they were linked to.
    fn remove_free_spawns(&self, spawner: &Owner) {
        if !nameable(spawner) {
            return;
        }
        let Ok(Some(dir)) = self.existing_boot_dir(&spawner.boot_id) else { return };
        let prefix = spawn_prefix(spawner);
        let Ok(names) = fsops::list_names(dir, 100_000) else { return };
        let names: Vec<String> = names.into_iter().filter_map(|n| String::from_utf8(n).ok()).collect();
        let mut removed = Vec::new();
        for spawn in names.iter().filter(|n| n.starts_with(&prefix)) {
            if test(dir, spawn) != Ok(WitnessState::Free) {
                continue;
            }
            let Ok(Some(spawn_stat)) = fsops::lstat(dir, spawn.as_str()) else { continue };
            for other in names.iter().filter(|n| n.ends_with(".witness")) {
                if let Ok(Some(stat)) = fsops::lstat(dir, other.as_str())
                    && stat.st_ino == spawn_stat.st_ino
                    && stat.st_dev == spawn_stat.st_dev
                {
                    let _ = rustix::fs::unlinkat(dir, other.as_str(), AtFlags::empty());
                    if same_file(dir, &cgroup_name(spawn), &cgroup_name(other)) {
                        let _ = rustix::fs::unlinkat(dir, cgroup_name(other).as_str(), AtFlags::empty());
                    }
                }
            }
            let _ = rustix::fs::unlinkat(dir, spawn.as_str(), AtFlags::empty());
            let _ = rustix::fs::unlinkat(dir, cgroup_name(spawn).as_str(), AtFlags::empty());
            let _ = rustix::fs::unlinkat(dir, uncontained_name(spawn).as_str(), AtFlags::empty());
            removed.push(spawn.clone());
        }
        self.pending.lock().unwrap_or_else(|p| p.into_inner()).retain(|_, name| !removed.contains(name));
    }

    /// Takes a witness for a process `spawner` is about to start: attach it to the command
    /// ([`SpawnWitness::attach`]) before spawning, then tell it the child's pid
    /// ([`SpawnWitness::started`]) or that the spawn failed ([`SpawnWitness::abandon`]).
    ///
    /// Errors: the witness cannot be created.
    pub fn spawn(&self, spawner: &Owner, ns: &Namespaces) -> Result<SpawnWitness<'_>, WitnessError> {
        let name = format!("{}{}", spawn_prefix(spawner), uuid::Uuid::new_v4());
        let file = self.create(spawner, "spawn", ns, &name)?;
        Ok(SpawnWitness { witnesses: self, boot_id: spawner.boot_id.clone(), name, file: Some(file) })
    }

    /// Links the spawn witness of child `pid` (if it was started with one) under the child's
    /// identity `child`, so that probing `child` tests it. Idempotent.
    pub fn bind(&self, pid: u64, child: &Owner) -> Result<(), WitnessError> {
        let Some(spawn) = self.pending.lock().unwrap_or_else(|p| p.into_inner()).get(&pid).cloned() else { return Ok(()) };
        if !nameable(child) {
            return Ok(());
        }
        let dir = self.boot_dir(&child.boot_id)?;
        let name = identity_name(child);
        let path = format!("{ROOT}/{}/{name}", child.boot_id);
        let linked = self.link_identity(dir, &spawn, &name, &path, child);
        if linked.is_ok() {
            // The cgroup record follows the witness: a stale one of an earlier holder of this
            // identity name (free witness, replaced above) goes.
            let record = cgroup_name(&spawn);
            let under = cgroup_name(&name);
            if same_file(dir, &record, &under) {
                return Ok(());
            }
            let _ = rustix::fs::unlinkat(dir, under.as_str(), AtFlags::empty());
            match rustix::fs::linkat(dir, record.as_str(), dir, under.as_str(), AtFlags::empty()) {
                Ok(()) | Err(Errno::NOENT) => {}
                // The record is a second proof: the witness, linked, still decides alone.
                Err(e) => tracing::warn!(path = %format!("{ROOT}/{}/{under}", child.boot_id), error = %std::io::Error::from(e), "the command's cgroup record cannot be linked"),
            }
        }
        linked
    }

    /// Links spawn witness `spawn` as `name` (the child's identity witness).
    fn link_identity(&self, dir: &OwnedFd, spawn: &str, name: &str, path: &str, child: &Owner) -> Result<(), WitnessError> {
        match rustix::fs::linkat(dir, spawn, dir, name, AtFlags::empty()) {
            Ok(()) => Ok(()),
            Err(Errno::EXIST) if same_file(dir, spawn, name) => Ok(()),
            Err(Errno::EXIST) => match test(dir, name) {
                Ok(WitnessState::Free) => {
                    rustix::fs::unlinkat(dir, name, AtFlags::empty()).map_err(io(path, "unlink"))?;
                    rustix::fs::linkat(dir, spawn, dir, name, AtFlags::empty()).map_err(io(path, "link"))
                }
                _ => Err(WitnessError::Collision { path: path.into(), pid: child.pid }),
            },
            Err(e) => Err(io(path, "link")(e)),
        }
    }

    /// The state of `owner`'s witness, and the PID namespace its content records.
    ///
    /// Errors: its boot's directory or its file is there but cannot be opened (not `absent`:
    /// a witness that cannot be seen may be the only proof that the process lives).
    pub fn test(&self, owner: &Owner) -> Result<(WitnessState, Option<u64>), WitnessError> {
        if !nameable(owner) {
            return Ok((WitnessState::Absent, None));
        }
        let Some(dir) = self.existing_boot_dir(&owner.boot_id)? else { return Ok((WitnessState::Absent, None)) };
        let name = identity_name(owner);
        let state = test(dir, &name).map_err(io(&format!("{ROOT}/{}/{name}", owner.boot_id), "open"))?;
        let namespace = match state {
            WitnessState::Absent => None,
            _ => recorded_pid_namespace(dir, &name),
        };
        Ok((state, namespace))
    }

    /// What the cgroup recorded for `owner` shows (`cgroup_tree::observe`): absent when none
    /// was recorded.
    pub fn test_tree(&self, owner: &Owner) -> TreeState {
        if !nameable(owner) {
            return TreeState::Absent;
        }
        match self.existing_boot_dir(&owner.boot_id) {
            Ok(Some(dir)) => read_cgroup_record(dir, &cgroup_name(&identity_name(owner))),
            Ok(None) => TreeState::Absent,
            Err(_) => TreeState::Unreadable,
        }
    }

    /// The aggregate state of the spawn witnesses `owner` took: held if any is held (or the
    /// cgroup recorded with one is populated: a process started under it still runs, whatever
    /// it closed), free if there are some and all are free, untestable if some cannot be tested
    /// (or the cgroup recorded with one cannot be read here) and none is held, absent if there
    /// are none.
    ///
    /// And whether one of them was started uncontained: it has an `uncontained` record
    /// ([`SpawnWitness::record_uncontained`]).
    ///
    /// Errors: its boot's directory is there but cannot be opened or listed, or a spawn
    /// witness's file cannot be opened (never `absent` nor `untestable`: a bundle stage whose
    /// owner is gone is recovered unless what it started is proven alive).
    pub fn test_spawned(&self, owner: &Owner) -> Result<(WitnessState, bool), WitnessError> {
        if !nameable(owner) {
            return Ok((WitnessState::Absent, false));
        }
        let Some(dir) = self.existing_boot_dir(&owner.boot_id)? else { return Ok((WitnessState::Absent, false)) };
        let prefix = spawn_prefix(owner);
        let records = cgroup_name(&prefix);
        let where_ = format!("{ROOT}/{}", owner.boot_id);
        let names = fsops::list_names(dir, 100_000).map_err(|e| WitnessError::Io {
            path: where_.clone(),
            operation: "list",
            source: e.unwrap_or_else(|| std::io::Error::other("more than 100000 entries")),
        })?;
        let names: std::collections::HashSet<String> = names.into_iter().filter_map(|name| String::from_utf8(name).ok()).collect();
        let mut aggregate = WitnessState::Absent;
        let mut uncontained = false;
        for name in &names {
            if name.starts_with(&records) {
                match read_cgroup_record(dir, name) {
                    // A process it started, whatever it closed, still runs in its cgroup.
                    TreeState::Populated => return Ok((WitnessState::Held, false)),
                    // Unseen is not gone: a process it started that closed its spawn witness may
                    // run in a cgroup that cannot be read here (another cgroup namespace).
                    TreeState::Unreadable if aggregate != WitnessState::Held => aggregate = WitnessState::Untestable,
                    _ => {}
                }
                continue;
            }
            if !name.starts_with(&prefix) {
                continue;
            }
            uncontained |= names.contains(&uncontained_name(name));
            match test(dir, name).map_err(io(&format!("{where_}/{name}"), "open"))? {
                WitnessState::Held => aggregate = WitnessState::Held,
                WitnessState::Untestable if aggregate != WitnessState::Held => aggregate = WitnessState::Untestable,
                WitnessState::Free if aggregate == WitnessState::Absent => aggregate = WitnessState::Free,
                _ => {}
            }
        }
        Ok((aggregate, uncontained))
    }
}

/// A spawn witness between its creation and the child's start.
pub struct SpawnWitness<'a> {
    witnesses: &'a Witnesses,
    boot_id: String,
    name: String,
    file: Option<File>,
}

impl SpawnWitness<'_> {
    /// Makes the child of `command` inherit the witness: its descriptor stays close-on-exec in
    /// this process (other children started meanwhile do not get it) and is made inheritable in
    /// the child alone, between fork and exec.
    pub fn attach(&self, command: &mut std::process::Command) {
        use std::os::unix::process::CommandExt as _;
        let Some(file) = &self.file else { return };
        let raw = file.as_raw_fd();
        // SAFETY: runs in the forked child before exec; `fcntl(F_SETFD)` is async-signal-safe and
        // touches only the child's descriptor table. `raw` is open in the child (fork copied it).
        unsafe {
            command.pre_exec(move || {
                let fd = std::os::fd::BorrowedFd::borrow_raw(raw);
                rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::empty()).map_err(std::io::Error::from)
            });
        }
    }

    /// The witness's descriptor in this process, which the child inherits (none when the
    /// witness could not be opened): a box's init keeps it open (`containment`).
    pub fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
        self.file.as_ref().map(|file| file.as_raw_fd())
    }

    /// Records the cgroup the child's tree runs in (`cgroup_tree`), as `<spawn witness>.cgroup`:
    /// linked under the child's identity with the witness, it lets a probe of the child see
    /// whether anything of its tree runs. Call before the child starts.
    ///
    /// Errors: the record cannot be written (the child then runs without a recorded cgroup).
    pub fn record_cgroup(&self, record: &str) -> Result<(), WitnessError> {
        self.write_record(&cgroup_name(&self.name), record)
    }

    /// Records that the child's tree runs uncontained (no box and no cgroup), as
    /// `<spawner>.uncontained-<uuid>` beside the witness: probes then say that a free witness
    /// proves gone only what kept it (`docs/witness.md`, "Uncontained runs"). Call before
    /// [`SpawnWitness::started`]: until then this process holds the witness too, so no probe
    /// can find it free without the record.
    ///
    /// Errors: the record cannot be written (explanations then overstate what a free witness
    /// proves; decisions are the same).
    pub fn record_uncontained(&self) -> Result<(), WitnessError> {
        self.write_record(&uncontained_name(&self.name), UNCONTAINED_RECORD)
    }

    /// Writes record `name` beside the witness, whole or not at all ([`write_new`]).
    fn write_record(&self, name: &str, text: &str) -> Result<(), WitnessError> {
        let dir = self.witnesses.boot_dir(&self.boot_id)?;
        let path = format!("{ROOT}/{}/{name}", self.boot_id);
        write_new(dir, name, text.as_bytes()).map_err(|source| WitnessError::Io { path, operation: "write", source })
    }

    /// The child is running as `pid`: this process closes its copy (the child's keeps the lock),
    /// and a later capture of `pid` links the witness under the child's identity.
    pub fn started(mut self, pid: u32) {
        self.witnesses.pending.lock().unwrap_or_else(|p| p.into_inner()).insert(u64::from(pid), self.name.clone());
        // Close, never unlock: an unlock would release the child's lock too.
        drop(self.file.take());
    }

    /// The spawn failed: nothing inherited the witness; it is removed (with its cgroup record).
    pub fn abandon(mut self) {
        drop(self.file.take());
        self.unlink();
    }

    fn unlink(&self) {
        if let Ok(Some(dir)) = self.witnesses.existing_boot_dir(&self.boot_id) {
            let _ = rustix::fs::unlinkat(dir, self.name.as_str(), AtFlags::empty());
            let _ = rustix::fs::unlinkat(dir, cgroup_name(&self.name).as_str(), AtFlags::empty());
            let _ = rustix::fs::unlinkat(dir, uncontained_name(&self.name).as_str(), AtFlags::empty());
        }
    }
}

impl Drop for SpawnWitness<'_> {
    fn drop(&mut self) {
        // Neither started nor abandoned (an error path): the witness protects nothing.
        if self.file.is_some() {
            drop(self.file.take());
            self.unlink();
        }
    }
}

/// The name of the cgroup record of witness `name` (`cgroup_tree`): `<identity>.cgroup` for
/// `<identity>.witness`, `<spawner>.cgroup-<uuid>` for spawn witness `<spawner>.spawn-<uuid>`
/// (never a name a spawn witness's prefix matches: no version takes a record for a lock).
fn cgroup_name(witness: &str) -> String {
    if let Some(identity) = witness.strip_suffix(".witness") {
        return format!("{identity}.cgroup");
    }
    match witness.split_once(".spawn-") {
        Some((spawner, uuid)) => format!("{spawner}.cgroup-{uuid}"),
        None => format!("{witness}.cgroup"),
    }
}

/// The content of an uncontained record (canonical JSON + `\n`).
const UNCONTAINED_RECORD: &str = "{\"kind\":\"proclease-uncontained\",\"schemaVersion\":1}\n";

/// The name of the uncontained record of spawn witness `<spawner>.spawn-<uuid>`:
/// `<spawner>.uncontained-<uuid>` (never a name a spawn witness's prefix matches).
fn uncontained_name(spawn: &str) -> String {
    match spawn.split_once(".spawn-") {
        Some((spawner, uuid)) => format!("{spawner}.uncontained-{uuid}"),
        None => format!("{spawn}.uncontained"),
    }
}

/// What cgroup record `name` in `dir` shows (`cgroup_tree::observe`): absent when there is no
/// such file.
fn read_cgroup_record(dir: &OwnedFd, name: &str) -> TreeState {
    let fd = match rustix::fs::openat(dir, name, OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return TreeState::Absent,
        Err(_) => return TreeState::Unreadable,
    };
    let mut text = String::new();
    if File::from(fd).take(MAX_WITNESS_BYTES).read_to_string(&mut text).is_err() {
        return TreeState::Unreadable;
    }
    super::cgroup_tree::observe(&text)
}

/// Whether `a` and `b` in `dir` are the same file (both exist).
fn same_file(dir: &OwnedFd, a: &str, b: &str) -> bool {
    matches!((fsops::lstat(dir, a), fsops::lstat(dir, b)), (Ok(Some(x)), Ok(Some(y))) if x.st_ino == y.st_ino && x.st_dev == y.st_dev)
}

/// Creates file `name` in `dir` (mode 0600) with `content`: written under a temporary name and
/// then linked, so a reader never sees it partly written. An existing `name` is an error.
fn write_new(dir: &OwnedFd, name: &str, content: &[u8]) -> std::io::Result<()> {
    let temp = format!(".tmp-{}", uuid::Uuid::new_v4());
    let fd = rustix::fs::openat(dir, temp.as_str(), OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::from_raw_mode(0o600))?;
    let written = File::from(fd).write_all(content);
    let linked = written.and_then(|()| rustix::fs::linkat(dir, temp.as_str(), dir, name, AtFlags::empty()).map_err(std::io::Error::from));
    let _ = rustix::fs::unlinkat(dir, temp.as_str(), AtFlags::empty());
    linked
}

/// Whether a lock error means the filesystem does not support `flock`.
fn lock_unsupported(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(code) if code == Errno::OPNOTSUPP.raw_os_error() || code == Errno::NOLCK.raw_os_error() || code == Errno::INVAL.raw_os_error())
}

/// Tests the lock of witness `name` in `dir` without blocking: a shared lock is refused while
/// its holder keeps the exclusive one.
///
/// A free lock proves the holder gone only in the holder's lock domain: the same file seen
/// through another path to the state home — an overlay's upper directory beside its merged view
/// — can have locks of its own, so a held witness looks free there
/// (`docs/witness.md`, "Lock domains"; issue #40). The witness records its `(device, inode)` as
/// its creator saw it; when the file this prober opened has another, the lock says nothing here
/// and the witness is `untestable` (the `/proc` proof decides, in the recorded PID namespace
/// only). A witness that records none (written before this rule) is judged as before.
///
/// Errors: the file is there but cannot be opened (a permission, a symbolic link): never
/// `absent`, whose meaning is "no witness was ever taken".
fn test(dir: &OwnedFd, name: &str) -> Result<WitnessState, Errno> {
    let fd = match rustix::fs::openat(dir, name, OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(WitnessState::Absent),
        Err(e) => return Err(e),
    };
    let file = File::from(fd);
    Ok(match file.try_lock_shared() {
        Ok(()) => {
            let _ = file.unlock();
            if in_another_lock_domain(&file) { WitnessState::Untestable } else { WitnessState::Free }
        }
        Err(TryLockError::WouldBlock) => WitnessState::Held,
        Err(TryLockError::Error(_)) => WitnessState::Untestable,
    })
}

/// Whether the witness open as `file` records a `(device, inode)` other than the one this
/// process sees for it (see [`test`]); `false` when it records none (a witness written before
/// the rule, or a file that is no witness's content at all). A recorded domain that does not
/// parse is another domain.
fn in_another_lock_domain(file: &File) -> bool {
    let Ok(stat) = rustix::fs::fstat(file) else { return true };
    let Some(value) = witness_record(file) else { return false };
    let recorded = |key: &str| value.get(key).map(|v| v.as_str().and_then(|s| s.parse::<u64>().ok()));
    match (recorded("device"), recorded("inode")) {
        (None, None) => false,
        (Some(Some(device)), Some(Some(inode))) => (device, inode) != (stat.st_dev, stat.st_ino),
        _ => true,
    }
}

/// The `pidNamespace` a witness file records (its content, bounded).
fn recorded_pid_namespace(dir: &OwnedFd, name: &str) -> Option<u64> {
    let fd = rustix::fs::openat(dir, name, OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK, Mode::empty()).ok()?;
    witness_record(&File::from(fd))?.get("pidNamespace")?.as_str()?.parse().ok()
}

/// A witness file's content as JSON, read from `file`'s current offset (at most
/// `MAX_WITNESS_BYTES`); `None` when it cannot be read or is not JSON.
fn witness_record(file: &File) -> Option<serde_json::Value> {
    let mut text = String::new();
    std::io::Read::take(file, MAX_WITNESS_BYTES).read_to_string(&mut text).ok()?;
    serde_json::from_str(&text).ok()
}

/// Creates (0700) or opens directory `name` in `parent`, which must then be a private directory
/// of the user.
fn private_dir(parent: impl AsFd + Copy, name: &str, label: &str) -> Result<OwnedFd, WitnessError> {
    fsops::private_dir(parent, name).map_err(|(operation, source)| WitnessError::Io { path: label.into(), operation, source })
}
