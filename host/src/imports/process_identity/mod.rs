//! Process identity on Linux (`process-identity` import; spec §2): the boot id, the host's own
//! identity, capture of a live pid, and the facts a recorded owner is judged on.
//!
//! This module only observes: it reads `/proc/sys/kernel/random/boot_id`, `/proc/<pid>/stat`
//! and `/proc/<pid>/task` (through procfs, relative to the pid's directory), `/proc/self`'s
//! namespaces and time offsets, asks the kernel whether a pid exists (`kill(pid, 0)`), and tests
//! witnesses ([`crate::witness`]). The rules that turn observations into identities and statuses
//! are `proclease-core`'s ([`proclease_core::digest`], [`proclease_core::liveness`]).
//!
//! Deviations from the reference, for safety (`docs/deviations.md`): the own identity comes
//! from `/proc/self`, and an identity is refused when `/proc` does not show this process's own
//! PID namespace (a pid looked up in a foreign `/proc` names another process); start times are
//! brought back to the initial time namespace; an exited thread-group leader whose threads run
//! is alive.

use std::io::Read as _;
use std::os::unix::fs::MetadataExt as _;
use std::sync::{Arc, OnceLock};

use proclease_core::liveness::{self, Liveness, OwnerFacts, OwnerStatus, ProcRead, ProcView, RemotePresence, TreeState, WitnessState};
use proclease_core::records::Owner;
use proclease_core::{digest, js};

pub mod cgroup_tree;
pub mod dead_man;
pub mod run_journal;
mod wit;
pub mod witness;

use witness::{Namespaces, SpawnWitness, WitnessError, Witnesses};

/// The reference's message for a pid that is not a safe integer ≥ 1 (§2.4).
pub const PID_MALFORMED: &str = "process identity PID is malformed";
/// The reference's message when the pid is not a live process (§2.4).
pub const NOT_LIVE: &str = "exact live process identity is unavailable";

/// A failure to establish an identity. The message is the reference's where it fixes one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct IdentityError(pub String);

/// What this process's `/proc` shows and which namespaces it lives in (read once).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Host {
    /// The `/proc` view the core judges with.
    pub view: ProcView,
    /// This process's PID namespace (nsfs inode), whatever `/proc` shows.
    pub pid_namespace: Option<u64>,
    /// This process's time namespace (nsfs inode).
    pub time_namespace: Option<u64>,
}

impl Host {
    /// Reads this process's namespaces and `/proc` view.
    pub fn read() -> Host {
        let pid_namespace = std::fs::metadata("/proc/self/ns/pid").ok().map(|m| m.ino());
        let time_namespace = std::fs::metadata("/proc/self/ns/time").ok().map(|m| m.ino());
        // `/proc` shows this PID namespace when it lists this process with one pid (NSpid has
        // one entry per namespace level from /proc's down to the process's own), and that pid
        // is the one the kernel gives this process.
        let own_proc = match std::fs::read_to_string("/proc/self/status") {
            Ok(status) => match status.lines().find_map(|l| l.strip_prefix("NSpid:")) {
                Some(pids) => {
                    let pids: Vec<&str> = pids.split_whitespace().collect();
                    pids.len() == 1 && pids[0] == std::process::id().to_string()
                }
                // A kernel without NSpid: /proc/self must at least name this pid.
                None => std::fs::read_link("/proc/self").ok().is_some_and(|p| p.as_os_str() == std::process::id().to_string().as_str()),
            },
            Err(_) => false,
        };
        let boottime_offset_ns = std::fs::read_to_string("/proc/self/timens_offsets")
            .ok()
            .and_then(|text| {
                text.lines().find_map(|l| {
                    let mut fields = l.split_whitespace();
                    (fields.next()? == "boottime").then_some(())?;
                    let seconds: i64 = fields.next()?.parse().ok()?;
                    let nanos: i64 = fields.next()?.parse().ok()?;
                    seconds.checked_mul(1_000_000_000)?.checked_add(nanos)
                })
            })
            .unwrap_or(0);
        let clock_ticks_per_second = rustix::param::clock_ticks_per_second();
        Host { view: ProcView { pid_namespace: if own_proc { pid_namespace } else { None }, boottime_offset_ns, clock_ticks_per_second }, pid_namespace, time_namespace }
    }

