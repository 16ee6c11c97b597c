//! Presence in etcd (feature `cluster`, `docs/cluster.md`): a live owner on another machine is
//! registered until its process dies and etcd expires its lease; a lookup that cannot reach
//! etcd proves nothing; an owner cut off from etcd stops calling itself live before etcd could
//! expire it. Against a real etcd ([`Etcd`]), with a real process killed by SIGKILL.

use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use proclease::cluster::presence::{self, EtcdPresence, PresenceSession, RemotePresence, lookup};
use proclease::core::admission::CLAIM_PATH;
use proclease::core::records::Owner;
use proclease::core::records::export_admission::{ExportAdmission, Phase, Schema};
use proclease::effects::Effects;
use proclease::process_identity::{ProcessIdentity, SharedProcesses};
use proclease::state_store::StoreError;
use proclease::state_store::etcd::{EtcdStore, SharedEtcdStore};
use proclease::{Admission, Runtime};
use proclease_tests::etcd_server::{self, Etcd};

const TTL: Duration = Duration::from_secs(2);

/// Starts `presence_holder` registered on `prefix` (as a process of machine `boot_id` when
/// given): the child and the identity it registered.
fn holder(etcd: &Etcd, prefix: &str, boot_id: Option<&str>) -> (std::process::Child, Owner) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_presence_holder"));
    command.args([&etcd.url(prefix), &TTL.as_secs().to_string()]).args(boot_id).stdout(Stdio::piped());
    let mut child = command.spawn().expect("holder starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("identity line");
    let fields: Vec<&str> = line.split_whitespace().collect();
    let [pid, boot_id, start_id] = fields.as_slice() else { panic!("holder printed {line:?}") };
    let owner = Owner { pid: pid.parse().expect("pid"), boot_id: (*boot_id).into(), process_start_id: (*start_id).into() };
    (child, owner)
}

/// A store on `prefix` and this process's identity, registered there.
fn registered_here(etcd: &Etcd, prefix: &str) -> (Arc<EtcdStore>, Owner, PresenceSession) {
    let store = Arc::new(etcd.store(prefix));
    let own = ProcessIdentity::new().self_identity().expect("own identity");
    let session = PresenceSession::open(store.clone(), &own, TTL).expect("registered");
    (store, own, session)
}

#[test]
fn a_killed_owner_stays_registered_until_etcd_expires_its_lease_then_is_absent() {
    let Some(etcd) = Etcd::start() else { return };
    let store = etcd.store("presence");
    let (mut holder, owner) = holder(&etcd, "presence", None);
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
    let (store, own, session) = registered_here(&etcd, "fencing");
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
    let (store, own, session) = registered_here(&etcd, "revoke");
    assert_eq!(lookup(&store, &own), RemotePresence::Registered);
    drop(session);
    assert_eq!(lookup(&store, &own), RemotePresence::Absent, "revoked, not left to expire");
    // Gone is final: the identity cannot register again (a verdict of "gone" never turns back).
    let error = PresenceSession::open(store.clone(), &own, TTL).err().expect("registers once");
    assert!(error.to_string().contains("registered its presence before"), "{error}");
    assert_eq!(lookup(&store, &own), RemotePresence::Absent);
}

/// Issue #28, input 4: a process ends its session at once, not once the renewal thread wakes
/// up (it slept up to a third of the TTL: every `run` on etcd took ~3.4 s at the default TTL).
/// With a 60 s TTL the renewal thread sleeps 20 s between renewals; the drop must not wait for it.
#[test]
fn dropping_a_session_does_not_wait_for_the_next_renewal() {
    if !etcd_server::etcdctl_installed() {
        return;
    }
    let Some(etcd) = Etcd::start() else { return };
    let store = Arc::new(etcd.store("prompt-exit"));
    let own = ProcessIdentity::new().self_identity().expect("own identity");
    let ttl = Duration::from_secs(60);
    // A new prefix's first presence waits out the grace of its epoch, one TTL: start the epoch
    // with a short one, so that this session does not wait a minute, then record the TTL of 60 s
    // as the epoch's (a process whose TTL differs from the epoch's takes no part).
    presence::await_epoch(&store, Duration::from_secs(2)).expect("epoch");
    let endpoint = format!("127.0.0.1:{}", etcd.client_port);
    let put = Command::new("etcdctl").env("ETCDCTL_API", "3").args(["--endpoints", &endpoint, "put", "/prompt-exit/epoch-ttl", "60"]).output().expect("etcdctl");
    assert!(put.status.success(), "{put:?}");
    let session = PresenceSession::open(store.clone(), &own, ttl).expect("registered");
    // Let the renewal thread send its first renewal and go to sleep.
    std::thread::sleep(Duration::from_millis(300));
    let start = Instant::now();
    drop(session);
    let took = start.elapsed();
    assert!(took < ttl / 3, "the drop waited for the renewal thread's sleep: {took:?}");
    assert_eq!(lookup(&store, &own), RemotePresence::Absent, "revoked");
}

