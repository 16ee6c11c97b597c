//! Nobody waits in silence (issue #27, input 3): a process that holds a kernel lock of the state
//! home and is stopped (Ctrl-Z, SIGSTOP) makes `run` and `recover` say after a second whom they
//! wait for, and fail at `--lock-timeout` with exit status 5 and the holder's pid — instead of
//! waiting in the kernel for ever.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{sandbox, stderr, stdout};

/// `flock -o LOCK sleep 600` (flock holds the lock itself) in a process group of its own, once
/// `/proc/locks` shows it held.
fn hold(lock: &Path) -> std::process::Child {
    use std::os::unix::process::CommandExt as _;
    std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(lock).expect("lock file");
    let child = Command::new("flock").arg("-o").arg(lock).args(["sleep", "600"]).process_group(0).spawn().expect("flock(1)");
    let file = std::fs::File::open(lock).expect("open");
    let deadline = Instant::now() + Duration::from_secs(10);
    while proclease::lock_wait::holder(&file).is_none() {
        assert!(Instant::now() < deadline, "flock never took {}", lock.display());
        std::thread::sleep(Duration::from_millis(10));
    }
    child
}

#[test]
fn a_stopped_lock_holder_is_named_and_the_wait_ends_at_its_bound() {
    let s = sandbox();
    assert!(s.run(&["doctor"]).status.success(), "creates the state home");
    let locks = s.state.join(".proclease/locks");
    // The directory-lease collection's writer lock (state_store/lock.rs): the component only
    // sees `contended`; the operation's error names the holder all the same.
    let collection = format!("{}.lock", proclease::core::digest::identity_digest("proclease-collection-lock", "recovery/beeper-message-like-me-directory-leases"));
    let admissions = format!("{}.lock", proclease::core::digest::identity_digest("proclease-collection-lock", "recovery/beeper-message-like-me-export-admission"));
    for (lock, args) in [
        ("directory-lease-creation.lock", vec!["run", "--workdir", "WORK", "--", "true"]),
        ("directory-lease-recovery.lock", vec!["recover"]),
        (collection.as_str(), vec!["run", "--workdir", "WORK", "--", "true"]),
        (collection.as_str(), vec!["doctor"]),
        (collection.as_str(), vec!["recover"]),
        (admissions.as_str(), vec!["run", "--exclusive", "--workdir", "WORK", "--", "true"]),
    ] {
        let mut holder = hold(&locks.join(lock));
        let pid = holder.id();
        common::stop(u64::from(pid));
        let work = s.root.join("jobs").join(format!("{lock}-{}", args.len()));
        let args: Vec<&str> = args.iter().map(|a| if *a == "WORK" { work.to_str().unwrap() } else { a }).collect();
        let out = s.run(&[&["--lock-timeout", "2s"], args.as_slice()].concat());
        assert_eq!(out.status.code(), Some(5), "{lock}: {out:?}");
        let err = stderr(&out);
        assert!(err.contains(&format!("waiting for pid {pid} (flock, stopped) holding")), "says whom it waits for: {err}");
        assert!(err.contains(&format!("held by pid {pid} (flock, stopped)")) && err.contains(lock), "names the holder at the bound: {err}");
        // Once as it happens and once in the error, not again at each attempt that follows
        // with the bound spent (the admission's acquire makes eight).
        let said = err.lines().filter(|line| line.contains("waited ")).count();
        assert!(said <= 2, "{lock}: the timeout is said {said} times: {err}");
        assert!(!work.exists(), "nothing was created");
        // The holder and its `sleep`.
        let _ = rustix::process::kill_process_group(rustix::process::Pid::from_raw(pid as i32).expect("pid"), rustix::process::Signal::KILL);
        let _ = holder.wait();
        let out = s.run(&args);
        assert!(out.status.success(), "{lock}: the holder is gone: {out:?}");
    }
    // No bound at all (`--lock-timeout 0`): every attempt tries once and says `waited 0 ms`;
    // said once all the same, and once in the error.
    let mut holder = hold(&locks.join(&admissions));
    let pid = holder.id();
    let work = s.root.join("jobs/unbounded");
    let out = s.run(&["--lock-timeout", "0", "run", "--exclusive", "--workdir", work.to_str().unwrap(), "--", "true"]);
    let _ = rustix::process::kill_process_group(rustix::process::Pid::from_raw(pid as i32).expect("pid"), rustix::process::Signal::KILL);
    let _ = holder.wait();
    assert_eq!(out.status.code(), Some(5), "{out:?}");
    let err = stderr(&out);
    assert_eq!(err.lines().filter(|line| line.contains(&format!("waited 0 ms for .proclease/locks/{admissions}, held by pid {pid} (flock, "))).count(), 2, "{err}");
    assert!(!work.exists(), "nothing was created");
}

