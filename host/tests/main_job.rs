//! The main job end to end, through the `proclease` binary, with real processes and real
//! directories: run, SIGKILL the supervisor, doctor, kill the command, recover.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

mod common;
use common::{sandbox, stdout};

fn kill(pid: u64) {
    let pid = rustix::process::Pid::from_raw(pid as i32).expect("pid");
    rustix::process::kill_process(pid, rustix::process::Signal::KILL).expect("kill");
}

/// Waits until `pid` is gone or a zombie (its supervisor was killed, so nobody here reaps it).
fn wait_until_dead(pid: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next());
        if stat.is_empty() || state == Some('Z') {
            return;
        }
        assert!(Instant::now() < deadline, "pid {pid} did not die");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn entries(doc: &serde_json::Value) -> Vec<serde_json::Value> {
    doc["entries"].as_array().cloned().unwrap_or_default()
}

#[test]
fn a_normal_run_leaves_its_output_and_no_lease() {
    let s = sandbox();
    let work = s.root.join("jobs/build");
    let output = s.run(&["run", "--workdir", work.to_str().expect("utf-8"), "--", "sh", "-c", "echo hello > out.txt; exit 7"]);
    assert_eq!(output.status.code(), Some(7), "run exits with the command's status: {output:?}");
    assert_eq!(std::fs::read_to_string(work.join("out.txt")).expect("output"), "hello\n");
    assert_eq!(std::fs::metadata(&work).expect("dir").permissions().mode() & 0o777, 0o700);
    assert!(entries(&s.doctor()).is_empty(), "the lease was released");
}

#[test]
fn sigkilled_supervisor_is_recovered_only_after_its_command_dies() {
    let s = sandbox();
    let work = s.root.join("jobs/long");
    let mut supervisor = s.spawn(&["run", "--workdir", work.to_str().expect("utf-8"), "--", "sleep", "60"]);
    let entry = s.wait_for_phase(&work, "running");
    let child = entry["childPid"].as_u64().expect("the command is recorded");
    supervisor.kill().expect("SIGKILL the supervisor");
    supervisor.wait().expect("reap the supervisor");

    let entry = s.wait_for_phase(&work, "running");
    assert_eq!(entry["disposition"], "active", "the command still runs: {entry}");
    let dry = s.run(&["recover", "--dry-run"]);
    assert!(stdout(&dry).contains("would keep"), "{}", stdout(&dry));
    let recover = s.run(&["recover"]);
    assert!(stdout(&recover).contains("active: 1"), "{}", stdout(&recover));
    assert!(work.is_dir(), "nothing is removed while the command lives");

    kill(child);
    wait_until_dead(child);
    let entry = s.wait_for_phase(&work, "running");
    assert_eq!(entry["disposition"], "recoverable", "{entry}");
    let recover = s.run(&["recover"]);
    assert!(recover.status.success(), "{recover:?}");
    assert!(stdout(&recover).contains("recovered: 1"), "{}", stdout(&recover));
    assert!(!work.exists(), "the directory is removed");
    assert!(entries(&s.doctor()).is_empty(), "and its claim");
    let again = s.run(&["recover"]);
    assert!(stdout(&again).contains("recovered: 0") && stdout(&again).contains("active: 0"), "{}", stdout(&again));
}

#[test]
fn a_stage_is_published_on_success_and_removed_on_failure() {
    let s = sandbox();
    let stage = s.root.join("exports/.stage");
    let output = s.root.join("exports/v1");
    let ok = s.run(&["run", "--stage", stage.to_str().expect("utf-8"), "--output", output.to_str().expect("utf-8"), "--", "sh", "-c", "echo bundle > b.txt"]);
    assert!(ok.status.success(), "{ok:?}");
    assert_eq!(std::fs::read_to_string(output.join("b.txt")).expect("published"), "bundle\n");
    assert!(!stage.exists());

    let output2 = s.root.join("exports/v2");
    let failed = s.run(&["run", "--stage", stage.to_str().expect("utf-8"), "--output", output2.to_str().expect("utf-8"), "--", "sh", "-c", "echo partial > b.txt; exit 3"]);
    assert_eq!(failed.status.code(), Some(3));
    assert!(!stage.exists(), "a failed stage is removed");
    assert!(!output2.exists(), "and never published");
    assert!(entries(&s.doctor()).is_empty());

    let exists = s.run(&["run", "--stage", stage.to_str().expect("utf-8"), "--output", output.to_str().expect("utf-8"), "--", "true"]);
    assert_eq!(exists.status.code(), Some(1), "publishing never overwrites");
    assert!(String::from_utf8_lossy(&exists.stderr).contains("the output already exists"));
}

