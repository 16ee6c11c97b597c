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

/// `flock -o PATH sleep 60` (the lock is flock(1)'s own, not inherited by `sleep`, so killing
/// flock frees it), once `/proc/locks` shows it held.
fn held_by_flock(path: &Path) -> std::process::Child {
    let holder = Command::new("flock").arg("-o").arg(path).args(["sleep", "60"]).spawn().expect("flock(1)");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !std::fs::read_to_string("/proc/locks").is_ok_and(|locks| locks.lines().any(|l| l.contains(&format!(" {} ", holder.id())))) {
        assert!(std::time::Instant::now() < deadline, "flock(1) never took the lock");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    holder
}

fn private_dir(path: &Path) {
    std::fs::create_dir_all(path).expect("mkdir");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700)).expect("chmod");
}

/// A pause injected into an effect call of a recovery running on another thread (the step a
/// race test makes lose): the first call to reach [`Gate::pause`] waits there until the test
/// calls [`Gate::open`]; later calls pass.
#[derive(Clone, Default)]
struct Gate(std::sync::Arc<(std::sync::Mutex<u8>, std::sync::Condvar)>);

impl Gate {
    fn pause(&self) {
        let (state, changed) = &*self.0;
        let mut state = state.lock().expect("gate");
        if *state == 0 {
            *state = 1;
            changed.notify_all();
            while *state != 2 {
                state = changed.wait(state).expect("gate");
            }
        }
    }

    fn wait_until_paused(&self) {
        let (state, changed) = &*self.0;
        let mut state = state.lock().expect("gate");
        while *state == 0 {
            state = changed.wait(state).expect("gate");
        }
    }

    fn open(&self) {
        let (state, changed) = &*self.0;
        *state.lock().expect("gate") = 2;
        changed.notify_all();
    }
}

