//! The reference's claim arbitration (spec §3.5 steps 2–5 and "list live claims"), shared by
//! the per-leaf state mutation claims ([`super::mutation_claim`]) and the catalog lock's
//! arbitration claims (§5, `plugin_catalog::lock_file`), which differ only in names, content,
//! publication and messages ([`ClaimKind`]).
//!
//! Each contender publishes a claim file in the `waiting` phase, then looks at the live claims of
//! the same target: it gives up ("lost") if any other claim is past `waiting` or has a smaller
//! claim id; else it renames its claim to `candidate` and looks again (lost if another is `held`
//! or smaller); else it renames it to `held` and looks once more — a second `held` claim is an
//! error (`… admitted two owners`). A claim whose owner is provably gone (its recorded pid, boot
//! id and process start id no longer name a live process) is removed by whoever lists it; an
//! owner that cannot be judged makes the listing fail rather than guess.
//!
//! Cooperative and non-blocking: a loser is told so at once and decides itself whether to retry.

use crate::prelude::*;
use core::time::Duration;

use proclease_core::liveness::OwnerStatus;
use proclease_core::records::Owner;

use crate::files::{self, StableRead};
use crate::seam::{Errno, Fs, Kernel};

/// How many listings may see claims vanish, move or die before arbitration gives up (§3.5).
pub const SNAPSHOT_ATTEMPTS: usize = 8;
/// The most claim files of one target a listing accepts (§3.5).
pub const MAX_CLAIMS: usize = 1024;
/// How many more times an owner whose status is `unknown` is probed, 10 ms apart (§3.5).
pub const UNKNOWN_RETRIES: usize = 3;
/// The largest claim file read (bytes).
pub const MAX_CLAIM_BYTES: u64 = 4096;

/// A claim's phase (§3.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Staged and waiting for its turn.
    Waiting,
    /// Competing: the lowest candidate becomes the holder.
    Candidate,
    /// Holding the record: the writer may change it.
    Held,
}

impl Phase {
    /// The word in a claim's file name.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Waiting => "waiting",
            Phase::Candidate => "candidate",
            Phase::Held => "held",
        }
    }

    /// The phase a file-name word names.
    pub fn parse(word: &str) -> Option<Phase> {
        match word {
            "waiting" => Some(Phase::Waiting),
            "candidate" => Some(Phase::Candidate),
            "held" => Some(Phase::Held),
            _ => None,
        }
    }
}

/// The failures arbitration reports, each with the message of its [`ClaimKind`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// No stable listing after [`SNAPSHOT_ATTEMPTS`].
    Unstable,
    /// More than [`MAX_CLAIMS`] claims of the target.
    TooMany,
    /// A claim's owner is `unknown` after the retries.
    OwnerUnknown,
    /// Two `held` claims.
    TwoOwners,
    /// A claim file that is not exactly a claim (the peer's conservative reading: neither
    /// deleted nor ignored).
    Malformed,
    /// A fresh claim's name already exists.
    NamePresent,
    /// Writing, renaming or fsyncing a claim failed (the cause is attached).
    Io,
}

/// An arbitration failure: the kind's message for `failure`, and an I/O cause if there is one.
#[derive(Debug)]
pub struct ArbitrationError {
    /// The reference's (or, where the spec gives none, the peer's) message.
    pub message: &'static str,
    /// The system call that failed, if one did.
    pub io: Option<crate::os_error::IoError>,
}

impl core::fmt::Display for ArbitrationError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match &self.io {
            Some(io) => write!(f, "{} ({io})", self.message),
            None => f.write_str(self.message),
        }
    }
}

/// What differs between §3.5 mutation claims and §5 lock claims, on the file system `F`.
pub trait ClaimKind<F: Fs + ?Sized> {
    /// The common start of this target's claim file names.
    fn prefix(&self) -> String;
    /// The file name of this target's claim `claim_id` in `phase`.
    fn name(&self, phase: Phase, claim_id: &str) -> String;
    /// The phase and claim id a file name of this target's claims carries; `None` for any other
    /// name (another target's claims included).
    fn parse_name(&self, name: &str) -> Option<(Phase, String)>;
    /// The exact text of claim `claim_id` of `owner`.
    fn content(&self, claim_id: &str, owner: &Owner) -> String;
    /// Publishes claim `claim_id` of `owner` in the `waiting` phase, durably, never over an
    /// existing name.
    fn publish(&self, fs: &F, dir: &F::Dir, claim_id: &str, owner: &Owner) -> Result<(), ArbitrationError>;
    /// The message of `failure`.
    fn message(&self, failure: Failure) -> &'static str;

