//! A finished run keeps its results (issue #27, input 1): when the state home stops taking
//! writes while the command runs — full, or its lease collection made immutable — `run` exits 6
//! with the command that finishes the release, and no number of `recover`s removes what the
//! command produced; once the state home takes writes again, `recover` releases the lease and
//! keeps the directory (`docs/deviations.md`, "A finished run keeps its directory").
//!
//! Real filesystems: a small tmpfs as the state home (mounting needs CAP_SYS_ADMIN) and
//! `chattr +i` on an ext4 directory (needs CAP_LINUX_IMMUTABLE and a filesystem that has the
//! flag). Where either is missing the tests say so and pass, unless `PROCLEASE_REQUIRE_MOUNTS=1`
//! (set by `.ci/run`) makes that a failure.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{Sandbox, sandbox, stderr, stdout};

const COLLECTION: &str = "recovery/beeper-message-like-me-directory-leases";

/// A tmpfs of `size` mounted on `path`, unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(path: &Path, size: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(path).expect("mkdir");
        let status = Command::new("mount").args(["-t", "tmpfs", "-o", &format!("size={size},mode=700"), "tmpfs"]).arg(path).status();
        if status.is_ok_and(|s| s.success()) {
            return Some(Tmpfs(path.to_path_buf()));
        }
        assert!(std::env::var_os("PROCLEASE_REQUIRE_MOUNTS").is_none(), "cannot mount a tmpfs (needs CAP_SYS_ADMIN) and PROCLEASE_REQUIRE_MOUNTS is set");
        eprintln!("skipped: cannot mount a tmpfs here (needs CAP_SYS_ADMIN)");
        None
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Whether `chattr +i` works on a directory of the sandbox's filesystem (then undone).
fn immutable_flag_works(s: &Sandbox) -> bool {
    let probe = s.root.join("chattr-probe");
    std::fs::create_dir(&probe).expect("mkdir");
    let works = chattr("+i", &[&probe]) && chattr("-i", &[&probe]);
    let _ = std::fs::remove_dir(&probe);
    if !works {
        assert!(std::env::var_os("PROCLEASE_REQUIRE_MOUNTS").is_none(), "chattr +i does not work here and PROCLEASE_REQUIRE_MOUNTS is set");
        eprintln!("skipped: chattr +i does not work here (needs root and a filesystem with the immutable flag)");
    }
    works
}

fn chattr(flag: &str, paths: &[&Path]) -> bool {
    Command::new("chattr").arg(flag).args(paths).status().is_ok_and(|s| s.success())
}

/// A shell command that fills the filesystem of `dir` (the state home) and then exits `code`.
///
/// It first waits (up to 10 s) until the lease says `running`: the supervisor writes that phase
/// while the command already runs, and a fill that lands in the middle of that replace leaves the
/// page the old record held free once the rename is done — on a loaded machine, enough room for
/// the whole release to succeed and the test to measure nothing.
fn fill_when_running_then_exit(dir: &Path, code: i32) -> String {
    let state = dir.display();
    format!(
        "echo result > result.txt; \
         i=0; until grep -rqs '\"phase\":\"running\"' {state}/recovery || [ $i -ge 1000 ]; do sleep 0.01; i=$((i+1)); done; \
         cat /dev/zero > {state}/filler 2>/dev/null; exit {code}"
    )
}

/// Like [`fill_when_running_then_exit`], but fills at once: for a stage's run, whose lease keeps
/// its `preparing` phase while the command runs (no write races the fill), and for the kill
/// stress, whose supervisors may die before the lease says `running`.
fn fill_at_once_then_exit(dir: &Path, code: i32) -> String {
    format!("echo result > result.txt; cat /dev/zero > {}/filler 2>/dev/null; exit {code}", dir.display())
}

fn free(state: &Path) {
    std::fs::remove_file(state.join("filler")).expect("free the state home");
}

fn code(output: &Output) -> Option<i32> {
    output.status.code()
}

