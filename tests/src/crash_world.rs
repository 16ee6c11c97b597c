//! The world the crash-state and I/O-fault suites drive: one [`SimDisk`] holding a state home
//! and a workspace, a cast of simulated processes, and the lease operations of all three kinds
//! as a small alphabet ([`Op`]) that a process runs in sequence.
//!
//! The cast (pids): [`OLD`] died before the test, leaving an admission, a directory lease (with
//! its directory) and an invocation lease; [`LIVE`] holds a running directory lease whose child
//! [`LIVE_CHILD`] lives throughout; [`ACTOR`] runs the sequence (its command is
//! [`ACTOR_CHILD`], its plugin host [`ACTOR_HOST`]); [`RECOVERER`] recovers after the actor
//! crashed.

use proclease::core::admission;
use proclease::core::directory_leases::{self, Request};
use proclease::core::effects::{Clock, Entropy, InstalledPlugin};
use proclease::core::invocation_leases::{self, Controller};
use proclease::core::records::directory_lease::{self, Phase, Role};
use proclease::core::records::export_admission::Phase as AdmissionPhase;
use proclease::core::records::invocation_lease::ContainmentStatus;
use proclease::core::records::portable_identity::{self, PortableIdentity};

use crate::fakes::MemoryCatalog;
use crate::sim_disk::{Listing, SimDisk, owner};

/// The process that died before the test.
pub const OLD: u64 = 500;
/// The process whose lease must survive everything.
pub const LIVE: u64 = 200;
/// Its child, alive throughout.
pub const LIVE_CHILD: u64 = 201;
/// The process that runs the operations and crashes.
pub const ACTOR: u64 = 100;
/// The actor's command (recorded as a running lease's child).
pub const ACTOR_CHILD: u64 = 101;
/// The actor's plugin host.
pub const ACTOR_HOST: u64 = 102;
/// The process that recovers.
pub const RECOVERER: u64 = 300;

/// When the operations run (ms since the epoch).
pub const START_MS: u64 = 1_800_000_000_000;
/// How long after a crash recovery runs: past every lease's 60 s launch window.
pub const RECOVERY_DELAY_MS: u64 = 120_000;

const RUN_ID: &str = "55555555-5555-4555-8555-555555555555";
const PLUGIN: &str = "portable-test";
const OTHER_PLUGIN: &str = "other-plugin";
const A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
const C: &str = "cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc";

/// One lease operation of the actor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Export admission: acquire (taking over a dead owner's).
    AdmissionAcquire,
    /// Export admission: parent-owned → helper-launching.
    AdmissionUpdate,
    /// Export admission: release.
    AdmissionRelease,
    /// Directory lease: create the directory (as `run` does) and lease it.
    DirectoryCreate,
    /// Directory lease: the run journal's entry (`running`), then preparing → launching.
    DirectoryLaunch,
    /// Directory lease: launching → running with the child, which then writes its output and
    /// ends: the run journal records the end in place (`finished`, exit 0).
    DirectoryRun,
    /// Directory lease: release the claim (the directory stays), then forget the journal entry.
    DirectoryRelease,
    /// Invocation lease: acquire.
    InvocationAcquire,
    /// Invocation lease: parent-owned → host-starting.
    InvocationUpdate,
    /// Invocation lease: cleanup-complete, then release.
    InvocationRelease,
    /// Recovery of all three kinds (directory recovery, invocation repair with tombstones, and
    /// an admission acquire + release that takes over a dead owner's).
    Recover,
}

impl Op {
    /// The alphabet.
    pub const ALL: [Op; 11] = [
        Op::AdmissionAcquire,
        Op::AdmissionUpdate,
        Op::AdmissionRelease,
        Op::DirectoryCreate,
        Op::DirectoryLaunch,
        Op::DirectoryRun,
        Op::DirectoryRelease,
        Op::InvocationAcquire,
        Op::InvocationUpdate,
        Op::InvocationRelease,
        Op::Recover,
    ];
}

/// Deterministic entropy: the same sequence of ids in every run from the same start.
#[derive(Debug, Clone, Default)]
pub struct SeqEntropy(pub u64);

