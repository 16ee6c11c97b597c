//! The portable artifact as shipped (`host/component/proclease-portable.wasm`, issue #41): the
//! component with the portable store inside, loaded the way a runtime without the native host
//! will load it, over a native implementation of the system-call contract
//! (`proclease_tests::portable`). On one state home and workspace with the native host, in real
//! processes: a lease taken by either is seen, kept while its owner lives, and recovered by the
//! other once its owner is SIGKILLed.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use proclease::Host;
use proclease::core::directory_leases::Request;
use proclease::core::dispositions::Disposition;
use proclease::core::records::directory_lease::Role;
use proclease_tests::portable_artifact::{PortableArtifact, Recovered};

const WORKER: &str = env!("CARGO_BIN_EXE_store_worker");

/// A state home and a workspace root, both new, under one temporary directory.
struct Place {
    _dir: tempfile::TempDir,
    home: PathBuf,
    root: PathBuf,
}

impl Place {
    fn new() -> Place {
        let dir = tempfile::tempdir().expect("tempdir");
        let base = std::fs::canonicalize(dir.path()).expect("realpath");
        let root = base.join("ws");
        std::fs::create_dir(&root).expect("workspace root");
        let place = Place { _dir: dir, home: base.join("state"), root };
        drop(place.native()); // creates and claims the state home, as any host's first command
        place
    }

    fn native(&self) -> Host {
        Host::builder().state_home(&self.home).workspace_root(&self.root).build().expect("the native host opens")
    }

    fn artifact(&self) -> PortableArtifact {
        PortableArtifact::open(&self.home, &[&self.root])
    }

    /// The native host's view of the leases: (path, disposition) of each.
    fn native_leases(&self) -> Vec<(String, Disposition)> {
        let survey = self.native().survey().expect("the native survey");
        survey.recovery.directory_leases.outcomes.iter().filter_map(|o| Some((o.claim.as_ref()?.path.clone(), o.disposition?))).collect()
    }

    /// The leases' files in the state home.
    fn lease_files(&self) -> Vec<String> {
        let dir = self.home.join("recovery/proclease-directory-leases");
        let mut names: Vec<String> = std::fs::read_dir(&dir).map(|d| d.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect()).unwrap_or_default();
        names.sort();
        names
    }
}

/// `store_worker hold-directory-lease <host> …`: a process that leases `dir` and keeps it, once
/// it said so.
fn holder(host: &str, place: &Place, dir: &Path) -> Child {
    let mut child = Command::new(WORKER).args(["hold-directory-lease", host]).args([&place.home, &place.root, dir]).stdout(Stdio::piped()).spawn().expect("the holder starts");
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().expect("piped")).read_line(&mut line).expect("read");
    assert_eq!(line, "leased\n", "the {host} holder did not lease {}", dir.display());
    child
}

fn sigkill(mut child: Child) {
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
}

/// (recovered, active) of a native recovery's directory leases.
fn counts(recovery: &proclease::Recovery) -> (u32, u32) {
    let report = recovery.directory_leases.report();
    (report.recovered, report.active)
}

fn now_ms() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_millis() as f64)
}

#[test]
fn the_portable_artifact_imports_the_system_call_contract_instead_of_a_store() {
    let (mut imports, exports) = PortableArtifact::world();
    imports.sort();
    let names = |list: &[&str]| list.iter().map(|name| format!("proclease:lease/{name}@0.3.0")).collect::<Vec<_>>();
    assert_eq!(imports, names(&["clock", "entropy", "process-identity", "sys-fs", "sys-kernel", "types"]), "no state store, no workspace, no plugin catalog, no WASI");
    assert_eq!(
        exports,
        names(&[
            "records",
            "dispositions",
            "export-admission",
            "directory-leases",
            "invocation-leases",
            "run-refusals",
            "recovery-advice",
            "state-store",
            "workspace",
            "plugin-catalog",
            "workspace-advice",
            "store-advice",
            "recovery-turn"
        ]),
        "the component's exports, and the store's own for its host"
    );
}

