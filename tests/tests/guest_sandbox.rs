//! The guest sandbox (issue #9 item 6): a hostile or buggy component (`tests/hostile-guest`)
//! has no authority but its proclease imports; it is stopped by the call deadline, its import
//! budget and the memory cap with a clear [`Error::Limit`]; its import calls with paths outside what the host
//! granted are refused with typed errors and touch nothing; and the same [`Runtime`] keeps
//! serving the real component afterwards.

use std::collections::BTreeMap;
use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use proclease::effects::Effects;
use proclease::wasmtime::Store;
use proclease::wasmtime::component::{Component, Instance, Val};
use proclease::{Admission, Error, HostState, Limit, Runtime, RuntimeConfig};
use proclease_tests::fakes::RealHome;
use proclease_tests::fs_fixtures::tree;
use proclease_tests::hostile;

const DEADLINE: Duration = Duration::from_secs(1);
const MEMORY_CAP: usize = 16 << 20;
/// How late past the deadline a stop may come on a loaded 2-core machine (the engine ticks
/// every 50 ms).
const SLACK: Duration = Duration::from_secs(2);

/// One runtime with a 1 s deadline and a 16 MiB memory cap, shared by every test here.
fn runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| Runtime::new(RuntimeConfig { call_deadline: DEADLINE, max_memory_bytes: MEMORY_CAP, ..RuntimeConfig::default() }).expect("the runtime starts"))
}

/// The hostile component, loaded once into [`runtime`]'s engine.
fn hostile_component() -> &'static Component {
    static COMPONENT: OnceLock<Component> = OnceLock::new();
    COMPONENT.get_or_init(|| hostile::component(runtime().engine()))
}

fn instantiate(effects: Effects) -> (Store<HostState>, Instance) {
    runtime().instantiate_component(hostile_component(), effects).expect("the hostile component instantiates")
}

