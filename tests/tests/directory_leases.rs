//! Directory leases end to end (spec §7.1 scenarios 17–26): the component over the real state
//! store, real directories under a granted workspace root, and real process identity, with the
//! reference's liveness seam injected through the process-identity import where it uses one.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use proclease::core::directory_leases::{Report, Request};
use proclease::core::liveness::OwnerStatus;
use proclease::core::records::Owner;
use proclease::core::records::directory_lease::{DirectoryLease as Claim, Phase, Role};
use proclease::{DirectoryLease, Runtime, recover_directory_leases};
use proclease_tests::fakes::RealHome;

const LIVE: OwnerStatus = OwnerStatus::ExactLiveOwner;
const DEAD: OwnerStatus = OwnerStatus::DifferentOrDead;
const UNKNOWN: OwnerStatus = OwnerStatus::Unknown;

struct Fixture {
    h: RealHome,
    parent: PathBuf,
    target: PathBuf,
    output: PathBuf,
}

fn private_dir(path: &Path) {
    std::fs::create_dir_all(path).expect("mkdir");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700)).expect("chmod");
}

/// The reference's fixture: `root/private-exports` (0700) holding `working` (0700); the output
/// root `private-exports/published` is not created.
fn fixture() -> Fixture {
    let h = RealHome::new();
    let root = std::fs::canonicalize(h.dir.path()).expect("realpath");
    let parent = root.join("private-exports");
    let target = parent.join("working");
    private_dir(&target);
    Fixture { output: parent.join("published"), parent, target, h }
}

fn s(path: &Path) -> String {
    path.to_str().expect("utf-8").to_string()
}

fn runtime() -> &'static Runtime {
    Runtime::shared().expect("component")
}

impl Fixture {
    fn create(&self, role: Role) -> DirectoryLease {
        let request = Request { role, path: s(&self.target), output_root: (role == Role::BundleStage).then(|| s(&self.output)), recover_after_ms: 2000.0, now_ms: Some(1000.0) };
        DirectoryLease::create(runtime(), self.h.real_effects(), &request).expect("lease created")
    }

    fn claim_file(&self, claim: &Claim) -> PathBuf {
        self.h.home.join(format!("recovery/beeper-message-like-me-directory-leases/{}.json", claim.id))
    }

    fn recover(&self, now_ms: f64, status: OwnerStatus) -> Result<Report, String> {
        let effects = self.h.effects(self.h.processes().inspect(status));
        recover_directory_leases(runtime(), effects, Some(now_ms)).map_err(|e| e.to_string())
    }

    /// Recovery whose probe answers `answers` in call order, recording each probed owner.
    fn recover_scripted(&self, now_ms: f64, answers: Vec<OwnerStatus>) -> (Result<Report, String>, Vec<Owner>) {
        let calls: Arc<Mutex<Vec<Owner>>> = Arc::default();
        let recorded = calls.clone();
        let oracle = Box::new(move |owner: &Owner| {
            let mut calls = recorded.lock().expect("calls");
            calls.push(owner.clone());
            answers.get(calls.len() - 1).copied().unwrap_or(UNKNOWN)
        });
        let effects = self.h.effects(self.h.processes().inspect_with(oracle));
        let result = recover_directory_leases(runtime(), effects, Some(now_ms)).map_err(|e| e.to_string());
        let calls = calls.lock().expect("calls").clone();
        (result, calls)
    }
}

fn report(recovered: u32, published: u32, active: u32, indeterminate: u32) -> Report {
    Report { recovered, published, active, indeterminate }
}

/// §7.1.17: a live owner's lease is active; nothing is touched.
#[test]
fn s17_live_owner_keeps_its_directory() {
    let f = fixture();
    let mut lease = f.create(Role::RawWorking);
    let claim = lease.claim().expect("claim");
    assert_eq!(f.recover(10_000.0, LIVE), Ok(report(0, 0, 1, 0)));
    assert!(f.target.is_dir());
    assert!(f.claim_file(&claim).is_file());
}

