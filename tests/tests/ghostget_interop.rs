//! proclease side by side with a running ghostget on one state home (issue #15). The ghostget is
//! the independent peer in `tests/peer/` (Node, written from the spec alone, sharing no code with
//! proclease), which takes part in ghostget 0.17.2's own protocols: the per-leaf mutation claims
//! (§3.5), their crash recovery (§3.9), the catalog lock file (§5) and the export admission.
//!
//! Real processes on real files: proclease's side is `store_worker` / `admission_worker` (the
//! library), the peer's is `node tests/peer/peer.mjs`. Needs `node` (Node 20), as CI has.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

const STORE_WORKER: &str = env!("CARGO_BIN_EXE_store_worker");
const ADMISSION_WORKER: &str = env!("CARGO_BIN_EXE_admission_worker");
const COUNTER: &str = "recovery/interop/counter.json";

fn peer_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("peer/peer.mjs")
}

/// A private scratch directory on tmpfs when there is one (the claims' fsyncs make ext4 slow
/// for ten thousand operations; the protocol is the same).
fn scratch() -> tempfile::TempDir {
    let base = if Path::new("/dev/shm").is_dir() { Path::new("/dev/shm") } else { Path::new(env!("CARGO_TARGET_TMPDIR")) };
    let dir = tempfile::tempdir_in(base).expect("scratch");
    std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o700)).expect("chmod");
    dir
}

fn peer(args: &[&str]) -> Command {
    let mut command = Command::new("node");
    command.arg(peer_script()).args(args);
    command
}

fn json_lines(output: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&output.stdout).lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

fn outcome(output: &Output) -> Value {
    json_lines(output).pop().unwrap_or_else(|| panic!("no outcome: {output:?}"))
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// Every entry of a collection that is not a record (`*.json` not starting with a dot).
fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| d.map(|e| e.expect("entry").file_name().to_string_lossy().into_owned()).filter(|n| n.starts_with('.') || !n.ends_with(".json")).collect())
        .unwrap_or_default()
}

/// Waits for a JSON line of `child` whose `key` is `value`; panics on end of output.
fn await_line(child: &mut Child, key: &str, value: &str) -> Value {
    let stdout = child.stdout.as_mut().expect("piped stdout");
    let mut reader = BufReader::new(stdout);
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).expect("read") == 0 {
            panic!("the process ended before {key}={value}");
        }
        if let Ok(v) = serde_json::from_str::<Value>(&line)
            && v[key] == value
        {
            return v;
        }
    }
}

/// SIGKILLs and reaps `child` (a zombie still answers `kill(pid, 0)`).
fn kill(mut child: Child) {
    child.kill().expect("SIGKILL");
    child.wait().expect("reap");
}

