//! Sound proof of death (issue #14), through the `proclease` binary with real processes:
//! a job whose thread-group leader exited while its threads run, jobs and recoverers in other
//! PID and time namespaces (`unshare`), a PID namespace without its own `/proc`, and an
//! `--exclusive` run killed with its helper. In each, the reference's `/proc` proof alone would
//! delete the directory of a job that still runs (or block forever); here the job's directory is
//! kept while it runs and recovered once it is really gone.
//!
//! The namespace tests need `unshare` with the rights to create PID, mount and time namespaces
//! (root). Where that is not possible they print why and pass — unless
//! `PROCLEASE_REQUIRE_NAMESPACES=1` (set by `.ci/run`) makes that a failure.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{PROCLEASE, Sandbox, kill, namespaces_available, sandbox, state_of, unique_seconds, wait_for_process, wait_until_dead};

impl Sandbox {
    /// `proclease recover --json` (in the namespaces `prefix` makes), asserting it succeeded.
    fn recover(&self, prefix: &[&str]) -> serde_json::Value {
        let output = self.run_in(prefix, &["recover", "--json"]);
        assert!(output.status.success(), "recover: {output:?}");
        serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("recover --json: {e}: {output:?}"))
    }

    /// Waits until doctor shows the lease of `target` running; returns its entry.
    fn wait_until_running(&self, target: &Path) -> serde_json::Value {
        self.wait_for_phase(target, "running")
    }
}

/// Kills the processes a test started when it ends, passed or failed.
#[derive(Default)]
struct Reaper {
    pids: std::sync::Mutex<Vec<u64>>,
    children: std::sync::Mutex<Vec<Child>>,
}

impl Reaper {
    fn pid(&self, pid: u64) -> u64 {
        self.pids.lock().expect("lock").push(pid);
        pid
    }

    fn child(&self, child: Child) -> u32 {
        let id = child.id();
        self.children.lock().expect("lock").push(child);
        id
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        for pid in self.pids.lock().map(|p| p.clone()).unwrap_or_default() {
            kill(pid);
        }
        for mut child in self.children.lock().map(|mut c| std::mem::take(&mut *c)).unwrap_or_default() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn report(doc: &serde_json::Value) -> (u64, u64) {
    let leases = &doc["directoryLeases"];
    (leases["recovered"].as_u64().expect("recovered"), leases["active"].as_u64().expect("active"))
}

/// A Python program whose main thread exits (`pthread_exit`) while another thread keeps
/// writing `beat.txt` in the working directory: its leader shows state `Z`, yet it runs.
const LEADER_EXITS: &str = r#"
import ctypes, threading, time
def beat():
    n = 0
    while True:
        with open("beat.txt", "w") as f:
            f.write(str(n))
        n += 1
        time.sleep(0.02)
threading.Thread(target=beat).start()
time.sleep(0.2)
ctypes.CDLL(None).pthread_exit(None)
"#;

fn python() -> Option<&'static str> {
    ["python3", "python"].into_iter().find(|p| Command::new(p).arg("-c").arg("import ctypes, threading").output().is_ok_and(|o| o.status.success()))
}

fn beats(dir: &Path) -> u64 {
    std::fs::read_to_string(dir.join("beat.txt")).ok().and_then(|t| t.trim().parse().ok()).unwrap_or(0)
}

#[test]
fn an_exited_leader_whose_threads_run_keeps_its_directory() {
    let Some(python) = python() else {
        println!("skipped: no python3 with ctypes and threading to start a process whose leader exits");
        return;
    };
    let s = sandbox();
    let program = s.root.join("leader_exits.py");
    std::fs::write(&program, LEADER_EXITS).expect("program");
    let work = s.root.join("jobs/threads");
    let reaper = Reaper::default();
    let mut supervisor = s
        // Uncontained: the recorded child must be the program itself (in a box it is the init,
        // whose witness would decide before /proc is asked).
        .prefixed(&[], &["run", "--containment", "none", "--workdir", work.to_str().expect("utf-8"), "--", python, program.to_str().expect("utf-8")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let child = reaper.pid(s.wait_until_running(&work)["childPid"].as_u64().expect("the command is recorded"));
    let deadline = Instant::now() + Duration::from_secs(10);
    while state_of(child) != Some('Z') {
        assert!(Instant::now() < deadline, "the leader of {child} never exited");
        std::thread::sleep(Duration::from_millis(10));
    }
    supervisor.kill().expect("SIGKILL the supervisor");
    supervisor.wait().expect("reap");

    // Without any witness (no state home), /proc alone shows it alive: a Z leader with tasks.
    let identity = Command::new(PROCLEASE).args(["identity", &child.to_string(), "--json"]).output().expect("identity");
    assert!(identity.status.success(), "{identity:?}");
    let doc: serde_json::Value = serde_json::from_slice(&identity.stdout).expect("json");
    assert_eq!(doc["status"], "exact-live-owner", "{doc}");

    assert_eq!(report(&s.recover(&[])), (0, 1), "the job still runs: its directory stays");
    // It writes every 20 ms; a loaded machine may not schedule it for a while, so wait for the
    // next beat (up to 10 s) rather than a fixed pause.
    let before = beats(&work);
    let deadline = Instant::now() + Duration::from_secs(10);
    while beats(&work) <= before {
        assert!(Instant::now() < deadline, "its thread still writes in the kept directory");
        std::thread::sleep(Duration::from_millis(20));
    }

    kill(child);
    wait_until_dead(child);
    assert_eq!(report(&s.recover(&[])), (1, 0), "once it is gone, its directory is recovered");
    assert!(!work.exists());
}

#[test]
fn a_job_in_another_pid_namespace_is_never_recovered_while_it_runs() {
    if !namespaces_available(&["--pid", "--fork", "--mount-proc"]) {
        return;
    }
    let s = sandbox();
    let work = s.root.join("jobs/contained");
    let global = s.global().join(" ");
    // A shell is the namespace's init, so that the supervisor (its child) can die alone; it must
    // outlive the supervisor (the namespace dies with its init).
    let seconds = unique_seconds();
    let script = format!("{PROCLEASE} {global} run --workdir {} -- sleep {seconds} & wait; sleep {seconds}0", work.display());
    let reaper = Reaper::default();
    let namespace = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "--kill-child", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("unshare");
    reaper.child(namespace);
    s.wait_until_running(&work);
    let job = reaper.pid(wait_for_process(&["sleep", &seconds]));

    // The recorded pids are the namespace's: outside, they name other processes (or none).
    assert_eq!(report(&s.recover(&[])), (0, 1), "recover outside keeps the job of a live supervisor");
    let run_pid = std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u64>().ok()))
        .find(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c.starts_with(PROCLEASE.as_bytes()) && c.ends_with(format!("sleep\0{seconds}\0").as_bytes())))
        .expect("the supervisor in the namespace");
    kill(run_pid);
    wait_until_dead(run_pid);
    assert_eq!(report(&s.recover(&[])), (0, 1), "recover outside keeps the job of a dead supervisor while the job runs");
    assert!(work.exists());