/// Asserts `run` told the user the results are intact and how to finish the release.
fn assert_told_how_to_finish(out: &Output, s: &Sandbox, directory: &Path) {
    assert_eq!(code(out), Some(6), "a run whose lease stays exits 6: {out:?}");
    let err = stderr(out);
    let finish = format!("proclease --state-home {} recover --keep {}", s.state.display(), directory.display());
    assert!(err.contains("intact") && err.contains(&finish), "says the results are intact and how to finish: {err}");
}

fn result_of(dir: &Path) -> Option<String> {
    std::fs::read_to_string(dir.join("result.txt")).ok()
}

fn leases_left(s: &Sandbox) -> usize {
    std::fs::read_dir(s.state.join(COLLECTION)).map_or(0, |entries| entries.count())
}

#[test]
fn a_full_state_home_never_costs_a_finished_run_its_working_directory() {
    for (status, exclusive) in [(0, false), (3, false), (0, true)] {
        let s = sandbox();
        let Some(_fs) = Tmpfs::mount(&s.state, "4m") else { return };
        let work = s.root.join("jobs/build");
        let script = fill_when_running_then_exit(&s.state, status);
        let mut args = vec!["run", "--release-retry", "300ms", "--workdir", work.to_str().unwrap()];
        if exclusive {
            args.push("--exclusive");
        }
        args.extend(["--", "sh", "-c", &script]);
        let out = s.run(&args);
        assert_told_how_to_finish(&out, &s, &work);
        assert!(stderr(&out).contains(&format!("exited {status}")), "{}", stderr(&out));
        assert_eq!(leases_left(&s), 1, "the lease could not be released");
        // While the state home is still full, recovery may fail, but never removes the results.
        for _ in 0..3 {
            let _ = s.run(&["recover"]);
            assert_eq!(result_of(&work).as_deref(), Some("result\n"), "status {status}: the results survive every recover");
        }
        free(&s.state);
        let out = s.run(&["recover"]);
        assert!(out.status.success(), "{out:?}");
        let said = stdout(&out);
        assert!(said.contains(&format!("released the lease of {} and kept the directory", work.display())), "{said}");
        assert!(said.contains(&format!("its command finished (exit {status})")), "{said}");
        assert_eq!(result_of(&work).as_deref(), Some("result\n"));
        assert_eq!(leases_left(&s), 0, "the lease is released");
        assert!(std::fs::read_dir(s.state.join(".proclease/runs")).expect("journal").next().is_none(), "the journal entry is forgotten");
        let out = s.run(&["recover"]);
        assert!(out.status.success() && stdout(&out).contains("recovered: 0"), "{out:?}");
        assert_eq!(result_of(&work).as_deref(), Some("result\n"), "and stays through later recovers");
        if exclusive {
            let again = s.root.join("jobs/next");
            let out = s.run(&["run", "--exclusive", "--workdir", again.to_str().unwrap(), "--", "true"]);
            assert!(out.status.success(), "the admission is free again: {out:?}");
        }
    }
}

#[test]
fn a_full_state_home_after_a_published_stage_keeps_the_output_and_releases_later() {
    let s = sandbox();
    let Some(_fs) = Tmpfs::mount(&s.state, "4m") else { return };
    let stage = s.root.join("exports/.stage");
    let output = s.root.join("exports/v2");
    let script = fill_at_once_then_exit(&s.state, 0);
    let out = s.run(&["run", "--release-retry", "300ms", "--stage", stage.to_str().unwrap(), "--output", output.to_str().unwrap(), "--", "sh", "-c", &script]);
    assert_told_how_to_finish(&out, &s, &output);
    assert!(stderr(&out).contains(&format!("published to {}", output.display())), "{}", stderr(&out));
    assert_eq!(result_of(&output).as_deref(), Some("result\n"));
    free(&s.state);
    let out = s.run(&["recover"]);
    assert!(out.status.success() && stdout(&out).contains("published: 1"), "{out:?}");
    assert_eq!(result_of(&output).as_deref(), Some("result\n"));
    assert_eq!(leases_left(&s), 0);
}

