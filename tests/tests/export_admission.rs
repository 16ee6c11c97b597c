//! The export admission end to end (spec §7.1 scenarios 1–16, and a 16-process race): the
//! component over the real state store, real process identity, and — where the reference's
//! tests inject liveness or a boot id — the same seams injected through the process-identity
//! import.

use std::process::{Command, Stdio};

use proclease::core::liveness::OwnerStatus;
use proclease::core::records::Owner;
use proclease::core::records::export_admission::{ExportAdmission, Phase, Schema};
use proclease::{Admission, Runtime};
use proclease_tests::fakes::RealHome;

const PATH: &str = "recovery/beeper-message-like-me-export-admission/active.json";
const DEAD: OwnerStatus = OwnerStatus::DifferentOrDead;

fn runtime() -> &'static Runtime {
    Runtime::shared().expect("component")
}

fn file(h: &RealHome) -> Option<String> {
    std::fs::read_to_string(h.home.join(PATH)).ok()
}

fn write(h: &RealHome, text: &str) {
    std::fs::write(h.home.join(PATH), text).expect("rewrite the admission file");
}

fn acquire(h: &RealHome) -> Admission {
    Admission::acquire(runtime(), h.real_effects()).expect("acquired")
}

/// Acquires with the reference's seams: every owner answers `status`; boot `boot` if given.
fn acquire_seamed(h: &RealHome, status: OwnerStatus, boot: Option<&str>) -> Result<Admission, String> {
    let mut processes = h.processes().inspect(status);
    if let Some(boot) = boot {
        processes = processes.boot(boot);
    }
    Admission::acquire(runtime(), h.effects(processes)).map_err(|e| e.to_string())
}

fn own_boot(h: &RealHome) -> String {
    h.identity.current_boot_id().expect("boot id")
}

const ACTIVE: &str = "Beeper Message Like Me recovery: another export is active";
const INDETERMINATE: &str = "Beeper Message Like Me recovery: prior export owner cannot be inspected safely";
const CHANGED_BEFORE_UPDATE: &str = "Beeper Message Like Me recovery: export admission changed before lifecycle update";
const CHANGED_BEFORE_RELEASE: &str = "Beeper Message Like Me recovery: export admission changed before release";

fn err(result: Result<Admission, String>) -> String {
    match result {
        Ok(_) => panic!("expected a refusal"),
        Err(message) => message,
    }
}

/// §7.1.1: a second acquire by the live holder is refused; release is idempotent; a new
/// acquire gets a new claim id.
#[test]
fn s01_second_acquire_in_a_live_process_is_refused() {
    let h = RealHome::new();
    let mut a = acquire(&h);
    let first_id = a.claim().expect("claim").id;
    assert_eq!(err(Admission::acquire(runtime(), h.real_effects()).map_err(|e| e.to_string())), ACTIVE);
    assert!(file(&h).is_some());
    a.release().expect("release");
    a.release().expect("release again is a no-op");
    assert!(a.released().expect("flag"));
    assert_eq!(file(&h), None);
    let mut b = acquire(&h);
    assert_ne!(b.claim().expect("claim").id, first_id);
    b.release().expect("release");
}

/// §7.1.2: a parent-owned claim whose owner is dead is taken over; the old handle's release
/// then fails and leaves the new claim.
#[test]
fn s02_dead_parent_owned_claim_is_taken_over() {
    let h = RealHome::new();
    let mut a = acquire(&h);
    let mut b = acquire_seamed(&h, DEAD, None).expect("taken over");
    assert_ne!(b.claim().expect("b").id, a.claim().expect("a").id);
    assert_eq!(a.release().expect_err("stale").to_string(), CHANGED_BEFORE_RELEASE);
    assert!(file(&h).is_some());
    b.release().expect("release b");
    assert_eq!(file(&h), None);
}

/// §7.1.3: an owner that cannot be inspected blocks, and the file is untouched.
#[test]
fn s03_unknown_owner_blocks_and_changes_nothing() {
    let h = RealHome::new();
    let _a = acquire(&h);
    let before = file(&h);
    assert_eq!(err(acquire_seamed(&h, OwnerStatus::Unknown, None)), INDETERMINATE);
    assert_eq!(file(&h), before);
}

/// §7.1.4: a release against an altered file fails and leaves it untouched.
#[test]
fn s04_release_of_an_altered_file_fails() {
    let h = RealHome::new();
    let mut a = acquire(&h);
    let altered = format!("{} ", file(&h).expect("file"));
    write(&h, &altered);
    assert_eq!(a.release().expect_err("changed").to_string(), CHANGED_BEFORE_RELEASE);
    assert_eq!(file(&h).as_deref(), Some(altered.as_str()));
    assert!(!a.released().expect("flag"));
}