/// A lease taken through the artifact is the native host's kind of lease: it names this
/// process, blocks the directory for the native host, is kept by a native recovery while this
/// process lives, and once released leaves the directory (its owner's result) and frees it.
#[test]
fn a_lease_taken_through_the_artifact_is_held_against_the_native_host_until_released() {
    let place = Place::new();
    let work = place.root.join("jobs/build");
    let mut artifact = place.artifact();
    let lease = artifact.lease_new_directory(&work).expect("the artifact leases a new directory");
    let meta = std::fs::metadata(&work).expect("the directory was created");
    assert_eq!(std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777, 0o700);
    assert_eq!(place.native_leases(), [(work.to_str().expect("utf-8").to_string(), Disposition::Active)]);

    let native = place.native();
    let request = Request { role: Role::RawWorking, path: work.to_str().expect("utf-8").into(), output_root: None, recover_after_ms: now_ms() + 60_000.0, now_ms: None };
    let refused = native.lease_new_directory(&request).err().expect("the native host refuses a leased directory");
    assert!(
        matches!(refused, proclease::Error::Refused(proclease::Refusal::NewDirectory { kind: proclease::core::directory_leases::RefusalKind::AlreadyLeased, .. })),
        "{refused}"
    );
    let work_text = work.to_str().expect("utf-8");
    let pid = std::process::id();
    assert!(refused.to_string().starts_with(&format!("{work_text}: refused: already leased by pid {pid} (lease ")), "{refused}");
    assert!(refused.to_string().ends_with("): its owner is alive: wait for that run to finish, or use another directory"), "{refused}");
    // The artifact refuses in the same words: one check, worded once.
    let twice = artifact.lease_new_directory(&work).err().expect("the artifact refuses its own leased directory");
    assert_eq!(twice, refused.to_string(), "the artifact's refusal is the native host's");
    let recovery = native.recover(proclease::core::directory_leases::Options::default()).expect("the native recovery runs");
    assert_eq!(counts(&recovery), (0, 1), "a live owner's lease is kept");
    assert!(work.is_dir(), "a live owner's directory is kept");

    artifact.release(lease).expect("the artifact releases its lease");
    assert!(work.is_dir(), "a release never removes the directory");
    assert_eq!(place.lease_files(), Vec::<String>::new(), "the claim is gone");
    let mut again = native.lease_new_directory(&request).expect("the native host leases the released directory");
    again.release().expect("release");
}

/// A native process's lease is kept by the artifact's recovery while that process lives and
/// blocks the directory; once the process is SIGKILLed, the artifact's recovery removes the
/// directory and the claim, and the native host agrees nothing is left.
#[test]
fn the_artifact_keeps_a_live_native_lease_and_recovers_a_killed_ones() {
    let place = Place::new();
    let work = place.root.join("job");
    let holder = holder("native", &place, &work);
    std::fs::write(work.join("partial.o"), b"half a build").expect("the holder's work");
    let mut artifact = place.artifact();
    assert_eq!(artifact.conflict(&work).expect("conflict"), Some("active".to_string()));
    assert_eq!(artifact.recover().expect("the artifact recovers"), Recovered { recovered: 0, active: 1 });
    assert!(work.join("partial.o").is_file(), "a live owner's work is kept");

    sigkill(holder);
    assert_eq!(artifact.conflict(&work).expect("conflict"), Some("recoverable".to_string()));
    assert_eq!(artifact.recover().expect("the artifact recovers"), Recovered { recovered: 1, active: 0 });
    assert!(!work.exists(), "the dead owner's directory is removed");
    assert_eq!(place.lease_files(), Vec::<String>::new());
    assert_eq!(place.native_leases(), Vec::<(String, Disposition)>::new());
}

/// The other way round: a process that leased through the artifact is kept by the native
/// recovery while it lives and recovered once SIGKILLed.
#[test]
fn the_native_host_keeps_a_live_artifact_lease_and_recovers_a_killed_ones() {
    let place = Place::new();
    let work = place.root.join("job");
    let holder = holder("portable", &place, &work);
    std::fs::write(work.join("partial.o"), b"half a build").expect("the holder's work");
    let native = place.native();
    let options = proclease::core::directory_leases::Options::default;
    let recovery = native.recover(options()).expect("the native recovery runs");
    assert_eq!(counts(&recovery), (0, 1));
    assert!(work.join("partial.o").is_file(), "a live owner's work is kept");

    sigkill(holder);
    let recovery = native.recover(options()).expect("the native recovery runs");
    assert_eq!(counts(&recovery), (1, 0));
    assert!(!work.exists(), "the dead owner's directory is removed");
    assert_eq!(place.lease_files(), Vec::<String>::new());
}
