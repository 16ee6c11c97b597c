//! No overlap, proven (issue #28): a history checker over exclusive runs on three simulated
//! machines against a real three-member etcd, under each fault in turn.
//!
//! Each machine (`common/machines.rs`: its own PID and mount namespaces and boot id) runs
//! `proclease run --exclusive -- sh work.sh …` in a loop. The command's first act is a
//! non-blocking `flock` on one lock file all machines share (one kernel, one file): it holds
//! the lock until its last process dies, however it dies, because the kernel releases a
//! `flock` only when the last descriptor of it closes. So two runs overlap — two commands of
//! the admission alive at once — exactly when a command finds the lock taken; it then writes
//! `overlap` to the shared log and exits 99. Otherwise it writes `start`, pauses, writes `end`.
//! One run in three pauses 2.5 s, longer than the TTL (2 s): a stale owner's command still runs
//! when another machine could take over, so a takeover that came too early would show. A
//! machine's PID 1 outlives a supervisor killed by a signal by 3 s (`Machine::linger`), so that
//! what stops the command is proclease's own containment, not the machine's PID namespace
//! ending.
//!
//! While the machines run, a fault is injected again and again: `kill -9` of a supervisor,
//! `SIGSTOP` of a supervisor (its dead-man timer must kill it before its presence can expire),
//! `SIGSTOP` of an etcd member and of the leader, `kill -9` and restart of a member and of the
//! leader, the whole cluster wiped (every member started again on empty data), and the whole
//! cluster restored from a backup taken moments before (`etcdctl snapshot save`, then
//! `snapshot restore` into a cluster of the same id, the runbook's way). Checked per
//! phase: no `overlap`; fencing tokens that grow with every holder, across wipes and restores;
//! every attempt that exited 0 ran its command to its end; no refused
//! attempt ran anything; every attempt that did not run has a reason — a message the checker
//! knows (each counted), or the fault that killed its supervisor; a refusal for a holder's
//! presence that could not be read only where etcd members were faulted; and work went on (the
//! phase reaches its runs and faults before its deadline).
//!
//! A control phase first runs the same commands *without* `--exclusive` and requires the
//! checker to find overlaps there, so that a checker that cannot fail would fail.
//!
//! Short form in `cargo test` (`PROCLEASE_HISTORY_RUNS` runs and `…_FAULTS_PER_PHASE` faults
//! per phase, default 12 and 3); long form `bench/cluster-history.sh [RUNS]`, whose figures are
//! in `docs/reliability.md`. Needs etcd and root for the namespaces, as `cluster_cli.rs`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

mod common;
#[path = "../../tests/src/etcd_server.rs"]
#[allow(dead_code)] // the harness is shared with proclease-tests, which uses all of it
mod etcd_server;
#[path = "common/machines.rs"]
mod machines;

use common::namespaces_available;
use etcd_server::EtcdCluster;
use machines::{Machine, machine};

const PREFIX: &str = "history";
/// The presences' TTL: short, so that a takeover after a fault comes soon.
const TTL: &str = "2s";
const TTL_MS: u64 = 2_000;

/// What the command does: the overlap detector around a pause. Arguments: lock file, log,
/// machine, run number, pause in seconds.
const WORK: &str = r#"exec 9>>"$1"
if ! flock -n 9; then echo "overlap $3 $4" >> "$2"; exit 99; fi
date +%s%N > "$2.started-$4"
echo "start $3 $4 ${PROCLEASE_FENCING_TOKEN:-}" >> "$2"
sleep "$5"
echo "end $3 $4" >> "$2"
"#;

/// The faults, injected one kind per phase.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Fault {
    None,
    KillSupervisor,
    StopSupervisor,
    StopMember,
    KillMember,
    WipeCluster,
    RestoreCluster,
}

impl Fault {
    const ALL: [Fault; 7] = [Fault::None, Fault::KillSupervisor, Fault::StopSupervisor, Fault::StopMember, Fault::KillMember, Fault::WipeCluster, Fault::RestoreCluster];

