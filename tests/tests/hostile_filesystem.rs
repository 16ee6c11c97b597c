//! Hostile filesystems (issue #9 item 5), beyond the static cases of `state_store.rs` and
//! `workspace.rs`: symbolic links swapped in *while* operations run (record, collection, staging
//! directory, state home), permission changes, oversized and non-UTF-8 files and names, and
//! collections past their bounds. Nothing outside the state home is read, written or deleted;
//! every refusal is a typed error that names the path; the bounds hold.

use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::{PermissionsExt as _, symlink};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use proclease::core::digest::sha256_hex;
use proclease::process_identity::ProcessIdentity;
use proclease::state_home::StateHome;
use proclease::state_store::{BatchInvalid, BatchStatus, StateStore, StoreError};

struct Fixture {
    dir: tempfile::TempDir,
    home: PathBuf,
    store: Arc<StateStore>,
    /// A directory outside the state home that must never change.
    decoy: PathBuf,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path().join("state");
    let store = Arc::new(StateStore::open(StateHome::open(&home).expect("home"), Arc::new(ProcessIdentity::new())).expect("store"));
    let decoy = dir.path().join("decoy");
    std::fs::create_dir(&decoy).expect("mkdir");
    std::fs::set_permissions(&decoy, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let precious = decoy.join("a.json");
    std::fs::write(&precious, "precious\n").expect("write");
    std::fs::set_permissions(&precious, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    Fixture { dir, home, store, decoy }
}

fn decoy_untouched(f: &Fixture) {
    let names: Vec<_> = std::fs::read_dir(&f.decoy).expect("list").map(|e| e.expect("entry").file_name()).collect();
    assert_eq!(names, vec![std::ffi::OsString::from("a.json")], "something was written outside the state home");
    assert_eq!(std::fs::read_to_string(f.decoy.join("a.json")).expect("read"), "precious\n");
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// An attacker thread that keeps swapping `victim` between the real directory and a symbolic
/// link to `target`, until stopped, counting its swaps in `swaps`.
fn swapper(victim: PathBuf, target: PathBuf, stop: Arc<AtomicBool>, swaps: Arc<AtomicU64>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let aside = victim.with_extension("aside");
        while !stop.load(Ordering::Relaxed) {
            if std::fs::rename(&victim, &aside).is_ok() {
                let _ = symlink(&target, &victim);
                std::thread::yield_now();
                let _ = std::fs::remove_file(&victim);
                let _ = std::fs::rename(&aside, &victim);
                swaps.fetch_add(1, Ordering::Relaxed);
            }
        }
    })
}

/// Whether the operations should go on: at least `rounds` rounds, and — however the scheduler
/// shares the cores between the attacker and the operations — until the attacker swapped at
/// least 200 times (at most ten times the rounds).
fn keep_going(round: usize, rounds: usize, swaps: &AtomicU64) -> bool {
    round < rounds || (swaps.load(Ordering::Relaxed) < 200 && round < rounds * 10)
}

#[test]
fn a_collection_swapped_for_a_symlink_during_operations_never_leads_outside() {
    let f = fixture();
    let collection = f.home.join("recovery/things");
    f.store.ensure_private_directory("recovery/things").expect("ensure");
    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicU64::new(0));
    let attacker = swapper(collection.clone(), f.decoy.clone(), stop.clone(), swaps.clone());
    let (mut done, mut refused) = (0, 0);
    let precious = sha256_hex(b"precious\n");
    let mut round = 0;
    while keep_going(round, 3000, &swaps) {
        round += 1;
        let name = format!("recovery/things/r{}.json", round % 7);
        let results = [
            f.store.create_if_absent(&name, "{\"v\":1}\n").map(|_| ()),
            f.store.replace_if_unchanged(&name, &sha256_hex(b"{\"v\":1}\n"), "{\"v\":2}\n").map(|_| ()),
            f.store.read_if_present("recovery/things/a.json", 1024).map(|_| ()),
            f.store.replace_if_unchanged("recovery/things/a.json", &precious, "evil\n").map(|_| ()),
            f.store.remove_if_unchanged("recovery/things/a.json", &precious).map(|_| ()),
            f.store.snapshot("recovery/things", true).map(|_| ()),
            f.store.remove_if_unchanged(&name, &sha256_hex(b"{\"v\":2}\n")).map(|_| ()),
        ];
        for result in results {
            match result {
                Ok(()) => done += 1,
                Err(StoreError::Unsafe { path, .. } | StoreError::Io { path, .. }) => {
                    assert!(path.starts_with("recovery/things"), "the error names the path: {path}");
                    refused += 1;
                }
                Err(other) => panic!("unexpected error: {other}"),
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    attacker.join().expect("attacker");
    let swaps = swaps.load(Ordering::Relaxed);
    assert!(swaps > 100 && refused > 0 && done > 0, "the race happened: {swaps} swaps, {refused} refused, {done} done");
    decoy_untouched(&f);
    // Whatever landed in the real collection is complete.
    for entry in std::fs::read_dir(&collection).expect("list") {
        let text = std::fs::read_to_string(entry.expect("entry").path()).expect("read");
        assert!(text == "{\"v\":1}\n" || text == "{\"v\":2}\n", "torn or foreign record: {text:?}");
    }
}

#[test]
fn a_record_swapped_for_a_symlink_during_operations_is_never_followed() {
    let f = fixture();
    let record = "recovery/things/r.json";
    assert!(f.store.create_if_absent(record, "{\"v\":1}\n").expect("create"));
    let path = f.home.join(record);
    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicU64::new(0));
    let attacker = swapper(path.clone(), f.decoy.join("a.json"), stop.clone(), swaps.clone());
    let precious = sha256_hex(b"precious\n");
    let mut text_seen = 0;
    let mut round = 0;
    while keep_going(round, 5000, &swaps) {
        round += 1;
        match f.store.read_if_present(record, 1024) {
            Ok(Some(text)) => {
                assert_ne!(text, "precious\n", "read through the symbolic link");
                text_seen += 1;
            }
            Ok(None) | Err(StoreError::Unsafe { .. }) => {}
            Err(other) => panic!("unexpected error: {other}"),
        }
        // A compare-and-swap expecting the decoy's bytes must never touch the decoy.
        let _ = f.store.replace_if_unchanged(record, &precious, "evil\n");
        let _ = f.store.remove_if_unchanged(record, &precious);
    }
    stop.store(true, Ordering::Relaxed);
    attacker.join().expect("attacker");
    assert!(swaps.load(Ordering::Relaxed) > 100, "the race happened: {} swaps", swaps.load(Ordering::Relaxed));
    assert!(text_seen > 0);
    decoy_untouched(&f);
}

#[test]
fn staging_and_state_home_swapped_while_open_change_nothing_outside() {
    let f = fixture();
    // The store holds its directories open: swapping their paths redirects nothing.
    let staging = f.home.join(".proclease/staging");
    std::fs::rename(&staging, f.home.join(".proclease/staging-real")).expect("move staging");
    symlink(&f.decoy, &staging).expect("plant");
    let home_aside = f.dir.path().join("state-real");
    std::fs::rename(&f.home, &home_aside).expect("move home");
    symlink(&f.decoy, &f.home).expect("plant");
    assert!(f.store.create_if_absent("recovery/things/a.json", "{\"v\":1}\n").expect("create in the real home"));
    assert_eq!(std::fs::read_to_string(home_aside.join("recovery/things/a.json")).expect("in the real home"), "{\"v\":1}\n");
    decoy_untouched(&f);
    // Opening through the planted link is refused.
    let error = StateHome::open(&f.home).expect_err("a symlinked home");
    assert!(error.to_string().contains("symbolic link"), "{error}");
}

#[test]
fn permission_changes_are_refused_with_what_to_do_and_accepted_once_fixed() {
    let f = fixture();
    let record = "recovery/things/a.json";
    assert!(f.store.create_if_absent(record, "{\"v\":1}\n").expect("create"));
    let sha = sha256_hex(b"{\"v\":1}\n");
    let collection = f.home.join("recovery/things");
    chmod(&collection, 0o755);
    let error = f.store.replace_if_unchanged(record, &sha, "{\"v\":2}\n").expect_err("a group-readable collection");
    assert!(matches!(error, StoreError::Unsafe { .. }) && error.to_string().contains("chmod 700"), "{error}");
    chmod(&collection, 0o700);
    chmod(&f.home.join(record), 0o644);
    let error = f.store.read_if_present(record, 1024).expect_err("a world-readable record");
    assert!(error.to_string().contains("expected mode 0600"), "{error}");
    assert!(matches!(f.store.replace_if_unchanged(record, &sha, "{\"v\":2}\n"), Err(StoreError::Unsafe { .. })));
    assert_eq!(std::fs::read_to_string(f.home.join(record)).expect("unchanged"), "{\"v\":1}\n");
    chmod(&f.home.join(record), 0o600);
    assert!(f.store.replace_if_unchanged(record, &sha, "{\"v\":2}\n").expect("accepted once fixed"));
}

#[test]
fn oversized_and_non_utf8_files_and_names_are_typed_errors() {
    let f = fixture();
    f.store.ensure_private_directory("recovery/things").expect("ensure");
    let collection = f.home.join("recovery/things");
    // Oversized: bounded reads, never loaded whole.
    let big = collection.join("big.json");
    std::fs::write(&big, vec![b' '; 3 << 20]).expect("write");
    chmod(&big, 0o600);
    let error = f.store.read_if_present("recovery/things/big.json", 16_384).expect_err("oversized");
    assert!(error.to_string().contains("larger than 16384 bytes"), "{error}");
    assert!(f.store.create_if_absent("recovery/things/new.json", &" ".repeat(3 << 20)).is_err(), "an oversized write is refused");
    assert!(!collection.join("new.json").exists());
    // Not UTF-8.
    let odd = collection.join("odd.json");
    std::fs::write(&odd, b"{\"v\":\"\xff\"}\n").expect("write");
    chmod(&odd, 0o600);
    let error = f.store.read_if_present("recovery/things/odd.json", 1024).expect_err("not UTF-8");
    assert!(error.to_string().contains("not valid UTF-8"), "{error}");
    let snapshot = f.store.snapshot("recovery/things", false).expect("snapshot").expect("present");
    let names = vec!["big.json".to_string(), "odd.json".to_string()];
    let batch = f.store.read_batch("recovery/things", &names, 16_384, 1 << 20, &snapshot.identity).expect("batch");
    assert_eq!(batch[0].1, BatchStatus::Invalid(BatchInvalid::FileByteBound));
    assert_eq!(batch[1].1, BatchStatus::Invalid(BatchInvalid::InvalidUtf8));
    // A name that is not UTF-8 makes the listing refuse, naming it.
    std::fs::write(collection.join(std::ffi::OsStr::from_bytes(b"bad\xffname")), "x").expect("write");
    let error = f.store.snapshot("recovery/things", false).expect_err("unsafe name");
    assert!(error.to_string().contains(r#"unsafe entry name ("bad\xffname")"#), "{error}");
}

#[test]
fn a_collection_past_ten_thousand_entries_is_refused_not_listed() {
    let f = fixture();
    f.store.ensure_private_directory("recovery/things").expect("ensure");
    let collection = f.home.join("recovery/things");
    for i in 0..10_000 {
        std::fs::File::create(collection.join(format!("{i:05}.json"))).expect("file");
    }
    let snapshot = f.store.snapshot("recovery/things", false).expect("10,000 is within the bound").expect("present");
    assert_eq!(snapshot.entries.len(), 10_000);
    std::fs::File::create(collection.join("10000.json")).expect("file");
    let error = f.store.snapshot("recovery/things", false).expect_err("10,001 is past the bound");
    assert!(error.to_string().contains("more than 10000 entries"), "{error}");
    // A batch is bounded to 1,000 names.
    let names: Vec<String> = (0..1_001).map(|i| format!("{i:05}.json")).collect();
    let error = f.store.read_batch("recovery/things", &names, 1024, 1 << 20, &snapshot.identity).expect_err("1,001 names");
    assert!(error.to_string().contains("private state batch file count is invalid"), "{error}");
}