/// A lock whose taker exited is held by whoever keeps its open file: `/proc/locks` names the
/// `flock(1)` that took it (as a Node host takes every lock), `/proc/<pid>/fdinfo` the process
/// that holds it. The wait names that process, not the exited taker as `?, state unknown`.
#[test]
fn a_lock_taken_by_a_child_that_exited_names_the_process_keeping_its_descriptor() {
    use std::io::BufRead as _;
    let s = sandbox();
    assert!(s.run(&["doctor"]).status.success(), "creates the state home");
    let lock = s.state.join(".proclease/locks/directory-lease-recovery.lock");
    std::fs::write(&lock, b"").expect("lock file");
    let script = format!("exec 9>'{}'; flock 9; echo held; exec sleep 60", lock.display());
    let mut holder = Command::new("sh").args(["-c", &script]).stdout(std::process::Stdio::piped()).spawn().expect("sh");
    let mut line = String::new();
    std::io::BufReader::new(holder.stdout.take().expect("stdout")).read_line(&mut line).expect("read");
    assert_eq!(line, "held\n");
    let out = s.run(&["--lock-timeout", "300ms", "recover"]);
    let _ = holder.kill();
    let _ = holder.wait();
    assert_eq!(out.status.code(), Some(5), "{out:?}");
    let err = stderr(&out);
    assert!(err.contains(&format!("directory-lease-recovery.lock, held by pid {} (sleep, sleeping)", holder.id())), "{err}");
}

