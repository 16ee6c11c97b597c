//! The seam of `proclease-protocols` ([`Fs`], [`Kernel`]) over the system-call contract
//! (`wit/sys.wit`): each method is one call of the host's, and an errno crosses as its Linux
//! number. The waits for kernel locks are the protocol's: one non-blocking attempt per call
//! (`try-lock`), retried with pauses within the host's bound (`sys-kernel.lock-wait-ns`).

use alloc::boxed::Box;
use alloc::format;
use alloc::string::{String, ToString as _};
use alloc::vec::Vec;
use core::time::Duration;

use proclease_core::liveness::{self, OwnerStatus};
use proclease_core::records::Owner;
use proclease_protocols::seam::{Errno, FileStat, Fs, IoError, Kernel, Locked, Name};
use proclease_protocols::waits::{self, Behind, Holder, LOCK_HINT, LockError, LockTimeout};

use crate::bindings::proclease::lease::sys_fs::{self, Directory, File, Lock, LockAttempt, NamesError};
use crate::bindings::proclease::lease::{process_identity, sys_kernel};
use crate::convert;

/// How long a wait stays silent before it tells the user what it is behind (the native host's
/// `TELL_AFTER`).
pub const TELL_AFTER: Duration = Duration::from_secs(1);

fn errno(code: u16) -> Errno {
    Errno::from_raw(i32::from(code))
}

fn stat(s: sys_fs::FileStat) -> FileStat {
    FileStat { dev: s.dev, ino: s.ino, size: s.size, mtime: s.mtime, ctime: s.ctime, mode: s.mode, uid: s.uid, birth: s.birth }
}

/// How a wait for a kernel lock ended.
pub enum Wait {
    /// Taken (`None`: the host has no kernel locks).
    Taken(Option<Lock>),
    /// Another holder kept it past the bound: who, and for how long.
    TimedOut(LockTimeout),
}

/// The file of a kernel lock a wait is for, where its holder is looked up.
pub enum LockFile<'a> {
    /// The file `name` in a directory.
    Named(&'a Directory, &'a [u8]),
    /// The directory itself.
    Directory(&'a Directory),
}

/// A kernel lock a wait is for: how the user knows it (`.proclease/locks/NAME`), its file, and
/// what its holder itself waits for (the store's mutation claims).
pub struct Waited<'a> {
    /// The lock as messages name it.
    pub label: &'a str,
    /// Its file.
    pub file: LockFile<'a>,
    /// What a holder (by pid) itself waits for.
    pub behind: &'a dyn Fn(Option<i32>) -> Option<Behind>,
}

impl Waited<'_> {
    /// The process `/proc/locks` shows holding the lock, as the host can read it.
    fn holder(&self) -> Option<Holder> {
        let found = match self.file {
            LockFile::Named(dir, name) => dir.lstat(name).ok()?.stat?,
            LockFile::Directory(dir) => dir.stat().ok()?,
        };
        let text = sys_kernel::proc_locks()?;
        let text = core::str::from_utf8(&text).ok()?;
        let own = i32::try_from(sys_kernel::pid()).ok()?;
        let device = waits::major_minor(found.dev);
        let taker = waits::flock_holder(text, device, found.ino, own)?;
        let pid = match u32::try_from(taker).ok().and_then(sys_kernel::proc_stat) {
            Some(_) => taker,
            // The taker exited; the lock lives on in a descriptor another process keeps (a
            // Node host's `flock(1)` child took it): that process holds it.
            None => {
                let pids = sys_kernel::proc_pids().into_iter().filter_map(|pid| i32::try_from(pid).ok());
                let fdinfos = |pid: i32| u32::try_from(pid).ok().and_then(sys_kernel::proc_fdinfos);
                waits::descriptor_holder(pids, fdinfos, device, found.ino, own).unwrap_or(taker)
            }
        };
        Some(SysKernel.holder(pid))
    }
}

