//! Real `kill -9` stress (issue #9 item 3): worker processes run random lease operations of all
//! three kinds through the component on one real state home and workspace, while the
//! orchestrator SIGKILLs them at random instants and starts new ones; afterwards the
//! invariants are checked on the real disk.
//!
//! Usage:
//!   lease_stress run [--workers N] [--kills K] [--seed S] [--dir DIR] [--max-pause-ms MS]
//!   lease_stress check DIR      (the after-run checks alone, on a `run --dir DIR`'s files)
//!   lease_stress worker <state-home> <workspace-root> <seed> <log>   (started by `run`)
//!
//! What a worker does, in a loop: take and release the export admission; create a directory,
//! lease it, move the lease to launching and to running (recording itself as the child), write
//! its output there, and keep up to two such leases held (releasing the oldest); acquire an
//! invocation lease, record itself as its host, complete its cleanup and release it; run
//! directory recovery and invocation repair (with tombstones). Before every operation it checks
//! that every directory it holds a lease on still exists with its output: a live owner's
//! directory deleted by another worker's recovery is a violation (exit 99), as is a record
//! that does not parse.
//!
//! After the last kill every worker is killed, and the orchestrator checks the disk: every
//! directory a worker released (its kept result) still exists with its output; every record
//! parses; recovery (directory recovery, invocation repair with tombstones, admission
//! takeover) succeeds with every owner dead and leaves no lease, temporary or quarantine; a
//! second recovery changes nothing. It prints one summary line and exits 0, or names the
//! violations and exits 1.
//!
//! CI runs 500 kills (`tests/tests/kill_stress.rs`); `bench/stress.sh` runs 10,000.
//!
//! Debugging aids: `STRESS_TRACE=<file>` makes every worker log each directory-lease claim
//! written or removed and each tree removal (with its pid and a µs timestamp);
//! `STRESS_COPY_BEFORE_CHECK=<dir>` copies the run's directory there before the checks change it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use proclease::core::directory_leases::Request;
use proclease::core::invocation_leases::Entry;
use proclease::core::records::directory_lease::{Phase, Role};
use proclease::core::records::portable_identity::{self, PortableIdentity};
use proclease::effects::Effects;
use proclease::process_identity::ProcessIdentity;
use proclease::state_store::StateStore;
use proclease::{Admission, ContainmentController, DirectoryLease, Runtime};

const PLUGIN: &str = "stress-plugin";
const A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
const C: &str = "cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc";
/// A worker found an invariant broken.
const VIOLATION_EXIT: i32 = 99;

/// xorshift64*: reproducible randomness without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

struct World {
    host: proclease::Host,
    store: Arc<StateStore>,
    identity: Arc<ProcessIdentity>,
    runtime: &'static Runtime,
}

impl World {
    fn open(home: &Path, root: &Path) -> Result<World, String> {
        let host = proclease::Host::builder().state_home(home).workspace_root(root).build().map_err(|e| e.to_string())?;
        let (store, identity) = (host.store().clone(), host.process_identity().clone());
        let runtime = Runtime::shared().map_err(|e| e.to_string())?;
        Ok(World { host, store, identity, runtime })
    }

    fn effects(&self) -> Effects {
        let mut effects = self.host.effects();
        if let Some(path) = std::env::var_os("STRESS_TRACE") {
            let log = Arc::new(std::sync::Mutex::new(std::fs::OpenOptions::new().append(true).create(true).open(path).unwrap_or_else(|e| fail(&e.to_string()))));
            effects.store = Box::new(trace::Store(effects.store, log.clone()));
            effects.workspace = Box::new(trace::Workspace(effects.workspace, log));
        }
        effects
    }

    /// Directory recovery, invocation repair with tombstones, and an admission takeover.
    fn recover(&self) -> Result<(), String> {
        proclease::recover_directory_leases(self.runtime, self.effects(), None).map_err(|e| format!("directory recovery: {e}"))?;
        proclease::recover_directory_creations(self.runtime, self.effects(), false).map_err(|e| format!("creation recovery: {e}"))?;
        proclease::repair_invocation_leases(self.runtime, self.effects(), true).map_err(|e| format!("invocation repair: {e}"))?;
        Ok(())
    }
}

