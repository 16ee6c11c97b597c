//! Presence of process identities in an etcd cluster (feature `cluster`; `docs/cluster.md`,
//! "Liveness across machines"): how an owner on one machine proves to the others that it is
//! alive, the way etcd's `concurrency.Session` does.
//!
//! An owner opens a [`PresenceSession`]: an etcd lease with a TTL, and its presence key
//! `P/presence/<boot id>/<pid>-<process start id>` attached to it. A background thread renews
//! the lease every third of the TTL. While the key exists the owner is [`RemotePresence::Registered`];
//! once etcd has expired or revoked the lease (no renewal reached it for a TTL: the owner died,
//! or was cut off from etcd) the key is gone and the owner is [`RemotePresence::Absent`]; when
//! etcd cannot be read the answer is [`RemotePresence::Unreachable`], which proves nothing.
//!
//! **Self-fencing.** An owner cut off from etcd must stop acting before another machine may
//! see it absent. [`PresenceSession::is_live`] turns false once no renewal was acknowledged for
//! three quarters of the TTL, counted from when that renewal was *sent* on this machine's
//! `CLOCK_BOOTTIME` (which, unlike the monotonic clock, counts time the machine spent
//! suspended) — before etcd, which counts the TTL from when it *received* the last renewal, can
//! expire the lease (client-go's `renewDeadline < leaseDuration`). Nothing on this machine can
//! fence a process that is itself stopped (SIGSTOP, a debugger, a frozen cgroup) past the TTL:
//! when it resumes, [`PresenceSession::silence`] tells how long it was gone.
//!
//! **Lost cluster state.** etcd's data can be wiped (a member started again on an empty data
//! directory) or restored from an older backup while owners act. Two rules keep that from
//! letting two owners act at once:
//! - A session remembers the cluster id, the highest revision etcd answered with and the epoch
//!   it registered in; a renewal answered by another cluster, with a lower revision, or saying
//!   the lease does not exist, or an epoch changed since, makes the session lost at once
//!   ([`PresenceSession::lost`]), and its supervisor kills its command without a grace.
//! - No process registers before the prefix's epoch is settled ([`super::epoch`]): a new,
//!   wiped or restored state starts a new epoch with a grace of one TTL, during which no
//!   presence registers — so none takes a lease — while every owner of before finds out.
//!
//! A [`ProcessIdentity`](crate::process_identity::ProcessIdentity) given an [`EtcdPresence`] reports the lookup as
//! the `remote` fact of every probe of a process recorded on another boot id, and the component
//! judges it (`core::liveness::judge`): registered → alive, absent → gone, unreachable → unknown.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};
use proclease_core::records::Owner;

pub use super::epoch::{Epoch, EpochState, await_epoch, epoch_key, epoch_state, grace_key};
use super::self_fencing::{self, Standing};
use crate::process_identity::dead_man::{DeadMan, boottime};
use crate::state_store::StoreError;
use crate::state_store::etcd::{EtcdStore, TIMEOUT};

pub use proclease_core::liveness::RemotePresence;

/// The presence registry of one etcd store, for [`ProcessIdentity::with_presence_registry`](crate::process_identity::ProcessIdentity::with_presence_registry).
#[derive(Debug)]
pub struct EtcdPresence(pub Arc<EtcdStore>);

impl crate::process_identity::PresenceRegistry for EtcdPresence {
    fn lookup(&self, owner: &Owner) -> RemotePresence {
        lookup(&self.0, owner)
    }

    fn lookup_same_boot(&self, owner: &Owner) -> RemotePresence {
        lookup_same_boot(&self.0, owner)
    }
}

/// The presence key of `owner` under the store's prefix.
pub fn presence_key(store: &EtcdStore, owner: &Owner) -> String {
    format!("{}/presence/{}/{}-{}", store.prefix(), owner.boot_id, owner.pid, owner.process_start_id)
}

/// The key recording that `owner` registered once (never removed by proclease: it keeps a
/// presence from coming back after it lapsed).
fn history_key(store: &EtcdStore, owner: &Owner) -> String {
    format!("{}/presence-history/{}/{}-{}", store.prefix(), owner.boot_id, owner.pid, owner.process_start_id)
}

/// Reads `owner`'s presence (a linearizable read: it sees every registration and expiry etcd
/// has committed). A read that a member could not serve (it is down, or lost its leader) is
/// made again, to a member that answers, within the store's bound (`EtcdStore::run`): one
/// member's death, quorum kept, leaves the presence known.
pub fn lookup(store: &EtcdStore, owner: &Owner) -> RemotePresence {
    let key = presence_key(store, owner);
    let read = store.run(&key, "checking the cluster presence", || {
        let (mut kv, key) = (store.client().kv_client(), key.clone());
        async move { kv.get(key, None).await }
    });
    match read {
        Ok(response) if response.kvs().is_empty() => RemotePresence::Absent,
        Ok(_) => RemotePresence::Registered,
        Err(_) => RemotePresence::Unreachable,
    }
}