#[test]
fn a_crashed_stage_is_recovered_or_counted_as_published() {
    // Unpublished: the supervisor dies with the stage in place.
    let s = sandbox();
    let stage = s.root.join("exports/.stage");
    let output = s.root.join("exports/v1");
    let mut supervisor = s.spawn(&["run", "--stage", stage.to_str().expect("utf-8"), "--output", output.to_str().expect("utf-8"), "--", "sleep", "100612"]);
    s.wait_for_phase(&stage, "preparing");
    // The lease is taken before the command starts: kill the supervisor once the command runs.
    common::wait_for_process(&["sleep", "100612"]);
    supervisor.kill().expect("SIGKILL");
    supervisor.wait().expect("reap");
    // Its command still works in the stage (its witness is held): kept until it is gone.
    let recover = s.run(&["recover"]);
    assert!(stdout(&recover).contains("active: 1"), "{}", stdout(&recover));
    let command = processes_running(&["sleep", "100612"]);
    assert_eq!(command.len(), 1);
    kill(command[0]);
    wait_until_dead(command[0]);
    let recover = s.run(&["recover"]);
    assert!(stdout(&recover).contains("recovered: 1"), "{}", stdout(&recover));
    assert!(!stage.exists());

    // Published: the supervisor dies after the rename, before releasing the claim.
    let mut supervisor = s.spawn(&["run", "--stage", stage.to_str().expect("utf-8"), "--output", output.to_str().expect("utf-8"), "--", "sleep", "100613"]);
    s.wait_for_phase(&stage, "preparing");
    // The lease is taken before the command starts: kill the supervisor once the command runs.
    common::wait_for_process(&["sleep", "100613"]);
    supervisor.kill().expect("SIGKILL");
    supervisor.wait().expect("reap");
    let command = processes_running(&["sleep", "100613"]);
    assert_eq!(command.len(), 1);
    kill(command[0]);
    wait_until_dead(command[0]);
    std::fs::write(stage.join("b.txt"), "bundle").expect("write");
    std::fs::rename(&stage, &output).expect("the publication the supervisor made before it died");
    let recover = s.run(&["recover"]);
    assert!(stdout(&recover).contains("published: 1"), "{}", stdout(&recover));
    assert_eq!(std::fs::read_to_string(output.join("b.txt")).expect("output intact"), "bundle");
    assert!(entries(&s.doctor()).is_empty());
}

