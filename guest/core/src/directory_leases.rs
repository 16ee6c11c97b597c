//! Directory leases and their recovery (spec §6A.6): a working directory (`raw-working`) or a
//! staging directory to be published (`bundle-stage`) marked as owned by a live process, so
//! that after any crash recovery removes exactly the directories whose owners are provably
//! gone — by physical identity, never by path alone.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use crate::dispositions::{self, Disposition};
use crate::effects::{BatchStatus, Clock, DirectoryFacts, Entropy, EntryKind, Processes, Store, Workspace, uuid_v4};
use crate::error::BEEPER_PREFIX;
use crate::liveness::{self, OwnerStatus, Spawned};
use crate::records::directory_lease::{self, DirectoryLease, Phase, Role, dirname, is_bounded_path};
use crate::records::{DirectoryIdentity, Owner};
use crate::{Error, digest, js};

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
    (value.is_finite() && value >= 0.0 && value <= js::MAX_SAFE_INTEGER && value == (value as u64) as f64).then_some(value as u64)
}

/// §6A.6 steps 1–2: the checks directory-lease creation makes before any filesystem work.
///
/// Errors (prefixed): `directory lease path is invalid`, `directory lease output is invalid`,
/// `directory lease creation time is invalid`, `directory lease request is invalid`.
pub fn check_request(request: &Request, clock: &mut dyn Clock) -> Result<CheckedRequest, Error> {
    if !is_bounded_path(&request.path) {
        return Err(Error::beeper("directory lease path is invalid"));
    }
    let parent_path = dirname(&request.path);
    if let Some(output) = &request.output_root {
        if !is_bounded_path(output) {
            return Err(Error::beeper("directory lease output is invalid"));
        }
    }
    let now = request.now_ms.unwrap_or_else(|| clock.now_ms() as f64);
    let now_ms = milliseconds(now).ok_or_else(|| Error::beeper("directory lease creation time is invalid"))?;
    let recover = request.recover_after_ms;
    let recover_ok = recover.is_finite() && recover.abs() <= js::MAX_SAFE_INTEGER && recover == (recover as i64) as f64 && recover >= now as f64;
    let consistent = recover_ok
        && (request.role == Role::BundleStage) == request.output_root.is_some()
        && request.output_root.as_deref().is_none_or(|out| dirname(out) == parent_path);
    if !consistent {
        return Err(Error::beeper("directory lease request is invalid"));
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
        Err(Error::beeper("directory lease target is not an owned physical directory"))
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
        .ok_or_else(|| Error::Storage(format!("{path}: no such directory (ENOENT); create it first")))
}

fn wrapped<T>(message: &str, section: impl FnOnce() -> Result<T, Error>) -> Result<T, Error> {
    section().map_err(|error| match error {
        Error::Lease(m) if m.starts_with(BEEPER_PREFIX) => Error::Lease(m),
        _ => Error::beeper(message),
    })
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

/// `createBeeperMessageLikeMeDirectoryLease` (§6A.6).
///
/// Errors: those of [`check_request`]; the own identity's (raw); `… directory lease target is
/// not an owned physical directory` or a raw error for an absent directory; `… directory lease
/// ID was already present`; anything else as `… directory lease could not be created safely`.
pub fn create(request: &Request, fx: Effects<'_>) -> Result<Handle, Error> {
    let checked = check_request(request, fx.clock)?;
    let owner = fx.processes.self_identity().map_err(Error::System)?;
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
    wrapped("directory lease could not be created safely", || {
        store.ensure_private_directory(DIRECTORY)?;
        if !store.create_if_absent(&claim_path(&claim.record.id), &claim.canonical)? {
            return Err(Error::beeper("directory lease ID was already present"));
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
        return Err(Error::beeper("only an active raw directory lease can change phase"));
    }
    if !transition_allowed(handle.claim.phase, phase) {
        return Err(Error::beeper("raw directory lease lifecycle transition is invalid"));
    }
    let child_owner: Option<Owner> = if phase == Phase::Running {
        let pid = child_pid
            .filter(|pid| (1..=2_147_483_647).contains(pid))
            .ok_or_else(|| Error::beeper("running directory lease requires a child process identity"))?;
        Some(processes.capture(pid as u64).map_err(Error::System)?)
    } else {
        if child_pid.is_some() {
            return Err(Error::beeper("only a running directory lease accepts a child process identity"));
        }
        None
    };
    let next = DirectoryLease { phase, child_owner, ..handle.claim.clone() }.parsed();
    let path = claim_path(&handle.claim.id);
    let written = wrapped("directory lease lifecycle could not be updated safely", || {
        Ok(store.replace_if_unchanged(&path, &handle.content_sha256, &next.canonical)?)
    })?;
    if !written {
        return Err(Error::beeper("directory lease changed before its lifecycle update"));
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
    let removed = wrapped("directory lease could not be released safely", || Ok(store.remove_if_unchanged(&path, &handle.content_sha256)?))?;
    if !removed {
        return Err(Error::beeper("directory lease changed before release"));
    }
    handle.released = true;
    Ok(())
}

/// What a recovery run did (§6A.6).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Report {
    /// Directories of dead owners removed.
    pub recovered: u32,
    /// Bundle stages found already published to their output root.
    pub published: u32,
    /// Leases of live owners (left alone).
    pub active: u32,
    /// Leases whose owners cannot be proven dead (left alone).
    pub indeterminate: u32,
}

/// What recovery decided for one lease (the `--dry-run` view and the report's source).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Its owner (or recorded child) is alive.
    Active,
    /// Liveness cannot be proven either way.
    Indeterminate,
    /// Its directory is to be (or was) removed.
    Recover,
    /// Its stage was published; only the claim goes.
    Published,
    /// Nothing of it is left on disk; only the claim goes.
    ClaimOnly,
}

/// `recoverBeeperMessageLikeMeDirectoryLeases({nowMs, inspectOwner})` (§6A.6), at `now_ms`
/// (the clock when `None`). Leases are processed in name order; a failure stops the run, and
/// leases before it stay recovered.
///
/// Errors: `… directory recovery time is invalid`; `… directory lease collection exceeded its
/// reviewed bound`; `… contains an unsupported entry`; `… changed during recovery inspection`;
/// the parse errors; `… parent changed before recovery`; `… target changed before recovery`;
/// `… output changed before recovery`; `… changed before recovery release`; anything else as
/// `… directory lease recovery failed safely`.
pub fn recover(now_ms: Option<f64>, fx: Effects<'_>) -> Result<Report, Error> {
    let mut report = Report::default();
    recover_with(now_ms, fx, &mut |_, decision| {
        match decision {
            Decision::Active => report.active += 1,
            Decision::Indeterminate => report.indeterminate += 1,
            Decision::Recover => report.recovered += 1,
            Decision::Published => report.published += 1,
            Decision::ClaimOnly => {}
        }
    })?;
    Ok(report)
}

/// [`recover`], telling `observe` each lease's decision as it is carried out.
pub fn recover_with(now_ms: Option<f64>, fx: Effects<'_>, observe: &mut dyn FnMut(&DirectoryLease, &Decision)) -> Result<(), Error> {
    let now = now_ms.unwrap_or_else(|| fx.clock.now_ms() as f64);
    let now_ms = milliseconds(now).ok_or_else(|| Error::beeper("directory recovery time is invalid"))?;
    let Effects { store, processes, workspace, .. } = fx;
    wrapped("directory lease recovery failed safely", || {
        store.ensure_private_directory(DIRECTORY)?;
        let snapshot = store.snapshot(DIRECTORY, true)?;
        let Some(snapshot) = snapshot.filter(|s| s.entries.len() <= MAX_CLAIMS) else {
            return Err(Error::beeper("directory lease collection exceeded its reviewed bound"));
        };
        let mut names: Vec<String> = Vec::with_capacity(snapshot.entries.len());
        for entry in &snapshot.entries {
            let supported = entry.kind == EntryKind::File && entry.name.strip_suffix(".json").is_some_and(js::is_uuid_v4);
            if !supported {
                return Err(Error::beeper("directory lease collection contains an unsupported entry"));
            }
            names.push(entry.name.clone());
        }
        names.sort_by(|a, b| js::cmp_utf16(a, b));
        let total = MAX_CLAIM_BYTES.saturating_mul(names.len().max(1) as u32);
        let files = store.read_batch(DIRECTORY, &names, MAX_CLAIM_BYTES, total, &snapshot.identity)?;
        for (name, status) in files {
            let BatchStatus::Present(text) = status else {
                return Err(Error::beeper("directory lease changed during recovery inspection"));
            };
            let claim = directory_lease::parse_file(&text, &name)?.record;
            let decision = decide(&claim, now_ms, processes)?;
            if matches!(decision, Decision::Active | Decision::Indeterminate) {
                observe(&claim, &decision);
                continue;
            }
            // The claim was read before its owner was probed: an owner that released it (its
            // directory kept as the result) and then died looks dead with a stale claim in hand.
            // So the claim must still be there, unchanged, *after* the probe — only its owner
            // releases it, and that owner is now gone — before anything is deleted. Otherwise
            // this is the reference's own "changed before recovery release" refusal, raised
            // before the removal instead of after it.
            let sha = digest::sha256_hex(text.as_bytes());
            let path = format!("{DIRECTORY}/{name}");
            let current = store.read_if_present(&path, MAX_CLAIM_BYTES)?;
            if current.is_none_or(|now| digest::sha256_hex(now.as_bytes()) != sha) {
                return Err(Error::beeper("directory lease changed before recovery release"));
            }
            let decision = carry_out(&claim, workspace)?;
            if !store.remove_if_unchanged(&path, &sha)? {
                return Err(Error::beeper("directory lease changed before recovery release"));
            }
            observe(&claim, &decision);
        }
        Ok(())
    })
}

/// §6A.6 e.3–e.4: `Active`, `Indeterminate`, or `Recover` (the owner — and for a raw lease
/// its recorded child or launch window — proves it gone; what recovery then does is
/// [`carry_out`]'s).
fn decide(claim: &DirectoryLease, now_ms: u64, processes: &mut dyn Processes) -> Result<Decision, Error> {
    let owner = liveness::probe(processes, &claim.owner).map_err(Error::System)?;
    match owner.status {
        OwnerStatus::ExactLiveOwner => return Ok(Decision::Active),
        OwnerStatus::Unknown => return Ok(Decision::Indeterminate),
        OwnerStatus::DifferentOrDead => {}
    }
    // Beyond the reference: a process the owner started that still holds its witness may be
    // working in the directory — a bundle stage's command (which no lease records) included.
    if owner.spawned == Spawned::SomeAlive {
        return Ok(Decision::Active);
    }
    if claim.role == Role::RawWorking {
        let disposition =
            dispositions::raw_lease(claim, owner.spawned, now_ms, &mut |_, child| liveness::probe(processes, child)).map_err(Error::System)?;
        match disposition {
            Disposition::Active => return Ok(Decision::Active),
            Disposition::Indeterminate => return Ok(Decision::Indeterminate),
            Disposition::Recoverable => {}
        }
    }
    Ok(Decision::Recover)
}

/// §6A.6 e.5–e.7 for a lease whose owner is provably gone.
fn carry_out(claim: &DirectoryLease, workspace: &mut dyn Workspace) -> Result<Decision, Error> {
    let parent = identity_of(workspace, &claim.parent_path, false)?;
    if parent != claim.parent_identity {
        return Err(Error::beeper("directory lease parent changed before recovery"));
    }
    match identity_if_present(workspace, &claim.path, true)? {
        Some(current) if current != claim.directory_identity => Err(Error::beeper("directory lease target changed before recovery")),
        Some(_) => {
            workspace.remove_tree(&claim.path, &claim.directory_identity)?;
            Ok(Decision::Recover)
        }
        None => {
            if workspace.remove_tree(&claim.path, &claim.directory_identity)? {
                return Ok(Decision::Recover);
            }
            let Some(output) = &claim.output_root else { return Ok(Decision::ClaimOnly) };
            match identity_if_present(workspace, output, true)? {
                Some(out) if out != claim.directory_identity => Err(Error::beeper("directory lease output changed before recovery")),
                Some(_) => Ok(Decision::Published),
                None => Ok(Decision::ClaimOnly),
            }
        }
    }
}

/// What `doctor` and `recover --dry-run` show for one entry of the lease collection: the claim
/// (when it parses), its disposition, what recovery would do with it, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Survey {
    /// The entry's name in the collection.
    pub name: String,
    /// The claim, when the file is a valid lease.
    pub claim: Option<DirectoryLease>,
    /// The disposition, when it could be decided.
    pub disposition: Option<Disposition>,
    /// What recovery would do: `keep`, `remove directory`, `count as published`, `remove claim`,
    /// or `stop: <the error recovery would raise>`.
    pub action: String,
    /// Why, in words.
    pub reason: String,
}

/// Surveys the lease collection without changing anything (§6A.6 rules, read-only): for each
/// entry, what a recovery at `now_ms` would decide and do.
///
/// Errors: `… directory recovery time is invalid`; a store failure listing or reading.
pub fn survey(now_ms: Option<f64>, fx: Effects<'_>) -> Result<Vec<Survey>, Error> {
    let now = now_ms.unwrap_or_else(|| fx.clock.now_ms() as f64);
    let now_ms = milliseconds(now).ok_or_else(|| Error::beeper("directory recovery time is invalid"))?;
    let Effects { store, processes, workspace, .. } = fx;
    let Some(snapshot) = store.snapshot(DIRECTORY, false)? else { return Ok(Vec::new()) };
    let mut out = Vec::new();
    let mut names = Vec::new();
    for entry in &snapshot.entries {
        if entry.kind == EntryKind::File && entry.name.strip_suffix(".json").is_some_and(js::is_uuid_v4) {
            names.push(entry.name.clone());
        } else {
            out.push(Survey {
                name: entry.name.clone(),
                claim: None,
                disposition: None,
                action: String::from("stop: Beeper Message Like Me recovery: directory lease collection contains an unsupported entry"),
                reason: String::from("not a lease file: recovery refuses the whole collection until it is removed"),
            });
        }
    }
    let total = MAX_CLAIM_BYTES.saturating_mul(names.len().max(1) as u32);
    for (name, status) in store.read_batch(DIRECTORY, &names, MAX_CLAIM_BYTES, total, &snapshot.identity)? {
        let text = match status {
            BatchStatus::Present(text) => text,
            other => {
                let why = match other {
                    BatchStatus::Absent => "vanished while read",
                    BatchStatus::Invalid(crate::effects::BatchInvalid::UnsafeFile) => "not a private regular file of yours (a symbolic link, another owner, or group/other permissions)",
                    BatchStatus::Invalid(crate::effects::BatchInvalid::FileByteBound) => "larger than a claim may be (16 KiB)",
                    BatchStatus::Invalid(crate::effects::BatchInvalid::AggregateByteBound) => "over the batch's byte bound",
                    BatchStatus::Invalid(crate::effects::BatchInvalid::ChangedDuringRead) => "changed while it was read",
                    BatchStatus::Invalid(crate::effects::BatchInvalid::InvalidUtf8) => "not UTF-8",
                    _ => "unreadable",
                };
                out.push(Survey {
                    name,
                    claim: None,
                    disposition: None,
                    action: String::from("stop: Beeper Message Like Me recovery: directory lease changed during recovery inspection"),
                    reason: format!("the claim file is {why}: inspect it by hand"),
                });
                continue;
            }
        };
        let claim = match directory_lease::parse_file(&text, &name) {
            Ok(parsed) => parsed.record,
            Err(error) => {
                out.push(Survey {
                    name,
                    claim: None,
                    disposition: None,
                    action: format!("stop: {error}"),
                    reason: String::from("the claim file is not a valid lease: inspect it by hand"),
                });
                continue;
            }
        };
        let (disposition, reason) = explain(&claim, now_ms, processes)?;
        let action = match disposition {
            Disposition::Active | Disposition::Indeterminate => String::from("keep"),
            Disposition::Recoverable => match predict(&claim, workspace) {
                Ok(Decision::Recover) => String::from("remove directory"),
                Ok(Decision::Published) => String::from("count as published, remove claim"),
                Ok(_) => String::from("remove claim (directory already gone)"),
                Err(error) => format!("stop: {error}"),
            },
        };
        out.push(Survey { name, claim: Some(claim), disposition: Some(disposition), action, reason });
    }
    out.sort_by(|a, b| js::cmp_utf16(&a.name, &b.name));
    Ok(out)
}

/// The disposition of a lease and the reason in words (the same decision as recovery's).
fn explain(claim: &DirectoryLease, now_ms: u64, processes: &mut dyn Processes) -> Result<(Disposition, String), Error> {
    let owner = liveness::probe(processes, &claim.owner).map_err(Error::System)?;
    let owner_text = liveness::describe("owner", &claim.owner, &owner);
    match owner.status {
        OwnerStatus::ExactLiveOwner => return Ok((Disposition::Active, owner_text)),
        OwnerStatus::Unknown => return Ok((Disposition::Indeterminate, owner_text)),
        OwnerStatus::DifferentOrDead => {}
    }
    if owner.spawned == Spawned::SomeAlive {
        return Ok((Disposition::Active, owner_text));
    }
    if claim.role == Role::BundleStage {
        return Ok((Disposition::Recoverable, owner_text));
    }
    let mut child_text = String::new();
    let disposition = dispositions::raw_lease(claim, owner.spawned, now_ms, &mut |_, child| {
        let liveness = liveness::probe(processes, child)?;
        child_text = liveness::describe("child", child, &liveness);
        Ok(liveness)
    })
    .map_err(Error::System)?;
    let reason = match (claim.phase, disposition) {
        (Phase::Running, _) => format!("{owner_text}; {child_text}"),
        (Phase::Launching, Disposition::Indeterminate) => {
            format!("{owner_text} while launching; recoverable from {} ms (now {now_ms} ms)", claim.recover_after_ms)
        }
        (Phase::Launching, _) if owner.spawned == Spawned::AllGone => format!("{owner_text} while launching"),
        (Phase::Launching, _) => format!("{owner_text} while launching; its launch window has passed"),
        (phase, _) => format!("{owner_text} ({})", phase.name()),
    };
    Ok((disposition, reason))
}

/// What [`carry_out`] would do, without doing it.
fn predict(claim: &DirectoryLease, workspace: &mut dyn Workspace) -> Result<Decision, Error> {
    let parent = identity_of(workspace, &claim.parent_path, false)?;
    if parent != claim.parent_identity {
        return Err(Error::beeper("directory lease parent changed before recovery"));
    }
    match identity_if_present(workspace, &claim.path, true)? {
        Some(current) if current != claim.directory_identity => Err(Error::beeper("directory lease target changed before recovery")),
        Some(_) => Ok(Decision::Recover),
        None => {
            let Some(output) = &claim.output_root else { return Ok(Decision::ClaimOnly) };
            match identity_if_present(workspace, output, true)? {
                Some(out) if out != claim.directory_identity => Err(Error::beeper("directory lease output changed before recovery")),
                Some(_) => Ok(Decision::Published),
                None => Ok(Decision::ClaimOnly),
            }
        }
    }
}
