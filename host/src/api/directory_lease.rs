//! The typed API over the component's `directory-leases` export (spec §6A.6): leasing a
//! working or staging directory, its raw lifecycle, release, and recovery.
//!
//! **Dropping a handle** unreleased (an early `?`, a panic elsewhere) does what the lease allows
//! (issue #29):
//! - a raw working lease in `preparing` (nothing was launched in it yet) or `settled` (its
//!   command ended and was settled): the claim is **released**, as [`DirectoryLease::release`]
//!   would — the directory itself stays, as after any release;
//! - a raw lease in `launching` or `running` (a command may still run in the directory), and
//!   every bundle stage (a command may work in a stage without the lease recording it): the
//!   claim is **left**, with a warning. While this process lives the lease is held; once it is
//!   gone, `recover` judges what it started (by its witnesses, or its pid and start time) and
//!   removes the directory only once that is provably dead too — never a state only a reboot
//!   clears. Release a stage yourself once it is published or removed.
//!
//! A handle dropped while its thread panics does the same — a process that catches the panic
//! (`catch_unwind`, a thread pool, a task) lives on, and would otherwise hold the lease — unless
//! the panic came out of a component call (a host import that panicked): then the component is
//! not entered again and the claim is left as a crash would leave it. [`DirectoryLease::leave`]
//! leaves one on purpose. What a drop cannot do is said to the program's global `tracing`
//! subscriber, or on standard error when it installed none.

use proclease_core::directory_leases::{Action, CreationAction, CreationOutcome, MightClaim, Options, Outcome, Report, Request, Run};
use proclease_core::records::directory_lease::{DirectoryLease as Claim, Phase, Role};
use wasmtime::component::ResourceAny;

use crate::bindings::exports::proclease::lease::directory_leases as wit;
use crate::bindings::proclease::lease::types as t;
use crate::effects::Effects;
use crate::runtime::export_call;
use crate::runtime::{Instance, Runtime};
use crate::{Error, convert};

/// A held directory lease in its own component instance. Dropped unreleased, it releases a raw
/// lease in which nothing runs and leaves one in which a command may run (module docs).
#[must_use = "the directory lease is held until released (dropping the handle releases it only while no command may run in it)"]
pub struct DirectoryLease {
    instance: Instance,
    resource: ResourceAny,
    /// [`DirectoryLease::leave`] was called: the drop leaves the claim.
    left: bool,
    /// The bound of each call's waits for other processes, the drop's release included
    /// ([`HostBuilder::lock_timeout`](crate::HostBuilder::lock_timeout) for a handle of a
    /// [`Host`](crate::Host)).
    bound: std::time::Duration,
}

fn request(r: &Request) -> wit::LeaseRequest {
    wit::LeaseRequest {
        role: match r.role {
            Role::RawWorking => t::LeaseRole::RawWorking,
            Role::BundleStage => t::LeaseRole::BundleStage,
        },
        path: r.path.clone(),
        output_root: r.output_root.clone(),
        recover_after_ms: r.recover_after_ms,
        now_ms: r.now_ms,
    }
}

fn phase(p: Phase) -> t::RawPhase {
    match p {
        Phase::Preparing => t::RawPhase::Preparing,
        Phase::Launching => t::RawPhase::Launching,
        Phase::Running => t::RawPhase::Running,
        Phase::Settled => t::RawPhase::Settled,
    }
}

macro_rules! call {
    ($self:ident, $method:ident $(, $arg:expr)*) => {
        {
            let _operation = crate::lock_wait::Operation::begin($self.bound);
            export_call!($self.instance, [proclease_lease_directory_leases, directory_lease] $method($self.resource $(, $arg)*))
        }
    };
}

impl DirectoryLease {
    /// The request checks made before any filesystem work (§6A.6 steps 1–2), in a fresh
    /// instance served by `effects` (only its clock is used).
    pub fn check_request(runtime: &Runtime, effects: Effects, r: &Request) -> Result<(), Error> {
        let mut instance = runtime.instantiate_with(effects)?;
        instance.call(|exports, store| exports.proclease_lease_directory_leases().call_check_request(store, &request(r)))
    }

