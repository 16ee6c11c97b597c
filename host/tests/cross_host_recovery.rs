//! Every host recovers every host's crashed run, and keeps every host's live one (issue #41: "a
//! crashed native `run` (supervisor and box SIGKILLed) is recovered by Python's and Node's
//! `recover`, and their crashed leases by the native one; a live one is kept by all three, in
//! every direction").
//!
//! For each of the nine (owner, recoverer) pairs of the native binary, the Python package's
//! `proclease` and the Node package's `bin/proclease.mjs`, on a state home of its own: the owner's
//! `run --workdir W -- sleep 60` is kept by the recoverer's `recover` while it runs; once its
//! supervisor and its recorded child are SIGKILLed, the recoverer's `recover` removes `W` and the
//! lease, and all three `doctor`s then agree that nothing is left.
//!
//! Real processes, real files. The packages are installed the way their READMEs say
//! (`hosts/python/setup.sh`, `npm ci` in `hosts/node`); needs python3 >= 3.11 and Node 20.

mod common;
#[path = "common/packages.rs"]
mod packages;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::PROCLEASE;
use packages::{installed, package};
use serde_json::Value;

/// The three hosts' command lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HostKind {
    Native,
    Python,
    Node,
}

const HOSTS: [HostKind; 3] = [HostKind::Native, HostKind::Python, HostKind::Node];

/// One state home and workspace root for one pair.
struct Place {
    _dir: tempfile::TempDir,
    home: PathBuf,
    ws: PathBuf,
}

impl Place {
    fn new() -> Place {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = std::fs::canonicalize(dir.path()).expect("realpath");
        std::fs::set_permissions(&root, std::os::unix::fs::PermissionsExt::from_mode(0o700)).expect("chmod");
        let ws = root.join("ws");
        std::fs::create_dir(&ws).expect("workspace root");
        Place { _dir: dir, home: root.join("state"), ws }
    }

    /// `host`'s `proclease --state-home … --workspace-root … args…`.
    fn command(&self, host: HostKind, args: &[&str]) -> Command {
        let mut command = match host {
            HostKind::Native => Command::new(PROCLEASE),
            HostKind::Python => Command::new(package("python").join(".venv/bin/proclease")),
            HostKind::Node => {
                let mut node = Command::new("node");
                node.arg(package("node").join("bin/proclease.mjs"));
                node
            }
        };
        command.arg("--state-home").arg(&self.home).arg("--workspace-root").arg(&self.ws).args(args);
        for variable in ["PROCLEASE_STATE_HOME", "GHOSTGET_STATE_HOME", "PROCLEASE_STORE", "PROCLEASE_FENCING_STORE", "PROCLEASE_FENCING_TOKEN"] {
            command.env_remove(variable);
        }
        command
    }

    /// `host`'s `args… --json`, which must succeed and print one JSON document.
    fn json(&self, host: HostKind, args: &[&str]) -> Value {
        let output = self.command(host, &[args, &["--json"]].concat()).output().expect("runs");
        assert!(output.status.success(), "{host:?} {args:?}: {output:?}");
        serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("{host:?} {args:?} printed no JSON ({e}): {output:?}"))
    }

    /// The lease of `workdir` once its run recorded its child (phase `running`).
    fn running_lease(&self, owner: &mut Child, host: HostKind, workdir: &Path) -> Value {
        let collection = self.home.join("recovery/beeper-message-like-me-directory-leases");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            for entry in std::fs::read_dir(&collection).into_iter().flatten().flatten() {
                if !entry.file_name().to_string_lossy().ends_with(".json") {
                    continue;
                }
                let Ok(record) = std::fs::read(entry.path()).map_err(|_| ()).and_then(|b| serde_json::from_slice::<Value>(&b).map_err(|_| ())) else { continue };
                if record["path"] == workdir.to_str().expect("utf-8") && record["phase"] == "running" {
                    return record;
                }
            }
            if let Ok(Some(status)) = owner.try_wait() {
                let mut stderr = String::new();
                let _ = std::io::Read::read_to_string(owner.stderr.as_mut().expect("piped"), &mut stderr);
                panic!("the {host:?} run ended ({status}) before it recorded its child: {stderr}");
            }
            assert!(Instant::now() < deadline, "the {host:?} run never recorded its child");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The one `entries[]` of a `recover --json` report's directory leases.
fn only_entry(report: &Value) -> &Value {
    let entries = report["directoryLeases"]["entries"].as_array().unwrap_or_else(|| panic!("no entries: {report}"));
    assert_eq!(entries.len(), 1, "{report}");
    &entries[0]
}

/// `owner`'s run, kept by `recoverer` while it runs and removed by it once killed.
fn crashed_run_is_recovered(owner: HostKind, recoverer: HostKind) {
    let place = Place::new();
    let workdir = place.ws.join("job");
    let mut run = place
        .command(owner, &["run", "--workdir", workdir.to_str().expect("utf-8"), "--", "sleep", "60"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run starts");
    let lease = place.running_lease(&mut run, owner, &workdir);
    let supervisor = lease["owner"]["pid"].as_u64().expect("owner pid");
    let child = lease["childOwner"]["pid"].as_u64().expect("child pid");
    assert_eq!(supervisor, u64::from(run.id()), "{owner:?}: the supervisor owns the lease");

    // Alive: kept, by every host.
    let kept = place.json(recoverer, &["recover"]);
    let entry = only_entry(&kept);
    assert_eq!((entry["action"].as_str(), entry["done"].as_bool()), (Some("keep"), Some(false)), "{owner:?} run, {recoverer:?} recover: {kept}");
    assert!(workdir.is_dir(), "{owner:?} run, {recoverer:?} recover: a live run's directory was removed");

    // Crashed: the supervisor and what it recorded as its child are SIGKILLed.
    common::kill(supervisor);
    common::kill(child);
    let _ = run.wait();
    common::wait_until_dead(child);
    // Whatever the command left (a native box's processes, a cgroup still emptying) is gone
    // within moments; until then the lease is rightly kept.
    let deadline = Instant::now() + Duration::from_secs(20);
    let report = loop {
        let report = place.json(recoverer, &["recover"]);
        if only_entry(&report)["action"] != "keep" || Instant::now() > deadline {
            break report;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let entry = only_entry(&report);
    assert_eq!((entry["action"].as_str(), entry["done"].as_bool()), (Some("remove directory"), Some(true)), "{owner:?} run killed, {recoverer:?} recover: {report}");
    assert!(!workdir.exists(), "{owner:?} run killed, {recoverer:?} recover: the directory is still there");
    for host in HOSTS {
        assert_eq!(place.json(host, &["doctor"])["entries"], Value::Array(Vec::new()), "{host:?} doctor after {recoverer:?} recovered {owner:?}'s run");
    }
}

#[test]
fn a_native_run_is_kept_alive_and_recovered_dead_by_every_host() {
    installed();
    for recoverer in HOSTS {
        crashed_run_is_recovered(HostKind::Native, recoverer);
    }
}

#[test]
fn a_python_run_is_kept_alive_and_recovered_dead_by_every_host() {
    installed();
    for recoverer in HOSTS {
        crashed_run_is_recovered(HostKind::Python, recoverer);
    }
}

#[test]
fn a_node_run_is_kept_alive_and_recovered_dead_by_every_host() {
    installed();
    for recoverer in HOSTS {
        crashed_run_is_recovered(HostKind::Node, recoverer);
    }
}
