//! The reference's catalog mutation lock (spec §5): a lock file, published under an arbitration
//! claim, that a running ghostget 0.17.2 and proclease both honour. Written once over the seam
//! ([`Fs`], [`Kernel`]); the native host runs it over rustix (`proclease`'s `plugin_catalog`).
//!
//! On disk, in the plugin store's `locks/` (`<state home>/provider-plugins/locks/`, created with
//! `artifacts/`, `trust/` and `active/`, all 0700):
//! * the lock `.catalog-mutation.lock`, holding the canonical
//!   `{"acquiredAt":…,"bootId":…,"pid":…,"processStartId":…,"schemaVersion":1,"scope":"catalog-mutation"}`
//!   and a newline (Appendix A item 5);
//! * while a process acquires it, its arbitration claim
//!   `.lock-claim-<target>-<waiting|candidate|held>-<claim id>.json`, where
//!   `target = sha256("portable-provider-plugin-lock" ‖ 0x00 ‖ <physical path of the lock>)`,
//!   holding the canonical `{"bootId","claimId","kind":"portable-provider-plugin-lock-claim","pid","processStartId","schemaVersion":1,"targetSha256"}`
//!   and a newline, arbitrated as §3.5 claims are (`arbitration`);
//! * publication stages `.lock-publication-<pid>-<boot id>-<process start id>-<uuid>.tmp`, from
//!   which claims and the lock are hard-linked into place, and `.lock-reclaim-<pid>-<uuid>`, the
//!   name a lock is renamed to before it is unlinked (at release, or when its holder is gone).
//!
//! Acquiring fails fast: while a live process holds the lock the answer is `portable plugin
//! catalog mutation is already locked`, at once. A lock whose holder is provably gone is taken
//! over (renamed away, its inode checked, unlinked); a holder that cannot be judged is an error,
//! never a guess. Release removes exactly the inode this process published.
//!
//! Choices where the spec is silent (the same as the independent peer's, `tests/peer/README.md`):
//! claims carry a trailing newline and are published from a publication stage by hard link; the
//! §3.5 bounds apply to lock claims; a lock that is not exactly a lock record is an error
//! (`… lock is malformed`), never deleted. One deviation (`docs/deviations.md`): a
//! `.lock-reclaim-<pid>-<uuid>` whose pid is gone is removed — the reference recovers it nowhere.

use core::time::Duration;

use proclease_core::liveness::OwnerStatus;
use proclease_core::records::Owner;

use crate::files::{self, StableRead};
use crate::prelude::*;
use crate::seam::{Errno, Fs, Kernel};
use crate::state_store::arbitration::{self, ArbitrationError, ClaimKind, Failure, Phase};
use crate::state_store::{MAX_ENTRIES, StoreProtocol, mutation_claim};

/// The reference's message when a live process holds the lock (§5).
pub const ALREADY_LOCKED: &str = "portable plugin catalog mutation is already locked";
/// The lock's file name in `locks/`.
pub const LOCK_NAME: &str = ".catalog-mutation.lock";
/// The guard's file in the store's `.proclease/locks/` (`docs/deviations.md` 30): a kernel lock
/// every proclease takes before it acquires the catalog lock and keeps while it holds it
/// ([`acquire`]).
pub const GUARD_LOCK: &str = "catalog-mutation.lock";
/// The plugin store's root below the state home (§6B.1).
pub const STORE_ROOT: &str = "provider-plugins";
/// The plugin store's directories (§5 `ensureStore`).
pub const STORE_DIRECTORIES: [&str; 4] = ["artifacts", "trust", "active", "locks"];

const ROUNDS: usize = 64;
const PUBLISH_ATTEMPTS: usize = 4;
const MAX_LOCK_BYTES: u64 = 64 * 1024;
const PUBLICATION_PREFIX: &str = ".lock-publication-";
const RECLAIM_PREFIX: &str = ".lock-reclaim-";

/// The arbitration claims of one lock path.
struct LockClaim {
    target: String,
}

impl<F: Fs> ClaimKind<F> for LockClaim {
    fn prefix(&self) -> String {
        format!(".lock-claim-{}-", self.target)
    }

    fn name(&self, phase: Phase, claim_id: &str) -> String {
        format!(".lock-claim-{}-{}-{claim_id}.json", self.target, phase.name())
    }

