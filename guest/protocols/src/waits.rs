//! What a wait for another process's lock or claim reports (the host's `lock_wait` does the
//! waiting and keeps one bound per operation): who holds it ([`Holder`]), what that holder
//! itself waits for ([`Behind`]), and a wait that reached its bound ([`LockTimeout`]).

use crate::prelude::*;
use alloc::sync::Arc;

/// A lock's holder, as `/proc` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// Its pid (in this process's PID namespace).
    pub pid: i32,
    /// `/proc/<pid>/comm`.
    pub command: String,
    /// Its scheduler state (`stopped`, `running`, `sleeping`, …).
    pub state: &'static str,
}

impl core::fmt::Display for Holder {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "pid {} ({}, {})", self.pid, self.command, self.state)
    }
}

/// What a lock's holder itself waits for: another process holding another lock. Displayed
/// as `pid P (COMMAND, STATE) holding LOCK`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Behind {
    /// The process the holder waits for.
    pub holder: Holder,
    /// What it holds (`the mutation claim of PATH`).
    pub lock: String,
}

impl core::fmt::Display for Behind {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{} holding {}", self.holder, self.lock)
    }
}

/// What to do about a kernel lock's holder, at the end of a wait for it.
pub const LOCK_HINT: &str = "continue a stopped holder (`kill -CONT PID`, or `fg` in its terminal) or end it; a holder that dies releases the lock";

/// A wait that reached its bound.
///
/// Displayed as `[DURING: ]waited N ms for LOCK, held by pid P (COMMAND, STATE)[, which itself
/// waits for BEHIND]: HINT`.
#[derive(Debug, Clone)]
pub struct LockTimeout {
    /// The lock, as the user knows it (a path in the state home, or `the mutation claim of
    /// PATH`).
    pub lock: String,
    /// Who held it at the end, when `/proc/locks` (or the claim's record) says.
    pub holder: Option<Holder>,
    /// What that holder itself waits for, when it is seen: a writer queued behind another
    /// names the process that holds them both up, not only the innocent writer ahead of it
    /// (issue #40).
    pub behind: Option<Box<Behind>>,
    /// How long it waited, ms.
    pub waited_ms: u64,
    /// What the user can do.
    pub hint: &'static str,
    /// The error the operation ended in because of the wait (the component's words, e.g.
    /// `export admission could not be acquired safely`), when it was not the wait itself.
    pub during: Option<Box<During>>,
}

/// The error an operation ended in because of a wait ([`LockTimeout::during`]): its own
/// message is part of the timeout's; what it wrapped is the timeout's
/// [`source`](core::error::Error::source), so no cause is lost.
#[derive(Debug, Clone)]
pub struct During {
    /// Its own message, without its cause (printed before the wait's).
    pub message: String,
    /// The error itself (the host's, which it can downcast).
    pub error: Arc<dyn core::error::Error + Send + Sync>,
}

/// How a wait names a holder that may not be known (a timeout, and the host's message after a
/// second of waiting).
pub fn holder_words(holder: &Option<Holder>) -> String {
    match holder {
        Some(holder) => holder.to_string(),
        None => "another process (not shown in /proc/locks)".into(),
    }
}

impl core::fmt::Display for LockTimeout {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        if let Some(during) = &self.during {
            write!(f, "{}: ", during.message)?;
        }
        write!(f, "waited {} ms for {}, held by {}", self.waited_ms, self.lock, holder_words(&self.holder))?;
        if let Some(behind) = &self.behind {
            write!(f, ", which itself waits for {behind}")?;
        }
        write!(f, ": {}", self.hint)
    }
}

impl core::error::Error for LockTimeout {
    /// What the error the operation ended in wrapped (its own message is in this one's).
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        self.during.as_ref().and_then(|during| during.error.source())
    }
}

/// The pid `/proc/locks` (its text, `proc_locks`) shows holding a lock on the file of device
/// `(major, minor)` and inode `ino`: not a waiter (`N: -> …`), not `own` (this process's pid).
/// Each line reads `N: FLOCK ADVISORY WRITE PID MAJ:MIN:INODE START END`, the device numbers in
/// hex (proc(5)).
pub fn flock_holder(proc_locks: &str, device: (u32, u32), ino: u64, own: i32) -> Option<i32> {
    proc_locks.lines().find_map(|line| held_on(line, device, ino).filter(|&pid| pid > 0 && pid != own))
}

/// The pid a `/proc/locks` line (`N: FLOCK ADVISORY WRITE PID MAJ:MIN:INODE START END`) names as
/// the taker of a granted lock on the file of `(major, minor)` and `ino`; `None` for a waiter's
/// line (`N: -> …`) or another file's.
fn held_on(line: &str, (major, minor): (u32, u32), ino: u64) -> Option<i32> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    if fields.get(1) == Some(&"->") || fields.len() < 6 {
        return None;
    }
    let mut device = fields[5].split(':');
    let (maj, min, inode) = (device.next()?, device.next()?, device.next()?);
    let same = u32::from_str_radix(maj, 16).ok()? == major && u32::from_str_radix(min, 16).ok()? == minor && inode.parse::<u64>().ok()? == ino;
    let pid = fields[4].parse::<i32>().ok()?;
    same.then_some(pid)
}

