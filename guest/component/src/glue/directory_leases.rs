//! The `directory-leases` export: create, update, release and recovery of directory leases
//! over the imported store, workspace, process identity, clock and entropy.

use core::cell::RefCell;

use proclease_core::directory_leases::{self as leases, Effects, Handle, Request};
use proclease_core::records::directory_lease::{Phase, Role};

use super::Component;
use super::bindings::exports::proclease::lease::directory_leases as wit;
use super::bindings::proclease::lease::types as t;
use super::convert::directory_lease_claim_in;
use super::imports::{ImportedClock, ImportedEntropy, ImportedProcesses, ImportedStore, ImportedWorkspace};
use crate::convert::{directory_lease_claim_to_wit as directory_lease_claim, error_to_wit as error};

fn effects<'a>(
    store: &'a mut ImportedStore,
    processes: &'a mut ImportedProcesses,
    workspace: &'a mut ImportedWorkspace,
    clock: &'a mut ImportedClock,
    entropy: &'a mut ImportedEntropy,
) -> Effects<'a> {
    Effects { store, processes, workspace, clock, entropy }
}

fn request(r: wit::LeaseRequest) -> Request {
    Request {
        role: match r.role {
            t::LeaseRole::RawWorking => Role::RawWorking,
            t::LeaseRole::BundleStage => Role::BundleStage,
        },
        path: r.path,
        output_root: r.output_root,
        recover_after_ms: r.recover_after_ms,
        now_ms: r.now_ms,
    }
}

fn phase(p: t::RawPhase) -> Phase {
    match p {
        t::RawPhase::Preparing => Phase::Preparing,
        t::RawPhase::Launching => Phase::Launching,
        t::RawPhase::Running => Phase::Running,
        t::RawPhase::Settled => Phase::Settled,
    }
}

/// A held directory lease (WIT resource `directory-lease`).
pub(crate) struct LeaseResource {
    handle: RefCell<Handle>,
}

impl wit::Guest for Component {
    type DirectoryLease = LeaseResource;

    fn check_request(r: wit::LeaseRequest) -> Result<(), t::Error> {
        leases::check_request(&request(r), &mut ImportedClock).map(|_| ()).map_err(error)
    }

    fn create(r: wit::LeaseRequest) -> Result<wit::DirectoryLease, t::Error> {
        let (mut s, mut p, mut w, mut c, mut e) = (ImportedStore, ImportedProcesses, ImportedWorkspace, ImportedClock, ImportedEntropy);
        let handle = leases::create(&request(r), effects(&mut s, &mut p, &mut w, &mut c, &mut e)).map_err(error)?;
        Ok(wit::DirectoryLease::new(LeaseResource { handle: RefCell::new(handle) }))
    }

    fn create_with_directory(r: wit::LeaseRequest) -> Result<wit::DirectoryLease, t::Error> {
        let (mut s, mut p, mut w, mut c, mut e) = (ImportedStore, ImportedProcesses, ImportedWorkspace, ImportedClock, ImportedEntropy);
        let handle = leases::create_with_directory(&request(r), effects(&mut s, &mut p, &mut w, &mut c, &mut e)).map_err(error)?;
        Ok(wit::DirectoryLease::new(LeaseResource { handle: RefCell::new(handle) }))
    }

    fn lease_new_directory(r: wit::LeaseRequest, state_home: alloc::string::String) -> Result<wit::DirectoryLease, wit::NewDirectoryError> {
        let (mut s, mut p, mut w, mut c, mut e) = (ImportedStore, ImportedProcesses, ImportedWorkspace, ImportedClock, ImportedEntropy);
        match leases::lease_new_directory(&request(r), &state_home, effects(&mut s, &mut p, &mut w, &mut c, &mut e)) {
            Ok(handle) => Ok(wit::DirectoryLease::new(LeaseResource { handle: RefCell::new(handle) })),
            Err(leases::NewDirectoryError::Failed(failed)) => Err(wit::NewDirectoryError::Failed(error(failed))),
            Err(leases::NewDirectoryError::Refused(refusal)) => Err(wit::NewDirectoryError::Refused(wit::RefusedDirectory {
                kind: match refusal.kind {
                    leases::RefusalKind::StateHome => wit::NewDirectoryRefusal::StateHome,
                    leases::RefusalKind::NotADirectory => wit::NewDirectoryRefusal::NotADirectory,
                    leases::RefusalKind::NotEmpty => wit::NewDirectoryRefusal::NotEmpty,
                    leases::RefusalKind::AlreadyLeased => wit::NewDirectoryRefusal::AlreadyLeased,
                    leases::RefusalKind::InsideLeased => wit::NewDirectoryRefusal::InsideLeased,
                    leases::RefusalKind::UndecidedLease => wit::NewDirectoryRefusal::UndecidedLease,
                },
                message: refusal.message,
            })),
        }
    }

    fn recover_creations(dry_run: bool) -> Result<alloc::vec::Vec<wit::CreationOutcome>, t::Error> {
        let outcomes = leases::recover_creations(&mut ImportedStore, &mut ImportedProcesses, &mut ImportedWorkspace, dry_run).map_err(error)?;
        Ok(outcomes
            .into_iter()
            .map(|o| wit::CreationOutcome {
                file_name: o.name,
                path: o.path,
                action: match o.action {
                    leases::CreationAction::Keep => wit::CreationAction::Keep,
                    leases::CreationAction::Finish(paths) => wit::CreationAction::Finish(paths),
                    leases::CreationAction::Skip(why) => wit::CreationAction::Skip(why),
                },
                reason: o.reason,
                done: o.done,
            })
            .collect())
    }

