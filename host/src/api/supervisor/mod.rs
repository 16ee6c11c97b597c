//! Running a command as a lease's recorded process — what `proclease run` does, as a library:
//! [`Supervisor`] leases a working or staging directory (and, `exclusive`, the export admission),
//! starts the command in it holding a spawn witness, records it, forwards signals to it (feature
//! `signals`), waits, settles, publishes a stage, and releases everything.
//!
//! The order of writes is what makes a crash at any instant recoverable exactly:
//! lease (preparing) → launching → spawn → running(child identity) → wait → settled → release;
//! with `exclusive` the admission goes parent-owned → helper-launching → helper-active(child)
//! → parent-owned → released around it, after the directory's lease (the next exclusive run
//! may be the same job in the same directory). While the child lives, its recorded identity and its
//! witness keep the lease active; the launch window (between spawn and recording the child) is
//! bounded by `recover_after`, and proven by the spawn witness (`docs/witness.md`).
//!
//! [`Launch`] is the piece for embedders that start recorded processes themselves: take the
//! witness before the lease records that a launch begins (`launching`, `helper-launching`,
//! `host-starting`), so that a crash between that write and the spawn leaves a free witness
//! (nothing was started) rather than none (nothing known).
//!
//! ```
//! # fn main() -> Result<(), proclease::Error> {
//! # let dir = tempfile::tempdir().unwrap();
//! use proclease::supervisor::{Supervisor, Target};
//! let host = proclease::Host::builder().state_home(dir.path().join("state")).workspace_root(dir.path()).build()?;
//! let work = dir.path().join("jobs/build");
//! let mut command = std::process::Command::new("sh");
//! command.args(["-c", "echo built > result.txt"]);
//! let finished = Supervisor::new(&host, Target::Workdir(work.clone())).run(&mut command)?;
//! assert!(finished.status.success() && finished.problems.is_empty());
//! assert_eq!(std::fs::read_to_string(work.join("result.txt")).unwrap(), "built\n");
//! # Ok(()) }
//! ```

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::Duration;

use proclease_core::LeaseCode;
use proclease_core::directory_leases::Request;
use proclease_core::records::directory_lease::{Phase, Role};
use proclease_core::run_refusals;

use crate::api::host::Host;
use crate::containment;
pub use crate::containment::{BoxOptions, Contained, Containment, Stragglers, Tree, available as containment_available};
use crate::error::{Error, Refusal};
use crate::process_identity::NOT_LIVE;
use crate::process_identity::run_journal::JournalEntry;
use crate::{Admission, DirectoryLease};

mod cluster;
pub mod dead_man_record;
mod launch;
mod queued;
#[cfg(feature = "cluster")]
mod queued_cluster;
mod signals;
mod steps;

use steps::StageEnd;

pub use launch::{Launch, SpawnError, retire};

/// Which directory a supervised command works in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A working directory (a `raw-working` lease, recording the command as its child): it stays
    /// after a normal exit.
    Workdir(PathBuf),
    /// A staging directory (a `bundle-stage` lease) published to `output` (a sibling that must
    /// not exist) when the command succeeds, and removed when it fails.
    Stage {
        /// The stage.
        stage: PathBuf,
        /// Where a successful stage is published.
        output: PathBuf,
    },
}

/// A supervised command that ran.
#[derive(Debug)]
pub struct Finished {
    /// Its exit status.
    pub status: ExitStatus,
    /// How many processes the command left running when it exited (stopped by
    /// [`Stragglers::Stop`], or waited for by [`Stragglers::Wait`]); 0 without a box or cgroup.
    pub stragglers: usize,
    /// How it ran: in a box, or not and why.
    pub containment: Contained,
    /// What could not be settled, published or released after it ran (each retried for
    /// [`Supervisor::release_retry`]); the leases then stay, for `recover` once this process is
    /// gone.
    pub problems: Vec<Error>,
    /// When the leases stay ([`Finished::problems`] is not empty): where the results are and
    /// whether `recover` will keep them.
    pub unreleased: Option<Unreleased>,
    /// The first stopping signal (SIGINT, SIGTERM, SIGHUP, SIGQUIT) that reached the run while
    /// its command ran ([`Supervisor::forward_signals`]): the run was interrupted, even when the
    /// command caught the signal and exited 0 (the command line then exits 128+N, as `su`
    /// does).
    pub interrupted: Option<i32>,
    /// Cluster mode: why this process lost its hold on its leases while the command ran (its
    /// presence lapsed, was lost with etcd's state, or overran its TTL), when it did. The
    /// supervisor then stopped the command, so its work was interrupted whatever its status:
    /// a stage is not published (it is scratch), and the command line exits 7
    /// ("lock lost") rather than with the command's status (`docs/cluster.md`).
    pub lock_lost: Option<String>,
}

