//! The reference's stateful model test of the export admission (spec §7.2), as a proptest state
//! machine through the component: acquire, reboot, holder lifecycle steps, liveness changes and
//! stale-controller steps, over the in-memory fakes (so liveness and boots are scripted).
//!
//! Law for a later acquire: rebooted → take over; parent live → `another export is active`;
//! parent unknown → `prior export owner cannot be inspected safely`; parent dead and phase
//! parent-owned → take over; helper-active with a live helper → `another export is active`;
//! otherwise → `prior export owner cannot be inspected safely`. Refused acquires leave the file
//! identical; after every step the on-disk `{id, phase, helper present}` equals the model.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use proclease::core::admission::CLAIM_PATH;
use proclease::core::liveness::OwnerStatus;
use proclease::core::records::Owner;
use proclease::core::records::export_admission::{self, Phase};
use proclease::{Admission, Runtime};
use proclease_tests::fakes::{FakeWorld, ScriptedProcesses};
use proptest::prelude::*;

#[derive(Debug, Clone, Copy)]
enum Who {
    Parent,
    Helper,
}

#[derive(Debug, Clone, Copy)]
enum Step {
    Begin,
    Bind,
    Settle,
    Unsafe,
    Release,
}

#[derive(Debug, Clone)]
enum Command {
    Acquire,
    Reboot,
    Lifecycle(Step),
    Liveness(Who, OwnerStatus),
    Stale(usize, Step),
}

fn status() -> impl Strategy<Value = OwnerStatus> {
    prop_oneof![Just(OwnerStatus::DifferentOrDead), Just(OwnerStatus::Unknown)]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![Just(Step::Begin), Just(Step::Bind), Just(Step::Settle), Just(Step::Unsafe), Just(Step::Release)]
}

fn command() -> impl Strategy<Value = Command> {
    prop_oneof![
        3 => Just(Command::Acquire),
        1 => Just(Command::Reboot),
        6 => step().prop_map(Command::Lifecycle),
        3 => (prop_oneof![Just(Who::Parent), Just(Who::Helper)], status()).prop_map(|(w, s)| Command::Liveness(w, s)),
        3 => (0usize..8, step()).prop_map(|(i, s)| Command::Stale(i, s)),
    ]
}

const ACTIVE: &str = "Beeper Message Like Me recovery: another export is active";
const INDETERMINATE: &str = "Beeper Message Like Me recovery: prior export owner cannot be inspected safely";

/// The expected on-disk claim: `(id, phase, helper present)`.
type Disk = Option<(String, Phase, bool)>;

/// How often each outcome happened over all cases, so the test proves it exercised the law.
#[derive(Default)]
struct Coverage {
    acquired: AtomicUsize,
    took_over: AtomicUsize,
    refused_active: AtomicUsize,
    refused_indeterminate: AtomicUsize,
    reboots: AtomicUsize,
    binds: AtomicUsize,
    stale_steps: AtomicUsize,
}

struct Harness {
    coverage: Arc<Coverage>,
    world: FakeWorld,
    liveness: Arc<Mutex<HashMap<u64, OwnerStatus>>>,
    boot: Arc<Mutex<String>>,
    next_pid: u64,
    handles: Vec<Admission>,
    current: Option<usize>,
    parent: Option<Owner>,
    helper: Option<Owner>,
    phase: Phase,
    disk: Disk,
}

impl Harness {
    fn new(coverage: Arc<Coverage>) -> Self {
        let liveness: Arc<Mutex<HashMap<u64, OwnerStatus>>> = Arc::default();
        let boot = Arc::new(Mutex::new("a".repeat(64)));
        let (l, b) = (liveness.clone(), boot.clone());
        // §2.4 in miniature: another boot is dead; otherwise the scripted liveness of the pid.
        let oracle = Box::new(move |o: &Owner| {
            if o.boot_id != *b.lock().expect("boot") {
                return OwnerStatus::DifferentOrDead;
            }
            l.lock().expect("liveness").get(&o.pid).copied().unwrap_or(OwnerStatus::DifferentOrDead)
        });
        let world = FakeWorld::with_processes(ScriptedProcesses::with_oracle(&"a".repeat(64), oracle));
        Harness { coverage, world, liveness, boot, next_pid: 100, handles: Vec::new(), current: None, parent: None, helper: None, phase: Phase::ParentOwned, disk: None }
    }