/// Issue #28, input 7: `run --exclusive --wait D` waits for its turn while another export holds
/// the admission, saying once that it waits and for whom, and starts only after the other ended;
/// at its bound it is refused as without `--wait` (exit 3).
#[test]
fn an_exclusive_run_waits_for_its_turn_within_its_bound() {
    use std::io::{BufRead as _, BufReader};
    let s = sandbox();
    let (marks, gate) = (s.root.join("marks"), s.root.join("gate"));
    std::fs::write(&gate, "").expect("gate");
    let script = format!("echo start-1 >> {m}; while [ -e {g} ]; do sleep 0.05; done; echo end-1 >> {m}", m = marks.display(), g = gate.display());
    let w1 = s.root.join("jobs/one");
    let mut first = s.spawn(&["run", "--exclusive", "--workdir", w1.to_str().unwrap(), "--", "sh", "-c", &script]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(&marks).unwrap_or_default().contains("start-1") {
        assert!(Instant::now() < deadline, "the first export never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    // A short wait ends refused, having said what it waited for.
    let w2 = s.root.join("jobs/two");
    let out = s.run(&["run", "--exclusive", "--wait", "1s", "--workdir", w2.to_str().unwrap(), "--", "true"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let err = stderr(&out);
    assert!(err.contains("waiting for its turn") && err.contains(&format!("pid {} holds it", first.id())), "{err}");
    assert!(err.contains("another export is active") && !w2.exists(), "{err}");
    // A long wait starts once the first is done, and not before.
    let w3 = s.root.join("jobs/three");
    let mark3 = format!("echo start-3 >> {}", marks.display());
    let mut third = s
        .command(&["run", "--exclusive", "--wait", "60s", "--workdir", w3.to_str().unwrap(), "--", "sh", "-c", &mark3])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut lines = BufReader::new(third.stderr.take().expect("stderr")).lines();
    let waiting = lines.by_ref().map_while(Result::ok).find(|line| line.contains("waiting for its turn"));
    assert!(waiting.is_some(), "the third run never said it waits");
    std::fs::remove_file(&gate).expect("open the gate");
    assert!(first.wait().expect("first").success());
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(third.wait().expect("third").success(), "{rest:?}");
    assert_eq!(std::fs::read_to_string(&marks).expect("marks"), "start-1\nend-1\nstart-3\n", "the runs overlapped");
}

/// An exclusive run in `jobs/NAME` that appends NAME to `<root>/marks` and holds the admission
/// until `<root>/gate` is removed; returned once its command started, with the marks file.
fn gated_holder(s: &common::Sandbox, name: &str) -> (std::process::Child, std::path::PathBuf) {
    let (marks, gate) = (s.root.join("marks"), s.root.join("gate"));
    std::fs::write(&gate, "").expect("gate");
    let script = format!("echo {name} >> {m}; while [ -e {g} ]; do sleep 0.05; done", m = marks.display(), g = gate.display());
    let work = s.root.join("jobs").join(name);
    let holder = s.spawn(&["run", "--exclusive", "--workdir", work.to_str().unwrap(), "--", "sh", "-c", &script]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(&marks).unwrap_or_default().contains(name) {
        assert!(Instant::now() < deadline, "the holder never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    (holder, marks)
}

/// Lets [`gated_holder`]'s holder end.
fn open_gate(s: &common::Sandbox) {
    std::fs::remove_file(s.root.join("gate")).expect("open the gate");
}

/// The pids of the queue's waiters `doctor --json` shows with `disposition`, in order.
fn waiters_shown(s: &common::Sandbox, disposition: &str) -> Vec<u64> {
    let doc = s.doctor();
    let rows = doc["entries"].as_array().expect("entries").iter().filter(|e| e["kind"] == "waiter" && e["disposition"] == disposition);
    rows.map(|e| e["ownerPid"].as_u64().expect("pid")).collect()
}

/// Starts `count` waiters (`run --exclusive --wait 120s` in `jobs/wI`, appending `wI` to
/// `marks`), each once the one before is in line, so that their arrival order is known whatever
/// the machine's load.
fn queued_waiters(s: &common::Sandbox, marks: &Path, count: usize) -> Vec<std::process::Child> {
    let mut waiters = Vec::new();
    for i in 0..count {
        let work = s.root.join(format!("jobs/w{i}"));
        let mark = format!("echo w{i} >> {}", marks.display());
        waiters.push(s.spawn(&["run", "--exclusive", "--wait", "120s", "--workdir", work.to_str().unwrap(), "--", "sh", "-c", &mark]));
        let deadline = Instant::now() + Duration::from_secs(30);
        while waiters_shown(s, "waiting").len() < i + 1 {
            assert!(Instant::now() < deadline, "waiter {i} never joined the queue");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    waiters
}

/// Issue #44, "a fair wait that wakes on death": `run --exclusive --wait` waiters take the
/// admission in the order they arrived, `doctor` shows them in that order, and a waiter killed
/// in the queue loses its place without holding up those behind it.
#[test]
fn exclusive_waiters_take_their_turn_in_arrival_order_and_a_killed_waiter_is_skipped() {
    let s = sandbox();
    let (mut holder, marks) = gated_holder(&s, "holder");
    let mut waiters = queued_waiters(&s, &marks, 8);
    let pids: Vec<u64> = waiters.iter().map(|w| u64::from(w.id())).collect();
    assert_eq!(waiters_shown(&s, "waiting"), pids, "doctor lists the waiters in the order they arrived");
    let text = stdout(&s.run(&["doctor"]));
    assert!(text.contains("export admission, #1 in line") && text.contains("export admission, #8 in line"), "{text}");
    // The fourth is killed where it waits: the others keep their order, and it is no longer in line.
    common::kill(pids[3]);
    assert!(!waiters[3].wait().expect("w3").success());
    let deadline = Instant::now() + Duration::from_secs(30);
    while waiters_shown(&s, "waiting").contains(&pids[3]) {
        assert!(Instant::now() < deadline, "a killed waiter stayed in line");
        std::thread::sleep(Duration::from_millis(20));
    }
    open_gate(&s);
    assert!(holder.wait().expect("holder").success());
    for (i, waiter) in waiters.iter_mut().enumerate().filter(|(i, _)| *i != 3) {
        assert!(waiter.wait().expect("waiter").success(), "waiter {i} failed");
    }
    assert_eq!(std::fs::read_to_string(&marks).expect("marks"), "holder\nw0\nw1\nw2\nw4\nw5\nw6\nw7\n", "the waiters ran out of order");
    // Everyone left the queue.
    assert!(waiters_shown(&s, "waiting").is_empty());
    let tickets = std::fs::read_dir(s.state.join(".proclease/queues/export-admission")).expect("queue").count();
    assert_eq!(tickets, 0, "tickets left behind");
}

/// A waiter stopped where it waits (Ctrl-Z) does not hold up the queue: the waiter behind it
/// takes the admission when the holder is done, `doctor` says the stopped one is passed over,
/// and, continued, the stopped one runs next.
#[test]
fn a_stopped_waiter_is_passed_over_until_it_is_continued() {
    let s = sandbox();
    let (mut holder, marks) = gated_holder(&s, "holder");
    let mut waiters = queued_waiters(&s, &marks, 2);
    let first = u64::from(waiters[0].id());
    common::stop(first);
    let deadline = Instant::now() + Duration::from_secs(30);
    while waiters_shown(&s, "stopped") != [first] {
        assert!(Instant::now() < deadline, "doctor never showed the stopped waiter");
        std::thread::sleep(Duration::from_millis(20));
    }
    open_gate(&s);
    assert!(holder.wait().expect("holder").success());
    // Long before its bound (120 s), where its last attempt would take the admission anyway.
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = waiters[1].try_wait().expect("w1") {
            break status;
        }
        assert!(Instant::now() < deadline, "the waiter behind the stopped one is held up by it");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "the waiter behind the stopped one did not run");
    assert_eq!(std::fs::read_to_string(&marks).expect("marks"), "holder\nw1\n");
    common::resume(first);
    assert!(waiters[0].wait().expect("w0").success(), "the continued waiter did not run");
    assert_eq!(std::fs::read_to_string(&marks).expect("marks"), "holder\nw1\nw0\n");
}

/// The next run of the same job: a waiter for the directory the holder works in runs once the
/// holder is done (the holder releases its directory before the admission).
#[test]
fn a_waiter_for_the_holders_own_directory_runs_after_it() {
    let s = sandbox();
    let (mut first, marks) = gated_holder(&s, "same");
    let (work, mark) = (s.root.join("jobs/same"), format!("echo second >> {}", marks.display()));
    let second = s
        .command(&["run", "--exclusive", "--wait", "60s", "--workdir", work.to_str().unwrap(), "--", "sh", "-c", &mark])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let deadline = Instant::now() + Duration::from_secs(30);
    while waiters_shown(&s, "waiting").is_empty() {
        assert!(Instant::now() < deadline, "the second run never joined the queue");
        std::thread::sleep(Duration::from_millis(20));
    }
    open_gate(&s);
    assert!(first.wait().expect("first").success());
    let out = second.wait_with_output().expect("second");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(&marks).expect("marks"), "same\nsecond\n");
}
