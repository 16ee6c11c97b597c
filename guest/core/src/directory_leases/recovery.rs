//! Recovery of directory leases (spec §6A.6 `recoverBeeperMessageLikeMeDirectoryLeases`): every
//! lease whose owner is provably gone has its directory removed by identity (or its published
//! output counted) and then its claim removed.
//!
//! One code path serves the reference's recovery ([`recover`]), a dry run that only reads, and
//! the command line's recovery that keeps going past entries it cannot recover
//! ([`recover_each`] with [`Options`]); every entry's decision comes back as an [`Outcome`].

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use super::{DIRECTORY, Effects, MAX_CLAIM_BYTES, MAX_CLAIMS, identity_if_present, identity_of, milliseconds};
use crate::dispositions::{self, Disposition};
use crate::effects::{BatchInvalid, BatchStatus, EntryKind, Processes, Store, Workspace};
use crate::error::LeaseCode;
use crate::liveness::{self, OwnerStatus, Spawned};
use crate::records::DirectoryIdentity;
use crate::records::directory_lease::{self, DirectoryLease, Phase, Role};
use crate::{Error, digest, js};

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

/// How a recovery run treats what the reference stops at. The default is the reference.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Options {
    /// Decide, change nothing: the store and the workspace are only read (`recover
    /// --dry-run`). A dry run reports what would stop a real run and goes on.
    pub dry_run: bool,
    /// Leave every entry recovery cannot recover — a file that is not a lease, a claim that
    /// does not parse, a target, parent or output that changed — as it is, report it, and go
    /// on with the rest. Without it, recovery stops at the first, as the reference does.
    pub skip_invalid: bool,
    /// A lease whose claim vanished before it could be recovered was finished by another
    /// recoverer: report it as already recovered instead of stopping (the reference's
    /// `changed during recovery inspection` / `changed before recovery release`).
    pub concurrent: bool,
    /// Paths of leases whose directory is kept when their owner is proven gone: only the claim
    /// is removed ([`Action::KeepDirectory`]). For a run whose end could not be journalled
    /// (`recover --keep DIR`, the command `run` prints when it cannot release).
    pub keep: Vec<String>,
    /// Beyond the reference: a collection over its reviewed bound ([`MAX_CLAIMS`] entries) is
    /// recovered, oldest lease first, instead of refused as a whole (`docs/deviations.md` 20).
    pub past_bound: bool,
}

/// What recovery does (or, in a dry run, would do) with one entry of the lease collection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Left alone: its owner, recorded child or a process it started is alive
    /// (disposition `active`), or nothing proves them gone (`indeterminate`).
    Keep,
    /// Its directory is removed by identity, then its claim.
    RemoveDirectory,
    /// Its stage was already published to its output root: only its claim is removed.
    CountPublished,
    /// Nothing of it is left on disk: only its claim is removed.
    RemoveClaim,
    /// Beyond the reference: its command finished before the lease could be released (the
    /// host's run journal says so), or the caller asked to keep it: only its claim is removed,
    /// the directory and its results stay (`docs/deviations.md`).
    KeepDirectory,
    /// Another recoverer finished it first: its claim vanished.
    AlreadyRecovered,
    /// Not recoverable as it is; left in place and reported ([`Options::skip_invalid`]).
    Skip(Error),
    /// Recovery stops here with the reference's refusal (in a dry run: would stop here).
    Stop(Error),
}

impl Action {
    /// Short words for the action: `keep`, `remove directory`, `count as published`, `remove
    /// claim`, `release, keep directory`, `already recovered`, `skip`, `stop`.
    pub fn words(&self) -> &'static str {
        match self {
            Action::Keep => "keep",
            Action::RemoveDirectory => "remove directory",
            Action::CountPublished => "count as published",
            Action::RemoveClaim => "remove claim",
            Action::KeepDirectory => "release, keep directory",
            Action::AlreadyRecovered => "already recovered",
            Action::Skip(_) => "skip",
            Action::Stop(_) => "stop",
        }
    }

    /// The refusal of a skipped or stopping entry.
    pub fn refusal(&self) -> Option<&Error> {
        match self {
            Action::Skip(error) | Action::Stop(error) => Some(error),
            _ => None,
        }
    }
}

/// One entry's decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The entry's name in the collection.
    pub name: String,
    /// The claim, when the file is a valid lease.
    pub claim: Option<DirectoryLease>,
    /// Its disposition, when it could be decided.
    pub disposition: Option<Disposition>,
    /// What was (or would be) done.
    pub action: Action,
    /// Why, in words: the probes' answers, or what is wrong with the entry and what to do.
    pub reason: String,
    /// Whether the action was carried out (never in a dry run; never for keep, skip or stop).
    pub done: bool,
    /// For an entry that is not a valid lease: what it may claim all the same
    /// (`docs/deviations.md` 24). [`MightClaim::Nothing`] for a valid lease, whose claim says.
    pub might_claim: MightClaim,
}

/// What an entry of the lease collection that is not a valid lease may claim
/// (`docs/deviations.md` 24): such an entry is *undecided*, never "no lease". It blocks leasing
/// what it may claim ([`Run::conflict`]) and removing any directory that holds it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum MightClaim {
    /// Nothing: a valid lease (its claim says what it claims), or text that names no directory
    /// (an empty file, text that is not a lease at all).
    #[default]
    Nothing,
    /// Its text names this directory (`"path"`): a lease with a field this version does not
    /// know (a newer writer), a hand edit, a non-canonical rewrite.
    Path(String),
    /// Its bytes cannot be read (permissions, size, encoding, a file changing under the
    /// reader): it may claim any directory.
    Anything,
}

impl MightClaim {
    /// Whether leasing `path`, or removing a directory at `path`, may touch what this entry
    /// claims: [`MightClaim::Anything`]; a named directory that is `path`, inside it, or holds
    /// it.
    pub fn touches(&self, path: &str) -> bool {
        self.within(path) || matches!(self, MightClaim::Path(named) if is_inside(path, named))
    }

    /// Whether removing the tree at `path` may remove what this entry claims:
    /// [`MightClaim::Anything`]; a named directory that is `path` or inside it.
    pub fn within(&self, path: &str) -> bool {
        match self {
            MightClaim::Nothing => false,
            MightClaim::Anything => true,
            MightClaim::Path(named) => named == path || is_inside(named, path),
        }
    }