/// §7.1.18: a settled lease of a dead owner is recovered: directory and claim removed.
#[test]
fn s18_settled_lease_of_a_dead_owner_is_recovered() {
    let f = fixture();
    let mut lease = f.create(Role::RawWorking);
    lease.update(Phase::Launching, None).expect("launching");
    lease.update(Phase::Settled, None).expect("settled");
    let claim = lease.claim().expect("claim");
    std::fs::write(f.target.join("work.txt"), "x").expect("write");
    assert_eq!(f.recover(1001.0, DEAD), Ok(report(1, 0, 0, 0)));
    assert!(!f.target.exists());
    assert!(!f.claim_file(&claim).exists());
    assert!(f.parent.is_dir(), "the parent stays");
}

/// §7.1.19: a launching lease of a dead owner waits for its recovery time.
#[test]
fn s19_launching_lease_waits_for_its_recovery_time() {
    let f = fixture();
    let mut lease = f.create(Role::RawWorking);
    lease.update(Phase::Launching, None).expect("launching");
    let claim = lease.claim().expect("claim");
    assert_eq!(f.recover(1999.0, DEAD), Ok(report(0, 0, 0, 1)));
    assert!(f.target.is_dir() && f.claim_file(&claim).is_file());
    assert_eq!(f.recover(2000.0, DEAD), Ok(report(1, 0, 0, 0)));
    assert!(!f.target.exists() && !f.claim_file(&claim).exists());
}

/// §7.1.20: a running lease with a dead owner follows its child: live → active, unknown →
/// indeterminate, dead → recovered; exactly two probes (owner, then child) each time.
#[test]
fn s20_running_lease_follows_its_child() {
    for (child, expected) in [(LIVE, report(0, 0, 1, 0)), (UNKNOWN, report(0, 0, 0, 1)), (DEAD, report(1, 0, 0, 0))] {
        let f = fixture();
        let mut lease = f.create(Role::RawWorking);
        lease.update(Phase::Launching, None).expect("launching");
        lease.update(Phase::Running, Some(i64::from(std::process::id()))).expect("running");
        let claim = lease.claim().expect("claim");
        let (result, calls) = f.recover_scripted(10_000.0, vec![DEAD, child]);
        assert_eq!(result, Ok(expected), "child {child:?}");
        assert_eq!(calls, vec![claim.owner.clone(), claim.child_owner.clone().expect("child")]);
        assert_eq!(f.target.exists(), child != DEAD);
    }
}

/// §7.1.21: a directory replaced at the leased path is refused, and nothing is deleted.
#[test]
fn s21_replaced_target_is_refused() {
    let f = fixture();
    let mut lease = f.create(Role::RawWorking);
    lease.update(Phase::Launching, None).expect("launching");
    lease.update(Phase::Settled, None).expect("settled");
    let claim = lease.claim().expect("claim");
    let displaced = f.parent.join("displaced");
    std::fs::rename(&f.target, &displaced).expect("rename away");
    private_dir(&f.target);
    std::fs::write(f.target.join("marker"), "new").expect("marker");
    assert_eq!(f.recover(1001.0, DEAD), Err("Beeper Message Like Me recovery: directory lease target changed before recovery".into()));
    assert!(f.target.join("marker").is_file());
    assert!(displaced.is_dir());
    assert!(f.claim_file(&claim).is_file());
}

/// §7.1.22: a bundle stage of a dead owner is recovered.
#[test]
fn s22_bundle_stage_is_recovered() {
    let f = fixture();
    let mut lease = f.create(Role::BundleStage);
    let claim = lease.claim().expect("claim");
    assert_eq!(f.recover(1001.0, DEAD), Ok(report(1, 0, 0, 0)));
    assert!(!f.target.exists() && !f.claim_file(&claim).exists());
}

/// §7.1.23: a bundle stage already renamed to its output root counts as published; the output
/// stays intact and the claim goes.
#[test]
fn s23_published_bundle_stage_keeps_its_output() {
    let f = fixture();
    let mut lease = f.create(Role::BundleStage);
    let claim = lease.claim().expect("claim");
    std::fs::write(f.target.join("bundle.txt"), "payload").expect("write");
    std::fs::rename(&f.target, &f.output).expect("publish");
    assert_eq!(f.recover(1001.0, DEAD), Ok(report(0, 1, 0, 0)));
    assert_eq!(std::fs::read_to_string(f.output.join("bundle.txt")).expect("output intact"), "payload");
    assert!(!f.claim_file(&claim).exists());
}