/// Reads `owner`'s presence and whether it ever registered, at one revision:
/// [`RemotePresence::NotClustered`] when it never did (a process of this boot id that is not in
/// the cluster: this machine's own proof decides), else registered / absent, or unreachable.
pub fn lookup_same_boot(store: &EtcdStore, owner: &Owner) -> RemotePresence {
    let key = presence_key(store, owner);
    let txn = Txn::new().and_then([TxnOp::get(key.clone(), None), TxnOp::get(history_key(store, owner), None)]);
    let found = |response: &etcd_client::TxnOpResponse| matches!(response, etcd_client::TxnOpResponse::Get(get) if !get.kvs().is_empty());
    // A read-only transaction: made again after a member's failure, as in `lookup`.
    let read = store.run(&key, "checking the cluster presence", || {
        let (mut kv, txn) = (store.client().kv_client(), txn.clone());
        async move { kv.txn(txn).await }
    });
    match read {
        Ok(response) => match response.op_responses().as_slice() {
            [presence, _] if found(presence) => RemotePresence::Registered,
            [_, history] if found(history) => RemotePresence::Absent,
            [_, _] => RemotePresence::NotClustered,
            _ => RemotePresence::Unreachable,
        },
        Err(_) => RemotePresence::Unreachable,
    }
}

/// This machine's host name (`/proc/sys/kernel/hostname`, of this UTS namespace), recorded
/// beside a presence so that `doctor` on another machine can name the holder's machine; empty
/// when it cannot be read.
pub(crate) fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|name| name.trim().to_owned()).unwrap_or_default()
}

/// The host name `owner`'s presence records (the machine it runs on), if it holds a presence
/// that records one: for `doctor`, which names the holder's machine. `None` when absent,
/// unreadable, or etcd does not answer.
pub fn presence_host(store: &EtcdStore, owner: &Owner) -> Option<String> {
    let key = presence_key(store, owner);
    let response = store
        .run(&key, "checking the cluster presence", || {
            let (mut kv, key) = (store.client().kv_client(), key.clone());
            async move { kv.get(key, None).await }
        })
        .ok()?;
    let value: serde_json::Value = serde_json::from_slice(response.kvs().first()?.value()).ok()?;
    value.get("host")?.as_str().filter(|name| !name.is_empty()).map(str::to_owned)
}

/// The presence history of one boot id on a prefix ([`presence_history`]): the identities of
/// that boot that ever registered (one `P/presence-history/<boot id>/<pid>-<start id>` key
/// each, kept so that a lapsed presence never comes back) and how many hold a presence now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootHistory {
    /// The boot id, as owners record it.
    pub boot_id: String,
    /// Identities of this boot that ever registered: history keys.
    pub registered: usize,
    /// Of them, how many hold a presence now (their process lives, or died less than a TTL ago).
    pub live: usize,
}

/// The keys under `prefix`, in pages of 10,000 (keys only: a long history stays within
/// gRPC's message limit). Not one revision across pages: for listings, not for lease rules.
fn keys_under(store: &EtcdStore, prefix: &str) -> Result<Vec<String>, StoreError> {
    let mut end = prefix.as_bytes().to_vec();
    if let Some(last) = end.last_mut() {
        *last += 1; // `prefix` ends with '/': the first key past every key under it
    }
    let mut keys = Vec::new();
    let mut start = prefix.as_bytes().to_vec();
    loop {
        let options = etcd_client::GetOptions::new().with_range(end.clone()).with_keys_only().with_limit(10_000);
        let page = store.run(prefix, "list", || {
            let (mut kv, start, options) = (store.client().kv_client(), start.clone(), options.clone());
            async move { kv.get(start, Some(options)).await }
        })?;
        let last = page.kvs().last().map(|kv| kv.key().to_vec());
        keys.extend(page.kvs().iter().map(|kv| String::from_utf8_lossy(kv.key()).into_owned()));
        match (page.more(), last) {
            // The next page starts right after the last key, by its bytes (a key that is not
            // UTF-8 must not be paged by its lossy text).
            (true, Some(mut last)) => {
                last.push(0);
                start = last;
            }
            _ => return Ok(keys),
        }
    }
}

