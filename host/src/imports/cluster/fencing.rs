//! Fencing tokens in cluster mode (feature `cluster`; `docs/cluster.md`, "Fencing tokens"):
//! what an exclusive run's command gets as `PROCLEASE_FENCING_TOKEN` when the export admission
//! lives in etcd, and whether a token is still its holder's.
//!
//! A token is `ordinal × 2³² + offset`: the ordinal of the prefix's epoch ([`super::epoch`])
//! and the etcd revision of the write that made the admission its holder's, counted from the
//! revision that started the epoch. Within an epoch tokens grow with etcd's revision, so every
//! later holder — on any machine, a takeover included — gets a greater one; a new epoch (etcd's
//! state new, wiped or restored from a backup) has a greater ordinal, so its tokens are greater
//! than every token of the epochs before, although etcd's revisions went back. On a prefix whose
//! epoch an older proclease started (no ordinal) a token is the plain revision, as before.
//!
//! The holder records its token beside the admission (`P/fencing/export-admission`:
//! `{"claimId","token"}`, written while the admission is still the one it acquired), and a check
//! compares the admission, that record and the holder's presence as they are now — never a
//! historic revision, which etcd's compaction removes.

use etcd_client::{Compare, CompareOp, KeyValue};
use proclease_core::admission::{CLAIM_PATH, MAX_CLAIM_BYTES};
use proclease_core::digest;

use super::Fence;
use super::epoch::{epoch_key, ordinal_key};
use super::presence::{self, RemotePresence};
use crate::records::InputMode;
use crate::state_store::StoreError;
use crate::state_store::etcd::EtcdStore;

/// How far a token's ordinal is shifted: the offset within an epoch has 32 bits.
pub const ORDINAL_SHIFT: u32 = 32;

/// The key of the record of the last token handed out: `P/fencing/export-admission`.
pub fn record_key(store: &EtcdStore) -> String {
    format!("{}/fencing/export-admission", store.prefix())
}

/// The token of a write at etcd revision `revision` in the epoch of ordinal `ordinal` started at
/// revision `start` (ordinal 0: an epoch without ordinal, where the token is the revision).
///
/// Errors: a revision before the epoch's start, or 2³² or more writes after it (start a new
/// epoch: `docs/cluster.md`).
pub fn token(ordinal: u64, start: i64, revision: i64) -> Result<i64, String> {
    if ordinal == 0 {
        return Ok(revision);
    }
    let offset = revision.checked_sub(start).filter(|offset| (0..1_i64 << ORDINAL_SHIFT).contains(offset));
    let Some(offset) = offset else {
        return Err(format!("etcd revision {revision} is not within 2^32 writes after the epoch's start (revision {start}): start a new epoch (docs/cluster.md)"));
    };
    i64::try_from(ordinal)
        .ok()
        .and_then(|o| o.checked_mul(1 << ORDINAL_SHIFT))
        .map(|major| major + offset)
        .ok_or_else(|| format!("epoch ordinal {ordinal} is too large for a token"))
}

/// The epoch ordinal a token was handed out in (0 for a plain revision below 2³²).
pub fn ordinal_of(token: i64) -> u64 {
    u64::try_from(token >> ORDINAL_SHIFT).unwrap_or(0)
}

/// The record of the last token handed out.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Issued {
    claim_id: String,
    token: i64,
}

/// The keys a token is judged by, read at one revision: the admission, the last token's record,
/// the epoch and its ordinal.
struct Read {
    admission: Option<KeyValue>,
    issued: Option<KeyValue>,
    epoch: Option<KeyValue>,
    ordinal: u64,
}

fn read(store: &EtcdStore) -> Result<Read, StoreError> {
    let keys = [store.key_of(CLAIM_PATH), record_key(store), epoch_key(store), ordinal_key(store)];
    let ([admission, issued, epoch, ordinal], _) = store.read_keys(CLAIM_PATH, "read", keys)?;
    let ordinal = ordinal.and_then(|kv| std::str::from_utf8(kv.value()).ok()?.parse().ok()).unwrap_or(0);
    Ok(Read { admission, issued, epoch, ordinal })
}

/// Hands the holder of the export admission (just acquired by this process, its command not
/// started yet, holding the content whose sha256 is `expected_sha256`, claim `claim_id`) its
/// token, and records it while the admission is still that content. `None`: the admission no
/// longer holds that content (the run must not start).
///
/// Errors: etcd unreachable; this process's presence is gone; a revision a token cannot
/// express ([`token`]).
pub fn issue(store: &EtcdStore, expected_sha256: &str, claim_id: &str) -> Result<Option<i64>, StoreError> {
    let read = read(store)?;
    let Some(admission) = read.admission.filter(|kv| digest::sha256_hex(kv.value()) == expected_sha256) else { return Ok(None) };
    let start = read.epoch.as_ref().map_or(0, KeyValue::mod_revision);
    let token = token(read.ordinal, start, admission.mod_revision()).map_err(|reason| StoreError::unsafe_(CLAIM_PATH, reason))?;
    let record = serde_json::to_string(&Issued { claim_id: claim_id.into(), token }).map_err(|e| StoreError::unsafe_(CLAIM_PATH, e.to_string()))?;
    let still = vec![Compare::mod_revision(store.key_of(CLAIM_PATH), CompareOp::Equal, admission.mod_revision())];
    Ok(store.put_if(CLAIM_PATH, still, record_key(store), record)?.then_some(token))
}