    /// Creates a lease (§6A.6) in a fresh instance served by `effects`.
    ///
    /// As in the reference, nothing stops two leases from claiming one directory; then the
    /// recovery of one (its owner gone) deletes the directory the other may still be using.
    /// [`Host::lease_new_directory`](crate::Host::lease_new_directory) is the safe entry point:
    /// it checks, under one lock (`.proclease/locks/directory-lease-creation.lock`), that no lease
    /// claims the directory before leasing it, as `proclease run` does.
    pub fn create(runtime: &Runtime, effects: Effects, r: &Request) -> Result<DirectoryLease, Error> {
        let mut instance = runtime.instantiate_with(effects)?;
        let resource = instance.call(|exports, store| exports.proclease_lease_directory_leases().call_create(store, &request(r)))?;
        Ok(DirectoryLease { instance, resource, left: false, bound: crate::lock_wait::DEFAULT_BOUND })
    }

    /// Creates the directory of `r` (mode 0700, with its missing ancestors, under the granted
    /// workspace roots) and leases it, recording the intent first so that a crash between the
    /// two leaves nothing [`recover_directory_creations`] cannot clean up; what was created is
    /// removed again if the lease fails. In its own component instance.
    ///
    /// Errors: those of [`DirectoryLease::create`]; a storage error naming the intent or the
    /// directory.
    pub fn create_with_directory(runtime: &Runtime, effects: Effects, r: &Request) -> Result<DirectoryLease, Error> {
        let mut instance = runtime.instantiate_with(effects)?;
        let resource = instance.call(|exports, store| exports.proclease_lease_directory_leases().call_create_with_directory(store, &request(r)))?;
        Ok(DirectoryLease { instance, resource, left: false, bound: crate::lock_wait::DEFAULT_BOUND })
    }

    /// Leases a directory nothing else uses, creating it when absent — the component's
    /// `lease-new-directory` (`proclease_core::directory_leases::lease_new_directory`): neither
    /// the state home (`state_home`, absolute) nor inside it nor holding it, absent or empty, and
    /// claimed by no other lease, checked under the lease-creation lock. In its own component
    /// instance.
    ///
    /// Errors: [`Refusal::NewDirectory`](crate::Refusal::NewDirectory) (nothing leased or
    /// created); those of [`DirectoryLease::create_with_directory`]; the lock's (a `contended`
    /// storage failure naming the holder).
    pub fn lease_new(runtime: &Runtime, effects: Effects, r: &Request, state_home: &str) -> Result<DirectoryLease, Error> {
        let mut instance = runtime.instantiate_with(effects)?;
        let leased = instance.call(|exports, store| {
            Ok(match exports.proclease_lease_directory_leases().call_lease_new_directory(store, &request(r), state_home)? {
                Ok(resource) => Ok(Ok(resource)),
                Err(wit::NewDirectoryError::Refused(refused)) => Ok(Err(refused)),
                Err(wit::NewDirectoryError::Failed(error)) => Err(error),
            })
        })?;
        let resource = leased.map_err(|refused| {
            use proclease_core::directory_leases::RefusalKind as Kind;
            let kind = match refused.kind {
                wit::NewDirectoryRefusal::StateHome => Kind::StateHome,
                wit::NewDirectoryRefusal::NotADirectory => Kind::NotADirectory,
                wit::NewDirectoryRefusal::NotEmpty => Kind::NotEmpty,
                wit::NewDirectoryRefusal::AlreadyLeased => Kind::AlreadyLeased,
                wit::NewDirectoryRefusal::InsideLeased => Kind::InsideLeased,
                wit::NewDirectoryRefusal::UndecidedLease => Kind::UndecidedLease,
            };
            Error::from(crate::Refusal::NewDirectory { kind, message: refused.message })
        })?;
        Ok(DirectoryLease { instance, resource, left: false, bound: crate::lock_wait::DEFAULT_BOUND })
    }

