//! Directory leases and their recovery (spec §6A.6): a working directory (`raw-working`) or a
//! staging directory to be published (`bundle-stage`) marked as owned by a live process, so
//! that after any crash recovery removes exactly the directories whose owners are provably
//! gone — by physical identity, never by path alone.
//!
//! This module creates, updates and releases leases; [`creation`] creates the directory it
//! leases (recording the intent first); [`new_directory`] leases a directory nothing else uses,
//! as `run` does; [`recovery`] recovers them.

mod creation;
mod new_directory;
mod recovery;

pub use creation::{CreationAction, CreationOutcome, INTENTS, create_with_directory, recover_creations};
pub use new_directory::{NewDirectoryError, Refusal, RefusalKind, lease_entry_path, lease_new_directory, set_aside, set_aside_lease_entry};
pub use recovery::{Action, Conflict, MightClaim, Options, Outcome, Report, Run, SETTLE_READS, finished_marker, is_inside, recover, recover_each, settled_run};

use alloc::format;
use alloc::string::String;

use crate::effects::{Clock, DirectoryFacts, Entropy, Processes, Store, Workspace, uuid_v4};
use crate::error::LeaseCode;
use crate::records::directory_lease::{DirectoryLease, Phase, Role, dirname, is_bounded_path};
use crate::records::{DirectoryIdentity, Owner};
use crate::{Error, Failure, js};

/// The lease collection (§6A.1).
pub const DIRECTORY: &str = "recovery/beeper-message-like-me-directory-leases";
/// The most entries the collection may hold for recovery to run (§6A.1).
pub const MAX_CLAIMS: usize = 64;
/// The largest claim file (§6A.1).
pub const MAX_CLAIM_BYTES: u32 = 16_384;

/// The store path of a lease's claim file.
pub fn claim_path(id: &str) -> String {
    format!("{DIRECTORY}/{id}.json")
}

/// A held directory lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handle {
    /// The claim this handle last wrote.
    pub claim: DirectoryLease,
    /// sha256 of its file text.
    pub content_sha256: String,
    /// Released (the claim file was removed; the directory never is).
    pub released: bool,
}

impl Handle {
    /// Resumes a handle on `claim` as if this process had written it.
    pub fn resume(claim: DirectoryLease, released: bool) -> Handle {
        let parsed = claim.parsed();
        Handle { claim: parsed.record, content_sha256: parsed.sha256, released }
    }
}

/// What to lease (§6A.6 `createBeeperMessageLikeMeDirectoryLease` options). Times are
/// JavaScript numbers in ms, validated as the reference does (safe integers ≥ 0).
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The role.
    pub role: Role,
    /// The directory (absolute, normalised).
    pub path: String,
    /// bundle-stage: the publication target (a sibling of `path`).
    pub output_root: Option<String>,
    /// When a dead owner's `launching` lease becomes recoverable.
    pub recover_after_ms: f64,
    /// Creation time; the clock when `None`.
    pub now_ms: Option<f64>,
}

/// A request that passed §6A.6 steps 1–2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedRequest {
    /// The role.
    pub role: Role,
    /// The directory.
    pub path: String,
    /// `dirname(path)`.
    pub parent_path: String,
    /// The publication target.
    pub output_root: Option<String>,
    /// Creation time (ms).
    pub now_ms: u64,
    /// Recovery time (ms).
    pub recover_after_ms: u64,
}

/// `milliseconds(value)` over a JavaScript number: a safe integer ≥ 0.
fn milliseconds(value: f64) -> Option<u64> {
    (value.is_finite() && (0.0..=js::MAX_SAFE_INTEGER).contains(&value) && value == (value as u64) as f64).then_some(value as u64)
}

/// §6A.6 steps 1–2: the checks directory-lease creation makes before any filesystem work.
///
/// Errors (prefixed): `directory lease path is invalid`, `directory lease output is invalid`,
/// `directory lease creation time is invalid`, `directory lease request is invalid`.
pub fn check_request(request: &Request, clock: &mut dyn Clock) -> Result<CheckedRequest, Error> {
    if !is_bounded_path(&request.path) {
        return Err(Error::lease(LeaseCode::DirectoryLeasePathIsInvalid));
    }
    let parent_path = dirname(&request.path);
    if let Some(output) = &request.output_root
        && !is_bounded_path(output)
    {
        return Err(Error::lease(LeaseCode::DirectoryLeaseOutputIsInvalid));
    }
    let now = request.now_ms.unwrap_or_else(|| clock.now_ms() as f64);
    let now_ms = milliseconds(now).ok_or_else(|| Error::lease(LeaseCode::DirectoryLeaseCreationTimeIsInvalid))?;
    let recover = request.recover_after_ms;
    let recover_ok = recover.is_finite() && recover.abs() <= js::MAX_SAFE_INTEGER && recover == (recover as i64) as f64 && recover >= now;
    let consistent =
        recover_ok && (request.role == Role::BundleStage) == request.output_root.is_some() && request.output_root.as_deref().is_none_or(|out| dirname(out) == parent_path);
    if !consistent {
        return Err(Error::lease(LeaseCode::DirectoryLeaseRequestIsInvalid));
    }
    Ok(CheckedRequest {
        role: request.role,
        path: request.path.clone(),
        parent_path: parent_path.into(),
        output_root: request.output_root.clone(),
        now_ms,
        recover_after_ms: recover as u64,
    })
}

