//! Simulated machines for the cluster tests: a process tree in its own PID and mount namespaces
//! whose `/proc/sys/kernel/random/boot_id` is a bind-mounted file of its own (`unshare --pid
//! --mount --fork --mount-proc --kill-child`), with its own state home, workspace and plugin
//! catalog — exactly what another host would be to proclease. Needs root.
#![allow(dead_code)] // each test crate uses part of it

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};

use crate::common::PROCLEASE;

const A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
const C: &str = "cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc";

/// One simulated machine: its boot id file, state home, workspace, plugin catalog and the
/// identity of the plugin operation it runs.
pub struct Machine {
    _dir: tempfile::TempDir,
    pub root: PathBuf,
    pub boot_id: PathBuf,
    pub url: String,
    pub ttl: &'static str,
    /// When `proclease` dies of a signal, the machine's PID 1 stays 3 s more instead of
    /// exiting with it — exiting would make the kernel kill every process of the machine,
    /// doing the job of proclease's own containment for it. For tests of that containment.
    pub linger: bool,
}

/// A new machine on the cluster at `url` (`etcd://…/prefix`), whose presences last `ttl`.
pub fn machine(url: &str, ttl: &'static str) -> Machine {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = std::fs::canonicalize(dir.path()).expect("realpath");
    let boot_id = root.join("boot_id");
    std::fs::write(&boot_id, format!("{}\n", uuid::Uuid::new_v4().hyphenated())).expect("boot id");
    std::fs::write(
        root.join("catalog.json"),
        format!(
            r#"{{"schemaVersion":1,"plugins":[{{"pluginId":"portable-test","version":"1.0.0","hostApiVersion":1,"bundleSha256":"{A}","manifestSha256":"{B}","enabled":true}}]}}"#
        ),
    )
    .expect("catalog");
    std::fs::write(
        root.join("op.json"),
        format!(r#"{{"pluginId":"portable-test","pluginVersion":"1.0.0","hostApiVersion":1,"bundleSha256":"{A}","manifestSha256":"{B}","adapterId":"portable-test","transport":"provider-api","surfaceId":"portable-test","operation":"records.read","contractVersion":1,"descriptorSha256":"{C}"}}"#),
    )
    .expect("identity");
    Machine { _dir: dir, root, boot_id, url: url.to_owned(), ttl, linger: false }
}

impl Machine {
    /// `proclease <global options> args…` on this machine.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new("unshare");
        command
            .args(["--pid", "--mount", "--fork", "--mount-proc", "--kill-child", "sh", "-c"])
            // Not `exec`: sh stays PID 1 of the machine, proclease and its children run under it.
            .arg(if self.linger {
                r#"mount --bind "$0" /proc/sys/kernel/random/boot_id || exit 1; "$@"; s=$?; [ $s -ge 128 ] && sleep 3; exit $s"#
            } else {
                r#"mount --bind "$0" /proc/sys/kernel/random/boot_id && "$@""#
            })
            .arg(&self.boot_id)
            .arg(PROCLEASE)
            .arg("--state-home")
            .arg(self.root.join("state"))
            .arg("--workspace-root")
            .arg(&self.root)
            .arg("--plugin-catalog")
            .arg(self.root.join("catalog.json"))
            .args(["--store", &self.url, "--cluster-ttl", self.ttl])
            .args(args)
            .env_remove("PROCLEASE_STORE")
            .env_remove("PROCLEASE_STATE_HOME")
            .env_remove("GHOSTGET_STATE_HOME");
        command
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("proclease runs")
    }

    /// `run --exclusive --workdir <root>/<job> -- command…`.
    pub fn exclusive(&self, job: &str, command: &[&str]) -> Output {
        let workdir = self.root.join(job);
        self.run(&[&["run", "--exclusive", "--workdir", workdir.to_str().expect("utf-8"), "--"], command].concat())
    }

    /// The same, in the background (output discarded).
    pub fn spawn_exclusive(&self, job: &str, command: &[&str]) -> Child {
        let workdir = self.root.join(job);
        self.command(&[&["run", "--exclusive", "--workdir", workdir.to_str().expect("utf-8"), "--"], command].concat())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn proclease")
    }

    /// `invocations run --identity <root>/op.json -- command…`.
    pub fn invocation(&self, command: &[&str]) -> Command {
        let identity = self.root.join("op.json");
        self.command(&[&["invocations", "run", "--identity", identity.to_str().expect("utf-8"), "--"], command].concat())
    }

    pub fn invocation_leases(&self) -> Vec<serde_json::Value> {
        let out = self.run(&["invocations", "list", "--json"]);
        assert!(out.status.success(), "{out:?}");
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        doc["invocationLeases"].as_array().cloned().unwrap_or_default()
    }

    pub fn repair_tombstones(&self) -> serde_json::Value {
        let out = self.run(&["invocations", "repair", "--recover-tombstones", "--json"]);
        assert!(out.status.success(), "{out:?}");
        serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("json")["report"].clone()
    }
}