    /// The failure `failure`, with an optional I/O cause.
    fn error(&self, failure: Failure, io: Option<crate::os_error::IoError>) -> ArbitrationError {
        ArbitrationError { message: self.message(failure), io }
    }
}

/// Whether a claim file's text (at a claim name, never a stage's) is one an OS crash left: empty,
/// or only NUL bytes (a filesystem that kept the file's size but not its data). Every writer
/// (proclease, ghostget) writes a claim's whole text to its stage before the first rename, so a
/// claim name of a live process never shows such a text; one that does was published before a
/// crash of the machine that lost its unsynced data, and its owner died with that boot. Removed
/// as a dead owner's claim; the reference refuses it as malformed (`docs/deviations.md` 26).
pub fn lost_in_a_crash(text: &str) -> bool {
    text.bytes().all(|b| b == 0)
}

/// The owner a claim text records, when `text` is exactly `kind`'s text for `claim_id`.
pub fn owner_in<F: Fs + ?Sized>(kind: &dyn ClaimKind<F>, claim_id: &str, text: &str) -> Option<Owner> {
    let value: serde_json::Value = serde_json::from_str(text).ok()?;
    let owner = owner_members(&value)?;
    (kind.content(claim_id, &owner) == text).then_some(owner)
}

/// The `pid`, `bootId` and `processStartId` members of a claim or lock record (§3.5, §5): a safe
/// integer ≥ 1 and two lowercase 64-hex digests; `None` when any is missing or malformed.
pub fn owner_members(value: &serde_json::Value) -> Option<Owner> {
    let pid = value.get("pid")?.as_u64().filter(|&p| p >= 1 && p as f64 <= proclease_core::js::MAX_SAFE_INTEGER)?;
    let digest = |key: &str| value.get(key)?.as_str().filter(|d| proclease_core::js::is_digest(d)).map(str::to_string);
    Some(Owner { pid, boot_id: digest("bootId")?, process_start_id: digest("processStartId")? })
}

/// What a contender does next (§3.5 steps 3–5), decided by [`step`] from what it saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Rename the own claim to this phase, then look again.
    Advance(Phase),
    /// Another contender goes first: remove the own claim; the caller decides whether to retry.
    Lose,
    /// The own claim is `held` and no other is: the target is this contender's.
    Win,
    /// Another claim is `held` too (`… admitted two owners`): remove the own claim and fail.
    TwoOwners,
}

/// The arbitration's decision, a function of what one listing showed: the own claim, in
/// `phase` with id `own`, against the other live claims `others` (phase and id; dead owners'
/// claims already removed). Claim ids order contenders (the smaller goes first):
/// - `waiting`: lose to any claim past `waiting` or with a smaller id; else become `candidate`;
/// - `candidate`: lose to a `held` claim or a smaller id; else become `held`;
/// - `held`: another `held` claim is two owners; else won.
pub fn step(phase: Phase, own: &str, others: &[(Phase, String)]) -> Step {
    let smaller = |id: &String| id.as_str() < own;
    match phase {
        Phase::Waiting if others.iter().any(|(p, id)| *p != Phase::Waiting || smaller(id)) => Step::Lose,
        Phase::Waiting => Step::Advance(Phase::Candidate),
        Phase::Candidate if others.iter().any(|(p, id)| *p == Phase::Held || smaller(id)) => Step::Lose,
        Phase::Candidate => Step::Advance(Phase::Held),
        Phase::Held if others.iter().any(|(p, _)| *p == Phase::Held) => Step::TwoOwners,
        Phase::Held => Step::Win,
    }
}

/// A claim this process holds in the `held` phase; [`release`] it.
#[derive(Debug)]
pub struct Held {
    /// Its file name.
    pub name: String,
}

