//! The interleaving explorer: two or three simulated processes run the real lease operations of
//! `proclease-core` (admission, directory leases with their creation intents, recovery,
//! invocation leases and repair) over one shared [`SimDisk`], under [shuttle]'s deterministic
//! runtime. Every effect call (a store read or compare-and-swap, a workspace call, a probe of a
//! process, the catalog lock) is a scheduling point, and at every one of them a process may
//! crash: it never takes another effect, its kernel locks are released and the process table
//! says it is dead.
//!
//! [`BoundedDfs`] is a shuttle [`Scheduler`] that enumerates every schedule with at most `k`
//! preemptions (iterative context bounding, Musuvathi and Qadeer, PLDI 2007: most concurrency
//! bugs need two) and every crash point; a crash is the run of a dedicated task ([`CRASHER`]),
//! so a failing schedule replays with `shuttle::replay` like any other. The invariants
//! (`docs/reliability.md`, "Interleavings") are checked after every effect and at the end of
//! every execution, where every process is dead and two recoveries run.
//!
//! What a step is: one call of the traits in `proclease_core::effects`, carried out atomically
//! on the simulated disk. The host's implementation of each call is several system calls; those
//! are covered by the crash-state suite (`tests/tests/crash_states.rs`), which tears every call
//! at every system call.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex as StdMutex, MutexGuard as StdGuard, OnceLock};

use proclease::core::admission;
use proclease::core::digest::sha256_hex;
use proclease::core::directory_leases::{self, MightClaim, Request};
use proclease::core::effects::{BatchStatus, Catalog, CollectionIdentity, CollectionSnapshot, DirectoryFacts, Failure, FinishedRun, InstalledPlugin, Processes, Store, Workspace};
use proclease::core::invocation_leases::{self, Controller};
use proclease::core::liveness::OwnerFacts;
use proclease::core::records::directory_lease::{self, Phase, Role};
use proclease::core::records::export_admission::Phase as AdmissionPhase;
use proclease::core::records::invocation_lease::ContainmentStatus;
use proclease::core::records::{DirectoryIdentity, Owner, portable_identity};
use shuttle::scheduler::{Schedule, Scheduler, Task, TaskId};

use crate::crash_world::{RECOVERY_DELAY_MS, START_MS, SeqEntropy, SimClock};
use crate::sim_disk::{SimDisk, SimProcesses, owner};

/// The name of the task whose run crashes the process that reached a step just before it.
pub const CRASHER: &str = "crash";
/// The prefix of a simulated process's task name.
const PROCESS: &str = "process-";