/// Where a finished run's results are when its lease could not be released
/// (`docs/deviations.md`, "A finished run keeps its directory").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreleased {
    /// The directory that holds the results: the working directory, the stage, or the output
    /// it was published to.
    pub directory: PathBuf,
    /// Whether the run journal recorded the end of the command, so that a plain `recover` keeps
    /// `directory` (false: a state home that took no write at all).
    pub journaled: bool,
    /// When the journal took no write: the marker made beside the working directory
    /// (`proclease_core::directory_leases::finished_marker`), so that a plain `recover` keeps it
    /// all the same; `None` when that could not be made either (`recover --keep` keeps it).
    pub marker: Option<PathBuf>,
    /// A failed stage: scratch, which `recover` removes (as the reference does).
    pub scratch: bool,
    /// The stage was published to its output (only its lease record stays).
    pub published: bool,
}

/// Runs one command as a lease's recorded process (see the module docs).
pub struct Supervisor<'h> {
    host: &'h Host,
    target: Target,
    exclusive: bool,
    recover_after: Duration,
    forward_signals: bool,
    containment: Containment,
    stragglers: Stragglers,
    release_retry: Duration,
    admission_wait: Duration,
}

/// The environment variable an exclusive run's command gets: the fencing token of its export
/// admission (decimal; `docs/cluster.md`, "Fencing tokens"), greater than that of every earlier
/// holder — on any machine in cluster mode, of the state home otherwise.
pub const FENCING_TOKEN: &str = "PROCLEASE_FENCING_TOKEN";

/// How long settling and releasing are retried after the command ran, by default.
pub const RELEASE_RETRY: Duration = Duration::from_secs(10);

impl<'h> Supervisor<'h> {
    /// A supervisor of a command in `target`, with the defaults: not exclusive, a 60 s launch
    /// window, no signal forwarding.
    pub fn new(host: &'h Host, target: Target) -> Self {
        Supervisor {
            host,
            target,
            exclusive: false,
            recover_after: Duration::from_secs(60),
            forward_signals: false,
            containment: Containment::Auto,
            stragglers: Stragglers::default(),
            release_retry: RELEASE_RETRY,
            admission_wait: Duration::ZERO,
        }
    }

    /// With [`Supervisor::exclusive`]: how long to wait for the export admission while a live
    /// owner holds it (`another export is active`), saying once that it waits, for whom and
    /// behind how many; default zero (refuse at once, as the reference does). Any other refusal
    /// is not waited for.
    ///
    /// On the file store the waiters queue in arrival order and wake when the holder releases
    /// the admission or dies (`wait_queue`, `docs/waiting.md`); in cluster mode they wait on a
    /// watch of etcd, without a queue (`docs/cluster.md`).
    pub fn wait_for_turn(mut self, bound: Duration) -> Self {
        self.admission_wait = bound;
        self
    }

    /// How long settling and releasing the leases are retried once the command ran (a full or
    /// frozen state home may take writes again); default [`RELEASE_RETRY`] (10 s).
    pub fn release_retry(mut self, bound: Duration) -> Self {
        self.release_retry = bound;
        self
    }

    /// Whether the command runs in a box (`docs/containment.md`); default
    /// [`Containment::Auto`]. In cluster mode an exclusive run treats `Auto` as `Required`
    /// ([`Refusal::ClusterWithoutBox`] where no box can be made) and warns with `None`.
    pub fn containment(mut self, containment: Containment) -> Self {
        self.containment = containment;
        self
    }

    /// What happens to processes the command leaves running; default [`Stragglers::Stop`] with a
    /// 5 s grace. Either way the leases are released only once the box is empty.
    pub fn stragglers(mut self, stragglers: Stragglers) -> Self {
        self.stragglers = stragglers;
        self
    }

    /// Also hold the export admission (one such run at a time), recording the command as its
    /// helper.
    pub fn exclusive(mut self, exclusive: bool) -> Self {
        self.exclusive = exclusive;
        self
    }

    /// How long a crash between starting the command and recording it keeps the directory from
    /// recovery when nothing else proves the command gone.
    pub fn recover_after(mut self, window: Duration) -> Self {
        self.recover_after = window;
        self
    }

    /// Forward SIGINT, SIGTERM, SIGHUP and SIGQUIT to the command while it runs (feature
    /// `signals`; without it this does nothing).
    pub fn forward_signals(mut self, forward: bool) -> Self {
        self.forward_signals = forward;
        self
    }

