//! Plugin invocation leases end to end (spec §7.3 scenarios 1–4, and the catalog lock): the
//! component over the real state store, a real catalog file, real process identity and real
//! `sleep` processes, with liveness injected through the process-identity import where the
//! reference injects it.

use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, Stdio};

use proclease::core::invocation_leases::{Entry, RepairReport, lease_path};
use proclease::core::liveness::OwnerStatus;
use proclease::core::records::invocation_lease::{Containment, ContainmentStatus, InvocationLease, LeaseOwner};
use proclease::core::records::portable_identity::{self, PortableIdentity};
use proclease::core::records::{Owner, Parsed};
use proclease::{ContainmentController, Runtime, acquire_invocation_lease, invocation_lease_status, list_invocation_leases, release_invocation_lease, repair_invocation_leases};
use proclease_tests::fakes::RealHome;

const A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
const C: &str = "cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc";
const RUN: &str = "55555555-5555-4555-8555-555555555555";

fn runtime() -> &'static Runtime {
    Runtime::shared().expect("component")
}

fn identity(plugin: &str, bundle: &str) -> PortableIdentity {
    portable_identity::parse_value(&serde_json::json!({
        "pluginId": plugin, "pluginVersion": "1.0.0", "hostApiVersion": 1, "bundleSha256": bundle,
        "manifestSha256": B, "adapterId": "portable-test", "transport": "provider-api",
        "surfaceId": "portable-test", "operation": "records.read", "contractVersion": 1, "descriptorSha256": C,
    }))
    .expect("identity")
}

/// The reference's fixture lease: schema 2, runId = token = id, parent-owned.
fn lease(id: &str, pid: u64, plugin: &str) -> InvocationLease {
    InvocationLease {
        schema_version: 2,
        lease_id: id.into(),
        run_id: id.into(),
        identity: identity(plugin, A),
        owner: LeaseOwner { process: Owner { pid, boot_id: A.into(), process_start_id: B.into() }, token: id.into() },
        acquired_at: "2026-07-25T12:00:00.000Z".into(),
        containment: Some(Containment { status: ContainmentStatus::ParentOwned, host: None }),
    }
}

fn id(n: u32) -> String {
    format!("{n:08}-0000-4000-8000-000000000000")
}

fn put(h: &RealHome, lease: &InvocationLease) -> Parsed<InvocationLease> {
    let parsed = lease.clone().parsed();
    assert!(h.store.create_if_absent(&lease_path(&lease.lease_id), &parsed.canonical).expect("write lease"));
    parsed
}

fn put_text(h: &RealHome, lease_id: &str, text: &str) {
    assert!(h.store.create_if_absent(&lease_path(lease_id), text).expect("write entry"));
}

fn remove(h: &RealHome, lease_id: &str) {
    std::fs::remove_file(h.home.join(lease_path(lease_id))).expect("remove entry");
}

fn install(h: &RealHome, plugins: &[(&str, &str)]) {
    let plugins: Vec<_> = plugins
        .iter()
        .map(|(id, bundle)| serde_json::json!({"pluginId": id, "version": "1.0.0", "hostApiVersion": 1, "bundleSha256": bundle, "manifestSha256": B, "enabled": true}))
        .collect();
    let text = serde_json::json!({"schemaVersion": 1, "plugins": plugins}).to_string();
    let path = "provider-plugins/catalog.json";
    match h.store.read_if_present(path, 1 << 20).expect("read") {
        Some(old) => assert!(h.store.replace_if_unchanged(path, &proclease::core::digest::sha256_hex(old.as_bytes()), &text).expect("replace")),
        None => assert!(h.store.create_if_absent(path, &text).expect("create")),
    }
}

fn acquire(h: &RealHome, plugin: &str, bundle: &str) -> Result<Parsed<InvocationLease>, String> {
    acquire_invocation_lease(runtime(), h.real_effects(), &identity(plugin, bundle), RUN).map_err(|e| e.to_string())
}