    fn parse_name(&self, name: &str) -> Option<(Phase, String)> {
        let rest = name.strip_prefix(".lock-claim-")?.strip_suffix(".json")?;
        let (target, rest) = rest.split_at_checked(64)?;
        if target != self.target {
            return None;
        }
        let (phase, id) = rest.strip_prefix('-')?.split_once('-')?;
        let phase = Phase::parse(phase)?;
        proclease_core::js::is_uuid_v4(id).then(|| (phase, id.to_string()))
    }

    fn content(&self, claim_id: &str, owner: &Owner) -> String {
        format!(
            "{{\"bootId\":\"{}\",\"claimId\":\"{claim_id}\",\"kind\":\"portable-provider-plugin-lock-claim\",\"pid\":{},\"processStartId\":\"{}\",\"schemaVersion\":1,\"targetSha256\":\"{}\"}}\n",
            owner.boot_id, owner.pid, owner.process_start_id, self.target
        )
    }

    fn publish(&self, fs: &F, dir: &F::Dir, claim_id: &str, owner: &Owner) -> Result<(), ArbitrationError> {
        // The kernel is not at hand here: the stage's random part comes from the claim id,
        // itself fresh and random (the arbitration's), so the stage name is as unguessable.
        let name = ClaimKind::<F>::name(self, Phase::Waiting, claim_id);
        match publish_linked(fs, dir, owner, ClaimKind::<F>::content(self, claim_id, owner).as_bytes(), &name, claim_id) {
            Ok(true) => Ok(()),
            Ok(false) => Err(ClaimKind::<F>::error(self, Failure::NamePresent, None)),
            Err(e) => Err(ClaimKind::<F>::error(self, Failure::Io, Some(e.into()))),
        }
    }

    fn message(&self, failure: Failure) -> &'static str {
        match failure {
            Failure::Unstable => "portable plugin lock arbitration did not reach a stable snapshot",
            Failure::TooMany => "portable plugin lock arbitration claim count exceeds its bound",
            Failure::OwnerUnknown => "portable plugin lock arbitration owner cannot be inspected safely",
            Failure::TwoOwners => "portable plugin lock arbitration admitted two owners",
            Failure::Malformed => "portable plugin lock arbitration claim is malformed",
            Failure::NamePresent => "portable plugin lock arbitration claim name is already present",
            Failure::Io => "portable plugin lock arbitration claim could not be written",
        }
    }
}

/// Writes `bytes` to a fresh publication stage `.lock-publication-<pid>-<boot>-<start>-<uuid>.tmp`
/// (0600, fsynced; `uuid` a fresh v4), hard-links it to `name` and removes the stage; fsyncs
/// `dir`. `Ok(false)` when `name` already exists.
fn publish_linked<F: Fs>(fs: &F, dir: &F::Dir, owner: &Owner, bytes: &[u8], name: &str, uuid: &str) -> Result<bool, Errno> {
    let stage = format!("{PUBLICATION_PREFIX}{}-{}-{}-{uuid}.tmp", owner.pid, owner.boot_id, owner.process_start_id);
    let unlink_stage = || {
        let _ = fs.unlink(dir, &stage);
    };
    if let Err(e) = files::write_new_file(fs, dir, &stage, bytes, true) {
        unlink_stage();
        return Err(e);
    }
    let linked = fs.link(dir, &stage, dir, name);
    unlink_stage();
    match linked {
        Ok(()) => {}
        Err(Errno::EXIST) => return Ok(false),
        Err(e) => return Err(e),
    }
    if let Err(e) = fs.sync_dir_for_claims(dir) {
        let _ = fs.unlink(dir, name);
        return Err(e);
    }
    Ok(true)
}

/// The canonical lock record of `owner` acquired at `acquired_at` (§5; Appendix A item 5).
pub fn lock_text(acquired_at: &str, owner: &Owner) -> String {
    format!(
        "{{\"acquiredAt\":\"{acquired_at}\",\"bootId\":\"{}\",\"pid\":{},\"processStartId\":\"{}\",\"schemaVersion\":1,\"scope\":\"catalog-mutation\"}}\n",
        owner.boot_id, owner.pid, owner.process_start_id
    )
}