fn identity() -> PortableIdentity {
    portable_identity::parse_value(&serde_json::json!({
        "pluginId": PLUGIN, "pluginVersion": "1.0.0", "hostApiVersion": 1, "bundleSha256": A,
        "manifestSha256": B, "adapterId": "portable-test", "transport": "provider-api",
        "surfaceId": "portable-test", "operation": "records.read", "contractVersion": 1, "descriptorSha256": C,
    }))
    .unwrap_or_else(|e| fail(&format!("fixture identity: {e}")))
}

fn fail(message: &str) -> ! {
    eprintln!("lease_stress: {message}");
    std::process::exit(2)
}

fn violation(message: &str) -> ! {
    eprintln!("lease_stress: VIOLATION: {message}");
    std::process::exit(VIOLATION_EXIT)
}

/// Errors that only corruption explains.
fn is_corruption(message: &str) -> bool {
    ["not canonical", "malformed", "not valid JSON", "is not JSON"].iter().any(|m| message.contains(m))
}

fn now_ms() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_millis() as f64)
}

fn worker(home: &Path, root: &Path, seed: u64, log: &Path) -> ! {
    use std::io::Write as _;
    let mut released_log = std::fs::OpenOptions::new().append(true).create(true).open(log.with_file_name("released.log")).unwrap_or_else(|e| fail(&e.to_string()));
    let mut log = std::fs::OpenOptions::new().append(true).create(true).open(log).unwrap_or_else(|e| fail(&e.to_string()));
    let world = World::open(home, root).unwrap_or_else(|e| fail(&e));
    let pid = std::process::id();
    let mut rng = Rng(seed | 1);
    let mut held: Vec<(PathBuf, DirectoryLease)> = Vec::new();
    let mut made = 0u64;
    // One byte per completed operation (a, d, i, r), appended atomically, for the summary.
    let mut check = |kind: u8, result: Result<(), String>| match result {
        Ok(()) => {
            let _ = log.write_all(&[kind]);
        }
        Err(message) if is_corruption(&message) => violation(&message),
        Err(_) => {}
    };
    loop {
        for (dir, _) in &held {
            if !dir.join("out.txt").is_file() {
                violation(&format!("{}: the directory of a live owner's lease (pid {pid}) is gone", dir.display()));
            }
        }
        match rng.below(4) {
            0 => check(
                b'a',
                (|| {
                    let mut admission = Admission::acquire(world.runtime, world.effects()).map_err(|e| e.to_string())?;
                    admission.release().map_err(|e| e.to_string())
                })(),
            ),
            1 => {
                if held.len() >= 2 {
                    let (dir, mut oldest) = held.remove(0);
                    let released = oldest.release().map_err(|e| e.to_string());
                    if released.is_ok() {
                        // The directory is now the owner's kept result: the checks demand it
                        // survives every later recovery.
                        let _ = released_log.write_all(format!("{}\n", dir.display()).as_bytes());
                    }
                    check(b'-', released);
                }
                made += 1;
                // Unique even when a pid comes round again: a worker never leases a directory
                // another lease may claim (as `proclease run` refuses to).
                let dir = root.join(format!("job-{pid}-{:x}-{made}", seed & 0xffff_ffff));
                let text = dir.to_string_lossy().into_owned();
                // One clock reading for both times: the recovery time must not precede the creation time
                // (`directory lease request is invalid`), which two readings a millisecond apart would do.
                let now = now_ms();
                let request = Request { role: Role::RawWorking, path: text.clone(), output_root: None, recover_after_ms: now, now_ms: Some(now) };
                check(
                    b'd',
                    (|| {
                        // As `run` does: the lease creates its directory, its intent recorded first.
                        let mut lease = DirectoryLease::create_with_directory(world.runtime, world.effects(), &request).map_err(|e| e.to_string())?;
                        let steps = (|| -> Result<(), String> {
                            lease.update(Phase::Launching, None).map_err(|e| e.to_string())?;
                            lease.update(Phase::Running, Some(i64::from(pid))).map_err(|e| e.to_string())?;
                            std::fs::write(dir.join("out.txt"), format!("written by {pid}\n")).map_err(|e| e.to_string())
                        })();
                        match steps {
                            Ok(()) => held.push((dir.clone(), lease)),
                            // As a crash there would: the claim stays for recovery (a dropped handle
                            // would release a `preparing` one and leave its directory unleased).
                            Err(e) => {
                                lease.leave();
                                return Err(e);
                            }
                        }
                        Ok(())
                    })(),
                );
            }
            2 => check(
                b'i',
                (|| {
                    let snapshot =
                        proclease::acquire_invocation_lease(world.runtime, world.effects(), &identity(), &uuid::Uuid::new_v4().to_string()).map_err(|e| e.to_string())?;
                    let mut controller = ContainmentController::create(world.runtime, world.effects(), &snapshot).map_err(|e| e.to_string())?;
                    let own = world.identity.self_identity().map_err(|e| e.0)?;
                    controller.host_starting(&own).map_err(|e| e.to_string())?;
                    controller.cleanup_complete().map_err(|e| e.to_string())?;
                    let current = controller.current().map_err(|e| e.to_string())?;
                    proclease::release_invocation_lease(world.runtime, world.effects(), &current).map_err(|e| e.to_string())
                })(),
            ),
            _ => check(b'r', world.recover()),
        }
    }
}