    fn recover_each(now_ms: Option<f64>, options: wit::RecoveryOptions) -> Result<wit::RecoveryRun, t::Error> {
        let (mut s, mut p, mut w, mut c, mut e) = (ImportedStore, ImportedProcesses, ImportedWorkspace, ImportedClock, ImportedEntropy);
        let options =
            leases::Options { dry_run: options.dry_run, skip_invalid: options.skip_invalid, concurrent: options.concurrent, keep: options.keep, past_bound: options.past_bound };
        let run = leases::recover_each(now_ms, effects(&mut s, &mut p, &mut w, &mut c, &mut e), options).map_err(error)?;
        let counts = run.report();
        let report = wit::RecoveryReport { recovered: counts.recovered, published: counts.published, active: counts.active, indeterminate: counts.indeterminate };
        Ok(wit::RecoveryRun { outcomes: run.outcomes.into_iter().map(LeaseResource::outcome).collect(), stopped: run.stopped.map(error), cause: run.cause, report })
    }

    fn conflict(path: alloc::string::String, identity: Option<t::DirectoryIdentity>, except: Option<alloc::string::String>) -> Result<Option<wit::LeaseConflict>, t::Error> {
        let (mut s, mut p, mut w, mut c, mut e) = (ImportedStore, ImportedProcesses, ImportedWorkspace, ImportedClock, ImportedEntropy);
        let run = leases::settled_run(except.as_deref(), effects(&mut s, &mut p, &mut w, &mut c, &mut e)).map_err(error)?;
        let identity = identity.map(crate::convert::directory_identity_from_wit);
        let Some(conflict) = run.conflict(&path, identity.as_ref()) else { return Ok(None) };
        let (kind, outcome) = match conflict {
            leases::Conflict::Active(o) => (wit::ConflictKind::Active, o),
            leases::Conflict::Recoverable(o) => (wit::ConflictKind::Recoverable, o),
            leases::Conflict::Replaced(o) => (wit::ConflictKind::Replaced, o),
            leases::Conflict::Undecided(o) => (wit::ConflictKind::Undecided, o),
        };
        Ok(Some(wit::LeaseConflict { kind, outcome: LeaseResource::outcome(outcome.clone()) }))
    }

    fn recover(now_ms: Option<f64>) -> Result<wit::RecoveryReport, t::Error> {
        let (mut s, mut p, mut w, mut c, mut e) = (ImportedStore, ImportedProcesses, ImportedWorkspace, ImportedClock, ImportedEntropy);
        let report = leases::recover(now_ms, effects(&mut s, &mut p, &mut w, &mut c, &mut e)).map_err(error)?;
        Ok(wit::RecoveryReport { recovered: report.recovered, published: report.published, active: report.active, indeterminate: report.indeterminate })
    }
}

impl LeaseResource {
    fn outcome(o: leases::Outcome) -> wit::RecoveryOutcome {
        wit::RecoveryOutcome {
            file_name: o.name,
            claim: o.claim.map(directory_lease_claim),
            disposition: o.disposition.map(crate::convert::disposition_to_wit),
            action: match o.action {
                leases::Action::Keep => wit::RecoveryAction::Keep,
                leases::Action::RemoveDirectory => wit::RecoveryAction::RemoveDirectory,
                leases::Action::CountPublished => wit::RecoveryAction::CountPublished,
                leases::Action::RemoveClaim => wit::RecoveryAction::RemoveClaim,
                leases::Action::KeepDirectory => wit::RecoveryAction::KeepDirectory,
                leases::Action::AlreadyRecovered => wit::RecoveryAction::AlreadyRecovered,
                leases::Action::Skip(e) => wit::RecoveryAction::Skip(error(e)),
                leases::Action::Stop(e) => wit::RecoveryAction::Stop(error(e)),
            },
            reason: o.reason,
            done: o.done,
            might_claim: match o.might_claim {
                leases::MightClaim::Nothing => wit::MightClaim::Nothing,
                leases::MightClaim::Path(path) => wit::MightClaim::Path(path),
                leases::MightClaim::Anything => wit::MightClaim::Anything,
            },
        }
    }
}

impl wit::GuestDirectoryLease for LeaseResource {
    fn resume(claim: t::DirectoryLeaseClaim, released: bool) -> Result<wit::DirectoryLease, t::Error> {
        let claim = directory_lease_claim_in(claim).map_err(error)?;
        Ok(wit::DirectoryLease::new(LeaseResource { handle: RefCell::new(Handle::resume(claim, released)) }))
    }

    fn claim(&self) -> t::DirectoryLeaseClaim {
        directory_lease_claim(self.handle.borrow().claim.clone())
    }

    fn content_sha256(&self) -> alloc::string::String {
        self.handle.borrow().content_sha256.clone()
    }

    fn released(&self) -> bool {
        self.handle.borrow().released
    }

    fn update(&self, to: t::RawPhase, child_pid: Option<i64>) -> Result<(), t::Error> {
        leases::update(&mut self.handle.borrow_mut(), phase(to), child_pid, &mut ImportedStore, &mut ImportedProcesses).map_err(error)
    }

    fn release(&self) -> Result<(), t::Error> {
        leases::release(&mut self.handle.borrow_mut(), &mut ImportedStore).map_err(error)
    }
}