    /// What a witness records of this process.
    fn namespaces(&self) -> Option<Namespaces> {
        Some(Namespaces { pid: self.view.pid_namespace?, time: self.time_namespace.unwrap_or(0), boottime_offset_ns: self.view.boottime_offset_ns })
    }
}

/// A cluster's presence registry (`docs/cluster.md`): what it says of a process recorded on
/// another boot id, which may be another machine's. [`crate::cluster::presence`] implements it on etcd.
pub trait PresenceRegistry: Send + Sync + std::fmt::Debug {
    /// The registry's answer for `owner`, recorded on another boot id (never an error: a
    /// registry that cannot be read is [`RemotePresence::Unreachable`]).
    fn lookup(&self, owner: &Owner) -> RemotePresence;

    /// The registry's answer for `owner`, recorded on this boot id — which another machine
    /// sharing this kernel (a container) may also have: [`RemotePresence::NotClustered`] when
    /// it never registered, [`RemotePresence::Absent`] only when it registered and its presence
    /// has gone.
    fn lookup_same_boot(&self, owner: &Owner) -> RemotePresence;
}

/// Process identity for this host, with the boot id and own identity cached after first success
/// (§2.2, §2.3), the witnesses of one state home when it has one, and a cluster's presence
/// registry when there is one.
#[derive(Debug, Default)]
pub struct ProcessIdentity {
    boot_id: OnceLock<String>,
    own: OnceLock<Owner>,
    host: OnceLock<Host>,
    witnesses: Option<Witnesses>,
    /// The state home's witness directory, when it could not be opened.
    witnesses_unusable: Option<Unusable>,
    journal: Option<run_journal::RunJournal>,
    /// The state home's run journal, when it could not be opened.
    journal_unusable: Option<Unusable>,
    presence: Option<Arc<dyn PresenceRegistry>>,
}

/// A directory of the state home that could not be opened ([`ProcessIdentity::without_witnesses`],
/// [`ProcessIdentity::without_run_journal`]).
#[derive(Debug)]
struct Unusable {
    /// Why, as the open's error says.
    reason: String,
    /// Whether it is there (only not usable): then what it holds cannot be told either way.
    present: bool,
}

impl ProcessIdentity {
    /// Process identity without witnesses (nothing to hold or test them in): probes report every
    /// witness `absent`.
    pub fn new() -> Self {
        Self::default()
    }

    /// Process identity that holds this process's witness in, and tests witnesses of, a state
    /// home's witness directory.
    pub fn with_witnesses(witnesses: Witnesses) -> Self {
        ProcessIdentity { witnesses: Some(witnesses), ..Self::default() }
    }

    /// Process identity for a state home whose witness directory could not be opened
    /// (`reason`: a directory of another mode or owner, a symbolic link, a home that takes no
    /// writes). No process is started under it: [`Self::spawn_witness`] refuses, since nothing
    /// would prove the command's processes alive once their supervisor is gone. With `present`
    /// (the directory is there, only not usable) a probe of a process of this boot fails, since
    /// a witness held in it would prove that process, or what it started, alive: every caller
    /// then keeps what it would have taken over or removed. Without, probes report every
    /// witness `absent`, as [`Self::new`] (a read-only home that never had witnesses).
    pub fn without_witnesses(reason: String, present: bool) -> Self {
        ProcessIdentity { witnesses_unusable: Some(Unusable { reason, present }), ..Self::default() }
    }