    /// Its short name, for `PROCLEASE_HISTORY_FAULTS`.
    fn key(self) -> &'static str {
        match self {
            Fault::None => "none",
            Fault::KillSupervisor => "kill-supervisor",
            Fault::StopSupervisor => "stop-supervisor",
            Fault::StopMember => "stop-member",
            Fault::KillMember => "kill-member",
            Fault::WipeCluster => "wipe",
            Fault::RestoreCluster => "restore",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Fault::None => "none",
            Fault::KillSupervisor => "kill -9 of a supervisor",
            Fault::StopSupervisor => "SIGSTOP of a supervisor",
            Fault::StopMember => "SIGSTOP of an etcd member (the leader every other time)",
            Fault::KillMember => "kill -9 and restart of an etcd member (the leader every other time)",
            Fault::WipeCluster => "etcd wiped (every member restarted on empty data)",
            Fault::RestoreCluster => "etcd restored from a backup taken moments before (etcdctl snapshot save / restore, the same cluster id)",
        }
    }
}

/// One `proclease run` of one machine.
#[derive(Debug)]
struct Attempt {
    machine: usize,
    run: u64,
    code: Option<i32>,
    stderr: String,
    /// The fault injector killed or stopped this attempt's supervisor.
    faulted: bool,
    /// How long after `proclease` was started its command started, if it did.
    to_start: Option<Duration>,
}

/// What the machines' loops and the injector share during a phase.
struct Shared {
    stop: AtomicBool,
    /// Each machine's `unshare` process and run number while an attempt runs.
    running: Vec<Mutex<Option<(u32, u64)>>>,
    faulted: Vec<AtomicBool>,
}

/// Three machines and what their commands share: the lock, the log, the script, and the run
/// numbers (unique over the whole history).
struct Bench {
    machines: Vec<Machine>,
    _dir: tempfile::TempDir,
    lock: PathBuf,
    log: PathBuf,
    work: PathBuf,
    next_run: AtomicU64,
}

/// A three-member cluster whose prefix's epoch is settled, and the bench; `None` (after saying
/// why) when the test must skip.
fn world() -> Option<(EtcdCluster, Bench)> {
    if !namespaces_available(&["--pid", "--mount", "--fork", "--mount-proc"]) {
        return None;
    }
    let cluster = EtcdCluster::start(3)?;
    proclease::cluster::presence::await_epoch(&cluster.store(PREFIX), Duration::from_secs(2)).expect("the prefix's epoch");
    let dir = tempfile::tempdir().expect("shared dir");
    let (lock, log, work) = (dir.path().join("lock"), dir.path().join("log"), dir.path().join("work.sh"));
    std::fs::write(&work, WORK).expect("work.sh");
    let machines = (0..3)
        .map(|_| {
            let mut machine = machine(&cluster.url(PREFIX), TTL);
            machine.linger = true;
            machine
        })
        .collect();
    Some((cluster, Bench { machines, _dir: dir, lock, log, work, next_run: AtomicU64::new(0) }))
}

/// `variable` as a number, or `default`.
fn setting(variable: &str, default: usize) -> usize {
    std::env::var(variable).ok().and_then(|n| n.parse().ok()).unwrap_or(default)
}

/// The log's lines of runs numbered from `first` on, as (word, machine, run).
fn log_lines(log: &Path, first: u64) -> Vec<(String, usize, u64)> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let mut words = line.split(' ');
            let (word, machine, run) = (words.next()?, words.next()?.parse().ok()?, words.next()?.parse().ok()?);
            (run >= first).then(|| (word.to_owned(), machine, run))
        })
        .collect()
}

/// The fencing tokens the commands of runs numbered from `first` on started with, in the log's
/// order: (run, token); runs without one (not `--exclusive`) are left out.
fn fencing_tokens(log: &Path, first: u64) -> Vec<(u64, i64)> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let mut words = line.split(' ');
            let (word, _machine, run) = (words.next()?, words.next()?, words.next()?.parse::<u64>().ok()?);
            let token = words.next()?.parse().ok()?;
            (word == "start" && run >= first).then_some((run, token))
        })
        .collect()
}

/// The children of process `pid` (its threads' children).
fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    tasks
        .flatten()
        .flat_map(|task| std::fs::read_to_string(task.path().join("children")).unwrap_or_default().split_whitespace().filter_map(|p| p.parse().ok()).collect::<Vec<u32>>())
        .collect()
}

/// The `proclease` supervisor of a machine's attempt: `unshare` → the machine's `sh` (its PID
/// 1) → `proclease`.
fn supervisor(unshare: u32) -> Option<u32> {
    children(unshare).into_iter().flat_map(children).find(|pid| std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|comm| comm.trim() == "proclease"))
}