/// §6A.4: the identity of a physical directory from its facts — its own realpath, a real
/// directory owned by the user, with a birth time, and private (mode 0700) or at least not
/// writable by group or others.
///
/// Errors: `directory lease target is not an owned physical directory`.
pub fn physical_identity(facts: &DirectoryFacts, private: bool) -> Result<DirectoryIdentity, Error> {
    let mode_ok = if private { facts.mode & 0o777 == 0o700 } else { facts.mode & 0o022 == 0 };
    let birth_ok = facts.identity.birthtime_ns != "0" && js::is_ascii_digits(&facts.identity.birthtime_ns);
    if facts.canonical && facts.is_directory && facts.owned && birth_ok && mode_ok {
        Ok(facts.identity.clone())
    } else {
        Err(Error::lease(LeaseCode::DirectoryLeaseTargetIsNotAnOwnedPhysicalDirectory))
    }
}

/// The physical identity of `path`, or `None` when absent.
fn identity_if_present(workspace: &mut dyn Workspace, path: &str, private: bool) -> Result<Option<DirectoryIdentity>, Error> {
    match workspace.inspect(path)? {
        Some(facts) => physical_identity(&facts, private).map(Some),
        None => Ok(None),
    }
}

/// The physical identity of `path`, which must exist (an absent one is the raw "no such
/// directory" error of the reference, not a lease error).
fn identity_of(workspace: &mut dyn Workspace, path: &str, private: bool) -> Result<DirectoryIdentity, Error> {
    identity_if_present(workspace, path, private)?
        .ok_or_else(|| Error::Storage(Failure::os("ENOENT", path, "inspecting the directory", format!("{path}: no such directory (ENOENT); create it first"))))
}

fn wrapped<T>(code: LeaseCode, section: impl FnOnce() -> Result<T, Error>) -> Result<T, Error> {
    section().map_err(|error| if error.is_beeper_refusal() { error } else { Error::wrapping(code, &error) })
}

/// The effects directory leases use.
pub struct Effects<'a> {
    /// The state store.
    pub store: &'a mut dyn Store,
    /// Process identity.
    pub processes: &'a mut dyn Processes,
    /// The granted workspace.
    pub workspace: &'a mut dyn Workspace,
    /// Wall-clock time.
    pub clock: &'a mut dyn Clock,
    /// Randomness.
    pub entropy: &'a mut dyn Entropy,
}

impl Effects<'_> {
    /// The same effects, borrowed again for one call.
    pub fn reborrow(&mut self) -> Effects<'_> {
        Effects { store: &mut *self.store, processes: &mut *self.processes, workspace: &mut *self.workspace, clock: &mut *self.clock, entropy: &mut *self.entropy }
    }
}

/// Beyond the reference: a new lease is refused while the collection holds [`MAX_CLAIMS`]
/// entries, as the reference's recovery refuses a collection over that bound as a whole
/// (`docs/deviations.md` 20): `… directory lease collection exceeded its reviewed bound`,
/// before anything is created. The reference's create writes the 65th and recovery then stops.
pub fn check_room(store: &mut dyn Store) -> Result<(), Error> {
    match store.snapshot(DIRECTORY, false)? {
        Some(snapshot) if snapshot.entries.len() >= MAX_CLAIMS => Err(Error::lease(LeaseCode::DirectoryLeaseCollectionExceededItsReviewedBound)),
        _ => Ok(()),
    }
}

/// `createBeeperMessageLikeMeDirectoryLease` (§6A.6); then, proclease's own step, the new lease
/// takes its directory out of provably dead creators' intents (`creation::adopt`,
/// `docs/deviations.md` 27), which never fails the lease.
///
/// Errors: those of [`check_request`]; the own identity's (raw); `… directory lease target is
/// not an owned physical directory` or a raw error for an absent directory; `… directory lease
/// ID was already present`; anything else as `… directory lease could not be created safely`.
pub fn create(request: &Request, mut fx: Effects<'_>) -> Result<Handle, Error> {
    let handle = create_lease(request, fx.reborrow())?;
    // The lease holds the directory now; a dead creator's intent must stop naming it.
    let _ = creation::adopt(&handle.claim, None, fx.store, fx.processes);
    Ok(handle)
}

