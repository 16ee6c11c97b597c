//! Owner liveness (spec §2.4, and proclease's witness, `docs/witness.md`): what probing a
//! recorded process proves.
//!
//! The host only observes. For a recorded process it reports [`OwnerFacts`]: the state of the
//! process's kernel-lock *witness* (a `flock` that the process, and everything that inherited it,
//! holds until it is gone), the witnesses of processes it started before recording them, what
//! `/proc/<pid>/stat` and `/proc/<pid>/task` show, and which PID and time namespace that `/proc`
//! view belongs to. The rules that turn those facts into an [`OwnerStatus`] are here, so every
//! host decides the same way.
//!
//! Where the reference's `/proc` proof is unsound, these rules keep its answer only where the
//! facts make it sound (`docs/deviations.md`):
//! - a pid is only meaningful in the PID namespace it was recorded in: a `/proc` that shows
//!   another namespace proves nothing but an exact match;
//! - `starttime` in `/proc/<pid>/stat` is shifted by the *reader's* time namespace: it is brought
//!   back to the initial time namespace before the process start id is computed;
//! - a thread-group leader that exited while its other threads run shows state `Z` but is alive;
//! - a witness that is held proves a holder alive, a free one proves every holder gone, in any
//!   namespace and whatever `/proc` hides.

use alloc::string::{String, ToString};

use crate::digest;
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

/// The inode number of the initial PID namespace (`PROC_PID_INIT_INO` in the Linux kernel):
/// what `stat(/proc/self/ns/pid).st_ino` gives outside any container.
pub const INITIAL_PID_NAMESPACE: u64 = 0xEFFF_FFFC;

/// What a cluster's presence registry says of a recorded process (`docs/cluster.md`, WIT
/// `remote-presence`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RemotePresence {
    /// No cluster: another boot id means a previous boot (§2.4 step 2). For a process of this
    /// boot id, also: it never registered (this machine's proof alone decides).
    NotClustered,
    /// Registered under an unexpired etcd lease: alive on its machine.
    Registered,
    /// Read, and not registered: expired or revoked (for another boot id also: never
    /// registered).
    Absent,
    /// The registry could not be read.
    Unreachable,
}

/// The state of a kernel-lock witness as a host found it (`docs/witness.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WitnessState {
    /// No witness file: the record was not written with one (ghostget, or a process that could
    /// not take one).
    Absent,
    /// Its lock is held: the process, or something that inherited the witness, is alive.
    Held,
    /// Its lock is free: every process that held it is gone.
    Free,
    /// The witness exists but its lock cannot be tested (the filesystem refuses `flock`).
    Untestable,
}

impl WitnessState {
    /// `absent`, `held`, `free` or `untestable`.
    pub fn name(self) -> &'static str {
        match self {
            WitnessState::Absent => "absent",
            WitnessState::Held => "held",
            WitnessState::Free => "free",
            WitnessState::Untestable => "untestable",
        }
    }
}

/// What a recorded process's cgroup shows (`docs/containment.md`, "The cgroup"): the cgroup v2
/// its supervisor put the command's tree in, as recorded under `.proclease/witnesses/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TreeState {
    /// No cgroup was recorded for it (no cgroup v2 could be made, a ghostget record, a host
    /// without cgroups).
    Absent,
    /// `cgroup.events` says `populated 1`: some process of the tree is alive, whatever it
    /// closed and however it detached.
    Populated,
    /// The cgroup is empty, or gone (a cgroup can be removed only once empty, and a removed one
    /// can never be joined again). This alone proves nothing of the recorded process, which may
    /// live outside its cgroup (a box's init does).
    Empty,
    /// Recorded, but it cannot be read here (no cgroup v2 mount, another cgroup namespace).
    Unreadable,
}

impl TreeState {
    /// `absent`, `populated`, `empty` or `unreadable`.
    pub fn name(self) -> &'static str {
        match self {
            TreeState::Absent => "absent",
            TreeState::Populated => "populated",
            TreeState::Empty => "empty",
            TreeState::Unreadable => "unreadable",
        }
    }
}

/// What reading `/proc/<pid>/stat` gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcRead {
    /// The file's content.
    Stat(String),
    /// It could not be read and the kernel says no such process exists (`ESRCH`), or the pid is
    /// outside the range a process can have.
    Missing,
    /// It could not be read but the process may exist (`EPERM`, hidden by `hidepid`, any other
    /// error). Beyond the reference, this is never taken as proof of death.
    Unreadable,
}

