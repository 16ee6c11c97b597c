//! The reference's per-leaf state mutation claim (spec §3.5) and the crash recovery its helper
//! operations perform in the directory they work in (§3.9) — how proclease and a running
//! ghostget 0.17.2 keep out of each other's way on one record.
//!
//! **Claim.** Before it creates, replaces or removes the file `<leaf>` of a collection, a writer
//! publishes `.io-mutation-<target>-waiting-<claim id>.lock` in that collection, where
//! `target = sha256("io-state-mutation" ‖ 0x00 ‖ leaf)` (for `active.json`:
//! `7090835e…797e`), holding exactly
//! `{"kind":"io-state-mutation-claim","schemaVersion":1,"targetSha256":…,"claimId":…,"pid":…,"bootId":…,"processStartId":…}`
//! and a newline (keys in this insertion order, not canonical). It is written as
//! `.io-mutation-stage-<claim id>-<pid>.tmp` (mode 0600) and renamed into place, then
//! moves through `candidate` to `held` (`super::arbitration`). The writer mutates the record
//! only while its claim is `held`, and unlinks the claim afterwards. Nothing of a claim is
//! fsynced (ghostget fsyncs its stage, and the directory after each rename): a claim only
//! excludes live processes, and after a power loss every claim is a dead owner's. A claim name
//! that survives a power loss without its content (empty, or zeros) is removed as lost in that
//! crash (`arbitration::lost_in_a_crash`, `docs/deviations.md` 26); on a disk this saves five
//! fsyncs per mutation.
//!
//! **Recovery** (`recover_directory`), before every write and every listing of a collection:
//! write temporaries `.io-write-<pid>-<uuid>.tmp` whose pid is gone (`kill(pid, 0)` → ESRCH);
//! mutation stages whose owner is provably gone (their full identity when the stage is an exact
//! claim text, else their file-name pid); the state helper's tree quarantines
//! `.io-remove-tree-<pid>-<ms>-<32 hex>.quarantine` of a gone pid; with `claims`, every claim of a
//! gone owner. proclease also removes `.io-remove-file-<claim id>.quarantine` — a record that a
//! remover had already taken out of its collection — once no claim with that id is left: the
//! reference names no recovery for it, and one left in the directory-lease collection would make
//! every later recovery refuse the collection (`docs/deviations.md`).
//!
//! A pid above 2³¹−1 cannot be asked with `kill` and is never counted as gone.

use crate::prelude::*;
use core::time::Duration;

use proclease_core::digest;
use proclease_core::liveness::OwnerStatus;
use proclease_core::records::Owner;

use super::arbitration::{self, ArbitrationError, ClaimKind, Failure, Phase};
use crate::files;
use crate::seam::{Errno, Fs, Kernel, S_IFDIR};

/// The reference's message when this process cannot read its own identity (§3.5 step 1).
pub const IDENTITY_UNAVAILABLE: &str = "state mutation process identity is unavailable";
/// The reference's message when more claim targets are found than a recovery reviews (§3.5).
pub const TOO_MANY_TARGETS: &str = "state mutation recovery exceeds its target bound";
/// The most claim targets one recovery reviews (§3.5).
pub const MAX_TARGETS: usize = 10_000;

const CLAIM_PREFIX: &str = ".io-mutation-";
const STAGE_PREFIX: &str = ".io-mutation-stage-";

/// The mutation claims of one leaf of a collection.
pub struct MutationClaim {
    target: String,
}

impl MutationClaim {
    /// The claims of the file named `leaf`.
    pub fn for_leaf(leaf: &str) -> Self {
        MutationClaim { target: target_sha256(leaf) }
    }

    fn for_target(target: &str) -> Self {
        MutationClaim { target: target.to_string() }
    }
}

/// `sha256("io-state-mutation" ‖ 0x00 ‖ leaf)` in hex (§3.5).
pub fn target_sha256(leaf: &str) -> String {
    let mut input = b"io-state-mutation\0".to_vec();
    input.extend_from_slice(leaf.as_bytes());
    digest::sha256_hex(&input)
}

/// The exact text of a mutation claim (§3.5; Appendix A item 6).
pub fn claim_text(target: &str, claim_id: &str, owner: &Owner) -> String {
    format!(
        "{{\"kind\":\"io-state-mutation-claim\",\"schemaVersion\":1,\"targetSha256\":\"{target}\",\"claimId\":\"{claim_id}\",\"pid\":{},\"bootId\":\"{}\",\"processStartId\":\"{}\"}}\n",
        owner.pid, owner.boot_id, owner.process_start_id
    )
}

impl<F: Fs + ?Sized> ClaimKind<F> for MutationClaim {
    fn prefix(&self) -> String {
        format!("{CLAIM_PREFIX}{}-", self.target)
    }