std::thread_local! {
    /// Whether the process that reached a scheduling point is about to take an effect that
    /// changes something (a write, a removal, a lock). Only there is a crash explored: a crash
    /// before a read is the same as a crash before the next change, since a process's reads
    /// change nothing another can see. (Shuttle runs an execution's tasks and the scheduler on
    /// the test's thread.)
    static AT_CRASH_POINT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Depth-first enumeration of every schedule with at most `preemption_bound` preemptions (a
/// switch away from a process that could go on), and of every crash point when the test spawns
/// the [`CRASHER`]: choosing it is free of preemptions. Deterministic: the same test explores the
/// same schedules in the same order.
#[derive(Debug)]
pub struct BoundedDfs {
    preemption_bound: usize,
    max_executions: Option<usize>,
    executions: usize,
    levels: Vec<Level>,
    step: usize,
    preemptions: usize,
}

#[derive(Debug)]
struct Level {
    choices: Vec<TaskId>,
    index: usize,
}

impl BoundedDfs {
    /// Every schedule with at most `preemption_bound` preemptions, or the first
    /// `max_executions` of them.
    pub fn new(preemption_bound: usize, max_executions: Option<usize>) -> Self {
        BoundedDfs { preemption_bound, max_executions, executions: 0, levels: Vec::new(), step: 0, preemptions: 0 }
    }

    fn choices(&self, runnable: &[&Task], current: Option<TaskId>) -> Vec<TaskId> {
        let name = |t: &Task| t.name().unwrap_or_default();
        let crasher: Option<TaskId> = runnable.iter().find(|t| name(t) == CRASHER).map(|t| t.id());
        let processes: Vec<TaskId> = runnable.iter().filter(|t| name(t).starts_with(PROCESS)).map(|t| t.id()).collect();
        let others: Vec<TaskId> = runnable.iter().filter(|t| name(t) != CRASHER && !name(t).starts_with(PROCESS)).map(|t| t.id()).collect();
        let current_task = current.and_then(|c| runnable.iter().find(|t| t.id() == c));
        match current_task {
            // The main task spawning or a finished crasher: no choice to explore there.
            Some(task) if !name(task).starts_with(PROCESS) => vec![task.id()],
            // A process reached a step: it goes on, crashes, or (with budget left) another runs.
            Some(task) => {
                let mut choices = vec![task.id()];
                choices.extend(crasher.filter(|_| AT_CRASH_POINT.with(|at| at.get())));
                if self.preemptions < self.preemption_bound {
                    choices.extend(processes.iter().copied().filter(|id| *id != task.id()));
                }
                choices
            }
            // The last task blocked or ended: any process may run, at no cost. The crasher only
            // at the very end, once nothing else can.
            None if !processes.is_empty() => processes,
            None if !others.is_empty() => others,
            None => crasher.into_iter().collect(),
        }
    }

    /// How many executions were started.
    pub fn executions(&self) -> usize {
        self.executions
    }
}

impl Scheduler for BoundedDfs {
    fn new_execution(&mut self) -> Option<Schedule> {
        if self.max_executions.is_some_and(|max| self.executions >= max) {
            return None;
        }
        if self.executions > 0 {
            while self.levels.last().is_some_and(|level| level.index + 1 >= level.choices.len()) {
                self.levels.pop();
            }
            self.levels.last_mut()?.index += 1;
        }
        self.executions += 1;
        self.step = 0;
        self.preemptions = 0;
        Some(Schedule::new(0))
    }

    fn next_task(&mut self, runnable: &[&Task], current: Option<TaskId>, _is_yielding: bool) -> Option<TaskId> {
        let running = current.filter(|c| runnable.iter().any(|t| t.id() == *c));
        let chosen = if self.step < self.levels.len() {
            let level = &self.levels[self.step];
            level.choices[level.index]
        } else {
            let choices = self.choices(runnable, running);
            let first = *choices.first()?;
            self.levels.push(Level { choices, index: 0 });
            first
        };
        let is_crasher = runnable.iter().any(|t| t.id() == chosen && t.name().as_deref() == Some(CRASHER));
        if running.is_some_and(|c| c != chosen) && !is_crasher {
            self.preemptions += 1;
        }
        self.step += 1;
        Some(chosen)
    }

    fn next_u64(&mut self) -> u64 {
        0
    }
}

/// One simulated process's operation (what `run`, an exporter, a plugin host or `recover` does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    /// Export admission: acquire (taking over a dead owner's).
    AdmissionAcquire,
    /// Export admission: parent-owned → helper-launching.
    AdmissionHelper,
    /// Export admission: release.
    AdmissionRelease,
    /// Lease a directory the lease creates, at this path (`None`: `/ws/job-<pid>-<n>`).
    Create(Option<&'static str>),
    /// The run journal's entry, then preparing → launching.
    Launch,
    /// launching → running with the command (`<pid> + 1`), which writes `out.txt` and ends:
    /// the journal records the end.
    Run,
    /// Release the directory lease (the directory stays), then forget the journal entry.
    Release,
    /// Invocation lease: acquire.
    InvocationAcquire,
    /// Invocation lease: parent-owned → host-starting.
    InvocationHost,
    /// Invocation lease: cleanup-complete, then release.
    InvocationRelease,
    /// Recovery of all three kinds, as `proclease recover` runs it: the four below, in order.
    Recover,
    /// Directory-lease recovery (§6A.6).
    RecoverDirectories,
    /// Finishing the creation intents of dead creators.
    RecoverCreations,
    /// Invocation repair with tombstone recovery (§6B.9).
    RepairInvocations,
    /// Taking over a dead owner's admission: acquire, then release (§6A.5).
    TakeOverAdmission,
}

/// A directory of the workspace, as the explorer follows it.
#[derive(Debug, Clone)]
struct Tracked {
    /// The process whose creation intent or lease claims it, until it releases the lease.
    claimed_by: Option<u64>,
    /// Its command's process, while a lease records one.
    child: Option<u64>,
    /// Why it must stay whatever happens to its creator: its lease was released or its command
    /// finished (its results).
    kept: Option<&'static str>,
}

/// What the explorer knows beside the disk: who is running, who crashed, who believes it holds
/// what, and every directory's creator.
#[derive(Debug, Default, Clone)]
struct Book {
    running: BTreeSet<u64>,
    crashed: BTreeSet<u64>,
    last_actor: Option<u64>,
    admission_holders: BTreeSet<u64>,
    directories: BTreeMap<String, Tracked>,
    catalog_holder: Option<(u64, usize)>,
    leasing_holder: Option<u64>,
    trace: Vec<String>,
}

/// The shared world of one execution: the disk, the process table, the kernel locks, and the
/// explorer's book.
#[derive(Debug)]
pub struct World {
    disk: SimDisk,
    book: StdMutex<Book>,
    /// Waiters for the lease-creation lock: signalled when it is released or its holder dies.
    leasing: OnceLock<(shuttle::sync::Mutex<()>, shuttle::sync::Condvar)>,
    plugins: BTreeMap<String, InstalledPlugin>,
    /// The process that lives throughout and holds a running directory lease (its child too).
    pub live: Option<u64>,
    /// The store path of the entry of [`Start::Undecided`], which a person sets aside before the
    /// final recoveries (as its refusal says to).
    undecided: Option<String>,
}

/// What the world holds when an execution starts, besides [`LIVE`]'s running lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// Nothing else.
    Live,
    /// The dead [`OLD`]'s admission, directory lease (with `partial.out` in its directory
    /// `/ws/job-500-0`) and invocation lease, which every recovery looks at.
    DeadOwner,
    /// An entry of the lease collection that is not a valid lease but names `/ws/job-100-0`,
    /// the directory process 100 leases first (a newer writer's lease of [`LIVE`]'s: a field
    /// this version does not know) — [`MightClaim::Path`].
    Undecided,
}

/// The name of the [`Start::Undecided`] entry.
const UNDECIDED: &str = "66666666-6666-4666-8666-666666666666.json";

/// The dead owner of the initial world: an admission, a directory lease (with `partial.out` in
/// its directory `/ws/job-500-0`) and an invocation lease.
pub const OLD: u64 = 500;
/// The live owner of the initial world: a running directory lease of `/ws/job-200-0`.
pub const LIVE: u64 = 200;
/// The process that recovers at the end of every execution.
pub const FINAL: u64 = 900;
const PLUGIN: &str = "portable-test";
const RUN_ID: &str = "55555555-5555-4555-8555-555555555555";

fn identity(plugin: &str) -> portable_identity::PortableIdentity {
    let hex = |c: char| c.to_string().repeat(64);
    portable_identity::parse_value(&serde_json::json!({
        "pluginId": plugin, "pluginVersion": "1.0.0", "hostApiVersion": 1, "bundleSha256": hex('a'),
        "manifestSha256": hex('b'), "adapterId": "portable-test", "transport": "provider-api",
        "surfaceId": "portable-test", "operation": "records.read", "contractVersion": 1, "descriptorSha256": hex('c'),
    }))
    .expect("fixture identity")
}

fn lock<T>(mutex: &StdMutex<T>) -> StdGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

impl World {
    /// A world holding the live [`LIVE`]'s running lease and what `start` says, all durable: a
    /// copy of one set up once, outside any schedule.
    pub fn initial(start: Start) -> Arc<World> {
        static TEMPLATES: [OnceLock<(SimDisk, Book)>; 3] = [OnceLock::new(), OnceLock::new(), OnceLock::new()];
        let dead_owner = start == Start::DeadOwner;
        let undecided = (start == Start::Undecided).then(|| format!("{}/{UNDECIDED}", directory_leases::DIRECTORY));
        let (disk, book) = TEMPLATES[start as usize].get_or_init(|| {
            let world = World::new(SimDisk::new(), Book::default(), None);
            let old: &[Act] = if dead_owner { &[Act::AdmissionAcquire, Act::Create(None), Act::InvocationAcquire] } else { &[] };
            for (pid, acts) in [(OLD, old), (LIVE, &[Act::Create(None), Act::Launch][..])] {
                let mut process = Process::new(&world, pid, false);
                for act in acts {
                    process.act(*act).unwrap_or_else(|e| panic!("fixture {pid} {act:?}: {e}"));
                }
                if pid == LIVE {
                    // Its command is still running (it has written its output).
                    process.start_command().unwrap_or_else(|e| panic!("fixture {pid}: {e}"));
                }
            }
            if dead_owner {
                world.disk.write_file("/ws/job-500-0/partial.out", b"half").expect("old output");
            }
            if let Some(record) = &undecided {
                let listing = world.disk.listing();
                let (file, _) = crate::crash_world::directory_claims(&listing).into_iter().find(|(_, c)| c.owner.pid == LIVE).expect("the live lease");
                let mut value: serde_json::Value = serde_json::from_slice(&listing.files[&file]).expect("a lease as JSON");
                value["path"] = "/ws/job-100-0".into();
                value["writtenBy"] = "proclease 9".into();
                world.disk.write_file(&format!("/home/{record}"), value.to_string().as_bytes()).expect("the undecided entry");
            }
            world.disk.sync_all();
            for pid in [OLD, OLD + 1, OLD + 2] {
                world.disk.set_dead(pid, true);
            }
            let mut book = lock(&world.book).clone();
            book.trace.clear();
            (world.disk.clone(), book)
        });
        World::new(disk.fork(), book.clone(), undecided)
    }

    fn new(disk: SimDisk, book: Book, undecided: Option<String>) -> Arc<World> {
        let plugins = BTreeMap::from([(
            PLUGIN.to_string(),
            InstalledPlugin { plugin_id: PLUGIN.into(), version: "1.0.0".into(), host_api_version: 1, bundle_sha256: "a".repeat(64), manifest_sha256: "b".repeat(64) },
        )]);
        Arc::new(World { disk, book: StdMutex::new(book), leasing: OnceLock::new(), plugins, live: Some(LIVE), undecided })
    }

    /// The lease-creation lock's wait queue (shuttle's primitives exist only inside an
    /// execution).
    fn leasing(&self) -> &(shuttle::sync::Mutex<()>, shuttle::sync::Condvar) {
        self.leasing.get_or_init(|| (shuttle::sync::Mutex::new(()), shuttle::sync::Condvar::new()))
    }

    /// Wakes the waiters for the lease-creation lock, holding the queue's mutex as a condition
    /// variable's discipline asks: a waiter checks and starts waiting under it, so the wake-up
    /// cannot fall between the two.
    fn wake_lock_waiters(&self) {
        if let Some((queue, freed)) = self.leasing.get() {
            let _queue = queue.lock().unwrap_or_else(|p| p.into_inner());
            freed.notify_all();
        }
    }

    fn dead(&self, pid: u64) -> bool {
        let mut probe = self.disk.processes(FINAL);
        probe.probe(&owner(pid)).is_ok_and(|facts| facts.witness == proclease::core::liveness::WitnessState::Free)
    }

    fn note(&self, line: String) {
        if std::env::var_os("PROCLEASE_EXPLORER_TRACE").is_some() {
            eprintln!("  {line}");
        }
        lock(&self.book).trace.push(line);
    }

    /// Fails the execution (shuttle prints the schedule that replays it).
    fn violation(&self, what: String) -> ! {
        let trace = lock(&self.book).trace.join("\n  ");
        panic!("invariant violated: {what}\nsteps:\n  {trace}");
    }

    /// Crashes the process that reached a step last, if it is still running (the crasher's
    /// body): it takes no further effect; its command dies with it (a box), and the kernel
    /// drops its locks.
    pub fn crash_last_actor(&self) {
        let victim = {
            let mut book = lock(&self.book);
            let Some(pid) = book.last_actor.filter(|pid| book.running.contains(pid)) else { return };
            book.crashed.insert(pid);
            book.trace.push(format!("{pid}: CRASH"));
            pid
        };
        for pid in [victim, victim + 1, victim + 2] {
            self.disk.set_dead(pid, true);
        }
        self.wake_lock_waiters();
    }

    /// After a change: no directory is claimed by two leases, nor by a lease and an entry that
    /// is not a valid lease but names it ([`MightClaim::Path`]).
    fn check_claims(&self, written: &str) {
        if !written.starts_with(directory_leases::DIRECTORY) {
            return;
        }
        let listing = self.disk.listing();
        let claims = crate::crash_world::directory_claims(&listing);
        for (i, (path_a, a)) in claims.iter().enumerate() {
            for (path_b, b) in &claims[i + 1..] {
                if a.path == b.path || a.directory_identity == b.directory_identity {
                    self.violation(format!("{} is claimed by two leases: {path_a} ({}) and {path_b} ({})", a.path, a.owner.pid, b.owner.pid));
                }
            }
        }
        let prefix = format!("/home/{}/", directory_leases::DIRECTORY);
        for (entry, bytes) in &listing.files {
            let Some(name) = entry.strip_prefix(&prefix).filter(|n| !n.contains('/') && !n.starts_with('.')) else { continue };
            let text = String::from_utf8_lossy(bytes);
            if directory_lease::parse_file(&text, name).is_ok() {
                continue;
            }
            if let MightClaim::Path(named) = MightClaim::of_text(&text)
                && let Some((path_a, a)) = claims.iter().find(|(_, a)| a.path == named)
            {
                self.violation(format!("{named} is claimed by {path_a} ({}) and named by {entry}, which is not a valid lease", a.owner.pid));
            }
        }
    }

    /// After `remover` removed the lease record at `path` holding `record`: unless the remover
    /// is its owner, the owner and every process the record names as started by it (a helper,
    /// a command, a plugin host) are dead — a takeover only from owners proven gone.
    fn check_takeover(&self, remover: u64, path: &str, record: &str) {
        let Ok(value) = serde_json::from_str::<serde_json::Value>(record) else { return };
        let pid = |pointer: &str| value.pointer(pointer).and_then(serde_json::Value::as_u64);
        if pid("/owner/pid") == Some(remover) {
            return;
        }
        for pointer in ["/owner/pid", "/helperOwner/pid", "/childOwner/pid", "/containment/host/pid"] {
            if let Some(alive) = pid(pointer).filter(|p| !self.dead(*p)) {
                self.violation(format!("{remover} removed {path} while {alive} ({pointer}) is alive"));
            }
        }
    }

    /// Before `remover` removes `path` (and all below it): no directory in it is claimed by
    /// another live process or used by a live command, and `path` itself was not kept (a
    /// released or finished run's directory). A kept directory *inside* `path` goes with it: the
    /// directory of a lease whose owner is gone is scratch, whatever runs nested in it left
    /// (`docs/deviations.md` 24).
    fn check_removal(&self, remover: u64, path: &str) {
        let victims: Vec<(String, Tracked)> =
            lock(&self.book).directories.iter().filter(|(p, _)| *p == path || p.starts_with(&format!("{path}/"))).map(|(p, t)| (p.clone(), t.clone())).collect();
        for (dir, tracked) in victims {
            if let Some(why) = tracked.kept.filter(|_| dir == path) {
                self.violation(format!("{remover} removed {dir}, which stays: {why}"));
            }
            // Only a directory's own claimant may remove it while it lives (undoing a creation
            // that failed); nothing claimed by a live process goes with an enclosing directory.
            if let Some(owner) = tracked.claimed_by.filter(|o| (*o != remover || dir != path) && !self.dead(*o)) {
                self.violation(format!("{remover} removed {dir} while its owner {owner} is alive"));
            }
            if let Some(child) = tracked.child.filter(|c| !self.dead(*c)) {
                self.violation(format!("{remover} removed {dir} while its command {child} is alive"));
            }
        }
    }

    /// After `pid` wrote the record at `path` holding `content`: a directory lease makes its
    /// directory `pid`'s — an empty directory that was there already (a released run's, kept
    /// as its result) too, which the host leases again (`Host::lease_new_directory`).
    fn leased(&self, pid: u64, path: &str, content: &str) {
        let Some(name) = path.strip_prefix(&format!("{}/", directory_leases::DIRECTORY)) else { return };
        let Ok(parsed) = directory_lease::parse_file(content, name) else { return };
        let mut book = lock(&self.book);
        let tracked = book.directories.entry(parsed.record.path).or_insert(Tracked { claimed_by: None, child: None, kept: None });
        tracked.claimed_by = Some(pid);
        tracked.kept = None;
    }

    fn removed(&self, path: &str) {
        lock(&self.book).directories.retain(|p, _| p != path && !p.starts_with(&format!("{path}/")));
    }

    /// At the end of an execution, every process dead: two recoveries by a fresh process leave
    /// no lease of the dead (a helper-launching admission needs a reboot, §6A.5), no intent,
    /// temporary or quarantine; a third changes nothing; kept directories and the live owner's
    /// stay.
    pub fn check_end(self: &Arc<World>) {
        if let Some(pid) = lock(&self.book).running.first().copied() {
            self.violation(format!("{pid} never finished"));
        }
        // A lease kept because a lease inside its directory was still there when it was looked
        // at goes in the next recovery, once that one is recovered (docs/deviations.md 23): two
        // passes at most.
        let mut recoverer = Process::new(self, FINAL, false);
        if let Some(record) = &self.undecided {
            // Set aside by its writer, as recovery's refusal asks, once no run uses what it names.
            let bytes = self.disk.listing().files.get(&format!("/home/{record}")).cloned().unwrap_or_default();
            Process::new(self, LIVE, false)
                .fx
                .remove_if_unchanged(record, &sha256_hex(&bytes))
                .unwrap_or_else(|f| self.violation(format!("setting aside {record}: {}", f.message)));
        }
        for pass in ["first", "second"] {
            if let Err(error) = recoverer.act(Act::Recover) {
                self.violation(format!("the {pass} final recovery failed: {error}"));
            }
        }
        let after = self.disk.listing();
        if !after.temporaries().is_empty() || !after.quarantines().is_empty() {
            self.violation(format!("left after recovery: {:?} {:?}", after.temporaries(), after.quarantines()));
        }
        for (path, bytes) in after.records() {
            let text = String::from_utf8_lossy(bytes);
            let live = self.live.is_some_and(|live| text.contains(&format!("\"pid\":{live},")));
            let reboot = path.ends_with("export-admission/active.json") && text.contains("\"phase\":\"helper-launching\"");
            if !live && !reboot {
                self.violation(format!("{path} of a dead owner survived recovery: {text}"));
            }
        }
        for (dir, tracked) in lock(&self.book).directories.iter() {
            if tracked.kept.is_some() && !after.directories.contains_key(dir) {
                self.violation(format!("{dir} was kept but is gone"));
            }
        }
        if let Some(live) = self.live
            && !after.files.contains_key(&format!("/ws/job-{live}-0/out.txt"))
        {
            self.violation("the live owner's output is gone".into());
        }
        if let Err(error) = recoverer.act(Act::Recover) {
            self.violation(format!("the third final recovery failed: {error}"));
        }
        if self.disk.listing() != after {
            self.violation("a recovery after the two final ones changed the disk".into());
        }
    }
}

/// The effects of one simulated process: every trait of `proclease_core::effects` the
/// operations use, each call one step (a scheduling point where a crash may strike). Clones
/// act as the same process.
#[derive(Clone)]
pub struct Effector {
    world: Arc<World>,
    pid: u64,
    /// Steps are scheduling points (not in the set-up and the final recovery).
    scheduled: bool,
    processes: SimProcesses,
}

impl Effector {
    fn crashed(&self) -> bool {
        lock(&self.world.book).crashed.contains(&self.pid)
    }

    /// Before every effect: a scheduling point (a crash point too when the effect `changes`
    /// something); a crashed process takes no effect.
    fn step_as(&mut self, what: &str, changes: bool) -> Result<(), Failure> {
        if self.scheduled {
            lock(&self.world.book).last_actor = Some(self.pid);
            AT_CRASH_POINT.with(|at| at.set(changes));
            shuttle::thread::yield_now();
            AT_CRASH_POINT.with(|at| at.set(false));
        }
        if self.crashed() {
            return Err(Failure::io("the process crashed"));
        }
        self.world.disk.act_as(self.pid);
        self.world.note(format!("{}: {what}", self.pid));
        Ok(())
    }

    /// A step that changes something.
    fn step(&mut self, what: &str) -> Result<(), Failure> {
        self.step_as(what, true)
    }

    /// A step that only reads.
    fn read(&mut self, what: &str) -> Result<(), Failure> {
        self.step_as(what, false)
    }

    fn disk(&self) -> SimDisk {
        self.world.disk.clone()
    }
}

impl Store for Effector {
    fn read_if_present(&mut self, path: &str, max_bytes: u32) -> Result<Option<String>, Failure> {
        self.read(&format!("read {path}"))?;
        self.disk().read_if_present(path, max_bytes)
    }

    fn create_if_absent(&mut self, path: &str, content: &str) -> Result<bool, Failure> {
        self.step(&format!("create {path}"))?;
        let created = self.disk().create_if_absent(path, content);
        self.world.check_claims(path);
        if matches!(created, Ok(true)) {
            self.world.leased(self.pid, path, content);
        }
        created
    }

    fn replace_if_unchanged(&mut self, path: &str, expected_sha256: &str, content: &str) -> Result<bool, Failure> {
        self.step(&format!("replace {path}"))?;
        let replaced = self.disk().replace_if_unchanged(path, expected_sha256, content);
        if matches!(replaced, Ok(true)) && sha256_hex(content.as_bytes()) == expected_sha256 {
            self.world.violation(format!("{}: a write of {path} left its revision unchanged", self.pid));
        }
        self.world.check_claims(path);
        replaced
    }

    fn remove_if_unchanged(&mut self, path: &str, expected_sha256: &str) -> Result<bool, Failure> {
        self.step(&format!("remove {path}"))?;
        let record = self.disk().read_if_present(path, 1 << 20).ok().flatten();
        let removed = self.disk().remove_if_unchanged(path, expected_sha256);
        if matches!(removed, Ok(true))
            && let Some(record) = record
        {
            self.world.check_takeover(self.pid, path, &record);
        }
        removed
    }

    fn ensure_private_directory(&mut self, path: &str) -> Result<CollectionIdentity, Failure> {
        self.step(&format!("ensure {path}"))?;
        self.disk().ensure_private_directory(path)
    }

    fn snapshot(&mut self, path: &str, recover_orphans: bool) -> Result<Option<CollectionSnapshot>, Failure> {
        self.step_as(&format!("list {path}"), recover_orphans)?;
        self.disk().snapshot(path, recover_orphans)
    }

    fn read_batch(
        &mut self,
        path: &str,
        names: &[String],
        max_bytes_per_file: u32,
        max_total_bytes: u32,
        expected: &CollectionIdentity,
    ) -> Result<Vec<(String, BatchStatus)>, Failure> {
        self.read(&format!("read {} of {path}", names.len()))?;
        self.disk().read_batch(path, names, max_bytes_per_file, max_total_bytes, expected)
    }

    /// The lease-creation lock, a kernel lock: a waiter blocks until it is free or its holder
    /// is dead.
    fn lock_leasing(&mut self) -> Result<(), Failure> {
        self.step("lock leasing")?;
        let world = self.world.clone();
        if !self.scheduled {
            // The set-up and the final recovery run alone: nobody else can hold it.
            let mut book = lock(&world.book);
            if let Some(holder) = book.leasing_holder.filter(|h| !world.dead(*h)) {
                drop(book);
                world.violation(format!("the lease-creation lock is still held by {holder}, which is alive"));
            }
            book.leasing_holder = Some(self.pid);
            return Ok(());
        }
        let (queue, freed) = world.leasing();
        let mut wait = queue.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if self.crashed() {
                return Err(Failure::io("the process crashed"));
            }
            let holder = lock(&world.book).leasing_holder;
            match holder {
                Some(holder) if holder == self.pid => world.violation(format!("{} took the lease-creation lock twice", self.pid)),
                Some(holder) if !world.dead(holder) => {
                    world.note(format!("{}: waits for the lease-creation lock ({holder} holds it)", self.pid));
                    wait = freed.wait(wait).unwrap_or_else(|p| p.into_inner());
                }
                _ => break,
            }
        }
        lock(&world.book).leasing_holder = Some(self.pid);
        Ok(())
    }

    fn unlock_leasing(&mut self) {
        let mut book = lock(&self.world.book);
        if book.leasing_holder == Some(self.pid) {
            book.leasing_holder = None;
            drop(book);
            self.world.wake_lock_waiters();
        }
    }
}