#[test]
fn a_failed_stage_on_a_full_state_home_is_scratch() {
    let s = sandbox();
    let Some(_fs) = Tmpfs::mount(&s.state, "4m") else { return };
    let stage = s.root.join("exports/.stage");
    let output = s.root.join("exports/v2");
    let script = fill_at_once_then_exit(&s.state, 1);
    let out = s.run(&["run", "--release-retry", "300ms", "--stage", stage.to_str().unwrap(), "--output", output.to_str().unwrap(), "--", "sh", "-c", &script]);
    assert_eq!(code(&out), Some(6), "{out:?}");
    assert!(stderr(&out).contains("is scratch"), "{}", stderr(&out));
    assert!(!stage.exists() && !output.exists(), "a failed stage is removed, never published");
    free(&s.state);
    let out = s.run(&["recover"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(leases_left(&s), 0);
}

#[test]
fn an_immutable_lease_collection_keeps_the_results_and_the_journal_tells_recovery() {
    let s = sandbox();
    if !immutable_flag_works(&s) {
        return;
    }
    let work = s.root.join("jobs/build");
    let collection = s.state.join(COLLECTION);
    let script = format!("echo result > result.txt; chattr +i {}; sleep 0.2", collection.display());
    let out = s.run(&["run", "--release-retry", "300ms", "--workdir", work.to_str().unwrap(), "--", "sh", "-c", &script]);
    assert!(chattr("-i", &[&collection]), "undo");
    assert_told_how_to_finish(&out, &s, &work);
    assert!(stderr(&out).contains("recorded that the command finished"), "{}", stderr(&out));
    let out = s.run(&["recover", "--dry-run"]);
    assert!(stdout(&out).contains(&format!("would release the lease of {} and keep the directory", work.display())), "{out:?}");
    let entry = &s.doctor()["entries"][0];
    assert_eq!(entry["target"], work.to_str().unwrap(), "doctor lists the lease: {entry}");
    // A journal that is there but cannot be trusted (mode 0755) proves nothing either way:
    // recovery keeps the lease and the results, and says why, rather than take the run for a
    // crashed start and remove its directory.
    let runs = s.state.join(".proclease/runs");
    let chmod = |mode: u32| std::fs::set_permissions(&runs, std::os::unix::fs::PermissionsExt::from_mode(mode)).expect("chmod");
    chmod(0o755);
    let out = s.run(&["recover"]);
    chmod(0o700);
    assert!(stdout(&out).contains("but its run journal cannot be read"), "{out:?}");
    assert!(stderr(&out).contains(".proclease/runs: check: must be a directory owned by you with mode 0700 (chmod 700 it)"), "{out:?}");
    assert_eq!(result_of(&work).as_deref(), Some("result\n"), "the results stay");
    assert_eq!(leases_left(&s), 1, "and so does the lease");
    let out = s.run(&["recover"]);
    assert!(out.status.success() && stdout(&out).contains("released, directory kept: 1"), "{out:?}");
    assert_eq!(result_of(&work).as_deref(), Some("result\n"));
    assert_eq!(leases_left(&s), 0);
}

/// `run` in `jobs/build` of a command that writes its result and then makes the lease
/// collection, its run journal entry and `also` immutable (`chattr +i`), so that the state home
/// takes no write at all when the run ends; every flag is undone before this returns. The run's
/// output and its directory.
fn run_with_an_immutable_state_home(s: &Sandbox, also: &[&Path]) -> (Output, PathBuf) {
    let work = s.root.join("jobs/build");
    let collection = s.state.join(COLLECTION);
    let runs = s.state.join(".proclease/runs");
    let extra: Vec<String> = also.iter().map(|p| p.display().to_string()).collect();
    let script = format!("echo result > result.txt; chattr +i {} {}/*.run {}; sleep 0.2", collection.display(), runs.display(), extra.join(" "));
    let out = s.run(&["run", "--release-retry", "300ms", "--workdir", work.to_str().unwrap(), "--", "sh", "-c", &script]);
    let journal: Vec<PathBuf> = std::fs::read_dir(&runs).expect("journal").map(|e| e.expect("entry").path()).collect();
    let undone = chattr("-i", &[&collection]) && journal.iter().all(|j| chattr("-i", &[j])) && also.iter().all(|p| chattr("-i", &[p]));
    assert!(undone, "undo");
    (out, work)
}

#[test]
fn when_not_even_the_journal_takes_a_write_a_marker_beside_the_directory_keeps_it() {
    // Issue #40 case 5: a state home that takes no write at all (here `chattr +i` on the
    // collection and the journal; a kernel-forced read-only filesystem alike). The finish is
    // marked beside the working directory, in the workspace, and a plain (cron) `recover`
    // keeps the results.
    let s = sandbox();
    if !immutable_flag_works(&s) {
        return;
    }
    let (out, work) = run_with_an_immutable_state_home(&s, &[]);
    assert_told_how_to_finish(&out, &s, &work);
    let marker = std::fs::read_dir(s.root.join("jobs"))
        .expect("jobs")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with(".proclease-finished-")));
    let marker = marker.expect("a marker beside the directory");
    assert!(stderr(&out).contains(&format!("the finish is marked by {} beside it: `proclease recover` keeps the directory too", marker.display())), "{}", stderr(&out));
    let out = s.run(&["recover", "--dry-run"]);
    assert!(stdout(&out).contains(&format!("would release the lease of {} and keep the directory", work.display())), "{out:?}");
    let out = s.run(&["recover"]);
    assert!(out.status.success() && stdout(&out).contains("released, directory kept: 1"), "{out:?}");
    assert_eq!(result_of(&work).as_deref(), Some("result\n"));
    assert_eq!(leases_left(&s), 0);
    assert!(!marker.exists(), "the marker goes with the lease");
}