    fn name(&self, phase: Phase, claim_id: &str) -> String {
        format!("{CLAIM_PREFIX}{}-{}-{claim_id}.lock", self.target, phase.name())
    }

    fn parse_name(&self, name: &str) -> Option<(Phase, String)> {
        let (target, phase, id) = parse_claim_name(name)?;
        (target == self.target).then(|| (phase, id.to_string()))
    }

    fn content(&self, claim_id: &str, owner: &Owner) -> String {
        claim_text(&self.target, claim_id, owner)
    }

    fn publish(&self, fs: &F, dir: &F::Dir, claim_id: &str, owner: &Owner) -> Result<(), ArbitrationError> {
        let stage = format!("{STAGE_PREFIX}{claim_id}-{}.tmp", owner.pid);
        let unlink_stage = || {
            let _ = fs.unlink(dir, &stage);
        };
        // Not fsynced: a claim whose content a power loss took is judged lost in that crash
        // (`arbitration::lost_in_a_crash`), so the content buys nothing durable.
        if let Err(e) = files::write_new_file(fs, dir, &stage, <Self as ClaimKind<F>>::content(self, claim_id, owner).as_bytes(), false) {
            unlink_stage();
            return Err(<Self as ClaimKind<F>>::error(self, Failure::Io, Some(e.into())));
        }
        match fs.rename(dir, &stage, dir, &<Self as ClaimKind<F>>::name(self, Phase::Waiting, claim_id), false) {
            Ok(()) => {}
            Err(Errno::EXIST) => {
                unlink_stage();
                return Err(<Self as ClaimKind<F>>::error(self, Failure::NamePresent, None));
            }
            Err(e) => {
                unlink_stage();
                return Err(<Self as ClaimKind<F>>::error(self, Failure::Io, Some(e.into())));
            }
        }
        // No directory fsync: see `arbitration::advance`.
        Ok(())
    }

    fn message(&self, failure: Failure) -> &'static str {
        match failure {
            Failure::Unstable => "state mutation claims did not reach a stable snapshot",
            Failure::TooMany => "state mutation claim count exceeds its bound",
            Failure::OwnerUnknown => "state mutation claim owner cannot be inspected safely",
            Failure::TwoOwners => "state mutation arbitration admitted two owners",
            Failure::Malformed => "state mutation claim is malformed",
            Failure::NamePresent => "state mutation claim name is already present",
            Failure::Io => "state mutation claim could not be written",
        }
    }
}

/// `(target, phase, claim id)` of an exact claim name
/// `.io-mutation-<64 hex>-<waiting|candidate|held>-<uuid v4>.lock`.
fn parse_claim_name(name: &str) -> Option<(&str, Phase, &str)> {
    let rest = name.strip_prefix(CLAIM_PREFIX)?.strip_suffix(".lock")?;
    let (target, rest) = rest.split_at_checked(64)?;
    if !is_hex(target) {
        return None;
    }
    let (phase, id) = rest.strip_prefix('-')?.split_once('-')?;
    let phase = Phase::parse(phase)?;
    proclease_core::js::is_uuid_v4(id).then_some((target, phase, id))
}

fn is_hex(text: &str) -> bool {
    text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// This process's identity for its claims: four attempts 10 ms apart (§3.5 step 1).
pub fn own_identity<K: Kernel + ?Sized>(kernel: &K) -> Result<Owner, &'static str> {
    for attempt in 0..4 {
        if let Ok(own) = kernel.self_identity() {
            return Ok(own);
        }
        if attempt < 3 {
            kernel.pause(Duration::from_millis(10));
        }
    }
    Err(IDENTITY_UNAVAILABLE)
}

/// What a `recover_directory` removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Recovered {
    /// Write temporaries of gone writers.
    pub write_temporaries: usize,
    /// Mutation-claim stages of gone owners.
    pub stages: usize,
    /// Tree-removal quarantines of gone helpers.
    pub tree_quarantines: usize,
    /// File-removal quarantines whose remover's claim is gone.
    pub file_quarantines: usize,
    /// Mutation claims of gone owners (only with `claims`).
    pub claims: usize,
    /// The claim and stage of an abandoned claim id (its writer, alive or not, no longer holds
    /// the collection lock under which it noted the id).
    pub abandoned: usize,
}

/// A pid as the reference's name patterns write it: `[1-9][0-9]{0,9}`.
fn name_pid(text: &str) -> Option<u64> {
    (!text.is_empty() && text.len() <= 10 && !text.starts_with('0') && text.bytes().all(|b| b.is_ascii_digit())).then(|| text.parse().ok()).flatten()
}