/// Every boot id with presence history on the store's prefix, with its counts, in boot id order
/// (`proclease cluster history`).
///
/// Errors: etcd unreachable.
pub fn presence_history(store: &EtcdStore) -> Result<Vec<BootHistory>, StoreError> {
    let boot_of = |key: &str, under: &str| key.strip_prefix(under).and_then(|rest| rest.split_once('/')).map(|(boot, _)| boot.to_owned());
    let (history, presence) = (format!("{}/presence-history/", store.prefix()), format!("{}/presence/", store.prefix()));
    let mut boots: std::collections::BTreeMap<String, BootHistory> = std::collections::BTreeMap::new();
    for key in keys_under(store, &history)? {
        if let Some(boot_id) = boot_of(&key, &history) {
            boots.entry(boot_id.clone()).or_insert(BootHistory { boot_id, registered: 0, live: 0 }).registered += 1;
        }
    }
    for key in keys_under(store, &presence)? {
        if let Some(entry) = boot_of(&key, &presence).and_then(|boot_id| boots.get_mut(&boot_id)) {
            entry.live += 1;
        }
    }
    Ok(boots.into_values().collect())
}

/// Deletes the presence history of boot `boot_id` (`proclease cluster forget-boot`): for a boot
/// that ended — its machine rebooted or is gone —, whose processes can never register again,
/// so their history keys guard nothing. Returns how many keys it deleted. No live presence is
/// what it checks; that the boot *ended* is the caller's word (a machine cut off from etcd,
/// whose presences lapsed, looks the same, and a lapsed process of it could then register
/// again).
///
/// Refused ([`StoreError::Refused`]), deleting nothing: a boot id that is not one (64
/// lowercase hex digits, §2.2); `current_boot_id`, this machine's own boot; a boot with a live
/// presence (a process of it is registered: the boot has not ended).
///
/// Errors: etcd unreachable.
pub fn forget_boot(store: &EtcdStore, boot_id: &str, current_boot_id: &str) -> Result<usize, StoreError> {
    let history = format!("{}/presence-history/{boot_id}/", store.prefix());
    let refuse = |reason: String| Err(StoreError::Refused { path: history.clone(), reason });
    if boot_id.len() != 64 || !boot_id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return refuse(format!("{boot_id:?} is not a boot id (64 lowercase hex digits, as `proclease cluster history` lists them)"));
    }
    if boot_id == current_boot_id {
        return refuse("it is this machine's boot, which has not ended".into());
    }
    let presence = format!("{}/presence/{boot_id}/", store.prefix());
    let live = keys_under(store, &presence)?.len();
    if live > 0 {
        return refuse(format!("{live} process(es) of this boot hold a presence, so it has not ended (or ended less than a TTL ago): try again once none does"));
    }
    // One transaction: the history goes only if still no presence of the boot exists (a range
    // compare: every key of the range — none, for an empty range — was never created).
    let txn = Txn::new()
        .when([Compare::create_revision(presence.clone(), CompareOp::Equal, 0).with_prefix()])
        .and_then([TxnOp::delete(history.clone(), Some(etcd_client::DeleteOptions::new().with_prefix()))]);
    let response = store.run(&history, "delete", || {
        let (mut kv, txn) = (store.client().kv_client(), txn.clone());
        async move { kv.txn(txn).await }
    })?;
    if !response.succeeded() {
        return refuse("a process of this boot registered a presence meanwhile, so it has not ended: nothing was deleted".into());
    }
    let deleted = response.op_responses().into_iter().map(|r| match r {
        etcd_client::TxnOpResponse::Delete(delete) => delete.deleted(),
        _ => 0,
    });
    Ok(usize::try_from(deleted.sum::<i64>()).unwrap_or(0))
}

/// A registered presence, renewed in the background until dropped (which revokes it).
pub struct PresenceSession {
    store: Arc<EtcdStore>,
    lease: i64,
    ttl: Duration,
    key: String,
    shared: Arc<Shared>,
    renewer: Option<std::thread::JoinHandle<()>>,
}

/// What the renewal thread and the session share.
struct Shared {
    /// When the last renewal that etcd acknowledged was sent ([`boottime`]).
    last_acknowledged: Mutex<Duration>,
    /// etcd answered that the lease no longer exists, or the cluster's state was lost
    /// ([`Shared::lose`]).
    expired: AtomicBool,
    /// Why the session was lost, when it was.
    lost: Mutex<Option<String>>,
    /// The id of the etcd cluster the session was opened on.
    cluster_id: u64,
    /// The highest revision each etcd member (by member id) answered with: a follower may lag
    /// behind the leader, but no member's revision goes back unless its data did.
    highest_revisions: Mutex<std::collections::HashMap<u64, i64>>,
    /// The epoch the session registered in: once the epoch key is rewritten (a new epoch began:
    /// etcd's state was wiped or restored) the session is lost.
    epoch: Epoch,
    /// The widest gap between etcd's raft log and its revisions that this session saw
    /// ([`super::epoch::RaftPosition`]): a restore from a backup starts a new raft log under the
    /// backup's revisions, and the gap falls below it whatever the revisions
    /// (`--bump-revision`) and the leases.
    gap_high: AtomicI64,
    stop: AtomicBool,
    /// The dead-man timer while a [`DeadManHold`] holds it, with the number of holds.
    dead_man: Mutex<Option<(DeadMan, usize)>>,
    /// Counts the dead-man timers made: each has one warning thread, which ends when the timer
    /// it was started for is gone ([`warn_before_the_dead_man`]).
    dead_man_generation: AtomicU64,
}