impl Workspace for Effector {
    fn inspect(&mut self, path: &str) -> Result<Option<DirectoryFacts>, Failure> {
        self.read(&format!("inspect {path}"))?;
        self.disk().inspect(path)
    }

    fn remove_tree(&mut self, path: &str, expected: &DirectoryIdentity) -> Result<bool, Failure> {
        self.step(&format!("remove tree {path}"))?;
        let gone = self.disk().inspect(path).ok().flatten().is_some_and(|facts| facts.identity == *expected);
        if gone {
            self.world.check_removal(self.pid, path);
        }
        let removed = self.disk().remove_tree(path, expected);
        if gone && matches!(removed, Ok(true)) {
            self.world.removed(path);
        }
        removed
    }

    fn create_private_directory(&mut self, path: &str) -> Result<Vec<String>, Failure> {
        self.step(&format!("mkdir {path}"))?;
        let created = self.disk().create_private_directory(path)?;
        let mut book = lock(&self.world.book);
        for dir in &created {
            book.directories.insert(dir.clone(), Tracked { claimed_by: Some(self.pid), child: None, kept: None });
        }
        Ok(created)
    }

    fn kind(&mut self, path: &str) -> Result<proclease::core::effects::PathKind, Failure> {
        self.read(&format!("what is {path}"))?;
        self.disk().kind(path)
    }

