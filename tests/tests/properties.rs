//! Property tests (issue #9 item 4): canonical JSON is idempotent and independent of member
//! order and whitespace (natively and through the component), and no lease operation ever
//! treats a lease as recoverable — removes its directory, replaces its claim or deletes its
//! record — while its owner or a recorded helper, child or host is exact-live, whatever the
//! record's phase, boot or schema and whatever the other processes' status.

use proclease::Runtime;
use proclease::core::admission;
use proclease::core::canonical_json;
use proclease::core::directory_leases::{self, DIRECTORY};
use proclease::core::effects::{Catalog, Processes};
use proclease::core::invocation_leases;
use proclease::core::liveness::{INITIAL_PID_NAMESPACE, OwnerFacts, OwnerStatus, ProcRead, ProcView, RemotePresence, TreeState, WitnessState};
use proclease::core::records::directory_lease::{DirectoryLease, Phase as RawPhase, Role};
use proclease::core::records::export_admission::{ExportAdmission, Phase, Schema};
use proclease::core::records::invocation_lease::{Containment, ContainmentStatus, InvocationLease, LeaseOwner};
use proclease::core::records::{Owner, portable_identity};
use proclease_tests::fakes::{FakeWorld, ScriptedProcesses};
use proptest::prelude::*;
use serde_json::Value;

// ---------- canonical JSON ----------

fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
        "[ -~\u{80}-\u{10ffff}]{0,12}".prop_map(Value::String),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    json_leaf().prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map("[a-zA-Z0-9_\u{e9}\u{1f600}-]{0,6}", inner, 0..6).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// JSON text of `value` with object members in an order chosen by `seed` and whitespace
/// sprinkled between tokens.
fn scrambled(value: &Value, seed: &mut u64) -> String {
    let mut next = || {
        *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        *seed >> 33
    };
    fn go(value: &Value, next: &mut dyn FnMut() -> u64, out: &mut String) {
        let space = |next: &mut dyn FnMut() -> u64, out: &mut String| {
            for _ in 0..next() % 3 {
                out.push([' ', '\n', '\t', '\r'][(next() % 4) as usize]);
            }
        };
        match value {
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    space(next, out);
                    go(item, next, out);
                    space(next, out);
                }
                out.push(']');
            }
            Value::Object(members) => {
                let mut order: Vec<(&String, &Value)> = members.iter().collect();
                for i in (1..order.len()).rev() {
                    order.swap(i, (next() % (i as u64 + 1)) as usize);
                }
                out.push('{');
                for (i, (key, item)) in order.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    space(next, out);
                    out.push_str(&serde_json::to_string(key).expect("key"));
                    space(next, out);
                    out.push(':');
                    go(item, next, out);
                }
                out.push('}');
            }
            leaf => out.push_str(&serde_json::to_string(leaf).expect("leaf")),
        }
    }
    let mut out = String::new();
    go(value, &mut next, &mut out);
    out
}

