//! The portable store (`guest/portable`, world `portable-store` of `wit/`, built by
//! `tests/build.rs`) and a host for it: the system-call contract (`wit/sys.wit`) implemented on
//! this machine over the native seam ([`NativeFs`]: one system call per function), and the
//! `process-identity` facts over [`ProcessIdentity`]. What a Python or Node host will have to
//! implement, and no more: no protocol step and no message is worded here.
//!
//! [`PortableStore`] calls the component's `state-store` exports and answers with the core's
//! types, so a test can compare it with the native [`proclease::state_store::StateStore`]
//! call for call.

use std::fs::{File, TryLockError};
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use ::proclease::wasmtime;
use proclease::core::effects::{BatchStatus, CollectionIdentity, CollectionSnapshot, DirectoryFacts, Failure, Store, Workspace};
use proclease::core::records::DirectoryIdentity;
use proclease::process_identity::ProcessIdentity;
use proclease::seam::{Errno, FileStat, Fs as _, NativeFs};
use proclease::{Runtime, RuntimeConfig};
use wasmtime::component::{Component, HasSelf, Linker, Resource, ResourceTable};

/// The component compiled to native code by `tests/build.rs` with the runtime's engine
/// configuration (the runtime has no compiler).
pub const PRECOMPILED: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/portable.cwasm"));

pub(crate) mod generated {
    ::proclease::wasmtime::component::bindgen!({
        path: "../wit",
        world: "portable-store",
        wasmtime_crate: ::proclease::wasmtime,
        // A resource the guest names but does not own is a trap, not an errno.
        imports: { default: trappable },
        with: {
            "proclease:lease/sys-fs.directory": std::os::fd::OwnedFd,
            "proclease:lease/sys-fs.file": std::fs::File,
            "proclease:lease/sys-fs.lock": std::fs::File,
        },
    });
}

use generated::proclease::lease::{clock, process_identity as pi, sys_fs, sys_kernel, types as t};

/// The conversions the component and the native host share (`wit/convert_effects.rs`).
#[allow(dead_code)]
mod convert {
    use proclease::core::effects::{BatchInvalid, BatchStatus, CollectionEntry, CollectionIdentity, CollectionSnapshot, DirectoryFacts, EntryKind, FinishedRun};
    use proclease::core::liveness::{OwnerFacts, OwnerStatus, ProcRead, ProcView, RemotePresence, TreeState, WitnessState};
    use proclease::core::records::{DirectoryIdentity, Owner};
    use proclease::core::{Failure, FailureKind};

    use super::generated::exports::proclease::lease::{state_store as ss, workspace as ws};
    use super::generated::proclease::lease::{process_identity as pi, types as t};

    include!("../../wit/convert_macros.rs");
    include!("../../wit/convert_effects.rs");
}

/// What the host grants one instance: its state home, its resources, the process facts.
pub struct SysHost {
    table: ResourceTable,
    home: OwnedFd,
    /// The state home's resolved path (`state-home-path`).
    home_path: Vec<u8>,
    /// The workspace roots: resolved path and an `O_NOFOLLOW` handle.
    roots: Vec<(String, OwnedFd)>,
    identity: ProcessIdentity,
}

impl SysHost {
    /// The grants of an instance: the state home `home` (a directory the caller validated, as
    /// the native `StateHome` does) and the workspace `roots` (resolved with realpath and opened
    /// without following a symbolic link, as the native workspace grants them).
    pub(crate) fn new(home: &Path, roots: &[&Path]) -> SysHost {
        let home_path = {
            use std::os::unix::ffi::OsStringExt as _;
            std::fs::canonicalize(home).expect("the state home resolves").into_os_string().into_vec()
        };
        let home = File::open(home).map(OwnedFd::from).expect("the state home opens");
        let roots = roots
            .iter()
            .map(|root| {
                use rustix::fs::{Mode, OFlags};
                let path = std::fs::canonicalize(root).expect("the root resolves");
                let dir = rustix::fs::open(&path, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty()).expect("the root opens");
                (path.into_os_string().into_string().expect("a UTF-8 root"), dir)
            })
            .collect();
        SysHost { table: ResourceTable::new(), home, home_path, roots, identity: ProcessIdentity::new() }
    }
}