    kill(job);
    wait_until_dead(job);
    assert_eq!(report(&s.recover(&[])), (1, 0), "once the job is gone it is recovered from outside");
    assert!(!work.exists());
}

#[test]
fn a_recoverer_in_another_pid_namespace_never_recovers_a_running_job() {
    let inside = ["unshare", "--pid", "--fork", "--mount-proc"];
    if !namespaces_available(&inside[1..]) {
        return;
    }
    let s = sandbox();
    let work = s.root.join("jobs/outside");
    let reaper = Reaper::default();
    let mut supervisor =
        s.prefixed(&[], &["run", "--workdir", work.to_str().expect("utf-8"), "--", "sleep", &unique_seconds()]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("spawn");
    let child = reaper.pid(s.wait_until_running(&work)["childPid"].as_u64().expect("child"));
    supervisor.kill().expect("SIGKILL the supervisor");
    supervisor.wait().expect("reap");

    // Inside a new PID namespace these pids do not exist at all.
    assert_eq!(report(&s.recover(&inside)), (0, 1), "a recoverer that cannot see the job keeps it");
    assert!(work.exists());
    kill(child);
    wait_until_dead(child);
    assert_eq!(report(&s.recover(&inside)), (1, 0), "once the job is gone, even that recoverer recovers it");
    assert!(!work.exists());
}

#[test]
fn a_pid_namespace_without_its_own_proc_is_refused() {
    if !namespaces_available(&["--pid", "--fork"]) {
        return;
    }
    let s = sandbox();
    let work = s.root.join("jobs/foreign-proc");
    let output = s.run_in(&["unshare", "--pid", "--fork"], &["run", "--workdir", work.to_str().expect("utf-8"), "--", "true"]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("proclease: /proc does not show this process's own PID namespace") && stderr.contains("unshare --pid --fork --mount-proc"), "{stderr}");
    assert!(!work.exists(), "nothing was created");
    let doc = s.doctor();
    assert_eq!(doc["entries"].as_array().map_or(0, Vec::len), 0, "no lease: {doc}");
}

#[test]
fn time_namespaces_shift_neither_identities_nor_verdicts() {
    let shifted = ["unshare", "--time", "--boottime", "86400", "--fork"];
    if !namespaces_available(&shifted[1..]) {
        return;
    }
    // Without witnesses: the start id a process in a time namespace computes for itself is the
    // one a reader outside computes for it.
    let output =
        Command::new("unshare").args(&shifted[1..]).args(["sh", "-c", &format!("{PROCLEASE} identity $$ --json; sleep 2")]).stdout(Stdio::piped()).spawn().expect("unshare");
    let shell = wait_for_process(&["sh", "-c", &format!("{PROCLEASE} identity $$ --json; sleep 2")]);
    let outside = Command::new(PROCLEASE).args(["identity", &shell.to_string(), "--json"]).output().expect("identity");
    let inside = output.wait_with_output().expect("inside");
    let inside: serde_json::Value = serde_json::from_slice(&inside.stdout).expect("inside json");
    let outside: serde_json::Value = serde_json::from_slice(&outside.stdout).expect("outside json");
    assert_eq!(inside["processStartId"], outside["processStartId"], "{inside} {outside}");
    assert_eq!(inside["pid"], outside["pid"]);

    // A job in a time namespace, its supervisor killed, recovered from outside.
    let s = sandbox();
    let work = s.root.join("jobs/shifted");
    let global = s.global().join(" ");
    let script = format!("{PROCLEASE} {global} run --workdir {} -- sleep {} & wait", work.display(), unique_seconds());
    let reaper = Reaper::default();
    let namespace = Command::new("unshare").args(&shifted[1..]).args(["sh", "-c", &script]).stdout(Stdio::null()).spawn().expect("unshare");
    reaper.child(namespace);
    let entry = s.wait_until_running(&work);
    assert_eq!(report(&s.recover(&[])), (0, 1), "outside, the live supervisor's job is kept");
    kill(entry["ownerPid"].as_str().and_then(|p| p.parse().ok()).or_else(|| entry["ownerPid"].as_u64()).expect("owner pid"));
    let job = reaper.pid(entry["childPid"].as_u64().expect("child"));
    assert_eq!(report(&s.recover(&[])), (0, 1), "outside, the job of a dead supervisor is kept while it runs");
    // And the reverse: a recoverer inside a shifted time namespace.
    assert_eq!(report(&s.recover(&shifted)), (0, 1), "inside a shifted namespace too");
    kill(job);
    wait_until_dead(job);
    assert_eq!(report(&s.recover(&shifted)), (1, 0), "once the job is gone it is recovered");
    assert!(!work.exists());
}

fn spawn_exclusive(s: &Sandbox, work: &Path, seconds: &str) -> Child {
    s.prefixed(&[], &["run", "--exclusive", "--workdir", work.to_str().expect("utf-8"), "--", "sleep", seconds]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("spawn")
}

#[test]
fn a_killed_exclusive_run_blocks_only_while_its_helper_runs() {
    let s = sandbox();
    // Supervisor killed, helper alive: the next exclusive run is blocked (exit 3).
    let first = s.root.join("jobs/first");
    let reaper = Reaper::default();
    let mut supervisor = spawn_exclusive(&s, &first, &unique_seconds());
    let helper = reaper.pid(s.wait_until_running(&first)["childPid"].as_u64().expect("helper"));
    supervisor.kill().expect("SIGKILL");
    supervisor.wait().expect("reap");
    let next = s.root.join("jobs/next");
    let blocked = s.run_in(&[], &["run", "--exclusive", "--workdir", next.to_str().expect("utf-8"), "--", "true"]);
    assert_eq!(blocked.status.code(), Some(3), "{blocked:?}");
    assert!(String::from_utf8_lossy(&blocked.stderr).contains("another export is active"), "{blocked:?}");

    // Supervisor and helper both killed: the reference keeps every later exclusive run out
    // until a reboot (exit 4); their free witnesses prove them gone, so the next one runs.
    kill(helper);
    wait_until_dead(helper);
    let again = s.run_in(&[], &["run", "--exclusive", "--workdir", next.to_str().expect("utf-8"), "--", "true"]);
    assert_eq!(again.status.code(), Some(0), "{again:?}");
    let doc = s.doctor();
    let admissions: Vec<_> = doc["entries"].as_array().expect("entries").iter().filter(|e| e["kind"] == "admission").collect();
    assert!(admissions.is_empty(), "the dead run's admission was taken over and released: {doc}");
}

#[test]
fn a_stage_whose_command_still_runs_is_kept() {
    // A --stage lease records no child (as in the reference, which recovers it as soon as its
    // supervisor is gone, deleting the stage under its running command); the command's witness
    // proves it alive.
    let s = sandbox();
    let stage = s.root.join("exports/.stage");
    let output = s.root.join("exports/published");
    let seconds = unique_seconds();
    let reaper = Reaper::default();
    let mut supervisor = s
        .prefixed(&[], &["run", "--stage", stage.to_str().expect("utf-8"), "--output", output.to_str().expect("utf-8"), "--", "sleep", &seconds])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let command = reaper.pid(wait_for_process(&["sleep", &seconds]));
    supervisor.kill().expect("SIGKILL the supervisor");
    supervisor.wait().expect("reap");
    assert_eq!(report(&s.recover(&[])), (0, 1), "the stage's command still runs");
    assert!(stage.exists());
    kill(command);
    wait_until_dead(command);
    assert_eq!(report(&s.recover(&[])), (1, 0), "once it is gone the stage is recovered");
    assert!(!stage.exists() && !output.exists());
}

#[test]
fn a_job_seen_through_another_path_to_the_state_home_is_not_proven_dead_there() {
    // Issue #40 case 4 (docs/witness.md, "Lock domains"): a run in PID and cgroup namespaces
    // (a container) whose state home is an overlay's merged view; a recoverer reaching the same
    // state home through the overlay's upper directory sees the same witness files, but not
    // their locks: free-looking witnesses there prove nothing, and the job is kept.
    let namespaces = ["--pid", "--fork", "--mount-proc", "--cgroup"];
    if !namespaces_available(&namespaces) {
        return;
    }
    let s = sandbox();
    let overlay = s.root.join("overlay");
    for dir in ["lower", "upper", "work", "merged"] {
        std::fs::create_dir_all(overlay.join(dir)).expect("mkdir");
    }
    let options = format!("lowerdir={},upperdir={},workdir={}", overlay.join("lower").display(), overlay.join("upper").display(), overlay.join("work").display());
    let mounted = Command::new("mount").args(["-t", "overlay", "overlay", "-o", &options]).arg(overlay.join("merged")).output().expect("mount(8)");
    if !mounted.status.success() {
        let why = String::from_utf8_lossy(&mounted.stderr).trim().to_string();
        assert!(std::env::var_os("PROCLEASE_REQUIRE_MOUNTS").is_none(), "an overlay cannot be mounted here ({why}) and PROCLEASE_REQUIRE_MOUNTS is set");
        println!("skipped: an overlay cannot be mounted here ({why}); this needs root");
        return;
    }
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(overlay.join("merged"));
    let merged_state = overlay.join("merged/state");
    let upper_state = overlay.join("upper/state");
    let work = s.root.join("jobs/contained");
    let seconds = unique_seconds();
    let script = format!(
        "{PROCLEASE} --state-home {} --workspace-root {} run --workdir {} -- sleep {seconds} & wait; sleep {seconds}0",
        merged_state.display(),
        s.root.display(),
        work.display()
    );
    let reaper = Reaper::default();
    let namespace = Command::new("unshare").args(namespaces).args(["--kill-child", "sh", "-c", &script]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("unshare");
    reaper.child(namespace);
    let through = |state: &Path, args: &[&str]| {
        let output = Command::new(PROCLEASE)
            .arg("--state-home")
            .arg(state)
            .arg("--workspace-root")
            .arg(&s.root)
            .args(args)
            .env_remove("PROCLEASE_STATE_HOME")
            .env_remove("PROCLEASE_STORE")
            .output()
            .expect("proclease");
        assert!(output.status.success(), "{args:?}: {output:?}");
        serde_json::from_slice::<serde_json::Value>(&output.stdout).expect("json")
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let doc = through(&merged_state, &["doctor", "--json"]);
        if doc["entries"].as_array().is_some_and(|e| e.iter().any(|e| e["phase"] == "running")) {
            break;
        }
        assert!(Instant::now() < deadline, "the contained run never started: {doc}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let job = reaper.pid(wait_for_process(&["sleep", &seconds]));

    let doc = through(&upper_state, &["doctor", "--json"]);
    let entry = &doc["entries"][0];
    assert_ne!(entry["disposition"], "recoverable", "through the upper directory the witnesses' locks cannot be seen: {doc}");
    assert_eq!(report(&through(&upper_state, &["recover", "--json"])).0, 0, "recover through the other path keeps the job");
    assert!(work.is_dir(), "the running job's directory stays");

    kill(job);
    wait_until_dead(job);
}
