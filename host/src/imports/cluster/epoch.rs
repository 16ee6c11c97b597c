//! The prefix's *epoch* (feature `cluster`; `docs/cluster.md`, "Failure modes" and "Fencing
//! tokens"): how a process tells that etcd's state of a prefix is not the one the owners acting
//! on it saw — new, wiped, or restored from a backup — and waits until every owner of before has
//! stopped before any new presence registers, so that no lease is taken while one of them may
//! still act.
//!
//! Keys under the prefix `P`:
//! - `P/epoch`: the decimal id of the etcd cluster that started the current epoch. Absent, or
//!   another cluster's: the state is new, wiped, or restored into another cluster.
//! - `P/epoch-ordinal`: the epoch's ordinal, the major part of every fencing token handed out in
//!   it ([`crate::cluster::fencing`]). It grows with every new epoch, even when the epoch before
//!   is lost with the state: it is the greater of the seconds since [`ORDINAL_BASE`] and the last
//!   ordinal etcd holds plus one. Absent on a prefix whose epoch an older proclease started
//!   (ordinal 0: tokens are plain revisions there).
//! - `P/raft-mark`: the raft index of the etcd cluster that a registration saw (etcd's
//!   `Status`), written by every registration; with the revision that wrote it, it records how
//!   far etcd's raft log ran ahead of its key revisions then ([`RaftPosition`]). That lead never
//!   shrinks, except when etcd's data is restored from a snapshot (`etcdctl snapshot restore`
//!   starts a new raft log, near 0, under the backup's revisions — whatever the cluster id, and
//!   `--bump-revision` included): a lead below the mark's tells a restore that brought back this
//!   prefix's own epoch key, however many keys were written since. An epoch's start pads the
//!   raft log first ([`EPOCH_PADDING`]), so that a backup taken early in an epoch on a young log
//!   is told too.
//! - `P/epoch-ttl`: the TTL (whole seconds) the epoch was started with, the longest of the
//!   starter's and the epoch before's: its grace. A process whose `--cluster-ttl` differs
//!   refuses to register, saying so.
//! - `P/grace`: exists, under an etcd lease of one TTL, while a new epoch's grace runs; no
//!   presence registers meanwhile. By its end every owner of before has found its session lost
//!   (its lease missing, a revision lower than it saw, another cluster, or the epoch changed:
//!   [`super::presence::PresenceSession`]) or was killed by its dead-man timer, which only an
//!   acknowledged renewal pushes back. This assumes every machine of a prefix uses the same
//!   `--cluster-ttl`.

use std::time::Duration;

use etcd_client::{Compare, CompareOp, GetOptions, KeyValue, PutOptions, Txn, TxnOp};

use crate::state_store::StoreError;
use crate::state_store::etcd::{EtcdStore, TIMEOUT};

/// The instant epoch ordinals count seconds from: 2024-01-01T00:00:00Z, as Unix seconds. An
/// ordinal stays below 2³¹ until 2092, so a token (ordinal × 2³² + offset) fits a signed 64-bit
/// column.
pub const ORDINAL_BASE: u64 = 1_704_067_200;

/// The key holding the id of the etcd cluster that last started an epoch of the prefix.
pub fn epoch_key(store: &EtcdStore) -> String {
    format!("{}/epoch", store.prefix())
}

/// The key that exists, under an etcd lease of one TTL, while an epoch's grace runs.
pub fn grace_key(store: &EtcdStore) -> String {
    format!("{}/grace", store.prefix())
}

/// The key holding the current epoch's ordinal.
pub fn ordinal_key(store: &EtcdStore) -> String {
    format!("{}/epoch-ordinal", store.prefix())
}

/// The key holding the TTL (whole seconds) the current epoch was started with: the TTL every
/// machine of the prefix is meant to use.
pub fn ttl_key(store: &EtcdStore) -> String {
    format!("{}/epoch-ttl", store.prefix())
}

/// The key holding the raft index the last registration saw.
pub fn raft_mark_key(store: &EtcdStore) -> String {
    format!("{}/raft-mark", store.prefix())
}

/// A settled epoch, as a registration compares it in its own transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Epoch {
    /// The epoch key's value: the id of the cluster that started it.
    pub value: String,
    /// The epoch key's mod revision: the epoch's identity (a new epoch rewrites the key).
    pub revision: i64,
    /// Its ordinal (0: started by a proclease older than ordinals).
    pub ordinal: u64,
    /// The raft index the check saw, which the registration records ([`raft_mark_key`]).
    pub raft_index: u64,
    /// The gap between etcd's raft log and its revisions that the check saw, at most
    /// ([`RaftPosition::gap_floor`]): a session's first high-water mark.
    pub gap_floor: i64,
    /// The TTL the epoch was started with (`None`: an older proclease's epoch).
    pub ttl: Option<Duration>,
}

