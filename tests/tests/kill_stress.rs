//! Real `kill -9` stress (issue #9 item 3), the CI-sized run: 4 worker processes doing random
//! lease operations of all three kinds on one real state home, 500 SIGKILLs at random instants,
//! then the invariants checked on the real disk (`src/bin/lease_stress.rs` says which). The
//! 10,000-kill run is `bench/stress.sh`.

use std::process::Command;

const STRESS: &str = env!("CARGO_BIN_EXE_lease_stress");

fn summary_number(summary: &str, before: &str) -> u64 {
    let at = summary.find(before).unwrap_or_else(|| panic!("{before:?} in {summary}"));
    summary[..at].trim_end().rsplit([' ', ':']).next().and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("a number before {before:?} in {summary}"))
}

#[test]
fn five_hundred_kills_leave_only_recoverable_state() {
    let dir = tempfile::tempdir().expect("tempdir");
    let output = Command::new(STRESS)
        // Pauses of up to 150 ms between kills (75 ms on average, about 300 ms of life per
        // worker): every mutation takes its mutation claim (a few fsyncs), and the workers must
        // still get far enough to release directories between kills.
        .args(["run", "--workers", "4", "--kills", "500", "--max-pause-ms", "150", "--dir"])
        .arg(dir.path())
        .output()
        .expect("run lease_stress");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "lease_stress failed:\n{stdout}\n{stderr}");
    println!("{stdout}");
    assert!(stdout.contains("500 kills of 4 workers") && stdout.ends_with("; 0 violations\n"), "{stdout}");
    // The workers did real work of every kind between the kills.
    for kind in ["admissions", "directory leases,", "invocation leases,", "recoveries"] {
        assert!(summary_number(&stdout, kind) > 20, "too few {kind}: {stdout}");
    }
    assert!(summary_number(&stdout, "released directories kept intact") > 20, "too few released directories checked: {stdout}");
    assert!(stdout.contains(", 0 unleased empty directories;"), "a crash between mkdir and lease left litter: {stdout}");
}

#[test]
fn the_checks_find_a_deleted_released_directory() {
    // Kills land at random instants and a worker releases only its third directory lease, so a
    // worker must live long enough to release one: long pauses between kills (about 1 s of life
    // per worker), and a fresh run in the rare case that no release happened anyway.
    let (dir, released) = (0..5)
        .find_map(|_| {
            let dir = tempfile::tempdir().expect("tempdir");
            let status = Command::new(STRESS).args(["run", "--kills", "24", "--max-pause-ms", "500", "--dir"]).arg(dir.path()).output().expect("run");
            let stdout = String::from_utf8_lossy(&status.stdout);
            assert!(status.status.success(), "{stdout}");
            let released = std::fs::read_to_string(dir.path().join("released.log")).unwrap_or_default();
            (!released.is_empty()).then_some((dir, released))
        })
        .expect("some worker released a directory in five runs");
    let victim = released.lines().next().expect("at least one released directory");
    std::fs::remove_dir_all(victim).expect("delete a released directory");
    let output = Command::new(STRESS).arg("check").arg(dir.path()).output().expect("check");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains(&format!("VIOLATION: {victim}: a released directory (its owner's kept result) was deleted")), "{stdout}");
}

#[test]
fn the_checks_find_a_torn_record() {
    let dir = tempfile::tempdir().expect("tempdir");
    let status = Command::new(STRESS).args(["run", "--kills", "0", "--dir"]).arg(dir.path()).output().expect("run");
    assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stdout));
    // A torn directory lease (a prefix of a record) planted as if a write had been cut short.
    let leases = dir.path().join("state/recovery/beeper-message-like-me-directory-leases");
    std::fs::create_dir_all(&leases).expect("collection");
    let torn = leases.join("00000000-0000-4000-8000-000000000001.json");
    std::fs::write(&torn, "{\"childOwner\":null,\"createdAtMs\":17").expect("plant");
    std::fs::set_permissions(&torn, std::os::unix::fs::PermissionsExt::from_mode(0o600)).expect("chmod");
    let output = Command::new(STRESS).arg("check").arg(dir.path()).output().expect("check");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("VIOLATION: directory lease 00000000-0000-4000-8000-000000000001.json:"), "{stdout}");
    assert!(stdout.contains("VIOLATION: recovery failed:"), "{stdout}");
}
