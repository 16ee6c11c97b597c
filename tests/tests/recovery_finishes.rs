//! Recovery that always finishes (issue #16), at the library level with real state homes and
//! directories: host work inside an import (a huge tree, a store lock held by another writer)
//! does not count against the component's call deadline; a lease another recoverer finished is
//! reported as already recovered; an admission or invocation verdict about a claim that changed
//! after it was read is not final; a crash between `mkdir` and the lease leaves nothing a
//! recovery cannot clean up; recovery can keep going past entries it cannot recover.
//! The command-line side is in `host/tests/recovery_cli.rs`.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::time::Duration;

use proclease::core::directory_leases::{self, Action, CreationAction, Options, Request};
use proclease::core::effects::{BatchStatus, CollectionIdentity, CollectionSnapshot, Failure, Processes, Store};
use proclease::core::liveness::{OwnerFacts, OwnerStatus};
use proclease::core::records::Owner;
use proclease::core::records::creation_intent::CreationIntent;
use proclease::core::records::directory_lease::{DirectoryLease as Claim, Phase, Role};
use proclease::core::records::export_admission::{ExportAdmission, Phase as AdmissionPhase, Schema};
use proclease::core::{admission, digest};
use proclease::{Admission, DirectoryLease, Error, Limit, Runtime, RuntimeConfig, recover_directory_creations, recover_each_directory_lease};
use proclease_tests::fakes::{FakeWorld, MemoryStore, RealHome, ScriptedProcesses};

fn runtime() -> &'static Runtime {
    Runtime::shared().expect("component")
}

/// The call deadline of [`impatient`]: five 50 ms engine ticks of the component's own
/// computation (far more than these calls compute, far less than the host work they wait for).
const DEADLINE: Duration = Duration::from_millis(250);
/// How long the host work of these tests takes at least: another holder keeps a lock this long.
const HOST_WORK: Duration = Duration::from_millis(700);

/// A runtime with a call deadline of [`DEADLINE`].
fn impatient() -> &'static Runtime {
    static RUNTIME: std::sync::OnceLock<Runtime> = std::sync::OnceLock::new();
    RUNTIME.get_or_init(|| Runtime::new(RuntimeConfig { call_deadline: DEADLINE, ..RuntimeConfig::default() }).expect("runtime"))
}

/// Holds an exclusive `flock` on `file` for [`HOST_WORK`] from another thread.
fn hold(file: std::fs::File) -> std::thread::JoinHandle<()> {
    file.lock().expect("lock");
    std::thread::spawn(move || {
        std::thread::sleep(HOST_WORK);
        file.unlock().expect("unlock");
    })
}

fn private_dir(path: &Path) {
    std::fs::create_dir_all(path).expect("mkdir");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700)).expect("chmod");
}

fn s(path: &Path) -> String {
    path.to_str().expect("utf-8").into()
}

/// An identity of the previous boot: provably gone.
fn dead_owner() -> Owner {
    Owner { pid: 4242, boot_id: "0".repeat(64), process_start_id: "1".repeat(64) }
}

/// Writes a settled claim of a dead owner for the existing directory `path` (as a crashed
/// supervisor would leave it) and returns it.
fn dead_claim(home: &RealHome, path: &Path, id: &str) -> Claim {
    let identity = |p: &Path| {
        let facts = home.workspace.inspect(&s(p)).expect("inspect").expect("exists");
        facts.identity
    };
    let claim = Claim {
        id: id.into(),
        role: Role::RawWorking,
        path: s(path),
        parent_path: s(path.parent().expect("parent")),
        parent_identity: identity(path.parent().expect("parent")),
        directory_identity: identity(path),
        output_root: None,
        owner: dead_owner(),
        child_owner: None,
        phase: Phase::Settled,
        created_at_ms: 1,
        recover_after_ms: 2,
    }
    .parsed();
    let dir = home.home.join(directory_leases::DIRECTORY);
    private_dir(&dir);
    private_dir(&home.home.join("recovery"));
    let file = dir.join(format!("{id}.json"));
    std::fs::write(&file, &claim.canonical).expect("claim");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    claim.record
}

fn uuid(n: u32) -> String {
    format!("{n:08x}-0000-4000-8000-000000000000")
}