/// The state of the prefix's epoch, as [`epoch_state`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EpochState {
    /// The epoch was written by this cluster and no grace runs: presences may register.
    Settled,
    /// A grace runs for about this long more (whole seconds, as etcd counts them).
    Grace(Duration),
    /// No epoch of this cluster: the state is new, wiped or restored into another cluster; the
    /// next process that registers starts a grace.
    Unknown,
    /// The epoch is this cluster's, but etcd's data was restored from a backup since (why, in
    /// words): the next process that registers starts a new epoch and its grace.
    Restored(String),
}

/// The epoch's keys and the cluster id etcd answered with, read at one revision.
struct Read {
    epoch: Option<KeyValue>,
    grace: Option<KeyValue>,
    ordinal: Option<KeyValue>,
    mark: Option<KeyValue>,
    ttl: Option<KeyValue>,
    cluster: u64,
}

impl Read {
    /// Whether the epoch key was written in the cluster etcd answered from.
    fn of_this_cluster(&self) -> bool {
        self.epoch.as_ref().is_some_and(|epoch| epoch.value() == self.cluster.to_string().as_bytes())
    }

    /// The epoch's ordinal; 0 when it has none (or it is unreadable: an older proclease's).
    fn ordinal(&self) -> u64 {
        number(self.ordinal.as_ref()).unwrap_or(0)
    }
}

/// The longest TTL an epoch's grace takes (one hour): a larger `P/epoch-ttl` is not one a
/// proclease wrote.
const MAX_EPOCH_TTL: Duration = Duration::from_secs(3600);

/// The TTL `kv` (`P/epoch-ttl`) holds, within [`MAX_EPOCH_TTL`].
fn epoch_ttl(kv: Option<&KeyValue>) -> Option<Duration> {
    number(kv).map(|seconds| Duration::from_secs(seconds).min(MAX_EPOCH_TTL))
}

/// The decimal number `kv` holds, if it holds one.
fn number(kv: Option<&KeyValue>) -> Option<u64> {
    std::str::from_utf8(kv?.value()).ok()?.parse().ok()
}

fn read(store: &EtcdStore) -> Result<Read, StoreError> {
    let key = epoch_key(store);
    let keys = [key.clone(), grace_key(store), ordinal_key(store), raft_mark_key(store), ttl_key(store)];
    let ([epoch, grace, ordinal, mark, ttl], cluster) = store.read_keys(&key, "reading the cluster epoch", keys)?;
    Ok(Read { epoch, grace, ordinal, mark, ttl, cluster })
}

/// Where etcd's raft log stands against its key history, as one member answers once it has
/// caught up with the leader (a linearizable read, then `Status` and a serializable read at the
/// same member).
///
/// The *gap* is the member's applied raft index minus its key revision. Every raft entry that
/// writes keys raises both by one; every other entry (a lease grant, a compaction, a failed
/// compare, a new leader's empty entry) raises the index alone: in a cluster that is never
/// restored the gap never shrinks. `etcdctl snapshot restore` starts a new raft log near 0 under
/// the backup's revisions (or higher ones, `--bump-revision`): the gap falls by at least the raft
/// index at backup time, and writes after the restore do not win it back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RaftPosition {
    /// The member's committed raft index (what a registration records in `P/raft-mark`).
    pub index: u64,
    /// The gap, at least what it was when the member answered (its revision is read before its
    /// applied index, and one entry may be applied in between: one is added for it): what is
    /// compared with a gap seen before.
    pub gap: i64,
    /// The gap, at most what it is once the answer is in (the applied index against a revision
    /// read after it): what is recorded as seen. `i64::MIN` (nothing learnt) from an etcd older
    /// than 3.4, which does not say its applied index.
    pub gap_floor: i64,
}