fn complete_and_release(h: &RealHome, snapshot: &Parsed<InvocationLease>) {
    let mut controller = ContainmentController::create(runtime(), h.real_effects(), snapshot).expect("controller");
    controller.cleanup_complete().expect("complete");
    let current = controller.current().expect("current");
    release_invocation_lease(runtime(), h.real_effects(), &current).expect("release");
}

fn valid(h: &RealHome) -> Vec<Parsed<InvocationLease>> {
    list_invocation_leases(runtime(), h.real_effects())
        .expect("list")
        .into_iter()
        .filter_map(|e| match e {
            Entry::Valid(s) => Some(s),
            Entry::Invalid(_) => None,
        })
        .collect()
}

/// §7.3.1: the admission rules on real files and the real liveness check.
#[test]
fn s1_admission() {
    let h = RealHome::new();
    install(&h, &[("portable-test", A), ("other-plugin", A)]);
    h.store.ensure_private_directory("provider-plugin-state/.invocations").expect("dir");

    let malformed = id(1);
    put_text(&h, &malformed, "{\"schemaVersion\":2}\n");
    assert_eq!(
        acquire(&h, "portable-test", A).expect_err("blocked"),
        format!("portable provider plugin invocation is blocked by malformed lease {malformed}; run ghostget plugin doctor before retrying")
    );
    remove(&h, &malformed);

    let unverifiable =
        format!("portable provider plugin portable-test invocation is blocked by unverifiable non-complete lease {}; run ghostget plugin doctor before retrying", id(2));
    put(&h, &lease(&id(2), 987_654_321, "portable-test"));
    assert_eq!(acquire(&h, "portable-test", A).expect_err("blocked"), unverifiable);
    remove(&h, &id(2));
    let mut legacy = lease(&id(2), 987_654_321, "portable-test");
    legacy.schema_version = 1;
    legacy.containment = None;
    put(&h, &legacy);
    assert_eq!(acquire(&h, "portable-test", A).expect_err("blocked"), unverifiable);
    remove(&h, &id(2));

    // Another plugin's cleanup-unsafe lease is ignored.
    let mut unrelated = lease(&id(3), 987_654_321, "other-plugin");
    unrelated.containment = Some(Containment { status: ContainmentStatus::CleanupUnsafe, host: None });
    put(&h, &unrelated);
    let first = acquire(&h, "portable-test", A).expect("acquired despite another plugin's tombstone");
    complete_and_release(&h, &first);
    remove(&h, &id(3));

    // Two live leases of the same plugin coexist.
    let one = acquire(&h, "portable-test", A).expect("first");
    let two = acquire(&h, "portable-test", A).expect("second");
    assert_eq!(valid(&h).len(), 2);
    complete_and_release(&h, &one);
    complete_and_release(&h, &two);
    assert!(valid(&h).is_empty());

    // A cleanup-unsafe lease of the same plugin (another bundle) blocks.
    let mut unsafe_other_bundle = lease(&id(4), 987_654_321, "portable-test");
    unsafe_other_bundle.identity = identity("portable-test", C);
    unsafe_other_bundle.containment = Some(Containment { status: ContainmentStatus::CleanupUnsafe, host: None });
    put(&h, &unsafe_other_bundle);
    assert_eq!(
        acquire(&h, "portable-test", A).expect_err("blocked"),
        format!("portable provider plugin portable-test invocation is blocked by cleanup-unsafe lease {}; run ghostget plugin doctor before retrying", id(4))
    );
    remove(&h, &id(4));

    // A real lease marked cleanup-unsafe blocks the next acquire.
    let real = acquire(&h, "portable-test", A).expect("acquired");
    let mut controller = ContainmentController::create(runtime(), h.real_effects(), &real).expect("controller");
    controller.cleanup_unsafe().expect("unsafe");
    let error = acquire(&h, "portable-test", A).expect_err("blocked");
    assert!(error.contains("is blocked by cleanup-unsafe lease"), "{error}");
    assert_eq!(valid(&h).len(), 1);

    // A changed installation blocks too.
    install(&h, &[("portable-test", C)]);
    assert_eq!(
        acquire(&h, "portable-test", A).expect_err("changed"),
        "portable provider plugin portable-test changed or was disabled before execution; retry from current capabilities"
    );
}