impl Shared {
    /// Marks the session lost for `reason`: this owner must stop acting at once.
    fn lose(&self, lease: i64, reason: String) {
        tracing::warn!(lease, "the cluster presence is lost ({reason}): this owner must stop acting");
        if let Ok(mut lost) = self.lost.lock() {
            lost.get_or_insert(reason);
        }
        self.expired.store(true, Ordering::SeqCst);
    }

    /// Checks an answer's header against the cluster and revisions seen before: `Err` with why
    /// the cluster's state is not the one this session knew.
    fn check_header(&self, header: Option<&etcd_client::ResponseHeader>) -> Result<(), String> {
        let Some(header) = header else { return Ok(()) };
        if header.cluster_id() != self.cluster_id {
            return Err(format!("etcd answered from another cluster (id {:x}, the session's is {:x}): its state was replaced or restored", header.cluster_id(), self.cluster_id));
        }
        let mut highest = self.highest_revisions.lock().unwrap_or_else(|p| p.into_inner());
        let seen = highest.entry(header.member_id()).or_insert(header.revision());
        if header.revision() < *seen {
            return Err(format!(
                "etcd's revision went back from {} to {} (member {:x}): its data was wiped or restored from an older backup",
                *seen,
                header.revision(),
                header.member_id()
            ));
        }
        *seen = header.revision();
        Ok(())
    }

    /// Pushes the dead-man timer, if armed, to 15/16 of the TTL after the renewal sent at
    /// `sent` (the earliest instant etcd can expire the presence is `sent` + TTL).
    fn push_dead_man(&self, sent: Duration, ttl: Duration) {
        if let Ok(guard) = self.dead_man.lock()
            && let Some((timer, _)) = guard.as_ref()
        {
            timer.arm_at(self_fencing::dead_man_deadline(sent, ttl));
        }
    }
}

/// A hold on the session's dead-man timer ([`PresenceSession::hold_dead_man`]); the timer is
/// deleted when the last hold is dropped.
#[derive(Debug)]
pub struct DeadManHold {
    shared: Arc<Shared>,
}

impl Drop for DeadManHold {
    fn drop(&mut self) {
        if let Ok(mut guard) = self.shared.dead_man.lock() {
            let last = match guard.as_mut() {
                Some((_, holds)) => {
                    *holds -= 1;
                    *holds == 0
                }
                None => false,
            };
            if last {
                *guard = None;
            }
        }
    }
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").finish_non_exhaustive()
    }
}

