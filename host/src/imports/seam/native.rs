//! The seam's native implementation: [`NativeFs`] over rustix descriptors ([`crate::fsops`]),
//! and [`Kernel`] over `/proc` ([`ProcessIdentity`]) and `kill(pid, 0)`.

use std::io::{Read as _, Write as _};
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::os::fd::{AsFd, AsRawFd as _, BorrowedFd, FromRawFd as _, OwnedFd};

use proclease_core::liveness::OwnerStatus;
use proclease_core::records::Owner;
use rustix::fs::{AtFlags, Mode, OFlags, RenameFlags};

use rustix::fs::StatxFlags;

use rustix::io::Errno as SysErrno;

use super::{Errno, FileStat, Fs, IoError, Kernel, Locked, Name, S_IFLNK};
use crate::fsops;
use crate::process_identity::ProcessIdentity;
use crate::state_store::lock;

/// The seam's file operations on this machine's file systems, through rustix (`openat`,
/// `statx`, `renameat2`, `linkat`, `unlinkat`, `flock`, …).
#[derive(Debug, Clone, Copy, Default)]
pub struct NativeFs;

impl NativeFs {
    /// A borrowed descriptor as the seam's directory handle ([`Fs::Dir`] is an [`OwnedFd`]),
    /// for callers that hold only a borrow (a `cap_std` directory, an `impl AsFd`): the seam's
    /// steps run on it without a `dup`. It is never closed.
    pub(crate) fn borrow(fd: BorrowedFd<'_>) -> BorrowedDir<'_> {
        // SAFETY: the descriptor is open for `'fd` (the borrow). The `OwnedFd` built on it is
        // never dropped (`ManuallyDrop`, and `BorrowedDir` gives it out only by shared
        // reference, through which it cannot be closed or moved out), so it never closes the
        // borrowed descriptor, and it cannot outlive the borrow (`PhantomData`).
        let fd = unsafe { OwnedFd::from_raw_fd(fd.as_raw_fd()) };
        BorrowedDir { fd: ManuallyDrop::new(fd), _borrow: PhantomData }
    }
}

/// A borrowed directory descriptor seen as an [`OwnedFd`] ([`NativeFs::borrow`]).
pub(crate) struct BorrowedDir<'fd> {
    fd: ManuallyDrop<OwnedFd>,
    _borrow: PhantomData<BorrowedFd<'fd>>,
}

impl std::ops::Deref for BorrowedDir<'_> {
    type Target = OwnedFd;

    fn deref(&self) -> &OwnedFd {
        &self.fd
    }
}

/// The fields of a native `stat` (no birth time).
fn stat_of(stat: &rustix::fs::Stat) -> FileStat {
    FileStat {
        dev: stat.st_dev,
        ino: stat.st_ino,
        size: stat.st_size,
        mtime: (stat.st_mtime, stat.st_mtime_nsec as i64),
        ctime: (stat.st_ctime, stat.st_ctime_nsec as i64),
        mode: stat.st_mode,
        uid: stat.st_uid,
        birth: None,
    }
}

/// The fields of a native `statx` (with the birth time when the file system has one).
fn stat_of_statx(stat: &rustix::fs::Statx) -> FileStat {
    let birth = (stat.stx_mask & StatxFlags::BTIME.bits() != 0).then_some((stat.stx_btime.tv_sec, i64::from(stat.stx_btime.tv_nsec)));
    FileStat {
        dev: fsops::device_of(stat),
        ino: stat.stx_ino,
        size: i64::try_from(stat.stx_size).unwrap_or(i64::MAX),
        mtime: (stat.stx_mtime.tv_sec, i64::from(stat.stx_mtime.tv_nsec)),
        ctime: (stat.stx_ctime.tv_sec, i64::from(stat.stx_ctime.tv_nsec)),
        mode: u32::from(stat.stx_mode),
        uid: stat.stx_uid,
        birth,
    }
}

/// An `std::io::Error`'s errno (`EIO` when it carries none).
fn errno_of(error: &std::io::Error) -> Errno {
    error.raw_os_error().map(Errno::from_raw).unwrap_or(Errno::IO)
}

/// A rustix result with the seam's errno (the same Linux number).
fn seam<T>(result: Result<T, SysErrno>) -> Result<T, Errno> {
    result.map_err(Errno::from)
}