    /// What the text of a file that is not a valid lease names (see [`MightClaim::Path`]): the
    /// `"path"` string of a JSON object, else the first `"path":"…"` in the text (a file cut
    /// short), else nothing.
    pub fn of_text(text: &str) -> MightClaim {
        if let Ok(serde_json::Value::Object(map)) = serde_json::from_str::<serde_json::Value>(text) {
            return match map.get("path").and_then(serde_json::Value::as_str) {
                Some(path) if !path.is_empty() => MightClaim::Path(path.into()),
                _ => MightClaim::Nothing,
            };
        }
        let Some(at) = text.find("\"path\"") else { return MightClaim::Nothing };
        let rest = text[at + 6..].trim_start();
        let Some(rest) = rest.strip_prefix(':') else { return MightClaim::Nothing };
        let Some(rest) = rest.trim_start().strip_prefix('"') else { return MightClaim::Nothing };
        match rest.find('"') {
            Some(end) if end > 0 => MightClaim::Path(rest[..end].into()),
            _ => MightClaim::Nothing,
        }
    }
}

/// Whether `path` lies strictly inside the directory `outer` (`/a/b` inside `/a`, not `/ab`).
pub fn is_inside(path: &str, outer: &str) -> bool {
    let outer = outer.trim_end_matches('/');
    path.len() > outer.len() + 1 && path.starts_with(outer) && path.as_bytes()[outer.len()] == b'/'
}

/// A recovery run: every entry's outcome in name order, and the refusal that stopped the run
/// (the reference's error, which [`recover`] returns), if any.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Run {
    /// The entries, in the order recovery took them.
    pub outcomes: Vec<Outcome>,
    /// The refusal that stopped the run (in a dry run: that would stop a real run).
    pub stopped: Option<Error>,
    /// What caused a stop that the reference reports only in general terms (`… recovery
    /// failed safely`): the underlying store or workspace failure.
    pub cause: Option<String>,
    /// An entry changed or vanished while it was read — a writer's compare-and-swap, or a
    /// release, in flight (§3.3 replaces a claim by renaming a new file over it): the run saw
    /// that entry as undecided, and a read a moment later may see it whole
    /// ([`SETTLE_READS`]).
    pub in_flux: bool,
}

/// How many times a conflict check ([`Run::conflict`]) reads the lease collection while an entry
/// changes under it ([`Run::in_flux`]) before it takes the entry as undecided: a writer's
/// replace takes microseconds, a read of the collection milliseconds.
pub const SETTLE_READS: usize = 16;

impl Run {
    /// The reference's counts (§6A.6): directories removed and stages published (carried out),
    /// leases kept as active or indeterminate.
    pub fn report(&self) -> Report {
        let mut report = Report::default();
        for outcome in &self.outcomes {
            match (&outcome.action, outcome.disposition) {
                (Action::RemoveDirectory, _) if outcome.done => report.recovered += 1,
                (Action::CountPublished, _) if outcome.done => report.published += 1,
                (Action::Keep, Some(Disposition::Active)) => report.active += 1,
                (Action::Keep, _) => report.indeterminate += 1,
                _ => {}
            }
        }
        report
    }
}