    /// Acquires the admission, waiting for its turn for at most [`Supervisor::wait_for_turn`]
    /// while a live owner holds it: the admission, and the acquisition's operation (begun again
    /// for the attempt that succeeded).
    fn admission_in_turn(&self, operation: crate::lock_wait::Operation, interrupted: &dyn Fn() -> Option<Error>) -> Result<(Admission, crate::lock_wait::Operation), Error> {
        if self.admission_wait.is_zero() {
            return self.admission_polled(operation, self.admission_wait, false, interrupted);
        }
        #[cfg(feature = "cluster")]
        if let Some(cluster) = self.host.cluster() {
            return queued_cluster::admission(self, cluster, operation, interrupted);
        }
        let home = self.host.store().home();
        let queue = crate::wait_queue::WaitQueue::open(home.dir(), home.path(), crate::wait_queue::EXPORT_ADMISSION);
        match queue.as_ref().map_err(ToString::to_string).and_then(|queue| queue.join().map_err(|e| e.to_string())) {
            Ok(ticket) => queued::admission(self.host, ticket, operation, self.admission_wait, interrupted),
            Err(e) => {
                tracing::warn!("cannot join the export admission's wait queue ({e}): waiting without a place in it");
                self.admission_polled(operation, self.admission_wait, false, interrupted)
            }
        }
    }

    /// [`Supervisor::admission_in_turn`] without a queue, waiting at most `bound`: a run that
    /// does not wait (one attempt), a state home whose queue cannot be joined, and in cluster
    /// mode the head of etcd's queue (or a run that could not join it), which waits on a watch
    /// of etcd. `told`: the wait was already announced (by the queue).
    fn admission_polled(
        &self,
        mut operation: crate::lock_wait::Operation,
        bound: Duration,
        mut told: bool,
        interrupted: &dyn Fn() -> Option<Error>,
    ) -> Result<(Admission, crate::lock_wait::Operation), Error> {
        let start = std::time::Instant::now();
        let mut pause = Duration::from_millis(50);
        // Cluster mode: a watch opened before the first attempt (so that a change after any
        // attempt wakes a refused waiter) instead of pauses.
        let mut watch = if bound.is_zero() { None } else { cluster::TurnWatch::open(self.host) };
        loop {
            match self.host.acquire_admission() {
                Ok(admission) => return Ok((admission, operation)),
                Err(error) if error.lease_code() == Some(LeaseCode::AnotherExportIsActive) && start.elapsed() < bound => {
                    let holder = if !told || watch.is_some() { self.host.survey_admission().ok().flatten() } else { None };
                    if !told {
                        told = true;
                        let holding = match &holder {
                            Some(survey) => format!(" (pid {} holds it: {})", survey.claim.owner.pid, survey.reason),
                            None => String::new(),
                        };
                        tracing::warn!("another export is active{holding}: waiting for its turn, for at most {:.1} s", bound.saturating_sub(start.elapsed()).as_secs_f64());
                    }
                    if let Some(error) = interrupted() {
                        return Err(error);
                    }
                    drop(operation);
                    let left = bound.saturating_sub(start.elapsed());
                    let holders: Vec<_> = holder.iter().flat_map(|survey| std::iter::once(&survey.claim.owner).chain(survey.claim.helper_owner.as_ref())).collect();
                    if !watch.as_mut().is_some_and(|watch| watch.await_turn(&holders, left)) {
                        std::thread::sleep(pause.min(left));
                        pause = (pause * 2).min(Duration::from_secs(1));
                    }
                    operation = crate::lock_wait::Operation::begin(self.host.lock_timeout());
                }
                Err(error) if error.lease_code() == Some(LeaseCode::AnotherExportIsActive) && told => {
                    tracing::warn!("gave up waiting for the export admission after {:.1} s", start.elapsed().as_secs_f64());
                    return Err(error);
                }
                // A Ctrl-C that came while this attempt hung (etcd frozen: the attempt ends
                // only at its own timeout) is what the user asked for: exit 130, not the
                // attempt's failure (exit 1). Nothing was taken, so nothing is left.
                Err(error) => return Err(interrupted().unwrap_or(error)),
            }
        }
    }