    /// The same, for a state home whose run journal could not be opened (`reason`): a run
    /// then refuses to start (`run`'s journal entry is what keeps a finished run's results
    /// across a crash, `docs/deviations.md` 19). With `present` (the journal's directory is
    /// there, only not usable), `finished-run` fails instead of answering "nothing finished",
    /// so that recovery keeps what a finished run left rather than judge it a crashed start.
    pub fn without_run_journal(mut self, reason: String, present: bool) -> Self {
        self.journal_unusable = Some(Unusable { reason, present });
        self
    }

    /// Why the run journal could not be opened ([`Self::without_run_journal`]).
    pub fn run_journal_unavailable(&self) -> Option<&str> {
        self.journal_unusable.as_ref().map(|unusable| unusable.reason.as_str())
    }

    /// The same, asking `registry` about processes recorded on another boot id (which are then
    /// judged by their cluster presence instead of as a previous boot's: `docs/cluster.md`).
    pub fn with_presence_registry(mut self, registry: Arc<dyn PresenceRegistry>) -> Self {
        self.presence = Some(registry);
        self
    }

    /// The same, keeping the run journal of supervised commands in `journal` (what recovery
    /// asks through `finished-run`).
    pub fn with_run_journal(mut self, journal: run_journal::RunJournal) -> Self {
        self.journal = Some(journal);
        self
    }

    /// The run journal, when there is one.
    pub fn run_journal(&self) -> Option<&run_journal::RunJournal> {
        self.journal.as_ref()
    }

    /// The witness directory, when there is one.
    pub fn witnesses(&self) -> Option<&Witnesses> {
        self.witnesses.as_ref()
    }

    /// This process's namespaces and `/proc` view.
    pub fn host(&self) -> Host {
        *self.host.get_or_init(Host::read)
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
        let raw = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").map_err(|e| IdentityError(format!("system boot identity is unavailable: {e}")))?;
        let boot_id = digest::linux_boot_id(&raw).map_err(|m| IdentityError(m.into()))?;
        Ok(self.boot_id.get_or_init(|| boot_id).clone())
    }

    /// The view this process's `/proc` gives, required to show its own PID namespace before an
    /// identity is recorded: a pid looked up in another namespace's `/proc` names another
    /// process.
    fn own_view(&self) -> Result<Host, IdentityError> {
        let host = self.host();
        if host.view.pid_namespace.is_none() {
            return Err(IdentityError(String::from(
                "/proc does not show this process's own PID namespace (started with `unshare --pid --fork` but without \
                 `--mount-proc`?): a pid recorded here would name another process; mount a /proc for this namespace \
                 (unshare --pid --fork --mount-proc …) or run outside it",
            )));
        }
        Ok(host)
    }

    /// This process's own identity, from `/proc/self` (computed once), with its witness taken
    /// in the state home's witness directory (once; again after a retirement).
    ///
    /// Errors: as [`ProcessIdentity::capture`]; the witness cannot be taken while this process
    /// is outside the initial PID namespace (without it, no other namespace could check it).
    pub fn self_identity(&self) -> Result<Owner, IdentityError> {
        let own = match self.own.get() {
            Some(own) => own.clone(),
            None => {
                let host = self.own_view()?;
                let boot_id = self.current_boot_id()?;
                let (text, tasks) = read_proc("self").ok_or_else(|| IdentityError(NOT_LIVE.into()))?;
                let start = liveness::start_id(&text, tasks, &host.view, &boot_id).ok_or_else(|| IdentityError(NOT_LIVE.into()))?;
                let own = Owner { pid: u64::from(std::process::id()), boot_id, process_start_id: start };
                self.own.get_or_init(|| own).clone()
            }
        };
        if let (Some(witnesses), Some(namespaces)) = (&self.witnesses, self.host().namespaces())
            && let Err(error) = witnesses.hold(&own, &namespaces)
        {
            let collision = matches!(error, WitnessError::Collision { .. });
            if collision || namespaces.pid != liveness::INITIAL_PID_NAMESPACE {
                return Err(IdentityError(format!("this process's witness cannot be taken: {error}")));
            }
        }
        Ok(own)
    }

