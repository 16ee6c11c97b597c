//! The `invocation-leases` export: plugin invocation leases over the imported store, process
//! identity, plugin catalog, clock and entropy.

use alloc::vec::Vec;
use core::cell::RefCell;

use proclease_core::invocation_leases::{self as leases, Controller, Effects, Entry, EntryDecision, RepairDecision};

use super::Component;
use super::bindings::exports::proclease::lease::invocation_leases as wit;
use super::bindings::proclease::lease::types as t;
use super::convert::{snapshot, snapshot_in};
use super::imports::{ImportedCatalog, ImportedClock, ImportedEntropy, ImportedProcesses, ImportedStore};
use crate::convert::{
    error_to_wit as error, owner_from_wit as owner_in, portable_identity_from_wit as portable_identity_in, probe_to_wit as probe, status_from_wit as status_in,
    status_to_wit as status,
};

fn entry_out(e: Entry) -> wit::Entry {
    match e {
        Entry::Valid(s) => wit::Entry::Valid(snapshot(s)),
        Entry::Invalid(id) => wit::Entry::Invalid(id),
    }
}

fn entry_in(e: wit::Entry) -> Result<Entry, proclease_core::Error> {
    Ok(match e {
        wit::Entry::Valid(s) => Entry::Valid(snapshot_in(s)?),
        wit::Entry::Invalid(id) => Entry::Invalid(id),
    })
}

/// A containment controller (WIT resource `containment-controller`).
pub(crate) struct ControllerResource {
    controller: RefCell<Controller>,
}

impl ControllerResource {
    fn step(&self, f: impl FnOnce(&mut Controller, &mut ImportedStore, &mut ImportedCatalog) -> Result<(), proclease_core::Error>) -> Result<(), t::Error> {
        f(&mut self.controller.borrow_mut(), &mut ImportedStore, &mut ImportedCatalog::default()).map_err(error)
    }
}

impl wit::Guest for Component {
    type ContainmentController = ControllerResource;

    fn acquire(identity: t::PortableIdentity, run_id: alloc::string::String) -> Result<wit::Snapshot, t::Error> {
        let identity = portable_identity_in(identity);
        let (mut s, mut p, mut c, mut k, mut e) = (ImportedStore, ImportedProcesses, ImportedCatalog::default(), ImportedClock, ImportedEntropy);
        let fx = Effects { store: &mut s, processes: &mut p, catalog: &mut c, clock: &mut k, entropy: &mut e };
        leases::acquire(&identity, &run_id, fx).map(snapshot).map_err(error)
    }

    fn list() -> Result<Vec<wit::Entry>, t::Error> {
        Ok(leases::list(&mut ImportedStore).map_err(error)?.into_iter().map(entry_out).collect())
    }

    fn lease_status(current: wit::Snapshot) -> Result<t::OwnerStatus, t::Error> {
        let current = snapshot_in(current).map_err(error)?;
        let mut processes = ImportedProcesses;
        let mut inspect = |_, owner: &proclease_core::records::Owner| proclease_core::liveness::probe(&mut processes, owner).map_err(proclease_core::Error::unavailable);
        let (_, reported) = proclease_core::dispositions::invocation_owner_status(&current.record, &current.sha256, &mut inspect).map_err(error)?;
        Ok(status(reported))
    }

    fn admission_entry(plugin_id: alloc::string::String, entry: wit::Entry, parent_status: t::OwnerStatus, host_status: t::OwnerStatus) -> Result<wit::EntryVerdict, t::Error> {
        let entry = entry_in(entry).map_err(error)?;
        let owner = match &entry {
            Entry::Valid(s) => Some(s.record.owner.process.clone()),
            Entry::Invalid(_) => None,
        };
        let (parent_status, host_status) = (status_in(parent_status), status_in(host_status));
        let mut consulted = Vec::new();
        let result = leases::admission_entry::<proclease_core::Error>(&plugin_id, &entry, &mut |p, o| {
            consulted.push(probe(p));
            Ok(proclease_core::liveness::Liveness::reference(if Some(o) == owner.as_ref() { parent_status } else { host_status }))
        });
        let (decision, blocked) = result.map_err(error)?;
        Ok(wit::EntryVerdict {
            decision: match decision {
                EntryDecision::Skip => wit::EntryDecision::Skip,
                EntryDecision::Allowed => wit::EntryDecision::Allowed,
                EntryDecision::BlockedMalformed => wit::EntryDecision::BlockedMalformed,
                EntryDecision::BlockedCleanupUnsafe => wit::EntryDecision::BlockedCleanupUnsafe,
                EntryDecision::BlockedUnverifiable => wit::EntryDecision::BlockedUnverifiable,
            },
            consulted,
            error: blocked.map(error),
        })
    }

