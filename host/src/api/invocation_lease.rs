//! The typed API over the component's `invocation-leases` export (spec §6B): acquire, list,
//! owner status, the containment controller, release and repair of plugin invocation leases.

use proclease_core::dispositions::Probe;
use proclease_core::invocation_leases::{Entry, EntryDecision, RepairDecision, RepairReport};
use proclease_core::liveness::OwnerStatus;
use proclease_core::records::invocation_lease::InvocationLease;
use proclease_core::records::portable_identity::PortableIdentity;
use proclease_core::records::{Owner, Parsed};
use wasmtime::component::ResourceAny;

use crate::bindings::exports::proclease::lease::invocation_leases as wit;
use crate::effects::Effects;
use crate::runtime::export_call;
use crate::runtime::{Instance, Runtime};
use crate::{Error, convert};

/// A lease snapshot: the lease, its canonical text and sha256.
pub type Snapshot = Parsed<InvocationLease>;

fn snapshot_out(s: &Snapshot) -> wit::Snapshot {
    wit::Snapshot { lease: convert::invocation_lease_to_wit(s.record.clone()), content_sha256: s.sha256.clone() }
}

/// A snapshot from the component, its canonical text derived from the record.
fn snapshot_in(s: wit::Snapshot) -> Snapshot {
    listed_snapshot_in(s, &std::collections::HashMap::new())
}

/// A listed snapshot whose canonical text is the file text the store served for it, when that
/// text hashes to the snapshot's sha256 (a valid lease file is exactly its canonical text, so
/// nothing is re-serialised); otherwise derived from the record.
fn listed_snapshot_in(s: wit::Snapshot, served: &std::collections::HashMap<String, String>) -> Snapshot {
    let lease = convert::invocation_lease_from_wit(s.lease);
    let canonical = served
        .get(&proclease_core::invocation_leases::lease_path(&lease.lease_id))
        .filter(|text| proclease_core::digest::sha256_hex(text.as_bytes()) == s.content_sha256)
        .cloned()
        .unwrap_or_else(|| proclease_core::canonical_json::to_canonical_file(&lease.to_value()).unwrap_or_default());
    Parsed { record: lease, canonical, sha256: s.content_sha256 }
}

fn entry_out(e: &Entry) -> wit::Entry {
    match e {
        Entry::Valid(s) => wit::Entry::Valid(snapshot_out(s)),
        Entry::Invalid(id) => wit::Entry::Invalid(id.clone()),
    }
}

fn instance(runtime: &Runtime, effects: Effects) -> Result<Instance, Error> {
    runtime.instantiate_with(effects)
}

macro_rules! call {
    ($instance:expr, $method:ident $(, $arg:expr)*) => {
        export_call!($instance, [proclease_lease_invocation_leases] $method($($arg),*))?.map_err(convert::error_from_wit)
    };
}

/// Acquires a lease for `identity` and `run_id` (§6B.5).
pub fn acquire_invocation_lease(runtime: &Runtime, effects: Effects, identity: &PortableIdentity, run_id: &str) -> Result<Snapshot, Error> {
    let mut i = instance(runtime, effects)?;
    let identity = convert::portable_identity_to_wit(identity.clone());
    Ok(snapshot_in(call!(i, call_acquire, &identity, run_id)?))
}

/// Lists the lease collection (§6B.3).
pub fn list_invocation_leases(runtime: &Runtime, effects: Effects) -> Result<Vec<Entry>, Error> {
    let mut i = instance(runtime, effects)?;
    i.store().data_mut().served_texts = Some(std::collections::HashMap::new());
    let listed = call!(i, call_list);
    let served = i.store().data_mut().served_texts.take().unwrap_or_default();
    Ok(listed?
        .into_iter()
        .map(|e| match e {
            wit::Entry::Valid(s) => Entry::Valid(listed_snapshot_in(s, &served)),
            wit::Entry::Invalid(id) => Entry::Invalid(id),
        })
        .collect())
}

/// The reported owner status of a snapshot (§6B.4).
pub fn invocation_lease_status(runtime: &Runtime, effects: Effects, current: &Snapshot) -> Result<OwnerStatus, Error> {
    let mut i = instance(runtime, effects)?;
    Ok(convert::status_from_wit(call!(i, call_lease_status, &snapshot_out(current))?))
}

/// Releases a lease after durable cleanup completion (§6B.8).
pub fn release_invocation_lease(runtime: &Runtime, effects: Effects, current: &Snapshot) -> Result<(), Error> {
    let mut i = instance(runtime, effects)?;
    call!(i, call_release, &snapshot_out(current))?;
    Ok(())
}

/// Repairs the collection (§6B.9): the counters and each entry's decision by lease id.
pub fn repair_invocation_leases(runtime: &Runtime, effects: Effects, recover_tombstones: bool) -> Result<(RepairReport, Vec<(String, RepairDecision)>), Error> {
    let mut i = instance(runtime, effects)?;
    Ok(repair_outcome(call!(i, call_repair, recover_tombstones)?))
}

