//! The native system calls with another process's move staged at one instant: [`InterposedFs`]
//! is [`NativeFs`] (the seam the native host runs the store on), except that before each
//! `read` of an open file it runs a hook, which makes real system calls of its own (a writer's
//! rename over the record being read, an in-place rewrite). A real file system cannot be made
//! to schedule another writer between a reader's `open` and its `read`; this can, every time.

use std::sync::Arc;

use proclease::lock_wait::LockError;
use proclease::protocols::waits::Behind;
use proclease::seam::{Errno, FileStat, Fs, IoError, Locked, Name, NativeFs};

/// What runs before each read of an open file.
pub type BeforeRead = Arc<dyn Fn() + Send + Sync>;

/// [`NativeFs`], with [`BeforeRead`] run before every `read_up_to`.
pub struct InterposedFs {
    /// The hook.
    pub before_read: BeforeRead,
}

type Dir = <NativeFs as Fs>::Dir;
type File = <NativeFs as Fs>::File;
type Lock = <NativeFs as Fs>::Lock;

impl Fs for InterposedFs {
    type Dir = Dir;
    type File = File;
    type Lock = Lock;

    fn euid(&self) -> u32 {
        NativeFs.euid()
    }
    fn duplicate(&self, dir: &Dir) -> Result<Dir, Errno> {
        NativeFs.duplicate(dir)
    }
    fn open_dir(&self, dir: &Dir, name: &(impl Name + ?Sized)) -> Result<Dir, Errno> {
        NativeFs.open_dir(dir, name)
    }
    fn stat_dir(&self, dir: &Dir) -> Result<FileStat, Errno> {
        NativeFs.stat_dir(dir)
    }
    fn lstat(&self, dir: &Dir, name: &(impl Name + ?Sized)) -> Result<Option<FileStat>, Errno> {
        NativeFs.lstat(dir, name)
    }
    fn open_file(&self, dir: &Dir, name: &(impl Name + ?Sized)) -> Result<File, Errno> {
        NativeFs.open_file(dir, name)
    }
    fn stat_file(&self, file: &File) -> Result<FileStat, Errno> {
        NativeFs.stat_file(file)
    }
    fn read_up_to(&self, file: &File, limit: u64, expected: u64) -> Result<Vec<u8>, Errno> {
        (self.before_read)();
        NativeFs.read_up_to(file, limit, expected)
    }
    fn read_names(&self, dir: &Dir, bound: usize, prefix: &[u8]) -> Result<Vec<Vec<u8>>, Option<Errno>> {
        NativeFs.read_names(dir, bound, prefix)
    }
    fn first_names(&self, dir: &Dir, at_most: usize) -> Result<Vec<Vec<u8>>, Errno> {
        NativeFs.first_names(dir, at_most)
    }
    fn create_file(&self, dir: &Dir, name: &(impl Name + ?Sized)) -> Result<File, Errno> {
        NativeFs.create_file(dir, name)
    }
    fn write_all(&self, file: &File, bytes: &[u8]) -> Result<(), Errno> {
        NativeFs.write_all(file, bytes)
    }
    fn write_at(&self, file: &File, bytes: &[u8], offset: u64) -> Result<(), Errno> {
        NativeFs.write_at(file, bytes, offset)
    }
    fn sync_file(&self, file: &File) -> Result<(), Errno> {
        NativeFs.sync_file(file)
    }
    fn sync_file_data(&self, file: &File) -> Result<(), Errno> {
        NativeFs.sync_file_data(file)
    }
    fn make_dir(&self, dir: &Dir, name: &(impl Name + ?Sized)) -> Result<Dir, Errno> {
        NativeFs.make_dir(dir, name)
    }
    fn sync_dir(&self, dir: &Dir) -> Result<(), Errno> {
        NativeFs.sync_dir(dir)
    }
    fn sync_dir_for_claims(&self, dir: &Dir) -> Result<(), Errno> {
        NativeFs.sync_dir_for_claims(dir)
    }
    fn link(&self, from_dir: &Dir, from: &(impl Name + ?Sized), to_dir: &Dir, to: &(impl Name + ?Sized)) -> Result<(), Errno> {
        NativeFs.link(from_dir, from, to_dir, to)
    }
    fn rename(&self, from_dir: &Dir, from: &(impl Name + ?Sized), to_dir: &Dir, to: &(impl Name + ?Sized), replace: bool) -> Result<(), Errno> {
        NativeFs.rename(from_dir, from, to_dir, to, replace)
    }
    fn unlink(&self, dir: &Dir, name: &(impl Name + ?Sized)) -> Result<(), Errno> {
        NativeFs.unlink(dir, name)
    }
    fn remove_dir(&self, dir: &Dir, name: &(impl Name + ?Sized)) -> Result<(), Errno> {
        NativeFs.remove_dir(dir, name)
    }
    fn lock(&self, locks: &Dir, name: &(impl Name + ?Sized), behind: &dyn Fn(Option<i32>) -> Option<Behind>) -> Result<Locked<Lock>, IoError> {
        NativeFs.lock(locks, name, behind)
    }
    fn try_lock(&self, locks: &Dir, name: &(impl Name + ?Sized)) -> Result<Option<Lock>, Errno> {
        NativeFs.try_lock(locks, name)
    }
    fn lock_directory(&self, dir: &Dir, label: &str) -> Result<Lock, LockError> {
        NativeFs.lock_directory(dir, label)
    }
    fn note_in_lock(&self, lock: &Lock, note: &[u8]) -> Result<(), Errno> {
        NativeFs.note_in_lock(lock, note)
    }
    fn lock_excludes(&self, lock: &Lock) -> bool {
        NativeFs.lock_excludes(lock)
    }
    fn lock_note(&self, lock: &Lock, length: usize) -> Result<Vec<u8>, Errno> {
        NativeFs.lock_note(lock, length)
    }
}
