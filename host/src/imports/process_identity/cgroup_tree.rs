//! The cgroup v2 a supervised command's tree runs in (`docs/containment.md`, "The cgroup"):
//! made beside the supervisor's own cgroup where the hierarchy is writable (root, or a
//! delegated subtree), joined by the command at its birth, and observed for the judgement.
//!
//! A process cannot leave a cgroup without write access to another one, and every process it
//! starts is born in it: while `cgroup.events` says `populated 1`, something of the tree is
//! alive, whatever it closed and however it detached. That keeps a lease whose witness a
//! daemon closed (`docs/witness.md`) active also where no PID namespace can be made. A cgroup
//! can be removed only once empty, and a removed one can never be joined again: a recorded
//! cgroup that is gone is empty for good.
//!
//! - **Its name**: `proclease-<pid namespace>-<pid>-<start time ticks>-<n>` of the supervisor
//!   (its start time as the initial time namespace shows it)
//!   that made it, under the supervisor's own cgroup. A supervisor removes its cgroup when its
//!   tree is done; one that was killed leaves an empty cgroup, which the next supervisor in the
//!   same cgroup removes ([`CgroupTree::create`]): at once when it is of the same PID namespace
//!   and `/proc` shows that pid no longer runs with that start time, otherwise once it is 10
//!   minutes old (no spawn can still be about to use it). The kernel never removes a cgroup
//!   with processes.
//! - **Its record**: canonical JSON + `\n`, beside the spawn witness of the command
//!   (`<spawn witness>.cgroup`, linked as `<pid>-<process start id>.cgroup` under the child's
//!   identity: `imports::process_identity::witness`): `{"cgroupId":N,"cgroupNamespace":N,
//!   "kind":"proclease-cgroup","path":"/…","schemaVersion":1}`, its path as
//!   `/proc/self/cgroup` shows it and the cgroup namespace (nsfs inode) that path is relative
//!   to. Never in the reference's records.
//!
//! This module only makes, observes and removes; what an observation proves is
//! `proclease-core`'s `liveness` (rule 2 of `judge`).

use std::os::fd::{AsFd as _, AsRawFd as _, OwnedFd, RawFd};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use proclease_core::liveness::TreeState;
use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;

/// The prefix of every cgroup proclease makes.
const PREFIX: &str = "proclease-";
/// The largest record or `cgroup.events` read, bytes.
const MAX_READ: usize = 4096;
/// At most this many entries of the parent cgroup are looked at by one sweep.
const MAX_SWEPT: usize = 10_000;

/// How old an empty cgroup of a supervisor of another PID namespace must be to be removed.
const FOREIGN_AGE: std::time::Duration = std::time::Duration::from_secs(600);

/// Cgroups made by this process so far (the `<n>` of their names).
static MADE: AtomicU64 = AtomicU64::new(0);

/// The cgroup v2 hierarchy as this process sees it.
struct Hierarchy {
    /// Where cgroup2 is mounted (e.g. `/sys/fs/cgroup`).
    mount: PathBuf,
    /// The cgroup path of that mount's root (`/` unless a subtree was mounted).
    root: String,
    /// This process's cgroup path (`0::PATH` of `/proc/self/cgroup`).
    own: String,
    /// This process's cgroup namespace (nsfs inode).
    namespace: u64,
}

/// This process's hierarchy, read once (a process's cgroup and mounts are set when it starts;
/// one moved later still makes its cgroups where it started).
static HIERARCHY: OnceLock<Result<Hierarchy, String>> = OnceLock::new();

