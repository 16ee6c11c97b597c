//! Process identity on real processes (`/proc`, `kill`): live, reaped, zombie, altered,
//! other boot, and this process itself.

use std::process::{Child, Command};
use std::time::{Duration, Instant};

use proclease::core::liveness::OwnerStatus;
use proclease::process_identity::{NOT_LIVE, PID_MALFORMED, ProcessIdentity};

fn sleeper() -> Child {
    Command::new("sleep").arg("30").spawn().expect("spawn sleep")
}

/// Waits until `/proc/<pid>/stat` shows state `Z` (killed, not reaped).
fn wait_for_zombie(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat.rsplit_once(')').map(|(_, rest)| rest.trim_start().chars().next());
        if state == Some(Some('Z')) {
            return;
        }
        assert!(Instant::now() < deadline, "pid {pid} never became a zombie: {stat}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_live_child_is_the_exact_live_owner_until_it_dies_and_is_reaped() {
    let identity = ProcessIdentity::new();
    let mut child = sleeper();
    let owner = identity.capture(u64::from(child.id())).expect("capture a live child");
    assert_eq!(owner.pid, u64::from(child.id()));
    assert_eq!(owner.boot_id, identity.current_boot_id().expect("boot id"));
    assert_eq!(identity.owner_status(&owner).expect("status"), OwnerStatus::ExactLiveOwner);
    child.kill().expect("kill");
    child.wait().expect("reap");
    assert_eq!(identity.owner_status(&owner).expect("status"), OwnerStatus::DifferentOrDead);
    assert_eq!(identity.capture(owner.pid).expect_err("gone").0, NOT_LIVE);
}

#[test]
fn a_zombie_is_dead() {
    let identity = ProcessIdentity::new();
    let mut child = sleeper();
    let owner = identity.capture(u64::from(child.id())).expect("capture");
    child.kill().expect("kill");
    wait_for_zombie(child.id());
    assert_eq!(identity.owner_status(&owner).expect("status"), OwnerStatus::DifferentOrDead);
    assert_eq!(identity.capture(owner.pid).expect_err("a zombie is not live").0, NOT_LIVE);
    child.wait().expect("reap");
}

#[test]
fn an_altered_start_id_or_another_boot_is_not_the_owner() {
    let identity = ProcessIdentity::new();
    let mut child = sleeper();
    let owner = identity.capture(u64::from(child.id())).expect("capture");
    let mut altered = owner.clone();
    altered.process_start_id = "0".repeat(64);
    assert_eq!(identity.owner_status(&altered).expect("status"), OwnerStatus::DifferentOrDead);
    let mut other_boot = owner.clone();
    other_boot.boot_id = "f".repeat(64);
    assert_eq!(identity.owner_status(&other_boot).expect("status"), OwnerStatus::DifferentOrDead);
    assert_eq!(identity.owner_status(&owner).expect("status"), OwnerStatus::ExactLiveOwner, "the real child is untouched");
    child.kill().expect("kill");
    child.wait().expect("reap");
}

#[test]
fn own_identity_is_exact_live_and_stable() {
    let identity = ProcessIdentity::new();
    let own = identity.self_identity().expect("own identity");
    assert_eq!(own.pid, u64::from(std::process::id()));
    assert_eq!(identity.capture(own.pid).expect("capture self"), own);
    assert_eq!(identity.owner_status(&own).expect("status"), OwnerStatus::ExactLiveOwner);
    let fresh = ProcessIdentity::new();
    assert_eq!(fresh.self_identity().expect("again"), own, "the start id does not change");
    // The boot id is the reference's digest of the raw boot_id file.
    let raw = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").expect("boot_id");
    assert_eq!(own.boot_id, proclease::core::digest::identity_digest("io-boot", raw.trim()));
}

#[test]
fn impossible_pids_are_malformed_or_dead() {
    let identity = ProcessIdentity::new();
    assert_eq!(identity.capture(0).expect_err("pid 0").0, PID_MALFORMED);
    assert_eq!(identity.capture(1 << 53).expect_err("beyond safe integers").0, PID_MALFORMED);
    let mut owner = identity.self_identity().expect("own");
    owner.pid = u64::from(u32::MAX) + 7; // no process can have it
    assert_eq!(identity.owner_status(&owner).expect("status"), OwnerStatus::DifferentOrDead);
}