/// The host's `/proc` view: which namespaces its numbers are relative to. The same for every
/// probe a host makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcView {
    /// The PID namespace whose pids the host's `/proc` shows (`st_ino` of its
    /// `/proc/self/ns/pid`), or `None` when that `/proc` does not show the host's own PID
    /// namespace (a `/proc` mounted for an ancestor namespace), so that its namespace cannot
    /// be known.
    pub pid_namespace: Option<u64>,
    /// The boottime offset of the host's time namespace, ns (`/proc/self/timens_offsets`; 0
    /// outside a time namespace).
    pub boottime_offset_ns: i64,
    /// `USER_HZ`, the unit of `starttime` (clock ticks per second; 100 on Linux).
    pub clock_ticks_per_second: u64,
}

impl ProcView {
    /// The view of a host in the initial namespaces with `USER_HZ` 100.
    pub const INITIAL: ProcView = ProcView { pid_namespace: Some(INITIAL_PID_NAMESPACE), boottime_offset_ns: 0, clock_ticks_per_second: 100 };

    /// The boottime offset in clock ticks, when it is a whole number of ticks (it always is for
    /// offsets set in seconds, as `unshare --boottime` sets them).
    pub fn offset_ticks(&self) -> Option<i64> {
        if self.clock_ticks_per_second == 0 || 1_000_000_000 % self.clock_ticks_per_second != 0 {
            return None;
        }
        let tick_ns = (1_000_000_000 / self.clock_ticks_per_second) as i64;
        (self.boottime_offset_ns % tick_ns == 0).then_some(self.boottime_offset_ns / tick_ns)
    }
}

/// What a host observed about one recorded process (WIT `process-identity.owner-facts`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerFacts {
    /// The current boot id, as the host read it for this probe (§2.4 step 1: a probe fails when
    /// it cannot be read).
    pub boot_id: String,
    /// The witness of this identity.
    pub witness: WitnessState,
    /// The PID namespace the witness says the pid was recorded in (its content), when there is
    /// a readable witness.
    pub recorded_pid_namespace: Option<u64>,
    /// The witnesses this identity took for processes it started before it could record them:
    /// `held` if any is held, `free` if there are some and all are free, `absent` if none.
    pub spawned: WitnessState,
    /// Whether one of those processes was started uncontained (no box, no cgroup:
    /// `--containment none`, or a host without containment): a free `spawned` then proves gone
    /// only what kept its witness, and a process that closed it cannot be seen
    /// (`docs/witness.md`, "Uncontained runs"; issue #40).
    pub spawned_uncontained: bool,
    /// `/proc/<pid>/stat`.
    pub stat: ProcRead,
    /// Entries in `/proc/<pid>/task` (the process's threads, an exited leader included); 0 when
    /// not read.
    pub tasks: u32,
    /// The host's `/proc` view.
    pub view: ProcView,
    /// The cluster registry's answer for a process recorded on another boot id
    /// ([`RemotePresence::NotClustered`] otherwise, and without a cluster).
    pub remote: RemotePresence,
    /// The cgroup recorded for it, if any.
    pub tree: TreeState,
}

impl OwnerFacts {
    /// Facts that prove `status` exactly as the reference's injected `inspect` seam would
    /// answer it, with no witness and nothing of spawned processes: `exact-live-owner` as a held
    /// witness, `different-or-dead` as a pid the kernel says is gone, `unknown` as an unreadable
    /// stat. For in-memory hosts and the conformance vectors, which script statuses.
    pub fn implying(owner: &Owner, status: OwnerStatus) -> OwnerFacts {
        let (witness, stat) = match status {
            OwnerStatus::ExactLiveOwner => (WitnessState::Held, ProcRead::Unreadable),
            OwnerStatus::DifferentOrDead => (WitnessState::Absent, ProcRead::Missing),
            OwnerStatus::Unknown => (WitnessState::Absent, ProcRead::Unreadable),
        };
        OwnerFacts {
            boot_id: owner.boot_id.clone(),
            witness,
            recorded_pid_namespace: None,
            spawned: WitnessState::Absent,
            spawned_uncontained: false,
            stat,
            tasks: 0,
            view: ProcView::INITIAL,
            remote: RemotePresence::NotClustered,
            tree: TreeState::Absent,
        }
    }
}

/// What is proven of the processes a recorded owner started before it could record them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Spawned {
    /// It started some under witness, and every one of them (and what inherited their witness)
    /// is gone.
    AllGone,
    /// One of them, or something that inherited its witness, is alive.
    SomeAlive,
    /// Nothing is known (no spawn witness: ghostget, or an embedder that did not use one).
    Unproven,
}