/// The effects of a process on this machine whose state store is `store` and which judges
/// processes of other boot ids by their presence in it (with `registry`), or as a previous
/// boot's (without: the reference's rule).
fn effects(store: &Arc<EtcdStore>, registry: bool) -> Effects {
    let mut identity = ProcessIdentity::new();
    if registry {
        identity = identity.with_presence_registry(Arc::new(EtcdPresence(store.clone())));
    }
    let processes = Arc::new(identity);
    Effects { store: Box::new(SharedEtcdStore(store.clone())), processes: Box::new(SharedProcesses(processes.clone())), ..Effects::native(None, processes) }
}

/// An export admission held by `owner`, in `store`.
fn admission_held_by(store: &EtcdStore, owner: &Owner) {
    let claim = ExportAdmission {
        schema: Schema::V2,
        id: "11111111-1111-4111-8111-111111111111".into(),
        owner: owner.clone(),
        helper_owner: None,
        phase: Some(Phase::ParentOwned),
        revision: Some("22222222-2222-4222-a222-222222222222".into()),
    };
    assert!(store.create_if_absent(CLAIM_PATH, &claim.parsed().canonical).expect("claim written"));
}

#[test]
fn an_admission_held_on_another_machine_is_taken_over_only_once_its_owner_s_presence_expired() {
    let Some(etcd) = Etcd::start() else { return };
    let runtime = Runtime::shared().expect("component");
    let other_machine = "c".repeat(64);
    let store = Arc::new(etcd.store("fleet"));
    let (mut remote, owner) = holder(&etcd, "fleet", Some(&other_machine));
    assert_eq!(owner.boot_id, other_machine);
    admission_held_by(&store, &owner);

    // Judged by its presence: alive on its machine, so the admission is refused.
    let error = Admission::acquire(runtime, effects(&store, true)).err().expect("refused while the remote owner lives");
    assert!(error.to_string().contains("another export is active"), "{error}");

    // (Without the registry, the reference's rule would read the other boot id as a previous
    // boot and take the live owner's admission at once: what cluster mode exists to prevent.)
    let lone = Arc::new(etcd.store("fleet-without-registry"));
    admission_held_by(&lone, &owner);
    Admission::acquire(runtime, effects(&lone, false)).expect("taken over: other boot = dead").release().expect("released");

    remote.kill().expect("SIGKILL");
    remote.wait().expect("reaped");
    let error = Admission::acquire(runtime, effects(&store, true)).err().expect("not before the TTL");
    assert!(error.to_string().contains("another export is active"), "{error}");
    let deadline = Instant::now() + TTL * 5;
    let mut taken = loop {
        match Admission::acquire(runtime, effects(&store, true)) {
            Ok(admission) => break admission,
            Err(error) => {
                assert!(error.to_string().contains("another export is active"), "{error}");
                assert!(Instant::now() < deadline, "never taken over after the owner's presence expired");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    };
    assert_eq!(lookup(&store, &owner), RemotePresence::Absent);
    taken.release().expect("released");
}

#[test]
fn an_owner_whose_presence_is_gone_can_no_longer_write() {
    let Some(etcd) = Etcd::start() else { return };
    let (store, _, session) = registered_here(&etcd, "fenced");
    session.fence(&store);
    let record = "recovery/things/a.json";
    assert!(store.create_if_absent(record, "one\n").expect("a live owner writes"));
    assert!(store.replace_if_unchanged(record, &proclease::core::digest::sha256_hex(b"one\n"), "two\n").expect("and replaces"));
    drop(session); // the lease is revoked, as etcd expires it when renewals stop
    let error = store.replace_if_unchanged(record, &proclease::core::digest::sha256_hex(b"two\n"), "three\n").expect_err("fenced");
    assert!(matches!(error, StoreError::Unsafe { .. }), "{error}");
    assert!(error.to_string().contains("cluster presence (its etcd lease) is gone"), "{error}");
    let error = store.create_if_absent("recovery/things/b.json", "new\n").expect_err("fenced");
    assert!(error.to_string().contains("may no longer write"), "{error}");
    assert_eq!(store.read_if_present(record, 64).expect("read").as_deref(), Some("two\n"), "nothing changed");
    assert_eq!(store.read_if_present("recovery/things/b.json", 64).expect("read"), None);
}

/// Hosts of one process on one cluster prefix share its presence (an identity registers once):
/// the second host's first write neither fails nor registers again, a host built after both
/// were dropped still writes under it, and `end_presence` revokes it.
#[test]
fn hosts_of_one_process_share_its_presence_until_it_ends() {
    let Some(etcd) = Etcd::start() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let host = |name: &str| {
        proclease::Host::builder().state_home(dir.path().join(name)).workspace_root(dir.path()).store(etcd.url("shared")).cluster_ttl(TTL).build().expect("a cluster host")
    };
    let (first, second) = (host("first"), host("second"));
    let mut admission = first.acquire_admission().expect("acquired through etcd");
    let blocked = second.acquire_admission().err().and_then(|e| e.lease_code());
    assert_eq!(blocked, Some(proclease::core::LeaseCode::AnotherExportIsActive), "one admission for both hosts");
    admission.release().expect("released");
    drop(admission); // an admission's instance holds its host's cluster, and so the session
    let mut admission = second.acquire_admission().expect("the second host writes under the same presence");
    admission.release().expect("released");
    drop(admission);

    let own = first.process_identity().self_identity().expect("own identity");
    let store = etcd.store("shared");
    drop((first, second));
    assert_eq!(lookup(&store, &own), RemotePresence::Registered, "the process's presence outlives its hosts");
    let third = host("third");
    let mut admission = third.acquire_admission().expect("a later host of the process writes under the same presence");
    admission.release().expect("released");
    drop((admission, third));
    proclease::cluster::end_presence();
    assert_eq!(lookup(&store, &own), RemotePresence::Absent, "revoked when the process ends it");
}

/// Issue #28, input 1: with one of three members dead (quorum kept), a presence lookup still
/// knows — a read the client sent to the dead member is made again to one that answers — and a
/// session's renewals go on past several TTLs. Before, one lookup in three came back
/// `Unreachable` and an exclusive run was refused as `prior export owner cannot be inspected
/// safely`.
#[test]
fn a_member_s_death_leaves_presences_known_and_renewed() {
    let Some(mut cluster) = proclease_tests::etcd_server::EtcdCluster::start(3) else { return };
    let store = Arc::new(cluster.store("presence"));
    presence::await_epoch(&store, TTL).expect("the prefix's epoch");
    let own = ProcessIdentity::new().self_identity().expect("own identity");
    let session = PresenceSession::open(store.clone(), &own, TTL).expect("registered");
    let gone = Owner { pid: own.pid, boot_id: own.boot_id.clone(), process_start_id: "never-registered".into() };
    let leader = cluster.leader().expect("a leader");
    cluster.kill(leader);
    let until = Instant::now() + 3 * TTL;
    let mut lookups = 0;
    while Instant::now() < until {
        assert_eq!(lookup(&store, &own), RemotePresence::Registered, "lookup {lookups} after the leader's death");
        assert_eq!(lookup(&store, &gone), RemotePresence::Absent, "lookup {lookups} after the leader's death");
        lookups += 1;
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(session.is_live(), "the session renewed through the election (silence {:?})", session.silence());
    assert!(lookups > 10);
}
