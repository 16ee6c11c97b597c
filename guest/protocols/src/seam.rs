//! The system-call-thin seam the protocols that keep data safe are written against (issue #41):
//! [`Fs`], the descriptor-relative file operations, and [`Kernel`], the process facts they need.
//!
//! The protocols themselves — the state store's compare-and-swap, the reference's mutation
//! claims and collection recovery (`state_store::protocol`), the workspace's identity-bound
//! removal (`workspace::protocol`) — are written once, over these traits. The native host runs
//! them over rustix (`proclease`'s `NativeFs`); the crash-state suite runs the same code over a simulated disk
//! that can crash or fail at any call (`tests/src/sim_disk.rs`). An implementation words no
//! message: every error is an errno ([`Errno`]), and the protocol words what the user reads.
//!
//! Names are bytes (any `AsRef<[u8]>`: a `&str` passes as is): a user's tree may hold names that
//! are not UTF-8, and its removal must still name them.
//!
//! Each method is one system call, or one short fixed sequence of them that nothing else
//! interleaves with in this process (`make_dir`: `mkdirat`, `openat`, `fchmod`). A mutating call
//! is what a crash can fall between; reads change nothing a crash could tear.

use core::time::Duration;

use proclease_core::liveness::OwnerStatus;
use proclease_core::records::Owner;

pub use crate::os_error::{Errno, IoError};
use crate::prelude::*;

/// What `stat` says of a file or directory: the fields the protocol judges safety and change by
/// (device, inode, size in bytes, modification and change times as (s, ns), mode with its
/// `S_IFMT` kind bits, owner uid).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStat {
    /// `st_dev`.
    pub dev: u64,
    /// `st_ino`.
    pub ino: u64,
    /// `st_size`, bytes.
    pub size: i64,
    /// `st_mtime`, (s, ns).
    pub mtime: (i64, i64),
    /// `st_ctime`, (s, ns).
    pub ctime: (i64, i64),
    /// `st_mode`: kind bits and permission bits.
    pub mode: u32,
    /// `st_uid`.
    pub uid: u32,
    /// `stx_btime`, (s, ns), when the file system reports a birth time (from [`Fs::lstat`] and
    /// [`Fs::stat_dir`]; `None` from [`Fs::stat_file`]).
    pub birth: Option<(i64, i64)>,
}

/// `S_IFMT` bits of a mode.
pub const S_IFMT: u32 = 0o170000;
/// A regular file's kind bits.
pub const S_IFREG: u32 = 0o100000;
/// A directory's kind bits.
pub const S_IFDIR: u32 = 0o040000;
/// A symbolic link's kind bits.
pub const S_IFLNK: u32 = 0o120000;

impl FileStat {
    /// The kind bits (`S_IFMT`) of the mode.
    pub fn kind(&self) -> u32 {
        self.mode & S_IFMT
    }

    /// Whether both name the same inode (device and inode equal).
    pub fn same_inode(&self, other: &FileStat) -> bool {
        self.dev == other.dev && self.ino == other.ino
    }

    /// The directory identity of §6A.4: device, inode and birth time in ns (0 when the file
    /// system has none), as decimal strings.
    pub fn directory_identity(&self) -> proclease_core::records::DirectoryIdentity {
        let birth = self.birth.map_or(0, |(s, ns)| i128::from(s) * 1_000_000_000 + i128::from(ns));
        proclease_core::records::DirectoryIdentity { device: self.dev.to_string(), inode: self.ino.to_string(), birthtime_ns: birth.to_string() }
    }
}

/// A name passed through the seam: bytes, of which a `&str` is one kind.
pub trait Name: AsRef<[u8]> {}
impl<T: AsRef<[u8]> + ?Sized> Name for T {}

/// Outcome of taking a collection's kernel lock.
pub enum Locked<L> {
    /// Held until the guard is dropped.
    Held(L),
    /// Another process held it past the bound.
    TimedOut,
}

/// Descriptor-relative file operations. Every `name` is one already-validated entry name (no
/// `/`), resolved in the directory handle given, and never followed if it is a symbolic link.
pub trait Fs: Send + Sync {
    /// An open directory.
    type Dir: Send + Sync;
    /// An open regular file.
    type File;
    /// A held collection lock (released when dropped).
    type Lock;