    /// Resumes a handle on `claim` as if this process had written it.
    pub fn resume(runtime: &Runtime, effects: Effects, claim: &Claim, released: bool) -> Result<DirectoryLease, Error> {
        let mut instance = runtime.instantiate_with(effects)?;
        let claim = convert::directory_lease_claim_to_wit(claim.clone());
        let resource = instance.call(|exports, store| exports.proclease_lease_directory_leases().directory_lease().call_resume(store, &claim, released))?;
        Ok(DirectoryLease { instance, resource, left: false, bound: crate::lock_wait::DEFAULT_BOUND })
    }

    /// Bounds each later call's waits for other processes (kernel locks of the state home,
    /// other programs' mutation claims), the release on drop included, by `bound`; default
    /// [`lock_wait::DEFAULT_BOUND`](crate::lock_wait::DEFAULT_BOUND) (10 s). A handle of a
    /// [`Host`](crate::Host) has the host's
    /// [`lock_timeout`](crate::HostBuilder::lock_timeout). A call made inside an operation
    /// already bounded on this thread ([`lock_wait::Operation`](crate::lock_wait::Operation))
    /// keeps that operation's bound.
    pub fn with_lock_timeout(mut self, bound: std::time::Duration) -> Self {
        self.bound = bound;
        self
    }

    /// The claim this handle last wrote.
    pub fn claim(&mut self) -> Result<Claim, Error> {
        Ok(convert::directory_lease_claim_from_wit(call!(self, call_claim)?))
    }

    /// sha256 of that claim's file text.
    pub fn content_sha256(&mut self) -> Result<String, Error> {
        call!(self, call_content_sha256)
    }

    /// Whether this handle released the lease.
    pub fn released(&mut self) -> Result<bool, Error> {
        call!(self, call_released)
    }

    /// A raw lifecycle step; `child_pid` exactly for [`Phase::Running`] (§6A.6).
    ///
    /// Durable against every crash of processes, not against a power loss or an OS crash: the
    /// file store does not fsync the collection after a phase update (`docs/deviations.md` 28),
    /// so after one the record may be back at an earlier phase. Recovery judges every phase of
    /// an earlier boot's owner alike; but a [`Claim`] saved after an update may no longer match
    /// the file then (a [`DirectoryLease::resume`] of it fails `changed before release`): after
    /// a reboot, read the claim again, or keep a result with `recover --keep DIR`.
    ///
    /// Errors: the §6A.6 lifecycle errors (a transition not allowed, a missing or unexpected
    /// child), `changed before its lifecycle update`, or a storage error.
    pub fn update(&mut self, to: Phase, child_pid: Option<i64>) -> Result<(), Error> {
        call!(self, call_update, phase(to), child_pid)?.map_err(|e| convert::error_from_wit(e).into())
    }

    /// Removes the claim (never the directory); a no-op once released.
    pub fn release(&mut self) -> Result<(), Error> {
        call!(self, call_release)?.map_err(|e| convert::error_from_wit(e).into())
    }
}

impl DirectoryLease {
    /// Drops the handle and leaves its claim exactly as it is, whatever its phase: for a caller
    /// that could not settle or release it and wants the next `recover` to judge it (the
    /// supervisor of `run` after a failure).
    pub fn leave(mut self) {
        self.left = true;
    }
}