/// Where etcd's raft log stands ([`RaftPosition`]), asked of one member.
///
/// Errors: etcd unreachable.
pub(crate) fn raft_position(store: &EtcdStore) -> Result<RaftPosition, StoreError> {
    let key = raft_mark_key(store);
    let (status, later) = store.run(&key, "reading etcd's raft index", || {
        let client = store.client();
        let (mut kv, mut maintenance) = (client.kv_client(), client.maintenance_client());
        let probe = key.clone();
        async move {
            // A linearizable read brings this member's applied index up to the leader's commit
            // index: no entry a process of the prefix saw committed is missing from its answer.
            kv.get(probe.clone(), Some(GetOptions::new().with_count_only())).await?;
            let status = maintenance.status().await?;
            let later = kv.get(probe, Some(GetOptions::new().with_count_only().with_serializable())).await?;
            Ok((status, later))
        }
    })?;
    let revision = |header: Option<&etcd_client::ResponseHeader>| header.map_or(0, etcd_client::ResponseHeader::revision);
    // etcd before 3.4 does not say its applied index; its committed index is at least that.
    let applied = match status.raft_applied_index() {
        0 => status.raft_index(),
        applied => applied,
    };
    let applied = i64::try_from(applied).unwrap_or(i64::MAX);
    // etcd raises the revision of an entry it applies a moment before it records the entry as
    // applied, and `Status` reads the revision first: the gap it answers may fall one short.
    let gap = applied.saturating_sub(revision(status.header())).saturating_add(1);
    // Without an applied index the committed one may run ahead of the revisions: no floor.
    let gap_floor = if status.raft_applied_index() == 0 { i64::MIN } else { applied.saturating_sub(revision(later.header()).max(revision(status.header()))) };
    Ok(RaftPosition { index: status.raft_index(), gap, gap_floor })
}

/// The gap ([`RaftPosition`]) that `mark` (`P/raft-mark`) records: the committed index its
/// registration saw, against the revision that wrote it — never above the gap then, since the
/// write's own entry came after that index.
fn gap_of_mark(mark: &KeyValue) -> Option<i64> {
    let index = i64::try_from(number(Some(mark))?).ok()?;
    Some(index.saturating_sub(mark.mod_revision()))
}

/// Whether etcd's data was restored from a backup since a registration recorded `mark`
/// ([`behind`]): the position now, or why, in words.
fn restored(store: &EtcdStore, mark: Option<&KeyValue>) -> Result<Result<RaftPosition, String>, StoreError> {
    match mark.and_then(gap_of_mark) {
        Some(seen) => behind(store, seen),
        None => raft_position(store).map(Ok),
    }
}