#[test]
fn removing_a_huge_tree_does_not_count_against_the_call_deadline() {
    let home = RealHome::new();
    let root = std::fs::canonicalize(home.dir.path()).expect("realpath");
    let work = root.join("jobs/huge");
    private_dir(&work);
    // 50 directories × 100 files; and the removal first waits for the lock on the parent
    // directory (another remover holds it), so the import takes longer than the deadline.
    for d in 0..50 {
        let dir = work.join(format!("d{d}"));
        std::fs::create_dir(&dir).expect("mkdir");
        for f in 0..100 {
            std::fs::write(dir.join(format!("f{f}")), b"x").expect("file");
        }
    }
    dead_claim(&home, &work, &uuid(1));
    let holder = hold(std::fs::File::open(work.parent().expect("parent")).expect("open the parent"));
    let started = std::time::Instant::now();
    let run = recover_each_directory_lease(impatient(), home.real_effects(), None, Options::default()).expect("recovery runs to the end");
    eprintln!("recovery took {:?} under a {DEADLINE:?} deadline", started.elapsed());
    holder.join().expect("holder");
    assert_eq!(run.stopped, None, "{run:?}");
    assert_eq!(run.report().recovered, 1);
    assert!(!work.exists());
    let leases = home.home.join(directory_leases::DIRECTORY);
    assert_eq!(std::fs::read_dir(&leases).expect("collection").count(), 0, "the claim went too");
}

#[test]
fn waiting_for_another_writer_does_not_count_against_the_call_deadline() {
    let home = RealHome::new();
    // Another writer holds the admission collection's lock.
    let name = format!("{}.lock", digest::identity_digest("proclease-collection-lock", admission::DIRECTORY));
    let holder = hold(home.store.lock_file(&name).expect("lock file"));
    let mut held = Admission::acquire(impatient(), home.real_effects()).expect("the acquire waits in the host, then succeeds");
    held.release().expect("release");
    holder.join().expect("holder");
}

#[test]
fn a_component_spinning_on_imports_is_still_stopped() {
    // The deadline no longer counts time in imports, so a component calling imports without
    // end is bounded by its import calls instead.
    let home = RealHome::new();
    let runtime = Runtime::new(RuntimeConfig { max_import_calls: 3, ..RuntimeConfig::default() }).expect("runtime");
    let error = Admission::acquire(&runtime, home.real_effects()).err().expect("an acquire needs more than 3 import calls");
    assert!(matches!(error, Error::Limit(Limit::ImportCalls { cap: 3 })), "{error:?}");
    assert_eq!(error.to_string(), "the component made more than 3 import calls in one call and was stopped");
}

/// A store that loses `victim` (another recoverer removed it) right after the collection was
/// listed.
#[derive(Clone)]
struct RacingStore {
    inner: MemoryStore,
    victim: String,
}

impl Store for RacingStore {
    fn read_if_present(&mut self, path: &str, max_bytes: u32) -> Result<Option<String>, Failure> {
        self.inner.read_if_present(path, max_bytes)
    }
    fn create_if_absent(&mut self, path: &str, content: &str) -> Result<bool, Failure> {
        self.inner.create_if_absent(path, content)
    }
    fn replace_if_unchanged(&mut self, path: &str, expected: &str, content: &str) -> Result<bool, Failure> {
        self.inner.replace_if_unchanged(path, expected, content)
    }
    fn remove_if_unchanged(&mut self, path: &str, expected: &str) -> Result<bool, Failure> {
        self.inner.remove_if_unchanged(path, expected)
    }
    fn ensure_private_directory(&mut self, path: &str) -> Result<CollectionIdentity, Failure> {
        self.inner.ensure_private_directory(path)
    }
    fn snapshot(&mut self, path: &str, orphans: bool) -> Result<Option<CollectionSnapshot>, Failure> {
        let snapshot = self.inner.snapshot(path, orphans);
        self.inner.state().files.remove(&self.victim);
        snapshot
    }
    fn read_batch(&mut self, path: &str, names: &[String], per: u32, total: u32, expected: &CollectionIdentity) -> Result<Vec<(String, BatchStatus)>, Failure> {
        self.inner.read_batch(path, names, per, total, expected)
    }
}

