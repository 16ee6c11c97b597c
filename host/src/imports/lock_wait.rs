//! Waiting for a kernel lock (`flock`) another process holds, with a bound and a voice: after
//! [`TELL_AFTER`] the wait says once (a `tracing` warning, on standard error in the CLI) who
//! holds the lock — read from `/proc/locks` and the holder's `/proc/<pid>/stat` — and at the
//! bound it fails with that holder in the error. A stopped holder (Ctrl-Z, SIGSTOP) is named as
//! stopped: it keeps the lock until it is continued or killed.

use std::fs::{File, TryLockError};
use std::os::unix::fs::MetadataExt as _;
use std::time::{Duration, Instant};

/// How long a wait stays silent.
pub const TELL_AFTER: Duration = Duration::from_secs(1);

/// The default bound of one wait for a lock held by another process.
pub const DEFAULT_BOUND: Duration = Duration::from_secs(10);

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

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pid {} ({}, {})", self.pid, self.command, self.state)
    }
}

/// A wait that reached its bound.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("waited {waited_ms} ms for {lock}, held by {}: {hint}", holder_words(.holder))]
pub struct LockTimeout {
    /// The lock, as the user knows it (a path in the state home).
    pub lock: String,
    /// Who held it at the end, when `/proc/locks` says.
    pub holder: Option<Holder>,
    /// How long it waited, ms.
    pub waited_ms: u64,
    /// What the user can do.
    pub hint: &'static str,
}

fn holder_words(holder: &Option<Holder>) -> String {
    match holder {
        Some(holder) => holder.to_string(),
        None => "another process (not shown in /proc/locks)".into(),
    }
}

const HINT: &str = "continue a stopped holder (`kill -CONT PID`, or `fg` in its terminal) or end it; a holder that dies releases the lock";

/// Takes `file`'s exclusive `flock`, waiting at most `bound` for another holder (see the module
/// docs); `lock` names it in messages.
///
/// Errors: [`LockTimeout`] at the bound (an I/O error of the lock itself is
/// [`LockError::Io`]).
pub fn lock(file: &File, lock: &str, bound: Duration) -> Result<(), LockError> {
    let start = Instant::now();
    let mut pause = Duration::from_micros(200);
    let mut told = false;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(()),
            Err(TryLockError::WouldBlock) => {}
            Err(TryLockError::Error(e)) => return Err(LockError::Io(e)),
        }
        let waited = start.elapsed();
        if waited >= bound {
            return Err(LockError::TimedOut(LockTimeout { lock: lock.into(), holder: holder(file), waited_ms: waited.as_millis() as u64, hint: HINT }));
        }
        if !told && waited >= TELL_AFTER {
            told = true;
            tracing::warn!("waiting for {} holding {lock} (for at most {} s more)", holder_words(&holder(file)), (bound - waited).as_secs());
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}

/// Why [`lock`] failed.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// The bound passed.
    #[error("{0}")]
    TimedOut(LockTimeout),
    /// The lock call failed.
    #[error("{0}")]
    Io(std::io::Error),
}

/// The process `/proc/locks` shows holding a lock on `file`'s inode (not a waiter), if any.
pub fn holder(file: &File) -> Option<Holder> {
    let meta = file.metadata().ok()?;
    let (major, minor) = (rustix::fs::major(meta.dev()), rustix::fs::minor(meta.dev()));
    let text = std::fs::read_to_string("/proc/locks").ok()?;
    let own = std::process::id() as i32;
    let pid = text.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // `N: FLOCK ADVISORY WRITE PID MAJ:MIN:INODE 0 EOF`; waiters have `->` after `N:`.
        if fields.get(1) == Some(&"->") || fields.len() < 6 {
            return None;
        }
        let mut device = fields[5].split(':');
        let (maj, min, inode) = (device.next()?, device.next()?, device.next()?);
        let same = u32::from_str_radix(maj, 16).ok()? == major && u32::from_str_radix(min, 16).ok()? == minor && inode.parse::<u64>().ok()? == meta.ino();
        let pid = fields[4].parse::<i32>().ok()?;
        (same && pid > 0 && pid != own).then_some(pid)
    })?;
    let command = std::fs::read_to_string(format!("/proc/{pid}/comm")).map_or_else(|_| "?".into(), |c| c.trim_end().to_string());
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = match stat.rsplit_once(") ").and_then(|(_, rest)| rest.chars().next()) {
        Some('T') | Some('t') => "stopped",
        Some('R') => "running",
        Some('S') => "sleeping",
        Some('D') => "in uninterruptible sleep",
        Some('Z') => "a zombie",
        _ => "state unknown",
    };
    Some(Holder { pid, command, state })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stopped_holder_is_named_and_the_wait_ends_at_its_bound() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.lock");
        std::fs::write(&path, b"").unwrap();
        let mut holder_process = std::process::Command::new("flock").arg("-o").arg(&path).args(["sleep", "60"]).spawn().unwrap();
        let file = File::open(&path).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while holder(&file).is_none() {
            assert!(Instant::now() < deadline, "flock never took the lock");
            std::thread::sleep(Duration::from_millis(10));
        }
        let pid = holder(&file).unwrap().pid;
        assert_eq!(pid, holder_process.id() as i32);
        rustix::process::kill_process(rustix::process::Pid::from_raw(pid).unwrap(), rustix::process::Signal::STOP).unwrap();
        let error = match lock(&file, ".proclease/locks/x.lock", Duration::from_millis(300)) {
            Err(LockError::TimedOut(timeout)) => timeout,
            other => panic!("{other:?}"),
        };
        assert_eq!(error.holder.as_ref().map(|h| (h.pid, h.command.as_str(), h.state)), Some((pid, "flock", "stopped")), "{error}");
        assert!(error.to_string().contains(&format!("held by pid {pid} (flock, stopped)")), "{error}");
        let _ = holder_process.kill();
        let _ = holder_process.wait();
        lock(&file, "x", Duration::from_secs(5)).expect("free once its holder is gone");
    }
}