/// Directory-lease recovery of the sandbox's state home (what `recover` runs: concurrent, past
/// the bound) on another thread, through the real effects as `wrap` changes them.
fn recover_in_background(
    s: &Sandbox,
    wrap: impl FnOnce(proclease::effects::Effects) -> proclease::effects::Effects + Send + 'static,
) -> std::thread::JoinHandle<proclease::core::directory_leases::Run> {
    let host = proclease::Host::builder().state_home(&s.state).workspace_root(&s.root).build().expect("host");
    std::thread::spawn(move || {
        let effects = wrap(host.effects());
        let options = proclease::core::directory_leases::Options { concurrent: true, past_bound: true, ..Default::default() };
        proclease::recover_each_directory_lease(host.runtime(), effects, None, options).expect("recovery runs")
    })
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
    // The inner run started while the outer lease's owner was alive (a run may nest runs in its
    // directory); then the outer owner crashed.
    let inner = s.root.join("jobs/a/b");
    let inner_text = inner.to_str().expect("utf-8");
    let mut live = s.spawn(&["run", "--workdir", inner_text, "--", "sh", "-c", "echo work > result.txt; sleep 30"]);
    s.wait_for_phase(&inner, "running");
    let outer = s.dead_lease("a", 1);

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

/// The lease record of `dir` in the collection (its file), found by its path.
fn claim_file_of(s: &Sandbox, dir: &Path) -> PathBuf {
    let wanted = format!("\"path\":{}", serde_json::to_string(dir.to_str().expect("utf-8")).expect("json"));
    std::fs::read_dir(s.collection())
        .expect("collection")
        .flatten()
        .map(|e| e.path())
        .find(|p| std::fs::read_to_string(p).is_ok_and(|t| t.contains(&wanted)))
        .unwrap_or_else(|| panic!("no lease of {}", dir.display()))
}

#[test]
fn a_run_inside_a_dead_lease_s_directory_is_refused_until_recovery_removed_it() {
    // Issue #40 case 1 (docs/deviations.md 24): recovery removes the outer directory whole, so a
    // run admitted inside it would lose its work to the next (or a running) `recover`.
    let s = sandbox();
    let outer = s.dead_lease("a", 1);
    let inner = outer.join("inner");
    let inner_text = inner.to_str().expect("utf-8");
    let out = s.run(&["run", "--workdir", inner_text, "--", "sh", "-c", "echo done > result.txt"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let expected = format!(
        "{inner_text}: refused: it is inside {}, leased by pid 4242 (lease 00000001-0000-4000-8000-000000000000): its owner is gone, \
         so `proclease recover` removes that directory with everything in it: run it first, or use a directory elsewhere",
        outer.display()
    );
    assert!(stderr(&out).contains(&expected), "{}", stderr(&out));
    assert!(!inner.exists() && outer.join("out.txt").is_file(), "nothing was created, nothing removed");

    let recovered = s.run(&["recover"]);
    assert!(recovered.status.success(), "{}", stderr(&recovered));
    assert!(!outer.exists());
    let out = s.run(&["run", "--workdir", inner_text, "--", "sh", "-c", "echo done > result.txt"]);
    assert!(out.status.success(), "once recovered, the path is free: {}", stderr(&out));
    assert_eq!(std::fs::read_to_string(inner.join("result.txt")).expect("result"), "done\n");
}

#[test]
fn a_lease_made_inside_a_directory_while_its_recovery_runs_keeps_that_directory() {
    // Issue #40 case 1, the race: a recovery reads the collection; meanwhile a run leases a
    // directory inside a live run's directory, and that live run crashes; the recovery then finds
    // the outer lease's owner gone. It must look at the collection again before it removes the
    // outer directory (under the lock new leases take), and keep it. The pause is injected at
    // the step that loses: the recovery's first probe of an owner, after its first read.
    use proclease::core::effects::Processes;
    use proclease::core::liveness::OwnerFacts;

    struct PausingProcesses {
        inner: Box<dyn Processes + Send>,
        gate: Gate,
    }
    impl Processes for PausingProcesses {
        fn current_boot_id(&mut self) -> Result<String, String> {
            self.inner.current_boot_id()
        }
        fn self_identity(&mut self) -> Result<Owner, String> {
            self.inner.self_identity()
        }
        fn capture(&mut self, pid: u64) -> Result<Owner, String> {
            self.inner.capture(pid)
        }
        fn probe(&mut self, owner: &Owner) -> Result<OwnerFacts, String> {
            self.gate.pause();
            self.inner.probe(owner)
        }
        fn finished_run(&mut self, lease_id: &str) -> Result<Option<proclease::core::effects::FinishedRun>, String> {
            self.inner.finished_run(lease_id)
        }
        fn forget_run(&mut self, lease_id: &str) {
            self.inner.forget_run(lease_id)
        }
    }

    let s = sandbox();
    let outer = s.root.join("jobs/a");
    let inner = outer.join("inner");
    let mut outer_run = s.spawn(&["run", "--workdir", outer.to_str().expect("utf-8"), "--", "sleep", "60"]);
    let outer_entry = s.wait_for_phase(&outer, "running");
    let outer_child = outer_entry["childPid"].as_u64().expect("the outer run's recorded child");

    let gate = Gate::default();
    let paused = gate.clone();
    let recovery = recover_in_background(&s, move |mut effects| {
        effects.processes = Box::new(PausingProcesses { inner: effects.processes, gate: paused });
        effects
    });
    gate.wait_until_paused();
    // The recovery has read the collection (the outer lease only) and waits at its first probe.
    let inner_run = s
        .command(&["run", "--workdir", inner.to_str().expect("utf-8"), "--", "sh", "-c", "sleep 1; echo done > result.txt"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the inner run");
    s.wait_for_phase(&inner, "running");
    // The outer run crashes, its whole box with it.
    common::kill(u64::from(outer_run.id()));
    common::kill(outer_child);
    let _ = outer_run.wait();
    common::wait_until_dead(outer_child);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let doc = s.doctor();
        let entries = doc["entries"].as_array().cloned().unwrap_or_default();
        if entries.iter().any(|e| e["target"] == outer.to_str().expect("utf-8") && e["disposition"] == "recoverable") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the crashed outer run never became recoverable: {doc}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    gate.open();
    let run = recovery.join().expect("the recovery thread");
    let kept = run.outcomes.iter().find(|o| o.claim.as_ref().is_some_and(|c| c.path == outer.to_str().expect("utf-8"))).expect("the outer lease's outcome");
    assert_eq!(kept.action, proclease::core::directory_leases::Action::Keep, "{kept:?}");
    assert!(kept.reason.contains(&format!("but {}, inside it, is leased too", inner.display())), "{}", kept.reason);

    let finished = inner_run.wait_with_output().expect("the inner run ends");
    assert!(finished.status.success(), "the inner run kept its directory: {}", stderr(&finished));
    assert_eq!(std::fs::read_to_string(inner.join("result.txt")).expect("the inner run's result"), "done\n");
}

#[test]
fn a_lease_record_that_cannot_be_read_keeps_its_directory_from_a_second_lease_and_from_removal() {
    // Issue #40 case 2 (docs/deviations.md 24): a live run's record made group-readable (as
    // `chmod -R g+rX` or a restore leaves it) cannot be read, so it may claim any directory.
    let s = sandbox();
    let work = s.root.join("jobs/a");
    let work_text = work.to_str().expect("utf-8");
    let mut live = s.spawn(&["run", "--workdir", work_text, "--", "sleep", "60"]);
    s.wait_for_phase(&work, "running");
    let record = claim_file_of(&s, &work);
    std::fs::set_permissions(&record, std::fs::Permissions::from_mode(0o640)).expect("chmod g+r");

    let second = s.run(&["run", "--workdir", work_text, "--", "true"]);
    assert_eq!(second.status.code(), Some(1), "{second:?}");
    let err = stderr(&second);
    assert!(err.contains(&format!("{work_text}: refused: the lease collection holds an entry that may claim it, {}", record.display())), "{err}");
    assert!(err.contains("make it a private file of yours again (chmod 600)"), "says how to fix it: {err}");
    let other = s.run(&["run", "--workdir", s.root.join("jobs/b").to_str().expect("utf-8"), "--", "true"]);
    assert_eq!(other.status.code(), Some(1), "an unreadable record may claim any directory: {other:?}");

    // A duplicate claim on the same directory whose owner is gone (a library user's, or
    // ghostget's, which has no one-lease rule): recovery keeps the directory while the
    // unreadable record may claim it …
    let duplicate = s.dead_lease("a", 1);
    assert_eq!(duplicate, work);
    let out = s.run(&["recover", "--skip-invalid"]);
    assert!(out.status.success(), "{out:?}");
    assert!(stdout(&out).contains(&format!("kept {work_text}: recoverable")), "{}", stdout(&out));
    assert!(stdout(&out).contains("is not a valid lease and cannot be read, so it may claim any directory"), "{}", stdout(&out));
    assert!(work.is_dir(), "the live run's directory stays");

    // … and once it can be read, while the live lease claims the same directory.
    std::fs::set_permissions(&record, std::fs::Permissions::from_mode(0o600)).expect("chmod 600");
    let out = s.run(&["recover"]);
    assert!(out.status.success(), "{out:?}");
    assert!(stdout(&out).contains("claims this directory too, and it is active"), "{}", stdout(&out));
    assert!(work.is_dir(), "the live run's directory stays");

    // A record that a newer writer extended with a field this version does not know names its
    // directory: that directory stays blocked, others are free.
    std::fs::remove_file(s.collection().join("00000001-0000-4000-8000-000000000000.json")).expect("the duplicate goes");
    let text = std::fs::read_to_string(&record).expect("record");
    std::fs::write(&record, text.replacen('{', "{\"zNewField\":1,", 1)).expect("extend");
    let nested = work.join("inner");
    let second = s.run(&["run", "--workdir", nested.to_str().expect("utf-8"), "--", "true"]);
    assert_eq!(second.status.code(), Some(1), "{second:?}");
    assert!(stderr(&second).contains(&format!("it names {work_text}")), "{}", stderr(&second));
    assert!(!nested.exists());
    let other = s.run(&["run", "--workdir", s.root.join("jobs/b").to_str().expect("utf-8"), "--", "true"]);
    assert!(other.status.success(), "another directory is free: {}", stderr(&other));

    let pid = rustix::process::Pid::from_raw(live.id() as i32).expect("pid");
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("SIGTERM to the live run");
    let _ = live.wait();
}

#[test]
fn a_held_workspace_parent_lock_makes_recover_wait_within_its_bound_and_name_the_holder() {
    // Issue #40 case 3: anyone may `flock` the parent of leased directories (a user's
    // `flock ~/jobs …`, a Ctrl-Z'd `proclease recover`); recovery's wait for it is bounded,
    // voiced, and ends in exit status 5 naming the holder (case 6: not 1 with a --skip-invalid
    // hint that does not apply).
    let s = sandbox();
    let dead = s.dead_lease("a", 1);
    let parent = dead.parent().expect("jobs").to_path_buf();
    let mut holder = held_by_flock(&parent);
    let started = std::time::Instant::now();
    let out = s.run(&["--lock-timeout", "2s", "recover"]);
    let waited = started.elapsed();
    assert_eq!(out.status.code(), Some(5), "{out:?}");
    let err = stderr(&out);
    assert!(err.contains(&format!("the lock of {}'s parent directory, held by pid {} (flock", dead.display(), holder.id())), "{err}");
    assert!(err.contains("waiting for pid"), "it says whom it waits for after 1 s: {err}");
    assert!(!err.contains("--skip-invalid"), "{err}");
    assert!(waited < std::time::Duration::from_secs(30), "bounded: {waited:?}");
    assert!(dead.join("out.txt").is_file(), "nothing was removed");
    let _ = holder.kill();
    let _ = holder.wait();
    let out = s.run(&["recover"]);
    assert!(out.status.success(), "{out:?}");
    assert!(!dead.exists(), "removed once the lock is free");
}

#[test]
fn a_recover_racing_runs_inside_its_dead_leases_never_loses_a_run_s_result() {
    // Issue #40, "done when": a `recover` working through 40 dead leases while a run is
    // started inside the directory of the last of them, at a different instant each round.
    // The run is either refused (the outer lease is still there: recovery removes its
    // directory whole) or leased after the outer directory is gone; its result is never lost.
    // `PROCLEASE_RACE_ROUNDS=100` for the figure in docs/reliability.md.
    let rounds: u64 = std::env::var("PROCLEASE_RACE_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(20);
    let (mut admitted, mut refused) = (0, 0);
    for round in 0..rounds {
        let s = sandbox();
        let leases: Vec<PathBuf> = (1..=40).map(|n| s.dead_lease(&format!("j{n:02}"), n)).collect();
        let outer = leases[39].clone();
        let inner = outer.join("inner");
        let recoverer = s.command(&["recover"]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("recover");
        // Spread the run's start over the recovery (0 to 400 ms: about its whole length here).
        std::thread::sleep(std::time::Duration::from_micros((round * 7919) % 400_000));
        let run = s.run(&["run", "--workdir", inner.to_str().expect("utf-8"), "--", "sh", "-c", "sleep 0.2; echo done > result.txt"]);
        let recovered = recoverer.wait_with_output().expect("recover ends");
        assert!(recovered.status.success(), "round {round}: {recovered:?}");
        match run.status.code() {
            Some(0) => {
                admitted += 1;
                assert_eq!(std::fs::read_to_string(inner.join("result.txt")).ok().as_deref(), Some("done\n"), "round {round}: the admitted run lost its result");
            }
            Some(1) => {
                refused += 1;
                assert!(stderr(&run).contains("refused: it is inside"), "round {round}: {}", stderr(&run));
                assert!(!inner.exists(), "round {round}: a refused run leaves nothing");
            }
            other => panic!("round {round}: exit {other:?}: {}", stderr(&run)),
        }
    }
    println!("{rounds} rounds: {admitted} runs admitted (after the outer directory was recovered), {refused} refused, 0 results lost");
}

#[test]
fn recovery_holds_the_lease_creation_lock_from_its_last_look_until_the_directory_is_out_of_its_path() {
    // Issue #40 case 1, the step that loses without the lock: between recovery's last look at
    // the leases and its rename of the directory to quarantine, no lease may be made (a run
    // that checked while the outer owner lived could otherwise write its lease inside the
    // directory in that instant). The pause is injected at the removal itself: a run elsewhere
    // then waits for the lock, and is told who holds it.
    use proclease::core::effects::{DirectoryFacts, Failure, Workspace};
    use proclease::core::records::DirectoryIdentity;

    struct PausingWorkspace {
        inner: Box<dyn Workspace + Send>,
        gate: Gate,
    }
    impl Workspace for PausingWorkspace {
        fn inspect(&mut self, path: &str) -> Result<Option<DirectoryFacts>, Failure> {
            self.inner.inspect(path)
        }
        fn remove_tree(&mut self, path: &str, expected: &DirectoryIdentity) -> Result<bool, Failure> {
            self.gate.pause();
            self.inner.remove_tree(path, expected)
        }
        fn create_private_directory(&mut self, path: &str) -> Result<Vec<String>, Failure> {
            self.inner.create_private_directory(path)
        }
        fn remove_empty_directory(&mut self, path: &str, expected: Option<&DirectoryIdentity>) -> Result<bool, Failure> {
            self.inner.remove_empty_directory(path, expected)
        }
    }

    let s = sandbox();
    let dead = s.dead_lease("a", 1);
    let gate = Gate::default();
    let paused = gate.clone();
    let recovery = recover_in_background(&s, move |mut effects| {
        effects.workspace = Box::new(PausingWorkspace { inner: effects.workspace, gate: paused });
        effects
    });
    gate.wait_until_paused();
    let elsewhere = s.root.join("jobs/elsewhere");
    let waited = s.run(&["--lock-timeout", "1s", "run", "--workdir", elsewhere.to_str().expect("utf-8"), "--", "true"]);
    gate.open();
    let run = recovery.join().expect("the recovery thread");
    assert_eq!(waited.status.code(), Some(5), "a lease waits while recovery is between its look and its removal: {waited:?}");
    assert!(stderr(&waited).contains("directory-lease-creation.lock"), "{}", stderr(&waited));
    assert!(!elsewhere.exists(), "nothing was created");
    assert!(run.outcomes.iter().any(|o| o.action == proclease::core::directory_leases::Action::RemoveDirectory && o.done), "{run:?}");
    assert!(!dead.exists());
    // Released once the directory was out of its path: the same run goes through now.
    let out = s.run(&["--lock-timeout", "1s", "run", "--workdir", elsewhere.to_str().expect("utf-8"), "--", "true"]);
    assert!(out.status.success(), "{out:?}");
}

/// `docs/deviations.md` 26: a mutation claim is not fsynced, so a power loss can keep a claim's
/// name without its content. Such a claim (empty, or zeros where a filesystem kept the size but
/// not the data) can only be a previous boot's, since every writer writes the text before it
/// names the claim: the next change of that record removes it and goes on. A claim whose text is
/// there but wrong is still refused as the reference refuses it, and left for an operator.
#[test]
fn a_claim_whose_content_a_power_loss_took_is_removed_and_a_torn_one_is_still_refused() {
    let s = sandbox();
    let admission = s.state.join(Path::new(proclease::core::admission::CLAIM_PATH).parent().expect("a collection"));
    std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o700).create(&admission).expect("the admission's collection");
    let target = proclease::state_store::mutation_claim::target_sha256("active.json");
    let claim = |id: &str| admission.join(format!(".io-mutation-{target}-held-{id}.lock"));
    let write_private = |path: &Path, bytes: &[u8]| {
        std::fs::write(path, bytes).expect("a claim");
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    };
    for (id, lost) in [("3f1c9a52-8d2e-4b7a-9c1d-2e5f6a7b8c9d", &b""[..]), ("3f1c9a52-8d2e-4b7a-9c1d-2e5f6a7b8c9e", &[0u8; 300][..])] {
        write_private(&claim(id), lost);
        let work = s.root.join("jobs").join(&id[30..]);
        let out = s.run(&["run", "--exclusive", "--workdir", work.to_str().expect("utf-8"), "--", "true"]);
        assert!(out.status.success(), "a claim of {} bytes lost in a crash does not block the admission: {}", lost.len(), stderr(&out));
        assert!(!claim(id).exists(), "and it is removed");
    }
    // Torn: the text is cut short. Not what a crash of an unsynced file leaves, so not judged.
    let torn = "3f1c9a52-8d2e-4b7a-9c1d-2e5f6a7b8c9f";
    write_private(&claim(torn), b"{\"kind\":\"io-state-mutation-claim\",\"schemaVer");
    let work = s.root.join("jobs").join("torn");
    let out = s.run(&["run", "--exclusive", "--workdir", work.to_str().expect("utf-8"), "--", "true"]);
    assert!(!out.status.success(), "{out:?}");
    assert!(stderr(&out).contains("state mutation claim is malformed"), "{}", stderr(&out));
    assert!(claim(torn).exists(), "left for an operator");
}

/// A witness directory that cannot be used proves nothing, and recovery keeps what it cannot
/// judge. An uncontained run's supervisor is SIGKILLed and its command (`sh`) ends, leaving a
/// background process that holds the witness and still works in the directory. With the
/// witnesses readable, `doctor` says active. With `.proclease/witnesses` or this boot's
/// directory in it unusable — mode 0755 after a careless `chmod -R`, or replaced by a symbolic
/// link — `doctor` and `recover` say the owner cannot be judged and why, and the directory and
/// its lease stay. Before, each of these was taken for "no witness": the owner and its child
/// were judged dead from `/proc` and `recover` removed the live process's directory.
#[test]
fn an_unusable_witness_directory_keeps_a_live_background_process_s_directory() {
    let s = sandbox();
    let work = s.root.join("jobs/live");
    let marker = format!("{}", 3000 + std::process::id() % 1000);
    let script = format!("echo data > keep.txt; sleep {marker} & sleep 1.5");
    let mut supervisor = s.spawn(&["run", "--containment", "none", "--workdir", work.to_str().expect("utf-8"), "--", "sh", "-c", &script]);
    let entry = s.wait_for_phase(&work, "running");
    let background = common::wait_for_process(&["sleep", &marker]);
    supervisor.kill().expect("SIGKILL the supervisor");
    supervisor.wait().expect("reaped");
    // `sh` ends on its own; its background `sleep` lives on, holding the witness.
    let sh = entry["childPid"].as_u64().expect("the lease records the child");
    common::wait_until_dead(sh);
    assert_eq!(s.doctor()["entries"][0]["disposition"], "active", "the witness proves it: {}", s.doctor());
    let witnesses = s.state.join(".proclease/witnesses");
    let boot = std::fs::read_dir(&witnesses).expect("witnesses").flatten().map(|e| e.path()).find(|p| p.is_dir()).expect("this boot's directory");
    let chmod = |path: &Path, mode: u32| std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    let moved = s.state.join("moved-boot");
    // What is broken, how, and how it is mended.
    type Breakage<'a> = (&'a str, &'a dyn Fn(), &'a dyn Fn());
    let breakages: [Breakage; 3] = [
        ("the witness directory 0755", &|| chmod(&witnesses, 0o755), &|| chmod(&witnesses, 0o700)),
        ("this boot's directory 0755", &|| chmod(&boot, 0o755), &|| chmod(&boot, 0o700)),
        (
            "this boot's directory a symbolic link",
            &|| {
                std::fs::rename(&boot, &moved).expect("move");
                std::os::unix::fs::symlink(&moved, &boot).expect("symlink");
            },
            &|| {
                std::fs::remove_file(&boot).expect("unlink the symlink");
                std::fs::rename(&moved, &boot).expect("move back");
            },
        ),
    ];
    for (what, break_it, mend) in breakages {
        break_it();
        let doctor = s.run(&["doctor"]);
        let recover = s.run(&["recover"]);
        mend();
        assert!(stdout(&doctor).contains(&format!("whether pid {} (or a process it started) is alive cannot be told", entry["ownerPid"])), "{what}: {doctor:?}");
        assert!(!recover.status.success(), "{what}: {recover:?}");
        assert!(stderr(&recover).contains("cannot be told"), "{what}: {recover:?}");
        assert_eq!(std::fs::read_to_string(work.join("keep.txt")).ok().as_deref(), Some("data\n"), "{what}: the live process's directory stays");
        assert_eq!(std::fs::read_dir(s.collection()).expect("collection").count(), 1, "{what}: and so does its lease");
        assert_eq!(s.doctor()["entries"][0]["disposition"], "active", "{what}, mended");
    }
    let doctor = s.run(&["doctor"]);
    assert!(stderr(&doctor).is_empty(), "no warning once mended: {doctor:?}");
    common::kill(background);
    common::wait_until_dead(background);
    let out = s.run(&["recover"]);
    assert!(out.status.success(), "{out:?}");
    assert!(!work.exists(), "once everything is gone, recovery removes it as before");
}

/// A killed run whose tree ran in a cgroup, looked at from another cgroup namespace (a
/// container's `recover` on a shared state home: `unshare --cgroup`), where its cgroup record
/// cannot be read. Its witnesses are free, but a process of its tree that closed them could still
/// run in that cgroup: `doctor` says the owner cannot be inspected and `recover` keeps the
/// directory. From the machine's cgroup namespace the cgroup is read (empty) and the run is
/// recovered. Before, a cgroup that could not be read counted for nothing and the witnesses
/// alone decided: the directory was removed from the container.
#[test]
fn a_run_whose_cgroup_cannot_be_read_is_kept_until_recovered_where_it_can() {
    if !common::namespaces_available(&["--cgroup"]) {
        return;
    }
    let s = sandbox();
    let work = s.root.join("jobs/boxed");
    let mut supervisor = s.spawn(&["run", "--workdir", work.to_str().expect("utf-8"), "--", "sleep", "60"]);
    let entry = s.wait_for_phase(&work, "running");
    let boot = std::fs::read_dir(s.state.join(".proclease/witnesses")).expect("witnesses").flatten().map(|e| e.path()).find(|p| p.is_dir()).expect("this boot's directory");
    let has_cgroup_record = std::fs::read_dir(&boot).expect("boot directory").flatten().any(|e| e.file_name().to_string_lossy().contains(".cgroup"));
    if !has_cgroup_record {
        assert!(std::env::var_os("PROCLEASE_REQUIRE_NAMESPACES").is_none(), "the run made no cgroup here (doctor: {})", s.doctor());
        println!("skipped: no cgroup v2 could be made here for the run's tree");
        supervisor.kill().expect("SIGKILL");
        supervisor.wait().expect("reaped");
        return;
    }
    let child = entry["childPid"].as_u64().expect("the lease records the child");
    supervisor.kill().expect("SIGKILL the supervisor");
    supervisor.wait().expect("reaped");
    common::kill(child);
    common::wait_until_dead(child);
    // Gone for the machine's own namespace, once the box's cgroup is empty.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while s.doctor()["entries"][0]["disposition"] != "recoverable" {
        assert!(std::time::Instant::now() < deadline, "never recoverable: {}", s.doctor());
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let elsewhere = ["unshare", "--cgroup"];
    let doctor = s.run_in(&elsewhere, &["doctor", "--json"]);
    assert!(doctor.status.success(), "{doctor:?}");
    let doctor: serde_json::Value = serde_json::from_slice(&doctor.stdout).expect("JSON");
    let reason = doctor["entries"][0]["reason"].as_str().expect("a reason").to_string();
    assert_ne!(doctor["entries"][0]["disposition"], "recoverable", "{doctor}");
    assert!(reason.contains("its witness lock is free, but the cgroup recorded for its processes cannot be read here"), "{reason}");
    let recover = s.run_in(&elsewhere, &["recover"]);
    assert!(work.is_dir(), "kept from another cgroup namespace: {recover:?}");
    assert_eq!(std::fs::read_dir(s.collection()).expect("collection").count(), 1, "and so is its lease: {recover:?}");
    let recover = s.run(&["recover"]);
    assert!(recover.status.success(), "{recover:?}");
    assert!(!work.exists(), "recovered where its cgroup can be read: {recover:?}");
}

#[test]
fn a_recover_that_cannot_repair_invocation_leases_still_reports_the_directories_it_removed() {
    // A plugin mutation under way (here: another proclease holding the plugin catalog's guard,
    // `.proclease/locks/catalog-mutation.lock`) makes the invocation-lease repair fail with the
    // reference's `already locked`. The directory leases recovered before it stay reported —
    // before, `recover` removed a crashed run's directory and said only the lock's error.
    let s = sandbox();
    let dead = s.dead_lease("a", 1);
    let guard = s.state.join(".proclease/locks/catalog-mutation.lock");
    std::fs::create_dir_all(guard.parent().expect("locks")).expect("locks directory");
    std::fs::write(&guard, b"").expect("guard file");
    let mut holder = held_by_flock(&guard);
    let advice = "recovery stopped at the invocation leases, which are left as they are: portable plugin catalog mutation is already locked; \
                  the rest of the recovery, listed above, was done";
    let out = s.run(&["recover"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(!dead.exists(), "the crashed run's directory was recovered");
    let text = stdout(&out);
    assert!(text.starts_with(&format!("removed {} (", dead.display())), "{text}");
    assert!(text.contains("\nrecovered: 1\n"), "{text}");
    assert_eq!(stderr(&out), format!("proclease: {advice}\n"));
    // As JSON: the document of what was done, then the same error.
    let second = s.dead_lease("b", 2);
    let out = s.run(&["recover", "--json"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let document: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    assert_eq!(document["directoryLeases"]["recovered"], 1, "{document}");
    assert!(document.get("invocationLeases").is_none(), "not repaired: {document}");
    assert_eq!(stderr(&out), format!("proclease: {advice}\n"));
    assert!(!second.exists());
    // A dry run takes no catalog lock: it previews everything.
    assert!(s.run(&["recover", "--dry-run"]).status.success());
    let _ = holder.kill();
    let _ = holder.wait();
    let out = s.run(&["recover"]);
    assert!(out.status.success(), "{out:?}");
}

#[test]
fn a_recover_whose_creation_intents_stay_locked_still_reports_its_directory_leases() {
    // The creation intents' collection lock held past the bound (a hung writer): before, the
    // failure at the creation intents hid what the directory leases' recovery had reported.
    let s = sandbox();
    let dead = s.dead_lease("a", 1);
    let lock =
        s.state.join(".proclease/locks").join(format!("{}.lock", proclease::core::digest::identity_digest("proclease-collection-lock", "recovery/proclease-directory-creations")));
    std::fs::create_dir_all(lock.parent().expect("locks")).expect("locks directory");
    private_dir(&s.state.join("recovery/proclease-directory-creations"));
    std::fs::write(&lock, b"").expect("lock file");
    let mut holder = held_by_flock(&lock);
    let out = s.run(&["--lock-timeout", "300ms", "recover"]);
    let _ = holder.kill();
    let _ = holder.wait();
    assert_eq!(out.status.code(), Some(5), "{out:?}");
    let text = stdout(&out);
    assert!(text.contains(&format!("{}: ", dead.display())) && text.contains("\nrecovered: 0\n"), "the directory leases' report: {text}");
    let err = stderr(&out);
    assert!(
        err.contains("proclease: recovery stopped at the creation intents, which are left as they are with the invocation leases: recovery/proclease-directory-creations: "),
        "{err}"
    );
    assert!(dead.join("out.txt").is_file(), "nothing removed without the creation intents' lock");
    let out = s.run(&["recover"]);
    assert!(out.status.success(), "{out:?}");
    assert!(!dead.exists());
}
