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
            .env_remove("GHOSTGET_STATE_HOME");
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
            let found = doc["entries"].as_array().and_then(|entries| {
                entries.iter().find(|e| e["target"] == target.to_str().expect("utf-8") && e["phase"] == phase).cloned()
            });
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
        assert!(
            std::env::var_os("PROCLEASE_REQUIRE_NAMESPACES").is_none(),
            "unshare {flags:?} is not possible here ({why}) and PROCLEASE_REQUIRE_NAMESPACES is set"
        );
        println!("skipped: unshare {flags:?} is not possible here ({why}); this needs root (CAP_SYS_ADMIN)");
    }
    ok
}
