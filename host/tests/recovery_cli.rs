//! Recovery that always finishes (issue #16), through the `proclease` binary: concurrent
//! recoverers, exclusive runs under churn, and bad records that must not stop the recovery of
//! the rest. The library-level cases are in `tests/tests/recovery_finishes.rs`.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use proclease::core::directory_leases::DIRECTORY;
use proclease::core::records::directory_lease::{DirectoryLease, Phase, Role};
use proclease::core::records::{DirectoryIdentity, Owner};

mod common;
use common::{Sandbox, stderr, stdout};

/// A sandbox whose state home exists.
fn sandbox() -> Sandbox {
    let s = common::sandbox();
    assert!(s.run(&["doctor"]).status.success(), "creates the state home");
    s
}

impl Sandbox {
    fn collection(&self) -> PathBuf {
        self.state.join(DIRECTORY)
    }

    /// A settled lease of a previous boot's owner (provably gone) on a new directory
    /// `jobs/<name>` holding a file, as a crashed supervisor leaves it.
    fn dead_lease(&self, name: &str, n: u32) -> PathBuf {
        let dir = self.root.join("jobs").join(name);
        private_dir(&dir);
        std::fs::write(dir.join("out.txt"), b"work").expect("output");
        let identity = |p: &Path| {
            use std::os::unix::fs::MetadataExt as _;
            let meta = std::fs::metadata(p).expect("stat");
            let birth = meta.created().expect("birth time").duration_since(std::time::UNIX_EPOCH).expect("after the epoch").as_nanos();
            DirectoryIdentity { device: meta.dev().to_string(), inode: meta.ino().to_string(), birthtime_ns: birth.to_string() }
        };
        let claim = DirectoryLease {
            id: format!("{n:08x}-0000-4000-8000-000000000000"),
            role: Role::RawWorking,
            path: dir.to_str().expect("utf-8").into(),
            parent_path: dir.parent().and_then(Path::to_str).expect("utf-8").into(),
            parent_identity: identity(dir.parent().expect("parent")),
            directory_identity: identity(&dir),
            output_root: None,
            owner: Owner { pid: 4242, boot_id: "0".repeat(64), process_start_id: "1".repeat(64) },
            child_owner: None,
            phase: Phase::Settled,
            created_at_ms: 1,
            recover_after_ms: 2,
        }
        .parsed();
        for d in [self.state.join("recovery"), self.collection()] {
            private_dir(&d);
        }
        let file = self.collection().join(format!("{}.json", claim.record.id));
        std::fs::write(&file, &claim.canonical).expect("claim");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        dir
    }
}

fn private_dir(path: &Path) {
    std::fs::create_dir_all(path).expect("mkdir");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700)).expect("chmod");
}