fn canonical(text: &str) -> String {
    canonical_json::to_canonical(&canonical_json::parse(text).expect("parses")).expect("finite")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn canonical_json_is_idempotent_and_order_independent(value in json_value(), seed_a in any::<u64>(), seed_b in any::<u64>()) {
        let a = canonical(&scrambled(&value, &mut seed_a.clone()));
        let b = canonical(&scrambled(&value, &mut seed_b.clone()));
        prop_assert_eq!(&a, &b, "member order or whitespace changed the canonical form");
        prop_assert_eq!(canonical(&a), a.clone(), "canonicalizing twice changed it");
        // A canonical text has no whitespace outside strings and sorted members: it is its own
        // canonical file minus the newline.
        let reparsed = canonical_json::parse(&a).expect("canonical text parses");
        let file = format!("{a}\n");
        prop_assert!(canonical_json::is_canonical_file(&file, &reparsed));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn the_component_canonicalizes_exactly_as_the_native_code(value in json_value(), seed in any::<u64>()) {
        let text = scrambled(&value, &mut seed.clone());
        let mut instance = Runtime::shared().expect("component").instantiate().expect("instance");
        let through_component = instance.records().canonicalize(&text).expect("call").expect("canonical");
        prop_assert_eq!(through_component, canonical(&text));
    }
}

// ---------- dispositions: never recoverable while someone recorded is exact-live ----------

const BOOT: &str = "b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0";
const OTHER_BOOT: &str = "0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b";
const OWNER_PID: u64 = 1001;
const SECOND_PID: u64 = 1002;
/// A container's PID namespace.
const CONTAINER: u64 = 4_026_532_999;

/// What is physically true of one recorded process, and what a prober can see of it. The facts
/// a host reports are derived from it ([`Truth::facts`]); the properties demand that whatever
/// the facts, nothing of a process that is truly alive is ever recovered. Within the documented
/// assumptions (`docs/witness.md`, `docs/deviations.md`): a witnessed process keeps its
/// witness open while it lives, and a record without a witness was made in the initial PID
/// namespace.
#[derive(Debug, Clone, Copy)]
struct Truth {
    alive: bool,
    /// It took a witness (proclease's records); without one, it was recorded in the initial
    /// PID namespace (ghostget's records).
    witnessed: bool,
    /// The PID namespace its pid was recorded in (the initial one when not witnessed).
    in_container: bool,
    /// `/proc` refuses its entry (hidepid, EPERM).
    hidden: bool,
    /// Alive: its leader exited while its threads run. Dead: 0 gone, 1 zombie, 2 pid reused.
    variant: u8,
}

/// The prober's `/proc`: the initial namespace's, a container's, or a foreign one it cannot name.
#[derive(Debug, Clone, Copy)]
enum Prober {
    Initial,
    Container,
    Foreign,
}

fn truth() -> impl Strategy<Value = Truth> {
    (any::<bool>(), any::<bool>(), any::<bool>(), prop::bool::weighted(0.15), 0u8..3).prop_map(|(alive, witnessed, in_container, hidden, variant)| Truth {
        alive,
        witnessed,
        in_container: witnessed && in_container,
        hidden,
        variant,
    })
}

fn prober() -> impl Strategy<Value = Prober> {
    prop_oneof![4 => Just(Prober::Initial), 1 => Just(Prober::Container), 1 => Just(Prober::Foreign)]
}

/// The processes the owner started without recording them: none (or not witnessed), one
/// still running, or all gone.
fn spawned() -> impl Strategy<Value = WitnessState> {
    prop_oneof![Just(WitnessState::Absent), Just(WitnessState::Held), Just(WitnessState::Free)]
}

fn stat_line(state: &str, start: &str) -> String {
    format!("1 (p) {state} 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 {start} 0 0")
}

impl Truth {
    /// What a host observes of a recorded process of boot [`BOOT`] started at tick `start`.
    fn facts(&self, start: &str, prober: Prober, spawned: WitnessState) -> OwnerFacts {
        let recorded_ns = if self.in_container { CONTAINER } else { INITIAL_PID_NAMESPACE };
        let view_ns = match prober {
            Prober::Initial => Some(INITIAL_PID_NAMESPACE),
            Prober::Container => Some(CONTAINER),
            Prober::Foreign => None,
        };
        let visible = view_ns == Some(recorded_ns);
        let (stat, tasks) = if self.hidden {
            (ProcRead::Unreadable, 0)
        } else if !visible {
            // Another namespace's pid: nothing there, or some other process.
            if self.variant == 0 { (ProcRead::Missing, 0) } else { (ProcRead::Stat(stat_line("S", "77")), 1) }
        } else if self.alive {
            if self.variant == 0 { (ProcRead::Stat(stat_line("Z", start)), 3) } else { (ProcRead::Stat(stat_line("R", start)), 1) }
        } else {
            match self.variant {
                0 => (ProcRead::Missing, 0),
                1 => (ProcRead::Stat(stat_line("Z", start)), 1),
                _ => (ProcRead::Stat(stat_line("S", "77")), 1),
            }
        };
        let witness = match (self.witnessed, self.alive) {
            (false, _) => WitnessState::Absent,
            (true, true) => WitnessState::Held,
            (true, false) => WitnessState::Free,
        };
        OwnerFacts {
            boot_id: BOOT.into(),
            witness,
            recorded_pid_namespace: self.witnessed.then_some(recorded_ns),
            spawned,
            spawned_uncontained: false,
            stat,
            tasks,
            view: ProcView { pid_namespace: view_ns, ..ProcView::INITIAL },
            remote: RemotePresence::NotClustered,
            tree: TreeState::Absent,
        }
    }
}

fn start_of(pid: u64) -> &'static str {
    if pid == OWNER_PID { "1000" } else { "2000" }
}