impl PresenceSession {
    /// Registers `owner` (this process's identity) for `ttl` (whole seconds, at least 2; etcd
    /// may round a shorter one up) and starts renewing it.
    ///
    /// Errors: etcd unreachable ([`StoreError::Unreachable`]); the identity registered before, even if
    /// that presence has lapsed ([`StoreError::Unsafe`]: a process identity registers once).
    pub fn open(store: Arc<EtcdStore>, owner: &Owner, ttl: Duration) -> Result<PresenceSession, StoreError> {
        let key = presence_key(&store, owner);
        let ttl_seconds = i64::try_from(ttl.as_secs().max(2)).unwrap_or(i64::MAX);
        let ttl = Duration::from_secs(ttl_seconds as u64);
        // The epoch is settled first (a new, wiped or restored state waits out a grace), then
        // compared in the registration's own transaction: an epoch started in between makes
        // the registration fail, and it is made again in the new epoch.
        let mut attempts = 0;
        let (sent, lease, cluster_id, member, revision, epoch) = loop {
            attempts += 1;
            let epoch = await_epoch(&store, ttl)?;
            // One TTL for every machine of a prefix: the grace after a wipe or restore lasts the
            // TTL of the process that starts it (the cluster-timing model's counterexample
            // `an_epoch_started_by_a_process_with_a_shorter_ttl_makes_two_holders`).
            if let Some(agreed) = epoch.ttl.filter(|agreed| *agreed != ttl) {
                return Err(StoreError::unsafe_(
                    &key,
                    format!(
                        "this process's --cluster-ttl ({} s) differs from the TTL this prefix's epoch was started with ({} s), so it takes no part: every \
                         machine of a prefix must use the same TTL, since the grace after a wipe or restore lasts the TTL of the process that starts \
                         it and an owner with a longer one acts past it; use --cluster-ttl {}s (to change a prefix's TTL, stop every machine of it \
                         and delete its epoch: etcdctl del {}/epoch)",
                        ttl.as_secs(),
                        agreed.as_secs(),
                        agreed.as_secs(),
                        store.prefix()
                    ),
                ));
            }
            let sent = boottime();
            let granted = store.run(&key, "granting a lease", || {
                let mut leases = store.client().lease_client();
                async move { leases.grant(ttl_seconds, None).await }
            })?;
            let lease = granted.id();
            let (cluster_id, member, revision) = granted.header().map_or((0, 0, 0), |h| (h.cluster_id(), h.member_id(), h.revision()));
            let registered = match register_under(&store, owner, lease, None, Some(&epoch)) {
                // The lease expired before the registration reached a member that could apply it
                // (a member stopped or an election held it longer than the TTL): etcd refused the
                // whole transaction, so nothing was written; register again under a new lease.
                Err(error) if attempts < 3 && error.to_string().contains("requested lease not found") => {
                    tracing::debug!(%error, "the presence's lease expired before its registration; registering again");
                    continue;
                }
                other => other?,
            };
            match registered {
                Registration::Registered => break (sent, lease, cluster_id, member, revision, epoch),
                refused => {
                    let mut leases = store.client().lease_client();
                    let _ = store.block_on(TIMEOUT, async move { leases.revoke(lease).await });
                    if refused == Registration::RegisteredBefore {
                        return Err(StoreError::unsafe_(&key, "this process identity registered its presence before (one presence session per process, once)"));
                    }
                    if attempts >= 3 {
                        return Err(StoreError::unsafe_(&key, "the cluster's epoch changed three times while this process registered: etcd's state keeps being replaced"));
                    }
                }
            }
        };
        let shared = Arc::new(Shared {
            last_acknowledged: Mutex::new(sent),
            expired: AtomicBool::new(false),
            lost: Mutex::new(None),
            cluster_id,
            highest_revisions: Mutex::new(std::collections::HashMap::from([(member, revision)])),
            epoch: epoch.clone(),
            gap_high: AtomicI64::new(epoch.gap_floor),
            stop: AtomicBool::new(false),
            dead_man: Mutex::new(None),
            dead_man_generation: AtomicU64::new(0),
        });
        let renewer = {
            let (store, shared) = (store.clone(), shared.clone());
            std::thread::Builder::new()
                .name("proclease-presence".into())
                .spawn(move || renew(&store, lease, ttl, &shared))
                .map_err(|e| StoreError::io(&key, "starting the presence renewal", e))?
        };
        Ok(PresenceSession { store, lease, ttl, key, shared, renewer: Some(renewer) })
    }

    /// Whether this owner may still act: etcd acknowledged a renewal sent less than three
    /// quarters of the TTL ago, and never said the lease was gone. Once false, the owner must
    /// stop its work: another machine may see it absent when the TTL runs out.
    pub fn is_live(&self) -> bool {
        self.standing() == Standing::Live
    }

    /// How this process stands ([`self_fencing::standing`]): its silence, TTL, and what etcd
    /// said of its lease.
    pub fn standing(&self) -> Standing {
        self_fencing::standing(self.silence(), self.ttl, self.expired(), self.lost().is_some())
    }

    /// How long ago the last renewal etcd acknowledged was sent (on `CLOCK_BOOTTIME`, so time
    /// suspended counts). Past the TTL — or once etcd said the lease is gone — another machine
    /// may already have taken over this owner's leases.
    pub fn silence(&self) -> Duration {
        let last = self.shared.last_acknowledged.lock().map(|t| *t).unwrap_or_else(|p| *p.into_inner());
        boottime().saturating_sub(last)
    }

    /// Arms the kernel dead-man timer of this process (`dead_man`): SIGKILL at 15/16 of the TTL
    /// after the last renewal etcd acknowledged was sent, pushed back after each later one, so
    /// that a process that cannot run (stopped, frozen, suspended) dies — and the box of a
    /// supervised command with it — before etcd can expire its presence. Held while a command
    /// runs; several holds share one timer.
    ///
    /// Errors: the kernel refused the timer.
    pub fn hold_dead_man(&self) -> std::io::Result<DeadManHold> {
        let mut guard = self.shared.dead_man.lock().unwrap_or_else(|p| p.into_inner());
        match guard.as_mut() {
            Some((_, holds)) => *holds += 1,
            None => {
                *guard = Some((DeadMan::new()?, 1));
                let generation = self.shared.dead_man_generation.fetch_add(1, Ordering::SeqCst) + 1;
                let (shared, ttl) = (self.shared.clone(), self.ttl);
                // Best effort: without the warning the timer still kills, only silently.
                let _ = std::thread::Builder::new().name("proclease-dead-man-warning".into()).spawn(move || warn_before_the_dead_man(&shared, ttl, generation));
            }
        }
        drop(guard);
        let last = self.shared.last_acknowledged.lock().map(|t| *t).unwrap_or_else(|p| *p.into_inner());
        self.shared.push_dead_man(last, self.ttl);
        Ok(DeadManHold { shared: self.shared.clone() })
    }

