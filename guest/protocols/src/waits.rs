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