/// [`create`] without [`creation::adopt`]: the lease record alone.
fn create_lease(request: &Request, fx: Effects<'_>) -> Result<Handle, Error> {
    let checked = check_request(request, fx.clock)?;
    check_room(fx.store)?;
    let owner = fx.processes.self_identity().map_err(Error::unavailable)?;
    let parent_identity = identity_of(fx.workspace, &checked.parent_path, false)?;
    let directory_identity = identity_of(fx.workspace, &checked.path, true)?;
    let claim = DirectoryLease {
        id: uuid_v4(fx.entropy),
        role: checked.role,
        path: checked.path,
        parent_path: checked.parent_path,
        parent_identity,
        directory_identity,
        output_root: checked.output_root,
        owner,
        child_owner: None,
        phase: Phase::Preparing,
        created_at_ms: checked.now_ms,
        recover_after_ms: checked.recover_after_ms,
    }
    .parsed();
    let store = fx.store;
    wrapped(LeaseCode::DirectoryLeaseCouldNotBeCreatedSafely, || {
        store.ensure_private_directory(DIRECTORY)?;
        if !store.create_if_absent(&claim_path(&claim.record.id), &claim.canonical)? {
            return Err(Error::lease(LeaseCode::DirectoryLeaseIdWasAlreadyPresent));
        }
        Ok(())
    })?;
    Ok(Handle { claim: claim.record, content_sha256: claim.sha256, released: false })
}

/// Whether the raw lifecycle allows `current → requested` (§6A.6).
pub fn transition_allowed(current: Phase, requested: Phase) -> bool {
    use Phase::*;
    match requested {
        Launching => matches!(current, Preparing | Settled),
        Running => current == Launching,
        Settled => matches!(current, Launching | Running),
        Preparing => false,
    }
}

/// `updateBeeperMessageLikeMeDirectoryLease(lease, phase, childPid?)` (§6A.6).
///
/// Errors (prefixed): `only an active raw directory lease can change phase`, `raw directory
/// lease lifecycle transition is invalid`, `running directory lease requires a child process
/// identity`, `only a running directory lease accepts a child process identity`, the capture's
/// raw error, `directory lease changed before its lifecycle update` (handle unchanged),
/// `directory lease lifecycle could not be updated safely`.
pub fn update(handle: &mut Handle, phase: Phase, child_pid: Option<i64>, store: &mut dyn Store, processes: &mut dyn Processes) -> Result<(), Error> {
    if handle.released || handle.claim.role != Role::RawWorking {
        return Err(Error::lease(LeaseCode::OnlyAnActiveRawDirectoryLeaseCanChangePhase));
    }
    if !transition_allowed(handle.claim.phase, phase) {
        return Err(Error::lease(LeaseCode::RawDirectoryLeaseLifecycleTransitionIsInvalid));
    }
    let child_owner: Option<Owner> = if phase == Phase::Running {
        let pid = child_pid.filter(|pid| (1..=2_147_483_647).contains(pid)).ok_or_else(|| Error::lease(LeaseCode::RunningDirectoryLeaseRequiresAChildProcessIdentity))?;
        Some(crate::liveness::capture(processes, pid as u64).map_err(Error::unavailable)?)
    } else {
        if child_pid.is_some() {
            return Err(Error::lease(LeaseCode::OnlyARunningDirectoryLeaseAcceptsAChildProcessIdentity));
        }
        None
    };
    let next = DirectoryLease { phase, child_owner, ..handle.claim.clone() }.parsed();
    let path = claim_path(&handle.claim.id);
    // Lazily (no collection fsync): after a power loss or an OS crash, the only crashes that can
    // undo it, the owner and its children are of an earlier boot, so recovery treats every
    // phase alike, and a finished run is kept by its journal, not its phase
    // (`docs/durability.md`, steps 6, 7 and 9).
    let written = wrapped(LeaseCode::DirectoryLeaseLifecycleCouldNotBeUpdatedSafely, || Ok(store.replace_if_unchanged_lazily(&path, &handle.content_sha256, &next.canonical)?))?;
    if !written {
        return Err(Error::lease(LeaseCode::DirectoryLeaseChangedBeforeItsLifecycleUpdate));
    }
    handle.claim = next.record;
    handle.content_sha256 = next.sha256;
    Ok(())
}

/// `releaseBeeperMessageLikeMeDirectoryLease` (§6A.6): removes the claim file by
/// compare-and-swap (never the directory); a no-op once released.
///
/// Errors: `… directory lease changed before release`, `… could not be released safely`.
pub fn release(handle: &mut Handle, store: &mut dyn Store) -> Result<(), Error> {
    if handle.released {
        return Ok(());
    }
    let path = claim_path(&handle.claim.id);
    let removed = wrapped(LeaseCode::DirectoryLeaseCouldNotBeReleasedSafely, || Ok(store.remove_if_unchanged(&path, &handle.content_sha256)?))?;
    if !removed {
        return Err(Error::lease(LeaseCode::DirectoryLeaseChangedBeforeRelease));
    }
    handle.released = true;
    Ok(())
}