/// Why a directory cannot be leased again: the lease that claims it and what that lease is.
/// proclease's rule "one lease per directory" (docs/deviations.md): the reference lets two
/// leases claim one directory, and then the recovery of one deletes the directory the other may
/// still be using.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conflict<'a> {
    /// Its owner is alive: wait for it, or use another directory.
    Active(&'a Outcome),
    /// Its owner is provably gone: a recovery removes it (and the directory) first.
    Recoverable(&'a Outcome),
    /// The directory there now is not the one the lease holds (re-created or replaced): recovery
    /// refuses it for good, so the stale lease record must be set aside by hand.
    Replaced(&'a Outcome),
    /// Anything else (indeterminate, or a refusal recovery stops at): the outcome's reason says
    /// what.
    Undecided(&'a Outcome),
}

/// The leases as they stand, for [`Run::conflict`]: a dry run of every lease (`past_bound`),
/// read again while an entry is caught mid-replace (at most [`SETTLE_READS`] times), without the
/// lease `except` (a lease id: the caller's own, when it looks again after writing it).
///
/// Errors: those of [`recover_each`] before any entry is looked at, and the collection's.
pub fn settled_run(except: Option<&str>, mut fx: Effects<'_>) -> Result<Run, Error> {
    let mut run = Run::default();
    for _ in 0..SETTLE_READS {
        let options = Options { dry_run: true, past_bound: true, ..Options::default() };
        run = recover_each(None, fx.reborrow(), options)?;
        if !run.in_flux {
            break;
        }
    }
    run.outcomes.retain(|o| except.is_none() || o.claim.as_ref().map(|c| c.id.as_str()) != except);
    Ok(run)
}

impl Run {
    /// The lease of this run (a dry run of every lease, `past_bound`) that stands in the way of
    /// leasing the directory at `path`, and what it is; `None` when nothing does:
    /// - a lease that claims it — by its path, or by its identity when the directory exists;
    /// - a lease whose directory holds `path` and whose owner is not alive (a recovery removes
    ///   that directory with everything in it; `docs/deviations.md` 24) — a live one may nest
    ///   runs inside its directory;
    /// - an entry that is not a valid lease and may claim it ([`MightClaim`]): undecided.
    pub fn conflict(&self, path: &str, identity: Option<&DirectoryIdentity>) -> Option<Conflict<'_>> {
        let claims = |o: &&Outcome| o.claim.as_ref().is_some_and(|c| c.path == path || identity == Some(&c.directory_identity));
        let Some(outcome) = self.outcomes.iter().find(claims) else {
            // A directory that holds `path` and that recovery would remove, or may: its lease's
            // owner is not alive and recovery does not keep the directory (a finished run's, a
            // published stage's); or a stage, which its run publishes (renames) or removes whole
            // when its command ends, whatever the nested run does.
            // A dead owner's lease whose directory is already gone (a recovery removed it and
            // stopped before the claim) counts too: a directory made inside its path would
            // re-create that path, and recovery would then refuse the lease for good ("target
            // changed") — found by the interleaving explorer.
            let encloses = |o: &&Outcome| {
                o.claim.as_ref().is_some_and(|c| {
                    let kept = matches!(o.action, Action::KeepDirectory | Action::CountPublished | Action::AlreadyRecovered);
                    is_inside(path, &c.path) && (c.role == Role::BundleStage || (o.disposition != Some(Disposition::Active) && !kept))
                })
            };
            if let Some(enclosing) = self.outcomes.iter().find(encloses) {
                return Some(match (enclosing.disposition, &enclosing.action) {
                    (Some(Disposition::Active), _) => Conflict::Active(enclosing),
                    (Some(Disposition::Recoverable), Action::RemoveDirectory | Action::RemoveClaim) => Conflict::Recoverable(enclosing),
                    _ => Conflict::Undecided(enclosing),
                });
            }
            if crate::mutations::active(crate::mutations::Mutation::ConflictIgnoresUndecidedEntries) {
                return None;
            }
            return self.outcomes.iter().find(|o| o.claim.is_none() && o.might_claim.touches(path)).map(Conflict::Undecided);
        };
        // Replaced: the lease's own path holds another directory now (a match by identity alone
        // is the leased directory itself, moved here).
        let by_path = outcome.claim.as_ref().is_some_and(|c| c.path == path);
        let replaced = by_path
            && outcome
                .action
                .refusal()
                .and_then(Error::lease_code)
                .is_some_and(|code| matches!(code, LeaseCode::DirectoryLeaseTargetChangedBeforeRecovery | LeaseCode::DirectoryLeaseParentChangedBeforeRecovery));
        // Recoverable only when recovery would go through: a refusal stops it at this lease.
        let refused = outcome.action.refusal().is_some();
        Some(match outcome.disposition {
            Some(Disposition::Active) => Conflict::Active(outcome),
            _ if replaced => Conflict::Replaced(outcome),
            Some(Disposition::Recoverable) if !refused => Conflict::Recoverable(outcome),
            _ => Conflict::Undecided(outcome),
        })
    }
}

/// `recoverBeeperMessageLikeMeDirectoryLeases({nowMs, inspectOwner})` (§6A.6), at `now_ms`
/// (the clock when `None`). Leases are processed in name order; a refusal stops the run, and
/// leases before it stay recovered.
///
/// Errors: `… directory recovery time is invalid`; `… directory lease collection exceeded its
/// reviewed bound`; `… contains an unsupported entry`; `… changed during recovery inspection`;
/// the parse errors; `… parent changed before recovery`; `… target changed before recovery`;
/// `… output changed before recovery`; `… changed before recovery release`; anything else as
/// `… directory lease recovery failed safely`.
pub fn recover(now_ms: Option<f64>, fx: Effects<'_>) -> Result<Report, Error> {
    let run = recover_each(now_ms, fx, Options::default())?;
    match run.stopped {
        Some(error) => Err(error),
        None => Ok(run.report()),
    }
}

/// The reference's "…safely" wrapping: an error that is not already a prefixed lease error
/// becomes `Beeper Message Like Me recovery: directory lease recovery failed safely`.
fn wrap(error: Error) -> (Error, Option<String>) {
    match error {
        error if error.is_beeper_refusal() => (error, None),
        other => (Error::wrapping(LeaseCode::DirectoryLeaseRecoveryFailedSafely, &other), Some(String::from(other.message()))),
    }
}

/// Recovery (§6A.6) with `options`: every entry's outcome, in order.
///
/// Errors (before any entry is looked at): `… directory recovery time is invalid`. Every other
/// refusal is in the run ([`Run::stopped`]).
pub fn recover_each(now_ms: Option<f64>, fx: Effects<'_>, options: Options) -> Result<Run, Error> {
    let now = now_ms.unwrap_or_else(|| fx.clock.now_ms() as f64);
    let now_ms = milliseconds(now).ok_or_else(|| Error::lease(LeaseCode::DirectoryRecoveryTimeIsInvalid))?;
    let Effects { store, processes, workspace, .. } = fx;
    let mut recovery = Recovery { options, now_ms, store, processes, workspace, run: Run::default(), known: Vec::new() };
    if let Err(error) = recovery.entries() {
        let (error, cause) = wrap(error);
        recovery.run.stopped.get_or_insert(error);
        if recovery.run.cause.is_none() {
            recovery.run.cause = cause;
        }
    }
    Ok(recovery.run)
}

struct Recovery<'a> {
    options: Options,
    now_ms: u64,
    store: &'a mut dyn Store,
    processes: &'a mut dyn Processes,
    workspace: &'a mut dyn Workspace,
    run: Run,
    /// What every entry of the collection claims, by file name: read before any is recovered,
    /// and brought up to date before each removal ([`Recovery::held_elsewhere`]).
    known: Vec<(String, Known)>,
}

/// What one entry of the lease collection claims, as recovery last read it.
// Almost every entry is a valid lease: boxing would allocate for each.
#[allow(clippy::large_enum_variant)]
#[derive(Clone)]
enum Known {
    /// A valid lease (a lease's path and identity never change while its file exists).
    Lease(DirectoryLease),
    /// Not a valid lease: what it may claim.
    Invalid(MightClaim),
}

impl Known {
    fn of(status: &BatchStatus, name: &str) -> Known {
        match status {
            BatchStatus::Present(text) => match directory_lease::parse_file(text, name) {
                Ok(parsed) => Known::Lease(parsed.record),
                Err(_) => Known::Invalid(MightClaim::of_text(text)),
            },
            BatchStatus::Absent => Known::Invalid(MightClaim::Nothing),
            BatchStatus::Invalid(_) => Known::Invalid(MightClaim::Anything),
        }
    }
}

/// Why an entry cannot be recovered, and what to do about it.
struct Refusal {
    error: Error,
    reason: String,
}

impl Recovery<'_> {
    /// Reports an entry recovery cannot recover: skipped, or the stop of the run (a dry run
    /// notes the first and goes on). `Err` ends the run.
    fn refuse(&mut self, name: &str, claim: Option<DirectoryLease>, refusal: Refusal) -> Result<(), Error> {
        let Refusal { error, reason } = refusal;
        let (error, cause) = wrap(error);
        let reason = match &cause {
            Some(cause) => format!("{reason}: {cause}"),
            None => reason,
        };
        let stop = !self.options.skip_invalid;
        let action = if stop { Action::Stop(error.clone()) } else { Action::Skip(error.clone()) };
        self.run.outcomes.push(Outcome { name: name.into(), claim, disposition: None, action, reason, done: false, might_claim: MightClaim::Nothing });
        if stop && self.run.stopped.is_none() {
            self.run.stopped = Some(error.clone());
            self.run.cause = cause;
            if !self.options.dry_run {
                // The run ends here; the error is already recorded.
                return Err(error);
            }
        }
        Ok(())
    }

    fn entries(&mut self) -> Result<(), Error> {
        let snapshot = if self.options.dry_run {
            // A listing removes only what provably dead writers left (§3.9), as the real run does.
            match self.store.snapshot(super::DIRECTORY, true)? {
                Some(snapshot) => snapshot,
                None => return Ok(()),
            }
        } else {
            self.store.ensure_private_directory(DIRECTORY)?;
            let snapshot = self.store.snapshot(DIRECTORY, true)?;
            snapshot.ok_or_else(|| Error::lease(LeaseCode::DirectoryLeaseCollectionExceededItsReviewedBound))?
        };
        let over_bound = snapshot.entries.len() > MAX_CLAIMS;
        if over_bound && !self.options.past_bound {
            return Err(Error::lease(LeaseCode::DirectoryLeaseCollectionExceededItsReviewedBound));
        }
        // The reference refuses the whole collection when any entry is not a lease file, before
        // it reads a single claim.
        let mut names: Vec<String> = Vec::with_capacity(snapshot.entries.len());
        for entry in &snapshot.entries {
            let supported = entry.kind == EntryKind::File && entry.name.strip_suffix(".json").is_some_and(js::is_uuid_v4);
            if supported {
                names.push(entry.name.clone());
                continue;
            }
            let what = match entry.kind {
                EntryKind::File => "a file that is not named <lease id>.json",
                EntryKind::Directory => "a directory",
                EntryKind::SymbolicLink => "a symbolic link",
                EntryKind::Other => "neither a file nor a directory",
            };
            let refusal = Refusal {
                error: Error::lease(LeaseCode::DirectoryLeaseCollectionContainsAnUnsupportedEntry),
                reason: format!("{what}, not a lease: the reference's recovery refuses the whole collection while it is there; move it out of {DIRECTORY}"),
            };
            let result = self.refuse(&entry.name, None, refusal);
            if entry.kind != EntryKind::File && entry.name.strip_suffix(".json").is_some_and(js::is_uuid_v4) {
                // Named as a lease but not a regular file (a symbolic link, a directory): it may be
                // a lease's record all the same, and so may claim any directory.
                self.note_might_claim(MightClaim::Anything);
            }
            if result.is_err() {
                return Ok(());
            }
        }
        names.sort_by(|a, b| js::cmp_utf16(a, b));
        if names.is_empty() {
            return Ok(());
        }
        // Read in batches of the bound (one batch within it, as the reference reads).
        let mut files = Vec::with_capacity(names.len());
        for batch in names.chunks(MAX_CLAIMS) {
            let total = MAX_CLAIM_BYTES.saturating_mul(batch.len() as u32);
            files.extend(self.store.read_batch(DIRECTORY, batch, MAX_CLAIM_BYTES, total, &snapshot.identity)?);
        }
        if over_bound {
            // Oldest first, so that the leases longest left behind are recovered first; what
            // does not parse keeps its name order, after them.
            let created = |status: &BatchStatus, name: &str| match status {
                BatchStatus::Present(text) => directory_lease::parse_file(text, name).map_or(u64::MAX, |parsed| parsed.record.created_at_ms),
                _ => u64::MAX,
            };
            files.sort_by_cached_key(|(name, status)| created(status, name));
        }
        self.known = files.iter().map(|(name, status)| (name.clone(), Known::of(status, name))).collect();
        for (name, status) in files {
            if self.entry(&name, status).is_err() {
                break;
            }
        }
        Ok(())
    }

    /// Decides, and unless this is a dry run carries out, one lease. `Err` ends the run.
    fn entry(&mut self, name: &str, status: BatchStatus) -> Result<(), Error> {
        let text = match status {
            BatchStatus::Present(text) => text,
            BatchStatus::Absent if self.options.concurrent => return self.already_recovered(name, None),
            other => {
                if matches!(other, BatchStatus::Absent | BatchStatus::Invalid(BatchInvalid::ChangedDuringRead)) {
                    self.run.in_flux = true;
                }
                let why = match other {
                    BatchStatus::Absent => "vanished while it was read",
                    BatchStatus::Invalid(BatchInvalid::UnsafeFile) => "not a private regular file of yours (a symbolic link, another owner, or group/other permissions)",
                    BatchStatus::Invalid(BatchInvalid::FileByteBound) => "larger than a claim may be (16 KiB)",
                    BatchStatus::Invalid(BatchInvalid::AggregateByteBound) => "over the batch's byte bound",
                    BatchStatus::Invalid(BatchInvalid::ChangedDuringRead) => "changed while it was read",
                    BatchStatus::Invalid(BatchInvalid::InvalidUtf8) => "not UTF-8",
                    _ => "unreadable",
                };
                let reason = format!(
                    "the claim file is {why}; until it can be read it may claim any directory, so no directory is leased or removed: \
                     make it a private file of yours again (chmod 600), or set it aside if no run uses it"
                );
                let refusal = Refusal { error: Error::lease(LeaseCode::DirectoryLeaseChangedDuringRecoveryInspection), reason };
                let result = self.refuse(name, None, refusal);
                self.note_might_claim(MightClaim::Anything);
                return result;
            }
        };
        let claim = match directory_lease::parse_file(&text, name) {
            Ok(parsed) => parsed.record,
            Err(error) => {
                let might = MightClaim::of_text(&text);
                let reason = match &might {
                    MightClaim::Path(path) => format!(
                        "the claim file is not a valid lease (a newer writer's, an edit, or an interrupted write by another program); it names {path}, \
                         which is not leased or removed while it is here: fix it, or set it aside if no run uses that directory"
                    ),
                    _ => String::from("the claim file is not a valid lease (an interrupted write by another program, or an edit)"),
                };
                let result = self.refuse(name, None, Refusal { error, reason });
                self.note_might_claim(might);
                return result;
            }
        };
        let (disposition, reason) = match explain(&claim, self.now_ms, self.processes) {
            Ok(decided) => decided,
            Err(error) => return self.refuse(name, Some(claim), Refusal { error, reason: String::from("its owner could not be probed") }),
        };
        if disposition != Disposition::Recoverable {
            let outcome =
                Outcome { name: name.into(), claim: Some(claim), disposition: Some(disposition), action: Action::Keep, reason, done: false, might_claim: MightClaim::Nothing };
            self.run.outcomes.push(outcome);
            return Ok(());
        }
        // The claim was read before its owner was probed: an owner that released it (its
        // directory kept as the result) and then died looks dead with a stale claim in hand.
        // So the claim must still be there, unchanged, *after* the probe — only its owner
        // releases it, and that owner is now gone — before anything is deleted. Otherwise this
        // is the reference's own "changed before recovery release" refusal, raised before the
        // removal instead of after it.
        let sha = digest::sha256_hex(text.as_bytes());
        let path = format!("{DIRECTORY}/{name}");
        let current = match self.store.read_if_present(&path, MAX_CLAIM_BYTES) {
            Ok(current) => current,
            Err(error) => return self.refuse(name, Some(claim), Refusal { error: error.into(), reason }),
        };
        match current {
            _ if crate::mutations::active(crate::mutations::Mutation::RecoveryTrustsStaleClaim) => {}
            None if self.options.concurrent => return self.already_recovered(name, Some(claim)),
            Some(now) if digest::sha256_hex(now.as_bytes()) == sha => {}
            _ => {
                let refusal =
                    Refusal { error: Error::lease(LeaseCode::DirectoryLeaseChangedBeforeRecoveryRelease), reason: format!("{reason}; but its claim changed after it was read") };
                return self.refuse(name, Some(claim), refusal);
            }
        }
        // Beyond the reference: the directory of a run whose command finished is its result.
        let finished = match self.processes.finished_run(&claim.id) {
            Ok(finished) => finished.filter(|run| run.directory_identity == claim.directory_identity),
            Err(cause) => {
                let refusal = Refusal { error: Error::unavailable(cause), reason: format!("{reason}; but its run journal cannot be read") };
                return self.refuse(name, Some(claim), refusal);
            }
        };
        // Beyond the reference: a run whose state home took no write at all (not even the run
        // journal) marks its finish beside the directory (docs/deviations.md 19).
        let marker = finished_marker(&claim);
        let marked = finished.is_none() && self.workspace.inspect(&marker).ok().flatten().is_some_and(|facts| facts.is_directory && facts.owned && facts.canonical);
        let keep = match &finished {
            Some(run) if claim.role == Role::RawWorking || run.succeeded() => {
                Some(format!("its command finished ({}) before the lease was released: the directory is its result and stays", run.status_words()))
            }
            _ if marked => Some(format!("its command finished before the lease was released ({marker} says so): the directory is its result and stays")),
            _ if self.options.keep.contains(&claim.path) => Some(String::from("kept as asked: only the claim is removed")),
            _ => None,
        };
        let reason = match (&keep, &finished) {
            (Some(words), _) => format!("{reason}; {words}"),
            (None, Some(run)) => format!("{reason}; its command failed ({}) before the lease was released: the stage is scratch", run.status_words()),
            (None, None) => reason,
        };
        // Beyond the reference: the directory is removed only while nothing else claims it or
        // anything in it — checked against the collection as it is *now*, under the lock new
        // leases take, held until the directory is out of its path (docs/deviations.md 23, 24).
        let locked = !self.options.dry_run && keep.is_none();
        if locked && let Err(failure) = self.store.lock_leasing() {
            let refusal = Refusal { error: failure.into(), reason: format!("{reason}; but the lease-creation lock could not be taken to remove it") };
            return self.refuse(name, Some(claim), refusal);
        }
        let step = self.remove_unless_held(name, &claim, &path, &sha, keep.is_some());
        if locked {
            self.store.unlock_leasing();
        }
        match step {
            Ok(Removal::Held(why)) => {
                let reason = format!("{reason}; but {why}");
                self.run.outcomes.push(Outcome {
                    name: name.into(),
                    claim: Some(claim),
                    disposition: Some(disposition),
                    action: Action::Keep,
                    reason,
                    done: false,
                    might_claim: MightClaim::Nothing,
                });
                Ok(())
            }
            Ok(Removal::Done(action)) => {
                if !self.options.dry_run {
                    self.processes.forget_run(&claim.id);
                    if marked {
                        // Its lease is gone: the marker has nothing left to keep.
                        let _ = self.workspace.remove_empty_directory(&marker, None);
                    }
                }
                let done = !self.options.dry_run;
                self.run.outcomes.push(Outcome { name: name.into(), claim: Some(claim), disposition: Some(disposition), action, reason, done, might_claim: MightClaim::Nothing });
                Ok(())
            }
            Err((error, why)) => {
                let why = why.unwrap_or_else(|| String::from(refusal_words(&error)));
                self.refuse(name, Some(claim), Refusal { error, reason: format!("{reason}; {why}") })
            }
        }
    }

    /// Unless something else claims it ([`Recovery::held_elsewhere`]; only when `keep` is
    /// false: a kept directory is not removed), carries out the recovery of `claim` (§6A.6
    /// e.5–e.7) and removes its claim file `path` by compare-and-swap against `sha`.
    /// `Err` holds the refusal and, when the refusal's own words are not enough, why.
    // The error ends one entry's recovery, once: its size costs nothing that matters.
    #[allow(clippy::result_large_err)]
    fn remove_unless_held(&mut self, name: &str, claim: &DirectoryLease, path: &str, sha: &str, keep: bool) -> Result<Removal, (Error, Option<String>)> {
        if !keep && let Some(why) = self.held_elsewhere(name, claim).map_err(|error| (error, Some(String::from("but what else claims its directory could not be read"))))? {
            return Ok(Removal::Held(why));
        }
        let action = carry_out(claim, self.workspace, self.options.dry_run, keep).map_err(|error| (error, None))?;
        if !self.options.dry_run {
            let removed = self.store.remove_if_unchanged(path, sha).map_err(|error| (error.into(), Some(String::from("but its claim could not be removed"))))?;
            if !removed {
                let vanished = matches!(self.store.read_if_present(path, MAX_CLAIM_BYTES), Ok(None));
                if !(vanished && self.options.concurrent) {
                    return Err((Error::lease(LeaseCode::DirectoryLeaseChangedBeforeRecoveryRelease), Some(String::from("but its claim changed while it was recovered"))));
                }
            }
        }
        Ok(Removal::Done(action))
    }

    /// Why the directory of `claim` (entry `name`, whose owner is provably gone) must not be
    /// removed now, in words; `None` when nothing else claims it. Reads the collection and the
    /// creation intents again first (a lease made since recovery began counts):
    /// - a lease of a directory inside it, whatever that lease's state (`docs/deviations.md`
    ///   23): it is kept until that lease is released or recovered;
    /// - another lease of the same directory (by path or identity) whose owner is not provably
    ///   gone (24);
    /// - an entry that is not a valid lease and may claim it or something in it (24);
    /// - a directory being created inside it by a process not provably gone (an intent, §6A.6
    ///   creation in `creation.rs`).
    fn held_elsewhere(&mut self, name: &str, claim: &DirectoryLease) -> Result<Option<String>, Error> {
        if crate::mutations::active(crate::mutations::Mutation::RecoveryIgnoresOtherClaims) {
            return Ok(None);
        }
        self.refresh_known()?;
        let target = claim.path.as_str();
        // Only the entries that may overlap the target (the rest are never looked at again):
        // probing one below needs `self` mutably.
        let overlapping: Vec<(String, Known)> = self
            .known
            .iter()
            .filter(|(other, known)| {
                other != name
                    && match known {
                        Known::Lease(lease) => lease.path == target || is_inside(&lease.path, target) || lease.directory_identity == claim.directory_identity,
                        Known::Invalid(might) => might.within(target),
                    }
            })
            .cloned()
            .collect();
        for (other, known) in overlapping {
            match known {
                Known::Lease(lease) if is_inside(&lease.path, target) => {
                    return Ok(Some(format!(
                        "{}, inside it, is leased too ({other}): it is kept until that lease is released or recovered, then a later `recover` removes it",
                        lease.path
                    )));
                }
                Known::Lease(lease) if lease.path == target || lease.directory_identity == claim.directory_identity => {
                    let (disposition, why) = explain(&lease, self.now_ms, self.processes)?;
                    if disposition != Disposition::Recoverable {
                        return Ok(Some(format!("another lease ({other}) claims this directory too, and it is {}: {why}", disposition.name())));
                    }
                }
                Known::Lease(_) => {}
                Known::Invalid(might) if might.within(target) => {
                    let what = match &might {
                        MightClaim::Path(path) => format!("names {path}"),
                        _ => String::from("cannot be read, so it may claim any directory"),
                    };
                    return Ok(Some(format!("the entry {other} of the lease collection is not a valid lease and {what}: it is kept until that entry is fixed or set aside")));
                }
                Known::Invalid(_) => {}
            }
        }
        for (intent, path, owner) in super::creation::intents_in_flight(self.store)? {
            if path != target && !is_inside(&path, target) {
                continue;
            }
            let liveness = liveness::probe(self.processes, &owner).map_err(Error::unavailable)?;
            if liveness.status != OwnerStatus::DifferentOrDead || liveness.spawned == Spawned::SomeAlive {
                let creator = liveness::describe("creator", &owner, &liveness);
                return Ok(Some(format!("{path} is being created in it ({intent}; {creator}): it is kept until that creation ends")));
            }
        }
        Ok(None)
    }

    /// Brings [`Recovery::known`] up to date with the collection: entries gone are dropped, new
    /// ones and those that could not be read are read (a lease's claim never changes what it
    /// claims while its file exists, so what was read of the others stands).
    fn refresh_known(&mut self) -> Result<(), Error> {
        let Some(snapshot) = self.store.snapshot(DIRECTORY, false)? else {
            self.known.clear();
            return Ok(());
        };
        let leaseish = |name: &str| name.strip_suffix(".json").is_some_and(js::is_uuid_v4);
        let present: Vec<String> = snapshot.entries.iter().filter(|e| e.kind == EntryKind::File).map(|e| e.name.clone()).collect();
        self.known.retain(|(name, _)| present.contains(name));
        // Named as a lease but not a regular file: it may claim any directory.
        for entry in snapshot.entries.iter().filter(|e| e.kind != EntryKind::File && leaseish(&e.name)) {
            self.known.push((entry.name.clone(), Known::Invalid(MightClaim::Anything)));
        }
        let unread: Vec<String> = present
            .into_iter()
            .filter(|name| name.strip_suffix(".json").is_some_and(js::is_uuid_v4))
            .filter(|name| !self.known.iter().any(|(known, what)| known == name && matches!(what, Known::Lease(_))))
            .collect();
        for batch in unread.chunks(MAX_CLAIMS) {
            let total = MAX_CLAIM_BYTES.saturating_mul(batch.len() as u32);
            for (name, status) in self.store.read_batch(DIRECTORY, batch, MAX_CLAIM_BYTES, total, &snapshot.identity)? {
                let known = Known::of(&status, &name);
                match self.known.iter_mut().find(|(known, _)| *known == name) {
                    Some(entry) => entry.1 = known,
                    None => self.known.push((name, known)),
                }
            }
        }
        Ok(())
    }

    /// Sets what the entry just reported may claim.
    fn note_might_claim(&mut self, might: MightClaim) {
        if let Some(outcome) = self.run.outcomes.last_mut() {
            outcome.might_claim = might;
        }
    }

    fn already_recovered(&mut self, name: &str, claim: Option<DirectoryLease>) -> Result<(), Error> {
        let reason = String::from("its claim vanished: another recoverer finished it");
        self.run.outcomes.push(Outcome { name: name.into(), claim, disposition: None, action: Action::AlreadyRecovered, reason, done: false, might_claim: MightClaim::Nothing });
        Ok(())
    }
}

