//! Process identity on Linux (`process-identity` import; spec §2): the boot id, the host's own
//! identity, capture of a live pid, and the status of a recorded owner.
//!
//! This module only observes — it reads `/proc/sys/kernel/random/boot_id` and
//! `/proc/<pid>/stat` (through procfs, relative to the pid's directory) and asks the kernel
//! whether a pid exists (`kill(pid, 0)`). The rules that turn observations into identities and
//! statuses are `proclease-core`'s ([`proclease_core::digest`], [`proclease_core::liveness`]).

use std::io::Read as _;
use std::sync::OnceLock;

use proclease_core::liveness::{self, Inspection, Observation, OwnerStatus};
use proclease_core::records::Owner;
use proclease_core::{digest, js};

/// The reference's message for a pid that is not a safe integer ≥ 1 (§2.4).
pub const PID_MALFORMED: &str = "process identity PID is malformed";
/// The reference's message when the pid is not a live process (§2.4).
pub const NOT_LIVE: &str = "exact live process identity is unavailable";

/// A failure to establish an identity. The message is the reference's where it fixes one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct IdentityError(pub String);

/// Process identity for this host, with the boot id and own identity cached after first success
/// (§2.2, §2.3).
#[derive(Debug, Default)]
pub struct ProcessIdentity {
    boot_id: OnceLock<String>,
    own: OnceLock<Owner>,
}

impl ProcessIdentity {
    /// A fresh instance (nothing cached yet).
    pub fn new() -> Self {
        Self::default()
    }

    /// The current boot id (64 lowercase hex), §2.2.
    ///
    /// Errors: `system boot identity is malformed`, or `system boot identity is unavailable: …`
    /// when the file cannot be read.
    pub fn current_boot_id(&self) -> Result<String, IdentityError> {
        if let Some(boot_id) = self.boot_id.get() {
            return Ok(boot_id.clone());
        }
        // Read raw: the §2.2 rule (trim, pattern, digest) is proclease-core's.
        let raw = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .map_err(|e| IdentityError(format!("system boot identity is unavailable: {e}")))?;
        let boot_id = digest::linux_boot_id(&raw).map_err(|m| IdentityError(m.into()))?;
        Ok(self.boot_id.get_or_init(|| boot_id).clone())
    }

    /// This process's own identity (computed once).
    ///
    /// Errors: as [`ProcessIdentity::capture`].
    pub fn self_identity(&self) -> Result<Owner, IdentityError> {
        if let Some(own) = self.own.get() {
            return Ok(own.clone());
        }
        let own = self.capture(u64::from(std::process::id()))?;
        Ok(self.own.get_or_init(|| own).clone())
    }

    /// The identity of the live process `pid` (`captureProcessOwnerIdentity`, §2.4).
    ///
    /// Errors: [`PID_MALFORMED`] for pid 0 or beyond 2^53 − 1; the boot id errors;
    /// [`NOT_LIVE`] when the pid is not a live (non-zombie) process whose stat can be read.
    pub fn capture(&self, pid: u64) -> Result<Owner, IdentityError> {
        if pid == 0 || pid as f64 > js::MAX_SAFE_INTEGER {
            return Err(IdentityError(PID_MALFORMED.into()));
        }
        let boot_id = self.current_boot_id()?;
        match self.inspect(pid, &boot_id) {
            Inspection::Alive(process_start_id) => Ok(Owner { pid, boot_id, process_start_id }),
            Inspection::Dead | Inspection::Unknown => Err(IdentityError(NOT_LIVE.into())),
        }
    }

    /// `processOwnerStatus(owner)` (§2.4): another boot → different-or-dead without inspecting;
    /// a zombie, a missing pid or another process on the pid → different-or-dead; an unreadable
    /// stat of a pid that may exist → unknown.
    ///
    /// Errors: only when the current boot id cannot be established.
    pub fn owner_status(&self, owner: &Owner) -> Result<OwnerStatus, IdentityError> {
        let boot_id = self.current_boot_id()?;
        Ok(liveness::owner_status(owner, &boot_id, |pid| self.inspect(pid, &boot_id)))
    }

    /// Observes `pid` and applies the §2.3 rules.
    fn inspect(&self, pid: u64, boot_id: &str) -> Inspection {
        let mut text = String::new();
        let observation = match read_stat(pid, &mut text) {
            StatRead::Read => Observation::Stat(&text),
            StatRead::Failed => observe_without_proc(pid),
            StatRead::OutOfRange => Observation::Missing,
        };
        liveness::inspect(&observation, boot_id)
    }
}

enum StatRead {
    Read,
    Failed,
    OutOfRange,
}

/// Reads `/proc/<pid>/stat` as text through the pid's procfs directory.
fn read_stat(pid: u64, text: &mut String) -> StatRead {
    let Ok(pid) = i32::try_from(pid) else {
        // No Linux process has a pid beyond i32: it certainly does not exist.
        return StatRead::OutOfRange;
    };
    let Ok(process) = procfs::process::Process::new(pid) else {
        return StatRead::Failed;
    };
    match process.open_relative("stat").map(|mut file| file.read_to_string(text)) {
        Ok(Ok(_)) => StatRead::Read,
        _ => StatRead::Failed,
    }
}

/// When `/proc/<pid>` cannot be read, only the kernel's answer to `kill(pid, 0)` can prove the
/// pid absent (`ESRCH`). `EPERM` (exists, not ours — e.g. hidden by `hidepid`) or success with
/// an unreadable stat prove nothing.
fn observe_without_proc(pid: u64) -> Observation<'static> {
    let Some(pid) = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw) else {
        return Observation::Missing;
    };
    match rustix::process::test_kill_process(pid) {
        Err(rustix::io::Errno::SRCH) => Observation::Missing,
        _ => Observation::Unreadable,
    }
}