impl Hierarchy {
    /// The hierarchy this process is in (read once), or why there is none to use.
    fn get() -> Result<&'static Hierarchy, String> {
        HIERARCHY.get_or_init(Hierarchy::find).as_ref().map_err(Clone::clone)
    }

    /// Reads the hierarchy this process is in, or why there is none to use.
    fn find() -> Result<Hierarchy, String> {
        let myself = procfs::process::Process::myself().map_err(|e| format!("/proc/self cannot be read ({e})"))?;
        let own = myself
            .cgroups()
            .map_err(|e| format!("/proc/self/cgroup cannot be read ({e})"))?
            .0
            .into_iter()
            .find(|c| c.hierarchy == 0 && c.controllers.is_empty())
            .map(|c| c.pathname)
            .ok_or_else(|| "this process is in no cgroup v2 (a cgroup v1 only machine)".to_string())?;
        let mounts = myself.mountinfo().map_err(|e| format!("/proc/self/mountinfo cannot be read ({e})"))?;
        let mount = mounts
            .into_iter()
            .filter(|m| m.fs_type == "cgroup2")
            .find(|m| within(&own, &m.root).is_some())
            .ok_or_else(|| format!("no cgroup v2 mount shows this process's cgroup {own}"))?;
        // Without it a record could name no namespace any reader matches: no cgroup then.
        let namespace = std::fs::metadata("/proc/self/ns/cgroup").map(|m| m.ino()).map_err(|e| format!("/proc/self/ns/cgroup cannot be read ({e})"))?;
        Ok(Hierarchy { mount: mount.mount_point, root: mount.root, own, namespace })
    }

    /// The directory of cgroup `path`, if this mount shows it.
    fn dir_of(&self, path: &str) -> Option<PathBuf> {
        let rest = within(path, &self.root)?;
        Some(if rest.is_empty() { self.mount.clone() } else { self.mount.join(rest) })
    }
}

/// `path` relative to `root` (both cgroup paths, `/`-rooted), if it is `root` or below it.
fn within<'a>(path: &'a str, root: &str) -> Option<&'a str> {
    if root == "/" {
        return Some(path.trim_start_matches('/'));
    }
    let rest = path.strip_prefix(root)?;
    if rest.is_empty() || rest.starts_with('/') { Some(rest.trim_start_matches('/')) } else { None }
}

/// A cgroup made for one command's tree. Dropping it does not remove it: [`CgroupTree::remove`]
/// once the tree is done.
#[derive(Debug)]
pub struct CgroupTree {
    /// Its path as `/proc/self/cgroup` shows it.
    path: String,
    /// Its directory in this process's mount namespace.
    dir_path: PathBuf,
    /// Its id: the inode number of its directory (the kernel's cgroup id).
    id: u64,
    /// The cgroup namespace `path` is relative to.
    namespace: u64,
    /// Its directory, open (for `clone3(CLONE_INTO_CGROUP)`).
    dir: OwnedFd,
}

impl CgroupTree {
    /// Makes a cgroup for a command's tree under this process's own cgroup v2, after removing
    /// the empty ones left there by supervisors that are gone.
    ///
    /// Errors: why none can be made, in words for `run -v` and `doctor` (no cgroup v2, its
    /// cgroup not writable: run as root or delegate it).
    pub fn create() -> Result<CgroupTree, String> {
        let hierarchy = Hierarchy::get()?;
        let parent = hierarchy.dir_of(&hierarchy.own).ok_or_else(|| format!("no cgroup v2 mount shows this process's cgroup {}", hierarchy.own))?;
        static SUPERVISOR: OnceLock<Option<Supervisor>> = OnceLock::new();
        let supervisor = SUPERVISOR.get_or_init(Supervisor::this).as_ref().ok_or_else(|| "this process's own identity cannot be read from /proc".to_string())?;
        sweep(&parent, supervisor);
        let name = format!("{PREFIX}{}-{}-{}-{}", supervisor.pid_namespace, supervisor.pid, supervisor.start, MADE.fetch_add(1, Ordering::Relaxed));
        let dir_path = parent.join(&name);
        match rustix::fs::mkdir(&dir_path, Mode::from_raw_mode(0o755)) {
            Ok(()) => {}
            Err(e @ (Errno::ACCESS | Errno::PERM | Errno::ROFS)) => {
                return Err(format!("this process's cgroup {} is not writable ({}): run as root, or in a cgroup delegated to this user", hierarchy.own, std::io::Error::from(e)));
            }
            Err(e) => return Err(format!("a cgroup cannot be made under {} ({})", hierarchy.own, std::io::Error::from(e))),
        }
        let opened = rustix::fs::open(&dir_path, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW, Mode::empty());
        let dir = match opened {
            Ok(dir) => dir,
            Err(e) => {
                let _ = rustix::fs::rmdir(&dir_path);
                return Err(format!("the cgroup just made cannot be opened ({})", std::io::Error::from(e)));
            }
        };
        let id = match rustix::fs::fstat(&dir) {
            Ok(stat) => stat.st_ino,
            Err(e) => {
                let _ = rustix::fs::rmdir(&dir_path);
                return Err(format!("the cgroup just made cannot be read ({})", std::io::Error::from(e)));
            }
        };
        let path = if hierarchy.own.ends_with('/') { format!("{}{name}", hierarchy.own) } else { format!("{}/{name}", hierarchy.own) };
        Ok(CgroupTree { path, dir_path, id, namespace: hierarchy.namespace, dir })
    }