/// Three settled leases of a dead owner on directories of an in-memory workspace.
fn three_dead_leases() -> (FakeWorld, Vec<Claim>) {
    let world = FakeWorld::new(&"b".repeat(64), OwnerStatus::DifferentOrDead);
    world.workspace.add("/ws", 1);
    let mut claims = Vec::new();
    for n in 0..3u32 {
        let path = format!("/ws/job{n}");
        let facts = world.workspace.add(&path, 10 + u64::from(n));
        let claim = Claim {
            id: uuid(n + 1),
            role: Role::RawWorking,
            path,
            parent_path: "/ws".into(),
            parent_identity: world.workspace.directories()["/ws"].identity.clone(),
            directory_identity: facts.identity,
            output_root: None,
            owner: dead_owner(),
            child_owner: None,
            phase: Phase::Settled,
            created_at_ms: 1,
            recover_after_ms: 2,
        }
        .parsed();
        world.store.put(&directory_leases::claim_path(&claim.record.id), &claim.canonical);
        claims.push(claim.record);
    }
    (world, claims)
}

/// Recovery with `options` while another recoverer removes the second claim right after the
/// collection was listed.
fn recover_racing(options: Options) -> directory_leases::Run {
    let (world, claims) = three_dead_leases();
    let mut store = RacingStore { inner: world.store.clone(), victim: directory_leases::claim_path(&claims[1].id) };
    let (mut procs, mut ws, mut clock, mut entropy) = (world.processes.clone(), world.workspace.clone(), world.clock.clone(), world.entropy.clone());
    let fx = directory_leases::Effects { store: &mut store, processes: &mut procs, workspace: &mut ws, clock: &mut clock, entropy: &mut entropy };
    directory_leases::recover_each(Some(5.0), fx, options).expect("runs")
}

#[test]
fn a_lease_another_recoverer_finished_is_reported_not_refused() {
    // The reference stops: the claim changed during recovery inspection.
    let strict = recover_racing(Options::default());
    assert_eq!(strict.stopped.as_ref().map(|e| e.to_string()).as_deref(), Some("Beeper Message Like Me recovery: directory lease changed during recovery inspection"));
    assert_eq!(strict.report().recovered, 1, "the lease before it stays recovered");
    // The command line's recovery: done by someone else, reported, and the rest recovered.
    let run = recover_racing(Options { concurrent: true, ..Options::default() });
    assert_eq!(run.stopped, None, "{run:?}");
    let actions: Vec<&Action> = run.outcomes.iter().map(|o| &o.action).collect();
    assert_eq!(actions, [&Action::RemoveDirectory, &Action::AlreadyRecovered, &Action::RemoveDirectory]);
    assert_eq!(run.report().recovered, 2);
}

#[test]
fn a_refusal_about_a_claim_that_changed_after_it_was_read_is_not_final() {
    // The admission's owner was probed after the claim was read: it had released (and exited)
    // meanwhile. The reference refuses ("cannot be inspected safely"); the claim is gone, so
    // the acquire starts again and succeeds.
    let boot = "b".repeat(64);
    let claim = ExportAdmission {
        schema: Schema::V2,
        id: uuid(7),
        owner: Owner { pid: 77, boot_id: boot.clone(), process_start_id: "c".repeat(64) },
        helper_owner: Some(Owner { pid: 78, boot_id: boot.clone(), process_start_id: "d".repeat(64) }),
        phase: Some(AdmissionPhase::HelperActive),
        revision: Some(uuid(8)),
    }
    .parsed();
    let processes = ScriptedProcesses::new(&boot, OwnerStatus::DifferentOrDead);
    let world = FakeWorld::with_processes(processes.clone());
    world.store.put(admission::CLAIM_PATH, &claim.canonical);
    // The probe of the owner is where the owner's release lands.
    let store = world.store.clone();
    processes.script().facts = Some(Box::new(move |o: &Owner| {
        store.state().files.remove(admission::CLAIM_PATH);
        OwnerFacts::implying(o, OwnerStatus::DifferentOrDead)
    }));
    let (mut store, mut procs, mut entropy) = (world.store.clone(), world.processes.clone(), world.entropy.clone());
    let handle = admission::acquire(&mut store, &mut procs as &mut dyn Processes, &mut entropy).expect("acquired on the next attempt");
    assert_eq!(handle.claim.owner, world.processes.script().own);

    // Without the release (the claim unchanged after the probe), the reference's verdict stands.
    let processes = ScriptedProcesses::new(&boot, OwnerStatus::DifferentOrDead);
    let world = FakeWorld::with_processes(processes);
    world.store.put(admission::CLAIM_PATH, &claim.canonical);
    let (mut store, mut procs, mut entropy) = (world.store.clone(), world.processes.clone(), world.entropy.clone());
    let error = admission::acquire(&mut store, &mut procs as &mut dyn Processes, &mut entropy).expect_err("refused");
    assert_eq!(error.to_string(), "Beeper Message Like Me recovery: prior export owner cannot be inspected safely");
}

