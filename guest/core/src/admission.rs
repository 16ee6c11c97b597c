//! The export admission (spec §6A.5): a singleton slot that one supervising process holds
//! while it launches and watches a helper — acquire, the helper lifecycle, release.
//!
//! Every write goes through the store's compare-and-swap with the hash of the claim this
//! handle last wrote, and rotates the claim's `revision`, so a stale handle (or an ABA
//! rewrite) can never overwrite a newer claim.

use alloc::string::String;

use crate::dispositions::{self, Disposition};
use crate::effects::{Entropy, Processes, Store, uuid_v4};
use crate::error::LeaseCode;
use crate::records::Owner;
use crate::records::export_admission::{self, ExportAdmission, Phase, Schema};
use crate::{Error, digest, js, liveness};

/// The admission collection (§6A.1).
pub const DIRECTORY: &str = "recovery/beeper-message-like-me-export-admission";
/// The admission file (§6A.1).
pub const CLAIM_PATH: &str = "recovery/beeper-message-like-me-export-admission/active.json";
/// The largest admission file read (§6A.1).
pub const MAX_CLAIM_BYTES: u32 = 16_384;
/// Acquire attempts before giving up on contention (§6A.1).
pub const MAX_ATTEMPTS: usize = 8;

/// A held admission: the current claim (schema 2 with revision), the sha256 of its file, and
/// whether it was released.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handle {
    /// The claim this handle last wrote.
    pub claim: ExportAdmission,
    /// sha256 of that claim's file text.
    pub content_sha256: String,
    /// Released (the file was removed by this handle).
    pub released: bool,
}

impl Handle {
    /// Resumes a handle on `claim` (as if this process had written it).
    ///
    /// Errors: the claim is not a current (v2 with revision) admission.
    pub fn resume(claim: ExportAdmission, released: bool) -> Result<Handle, Error> {
        if claim.schema != Schema::V2 || claim.revision.is_none() || claim.phase.is_none() {
            return Err(Error::lease(LeaseCode::ExportAdmissionRevisionIsInvalid));
        }
        let parsed = claim.parsed();
        Ok(Handle { claim: parsed.record, content_sha256: parsed.sha256, released })
    }

    /// The current phase.
    pub fn phase(&self) -> Phase {
        self.claim.phase.unwrap_or(Phase::ParentOwned)
    }
}

/// Runs `section`; an error that is not already a prefixed lease error becomes
/// `Beeper Message Like Me recovery: <message>` (the reference's "…safely" wrapping).
fn wrapped<T>(code: LeaseCode, section: impl FnOnce() -> Result<T, Error>) -> Result<T, Error> {
    section().map_err(|error| if error.is_beeper_refusal() { error } else { Error::wrapping(code, &error) })
}