    /// Leases, starts `command` in the directory, waits for it, and settles, publishes and
    /// releases. A refusal leaves nothing behind: no lease, no directory it created.
    ///
    /// Errors (before the command ran): [`Error::Refused`] — the target's paths, the state home,
    /// a directory not empty or leased by another, a command that cannot start; [`Error::Lease`]
    /// — `another export is active` (exclusive), `prior export owner cannot be inspected
    /// safely`, the §6A.6 refusals; store, workspace and identity failures. After it ran, the
    /// problems are in [`Finished::problems`].
    pub fn run(mut self, command: &mut Command) -> Result<Finished, Error> {
        let host = self.host;
        if self.exclusive && host.cluster().is_some() {
            // Cluster mode (#45 case 8): an exclusive command's tree must die with its supervisor
            // (docs/cluster.md, "Self-fencing"), which only a box makes sure of.
            match self.containment {
                Containment::Auto => {
                    containment::available().map_err(|reason| Refusal::ClusterWithoutBox { reason })?;
                    self.containment = Containment::Required;
                }
                Containment::None => tracing::warn!(
                    "--containment none in cluster mode: the command runs without a box, so if this supervisor is stopped or killed, \
                     processes of its command may run on after its presence expired, beside the next holder of the export admission"
                ),
                Containment::Required => {}
            }
        }
        if self.containment == Containment::Required {
            containment::available().map_err(|reason| Refusal::NoContainment { reason })?;
        }
        // Signals are caught from the start: one that arrives before the command started stops
        // the run cleanly (nothing started, nothing left) instead of killing it mid-lease.
        let forwarder = if self.forward_signals { signals::forward() } else { None };
        let interrupted = || forwarder.as_ref().and_then(signals::Forwarder::pending).map(|signal| Error::from(Refusal::Interrupted { signal }));
        // Such a signal also ends the acquisition's waits for locks (the lease-creation lock, a
        // collection's lock, another writer's claim: their bound may be long, `--lock-timeout`)
        // within `STOP_GRACE`, and the undoing of what the acquisition did within the same
        // grace; the run then reports the signal, not the wait (and names what the grace was
        // too short to release). Until the command is spawned: from then on, a signal is the
        // command's, and the releases at its end wait as before.
        let stop_waits = forwarder.as_ref().map(|forwarder| crate::lock_wait::stop_waits_when(forwarder.pending_check()));
        // What the workspace finds at a path (`None`: it cannot tell).
        let kind = |path: &Path| path.to_str().and_then(|path| host.workspace().kind(path).ok());
        let plan = steps::plan(&self.target, absolute, kind)?;
        let (role, dir, output) = (plan.role, plan.dir.clone(), plan.output.clone());
        // What the lease creates (the directory and its missing ancestors), to remove again if
        // the command never runs.
        let created = steps::created_by_lease(&dir, kind);
        let undo_created = || {
            for path in &created {
                if let Some(path) = path.to_str() {
                    let _ = host.workspace().remove_empty_directory(path, None);
                }
            }
        };
        // Taking the admission and the lease is one operation: one bound for all its waits
        // (from the attempt that got the admission, when its turn was waited for).
        let mut acquiring = crate::lock_wait::Operation::begin(host.lock_timeout());
        // The admission comes before the directory, so that a refusal creates nothing.
        let mut admission = None;
        if self.exclusive {
            let (held, operation) = self.admission_in_turn(acquiring, &interrupted)?;
            (admission, acquiring) = (Some(held), operation);
        }
        // The command does not inherit the etcd password (docs/cluster.md, "Authentication").
        command.env_remove("PROCLEASE_ETCD_PASSWORD");
        // Each returns what it could not release, worded for `Refusal::InterruptedLeavingClaims`.
        let release_admission = |admission: &mut Option<Admission>| -> Vec<String> {
            let Some(admission) = admission.as_mut() else { return Vec::new() };
            let _ = admission.settle_helper();
            match admission.release() {
                Ok(()) => Vec::new(),
                Err(e) => vec![run_refusals::left_export_admission(&e.to_string())],
            }
        };
        // The work can check its fence where it writes: in cluster mode the etcd revision of the
        // admission's write, on the file store the state home's counter (`api::fencing`).
        match fencing_token(host, admission.as_mut()) {
            Some(Ok((token, store))) => {
                // And its store, so that `proclease fence check` in the command asks the same one.
                command.env(FENCING_TOKEN, token.to_string()).env(crate::cluster::FENCING_STORE_VARIABLE, store);
            }
            Some(Err(error)) => {
                drop(acquiring);
                let left = release_admission(&mut admission);
                return Err(leaving(host, &dir, interrupted().unwrap_or(error), left));
            }
            None => {}
        }
        if let Some(error) = interrupted() {
            drop(acquiring);
            let left = release_admission(&mut admission);
            return Err(leaving(host, &dir, error, left));
        }
        let now = now_ms();
        let request = Request {
            role,
            path: text(&dir)?,
            output_root: output.as_deref().map(text).transpose()?,
            recover_after_ms: now + self.recover_after.as_millis() as f64,
            now_ms: Some(now),
        };
        let mut lease = match host.lease_new_directory(&request) {
            Ok(lease) => {
                tracing::info!(path = %dir.display(), role = ?role, exclusive = admission.is_some(), "leased the directory");
                lease
            }
            Err(error) => {
                // Released with a bound of its own: the acquisition's may be spent.
                drop(acquiring);
                let left = release_admission(&mut admission);
                return Err(leaving(host, &dir, interrupted().unwrap_or(error), left));
            }
        };
        drop(acquiring);
        let abandon = |lease: &mut DirectoryLease, admission: &mut Option<Admission>| -> Vec<String> {
            if role == Role::RawWorking {
                let _ = lease.update(Phase::Settled, None);
            }
            let mut left = Vec::new();
            if let Err(e) = lease.release() {
                left.push(run_refusals::left_directory_lease(&dir.display().to_string(), &e.to_string()));
            }
            undo_created();
            left.extend(release_admission(admission));
            left
        };
        // The run journal's entry is written now, while the state home takes writes: the end of
        // the command is later recorded in place, which needs no free space (run_journal.rs).
        let journal = match start_journal(host, &mut lease) {
            Ok(entry) => entry,
            Err(error) => {
                abandon(&mut lease, &mut admission);
                return Err(error);
            }
        };
        let forget_journal = |journal: &Option<JournalEntry>| {
            if let (Some(entry), Some(runs)) = (journal, host.process_identity().run_journal()) {
                runs.forget(entry.lease_id());
            }
        };
        // The command's witness is taken before the lease says a launch begins: a crash from
        // here on leaves it free (nothing started) or held by the command.
        let launch = match Launch::prepare(host.process_identity()) {
            Ok(launch) => launch,
            Err(SpawnError::Witness(e)) => {
                abandon(&mut lease, &mut admission);
                forget_journal(&journal);
                return Err(e.into());
            }
            Err(error @ SpawnError::Start(_)) => {
                abandon(&mut lease, &mut admission);
                forget_journal(&journal);
                return Err(error.for_command(command));
            }
        };
        let launching = (|| -> Result<(), Error> {
            if let Some(error) = interrupted() {
                return Err(error);
            }
            if role == Role::RawWorking {
                lease.update(Phase::Launching, None)?;
            }
            if let Some(admission) = admission.as_mut() {
                admission.begin_helper_launch()?;
            }
            Ok(())
        })();
        if let Err(error) = launching {
            let left = abandon(&mut lease, &mut admission);
            forget_journal(&journal);
            return Err(leaving(host, &dir, interrupted().unwrap_or(error), left));
        }
        command.current_dir(&dir);
        let fenced = cluster::session(host);
        let dead_man = match cluster::hold_dead_man(host, fenced.as_ref()) {
            Ok(hold) => hold,
            Err(error) => {
                let left = abandon(&mut lease, &mut admission);
                forget_journal(&journal);
                return Err(leaving(host, &dir, interrupted().unwrap_or(error), left));
            }
        };
        // From here on a signal is the command's (forwarded to it once it runs).
        drop(stop_waits);
        let options = BoxOptions { containment: self.containment, keep: Vec::new(), die_with_supervisor: fenced.is_some(), cgroup: None };
        let mut tree = match launch.spawn_tree(command, options) {
            Ok(tree) => {
                tracing::info!(pid = tree.id(), containment = %tree.containment(), "started the command");
                tree
            }
            Err(error) => {
                // Nothing ran: settle and release everything, and remove what was created.
                abandon(&mut lease, &mut admission);
                forget_journal(&journal);
                let program = command.get_program().to_string_lossy().into_owned();
                let reason = match error {
                    SpawnError::Start(e) => e.to_string(),
                    other => other.to_string(),
                };
                return Err(Refusal::Unstartable { command: program, reason }.into());
            }
        };
        if let Some(forwarder) = &forwarder {
            forwarder.started(tree.id());
        }
        let mut problems = Vec::new();
        if fenced.is_some()
            && let Ok(recorded) = host.process_identity().capture(u64::from(tree.id()))
        {
            problems.extend(cluster::register_child(fenced.as_ref(), &recorded));
        }
        // Record the child (the box's init, or the command without a box); if it already exited
        // (a capture finds no live process), the lifecycle goes from launching straight to settled.
        let pid = i64::from(tree.id());
        let gone = |e: &Error| matches!(e, Error::System(failure) if failure.message == NOT_LIVE);
        if role == Role::RawWorking
            && let Err(e) = lease.update(Phase::Running, Some(pid))
            && !gone(&e)
        {
            problems.push(e);
        }
        if let Some(admission) = admission.as_mut()
            && let Err(e) = admission.bind_helper(pid)
            && !gone(&e)
        {
            problems.push(e);
        }
        let (status, lost) = cluster::wait(host, fenced.as_ref(), &mut tree).map_err(|e| Error::system(format!("waiting for the command: {e}")))?;
        let mut lock_lost = lost.as_ref().map(ToString::to_string);
        problems.extend(lost);
        // What the command left running is stopped (or waited for) before anything is settled,
        // published, removed or released: the lease covers the whole tree.
        if let Some(forwarder) = &forwarder {
            forwarder.stopping();
        }
        let (finished, lost) = cluster::finish(host, fenced.as_ref(), &mut tree, self.stragglers);
        if let Some(lost) = &lost {
            lock_lost.get_or_insert_with(|| lost.to_string());
        }
        problems.extend(lost);
        // A command stopped because the leases were lost did not finish its work, whatever its
        // status (a graceful shutdown on SIGTERM exits 0): nothing of it is published.
        let succeeded = status.success() && lock_lost.is_none();
        let stragglers = match finished {
            Ok(count) => count,
            Err(e) => {
                problems.push(Error::system(format!("waiting for what the command left running: {e}")));
                0
            }
        };
        let interrupted = forwarder.as_ref().and_then(signals::Forwarder::interrupted);
        drop(forwarder);
        drop(dead_man);
        // The whole tree has ended: the journal says so before anything is settled, so that a
        // lease that cannot be released never costs the run its results.
        let journaled = match &journal {
            Some(entry) => match entry.finished(status.code(), std::os::unix::process::ExitStatusExt::signal(&status)) {
                Ok(()) => true,
                Err(e) => {
                    tracing::warn!(error = %e, "the run journal could not record the end of the command");
                    false
                }
            },
            None => false,
        };
        // A lost cluster session is not a state home that may take writes again: no retries.
        let bound = steps::settle_retry(fenced.is_some(), !problems.is_empty(), self.release_retry);
        if role == Role::RawWorking
            && let Err(e) = retrying(bound, "settle the directory lease", || lease.update(Phase::Settled, None))
        {
            problems.push(e);
        }
        if let Some(admission) = admission.as_mut()
            && let Err(e) = retrying(bound, "settle the export admission", || admission.settle_helper())
        {
            problems.push(e);
        }
        // The session may have lapsed while the leases were settled: nothing is published then.
        let succeeded = match cluster::lapsed(host, fenced.as_ref()) {
            Some(lost) if succeeded && role == Role::BundleStage => {
                lock_lost.get_or_insert_with(|| lost.to_string());
                problems.push(lost);
                false
            }
            _ => succeeded,
        };
        let mut published = false;
        match (steps::stage_end(role, succeeded), &output) {
            (Some(StageEnd::Publish), Some(output)) => match host.publish_stage(&dir, output) {
                Ok(()) => published = true,
                Err(e) => problems.push(e),
            },
            (Some(StageEnd::Remove), _) => {
                if let Ok(claim) = lease.claim()
                    && let Err(e) = host.workspace().remove_tree(&claim.path, &claim.directory_identity)
                {
                    problems.push(e.into());
                }
            }
            _ => {}
        }
        if problems.is_empty() {
            // The directory first: a waiter for the admission may want the same directory
            // (the next run of the same job), and must find it free once it has its turn.
            if let Err(e) = retrying(bound, "release the directory lease", || lease.release()) {
                problems.push(e);
            }
            if let Some(admission) = admission.as_mut()
                && let Err(e) = retrying(bound, "release the export admission", || admission.release())
            {
                problems.push(e);
            }
        }
        let mut marker = None;
        if !problems.is_empty() {
            if !journaled
                && role == Role::RawWorking
                && let Ok(claim) = lease.claim()
            {
                // The state home took no write at all: the finish is marked beside the
                // directory, where the workspace may still take one (docs/deviations.md 19).
                let path = proclease_core::directory_leases::finished_marker(&claim);
                match host.workspace().create_private_directory(&path) {
                    Ok(_) => marker = Some(PathBuf::from(path)),
                    Err(e) => tracing::warn!(error = %e, "the finish of the command could not be marked beside its directory either"),
                }
            }
            // What could not be settled or released stays exactly as it is, for the next
            // acquire or recovery to judge: the handles are left, not released by their drop.
            if let Some(admission) = admission.take() {
                admission.leave();
            }
            lease.leave();
        }
        if problems.is_empty() {
            forget_journal(&journal);
            // Nothing names this run any more: its witnesses have nothing left to prove.
            host.retire();
        }
        let mut unreleased = steps::unreleased(!problems.is_empty(), &plan, succeeded, published, journaled);
        if let Some(unreleased) = unreleased.as_mut() {
            unreleased.marker = marker;
        }
        Ok(Finished { status, stragglers, containment: tree.containment().clone(), problems, unreleased, interrupted, lock_lost })
    }
}