/// Which fact decided an owner status (for explanations and logs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Proof {
    /// The owner ran before the last reboot.
    OtherBoot,
    /// Recorded on another machine, and registered in the cluster (`docs/cluster.md`).
    ClusterRegistered,
    /// Recorded on another machine, and no longer registered in the cluster.
    ClusterAbsent,
    /// Recorded on another machine, and the cluster registry cannot be read.
    ClusterUnreachable,
    /// Its witness is held.
    WitnessHeld,
    /// A process of the cgroup recorded for it is alive.
    TreePopulated,
    /// A cgroup was recorded for it, and it cannot be read here: a process of its tree may run
    /// on though its witness is free (one that closed the witness, where no box holds it).
    TreeUnreadable,
    /// Its witness is free.
    WitnessFree,
    /// `/proc` shows the same process alive.
    ProcAlive,
    /// `/proc` shows its pid gone, a zombie, or another process.
    ProcGone,
    /// `/proc` cannot be read for the pid.
    ProcUnreadable,
    /// `/proc` shows another PID namespace than the one the pid was recorded in (or the
    /// recorder's namespace cannot be known): only an exact match would prove anything.
    ForeignNamespace,
}

impl Proof {
    /// Words for an explanation, e.g. `its witness lock is free`.
    pub fn words(self) -> &'static str {
        match self {
            Proof::OtherBoot => "it ran before the last reboot",
            Proof::ClusterRegistered => "it runs on another machine and keeps its cluster presence alive",
            Proof::ClusterAbsent => "it ran on another machine and its cluster presence expired",
            Proof::ClusterUnreachable => "it runs on another machine and the cluster registry cannot be reached",
            Proof::WitnessHeld => "its witness lock is held",
            Proof::TreePopulated => "a process of its cgroup still runs",
            Proof::TreeUnreadable => "its witness lock is free, but the cgroup recorded for its processes cannot be read here",
            Proof::WitnessFree => "its witness lock is free",
            Proof::ProcAlive => "/proc shows it running",
            Proof::ProcGone => "/proc shows it gone",
            Proof::ProcUnreadable => "/proc cannot be read for it",
            Proof::ForeignNamespace => "it was recorded in another PID namespace than this /proc shows",
        }
    }
}

/// What probing a recorded process proves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Liveness {
    /// The process itself (with a witness: the process or what inherited its witness).
    pub status: OwnerStatus,
    /// The processes it started before it could record them.
    pub spawned: Spawned,
    /// What decided `status`.
    pub proof: Proof,
    /// Whether a process it started ran uncontained ([`OwnerFacts::spawned_uncontained`]):
    /// `spawned` then speaks only of what kept its witness. Explanations say so; decisions are
    /// the same (`docs/deviations.md` 25).
    pub uncontained: bool,
}

impl Liveness {
    /// A status as the reference's injected `inspect` seam answers it: nothing known of
    /// spawned processes.
    pub fn reference(status: OwnerStatus) -> Liveness {
        let proof = match status {
            OwnerStatus::ExactLiveOwner => Proof::ProcAlive,
            OwnerStatus::DifferentOrDead => Proof::ProcGone,
            OwnerStatus::Unknown => Proof::ProcUnreadable,
        };
        Liveness { status, spawned: Spawned::Unproven, proof, uncontained: false }
    }