/// Where a supervisor marks that the command of lease `claim` finished when its state home took
/// no write at all (`docs/deviations.md` 19): an empty directory
/// `<parent>/.proclease-finished-<lease id>` beside the leased directory. Recovery keeps a
/// directory so marked (only its claim is removed, then the marker), as it keeps one the run
/// journal says finished. Anyone may make it to keep a directory from recovery.
pub fn finished_marker(claim: &DirectoryLease) -> String {
    let parent = claim.parent_path.trim_end_matches('/');
    format!("{parent}/.proclease-finished-{}", claim.id)
}

/// What [`Recovery::remove_unless_held`] did.
enum Removal {
    /// Nothing: something else claims the directory (why, in words).
    Held(String),
    /// Carried out (in a dry run: would be).
    Done(Action),
}

/// What to tell the user about a refusal of a recoverable lease.
fn refusal_words(error: &Error) -> &'static str {
    let message = error.message();
    if message.ends_with("target changed before recovery") {
        "but another directory is at its path now: it is left alone (remove it by hand if it is yours, or move it away)"
    } else if message.ends_with("parent changed before recovery") {
        "but its parent directory was replaced: it is left alone"
    } else if message.ends_with("output changed before recovery") {
        "but its output root holds another directory: it is left alone"
    } else {
        "but its directory could not be removed"
    }
}