/// Everything under `dir`: path → file bytes (directories as empty entries with a marker).
fn listing(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(current) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&current) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            let key = path.strip_prefix(dir).map_or_else(|_| path.display().to_string(), |p| p.display().to_string());
            match entry.file_type() {
                Ok(t) if t.is_dir() => {
                    out.insert(format!("{key}/"), Vec::new());
                    stack.push(path);
                }
                _ => {
                    out.insert(key, std::fs::read(&path).unwrap_or_else(|_| b"<unreadable>".to_vec()));
                }
            }
        }
    }
    out
}

fn names_in(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir).map(|e| e.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect()).unwrap_or_default()
}

/// The checks after the run; returns the violations and a description of what was left.
fn check_disk(home: &Path, root: &Path) -> Result<(Vec<String>, String), String> {
    let world = World::open(home, root)?;
    let mut violations = Vec::new();
    // Every released directory is its owner's kept result and must have survived (a kill can
    // cut a line of the log short: only whole lines count).
    let released_log = home.with_file_name("released.log");
    let released_text = std::fs::read_to_string(&released_log).unwrap_or_default();
    let released: Vec<&str> = released_text.split_inclusive('\n').filter_map(|l| l.strip_suffix('\n')).collect();
    let released_gone = |violations: &mut Vec<String>| {
        for dir in &released {
            let violation = format!("{dir}: a released directory (its owner's kept result) was deleted");
            if !Path::new(dir).join("out.txt").is_file() && !violations.contains(&violation) {
                violations.push(violation);
            }
        }
    };
    released_gone(&mut violations);
    // Every record parses (readers of the state home demand canonical files). `.io-` names are
    // the writers' own leftovers (mutation claims, stages of a killed writer: §3.9), which no
    // reader takes for records; recovery must remove them (checked below).
    let leases_dir = home.join(proclease::core::directory_leases::DIRECTORY);
    let before_leases = names_in(&leases_dir).len();
    for name in names_in(&leases_dir).into_iter().filter(|n| !n.starts_with(".io-")) {
        let text = std::fs::read_to_string(leases_dir.join(&name)).map_err(|e| e.to_string())?;
        if let Err(e) = proclease::core::records::directory_lease::parse_file(&text, &name) {
            violations.push(format!("directory lease {name}: {e}"));
        }
    }
    let admission = home.join(proclease::core::admission::CLAIM_PATH);
    if let Ok(text) = std::fs::read_to_string(&admission)
        && let Err(e) = proclease::core::records::export_admission::parse_file(&text)
    {
        violations.push(format!("export admission: {e}"));
    }
    let entries = proclease::list_invocation_leases(world.runtime, world.effects()).map_err(|e| e.to_string())?;
    let before_invocations = entries.len();
    for entry in &entries {
        if let Entry::Invalid(lease_id) = entry {
            violations.push(format!("invocation lease {lease_id} does not parse"));
        }
    }
    // Recovery with every owner dead.
    if let Err(e) = world.recover() {
        violations.push(format!("recovery failed: {e}"));
    }
    match Admission::acquire(world.runtime, world.effects()) {
        Ok(mut taken) => {
            if let Err(e) = taken.release() {
                violations.push(format!("admission release after takeover: {e}"));
            }
        }
        Err(e) => violations.push(format!("admission takeover with every owner dead: {e}")),
    }
    let left_leases = names_in(&leases_dir);
    if !left_leases.is_empty() {
        violations.push(format!("{} directory leases of dead owners left after recovery: {left_leases:?}", left_leases.len()));
    }
    let left_invocations = proclease::list_invocation_leases(world.runtime, world.effects()).map_err(|e| e.to_string())?;
    if !left_invocations.is_empty() {
        violations.push(format!("{} invocation leases of dead owners left after recovery", left_invocations.len()));
    }
    let temporaries = names_in(&home.join(".proclease/staging"));
    if !temporaries.is_empty() {
        violations.push(format!("temporaries left after recovery: {temporaries:?}"));
    }
    let quarantines: Vec<String> = names_in(root).into_iter().filter(|n| n.starts_with(".io-remove-")).collect();
    if !quarantines.is_empty() {
        violations.push(format!("quarantines left after recovery: {quarantines:?}"));
    }
    released_gone(&mut violations);
    // A crash between creating a directory and leasing it leaves nothing: every directory left
    // is a worker's kept result (its output is in it).
    let litter: Vec<String> = names_in(root).into_iter().filter(|n| n.starts_with("job-") && !root.join(n).join("out.txt").exists()).collect();
    if !litter.is_empty() {
        violations.push(format!("{} empty, unleased directories left after recovery: {litter:?}", litter.len()));
    }
    let intents = names_in(&home.join(proclease::core::directory_leases::INTENTS));
    if !intents.is_empty() {
        violations.push(format!("directory-creation intents of dead creators left after recovery: {intents:?}"));
    }
    // Convergence.
    let once = (listing(home), listing(root));
    if let Err(e) = world.recover() {
        violations.push(format!("second recovery failed: {e}"));
    }
    if (listing(home), listing(root)) != once {
        violations.push("a second recovery changed the disk".into());
    }
    let kept = names_in(root).len();
    Ok((
        violations,
        format!(
            "{before_leases} directory leases and {before_invocations} invocation leases recovered, {} released directories kept intact, {kept} directories kept, {} unleased empty directories",
            released.len(),
            litter.len()
        ),
    ))
}