/// What a creator (the intent `uuid(n)`, of a previous boot) that died after making `made`
/// (outermost first, each made here, private and empty, and recorded with its identity) and
/// before leasing the last of them leaves: its intent, and the intent's file.
fn dead_creators_intent(home: &RealHome, n: u32, made: &[std::path::PathBuf]) -> (CreationIntent, std::path::PathBuf) {
    for dir in made {
        private_dir(dir);
    }
    let identity = |p: &Path| home.workspace.inspect(&s(p)).expect("inspect").map(|f| f.identity);
    let last = made.last().expect("a directory");
    let intent = CreationIntent { id: uuid(n), owner: dead_owner(), path: s(last), created: made.iter().map(|p| (s(p), identity(p))).collect() }.parsed();
    let intents = home.home.join(directory_leases::INTENTS);
    private_dir(&home.home.join("recovery"));
    private_dir(&intents);
    let file = intents.join(intent.record.file_name());
    std::fs::write(&file, &intent.canonical).expect("intent");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    (intent.record, file)
}

#[test]
fn a_crash_between_mkdir_and_the_lease_leaves_nothing_after_recovery() {
    let home = RealHome::new();
    let root = std::fs::canonicalize(home.dir.path()).expect("realpath");
    // What a creator that died after `mkdir` leaves: its intent and the empty directories it made.
    let made = [root.join("jobs"), root.join("jobs/new")];
    dead_creators_intent(&home, 9, &made);
    let intents = home.home.join(directory_leases::INTENTS);
    // A directory with something in it is never removed, intent or not.
    let kept = root.join("jobs/kept");
    dead_creators_intent(&home, 10, std::slice::from_ref(&kept));
    std::fs::write(kept.join("data"), b"mine").expect("data");
    // A creator that died between `mkdir` and recording the identity (`null` in its intent),
    // and a file put where its directory was: never removed, never listed.
    let swapped = root.join("swapped");
    let (intent, file) = dead_creators_intent(&home, 11, std::slice::from_ref(&swapped));
    std::fs::write(&file, CreationIntent { created: vec![(s(&swapped), None)], ..intent }.parsed().canonical).expect("intent without identity");
    std::fs::remove_dir(&swapped).expect("rmdir");
    std::fs::write(&swapped, b"precious").expect("a file where the directory was");

    let dry = recover_directory_creations(runtime(), home.real_effects(), true).expect("dry run");
    assert_eq!(dry.len(), 3);
    assert!(made[1].exists(), "a dry run changes nothing");
    // It says what the real run does: the empty directory goes, the one with data stays.
    let would = |path: &Path| dry.iter().find(|o| o.path.as_deref() == Some(&s(path))).map(|o| o.action.clone());
    assert!(matches!(would(&made[1]), Some(CreationAction::Finish(removed)) if removed.first() == Some(&s(&made[1]))), "{dry:?}");
    assert_eq!(would(&kept), Some(CreationAction::Finish(Vec::new())), "{dry:?}");
    assert_eq!(would(&swapped), Some(CreationAction::Finish(Vec::new())), "{dry:?}");
    let outcomes = recover_directory_creations(runtime(), home.real_effects(), false).expect("recovered");
    assert!(outcomes.iter().all(|o| o.done), "{outcomes:?}");
    assert!(!made[1].exists(), "the crashed creation's empty directory is gone");
    assert!(root.join("jobs").exists(), "its parent now holds another directory: kept");
    assert!(kept.join("data").exists(), "a directory with content stays");
    assert_eq!(std::fs::read(&swapped).expect("the file"), b"precious", "a file where a directory was stays");
    assert_eq!(std::fs::read_dir(&intents).expect("intents").count(), 0, "every intent is finished");
}