fn owner(pid: u64, other_boot: bool) -> Owner {
    Owner { pid, boot_id: (if other_boot { OTHER_BOOT } else { BOOT }).into(), process_start_id: proclease::core::digest::process_start_id(BOOT, start_of(pid)) }
}

/// A process table on [`BOOT`] where the owner is `owner` (with processes it started
/// `spawned`) and the second recorded process (helper, child or host) `second`, seen by
/// `prober`; "this process" is pid 4242. A process recorded on another boot is gone.
fn processes(owner: Truth, second: Truth, prober: Prober, spawned: WitnessState) -> ScriptedProcesses {
    let table = ScriptedProcesses::with_oracle(BOOT, Box::new(|_: &Owner| OwnerStatus::Unknown));
    table.script().facts = Some(Box::new(move |o: &Owner| {
        let facts = |truth: &Truth, spawned| truth.facts(start_of(o.pid), prober, spawned);
        match o.pid {
            _ if o.boot_id != BOOT => OwnerFacts::implying(o, OwnerStatus::DifferentOrDead),
            OWNER_PID => facts(&owner, spawned),
            SECOND_PID => facts(&second, WitnessState::Absent),
            _ => OwnerFacts::implying(o, OwnerStatus::DifferentOrDead),
        }
    }));
    table.script().capture = Some(Ok(self::owner(4242, false)));
    table
}

/// Whether something the record names (or the owner started) is truly alive now.
fn someone_alive(owner: &Truth, owner_other_boot: bool, spawned: WitnessState, second: Option<(&Truth, bool)>) -> bool {
    let owner_alive = !owner_other_boot && (owner.alive || spawned == WitnessState::Held);
    owner_alive || second.is_some_and(|(truth, other_boot)| truth.alive && !other_boot)
}

