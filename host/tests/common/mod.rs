//! The sandbox the end-to-end CLI tests share: a private temporary directory that is the only
//! granted workspace root, with the state home inside it, and the `proclease` binary run
//! against exactly those (never the environment's state home).
#![allow(dead_code)] // each test crate uses part of it

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const PROCLEASE: &str = env!("CARGO_BIN_EXE_proclease");

pub struct Sandbox {
    _dir: tempfile::TempDir,
    /// The granted workspace root (the temporary directory, symbolic links resolved).
    pub root: PathBuf,
    /// The state home, `<root>/state` (created by the first command that needs it).
    pub state: PathBuf,
}

pub fn sandbox() -> Sandbox {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = std::fs::canonicalize(dir.path()).expect("realpath");
    let state = root.join("state");
    Sandbox { _dir: dir, root, state }
}

impl Sandbox {
    /// The proclease arguments that select this sandbox (for a command line written out, as in
    /// a shell script).
    pub fn global(&self) -> Vec<String> {
        vec!["--state-home".into(), self.state.display().to_string(), "--workspace-root".into(), self.root.display().to_string()]
    }

    /// `prefix… proclease --state-home … --workspace-root … args…` (prefix: e.g. an `unshare`
    /// invocation; empty for proclease itself).
    pub fn prefixed(&self, prefix: &[&str], args: &[&str]) -> Command {
        let (program, before) = match prefix.split_first() {
            Some((program, rest)) => (*program, [rest, &[PROCLEASE]].concat()),
            None => (PROCLEASE, Vec::new()),
        };
        let mut command = Command::new(program);
        command
            .args(before)
            .args(self.global())
            .args(args)
            .env_remove("PROCLEASE_STATE_HOME")
            .env_remove("GHOSTGET_STATE_HOME")
            // Not the store of a run the tests themselves may run under.
            .env_remove("PROCLEASE_STORE")
            .env_remove("PROCLEASE_FENCING_STORE")
            .env_remove("PROCLEASE_FENCING_TOKEN");
        command
    }

    pub fn command(&self, args: &[&str]) -> Command {
        self.prefixed(&[], args)
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("proclease runs")
    }

    /// [`Sandbox::run`] inside what `prefix` makes (e.g. new namespaces).
    pub fn run_in(&self, prefix: &[&str], args: &[&str]) -> Output {
        self.prefixed(prefix, args).output().expect("proclease runs")
    }

    /// `proclease … args` in the background, its output discarded.
    pub fn spawn(&self, args: &[&str]) -> Child {
        self.command(args).stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("spawn proclease")
    }

    /// `doctor --json`, asserting it succeeded.
    pub fn doctor(&self) -> serde_json::Value {
        let output = self.run(&["doctor", "--json"]);
        assert!(output.status.success(), "doctor: {output:?}");
        serde_json::from_slice(&output.stdout).expect("doctor --json prints JSON")
    }

    /// Waits until doctor shows the lease of `target` in `phase`; returns its entry.
    pub fn wait_for_phase(&self, target: &Path, phase: &str) -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let doc = self.doctor();
            let found = doc["entries"].as_array().and_then(|entries| entries.iter().find(|e| e["target"] == target.to_str().expect("utf-8") && e["phase"] == phase).cloned());
            if let Some(entry) = found {
                return entry;
            }
            assert!(Instant::now() < deadline, "the lease of {} never reached {phase}: {doc}", target.display());
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Whether `unshare` can make the namespaces of `flags` here; if not, says why, and fails when
/// `PROCLEASE_REQUIRE_NAMESPACES` is set.
pub fn namespaces_available(flags: &[&str]) -> bool {
    let output = Command::new("unshare").args(flags).arg("true").output();
    let ok = output.as_ref().is_ok_and(|o| o.status.success());
    if !ok {
        let why = match &output {
            Ok(o) => String::from_utf8_lossy(&o.stderr).trim().to_string(),
            Err(e) => e.to_string(),
        };
        assert!(std::env::var_os("PROCLEASE_REQUIRE_NAMESPACES").is_none(), "unshare {flags:?} is not possible here ({why}) and PROCLEASE_REQUIRE_NAMESPACES is set");
        println!("skipped: unshare {flags:?} is not possible here ({why}); this needs root (CAP_SYS_ADMIN)");
    }
    ok
}

/// Whether strace(1) is installed and may trace here (a container's seccomp or Yama's
/// ptrace_scope can forbid it); if not, says so, and fails when `PROCLEASE_REQUIRE_NAMESPACES`
/// is set (`.ci/run` installs strace).
pub fn strace_available() -> bool {
    if Command::new("strace").args(["-f", "-qq", "-o", "/dev/null", "true"]).output().is_ok_and(|o| o.status.success()) {
        return true;
    }
    assert!(std::env::var_os("PROCLEASE_REQUIRE_NAMESPACES").is_none(), "strace is missing or cannot trace here, and PROCLEASE_REQUIRE_NAMESPACES is set (.ci/run installs it)");
    eprintln!("skipped: strace is not installed or cannot trace here");
    false
}

/// A `sleep` duration (seconds) no other test or earlier run uses, so that its command line
/// identifies its process.
pub fn unique_seconds() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos() as u64);
    format!("{}", 100_000 + (nanos / 1000 + 7919 * NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)) % 800_000)
}

/// SIGKILL to `pid` (ignoring a process already gone).
pub fn kill(pid: u64) {
    let pid = rustix::process::Pid::from_raw(pid as i32).expect("pid");
    let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
}

/// The state letter of `/proc/<pid>/stat` (`None`: no such process).
pub fn state_of(pid: u64) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next())
}

/// Waits until `pid` is gone or a zombie whose threads are all gone.
pub fn wait_until_dead(pid: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |d| d.count());
        if state_of(pid).is_none() || (state_of(pid) == Some('Z') && tasks <= 1) {
            return;
        }
        assert!(Instant::now() < deadline, "pid {pid} did not die");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The pids (in this namespace) of live processes whose command line is exactly `argv`.
pub fn processes_running(argv: &[&str]) -> Vec<u64> {
    let wanted: Vec<u8> = argv.iter().flat_map(|a| a.bytes().chain([0])).collect();
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u64>().ok()) else { continue };
        if std::fs::read(entry.path().join("cmdline")).is_ok_and(|c| c == wanted) && state_of(pid).is_some_and(|s| s != 'Z') {
            pids.push(pid);
        }
    }
    pids
}

/// Waits for exactly one process running `argv`; returns its pid here.
pub fn wait_for_process(argv: &[&str]) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let [pid] = processes_running(argv)[..] {
            return pid;
        }
        assert!(Instant::now() < deadline, "{argv:?} never started");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// SIGSTOPs `pid`.
pub fn stop(pid: u64) {
    let pid = rustix::process::Pid::from_raw(pid as i32).expect("pid");
    let _ = rustix::process::kill_process(pid, rustix::process::Signal::STOP);
}

/// SIGCONTs `pid`.
pub fn resume(pid: u64) {
    let pid = rustix::process::Pid::from_raw(pid as i32).expect("pid");
    let _ = rustix::process::kill_process(pid, rustix::process::Signal::CONT);
}