    /// Whether etcd answered a renewal saying the lease no longer exists, or the cluster's state
    /// was lost ([`PresenceSession::lost`]).
    pub fn expired(&self) -> bool {
        self.shared.expired.load(Ordering::SeqCst)
    }

    /// Why the session is lost — etcd no longer has its lease, answered from another cluster,
    /// or with a revision lower than one it answered before — or `None` while it is not.
    /// Another machine may already act on this owner's leases: stop at once.
    pub fn lost(&self) -> Option<String> {
        self.shared.lost.lock().ok().and_then(|lost| lost.clone())
    }

    /// Before a write: whether etcd's state is still the one this session registered in (no
    /// new epoch, no raft log gone back). A restore from a backup brings back the leases it
    /// holds, so the write's fence alone cannot tell. Lost: the session is lost at once (its
    /// supervisor kills its command) and why comes back. A check etcd does not answer is made
    /// again, at another member, within the command timeout; then the write is refused: a
    /// process whose lease a restore brought back could otherwise take over a record of the
    /// backup at once, without waiting out the new epoch's grace, while the holder of after
    /// the backup still runs.
    ///
    /// Errors: the state was lost, and why ([`Unconfirmed::Lost`]); etcd did not answer
    /// ([`Unconfirmed::NoAnswer`]).
    pub fn confirm_state(&self) -> Result<(), Unconfirmed> {
        if let Some(why) = self.lost() {
            return Err(Unconfirmed::Lost(why));
        }
        let timeouts = self.store.timeouts();
        let deadline = std::time::Instant::now() + timeouts.command;
        loop {
            match check_state(&self.store, &self.shared, timeouts.dial) {
                State::Held => return Ok(()),
                State::Lost(why) => {
                    self.shared.lose(self.lease, why.clone());
                    return Err(Unconfirmed::Lost(why));
                }
                State::Unknown if std::time::Instant::now() + Duration::from_millis(50) < deadline => {
                    self.store.pass_over(self.store.preferred());
                    std::thread::sleep(Duration::from_millis(50));
                }
                State::Unknown => return Err(Unconfirmed::NoAnswer(timeouts.command)),
            }
        }
    }

    /// Registers `child` — a process this owner started and is about to record (a helper, a
    /// containment host) — under this session's lease, before the record names it: its
    /// presence lives and ends with this owner's, which stops it when it loses its presence.
    /// Other machines, including containers sharing this boot id, then judge it by that.
    ///
    /// Errors: etcd unreachable ([`StoreError::Unreachable`]); this session's presence is gone, or the
    /// child's identity registered before ([`StoreError::Unsafe`]).
    pub fn register(&self, child: &Owner) -> Result<(), StoreError> {
        if register_under(&self.store, child, self.lease, Some(&self.key), None)? == Registration::Registered {
            Ok(())
        } else {
            let key = presence_key(&self.store, child);
            Err(StoreError::unsafe_(&key, "the child's presence cannot be registered: this owner's presence is gone, or the child's identity registered before"))
        }
    }

    /// The etcd lease the presence key is attached to.
    pub fn lease_id(&self) -> i64 {
        self.lease
    }

    /// Fences every record write of `store` with this presence ([`EtcdStore::fence_with`]):
    /// once the lease is gone, this owner's writes fail instead of racing a takeover.
    pub fn fence(&self, store: &EtcdStore) {
        store.fence_with(&self.key, self.lease);
    }

    /// The presence key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The TTL etcd counts.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }
}

/// While the dead-man timer is armed: says on standard error, once per lapse, that etcd has
/// acknowledged no renewal for three quarters of the TTL — so that a process the timer then
/// kills (exit 137, SIGKILL, no chance to speak) has said why, whatever its other threads were
/// blocked in. Ends when the timer of `generation` is gone (its last hold dropped), even if
/// another was made since.
fn warn_before_the_dead_man(shared: &Shared, ttl: Duration, generation: u64) {
    let lapse = self_fencing::lapse(ttl);
    let mut warned = false;
    loop {
        let armed = shared.dead_man.lock().is_ok_and(|guard| guard.is_some());
        if !armed || shared.dead_man_generation.load(Ordering::SeqCst) != generation {
            return;
        }
        let last = shared.last_acknowledged.lock().map(|t| *t).unwrap_or_else(|p| *p.into_inner());
        let silence = boottime().saturating_sub(last);
        if silence >= lapse && !warned && !shared.stop.load(Ordering::SeqCst) {
            tracing::warn!(
                "etcd acknowledged no renewal of this process's cluster presence for {} ms: unless it acknowledges one within {} ms, \
                 the kernel's dead-man timer kills this process and its command (SIGKILL, exit 137) before etcd can expire the \
                 presence and let another machine take over; check that a majority of the etcd members answer",
                silence.as_millis(),
                self_fencing::dead_man_deadline(Duration::ZERO, ttl).saturating_sub(silence).as_millis()
            );
        }
        warned = silence >= lapse;
        std::thread::sleep(lapse.saturating_sub(silence).clamp(Duration::from_millis(10), Duration::from_millis(100)));
    }
}