    fn is_empty_directory(&mut self, path: &str) -> Result<bool, Failure> {
        self.read(&format!("is {path} empty"))?;
        self.disk().is_empty_directory(path)
    }

    fn remove_empty_directory(&mut self, path: &str, expected: Option<&DirectoryIdentity>) -> Result<bool, Failure> {
        self.step(&format!("rmdir {path}"))?;
        let removed = self.disk().remove_empty_directory(path, expected);
        if matches!(removed, Ok(true)) {
            self.world.check_removal(self.pid, path);
            self.world.removed(path);
        }
        removed
    }
}

impl Processes for Effector {
    fn current_boot_id(&mut self) -> Result<String, String> {
        self.processes.current_boot_id()
    }

    fn self_identity(&mut self) -> Result<Owner, String> {
        self.processes.self_identity()
    }

    fn capture(&mut self, pid: u64) -> Result<Owner, String> {
        self.read(&format!("capture {pid}")).map_err(|f| f.message)?;
        self.processes.capture(pid)
    }

    fn probe(&mut self, owner: &Owner) -> Result<OwnerFacts, String> {
        self.read(&format!("probe {}", owner.pid)).map_err(|f| f.message)?;
        self.processes.probe(owner)
    }

    fn finished_run(&mut self, lease_id: &str) -> Result<Option<FinishedRun>, String> {
        self.read("read the run journal").map_err(|f| f.message)?;
        self.processes.finished_run(lease_id)
    }