/// What a lease creation cut short by a signal may have left of this process's work on `dir`:
/// its creation intents (`docs/deviations.md` 27), read without the collection's lock (the
/// protocols' `creation_intents_left`, which every host's supervisor runs), each worded for
/// [`Refusal::InterruptedLeavingClaims`].
fn creation_left(host: &Host, dir: &Path) -> Vec<String> {
    let Some(path) = dir.to_str() else { return Vec::new() };
    host.store().protocol().creation_intents_left(path, &host.state_home().display().to_string())
}

/// `error`, or, when it is the signal's ([`Refusal::Interrupted`]) and something could not be
/// undone in the signal's grace — what `left` names, or the creation intent of `dir` that the
/// lease's creation recorded ([`creation_left`]) — the refusal that says so
/// ([`Refusal::InterruptedLeavingClaims`]): never "nothing is left behind" when something is.
fn leaving(host: &Host, dir: &Path, error: Error, mut left: Vec<String>) -> Error {
    match error {
        Error::Refused(Refusal::Interrupted { signal }) => {
            left.splice(0..0, creation_left(host, dir));
            if left.is_empty() { Refusal::Interrupted { signal }.into() } else { Refusal::InterruptedLeavingClaims { signal, left }.into() }
        }
        other => other,
    }
}

