//! The seam's native implementation: [`NativeFs`] over rustix descriptors ([`crate::fsops`]),
//! and [`Kernel`] over `/proc` ([`ProcessIdentity`]) and `kill(pid, 0)`.

use std::io::{Read as _, Write as _};
use std::os::fd::{AsFd, OwnedFd};

use proclease_core::liveness::OwnerStatus;
use proclease_core::records::Owner;
use rustix::fs::{AtFlags, Mode, OFlags, RenameFlags};

use super::lock;
use super::seam::{Errno, FileStat, Fs, Kernel, Locked};
use crate::fsops;
use crate::process_identity::ProcessIdentity;

/// The store's file operations on this machine's file systems.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct NativeFs;

impl FileStat {
    /// The fields of a native `stat`.
    pub(crate) fn of(stat: &rustix::fs::Stat) -> FileStat {
        FileStat {
            dev: stat.st_dev,
            ino: stat.st_ino,
            size: stat.st_size,
            mtime: (stat.st_mtime, stat.st_mtime_nsec as i64),
            ctime: (stat.st_ctime, stat.st_ctime_nsec as i64),
            mode: stat.st_mode,
            uid: stat.st_uid,
        }
    }
}

/// An `std::io::Error`'s errno (`EIO` when it carries none).
fn errno_of(error: &std::io::Error) -> Errno {
    error.raw_os_error().map(Errno::from_raw_os_error).unwrap_or(Errno::IO)
}

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

    fn open_dir(&self, dir: &OwnedFd, name: &str) -> Result<OwnedFd, Errno> {
        fsops::open_dir(dir, name)
    }

    fn stat_dir(&self, dir: &OwnedFd) -> Result<FileStat, Errno> {
        rustix::fs::fstat(dir).map(|s| FileStat::of(&s))
    }

    fn lstat(&self, dir: &OwnedFd, name: &str) -> Result<Option<FileStat>, Errno> {
        fsops::lstat(dir, name).map(|s| s.map(|s| FileStat::of(&s)))
    }

    fn open_file(&self, dir: &OwnedFd, name: &str) -> Result<std::fs::File, Errno> {
        fsops::open_read(dir, name).map(std::fs::File::from)
    }

    fn stat_file(&self, file: &std::fs::File) -> Result<FileStat, Errno> {
        rustix::fs::fstat(file).map(|s| FileStat::of(&s))
    }

    fn read_up_to(&self, file: &std::fs::File, limit: u64, expected: u64) -> Result<Vec<u8>, Errno> {
        // Room for one byte more than expected: `read_to_end` then sees the end of file without
        // growing the buffer, in two `read`s.
        let mut bytes = Vec::with_capacity(usize::try_from(expected.min(limit).saturating_add(1)).unwrap_or(0));
        let reader = file;
        reader.take(limit).read_to_end(&mut bytes).map_err(|e| errno_of(&e))?;
        Ok(bytes)
    }

    fn read_names(&self, dir: &OwnedFd, bound: usize, keep: &dyn Fn(&[u8]) -> bool) -> Result<Vec<Vec<u8>>, Option<Errno>> {
        fsops::names_where(dir, bound, |name| name != b"." && name != b".." && keep(name)).map_err(|e| e.map(|e| errno_of(&e)))
    }

    fn create_file(&self, dir: &OwnedFd, name: &str) -> Result<std::fs::File, Errno> {
        let fd = rustix::fs::openat(dir, name, OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::from_raw_mode(0o600))?;
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o600))?;
        Ok(std::fs::File::from(fd))
    }

    fn write_all(&self, file: &std::fs::File, bytes: &[u8]) -> Result<(), Errno> {
        let mut writer = file;
        writer.write_all(bytes).map_err(|e| errno_of(&e))
    }

    fn sync_file(&self, file: &std::fs::File) -> Result<(), Errno> {
        file.sync_all().map_err(|e| errno_of(&e))
    }

    fn make_dir(&self, dir: &OwnedFd, name: &str) -> Result<OwnedFd, Errno> {
        rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(0o700))?;
        let opened = rustix::fs::openat(dir, name, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())
            .and_then(|fd| rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o700)).map(|()| fd));
        if opened.is_err() {
            let _ = rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR);
        }
        opened
    }

    fn sync_dir(&self, dir: &OwnedFd) -> Result<(), Errno> {
        fsops::fsync_dir(dir).map_err(|e| errno_of(&e))
    }

    fn sync_dir_for_claims(&self, dir: &OwnedFd) -> Result<(), Errno> {
        fsops::fsync_claim_dir(dir).map_err(|e| errno_of(&e))
    }

    fn link(&self, from_dir: &OwnedFd, from: &str, to_dir: &OwnedFd, to: &str) -> Result<(), Errno> {
        rustix::fs::linkat(from_dir, from, to_dir, to, AtFlags::empty())
    }

    fn rename(&self, from_dir: &OwnedFd, from: &str, to_dir: &OwnedFd, to: &str, replace: bool) -> Result<(), Errno> {
        if replace { rustix::fs::renameat(from_dir, from, to_dir, to) } else { rustix::fs::renameat_with(from_dir, from, to_dir, to, RenameFlags::NOREPLACE) }
    }

    fn unlink(&self, dir: &OwnedFd, name: &str) -> Result<(), Errno> {
        rustix::fs::unlinkat(dir, name, AtFlags::empty())
    }

    fn remove_dir(&self, dir: &OwnedFd, name: &str) -> Result<(), Errno> {
        rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR)
    }

    fn lock(&self, locks: &OwnedFd, name: &str, behind: &dyn Fn(Option<i32>) -> Option<crate::lock_wait::Behind>) -> Result<Locked<lock::CollectionLock>, std::io::Error> {
        lock::lock(locks, name, behind)
    }
}

impl Kernel for ProcessIdentity {
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
        super::mutation_claim::pid_gone(pid)
    }
}
