//! Three hosts of one component on one state home at once (issue #31): the native library
//! (`store_worker`, `admission_worker`), the Python host (`hosts/python`, `tests/worker.py`) and
//! the Node host (`hosts/node`, `testing/worker.mjs`). Writers of all three lose no update of one
//! record, and an export admission raced by all three never has two owners.
//!
//! Real processes on real files. Each package is installed the way its README says
//! (`hosts/python/setup.sh`, `npm ci` in `hosts/node`); needs python3 >= 3.11 and Node 20.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

#[path = "../../host/tests/common/packages.rs"]
mod packages;
use packages::{installed, package};

const STORE_WORKER: &str = env!("CARGO_BIN_EXE_store_worker");
const ADMISSION_WORKER: &str = env!("CARGO_BIN_EXE_admission_worker");
const COUNTER: &str = "recovery/interop/counter.json";

fn python(args: &[&str]) -> Command {
    let mut command = Command::new(package("python").join(".venv/bin/python"));
    command.arg(package("python").join("tests/worker.py")).args(args);
    command
}

fn node(args: &[&str]) -> Command {
    let mut command = Command::new("node");
    command.arg(package("node").join("testing/worker.mjs")).args(args);
    command
}

/// A private scratch directory on tmpfs when there is one (the claims' fsyncs make ext4 slow).
fn scratch() -> tempfile::TempDir {
    let base = if Path::new("/dev/shm").is_dir() { Path::new("/dev/shm") } else { Path::new(env!("CARGO_TARGET_TMPDIR")) };
    let dir = tempfile::tempdir_in(base).expect("scratch");
    std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o700)).expect("chmod");
    dir
}

/// Reads `child`'s output up to its `{"event":"ready"}` line; returns what it read.
fn await_ready(child: &mut Child) -> String {
    use std::io::Read as _;
    let stdout = child.stdout.as_mut().expect("piped stdout");
    let mut seen = Vec::new();
    let mut byte = [0u8; 1];
    while !String::from_utf8_lossy(&seen).contains("\"ready\"") {
        assert!(stdout.read(&mut byte).expect("read") == 1, "the writer ended before it was ready: {}", String::from_utf8_lossy(&seen));
        seen.push(byte[0]);
    }
    String::new()
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

#[test]
fn writers_of_the_three_hosts_lose_no_update_on_one_record() {
    const EACH: u64 = 1000;
    installed();
    let dir = scratch();
    let home = dir.path().join("state");
    let home_text = home.to_str().expect("utf-8");
    let each = EACH.to_string();
    let args = ["increment", home_text, COUNTER, &each];
    // The Python and Node writers load the component first: the native one starts once both
    // write, so that all three overlap.
    let mut python = python(&args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("python");
    let mut node = node(&args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("node");
    let python_ready = await_ready(&mut python);
    let node_ready = await_ready(&mut node);
    let native = Command::new(STORE_WORKER).args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("store_worker");
    let mut successes = 0;
    let mut retries = 0;
    for (who, child, mut before) in [("native", native, String::new()), ("python", python, python_ready), ("node", node, node_ready)] {
        let output = child.wait_with_output().expect("wait");
        assert!(output.status.success(), "the {who} writer failed: {output:?}");
        before.push_str(&String::from_utf8_lossy(&output.stdout));
        let done: Value = before.lines().rev().find_map(|l| serde_json::from_str(l).ok()).unwrap_or_else(|| panic!("{who}: no outcome"));
        assert_eq!(done["outcome"], "done", "{who}: {done}");
        assert_eq!(done["successes"], EACH, "{who}: {done}");
        successes += EACH;
        retries += done["retries"].as_u64().unwrap_or(0);
    }
    eprintln!("{successes} increments by native, Python and Node writers ({retries} compare-and-swaps lost and retried)");
    let text = std::fs::read_to_string(home.join(COUNTER)).expect("the counter");
    // The first writer created {"value":0}; every success added exactly one.
    assert_eq!(text, format!("{{\"value\":{successes}}}\n"), "a lost update");
    let leftovers: Vec<String> = std::fs::read_dir(home.join("recovery/interop"))
        .expect("collection")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n != "counter.json")
        .collect();
    assert_eq!(leftovers, Vec::<String>::new(), "temporaries or claims left in the collection");
}

#[test]
fn an_admission_raced_by_the_three_hosts_never_has_two_owners() {
    const ROUNDS: usize = 6;
    installed();
    let dir = scratch();
    let home = dir.path().join("state");
    let home_text = home.to_str().expect("utf-8");
    let claim = home.join("recovery/beeper-message-like-me-export-admission/active.json");
    for round in 0..ROUNDS {
        let go = dir.path().join(format!("go-{round}"));
        let release = dir.path().join(format!("release-{round}"));
        let (go_text, release_text) = (go.to_str().expect("utf-8"), release.to_str().expect("utf-8"));
        let args = ["race", home_text, go_text, release_text];
        let racers: Vec<(&str, Child)> = vec![
            ("native", Command::new(ADMISSION_WORKER).args(args).stdout(Stdio::piped()).spawn().expect("admission_worker")),
            ("python", python(&args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("python")),
            ("node", node(&args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("node")),
        ];
        // Every racer starts (the Python and Node hosts compile the component) before the go.
        let start = now_ms();
        std::thread::sleep(Duration::from_millis(4000));
        std::fs::write(&go, "").expect("go");
        std::thread::sleep(Duration::from_millis(3000));
        std::fs::write(&release, "").expect("release");
        let mut winners = Vec::new();
        for (who, child) in racers {
            let output = child.wait_with_output().expect("wait");
            let text = String::from_utf8_lossy(&output.stdout).into_owned();
            assert!(output.status.success(), "round {round}: the {who} racer failed: {output:?}");
            if text.starts_with("acquired") {
                winners.push(who);
            } else {
                assert!(
                    text.contains("another export is active") || text.contains("could not be acquired"),
                    "round {round}: the {who} loser was told {text:?} ({} ms after start)",
                    now_ms() - start
                );
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: owners {winners:?}");
        assert!(!claim.exists(), "round {round}: the winner released the admission");
    }
}