/// The dry run of [`repair_invocation_leases`]: the same decisions, nothing removed, no catalog
/// lock taken; `Remove` means a repair would remove the lease.
///
/// Errors: a store or `/proc` failure.
pub fn preview_invocation_repair(runtime: &Runtime, effects: Effects, recover_tombstones: bool) -> Result<(RepairReport, Vec<(String, RepairDecision)>), Error> {
    let mut i = instance(runtime, effects)?;
    Ok(repair_outcome(call!(i, call_preview_repair, recover_tombstones)?))
}

fn repair_outcome(outcome: wit::RepairOutcome) -> (RepairReport, Vec<(String, RepairDecision)>) {
    let r = outcome.report;
    let report = RepairReport { inspected: r.inspected, removed: r.removed, active: r.active, unknown: r.unknown, invalid: r.invalid };
    let decisions = outcome
        .decisions
        .into_iter()
        .map(|(id, d)| {
            let d = match d {
                wit::RepairDecision::Active => RepairDecision::Active,
                wit::RepairDecision::Unknown => RepairDecision::Unknown,
                wit::RepairDecision::Remove => RepairDecision::Remove,
                wit::RepairDecision::RemovalRefused => RepairDecision::RemovalRefused,
                wit::RepairDecision::Invalid => RepairDecision::Invalid,
            };
            (id, d)
        })
        .collect();
    (report, decisions)
}

impl Instance {
    /// The acquire admission's decision for one entry (§6B.5 step c), with the probe answers as
    /// facts: `(decision, probes consulted, the error a blocked decision raises)`.
    pub fn invocation_admission_entry(
        &mut self,
        plugin_id: &str,
        entry: &Entry,
        parent: OwnerStatus,
        host: OwnerStatus,
    ) -> Result<(EntryDecision, Vec<Probe>, Option<proclease_core::Error>), Error> {
        let verdict = call!(*self, call_admission_entry, plugin_id, &entry_out(entry), convert::status_to_wit(parent), convert::status_to_wit(host))?;
        let decision = match verdict.decision {
            wit::EntryDecision::Skip => EntryDecision::Skip,
            wit::EntryDecision::Allowed => EntryDecision::Allowed,
            wit::EntryDecision::BlockedMalformed => EntryDecision::BlockedMalformed,
            wit::EntryDecision::BlockedCleanupUnsafe => EntryDecision::BlockedCleanupUnsafe,
            wit::EntryDecision::BlockedUnverifiable => EntryDecision::BlockedUnverifiable,
        };
        Ok((decision, crate::dispositions::probes(verdict.consulted), verdict.error.map(convert::error_from_wit)))
    }
}

/// A containment controller (§6B.7) in its own component instance.
pub struct ContainmentController {
    instance: Instance,
    resource: ResourceAny,
}

macro_rules! method {
    ($self:ident, $method:ident $(, $arg:expr)*) => {
        export_call!($self.instance, [proclease_lease_invocation_leases, containment_controller] $method($self.resource $(, $arg)*))
    };
}

impl ContainmentController {
    /// A controller on `initial`. Errors: `portable invocation lease snapshot is not content-bound`.
    pub fn create(runtime: &Runtime, effects: Effects, initial: &Snapshot) -> Result<ContainmentController, Error> {
        let mut instance = runtime.instantiate_with(effects)?;
        let resource = instance.call(|exports, store| exports.proclease_lease_invocation_leases().containment_controller().call_create(store, &snapshot_out(initial)))?;
        Ok(ContainmentController { instance, resource })
    }

    /// The snapshot this controller last wrote.
    pub fn current(&mut self) -> Result<Snapshot, Error> {
        Ok(snapshot_in(method!(self, call_current)?))
    }

    /// parent-owned → host-starting.
    pub fn host_starting(&mut self, host: &Owner) -> Result<(), Error> {
        let host = convert::owner_to_wit(host.clone());
        method!(self, call_host_starting, &host)?.map_err(|e| convert::error_from_wit(e).into())
    }

    /// host-starting → host-active (same host).
    pub fn host_started(&mut self, host: &Owner) -> Result<(), Error> {
        let host = convert::owner_to_wit(host.clone());
        method!(self, call_host_started, &host)?.map_err(|e| convert::error_from_wit(e).into())
    }

    /// → cleanup-complete.
    pub fn cleanup_complete(&mut self) -> Result<(), Error> {
        method!(self, call_cleanup_complete)?.map_err(|e| convert::error_from_wit(e).into())
    }

    /// → cleanup-unsafe.
    pub fn cleanup_unsafe(&mut self) -> Result<(), Error> {
        method!(self, call_cleanup_unsafe)?.map_err(|e| convert::error_from_wit(e).into())
    }
}

impl Drop for ContainmentController {
    fn drop(&mut self) {
        self.instance.drop_resource(self.resource);
    }
}