/// A lease of the directory a dead creator made (the reference's `create`, of an existing
/// directory) takes it out of that creator's intent: released and kept, it survives the intent's
/// recovery; the parent the creator also made stays in the intent, and recovery leaves it since
/// it is not empty (`docs/deviations.md` 27).
#[test]
fn a_lease_of_a_directory_a_dead_creator_made_takes_it_out_of_the_intent() {
    let home = RealHome::new();
    let root = std::fs::canonicalize(home.dir.path()).expect("realpath");
    let made = [root.join("jobs"), root.join("jobs/new")];
    let (intent, file) = dead_creators_intent(&home, 9, &made);
    let intents = home.home.join(directory_leases::INTENTS);
    let identity = |p: &Path| home.workspace.inspect(&s(p)).expect("inspect").map(|f| f.identity);

    let request = Request { role: Role::RawWorking, path: s(&made[1]), output_root: None, recover_after_ms: 2.0, now_ms: Some(1.0) };
    let mut lease = DirectoryLease::create(runtime(), home.real_effects(), &request).expect("leased");
    let left = CreationIntent { created: vec![(s(&made[0]), identity(&made[0]))], ..intent }.parsed();
    assert_eq!(std::fs::read_to_string(&file).expect("the intent stays for the parent"), left.canonical, "only the leased directory left the intent");
    lease.release().expect("release");

    let outcomes = recover_directory_creations(runtime(), home.real_effects(), false).expect("recovered");
    assert!(outcomes.iter().all(|o| o.done), "{outcomes:?}");
    assert!(made[1].is_dir(), "the released lease's directory stays, empty as it is");
    assert!(made[0].is_dir(), "its parent holds it: kept");
    assert_eq!(std::fs::read_dir(&intents).expect("intents").count(), 0, "the intent is finished");
}

#[test]
fn creating_with_the_directory_leaves_no_intent_and_undoes_a_failed_lease() {
    let home = RealHome::new();
    let root = std::fs::canonicalize(home.dir.path()).expect("realpath");
    let work = root.join("fresh/jobs/a");
    let request = Request { role: Role::RawWorking, path: s(&work), output_root: None, recover_after_ms: 2.0, now_ms: Some(1.0) };
    let mut lease = DirectoryLease::create_with_directory(runtime(), home.real_effects(), &request).expect("created and leased");
    assert_eq!(std::fs::metadata(&work).expect("dir").permissions().mode() & 0o777, 0o700);
    let intents = home.home.join(directory_leases::INTENTS);
    assert_eq!(std::fs::read_dir(&intents).expect("intents").count(), 0, "the intent is gone once the lease claims it");
    lease.release().expect("release");
    // A lease that cannot be created (an invalid request time) creates nothing.
    let bad = root.join("other/b");
    let request = Request { role: Role::RawWorking, path: s(&bad), output_root: None, recover_after_ms: 0.0, now_ms: Some(1.0) };
    let error = DirectoryLease::create_with_directory(runtime(), home.real_effects(), &request).err().expect("refused");
    assert_eq!(error.to_string(), "Beeper Message Like Me recovery: directory lease request is invalid");
    assert!(!root.join("other").exists());
}