/// Starts the run journal's entry for `lease` (none on a host without a journal).
///
/// Errors: the entry cannot be written, or the journal could not be opened ([`Error::File`]):
/// the run must not start, since a crash after its command finished would then look like a
/// crashed start and its results would not be kept.
fn start_journal(host: &Host, lease: &mut DirectoryLease) -> Result<Option<JournalEntry>, Error> {
    let Some(journal) = host.process_identity().run_journal() else {
        return match host.process_identity().run_journal_unavailable() {
            Some(reason) => Err(Error::File { path: host.state_home().join(".proclease/runs"), message: format!("cannot start the run journal: {reason}") }),
            None => Ok(None),
        };
    };
    let claim = lease.claim()?;
    journal
        .begin(&claim.id, &claim.directory_identity)
        .map(Some)
        .map_err(|e| Error::File { path: host.state_home().join(".proclease/runs").join(format!("{}.run", claim.id)), message: format!("cannot start the run journal: {e}") })
}

/// Runs `operation` until it succeeds or `bound` has passed (pauses 50 ms doubling to 1 s),
/// saying once (a warning) that it is retrying. The operations retried are compare-and-swap
/// writes of this run's own records: a retry after a failure that left the record unchanged
/// repeats the same write, and one after a change it cannot see fails the swap.
fn retrying<T>(bound: Duration, what: &str, mut operation: impl FnMut() -> Result<T, Error>) -> Result<T, Error> {
    let start = std::time::Instant::now();
    let mut pause = Duration::from_millis(50);
    let mut told = false;
    loop {
        match operation() {
            Ok(value) => return Ok(value),
            Err(error) if start.elapsed() + pause < bound => {
                if !told {
                    tracing::warn!(error = %error, retry_for_ms = bound.as_millis() as u64, "cannot {what} yet; retrying");
                    told = true;
                }
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_secs(1));
            }
            Err(error) => return Err(error),
        }
    }
}