fn report(inspected: u32, removed: u32, active: u32, unknown: u32, invalid: u32) -> RepairReport {
    RepairReport { inspected, removed, active, unknown, invalid }
}

/// §7.3.2: repair with an injected liveness check.
#[test]
fn s2_repair() {
    let h = RealHome::new();
    h.store.ensure_private_directory("provider-plugin-state/.invocations").expect("dir");
    let mut dead = lease(&id(101), 101, "portable-test");
    dead.containment = Some(Containment { status: ContainmentStatus::CleanupComplete, host: None });
    put(&h, &dead);
    put(&h, &lease(&id(102), 102, "portable-test"));
    put(&h, &lease(&id(103), 103, "portable-test"));
    let mut legacy = lease(&id(104), 104, "portable-test");
    legacy.schema_version = 1;
    legacy.containment = None;
    put(&h, &legacy);
    put_text(&h, &id(105), "{\"schemaVersion\":1}\n");
    let oracle = Box::new(|o: &Owner| match o.pid {
        101 => OwnerStatus::DifferentOrDead,
        102 => OwnerStatus::ExactLiveOwner,
        _ => OwnerStatus::Unknown,
    });
    let effects = h.effects(h.processes().inspect_with(oracle));
    let (got, _) = repair_invocation_leases(runtime(), effects, false).expect("repair");
    assert_eq!(got, report(5, 1, 1, 2, 1));
    let mut remaining: Vec<String> = std::fs::read_dir(h.home.join("provider-plugin-state/.invocations"))
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().trim_end_matches(".json").to_string())
        .collect();
    remaining.sort();
    assert_eq!(remaining, vec![id(102), id(103), id(104), id(105)]);
}

/// §7.3.3: the containment controller's state machine and release.
#[test]
fn s3_controllers() {
    let h = RealHome::new();
    install(&h, &[("portable-test", A)]);
    let host = Owner { pid: 202, boot_id: B.into(), process_start_id: C.into() };

    let direct = acquire(&h, "portable-test", A).expect("direct");
    assert_eq!(
        release_invocation_lease(runtime(), h.real_effects(), &direct).expect_err("not complete").to_string(),
        "portable invocation lease cannot be released before durable cleanup completion"
    );
    let mut controller = ContainmentController::create(runtime(), h.real_effects(), &direct).expect("controller");
    controller.cleanup_complete().expect("complete");
    let current = controller.current().expect("current");
    assert_eq!(current.record.containment, Some(Containment { status: ContainmentStatus::CleanupComplete, host: None }));
    release_invocation_lease(runtime(), h.real_effects(), &current).expect("release");

    let hosted = acquire(&h, "portable-test", A).expect("hosted");
    let mut controller = ContainmentController::create(runtime(), h.real_effects(), &hosted).expect("controller");
    controller.host_starting(&host).expect("starting");
    controller.host_started(&host).expect("started");
    controller.cleanup_complete().expect("complete");
    let current = controller.current().expect("current");
    assert_eq!(current.record.containment, Some(Containment { status: ContainmentStatus::CleanupComplete, host: Some(host.clone()) }));
    release_invocation_lease(runtime(), h.real_effects(), &current).expect("release");

    let risky = acquire(&h, "portable-test", A).expect("unsafe");
    let mut controller = ContainmentController::create(runtime(), h.real_effects(), &risky).expect("controller");
    controller.host_starting(&host).expect("starting");
    controller.host_started(&host).expect("started");
    controller.cleanup_unsafe().expect("unsafe");
    assert_eq!(controller.cleanup_complete().expect_err("terminal").to_string(), "portable invocation lease cleanup cannot complete after becoming unsafe");
    let current = controller.current().expect("current");
    assert_eq!(
        release_invocation_lease(runtime(), h.real_effects(), &current).expect_err("unsafe").to_string(),
        "portable invocation lease cannot be released before durable cleanup completion"
    );
    let listed = valid(&h);
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].record.containment.as_ref().map(|c| c.status), Some(ContainmentStatus::CleanupUnsafe));
}