/// §7.1.24: an output root that is not the staged directory (same dev/ino, other birth time)
/// is refused.
#[test]
fn s24_foreign_output_is_refused() {
    for birth in ["1", "2"] {
        let f = fixture();
        let mut lease = f.create(Role::BundleStage);
        let claim = lease.claim().expect("claim");
        std::fs::remove_dir(&f.target).expect("delete target");
        private_dir(&f.output);
        std::fs::write(f.output.join("marker"), "x").expect("marker");
        let facts = f.h.workspace.inspect(&s(&f.output)).expect("inspect").expect("present");
        let mut rewritten = claim.clone();
        rewritten.directory_identity.device = facts.identity.device.clone();
        rewritten.directory_identity.inode = facts.identity.inode.clone();
        rewritten.directory_identity.birthtime_ns = birth.into();
        std::fs::write(f.claim_file(&claim), rewritten.parsed().canonical).expect("rewrite claim");
        assert_eq!(f.recover(1001.0, DEAD), Err("Beeper Message Like Me recovery: directory lease output changed before recovery".into()));
        assert!(f.output.join("marker").is_file());
        assert!(f.claim_file(&claim).is_file());
    }
}

/// §7.1.25: a claim without `directoryIdentity.birthtimeNs` is refused by the parser; nothing is
/// touched.
#[test]
fn s25_claim_without_birth_time_is_refused() {
    let f = fixture();
    let mut lease = f.create(Role::RawWorking);
    let claim = lease.claim().expect("claim");
    let text = std::fs::read_to_string(f.claim_file(&claim)).expect("claim file");
    let mut value: serde_json::Value = serde_json::from_str(&text).expect("json");
    value["directoryIdentity"].as_object_mut().expect("identity").remove("birthtimeNs");
    // Still canonical: only the shape is wrong.
    let stripped = proclease::core::canonical_json::to_canonical_file(&value).expect("canonical");
    std::fs::write(f.claim_file(&claim), &stripped).expect("rewrite");
    assert_eq!(f.recover(1001.0, DEAD), Err("Beeper Message Like Me recovery: directory lease directory identity has an unsupported shape".into()));
    assert!(f.target.is_dir());
    assert_eq!(std::fs::read_to_string(f.claim_file(&claim)).expect("kept"), stripped);
}

/// §7.1.26: the raw lifecycle records and clears the child; release is idempotent and keeps
/// the directory; an altered claim defeats an update and leaves everything as it was.
#[test]
fn s26_lifecycle_release_and_altered_claim() {
    let f = fixture();
    let mut lease = f.create(Role::RawWorking);
    lease.update(Phase::Launching, None).expect("launching");
    lease.update(Phase::Running, Some(i64::from(std::process::id()))).expect("running");
    assert_eq!(lease.claim().expect("claim").child_owner.expect("child").pid, u64::from(std::process::id()));
    lease.update(Phase::Settled, None).expect("settled");
    let claim = lease.claim().expect("claim");
    assert_eq!(claim.child_owner, None);
    lease.release().expect("release");
    lease.release().expect("release again");
    assert!(!f.claim_file(&claim).exists());
    assert!(f.target.is_dir(), "release never deletes the directory");

    let mut second = f.create(Role::RawWorking);
    let claim = second.claim().expect("claim");
    let altered = format!("{} ", std::fs::read_to_string(f.claim_file(&claim)).expect("file"));
    std::fs::write(f.claim_file(&claim), &altered).expect("alter");
    assert_eq!(second.update(Phase::Launching, None).expect_err("changed").to_string(), "Beeper Message Like Me recovery: directory lease changed before its lifecycle update");
    assert_eq!(second.claim().expect("claim").phase, Phase::Preparing);
    assert_eq!(std::fs::read_to_string(f.claim_file(&claim)).expect("kept"), altered);
    assert!(f.target.is_dir());
}