/// Runs the arbitration for one fresh claim of `own`: `Ok(Some)` when this process holds the
/// target, `Ok(None)` when it lost (its claim is already gone again).
///
/// The caller arbitrates for one target of `dir` at a time in this process (a process-wide
/// mutex, or a kernel lock that excludes this process's other instances too), so another claim
/// of `own` is stale and is removed ([`live_claims`]).
pub fn arbitrate<F: Fs + ?Sized, K: Kernel + ?Sized>(fs: &F, dir: &F::Dir, kind: &dyn ClaimKind<F>, kernel: &K, own: &Owner) -> Result<Option<Held>, ArbitrationError> {
    arbitrate_as(fs, dir, kind, kernel, own, &kernel.new_uuid(), true)
}

/// [`arbitrate`] for a claim with the fresh id `claim_id` (a version-4 UUID the caller drew
/// from [`Kernel::new_uuid`] and recorded before publishing, `Fs::note_in_lock`). With
/// `alone_in_process` false (the caller holds no lock that excludes this process's other
/// instances: a host without kernel locks), another claim of `own` is judged like any live
/// owner's: it may be another instance's write in progress.
pub fn arbitrate_as<F: Fs + ?Sized, K: Kernel + ?Sized>(
    fs: &F,
    dir: &F::Dir,
    kind: &dyn ClaimKind<F>,
    kernel: &K,
    own: &Owner,
    claim_id: &str,
    alone_in_process: bool,
) -> Result<Option<Held>, ArbitrationError> {
    let claim_id = claim_id.to_string();
    let stale_own = alone_in_process.then_some(own);
    kind.publish(fs, dir, &claim_id, own)?;
    let mut name = kind.name(Phase::Waiting, &claim_id);
    let mut phase = Phase::Waiting;
    let outcome = (|| -> Result<bool, ArbitrationError> {
        // At most three listings: waiting, candidate, held.
        loop {
            let others = live_claims(fs, dir, kind, kernel, Some(&claim_id), stale_own)?;
            match step(phase, &claim_id, &others) {
                Step::Advance(next) => {
                    name = advance(fs, dir, kind, &name, next, &claim_id)?;
                    phase = next;
                }
                Step::Lose => return Ok(false),
                Step::Win => return Ok(true),
                Step::TwoOwners => return Err(kind.error(Failure::TwoOwners, None)),
            }
        }
    })();
    match outcome {
        Ok(true) => Ok(Some(Held { name })),
        Ok(false) => {
            release(fs, dir, &name);
            Ok(None)
        }
        Err(error) => {
            release(fs, dir, &name);
            Err(error)
        }
    }
}

/// Renames the own claim `from` to `phase` (never over an existing name); the new name.
///
/// The directory is not fsynced (for the state mutation claims and the catalog lock's claims
/// alike, both of which advance here): a claim excludes live processes of this boot, which all see
/// the directory as the kernel holds it, durable or not. After a power loss its owner is gone,
/// so whichever name survives (stage, any phase, or none) is a dead owner's claim that the next
/// listing removes (a name that survived without its content, which is not fsynced either, is
/// removed as [`lost_in_a_crash`]).
fn advance<F: Fs + ?Sized>(fs: &F, dir: &F::Dir, kind: &dyn ClaimKind<F>, from: &str, phase: Phase, claim_id: &str) -> Result<String, ArbitrationError> {
    let to = kind.name(phase, claim_id);
    fs.rename(dir, from, dir, &to, false).map_err(|e| match e {
        Errno::EXIST => kind.error(Failure::NamePresent, None),
        e => kind.error(Failure::Io, Some(e.into())),
    })?;
    Ok(to)
}

/// Releases a claim: unlinks it; a failure is ignored (a claim left behind is a dead owner's
/// claim once this process is gone, removed by the next listing). Not fsynced, for the reason
/// `advance` gives: a claim that reappears after a power loss is a previous boot's.
pub fn release<F: Fs + ?Sized>(fs: &F, dir: &F::Dir, name: &str) {
    let _ = fs.unlink(dir, name);
}