fn sleeper() -> Child {
    Command::new("sleep").arg("60").spawn().expect("sleep")
}

/// §7.3.4: real parent and host processes, killed during the test.
#[test]
fn s4_tombstones_with_real_processes() {
    let h = RealHome::new();
    h.store.ensure_private_directory("provider-plugin-state/.invocations").expect("dir");
    let (mut parent, mut host) = (sleeper(), sleeper());
    let parent_owner = h.identity.capture(u64::from(parent.id())).expect("parent");
    let host_owner = h.identity.capture(u64::from(host.id())).expect("host");
    let with = |n: u32, status: ContainmentStatus| {
        let mut l = lease(&id(n), parent_owner.pid, "portable-test");
        l.owner.process = parent_owner.clone();
        l.containment = Some(Containment { status, host: Some(host_owner.clone()) });
        l
    };
    put(&h, &with(1, ContainmentStatus::HostStarting));
    put(&h, &with(2, ContainmentStatus::HostActive));
    put(&h, &with(3, ContainmentStatus::CleanupUnsafe));

    parent.kill().expect("kill parent");
    parent.wait().expect("reap");
    let (got, _) = repair_invocation_leases(runtime(), h.real_effects(), true).expect("recover");
    assert_eq!(got, report(3, 0, 1, 2, 0), "host-starting with a live host is active; the others need a reboot");

    host.kill().expect("kill host");
    host.wait().expect("reap");
    let (got, _) = repair_invocation_leases(runtime(), h.real_effects(), false).expect("repair");
    assert_eq!(got, report(3, 0, 0, 3, 0));
    for snapshot in valid(&h) {
        assert_eq!(invocation_lease_status(runtime(), h.real_effects(), &snapshot).expect("status"), OwnerStatus::Unknown);
    }

    let other_boot = |n: u32, status| {
        let mut l = with(n, status);
        l.owner.process.boot_id = C.into();
        if let Some(c) = l.containment.as_mut() {
            c.host.as_mut().expect("host").boot_id = C.into();
        }
        l
    };
    put(&h, &other_boot(4, ContainmentStatus::HostActive));
    put(&h, &other_boot(5, ContainmentStatus::CleanupUnsafe));
    let (got, _) = repair_invocation_leases(runtime(), h.real_effects(), true).expect("recover");
    assert_eq!(got, report(5, 3, 0, 2, 0));
    let remaining: Vec<String> = valid(&h).into_iter().map(|s| s.record.lease_id).collect();
    assert_eq!(remaining, vec![id(2), id(3)], "host-active and cleanup-unsafe on this boot stay");
}

/// The catalog lock fails fast while another live process holds it, and a SIGKILLed holder
/// never blocks the next acquirer.
#[test]
fn catalog_lock_fails_fast_and_dies_with_its_holder() {
    let h = RealHome::new();
    install(&h, &[("portable-test", A)]);
    let mut holder =
        Command::new(env!("CARGO_BIN_EXE_store_worker")).args(["hold-catalog-lock", h.home.to_str().expect("utf-8")]).stdout(Stdio::piped()).spawn().expect("spawn holder");
    let mut line = String::new();
    BufReader::new(holder.stdout.as_mut().expect("stdout")).read_line(&mut line).expect("read");
    assert_eq!(line.trim(), "locked");
    let started = std::time::Instant::now();
    assert_eq!(acquire(&h, "portable-test", A).expect_err("locked"), "portable plugin catalog mutation is already locked");
    assert!(started.elapsed() < std::time::Duration::from_secs(5), "it fails fast, without waiting");
    holder.kill().expect("SIGKILL the holder");
    holder.wait().expect("reap");
    let snapshot = acquire(&h, "portable-test", A).expect("the lock died with its holder");
    complete_and_release(&h, &snapshot);
}