    fn new_process(&mut self) -> Owner {
        self.next_pid += 1;
        let owner = Owner { pid: self.next_pid, boot_id: self.boot.lock().expect("boot").clone(), process_start_id: "c".repeat(64) };
        self.liveness.lock().expect("liveness").insert(owner.pid, OwnerStatus::ExactLiveOwner);
        owner
    }

    fn status(&self, owner: &Option<Owner>) -> OwnerStatus {
        match owner {
            Some(o) if o.boot_id == *self.boot.lock().expect("boot") => self.liveness.lock().expect("liveness").get(&o.pid).copied().unwrap_or(OwnerStatus::DifferentOrDead),
            _ => OwnerStatus::DifferentOrDead,
        }
    }

    fn on_disk(&self) -> Disk {
        let text = self.world.store.get(CLAIM_PATH)?;
        let claim = export_admission::parse_file(&text).expect("the file is always a valid canonical claim").record;
        Some((claim.id, claim.phase.expect("v2"), claim.helper_owner.is_some()))
    }

    /// An acquire by a new live process; returns the law's verdict check.
    fn acquire(&mut self, rebooted: bool) -> Result<(), TestCaseError> {
        let before = self.world.store.get(CLAIM_PATH);
        let expected: Result<(), &str> = match &self.disk {
            None => Ok(()),
            Some(_) if rebooted => Ok(()),
            Some((_, phase, _)) => match (self.status(&self.parent), phase) {
                (OwnerStatus::ExactLiveOwner, _) => Err(ACTIVE),
                (OwnerStatus::Unknown, _) => Err(INDETERMINATE),
                (_, Phase::ParentOwned) => Ok(()),
                (_, Phase::HelperActive) if self.status(&self.helper) == OwnerStatus::ExactLiveOwner => Err(ACTIVE),
                _ => Err(INDETERMINATE),
            },
        };
        let acquirer = self.new_process();
        self.world.processes.script().own = acquirer.clone();
        let runtime = Runtime::shared().expect("component");
        match (Admission::acquire(runtime, self.world.effects()), expected) {
            (Ok(mut admission), Ok(())) => {
                self.coverage.acquired.fetch_add(1, Ordering::Relaxed);
                if before.is_some() {
                    self.coverage.took_over.fetch_add(1, Ordering::Relaxed);
                }
                let claim = admission.claim().expect("claim");
                prop_assert_eq!(&claim.owner, &acquirer);
                self.disk = Some((claim.id, Phase::ParentOwned, false));
                self.handles.push(admission);
                self.current = Some(self.handles.len() - 1);
                self.parent = Some(acquirer);
                self.helper = None;
                self.phase = Phase::ParentOwned;
            }
            (Err(error), Err(message)) => {
                let counter = if message == ACTIVE { &self.coverage.refused_active } else { &self.coverage.refused_indeterminate };
                counter.fetch_add(1, Ordering::Relaxed);
                prop_assert_eq!(error.to_string(), message);
                prop_assert_eq!(self.world.store.get(CLAIM_PATH), before, "a refused acquire changes nothing");
                self.liveness.lock().expect("liveness").remove(&acquirer.pid);
            }
            (outcome, expected) => {
                return Err(TestCaseError::fail(format!("acquire: got {:?}, law says {expected:?}", outcome.map(|_| ()).map_err(|e| e.to_string()))));
            }
        }
        Ok(())
    }