/// "List live claims" (§3.5): the phase and id of every live claim of the target except `skip`,
/// after removing the claims of provably gone owners. Retries until one pass sees no claim
/// vanish, move or die.
///
/// With `own`, a claim of this very process other than `skip` is removed as stale: the caller
/// passes `own` only when this process arbitrates for one target of a directory at a time (the
/// store holds a collection kernel lock that excludes its other instances too, the catalog lock
/// its process-wide mutex), so such a claim is one whose release failed — left in place it
/// would block this process's own later writes until it exits. Without kernel locks two
/// instances of one process may arbitrate at once, and the caller passes `None`.
pub fn live_claims<F: Fs + ?Sized, K: Kernel + ?Sized>(
    fs: &F,
    dir: &F::Dir,
    kind: &dyn ClaimKind<F>,
    kernel: &K,
    skip: Option<&str>,
    own: Option<&Owner>,
) -> Result<Vec<(Phase, String)>, ArbitrationError> {
    for _ in 0..SNAPSHOT_ATTEMPTS {
        let names = files::names_starting_with(fs, dir, &kind.prefix(), MAX_CLAIMS).map_err(|e| kind.error(Failure::TooMany, e.map(Into::into)))?;
        let mut claims: Vec<(String, Phase, String)> = names.into_iter().filter_map(|name| kind.parse_name(&name).map(|(phase, id)| (name, phase, id))).collect();
        claims.sort_by(|a, b| a.0.cmp(&b.0));
        let mut stable = true;
        let mut live = Vec::new();
        for (name, phase, id) in claims {
            if Some(id.as_str()) == skip {
                continue;
            }
            let Some(text) = read_claim(fs, dir, &name).map_err(|failure| kind.error(failure, None))? else {
                stable = false; // vanished or moved while read
                continue;
            };
            if lost_in_a_crash(&text) {
                tracing::debug!(claim = %name, "removing a claim whose content an OS crash lost");
                let _ = fs.unlink(dir, &name);
                stable = false;
                continue;
            }
            let owner = owner_in(kind, &id, &text).ok_or_else(|| kind.error(Failure::Malformed, None))?;
            if own == Some(&owner) {
                let _ = fs.unlink(dir, &name);
                stable = false;
                continue;
            }
            match status(kernel, &owner) {
                OwnerStatus::ExactLiveOwner => live.push((phase, id)),
                OwnerStatus::Unknown => return Err(kind.error(Failure::OwnerUnknown, None)),
                OwnerStatus::DifferentOrDead => {
                    tracing::debug!(claim = %name, pid = owner.pid, "removing the claim of a provably dead owner");
                    let _ = fs.unlink(dir, &name);
                    stable = false;
                }
            }
        }
        if stable {
            return Ok(live);
        }
    }
    Err(kind.error(Failure::Unstable, None))
}

/// The pid of a live holder of `kind`'s claims in `dir`, if one is seen (for a message: a
/// claim that outlasted the writer's wait).
pub fn live_holder<F: Fs + ?Sized, K: Kernel + ?Sized>(fs: &F, dir: &F::Dir, kind: &dyn ClaimKind<F>, kernel: &K) -> Option<i32> {
    let names = files::names_starting_with(fs, dir, &kind.prefix(), MAX_CLAIMS).ok()?;
    names.into_iter().find_map(|name| {
        let (_, id) = kind.parse_name(&name)?;
        let owner = owner_in(kind, &id, &read_claim(fs, dir, &name).ok()??)?;
        (status(kernel, &owner) == OwnerStatus::ExactLiveOwner).then(|| i32::try_from(owner.pid).ok()).flatten()
    })
}

/// An owner's status, probed up to [`UNKNOWN_RETRIES`] more times 10 ms apart while `unknown`.
pub fn status<K: Kernel + ?Sized>(kernel: &K, owner: &Owner) -> OwnerStatus {
    let mut status = kernel.owner_status(owner).unwrap_or(OwnerStatus::Unknown);
    for _ in 0..UNKNOWN_RETRIES {
        if status != OwnerStatus::Unknown {
            break;
        }
        kernel.pause(Duration::from_millis(10));
        status = kernel.owner_status(owner).unwrap_or(OwnerStatus::Unknown);
    }
    status
}