impl Entropy for SeqEntropy {
    fn random_bytes(&mut self, len: u32) -> Vec<u8> {
        self.0 += 1;
        let seed = self.0.to_be_bytes();
        (0..len as usize).map(|i| seed[i % 8] ^ (i as u8).wrapping_mul(29)).collect()
    }
}

/// A settable clock (ms).
#[derive(Debug, Clone, Copy)]
pub struct SimClock(pub u64);

impl Clock for SimClock {
    fn now_ms(&mut self) -> u64 {
        self.0
    }
}

/// What one process holds while it runs operations.
#[derive(Debug, Clone, Default)]
pub struct Session {
    admission: Option<admission::Handle>,
    directories: Vec<(String, Option<directory_leases::Handle>)>,
    invocation: Option<Controller>,
    /// An admission a recovery acquired but could not release yet (released by the next).
    recovery_admission: Option<admission::Handle>,
    /// Lease ids whose run journal entry this process began (`RunJournal::begin`).
    journaled: Vec<String>,
}

/// A disk, a clock, entropy and a catalog: everything a run needs.
#[derive(Debug, Clone)]
pub struct World {
    /// The disk.
    pub disk: SimDisk,
    /// The clock.
    pub clock: SimClock,
    /// The entropy.
    pub entropy: SeqEntropy,
    /// The catalog (not on the simulated disk: read-only here).
    pub catalog: MemoryCatalog,
}

fn identity(plugin: &str) -> PortableIdentity {
    portable_identity::parse_value(&serde_json::json!({
        "pluginId": plugin, "pluginVersion": "1.0.0", "hostApiVersion": 1, "bundleSha256": A,
        "manifestSha256": B, "adapterId": "portable-test", "transport": "provider-api",
        "surfaceId": "portable-test", "operation": "records.read", "contractVersion": 1, "descriptorSha256": C,
    }))
    .expect("fixture identity")
}

impl World {
    /// The initial world: the dead owner's three leases and the live owner's running directory
    /// lease, all durable.
    pub fn initial() -> World {
        let catalog = MemoryCatalog::default();
        for plugin in [PLUGIN, OTHER_PLUGIN] {
            catalog.state().plugins.insert(
                plugin.into(),
                InstalledPlugin { plugin_id: plugin.into(), version: "1.0.0".into(), host_api_version: 1, bundle_sha256: A.into(), manifest_sha256: B.into() },
            );
        }
        let mut world = World { disk: SimDisk::new(), clock: SimClock(START_MS - 3_600_000), entropy: SeqEntropy(1 << 40), catalog };
        let mut old = Session::default();
        world.disk.act_as(OLD);
        world.run(&mut old, OLD, Op::AdmissionAcquire).expect("old admission");
        world.run(&mut old, OLD, Op::DirectoryCreate).expect("old directory lease");
        world.disk.write_file("/ws/job-500-0/partial.out", b"half").expect("old output");
        world.acquire_invocation(&mut old, OLD, OTHER_PLUGIN).expect("old invocation lease");
        let mut live = Session::default();
        world.disk.act_as(LIVE);
        for op in [Op::DirectoryCreate, Op::DirectoryLaunch] {
            world.run(&mut live, LIVE, op).expect("live lease");
        }
        world.update_running(&mut live, LIVE, LIVE_CHILD).expect("live lease running");
        world.disk.sync_all();
        world.disk.set_dead(OLD, true);
        world.clock = SimClock(START_MS);
        world
    }

    /// An independent copy.
    pub fn fork(&self) -> World {
        World { disk: self.disk.fork(), clock: self.clock, entropy: self.entropy.clone(), catalog: self.catalog.clone() }
    }