/// Found by a CI run: another thread forking a child while the lock was released kept the
/// lock held through the child's inherited descriptor (until its exec), so the next lock()
/// here failed as "already locked". Unlocking is now explicit.
#[test]
fn the_catalog_lock_is_free_again_even_while_other_threads_fork() {
    use std::os::unix::process::CommandExt as _;
    let h = RealHome::new();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let forker = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let mut command = Command::new("true");
                // Forces fork + exec (not posix_spawn) and widens the window before exec.
                // SAFETY: the hook only sleeps (no allocation, no lock taken in the child).
                unsafe {
                    command.pre_exec(|| {
                        std::thread::sleep(std::time::Duration::from_millis(2));
                        Ok(())
                    });
                }
                let _ = command.status();
            }
        })
    };
    let mut refused = 0;
    for _ in 0..2_000 {
        match h.catalog.lock() {
            Ok(()) => h.catalog.unlock(),
            Err(_) => refused += 1,
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    forker.join().expect("forker");
    assert_eq!(refused, 0, "the lock was refused {refused} times after this process had released it");
}

/// A repair judges each process once per run (docs/deviations.md, "one probe per process per
/// repair"): many leases of one live owner cost one probe; tombstones of a dead owner are each
/// re-checked afresh just before their removal, as in the reference. The same probes natively
/// and through the component.
#[test]
fn a_repair_probes_each_owner_once_and_rechecks_before_each_removal() {
    use proclease_tests::fakes::{FakeWorld, ScriptedProcesses};
    let run = |oracle: Box<dyn FnMut(&Owner) -> OwnerStatus + Send>, leases: &[InvocationLease], through_component: bool| {
        let world = FakeWorld::with_processes(ScriptedProcesses::with_oracle(A, oracle));
        for lease in leases {
            world.store.put(&lease_path(&lease.lease_id), &lease.clone().parsed().canonical);
        }
        let report = if through_component {
            repair_invocation_leases(runtime(), world.effects(), true).expect("repair").0
        } else {
            let FakeWorld { mut store, mut processes, mut catalog, .. } = world.clone();
            proclease::core::invocation_leases::repair(true, &mut store, &mut processes, &mut catalog, &mut |_, _| {}).expect("repair")
        };
        let probed: Vec<u64> = world.processes.script().probed.iter().map(|o| o.pid).collect();
        (report, probed)
    };
    for through_component in [false, true] {
        // Five completed leases of one live owner, and one of another: one probe each.
        let mut live: Vec<InvocationLease> = (0..5).map(|n| lease(&id(200 + n), 200, "portable-test")).collect();
        live.push(lease(&id(300), 300, "portable-test"));
        for l in &mut live {
            l.containment = Some(Containment { status: ContainmentStatus::CleanupComplete, host: None });
        }
        let (got, probed) = run(Box::new(|_| OwnerStatus::ExactLiveOwner), &live, through_component);
        assert_eq!(got, report(6, 0, 6, 0, 0), "component: {through_component}");
        assert_eq!(probed, vec![200, 300], "component: {through_component}");

        // Three parent-owned tombstones of one dead owner: judged once, each re-checked afresh
        // before it is removed (the reference would probe six times).
        let dead: Vec<InvocationLease> = (0..3).map(|n| lease(&id(400 + n), 400, "portable-test")).collect();
        let (got, probed) = run(Box::new(|_| OwnerStatus::DifferentOrDead), &dead, through_component);
        assert_eq!(got, report(3, 3, 0, 0, 0), "component: {through_component}");
        assert_eq!(probed, vec![400, 400, 400, 400], "component: {through_component}");
    }
}

/// Recover mode proves a host-active or cleanup-unsafe tombstone gone by a reboot past every
/// recorded process (§6B.9) — but in cluster mode another boot id may be another machine: where
/// the cluster's presence registry answered the probe that the process is alive (registered)
/// or could not say (unreachable), the tombstone stays; once its presence is absent, the
/// reference's rule removes it (docs/cluster.md; docs/deviations.md 17).
#[test]
fn recover_mode_keeps_a_tombstone_whose_other_machine_processes_the_cluster_finds_alive() {
    use proclease::core::liveness::{OwnerFacts, RemotePresence};
    use proclease_tests::fakes::{FakeWorld, ScriptedProcesses};
    let elsewhere = |pid| Owner { pid, boot_id: C.into(), process_start_id: B.into() };
    for status in [ContainmentStatus::HostActive, ContainmentStatus::CleanupUnsafe] {
        let mut tombstone = lease(&id(500), 500, "portable-test");
        tombstone.owner.process = elsewhere(500);
        tombstone.containment = Some(Containment { status, host: Some(elsewhere(501)) });
        // A live tombstone counts as unknown in recover mode (§6B.9 table: "else unknown").
        for (remote, decision) in [
            (RemotePresence::Registered, report(1, 0, 0, 1, 0)),
            (RemotePresence::Unreachable, report(1, 0, 0, 1, 0)),
            (RemotePresence::Absent, report(1, 1, 0, 0, 0)),
            (RemotePresence::NotClustered, report(1, 1, 0, 0, 0)),
        ] {
            for through_component in [false, true] {
                let processes = ScriptedProcesses::new(A, OwnerStatus::Unknown);
                processes.script().facts = Some(Box::new(move |owner| OwnerFacts { boot_id: A.into(), remote, ..OwnerFacts::implying(owner, OwnerStatus::Unknown) }));
                let world = FakeWorld::with_processes(processes);
                world.store.put(&lease_path(&tombstone.lease_id), &tombstone.clone().parsed().canonical);
                let got = if through_component {
                    repair_invocation_leases(runtime(), world.effects(), true).expect("repair").0
                } else {
                    let FakeWorld { mut store, mut processes, mut catalog, .. } = world.clone();
                    proclease::core::invocation_leases::repair(true, &mut store, &mut processes, &mut catalog, &mut |_, _| {}).expect("repair")
                };
                assert_eq!(got, decision, "{status:?}, {remote:?}, component: {through_component}");
                let kept = world.store.get(&lease_path(&tombstone.lease_id)).is_some();
                assert_eq!(kept, matches!(remote, RemotePresence::Registered | RemotePresence::Unreachable), "{status:?}, {remote:?}");
            }
        }
    }
}

/// A listed lease carries the file's own text as its canonical text (the text the store served,
/// not a re-serialisation), the sha256 of those bytes, and the record they hold.
#[test]
fn a_listed_lease_carries_its_file_text_and_hash() {
    let h = RealHome::new();
    let written = put(&h, &lease(&id(7), 7, "portable-test"));
    let listed = list_invocation_leases(runtime(), h.host.effects()).expect("list");
    let [Entry::Valid(snapshot)] = listed.as_slice() else { panic!("one valid lease: {listed:?}") };
    let on_disk = std::fs::read_to_string(h.home.join(lease_path(&id(7)))).expect("lease file");
    assert_eq!(snapshot.canonical, on_disk);
    assert_eq!(snapshot.sha256, proclease::core::digest::sha256_hex(on_disk.as_bytes()));
    assert_eq!(snapshot.record, written.record);
    assert_eq!(snapshot.canonical, written.canonical, "the file text is the record's canonical text");
}