#[test]
fn a_replaced_directory_is_never_removed() {
    let s = sandbox();
    let work = s.root.join("jobs/reuse");
    let mut supervisor = s.spawn(&["run", "--workdir", work.to_str().expect("utf-8"), "--", "sleep", "60"]);
    let entry = s.wait_for_phase(&work, "running");
    supervisor.kill().expect("SIGKILL");
    supervisor.wait().expect("reap");
    let child = entry["childPid"].as_u64().expect("child");
    kill(child);
    wait_until_dead(child);
    let displaced = s.root.join("jobs/displaced");
    std::fs::rename(&work, &displaced).expect("move away");
    std::fs::create_dir(&work).expect("a new directory at the same path");
    std::fs::set_permissions(&work, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    std::fs::write(work.join("precious"), "new").expect("write");
    let recover = s.run(&["recover"]);
    assert_eq!(recover.status.code(), Some(1), "{recover:?}");
    assert!(String::from_utf8_lossy(&recover.stderr).contains("Beeper Message Like Me recovery: directory lease target changed before recovery"), "{recover:?}");
    assert_eq!(std::fs::read_to_string(work.join("precious")).expect("kept"), "new");
    assert!(displaced.is_dir());
}

#[test]
fn a_directory_another_lease_claims_is_refused_live_or_dead() {
    let s = sandbox();
    let work = s.root.join("jobs/shared");
    let work_text = work.to_str().expect("utf-8");
    let mut supervisor = s.spawn(&["run", "--workdir", work_text, "--", "sleep", "60"]);
    let entry = s.wait_for_phase(&work, "running");
    let owner = entry["ownerPid"].as_u64().expect("owner pid, a number").to_string();
    // The directory is empty (sleep writes nothing), yet it is someone's: a second lease on it
    // would let the first lease's recovery delete it under the second run.
    let second = s.run(&["run", "--workdir", work_text, "--", "true"]);
    assert_eq!(second.status.code(), Some(1), "{second:?}");
    let error = String::from_utf8_lossy(&second.stderr);
    assert!(error.contains(&format!("{work_text}: refused: already leased by pid {owner}")) && error.contains("its owner is alive"), "{error}");
    assert_eq!(entries(&s.doctor()).len(), 1, "no second lease");

    supervisor.kill().expect("SIGKILL the supervisor");
    supervisor.wait().expect("reap");
    let child = entry["childPid"].as_u64().expect("child");
    kill(child);
    wait_until_dead(child);
    let third = s.run(&["run", "--workdir", work_text, "--", "true"]);
    assert_eq!(third.status.code(), Some(1), "{third:?}");
    assert!(String::from_utf8_lossy(&third.stderr).contains("its owner is gone: run `proclease recover` first"), "{third:?}");
    assert!(s.run(&["recover"]).status.success());
    let fourth = s.run(&["run", "--workdir", work_text, "--", "true"]);
    assert!(fourth.status.success(), "{fourth:?}");
    assert!(entries(&s.doctor()).is_empty());
}

/// A run that checks a directory while the lease claiming it is being rewritten — its owner's
/// compare-and-swap renames a new file over the claim (§3.3), as when it records its command —
/// still names that lease and its live owner: the check reads an entry caught mid-replace again
/// instead of calling it an entry that "may claim it" and asking the user to set it aside. Two
/// runs started at once on one new directory met this (one recorded its command while the other
/// looked).
#[test]
fn a_claim_rewritten_while_another_run_checks_it_still_names_its_live_owner() {
    let s = sandbox();
    let work = s.root.join("jobs/busy");
    let work_text = work.to_str().expect("utf-8");
    let mut supervisor = s.spawn(&["run", "--workdir", work_text, "--", "sleep", "60"]);
    let entry = s.wait_for_phase(&work, "running");
    let owner = entry["ownerPid"].as_u64().expect("owner pid, a number").to_string();
    let leases = s.state.join("recovery/beeper-message-like-me-directory-leases");
    let claim = std::fs::read_dir(&leases).expect("the lease collection").map(|e| e.expect("entry").path()).next().expect("one lease");
    let bytes = std::fs::read(&claim).expect("the claim");
    // The claim's bytes, renamed over it again and again (same bytes, a new file each time),
    // from outside the collection so that no temporary lands in it.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let rewriter = {
        let (stop, claim, spare) = (stop.clone(), claim.clone(), s.state.join("rewritten-claim"));
        std::thread::spawn(move || {
            let mut rewrites = 0u32;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                std::fs::write(&spare, &bytes).expect("write");
                std::fs::set_permissions(&spare, std::fs::Permissions::from_mode(0o600)).expect("chmod");
                std::fs::rename(&spare, &claim).expect("rename over the claim");
                rewrites += 1;
                std::thread::sleep(Duration::from_micros(200));
            }
            rewrites
        })
    };
    for attempt in 0..30 {
        let second = s.run(&["run", "--workdir", work_text, "--", "true"]);
        let error = String::from_utf8_lossy(&second.stderr);
        assert_eq!(second.status.code(), Some(1), "attempt {attempt}: {second:?}");
        assert!(error.contains(&format!("{work_text}: refused: already leased by pid {owner}")) && error.contains("its owner is alive"), "attempt {attempt}: {error}");
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(rewriter.join().expect("the rewriter") > 30, "the claim was rewritten throughout");
    supervisor.kill().expect("SIGKILL the supervisor");
    supervisor.wait().expect("reap");
    let child = entry["childPid"].as_u64().expect("child");
    kill(child);
    wait_until_dead(child);
    assert!(s.run(&["recover"]).status.success());
}