/// What [`check_state`] found of etcd's state.
enum State {
    /// The epoch this session registered in, and no restore since.
    Held,
    /// Lost, and why: a new epoch began (etcd's data was wiped or restored and another process
    /// found out), or etcd's raft log went back (restored from a backup).
    Lost(String),
    /// etcd did not answer in time: nothing is confirmed.
    Unknown,
}

/// Whether etcd's state is still the one `shared`'s session registered in: the epoch key not
/// rewritten (read within `bound`), and etcd's raft log not fallen behind its revisions since
/// this session looked last ([`super::epoch::behind`]); what it sees then is the next mark.
fn check_state(store: &EtcdStore, shared: &Shared, bound: Duration) -> State {
    let key = epoch_key(store);
    let mut kv = store.client().kv_client();
    let Some(Ok(response)) = store.block_on(bound, async move { kv.get(key, Some(etcd_client::GetOptions::new().with_keys_only())).await }) else {
        return State::Unknown;
    };
    match response.kvs().first().map(etcd_client::KeyValue::mod_revision) {
        Some(revision) if revision == shared.epoch.revision => {}
        _ => return State::Lost("a new epoch of the prefix's state began since this process registered: etcd's data was wiped or restored from a backup".into()),
    }
    match super::epoch::behind(store, shared.gap_high.load(Ordering::SeqCst)) {
        Ok(Ok(position)) => {
            shared.gap_high.fetch_max(position.gap_floor, Ordering::SeqCst);
            State::Held
        }
        Ok(Err(why)) => State::Lost(format!("etcd {why}")),
        Err(_) => State::Unknown,
    }
}

/// Why [`PresenceSession::confirm_state`] did not confirm etcd's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unconfirmed {
    /// The state is not the one the session registered in (wiped, restored, a new epoch), or
    /// the session was lost before: why, in words.
    Lost(String),
    /// etcd did not answer the check within this bound (the command timeout).
    NoAnswer(Duration),
}

/// The renewal loop: a keep-alive every third of the TTL; after a failure, the stream is
/// reconnected and the renewal made again after a short pause (100 ms, doubling up to the
/// interval), so that a member's death or an election costs a retry, not a third of the TTL.
/// Stops when the session is dropped or etcd says the lease is gone.
fn renew(store: &EtcdStore, lease: i64, ttl: Duration, shared: &Shared) {
    let interval = self_fencing::renewal_interval(ttl);
    let mut stream = None;
    // The member the stream goes to, and how long it may take to answer: a hung member costs
    // half an interval or one dial timeout, whichever is shorter, after which the renewal is
    // made again at another — well before three quarters of the TTL.
    let mut member = store.preferred();
    let attempt = (interval / 2).min(store.timeouts().dial);
    // The pause before the next renewal: the interval after an acknowledged one.
    let mut next = interval;
    while !shared.stop.load(Ordering::SeqCst) {
        let sent = boottime();
        if stream.is_none() {
            member = store.preferred();
            let mut leases = store.client().lease_client();
            stream = match store.block_on(attempt, async move { leases.keep_alive(lease).await }) {
                Some(Ok(opened)) => Some(opened),
                // The client read the stream's first answer and found TTL 0: etcd no longer has
                // the lease (it expired, or etcd's data was wiped) — lost, as on an open stream.
                Some(Err(etcd_client::Error::LeaseKeepAliveError(message))) if message == "lease not found" => {
                    shared.lose(lease, "etcd no longer has its lease: it expired, was revoked, or etcd's data was wiped or restored".into());
                    return;
                }
                _ => {
                    store.pass_over(member);
                    None
                }
            };
        }
        if let Some((keeper, responses)) = stream.as_mut() {
            let answer = store.block_on(attempt, async {
                keeper.keep_alive().await?;
                responses.message().await
            });
            match answer {
                Some(Ok(Some(response))) => {
                    if let Err(reason) = shared.check_header(response.header()) {
                        // Not an acknowledgement of this session's cluster: the dead-man timer is
                        // not pushed back, and the owner stops at once.
                        shared.lose(lease, reason);
                        return;
                    }
                    if response.ttl() <= 0 {
                        // TTL 0: etcd no longer has the lease (it expired or was revoked, or
                        // etcd's data was wiped).
                        shared.lose(lease, "etcd no longer has its lease: it expired, was revoked, or etcd's data was wiped or restored".into());
                        return;
                    }
                    // An acknowledgement counts only from the state this session registered
                    // in: a restored etcd renews leases of its backup too.
                    match check_state(store, shared, attempt) {
                        State::Held => {
                            if let Ok(mut last) = shared.last_acknowledged.lock() {
                                *last = sent;
                            }
                            shared.push_dead_man(sent, ttl);
                            next = interval;
                        }
                        State::Lost(reason) => {
                            shared.lose(lease, reason);
                            return;
                        }
                        State::Unknown => {
                            store.pass_over(store.preferred());
                            next = self_fencing::retry_pause(next, interval);
                        }
                    }
                }
                _ => {
                    // To another member: a hung one must not cost more than one renewal.
                    tracing::debug!(lease, "a presence renewal failed; reconnecting");
                    store.pass_over(member);
                    stream = None;
                    next = self_fencing::retry_pause(next, interval);
                }
            }
        } else {
            next = self_fencing::retry_pause(next, interval);
        }
        // Until the next renewal, or until the session ends: its drop unparks this thread, so
        // that a process exits at once instead of after up to a third of the TTL.
        loop {
            let spent = boottime().saturating_sub(sent);
            if spent >= next || shared.stop.load(Ordering::SeqCst) {
                break;
            }
            std::thread::park_timeout(next - spent);
        }
    }
}