/// The same runtime still runs the real component: a pure export, and an admission
/// acquire/release on a real state home.
fn assert_real_component_still_works(runtime: &Runtime) {
    let mut instance = runtime.instantiate().expect("the real component instantiates after a hostile one was stopped");
    assert_eq!(instance.records().canonicalize(r#"{"b":1,"a":[true,null]}"#).expect("canonicalize runs"), Ok(r#"{"a":[true,null],"b":1}"#.to_string()));
    let home = RealHome::new();
    let mut admission = Admission::acquire(runtime, home.real_effects()).expect("admission acquired");
    admission.release().expect("admission released");
}

#[test]
fn the_hostile_component_imports_only_proclease_interfaces() {
    let ty = hostile_component().component_type();
    let mut imports: Vec<String> = ty.imports(runtime().engine()).map(|(name, _)| name.to_string()).collect();
    imports.sort();
    assert_eq!(imports, ["proclease:lease/plugin-catalog@0.3.0", "proclease:lease/state-store@0.3.0", "proclease:lease/types@0.3.0", "proclease:lease/workspace@0.3.0"]);
    assert!(imports.iter().all(|name| name.starts_with("proclease:lease/")), "no wasi or other imports: {imports:?}");
}

#[test]
fn a_spinning_guest_is_interrupted_at_its_deadline_and_the_runtime_carries_on() {
    let home = RealHome::new();
    let (mut store, instance) = instantiate(home.real_effects());
    let spin = instance.get_typed_func::<(), ()>(&mut store, "spin").expect("spin is exported");
    let started = Instant::now();
    let error = Error::from(spin.call(&mut store, ()).expect_err("spin never returns by itself"));
    let took = started.elapsed();
    eprintln!("spin was stopped after {took:?}");
    assert!(matches!(error, Error::Limit(Limit::Deadline { deadline }) if deadline == DEADLINE), "{error:?}");
    assert_eq!(error.to_string(), "the component computed past its 1s call deadline and was interrupted");
    assert!(took >= DEADLINE - Duration::from_millis(100) && took < DEADLINE + SLACK, "stopped after {took:?}");

    // The trapped instance is finished, with a clear error rather than a hang or a crash.
    let again = spin.call(&mut store, ()).expect_err("a trapped instance cannot be entered again");
    assert!(matches!(Error::from(again), Error::Component(_)));

    assert_real_component_still_works(runtime());
}

#[test]
fn a_guest_calling_imports_in_a_loop_is_stopped_by_its_import_budget() {
    // Time inside imports is the host's and does not count against the deadline, so a guest
    // spinning on imports is stopped by its cap on import calls per call.
    const CAP: u64 = 20_000;
    let runtime = Runtime::new(RuntimeConfig { call_deadline: DEADLINE, max_import_calls: CAP, ..RuntimeConfig::default() }).expect("runtime");
    let component = hostile::component(runtime.engine());
    let home = RealHome::new();
    let (mut store, instance) = runtime.instantiate_component(&component, home.real_effects()).expect("instantiates");
    let spin = instance.get_typed_func::<(&str,), ()>(&mut store, "spin-on-imports").expect("exported");
    // Each refused call returns an error string, so the host calls back into the guest's
    // allocator every time.
    let error = Error::from(spin.call(&mut store, ("../x",)).expect_err("never returns by itself"));
    assert!(matches!(error, Error::Limit(Limit::ImportCalls { cap: CAP })), "{error:?}");
    assert_eq!(error.to_string(), format!("the component made more than {CAP} import calls in one call and was stopped"));
    assert_real_component_still_works(&runtime);
}

#[test]
fn the_deadline_counts_each_call_not_the_instance_lifetime() {
    // A held admission lives in one instance while its helper runs; a release after longer
    // than the deadline must still work.
    let home = RealHome::new();
    let mut admission = Admission::acquire(runtime(), home.real_effects()).expect("acquired");
    std::thread::sleep(DEADLINE + Duration::from_millis(300));
    admission.release().expect("a release after an idle spell longer than the deadline is not interrupted");

    let (mut store, instance) = instantiate(home.real_effects());
    let escape = instance.get_typed_func::<(&str,), (String,)>(&mut store, "escape-store").expect("exported");
    std::thread::sleep(DEADLINE + Duration::from_millis(300));
    let (outcome,) = escape.call(&mut store, ("runs/idle.json",)).expect("a call after an idle spell runs");
    assert!(outcome.starts_with("read-if-present: ok StoredFile { text: None }\ncreate-if-absent: ok true"), "{outcome}");
}

#[test]
fn a_hoarding_guest_is_stopped_at_the_memory_cap_and_the_runtime_carries_on() {
    let home = RealHome::new();
    let (mut store, instance) = instantiate(home.real_effects());
    let hoard = instance.get_typed_func::<(), (u64,)>(&mut store, "hoard").expect("hoard is exported");
    let started = Instant::now();
    let result = hoard.call(&mut store, ());
    eprintln!("hoard was stopped after {:?}", started.elapsed());
    let error = Error::from(result.expect_err("hoard is stopped, not allowed to return what it got"));
    let Error::Limit(Limit::Memory { cap_bytes, requested_bytes }) = &error else { panic!("not a memory limit: {error:?}") };
    assert_eq!(*cap_bytes, MEMORY_CAP);
    assert!(*requested_bytes > MEMORY_CAP && *requested_bytes <= MEMORY_CAP + (2 << 20), "{requested_bytes}");
    let message = error.to_string();
    assert_eq!(message, format!("the component tried to grow its memory to 17 MiB ({requested_bytes} bytes), past its 16 MiB cap, and was stopped"));

    assert_real_component_still_works(runtime());
}

#[test]
fn a_component_that_needs_more_than_the_cap_to_start_is_refused() {
    let tiny = Runtime::new(RuntimeConfig { max_memory_bytes: 64 << 10, ..RuntimeConfig::default() }).expect("runtime");
    let component = hostile::component(tiny.engine());
    let home = RealHome::new();
    let error = tiny.instantiate_component(&component, home.real_effects()).err().expect("refused");
    assert!(matches!(error, Error::Limit(Limit::Memory { cap_bytes: 65536, .. })), "{error:?}");
    let error = tiny.instantiate().err().expect("the real component does not fit in 64 KiB either");
    assert!(error.to_string().contains("past its 64 KiB cap"), "{error}");
}

/// A temporary tree: a state home, a granted workspace root, and things outside both.
///
/// ```text
/// <root>/state/                 state home
///        state/recovery  -> <root>/outside          (planted symlink, a state directory name)
///        state/runs/leak.json  -> <root>/outside/secret.txt
///        state/runs/empty.json -> <root>/outside/empty.txt
///        state/runs/sub  -> <root>/outside
///        ws/                    the only granted workspace root
///        ws/link -> <root>/outside/victim
///        ws/control/            a private directory the guest may legitimately remove
///        outside/secret.txt, outside/empty.txt (empty), outside/victim/{keep.txt, inner/}
/// ```
struct Sandbox {
    _dir: tempfile::TempDir,
    root: PathBuf,
    home: PathBuf,
    outside: PathBuf,
    host: proclease::Host,
}

const SECRET: &str = "the secret outside the state home\n";

fn private_dir(path: &Path) {
    std::fs::DirBuilder::new().mode(0o700).create(path).expect("mkdir");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700)).expect("chmod");
}