    /// Takes a witness for a process this one is about to start ([`Witnesses::spawn`]); `None`
    /// when there is no witness directory (identity built without a state home).
    ///
    /// Errors: the own identity's; the witness cannot be created; the state home's witness
    /// directory could not be opened ([`Self::without_witnesses`]).
    pub fn spawn_witness(&self) -> Result<Option<SpawnWitness<'_>>, IdentityError> {
        let Some(witnesses) = &self.witnesses else {
            return match self.witnesses_unusable.as_ref().map(|unusable| &unusable.reason) {
                Some(reason) => Err(IdentityError(format!(
                    "a witness for the command cannot be taken: {reason}; without it nothing would prove the command's processes alive once this \
                     supervisor is gone, so nothing was started (fix the directory and run again)"
                ))),
                None => Ok(None),
            };
        };
        let own = self.self_identity()?;
        let namespaces = self.own_view()?.namespaces().ok_or_else(|| IdentityError("no PID namespace".into()))?;
        witnesses.spawn(&own, &namespaces).map(Some).map_err(|e| IdentityError(format!("a witness for the command cannot be taken: {e}")))
    }

    /// The identity of the live process `pid` of this process's PID namespace
    /// (`captureProcessOwnerIdentity`, §2.4); a spawn witness taken for it is linked under it.
    ///
    /// Errors: [`PID_MALFORMED`] for pid 0 or beyond 2^53 − 1; the boot id errors; `/proc`
    /// shows another PID namespace; [`NOT_LIVE`] when the pid is not a live process whose stat
    /// can be read (a zombie whose threads all exited is not live).
    pub fn capture(&self, pid: u64) -> Result<Owner, IdentityError> {
        if pid == 0 || pid as f64 > js::MAX_SAFE_INTEGER {
            return Err(IdentityError(PID_MALFORMED.into()));
        }
        let host = self.own_view()?;
        let boot_id = self.current_boot_id()?;
        let Ok(pid32) = i32::try_from(pid) else { return Err(IdentityError(NOT_LIVE.into())) };
        let (text, tasks) = read_proc(&pid32.to_string()).ok_or_else(|| IdentityError(NOT_LIVE.into()))?;
        let start = liveness::start_id(&text, tasks, &host.view, &boot_id).ok_or_else(|| IdentityError(NOT_LIVE.into()))?;
        let owner = Owner { pid, boot_id, process_start_id: start };
        if let Some(witnesses) = &self.witnesses {
            witnesses.bind(pid, &owner).map_err(|e| IdentityError(format!("the command's witness cannot be linked: {e}")))?;
        }
        Ok(owner)
    }

    /// What the pid `pid` of this PID namespace is now, for a person asking (`proclease identity
    /// PID`): its identity and owner status when it is a live process; else no identity and
    /// `different-or-dead` when the kernel says there is no such process or it is a zombie
    /// whose threads all exited, `unknown` when it exists but cannot be read (another user's
    /// process under `hidepid`). Links no witness.
    ///
    /// Errors: [`PID_MALFORMED`] for pid 0 or beyond 2^53 − 1; the boot id errors; `/proc`
    /// shows another PID namespace.
    pub fn identify(&self, pid: u64) -> Result<(Option<Owner>, OwnerStatus), IdentityError> {
        if pid == 0 || pid as f64 > js::MAX_SAFE_INTEGER {
            return Err(IdentityError(PID_MALFORMED.into()));
        }
        let host = self.own_view()?;
        let boot_id = self.current_boot_id()?;
        let (stat, tasks) = observe(pid);
        let ProcRead::Stat(text) = &stat else {
            let status = if stat == ProcRead::Missing { OwnerStatus::DifferentOrDead } else { OwnerStatus::Unknown };
            return Ok((None, status));
        };
        let Some(start) = liveness::start_id(text, tasks, &host.view, &boot_id) else { return Ok((None, OwnerStatus::DifferentOrDead)) };
        let owner = Owner { pid, boot_id, process_start_id: start };
        let status = self.owner_status(&owner)?;
        Ok((Some(owner), status))
    }

    /// Everything observable about a recorded process (WIT `probe`): the current boot id, its
    /// witness and its spawn witnesses, `/proc/<pid>/stat` and its task count, and this host's
    /// `/proc` view. Nothing of this machine is read for an owner of another boot; the presence
    /// registry, when there is one, is asked about it.
    ///
    /// Errors: the current boot id cannot be established; for a process of this boot, the state
    /// home's witness directory is there but cannot be used ([`Self::without_witnesses`]).
    pub fn probe(&self, owner: &Owner) -> Result<OwnerFacts, IdentityError> {
        let boot_id = self.current_boot_id()?;
        let view = self.host().view;
        if owner.boot_id != boot_id {
            tracing::debug!(pid = owner.pid, recorded_boot_id = %owner.boot_id, current_boot_id = %boot_id, "a recorded process of another boot: nothing to read");
            return Ok(OwnerFacts {
                boot_id,
                witness: WitnessState::Absent,
                recorded_pid_namespace: None,
                spawned: WitnessState::Absent,
                spawned_uncontained: false,
                stat: ProcRead::Unreadable,
                tasks: 0,
                view,
                remote: self.presence.as_ref().map_or(RemotePresence::NotClustered, |registry| registry.lookup(owner)),
                tree: TreeState::Absent,
            });
        }
        // A witness that is there but cannot be tested is never taken for an absent one.
        let unseen = |why: &dyn std::fmt::Display| IdentityError(format!("whether pid {} (or a process it started) is alive cannot be told: {why}", owner.pid));
        if let (None, Some(Unusable { reason, present: true })) = (&self.witnesses, &self.witnesses_unusable) {
            return Err(unseen(&format_args!("the state home's witnesses cannot be read ({reason})")));
        }
        let unseen = |e: witness::WitnessError| unseen(&e);
        let (witness, recorded_pid_namespace) = self.witnesses.as_ref().map_or(Ok((WitnessState::Absent, None)), |w| w.test(owner)).map_err(unseen)?;
        let (spawned, spawned_uncontained) = self.witnesses.as_ref().map_or(Ok((WitnessState::Absent, false)), |w| w.test_spawned(owner)).map_err(unseen)?;
        // A held witness decides alone; otherwise a populated cgroup of the tree keeps it alive.
        let tree = match witness {
            WitnessState::Held => TreeState::Absent,
            _ => self.witnesses.as_ref().map_or(TreeState::Absent, |w| w.test_tree(owner)),
        };
        let (stat, tasks) = observe(owner.pid);
        // A witness of this state home decides by itself; without one, a process of this boot
        // id may be another container's, which only the cluster registry can see.
        let remote = match (&self.presence, witness) {
            (Some(registry), WitnessState::Absent | WitnessState::Untestable) => registry.lookup_same_boot(owner),
            _ => RemotePresence::NotClustered,
        };
        tracing::debug!(
            pid = owner.pid,
            ?witness,
            ?spawned,
            spawned_uncontained,
            ?tree,
            stat = %match &stat {
                ProcRead::Stat(_) => "read",
                ProcRead::Missing => "missing",
                ProcRead::Unreadable => "unreadable",
            },
            tasks,
            "probed a recorded process"
        );
        Ok(OwnerFacts { boot_id, witness, recorded_pid_namespace, spawned, spawned_uncontained, stat, tasks, view, remote, tree })
    }

    /// What probing `owner` proves ([`liveness::judge`] over [`ProcessIdentity::probe`]).
    ///
    /// Errors: as [`Self::probe`].
    pub fn liveness(&self, owner: &Owner) -> Result<Liveness, IdentityError> {
        let judged = liveness::judge(owner, &self.probe(owner)?);
        tracing::debug!(pid = owner.pid, status = judged.status.name(), proof = judged.proof.words(), "owner liveness");
        Ok(judged)
    }

    /// `processOwnerStatus(owner)` (§2.4) with the witness and namespace rules of
    /// [`liveness::judge`].
    ///
    /// Errors: as [`Self::probe`].
    pub fn owner_status(&self, owner: &Owner) -> Result<OwnerStatus, IdentityError> {
        Ok(self.liveness(owner)?.status)
    }
}