/// Puts `owner`'s presence key under etcd lease `lease`, with its history key, in one
/// transaction — only if neither exists (an identity registers once in its life: its history
/// key, without a lease, stays after the presence expires, so "absent" after "registered" is
/// final; a repair's memo and every takeover rely on it) and, with `fence`, only while that
/// presence key is still attached to `lease`, and with `epoch`, only while the prefix's epoch
/// is still that one and no grace runs ([`await_epoch`]) — recording the raft index its check
/// saw ([`super::epoch`]).
fn register_under(store: &EtcdStore, owner: &Owner, lease: i64, fence: Option<&str>, epoch: Option<&Epoch>) -> Result<Registration, StoreError> {
    let key = presence_key(store, owner);
    let history = history_key(store, owner);
    let value = serde_json::json!({"bootId": owner.boot_id, "host": host_name(), "pid": owner.pid, "processStartId": owner.process_start_id}).to_string();
    let mut when = vec![Compare::create_revision(history.clone(), CompareOp::Equal, 0), Compare::create_revision(key.clone(), CompareOp::Equal, 0)];
    when.extend(fence.map(|fence| Compare::lease(fence, CompareOp::Equal, lease)));
    let mut then = vec![TxnOp::put(history.clone(), "", None), TxnOp::put(key.clone(), value, Some(PutOptions::new().with_lease(lease)))];
    if let Some(epoch) = epoch {
        when.extend(super::epoch::unchanged(store, epoch));
        then.push(super::epoch::mark(store, epoch));
    }
    // Otherwise: whether the history key exists tells "registered before" from a changed epoch.
    let txn = Txn::new().when(when).and_then(then).or_else([TxnOp::get(history, Some(etcd_client::GetOptions::new().with_count_only()))]);
    let response = store.run(&key, "registering presence", || {
        let (mut kv, txn) = (store.client().kv_client(), txn.clone());
        async move { kv.txn(txn).await }
    })?;
    if response.succeeded() {
        return Ok(Registration::Registered);
    }
    let registered_before = response.op_responses().into_iter().any(|r| matches!(r, etcd_client::TxnOpResponse::Get(get) if get.count() > 0));
    Ok(if registered_before || epoch.is_none() { Registration::RegisteredBefore } else { Registration::EpochChanged })
}

/// What [`register_under`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Registration {
    Registered,
    /// The identity registered before (its history key exists), or its owner's presence is gone
    /// (with a fence).
    RegisteredBefore,
    /// The prefix's epoch changed, or a grace began, since it was read.
    EpochChanged,
}

impl Drop for PresenceSession {
    /// Stops renewing and revokes the lease (best effort: if etcd cannot be reached, the
    /// presence expires by itself after the TTL).
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(renewer) = self.renewer.take() {
            renewer.thread().unpark();
            let _ = renewer.join();
        }
        let mut leases = self.store.client().lease_client();
        let lease = self.lease;
        let _ = self.store.block_on(Duration::from_secs(1), async move { leases.revoke(lease).await });
    }
}