impl Sandbox {
    fn new() -> Sandbox {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = std::fs::canonicalize(dir.path()).expect("realpath");
        let home = root.join("state");
        let outside = root.join("outside");
        let ws = root.join("ws");
        private_dir(&home);
        private_dir(&outside);
        std::fs::write(outside.join("secret.txt"), SECRET).expect("write");
        std::fs::write(outside.join("empty.txt"), "").expect("write");
        private_dir(&outside.join("victim"));
        std::fs::write(outside.join("victim/keep.txt"), "keep\n").expect("write");
        private_dir(&outside.join("victim/inner"));
        std::os::unix::fs::symlink(&outside, home.join("recovery")).expect("symlink");
        private_dir(&home.join("runs"));
        std::os::unix::fs::symlink(outside.join("secret.txt"), home.join("runs/leak.json")).expect("symlink");
        std::os::unix::fs::symlink(outside.join("empty.txt"), home.join("runs/empty.json")).expect("symlink");
        std::os::unix::fs::symlink(&outside, home.join("runs/sub")).expect("symlink");
        private_dir(&ws);
        std::os::unix::fs::symlink(outside.join("victim"), ws.join("link")).expect("symlink");
        private_dir(&ws.join("control"));
        let host = proclease::Host::builder().state_home(&home).workspace_root(&ws).build().expect("host");
        Sandbox { _dir: dir, root, home, outside, host }
    }

    fn effects(&self) -> Effects {
        self.host.effects()
    }

    /// The identity of `path` as a workspace granting `root` reports it (no grant needed for
    /// the test itself).
    fn identity_of(&self, path: &Path) -> proclease::core::records::DirectoryIdentity {
        let privileged = proclease::Host::builder().state_home(&self.home).workspace_root(&self.root).build().expect("host");
        privileged.workspace().inspect(path.to_str().expect("utf-8")).expect("inspect").expect("present").identity
    }
}

/// Whether store path `path` names a symbolic link planted directly in a real directory of
/// the state home.
fn planted_link(home: &Path, path: &str) -> bool {
    std::fs::symlink_metadata(home.join(path)).is_ok_and(|m| m.file_type().is_symlink())
}

fn escape_store(store: &mut Store<HostState>, instance: &Instance, path: &str) -> String {
    let escape = instance.get_typed_func::<(&str,), (String,)>(&mut *store, "escape-store").expect("exported");
    escape.call(&mut *store, (path,)).expect("escape-store returns").0
}