/// Waits for a kernel lock: `attempt` until it is taken or unsupported, pausing between tries
/// (1 ms, doubling to 20 ms), at most the host's bound (`sys-kernel.lock-wait-ns`) by its clock
/// or by the pauses asked for, whichever says so first (a host clock that stands still or steps
/// back cannot make the wait endless), or as soon as the host answers that none is left (it asks
/// before each retry: a host cuts the waits short once a stopping signal came). After
/// [`TELL_AFTER`] it tells the user who holds the lock (`sys-kernel.warn`); at the bound, the
/// timeout names who held it and how long this wait lasted.
pub fn wait_for(waited: &Waited<'_>, attempt: impl Fn() -> Result<LockAttempt, u16>) -> Result<Wait, Errno> {
    let bound = Duration::from_nanos(sys_kernel::lock_wait_ns());
    let start = sys_kernel::monotonic_ns();
    let mut pause = Duration::from_millis(1);
    let mut paused = Duration::ZERO;
    let mut told = false;
    loop {
        match attempt().map_err(errno)? {
            LockAttempt::Taken(lock) => return Ok(Wait::Taken(Some(lock))),
            LockAttempt::Unsupported => return Ok(Wait::Taken(None)),
            LockAttempt::Held => {}
        }
        let spent = Duration::from_nanos(sys_kernel::monotonic_ns().saturating_sub(start)).max(paused);
        if spent >= bound || sys_kernel::lock_wait_ns() == 0 {
            let holder = waited.holder();
            let behind = (waited.behind)(holder.as_ref().map(|h| h.pid)).map(Box::new);
            let waited_ms = u64::try_from(spent.as_millis()).unwrap_or(u64::MAX);
            return Ok(Wait::TimedOut(LockTimeout { lock: waited.label.into(), holder, behind, waited_ms, hint: LOCK_HINT, during: None }));
        }
        if !told && spent >= TELL_AFTER {
            told = true;
            let holder = waited.holder();
            let behind = (waited.behind)(holder.as_ref().map(|h| h.pid)).map(|words| format!(", which itself waits for {words}")).unwrap_or_default();
            let left = bound.saturating_sub(spent).as_secs_f64();
            sys_kernel::warn(&format!("waiting for {} holding {}{behind} (for at most {left:.1} s more)", waits::holder_words(&holder), waited.label));
        }
        sys_kernel::pause(u64::try_from(pause.as_nanos()).unwrap_or(u64::MAX));
        paused += pause;
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}

/// A call's `outcome`: `none` when it succeeded, else its errno.
fn done(outcome: Option<u16>) -> Result<(), Errno> {
    outcome.map_or(Ok(()), |code| Err(errno(code)))
}

/// The file system of the host, through `sys-fs`.
pub struct SysFs;

impl Fs for SysFs {
    type Dir = Directory;
    type File = File;
    /// `None`: the host cannot take kernel locks (`unsupported`).
    type Lock = Option<Lock>;

    fn euid(&self) -> u32 {
        sys_fs::euid()
    }

    fn duplicate(&self, dir: &Directory) -> Result<Directory, Errno> {
        dir.duplicate().map_err(errno)
    }

    fn open_dir(&self, dir: &Directory, name: &(impl Name + ?Sized)) -> Result<Directory, Errno> {
        dir.open_dir(name.as_ref()).map_err(errno)
    }

    fn stat_dir(&self, dir: &Directory) -> Result<FileStat, Errno> {
        dir.stat().map(stat).map_err(errno)
    }

    fn lstat(&self, dir: &Directory, name: &(impl Name + ?Sized)) -> Result<Option<FileStat>, Errno> {
        dir.lstat(name.as_ref()).map(|found| found.stat.map(stat)).map_err(errno)
    }

    fn open_file(&self, dir: &Directory, name: &(impl Name + ?Sized)) -> Result<File, Errno> {
        dir.open_file(name.as_ref()).map_err(errno)
    }

    fn stat_file(&self, file: &File) -> Result<FileStat, Errno> {
        file.stat().map(stat).map_err(errno)
    }

    fn read_up_to(&self, file: &File, limit: u64, expected: u64) -> Result<Vec<u8>, Errno> {
        let bytes = file.read_up_to(limit, expected).map_err(errno)?;
        // The host's answer is never trusted past the bound asked for.
        if bytes.len() as u64 > limit {
            return Err(Errno::IO);
        }
        Ok(bytes)
    }

    fn read_names(&self, dir: &Directory, bound: usize, prefix: &[u8]) -> Result<Vec<Vec<u8>>, Option<Errno>> {
        let names = dir.read_names(prefix, u32::try_from(bound).unwrap_or(u32::MAX)).map_err(|e| match e {
            NamesError::TooMany => None,
            NamesError::Failed(code) => Some(errno(code)),
        })?;
        if names.len() > bound || names.iter().any(|n| !n.starts_with(prefix) || n.is_empty() || n.contains(&b'/') || n == b"." || n == b"..") {
            // A host that answers past the contract is not believed.
            return Err(Some(Errno::IO));
        }
        Ok(names)
    }

    fn first_names(&self, dir: &Directory, at_most: usize) -> Result<Vec<Vec<u8>>, Errno> {
        let names = dir.first_names(u32::try_from(at_most).unwrap_or(u32::MAX)).map_err(errno)?;
        if names.len() > at_most || names.iter().any(|n| n.is_empty() || n.contains(&b'/') || n == b"." || n == b"..") {
            return Err(Errno::IO);
        }
        Ok(names)
    }

    fn create_file(&self, dir: &Directory, name: &(impl Name + ?Sized)) -> Result<File, Errno> {
        dir.create_file(name.as_ref()).map_err(errno)
    }

    fn write_all(&self, file: &File, bytes: &[u8]) -> Result<(), Errno> {
        done(file.write_all(bytes))
    }

    fn write_at(&self, file: &File, bytes: &[u8], offset: u64) -> Result<(), Errno> {
        done(file.write_at(bytes, offset))
    }

    fn sync_file(&self, file: &File) -> Result<(), Errno> {
        done(file.sync())
    }

    fn sync_file_data(&self, file: &File) -> Result<(), Errno> {
        done(file.sync_data())
    }

    fn make_dir(&self, dir: &Directory, name: &(impl Name + ?Sized)) -> Result<Directory, Errno> {
        dir.make_dir(name.as_ref()).map_err(errno)
    }

    fn sync_dir(&self, dir: &Directory) -> Result<(), Errno> {
        done(dir.sync())
    }

    fn link(&self, from_dir: &Directory, from: &(impl Name + ?Sized), to_dir: &Directory, to: &(impl Name + ?Sized)) -> Result<(), Errno> {
        done(from_dir.link(from.as_ref(), to_dir, to.as_ref()))
    }

    fn rename(&self, from_dir: &Directory, from: &(impl Name + ?Sized), to_dir: &Directory, to: &(impl Name + ?Sized), replace: bool) -> Result<(), Errno> {
        done(from_dir.rename(from.as_ref(), to_dir, to.as_ref(), replace))
    }

    fn unlink(&self, dir: &Directory, name: &(impl Name + ?Sized)) -> Result<(), Errno> {
        done(dir.unlink(name.as_ref()))
    }

    fn remove_dir(&self, dir: &Directory, name: &(impl Name + ?Sized)) -> Result<(), Errno> {
        done(dir.remove_dir(name.as_ref()))
    }

    fn lock(&self, locks: &Directory, name: &(impl Name + ?Sized), behind: &dyn Fn(Option<i32>) -> Option<Behind>) -> Result<Locked<Option<Lock>>, IoError> {
        let label = format!(".proclease/locks/{}", String::from_utf8_lossy(name.as_ref()));
        let waited = Waited { label: &label, file: LockFile::Named(locks, name.as_ref()), behind };
        match wait_for(&waited, || locks.try_lock(name.as_ref()))? {
            Wait::Taken(lock) => Ok(Locked::Held(lock)),
            Wait::TimedOut(timeout) => {
                sys_kernel::warn(&timeout.to_string());
                Ok(Locked::TimedOut)
            }
        }
    }

    /// `Some(None)` where the host has no kernel locks (`unsupported`): taken, excluding nothing.
    fn try_lock(&self, locks: &Directory, name: &(impl Name + ?Sized)) -> Result<Option<Option<Lock>>, Errno> {
        match locks.try_lock(name.as_ref()).map_err(errno)? {
            LockAttempt::Taken(lock) => Ok(Some(Some(lock))),
            LockAttempt::Unsupported => Ok(Some(None)),
            LockAttempt::Held => Ok(None),
        }
    }

    fn note_in_lock(&self, lock: &Option<Lock>, note: &[u8]) -> Result<(), Errno> {
        lock.as_ref().map_or(Ok(()), |lock| done(lock.note(note)))
    }

    /// `None` is a host without kernel locks (`unsupported`): nothing is excluded.
    fn lock_excludes(&self, lock: &Option<Lock>) -> bool {
        lock.is_some()
    }

    fn lock_note(&self, lock: &Option<Lock>, length: usize) -> Result<Vec<u8>, Errno> {
        let Some(lock) = lock else { return Ok(Vec::new()) };
        let bytes = lock.noted(u32::try_from(length).unwrap_or(u32::MAX)).map_err(errno)?;
        // The host's answer is never trusted past the length asked for.
        if bytes.len() > length {
            return Err(Errno::IO);
        }
        Ok(bytes)
    }

    fn lock_directory(&self, dir: &Directory, label: &str) -> Result<Option<Lock>, LockError> {
        let waited = Waited { label, file: LockFile::Directory(dir), behind: &|_| None };
        match wait_for(&waited, || dir.try_lock_directory()) {
            Ok(Wait::Taken(lock)) => Ok(lock),
            Ok(Wait::TimedOut(timeout)) => Err(LockError::TimedOut(timeout)),
            Err(e) => Err(LockError::Io(e.into())),
        }
    }
}

/// The process facts of the host: `sys-kernel` for time, randomness and `kill(pid, 0)`, and
/// `process-identity` for identities; owners are judged here, by the core's rules
/// ([`liveness::judge`]) over the host's facts.
pub struct SysKernel;

impl Kernel for SysKernel {
    fn monotonic(&self) -> Duration {
        Duration::from_nanos(sys_kernel::monotonic_ns())
    }

    fn random_bytes(&self) -> [u8; 16] {
        let drawn = sys_kernel::random_bytes();
        let mut bytes = [0u8; 16];
        if drawn.len() != bytes.len() {
            // A host that does not give 16 random bytes breaks the contract; names made from
            // fewer would collide.
            core::arch::wasm32::unreachable();
        }
        bytes.copy_from_slice(&drawn);
        bytes
    }

    fn pause(&self, duration: Duration) {
        sys_kernel::pause(u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX));
    }

    fn pid(&self) -> u32 {
        sys_kernel::pid()
    }

    fn self_identity(&self) -> Result<Owner, String> {
        process_identity::self_identity().map(convert::owner_from_wit)
    }

    fn current_boot_id(&self) -> Result<String, String> {
        process_identity::current_boot_id()
    }

    fn owner_status(&self, owner: &Owner) -> Result<OwnerStatus, String> {
        let facts = process_identity::probe(&convert::owner_to_wit(owner.clone())).map(convert::facts_from_wit)?;
        Ok(liveness::judge(owner, &facts).status)
    }

    fn pid_gone(&self, pid: u64) -> bool {
        sys_kernel::pid_gone(pid)
    }

    fn holder(&self, pid: i32) -> Holder {
        let stat = u32::try_from(pid).ok().and_then(sys_kernel::proc_stat);
        waits::holder_from_stat(pid, stat.as_deref().and_then(|s| core::str::from_utf8(s).ok()))
    }
}