/// `statx` of `name` in `dir` (or of `dir` itself with `AT_EMPTY_PATH` and an empty name),
/// never triggering an automount (as `fstatat` does not). Where `statx` is missing (a kernel
/// before 4.11, a seccomp profile that refuses it: `ENOSYS`), `fstatat` answers, without a birth
/// time.
fn statx(dir: &OwnedFd, name: &[u8], flags: AtFlags) -> Result<Option<FileStat>, Errno> {
    let flags = flags | AtFlags::NO_AUTOMOUNT;
    let stat = match rustix::fs::statx(dir, name, flags, StatxFlags::BASIC_STATS | StatxFlags::BTIME) {
        Err(SysErrno::NOSYS) => rustix::fs::statat(dir, name, flags).map(|s| stat_of(&s)),
        other => other.map(|s| stat_of_statx(&s)),
    };
    match stat {
        Ok(stat) => Ok(Some(stat)),
        Err(SysErrno::NOENT) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

const OPEN_DIR: OFlags = OFlags::RDONLY.union(OFlags::DIRECTORY).union(OFlags::NOFOLLOW).union(OFlags::CLOEXEC);

impl Fs for NativeFs {
    type Dir = OwnedFd;
    type File = std::fs::File;
    type Lock = lock::CollectionLock;

    fn euid(&self) -> u32 {
        fsops::euid()
    }

    fn duplicate(&self, dir: &OwnedFd) -> Result<OwnedFd, Errno> {
        dir.as_fd().try_clone_to_owned().map_err(|e| errno_of(&e))
    }

    fn open_dir(&self, dir: &OwnedFd, name: &(impl Name + ?Sized)) -> Result<OwnedFd, Errno> {
        match rustix::fs::openat(dir, name.as_ref(), OPEN_DIR, Mode::empty()) {
            Err(SysErrno::NOTDIR) => match self.lstat(dir, name) {
                Ok(Some(stat)) if stat.kind() == S_IFLNK => Err(Errno::LOOP),
                _ => Err(Errno::NOTDIR),
            },
            other => seam(other),
        }
    }

    fn stat_dir(&self, dir: &OwnedFd) -> Result<FileStat, Errno> {
        statx(dir, b"", AtFlags::EMPTY_PATH)?.ok_or(Errno::NOENT)
    }

    fn lstat(&self, dir: &OwnedFd, name: &(impl Name + ?Sized)) -> Result<Option<FileStat>, Errno> {
        statx(dir, name.as_ref(), AtFlags::SYMLINK_NOFOLLOW)
    }

    fn open_file(&self, dir: &OwnedFd, name: &(impl Name + ?Sized)) -> Result<std::fs::File, Errno> {
        seam(rustix::fs::openat(dir, name.as_ref(), OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC, Mode::empty()).map(std::fs::File::from))
    }

    fn stat_file(&self, file: &std::fs::File) -> Result<FileStat, Errno> {
        seam(rustix::fs::fstat(file).map(|s| stat_of(&s)))
    }

    fn read_up_to(&self, file: &std::fs::File, limit: u64, expected: u64) -> Result<Vec<u8>, Errno> {
        // Room for one byte more than expected: `read_to_end` then sees the end of file without
        // growing the buffer, in two `read`s.
        let mut bytes = Vec::with_capacity(usize::try_from(expected.min(limit).saturating_add(1)).unwrap_or(0));
        let reader = file;
        reader.take(limit).read_to_end(&mut bytes).map_err(|e| errno_of(&e))?;
        Ok(bytes)
    }

    fn read_names(&self, dir: &OwnedFd, bound: usize, prefix: &[u8]) -> Result<Vec<Vec<u8>>, Option<Errno>> {
        fsops::names_where(dir, bound, |name| name != b"." && name != b".." && name.starts_with(prefix)).map_err(|e| e.map(|e| errno_of(&e)))
    }

    fn first_names(&self, dir: &OwnedFd, at_most: usize) -> Result<Vec<Vec<u8>>, Errno> {
        seam(fsops::some_names(dir, at_most))
    }

    fn create_file(&self, dir: &OwnedFd, name: &(impl Name + ?Sized)) -> Result<std::fs::File, Errno> {
        let fd = rustix::fs::openat(dir, name.as_ref(), OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::from_raw_mode(0o600))?;
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o600))?;
        Ok(std::fs::File::from(fd))
    }

    fn write_all(&self, file: &std::fs::File, bytes: &[u8]) -> Result<(), Errno> {
        let mut writer = file;
        writer.write_all(bytes).map_err(|e| errno_of(&e))
    }

    fn write_at(&self, file: &std::fs::File, bytes: &[u8], offset: u64) -> Result<(), Errno> {
        std::os::unix::fs::FileExt::write_all_at(file, bytes, offset).map_err(|e| errno_of(&e))
    }

    fn sync_file(&self, file: &std::fs::File) -> Result<(), Errno> {
        file.sync_all().map_err(|e| errno_of(&e))
    }

    fn sync_file_data(&self, file: &std::fs::File) -> Result<(), Errno> {
        file.sync_data().map_err(|e| errno_of(&e))
    }

    fn make_dir(&self, dir: &OwnedFd, name: &(impl Name + ?Sized)) -> Result<OwnedFd, Errno> {
        rustix::fs::mkdirat(dir, name.as_ref(), Mode::from_raw_mode(0o700))?;
        let opened = rustix::fs::openat(dir, name.as_ref(), OPEN_DIR, Mode::empty()).and_then(|fd| rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o700)).map(|()| fd));
        if opened.is_err() {
            let _ = rustix::fs::unlinkat(dir, name.as_ref(), AtFlags::REMOVEDIR);
        }
        seam(opened)
    }

    fn sync_dir(&self, dir: &OwnedFd) -> Result<(), Errno> {
        fsops::fsync_dir(dir).map_err(|e| errno_of(&e))
    }

    fn sync_dir_for_claims(&self, dir: &OwnedFd) -> Result<(), Errno> {
        fsops::fsync_claim_dir(dir).map_err(|e| errno_of(&e))
    }

    fn link(&self, from_dir: &OwnedFd, from: &(impl Name + ?Sized), to_dir: &OwnedFd, to: &(impl Name + ?Sized)) -> Result<(), Errno> {
        seam(rustix::fs::linkat(from_dir, from.as_ref(), to_dir, to.as_ref(), AtFlags::empty()))
    }

    fn rename(&self, from_dir: &OwnedFd, from: &(impl Name + ?Sized), to_dir: &OwnedFd, to: &(impl Name + ?Sized), replace: bool) -> Result<(), Errno> {
        seam(if replace {
            rustix::fs::renameat(from_dir, from.as_ref(), to_dir, to.as_ref())
        } else {
            rustix::fs::renameat_with(from_dir, from.as_ref(), to_dir, to.as_ref(), RenameFlags::NOREPLACE)
        })
    }

    fn unlink(&self, dir: &OwnedFd, name: &(impl Name + ?Sized)) -> Result<(), Errno> {
        seam(rustix::fs::unlinkat(dir, name.as_ref(), AtFlags::empty()))
    }

    fn remove_dir(&self, dir: &OwnedFd, name: &(impl Name + ?Sized)) -> Result<(), Errno> {
        seam(rustix::fs::unlinkat(dir, name.as_ref(), AtFlags::REMOVEDIR))
    }

    fn lock(
        &self,
        locks: &OwnedFd,
        name: &(impl Name + ?Sized),
        behind: &dyn Fn(Option<i32>) -> Option<proclease_protocols::waits::Behind>,
    ) -> Result<Locked<lock::CollectionLock>, IoError> {
        let name = std::str::from_utf8(name.as_ref()).map_err(|_| Errno::ILSEQ)?;
        Ok(lock::lock(locks, name, behind)?)
    }

    fn try_lock(&self, locks: &OwnedFd, name: &(impl Name + ?Sized)) -> Result<Option<lock::CollectionLock>, Errno> {
        let name = std::str::from_utf8(name.as_ref()).map_err(|_| Errno::ILSEQ)?;
        lock::try_lock(locks, name).map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(5)))
    }

    fn note_in_lock(&self, lock: &lock::CollectionLock, note: &[u8]) -> Result<(), Errno> {
        self.write_at(lock.file(), note, 0)
    }

    fn lock_note(&self, lock: &lock::CollectionLock, length: usize) -> Result<Vec<u8>, Errno> {
        seam(lock.noted(length))
    }

    fn lock_directory(&self, dir: &OwnedFd, label: &str) -> Result<lock::CollectionLock, crate::lock_wait::LockError> {
        let fd = rustix::fs::openat(dir, ".", OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty()).map_err(|e| crate::lock_wait::LockError::Io(e.into()))?;
        let file = std::fs::File::from(fd);
        crate::lock_wait::lock(&file, label, crate::lock_wait::operation_bound(lock::WAIT))?;
        Ok(lock::CollectionLock::held(file))
    }
}