#[test]
fn store_calls_outside_the_state_home_are_refused_and_touch_nothing() {
    let sandbox = Sandbox::new();
    let (mut store, instance) = instantiate(sandbox.effects());
    // The store's own bookkeeping (`.proclease/`: per-record mutation locks) may change;
    // nothing else, inside the state home or outside it, may.
    let bookkeeping = sandbox.home.strip_prefix(&sandbox.root).expect("the home is in the sandbox").join(".proclease");
    let observed = || tree(&sandbox.root).into_iter().filter(|(path, _)| !path.starts_with(&bookkeeping)).collect::<BTreeMap<_, _>>();
    let before = observed();
    let absolute_secret = sandbox.outside.join("secret.txt").display().to_string();
    let attempts = [
        "../x",
        "/etc/passwd",
        ".proclease/locks/x",
        "recovery/../../outside/secret.txt",
        absolute_secret.as_str(),
        // Through symbolic links planted in the state home.
        "recovery/secret.txt",
        "recovery/planted.json",
        "runs/leak.json",
        "runs/empty.json",
        "runs/sub/secret.txt",
        "runs/sub/planted.json",
    ];
    for path in attempts {
        let outcome = escape_store(&mut store, &instance, path);
        eprintln!("{path}:\n{outcome}");
        assert_eq!(outcome.lines().count(), 7, "{outcome}");
        for line in outcome.lines() {
            let (function, result) = line.split_once(": ").expect("function: outcome");
            // `create-if-absent` never writes through an existing entry: over a planted symbolic
            // link it answers "it existed" (false), as the reference's link(2)-based create does.
            let existed = function == "create-if-absent" && result == "ok false" && planted_link(&sandbox.home, path);
            assert!(result.starts_with("refused ") || result.starts_with("unsafe ") || existed, "{path}: {function} was not refused: {result}");
        }
        assert!(!outcome.contains("the secret"), "{path}: the secret was read: {outcome}");
        assert!(!outcome.contains("root:"), "{path}: /etc/passwd was read: {outcome}");
        assert_eq!(observed(), before, "{path}: something changed on disk");
    }
    assert_eq!(std::fs::read_to_string(sandbox.outside.join("secret.txt")).expect("still there"), SECRET);

    // Control: the same calls on a legitimate path do reach the store.
    let outcome = escape_store(&mut store, &instance, "runs/control.json");
    assert!(outcome.starts_with("read-if-present: ok StoredFile { text: None }\ncreate-if-absent: ok true\n"), "{outcome}");
    assert_eq!(std::fs::read_to_string(sandbox.home.join("runs/control.json")).expect("created"), "written by the hostile guest\n");
}

fn escape_workspace(store: &mut Store<HostState>, instance: &Instance, path: &str, expected: Option<&proclease::core::records::DirectoryIdentity>) -> String {
    let func = instance.get_func(&mut *store, "escape-workspace").expect("exported");
    let expected = expected.map(|i| {
        Box::new(Val::Record(vec![
            ("device".into(), Val::String(i.device.clone())),
            ("inode".into(), Val::String(i.inode.clone())),
            ("birthtime-ns".into(), Val::String(i.birthtime_ns.clone())),
        ]))
    });
    let mut results = [Val::Bool(false)];
    func.call(&mut *store, &[Val::String(path.into()), Val::Option(expected)], &mut results).expect("escape-workspace returns");
    match &results[0] {
        Val::String(text) => text.clone(),
        other => panic!("not a string: {other:?}"),
    }
}