#[test]
fn proclease_and_ghostget_writers_lose_no_update_on_one_record() {
    const EACH: u64 = 2500;
    let dir = scratch();
    let home = dir.path().join("state");
    let home_text = home.to_str().expect("utf-8");
    let each = EACH.to_string();
    let mut proclease: Vec<Child> =
        (0..2).map(|_| Command::new(STORE_WORKER).args(["increment", home_text, COUNTER, &each]).stdout(Stdio::piped()).spawn().expect("store_worker")).collect();
    let mut peers: Vec<Child> = (0..2).map(|_| peer(&["increment", home_text, COUNTER, &each]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("node")).collect();
    let mut successes = 0;
    let mut proclease_retries = 0;
    for child in proclease.drain(..).chain(peers.drain(..)) {
        let output = child.wait_with_output().expect("wait");
        assert!(output.status.success(), "{output:?}");
        let done = outcome(&output);
        assert_eq!(done["outcome"], "done", "{done}");
        successes += done["successes"].as_u64().expect("successes");
        if done.get("changedReads").is_none() {
            proclease_retries += done["retries"].as_u64().expect("retries");
        }
    }
    assert_eq!(successes, 4 * EACH);
    let read = outcome(&peer(&["read", home_text, COUNTER]).output().expect("node"));
    // The first writer created {"value":0}; every success added exactly one.
    assert_eq!(read["text"], format!("{{\"value\":{successes}}}\n"), "a lost update: {read}");
    assert!(proclease_retries > 0, "the writers never contended");
    assert_eq!(leftovers(&home.join("recovery/interop")), Vec::<String>::new());
    eprintln!("{successes} increments by 2 proclease and 2 ghostget-peer processes, none lost ({proclease_retries} proclease retries)");
}

#[test]
fn racing_admission_acquires_of_both_programs_admit_one_owner() {
    const ROUNDS: usize = 8;
    let dir = scratch();
    let home = dir.path().join("state");
    let home_text = home.to_str().expect("utf-8");
    let claim = home.join("recovery/beeper-message-like-me-export-admission/active.json");
    for round in 0..ROUNDS {
        let go = dir.path().join(format!("go-{round}"));
        let release = dir.path().join(format!("release-{round}"));
        let start_at = now_ms() + 1500;
        let proclease: Vec<Child> = (0..2)
            .map(|_| {
                Command::new(ADMISSION_WORKER)
                    .args(["race", home_text, go.to_str().expect("utf-8"), release.to_str().expect("utf-8")])
                    .stdout(Stdio::piped())
                    .spawn()
                    .expect("admission_worker")
            })
            .collect();
        let peers: Vec<Child> =
            (0..2).map(|_| peer(&["acquire-admission", home_text, "4000"]).env("PEER_START_AT", start_at.to_string()).stdout(Stdio::piped()).spawn().expect("node")).collect();
        std::thread::sleep(Duration::from_millis(start_at.saturating_sub(now_ms())));
        std::fs::write(&go, "").expect("go");
        // Every racer answers within the peers' hold; then the proclease winner may release.
        std::thread::sleep(Duration::from_millis(2500));
        std::fs::write(&release, "").expect("release");
        let mut winners = Vec::new();
        for child in proclease {
            let output = child.wait_with_output().expect("wait");
            let text = String::from_utf8_lossy(&output.stdout).into_owned();
            assert!(output.status.success(), "round {round}: {output:?}");
            if text.starts_with("acquired") {
                winners.push(format!("proclease {text:?}"));
            } else {
                assert!(text.contains("another export is active") || text.contains("could not be acquired safely"), "round {round}: a proclease loser was told {text:?}");
            }
        }
        for child in peers {
            let output = child.wait_with_output().expect("wait");
            let lines = json_lines(&output);
            if lines.iter().any(|l| l["event"] == "acquired") {
                winners.push(format!("peer {lines:?}"));
            } else {
                let last = lines.last().cloned().unwrap_or_default();
                assert_eq!(last["outcome"], "blocked", "round {round}: {output:?}");
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: owners {winners:?}");
        assert!(!claim.exists(), "round {round}: the winner released the admission");
    }
}

#[test]
fn the_catalog_lock_fails_fast_both_ways_and_a_killed_holder_does_not_block() {
    let dir = scratch();
    let home = dir.path().join("state");
    let home_text = home.to_str().expect("utf-8");
    let locks = home.join("provider-plugins/locks");

    // A live ghostget holder: proclease is refused at once, with the reference's message.
    let mut holder = peer(&["lock-catalog", home_text, "20000"]).stdout(Stdio::piped()).spawn().expect("node");
    await_line(&mut holder, "event", "acquired");
    let tried = Command::new(STORE_WORKER).args(["try-catalog-lock", home_text]).output().expect("store_worker");
    assert_eq!(String::from_utf8_lossy(&tried.stdout), "refused: portable plugin catalog mutation is already locked\n");
    // Killed while holding: its lock file stays, and proclease takes it over.
    kill(holder);
    assert!(locks.join(".catalog-mutation.lock").exists(), "a killed holder leaves its lock");
    let tried = Command::new(STORE_WORKER).args(["try-catalog-lock", home_text]).output().expect("store_worker");
    assert_eq!(String::from_utf8_lossy(&tried.stdout), "acquired\n");
    assert_eq!(leftovers(&locks), Vec::<String>::new(), "proclease released exactly its lock and left no claim");

    // A live proclease holder: the ghostget peer is refused at once.
    let mut holder = Command::new(STORE_WORKER).args(["hold-catalog-lock", home_text]).stdout(Stdio::piped()).spawn().expect("store_worker");
    let mut line = String::new();
    BufReader::new(holder.stdout.as_mut().expect("stdout")).read_line(&mut line).expect("read");
    assert_eq!(line, "locked\n");
    let refused = peer(&["lock-catalog", home_text, "10"]).output().expect("node");
    assert_eq!(refused.status.code(), Some(3), "{refused:?}");
    assert_eq!(outcome(&refused)["error"], "portable plugin catalog mutation is already locked");
    // Killed while holding: the peer takes the lock over.
    kill(holder);
    let taken = peer(&["lock-catalog", home_text, "10"]).output().expect("node");
    assert!(taken.status.success(), "{taken:?}");
    assert_eq!(outcome(&taken)["outcome"], "released");
    assert_eq!(leftovers(&locks), Vec::<String>::new());
}

#[test]
fn what_a_killed_ghostget_writer_leaves_proclease_recovers_and_goes_on() {
    let dir = scratch();
    let home = dir.path().join("state");
    let home_text = home.to_str().expect("utf-8");
    let host = proclease::Host::builder().state_home(&home).build().expect("host");
    let store = host.store();
    let record = "recovery/interop/record.json";
    let collection = home.join("recovery/interop");
    let mut left_behind = Vec::new();
    for step in ["write-temp", "stage-empty", "stage", "waiting", "candidate", "held", "published", "remove-quarantine"] {
        // A record to work on, written by proclease.
        let text = store.read_if_present(record, 1 << 16).expect("read");
        let text = match text {
            Some(text) => text,
            None => {
                assert!(store.create_if_absent(record, "{\"value\":0}\n").expect("create"));
                "{\"value\":0}\n".to_string()
            }
        };
        let sha = proclease::core::digest::sha256_hex(text.as_bytes());
        let args: Vec<&str> = if step == "remove-quarantine" { vec!["remove", home_text, record, &sha] } else { vec!["replace", home_text, record, "{\"value\":1}", &sha] };
        let mut writer = peer(&args).env("PEER_PAUSE_AT", step).stdout(Stdio::piped()).spawn().expect("node");
        await_line(&mut writer, "event", "paused");
        kill(writer);
        left_behind.push((step, leftovers(&collection)));
        // proclease's next write on the same record goes through, and a recovering listing
        // leaves nothing but records.
        let current = store.read_if_present(record, 1 << 16).expect("read after the kill");
        match current {
            Some(text) => {
                let sha = proclease::core::digest::sha256_hex(text.as_bytes());
                assert!(store.replace_if_unchanged(record, &sha, "{\"value\":2}\n").expect("replace"), "{step}: the dead claim blocked the write");
            }
            None => assert!(store.create_if_absent(record, "{\"value\":2}\n").expect("create"), "{step}"),
        }
        store.snapshot("recovery/interop", true).expect("a recovering listing");
        assert_eq!(leftovers(&collection), Vec::<String>::new(), "{step}: left {left_behind:?}");
    }
    // Each step really left something for proclease to recover.
    for (step, left) in &left_behind {
        assert!(!left.is_empty(), "the peer killed at {step} left nothing: {left_behind:?}");
    }

    // A remover killed between its quarantine rename and the unlink, in the directory-lease
    // collection: the reference recovers that quarantine nowhere, and would refuse every later
    // recovery of the collection; proclease removes it and recovers.
    let lease = "recovery/beeper-message-like-me-directory-leases/11111111-1111-4111-8111-111111111111.json";
    assert!(store.create_if_absent(lease, "{}\n").expect("create"));
    let sha = proclease::core::digest::sha256_hex(b"{}\n");
    let mut remover = peer(&["remove", home_text, lease, &sha]).env("PEER_PAUSE_AT", "remove-quarantine").stdout(Stdio::piped()).spawn().expect("node");
    await_line(&mut remover, "event", "paused");
    kill(remover);
    let leases = home.join("recovery/beeper-message-like-me-directory-leases");
    assert!(leftovers(&leases).iter().any(|n| n.starts_with(".io-remove-file-")), "{:?}", leftovers(&leases));
    let recovery = host.recover(proclease::core::directory_leases::Options::default()).expect("recover");
    assert!(recovery.directory_leases.stopped.is_none(), "{:?}", recovery.directory_leases);
    assert_eq!(leftovers(&leases), Vec::<String>::new());
}

#[test]
fn what_a_killed_proclease_writer_leaves_ghostget_recovers() {
    const TRIALS: usize = 30;
    let dir = scratch();
    let home = dir.path().join("state");
    let home_text = home.to_str().expect("utf-8");
    let collection = home.join("recovery/churn");
    let mut with_claims = 0;
    for trial in 0..TRIALS {
        let mut child = Command::new(STORE_WORKER).args(["churn", home_text]).stdout(Stdio::piped()).spawn().expect("spawn");
        let mut ready = String::new();
        BufReader::new(child.stdout.as_mut().expect("stdout")).read_line(&mut ready).expect("ready");
        std::thread::sleep(Duration::from_micros(1000 + (trial as u64 * 7919) % 20_000));
        kill(child);
        let left = leftovers(&collection);
        with_claims += usize::from(left.iter().any(|n| n.starts_with(".io-mutation-")));
        let recovered = peer(&["recover", home_text, "recovery/churn"]).output().expect("node");
        assert!(recovered.status.success(), "trial {trial}: {recovered:?} (left {left:?})");
        assert_eq!(outcome(&recovered)["outcome"], "recovered");
        assert_eq!(leftovers(&collection), Vec::<String>::new(), "trial {trial}: the peer could not recover {left:?}");
        // And the peer writes there again.
        let written = peer(&["create", home_text, &format!("recovery/churn/peer-{trial}.json"), "{}"]).output().expect("node");
        assert_eq!(outcome(&written)["outcome"], "created", "{written:?}");
    }
    assert!(with_claims > 0, "no kill landed while a proclease claim was on disk");
    eprintln!("{with_claims} of {TRIALS} killed proclease writers left a mutation claim; the peer recovered every one");
}

/// Issue #40 case 6: a writer queued behind another writer that is itself waiting for a stuck
/// ghostget's mutation claim names that ghostget, not only the innocent writer ahead of it. Here
/// the writer ahead is a `flock` holding the collection's kernel lock (as a proclease writer
/// does while it waits for the claim), and the claim's holder a paused peer.
#[test]
fn a_writer_queued_behind_a_waiting_writer_names_the_claim_it_waits_for() {
    let dir = scratch();
    let home = dir.path().join("state");
    let home_text = home.to_str().expect("utf-8");
    let host = proclease::Host::builder().state_home(&home).lock_timeout(Duration::from_millis(1500)).build().expect("host");
    // One write makes the collection and its lock file.
    host.acquire_admission().expect("acquire").release().expect("release");
    let collection = "recovery/beeper-message-like-me-export-admission";
    let lock_file = home.join(".proclease/locks").join(format!("{}.lock", proclease_core::digest::identity_digest("proclease-collection-lock", collection)));
    assert!(lock_file.is_file(), "the collection's lock file: {}", lock_file.display());
    let mut writer = peer(&["create", home_text, &format!("{collection}/active.json"), "{}"]).env("PEER_PAUSE_AT", "held").stdout(Stdio::piped()).spawn().expect("node");
    let paused = await_line(&mut writer, "event", "paused");
    let claim_holder = paused["pid"].as_u64().expect("the peer's pid");
    let mut ahead = Command::new("flock").arg("-o").arg(&lock_file).args(["sleep", "60"]).spawn().expect("flock");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string("/proc/locks").expect("/proc/locks").lines().any(|line| line.split_whitespace().nth(4) == Some(&ahead.id().to_string())) {
        assert!(std::time::Instant::now() < deadline, "flock never took the lock");
        std::thread::sleep(Duration::from_millis(10));
    }
    let refused = host.acquire_admission();
    let ahead_pid = ahead.id();
    let _ = ahead.kill();
    let _ = ahead.wait();
    kill(writer);
    let error = match refused {
        Err(proclease::Error::LockTimeout(timeout)) => timeout,
        other => panic!("the lock is held: {:?}", other.map(|_| "acquired")),
    };
    let text = error.to_string();
    assert_eq!(error.holder.as_ref().map(|h| h.pid as u32), Some(ahead_pid), "names the lock's holder: {text}");
    let behind = error.behind.as_deref().unwrap_or_else(|| panic!("names what the holder waits for: {text}"));
    assert_eq!((behind.holder.pid as u64, behind.holder.command.as_str()), (claim_holder, "node"), "{text}");
    assert_eq!(behind.lock, format!("the mutation claim of {collection}/active.json"), "{text}");
    assert!(text.contains(&format!(", which itself waits for pid {claim_holder} (node, ")), "{text}");
}

/// Issue #27, input 3: a ghostget that holds its mutation claim on `active.json` and does not
/// let go (stopped, or stuck) makes an admission acquire fail within the host's lock timeout —
/// in about a second with eight attempts of 125 ms, not 80 s — with an error that names the
/// holder's pid and says what to do, and with the reference's own words in it (the 8 attempts'
/// waits are told as one).
#[test]
fn a_ghostget_claim_that_stays_is_named_and_refused_within_the_bound() {
    let dir = scratch();
    let home = dir.path().join("state");
    let home_text = home.to_str().expect("utf-8");
    let mut writer = peer(&["create", home_text, "recovery/beeper-message-like-me-export-admission/active.json", "{}"])
        .env("PEER_PAUSE_AT", "held")
        .stdout(Stdio::piped())
        .spawn()
        .expect("node");
    let paused = await_line(&mut writer, "event", "paused");
    let pid = paused["pid"].as_u64().expect("the peer's pid");
    let host = proclease::Host::builder().state_home(&home).lock_timeout(Duration::from_secs(5)).build().expect("host");
    let refused = host.acquire_admission();
    let writer_pid = writer.id();
    kill(writer);
    let error = match refused {
        Err(proclease::Error::LockTimeout(timeout)) => timeout,
        other => panic!("the claim is live: {:?}", other.map(|_| "acquired")),
    };
    assert_eq!(u64::from(writer_pid), pid);
    let text = error.to_string();
    assert_eq!(error.holder.as_ref().map(|h| h.pid as u64), Some(pid), "names the claim's holder: {text}");
    assert!(error.lock.contains("the mutation claim of recovery/beeper-message-like-me-export-admission/active.json"), "{text}");
    assert!(text.contains("export admission could not be acquired after bounded contention: waited "), "keeps the reference's words: {text}");
    assert!(error.waited_ms >= 8 * 125, "the waits of the 8 attempts add up: {text}");
    assert!(text.contains("end it"), "says what to do: {text}");
    let mut admission = host.acquire_admission().expect("a dead holder's claim is removed by the next write");
    admission.release().expect("release");
}