fn uuid(n: u8) -> String {
    format!("{n:02x}000000-0000-4000-8000-000000000000")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    /// An acquire never takes over (removes) an admission whose owner or helper is exact-live.
    #[test]
    fn an_admission_with_a_live_owner_or_helper_is_never_taken_over(
        schema in prop_oneof![Just(Schema::V1), Just(Schema::V2PreRevision), Just(Schema::V2)],
        phase in prop_oneof![Just(Phase::ParentOwned), Just(Phase::HelperLaunching), Just(Phase::HelperActive), Just(Phase::CleanupUnsafe)],
        with_helper in any::<bool>(),
        owner_other_boot in any::<bool>(),
        helper_other_boot in any::<bool>(),
        owner_truth in truth(),
        helper_truth in truth(),
        prober in prober(),
        spawned in spawned(),
    ) {
        let v2 = schema != Schema::V1;
        let helper = (v2 && with_helper && phase != Phase::ParentOwned).then(|| owner(SECOND_PID, helper_other_boot));
        let claim = ExportAdmission {
            schema,
            id: uuid(1),
            owner: owner(OWNER_PID, owner_other_boot),
            helper_owner: helper.clone(),
            phase: v2.then_some(phase),
            revision: (schema == Schema::V2).then(|| uuid(2)),
        };
        let Ok(parsed) = proclease::core::records::export_admission::parse_value(&claim.to_value()).map(|r| r.parsed()) else { return Ok(()) };
        let world = FakeWorld::with_processes(processes(owner_truth, helper_truth, prober, spawned));
        world.store.put(admission::CLAIM_PATH, &parsed.canonical);
        let mut store = world.store.clone();
        let mut procs = world.processes.clone();
        let mut entropy = world.entropy.clone();
        let result = admission::acquire(&mut store, &mut procs, &mut entropy);
        if someone_alive(&owner_truth, owner_other_boot, spawned, helper.as_ref().map(|_| (&helper_truth, helper_other_boot))) {
            prop_assert!(result.is_err(), "took over an admission whose owner or helper lives: {claim:?}");
            prop_assert_eq!(world.store.get(admission::CLAIM_PATH), Some(parsed.canonical));
        }
    }

    /// Recovery never removes the directory, or the claim, of a lease whose owner or recorded
    /// child is exact-live, at any phase and any time.
    #[test]
    fn a_directory_with_a_live_owner_or_child_is_never_recovered(
        phase in prop_oneof![Just(RawPhase::Preparing), Just(RawPhase::Launching), Just(RawPhase::Running), Just(RawPhase::Settled)],
        stage in any::<bool>(),
        owner_other_boot in any::<bool>(),
        child_other_boot in any::<bool>(),
        owner_truth in truth(),
        child_truth in truth(),
        prober in prober(),
        spawned in spawned(),
        past_window in any::<bool>(),
    ) {
        let world = FakeWorld::with_processes(processes(owner_truth, child_truth, prober, spawned));
        let parent = world.workspace.add("/ws/jobs", 10).identity;
        let target = world.workspace.add("/ws/jobs/work", 11).identity;
        world.workspace.add("/ws/jobs/work/sub", 12);
        let role = if stage { Role::BundleStage } else { Role::RawWorking };
        let child = (!stage && phase == RawPhase::Running).then(|| owner(SECOND_PID, child_other_boot));
        let claim = DirectoryLease {
            id: uuid(3),
            role,
            path: "/ws/jobs/work".into(),
            parent_path: "/ws/jobs".into(),
            parent_identity: parent,
            directory_identity: target,
            output_root: stage.then(|| "/ws/jobs/out".into()),
            owner: owner(OWNER_PID, owner_other_boot),
            child_owner: child.clone(),
            phase: if stage { RawPhase::Preparing } else { phase },
            created_at_ms: 1_000,
            recover_after_ms: 2_000,
        };
        let Ok(parsed) = proclease::core::records::directory_lease::parse_value(&claim.to_value()).map(|r| r.parsed()) else { return Ok(()) };
        world.store.put(&directory_leases::claim_path(&claim.id), &parsed.canonical);
        let (mut store, mut procs, mut workspace, mut clock, mut entropy) =
            (world.store.clone(), world.processes.clone(), world.workspace.clone(), world.clock.clone(), world.entropy.clone());
        let now = if past_window { 5_000.0 } else { 1_500.0 };
        let fx = directory_leases::Effects { store: &mut store, processes: &mut procs, workspace: &mut workspace, clock: &mut clock, entropy: &mut entropy };
        let _ = directory_leases::recover(Some(now), fx);
        if someone_alive(&owner_truth, owner_other_boot, spawned, child.as_ref().map(|_| (&child_truth, child_other_boot))) {
            prop_assert!(world.workspace.directories().contains_key("/ws/jobs/work/sub"), "removed a live lease's directory: {claim:?}");
            prop_assert!(world.store.get(&format!("{DIRECTORY}/{}.json", claim.id)).is_some(), "released a live lease's claim");
        }
    }

    /// Repair (with or without tombstone recovery) never deletes an invocation lease whose
    /// owner or recorded host is exact-live.
    #[test]
    fn an_invocation_lease_with_a_live_owner_or_host_is_never_repaired_away(
        legacy in any::<bool>(),
        containment in prop_oneof![
            Just(ContainmentStatus::ParentOwned), Just(ContainmentStatus::HostStarting), Just(ContainmentStatus::HostActive),
            Just(ContainmentStatus::CleanupComplete), Just(ContainmentStatus::CleanupUnsafe)
        ],
        with_host in any::<bool>(),
        owner_other_boot in any::<bool>(),
        host_other_boot in any::<bool>(),
        owner_truth in truth(),
        host_truth in truth(),
        prober in prober(),
        spawned in spawned(),
        recover_tombstones in any::<bool>(),
    ) {
        let host = (with_host && containment != ContainmentStatus::ParentOwned).then(|| owner(SECOND_PID, host_other_boot));
        let identity = portable_identity::parse_value(&serde_json::json!({
            "pluginId": "portable-test", "pluginVersion": "1.0.0", "hostApiVersion": 1, "bundleSha256": "a".repeat(64),
            "manifestSha256": "b".repeat(64), "adapterId": "portable-test", "transport": "provider-api",
            "surfaceId": "portable-test", "operation": "records.read", "contractVersion": 1, "descriptorSha256": "c".repeat(64),
        })).expect("identity");
        let lease = InvocationLease {
            schema_version: if legacy { 1 } else { 2 },
            lease_id: uuid(4),
            run_id: uuid(4),
            identity,
            owner: LeaseOwner { process: owner(OWNER_PID, owner_other_boot), token: uuid(4) },
            acquired_at: "2026-07-25T12:00:00.000Z".into(),
            containment: (!legacy).then(|| Containment { status: containment, host: host.clone() }),
        };
        let Ok(parsed) = proclease::core::records::invocation_lease::parse_value(&lease.to_value()).map(|r| r.parsed()) else { return Ok(()) };
        let world = FakeWorld::with_processes(processes(owner_truth, host_truth, prober, spawned));
        let path = invocation_leases::lease_path(&lease.lease_id);
        world.store.put(&path, &parsed.canonical);
        let (mut store, mut procs, mut catalog) = (world.store.clone(), world.processes.clone(), world.catalog.clone());
        let _ = invocation_leases::repair(recover_tombstones, &mut store, &mut procs as &mut dyn Processes, &mut catalog as &mut dyn Catalog, &mut |_, _| {});
        let host_counts = host.is_some() && lease.containment.as_ref().is_some_and(|c| c.status != ContainmentStatus::ParentOwned);
        if someone_alive(&owner_truth, owner_other_boot, spawned, host_counts.then_some((&host_truth, host_other_boot))) {
            prop_assert_eq!(world.store.get(&path), Some(parsed.canonical), "repaired away a live lease: {:?}", lease);
        }
    }
}