#[test]
fn when_neither_the_journal_nor_the_workspace_takes_a_write_recover_keep_finishes_the_release() {
    let s = sandbox();
    if !immutable_flag_works(&s) {
        return;
    }
    let (out, work) = run_with_an_immutable_state_home(&s, &[&s.root.join("jobs")]);
    assert_told_how_to_finish(&out, &s, &work);
    assert!(stderr(&out).contains("would remove the directory: use --keep"), "{}", stderr(&out));
    // The documented limit: nothing on disk says the run finished, so a plain recover would
    // treat it as a crashed run (the reference's rule) — the printed command keeps it.
    let out = s.run(&["recover", "--dry-run"]);
    assert!(stdout(&out).contains(&format!("would remove {}", work.display())), "{out:?}");
    let out = s.run(&["recover", "--keep", work.to_str().unwrap()]);
    assert!(out.status.success() && stdout(&out).contains("kept as asked"), "{out:?}");
    assert_eq!(result_of(&work).as_deref(), Some("result\n"));
    assert_eq!(leases_left(&s), 0);
}

/// "A filesystem remounted read-only while the command runs" cannot happen to a running run:
/// it holds files of the state home open for writing (its journal entry until its end is
/// recorded, and its witness), and the kernel refuses to make a filesystem with a file open for
/// writing read-only (`mount point is busy`). The operator's remount fails, the run releases its lease
/// and exits 0 with its results, and the same remount succeeds once the run is over.
#[test]
fn a_read_only_remount_of_the_state_home_is_refused_while_a_run_holds_it() {
    let s = sandbox();
    let Some(_fs) = Tmpfs::mount(&s.state, "4m") else { return };
    let work = s.root.join("jobs/build");
    let gate = s.root.join("gate");
    let script = format!("echo result > result.txt; while [ ! -e {} ]; do sleep 0.05; done", gate.display());
    let child = s.spawn(&["run", "--workdir", work.to_str().unwrap(), "--", "sh", "-c", &script]);
    s.wait_for_phase(&work, "running");
    let remount = |mode: &str| Command::new("mount").args(["-o", &format!("remount,{mode}")]).arg(&s.state).output().expect("mount runs");
    let refused = remount("ro");
    std::fs::write(&gate, "").expect("open the gate");
    let out = child.wait_with_output().expect("the run ends");
    assert!(!refused.status.success(), "the kernel refused the read-only remount while the run held the state home: {refused:?}");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("busy"), "{refused:?}");
    assert!(out.status.success(), "the run released its lease and exited with its command's 0: {out:?}");
    assert_eq!(result_of(&work).as_deref(), Some("result\n"));
    assert_eq!(leases_left(&s), 0);
    // Nothing holds the state home now: the same remount goes through (and is undone).
    assert!(remount("ro").status.success(), "the refusal was the run's");
    assert!(remount("rw").status.success());
}