fn errno(e: Errno) -> u16 {
    u16::try_from(e.raw()).unwrap_or(u16::MAX)
}

fn io_errno(e: &std::io::Error) -> u16 {
    e.raw_os_error().and_then(|code| u16::try_from(code).ok()).unwrap_or(5)
}

fn stat(s: FileStat) -> sys_fs::FileStat {
    sys_fs::FileStat { dev: s.dev, ino: s.ino, size: s.size, mtime: s.mtime, ctime: s.ctime, mode: s.mode, uid: s.uid, birth: s.birth }
}

impl SysHost {
    fn dir(&self, dir: &Resource<OwnedFd>) -> wasmtime::Result<&OwnedFd> {
        Ok(self.table.get(dir)?)
    }

    fn file(&self, file: &Resource<File>) -> wasmtime::Result<&File> {
        Ok(self.table.get(file)?)
    }

    /// A new resource for `value`, or the errno when the operation failed.
    fn own<T: Send + 'static>(&mut self, value: Result<T, Errno>) -> wasmtime::Result<Result<Resource<T>, u16>> {
        Ok(match value {
            Ok(value) => Ok(self.table.push(value)?),
            Err(e) => Err(errno(e)),
        })
    }

    /// One `flock(LOCK_EX | LOCK_NB)` on `file`.
    fn attempt(&mut self, file: File) -> wasmtime::Result<Result<sys_fs::LockAttempt, u16>> {
        Ok(match file.try_lock() {
            Ok(()) => Ok(sys_fs::LockAttempt::Taken(self.table.push(file)?)),
            Err(TryLockError::WouldBlock) => Ok(sys_fs::LockAttempt::Held),
            Err(TryLockError::Error(e)) => Err(io_errno(&e)),
        })
    }
}

impl sys_fs::Host for SysHost {
    fn euid(&mut self) -> wasmtime::Result<u32> {
        Ok(NativeFs.euid())
    }

    fn state_home(&mut self) -> wasmtime::Result<Resource<OwnedFd>> {
        let home = self.home.try_clone()?;
        Ok(self.table.push(home)?)
    }

    fn state_home_path(&mut self) -> wasmtime::Result<Vec<u8>> {
        Ok(self.home_path.clone())
    }

    fn granted_roots(&mut self) -> wasmtime::Result<Vec<(String, Resource<OwnedFd>)>> {
        let mut granted = Vec::new();
        for (path, dir) in &self.roots {
            let dir = dir.try_clone()?;
            granted.push((path.clone(), self.table.push(dir)?));
        }
        Ok(granted)
    }
}

impl sys_fs::HostDirectory for SysHost {
    fn duplicate(&mut self, dir: Resource<OwnedFd>) -> wasmtime::Result<Result<Resource<OwnedFd>, u16>> {
        let copy = NativeFs.duplicate(self.dir(&dir)?);
        self.own(copy)
    }

    fn stat(&mut self, dir: Resource<OwnedFd>) -> wasmtime::Result<Result<sys_fs::FileStat, u16>> {
        Ok(NativeFs.stat_dir(self.dir(&dir)?).map(stat).map_err(errno))
    }

    fn open_dir(&mut self, dir: Resource<OwnedFd>, name: Vec<u8>) -> wasmtime::Result<Result<Resource<OwnedFd>, u16>> {
        let opened = NativeFs.open_dir(self.dir(&dir)?, &name);
        self.own(opened)
    }

    fn lstat(&mut self, dir: Resource<OwnedFd>, name: Vec<u8>) -> wasmtime::Result<Result<sys_fs::Lookup, u16>> {
        Ok(NativeFs.lstat(self.dir(&dir)?, &name).map(|found| sys_fs::Lookup { stat: found.map(stat) }).map_err(errno))
    }

    fn open_file(&mut self, dir: Resource<OwnedFd>, name: Vec<u8>) -> wasmtime::Result<Result<Resource<File>, u16>> {
        let opened = NativeFs.open_file(self.dir(&dir)?, &name);
        self.own(opened)
    }