/// The process that holds a lock through an open descriptor, when the pid `/proc/locks` names
/// is not it: `/proc/locks` names the process that *took* a `flock`, and the lock stays with
/// the open file description, so a taker that exited (the `flock(1)` a Node host takes its locks
/// through; `exec 9>f; flock 9` in a shell) or a parent that forked leaves the holder unnamed.
/// Each process's `/proc/<pid>/fdinfo/<fd>` shows the locks of that descriptor's open file in
/// `lock:` lines of the same shape, so the first of `pids` (not `own`) one of whose `fdinfos`
/// shows a granted lock on `(major, minor)`, `ino` holds it. `fdinfos(pid)`: the texts of that
/// process's `fdinfo` files, `None` when they cannot be read.
pub fn descriptor_holder(pids: impl IntoIterator<Item = i32>, fdinfos: impl Fn(i32) -> Option<Vec<Vec<u8>>>, device: (u32, u32), ino: u64, own: i32) -> Option<i32> {
    pids.into_iter().filter(|&pid| pid > 0 && pid != own).find(|&pid| {
        fdinfos(pid).is_some_and(|texts| {
            texts.iter().any(|text| {
                core::str::from_utf8(text).is_ok_and(|text| text.lines().any(|line| line.strip_prefix("lock:").is_some_and(|lock| held_on(lock, device, ino).is_some())))
            })
        })
    })
}

/// The (major, minor) numbers of a device number `dev` as `stat` gives it (glibc's
/// `gnu_dev_major` and `gnu_dev_minor`).
pub fn major_minor(dev: u64) -> (u32, u32) {
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    (u32::try_from(major).unwrap_or(u32::MAX), u32::try_from(minor).unwrap_or(u32::MAX))
}

/// `pid` as a lock's holder, from its `/proc/<pid>/stat` (`None`: unreadable): the command (the
/// `comm` between the first `(` and the last `)`) and the scheduler state after it.
pub fn holder_from_stat(pid: i32, stat: Option<&str>) -> Holder {
    let stat = stat.unwrap_or_default();
    let command = stat.split_once('(').and_then(|(_, rest)| rest.rsplit_once(')')).map_or_else(|| "?".to_string(), |(comm, _)| comm.to_string());
    let state = match stat.rsplit_once(") ").and_then(|(_, rest)| rest.chars().next()) {
        Some('T') | Some('t') => "stopped",
        Some('R') => "running",
        Some('S') => "sleeping",
        Some('D') => "in uninterruptible sleep",
        Some('Z') => "a zombie",
        _ => "state unknown",
    };
    Holder { pid, command, state }
}

/// Why taking a lock failed.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// The bound passed.
    #[error("{0}")]
    TimedOut(LockTimeout),
    /// The lock call failed.
    #[error("{0}")]
    Io(crate::os_error::IoError),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_holder_of_a_flock_is_read_from_proc_locks_and_its_stat() {
        let locks = "1: FLOCK  ADVISORY  WRITE 4242 fe:00:1234 0 EOF\n1: -> FLOCK  ADVISORY  WRITE 77 fe:00:1234 0 EOF\n2: POSIX  ADVISORY  WRITE 99 08:01:1234 0 EOF\n";
        assert_eq!(flock_holder(locks, (0xfe, 0), 1234, 1), Some(4242));
        assert_eq!(flock_holder(locks, (0xfe, 0), 1234, 4242), None, "never this process itself, never a waiter");
        assert_eq!(flock_holder(locks, (8, 1), 1234, 1), Some(99));
        assert_eq!(flock_holder(locks, (0xfe, 0), 9, 1), None);
        let holder = holder_from_stat(4242, Some("4242 (my (odd) cmd) T 1 4242 4242 0 -1"));
        assert_eq!(holder.to_string(), "pid 4242 (my (odd) cmd, stopped)");
        assert_eq!(holder_from_stat(7, None).to_string(), "pid 7 (?, state unknown)");
        assert_eq!(major_minor(0xfe00), (0xfe, 0));
        // The taker (4242) exited; process 31 keeps the descriptor, and its fdinfo shows the lock.
        let fdinfo = |pid: i32| -> Option<Vec<Vec<u8>>> {
            match pid {
                30 => Some(vec![b"pos:\t0\nflags:\t0100001\n".to_vec()]),
                31 => Some(vec![b"pos:\t0\n".to_vec(), b"pos:\t0\nino:\t1234\nlock:\t1: FLOCK  ADVISORY  WRITE 4242 fe:00:1234 0 EOF\n".to_vec()]),
                32 => Some(vec![b"lock:\t1: -> FLOCK  ADVISORY  WRITE 32 fe:00:1234 0 EOF\n".to_vec()]),
                _ => None,
            }
        };
        assert_eq!(descriptor_holder([29, 30, 32, 31], fdinfo, (0xfe, 0), 1234, 1), Some(31));
        assert_eq!(descriptor_holder([29, 30, 32, 31], fdinfo, (0xfe, 0), 1234, 31), None, "never this process itself, never a waiter");
        assert_eq!(descriptor_holder([31], fdinfo, (0xfe, 0), 99, 1), None);
        // glibc's makedev(259, 0x12303): minor's low byte, major's low 12 bits, minor's rest.
        let dev = 0x03 | (259 << 8) | (0x12300 << 12);
        assert_eq!(major_minor(dev), (259, 0x12303), "the high minor bits");
    }
}