#[test]
fn a_crashed_run_is_still_scratch() {
    // The journal changes nothing for a run that did not finish: kill -9 the supervisor and
    // its command, and recovery removes the directory as the reference does.
    let s = sandbox();
    let work = s.root.join("jobs/build");
    let mut child = s.spawn(&["run", "--containment", "none", "--workdir", work.to_str().unwrap(), "--", "sh", "-c", "echo partial > result.txt; exec sleep 600"]);
    let entry = s.wait_for_phase(&work, "running");
    let command = entry["childPid"].as_u64().expect("the child's pid");
    common::kill(u64::from(child.id()));
    let _ = child.wait();
    common::kill(command);
    common::wait_until_dead(command);
    let out = s.run(&["recover"]);
    assert!(out.status.success() && stdout(&out).contains("recovered: 1"), "{out:?}");
    assert!(!work.exists(), "a crashed run's directory is scratch");
}

/// The kill stress with "state home full at release" among its faults: runs whose command fills
/// the state home, half of their supervisors SIGKILLed at a random instant. Every run that
/// finished — `run` exited 0 or 6, or it was killed after the journal recorded the end — keeps
/// its results through recovery; only a run killed before its command finished may be scratch.
/// `PROCLEASE_FULL_STRESS_TRIALS` sets the number of trials (default 16).
#[test]
fn full_state_homes_and_kills_at_the_end_of_runs_never_cost_a_finished_run_its_results() {
    let trials: u64 = std::env::var("PROCLEASE_FULL_STRESS_TRIALS").ok().and_then(|n| n.parse().ok()).unwrap_or(16);
    let s = sandbox();
    let Some(_fs) = Tmpfs::mount(&s.state, "4m") else { return };
    let (mut finished, mut killed) = (0, 0);
    for trial in 0..trials {
        let work = s.root.join(format!("jobs/{trial}"));
        let script = fill_at_once_then_exit(&s.state, (trial % 3) as i32);
        let mut child = s
            .command(&["run", "--release-retry", "200ms", "--workdir", work.to_str().unwrap(), "--", "sh", "-c", &script])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("run");
        let kill = trial % 2 == 1;
        if kill {
            // Somewhere from before the command starts to after its lease could not be released.
            let pause = (trial * 7919) % 400;
            std::thread::sleep(std::time::Duration::from_millis(pause));
            common::kill(u64::from(child.id()));
        }
        let status = child.wait().expect("wait");
        // A killed supervisor's box lives on until its command ends (file mode): wait for it.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !common::processes_running(&["sh", "-c", &script]).is_empty() {
            assert!(std::time::Instant::now() < deadline, "the command of trial {trial} never ended");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        // Each trial's recovery forgets the journal: an entry that says finished is this trial's.
        let journalled = std::fs::read_dir(s.state.join(".proclease/runs"))
            .expect("journal")
            .filter_map(Result::ok)
            .any(|e| std::fs::read_to_string(e.path()).is_ok_and(|t| t.contains("\"state\":\"finished\"")));
        let completed = matches!(status.code(), Some(0 | 6)) || (kill && journalled);
        let _ = std::fs::remove_file(s.state.join("filler"));
        // The box's init outlives its command by an instant: recover until it is gone too.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let out = loop {
            let out = s.run(&["recover"]);
            assert!(out.status.success(), "trial {trial}: {out:?}");
            if leases_left(&s) == 0 || std::time::Instant::now() > deadline {
                break out;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        if completed {
            finished += 1;
            assert_eq!(result_of(&work).as_deref(), Some("result\n"), "trial {trial} finished ({status:?}) and lost its results: {}", stdout(&out));
        } else {
            killed += 1;
        }
        assert_eq!(leases_left(&s), 0, "trial {trial}: every lease is released or recovered");
    }
    println!("{trials} trials: {finished} finished runs kept their results, {killed} killed before their command finished");
    assert!(finished >= trials / 2, "most runs finish: {finished} of {trials}");
}
