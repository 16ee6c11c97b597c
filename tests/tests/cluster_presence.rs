//! Presence in etcd (feature `cluster`, `docs/cluster.md`): a live owner on another machine is
//! registered until its process dies and etcd expires its lease; a lookup that cannot reach
//! etcd proves nothing; an owner cut off from etcd stops calling itself live before etcd could
//! expire it. Against a real etcd ([`Etcd`]), with a real process killed by SIGKILL.

use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use proclease::core::records::Owner;
use proclease::process_identity::ProcessIdentity;
use proclease::process_identity::cluster_presence::{PresenceSession, RemotePresence, lookup};
use proclease::state_store::StoreError;
use proclease_tests::etcd_server::Etcd;

const TTL: Duration = Duration::from_secs(2);

#[test]
fn a_killed_owner_stays_registered_until_etcd_expires_its_lease_then_is_absent() {
    let Some(etcd) = Etcd::start() else { return };
    let store = etcd.store("presence");
    let mut holder = Command::new(env!("CARGO_BIN_EXE_presence_holder"))
        .args([&etcd.url("presence"), &TTL.as_secs().to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .expect("holder starts");
    let mut line = String::new();
    BufReader::new(holder.stdout.take().expect("stdout")).read_line(&mut line).expect("identity line");
    let fields: Vec<&str> = line.split_whitespace().collect();
    let [pid, boot_id, start_id] = fields.as_slice() else { panic!("holder printed {line:?}") };
    let owner = Owner { pid: pid.parse().expect("pid"), boot_id: (*boot_id).into(), process_start_id: (*start_id).into() };
    assert_eq!(lookup(&store, &owner), RemotePresence::Registered);

    // Renewals keep it registered past its TTL while it lives.
    std::thread::sleep(TTL + TTL / 2);
    assert_eq!(lookup(&store, &owner), RemotePresence::Registered, "renewed while alive");

    holder.kill().expect("SIGKILL");
    holder.wait().expect("reaped");
    // Its lease was renewed at most a third of the TTL ago: still registered right after the kill
    // (no other machine may take over before the TTL).
    assert_eq!(lookup(&store, &owner), RemotePresence::Registered, "not absent before the TTL");
    let deadline = Instant::now() + TTL * 5;
    while lookup(&store, &owner) == RemotePresence::Registered {
        assert!(Instant::now() < deadline, "etcd never expired the dead owner's presence");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(lookup(&store, &owner), RemotePresence::Absent);
    // Another identity (the pid reused by a new process: another start id) was never registered.
    let reused = Owner { process_start_id: "0".repeat(64), ..owner };
    assert_eq!(lookup(&store, &reused), RemotePresence::Absent);
}

#[test]
fn a_session_cut_off_from_etcd_stops_calling_itself_live_before_its_lease_can_expire() {
    let Some(etcd) = Etcd::start() else { return };
    let store = Arc::new(etcd.store("fencing"));
    let own = ProcessIdentity::new().self_identity().expect("own identity");
    let session = PresenceSession::open(store.clone(), &own, TTL).expect("registered");
    assert!(session.is_live());
    let error = PresenceSession::open(store.clone(), &own, TTL).err().expect("one session per identity");
    assert!(matches!(error, StoreError::Unsafe { .. }), "{error}");

    etcd.signal("-STOP");
    // etcd cannot expire the lease before a TTL after the last renewal it received, which was
    // sent no earlier than the last one acknowledged: by then the session must say it is lost.
    std::thread::sleep(TTL);
    let live = session.is_live();
    // A lookup that cannot reach etcd proves nothing either way.
    let seen = lookup(&store, &own);
    etcd.signal("-CONT");
    assert!(!live, "still claimed live a TTL after etcd stopped answering");
    assert_eq!(seen, RemotePresence::Unreachable);
}

#[test]
fn dropping_a_session_revokes_its_presence_at_once() {
    let Some(etcd) = Etcd::start() else { return };
    let store = Arc::new(etcd.store("revoke"));
    let own = ProcessIdentity::new().self_identity().expect("own identity");
    let session = PresenceSession::open(store.clone(), &own, TTL).expect("registered");
    assert_eq!(lookup(&store, &own), RemotePresence::Registered);
    drop(session);
    assert_eq!(lookup(&store, &own), RemotePresence::Absent, "revoked, not left to expire");
}