    fn read_names(&mut self, dir: Resource<OwnedFd>, prefix: Vec<u8>, bound: u32) -> wasmtime::Result<Result<Vec<Vec<u8>>, sys_fs::NamesError>> {
        Ok(NativeFs.read_names(self.dir(&dir)?, bound as usize, &prefix).map_err(|e| match e {
            Some(e) => sys_fs::NamesError::Failed(errno(e)),
            None => sys_fs::NamesError::TooMany,
        }))
    }

    fn first_names(&mut self, dir: Resource<OwnedFd>, at_most: u32) -> wasmtime::Result<Result<Vec<Vec<u8>>, u16>> {
        Ok(NativeFs.first_names(self.dir(&dir)?, at_most as usize).map_err(errno))
    }

    fn create_file(&mut self, dir: Resource<OwnedFd>, name: Vec<u8>) -> wasmtime::Result<Result<Resource<File>, u16>> {
        let created = NativeFs.create_file(self.dir(&dir)?, &name);
        self.own(created)
    }

    fn make_dir(&mut self, dir: Resource<OwnedFd>, name: Vec<u8>) -> wasmtime::Result<Result<Resource<OwnedFd>, u16>> {
        let made = NativeFs.make_dir(self.dir(&dir)?, &name);
        self.own(made)
    }

    fn sync(&mut self, dir: Resource<OwnedFd>) -> wasmtime::Result<Option<u16>> {
        Ok(NativeFs.sync_dir(self.dir(&dir)?).err().map(errno))
    }

    fn link(&mut self, dir: Resource<OwnedFd>, source: Vec<u8>, target_dir: Resource<OwnedFd>, target: Vec<u8>) -> wasmtime::Result<Option<u16>> {
        Ok(NativeFs.link(self.dir(&dir)?, &source, self.dir(&target_dir)?, &target).err().map(errno))
    }

    fn rename(&mut self, dir: Resource<OwnedFd>, source: Vec<u8>, target_dir: Resource<OwnedFd>, target: Vec<u8>, replace: bool) -> wasmtime::Result<Option<u16>> {
        Ok(NativeFs.rename(self.dir(&dir)?, &source, self.dir(&target_dir)?, &target, replace).err().map(errno))
    }

    fn unlink(&mut self, dir: Resource<OwnedFd>, name: Vec<u8>) -> wasmtime::Result<Option<u16>> {
        Ok(NativeFs.unlink(self.dir(&dir)?, &name).err().map(errno))
    }

    fn remove_dir(&mut self, dir: Resource<OwnedFd>, name: Vec<u8>) -> wasmtime::Result<Option<u16>> {
        Ok(NativeFs.remove_dir(self.dir(&dir)?, &name).err().map(errno))
    }

    fn try_lock(&mut self, dir: Resource<OwnedFd>, name: Vec<u8>) -> wasmtime::Result<Result<sys_fs::LockAttempt, u16>> {
        use rustix::fs::{Mode, OFlags};
        let flags = OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let directory = self.dir(&dir)?;
        let opened = match rustix::fs::openat(directory, name.as_slice(), flags, Mode::from_raw_mode(0o600)) {
            // A read-only file system: an existing lock file still serialises readers.
            Err(rustix::io::Errno::ROFS) => match rustix::fs::openat(directory, name.as_slice(), OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty()) {
                Err(rustix::io::Errno::NOENT) => Err(rustix::io::Errno::ROFS),
                other => other,
            },
            other => other,
        };
        match opened {
            Ok(fd) => self.attempt(File::from(fd)),
            Err(e) => Ok(Err(u16::try_from(e.raw_os_error()).unwrap_or(5))),
        }
    }

    fn try_lock_directory(&mut self, dir: Resource<OwnedFd>) -> wasmtime::Result<Result<sys_fs::LockAttempt, u16>> {
        use rustix::fs::{Mode, OFlags};
        match rustix::fs::openat(self.dir(&dir)?, ".", OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty()) {
            Ok(fd) => self.attempt(File::from(fd)),
            Err(e) => Ok(Err(u16::try_from(e.raw_os_error()).unwrap_or(5))),
        }
    }