    /// Whether a command's tree would get a cgroup here, and why not: makes one and removes it.
    ///
    /// Errors: why none can be made ([`CgroupTree::create`]).
    pub fn available() -> Result<(), String> {
        let cgroup = CgroupTree::create()?;
        cgroup.remove();
        Ok(())
    }

    /// Its path in the hierarchy (as `/proc/<pid>/cgroup` shows it), e.g.
    /// `/proclease-4026531836-812-9953-0`.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Its directory's descriptor, for `clone3(CLONE_INTO_CGROUP)` (kept open by this value).
    pub fn dir_fd(&self) -> RawFd {
        self.dir.as_raw_fd()
    }

    /// Its `cgroup.procs`, opened for writing: a process that writes `0` to it joins the cgroup
    /// (where `clone3` cannot be used: the command spawned without a box).
    ///
    /// Errors: it cannot be opened.
    pub fn open_procs(&self) -> std::io::Result<OwnedFd> {
        Ok(rustix::fs::openat(&self.dir, "cgroup.procs", OFlags::WRONLY | OFlags::CLOEXEC, Mode::empty())?)
    }

    /// Whether any process is in it (`cgroup.events`); `None` when that cannot be read.
    pub fn populated(&self) -> Option<bool> {
        populated(&self.dir)
    }

    /// Kills every process in it at once (`cgroup.kill`, Linux 5.14): none can fork away
    /// meanwhile.
    ///
    /// Errors: `cgroup.kill` is missing (an older kernel) or cannot be written.
    pub fn kill(&self) -> std::io::Result<()> {
        let file = rustix::fs::openat(&self.dir, "cgroup.kill", OFlags::WRONLY | OFlags::CLOEXEC, Mode::empty())?;
        rustix::io::write(&file, b"1")?;
        Ok(())
    }

    /// The processes in it and in the cgroups below it (`cgroup.procs` of each, at most 100,000
    /// in all, 64 levels deep), as this process's PID namespace numbers them.
    pub fn pids(&self) -> Vec<i32> {
        let mut pids = Vec::new();
        collect_pids(&self.dir_path, 0, &mut pids);
        pids
    }

    /// Whether `/proc/<pid>/cgroup` shows `pid` in this cgroup or below it.
    fn holds(&self, pid: i32) -> bool {
        let below = format!("{}/", self.path);
        procfs::process::Process::new(pid)
            .and_then(|p| p.cgroups())
            .is_ok_and(|groups| groups.0.iter().any(|g| g.hierarchy == 0 && g.controllers.is_empty() && (g.pathname == self.path || g.pathname.starts_with(&below))))
    }

    /// Sends `signal` to every process in it (and in the cgroups below it); how many got it. Each is pinned by a pidfd and
    /// checked to be in this cgroup before it is signalled, so a pid reused meanwhile by a
    /// process elsewhere is never signalled.
    pub fn signal_all(&self, signal: rustix::process::Signal) -> usize {
        let mut sent = 0;
        for pid in self.pids() {
            let Some(raw) = rustix::process::Pid::from_raw(pid) else { continue };
            let Ok(pidfd) = rustix::process::pidfd_open(raw, rustix::process::PidfdFlags::empty()) else { continue };
            if self.holds(pid) && rustix::process::pidfd_send_signal(&pidfd, signal).is_ok() {
                sent += 1;
            }
        }
        sent
    }

    /// Removes it once empty: true when it is gone. A cgroup that still has processes stays
    /// (the kernel refuses); so does one replaced by another of the same name. The processes
    /// of a tree that just died leave it within moments: busy, it is retried for up to 100 ms.
    pub fn remove(&self) -> bool {
        for _ in 0..50 {
            match std::fs::symlink_metadata(&self.dir_path) {
                Ok(meta) if meta.ino() == self.id => match rustix::fs::rmdir(&self.dir_path) {
                    Ok(()) | Err(Errno::NOENT) => return true,
                    Err(Errno::BUSY) => std::thread::sleep(std::time::Duration::from_millis(2)),
                    Err(_) => return false,
                },
                Ok(_) => return true,
                Err(e) => return e.kind() == std::io::ErrorKind::NotFound,
            }
        }
        false
    }