    fn run(&mut self, command: &Command) -> Result<(), TestCaseError> {
        match command {
            Command::Acquire => self.acquire(false)?,
            Command::Reboot => {
                self.coverage.reboots.fetch_add(1, Ordering::Relaxed);
                *self.boot.lock().expect("boot") = format!("{:064x}", self.next_pid);
                self.world.processes.script().boot_id = Ok(self.boot.lock().expect("boot").clone());
                self.acquire(true)?;
                let current = self.current.expect("a reboot always takes over");
                self.handles[current].release().expect("release after reboot");
                self.disk = None;
                self.current = None;
                self.parent = None;
                self.helper = None;
            }
            Command::Lifecycle(step) => {
                let Some(current) = self.current else { return Ok(()) };
                if self.status(&self.parent) != OwnerStatus::ExactLiveOwner {
                    return Ok(());
                }
                // The generated step picks among the steps the model allows in this phase.
                let allowed: &[Step] = match self.phase {
                    Phase::ParentOwned => &[Step::Begin, Step::Release],
                    Phase::HelperLaunching => &[Step::Bind, Step::Settle, Step::Unsafe],
                    Phase::HelperActive => &[Step::Settle, Step::Unsafe],
                    Phase::CleanupUnsafe => &[],
                };
                if allowed.is_empty() {
                    return Ok(());
                }
                let step = &allowed[*step as usize % allowed.len()];
                let handle = &mut self.handles[current];
                match (step, self.phase) {
                    (Step::Begin, Phase::ParentOwned) => {
                        handle.begin_helper_launch().expect("begin");
                        self.phase = Phase::HelperLaunching;
                    }
                    (Step::Bind, Phase::HelperLaunching) => {
                        self.next_pid += 1;
                        let helper = Owner { pid: self.next_pid, boot_id: self.boot.lock().expect("boot").clone(), process_start_id: "d".repeat(64) };
                        self.liveness.lock().expect("liveness").insert(helper.pid, OwnerStatus::ExactLiveOwner);
                        self.world.processes.script().capture = Some(Ok(helper.clone()));
                        handle.bind_helper(helper.pid as i64).expect("bind");
                        self.coverage.binds.fetch_add(1, Ordering::Relaxed);
                        self.helper = Some(helper);
                        self.phase = Phase::HelperActive;
                    }
                    (Step::Settle, Phase::HelperLaunching | Phase::HelperActive) => {
                        handle.settle_helper().expect("settle");
                        self.phase = Phase::ParentOwned;
                        self.helper = None;
                    }
                    (Step::Unsafe, Phase::HelperLaunching | Phase::HelperActive) => {
                        handle.mark_cleanup_unsafe().expect("unsafe");
                        self.phase = Phase::CleanupUnsafe;
                    }
                    (Step::Release, Phase::ParentOwned) => {
                        handle.release().expect("release");
                        self.current = None;
                        self.disk = None;
                        self.parent = None;
                        return self.check();
                    }
                    _ => return Ok(()),
                }
                let id = self.disk.as_ref().expect("held").0.clone();
                self.disk = Some((id, self.phase, self.helper.is_some()));
            }
            Command::Liveness(who, status) => {
                let owner = match who {
                    Who::Parent => &self.parent,
                    Who::Helper => &self.helper,
                };
                if let Some(owner) = owner {
                    self.liveness.lock().expect("liveness").insert(owner.pid, *status);
                }
            }
            Command::Stale(index, step) => {
                let stale: Vec<usize> = (0..self.handles.len()).filter(|i| Some(*i) != self.current).collect();
                if stale.is_empty() {
                    return Ok(());
                }
                let i = stale[index % stale.len()];
                if self.handles[i].released().expect("flag") {
                    return Ok(());
                }
                let before = self.world.store.get(CLAIM_PATH);
                let handle = &mut self.handles[i];
                let result = match step {
                    Step::Begin => handle.begin_helper_launch(),
                    Step::Bind => handle.bind_helper(i64::from(std::process::id())),
                    Step::Settle => handle.settle_helper(),
                    Step::Unsafe => handle.mark_cleanup_unsafe(),
                    Step::Release => handle.release(),
                };
                prop_assert!(result.is_err(), "a stale controller step must fail ({step:?})");
                self.coverage.stale_steps.fetch_add(1, Ordering::Relaxed);
                prop_assert_eq!(self.world.store.get(CLAIM_PATH), before, "a stale step changes nothing");
            }
        }
        self.check()
    }

    fn check(&self) -> Result<(), TestCaseError> {
        prop_assert_eq!(self.on_disk(), self.disk.clone());
        Ok(())
    }
}

#[test]
fn export_admission_obeys_the_model() {
    let coverage = Arc::new(Coverage::default());
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig { cases: 500, ..ProptestConfig::default() });
    let strategy = proptest::collection::vec(command(), 1..=10);
    let result = runner.run(&strategy, |commands| {
        let mut harness = Harness::new(coverage.clone());
        for command in &commands {
            harness.run(command)?;
        }
        Ok(())
    });
    if let Err(failure) = result {
        panic!("{failure}");
    }
    // The cases must have exercised every branch of the law.
    let counts = [
        ("acquired", &coverage.acquired),
        ("took over", &coverage.took_over),
        ("refused: active", &coverage.refused_active),
        ("refused: indeterminate", &coverage.refused_indeterminate),
        ("reboots", &coverage.reboots),
        ("binds", &coverage.binds),
        ("stale steps", &coverage.stale_steps),
    ];
    for (what, count) in counts {
        let count = count.load(Ordering::Relaxed);
        eprintln!("{what}: {count}");
        assert!(count > 0, "no case exercised {what}");
    }
}
