//! The seam of `proclease-protocols` ([`Fs`], [`Kernel`]) over the system-call contract
//! (`wit/sys.wit`): each method is one call of the host's, and an errno crosses as its Linux
//! number. The waits for kernel locks are the protocol's: one non-blocking attempt per call
//! (`try-lock`), retried with pauses within [`LOCK_WAIT`].

use alloc::string::String;
use alloc::vec::Vec;
use core::time::Duration;

use proclease_core::liveness::{self, OwnerStatus};
use proclease_core::records::Owner;
use proclease_protocols::seam::{Errno, FileStat, Fs, IoError, Kernel, Locked, Name};
use proclease_protocols::waits::{Behind, LOCK_HINT, LockError, LockTimeout};

use crate::bindings::proclease::lease::sys_fs::{self, Directory, File, Lock, LockAttempt, NamesError};
use crate::bindings::proclease::lease::{process_identity, sys_kernel};
use crate::convert;

/// How long a wait for a kernel lock lasts before it gives up (the native host's bound).
pub const LOCK_WAIT: Duration = Duration::from_secs(10);

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
    /// Another holder kept it past the bound, after this long (ms).
    TimedOut(u64),
}

/// Waits for a kernel lock: `attempt` until it is taken or unsupported, pausing between tries
/// (1 ms, doubling to 20 ms), at most `bound` by the host's clock or by the pauses asked for,
/// whichever says so first (a host clock that stands still or steps back cannot make the wait
/// endless).
pub fn wait_for(bound: Duration, attempt: impl Fn() -> Result<LockAttempt, u16>) -> Result<Wait, Errno> {
    let start = sys_kernel::monotonic_ns();
    let mut pause = Duration::from_millis(1);
    let mut paused = Duration::ZERO;
    loop {
        match attempt().map_err(errno)? {
            LockAttempt::Taken(lock) => return Ok(Wait::Taken(Some(lock))),
            LockAttempt::Unsupported => return Ok(Wait::Taken(None)),
            LockAttempt::Held => {}
        }
        let waited = Duration::from_nanos(sys_kernel::monotonic_ns().saturating_sub(start)).max(paused);
        if waited >= bound {
            return Ok(Wait::TimedOut(u64::try_from(waited.as_millis()).unwrap_or(u64::MAX)));
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

    fn lock(&self, locks: &Directory, name: &(impl Name + ?Sized), _behind: &dyn Fn(Option<i32>) -> Option<Behind>) -> Result<Locked<Option<Lock>>, IoError> {
        match wait_for(LOCK_WAIT, || locks.try_lock(name.as_ref()))? {
            Wait::Taken(lock) => Ok(Locked::Held(lock)),
            Wait::TimedOut(_) => Ok(Locked::TimedOut),
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
        match wait_for(LOCK_WAIT, || dir.try_lock_directory()) {
            Ok(Wait::Taken(lock)) => Ok(lock),
            Ok(Wait::TimedOut(waited_ms)) => Err(LockError::TimedOut(timeout(label, waited_ms))),
            Err(e) => Err(LockError::Io(e.into())),
        }
    }
}

/// A wait for the lock `label` that reached its bound after `waited_ms`; the contract names no
/// holder (it has no view of `/proc/locks`).
pub fn timeout(label: &str, waited_ms: u64) -> LockTimeout {
    LockTimeout { lock: label.into(), holder: None, behind: None, waited_ms, hint: LOCK_HINT, during: None }
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
}