    fn directory_effects<'a>(
        disk: &'a mut SimDisk,
        workspace: &'a mut SimDisk,
        processes: &'a mut crate::sim_disk::SimProcesses,
        clock: &'a mut SimClock,
        entropy: &'a mut SeqEntropy,
    ) -> directory_leases::Effects<'a> {
        directory_leases::Effects { store: disk, processes, workspace, clock, entropy }
    }

    fn acquire_invocation(&mut self, session: &mut Session, pid: u64, plugin: &str) -> Result<(), String> {
        let mut store = self.disk.clone();
        let mut processes = self.disk.processes(pid);
        let fx = invocation_leases::Effects { store: &mut store, processes: &mut processes, catalog: &mut self.catalog, clock: &mut self.clock, entropy: &mut self.entropy };
        let lease = invocation_leases::acquire(&identity(plugin), RUN_ID, fx).map_err(|e| e.to_string())?;
        session.invocation = Some(Controller::new(&lease).map_err(|e| e.to_string())?);
        Ok(())
    }

    fn update_running(&mut self, session: &mut Session, pid: u64, child: u64) -> Result<(), String> {
        let Some((path, Some(handle))) = session.directories.last_mut() else { return Ok(()) };
        let mut store = self.disk.clone();
        let mut processes = self.disk.processes(pid);
        directory_leases::update(handle, Phase::Running, Some(child as i64), &mut store, &mut processes).map_err(|e| e.to_string())?;
        let output = format!("{path}/out.txt");
        self.disk.write_file(&output, b"built").map_err(|e| format!("{e:?}"))
    }

    /// Runs `op` as process `pid` (the disk must be acting as `pid`). An operation that needs
    /// a handle the session does not hold does nothing.
    pub fn run(&mut self, session: &mut Session, pid: u64, op: Op) -> Result<(), String> {
        let mut store = self.disk.clone();
        let mut processes = self.disk.processes(pid);
        let text = |e: proclease::core::Error| e.to_string();
        match op {
            Op::AdmissionAcquire => {
                if session.admission.as_ref().is_some_and(|h| !h.released) {
                    return Ok(());
                }
                session.admission = Some(admission::acquire(&mut store, &mut processes, &mut self.entropy).map_err(text)?);
            }
            Op::AdmissionUpdate => {
                if let Some(handle) = session.admission.as_mut().filter(|h| !h.released && h.phase() == AdmissionPhase::ParentOwned) {
                    admission::begin_helper_launch(handle, &mut store, &mut self.entropy).map_err(text)?;
                }
            }
            Op::AdmissionRelease => {
                if let Some(handle) = session.admission.as_mut() {
                    admission::release(handle, &mut store).map_err(text)?;
                }
            }
            Op::DirectoryCreate => {
                let path = format!("/ws/job-{pid}-{}", session.directories.len());
                // As `run` does: the lease creates its directory, recording the intent first.
                let request = Request { role: Role::RawWorking, path: path.clone(), output_root: None, recover_after_ms: (self.clock.0 + 60_000) as f64, now_ms: None };
                let mut workspace = self.disk.clone();
                let fx = Self::directory_effects(&mut store, &mut workspace, &mut processes, &mut self.clock, &mut self.entropy);
                let handle = directory_leases::create_with_directory(&request, fx).map_err(text)?;
                session.directories.push((path, Some(handle)));
            }
            Op::DirectoryLaunch => {
                if let Some((_, Some(handle))) = session.directories.last_mut()
                    && !handle.released
                    && handle.claim.phase == Phase::Preparing
                {
                    // As the supervisor does: the run journal's entry first, while the state
                    // home takes writes; a run whose journal cannot start does not start.
                    if !session.journaled.contains(&handle.claim.id) {
                        self.disk.journal_begin(&handle.claim.id, &handle.claim.directory_identity)?;
                        session.journaled.push(handle.claim.id.clone());
                    }
                    directory_leases::update(handle, Phase::Launching, None, &mut store, &mut processes).map_err(text)?;
                }
            }
            Op::DirectoryRun => {
                if session.directories.last().is_some_and(|(_, h)| h.as_ref().is_some_and(|h| !h.released && h.claim.phase == Phase::Launching)) {
                    self.update_running(session, pid, ACTOR_CHILD)?;
                    // The command (and its whole tree) ended with status 0: the journal records
                    // it in place. A failure is the supervisor's warning, not the run's error
                    // (`Unreleased::journaled` false: `run` then prints `recover --keep`).
                    if let Some((_, Some(handle))) = session.directories.last()
                        && session.journaled.contains(&handle.claim.id)
                    {
                        let _ = self.disk.journal_finish(&handle.claim.id, 0);
                    }
                }
            }
            Op::DirectoryRelease => {
                if let Some((_, Some(handle))) = session.directories.last_mut() {
                    directory_leases::release(handle, &mut store).map_err(text)?;
                    if let Some(at) = session.journaled.iter().position(|id| *id == handle.claim.id) {
                        self.disk.journal_forget(&handle.claim.id);
                        session.journaled.remove(at);
                    }
                }
            }
            Op::InvocationAcquire => {
                if session.invocation.is_none() {
                    self.acquire_invocation(session, pid, PLUGIN)?;
                }
            }
            Op::InvocationUpdate => {
                if let Some(controller) = session.invocation.as_mut()
                    && controller.current.record.containment.as_ref().is_some_and(|c| c.status == ContainmentStatus::ParentOwned)
                {
                    controller.host_starting(owner(ACTOR_HOST), &mut store, &mut self.catalog).map_err(text)?;
                }
            }
            Op::InvocationRelease => {
                if let Some(controller) = session.invocation.as_mut() {
                    controller.cleanup_complete(&mut store, &mut self.catalog).map_err(text)?;
                    invocation_leases::release(&controller.current, &mut store, &mut self.catalog).map_err(text)?;
                    session.invocation = None;
                }
            }
            Op::Recover => self.recover_in(session, pid)?,
        }
        Ok(())
    }

    /// Recovery of all three kinds as process `pid`: directory leases (at the clock),
    /// invocation repair with tombstone recovery, and an admission acquire + release (which is
    /// how a dead owner's admission is taken over); an admission that is active or cannot be
    /// proven dead is left, as the reference leaves it.
    pub fn recover(&mut self, pid: u64) -> Result<(), String> {
        self.recover_in(&mut Session::default(), pid)
    }

    /// [`World::recover`] within a session: an admission the last recovery of the session
    /// took over but could not release is released first.
    pub fn recover_in(&mut self, session: &mut Session, pid: u64) -> Result<(), String> {
        let mut store = self.disk.clone();
        let mut workspace = self.disk.clone();
        let mut processes = self.disk.processes(pid);
        let text = |e: proclease::core::Error| e.to_string();
        let now = self.clock.0 as f64;
        let fx = Self::directory_effects(&mut store, &mut workspace, &mut processes, &mut self.clock, &mut self.entropy);
        directory_leases::recover(Some(now), fx).map_err(text)?;
        directory_leases::recover_creations(&mut store, &mut processes, &mut workspace, false).map_err(text)?;
        invocation_leases::repair(true, &mut store, &mut processes, &mut self.catalog, &mut |_, _| {}).map_err(text)?;
        if let Some(handle) = session.recovery_admission.as_mut() {
            admission::release(handle, &mut store).map_err(text)?;
            session.recovery_admission = None;
        }
        match admission::acquire(&mut store, &mut processes, &mut self.entropy) {
            Ok(handle) => {
                let handle = session.recovery_admission.insert(handle);
                admission::release(handle, &mut store).map_err(text)?;
                session.recovery_admission = None;
            }
            Err(error) => {
                let message = error.to_string();
                if !(message.ends_with("another export is active") || message.ends_with("prior export owner cannot be inspected safely")) {
                    return Err(message);
                }
            }
        }
        Ok(())
    }
}

/// The directory leases among the records of `listing`: (file path, claim).
pub fn directory_claims(listing: &Listing) -> Vec<(String, directory_lease::DirectoryLease)> {
    let prefix = format!("/home/{}/", directory_leases::DIRECTORY);
    listing
        .files
        .iter()
        .filter_map(|(path, bytes)| {
            let name = path.strip_prefix(&prefix)?;
            let text = std::str::from_utf8(bytes).ok()?;
            Some((path.clone(), directory_lease::parse_file(text, name).ok()?.record))
        })
        .collect()
}

/// The directory-creation intents among the records of `listing`: (creator pid, created paths).
pub fn creation_intents(listing: &Listing) -> Vec<(u64, Vec<String>)> {
    let prefix = format!("/home/{}/", directory_leases::INTENTS);
    listing
        .files
        .iter()
        .filter_map(|(path, bytes)| {
            let name = path.strip_prefix(&prefix)?;
            let intent = proclease::core::records::creation_intent::parse_file(std::str::from_utf8(bytes).ok()?, name).ok()?.record;
            Some((intent.owner.pid, intent.created.into_iter().map(|(p, _)| p).collect()))
        })
        .collect()
}