/// The holder a lock text records, when `text` is exactly a lock record.
fn holder_in(text: &str) -> Option<Owner> {
    let value: serde_json::Value = serde_json::from_str(text).ok()?;
    // acquiredAt must round-trip (§5): the same timestamp rule as an invocation lease's (§6B.2).
    let acquired_at = value.get("acquiredAt")?.as_str().filter(|t| proclease_core::records::invocation_lease::is_iso_timestamp(t))?;
    let owner = arbitration::owner_members(&value)?;
    (lock_text(acquired_at, &owner) == text).then_some(owner)
}

/// Who else in this process may acquire the lock while this caller does, which decides what a
/// claim or a lock recorded with this process's own identity (pid, boot id, start time) means
/// to [`acquire`]. Either way the caller first takes the guard ([`GUARD_LOCK`],
/// `docs/deviations.md` 30): held by another, the answer is [`ALREADY_LOCKED`] at once; taken,
/// the claim and the lock its last holder noted there and left are taken over, in whatever
/// process that holder ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InProcess {
    /// No one: the lock is counted process-wide and acquired under a process-wide mutex (the
    /// native host's `PluginCatalog`). A claim of this process is a stale leftover; so is a
    /// lock of this process while the guard is held (a release that failed). A guard that
    /// cannot be opened (a read-only state home) is done without, and such a lock then refuses.
    Counted,
    /// Other instances of this process (the portable artifact): holding a guard that excludes
    /// them, a claim or lock of this process was left by an instance that no longer runs (a
    /// trap) and is taken over; where the host's guard excludes nothing (no kernel locks), such
    /// a claim or lock may be another instance's, live, and is judged as any owner's. A guard
    /// that cannot be opened is an error.
    Instances,
}

/// The bytes a guard's file holds for one acquisition: the arbitration claim's id (36 bytes),
/// then the lock record it is about to publish, padded with spaces to [`GUARD_NOTE_LENGTH`]
/// (a shorter note over a longer one leaves nothing of the longer behind).
pub fn guard_note(claim_id: &str, record: &str) -> Vec<u8> {
    let mut note = Vec::with_capacity(GUARD_NOTE_LENGTH);
    note.extend_from_slice(claim_id.as_bytes());
    note.extend_from_slice(record.as_bytes());
    note.resize(GUARD_NOTE_LENGTH.max(note.len()), b' ');
    note
}

/// The length of a guard note ([`guard_note`]), bytes: a claim id and the longest lock record.
pub const GUARD_NOTE_LENGTH: usize = 320;

/// What a guard's holder writes over its note once its lock is released, or when it acquired
/// none: a note of nothing ([`GUARD_NOTE_LENGTH`] spaces), so that the next holder has nothing to
/// take over and a state home that ends as it began is byte for byte the same.
pub fn guard_note_cleared() -> Vec<u8> {
    alloc::vec![b' '; GUARD_NOTE_LENGTH]
}

/// The claim id and lock record a guard note names, each when it is well formed.
fn noted_in_guard(note: &[u8]) -> (Option<String>, Option<String>) {
    let Ok(text) = core::str::from_utf8(note) else { return (None, None) };
    let Some((claim_id, record)) = text.split_at_checked(36) else { return (None, None) };
    let claim_id = proclease_core::js::is_uuid_v4(claim_id).then(|| claim_id.to_string());
    let record = record.trim_end_matches(' ');
    let record = holder_in(record).map(|_| record.to_string());
    (claim_id, record)
}

/// A lock this process published: its directory and the identity of its inode.
pub struct HeldLock<F: Fs> {
    dir: F::Dir,
    dev: u64,
    ino: u64,
    own: Owner,
    /// The guard ([`GUARD_LOCK`]), held until the lock is released or this is dropped.
    guard: Option<F::Lock>,
}