    fn drop(&mut self, dir: Resource<OwnedFd>) -> wasmtime::Result<()> {
        self.table.delete(dir)?;
        Ok(())
    }
}

impl sys_fs::HostFile for SysHost {
    fn stat(&mut self, file: Resource<File>) -> wasmtime::Result<Result<sys_fs::FileStat, u16>> {
        Ok(NativeFs.stat_file(self.file(&file)?).map(stat).map_err(errno))
    }

    fn read_up_to(&mut self, file: Resource<File>, limit: u64, expected: u64) -> wasmtime::Result<Result<Vec<u8>, u16>> {
        Ok(NativeFs.read_up_to(self.file(&file)?, limit, expected).map_err(errno))
    }

    fn write_all(&mut self, file: Resource<File>, bytes: Vec<u8>) -> wasmtime::Result<Option<u16>> {
        Ok(NativeFs.write_all(self.file(&file)?, &bytes).err().map(errno))
    }

    fn write_at(&mut self, file: Resource<File>, bytes: Vec<u8>, offset: u64) -> wasmtime::Result<Option<u16>> {
        Ok(NativeFs.write_at(self.file(&file)?, &bytes, offset).err().map(errno))
    }

    fn sync(&mut self, file: Resource<File>) -> wasmtime::Result<Option<u16>> {
        Ok(NativeFs.sync_file(self.file(&file)?).err().map(errno))
    }

    fn sync_data(&mut self, file: Resource<File>) -> wasmtime::Result<Option<u16>> {
        Ok(NativeFs.sync_file_data(self.file(&file)?).err().map(errno))
    }

    fn drop(&mut self, file: Resource<File>) -> wasmtime::Result<()> {
        self.table.delete(file)?;
        Ok(())
    }
}

impl sys_fs::HostLock for SysHost {
    fn note(&mut self, lock: Resource<File>, note: Vec<u8>) -> wasmtime::Result<Option<u16>> {
        use std::os::unix::fs::FileExt;
        Ok(self.file(&lock)?.write_all_at(&note, 0).err().map(|e| io_errno(&e)))
    }

    fn noted(&mut self, lock: Resource<File>, length: u32) -> wasmtime::Result<Result<Vec<u8>, u16>> {
        use std::os::unix::fs::FileExt;
        let file = self.file(&lock)?;
        let mut bytes = vec![0u8; length as usize];
        let mut filled = 0;
        while filled < bytes.len() {
            match file.read_at(&mut bytes[filled..], filled as u64) {
                Ok(0) => break,
                Ok(read) => filled += read,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Ok(Err(io_errno(&e))),
            }
        }
        bytes.truncate(filled);
        Ok(Ok(bytes))
    }

    /// Closing the only descriptor of the open file description releases its `flock`.
    fn drop(&mut self, lock: Resource<File>) -> wasmtime::Result<()> {
        self.table.delete(lock)?;
        Ok(())
    }
}

impl sys_kernel::Host for SysHost {
    fn pid(&mut self) -> wasmtime::Result<u32> {
        Ok(std::process::id())
    }

    fn monotonic_ns(&mut self) -> wasmtime::Result<u64> {
        static ORIGIN: OnceLock<Instant> = OnceLock::new();
        Ok(u64::try_from(ORIGIN.get_or_init(Instant::now).elapsed().as_nanos()).unwrap_or(u64::MAX))
    }

    fn random_bytes(&mut self) -> wasmtime::Result<Vec<u8>> {
        Ok(uuid::Uuid::new_v4().into_bytes().to_vec())
    }

    fn pause(&mut self, ns: u64) -> wasmtime::Result<()> {
        std::thread::sleep(Duration::from_nanos(ns));
        Ok(())
    }