/// §7.1.5: helper-launching with a dead owner is indeterminate on the same boot and
/// recoverable after a reboot.
#[test]
fn s05_helper_launching_needs_a_reboot() {
    let h = RealHome::new();
    let mut a = acquire(&h);
    a.begin_helper_launch().expect("begin");
    let id = a.claim().expect("claim").id;
    assert_eq!(err(acquire_seamed(&h, DEAD, Some(&own_boot(&h)))), INDETERMINATE);
    let mut b = acquire_seamed(&h, DEAD, Some(&"b".repeat(64))).expect("after a reboot");
    assert_ne!(b.claim().expect("b").id, id);
    b.release().expect("release");
}

fn owner_json(owner: &Owner) -> String {
    format!(r#"{{"bootId":"{}","pid":{},"processStartId":"{}"}}"#, owner.boot_id, owner.pid, owner.process_start_id)
}

/// §7.1.6: a legacy v1 claim is indeterminate on its boot, recoverable on another; the new
/// claim is a current v2 with a revision.
#[test]
fn s06_legacy_v1_claim() {
    let h = RealHome::new();
    let own = h.identity.self_identity().expect("own");
    h.store.ensure_private_directory("recovery/beeper-message-like-me-export-admission").expect("dir");
    let v1 = format!(r#"{{"id":"11111111-1111-4111-8111-111111111111","kind":"beeper-message-like-me-export-admission","owner":{},"schemaVersion":1}}"#, owner_json(&own)) + "\n";
    assert!(h.store.create_if_absent(PATH, &v1).expect("write v1"));
    assert_eq!(err(acquire_seamed(&h, DEAD, Some(&own.boot_id))), INDETERMINATE);
    assert_eq!(file(&h).as_deref(), Some(v1.as_str()));
    let mut b = acquire_seamed(&h, DEAD, Some(&"b".repeat(64))).expect("other boot");
    let claim = b.claim().expect("claim");
    assert_ne!(claim.id, "11111111-1111-4111-8111-111111111111");
    assert_eq!(claim.schema, Schema::V2);
    assert!(claim.revision.as_deref().is_some_and(proclease::core::js::is_uuid_v4));
    b.release().expect("release");
}

/// §7.1.7: a pre-revision v2 parent-owned claim with a dead owner is migrated.
#[test]
fn s07_pre_revision_claim_is_migrated() {
    let h = RealHome::new();
    let own = h.identity.self_identity().expect("own");
    h.store.ensure_private_directory("recovery/beeper-message-like-me-export-admission").expect("dir");
    let old = format!(
        r#"{{"helperOwner":null,"id":"11111111-1111-4111-8111-111111111111","kind":"beeper-message-like-me-export-admission","owner":{},"phase":"parent-owned","schemaVersion":2}}"#,
        owner_json(&own)
    ) + "\n";
    assert!(h.store.create_if_absent(PATH, &old).expect("write"));
    let mut b = acquire_seamed(&h, DEAD, Some(&own.boot_id)).expect("migrated");
    let claim = b.claim().expect("claim");
    assert_ne!(claim.id, "11111111-1111-4111-8111-111111111111");
    assert!(claim.revision.is_some());
    b.release().expect("release");
}

fn helper_active(h: &RealHome) -> Admission {
    let mut a = acquire(h);
    a.begin_helper_launch().expect("begin");
    a.bind_helper(i64::from(std::process::id())).expect("bind own pid");
    a
}

/// §7.1.8: helper-active (helper = this process): unknown → indeterminate; dead on the same
/// boot → indeterminate; another boot → taken over.
#[test]
fn s08_helper_active_claim() {
    let h = RealHome::new();
    let _a = helper_active(&h);
    assert_eq!(err(acquire_seamed(&h, OwnerStatus::Unknown, None)), INDETERMINATE);
    assert_eq!(err(acquire_seamed(&h, DEAD, Some(&own_boot(&h)))), INDETERMINATE);
    acquire_seamed(&h, DEAD, Some(&"b".repeat(64))).expect("other boot").release().expect("release");
}

/// §7.1.9: a claim rewritten with another id defeats the handle's compare-and-swap.
#[test]
fn s09_rewritten_claim_defeats_the_handle() {
    let h = RealHome::new();
    let mut a = helper_active(&h);
    let rewritten = file(&h).expect("file").replace(&a.claim().expect("claim").id, "00000000-0000-4000-8000-000000000001");
    write(&h, &rewritten);
    assert_eq!(a.mark_cleanup_unsafe().expect_err("changed").to_string(), CHANGED_BEFORE_UPDATE);
    assert_eq!(err(acquire_seamed(&h, DEAD, Some(&own_boot(&h)))), INDETERMINATE);
    assert_eq!(file(&h).as_deref(), Some(rewritten.as_str()));
    acquire_seamed(&h, DEAD, Some(&"b".repeat(64))).expect("other boot").release().expect("release");
}

/// §7.1.10: a subprocess leaves a cleanup-unsafe claim and exits cleanly, saying so (#43 case 9:
/// a drop's warning reaches standard error without a tracing subscriber); with real liveness it
/// blocks; after a (simulated) reboot it is taken over.
#[test]
fn s10_subprocess_cleanup_unsafe_claim() {
    let h = RealHome::new();
    let output = Command::new(env!("CARGO_BIN_EXE_admission_worker")).args(["hold-unsafe", h.home.to_str().expect("utf-8")]).output().expect("run worker");
    assert!(output.status.success(), "{output:?}");
    // The worker installs no tracing subscriber: the drop says what it left on standard error.
    assert!(output.stdout.is_empty(), "{output:?}");
    assert_eq!(String::from_utf8_lossy(&output.stderr), "proclease: warning: an export admission handle was dropped in cleanup-unsafe: the claim stays until a reboot (§6A.5)\n");
    let left = file(&h).expect("the worker's claim stays at recovery/beeper-message-like-me-export-admission/active.json");
    assert!(left.contains("\"phase\":\"cleanup-unsafe\""));
    assert_eq!(err(Admission::acquire(runtime(), h.real_effects()).map_err(|e| e.to_string())), INDETERMINATE);
    assert_eq!(file(&h).as_deref(), Some(left.as_str()));
    let mut b = acquire_seamed(&h, DEAD, Some(&"b".repeat(64))).expect("after a reboot");
    assert!(!left.contains(&b.claim().expect("claim").id));
    b.release().expect("release");
}

/// §7.1.11: an altered file defeats begin.
#[test]
fn s11_altered_file_defeats_begin() {
    let h = RealHome::new();
    let mut a = acquire(&h);
    write(&h, &format!("{} ", file(&h).expect("file")));
    assert_eq!(a.begin_helper_launch().expect_err("changed").to_string(), CHANGED_BEFORE_UPDATE);
}

/// §7.1.12: ABA — a stale copy of the handle cannot write after the lifecycle came back to
/// parent-owned, because every write rotated the revision.
#[test]
fn s12_stale_handle_copy_is_refused_after_aba() {
    let h = RealHome::new();
    let mut a = acquire(&h);
    let original = a.claim().expect("claim");
    let mut copy = Admission::resume(runtime(), h.real_effects(), &original, false).expect("copy");
    a.begin_helper_launch().expect("begin");
    a.bind_helper(i64::from(std::process::id())).expect("bind");
    a.settle_helper().expect("settle");
    let now = a.claim().expect("claim");
    assert_eq!(now.phase, Some(Phase::ParentOwned));
    assert_ne!(now.revision, original.revision);
    assert_eq!(copy.begin_helper_launch().expect_err("stale").to_string(), CHANGED_BEFORE_UPDATE);
    a.release().expect("release");
}

/// §7.1.13: begin then mark unsafe keeps no helper; release is refused; a dead owner on the
/// same boot stays indeterminate.
#[test]
fn s13_unsafe_launch_cannot_be_released() {
    let h = RealHome::new();
    let mut a = acquire(&h);
    let revision = a.claim().expect("claim").revision;
    a.begin_helper_launch().expect("begin");
    a.mark_cleanup_unsafe().expect("mark");
    let claim = a.claim().expect("claim");
    assert_eq!((claim.phase, claim.helper_owner.clone()), (Some(Phase::CleanupUnsafe), None));
    assert_ne!(claim.revision, revision);
    assert_eq!(a.release().expect_err("unsettled").to_string(), "Beeper Message Like Me recovery: export admission cannot release an unsettled helper lifecycle");
    assert_eq!(err(acquire_seamed(&h, DEAD, Some(&own_boot(&h)))), INDETERMINATE);
}

/// §7.1.14: bind then mark unsafe keeps the helper; only another boot takes over.
#[test]
fn s14_unsafe_helper_is_kept() {
    let h = RealHome::new();
    let mut a = helper_active(&h);
    a.mark_cleanup_unsafe().expect("mark");
    assert!(a.claim().expect("claim").helper_owner.is_some());
    assert_eq!(err(acquire_seamed(&h, DEAD, Some(&own_boot(&h)))), INDETERMINATE);
    acquire_seamed(&h, DEAD, Some(&"f".repeat(64))).expect("other boot").release().expect("release");
}

/// §7.1.15: the cross-boot helper rule — an owner on another boot than its helper is
/// indeterminate, even when the helper's boot is current and the owner looks dead.
#[test]
fn s15_cross_boot_helper_is_indeterminate() {
    let h = RealHome::new();
    let mut a = helper_active(&h);
    a.mark_cleanup_unsafe().expect("mark");
    let claim = a.claim().expect("claim");
    let helper_boot = claim.helper_owner.clone().expect("helper").boot_id;
    let mut rewritten = claim.clone();
    rewritten.owner.boot_id = "e".repeat(64);
    let text = ExportAdmission { ..rewritten }.parsed().canonical;
    write(&h, &text);
    let boot = helper_boot.clone();
    let processes = h.processes().inspect_with(Box::new(move |o: &Owner| if o.boot_id == boot { OwnerStatus::ExactLiveOwner } else { DEAD })).boot(&helper_boot);
    let refused = Admission::acquire(runtime(), h.effects(processes)).map_err(|e| e.to_string());
    assert_eq!(err(refused), INDETERMINATE);
    assert_eq!(file(&h).as_deref(), Some(text.as_str()));
}

fn race_round(h: &RealHome, workers: usize, round: usize) {
    let dir = h.dir.path();
    let go = dir.join(format!("go-{round}"));
    let release = dir.join(format!("release-{round}"));
    let children: Vec<_> = (0..workers)
        .map(|_| {
            Command::new(env!("CARGO_BIN_EXE_admission_worker"))
                .args(["race", h.home.to_str().expect("utf-8"), go.to_str().expect("utf-8"), release.to_str().expect("utf-8")])
                .stdout(Stdio::piped())
                .spawn()
                .expect("spawn")
        })
        .collect();
    std::fs::write(&go, "").expect("go");
    let mut outputs = Vec::new();
    let mut waiting = children;
    // Blocked workers exit at once; the winner waits for the release file.
    while waiting.len() > 1 {
        let mut still = Vec::new();
        for mut child in waiting {
            match child.try_wait().expect("poll") {
                Some(_) => outputs.push(child.wait_with_output().expect("output")),
                None => still.push(child),
            }
        }
        waiting = still;
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    std::fs::write(&release, "").expect("release");
    outputs.extend(waiting.into_iter().map(|c| c.wait_with_output().expect("output")));
    let mut acquired = 0;
    for output in &outputs {
        assert!(output.status.success(), "round {round}: {output:?}");
        let line = String::from_utf8_lossy(&output.stdout).trim().to_string();
        match line.as_str() {
            "acquired" => acquired += 1,
            ACTIVE_LINE | CONTENTION_LINE => {}
            other => panic!("round {round}: unexpected outcome {other:?}"),
        }
    }
    assert_eq!(acquired, 1, "round {round}: exactly one holder");
    assert_eq!(file(h), None, "round {round}: the winner released");
}

const ACTIVE_LINE: &str = "blocked: Beeper Message Like Me recovery: another export is active";
const CONTENTION_LINE: &str = "blocked: Beeper Message Like Me recovery: export admission could not be acquired after bounded contention";

/// §7.1.16: two synchronized subprocesses race: exactly one acquires; afterwards
/// acquire/release works.
#[test]
fn s16_two_processes_race() {
    let h = RealHome::new();
    race_round(&h, 2, 0);
    acquire(&h).release().expect("acquire and release afterwards");
}

/// 16 processes × 100 rounds: never two holders.
#[test]
fn sixteen_processes_race_for_a_hundred_rounds() {
    let h = RealHome::new();
    for round in 0..100 {
        race_round(&h, 16, round);
    }
}

/// A handle dropped unreleased (an early `?`, a panic) while no helper is recorded releases its
/// claim: the next acquire, here in the same process, succeeds. [`Admission::leave`] keeps it.
#[test]
fn a_dropped_handle_releases_a_parent_owned_claim() {
    let h = RealHome::new();
    drop(acquire(&h));
    assert_eq!(file(&h), None, "released on drop");
    acquire(&h).leave();
    assert!(file(&h).is_some(), "a left handle leaves its claim");
    assert_eq!(err(Admission::acquire(runtime(), h.real_effects()).map_err(|e| e.to_string())), ACTIVE);
}

/// A panic the program catches (`catch_unwind`, a thread pool, a task) while it holds a
/// `parent-owned` admission (#43 case 9): the process lives on, so the claim is released as on
/// any drop — before, it stayed held by the live process and every exporter was refused until
/// that process exited.
#[test]
fn a_caught_panic_releases_a_parent_owned_claim() {
    let h = RealHome::new();
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _held = acquire(&h);
        panic!("the embedder's own code panics while it holds the admission");
    }));
    assert!(caught.is_err(), "the panic was caught");
    assert_eq!(file(&h), None, "released while unwinding");
    acquire(&h).release().expect("the next exporter acquires it");
}