/// Acquires the catalog mutation lock of `store`'s state home (§5 step 3), failing fast.
/// `physical_root` resolves the plugin store's root (`<state home>/provider-plugins`) to its
/// physical path (realpath: the host's; bytes, as the file system names it), once it exists:
/// the claims' target names it.
///
/// `in_process` says what keeps this process's other would-be holders out meanwhile, and so
/// what a claim or a lock recorded with this process's own identity means ([`InProcess`]).
///
/// Errors (the reference's messages): [`ALREADY_LOCKED`]; `portable plugin catalog mutation lock
/// owner cannot be inspected safely`; `portable plugin lock publication owner cannot be inspected
/// safely`; `portable plugin catalog mutation lock could not be acquired`; the arbitration's; a
/// plugin store directory that cannot be created or is unsafe; the root's path unresolved.
pub fn acquire<F: Fs, K: Kernel + ?Sized>(
    store: &StoreProtocol<F, K>,
    physical_root: impl FnOnce() -> Result<Vec<u8>, String>,
    now_ms: i64,
    in_process: InProcess,
) -> Result<HeldLock<F>, String> {
    let fs = store.fs();
    let guard = match fs.try_lock(store.locks(), GUARD_LOCK) {
        Ok(Some(guard)) => Some(guard),
        Ok(None) => return Err(ALREADY_LOCKED.into()),
        Err(_) if in_process == InProcess::Counted => None,
        Err(e) => return Err(format!(".proclease/locks/{GUARD_LOCK}: {e}")),
    };
    let acquired = acquire_guarded(store, physical_root, now_ms, in_process, guard.as_ref());
    if acquired.is_err()
        && let Some(guard) = &guard
    {
        let _ = fs.note_in_lock(guard, &guard_note_cleared());
    }
    let (dir, dev, ino, own) = acquired?;
    Ok(HeldLock { dir, dev, ino, own, guard })
}

/// [`acquire`] once the guard is settled (`None`: done without one): the locks directory and
/// the published lock's inode and owner.
fn acquire_guarded<F: Fs, K: Kernel + ?Sized>(
    store: &StoreProtocol<F, K>,
    physical_root: impl FnOnce() -> Result<Vec<u8>, String>,
    now_ms: i64,
    in_process: InProcess,
    guard: Option<&F::Lock>,
) -> Result<(F::Dir, u64, u64, Owner), String> {
    let (fs, identity) = (store.fs(), store.kernel());
    for name in STORE_DIRECTORIES {
        store.ensure_private_directory(&format!("{STORE_ROOT}/{name}")).map_err(|e| e.to_string())?;
    }
    let locks_path = format!("{STORE_ROOT}/locks");
    let dir = store.open_directory(&locks_path).map_err(|e| e.to_string())?.ok_or("the plugin store's locks directory vanished")?;
    let mut lock_path = physical_root()?;
    while lock_path.len() > 1 && lock_path.ends_with(b"/") {
        lock_path.pop();
    }
    lock_path.extend_from_slice(format!("/locks/{LOCK_NAME}").as_bytes());
    let target = lock_target(&lock_path);
    let kind = LockClaim { target };
    let own = mutation_claim::own_identity(identity)?;
    let acquired_at = proclease_core::records::invocation_lease::iso_timestamp(now_ms).ok_or("the clock is outside the dates a lock can record")?;
    let record = lock_text(&acquired_at, &own);
    let text = |e: ArbitrationError| e.to_string();
    let previous = guard.and_then(|guard| fs.lock_note(guard, GUARD_NOTE_LENGTH).ok()).unwrap_or_default();
    let (abandoned_claim, abandoned_lock) = noted_in_guard(&previous);
    // Alone in this process: no other instance can be acquiring (a count, or a guard that
    // excludes them); only then are this process's own claims and lock leftovers.
    let alone = in_process == InProcess::Counted || guard.is_some_and(|guard| fs.lock_excludes(guard));
    // Holding a guard that excludes every other acquirer, a lock of this process's own is
    // one its holder let go without releasing.
    let abandoned = Abandoned { own: guard.is_some_and(|guard| fs.lock_excludes(guard)), lock: abandoned_lock.as_deref() };
    for _ in 0..ROUNDS {
        remove_stale_stages(fs, &dir, identity, &kind, abandoned_claim.as_deref())?;
        let claim_id = identity.new_uuid();
        if let Some(guard) = guard {
            // Unwritten (a read-only state home), it only leaves the guard's next holder unable
            // to tell this acquisition's leftovers from a live holder's.
            let _ = fs.note_in_lock(guard, &guard_note(&claim_id, &record));
        }
        let Some(claim) = arbitration::arbitrate_as(fs, &dir, &kind, identity, &own, &claim_id, alone).map_err(text)? else {
            identity.pause(Duration::from_millis(5));
            continue;
        };
        let outcome = publish_lock(fs, &dir, &own, &record, identity, &abandoned);
        arbitration::release(fs, &dir, &claim.name);
        if let Some((dev, ino)) = outcome? {
            return Ok((dir, dev, ino, own));
        }
    }
    Err("portable plugin catalog mutation lock could not be acquired".into())
}