#[test]
fn exclusive_runs_exclude_each_other() {
    let s = sandbox();
    let first = s.root.join("jobs/a");
    let mut supervisor = s.spawn(&["run", "--exclusive", "--workdir", first.to_str().expect("utf-8"), "--", "sleep", "60"]);
    let entry = s.wait_for_phase(&first, "running");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let doc = s.doctor();
        if entries(&doc).iter().any(|e| e["kind"] == "admission" && e["phase"] == "helper-active") {
            break;
        }
        assert!(Instant::now() < deadline, "the admission never became helper-active: {doc}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let second = s.run(&["run", "--exclusive", "--workdir", s.root.join("jobs/b").to_str().expect("utf-8"), "--", "true"]);
    assert_eq!(second.status.code(), Some(3), "{second:?}");
    assert!(String::from_utf8_lossy(&second.stderr).contains("another export is active"));
    supervisor.kill().expect("SIGKILL");
    supervisor.wait().expect("reap");
    kill(entry["childPid"].as_u64().expect("child"));
}

#[test]
fn identity_reports_live_processes_and_the_status_of_dead_ones() {
    let own = Command::new(env!("CARGO_BIN_EXE_proclease")).args(["identity", "--json"]).output().expect("identity");
    let doc: serde_json::Value = serde_json::from_slice(&own.stdout).expect("json");
    assert_eq!(doc["status"], "exact-live-owner");
    let mut sleeper = Command::new("sleep").arg("30").spawn().expect("sleep");
    let out = Command::new(env!("CARGO_BIN_EXE_proclease")).args(["identity", &sleeper.id().to_string()]).output().expect("identity");
    assert!(stdout(&out).contains("owner status      exact-live-owner"), "{}", stdout(&out));
    sleeper.kill().expect("kill");
    sleeper.wait().expect("reap");
    // A gone pid is not an error: its status is the answer.
    let dead = Command::new(env!("CARGO_BIN_EXE_proclease")).args(["identity", &sleeper.id().to_string()]).output().expect("identity");
    assert_eq!(dead.status.code(), Some(0));
    assert!(stdout(&dead).ends_with("owner status      different-or-dead (no live process has this pid)\n"), "{}", stdout(&dead));
}

/// Pids of live (non-zombie) processes whose command line is exactly `argv`.
fn processes_running(argv: &[&str]) -> Vec<u64> {
    let wanted: Vec<u8> = argv.iter().flat_map(|a| a.bytes().chain(std::iter::once(0))).collect();
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u64>().ok()) else { continue };
        if std::fs::read(entry.path().join("cmdline")).ok().as_deref() != Some(&wanted[..]) {
            continue;
        }
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        if stat.rsplit_once(')').and_then(|(_, r)| r.trim_start().chars().next()) != Some('Z') {
            pids.push(pid);
        }
    }
    pids
}

/// SIGKILL the supervisor at random instants of its whole life: while its command lives (even a
/// command that was forked but not yet recorded, past its launch window), recovery removes
/// nothing; once the command is gone (and a launch window has passed), recovery leaves no lease
/// and no leased directory behind.
#[test]
fn sigkill_of_run_at_random_instants_is_recovered_exactly() {
    const TRIALS: u64 = 40;
    let s = sandbox();
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(7, |d| d.subsec_nanos() as u64) | 1;
    let mut x = seed;
    let mut saw_running = 0;
    for trial in 0..TRIALS {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let work = s.root.join(format!("jobs/t{trial}"));
        let duration = format!("{}", 4000 + trial);
        let mut supervisor = s.spawn(&["run", "--recover-after", "1s", "--workdir", work.to_str().expect("utf-8"), "--", "sleep", &duration]);
        std::thread::sleep(Duration::from_micros(x % 120_000));
        supervisor.kill().expect("SIGKILL");
        supervisor.wait().expect("reap");
        // Killed between fork and exec, the command still execs: give it the moment it needs
        // (it holds its witness meanwhile, so it is never taken for gone).
        std::thread::sleep(Duration::from_millis(100));
        let children = processes_running(&["sleep", &duration]);
        if !children.is_empty() {
            let doc = s.doctor();
            let leased = entries(&doc).iter().any(|e| e["target"] == work.to_str().expect("utf-8"));
            let recover = s.run(&["recover"]);
            assert!(recover.status.success(), "trial {trial} (seed {seed}): {recover:?}");
            if leased {
                assert!(work.is_dir(), "trial {trial} (seed {seed}): removed while its command runs");
                saw_running += 1;
            }
            for child in children {
                kill(child);
                wait_until_dead(child);
            }
        }
        let doc = s.doctor();
        if entries(&doc).iter().any(|e| e["phase"] == "launching") {
            std::thread::sleep(Duration::from_millis(1100)); // the launch window
        }
        let recover = s.run(&["recover"]);
        assert!(recover.status.success(), "trial {trial} (seed {seed}): {recover:?}");
        assert!(entries(&s.doctor()).is_empty(), "trial {trial} (seed {seed}): a lease is left: {}", s.doctor());
        if work.exists() {
            // Killed after creating the directory and before leasing it: an empty directory
            // that was never leased (and never held the command's work).
            assert_eq!(std::fs::read_dir(&work).expect("list").count(), 0, "trial {trial} (seed {seed})");
        }
    }
    assert!(saw_running > 0, "no trial killed the supervisor while its command ran (seed {seed})");
}