/// Runs `command` as the containment host of an invocation lease (§6B): acquires the lease for
/// `identity` and `run_id` (catalog lock, admission rules), starts the command holding a spawn
/// witness, records it (`host-starting` → `host-active`), waits, records the cleanup
/// (`cleanup-complete` once it was reaped; `cleanup-unsafe` when waiting failed) and releases.
///
/// Errors (before the command ran): the acquire's ([`Error::Lease`]: the plugin changed or was
/// disabled, a blocking lease, the catalog lock); [`Refusal::Unstartable`]. After it ran, the
/// problems are in [`Finished::problems`] (the lease then stays for `invocations repair`).
pub fn run_plugin_host(
    host: &Host,
    identity: &proclease_core::records::portable_identity::PortableIdentity,
    run_id: &str,
    command: &mut Command,
    forward_signals: bool,
) -> Result<Finished, Error> {
    // The plugin host does not inherit the etcd password (docs/cluster.md, "Authentication").
    command.env_remove("PROCLEASE_ETCD_PASSWORD");
    let snapshot = host.acquire_invocation(identity, run_id)?;
    let mut controller = host.containment(&snapshot)?;
    let abandon = |controller: &mut crate::ContainmentController| {
        // Nothing ran: cleanup is trivially complete.
        let _ = controller.cleanup_complete();
        if let Ok(current) = controller.current() {
            let _ = host.release_invocation(&current);
        }
    };
    let launch = match Launch::prepare(host.process_identity()) {
        Ok(launch) => launch,
        Err(error) => {
            abandon(&mut controller);
            return Err(match error {
                SpawnError::Witness(e) => e.into(),
                start @ SpawnError::Start(_) => start.for_command(command),
            });
        }
    };
    let fenced = cluster::session(host);
    let dead_man = match cluster::hold_dead_man(host, fenced.as_ref()) {
        Ok(hold) => hold,
        Err(error) => {
            abandon(&mut controller);
            return Err(error);
        }
    };
    let options = BoxOptions { die_with_supervisor: fenced.is_some(), ..BoxOptions::default() };
    let mut tree = match launch.spawn_tree(command, options) {
        Ok(tree) => tree,
        Err(error) => {
            abandon(&mut controller);
            let program = command.get_program().to_string_lossy().into_owned();
            let reason = match error {
                SpawnError::Start(e) => e.to_string(),
                other => other.to_string(),
            };
            return Err(Refusal::Unstartable { command: program, reason }.into());
        }
    };
    let forwarder = if forward_signals { signals::forward() } else { None };
    if let Some(forwarder) = &forwarder {
        forwarder.started(tree.id());
    }
    let mut problems = Vec::new();
    // Record the host process before waiting on it (registered first, in cluster mode); a host
    // that already exited is reaped below.
    if let Ok(recorded) = host.process_identity().capture(u64::from(tree.id())) {
        problems.extend(cluster::register_child(fenced.as_ref(), &recorded));
        if let Err(e) = controller.host_starting(&recorded).and_then(|()| controller.host_started(&recorded)) {
            problems.push(e);
        }
    }
    // The host process and everything it started: reaped only once the box is empty.
    let waited = cluster::wait(host, fenced.as_ref(), &mut tree).and_then(|(status, mut lost)| {
        if let Some(forwarder) = &forwarder {
            forwarder.stopping();
        }
        let (finished, lost_after) = cluster::finish(host, fenced.as_ref(), &mut tree, Stragglers::default());
        lost = lost.or(lost_after);
        Ok((status, lost, finished?))
    });
    let interrupted = forwarder.as_ref().and_then(signals::Forwarder::interrupted);
    drop(forwarder);
    drop(dead_man);
    // Reaped: the host process is confirmed gone. Anything else leaves the lease unsafe.
    let cleanup = match &waited {
        Ok(_) => controller.cleanup_complete(),
        Err(_) => controller.cleanup_unsafe(),
    };
    let (status, stragglers, lock_lost) = match waited {
        Ok((status, lost, stragglers)) => {
            let lock_lost = lost.as_ref().map(ToString::to_string);
            problems.extend(lost);
            (status, stragglers, lock_lost)
        }
        Err(e) => {
            let _ = cleanup;
            return Err(Error::system(format!("waiting for the command: {e} (its lease is marked cleanup-unsafe)")));
        }
    };
    match cleanup.and_then(|()| controller.current()).and_then(|current| host.release_invocation(&current)) {
        Ok(()) if problems.is_empty() => host.retire(),
        Ok(()) => {}
        Err(e) => problems.push(e),
    }
    Ok(Finished { status, stragglers, containment: tree.containment().clone(), problems, unreleased: None, interrupted, lock_lost })
}