#[test]
fn the_generators_reach_recoverable_cases_too() {
    // Guards the properties above against vacuity: with everyone dead — proven by free witnesses
    // seen from any namespace, or by /proc in the initial one — recovery does remove.
    let dead = |witnessed: bool, in_container: bool| Truth { alive: false, witnessed, in_container, hidden: false, variant: 0 };
    for (truth, prober) in [(dead(true, true), Prober::Foreign), (dead(true, false), Prober::Container), (dead(false, false), Prober::Initial)] {
        let world = FakeWorld::with_processes(processes(truth, truth, prober, WitnessState::Free));
        let parent = world.workspace.add("/ws/jobs", 10).identity;
        let target = world.workspace.add("/ws/jobs/work", 11).identity;
        let claim = DirectoryLease {
            id: uuid(3),
            role: Role::RawWorking,
            path: "/ws/jobs/work".into(),
            parent_path: "/ws/jobs".into(),
            parent_identity: parent,
            directory_identity: target,
            output_root: None,
            owner: owner(OWNER_PID, false),
            child_owner: Some(owner(SECOND_PID, false)),
            phase: RawPhase::Running,
            created_at_ms: 1_000,
            recover_after_ms: 2_000,
        };
        let parsed = proclease::core::records::directory_lease::parse_value(&claim.to_value()).expect("valid").parsed();
        world.store.put(&directory_leases::claim_path(&claim.id), &parsed.canonical);
        let (mut store, mut procs, mut workspace, mut clock, mut entropy) =
            (world.store.clone(), world.processes.clone(), world.workspace.clone(), world.clock.clone(), world.entropy.clone());
        let fx = directory_leases::Effects { store: &mut store, processes: &mut procs, workspace: &mut workspace, clock: &mut clock, entropy: &mut entropy };
        let report = directory_leases::recover(Some(5_000.0), fx).expect("recover");
        assert_eq!(report.recovered, 1, "{truth:?} seen from {prober:?}");
        assert!(!world.workspace.directories().contains_key("/ws/jobs/work"));
    }
    // A helper-active admission whose owner and helper are gone by their witnesses is taken
    // over on this boot (the reference needs a reboot).
    let world = FakeWorld::with_processes(processes(dead(true, false), dead(true, false), Prober::Initial, WitnessState::Free));
    let claim = ExportAdmission {
        schema: Schema::V2,
        id: uuid(1),
        owner: owner(OWNER_PID, false),
        helper_owner: Some(owner(SECOND_PID, false)),
        phase: Some(Phase::HelperActive),
        revision: Some(uuid(2)),
    };
    let parsed = proclease::core::records::export_admission::parse_value(&claim.to_value()).expect("valid").parsed();
    world.store.put(admission::CLAIM_PATH, &parsed.canonical);
    let (mut store, mut procs, mut entropy) = (world.store.clone(), world.processes.clone(), world.entropy.clone());
    assert!(admission::acquire(&mut store, &mut procs, &mut entropy).is_ok());
}