/// Creation refuses a directory that is not private, and one outside the granted roots.
#[test]
fn creation_checks_the_physical_directory() {
    let f = fixture();
    std::fs::set_permissions(&f.target, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let request = Request { role: Role::RawWorking, path: s(&f.target), output_root: None, recover_after_ms: 2000.0, now_ms: Some(1000.0) };
    let error = DirectoryLease::create(runtime(), f.h.real_effects(), &request).err().expect("refused");
    assert_eq!(error.to_string(), "Beeper Message Like Me recovery: directory lease target is not an owned physical directory");
    let outside = Request { path: "/etc/ssl".into(), ..request };
    let error = DirectoryLease::create(runtime(), f.h.real_effects(), &outside).err().expect("refused");
    assert!(error.to_string().contains("outside the granted workspace roots"), "{error}");
    assert!(
        error.to_string().contains("HostBuilder::workspace_root(DIR)") && error.to_string().contains("--workspace-root DIR"),
        "says how to grant it in the library and on the command line: {error}"
    );
}

/// Found by the 10,000-kill stress run: a recovery reads the claims, then probes each owner.
/// An owner that released its lease (keeping its directory as the result) and then died, in
/// between, looked dead with the stale claim in hand — and its released directory was deleted.
/// Recovery now re-reads the claim after the probe and refuses, deleting nothing.
#[test]
fn a_lease_released_between_the_read_and_the_probe_keeps_its_directory() {
    let f = fixture();
    let mut lease = f.create(Role::RawWorking);
    let claim = lease.claim().expect("claim");
    std::fs::write(f.target.join("result.txt"), "the work").expect("write");
    let claim_file = f.claim_file(&claim);
    // The probe of the owner is where the owner releases its lease and dies.
    let oracle = Box::new(move |_: &Owner| {
        let _ = std::fs::remove_file(&claim_file);
        DEAD
    });
    let effects = f.h.effects(f.h.processes().inspect_with(oracle));
    let result = recover_directory_leases(runtime(), effects, Some(10_000.0)).map_err(|e| e.to_string());
    assert_eq!(result, Err("Beeper Message Like Me recovery: directory lease changed before recovery release".into()));
    assert_eq!(std::fs::read_to_string(f.target.join("result.txt")).expect("kept"), "the work", "the released directory stays");
    drop(lease);
}

/// Beyond the reference (`docs/deviations.md`, "A finished run keeps its directory"): recovery
/// asks the host's run journal, and keeps the directory of a run whose command finished — a raw
/// lease whatever its status, a stage only when it succeeded — removing only the claim. A
/// running entry, an entry for another directory, or none changes nothing.
#[test]
fn a_journalled_finished_run_keeps_its_directory_and_nothing_else_does() {
    // (role, journal entry: None = none, Some(None) = running, Some(Some(code)) = finished)
    let cases: [(Role, Option<Option<i32>>, bool); 6] = [
        (Role::RawWorking, Some(Some(0)), true),
        (Role::RawWorking, Some(Some(3)), true),
        (Role::RawWorking, Some(None), false),
        (Role::RawWorking, None, false),
        (Role::BundleStage, Some(Some(0)), true),
        (Role::BundleStage, Some(Some(1)), false),
    ];
    for (role, entry, kept) in cases {
        let f = fixture();
        let mut lease = f.create(role);
        if role == Role::RawWorking {
            lease.update(Phase::Launching, None).expect("launching");
            lease.update(Phase::Settled, None).expect("settled");
        }
        let claim = lease.claim().expect("claim");
        let journal = f.h.identity.run_journal().expect("a home's host keeps a journal");
        if let Some(finished) = entry {
            let started = journal.begin(&claim.id, &claim.directory_identity).expect("journal entry");
            if let Some(code) = finished {
                started.finished(Some(code), None).expect("finished");
            }
        }
        std::fs::write(f.target.join("result.txt"), "x").expect("write");
        let expected = if kept { report(0, 0, 0, 0) } else { report(1, 0, 0, 0) };
        assert_eq!(f.recover(10_000.0, DEAD), Ok(expected), "{role:?} {entry:?}");
        assert_eq!(f.target.join("result.txt").is_file(), kept, "{role:?} {entry:?}");
        assert!(!f.claim_file(&claim).exists(), "the claim is removed either way");
        assert_eq!(journal.finished_run(&claim.id), Ok(None), "the entry is forgotten with its lease");
    }
    // An entry that names another directory (the path was re-created) keeps nothing.
    let f = fixture();
    let mut lease = f.create(Role::RawWorking);
    lease.update(Phase::Launching, None).expect("launching");
    lease.update(Phase::Settled, None).expect("settled");
    let claim = lease.claim().expect("claim");
    let other = proclease::core::records::DirectoryIdentity { inode: "1".into(), ..claim.directory_identity.clone() };
    let journal = f.h.identity.run_journal().expect("journal");
    journal.begin(&claim.id, &other).expect("entry").finished(Some(0), None).expect("finished");
    assert_eq!(f.recover(10_000.0, DEAD), Ok(report(1, 0, 0, 0)));
    assert!(!f.target.exists());
}

/// RAII (issue #29): a handle dropped unreleased releases a raw lease in which nothing runs —
/// before its launch, or once settled — keeping the directory, as `release` does; it leaves a
/// raw lease whose command may run (`launching`, `running`), every stage, and any lease it was
/// told to [`DirectoryLease::leave`], for recovery to judge once this process is gone.
#[test]
fn a_dropped_handle_releases_only_a_lease_in_which_nothing_can_run() {
    let cases: [(&str, Role, &[Phase], bool, bool); 5] = [
        ("raw, preparing", Role::RawWorking, &[], false, true),
        ("raw, settled", Role::RawWorking, &[Phase::Launching, Phase::Settled], false, true),
        ("raw, launching", Role::RawWorking, &[Phase::Launching], false, false),
        ("stage", Role::BundleStage, &[], false, false),
        ("raw, preparing, left on purpose", Role::RawWorking, &[], true, false),
    ];
    for (name, role, phases, leave, released) in cases {
        let f = fixture();
        let mut lease = f.create(role);
        for phase in phases {
            lease.update(*phase, None).unwrap_or_else(|e| panic!("{name}: {phase:?}: {e}"));
        }
        let claim = lease.claim().expect("claim");
        assert!(f.claim_file(&claim).is_file(), "{name}: claimed");
        if leave {
            lease.leave();
        } else {
            drop(lease);
        }
        assert_eq!(!f.claim_file(&claim).exists(), released, "{name}: released on drop");
        assert!(f.target.is_dir(), "{name}: the directory stays either way");
        // What was left is a live owner's lease now, and a dead owner's recoverable one later.
        if !released {
            assert_eq!(f.recover(10_000.0, LIVE), Ok(report(0, 0, 1, 0)), "{name}");
            assert!(f.claim_file(&claim).is_file(), "{name}");
        }
    }
}

/// A panic the program catches (`catch_unwind`, a thread pool, a task) while a handle is held
/// (#43 case 9): the process lives on, so a lease in which nothing runs is released as on any
/// drop — before, it stayed held by the live process until it exited — and one whose command
/// may run is left for recovery to judge, as a drop leaves it.
#[test]
fn a_caught_panic_releases_a_lease_in_which_nothing_can_run() {
    for (name, phases, released) in [("raw, preparing", &[][..], true), ("raw, launching", &[Phase::Launching][..], false)] {
        let f = fixture();
        let mut lease = f.create(Role::RawWorking);
        for phase in phases {
            lease.update(*phase, None).unwrap_or_else(|e| panic!("{name}: {phase:?}: {e}"));
        }
        let claim = lease.claim().expect("claim");
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            let _held = lease;
            panic!("the embedder's own code panics while it holds the lease");
        }));
        assert!(caught.is_err(), "{name}: the panic was caught");
        assert_eq!(!f.claim_file(&claim).exists(), released, "{name}: released while unwinding");
        assert!(f.target.is_dir(), "{name}: the directory stays either way");
    }
}