impl Drop for DirectoryLease {
    /// Releases a claim in which nothing runs (`preparing`, `settled`); leaves one whose command
    /// may run, with a warning (module docs).
    fn drop(&mut self) {
        // A call abandoned mid-way (a panic out of a host import) leaves the component
        // unusable: the claim is left as a crash would leave it. A panic in the embedder's code
        // (caught by `catch_unwind`, a thread pool, a task) does not: the claim is released as
        // on any drop, or a process that lives on would hold it.
        if !self.left && !self.instance.usable() {
            super::drop_warning(format_args!(
                "a directory lease handle was dropped after a component call was abandoned mid-way: its claim is left (held while this process lives)"
            ));
        }
        let held = !self.left && self.instance.usable() && matches!(self.released(), Ok(false));
        if held {
            match self.claim() {
                Ok(claim) if claim.role == Role::RawWorking && matches!(claim.phase, Phase::Preparing | Phase::Settled) => {
                    if let Err(e) = self.release() {
                        super::drop_warning(format_args!(
                            "a dropped directory lease handle of {} could not release its claim ({e}): it is recovered once this process is gone",
                            claim.path
                        ));
                    }
                }
                Ok(claim) => super::drop_warning(format_args!(
                    "a directory lease handle of {} was dropped in phase {} while a command may run in its directory: the claim stays (held while this process lives; recovered once this process and what it started are gone)",
                    claim.path,
                    claim.phase.name()
                )),
                Err(e) => super::drop_warning(format_args!("a dropped directory lease handle could not read its claim ({e}): it is left as it is")),
            }
        }
        self.instance.drop_resource(self.resource);
    }
}

/// Recovers every directory lease whose owner is provably gone (§6A.6), at `now_ms` (the
/// clock when `None`), in a fresh instance served by `effects`.
pub fn recover_directory_leases(runtime: &Runtime, effects: Effects, now_ms: Option<f64>) -> Result<Report, Error> {
    let mut instance = runtime.instantiate_with(effects)?;
    let report = instance.call(|exports, store| exports.proclease_lease_directory_leases().call_recover(store, now_ms))?;
    Ok(Report { recovered: report.recovered, published: report.published, active: report.active, indeterminate: report.indeterminate })
}

/// Recovery (§6A.6) at `now_ms` (the clock when `None`) with `options` — a dry run, skipping
/// what cannot be recovered, treating a lease another recoverer finished as done — in a fresh
/// instance served by `effects`: every entry's outcome, and the refusal that stopped the run.
///
/// Errors: `… directory recovery time is invalid`; a component failure or limit.
pub fn recover_each_directory_lease(runtime: &Runtime, effects: Effects, now_ms: Option<f64>, options: Options) -> Result<Run, Error> {
    let mut instance = runtime.instantiate_with(effects)?;
    let dry_run = options.dry_run;
    let options =
        wit::RecoveryOptions { dry_run: options.dry_run, skip_invalid: options.skip_invalid, concurrent: options.concurrent, keep: options.keep, past_bound: options.past_bound };
    let run = instance.call(|exports, store| exports.proclease_lease_directory_leases().call_recover_each(store, now_ms, &options))?;
    let run = Run { outcomes: run.outcomes.into_iter().map(outcome_from_wit).collect(), stopped: run.stopped.map(convert::error_from_wit), cause: run.cause, in_flux: false };
    for o in &run.outcomes {
        let path = o.claim.as_ref().map_or("-", |c| c.path.as_str());
        tracing::info!(file = %o.name, path = %path, action = %o.action.words(), done = o.done, dry_run, reason = %o.reason, "directory lease recovery");
    }
    if let Some(stopped) = &run.stopped {
        if dry_run {
            tracing::debug!(error = %stopped, cause = ?run.cause, "directory lease recovery would stop");
        } else {
            tracing::info!(error = %stopped, cause = ?run.cause, "directory lease recovery stopped");
        }
    }
    Ok(run)
}