/// `acquireBeeperMessageLikeMeExportAdmission` (§6A.5).
///
/// Errors: the boot id lookup's (raw); `… current boot identity is invalid`; `… another export
/// is active`; `… prior export owner cannot be inspected safely`; the parse errors of a
/// malformed `active.json`; `… export admission could not be acquired after bounded
/// contention`; anything else as `… export admission could not be acquired safely`.
pub fn acquire(store: &mut dyn Store, processes: &mut dyn Processes, entropy: &mut dyn Entropy) -> Result<Handle, Error> {
    let boot_id = processes.current_boot_id().map_err(Error::unavailable)?;
    if !js::is_digest(&boot_id) {
        return Err(Error::lease(LeaseCode::CurrentBootIdentityIsInvalid));
    }
    wrapped(LeaseCode::ExportAdmissionCouldNotBeAcquiredSafely, || {
        store.ensure_private_directory(DIRECTORY)?;
        for _ in 0..MAX_ATTEMPTS {
            if let Some(text) = store.read_if_present(CLAIM_PATH, MAX_CLAIM_BYTES)? {
                let observed = export_admission::parse_file(&text)?;
                let disposition = dispositions::admission(&observed.record, &boot_id, &mut |_, owner| liveness::probe(processes, owner)).map_err(Error::unavailable)?;
                // The verdict is about the claim read before its owner was probed; an owner that
                // moved on or released meanwhile (and then exited) would be judged by a claim that
                // is no longer there. A refusal stands only if the claim is unchanged after the
                // probe; otherwise this attempt starts again (not in the reference:
                // docs/deviations.md).
                if disposition != Disposition::Recoverable {
                    let now = store.read_if_present(CLAIM_PATH, MAX_CLAIM_BYTES)?;
                    if now.is_none_or(|now| digest::sha256_hex(now.as_bytes()) != observed.sha256) {
                        continue;
                    }
                }
                match disposition {
                    Disposition::Active => return Err(Error::lease(LeaseCode::AnotherExportIsActive)),
                    Disposition::Indeterminate => return Err(Error::lease(LeaseCode::PriorExportOwnerCannotBeInspectedSafely)),
                    Disposition::Recoverable => {
                        let mut judged = observed.sha256.clone();
                        if crate::mutations::active(crate::mutations::Mutation::AdmissionTakeoverComparesCurrentClaim)
                            && let Some(now) = store.read_if_present(CLAIM_PATH, MAX_CLAIM_BYTES)?
                        {
                            judged = digest::sha256_hex(now.as_bytes());
                        }
                        if !store.remove_if_unchanged(CLAIM_PATH, &judged)? {
                            continue;
                        }
                    }
                }
            }
            let owner = processes.self_identity().map_err(Error::unavailable)?;
            let claim =
                ExportAdmission { schema: Schema::V2, id: uuid_v4(entropy), owner, helper_owner: None, phase: Some(Phase::ParentOwned), revision: Some(uuid_v4(entropy)) }.parsed();
            let created = match store.create_if_absent(CLAIM_PATH, &claim.canonical) {
                Ok(created) => created,
                Err(failure) => {
                    // The create may have landed before the error: then it is ours.
                    let landed = store.read_if_present(CLAIM_PATH, MAX_CLAIM_BYTES)?;
                    if landed.is_some_and(|text| digest::sha256_hex(text.as_bytes()) == claim.sha256) {
                        true
                    } else if failure.kind == crate::FailureKind::Contended {
                        false
                    } else {
                        return Err(failure.into());
                    }
                }
            };
            if created {
                return Ok(Handle { claim: claim.record, content_sha256: claim.sha256, released: false });
            }
        }
        Err(Error::lease(LeaseCode::ExportAdmissionCouldNotBeAcquiredAfterBoundedContention))
    })
}

/// Whether the lifecycle allows `current → requested` with this helper argument (§6A.5 table).
pub fn transition_allowed(current: Phase, requested: Phase, helper_given: bool) -> bool {
    use Phase::*;
    match requested {
        HelperLaunching => current == ParentOwned && !helper_given,
        HelperActive => current == HelperLaunching && helper_given,
        ParentOwned => matches!(current, HelperLaunching | HelperActive) && !helper_given,
        CleanupUnsafe => matches!(current, HelperLaunching | HelperActive | CleanupUnsafe) && (!helper_given || current == HelperActive),
    }
}

/// `updateExportAdmission(handle, phase, helperOwner)` (§6A.5): the generic transition; writes
/// the next claim (fresh revision) by compare-and-swap.
///
/// Errors: `… released export admission cannot change lifecycle`, `… export admission lifecycle
/// transition is invalid`, `… export admission changed before lifecycle update` (handle
/// unchanged), `… export admission lifecycle could not be updated safely`.
pub fn update(handle: &mut Handle, phase: Phase, helper: Option<Owner>, store: &mut dyn Store, entropy: &mut dyn Entropy) -> Result<(), Error> {
    if handle.released {
        return Err(Error::lease(LeaseCode::ReleasedExportAdmissionCannotChangeLifecycle));
    }
    if !transition_allowed(handle.phase(), phase, helper.is_some()) {
        return Err(Error::lease(LeaseCode::ExportAdmissionLifecycleTransitionIsInvalid));
    }
    let next = ExportAdmission { phase: Some(phase), helper_owner: helper, revision: Some(uuid_v4(entropy)), ..handle.claim.clone() }.parsed();
    let written = wrapped(LeaseCode::ExportAdmissionLifecycleCouldNotBeUpdatedSafely, || Ok(store.replace_if_unchanged(CLAIM_PATH, &handle.content_sha256, &next.canonical)?))?;
    if !written {
        return Err(Error::lease(LeaseCode::ExportAdmissionChangedBeforeLifecycleUpdate));
    }
    handle.claim = next.record;
    handle.content_sha256 = next.sha256;
    Ok(())
}