/// An absolute, lexically normalised path (symbolic links are not resolved: the lease refuses
/// a path that is not its own realpath).
fn absolute(path: &Path) -> Result<PathBuf, Error> {
    crate::state_home::lexical_absolute(path).map_err(|e| Error::File { path: path.to_path_buf(), message: format!("cannot resolve it: {e}") })
}

fn text(path: &Path) -> Result<String, Error> {
    path.to_str().map(String::from).ok_or_else(|| Refusal::NotUtf8 { path: path.to_path_buf() }.into())
}

fn now_ms() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_millis() as f64)
}

/// The fencing token of the export admission `host` just acquired (`admission`), and the store
/// address `proclease fence check` asks for it: the etcd revision of the admission's write in
/// cluster mode, the state home's next counter value on the file store (`file:<state home>`).
/// `None` without an admission.
///
/// Errors: the token cannot be read or handed out ([`Error::System`]): the run must not start.
fn fencing_token(host: &Host, admission: Option<&mut crate::Admission>) -> Option<Result<(i64, std::ffi::OsString), Error>> {
    if host.cluster().is_some() {
        return cluster::fencing_token(host, admission).map(|token| token.map(|token| (token, host.store_address().into())));
    }
    let admission = admission?;
    // The path as it is (a state home's path need not be UTF-8).
    let mut store = std::ffi::OsString::from(crate::api::fencing::FILE_PREFIX);
    store.push(host.state_home());
    Some(crate::api::fencing::issue_file_token(host.store(), admission).map(|token| (token, store)))
}