struct Options {
    workers: usize,
    kills: u64,
    seed: u64,
    dir: Option<PathBuf>,
    max_pause_ms: u64,
}

fn parse_options(args: &[String]) -> Options {
    // A fresh seed each run unless one is given (the summary prints it, to replay a failure).
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0x5eed, |d| d.as_nanos() as u64 & 0xffff_ffff);
    let mut options = Options { workers: 4, kills: 500, seed, dir: None, max_pause_ms: 50 };
    let mut i = 0;
    while i < args.len() {
        let value = || args.get(i + 1).cloned().unwrap_or_else(|| fail(&format!("{} needs a value", args[i])));
        let number = |v: String| v.parse::<u64>().unwrap_or_else(|_| fail(&format!("{} needs a number", args[i])));
        match args[i].as_str() {
            "--workers" => options.workers = number(value()) as usize,
            "--kills" => options.kills = number(value()),
            "--seed" => options.seed = number(value()),
            "--dir" => options.dir = Some(PathBuf::from(value())),
            "--max-pause-ms" => options.max_pause_ms = number(value()),
            other => fail(&format!("unknown option {other}")),
        }
        i += 2;
    }
    options
}

fn spawn(home: &Path, root: &Path, seed: u64, log: &Path) -> Child {
    let exe = std::env::current_exe().unwrap_or_else(|e| fail(&e.to_string()));
    Command::new(exe)
        .arg("worker")
        .arg(home)
        .arg(root)
        .arg(seed.to_string())
        .arg(log)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| fail(&format!("spawn a worker: {e}")))
}

