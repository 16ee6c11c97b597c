//! Owner liveness (spec §2.4): what probing a recorded owner proves.
//!
//! The host only observes (reads the boot id and `/proc/<pid>/stat` bytes, asks the kernel
//! whether a pid exists); the rules that turn those observations into an [`OwnerStatus`] live
//! here, so every host decides the same way.

use alloc::string::String;

use crate::proc_stat::{self, ProcStat};
use crate::records::Owner;

/// What probing a recorded owner proves (§2.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OwnerStatus {
    /// The same process (pid, boot and start time) is alive.
    ExactLiveOwner,
    /// Another boot, no such process, a zombie, or another process on the same pid.
    DifferentOrDead,
    /// Nothing could be proven either way.
    Unknown,
}

impl OwnerStatus {
    /// The status's name as the reference spells it.
    pub fn name(self) -> &'static str {
        match self {
            OwnerStatus::ExactLiveOwner => "exact-live-owner",
            OwnerStatus::DifferentOrDead => "different-or-dead",
            OwnerStatus::Unknown => "unknown",
        }
    }

    /// The status named `name`, if any.
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "exact-live-owner" => OwnerStatus::ExactLiveOwner,
            "different-or-dead" => OwnerStatus::DifferentOrDead,
            "unknown" => OwnerStatus::Unknown,
            _ => return None,
        })
    }
}

/// What a host observed about one pid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observation<'a> {
    /// The content of `/proc/<pid>/stat`.
    Stat(&'a str),
    /// The stat could not be read and the kernel says no such process exists (`ESRCH`), or the
    /// pid is outside the range a process can have.
    Missing,
    /// The stat could not be read but the process may exist (`EPERM`, hidden by `hidepid`,
    /// any other error). Beyond the reference, a hidden `/proc` entry of an existing pid is
    /// never taken as proof of death.
    Unreadable,
}

/// What an observation proves about a pid (`inspectProcessStartId`, §2.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inspection {
    /// A live process with this process start id.
    Alive(String),
    /// A zombie or no such process.
    Dead,
    /// Nothing proven.
    Unknown,
}

/// Turns an observation of a pid into an inspection, for the system whose boot id is
/// `boot_id` (§2.3).
pub fn inspect(observation: &Observation<'_>, boot_id: &str) -> Inspection {
    match observation {
        Observation::Stat(stat) => match proc_stat::parse(stat, boot_id) {
            ProcStat::Alive { process_start_id, .. } => Inspection::Alive(process_start_id),
            ProcStat::Dead => Inspection::Dead,
            ProcStat::Unknown => Inspection::Unknown,
        },
        Observation::Missing => Inspection::Dead,
        Observation::Unreadable => Inspection::Unknown,
    }
}

/// `processOwnerStatus(owner)` (§2.4) once the current boot id is known: another boot proves
/// nothing of this boot's processes is the owner (no inspection needed); otherwise the pid's
/// inspection decides, and a live process counts only if its start id matches.
pub fn owner_status(owner: &Owner, current_boot_id: &str, inspect_pid: impl FnOnce(u64) -> Inspection) -> OwnerStatus {
    if owner.boot_id != current_boot_id {
        return OwnerStatus::DifferentOrDead;
    }
    match inspect_pid(owner.pid) {
        Inspection::Unknown => OwnerStatus::Unknown,
        Inspection::Dead => OwnerStatus::DifferentOrDead,
        Inspection::Alive(start) if start == owner.process_start_id => OwnerStatus::ExactLiveOwner,
        Inspection::Alive(_) => OwnerStatus::DifferentOrDead,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(boot: &str, start: &str) -> Owner {
        Owner { pid: 42, boot_id: boot.into(), process_start_id: start.into() }
    }

    #[test]
    fn other_boot_is_dead_without_inspection() {
        let status = owner_status(&owner("b1", "s"), "b2", |_| panic!("must not inspect"));
        assert_eq!(status, OwnerStatus::DifferentOrDead);
    }

    #[test]
    fn start_id_must_match() {
        let alive = |s: &str| {
            let s = String::from(s);
            move |_| Inspection::Alive(s)
        };
        assert_eq!(owner_status(&owner("b", "s"), "b", alive("s")), OwnerStatus::ExactLiveOwner);
        assert_eq!(owner_status(&owner("b", "s"), "b", alive("t")), OwnerStatus::DifferentOrDead);
        assert_eq!(owner_status(&owner("b", "s"), "b", |_| Inspection::Dead), OwnerStatus::DifferentOrDead);
        assert_eq!(owner_status(&owner("b", "s"), "b", |_| Inspection::Unknown), OwnerStatus::Unknown);
    }

    #[test]
    fn a_hidden_proc_entry_is_never_death() {
        assert_eq!(inspect(&Observation::Unreadable, "b"), Inspection::Unknown);
        assert_eq!(inspect(&Observation::Missing, "b"), Inspection::Dead);
    }
}