/// A recovery outcome as the component gives it, in proclease-core's terms.
fn outcome_from_wit(o: wit::RecoveryOutcome) -> Outcome {
    Outcome {
        name: o.file_name,
        claim: o.claim.map(convert::directory_lease_claim_from_wit),
        disposition: o.disposition.map(convert::disposition_from_wit),
        action: match o.action {
            wit::RecoveryAction::Keep => Action::Keep,
            wit::RecoveryAction::RemoveDirectory => Action::RemoveDirectory,
            wit::RecoveryAction::CountPublished => Action::CountPublished,
            wit::RecoveryAction::RemoveClaim => Action::RemoveClaim,
            wit::RecoveryAction::KeepDirectory => Action::KeepDirectory,
            wit::RecoveryAction::AlreadyRecovered => Action::AlreadyRecovered,
            wit::RecoveryAction::Skip(e) => Action::Skip(convert::error_from_wit(e)),
            wit::RecoveryAction::Stop(e) => Action::Stop(convert::error_from_wit(e)),
        },
        reason: o.reason,
        done: o.done,
        might_claim: match o.might_claim {
            wit::MightClaim::Nothing => MightClaim::Nothing,
            wit::MightClaim::Path(path) => MightClaim::Path(path),
            wit::MightClaim::Anything => MightClaim::Anything,
        },
    }
}

/// How a lease stands in the way of leasing a directory ([`directory_lease_conflict`]): the
/// kinds of proclease-core's [`Conflict`](proclease_core::directory_leases::Conflict).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConflictKind {
    /// Its owner is alive.
    Active,
    /// Its owner is provably gone: a recovery removes it (and its directory) first.
    Recoverable,
    /// The directory there now is not the one the lease holds.
    Replaced,
    /// Neither proven: the outcome's reason says what.
    Undecided,
}

/// The lease other than `except` (a lease id: the caller's own) that stands in the way of
/// leasing the directory at `path` (by path, or by `identity` when it exists), with what it is,
/// or `None`: the component's `directory-leases.conflict` in a fresh instance served by
/// `effects` — a recovery dry run that reads again an entry caught mid-replace
/// (`docs/deviations.md` 22, 24).
///
/// Errors: a store failure reading the collection; a component failure or limit.
pub fn directory_lease_conflict(
    runtime: &Runtime,
    effects: Effects,
    path: &str,
    identity: Option<&proclease_core::records::DirectoryIdentity>,
    except: Option<&str>,
) -> Result<Option<(ConflictKind, Outcome)>, Error> {
    let mut instance = runtime.instantiate_with(effects)?;
    let identity = identity.cloned().map(convert::directory_identity_to_wit);
    let found = instance.call(|exports, store| exports.proclease_lease_directory_leases().call_conflict(store, path, identity.as_ref(), except))?;
    Ok(found.map(|conflict| {
        let kind = match conflict.kind {
            wit::ConflictKind::Active => ConflictKind::Active,
            wit::ConflictKind::Recoverable => ConflictKind::Recoverable,
            wit::ConflictKind::Replaced => ConflictKind::Replaced,
            wit::ConflictKind::Undecided => ConflictKind::Undecided,
        };
        (kind, outcome_from_wit(conflict.outcome))
    }))
}

/// Finishes the directory-creation intents of provably dead creators (a crash between creating
/// a directory and leasing it): removes each directory they created that is still empty, the
/// same directory and claimed by no lease, then the intent. With `dry_run`, only says what it
/// would do. In a fresh instance served by `effects`.
///
/// Errors: a store failure listing or reading the intents; a component failure or limit.
pub fn recover_directory_creations(runtime: &Runtime, effects: Effects, dry_run: bool) -> Result<Vec<CreationOutcome>, Error> {
    let mut instance = runtime.instantiate_with(effects)?;
    let outcomes = instance.call(|exports, store| exports.proclease_lease_directory_leases().call_recover_creations(store, dry_run))?;
    Ok(outcomes
        .into_iter()
        .map(|o| CreationOutcome {
            name: o.file_name,
            path: o.path,
            action: match o.action {
                wit::CreationAction::Keep => CreationAction::Keep,
                wit::CreationAction::Finish(paths) => CreationAction::Finish(paths),
                wit::CreationAction::Skip(why) => CreationAction::Skip(why),
            },
            reason: o.reason,
            done: o.done,
        })
        .collect())
}