fn run(options: Options) -> i32 {
    let temp;
    let base = match &options.dir {
        Some(dir) => dir.clone(),
        None => {
            temp = tempfile::tempdir().unwrap_or_else(|e| fail(&e.to_string()));
            temp.path().to_path_buf()
        }
    };
    let base = std::fs::canonicalize(&base).unwrap_or_else(|e| fail(&e.to_string()));
    let home = base.join("state");
    let root = base.join("ws");
    let log = base.join("operations.log");
    std::fs::create_dir_all(&root).unwrap_or_else(|e| fail(&e.to_string()));
    std::fs::set_permissions(&root, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap_or_else(|e| fail(&e.to_string()));
    {
        let world = World::open(&home, &root).unwrap_or_else(|e| fail(&e));
        let catalog = serde_json::json!({"schemaVersion": 1, "plugins": [
            {"pluginId": PLUGIN, "version": "1.0.0", "hostApiVersion": 1, "bundleSha256": A, "manifestSha256": B, "enabled": true}
        ]});
        world.store.create_if_absent(proclease::plugin_catalog::DEFAULT_PATH, &format!("{catalog}\n")).unwrap_or_else(|e| fail(&e.to_string()));
    }
    let started = Instant::now();
    let mut rng = Rng(options.seed | 1);
    let mut workers: Vec<Child> = (0..options.workers).map(|_| spawn(&home, &root, rng.next(), &log)).collect();
    let mut kills = 0u64;
    let mut violations = Vec::new();
    while kills < options.kills && violations.is_empty() {
        std::thread::sleep(Duration::from_micros(rng.below(options.max_pause_ms * 1000 + 1)));
        let index = rng.below(workers.len() as u64) as usize;
        let worker = &mut workers[index];
        match worker.try_wait() {
            Ok(Some(status)) => {
                violations.push(format!("a worker exited by itself ({status}); see its message above"));
                break;
            }
            Ok(None) => {}
            Err(e) => fail(&e.to_string()),
        }
        let _ = worker.kill();
        let _ = worker.wait();
        kills += 1;
        workers[index] = spawn(&home, &root, rng.next(), &log);
    }
    for worker in &mut workers {
        if let Ok(Some(status)) = worker.try_wait() {
            violations.push(format!("a worker exited by itself ({status}); see its message above"));
        }
        let _ = worker.kill();
        let _ = worker.wait();
    }
    let run_time = started.elapsed();
    if let Some(copy) = std::env::var_os("STRESS_COPY_BEFORE_CHECK") {
        let _ = Command::new("cp").arg("-a").arg(&base).arg(copy).status();
    }
    let summary = match check_disk(&home, &root) {
        Ok((found, summary)) => {
            violations.extend(found);
            summary
        }
        Err(e) => {
            violations.push(format!("the checks could not run: {e}"));
            String::new()
        }
    };
    let done = std::fs::read(&log).unwrap_or_default();
    let count = |k: u8| done.iter().filter(|b| **b == k).count();
    println!(
        "lease_stress: {kills} kills of {} workers in {:.1} s (seed {}); operations completed: {} admissions, {} directory leases, {} invocation leases, {} recoveries; {summary}; {} violations",
        options.workers,
        run_time.as_secs_f64(),
        options.seed,
        count(b'a'),
        count(b'd'),
        count(b'i'),
        count(b'r'),
        violations.len()
    );
    for v in violations.iter().take(20) {
        println!("  VIOLATION: {v}");
    }
    if violations.len() > 20 {
        println!("  … and {} more", violations.len() - 20);
    }
    i32::from(!violations.is_empty())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("worker") => {
            let arg = |i: usize| args.get(i).cloned().unwrap_or_else(|| fail("worker <state-home> <workspace-root> <seed> <log>"));
            let seed = arg(4).parse().unwrap_or_else(|_| fail("seed"));
            worker(Path::new(&arg(2)), Path::new(&arg(3)), seed, Path::new(&arg(5)))
        }
        Some("run") => std::process::exit(run(parse_options(&args[2..]))),
        Some("check") => {
            let dir = args.get(2).map(PathBuf::from).unwrap_or_else(|| fail("check <dir>"));
            let (violations, summary) = check_disk(&dir.join("state"), &dir.join("ws")).unwrap_or_else(|e| fail(&e));
            println!("lease_stress: check: {summary}; {} violations", violations.len());
            for v in &violations {
                println!("  VIOLATION: {v}");
            }
            std::process::exit(i32::from(!violations.is_empty()))
        }
        _ => fail("usage: lease_stress run [--workers N] [--kills K] [--seed S] [--dir DIR] [--max-pause-ms MS] | check DIR"),
    }
}