/// A claim file's text: `Ok(None)` when it vanished or was replaced while read; a file that is
/// not a private regular file of this user, too large, or not UTF-8 is malformed.
pub fn read_claim<F: Fs + ?Sized>(fs: &F, dir: &F::Dir, name: &str) -> Result<Option<String>, Failure> {
    let file = match fs.open_file(dir, name) {
        Ok(file) => file,
        Err(Errno::NOENT) => return Ok(None),
        Err(_) => return Err(Failure::Malformed),
    };
    let before = fs.stat_file(&file).map_err(|_| Failure::Malformed)?;
    if files::unsafe_file_reason(&before, fs.euid()).is_some() {
        return Err(Failure::Malformed);
    }
    let bytes = match files::read_stable(fs, &file, &before, MAX_CLAIM_BYTES).map_err(|_| Failure::Malformed)? {
        StableRead::Bytes(bytes) => bytes,
        StableRead::TooLarge => return Err(Failure::Malformed),
        StableRead::Changed | StableRead::StatusChanged(_) => return Ok(None),
    };
    match fs.lstat(dir, name) {
        Ok(Some(now)) if now.same_inode(&before) => {}
        Ok(_) => return Ok(None),
        Err(_) => return Err(Failure::Malformed),
    }
    String::from_utf8(bytes).map(Some).map_err(|_| Failure::Malformed)
}

#[cfg(test)]
mod tests {
    use super::{Phase, Step, step};
    use crate::prelude::*;

    fn claims(list: &[(Phase, &str)]) -> Vec<(Phase, String)> {
        list.iter().map(|(phase, id)| (*phase, (*id).to_string())).collect()
    }

    #[test]
    fn alone_a_contender_goes_through_every_phase_and_wins() {
        assert_eq!(step(Phase::Waiting, "b", &[]), Step::Advance(Phase::Candidate));
        assert_eq!(step(Phase::Candidate, "b", &[]), Step::Advance(Phase::Held));
        assert_eq!(step(Phase::Held, "b", &[]), Step::Win);
    }

    #[test]
    fn the_smaller_claim_id_goes_first_and_a_waiting_contender_yields_to_any_further_one() {
        // Waiting: a smaller waiting id, or anyone past waiting (even with a larger id), wins.
        assert_eq!(step(Phase::Waiting, "b", &claims(&[(Phase::Waiting, "a")])), Step::Lose);
        assert_eq!(step(Phase::Waiting, "b", &claims(&[(Phase::Waiting, "c")])), Step::Advance(Phase::Candidate));
        assert_eq!(step(Phase::Waiting, "b", &claims(&[(Phase::Candidate, "c")])), Step::Lose);
        assert_eq!(step(Phase::Waiting, "b", &claims(&[(Phase::Held, "c")])), Step::Lose);
        // Candidate: a held claim or a smaller id wins; a larger candidate or waiting id does not.
        assert_eq!(step(Phase::Candidate, "b", &claims(&[(Phase::Waiting, "a")])), Step::Lose);
        assert_eq!(step(Phase::Candidate, "b", &claims(&[(Phase::Candidate, "c"), (Phase::Waiting, "d")])), Step::Advance(Phase::Held));
        assert_eq!(step(Phase::Candidate, "b", &claims(&[(Phase::Held, "c")])), Step::Lose);
    }

    #[test]
    fn a_second_held_claim_is_two_owners_whatever_the_ids() {
        assert_eq!(step(Phase::Held, "b", &claims(&[(Phase::Held, "c")])), Step::TwoOwners);
        assert_eq!(step(Phase::Held, "b", &claims(&[(Phase::Held, "a")])), Step::TwoOwners);
        // Claims still on their way (waiting, candidate) never undo a held claim.
        assert_eq!(step(Phase::Held, "b", &claims(&[(Phase::Waiting, "a"), (Phase::Candidate, "a0")])), Step::Win);
    }

    #[test]
    fn of_two_contenders_that_see_each_other_at_most_one_advances() {
        // Every pair of phases and id orders: never both go on from the same sight of each other.
        let phases = [Phase::Waiting, Phase::Candidate, Phase::Held];
        for a in phases {
            for b in phases {
                let on = |s: Step| matches!(s, Step::Advance(_) | Step::Win);
                let (sa, sb) = (step(a, "a", &claims(&[(b, "b")])), step(b, "b", &claims(&[(a, "a")])));
                assert!(!(on(sa) && on(sb)), "{a:?} a / {b:?} b: {sa:?} and {sb:?}");
            }
        }
    }
}