#[test]
fn recovery_can_go_on_past_what_it_cannot_recover() {
    let home = RealHome::new();
    let root = std::fs::canonicalize(home.dir.path()).expect("realpath");
    let mut dirs = Vec::new();
    for n in 0..3u32 {
        let dir = root.join(format!("jobs/j{n}"));
        private_dir(&dir);
        dead_claim(&home, &dir, &uuid(n + 1));
        dirs.push(dir);
    }
    // The second claim file is empty (an edit, another program's interrupted write).
    let leases = home.home.join(directory_leases::DIRECTORY);
    std::fs::write(leases.join(format!("{}.json", uuid(2))), b"").expect("empty");
    let strict = recover_each_directory_lease(runtime(), home.real_effects(), None, Options::default()).expect("runs");
    assert_eq!(strict.stopped.as_ref().map(|e| e.to_string()).as_deref(), Some("Beeper Message Like Me recovery: directory lease is not valid JSON"));
    assert!(!dirs[0].exists() && dirs[2].exists(), "the reference stops at the bad file: the first is recovered, the third is not");
    let run = recover_each_directory_lease(runtime(), home.real_effects(), None, Options { skip_invalid: true, ..Options::default() }).expect("runs");
    assert_eq!(run.stopped, None);
    assert!(!dirs[2].exists(), "the rest is recovered");
    assert!(leases.join(format!("{}.json", uuid(2))).exists(), "the bad file itself is never deleted");
    assert!(matches!(&run.outcomes[0].action, Action::Skip(e) if e.to_string().ends_with("directory lease is not valid JSON")), "{run:?}");
}

/// A creation whose lease then fails removes what it made and its intent; but a directory the
/// undo cannot remove (something was put in it meanwhile) keeps the intent, so that `recover`
/// finishes it once the creator is gone (and a signal's message can name it), instead of an
/// unleased directory no record knows of (`docs/deviations.md` 11).
#[test]
fn a_directory_the_undo_of_a_failed_creation_cannot_remove_keeps_its_intent() {
    use proclease::core::effects::{DirectoryFacts, Workspace};
    use proclease::core::records::DirectoryIdentity;
    use proclease_tests::fakes::MemoryWorkspace;
    /// The in-memory workspace, where the leased directory shows mode 0755 once made (the lease
    /// refuses it: not a private directory), and, with `crowd`, gets an entry put in it as it is
    /// made (another process's file).
    struct Refusing {
        inner: MemoryWorkspace,
        leased: String,
        crowd: bool,
    }
    impl Workspace for Refusing {
        fn inspect(&mut self, path: &str) -> Result<Option<DirectoryFacts>, Failure> {
            let facts = self.inner.inspect(path)?;
            Ok(facts.map(|facts| if path == self.leased { DirectoryFacts { mode: 0o755, ..facts } } else { facts }))
        }
        fn remove_tree(&mut self, path: &str, expected: &DirectoryIdentity) -> Result<bool, Failure> {
            self.inner.remove_tree(path, expected)
        }
        fn create_private_directory(&mut self, path: &str) -> Result<Vec<String>, Failure> {
            let created = self.inner.create_private_directory(path)?;
            if self.crowd {
                self.inner.add(&format!("{path}/theirs"), 999);
            }
            Ok(created)
        }
        fn remove_empty_directory(&mut self, path: &str, expected: Option<&DirectoryIdentity>) -> Result<bool, Failure> {
            self.inner.remove_empty_directory(path, expected)
        }
    }
    for crowd in [false, true] {
        let world = FakeWorld::new(&"b".repeat(64), OwnerStatus::ExactLiveOwner);
        world.workspace.add("/ws", 1);
        let leased = "/ws/new/job";
        let mut effects = world.effects();
        effects.workspace = Box::new(Refusing { inner: world.workspace.clone(), leased: leased.into(), crowd });
        let request = Request { role: Role::RawWorking, path: leased.into(), output_root: None, recover_after_ms: 2.0, now_ms: Some(1.0) };
        let error = DirectoryLease::create_with_directory(runtime(), effects, &request).err().expect("refused");
        assert!(error.to_string().contains("not an owned physical directory"), "{error}");
        let intents: Vec<String> = world.store.state().files.keys().filter(|path| path.starts_with(directory_leases::INTENTS)).cloned().collect();
        let left: Vec<String> = world.workspace.directories().keys().filter(|path| path.starts_with("/ws/")).cloned().collect();
        if crowd {
            assert_eq!(left, ["/ws/new", "/ws/new/job", "/ws/new/job/theirs"], "what holds another's entry stays");
            assert_eq!(intents.len(), 1, "and its intent stays, for recover: {intents:?}");
        } else {
            assert!(left.is_empty() && intents.is_empty(), "all undone: {left:?} {intents:?}");
        }
    }
}