/// §6A.6 e.3–e.4: the disposition of a lease and the reason in words — the owner (and for a
/// raw lease its recorded child or launch window, and beyond the reference the processes the
/// owner started) proves it gone, or not.
fn explain(claim: &DirectoryLease, now_ms: u64, processes: &mut dyn Processes) -> Result<(Disposition, String), Error> {
    let owner = liveness::probe(processes, &claim.owner).map_err(Error::unavailable)?;
    let owner_text = liveness::describe("owner", &claim.owner, &owner);
    match owner.status {
        OwnerStatus::ExactLiveOwner => return Ok((Disposition::Active, owner_text)),
        OwnerStatus::Unknown => return Ok((Disposition::Indeterminate, owner_text)),
        OwnerStatus::DifferentOrDead => {}
    }
    // Beyond the reference: a process the owner started that still holds its witness may be
    // working in the directory — a bundle stage's command (which no lease records) included.
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
    .map_err(Error::unavailable::<String>)?;
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

/// §6A.6 e.5–e.7 for a lease whose owner is provably gone: what is done (or, in a dry run,
/// would be done) with its directory. With `keep`, a directory still there is left as it is.
fn carry_out(claim: &DirectoryLease, workspace: &mut dyn Workspace, dry_run: bool, keep: bool) -> Result<Action, Error> {
    let parent = identity_of(workspace, &claim.parent_path, false)?;
    if parent != claim.parent_identity {
        return Err(Error::lease(LeaseCode::DirectoryLeaseParentChangedBeforeRecovery));
    }
    match identity_if_present(workspace, &claim.path, true)? {
        Some(current) if current != claim.directory_identity => Err(Error::lease(LeaseCode::DirectoryLeaseTargetChangedBeforeRecovery)),
        Some(_) if keep => Ok(Action::KeepDirectory),
        Some(_) => {
            if !dry_run {
                workspace.remove_tree(&claim.path, &claim.directory_identity)?;
            }
            Ok(Action::RemoveDirectory)
        }
        None => {
            // An interrupted quarantine of this exact directory by a dead remover is finished.
            if !dry_run && workspace.remove_tree(&claim.path, &claim.directory_identity)? {
                return Ok(Action::RemoveDirectory);
            }
            let Some(output) = &claim.output_root else { return Ok(Action::RemoveClaim) };
            match identity_if_present(workspace, output, true)? {
                Some(out) if out != claim.directory_identity => Err(Error::lease(LeaseCode::DirectoryLeaseOutputChangedBeforeRecovery)),
                Some(_) => Ok(Action::CountPublished),
                None => Ok(Action::RemoveClaim),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::Owner;
    use alloc::string::ToString;

    fn identity(inode: &str) -> DirectoryIdentity {
        DirectoryIdentity { device: "2049".into(), inode: inode.into(), birthtime_ns: "1722000001000000000".into() }
    }

    fn outcome(path: &str, inode: &str, disposition: Option<Disposition>, action: Action) -> Outcome {
        let owner = Owner { pid: 7, boot_id: "b".repeat(32), process_start_id: "1".into() };
        let claim = DirectoryLease {
            id: "11111111-1111-4111-9111-111111111111".into(),
            role: Role::RawWorking,
            path: path.into(),
            parent_path: directory_lease::dirname(path).to_string(),
            parent_identity: identity("1"),
            directory_identity: identity(inode),
            output_root: None,
            owner,
            child_owner: None,
            phase: Phase::Running,
            created_at_ms: 1000,
            recover_after_ms: 2000,
        };
        Outcome { name: "x.json".into(), claim: Some(claim), disposition, action, reason: "why".into(), done: false, might_claim: MightClaim::Nothing }
    }

    #[test]
    fn a_directory_is_claimed_by_its_path_or_by_its_identity() {
        let run = Run { outcomes: alloc::vec![outcome("/jobs/a", "10", Some(Disposition::Active), Action::Keep)], ..Run::default() };
        assert!(matches!(run.conflict("/jobs/a", None), Some(Conflict::Active(_))), "by path");
        assert!(matches!(run.conflict("/jobs/moved", Some(&identity("10"))), Some(Conflict::Active(_))), "by identity: the directory was renamed");
        assert_eq!(run.conflict("/jobs/b", Some(&identity("11"))), None, "another directory");
    }

    #[test]
    fn a_directory_inside_another_lease_s_directory_is_refused_unless_that_owner_is_alive() {
        // docs/deviations.md 24: recovery of the outer lease removes the outer directory whole.
        let dead = Run { outcomes: alloc::vec![outcome("/jobs/a", "10", Some(Disposition::Recoverable), Action::RemoveDirectory)], ..Run::default() };
        assert!(matches!(dead.conflict("/jobs/a/inner", None), Some(Conflict::Recoverable(o)) if o.claim.as_ref().unwrap().path == "/jobs/a"));
        assert!(matches!(dead.conflict("/jobs/a/x/y", None), Some(Conflict::Recoverable(_))), "deeper too");
        assert_eq!(dead.conflict("/jobs/ab", None), None, "a sibling whose name starts alike is not inside");
        let unknown = Run { outcomes: alloc::vec![outcome("/jobs/a", "10", Some(Disposition::Indeterminate), Action::Keep)], ..Run::default() };
        assert!(matches!(unknown.conflict("/jobs/a/inner", None), Some(Conflict::Undecided(_))));
        let live = Run { outcomes: alloc::vec![outcome("/jobs/a", "10", Some(Disposition::Active), Action::Keep)], ..Run::default() };
        assert_eq!(live.conflict("/jobs/a/inner", None), None, "a live run may nest runs in its directory");
        let gone = Run { outcomes: alloc::vec![outcome("/jobs/a", "10", None, Action::AlreadyRecovered)], ..Run::default() };
        assert_eq!(gone.conflict("/jobs/a/inner", None), None, "already recovered by another");
        let half = Run { outcomes: alloc::vec![outcome("/jobs/a", "10", Some(Disposition::Recoverable), Action::RemoveClaim)], ..Run::default() };
        assert!(
            matches!(half.conflict("/jobs/a/inner", None), Some(Conflict::Recoverable(_))),
            "its directory is gone but its claim is not: making /jobs/a again would leave that claim unrecoverable"
        );
        let finished = Run { outcomes: alloc::vec![outcome("/jobs/a", "10", Some(Disposition::Recoverable), Action::KeepDirectory)], ..Run::default() };
        assert_eq!(finished.conflict("/jobs/a/inner", None), None, "a finished run's directory stays: recovery removes only its claim");
        let held = Run { outcomes: alloc::vec![outcome("/jobs/a", "10", Some(Disposition::Recoverable), Action::Keep)], ..Run::default() };
        assert!(matches!(held.conflict("/jobs/a/inner", None), Some(Conflict::Undecided(_))), "kept for now (a lease inside it): not 'run recover first'");
        let mut stage = outcome("/jobs/.stage", "10", Some(Disposition::Active), Action::Keep);
        if let Some(claim) = stage.claim.as_mut() {
            claim.role = Role::BundleStage;
        }
        let staging = Run { outcomes: alloc::vec![stage], ..Run::default() };
        assert!(matches!(staging.conflict("/jobs/.stage/sub", None), Some(Conflict::Active(_))), "a live stage is published or removed whole: nothing nests in it");
    }

    #[test]
    fn an_entry_that_is_not_a_valid_lease_blocks_what_it_may_claim() {
        let unreadable = Outcome {
            name: "22222222-2222-4222-9222-222222222222.json".into(),
            claim: None,
            disposition: None,
            action: Action::Skip(Error::lease(LeaseCode::DirectoryLeaseChangedDuringRecoveryInspection)),
            reason: "the claim file is not a private regular file".into(),
            done: false,
            might_claim: MightClaim::Anything,
        };
        let run = Run { outcomes: alloc::vec![unreadable.clone()], ..Run::default() };
        assert!(matches!(run.conflict("/anywhere/at/all", None), Some(Conflict::Undecided(_))), "it may claim any directory");
        let named = Outcome { might_claim: MightClaim::Path("/jobs/a".into()), ..unreadable.clone() };
        let run = Run { outcomes: alloc::vec![named], ..Run::default() };
        assert!(matches!(run.conflict("/jobs/a", None), Some(Conflict::Undecided(_))));
        assert!(matches!(run.conflict("/jobs/a/inner", None), Some(Conflict::Undecided(_))));
        assert_eq!(run.conflict("/jobs/b", None), None);
        let nothing = Outcome { might_claim: MightClaim::Nothing, ..unreadable };
        assert_eq!(Run { outcomes: alloc::vec![nothing], ..Run::default() }.conflict("/jobs/a", None), None, "an empty file claims nothing");
    }

    #[test]
    fn what_the_text_of_an_invalid_entry_names() {
        assert_eq!(MightClaim::of_text(r#"{"path":"/jobs/a","newField":1}"#), MightClaim::Path("/jobs/a".into()), "a newer writer's lease");
        assert_eq!(MightClaim::of_text(r#"{"id":"x","path":"/jobs/a","ro"#), MightClaim::Path("/jobs/a".into()), "a file cut short");
        assert_eq!(MightClaim::of_text(""), MightClaim::Nothing);
        assert_eq!(MightClaim::of_text("not json"), MightClaim::Nothing);
        assert_eq!(MightClaim::of_text(r#"{"path":7}"#), MightClaim::Nothing);
        assert!(is_inside("/a/b", "/a") && is_inside("/a/b/c", "/a/") && !is_inside("/ab", "/a") && !is_inside("/a", "/a"));
    }

    #[test]
    fn a_replaced_directory_is_never_said_to_be_recoverable() {
        let changed = Error::lease(LeaseCode::DirectoryLeaseTargetChangedBeforeRecovery);
        let run = Run { outcomes: alloc::vec![outcome("/jobs/a", "10", Some(Disposition::Recoverable), Action::Stop(changed))], ..Run::default() };
        assert!(matches!(run.conflict("/jobs/a", None), Some(Conflict::Replaced(_))), "recover refuses it for good");
        assert!(matches!(run.conflict("/jobs/moved", Some(&identity("10"))), Some(Conflict::Undecided(_))), "the leased directory itself, moved here: not replaced");
        let run = Run { outcomes: alloc::vec![outcome("/jobs/a", "10", Some(Disposition::Recoverable), Action::RemoveDirectory)], ..Run::default() };
        assert!(matches!(run.conflict("/jobs/a", None), Some(Conflict::Recoverable(_))));
        let run = Run { outcomes: alloc::vec![outcome("/jobs/a", "10", Some(Disposition::Indeterminate), Action::Keep)], ..Run::default() };
        assert!(matches!(run.conflict("/jobs/a", None), Some(Conflict::Undecided(_))));
    }
}