    fn pid_gone(&mut self, pid: u64) -> wasmtime::Result<bool> {
        let Some(pid) = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw) else { return Ok(false) };
        Ok(rustix::process::test_kill_process(pid) == Err(rustix::io::Errno::SRCH))
    }

    /// The native host's default bound (10 s).
    fn lock_wait_ns(&mut self) -> wasmtime::Result<u64> {
        Ok(10_000_000_000)
    }

    fn warn(&mut self, message: String) -> wasmtime::Result<()> {
        eprintln!("proclease: {message}");
        Ok(())
    }

    fn lock_timed_out(&mut self, _message: String) -> wasmtime::Result<()> {
        // The failure that follows carries the words; this harness keeps no operation.
        Ok(())
    }

    fn proc_locks(&mut self) -> wasmtime::Result<Option<Vec<u8>>> {
        Ok(std::fs::read("/proc/locks").ok())
    }

    fn proc_stat(&mut self, pid: u32) -> wasmtime::Result<Option<Vec<u8>>> {
        Ok(std::fs::read(format!("/proc/{pid}/stat")).ok())
    }

    fn proc_pids(&mut self) -> wasmtime::Result<Vec<u32>> {
        let entries = std::fs::read_dir("/proc").map(|entries| entries.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect());
        Ok(entries.unwrap_or_default())
    }

    fn proc_fdinfos(&mut self, pid: u32) -> wasmtime::Result<Option<Vec<Vec<u8>>>> {
        let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/fdinfo")) else { return Ok(None) };
        Ok(Some(entries.filter_map(|e| std::fs::read(e.ok()?.path()).ok()).collect()))
    }
}

impl t::Host for SysHost {}

impl clock::Host for SysHost {
    fn now_ms(&mut self) -> wasmtime::Result<u64> {
        let since_epoch = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        Ok(u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX))
    }
}

impl pi::Host for SysHost {
    fn current_boot_id(&mut self) -> wasmtime::Result<Result<String, String>> {
        Ok(self.identity.current_boot_id().map_err(|e| e.0))
    }

    fn self_identity(&mut self) -> wasmtime::Result<Result<t::Owner, String>> {
        Ok(self.identity.self_identity().map(convert::owner_to_wit).map_err(|e| e.0))
    }

    fn capture(&mut self, pid: u64) -> wasmtime::Result<Result<t::Owner, String>> {
        Ok(self.identity.capture(pid).map(convert::owner_to_wit).map_err(|e| e.0))
    }

    fn probe(&mut self, owner: t::Owner) -> wasmtime::Result<Result<pi::OwnerFacts, String>> {
        Ok(self.identity.probe(&convert::owner_from_wit(owner)).map(convert::facts_to_wit).map_err(|e| e.0))
    }

    /// The portable store keeps no run journal: no run finished here.
    fn finished_run(&mut self, _: String) -> wasmtime::Result<Result<pi::FinishedRunEntry, String>> {
        Ok(Ok(pi::FinishedRunEntry { outcome: None }))
    }

    fn forget_run(&mut self, _: String) -> wasmtime::Result<()> {
        Ok(())
    }
}

/// One instance of the portable store on a state home.
pub struct PortableStore {
    store: wasmtime::Store<SysHost>,
    instance: generated::PortableStore,
}

/// The engine of a default [`Runtime`], and the portable store loaded into it, once per process.
fn loaded() -> &'static (Runtime, Component) {
    static LOADED: OnceLock<(Runtime, Component)> = OnceLock::new();
    LOADED.get_or_init(|| load(PRECOMPILED))
}

/// A default [`Runtime`] and the component `precompiled` holds, loaded into it.
pub(crate) fn load(precompiled: &'static [u8]) -> (Runtime, Component) {
    let runtime = Runtime::new(RuntimeConfig::default()).expect("the runtime starts");
    // SAFETY: the bytes were produced by `Engine::precompile_component` in this crate's build
    // script with the runtime's engine configuration; wasmtime checks their header.
    let component = unsafe { Component::deserialize(runtime.engine(), precompiled) }.expect("the precompiled component loads");
    (runtime, component)
}