/// `sha256("portable-provider-plugin-lock" ‖ 0x00 ‖ lock path)` in hex (§5), over the path's
/// bytes.
pub fn lock_target(lock_path: &[u8]) -> String {
    let mut input = b"portable-provider-plugin-lock\0".to_vec();
    input.extend_from_slice(lock_path);
    proclease_core::digest::sha256_hex(&input)
}

/// Which existing locks [`publish_lock`] knows abandoned though their holder lives.
struct Abandoned<'a> {
    /// One recorded with this process's own identity.
    own: bool,
    /// The one with exactly this text (the guard's previous holder's).
    lock: Option<&'a str>,
}

/// Holding the arbitration claim: up to four attempts to publish the lock, taking over one whose
/// holder is provably gone, or that is known `abandoned`.
/// `Ok(Some(dev, ino))` of the published lock; `Ok(None)` when the attempts ran out.
fn publish_lock<F: Fs, K: Kernel + ?Sized>(fs: &F, dir: &F::Dir, own: &Owner, record: &str, identity: &K, abandoned: &Abandoned<'_>) -> Result<Option<(u64, u64)>, String> {
    for _ in 0..PUBLISH_ATTEMPTS {
        if publish_linked(fs, dir, own, record.as_bytes(), LOCK_NAME, &identity.new_uuid()).map_err(|e| format!("{LOCK_NAME}: {e}"))? {
            let stat = fs.lstat(dir, LOCK_NAME).map_err(|e| format!("{LOCK_NAME}: {e}"))?.ok_or("the catalog mutation lock vanished")?;
            return Ok(Some((stat.dev, stat.ino)));
        }
        let Some((holder, text, dev, ino)) = read_lock(fs, dir)? else { continue };
        let left = (abandoned.own && holder == *own) || abandoned.lock == Some(text.as_str());
        let status = if left { OwnerStatus::DifferentOrDead } else { arbitration::status(identity, &holder) };
        match status {
            OwnerStatus::ExactLiveOwner => return Err(ALREADY_LOCKED.into()),
            OwnerStatus::Unknown => return Err("portable plugin catalog mutation lock owner cannot be inspected safely".into()),
            OwnerStatus::DifferentOrDead => remove_exact(fs, dir, own, dev, ino, &identity.new_uuid(), "portable plugin catalog mutation lock changed before reclaim")?,
        }
    }
    Ok(None)
}

/// The lock's holder, text and inode, or `None` when it vanished or changed while read.
fn read_lock<F: Fs>(fs: &F, dir: &F::Dir) -> Result<Option<(Owner, String, u64, u64)>, String> {
    let malformed = || "portable plugin catalog mutation lock is malformed".to_string();
    let file = match fs.open_file(dir, LOCK_NAME) {
        Ok(file) => file,
        Err(Errno::NOENT) => return Ok(None),
        Err(_) => return Err(malformed()),
    };
    let before = fs.stat_file(&file).map_err(|e| format!("{LOCK_NAME}: {e}"))?;
    if files::unsafe_file_reason(&before, fs.euid()).is_some() || before.size < 2 {
        return Err(malformed());
    }
    let bytes = match files::read_stable(fs, &file, &before, MAX_LOCK_BYTES).map_err(|e| format!("{LOCK_NAME}: {e}"))? {
        StableRead::Bytes(bytes) => bytes,
        StableRead::TooLarge => return Err(malformed()),
        StableRead::Changed | StableRead::StatusChanged(_) => return Ok(None),
    };
    match fs.lstat(dir, LOCK_NAME) {
        Ok(Some(now)) if now.same_inode(&before) => {}
        _ => return Ok(None),
    }
    let text = core::str::from_utf8(&bytes).map_err(|_| malformed())?;
    let holder = holder_in(text).ok_or_else(malformed)?;
    Ok(Some((holder, text.to_string(), before.dev, before.ino)))
}