/// Whether fencing token `token` is still its holder's: the admission in `store` now is the
/// claim the token was handed out for (the same claim `id`, which its holder's later phase
/// changes keep and a release, or another holder's acquire — a takeover included — does not:
/// §6A.5 step c), it is the last token handed out, in the current epoch, and the holder's
/// presence is still registered. Work asks it right before it writes where a stale holder must
/// not (`proclease fence check`; `docs/cluster.md`, "Fencing tokens"). Reads only the present
/// state (never a revision etcd may have compacted). The admission is parsed by the component
/// (`runtime`).
///
/// Errors: etcd unreachable; a record the reference's readers refuse. Treat any error as "not
/// current".
pub fn check(runtime: &crate::Runtime, store: &EtcdStore, token: i64) -> Result<Fence, crate::Error> {
    let read = read(store)?;
    let no_token = || Fence::Stale(format!("{token} is no token of this export admission"));
    if token < 1 {
        return Ok(no_token());
    }
    let ordinal = ordinal_of(token);
    if ordinal < read.ordinal {
        return Ok(Fence::Stale(format!("{token} was handed out before etcd's state of this prefix was wiped or restored (a new epoch began since)")));
    }
    if ordinal > read.ordinal {
        return Ok(no_token());
    }
    let Some(issued) = read.issued else { return Ok(Fence::Stale(format!("no fencing token was handed out in this epoch of the prefix, so {token} is none"))) };
    let issued: Issued = serde_json::from_slice(issued.value())
        .map_err(|e| crate::Error::System(crate::Failure::new(crate::FailureKind::Unsafe, format!("the fencing record {} is not one proclease wrote: {e}", record_key(store)))))?;
    if token < issued.token {
        return Ok(Fence::Stale(format!("another holder acquired the export admission since (token {})", issued.token)));
    }
    if token > issued.token {
        return Ok(Fence::Stale(format!("{token} is no token of this export admission (the last handed out is {})", issued.token)));
    }
    let Some(admission) = read.admission else { return Ok(Fence::Stale("the export admission was released".into())) };
    let text = String::from_utf8(admission.value().to_vec()).map_err(|_| crate::Error::system("the export admission in etcd is not UTF-8"))?;
    if text.len() > MAX_CLAIM_BYTES as usize {
        return Err(crate::Error::system("the export admission in etcd is larger than a claim may be"));
    }
    let now = runtime.instantiate()?.records().parse_export_admission(&text, InputMode::File)?.record;
    if now.id != issued.claim_id {
        return Ok(Fence::Stale(format!("another holder acquired the export admission since (pid {} on its machine)", now.owner.pid)));
    }
    // Its holder must also still be present: once its presence expired it has stopped (or been
    // stopped), and another machine may take over at any moment.
    match presence::lookup(store, &now.owner) {
        RemotePresence::Registered => Ok(Fence::Current { holder_pid: now.owner.pid }),
        RemotePresence::Unreachable => {
            Err(crate::Error::System(crate::Failure::new(crate::FailureKind::Unreachable, "etcd did not answer whether the holder's presence is registered")))
        }
        _ => Ok(Fence::Stale(format!("its holder's cluster presence expired (pid {} on its machine)", now.owner.pid))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_grow_within_an_epoch_and_from_one_epoch_to_the_next() {
        assert_eq!(token(0, 0, 1812), Ok(1812), "no ordinal: the plain revision, as before ordinals");
        let first = token(100, 50, 1812).expect("a token");
        assert_eq!(first, (100 << 32) + 1762);
        assert!(token(100, 50, 1813).expect("a token") > first);
        // A restore brings revisions back (1812 → 21): the next epoch's tokens are still greater.
        assert!(token(101, 21, 22).expect("a token") > token(100, 50, 1_000_000).expect("a token"));
        assert!(token(1, 0, 0).expect("a token") > token(0, 0, (1 << 32) - 1).expect("a token"));
        assert_eq!(ordinal_of(first), 100);
        assert_eq!(ordinal_of(1812), 0);
    }

    #[test]
    fn a_revision_a_token_cannot_express_is_refused() {
        assert!(token(100, 50, 49).is_err(), "before the epoch's start");
        assert!(token(100, 0, 1 << 32).is_err(), "2^32 writes after it");
        assert!(token(u64::MAX >> 1, 0, 1).is_err(), "an ordinal past 63 bits");
    }
}