/// Reads `/proc/<entry>/stat` as text and counts `/proc/<entry>/task`, through the entry's
/// procfs directory. `None` when the stat cannot be read.
fn read_proc(entry: &str) -> Option<(String, u32)> {
    let process = match entry {
        "self" => procfs::process::Process::myself().ok()?,
        pid => procfs::process::Process::new(pid.parse().ok()?).ok()?,
    };
    let mut text = String::new();
    process.open_relative("stat").ok()?.read_to_string(&mut text).ok()?;
    let tasks = process.tasks().map_or(0, |tasks| u32::try_from(tasks.count()).unwrap_or(u32::MAX));
    Some((text, tasks))
}

/// `/proc/<pid>/stat` and the task count, or why they cannot be read: only the kernel's answer
/// to `kill(pid, 0)` can prove a pid absent (`ESRCH`). `EPERM` (exists, not ours — e.g. hidden
/// by `hidepid`) or success with an unreadable stat prove nothing.
fn observe(pid: u64) -> (ProcRead, u32) {
    let Some(pid32) = i32::try_from(pid).ok().filter(|p| *p > 0) else {
        // No Linux process has a pid beyond i32: it certainly does not exist.
        return (ProcRead::Missing, 0);
    };
    if let Some((text, tasks)) = read_proc(&pid32.to_string()) {
        return (ProcRead::Stat(text), tasks);
    }
    let Some(pid) = rustix::process::Pid::from_raw(pid32) else { return (ProcRead::Missing, 0) };
    match rustix::process::test_kill_process(pid) {
        Err(rustix::io::Errno::SRCH) => (ProcRead::Missing, 0),
        _ => (ProcRead::Unreadable, 0),
    }
}