/// Whether etcd's raft log fell behind its key history since a process of the prefix saw the
/// gap `seen` ([`RaftPosition`]) — which only a restore from a backup does: why, in words
/// (`was restored from a backup: …`), or the position now. An answer that falls short is asked
/// again twice, 100 ms apart, before it counts (a member the client could not keep to).
///
/// Errors: etcd unreachable.
pub(crate) fn behind(store: &EtcdStore, seen: i64) -> Result<Result<RaftPosition, String>, StoreError> {
    let mut position = raft_position(store)?;
    for _ in 0..2 {
        if position.gap >= seen {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        position = raft_position(store)?;
    }
    if position.gap >= seen {
        return Ok(Ok(position));
    }
    Ok(Err(format!(
        "was restored from a backup: its raft log is at index {}, {} entries shorter for its key revisions than a process of this prefix saw",
        position.index,
        seen.saturating_sub(position.gap)
    )))
}

/// What [`await_epoch`] would find now, for `doctor`.
///
/// Errors: etcd unreachable.
pub fn epoch_state(store: &EtcdStore) -> Result<EpochState, StoreError> {
    let read = read(store)?;
    if !read.of_this_cluster() {
        return Ok(EpochState::Unknown);
    }
    if let Some(grace) = read.grace {
        let mut leases = store.client().lease_client();
        let id = grace.lease();
        let left = store.block_on(TIMEOUT, async move { leases.time_to_live(id, None).await }).and_then(Result::ok).map_or(0, |r| r.ttl().max(0));
        return Ok(EpochState::Grace(Duration::from_secs(left.unsigned_abs())));
    }
    Ok(match restored(store, read.mark.as_ref())? {
        Ok(_) => EpochState::Settled,
        Err(why) => EpochState::Restored(why),
    })
}

/// Waits, before a process registers its first presence, until the prefix's epoch is this
/// cluster's, no grace runs, and etcd's data was not restored since the last registration;
/// otherwise starts a new epoch with a grace of `ttl` (see the module docs). Says once what it
/// waits for. Bounded: a grace lasts one TTL.
///
/// Returns the settled epoch, which a registration compares in its own transaction.
///
/// Errors: etcd unreachable; an epoch that does not settle within two TTLs and the request
/// bound (another program keeps the grace key alive, or the endpoints answer from different
/// clusters); an epoch started eight times in one wait.
pub fn await_epoch(store: &EtcdStore, ttl: Duration) -> Result<Epoch, StoreError> {
    let key = epoch_key(store);
    let started = std::time::Instant::now();
    // Two graces: the longest TTL known (this process's, or the epoch's), and one operation,
    // counted from the start of the wait or of the last epoch start this process tried, won or
    // lost (the start's own requests may take a while on an etcd under load).
    let mut grace = ttl;
    let mut since = started;
    let (mut reason, mut told) = (None, false);
    let mut starts = 0;
    loop {
        if std::time::Instant::now() >= since + 2 * grace + store.timeouts().command {
            let last = reason.as_deref().map_or(String::new(), |why| format!(" (the etcd cluster {why})"));
            return Err(StoreError::unsafe_(
                &key,
                format!(
                    "the cluster epoch did not settle within two TTLs ({:.1} s){last}: another program keeps its grace key, or the endpoints answer from different clusters",
                    started.elapsed().as_secs_f64()
                ),
            ));
        }
        let read = read(store)?;
        grace = grace.max(epoch_ttl(read.ttl.as_ref()).unwrap_or_default());
        let why = if !read.of_this_cluster() {
            // New, wiped, or restored into another cluster.
            Some("held no state of this prefix (new, wiped or restored)".to_owned())
        } else if read.grace.is_some() {
            None
        } else {
            match restored(store, read.mark.as_ref())? {
                Ok(position) => {
                    let revision = read.epoch.as_ref().map_or(0, KeyValue::mod_revision);
                    let ttl = epoch_ttl(read.ttl.as_ref());
                    return Ok(Epoch { value: read.cluster.to_string(), revision, ordinal: read.ordinal(), raft_index: position.index, gap_floor: position.gap_floor, ttl });
                }
                Err(why) => Some(why),
            }
        };
        if let Some(why) = why {
            // Start an epoch of this cluster, with a grace of one TTL, unless another process
            // just did. Either way a grace begins about now: the bound counts from here, not
            // from the start of a wait that may have spent seconds on an etcd being restored
            // (a loser of the race to start waits out the winner's grace, two processes of a
            // history run once failed here). Bounded all the same: a state replaced again and
            // again is refused.
            starts += 1;
            if starts > MAX_EPOCH_STARTS {
                return Err(StoreError::unsafe_(
                    &key,
                    format!("the cluster epoch was started {MAX_EPOCH_STARTS} times while this process waited ({why}): etcd's state keeps being replaced"),
                ));
            }
            let started_it = start(store, ttl, &read)?;
            since = std::time::Instant::now();
            if started_it {
                tracing::info!(cluster = read.cluster, reason = %why, "started a cluster epoch");
            } else {
                std::thread::sleep(Duration::from_millis(50));
            }
            reason = Some(why);
            continue;
        }
        if !told {
            told = true;
            let why = reason.take().unwrap_or_else(|| "held no state of this prefix (new, wiped or restored), or was restored from a backup".into());
            tracing::warn!(
                "waiting up to {} s before taking part: the etcd cluster at {} {why}, and an owner from before it may act until its own session finds that out",
                grace.as_secs(),
                store.endpoint()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Starts a new epoch of the cluster `read` answered from, with a grace of `ttl`, if the epoch
/// and the raft mark are still as `read` found them: the new epoch's ordinal, and the raft
/// index now as the mark (so that the restore it answers is not found again). Whether it did.
fn start(store: &EtcdStore, ttl: Duration, read: &Read) -> Result<bool, StoreError> {
    let key = epoch_key(store);
    pad_raft_log(store)?;
    let raft_index = raft_position(store)?.index;
    // The grace covers the longest TTL known: this process's, and the epoch's before.
    let seconds = i64::try_from(ttl.max(epoch_ttl(read.ttl.as_ref()).unwrap_or_default()).as_secs().max(2)).unwrap_or(i64::MAX);
    let lease = store
        .run(&key, "granting a lease", || {
            let mut leases = store.client().lease_client();
            async move { leases.grant(seconds, None).await }
        })?
        .id();
    let since_base = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()).saturating_sub(ORDINAL_BASE);
    let ordinal = since_base.max(read.ordinal() + 1);
    let unchanged = |kv: Option<&KeyValue>, key: String| Compare::mod_revision(key, CompareOp::Equal, kv.map_or(0, KeyValue::mod_revision));
    let txn = Txn::new().when([unchanged(read.epoch.as_ref(), key.clone()), unchanged(read.mark.as_ref(), raft_mark_key(store))]).and_then([
        TxnOp::put(key.clone(), read.cluster.to_string(), None),
        TxnOp::put(ordinal_key(store), ordinal.to_string(), None),
        TxnOp::put(raft_mark_key(store), raft_index.to_string(), None),
        TxnOp::put(ttl_key(store), seconds.to_string(), None),
        TxnOp::put(grace_key(store), "", Some(PutOptions::new().with_lease(lease))),
    ]);
    let started = store
        .run(&key, "starting a cluster epoch", || {
            let (mut kv, txn) = (store.client().kv_client(), txn.clone());
            async move { kv.txn(txn).await }
        })?
        .succeeded();
    if !started {
        let mut leases = store.client().lease_client();
        let _ = store.block_on(TIMEOUT, async move { leases.revoke(lease).await });
    }
    Ok(started)
}

/// How many times one [`await_epoch`] tries to start an epoch (won or lost to another process)
/// before it refuses: each start follows a state found new, wiped or restored again.
const MAX_EPOCH_STARTS: u32 = 8;

/// How many raft entries that write no key an epoch's start adds to etcd's log before it
/// records its mark: a backup taken early in an epoch on a young raft log (a new or just
/// restored etcd) is then told when restored, unless more than this many such entries run
/// between the restore and the next process's check (`docs/cluster.md`, "Failure modes").
pub const EPOCH_PADDING: usize = 512;

/// How many of the [`EPOCH_PADDING`] entries are sent at once ([`pad_raft_log`]).
const PADDING_BATCH: usize = 32;

/// Adds [`EPOCH_PADDING`] entries that write no key to etcd's raft log, before an epoch's start
/// reads the index its mark records.
///
/// An epoch starts on a young raft log — a new etcd, or one just restored, whose log restarted
/// near 0 — where the raft index runs only a few dozen entries ahead of what it will be after
/// the *next* restore has run a few dozen entries of its own (elections, lease grants): a backup
/// taken early in this epoch, restored later, would leave etcd's raft log no shorter for its
/// revisions than the mark says, and the restore would go untold (a history run saw a fencing
/// token repeat). With the padding, the mark runs at least this many entries ahead: a restore of
/// any backup taken in this epoch is told unless more entries that write no key than that run
/// between the restore and the next process's check. Each entry is a transaction whose compare
/// never holds (a key's version below 0): etcd applies it through raft and changes nothing. Sent
/// [`PADDING_BATCH`] at a time, they cost a few round trips and milliseconds of etcd's time, once
/// per epoch. Each batch is one request of the store, which waits at most the dial timeout for
/// an answer before it asks again (at another member): a batch takes far less on an etcd under
/// load, where all 512 at once once took more than that, again and again until the command
/// timeout failed the epoch's start (a test's etcd on a busy machine). Entries of a batch that
/// timed out count too: the padding is "at least".
///
/// Errors: etcd unreachable.
fn pad_raft_log(store: &EtcdStore) -> Result<(), StoreError> {
    let key = format!("{}/raft-padding", store.prefix());
    let never = Txn::new().when([Compare::version(key.clone(), CompareOp::Less, 0)]).and_then([TxnOp::put(key.clone(), "", None)]);
    for _ in 0..EPOCH_PADDING.div_ceil(PADDING_BATCH) {
        store.run(&key, "padding etcd's raft log", || {
            let (kv, never) = (store.client().kv_client(), never.clone());
            async move {
                let mut sent = tokio::task::JoinSet::new();
                for _ in 0..PADDING_BATCH {
                    let (mut kv, never) = (kv.clone(), never.clone());
                    sent.spawn(async move { kv.txn(never).await.map(|_| ()) });
                }
                while let Some(done) = sent.join_next().await {
                    // A task that panicked or was cancelled added no entry: the others did.
                    if let Ok(result) = done {
                        result?;
                    }
                }
                Ok(())
            }
        })?;
    }
    Ok(())
}

/// The comparisons a registration in `epoch` makes in its own transaction: the epoch is still
/// that one and no grace runs.
pub(crate) fn unchanged(store: &EtcdStore, epoch: &Epoch) -> [Compare; 3] {
    [
        Compare::value(epoch_key(store), CompareOp::Equal, epoch.value.clone()),
        Compare::mod_revision(epoch_key(store), CompareOp::Equal, epoch.revision),
        Compare::create_revision(grace_key(store), CompareOp::Equal, 0),
    ]
}

/// What a registration in `epoch` writes beside its presence: the raft index its check saw.
pub(crate) fn mark(store: &EtcdStore, epoch: &Epoch) -> TxnOp {
    TxnOp::put(raft_mark_key(store), epoch.raft_index.to_string(), None)
}