    /// Whether this process, and every process it inherited its witness to, is proven gone by
    /// a free witness, a reboot, or an expired cluster presence (its supervisor stopped what it
    /// started before etcd could expire it: `docs/cluster.md`) — not by `/proc` alone, which
    /// cannot see descendants.
    pub fn lineage_gone(&self) -> bool {
        self.status == OwnerStatus::DifferentOrDead && matches!(self.proof, Proof::WitnessFree | Proof::OtherBoot | Proof::ClusterAbsent)
    }
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

/// Turns `/proc` facts about a pid into an inspection for the boot `boot_id` (§2.3, with the
/// two corrections above): a `Z`/`X` leader with other tasks is alive, and the start time is
/// brought back to the initial time namespace.
///
/// When the view's boottime offset is not a whole number of clock ticks, the start time cannot
/// be corrected exactly: the inspection is then `Unknown` for a live process (its start id could
/// be either neighbour).
pub fn inspect(stat: &ProcRead, tasks: u32, view: &ProcView, boot_id: &str) -> Inspection {
    let text = match stat {
        ProcRead::Stat(text) => text,
        ProcRead::Missing => return Inspection::Dead,
        ProcRead::Unreadable => return Inspection::Unknown,
    };
    let raw_start = match proc_stat::parse(text, boot_id) {
        ProcStat::Alive { raw_start, .. } => raw_start,
        // An exited leader whose other threads still run: the process is alive, and its stat
        // still carries the start time.
        ProcStat::Dead if tasks > 1 => match proc_stat::start_field(text) {
            Some(start) => start.to_string(),
            None => return Inspection::Unknown,
        },
        ProcStat::Dead => return Inspection::Dead,
        ProcStat::Unknown => return Inspection::Unknown,
    };
    match normalized_start(&raw_start, view) {
        Some(start) => Inspection::Alive(digest::process_start_id(boot_id, &start)),
        None => Inspection::Unknown,
    }
}

/// `starttime` as the initial time namespace shows it: the reader's value less its boottime
/// offset in ticks. `None` when the offset is not whole ticks or the value is out of range.
pub fn normalized_start(raw_start: &str, view: &ProcView) -> Option<String> {
    let offset = view.offset_ticks()?;
    if offset == 0 {
        return Some(raw_start.into());
    }
    let start: i128 = raw_start.parse().ok()?;
    let corrected = start - i128::from(offset);
    (corrected >= 0).then(|| corrected.to_string())
}

/// The process start id of a live process from its `/proc/<pid>/stat` (§2.3), corrected as
/// [`inspect`] does. `None` when the stat does not show a live process.
pub fn start_id(stat: &str, tasks: u32, view: &ProcView, boot_id: &str) -> Option<String> {
    match inspect(&ProcRead::Stat(stat.into()), tasks, view, boot_id) {
        Inspection::Alive(start) => Some(start),
        _ => None,
    }
}

/// `processOwnerStatus(owner)` (§2.4) from what a host observed, with the witness and namespace
/// rules of this module:
///
/// 1. another boot → `different-or-dead` (nothing of that boot runs), no probe needed;
/// 2. witness held, or its recorded cgroup populated → `exact-live-owner` (a process of the
///    command's tree runs on, even one that closed the witness: `docs/containment.md`);
/// 3. witness free → `different-or-dead`, unless a `/proc` in the recorded namespace shows the
///    same process running (it closed its inherited witness): then `exact-live-owner`;
/// 4. in a cluster, a process of this boot id that this machine's own proof did not find alive
///    and that registered a presence: the presence decides (containers of one kernel share a
///    boot id; `docs/cluster.md`);
/// 5. no testable witness → the `/proc` proof of §2.3–2.4, which decides only when `/proc`
///    shows the namespace the pid was recorded in (from the witness's content, or — for a
///    record without a witness — the initial PID namespace); otherwise only an exact match
///    counts, and anything else is `unknown`.
pub fn judge(owner: &Owner, facts: &OwnerFacts) -> Liveness {
    let current_boot_id = facts.boot_id.as_str();
    if owner.boot_id != current_boot_id {
        // Another boot id: a previous boot of this machine (§2.4 step 2), or, in a cluster,
        // possibly another machine, whose presence registry decides (docs/cluster.md). An owner
        // whose presence expired has self-fenced: what it started was stopped with it.
        let (status, spawned, proof) = match facts.remote {
            RemotePresence::NotClustered => (OwnerStatus::DifferentOrDead, Spawned::AllGone, Proof::OtherBoot),
            RemotePresence::Registered => (OwnerStatus::ExactLiveOwner, Spawned::Unproven, Proof::ClusterRegistered),
            RemotePresence::Absent => (OwnerStatus::DifferentOrDead, Spawned::AllGone, Proof::ClusterAbsent),
            RemotePresence::Unreachable => (OwnerStatus::Unknown, Spawned::Unproven, Proof::ClusterUnreachable),
        };
        // A reboot ended everything, contained or not.
        let uncontained = facts.spawned_uncontained && proof != Proof::OtherBoot;
        return Liveness { status, spawned, proof, uncontained };
    }
    let spawned = match facts.spawned {
        WitnessState::Held => Spawned::SomeAlive,
        WitnessState::Free => Spawned::AllGone,
        WitnessState::Absent | WitnessState::Untestable => Spawned::Unproven,
    };
    let uncontained = facts.spawned_uncontained;
    let at = |status, proof| Liveness { status, spawned, proof, uncontained };
    if facts.witness == WitnessState::Held {
        return at(OwnerStatus::ExactLiveOwner, Proof::WitnessHeld);
    }
    if facts.tree == TreeState::Populated {
        return at(OwnerStatus::ExactLiveOwner, Proof::TreePopulated);
    }
    let recorded_namespace = match facts.witness {
        WitnessState::Absent => Some(INITIAL_PID_NAMESPACE),
        _ => facts.recorded_pid_namespace,
    };
    let consultable = recorded_namespace.is_some() && recorded_namespace == facts.view.pid_namespace;
    let inspection = inspect(&facts.stat, facts.tasks, &facts.view, current_boot_id);
    let same_process = matches!(&inspection, Inspection::Alive(start) if *start == owner.process_start_id);
    if same_process {
        return at(OwnerStatus::ExactLiveOwner, Proof::ProcAlive);
    }
    if facts.tree == TreeState::Unreadable {
        // Its supervisor put its tree in a cgroup, because a process of the tree may outlive the
        // witness (one that closed it, where no box's init holds it for the tree); unseen is not
        // gone. Recover it where its cgroup can be read (the machine's cgroup namespace).
        return at(OwnerStatus::Unknown, Proof::TreeUnreadable);
    }
    if facts.witness == WitnessState::Free {
        return at(OwnerStatus::DifferentOrDead, Proof::WitnessFree);
    }
    // The same boot id in a cluster: containers of one kernel share it, so a process another
    // container recorded has no witness in this state home and its pid may be of another
    // namespace than the one this /proc shows. Where this machine's own proof did not find it
    // alive, its presence decides; a process that never registered (the host answers
    // not-clustered) is judged by /proc alone (docs/cluster.md, "One kernel, several machines").
    match facts.remote {
        RemotePresence::Registered => return at(OwnerStatus::ExactLiveOwner, Proof::ClusterRegistered),
        // As for another machine: a presence gone means the owner self-fenced, stopping what it
        // started.
        RemotePresence::Absent => return Liveness { status: OwnerStatus::DifferentOrDead, spawned: Spawned::AllGone, proof: Proof::ClusterAbsent, uncontained },
        RemotePresence::Unreachable => return at(OwnerStatus::Unknown, Proof::ClusterUnreachable),
        RemotePresence::NotClustered => {}
    }
    if !consultable {
        return at(OwnerStatus::Unknown, Proof::ForeignNamespace);
    }
    match inspection {
        Inspection::Unknown => at(OwnerStatus::Unknown, Proof::ProcUnreadable),
        Inspection::Dead | Inspection::Alive(_) => at(OwnerStatus::DifferentOrDead, Proof::ProcGone),
    }
}

/// Words for a probe's answer in an explanation, e.g. `owner pid 42 is gone (its witness lock is
/// free)`; `role` names the recorded process (`owner`, `helper`, `child`, `host`).
pub fn describe(role: &str, owner: &Owner, liveness: &Liveness) -> String {
    let state = match (liveness.status, liveness.proof) {
        (_, Proof::OtherBoot) => "ran before the last reboot",
        (OwnerStatus::ExactLiveOwner, _) => "is alive",
        (OwnerStatus::DifferentOrDead, _) => "is gone",
        (OwnerStatus::Unknown, _) => "cannot be inspected",
    };
    let mut text = alloc::format!("{role} pid {} {state}", owner.pid);
    if liveness.proof != Proof::OtherBoot {
        text.push_str(" (");
        text.push_str(liveness.proof.words());
        text.push(')');
    }
    let gone_words = liveness.proof != Proof::OtherBoot && liveness.status != OwnerStatus::ExactLiveOwner;
    match (liveness.spawned, liveness.uncontained) {
        (Spawned::SomeAlive, false) => text.push_str("; a process it started still runs (its witness lock is held, or its cgroup is populated)"),
        (Spawned::SomeAlive, true) => text
            .push_str("; a process it started still runs (its witness lock is held); uncontained (no box, no cgroup): a process it started that closes its witness cannot be seen"),
        (Spawned::AllGone, false) if gone_words => text.push_str("; every process it started is gone (their witness locks are free)"),
        (Spawned::AllGone, true) if gone_words => text.push_str(
            "; uncontained (no box, no cgroup): every process it started that kept its witness is gone (their witness locks are free), but one that closed it cannot be seen",
        ),
        _ => {}
    }
    text
}

/// `captureProcessOwnerIdentity(pid)` (§2.4) through `processes`, holding the host to its
/// answer: an identity of another pid than the one asked for is refused, never recorded.
///
/// Errors: the capture's (`exact live process identity is unavailable`, …); `process identity
/// capture answered for pid <other> instead of <pid>` from a faulty host.
pub fn capture(processes: &mut dyn crate::effects::Processes, pid: u64) -> Result<Owner, String> {
    let owner = processes.capture(pid)?;
    if owner.pid != pid {
        return Err(alloc::format!("process identity capture answered for pid {} instead of {pid}", owner.pid));
    }
    Ok(owner)
}

/// Probes `owner` through `processes` and judges the facts ([`judge`]).
///
/// Errors: the probe's (the current boot id could not be read).
pub fn probe(processes: &mut dyn crate::effects::Processes, owner: &Owner) -> Result<Liveness, String> {
    Ok(judge(owner, &processes.probe(owner)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOOT: &str = "2e428f285ab5c7529544f882ab5704fda290111df77d659381ffdf07d68f8572";

    fn stat(state: &str, start: u64) -> String {
        alloc::format!("42 (worker) {state} 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 {start} 0 0")
    }

    fn recorded(start: u64) -> Owner {
        Owner { pid: 42, boot_id: BOOT.into(), process_start_id: digest::process_start_id(BOOT, &start.to_string()) }
    }

    fn facts(witness: WitnessState, stat: ProcRead) -> OwnerFacts {
        OwnerFacts {
            boot_id: BOOT.into(),
            witness,
            recorded_pid_namespace: None,
            spawned: WitnessState::Absent,
            spawned_uncontained: false,
            stat,
            tasks: 1,
            view: ProcView::INITIAL,
            remote: RemotePresence::NotClustered,
            tree: TreeState::Absent,
        }
    }

    fn status(owner: &Owner, facts: &OwnerFacts) -> OwnerStatus {
        judge(owner, facts).status
    }

    #[test]
    fn other_boot_is_dead_with_everything_it_started() {
        let liveness = judge(&Owner { boot_id: "b".repeat(64), ..recorded(7) }, &facts(WitnessState::Held, ProcRead::Missing));
        assert_eq!(liveness.status, OwnerStatus::DifferentOrDead);
        assert_eq!(liveness.spawned, Spawned::AllGone);
        assert!(liveness.lineage_gone());
    }

    #[test]
    fn without_a_witness_the_reference_proof_holds_in_the_initial_namespace() {
        let owner = recorded(424242);
        assert_eq!(status(&owner, &facts(WitnessState::Absent, ProcRead::Stat(stat("S", 424242)))), OwnerStatus::ExactLiveOwner);
        assert_eq!(status(&owner, &facts(WitnessState::Absent, ProcRead::Stat(stat("S", 1)))), OwnerStatus::DifferentOrDead);
        assert_eq!(status(&owner, &facts(WitnessState::Absent, ProcRead::Stat(stat("Z", 424242)))), OwnerStatus::DifferentOrDead);
        assert_eq!(status(&owner, &facts(WitnessState::Absent, ProcRead::Missing)), OwnerStatus::DifferentOrDead);
        assert_eq!(status(&owner, &facts(WitnessState::Absent, ProcRead::Unreadable)), OwnerStatus::Unknown);
        assert!(!judge(&owner, &facts(WitnessState::Absent, ProcRead::Missing)).lineage_gone());
    }

    #[test]
    fn a_zombie_leader_with_running_threads_is_alive() {
        let owner = recorded(424242);
        let mut threads = facts(WitnessState::Absent, ProcRead::Stat(stat("Z", 424242)));
        threads.tasks = 2;
        assert_eq!(status(&owner, &threads), OwnerStatus::ExactLiveOwner);
        threads.tasks = 1;
        assert_eq!(status(&owner, &threads), OwnerStatus::DifferentOrDead);
    }

    #[test]
    fn a_foreign_or_unknowable_namespace_proves_nothing_but_a_match() {
        let owner = recorded(424242);
        for view_ns in [None, Some(4026532000)] {
            let mut f = facts(WitnessState::Absent, ProcRead::Missing);
            f.view.pid_namespace = view_ns;
            assert_eq!(status(&owner, &f), OwnerStatus::Unknown, "{view_ns:?}");
            f.stat = ProcRead::Stat(stat("S", 424242));
            assert_eq!(status(&owner, &f), OwnerStatus::ExactLiveOwner);
        }
        // An untestable witness says where the pid was recorded.
        let mut f = facts(WitnessState::Untestable, ProcRead::Missing);
        f.recorded_pid_namespace = Some(4026532000);
        assert_eq!(status(&owner, &f), OwnerStatus::Unknown);
        f.view.pid_namespace = Some(4026532000);
        assert_eq!(status(&owner, &f), OwnerStatus::DifferentOrDead);
    }

    #[test]
    fn the_witness_decides_in_any_namespace() {
        let owner = recorded(424242);
        let mut f = facts(WitnessState::Held, ProcRead::Missing);
        f.view.pid_namespace = None;
        assert_eq!(status(&owner, &f), OwnerStatus::ExactLiveOwner);
        f.witness = WitnessState::Free;
        let liveness = judge(&owner, &f);
        assert_eq!((liveness.status, liveness.proof), (OwnerStatus::DifferentOrDead, Proof::WitnessFree));
        assert!(liveness.lineage_gone());
        // A process that closed its inherited witness but still runs, seen in its namespace.
        f.stat = ProcRead::Stat(stat("R", 424242));
        assert_eq!(status(&owner, &f), OwnerStatus::ExactLiveOwner);
    }

    #[test]
    fn a_populated_cgroup_keeps_the_owner_alive_whatever_the_witness_and_proc_say() {
        let owner = recorded(424242);
        // The recorded process is gone and its witness free (a daemon of the tree closed it).
        let mut f = facts(WitnessState::Free, ProcRead::Missing);
        f.tree = TreeState::Populated;
        let liveness = judge(&owner, &f);
        assert_eq!((liveness.status, liveness.proof), (OwnerStatus::ExactLiveOwner, Proof::TreePopulated));
        assert!(!liveness.lineage_gone());
        assert_eq!(describe("child", &owner, &liveness), "child pid 42 is alive (a process of its cgroup still runs)");
        // An empty or gone cgroup proves nothing by itself: the witness decides.
        for tree in [TreeState::Empty, TreeState::Absent] {
            f.tree = tree;
            assert_eq!(judge(&owner, &f).proof, Proof::WitnessFree, "{tree:?}");
        }
        // One that cannot be read here may hold a process that closed the witness: never gone.
        f.tree = TreeState::Unreadable;
        let liveness = judge(&owner, &f);
        assert_eq!((liveness.status, liveness.proof), (OwnerStatus::Unknown, Proof::TreeUnreadable));
        assert_eq!(
            describe("child", &owner, &liveness),
            "child pid 42 cannot be inspected (its witness lock is free, but the cgroup recorded for its processes cannot be read here)"
        );
        // Unless /proc shows the very process alive, or its witness is held.
        f.stat = ProcRead::Stat(stat("S", 424242));
        assert_eq!(judge(&owner, &f).proof, Proof::ProcAlive);
        f.stat = ProcRead::Missing;
        f.witness = WitnessState::Held;
        f.tree = TreeState::Empty;
        assert_eq!(status(&owner, &f), OwnerStatus::ExactLiveOwner);
        // Another boot's records are never judged by a cgroup of this boot.
        let old = Owner { boot_id: "0".repeat(64), ..owner.clone() };
        let f = OwnerFacts { tree: TreeState::Populated, ..facts(WitnessState::Absent, ProcRead::Missing) };
        assert_eq!(judge(&old, &f).proof, Proof::OtherBoot);
    }

    #[test]
    fn start_times_are_read_in_the_initial_time_namespace() {
        let owner = recorded(1_000);
        // A reader whose boottime is one day ahead sees starttime + 86400 s × 100 ticks.
        let mut f = facts(WitnessState::Absent, ProcRead::Stat(stat("S", 1_000 + 8_640_000)));
        f.view.boottime_offset_ns = 86_400 * 1_000_000_000;
        assert_eq!(status(&owner, &f), OwnerStatus::ExactLiveOwner);
        // Not whole ticks: the correction is uncertain, so a mismatch proves nothing.
        f.view.boottime_offset_ns += 1;
        assert_eq!(status(&owner, &f), OwnerStatus::Unknown);
        assert_eq!(normalized_start("5", &ProcView { boottime_offset_ns: -20_000_000, ..ProcView::INITIAL }).as_deref(), Some("7"));
    }

    #[test]
    fn spawned_witnesses_are_reported() {
        let owner = recorded(1);
        let mut f = facts(WitnessState::Free, ProcRead::Missing);
        f.spawned = WitnessState::Held;
        assert_eq!(judge(&owner, &f).spawned, Spawned::SomeAlive);
        f.spawned = WitnessState::Free;
        assert_eq!(judge(&owner, &f).spawned, Spawned::AllGone);
    }

    #[test]
    fn an_uncontained_run_is_never_called_wholly_gone() {
        let owner = recorded(1);
        let mut f = facts(WitnessState::Free, ProcRead::Missing);
        f.spawned = WitnessState::Free;
        f.spawned_uncontained = true;
        let liveness = judge(&owner, &f);
        assert_eq!((liveness.status, liveness.spawned, liveness.uncontained), (OwnerStatus::DifferentOrDead, Spawned::AllGone, true), "the same decision");
        let words = describe("owner", &owner, &liveness);
        assert_eq!(
            words,
            "owner pid 42 is gone (its witness lock is free); uncontained (no box, no cgroup): every process it started that kept its witness is gone (their witness locks are free), but one that closed it cannot be seen"
        );
        assert!(!words.contains("every process it started is gone"));
        f.spawned = WitnessState::Held;
        assert!(describe("owner", &owner, &judge(&owner, &f)).ends_with("; uncontained (no box, no cgroup): a process it started that closes its witness cannot be seen"));
        // A reboot ended everything it started, contained or not.
        let old = Owner { boot_id: "0".repeat(64), ..owner.clone() };
        assert!(!judge(&old, &f).uncontained);
        f.spawned_uncontained = false;
        f.spawned = WitnessState::Free;
        assert!(describe("owner", &owner, &judge(&owner, &f)).ends_with("; every process it started is gone (their witness locks are free)"));
    }

    #[test]
    fn implied_facts_give_the_reference_statuses() {
        let owner = recorded(1);
        for s in [OwnerStatus::ExactLiveOwner, OwnerStatus::DifferentOrDead, OwnerStatus::Unknown] {
            let liveness = judge(&owner, &OwnerFacts::implying(&owner, s));
            assert_eq!(liveness.status, s);
            assert_eq!(liveness.spawned, Spawned::Unproven);
            assert!(!liveness.lineage_gone());
        }
    }

    #[test]
    fn another_boot_id_is_judged_by_the_cluster_registry_when_there_is_one() {
        let elsewhere = Owner { boot_id: "c".repeat(64), ..recorded(77) };
        let with = |remote| OwnerFacts { remote, ..facts(WitnessState::Absent, ProcRead::Unreadable) };
        let judged = |remote| {
            let liveness = judge(&elsewhere, &with(remote));
            (liveness.status, liveness.proof)
        };
        assert_eq!(judged(RemotePresence::NotClustered), (OwnerStatus::DifferentOrDead, Proof::OtherBoot));
        assert_eq!(judged(RemotePresence::Registered), (OwnerStatus::ExactLiveOwner, Proof::ClusterRegistered));
        assert_eq!(judged(RemotePresence::Absent), (OwnerStatus::DifferentOrDead, Proof::ClusterAbsent));
        assert_eq!(judged(RemotePresence::Unreachable), (OwnerStatus::Unknown, Proof::ClusterUnreachable));
        assert_eq!(
            describe("owner", &elsewhere, &judge(&elsewhere, &with(RemotePresence::Registered))),
            "owner pid 42 is alive (it runs on another machine and keeps its cluster presence alive)"
        );
    }

    /// The same boot id in a cluster (containers of one kernel): where this machine's own proof
    /// does not find the process alive, a registered presence proves it alive, an expired one
    /// gone — even when its pid is of another namespace — and an unreachable registry proves
    /// nothing; a witness decides before the registry, and a process that never registered
    /// (`not-clustered`) is judged by /proc alone.
    #[test]
    fn the_same_boot_id_in_a_cluster_is_judged_by_the_registry_where_this_machine_cannot_see_it() {
        let here = recorded(77);
        let with = |remote, witness, stat| OwnerFacts { remote, ..facts(witness, stat) };
        let judged = |remote, witness, stat| {
            let liveness = judge(&here, &with(remote, witness, stat));
            (liveness.status, liveness.proof)
        };
        // /proc here shows the pid gone (another container's pid): the registry decides.
        assert_eq!(judged(RemotePresence::Registered, WitnessState::Absent, ProcRead::Missing), (OwnerStatus::ExactLiveOwner, Proof::ClusterRegistered));
        assert_eq!(judged(RemotePresence::Absent, WitnessState::Absent, ProcRead::Missing), (OwnerStatus::DifferentOrDead, Proof::ClusterAbsent));
        assert_eq!(judged(RemotePresence::Unreachable, WitnessState::Absent, ProcRead::Missing), (OwnerStatus::Unknown, Proof::ClusterUnreachable));
        assert_eq!(judged(RemotePresence::NotClustered, WitnessState::Absent, ProcRead::Missing), (OwnerStatus::DifferentOrDead, Proof::ProcGone));
        // Recorded in a namespace this /proc does not show: stuck as unknown without a registry.
        let foreign = OwnerFacts { remote: RemotePresence::Absent, recorded_pid_namespace: Some(1), ..facts(WitnessState::Untestable, ProcRead::Missing) };
        assert_eq!(judge(&here, &foreign).proof, Proof::ClusterAbsent);
        assert_eq!(judge(&here, &OwnerFacts { remote: RemotePresence::NotClustered, ..foreign }).status, OwnerStatus::Unknown);
        // A witness of this state home decides first.
        assert_eq!(judged(RemotePresence::Absent, WitnessState::Held, ProcRead::Missing), (OwnerStatus::ExactLiveOwner, Proof::WitnessHeld));
        assert_eq!(judged(RemotePresence::Registered, WitnessState::Free, ProcRead::Missing), (OwnerStatus::DifferentOrDead, Proof::WitnessFree));
    }
}