    /// Its record (see the module docs).
    pub fn record(&self) -> String {
        let path = serde_json::to_string(&self.path).unwrap_or_else(|_| "\"\"".into());
        format!("{{\"cgroupId\":{},\"cgroupNamespace\":{},\"kind\":\"proclease-cgroup\",\"path\":{path},\"schemaVersion\":1}}\n", self.id, self.namespace)
    }
}

/// A cgroup record's fields.
struct Record<'a> {
    cgroup_id: u64,
    cgroup_namespace: u64,
    kind: &'a str,
    path: &'a str,
}

/// What a cgroup record shows now: `populated`, `empty` (also when its cgroup was removed or
/// replaced), or `unreadable` (a malformed record, no cgroup v2 mount that shows it, another
/// cgroup namespace, an unreadable `cgroup.events`).
pub fn observe(record: &str) -> TreeState {
    let Ok(serde_json::Value::Object(fields)) = serde_json::from_str::<serde_json::Value>(record) else { return TreeState::Unreadable };
    let number = |key: &str| fields.get(key).and_then(serde_json::Value::as_u64);
    let text = |key: &str| fields.get(key).and_then(serde_json::Value::as_str);
    let (Some(cgroup_id), Some(cgroup_namespace), Some(kind), Some(path)) = (number("cgroupId"), number("cgroupNamespace"), text("kind"), text("path")) else {
        return TreeState::Unreadable;
    };
    let record = Record { cgroup_id, cgroup_namespace, kind, path };
    if record.kind != "proclease-cgroup" || !record.path.starts_with('/') || record.path.split('/').any(|part| part == "..") {
        return TreeState::Unreadable;
    }
    let Ok(hierarchy) = Hierarchy::get() else { return TreeState::Unreadable };
    if hierarchy.namespace != record.cgroup_namespace {
        return TreeState::Unreadable;
    }
    let Some(dir_path) = hierarchy.dir_of(record.path) else { return TreeState::Unreadable };
    let dir = match rustix::fs::open(&dir_path, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW, Mode::empty()) {
        Ok(dir) => dir,
        // Removed: it was empty then, and nothing can join it any more.
        Err(Errno::NOENT) => return TreeState::Empty,
        Err(_) => return TreeState::Unreadable,
    };
    match rustix::fs::fstat(&dir) {
        // Another cgroup of the same name: the recorded one was removed.
        Ok(stat) if stat.st_ino != record.cgroup_id => TreeState::Empty,
        Ok(_) => match populated(&dir) {
            Some(true) => TreeState::Populated,
            Some(false) => TreeState::Empty,
            None => TreeState::Unreadable,
        },
        Err(_) => TreeState::Unreadable,
    }
}

/// Appends the pids of `cgroup.procs` in `dir` and the cgroups below it to `pids`.
fn collect_pids(dir: &Path, depth: usize, pids: &mut Vec<i32>) {
    const MAX_PIDS: usize = 100_000;
    if depth > 64 || pids.len() >= MAX_PIDS {
        return;
    }
    if let Ok(text) = std::fs::read_to_string(dir.join("cgroup.procs")) {
        pids.extend(text.lines().filter_map(|line| line.trim().parse::<i32>().ok()).take(MAX_PIDS - pids.len()));
    }
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.filter_map(Result::ok) {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            collect_pids(&entry.path(), depth + 1, pids);
        }
    }
}

/// `populated` of the `cgroup.events` of the cgroup directory `dir`.
fn populated(dir: &OwnedFd) -> Option<bool> {
    let file = rustix::fs::openat(dir.as_fd(), "cgroup.events", OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()).ok()?;
    let mut buffer = [0u8; MAX_READ];
    let mut filled = 0;
    loop {
        match rustix::io::read(&file, &mut buffer[filled..]) {
            Ok(0) => break,
            Ok(n) => {
                filled += n;
                if filled == buffer.len() {
                    break;
                }
            }
            Err(Errno::INTR) => {}
            Err(_) => return None,
        }
    }
    let text = std::str::from_utf8(&buffer[..filled]).ok()?;
    match text.lines().find_map(|line| line.strip_prefix("populated "))?.trim() {
        "1" => Some(true),
        "0" => Some(false),
        _ => None,
    }
}

/// What names a supervisor's cgroups: its PID namespace, pid and start time (ticks).
struct Supervisor {
    pid_namespace: u64,
    pid: i32,
    start: u64,
}

impl Supervisor {
    fn this() -> Option<Supervisor> {
        let myself = procfs::process::Process::myself().ok()?;
        let start = initial_start(myself.stat().ok()?.starttime)?;
        let pid_namespace = std::fs::metadata("/proc/self/ns/pid").ok()?.ino();
        Some(Supervisor { pid_namespace, pid: myself.pid, start })
    }
}