/// Debugging aid (`STRESS_TRACE=<file>`): logs every claim write and every tree removal.
mod trace {
    use std::io::Write as _;
    use std::sync::{Arc, Mutex};

    use proclease::core::effects::{self, BatchStatus, CollectionIdentity, CollectionSnapshot, DirectoryFacts, Failure};
    use proclease::core::records::DirectoryIdentity;

    type Log = Arc<Mutex<std::fs::File>>;

    fn line(log: &Log, text: String) {
        let ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros());
        let mut file = log.lock().unwrap_or_else(|p| p.into_inner());
        let _ = file.write_all(format!("{ms} {} {text}\n", std::process::id()).as_bytes());
    }

    pub struct Store(pub Box<dyn effects::Store + Send>, pub Log);
    pub struct Workspace(pub Box<dyn effects::Workspace + Send>, pub Log);

    impl effects::Store for Store {
        fn read_if_present(&mut self, path: &str, max: u32) -> Result<Option<String>, Failure> {
            self.0.read_if_present(path, max)
        }
        fn create_if_absent(&mut self, path: &str, content: &str) -> Result<bool, Failure> {
            let r = self.0.create_if_absent(path, content);
            if path.contains("directory-leases") {
                line(&self.1, format!("create {path} {r:?} {}", content.trim_end()));
            }
            r
        }
        fn replace_if_unchanged(&mut self, path: &str, sha: &str, content: &str) -> Result<bool, Failure> {
            self.0.replace_if_unchanged(path, sha, content)
        }
        fn remove_if_unchanged(&mut self, path: &str, sha: &str) -> Result<bool, Failure> {
            let r = self.0.remove_if_unchanged(path, sha);
            if path.contains("directory-leases") {
                line(&self.1, format!("remove {path} {r:?}"));
            }
            r
        }
        fn ensure_private_directory(&mut self, path: &str) -> Result<CollectionIdentity, Failure> {
            self.0.ensure_private_directory(path)
        }
        fn snapshot(&mut self, path: &str, orphans: bool) -> Result<Option<CollectionSnapshot>, Failure> {
            self.0.snapshot(path, orphans)
        }
        fn read_batch(&mut self, path: &str, names: &[String], per: u32, total: u32, expected: &CollectionIdentity) -> Result<Vec<(String, BatchStatus)>, Failure> {
            self.0.read_batch(path, names, per, total, expected)
        }
    }

    impl effects::Workspace for Workspace {
        fn inspect(&mut self, path: &str) -> Result<Option<DirectoryFacts>, Failure> {
            let r = self.0.inspect(path);
            line(&self.1, format!("inspect {path} {:?}", r.as_ref().map(|f| f.as_ref().map(|f| f.identity.inode.clone()))));
            r
        }
        fn remove_tree(&mut self, path: &str, expected: &DirectoryIdentity) -> Result<bool, Failure> {
            line(&self.1, format!("remove_tree {path} {} start", expected.inode));
            let r = self.0.remove_tree(path, expected);
            line(&self.1, format!("remove_tree {path} {} {r:?}", expected.inode));
            r
        }
        fn create_private_directory(&mut self, path: &str) -> Result<Vec<String>, Failure> {
            self.0.create_private_directory(path)
        }
        fn remove_empty_directory(&mut self, path: &str, expected: Option<&DirectoryIdentity>) -> Result<bool, Failure> {
            let r = self.0.remove_empty_directory(path, expected);
            line(&self.1, format!("remove_empty_directory {path} {r:?}"));
            r
        }
    }
}