    fn forget_run(&mut self, lease_id: &str) {
        if self.step("forget a journal entry").is_ok() {
            self.processes.forget_run(lease_id);
        }
    }
}

impl Catalog for Effector {
    fn installed(&mut self, plugin_id: &str) -> Result<Option<InstalledPlugin>, String> {
        self.read("read the catalog").map_err(|f| f.message)?;
        Ok(self.world.plugins.get(plugin_id).cloned())
    }

    /// The catalog mutation lock (§5): fails fast while another live process holds it.
    fn lock(&mut self) -> Result<(), String> {
        self.step("lock the catalog").map_err(|f| f.message)?;
        let holder = lock(&self.world.book).catalog_holder;
        let depth = match holder {
            Some((holder, depth)) if holder == self.pid => depth + 1,
            Some((holder, _)) if !self.world.dead(holder) => return Err("portable plugin catalog mutation is already locked".into()),
            _ => 1,
        };
        lock(&self.world.book).catalog_holder = Some((self.pid, depth));
        Ok(())
    }

    fn unlock(&mut self) {
        let mut book = lock(&self.world.book);
        book.catalog_holder = match book.catalog_holder {
            Some((holder, depth)) if holder == self.pid && depth > 1 => Some((holder, depth - 1)),
            Some((holder, _)) if holder == self.pid => None,
            other => other,
        };
    }
}