/// A `starttime` this process read from `/proc` (ticks, shifted by its time namespace's
/// boottime offset), as the initial time namespace shows it: so that supervisors in different
/// time namespaces name and compare start times alike.
fn initial_start(read: u64) -> Option<u64> {
    let offsets = std::fs::read_to_string("/proc/self/timens_offsets").unwrap_or_default();
    let offset_ticks = offsets
        .lines()
        .find_map(|line| {
            let mut parts = line.split_whitespace();
            (parts.next()? == "boottime").then(|| {
                let seconds: i64 = parts.next()?.parse().ok()?;
                let nanos: i64 = parts.next()?.parse().ok()?;
                // USER_HZ is 100 on Linux.
                Some(seconds * 100 + nanos / 10_000_000)
            })?
        })
        .unwrap_or(0);
    u64::try_from(i128::from(read) - i128::from(offset_ticks)).ok()
}

/// Removes the empty cgroups under `parent` made by supervisors of this PID namespace that no
/// longer run (their pid is gone, or runs with another start time), and those of other PID
/// namespaces 10 minutes after they were made. A live supervisor of this namespace's are never
/// touched; one with processes the kernel refuses to remove.
fn sweep(parent: &Path, this: &Supervisor) {
    let Ok(entries) = std::fs::read_dir(parent) else { return };
    for entry in entries.take(MAX_SWEPT).filter_map(Result::ok) {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(rest) = name.strip_prefix(PREFIX) else { continue };
        let mut parts = rest.split('-');
        let (Some(namespace), Some(pid), Some(start), Some(_), None) = (parts.next(), parts.next(), parts.next(), parts.next(), parts.next()) else { continue };
        let (Ok(namespace), Ok(pid), Ok(start)) = (namespace.parse::<u64>(), pid.parse::<i32>(), start.parse::<u64>()) else { continue };
        if pid <= 0 || (namespace == this.pid_namespace && pid == this.pid && start == this.start) {
            continue;
        }
        if namespace != this.pid_namespace {
            // Its supervisor's pid means nothing here: removed only once it is old enough that
            // no spawn can still be about to use it (the kernel keeps one with processes).
            let old = entry.metadata().is_ok_and(|meta| {
                let made = std::time::UNIX_EPOCH + std::time::Duration::from_secs(u64::try_from(meta.ctime()).unwrap_or(u64::MAX));
                made.elapsed().is_ok_and(|age| age >= FOREIGN_AGE)
            });
            if old {
                let _ = rustix::fs::rmdir(entry.path());
            }
            continue;
        }
        let running = procfs::process::Process::new(pid).and_then(|p| p.stat()).map(|s| initial_start(s.starttime) == Some(start) && s.state != 'Z');
        if matches!(running, Ok(true)) {
            continue;
        }
        let gone = || rustix::process::Pid::from_raw(pid).is_some_and(|pid| rustix::process::test_kill_process(pid) == Err(Errno::SRCH));
        if running.is_err() && !gone() {
            // Not readable, and the kernel does not say it is gone: leave it.
            continue;
        }
        let _ = rustix::fs::rmdir(entry.path());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_taken_relative_to_the_mount_root() {
        assert_eq!(within("/a/b", "/"), Some("a/b"));
        assert_eq!(within("/", "/"), Some(""));
        assert_eq!(within("/a/b", "/a"), Some("b"));
        assert_eq!(within("/a", "/a"), Some(""));
        assert_eq!(within("/ab", "/a"), None);
        assert_eq!(within("/b", "/a"), None);
    }

    #[test]
    fn malformed_or_foreign_records_are_unreadable() {
        assert_eq!(observe("{"), TreeState::Unreadable);
        assert_eq!(observe(r#"{"cgroupId":1,"cgroupNamespace":1,"kind":"other","path":"/x","schemaVersion":1}"#), TreeState::Unreadable);
        assert_eq!(observe(r#"{"cgroupId":1,"cgroupNamespace":1,"kind":"proclease-cgroup","path":"/../x","schemaVersion":1}"#), TreeState::Unreadable);
        // Another cgroup namespace than any this process is in (0 is no nsfs inode).
        assert_eq!(observe(r#"{"cgroupId":1,"cgroupNamespace":0,"kind":"proclease-cgroup","path":"/x","schemaVersion":1}"#), TreeState::Unreadable);
    }
}