/// Removes the lock if it is still inode `(dev, ino)`: renames it to
/// `.lock-reclaim-<own pid>-<uuid>` (`uuid` a fresh v4), checks the inode, unlinks it and
/// fsyncs. Another inode is linked back (never over a file) and reported with `changed`.
fn remove_exact<F: Fs>(fs: &F, dir: &F::Dir, own: &Owner, dev: u64, ino: u64, uuid: &str, changed: &str) -> Result<(), String> {
    let reclaim = format!("{RECLAIM_PREFIX}{}-{uuid}", own.pid);
    match fs.rename(dir, LOCK_NAME, dir, &reclaim, false) {
        Ok(()) => {}
        Err(Errno::NOENT) => return Err(changed.into()),
        Err(e) => return Err(format!("{LOCK_NAME}: {e}")),
    }
    match fs.lstat(dir, &reclaim) {
        Ok(Some(stat)) if stat.dev == dev && stat.ino == ino => {}
        _ => {
            let _ = fs.link(dir, &reclaim, dir, LOCK_NAME);
            let _ = fs.unlink(dir, &reclaim);
            return Err(changed.into());
        }
    }
    fs.unlink(dir, &reclaim).map_err(|e| format!("{reclaim}: {e}"))?;
    let _ = fs.sync_dir_for_claims(dir);
    Ok(())
}

/// Removes publication stages whose owner (named in the stage) is provably gone, reclaim
/// names whose pid is gone (§5; the latter a deviation), and the arbitration claim (any phase,
/// its publication stage too) with the id `abandoned_claim` (a guard's previous holder's). An
/// owner that cannot be judged is an error.
fn remove_stale_stages<F: Fs, K: Kernel + ?Sized>(fs: &F, dir: &F::Dir, identity: &K, kind: &LockClaim, abandoned_claim: Option<&str>) -> Result<(), String> {
    let names = fs.read_names(dir, MAX_ENTRIES, b"").map_err(|e| match e {
        Some(e) => format!("{STORE_ROOT}/locks: {e}"),
        None => format!("{STORE_ROOT}/locks has more than {MAX_ENTRIES} entries"),
    })?;
    for raw in names {
        let Ok(name) = String::from_utf8(raw) else { continue };
        if let Some(abandoned) = abandoned_claim {
            let claim = ClaimKind::<F>::parse_name(kind, &name).is_some_and(|(_, id)| id == abandoned);
            let stage = publication_id(&name) == Some(abandoned);
            if claim || stage {
                let _ = fs.unlink(dir, name.as_str());
                continue;
            }
        }
        if let Some(owner) = publication_owner(&name) {
            match arbitration::status(identity, &owner) {
                OwnerStatus::ExactLiveOwner => {}
                OwnerStatus::Unknown => return Err("portable plugin lock publication owner cannot be inspected safely".into()),
                OwnerStatus::DifferentOrDead => {
                    let _ = fs.unlink(dir, name.as_str());
                }
            }
        } else if let Some(pid) = reclaim_pid(&name) {
            let private = matches!(fs.lstat(dir, &name), Ok(Some(stat)) if files::unsafe_file_reason(&stat, fs.euid()).is_none());
            if private && identity.pid_gone(pid) {
                let _ = fs.unlink(dir, name.as_str());
            }
        }
    }
    Ok(())
}

/// The owner a publication stage `.lock-publication-<pid>-<boot>-<start>-<uuid>.tmp` names.
fn publication_owner(name: &str) -> Option<Owner> {
    let rest = name.strip_prefix(PUBLICATION_PREFIX)?.strip_suffix(".tmp")?;
    let (pid, rest) = rest.split_once('-')?;
    let (boot, rest) = rest.split_at_checked(64)?;
    let (start, id) = rest.strip_prefix('-')?.split_at_checked(64)?;
    let id = id.strip_prefix('-')?;
    let hex = |t: &str| t.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    let pid: u64 = pid.parse().ok().filter(|p| *p > 0 && !pid.starts_with('0'))?;
    (hex(boot) && hex(start) && proclease_core::js::is_uuid_v4(id)).then(|| Owner { pid, boot_id: boot.into(), process_start_id: start.into() })
}

/// The uuid a publication stage `.lock-publication-<pid>-<boot>-<start>-<uuid>.tmp` ends with
/// (a claim's stage carries its claim id there).
fn publication_id(name: &str) -> Option<&str> {
    let rest = name.strip_prefix(PUBLICATION_PREFIX)?.strip_suffix(".tmp")?;
    rest.get(rest.len().checked_sub(36)?..)
}