    fn release(current: wit::Snapshot) -> Result<(), t::Error> {
        let current = snapshot_in(current).map_err(error)?;
        leases::release(&current, &mut ImportedStore, &mut ImportedCatalog::default()).map_err(error)
    }

    fn repair(recover_tombstones: bool) -> Result<wit::RepairOutcome, t::Error> {
        repair_outcome(|observe| leases::repair(recover_tombstones, &mut ImportedStore, &mut ImportedProcesses, &mut ImportedCatalog::default(), observe))
    }

    fn survey_disposition(decision: Option<wit::RepairDecision>, status: Option<t::OwnerStatus>) -> Option<t::Disposition> {
        let decision = decision.map(|d| match d {
            wit::RepairDecision::Active => RepairDecision::Active,
            wit::RepairDecision::Unknown => RepairDecision::Unknown,
            wit::RepairDecision::Remove => RepairDecision::Remove,
            wit::RepairDecision::RemovalRefused => RepairDecision::RemovalRefused,
            wit::RepairDecision::Invalid => RepairDecision::Invalid,
        });
        leases::survey_disposition(decision, status.map(status_in)).map(crate::convert::disposition_to_wit)
    }

    fn preview_repair(recover_tombstones: bool) -> Result<wit::RepairOutcome, t::Error> {
        repair_outcome(|observe| leases::preview_repair(recover_tombstones, &mut ImportedStore, &mut ImportedProcesses, observe))
    }
}

/// Runs a repair (or its dry run), collecting each entry's decision by lease id.
fn repair_outcome(run: impl FnOnce(&mut dyn FnMut(&Entry, RepairDecision)) -> Result<leases::RepairReport, proclease_core::Error>) -> Result<wit::RepairOutcome, t::Error> {
    let mut decisions = Vec::new();
    let report = run(&mut |entry, d| {
        let id = match entry {
            Entry::Valid(s) => s.record.lease_id.clone(),
            Entry::Invalid(id) => id.clone(),
        };
        decisions.push((
            id,
            match d {
                RepairDecision::Active => wit::RepairDecision::Active,
                RepairDecision::Unknown => wit::RepairDecision::Unknown,
                RepairDecision::Remove => wit::RepairDecision::Remove,
                RepairDecision::RemovalRefused => wit::RepairDecision::RemovalRefused,
                RepairDecision::Invalid => wit::RepairDecision::Invalid,
            },
        ));
    })
    .map_err(error)?;
    Ok(wit::RepairOutcome {
        report: wit::RepairReport { inspected: report.inspected, removed: report.removed, active: report.active, unknown: report.unknown, invalid: report.invalid },
        decisions,
    })
}

impl wit::GuestContainmentController for ControllerResource {
    fn create(initial: wit::Snapshot) -> Result<wit::ContainmentController, t::Error> {
        let initial = snapshot_in(initial).map_err(error)?;
        let controller = Controller::new(&initial).map_err(error)?;
        Ok(wit::ContainmentController::new(ControllerResource { controller: RefCell::new(controller) }))
    }

    fn current(&self) -> wit::Snapshot {
        snapshot(self.controller.borrow().current.clone())
    }

    fn host_starting(&self, host: t::Owner) -> Result<(), t::Error> {
        self.step(|c, s, k| c.host_starting(owner_in(host), s, k))
    }

    fn host_started(&self, host: t::Owner) -> Result<(), t::Error> {
        self.step(|c, s, k| c.host_started(owner_in(host), s, k))
    }

    fn cleanup_complete(&self) -> Result<(), t::Error> {
        self.step(|c, s, k| c.cleanup_complete(s, k))
    }

    fn cleanup_unsafe(&self) -> Result<(), t::Error> {
        self.step(|c, s, k| c.cleanup_unsafe(s, k))
    }
}