#[test]
fn concurrent_recoverers_all_succeed_and_their_counts_add_up() {
    let s = sandbox();
    let dirs: Vec<PathBuf> = (0..10).map(|n| s.dead_lease(&format!("j{n}"), n + 1)).collect();
    let recoverers: Vec<_> = (0..5).map(|_| s.command(&["recover", "--json"]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn")).collect();
    let mut recovered = 0;
    for recoverer in recoverers {
        let output = recoverer.wait_with_output().expect("wait");
        assert_eq!(output.status.code(), Some(0), "every recoverer succeeds: {output:?}");
        let doc: serde_json::Value = serde_json::from_slice(&output.stdout).expect("json");
        recovered += doc["directoryLeases"]["recovered"].as_u64().expect("count");
    }
    assert_eq!(recovered, 10, "each lease is counted once, by the recoverer that removed it");
    assert!(dirs.iter().all(|d| !d.exists()));
    assert_eq!(std::fs::read_dir(s.collection()).expect("collection").count(), 0);
}

#[test]
fn exclusive_runs_under_churn_are_blocked_by_live_owners_only() {
    // Every refusal must be "another export is active" (3), never "cannot be proven dead" (4):
    // nothing crashes here. A verdict about a claim that changed after it was read is retried.
    let s = sandbox();
    let loops: Vec<_> = (0..4)
        .map(|l| {
            let global = ["--state-home".to_string(), s.state.display().to_string(), "--workspace-root".to_string(), s.root.display().to_string()];
            let jobs = s.root.join(format!("churn{l}"));
            std::thread::spawn(move || {
                let mut codes = Vec::new();
                for i in 0..40 {
                    let work = jobs.join(format!("r{i}"));
                    let output = Command::new(env!("CARGO_BIN_EXE_proclease"))
                        .args(&global)
                        .args(["run", "--exclusive", "--workdir", work.to_str().expect("utf-8"), "--", "sleep", "0.02"])
                        .env_remove("PROCLEASE_STATE_HOME")
                        .output()
                        .expect("run");
                    codes.push((output.status.code(), String::from_utf8_lossy(&output.stderr).into_owned()));
                }
                codes
            })
        })
        .collect();
    let mut ran = 0;
    for handle in loops {
        for (code, stderr) in handle.join().expect("loop") {
            assert!(matches!(code, Some(0) | Some(3)), "exit {code:?}: {stderr}");
            ran += usize::from(code == Some(0));
        }
    }
    assert!(ran > 0, "some runs got the admission");
}

#[test]
fn one_bad_lease_file_does_not_keep_the_others_from_recovery() {
    let s = sandbox();
    let first = s.dead_lease("a", 1);
    let _second = s.dead_lease("b", 2);
    let third = s.dead_lease("c", 3);
    // The second claim file is empty; a stray file sits in the collection too.
    let bad = s.collection().join("00000002-0000-4000-8000-000000000000.json");
    std::fs::write(&bad, b"").expect("empty it");
    let stray = s.collection().join("notes.txt");
    std::fs::write(&stray, b"mine").expect("stray");
    std::fs::set_permissions(&stray, std::fs::Permissions::from_mode(0o600)).expect("chmod");

    // The reference refuses the whole collection while the stray file is there.
    let out = s.run(&["recover"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        stdout(&out).contains(
            "stopped at notes.txt: Beeper Message Like Me recovery: directory lease collection contains an unsupported entry (a file that is not named <lease id>.json, not a lease"
        ),
        "{}",
        stdout(&out)
    );
    let aside = format!("mv -- '{}' '{}'", stray.display(), s.state.join(".proclease/set-aside-notes.txt").display());
    assert!(stdout(&out).contains(&aside), "the exact command to move it aside: {}", stdout(&out));
    assert!(stderr(&out).contains("`proclease recover --skip-invalid` recovers the other leases"), "{}", stderr(&out));
    assert!(first.exists() && third.exists(), "nothing was recovered");

    let out = s.run(&["recover", "--skip-invalid", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(doc["directoryLeases"]["recovered"], 2, "{doc}");
    assert_eq!(doc["directoryLeases"]["skipped"], 2, "{doc}");
    let skipped: Vec<&serde_json::Value> = doc["directoryLeases"]["entries"].as_array().expect("entries").iter().filter(|e| e["action"] == "skip").collect();
    assert_eq!(skipped[0]["error"], "Beeper Message Like Me recovery: directory lease collection contains an unsupported entry", "{doc}");
    assert_eq!(skipped[1]["error"], "Beeper Message Like Me recovery: directory lease is not valid JSON", "{doc}");
    assert!(skipped[1]["setAside"].as_str().is_some_and(|c| c.starts_with("mv -- ")), "{doc}");
    assert!(!first.exists() && !third.exists(), "the other leases are recovered");
    assert!(bad.exists() && stray.exists(), "the bad files themselves are never deleted");
}

#[test]
fn an_invalid_admission_file_says_which_file_and_what_to_do() {
    let s = sandbox();
    let admission = s.state.join(proclease::core::admission::CLAIM_PATH);
    private_dir(admission.parent().expect("collection"));
    private_dir(&s.state.join("recovery"));
    std::fs::write(&admission, b"").expect("empty");
    std::fs::set_permissions(&admission, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let work = s.root.join("jobs/x");
    let out = s.run(&["run", "--exclusive", "--workdir", work.to_str().expect("utf-8"), "--", "true"]);
    assert_eq!(out.status.code(), Some(1));
    let aside = format!("mv -- '{}' '{}'", admission.display(), s.state.join(".proclease/set-aside-active.json").display());
    let err = stderr(&out);
    assert!(err.contains("proclease: Beeper Message Like Me recovery: export admission is not valid JSON"), "{err}");
    assert!(err.contains(&format!("{} is not a valid export admission", admission.display())) && err.contains(&aside), "{err}");
    assert!(!work.exists(), "nothing was created");
    let doctor = s.run(&["doctor"]);
    assert!(stdout(&doctor).contains(&aside), "{}", stdout(&doctor));
    assert!(admission.exists(), "never deleted");
}

/// Issue #27, input 2: the reference's bound of 64 directory leases refuses a new lease (before
/// anything is created) instead of breaking recovery, and a collection over it — written by an
/// older proclease or by hand — is listed by doctor and recovered in one `recover`.
#[test]
fn the_lease_bound_refuses_the_sixty_fifth_and_an_over_bound_collection_is_recovered_whole() {
    let s = sandbox();
    for n in 0..63 {
        s.dead_lease(&format!("j{n}"), n + 1);
    }
    let work = s.root.join("jobs/new");
    let out = s.run(&["run", "--workdir", work.to_str().unwrap(), "--", "true"]);
    assert!(out.status.success(), "the 64th lease is within the bound: {out:?}");
    s.dead_lease("j63", 64);
    let refused = s.root.join("jobs/refused/deep");
    let out = s.run(&["run", "--workdir", refused.to_str().unwrap(), "--", "true"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = stderr(&out);
    assert!(err.contains("directory lease collection exceeded its reviewed bound") && err.contains("holds 64 directory leases") && err.contains("proclease recover"), "{err}");
    assert!(!s.root.join("jobs/refused").exists(), "nothing was created");
    for n in 64..70 {
        s.dead_lease(&format!("j{n}"), n + 1);
    }
    let doc = s.doctor();
    assert_eq!(doc["entries"].as_array().map(Vec::len), Some(70), "doctor lists every lease: {doc}");
    assert!(doc["overBound"].as_str().is_some_and(|w| w.contains("70 entries, over the reference's bound of 64")), "{doc}");
    let text = stdout(&s.run(&["doctor"]));
    assert!(text.contains("over the reference's bound of 64"), "{text}");
    let out = s.run(&["recover", "--dry-run"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(stdout(&out).matches("would remove ").count(), 70, "{}", stdout(&out));
    let out = s.run(&["recover"]);
    assert!(out.status.success() && stdout(&out).contains("recovered: 70"), "{out:?}");
    assert_eq!(std::fs::read_dir(s.collection()).expect("collection").count(), 0, "nothing left");
    assert!((0..70).all(|n| !s.root.join(format!("jobs/j{n}")).exists()));
    let out = s.run(&["run", "--workdir", refused.to_str().unwrap(), "--", "true"]);
    assert!(out.status.success(), "leases are taken again: {out:?}");
}

/// A dead run's lease on `jobs/a` and a live run in `jobs/a/b` (the reference would remove
/// `jobs/a` with everything in it, the live run's directory included): recovery keeps `jobs/a`
/// while the inner lease is held, and removes it once that lease is released.
#[test]
fn a_dead_lease_holding_a_live_lease_s_directory_is_kept_until_that_lease_is_gone() {
    let s = sandbox();
    let outer = s.dead_lease("a", 1);
    let inner = outer.join("b");
    let inner_text = inner.to_str().expect("utf-8");
    let mut live = s.spawn(&["run", "--workdir", inner_text, "--", "sh", "-c", "echo work > result.txt; sleep 30"]);
    s.wait_for_phase(&inner, "running");

    let recovered = s.run(&["recover"]);
    assert!(recovered.status.success(), "{}", stderr(&recovered));
    let text = stdout(&recovered);
    let kept = format!("kept {}: recoverable (", outer.display());
    assert!(text.contains(&kept), "{text}");
    assert!(text.contains(&format!("but {inner_text}, inside it, is leased too")), "{text}");
    assert!(text.contains(&format!("kept {inner_text}: active")), "{text}");
    assert!(outer.join("out.txt").is_file() && inner.join("result.txt").is_file(), "nothing of the live run was removed");

    // Once the inner run ends (its lease released), the outer directory goes.
    let pid = rustix::process::Pid::from_raw(live.id() as i32).expect("pid");
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("SIGTERM to the live run");
    live.wait().expect("the run ends");
    let recovered = s.run(&["recover"]);
    assert!(recovered.status.success(), "{}", stderr(&recovered));
    assert!(stdout(&recovered).contains(&format!("removed {}", outer.display())), "{}", stdout(&recovered));
    assert!(!outer.exists());
}