/// A helper that cannot start leaves the admission as it was (parent-owned: releasable, and
/// released by a drop), with the system's error kept as the cause.
#[test]
fn a_helper_that_cannot_start_leaves_the_admission_as_it_was() {
    let h = RealHome::new();
    let host = proclease::Host::builder().state_home(&h.home).build().expect("host");
    let mut admission = host.acquire_admission().expect("acquired");
    let error = admission.launch_helper(host.process_identity(), &mut Command::new("/nonexistent/helper")).expect_err("not started");
    assert!(matches!(&error, proclease::Error::Start { program, .. } if program == "/nonexistent/helper"), "{error:?}");
    let cause = std::error::Error::source(&error).and_then(|e| e.downcast_ref::<std::io::Error>()).expect("the io error is the source");
    assert_eq!(cause.kind(), std::io::ErrorKind::NotFound);
    assert_eq!(admission.claim().expect("claim").phase, Some(Phase::ParentOwned));
    drop(admission);
    assert_eq!(file(&h), None, "a drop releases it");
    host.acquire_admission().expect("acquired again").release().expect("release");
}

/// A process that drops its handle (exits) while its helper runs leaves the claim: it stays
/// active while the helper lives, and once the helper is gone the next acquire takes it over —
/// never a claim only a reboot clears.
#[test]
fn a_claim_left_with_a_running_helper_is_taken_over_once_the_helper_is_gone() {
    let h = RealHome::new();
    let pid_file = h.home.join("helper.pid");
    let output = Command::new(env!("CARGO_BIN_EXE_admission_worker"))
        .args(["helper-then-exit", h.home.to_str().expect("utf-8"), pid_file.to_str().expect("utf-8")])
        .stderr(Stdio::inherit())
        .output()
        .expect("run worker");
    assert!(output.status.success(), "{output:?}");
    let helper: i32 = std::fs::read_to_string(&pid_file).expect("helper pid").trim().parse().expect("a pid");
    let left = file(&h).expect("the claim stays");
    assert!(left.contains("\"phase\":\"helper-active\""), "{left}");
    let refused = Admission::acquire(runtime(), h.real_effects()).map_err(|e| e.to_string());
    assert_eq!(err(refused), ACTIVE, "the helper still runs");
    assert!(Command::new("kill").args(["-9", &helper.to_string()]).status().expect("kill").success(), "kill the helper");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut taken = loop {
        match Admission::acquire(runtime(), h.real_effects()) {
            Ok(taken) => break taken,
            Err(e) => assert!(std::time::Instant::now() < deadline, "never taken over once the helper died: {e}"),
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert!(!left.contains(&taken.claim().expect("claim").id), "a new claim");
    taken.release().expect("release");
}

/// A helper that exits at once — before or after it could be recorded — is no failure: the
/// caller waits for it, settles and releases as usual, every time.
#[test]
fn a_helper_that_exits_at_once_is_settled_as_usual() {
    let h = RealHome::new();
    let host = proclease::Host::builder().state_home(&h.home).build().expect("host");
    for _ in 0..20 {
        let mut admission = host.acquire_admission().expect("acquired");
        let mut helper = admission.launch_helper(host.process_identity(), &mut Command::new("true")).expect("started");
        assert!(helper.wait().expect("wait").success());
        let phase = admission.claim().expect("claim").phase;
        assert!(matches!(phase, Some(Phase::HelperActive | Phase::HelperLaunching)), "{phase:?}");
        admission.settle_helper().expect("settled");
        admission.release().expect("released");
        assert_eq!(file(&h), None);
    }
}