/// `run` never leases a directory with content, the state home, or anything through a symbolic
/// link or outside the granted roots — and a refused run creates nothing.
#[test]
fn run_refuses_what_recovery_must_never_delete() {
    let s = sandbox();
    let precious = s.root.join("keys");
    std::fs::create_dir(&precious).expect("mkdir");
    std::fs::set_permissions(&precious, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    std::fs::write(precious.join("id"), "KEY").expect("write");
    let out = s.run(&["run", "--workdir", precious.to_str().expect("utf-8"), "--", "true"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("refused: not empty"), "{out:?}");
    let out = s.run(&["run", "--stage", precious.to_str().expect("utf-8"), "--output", s.root.join("out").to_str().expect("utf-8"), "--", "false"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(std::fs::read_to_string(precious.join("id")).expect("intact"), "KEY");

    let out = s.run(&["run", "--workdir", s.state.join("recovery").to_str().expect("utf-8"), "--", "true"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("the state home"), "{out:?}");

    let outside = s.root.parent().expect("parent").join(format!("proclease-outside-{}", std::process::id()));
    let out = s.run(&["run", "--workdir", outside.join("deep").to_str().expect("utf-8"), "--", "true"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(!outside.exists(), "nothing is created outside the granted roots");

    let victim = tempfile::tempdir().expect("victim");
    std::os::unix::fs::symlink(victim.path(), s.root.join("link")).expect("symlink");
    let out = s.run(&["run", "--workdir", s.root.join("link/created").to_str().expect("utf-8"), "--", "true"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("symbolic link"), "{out:?}");
    assert_eq!(std::fs::read_dir(victim.path()).expect("list").count(), 0, "nothing created through the link");
}

/// A command that cannot start leaves no lease and no admission behind.
#[test]
fn a_command_that_cannot_start_releases_everything() {
    let s = sandbox();
    let work = s.root.join("jobs/nostart");
    let out = s.run(&["run", "--exclusive", "--workdir", work.to_str().expect("utf-8"), "--", "/nonexistent/command"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(entries(&s.doctor()).is_empty(), "{}", s.doctor());
    assert!(!work.exists(), "the directory it created is removed");
    // An empty program name is said as such (every host's words), not as `ENOENT`.
    let out = s.run(&["run", "--workdir", work.to_str().expect("utf-8"), "--", ""]);
    assert_eq!((out.status.code(), String::from_utf8_lossy(&out.stderr).as_ref()), (Some(1), "proclease: cannot start the command: its program name is empty\n"));
    assert!(!work.exists());
    let next = s.run(&["run", "--exclusive", "--workdir", work.to_str().expect("utf-8"), "--", "true"]);
    assert!(next.status.success(), "{next:?}");
}

/// A claim naming a directory outside the granted roots stops recovery with the reference's
/// general message — and proclease says which lease and why, and `doctor` shows it too.
#[test]
fn recovery_says_which_lease_stops_it_and_why() {
    use proclease::core::records::directory_lease::{DirectoryLease, Phase, Role};
    use proclease::core::records::{DirectoryIdentity, Owner};
    let s = sandbox();
    assert!(s.run(&["doctor"]).status.success(), "creates the state home");
    let identity = DirectoryIdentity { device: "1".into(), inode: "2".into(), birthtime_ns: "3".into() };
    let claim = DirectoryLease {
        id: "12345678-1234-4234-8234-123456789abc".into(),
        role: Role::RawWorking,
        path: "/etc/forged".into(),
        parent_path: "/etc".into(),
        parent_identity: identity.clone(),
        directory_identity: identity,
        output_root: None,
        owner: Owner { pid: 2_147_483_647, boot_id: "e".repeat(64), process_start_id: "f".repeat(64) },
        child_owner: None,
        phase: Phase::Settled,
        created_at_ms: 1,
        recover_after_ms: 2,
    }
    .parsed();
    let dir = s.state.join("recovery/beeper-message-like-me-directory-leases");
    std::fs::create_dir_all(&dir).expect("mkdir");
    for d in [s.state.join("recovery"), dir.clone()] {
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    }
    let file = dir.join(format!("{}.json", claim.record.id));
    std::fs::write(&file, &claim.canonical).expect("write claim");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod");

    let out = s.run(&["recover"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("Beeper Message Like Me recovery: directory lease recovery failed safely"), "{stderr}");
    assert!(stderr.contains("outside the granted workspace roots") && stderr.contains("--skip-invalid"), "{stderr}");
    assert!(stdout(&out).contains("stopped at /etc/forged: Beeper Message Like Me recovery: directory lease recovery failed safely"), "{}", stdout(&out));
    let dry = s.run(&["recover", "--dry-run"]);
    assert_eq!(dry.status.code(), Some(1), "a dry run that would stop says so in its status");
    assert!(stdout(&dry).contains("would stop at /etc/forged"), "{}", stdout(&dry));
    let doctor = s.run(&["doctor"]);
    assert!(stdout(&doctor).contains("recover would stop"), "{}", stdout(&doctor));
    assert!(Path::new("/etc").is_dir());
}