/// `beginBeeperMessageLikeMeHelperLaunch`: parent-owned → helper-launching.
pub fn begin_helper_launch(handle: &mut Handle, store: &mut dyn Store, entropy: &mut dyn Entropy) -> Result<(), Error> {
    update(handle, Phase::HelperLaunching, None, store, entropy)
}

/// `bindBeeperMessageLikeMeHelperOwner(handle, childPid)`: the pid must be 1..=2 147 483 647
/// (`… export admission helper PID is invalid`); its identity is captured *before* the
/// lifecycle checks (a dead child fails with the capture's raw error); then helper-launching →
/// helper-active.
pub fn bind_helper(handle: &mut Handle, pid: i64, store: &mut dyn Store, processes: &mut dyn Processes, entropy: &mut dyn Entropy) -> Result<(), Error> {
    if !(1..=2_147_483_647).contains(&pid) {
        return Err(Error::lease(LeaseCode::ExportAdmissionHelperPidIsInvalid));
    }
    let helper = liveness::capture(processes, pid as u64).map_err(Error::unavailable)?;
    update(handle, Phase::HelperActive, Some(helper), store, entropy)
}

/// `settleBeeperMessageLikeMeHelper`: helper-launching / helper-active → parent-owned.
pub fn settle_helper(handle: &mut Handle, store: &mut dyn Store, entropy: &mut dyn Entropy) -> Result<(), Error> {
    update(handle, Phase::ParentOwned, None, store, entropy)
}

/// `markBeeperMessageLikeMeHelperCleanupUnsafe`: → cleanup-unsafe, keeping the recorded helper.
pub fn mark_cleanup_unsafe(handle: &mut Handle, store: &mut dyn Store, entropy: &mut dyn Entropy) -> Result<(), Error> {
    let helper = handle.claim.helper_owner.clone();
    update(handle, Phase::CleanupUnsafe, helper, store, entropy)
}

/// `releaseBeeperMessageLikeMeExportAdmission` (§6A.5): removes the claim by compare-and-swap;
/// a no-op once released.
///
/// Errors: `… export admission cannot release an unsettled helper lifecycle`, `… export
/// admission changed before release` (still held), `… could not be released safely`.
pub fn release(handle: &mut Handle, store: &mut dyn Store) -> Result<(), Error> {
    if handle.released {
        return Ok(());
    }
    if handle.phase() != Phase::ParentOwned || handle.claim.helper_owner.is_some() {
        return Err(Error::lease(LeaseCode::ExportAdmissionCannotReleaseAnUnsettledHelperLifecycle));
    }
    let removed = wrapped(LeaseCode::ExportAdmissionCouldNotBeReleasedSafely, || Ok(store.remove_if_unchanged(CLAIM_PATH, &handle.content_sha256)?))?;
    if !removed {
        return Err(Error::lease(LeaseCode::ExportAdmissionChangedBeforeRelease));
    }
    handle.released = true;
    Ok(())
}

/// What `doctor` shows for the admission: the claim on disk, its disposition (§6A.5) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Survey {
    /// The claim.
    pub claim: ExportAdmission,
    /// Its disposition for a new acquirer.
    pub disposition: Disposition,
    /// Why, in words.
    pub reason: String,
}

/// Surveys the admission without changing anything: `None` when no claim is held.
///
/// Errors: the parse errors of a malformed `active.json`; a store or boot id failure.
pub fn survey(store: &mut dyn Store, processes: &mut dyn Processes) -> Result<Option<Survey>, Error> {
    let Some(text) = store.read_if_present(CLAIM_PATH, MAX_CLAIM_BYTES)? else { return Ok(None) };
    let claim = export_admission::parse_file(&text)?.record;
    let boot_id = processes.current_boot_id().map_err(Error::unavailable)?;
    let mut words = alloc::vec::Vec::new();
    let disposition = dispositions::admission(&claim, &boot_id, &mut |probe, owner| {
        let liveness = liveness::probe(processes, owner)?;
        words.push(liveness::describe(probe.name(), owner, &liveness));
        Ok(liveness)
    })
    .map_err(Error::unavailable::<String>)?;
    let phase = claim.phase.map_or("v1", Phase::name);
    let mut reason = words.join("; ");
    reason.push_str(" (");
    reason.push_str(phase);
    reason.push(')');
    Ok(Some(Survey { claim, disposition, reason }))
}