/// Whether `name` in `dir` is a private regular file of this user.
fn private_file<F: Fs + ?Sized>(fs: &F, dir: &F::Dir, name: &str) -> bool {
    matches!(fs.lstat(dir, name), Ok(Some(stat)) if files::unsafe_file_reason(&stat, fs.euid()).is_none())
}

/// The crash recovery of §3.9 in the collection `dir` (see the module docs); with `claims`,
/// also the claims of gone owners of every target (§3.5 `recoverOrphanedMutationClaims`).
///
/// `abandoned`: the claim id the collection lock's previous holder noted before it published
/// its claim (`Fs::note_in_lock`), read by the caller, who now holds that lock. Every proclease
/// writer publishes and releases its claim while holding the lock, so a claim (or stage) with
/// that id still here is one its writer can no longer release: a WebAssembly instance that
/// trapped between its claim and the release, while its process lives on. It is removed even
/// though its owner is alive (`docs/deviations.md` 29); a claim of any other id — a running
/// ghostget's, which takes no proclease lock — is judged by its owner as before.
///
/// Errors: with `claims`, those of listing a target's live claims (an owner that cannot be
/// judged, an unstable listing, a malformed claim), or more than [`MAX_TARGETS`] targets.
pub fn recover_directory<F: Fs + ?Sized, K: Kernel + ?Sized>(fs: &F, dir: &F::Dir, kernel: &K, claims: bool, abandoned: Option<&str>) -> Result<Recovered, ArbitrationError> {
    let mut recovered = Recovered::default();
    // Every name this recovery concerns starts with `.io-`.
    let names = |dir: &F::Dir| -> Vec<String> { files::names_starting_with(fs, dir, ".io-", super::MAX_ENTRIES).unwrap_or_default() };
    // Dead claims first: a file quarantine is orphaned once its remover's claim is gone.
    if claims {
        let before = names(dir);
        let mut targets: Vec<&str> = before.iter().filter_map(|n| parse_claim_name(n)).map(|(target, _, _)| target).collect();
        targets.sort_unstable();
        targets.dedup();
        if targets.len() > MAX_TARGETS {
            return Err(ArbitrationError { message: TOO_MANY_TARGETS, io: None });
        }
        for target in &targets {
            arbitration::live_claims(fs, dir, &MutationClaim::for_target(target), kernel, None, None)?;
        }
        let count = |names: &[String]| names.iter().filter(|n| parse_claim_name(n).is_some()).count();
        recovered.claims = count(&before).saturating_sub(count(&names(dir)));
    }
    let mut names = names(dir);
    if let Some(abandoned) = abandoned {
        // Not fsynced: a claim's names never are (see `arbitration::advance`).
        names.retain(|name| {
            let id = parse_claim_name(name).map(|(_, _, id)| id).or_else(|| stage_name(name).map(|(id, _)| id));
            if id != Some(abandoned) || !private_file(fs, dir, name) || fs.unlink(dir, name.as_str()).is_err() {
                return true;
            }
            tracing::warn!(claim = %name, "removed a mutation claim its writer abandoned (it noted the claim in the collection lock this process now holds)");
            recovered.abandoned += 1;
            false
        });
    }
    let claim_ids: Vec<&str> = names.iter().filter_map(|n| parse_claim_name(n)).map(|(_, _, id)| id).collect();
    let mut removed = false;
    for name in &names {
        let unlink = || fs.unlink(dir, name.as_str()).is_ok();
        if let Some(pid) = write_temporary_pid(name) {
            if kernel.pid_gone(pid) && private_file(fs, dir, name) && unlink() {
                recovered.write_temporaries += 1;
                removed = true;
            }
        } else if let Some((claim_id, pid)) = stage_name(name) {
            if stage_owner_gone(fs, dir, name, claim_id, pid, kernel) && unlink() {
                recovered.stages += 1;
                removed = true;
            }
        } else if let Some(pid) = tree_quarantine_pid(name) {
            let private_dir = matches!(fs.lstat(dir, name), Ok(Some(stat))
                if stat.kind() == S_IFDIR && stat.uid == fs.euid() && stat.mode & 0o077 == 0);
            if kernel.pid_gone(pid) && private_dir && files::remove_tree(fs, dir, name).is_ok() {
                recovered.tree_quarantines += 1;
                removed = true;
            }
        } else if let Some(claim_id) = file_quarantine_id(name)
            && !claim_ids.contains(&claim_id)
            && private_file(fs, dir, name)
            && unlink()
        {
            recovered.file_quarantines += 1;
            removed = true;
        }
    }
    // Rare (only crashed writers leave anything): made durable, so that a quarantine removed
    // here does not come back after a power loss under a pid that a new boot may reuse.
    if removed {
        let _ = fs.sync_dir_for_claims(dir);
    }
    Ok(recovered)
}