/// A simulated process: its effects and what it holds.
pub struct Process {
    fx: Effector,
    clock: SimClock,
    entropy: SeqEntropy,
    admission: Option<admission::Handle>,
    directories: Vec<directory_leases::Handle>,
    created: usize,
    invocation: Option<Controller>,
}

impl Process {
    /// Process `pid` of `world`; `scheduled`: every step is a scheduling point.
    pub fn new(world: &Arc<World>, pid: u64, scheduled: bool) -> Process {
        let fx = Effector { world: world.clone(), pid, scheduled, processes: world.disk.processes(pid) };
        Process { fx, clock: SimClock(START_MS), entropy: SeqEntropy(pid << 40), admission: None, directories: Vec::new(), created: 0, invocation: None }
    }

    fn pid(&self) -> u64 {
        self.fx.pid
    }

    fn world(&self) -> &World {
        &self.fx.world
    }

    /// Runs the scripted acts, then exits: the process (and its command) is dead from then on.
    pub fn run_script(mut self, acts: &[Act]) {
        let pid = self.pid();
        lock(&self.world().book).running.insert(pid);
        for act in acts {
            let result = self.act(*act);
            if self.fx.crashed() {
                break;
            }
            self.world().note(format!("{pid}: {act:?} → {}", result.err().unwrap_or_else(|| "ok".into())));
        }
        lock(&self.world().book).running.remove(&pid);
        for pid in [pid, pid + 1, pid + 2] {
            self.world().disk.set_dead(pid, true);
        }
        self.world().wake_lock_waiters();
    }

    /// Records that this process holds the admission (checking that no other live process
    /// believes it does), unless it crashed on the way.
    fn holds_admission(&self) {
        if self.fx.crashed() {
            return;
        }
        let pid = self.pid();
        let mut book = lock(&self.world().book);
        let other = book.admission_holders.iter().copied().find(|p| *p != pid && book.running.contains(p) && !book.crashed.contains(p));
        if let Some(other) = other {
            drop(book);
            self.world().violation(format!("{pid} acquired the export admission while {other} still holds it"));
        }
        book.admission_holders.insert(pid);
    }