/// Process identity as the component's effect ([`proclease_core::effects::Processes`]), shared by
/// several instances (with its caches and witnesses).
pub struct SharedProcesses(pub std::sync::Arc<ProcessIdentity>);

impl proclease_core::effects::Processes for SharedProcesses {
    fn current_boot_id(&mut self) -> Result<String, String> {
        self.0.current_boot_id().map_err(|e| e.0)
    }

    fn self_identity(&mut self) -> Result<Owner, String> {
        self.0.self_identity().map_err(|e| e.0)
    }

    fn capture(&mut self, pid: u64) -> Result<Owner, String> {
        self.0.capture(pid).map_err(|e| e.0)
    }

    fn probe(&mut self, owner: &Owner) -> Result<OwnerFacts, String> {
        self.0.probe(owner).map_err(|e| e.0)
    }

    fn finished_run(&mut self, lease_id: &str) -> Result<Option<proclease_core::effects::FinishedRun>, String> {
        match (self.0.run_journal(), &self.0.journal_unusable) {
            (Some(journal), _) => journal.finished_run(lease_id),
            (None, Some(Unusable { reason, present: true })) => Err(format!("the run journal cannot be opened: {reason}")),
            (None, _) => Ok(None),
        }
    }

    fn forget_run(&mut self, lease_id: &str) {
        if let Some(journal) = self.0.run_journal() {
            journal.forget(lease_id);
        }
    }
}