fn signal(pid: u32, signal: rustix::process::Signal) {
    if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process(pid, signal);
    }
}

/// One machine's loop: attempts back to back (a short pause between, different per machine)
/// until told to stop.
fn machine_loop(bench: &Bench, shared: &Shared, index: usize, exclusive: bool, pause: Pause) -> Vec<Attempt> {
    let machine = &bench.machines[index];
    let mut attempts = Vec::new();
    while !shared.stop.load(Ordering::SeqCst) {
        let run = bench.next_run.fetch_add(1, Ordering::SeqCst);
        let workdir = machine.root.join(format!("job{run}"));
        let mut args = vec!["run"];
        if exclusive {
            args.push("--exclusive");
        }
        // A mutation for checking the checker: `--containment none` leaves the command's
        // children to outlive a killed supervisor, which the history must then show.
        let containment = std::env::var("PROCLEASE_HISTORY_CONTAINMENT").ok();
        if let Some(containment) = containment.as_deref() {
            args.extend(["--containment", containment]);
        }
        let (run_text, index_text) = (run.to_string(), index.to_string());
        let pause = match pause {
            Pause::Fixed(seconds) => seconds,
            // One run in three outlives the TTL: a stale owner's command still runs when
            // another machine could take over, so a takeover too early would show.
            Pause::Mixed if run.is_multiple_of(3) => "2.5",
            Pause::Mixed => "0.05",
        };
        let files = [&bench.work, &bench.lock, &bench.log].map(|p| p.to_str().expect("utf-8"));
        args.extend(["--workdir", workdir.to_str().expect("utf-8"), "--", "sh", files[0], files[1], files[2], &index_text, &run_text, pause]);
        let launched = std::time::SystemTime::now();
        let child = machine.command(&args).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("spawn proclease");
        *shared.running[index].lock().expect("lock") = Some((child.id(), run));
        let out = child.wait_with_output().expect("the attempt ends");
        *shared.running[index].lock().expect("lock") = None;
        let faulted = shared.faulted[index].swap(false, Ordering::SeqCst);
        let started = bench.log.with_file_name(format!("log.started-{run}"));
        let to_start = std::fs::read_to_string(&started).ok().and_then(|nanos| nanos.trim().parse::<u64>().ok()).and_then(|nanos| {
            let at = std::time::UNIX_EPOCH + Duration::from_nanos(nanos);
            at.duration_since(launched).ok()
        });
        let _ = std::fs::remove_file(&started);
        attempts.push(Attempt { machine: index, run, code: out.status.code(), stderr: String::from_utf8_lossy(&out.stderr).into_owned(), faulted, to_start });
        std::thread::sleep(Duration::from_millis(10 + 17 * index as u64));
    }
    attempts
}