    /// `path` is a result that stays; `released`: its lease is released (it claims it no more).
    fn keep(&self, path: &str, why: &'static str, released: bool) {
        if self.fx.crashed() {
            return;
        }
        if let Some(tracked) = lock(&self.world().book).directories.get_mut(path) {
            tracked.kept = Some(why);
            if released {
                tracked.claimed_by = None;
            }
        }
    }

    /// `run`'s lease of `request` ([`directory_leases::lease_new_directory`], the production
    /// algorithm every host runs): refused while another lease claims (or may claim) its
    /// directory, before or after this one is written, or while it is not empty.
    fn lease_new(&mut self, request: &Request) -> Result<directory_leases::Handle, String> {
        let (mut store, mut processes, mut workspace) = (self.fx.clone(), self.fx.clone(), self.fx.clone());
        let fx = directory_leases::Effects { store: &mut store, processes: &mut processes, workspace: &mut workspace, clock: &mut self.clock, entropy: &mut self.entropy };
        match directory_leases::lease_new_directory(request, "/home", fx) {
            Ok(handle) => Ok(handle),
            Err(directory_leases::NewDirectoryError::Refused(refusal)) => {
                // Nothing runs in it: a lease written and given up no longer claims a directory
                // this process made (the production code released it; a crash in that release
                // leaves the claim, which the book keeps).
                if !self.fx.crashed()
                    && let Some(tracked) = lock(&self.fx.world.book).directories.get_mut(&request.path)
                    && tracked.claimed_by == Some(self.pid())
                {
                    tracked.claimed_by = None;
                }
                Err(refusal.message)
            }
            Err(directory_leases::NewDirectoryError::Failed(error)) => Err(error.to_string()),
        }
    }

    /// launching → running with the command (`pid + 1`), which writes `out.txt`: the lease's
    /// path, id and directory, or `None` when the process holds no launching lease.
    fn start_command(&mut self) -> Result<Option<(String, String, DirectoryIdentity)>, String> {
        let child = self.pid() + 1;
        let (mut store, mut processes) = (self.fx.clone(), self.fx.clone());
        let Some(handle) = self.directories.last_mut().filter(|h| !h.released && h.claim.phase == Phase::Launching) else { return Ok(None) };
        directory_leases::update(handle, Phase::Running, Some(child as i64), &mut store, &mut processes).map_err(|e| e.to_string())?;
        let (path, id, identity) = (handle.claim.path.clone(), handle.claim.id.clone(), handle.claim.directory_identity.clone());
        if let Some(tracked) = lock(&self.fx.world.book).directories.get_mut(&path) {
            tracked.child = Some(child);
        }
        self.fx.step("the command writes out.txt").map_err(|f| f.message)?;
        self.fx.world.disk.write_file(&format!("{path}/out.txt"), b"built").map_err(|f| f.message)?;
        Ok(Some((path, id, identity)))
    }