/// The names `component` imports and exports, as the component model names them.
pub(crate) fn world_of((runtime, component): &(Runtime, Component)) -> (Vec<String>, Vec<String>) {
    let ty = component.component_type();
    let imports = ty.imports(runtime.engine()).map(|(name, _)| name.to_string()).collect();
    let exports = ty.exports(runtime.engine()).map(|(name, _)| name.to_string()).collect();
    (imports, exports)
}

/// A store of `runtime`'s engine for an instance granted what `host` grants.
pub(crate) fn store_of(runtime: &Runtime, host: SysHost) -> wasmtime::Store<SysHost> {
    let mut store = wasmtime::Store::new(runtime.engine(), host);
    // The runtime's engine interrupts a call at an epoch deadline (the shipped component's call
    // deadline); a test's calls have none.
    store.set_epoch_deadline(u64::MAX / 2);
    store
}

/// What a call of the portable store answered, or the core's failure (a trap panics: a bug).
pub type Answer<T> = Result<T, Failure>;

impl PortableStore {
    /// The portable store on the state home `home` (a directory the caller validated, as the
    /// native `StateHome` does), with no workspace root.
    pub fn open(home: &Path) -> PortableStore {
        PortableStore::with_roots(home, &[])
    }

    /// The portable store on the state home `home`, granted the workspace `roots` (resolved
    /// with realpath and opened without following a symbolic link, as the native workspace
    /// grants them).
    pub fn with_roots(home: &Path, roots: &[&Path]) -> PortableStore {
        let (runtime, component) = loaded();
        let mut store = store_of(runtime, SysHost::new(home, roots));
        let mut linker = Linker::new(runtime.engine());
        generated::PortableStore::add_to_linker::<SysHost, HasSelf<SysHost>>(&mut linker, |host| host).expect("the imports link");
        let instance = generated::PortableStore::instantiate(&mut store, component, &linker).expect("the portable store instantiates");
        PortableStore { store, instance }
    }

    /// The names the component imports and exports, as the component model names them.
    pub fn world() -> (Vec<String>, Vec<String>) {
        world_of(loaded())
    }

    fn call<T, W>(
        &mut self,
        f: impl FnOnce(&generated::exports::proclease::lease::state_store::Guest, &mut wasmtime::Store<SysHost>) -> wasmtime::Result<Result<W, t::Failure>>,
        map: impl FnOnce(W) -> T,
    ) -> Answer<T> {
        let guest = self.instance.proclease_lease_state_store();
        match f(guest, &mut self.store).expect("the portable store does not trap") {
            Ok(value) => Ok(map(value)),
            Err(failure) => Err(convert::failure_from_wit(failure)),
        }
    }

    /// `lock-leasing`: whether the lease-creation lock was taken (`false` where the host has
    /// no kernel locks).
    pub fn lock_leasing_taken(&mut self) -> Answer<bool> {
        self.call(|g, s| g.call_lock_leasing(s), |lock| lock.held)
    }

    /// `unlock-leasing`.
    pub fn unlock_leasing(&mut self) {
        let guest = self.instance.proclease_lease_state_store();
        guest.call_unlock_leasing(&mut self.store).expect("the portable store does not trap");
    }

    /// `recovery-turn.take`: whether the recovery turn was taken (`false` where the host has
    /// no kernel locks).
    pub fn take_recovery_turn(&mut self) -> Answer<bool> {
        let guest = self.instance.proclease_lease_recovery_turn();
        match guest.call_take(&mut self.store).expect("the portable store does not trap") {
            Ok(turn) => Ok(turn.held),
            Err(failure) => Err(convert::failure_from_wit(failure)),
        }
    }

    /// `recovery-turn.end`.
    pub fn end_recovery_turn(&mut self) {
        let guest = self.instance.proclease_lease_recovery_turn();
        guest.call_end(&mut self.store).expect("the portable store does not trap");
    }
}

/// The component's `state-store` exports as the core's store effect: the store the component
/// (`proclease.wasm`) would be given, so the native store's contract tests run on it as they are.
impl Store for PortableStore {
    /// `read-if-present`.
    fn read_if_present(&mut self, path: &str, max_bytes: u32) -> Result<Option<String>, Failure> {
        self.call(|g, s| g.call_read_if_present(s, path, max_bytes), |file| file.text)
    }