#[test]
fn workspace_calls_outside_the_granted_roots_are_refused_and_delete_nothing() {
    let sandbox = Sandbox::new();
    let (mut store, instance) = instantiate(sandbox.effects());
    let victim = sandbox.outside.join("victim");
    let victim_identity = sandbox.identity_of(&victim);
    let inner_identity = sandbox.identity_of(&victim.join("inner"));
    let home_identity = sandbox.identity_of(&sandbox.home);
    let before = tree(&sandbox.root);
    let etc_before = std::fs::symlink_metadata("/etc").expect("/etc").len();

    let s = |p: &Path| p.display().to_string();
    let ws = sandbox.root.join("ws");
    // (path, the identity handed to remove-tree (else whatever inspect reports), may inspect succeed)
    let attempts: Vec<(String, Option<&proclease::core::records::DirectoryIdentity>, bool)> = vec![
        ("/etc".into(), None, false),
        (s(&sandbox.root), None, false),
        (s(&sandbox.home), Some(&home_identity), false),
        (s(&victim), Some(&victim_identity), false),
        (format!("{}/../outside/victim", s(&ws)), Some(&victim_identity), false),
        // Through a symbolic link inside the granted root: inspect reports the link itself.
        (s(&ws.join("link")), Some(&victim_identity), true),
        (s(&ws.join("link/inner")), Some(&inner_identity), true),
    ];
    for (path, expected, inspectable) in &attempts {
        let outcome = escape_workspace(&mut store, &instance, path, *expected);
        eprintln!("{path}:\n{outcome}");
        let (inspect, remove) = outcome.split_once('\n').expect("two lines");
        if !*inspectable {
            assert!(inspect.starts_with("inspect: refused "), "{path}: inspect was not refused: {inspect}");
        } else {
            assert!(!inspect.contains(&victim_identity.inode), "{path}: inspect followed the link: {inspect}");
        }
        assert!(remove.starts_with("remove-tree: refused ") || remove.starts_with("remove-tree: identity-changed "), "{path}: remove-tree was not refused: {remove}");
        assert_eq!(tree(&sandbox.root), before, "{path}: something changed on disk");
    }
    assert!(victim.join("keep.txt").is_file() && victim.join("inner").is_dir());
    assert_eq!(std::fs::symlink_metadata("/etc").expect("/etc is still there").len(), etc_before);

    // Control: a private directory inside the granted root is removed when asked properly.
    let control = ws.join("control");
    let outcome = escape_workspace(&mut store, &instance, &s(&control), None);
    assert!(outcome.ends_with("\nremove-tree: ok true"), "{outcome}");
    assert!(!control.exists());
}

#[test]
fn a_guest_hoarding_catalog_locks_is_refused_past_the_bound_and_releases_them_all() {
    let home = RealHome::new();
    let (mut store, instance) = instantiate(home.real_effects());
    let hoard = instance.get_typed_func::<(), (String,)>(&mut store, "hoard-locks").expect("hoard-locks export");
    let (outcome,) = hoard.call(&mut store, ()).expect("returns the refusal");
    assert_eq!(outcome, "64: portable plugin catalog lock is already held 64 times over by this component");
    drop(store);
    // Every level was released with the instance: another process gets the lock at once.
    let mut holder = std::process::Command::new(env!("CARGO_BIN_EXE_store_worker"))
        .args(["hold-catalog-lock", home.home.to_str().expect("utf-8")])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn holder");
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(holder.stdout.as_mut().expect("stdout")), &mut line).expect("read");
    holder.kill().expect("kill the holder");
    let output = holder.wait_with_output().expect("reap");
    assert_eq!(line.trim(), "locked", "the lock was left held: {}", String::from_utf8_lossy(&output.stderr));
}