impl Kernel for ProcessIdentity {
    /// Since the first call in this process (`Instant`).
    fn monotonic(&self) -> std::time::Duration {
        static ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        ORIGIN.get_or_init(std::time::Instant::now).elapsed()
    }

    /// From the operating system's generator (`getrandom`, through `uuid`).
    fn random_bytes(&self) -> [u8; 16] {
        uuid::Uuid::new_v4().into_bytes()
    }

    fn pause(&self, duration: std::time::Duration) {
        std::thread::sleep(duration);
    }

    fn pid(&self) -> u32 {
        std::process::id()
    }

    fn self_identity(&self) -> Result<Owner, String> {
        ProcessIdentity::self_identity(self).map_err(|e| e.0)
    }

    fn current_boot_id(&self) -> Result<String, String> {
        ProcessIdentity::current_boot_id(self).map_err(|e| e.0)
    }

    fn owner_status(&self, owner: &Owner) -> Result<OwnerStatus, String> {
        ProcessIdentity::owner_status(self, owner).map_err(|e| e.0)
    }

    fn pid_gone(&self, pid: u64) -> bool {
        pid_gone(pid)
    }

    fn wait_bound(&self, own: std::time::Duration) -> std::time::Duration {
        crate::lock_wait::remaining(own)
    }

    fn note_taken(&self, lock: &str) {
        crate::lock_wait::note_taken(lock);
    }

    fn note_timeout(&self, timeout: &crate::lock_wait::LockTimeout) {
        crate::lock_wait::note(timeout);
    }

    fn holder(&self, pid: i32) -> crate::lock_wait::Holder {
        crate::lock_wait::process(pid)
    }
}

/// Whether `pid` is definitely gone (`kill(pid, 0)` → ESRCH); never for a pid `kill` cannot
/// address.
fn pid_gone(pid: u64) -> bool {
    let Some(pid) = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw) else { return false };
    rustix::process::test_kill_process(pid) == Err(rustix::io::Errno::SRCH)
}