/// The pid of a write temporary `.io-write-<pid>-<uuid v4>.tmp`.
fn write_temporary_pid(name: &str) -> Option<u64> {
    let (pid, id) = name.strip_prefix(".io-write-")?.strip_suffix(".tmp")?.split_once('-')?;
    proclease_core::js::is_uuid_v4(id).then(|| name_pid(pid)).flatten()
}

/// The claim id and pid of a mutation stage `.io-mutation-stage-<uuid v4>-<pid>.tmp`.
fn stage_name(name: &str) -> Option<(&str, u64)> {
    let rest = name.strip_prefix(STAGE_PREFIX)?.strip_suffix(".tmp")?;
    let (id, pid) = rest.split_at_checked(36)?;
    let pid = name_pid(pid.strip_prefix('-')?)?;
    proclease_core::js::is_uuid_v4(id).then_some((id, pid))
}

/// The pid of a tree quarantine `.io-remove-tree-<pid>-<ms>-<32 hex, a v4 uuid>.quarantine`.
fn tree_quarantine_pid(name: &str) -> Option<u64> {
    let rest = name.strip_prefix(".io-remove-tree-")?.strip_suffix(".quarantine")?;
    let mut parts = rest.splitn(3, '-');
    let pid = name_pid(parts.next()?)?;
    let ms = parts.next()?;
    let id = parts.next()?;
    let v4 = id.len() == 32 && is_hex(id) && id.as_bytes()[12] == b'4' && matches!(id.as_bytes()[16], b'8' | b'9' | b'a' | b'b');
    (!ms.is_empty() && ms.bytes().all(|b| b.is_ascii_digit()) && v4).then_some(pid)
}

/// The claim id of a file quarantine `.io-remove-file-<uuid v4>.quarantine`.
fn file_quarantine_id(name: &str) -> Option<&str> {
    let id = name.strip_prefix(".io-remove-file-")?.strip_suffix(".quarantine")?;
    proclease_core::js::is_uuid_v4(id).then_some(id)
}

/// Whether a mutation stage's owner is provably gone (§3.9): two reads must agree; an exact
/// claim text for the stage's claim id and pid is judged by its full identity, anything else
/// (empty, cut short, malformed) by the pid in its name.
fn stage_owner_gone<F: Fs + ?Sized, K: Kernel + ?Sized>(fs: &F, dir: &F::Dir, name: &str, claim_id: &str, pid: u64, kernel: &K) -> bool {
    let (Ok(Some(first)), Ok(Some(second))) = (arbitration::read_claim(fs, dir, name), arbitration::read_claim(fs, dir, name)) else { return false };
    if first != second {
        return false;
    }
    let exact = serde_json::from_str::<serde_json::Value>(&first)
        .ok()
        .and_then(|v| v.get("targetSha256").and_then(|t| t.as_str()).map(str::to_string))
        .filter(|target| proclease_core::js::is_digest(target))
        .and_then(|target| arbitration::owner_in::<F>(&MutationClaim::for_target(&target), claim_id, &first))
        .filter(|owner| owner.pid == pid);
    match exact {
        Some(owner) => arbitration::status(kernel, &owner) == OwnerStatus::DifferentOrDead,
        None => kernel.pid_gone(pid),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_target_of_active_json_is_the_reference_s() {
        assert_eq!(target_sha256("active.json"), "7090835e861362df23825dadcaeccaa91ec32490e69ec9f97b7f74b3c43a797e");
    }

    #[test]
    fn names_are_recognised_exactly() {
        let id = "3f1c9a52-8d2e-4b7a-9c1d-2e5f6a7b8c9d";
        let target = target_sha256("active.json");
        assert_eq!(parse_claim_name(&format!(".io-mutation-{target}-held-{id}.lock")), Some((target.as_str(), Phase::Held, id)));
        assert_eq!(parse_claim_name(&format!(".io-mutation-{target}-owned-{id}.lock")), None);
        assert_eq!(parse_claim_name(&format!(".io-mutation-stage-{id}-12.tmp")), None);
        assert_eq!(stage_name(&format!(".io-mutation-stage-{id}-12.tmp")), Some((id, 12)));
        assert_eq!(stage_name(&format!(".io-mutation-stage-{id}-012.tmp")), None);
        assert_eq!(write_temporary_pid(&format!(".io-write-77-{id}.tmp")), Some(77));
        assert_eq!(tree_quarantine_pid(".io-remove-tree-9-1700000000000-3f1c9a528d2e4b7a9c1d2e5f6a7b8c9d.quarantine"), Some(9));
        assert_eq!(file_quarantine_id(&format!(".io-remove-file-{id}.quarantine")), Some(id));
    }
}