    /// Runs one act; `Err` holds the core's message. An act that needs what the process does
    /// not hold does nothing.
    pub fn act(&mut self, act: Act) -> Result<(), String> {
        let text = |e: proclease::core::Error| e.to_string();
        let (mut store, mut processes, mut workspace, mut catalog) = (self.fx.clone(), self.fx.clone(), self.fx.clone(), self.fx.clone());
        match act {
            Act::AdmissionAcquire => {
                let handle = admission::acquire(&mut store, &mut processes, &mut self.entropy).map_err(text)?;
                self.holds_admission();
                self.admission = Some(handle);
            }
            Act::AdmissionHelper => {
                if let Some(handle) = self.admission.as_mut().filter(|h| !h.released && h.phase() == AdmissionPhase::ParentOwned) {
                    admission::begin_helper_launch(handle, &mut store, &mut self.entropy).map_err(text)?;
                }
            }
            Act::AdmissionRelease => {
                if let Some(handle) = self.admission.as_mut() {
                    admission::release(handle, &mut store).map_err(text)?;
                    lock(&self.fx.world.book).admission_holders.remove(&self.fx.pid);
                }
            }
            Act::Create(path) => {
                let path = path.map(String::from).unwrap_or_else(|| format!("/ws/job-{}-{}", self.pid(), self.created));
                self.created += 1;
                let request = Request { role: Role::RawWorking, path, output_root: None, recover_after_ms: (START_MS + 60_000) as f64, now_ms: None };
                let leased = self.lease_new(&request)?;
                self.directories.push(leased);
            }
            Act::Launch => {
                if let Some(handle) = self.directories.last_mut().filter(|h| !h.released && h.claim.phase == Phase::Preparing) {
                    self.fx.step("begin the run journal").map_err(|f| f.message)?;
                    self.fx.world.disk.journal_begin(&handle.claim.id, &handle.claim.directory_identity)?;
                    directory_leases::update(handle, Phase::Launching, None, &mut store, &mut processes).map_err(text)?;
                }
            }
            Act::Run => {
                let pid = self.pid();
                if let Some((path, id, _)) = self.start_command()? {
                    // The command ends with status 0; the supervisor records the end in the
                    // journal.
                    self.fx.step("the command ends").map_err(|f| f.message)?;
                    self.fx.world.disk.set_dead(pid + 1, true);
                    self.fx.step("the journal records the end").map_err(|f| f.message)?;
                    self.fx.world.disk.journal_finish(&id, 0)?;
                    self.keep(&path, "its command finished: the directory is its result", false);
                }
            }
            Act::Release => {
                if let Some(handle) = self.directories.last_mut() {
                    directory_leases::release(handle, &mut store).map_err(text)?;
                    let (path, id) = (handle.claim.path.clone(), handle.claim.id.clone());
                    self.keep(&path, "its lease was released: the directory stays", true);
                    if self.fx.step("forget the journal entry").is_ok() {
                        self.fx.world.disk.journal_forget(&id);
                    }
                }
            }
            Act::InvocationAcquire => {
                if self.invocation.is_none() {
                    let fx = invocation_leases::Effects { store: &mut store, processes: &mut processes, catalog: &mut catalog, clock: &mut self.clock, entropy: &mut self.entropy };
                    let lease = invocation_leases::acquire(&identity(PLUGIN), RUN_ID, fx).map_err(text)?;
                    self.invocation = Some(Controller::new(&lease).map_err(text)?);
                }
            }
            Act::InvocationHost => {
                let host = owner(self.pid() + 2);
                if let Some(controller) = self.invocation.as_mut()
                    && controller.current.record.containment.as_ref().is_some_and(|c| c.status == ContainmentStatus::ParentOwned)
                {
                    controller.host_starting(host, &mut store, &mut catalog).map_err(text)?;
                }
            }
            Act::InvocationRelease => {
                if let Some(controller) = self.invocation.as_mut() {
                    controller.cleanup_complete(&mut store, &mut catalog).map_err(text)?;
                    invocation_leases::release(&controller.current, &mut store, &mut catalog).map_err(text)?;
                    self.invocation = None;
                }
            }
            Act::Recover => {
                let parts = [Act::RecoverDirectories, Act::RecoverCreations, Act::RepairInvocations, Act::TakeOverAdmission];
                let results: Vec<Result<(), String>> = parts.into_iter().map(|part| self.act(part)).collect();
                results.into_iter().collect::<Result<Vec<()>, String>>()?;
            }
            Act::RecoverDirectories => {
                // Past every lease's launch window: a launching lease of a dead owner is
                // recoverable by then.
                self.clock.0 = START_MS + RECOVERY_DELAY_MS;
                let now = self.clock.0 as f64;
                let fx = directory_leases::Effects { store: &mut store, processes: &mut processes, workspace: &mut workspace, clock: &mut self.clock, entropy: &mut self.entropy };
                directory_leases::recover(Some(now), fx).map_err(text)?;
            }
            Act::RecoverCreations => {
                directory_leases::recover_creations(&mut store, &mut processes, &mut workspace, false).map_err(text)?;
            }
            Act::RepairInvocations => {
                invocation_leases::repair(true, &mut store, &mut processes, &mut catalog, &mut |_, _| {}).map_err(text)?;
            }
            Act::TakeOverAdmission => {
                // An admission of a dead owner is taken over by acquiring and releasing it.
                match admission::acquire(&mut store, &mut processes, &mut self.entropy) {
                    Ok(mut handle) => {
                        self.holds_admission();
                        admission::release(&mut handle, &mut store).map_err(text)?;
                        lock(&self.fx.world.book).admission_holders.remove(&self.fx.pid);
                    }
                    Err(error) => {
                        let message = error.to_string();
                        if !(message.ends_with("another export is active") || message.ends_with("prior export owner cannot be inspected safely")) {
                            return Err(message);
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

/// Shuttle's configuration: failures print their schedule; each simulated process gets a
/// stack large enough for the core's JSON handling (shuttle's default is 32 KiB).
fn config() -> shuttle::Config {
    let mut config = shuttle::Config::new();
    config.failure_persistence = shuttle::FailurePersistence::Print;
    config.stack_size = 1 << 21;
    config
}

/// One scenario: the scripts of the processes that race (pids from 100 up, each `+1` its
/// command and `+2` its plugin host, so 10 apart).
#[derive(Debug, Clone)]
pub struct Scenario {
    /// Each process's acts, in order.
    pub scripts: Vec<Vec<Act>>,
    /// Whether a process may crash (at most one per execution).
    pub crashes: bool,
    /// What the world holds when the execution starts.
    pub start: Start,
}

impl Scenario {
    /// The body of one execution: the initial world, the processes (and the crasher) as shuttle
    /// threads, then the end checks.
    pub fn execution(&self) -> impl Fn() + Send + Sync + 'static {
        let scenario = self.clone();
        move || {
            let world = World::initial(scenario.start);
            let mut threads = Vec::new();
            for (i, script) in scenario.scripts.iter().enumerate() {
                let pid = 100 + 10 * i as u64;
                let process = Process::new(&world, pid, true);
                let script = script.clone();
                let thread = shuttle::thread::Builder::new().name(format!("{PROCESS}{pid}")).spawn(move || process.run_script(&script)).expect("spawn a process");
                threads.push(thread);
            }
            if scenario.crashes {
                let world = world.clone();
                threads.push(shuttle::thread::Builder::new().name(CRASHER.into()).spawn(move || world.crash_last_actor()).expect("spawn the crasher"));
            }
            for thread in threads {
                thread.join().expect("a process panicked");
            }
            world.check_end();
        }
    }

    /// Explores every schedule with at most `preemptions` preemptions (and every crash point,
    /// when the scenario crashes): the number of executions. Panics, printing the failing
    /// schedule, at the first violation.
    pub fn explore(&self, preemptions: usize) -> usize {
        let config = config();
        shuttle::Runner::new(BoundedDfs::new(preemptions, None), config).run(self.execution())
    }

    /// Replays one schedule that shuttle printed for a failure of this scenario.
    pub fn replay(&self, schedule: &str) {
        let scheduler = shuttle::scheduler::ReplayScheduler::new_from_encoded(schedule);
        shuttle::Runner::new(scheduler, config()).run(self.execution());
    }

    /// Runs `schedules` random schedules (shuttle's random scheduler, seeded) — crashes come from
    /// the crasher's random placement.
    pub fn explore_randomly(&self, schedules: usize, seed: u64) -> usize {
        let config = config();
        shuttle::Runner::new(shuttle::scheduler::RandomScheduler::new_from_seed(seed, schedules), config).run(self.execution())
    }
}
