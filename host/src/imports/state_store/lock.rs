//! The per-collection writer lock: a kernel `flock` on a lock file under
//! `<state home>/.proclease/locks/`, never inside a collection and never unlinked (unlinking a
//! lock file lets two writers lock two different inodes). The kernel drops the lock when its
//! holder dies, so a crash can never leave a collection locked.

use std::fs::File;
use std::os::fd::AsFd;
use std::time::Duration;

use rustix::fs::{Mode, OFlags};

/// How long a writer waits for another live writer of the same collection before giving up
/// with a `contended` error, outside a bounded operation (inside one, the operation's bound
/// governs). Writers hold the lock for one durable write (milliseconds).
pub(crate) const WAIT: Duration = Duration::from_secs(10);

/// A held kernel lock (a collection's, or a directory's); dropping it releases it.
pub struct CollectionLock {
    file: File,
}

impl CollectionLock {
    /// The lock `file` holds (its `flock` taken).
    pub(crate) fn held(file: File) -> CollectionLock {
        CollectionLock { file }
    }

    /// The lock's file, for the note its holder leaves the next one
    /// (`proclease_protocols::seam::Fs::note_in_lock`).
    pub(crate) fn file(&self) -> &File {
        &self.file
    }

    /// The first `length` bytes of the lock's file (fewer when it is shorter).
    pub(crate) fn noted(&self, length: usize) -> rustix::io::Result<Vec<u8>> {
        let mut bytes = vec![0u8; length];
        let mut filled = 0usize;
        while filled < length {
            match rustix::io::pread(&self.file, &mut bytes[filled..], filled as u64) {
                Ok(0) => break,
                Ok(read) => filled += read,
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e),
            }
        }
        bytes.truncate(filled);
        Ok(bytes)
    }
}

impl Drop for CollectionLock {
    /// Unlocks explicitly: closing the descriptor alone leaves the lock held while a child
    /// forked meanwhile by another thread still has a copy of it (until its exec).
    fn drop(&mut self) {
        let _ = self.file.unlock();
    }
}

/// Outcome of trying to lock: held, or another process held it past the bound ([`WAIT`], or
/// the open operation's).
pub(crate) type Locked = crate::seam::Locked<CollectionLock>;

/// Locks `name` (created 0600 if absent; opened read-only on a read-only filesystem) in the
/// lock directory, waiting at most [`WAIT`] — or, inside a bounded operation
/// ([`crate::lock_wait::Operation`]), what is left of the operation's bound. `behind` names
/// what the lock's holder itself waits for ([`crate::lock_wait::lock_behind`]).
pub(crate) fn lock(locks: impl AsFd, name: &str, behind: &dyn Fn(Option<i32>) -> Option<crate::lock_wait::Behind>) -> std::io::Result<Locked> {
    let file = open(locks, name)?;
    // After a second the wait says who holds the lock; at the bound, who held it.
    // Within an operation, its bound (the host's lock timeout) governs instead of `WAIT`.
    match crate::lock_wait::lock_behind(&file, &format!(".proclease/locks/{name}"), crate::lock_wait::operation_bound(WAIT), behind) {
        Ok(()) => Ok(Locked::Held(CollectionLock { file })),
        Err(crate::lock_wait::LockError::TimedOut(timeout)) => {
            // Said once per operation (also with `--lock-timeout 0`, where every wait is 0 ms).
            if crate::lock_wait::Operation::first_timeout() {
                tracing::warn!("{timeout}");
            }
            Ok(Locked::TimedOut)
        }
        Err(crate::lock_wait::LockError::Io(e)) => Err(e.into()),
    }
}

/// One attempt, without waiting, at the lock `name` in the lock directory (opened as [`lock`]
/// opens it): `None` while another open file description holds it.
pub(crate) fn try_lock(locks: impl AsFd, name: &str) -> std::io::Result<Option<CollectionLock>> {
    let file = open(locks, name)?;
    match file.try_lock() {
        Ok(()) => Ok(Some(CollectionLock { file })),
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(e)) => Err(e),
    }
}

/// The lock file `name` in the lock directory: created 0600 if absent; opened read-only on a
/// read-only filesystem.
fn open(locks: impl AsFd, name: &str) -> std::io::Result<File> {
    let fd = match rustix::fs::openat(&locks, name, OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::from_raw_mode(0o600)) {
        // A read-only state home (a read-only mount): an existing lock file still locks (flock
        // needs no write access), so readers such as `doctor` work; a writer fails later, at
        // its first write, with the filesystem's own error. Without a lock file there is
        // nothing to lock and nothing can be written: the error is the filesystem's (EROFS),
        // not the absent file's.
        Err(rustix::io::Errno::ROFS) => match rustix::fs::openat(&locks, name, OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty()) {
            Err(rustix::io::Errno::NOENT) => return Err(rustix::io::Errno::ROFS.into()),
            other => other?,
        },
        other => other?,
    };
    Ok(File::from(fd))
}