    /// The effective uid of this process: "owned" means owned by it.
    fn euid(&self) -> u32;
    /// A second handle on the same directory (`dup`).
    fn duplicate(&self, dir: &Self::Dir) -> Result<Self::Dir, Errno>;
    /// Opens directory `name` (`O_DIRECTORY|O_NOFOLLOW`): `LOOP` for a symbolic link, `NOTDIR`
    /// for anything else that is not a directory, `NOENT` when absent.
    fn open_dir(&self, dir: &Self::Dir, name: &(impl Name + ?Sized)) -> Result<Self::Dir, Errno>;
    /// `fstat` of an open directory.
    fn stat_dir(&self, dir: &Self::Dir) -> Result<FileStat, Errno>;
    /// `lstat` of `name`; `None` when absent.
    fn lstat(&self, dir: &Self::Dir, name: &(impl Name + ?Sized)) -> Result<Option<FileStat>, Errno>;
    /// Opens `name` for reading (`O_NOFOLLOW|O_NONBLOCK`): `LOOP` for a symbolic link.
    fn open_file(&self, dir: &Self::Dir, name: &(impl Name + ?Sized)) -> Result<Self::File, Errno>;
    /// `fstat` of an open file.
    fn stat_file(&self, file: &Self::File) -> Result<FileStat, Errno>;
    /// Reads from the start until end of file or `limit` bytes, whichever comes first;
    /// `expected` is the size `stat` gave (bytes), a hint for the buffer.
    fn read_up_to(&self, file: &Self::File, limit: u64, expected: u64) -> Result<Vec<u8>, Errno>;
    /// The names in `dir` (never `.` or `..`) that start with `prefix` (every name for an empty
    /// one), in no particular order; `Err(None)` when more than `bound` do.
    fn read_names(&self, dir: &Self::Dir, bound: usize, prefix: &[u8]) -> Result<Vec<Vec<u8>>, Option<Errno>>;
    /// At most `at_most` names in `dir` (never `.` or `..`), from a fresh read of it: a caller
    /// that removes what it read and asks again works through a directory of any size.
    fn first_names(&self, dir: &Self::Dir, at_most: usize) -> Result<Vec<Vec<u8>>, Errno>;

    /// Creates `name` exclusively (`O_CREAT|O_EXCL|O_NOFOLLOW`, mode 0600), for writing.
    fn create_file(&self, dir: &Self::Dir, name: &(impl Name + ?Sized)) -> Result<Self::File, Errno>;
    /// Writes all of `bytes` at the end of a file this process created.
    fn write_all(&self, file: &Self::File, bytes: &[u8]) -> Result<(), Errno>;
    /// Writes all of `bytes` at byte `offset` of a file this process created (`pwrite`): an
    /// overwrite in place within the file's size needs no new block or directory entry.
    fn write_at(&self, file: &Self::File, bytes: &[u8], offset: u64) -> Result<(), Errno>;
    /// `fsync` of a file.
    fn sync_file(&self, file: &Self::File) -> Result<(), Errno>;
    /// `fdatasync` of a file: its data (and the size, if it changed) become durable.
    fn sync_file_data(&self, file: &Self::File) -> Result<(), Errno>;
    /// Creates directory `name` with mode 0700 and opens it (`EXIST` when the name exists).
    fn make_dir(&self, dir: &Self::Dir, name: &(impl Name + ?Sized)) -> Result<Self::Dir, Errno>;
    /// `fsync` of a directory: the entries created, renamed or removed in it become durable.
    fn sync_dir(&self, dir: &Self::Dir) -> Result<(), Errno>;
    /// [`sync_dir`](Self::sync_dir) of a directory for what claims and recovery changed there
    /// (a test's injected fsync failures aim at the record writes, not at these).
    fn sync_dir_for_claims(&self, dir: &Self::Dir) -> Result<(), Errno> {
        self.sync_dir(dir)
    }
    /// `linkat`: a second name for `from` at `to`, never over an existing name (`EXIST`).
    fn link(&self, from_dir: &Self::Dir, from: &(impl Name + ?Sized), to_dir: &Self::Dir, to: &(impl Name + ?Sized)) -> Result<(), Errno>;
    /// `renameat`; with `replace` false, never over an existing name (`RENAME_NOREPLACE`:
    /// `EXIST`).
    fn rename(&self, from_dir: &Self::Dir, from: &(impl Name + ?Sized), to_dir: &Self::Dir, to: &(impl Name + ?Sized), replace: bool) -> Result<(), Errno>;
    /// `unlinkat` of anything but a directory (`ISDIR` for a directory).
    fn unlink(&self, dir: &Self::Dir, name: &(impl Name + ?Sized)) -> Result<(), Errno>;
    /// `unlinkat(AT_REMOVEDIR)` of an empty directory (`NOTEMPTY` when it is not, `NOTDIR` for
    /// anything else).
    fn remove_dir(&self, dir: &Self::Dir, name: &(impl Name + ?Sized)) -> Result<(), Errno>;