    /// `create-if-absent`.
    fn create_if_absent(&mut self, path: &str, content: &str) -> Result<bool, Failure> {
        self.call(|g, s| g.call_create_if_absent(s, path, content), |created| created)
    }

    /// `replace-if-unchanged`.
    fn replace_if_unchanged(&mut self, path: &str, expected: &str, content: &str) -> Result<bool, Failure> {
        self.call(|g, s| g.call_replace_if_unchanged(s, path, expected, content), |replaced| replaced)
    }

    /// `replace-if-unchanged-lazily`.
    fn replace_if_unchanged_lazily(&mut self, path: &str, expected: &str, content: &str) -> Result<bool, Failure> {
        self.call(|g, s| g.call_replace_if_unchanged_lazily(s, path, expected, content), |replaced| replaced)
    }

    /// `remove-if-unchanged`.
    fn remove_if_unchanged(&mut self, path: &str, expected: &str) -> Result<bool, Failure> {
        self.call(|g, s| g.call_remove_if_unchanged(s, path, expected), |removed| removed)
    }

    /// `ensure-private-directory`.
    fn ensure_private_directory(&mut self, path: &str) -> Result<CollectionIdentity, Failure> {
        self.call(|g, s| g.call_ensure_private_directory(s, path), convert::collection_identity_from_wit)
    }

    /// `snapshot`.
    fn snapshot(&mut self, path: &str, recover_orphans: bool) -> Result<Option<CollectionSnapshot>, Failure> {
        self.call(|g, s| g.call_snapshot(s, path, recover_orphans), |listing| listing.snapshot.map(convert::snapshot_from_wit))
    }

    /// `read-batch`.
    fn read_batch(
        &mut self,
        path: &str,
        names: &[String],
        max_bytes_per_file: u32,
        max_total_bytes: u32,
        expected: &CollectionIdentity,
    ) -> Result<Vec<(String, BatchStatus)>, Failure> {
        let expected = convert::collection_identity_to_wit(expected.clone());
        self.call(|g, s| g.call_read_batch(s, path, names, max_bytes_per_file, max_total_bytes, &expected), convert::batch_from_wit)
    }

    fn lock_leasing(&mut self) -> Result<(), Failure> {
        self.lock_leasing_taken().map(|_| ())
    }

    fn unlock_leasing(&mut self) {
        PortableStore::unlock_leasing(self);
    }
}

/// The component's `workspace` exports as the core's workspace effect.
impl Workspace for PortableStore {
    fn inspect(&mut self, path: &str) -> Result<Option<DirectoryFacts>, Failure> {
        let guest = self.instance.proclease_lease_workspace();
        let lookup = guest.call_inspect(&mut self.store, path).expect("the portable store does not trap");
        lookup.map(|l| l.facts.map(convert::directory_facts_from_wit)).map_err(convert::failure_from_wit)
    }

    fn create_private_directory(&mut self, path: &str) -> Result<Vec<String>, Failure> {
        let guest = self.instance.proclease_lease_workspace();
        guest.call_create_private_directory(&mut self.store, path).expect("the portable store does not trap").map_err(convert::failure_from_wit)
    }

    fn remove_empty_directory(&mut self, path: &str, expected: Option<&DirectoryIdentity>) -> Result<bool, Failure> {
        let guest = self.instance.proclease_lease_workspace();
        let expected = expected.cloned().map(convert::directory_identity_to_wit);
        guest.call_remove_empty_directory(&mut self.store, path, expected.as_ref()).expect("the portable store does not trap").map_err(convert::failure_from_wit)
    }

    fn remove_tree(&mut self, path: &str, expected: &DirectoryIdentity) -> Result<bool, Failure> {
        let guest = self.instance.proclease_lease_workspace();
        let expected = convert::directory_identity_to_wit(expected.clone());
        guest.call_remove_tree(&mut self.store, path, &expected).expect("the portable store does not trap").map_err(convert::failure_from_wit)
    }
}