#[test]
fn pooled_instances_are_reused_without_their_last_users_effects_and_never_after_a_stop() {
    let runtime = Runtime::new(RuntimeConfig { max_memory_bytes: 8 << 20, ..RuntimeConfig::default() }).expect("runtime");
    assert_eq!(runtime.idle_instances(), 0);

    // A held admission on a real home; leaving the handle (which keeps the admission) returns
    // its instance to the pool.
    let home = RealHome::new();
    let admission = Admission::acquire(&runtime, home.real_effects()).expect("acquired");
    assert_eq!(runtime.idle_instances(), 0, "a handle keeps its instance");
    admission.leave();
    assert_eq!(runtime.idle_instances(), 1, "the handle's instance went back to the pool");

    // The next user takes that instance with its own effects: given no state home, it is
    // refused; it does not read the last user's home, where the admission is held.
    let no_home = Effects::native(None, home.identity.clone());
    let error = proclease::survey_admission(&runtime, no_home).expect_err("no state home: refused");
    assert!(error.to_string().contains("no state home"), "{error}");
    assert_eq!(runtime.idle_instances(), 1, "taken and returned");
    let survey = proclease::survey_admission(&runtime, home.real_effects()).expect("survey");
    assert!(survey.is_some(), "the admission is held in the first user's home");

    // A call stopped at the memory cap: that instance is never entered again.
    let mut instance = runtime.instantiate().expect("instance");
    assert_eq!(runtime.idle_instances(), 0);
    let huge = format!("\"{}\"", "a".repeat(16 << 20));
    let error = instance.records().canonicalize(&huge).expect_err("past the 8 MiB cap");
    assert!(matches!(error, Error::Limit(Limit::Memory { .. })), "{error:?}");
    drop(instance);
    assert_eq!(runtime.idle_instances(), 0, "a stopped instance is dropped, not pooled");
    assert_real_component_still_works(&runtime);
    assert_eq!(runtime.idle_instances(), 2, "the two instances that check used at once are pooled");
}

/// A store whose every call panics, as an embedder's buggy store (or a failing OS random source,
/// `OsEntropy`) may.
struct PanickingStore;

impl proclease::core::effects::Store for PanickingStore {
    fn read_if_present(&mut self, _: &str, _: u32) -> Result<Option<String>, proclease::core::effects::Failure> {
        panic!("the embedder's store panicked")
    }
    fn create_if_absent(&mut self, _: &str, _: &str) -> Result<bool, proclease::core::effects::Failure> {
        panic!("the embedder's store panicked")
    }
    fn replace_if_unchanged(&mut self, _: &str, _: &str, _: &str) -> Result<bool, proclease::core::effects::Failure> {
        panic!("the embedder's store panicked")
    }
    fn remove_if_unchanged(&mut self, _: &str, _: &str) -> Result<bool, proclease::core::effects::Failure> {
        panic!("the embedder's store panicked")
    }
    fn ensure_private_directory(&mut self, _: &str) -> Result<proclease::core::effects::CollectionIdentity, proclease::core::effects::Failure> {
        panic!("the embedder's store panicked")
    }
    fn snapshot(&mut self, _: &str, _: bool) -> Result<Option<proclease::core::effects::CollectionSnapshot>, proclease::core::effects::Failure> {
        panic!("the embedder's store panicked")
    }
    fn read_batch(
        &mut self,
        _: &str,
        _: &[String],
        _: u32,
        _: u32,
        _: &proclease::core::effects::CollectionIdentity,
    ) -> Result<Vec<(String, proclease::core::effects::BatchStatus)>, proclease::core::effects::Failure> {
        panic!("the embedder's store panicked")
    }
}

#[test]
fn an_instance_a_host_panic_unwound_through_is_never_pooled() {
    // wasmtime does not turn a host panic into a trap: it unwinds through the export call,
    // skipping the hook that ends the call's budget. Pooled, such an instance would run every
    // later call without a deadline.
    let runtime = Runtime::new(RuntimeConfig { call_deadline: DEADLINE, ..RuntimeConfig::default() }).expect("runtime");
    let identity = std::sync::Arc::new(proclease::process_identity::ProcessIdentity::new());
    let effects = Effects { store: Box::new(PanickingStore), ..Effects::native(None, identity) };
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| proclease::list_invocation_leases(&runtime, effects)));
    assert!(outcome.is_err(), "the host's panic reaches the caller");
    assert_eq!(runtime.idle_instances(), 0, "the instance it unwound through is dropped, not pooled");
    assert_real_component_still_works(&runtime);
}