    /// Takes the kernel lock `name` in the lock directory `locks` (creating its file), waiting
    /// within the caller's bound; `behind` names what a lock's holder itself waits for, for the
    /// message of a long wait.
    fn lock(&self, locks: &Self::Dir, name: &(impl Name + ?Sized), behind: &dyn Fn(Option<i32>) -> Option<crate::waits::Behind>) -> Result<Locked<Self::Lock>, IoError>;
    /// One attempt, without waiting, at the kernel lock `name` in the lock directory `locks`
    /// (creating its file): `None` while another open file description holds it.
    fn try_lock(&self, locks: &Self::Dir, name: &(impl Name + ?Sized)) -> Result<Option<Self::Lock>, Errno>;
    /// Takes the kernel lock of the directory `dir` itself (a `flock` on it, through a handle of
    /// its own), waiting within the caller's bound; `label` names it in a long wait's message.
    fn lock_directory(&self, dir: &Self::Dir, label: &str) -> Result<Self::Lock, crate::waits::LockError>;
    /// Records `note` at the start of the file of a held collection lock (`pwrite` at 0, no
    /// fsync), for the lock's next holder: the store writes there the id of the mutation claim it
    /// is about to publish, so that a claim its writer could not release (a WebAssembly instance
    /// trapped in the middle of a write) is known abandoned to whoever holds the lock next.
    /// A host without kernel locks records nothing.
    fn note_in_lock(&self, lock: &Self::Lock, note: &[u8]) -> Result<(), Errno>;
    /// Whether a held collection lock excludes every other holder, this process's other
    /// instances included (a `flock` on an open file description of its own). A host without
    /// kernel locks grants a lock that excludes nothing: the reference's mutation claims alone
    /// then serialise writers, and a claim of this very process may be another instance's live
    /// one (`arbitration::live_claims`).
    fn lock_excludes(&self, lock: &Self::Lock) -> bool {
        let _ = lock;
        true
    }
    /// The first `length` bytes of a held collection lock's file: what its last holder recorded
    /// with [`note_in_lock`](Self::note_in_lock) (fewer bytes, or none, when nothing was).
    fn lock_note(&self, lock: &Self::Lock, length: usize) -> Result<Vec<u8>, Errno>;
}

/// The process facts the protocols need, and the time, randomness and pauses they use (a
/// WebAssembly build of the protocols has no clock or entropy of its own).
pub trait Kernel: Send + Sync {
    /// A monotonic clock: the time since a fixed instant of this host (a simulation's may
    /// advance only when it [`pause`](Self::pause)s).
    fn monotonic(&self) -> Duration;
    /// 16 bytes from a cryptographically secure source (the random part of a claim's or a
    /// temporary's UUID: another process must not guess it).
    fn random_bytes(&self) -> [u8; 16];
    /// Waits `duration` before a retry (a simulation may return at once, advancing its clock).
    fn pause(&self, duration: Duration);
    /// This process's pid (no `/proc` read).
    fn pid(&self) -> u32;
    /// This process's identity (pid, boot id, process start id).
    fn self_identity(&self) -> Result<Owner, String>;
    /// The current boot id.
    fn current_boot_id(&self) -> Result<String, String>;
    /// Whether `owner` is the live process on its pid, provably gone, or cannot be judged.
    fn owner_status(&self, owner: &Owner) -> Result<OwnerStatus, String>;
    /// Whether `pid` is definitely gone (`kill(pid, 0)` → `ESRCH`); never for a pid that cannot
    /// be asked.
    fn pid_gone(&self, pid: u64) -> bool;
    /// A fresh version-4 UUID from [`random_bytes`](Self::random_bytes), as text.
    fn new_uuid(&self) -> String {
        uuid::Builder::from_random_bytes(self.random_bytes()).into_uuid().to_string()
    }
    /// How long a wait whose own bound is `own` may last: `own`, or less when the caller's
    /// operation has less left (the native host keeps one bound per operation), or nothing when
    /// the host ends the wait early (the native host, on a Ctrl-C before a run's command
    /// started). Asked again while a wait goes on.
    fn wait_bound(&self, own: Duration) -> Duration {
        own
    }
    /// A wait for `lock` succeeded: a timeout noted for it before explains nothing any more.
    fn note_taken(&self, lock: &str) {
        let _ = lock;
    }
    /// A wait reached its bound, for the caller's operation to name its holder in its error.
    fn note_timeout(&self, timeout: &crate::waits::LockTimeout) {
        let _ = timeout;
    }
    /// `pid` as a lock's holder, with its command and scheduler state where this host can
    /// read them (`?` and `state unknown` otherwise).
    fn holder(&self, pid: i32) -> crate::waits::Holder {
        crate::waits::Holder { pid, command: "?".into(), state: "state unknown" }
    }
}