/// How long each command pauses between `start` and `end`.
#[derive(Clone, Copy)]
enum Pause {
    Fixed(&'static str),
    /// Mostly 50 ms; one run in three 2.5 s, longer than the TTL.
    Mixed,
}

/// Sets `stop` when dropped: the machines' loops end even when the injector panics (a member
/// that does not come back), so the test fails instead of hanging.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Waits `ms` or until `done`.
fn pause_unless(done: &dyn Fn() -> bool, ms: u64) {
    let until = Instant::now() + Duration::from_millis(ms);
    while Instant::now() < until && !done() {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Injects `fault` again and again until `done` says the phase has its runs. Returns how many
/// faults it injected.
fn inject(cluster: &mut EtcdCluster, shared: &Shared, log: &Path, fault: Fault, done: &dyn Fn(usize) -> bool) -> usize {
    let mut injected = 0;
    let mut round = 0usize;
    while !done(injected) {
        round += 1;
        // Somewhere in the renewal cycle, differently each time.
        pause_unless(&|| done(injected), TTL_MS / 2 + (round as u64 * 389) % TTL_MS);
        if done(injected) {
            break;
        }
        match fault {
            Fault::None => {}
            Fault::KillSupervisor | Fault::StopSupervisor => {
                // Every other round the machine whose command runs (it holds the admission),
                // else any machine whose attempt runs, a different one first each round. The
                // lock on its slot keeps the attempt from being recorded before it is marked.
                let lines = log_lines(log, 0);
                let holding = |slot: Option<(u32, u64)>| {
                    slot.is_some_and(|(_, run)| lines.iter().any(|(w, _, r)| w == "start" && *r == run) && !lines.iter().any(|(w, _, r)| w == "end" && *r == run))
                };
                for m in (0..3).map(|k| (round + k) % 3) {
                    let running = shared.running[m].lock().expect("lock");
                    if round % 2 == 1 && !holding(*running) {
                        continue;
                    }
                    let Some(supervisor) = running.and_then(|(unshare, _)| supervisor(unshare)) else { continue };
                    let kind = if fault == Fault::KillSupervisor { rustix::process::Signal::KILL } else { rustix::process::Signal::STOP };
                    signal(supervisor, kind);
                    shared.faulted[m].store(true, Ordering::SeqCst);
                    drop(running);
                    if fault == Fault::StopSupervisor {
                        // Longer than the TTL: its dead-man timer must have killed it by then.
                        std::thread::sleep(Duration::from_millis(TTL_MS + 1_000));
                        signal(supervisor, rustix::process::Signal::CONT);
                    }
                    injected += 1;
                    break;
                }
            }
            Fault::StopMember | Fault::KillMember => {
                let leader = cluster.leader();
                let member = if round % 2 == 1 { leader.unwrap_or(0) } else { (0..3).find(|&i| Some(i) != leader).unwrap_or(1) };
                if fault == Fault::StopMember {
                    cluster.signal(member, "-STOP");
                    std::thread::sleep(Duration::from_millis(TTL_MS + 1_000));
                    cluster.signal(member, "-CONT");
                } else {
                    cluster.kill(member);
                    std::thread::sleep(Duration::from_millis(TTL_MS));
                    cluster.restart(member);
                }
                injected += 1;
            }
            Fault::WipeCluster => {
                cluster.wipe();
                injected += 1;
                // The new epoch's grace (one TTL) and a takeover come before the next runs.
                pause_unless(&|| done(injected), 3 * TTL_MS);
            }
            Fault::RestoreCluster => {
                // The backup is taken while the machines run, and restored a moment later, when
                // the admission is likely held by a run the backup does not know.
                let backup = log.with_file_name(format!("backup-{round}.db"));
                cluster.snapshot(&backup);
                pause_unless(&|| done(injected), TTL_MS / 2 + (round as u64 * 211) % TTL_MS);
                cluster.restore(&backup);
                let _ = std::fs::remove_file(&backup);
                injected += 1;
                pause_unless(&|| done(injected), 3 * TTL_MS);
            }
        }
    }
    injected
}

/// The reason of a failure for a read that no member answered in time.
const UNANSWERED: &str = "failed: etcd did not answer, nothing changed";

/// The reason of a refusal for a holder whose presence could not be read.
const UNKNOWN_PRESENCE: &str = "refused: the holder's presence could not be read";

/// Why an attempt that did not run its command to the end did not: the messages the checker
/// knows, with what each means. An attempt whose stderr has none of them fails the check.
/// The first that matches names the attempt's reason.
const REASONS: &[(&str, &str)] = &[
    ("acknowledged no renewal of this process's cluster presence", "stopped: etcd acknowledged no renewal (the dead-man timer was due)"),
    ("cluster state lost", "stopped: etcd's state was lost"),
    ("cluster state is lost", "failed: etcd's state was lost under it (restored), so it wrote nothing"),
    // A process whose lease etcd granted after the backup was taken: the restore brought back
    // no such lease, and the acquire refused to write (fails safe).
    ("cluster presence (its etcd lease) is gone", "failed: its presence was lost with etcd's state (its lease is not in the backup), so it wrote nothing"),
    ("cluster session lost", "stopped: the presence lapsed"),
    ("another export is active", "refused: the admission is held"),
    ("cluster presence lapsed", "failed: its presence lapsed (its supervisor was stopped past the TTL), so etcd refused its writes"),
    ("changed right after it was acquired: no fencing token", "failed: taken over right after it acquired (no fencing token handed out)"),
    ("cannot be inspected safely", UNKNOWN_PRESENCE),
    ("but its lease could not be released", "ran, but etcd refused its release (presence or admission lost): recover finishes it"),
    ("vanished while created", "failed: etcd's state changed under the acquire (wiped)"),
    ("export admission changed before", "failed: the admission changed under it (etcd's state wiped)"),
    ("a write may or may not have been applied", "failed: a write's outcome unknown (not retried blindly)"),
    ("nothing was changed; retry once etcd answers", UNANSWERED),
];

/// What one phase saw.
#[derive(Debug, Default)]
struct Report {
    fault: &'static str,
    attempts: usize,
    runs: usize,
    faults: usize,
    overlaps: usize,
    reasons: BTreeMap<String, usize>,
    problems: Vec<String>,
    /// How long after `proclease` started each command that ran started (ms), sorted.
    to_start_ms: Vec<u128>,
}

/// Runs one phase: the machines' loops, and the injector of `fault` until `target` runs started
/// and `faults` faults were injected, or the deadline passed; then checks the history (see the
/// module's documentation).
fn phase(cluster: &mut EtcdCluster, bench: &Bench, fault: Fault, exclusive: bool, target: usize, faults: usize, pause: Pause) -> Report {
    let first = bench.next_run.load(Ordering::SeqCst);
    let shared = Shared { stop: AtomicBool::new(false), running: (0..3).map(|_| Mutex::new(None)).collect(), faulted: (0..3).map(|_| AtomicBool::new(false)).collect() };
    let deadline = Instant::now() + Duration::from_secs(90) + Duration::from_millis(1_500 * target as u64 + 8_000 * faults as u64);
    let runs = || log_lines(&bench.log, first).iter().filter(|(word, _, _)| word == "start").count();
    let done = |injected: usize| (runs() >= target && (injected >= faults || fault == Fault::None)) || Instant::now() >= deadline;
    let (attempts, injected) = std::thread::scope(|scope| {
        let shared = &shared;
        let loops: Vec<_> = (0..3).map(|m| scope.spawn(move || machine_loop(bench, shared, m, exclusive, pause))).collect();
        let stop = StopOnDrop(&shared.stop);
        let injected = inject(cluster, shared, &bench.log, fault, &done);
        while !done(injected) {
            std::thread::sleep(Duration::from_millis(20));
        }
        drop(stop);
        let attempts: Vec<Attempt> = loops.into_iter().flat_map(|h| h.join().expect("machine loop")).collect();
        (attempts, injected)
    });
    let mut report = check(&bench.log, first, &attempts, fault);
    report.fault = fault.name();
    report.faults = injected;
    if report.runs < target || (fault != Fault::None && injected < faults) {
        report.problems.push(format!("work stalled: {} of {target} runs and {injected} of {faults} faults before the deadline", report.runs));
    }
    report
}

/// Checks the history of the runs numbered from `first` on, made under `fault`.
fn check(log: &Path, first: u64, attempts: &[Attempt], fault: Fault) -> Report {
    let lines = log_lines(log, first);
    let has = |word: &str, machine: usize, run: u64| lines.iter().any(|(w, m, r)| w == word && *m == machine && *r == run);
    let mut report = Report { attempts: attempts.len(), ..Report::default() };
    report.to_start_ms = attempts.iter().filter_map(|a| a.to_start).map(|d| d.as_millis()).collect();
    report.to_start_ms.sort_unstable();
    report.runs = lines.iter().filter(|(word, _, _)| word == "start").count();
    // Fencing tokens grow with every holder, across wipes and restores too (#45 case 2): the
    // commands' starts, in the log's order (one holder at a time), carry increasing tokens.
    let tokens = fencing_tokens(log, first);
    if let Some(pair) = tokens.windows(2).find(|pair| pair[0].1 >= pair[1].1) {
        report.problems.push(format!("fencing tokens went backwards: run {} got {}, the next holder's run {} got {}", pair[0].0, pair[0].1, pair[1].0, pair[1].1));
    }
    report.overlaps = lines.iter().filter(|(word, _, _)| word == "overlap").count();
    for (word, machine, run) in &lines {
        if word == "overlap" {
            report.problems.push(format!("machine {machine}'s run {run} started while another run's command lived"));
        }
        if !attempts.iter().any(|a| a.machine == *machine && a.run == *run) {
            report.problems.push(format!("a command of no attempt wrote `{word} {machine} {run}`"));
        }
    }
    for attempt in attempts {
        let (started, ended) = (has("start", attempt.machine, attempt.run), has("end", attempt.machine, attempt.run));
        let reason = REASONS.iter().find(|(phrase, _)| attempt.stderr.contains(phrase)).map(|(_, reason)| *reason);
        let reason = match (attempt.code, reason) {
            (Some(0), _) if started && ended => "ran".to_owned(),
            (Some(0), _) => {
                report.problems.push(format!("exit 0 but its command did not run to its end: {attempt:?}"));
                continue;
            }
            (Some(3), Some(reason)) if !started && reason.starts_with("refused") => reason.to_owned(),
            (Some(3), _) => {
                report.problems.push(format!("refused, yet its command started: {attempt:?}"));
                continue;
            }
            (Some(99), _) if has("overlap", attempt.machine, attempt.run) => "overlapped another run (counted above)".to_owned(),
            (_, _) if attempt.faulted && attempt.code == Some(128 + 9) => "its supervisor was killed (the fault)".to_owned(),
            (_, Some(reason)) if reason.starts_with("ran") && !(started && ended) => {
                report.problems.push(format!("said its command ran, yet it did not run to its end: {attempt:?}"));
                continue;
            }
            // Every member answers in these phases: a holder's presence is always known, so a
            // refusal for not knowing it is the bug a lookup without retries had.
            (_, Some(reason)) if reason == UNKNOWN_PRESENCE && matches!(fault, Fault::None | Fault::KillSupervisor | Fault::StopSupervisor) => {
                report.problems.push(format!("refused for an unknown presence while every etcd member answered: {attempt:?}"));
                continue;
            }
            // One hung member, a quorum answering (#45 case 3): a read goes to another member
            // after the dial timeout, so none fails for want of an answer.
            (_, Some(reason)) if reason == UNANSWERED && fault == Fault::StopMember => {
                report.problems.push(format!("a read went unanswered while only one member was stopped: {attempt:?}"));
                continue;
            }
            (code, Some(reason)) => format!("exit {}: {reason}", code.map_or("by a signal".to_owned(), |c| c.to_string())),
            (_, None) => {
                report.problems.push(format!("no reason known: {attempt:?}"));
                continue;
            }
        };
        *report.reasons.entry(reason).or_default() += 1;
    }
    report
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "fault: {}: {} faults, {} attempts, {} runs, {} overlaps", self.fault, self.faults, self.attempts, self.runs, self.overlaps)?;
        if let (Some(median), Some(max)) = (self.to_start_ms.get(self.to_start_ms.len() / 2), self.to_start_ms.last()) {
            writeln!(f, "  from proclease's start to its command's: median {median} ms, max {max} ms")?;
        }
        for (reason, count) in &self.reasons {
            writeln!(f, "  {count:>6}  {reason}")?;
        }
        for problem in &self.problems {
            writeln!(f, "  PROBLEM: {problem}")?;
        }
        Ok(())
    }
}

/// The history: first a control — without `--exclusive` the commands of three machines overlap,
/// and the checker must see it, so that it is not a checker that cannot fail —, then every fault
/// in turn, on one cluster and one prefix, checked phase by phase. (One test, so that two
/// clusters never share the machine's two cores.)
#[test]
fn exclusive_runs_never_overlap_under_any_fault() {
    let Some((mut cluster, bench)) = world() else { return };
    let control = phase(&mut cluster, &bench, Fault::None, false, 6, 0, Pause::Fixed("0.5"));
    println!("\ncontrol (no --exclusive): {} attempts, {} runs, {} overlaps found", control.attempts, control.runs, control.overlaps);
    assert!(control.overlaps > 0, "three machines running 0.5 s commands without --exclusive never overlapped:\n{control}");
    let (target, faults) = (setting("PROCLEASE_HISTORY_RUNS", 12), setting("PROCLEASE_HISTORY_FAULTS_PER_PHASE", 3));
    let only = std::env::var("PROCLEASE_HISTORY_FAULTS").unwrap_or_default();
    let mut failed = Vec::new();
    let wanted = |f: &Fault| only.is_empty() || only.split(',').any(|k| k == f.key());
    // The restore phase backs up and restores with etcdctl (Debian's etcd-client).
    for fault in Fault::ALL.into_iter().filter(wanted).filter(|f| *f != Fault::RestoreCluster || etcd_server::etcdctl_installed()) {
        let report = phase(&mut cluster, &bench, fault, true, target, faults, Pause::Mixed);
        println!("{report}");
        if !report.problems.is_empty() || report.overlaps > 0 {
            failed.push(report.to_string());
        }
    }
    assert!(failed.is_empty(), "the history checker found problems:\n{}", failed.join("\n"));
}