/// The pid of a reclaim name `.lock-reclaim-<pid>-<uuid v4>`.
fn reclaim_pid(name: &str) -> Option<u64> {
    let (pid, id) = name.strip_prefix(RECLAIM_PREFIX)?.split_once('-')?;
    let pid: u64 = pid.parse().ok().filter(|p| *p > 0 && !pid.starts_with('0'))?;
    proclease_core::js::is_uuid_v4(id).then_some(pid)
}

impl<F: Fs> HeldLock<F> {
    /// The process that published the lock (the identity its record names).
    pub fn owner(&self) -> &Owner {
        &self.own
    }

    /// Releases the lock (§5 step 5) on `fs`: removes exactly the inode this process published
    /// (the reclaim name's random part from `kernel`).
    ///
    /// Errors: `portable plugin catalog mutation lock changed before release` when the lock is
    /// gone or is another inode (which is then left in place).
    pub fn release<K: Kernel + ?Sized>(self, fs: &F, kernel: &K) -> Result<(), String> {
        let released = remove_exact(fs, &self.dir, &self.own, self.dev, self.ino, &kernel.new_uuid(), "portable plugin catalog mutation lock changed before release");
        // Released: the guard's note names nothing to take over any more. The guard goes
        // with `self`, after this.
        if released.is_ok()
            && let Some(guard) = &self.guard
        {
            let _ = fs.note_in_lock(guard, &guard_note_cleared());
        }
        released
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lock_record_is_byte_exact_and_read_back_only_when_exact() {
        let owner = Owner { pid: 4242, boot_id: "a".repeat(64), process_start_id: "b".repeat(64) };
        let text = lock_text("2026-07-25T12:00:00.000Z", &owner);
        assert_eq!(
            text,
            format!(
                "{{\"acquiredAt\":\"2026-07-25T12:00:00.000Z\",\"bootId\":\"{}\",\"pid\":4242,\"processStartId\":\"{}\",\"schemaVersion\":1,\"scope\":\"catalog-mutation\"}}\n",
                "a".repeat(64),
                "b".repeat(64)
            )
        );
        assert_eq!(holder_in(&text), Some(owner));
        assert_eq!(holder_in(text.trim_end()), None);
    }

    #[test]
    fn a_guard_note_names_the_claim_and_the_exact_lock_and_nothing_of_a_longer_one() {
        let owner = Owner { pid: 4242, boot_id: "a".repeat(64), process_start_id: "b".repeat(64) };
        let record = lock_text("2026-07-25T12:00:00.000Z", &owner);
        let id = "3f1c9a52-8d2e-4b7a-9c1d-2e5f6a7b8c9d";
        let note = guard_note(id, &record);
        assert_eq!(note.len(), GUARD_NOTE_LENGTH);
        assert_eq!(noted_in_guard(&note), (Some(id.to_string()), Some(record.clone())));
        // A longer pid's record noted before: the padding leaves nothing of it.
        let longer = guard_note(id, &lock_text("2026-07-25T12:00:00.000Z", &Owner { pid: 4_194_304, ..owner.clone() }));
        let mut file = longer.clone();
        file[..note.len()].copy_from_slice(&note);
        assert_eq!(noted_in_guard(&file).1, Some(record));
        assert_eq!(noted_in_guard(b""), (None, None));
        assert_eq!(noted_in_guard(&guard_note_cleared()), (None, None));
        assert_eq!(noted_in_guard(&guard_note("not-a-uuid-at-all-but-36-bytes-long!", "x")), (None, None));
        assert_eq!(publication_id(&format!(".lock-publication-77-{}-{}-{id}.tmp", "a".repeat(64), "b".repeat(64))), Some(id));
    }

    #[test]
    fn stage_and_reclaim_names_carry_their_owner() {
        let (a, b) = ("a".repeat(64), "b".repeat(64));
        let id = "3f1c9a52-8d2e-4b7a-9c1d-2e5f6a7b8c9d";
        let owner = publication_owner(&format!(".lock-publication-77-{a}-{b}-{id}.tmp")).expect("owner");
        assert_eq!((owner.pid, owner.boot_id, owner.process_start_id), (77, a, b));
        assert_eq!(reclaim_pid(&format!(".lock-reclaim-12-{id}")), Some(12));
        assert_eq!(reclaim_pid(&format!(".lock-reclaim-012-{id}")), None);
    }
}
