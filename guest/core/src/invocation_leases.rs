//! Plugin invocation leases (spec §6B): acquire with the admission rules, the containment
//! controller, release after durable cleanup, listing, repair and tombstone recovery.
//! Messages carry no prefix.

use crate::error::LeaseCode;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use crate::dispositions::{self, content_bound, is_tombstone};
use crate::effects::{BatchStatus, Catalog, Clock, Entropy, EntryKind, Processes, Store, uuid_v4};
use crate::liveness::{self, OwnerStatus};
use crate::records::invocation_lease::{self, Containment, ContainmentStatus, InvocationLease, LeaseOwner, Listed, candidate_lease_id, iso_timestamp};
use crate::records::portable_identity::{self, PortableIdentity};
use crate::records::{Owner, Parsed};
use crate::{Error, js};

/// The lease collection (§6B.1).
pub const DIRECTORY: &str = "provider-plugin-state/.invocations";
/// The largest lease file (§6B.1).
pub const MAX_LEASE_BYTES: u32 = 32_768;
/// Names per batch read (§3.3 `readPrivateStateFilesBatched` with 32 KiB files).
const BATCH: usize = 1000;

/// The store path of a lease.
pub fn lease_path(lease_id: &str) -> String {
    format!("{DIRECTORY}/{lease_id}.json")
}

/// One entry of a listing (§6B.3).
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(clippy::large_enum_variant)] // almost every entry is valid: boxing it would cost each one an allocation
pub enum Entry {
    /// A valid lease snapshot.
    Valid(Parsed<InvocationLease>),
    /// `{leaseId, invalid: true}`.
    Invalid(String),
}

/// `listPortableProviderPluginInvocationLeases` (§6B.3): candidates `<uuid>.json` in name order;
/// anything that is not a valid canonical lease of that id lists as invalid.
///
/// Errors: the store's.
pub fn list(store: &mut dyn Store) -> Result<Vec<Entry>, Error> {
    let Some(snapshot) = store.snapshot(DIRECTORY, false)? else { return Ok(Vec::new()) };
    let mut candidates: Vec<(String, bool)> =
        snapshot.entries.iter().filter(|e| candidate_lease_id(&e.name).is_some()).map(|e| (e.name.clone(), e.kind == EntryKind::File)).collect();
    candidates.sort_by(|a, b| js::cmp_utf16(&a.0, &b.0));
    let files: Vec<String> = candidates.iter().filter(|(_, file)| *file).map(|(n, _)| n.clone()).collect();
    let mut texts = alloc::collections::BTreeMap::new();
    for chunk in files.chunks(BATCH) {
        let total = MAX_LEASE_BYTES.saturating_mul(chunk.len() as u32);
        for (name, status) in store.read_batch(DIRECTORY, chunk, MAX_LEASE_BYTES, total, &snapshot.identity)? {
            if let BatchStatus::Present(text) = status {
                texts.insert(name, text);
            }
        }
    }
    Ok(candidates
        .into_iter()
        .map(|(name, _)| {
            let lease_id = candidate_lease_id(&name).unwrap_or_default().into();
            match texts.get(&name).map(|text| invocation_lease::classify_entry(&name, text)) {
                Some(Listed::Valid(parsed)) => Entry::Valid(parsed),
                _ => Entry::Invalid(lease_id),
            }
        })
        .collect())
}

/// What the acquire admission decides for one listed entry (§6B.5 step c).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryDecision {
    /// Another plugin's lease, or a completed one.
    Skip,
    /// A live lease of the same plugin: invocations are not serialised.
    Allowed,
    /// An invalid entry blocks every plugin.
    BlockedMalformed,
    /// A cleanup-unsafe lease of the plugin.
    BlockedCleanupUnsafe,
    /// A non-complete lease of the plugin whose owner is not provably live.
    BlockedUnverifiable,
}

impl EntryDecision {
    /// The vectors' name: `skip`, `allowed`, `blocked-malformed`, …
    pub fn name(&self) -> &'static str {
        match self {
            EntryDecision::Skip => "skip",
            EntryDecision::Allowed => "allowed",
            EntryDecision::BlockedMalformed => "blocked-malformed",
            EntryDecision::BlockedCleanupUnsafe => "blocked-cleanup-unsafe",
            EntryDecision::BlockedUnverifiable => "blocked-unverifiable",
        }
    }
}

/// §6B.5 step c for one entry, with the error a blocked decision raises.
pub fn admission_entry<E: From<Error>>(plugin_id: &str, entry: &Entry, inspect: dispositions::Inspect<'_, E>) -> Result<(EntryDecision, Option<Error>), E> {
    let snapshot = match entry {
        Entry::Invalid(lease_id) => {
            let message = format!("portable provider plugin invocation is blocked by malformed lease {lease_id}; run ghostget plugin doctor before retrying");
            return Ok((EntryDecision::BlockedMalformed, Some(Error::lease_with(LeaseCode::InvocationBlockedByMalformedLease, &message))));
        }
        Entry::Valid(snapshot) => snapshot,
    };
    let lease = &snapshot.record;
    if lease.identity.plugin_id != plugin_id {
        return Ok((EntryDecision::Skip, None));
    }
    match lease.containment.as_ref().map(|c| c.status) {
        Some(ContainmentStatus::CleanupComplete) => return Ok((EntryDecision::Skip, None)),
        Some(ContainmentStatus::CleanupUnsafe) => {
            let message =
                format!("portable provider plugin {plugin_id} invocation is blocked by cleanup-unsafe lease {}; run ghostget plugin doctor before retrying", lease.lease_id);
            return Ok((EntryDecision::BlockedCleanupUnsafe, Some(Error::lease_with(LeaseCode::InvocationBlockedByCleanupUnsafeLease, &message))));
        }
        _ => {}
    }
    let (_, reported) = dispositions::invocation_owner_status(lease, &snapshot.sha256, inspect)?;
    if reported == OwnerStatus::ExactLiveOwner {
        return Ok((EntryDecision::Allowed, None));
    }
    let message =
        format!("portable provider plugin {plugin_id} invocation is blocked by unverifiable non-complete lease {}; run ghostget plugin doctor before retrying", lease.lease_id);
    Ok((EntryDecision::BlockedUnverifiable, Some(Error::lease_with(LeaseCode::InvocationBlockedByUnverifiableLease, &message))))
}

/// The effects invocation leases use.
pub struct Effects<'a> {
    /// The state store.
    pub store: &'a mut dyn Store,
    /// Process identity.
    pub processes: &'a mut dyn Processes,
    /// The plugin catalog and its lock.
    pub catalog: &'a mut dyn Catalog,
    /// Wall-clock time.
    pub clock: &'a mut dyn Clock,
    /// Randomness.
    pub entropy: &'a mut dyn Entropy,
}

/// Runs `operation` holding the catalog mutation lock (§5), releasing it on every path.
fn locked<T>(catalog: &mut dyn Catalog, operation: impl FnOnce(&mut dyn Catalog) -> Result<T, Error>) -> Result<T, Error> {
    catalog.lock().map_err(|message| {
        // The lock's refusal is the reference's (§5: fail fast); anything else is the catalog's.
        match LeaseCode::PortablePluginCatalogMutationIsAlreadyLocked.text() {
            Some(locked) if message == locked => Error::lease(LeaseCode::PortablePluginCatalogMutationIsAlreadyLocked),
            _ => Error::unavailable(message),
        }
    })?;
    let result = operation(catalog);
    catalog.unlock();
    result
}

/// `acquirePortableProviderPluginInvocationLease(identity, runId)` (§6B.5).
///
/// Errors: §4 identity messages and `portable invocation run ID is malformed` (before locking);
/// the lock's (`portable plugin catalog mutation is already locked`); `portable provider plugin
/// <id> changed or was disabled before execution; retry from current capabilities`; the three
/// blocking messages; `portable invocation lease ID collided`; the store's and probe's.
pub fn acquire(identity: &PortableIdentity, run_id: &str, fx: Effects<'_>) -> Result<Parsed<InvocationLease>, Error> {
    let identity = portable_identity::parse_value(&identity.to_value())?;
    if !js::is_uuid_v4(run_id) {
        return Err(Error::lease(LeaseCode::PortableInvocationRunIdIsMalformed));
    }
    let Effects { store, processes, catalog, clock, entropy } = fx;
    locked(catalog, |catalog| {
        let installed = catalog.installed(&identity.plugin_id).map_err(Error::unavailable)?;
        let exact = installed.is_some_and(|p| {
            p.plugin_id == identity.plugin_id
                && p.version == identity.plugin_version
                && p.host_api_version == identity.host_api_version
                && p.bundle_sha256 == identity.bundle_sha256
                && p.manifest_sha256 == identity.manifest_sha256
        });
        if !exact {
            let message = format!("portable provider plugin {} changed or was disabled before execution; retry from current capabilities", identity.plugin_id);
            return Err(Error::lease_with(LeaseCode::PluginChangedOrDisabled, &message));
        }
        store.ensure_private_directory(DIRECTORY)?;
        admit(&identity.plugin_id, store, processes)?;
        let own = processes.self_identity().map_err(Error::unavailable)?;
        let acquired_at = i64::try_from(clock.now_ms()).ok().and_then(iso_timestamp).ok_or_else(|| Error::unavailable("the clock is outside the years 0-9999"))?;
        let lease = InvocationLease {
            schema_version: 2,
            lease_id: uuid_v4(entropy),
            run_id: run_id.into(),
            identity: identity.clone(),
            owner: LeaseOwner { process: own, token: uuid_v4(entropy) },
            acquired_at,
            containment: Some(Containment { status: ContainmentStatus::ParentOwned, host: None }),
        }
        .parsed();
        if !store.create_if_absent(&lease_path(&lease.record.lease_id), &lease.canonical)? {
            return Err(Error::lease(LeaseCode::PortableInvocationLeaseIdCollided));
        }
        Ok(lease)
    })
}

/// How many times [`admit`] lists the collection again when a lease that blocked changed.
const ADMISSION_ROUNDS: usize = 8;

/// §6B.5 step c over the listing. A lease that blocks because its owner is not provably live is
/// read again after the probe: if it changed or vanished meanwhile (its owner completed and
/// released it, then exited), the verdict was about a stale lease and the listing is taken
/// again, at most [`ADMISSION_ROUNDS`] times (not in the reference: docs/deviations.md).
fn admit(plugin_id: &str, store: &mut dyn Store, processes: &mut dyn Processes) -> Result<(), Error> {
    let mut round = 0;
    'listing: loop {
        round += 1;
        for entry in list(store)? {
            let (decision, blocked) = admission_entry(plugin_id, &entry, &mut |_, owner| liveness::probe(processes, owner).map_err(Error::unavailable))?;
            let Some(error) = blocked else { continue };
            if let (EntryDecision::BlockedUnverifiable, Entry::Valid(snapshot)) = (&decision, &entry) {
                let now = store.read_if_present(&lease_path(&snapshot.record.lease_id), MAX_LEASE_BYTES)?;
                let changed = now.is_none_or(|text| crate::digest::sha256_hex(text.as_bytes()) != snapshot.sha256);
                if changed && round < ADMISSION_ROUNDS {
                    continue 'listing;
                }
            }
            return Err(error);
        }
        return Ok(());
    }
}

/// The internal `replace(current, containment)` (§6B.6): a compare-and-swap of the lease with a
/// new containment, under the catalog lock.
fn replace(current: &Parsed<InvocationLease>, containment: Containment, store: &mut dyn Store, catalog: &mut dyn Catalog) -> Result<Parsed<InvocationLease>, Error> {
    let current = content_bound(&current.record, &current.sha256)?;
    if current.record.schema_version == 1 {
        return Err(Error::lease(LeaseCode::LegacyPortableInvocationLeasesCannotBindContainment));
    }
    let next = InvocationLease { containment: Some(containment), ..current.record.clone() };
    let next = invocation_lease::parse_value(&next.to_value())?.parsed();
    locked(catalog, |_| {
        if !store.replace_if_unchanged(&lease_path(&next.record.lease_id), &current.sha256, &next.canonical)? {
            return Err(Error::lease(LeaseCode::PortableInvocationLeaseChangedOrDisappearedBeforeContainmentUpdate));
        }
        Ok(())
    })?;
    Ok(next)
}

/// The containment controller (§6B.7): records the plugin host and the cleanup outcome. It
/// never re-reads disk; a failed compare-and-swap leaves `current` unchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Controller {
    /// The snapshot this controller last wrote (or was built from).
    pub current: Parsed<InvocationLease>,
}

impl Controller {
    /// Builds a controller on `initial`. Errors: `portable invocation lease snapshot is not
    /// content-bound`.
    pub fn new(initial: &Parsed<InvocationLease>) -> Result<Controller, Error> {
        Ok(Controller { current: content_bound(&initial.record, &initial.sha256)? })
    }

    fn status(&self) -> Option<ContainmentStatus> {
        self.current.record.containment.as_ref().map(|c| c.status)
    }

    fn recorded_host(&self) -> Option<Owner> {
        self.current.record.containment.as_ref().and_then(|c| c.host.clone())
    }

    /// parent-owned → host-starting with `host`. Errors: `legacy portable invocation leases
    /// cannot start a host`; `portable invocation lease host started out of order`.
    pub fn host_starting(&mut self, host: Owner, store: &mut dyn Store, catalog: &mut dyn Catalog) -> Result<(), Error> {
        match self.status() {
            None => return Err(Error::lease(LeaseCode::LegacyPortableInvocationLeasesCannotStartAHost)),
            Some(ContainmentStatus::ParentOwned) => {}
            Some(_) => return Err(Error::lease(LeaseCode::PortableInvocationLeaseHostStartedOutOfOrder)),
        }
        self.current = replace(&self.current, Containment { status: ContainmentStatus::HostStarting, host: Some(host) }, store, catalog)?;
        Ok(())
    }

    /// host-starting → host-active for the same host. Errors: `portable invocation lease host
    /// admission changed`.
    pub fn host_started(&mut self, host: Owner, store: &mut dyn Store, catalog: &mut dyn Catalog) -> Result<(), Error> {
        if self.status() != Some(ContainmentStatus::HostStarting) || self.recorded_host().as_ref() != Some(&host) {
            return Err(Error::lease(LeaseCode::PortableInvocationLeaseHostAdmissionChanged));
        }
        self.current = replace(&self.current, Containment { status: ContainmentStatus::HostActive, host: Some(host) }, store, catalog)?;
        Ok(())
    }

    /// → cleanup-complete (idempotent). Errors: `legacy portable invocation lease cleanup is
    /// unverifiable`; `portable invocation lease cleanup cannot complete after becoming unsafe`.
    pub fn cleanup_complete(&mut self, store: &mut dyn Store, catalog: &mut dyn Catalog) -> Result<(), Error> {
        match self.status() {
            None => Err(Error::lease(LeaseCode::LegacyPortableInvocationLeaseCleanupIsUnverifiable)),
            Some(ContainmentStatus::CleanupComplete) => Ok(()),
            Some(ContainmentStatus::CleanupUnsafe) => Err(Error::lease(LeaseCode::PortableInvocationLeaseCleanupCannotCompleteAfterBecomingUnsafe)),
            Some(_) => {
                let host = self.recorded_host();
                self.current = replace(&self.current, Containment { status: ContainmentStatus::CleanupComplete, host }, store, catalog)?;
                Ok(())
            }
        }
    }

    /// → cleanup-unsafe (idempotent). Errors: `legacy portable invocation lease cleanup is
    /// unverifiable`; `portable invocation lease cleanup became unsafe after completion`.
    pub fn cleanup_unsafe(&mut self, store: &mut dyn Store, catalog: &mut dyn Catalog) -> Result<(), Error> {
        match self.status() {
            None => Err(Error::lease(LeaseCode::LegacyPortableInvocationLeaseCleanupIsUnverifiable)),
            Some(ContainmentStatus::CleanupUnsafe) => Ok(()),
            Some(ContainmentStatus::CleanupComplete) => Err(Error::lease(LeaseCode::PortableInvocationLeaseCleanupBecameUnsafeAfterCompletion)),
            Some(_) => {
                let host = self.recorded_host();
                self.current = replace(&self.current, Containment { status: ContainmentStatus::CleanupUnsafe, host }, store, catalog)?;
                Ok(())
            }
        }
    }
}

/// `releasePortableProviderPluginInvocationLease(current)` (§6B.8).
///
/// Errors: `portable invocation lease snapshot is not content-bound`; `portable invocation lease
/// cannot be released before durable cleanup completion`; `portable invocation lease changed or
/// disappeared before release`; the lock's.
pub fn release(current: &Parsed<InvocationLease>, store: &mut dyn Store, catalog: &mut dyn Catalog) -> Result<(), Error> {
    let current = content_bound(&current.record, &current.sha256)?;
    if current.record.containment.as_ref().map(|c| c.status) != Some(ContainmentStatus::CleanupComplete) {
        return Err(Error::lease(LeaseCode::PortableInvocationLeaseCannotBeReleasedBeforeDurableCleanupCompletion));
    }
    locked(catalog, |_| {
        if !store.remove_if_unchanged(&lease_path(&current.record.lease_id), &current.sha256)? {
            return Err(Error::lease(LeaseCode::PortableInvocationLeaseChangedOrDisappearedBeforeRelease));
        }
        Ok(())
    })
}

/// A repair run's counters (§6B.9).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RepairReport {
    /// Entries looked at (including invalid ones).
    pub inspected: u32,
    /// Leases removed.
    pub removed: u32,
    /// Leases with a live owner or host.
    pub active: u32,
    /// Leases left because nothing proves them dead.
    pub unknown: u32,
    /// Invalid entries, and leases whose removal found them changed.
    pub invalid: u32,
}

/// What repair decided for one entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RepairDecision {
    /// Owner or host live.
    Active,
    /// Nothing proves it gone (or a tombstone outside recover mode).
    Unknown,
    /// Removed.
    Remove,
    /// Its removal found it changed (counted as invalid).
    RemovalRefused,
    /// An invalid entry.
    Invalid,
}

impl RepairDecision {
    /// The vectors' name.
    pub fn name(self) -> &'static str {
        match self {
            RepairDecision::Active => "active",
            RepairDecision::Unknown => "unknown",
            RepairDecision::Remove => "remove",
            RepairDecision::RemovalRefused => "removal-refused",
            RepairDecision::Invalid => "invalid",
        }
    }
}

/// The disposition a survey (`doctor`) shows for an invocation lease, from what a recovery dry
/// run decided (`decision`) and its owner's status (`status`, §6B.4): `recoverable` when recover
/// would remove it, `active` while its owner or host is alive, `indeterminate` when neither is
/// proven (a tombstone of this boot), `None` for an invalid lease (which blocks acquires until
/// repaired by hand). Without a decision (recovery stopped before the invocation leases), the
/// owner status alone decides.
pub fn survey_disposition(decision: Option<RepairDecision>, status: Option<OwnerStatus>) -> Option<dispositions::Disposition> {
    use dispositions::Disposition;
    match (decision, status) {
        (Some(RepairDecision::Remove), _) => Some(Disposition::Recoverable),
        (Some(RepairDecision::Active), _) => Some(Disposition::Active),
        (Some(RepairDecision::Unknown | RepairDecision::RemovalRefused), _) => Some(Disposition::Indeterminate),
        (Some(RepairDecision::Invalid), _) | (None, None) => None,
        (None, Some(OwnerStatus::ExactLiveOwner)) => Some(Disposition::Active),
        (None, Some(OwnerStatus::Unknown)) => Some(Disposition::Indeterminate),
        (None, Some(OwnerStatus::DifferentOrDead)) => Some(Disposition::Recoverable),
    }
}

/// `repairPortableProviderPluginInvocationLeases` (§6B.9), with `recover_tombstones` for
/// `recoverPortableProviderPluginInvocationLeaseTombstones`. `observe` is told each entry's
/// decision. The current boot id is looked up at most once per run, and only when recover mode
/// needs it; a failed lookup counts as `unknown`.
pub fn repair(
    recover_tombstones: bool,
    store: &mut dyn Store,
    processes: &mut dyn Processes,
    catalog: &mut dyn Catalog,
    observe: &mut dyn FnMut(&Entry, RepairDecision),
) -> Result<RepairReport, Error> {
    locked(catalog, |_| repair_entries(recover_tombstones, false, store, processes, observe))
}

/// The dry run of [`repair`]: the same decisions on the same code path, removing nothing and
/// taking no catalog lock (it changes nothing, so it needs no turn). `Remove` means "a repair
/// would remove it" and is counted in `removed`; a lease that changes before a real repair
/// reaches it is decided again then. Used by `recover --dry-run` and `doctor` (not in the
/// reference, which has no dry run).
pub fn preview_repair(
    recover_tombstones: bool,
    store: &mut dyn Store,
    processes: &mut dyn Processes,
    observe: &mut dyn FnMut(&Entry, RepairDecision),
) -> Result<RepairReport, Error> {
    repair_entries(recover_tombstones, true, store, processes, observe)
}

fn repair_entries(
    recover_tombstones: bool,
    dry_run: bool,
    store: &mut dyn Store,
    processes: &mut dyn Processes,
    observe: &mut dyn FnMut(&Entry, RepairDecision),
) -> Result<RepairReport, Error> {
    let entries = list(store)?;
    let mut report = RepairReport { inspected: entries.len() as u32, ..RepairReport::default() };
    let mut boot: Option<Result<String, String>> = None;
    let mut judged = Judged::new();
    for entry in &entries {
        let decision = repair_entry(entry, recover_tombstones, dry_run, store, processes, &mut boot, &mut judged)?;
        match decision {
            RepairDecision::Active => report.active += 1,
            RepairDecision::Unknown => report.unknown += 1,
            RepairDecision::Remove => report.removed += 1,
            RepairDecision::RemovalRefused | RepairDecision::Invalid => report.invalid += 1,
        }
        observe(entry, decision);
    }
    Ok(report)
}

/// What one repair run has proved of each process it probed, for the first judgement of every
/// later lease naming the same process: a run over many leases of one owner probes it once
/// (not in the reference, which probes each lease's processes afresh; docs/deviations.md). A
/// proof cannot go stale in the direction that removes something: a process identity that is
/// gone never comes back (a new process on that pid has another start id), so reusing a
/// verdict can only make a process that died during the run look alive, or unknown, which
/// keeps its lease until the next run. The re-check before a tombstone's removal always probes
/// afresh, as in the reference.
type Judged = alloc::collections::BTreeMap<Owner, liveness::Liveness>;

fn repair_entry(
    entry: &Entry,
    recover: bool,
    dry_run: bool,
    store: &mut dyn Store,
    processes: &mut dyn Processes,
    boot: &mut Option<Result<String, String>>,
    judged: &mut Judged,
) -> Result<RepairDecision, Error> {
    let Entry::Valid(snapshot) = entry else { return Ok(RepairDecision::Invalid) };
    let lease = &snapshot.record;
    content_bound(lease, &snapshot.sha256)?;
    let probes = dispositions::invocation_probes::<Error>(lease, &mut |_, owner| {
        if let Some(liveness) = judged.get(owner) {
            return Ok(*liveness);
        }
        let liveness = liveness::probe(processes, owner).map_err(Error::unavailable)?;
        judged.insert(owner.clone(), liveness);
        Ok(liveness)
    })?;
    let mut status = dispositions::invocation_reported(lease, probes.combined());
    let tombstone = is_tombstone(lease);
    if recover && tombstone {
        let mut current_boot = |processes: &mut dyn Processes| boot.get_or_insert_with(|| processes.current_boot_id()).clone().ok();
        // Another boot id proves a process gone (the reference) unless its probe was answered by
        // a cluster's presence registry that says it is alive, or cannot say: in cluster mode
        // another boot id may be another machine, whose live process keeps its tombstone
        // (docs/cluster.md; docs/deviations.md 17). Without a cluster no probe is answered so,
        // and this is the reference's rule.
        let rebooted = |process: &Owner, boot: &str| {
            process.boot_id != boot && !judged.get(process).is_some_and(|l| matches!(l.proof, liveness::Proof::ClusterRegistered | liveness::Proof::ClusterUnreachable))
        };
        match lease.containment.as_ref() {
            Some(c) if matches!(c.status, ContainmentStatus::ParentOwned | ContainmentStatus::HostStarting) => {
                status = dispositions::invocation_combined(lease, &mut |_, owner| liveness::probe(processes, owner).map_err(Error::unavailable))?;
            }
            // host-active: a reboot past every recorded process proves it gone (the reference);
            // so do free witnesses of every recorded process and of what they started, which
            // prove the same of those processes (docs/deviations.md).
            Some(c) if c.status == ContainmentStatus::HostActive && probes.lineage_gone() => status = OwnerStatus::DifferentOrDead,
            // host-active / cleanup-unsafe: only a reboot past every recorded process proves it.
            Some(c) => {
                status = match current_boot(processes) {
                    Some(b) if rebooted(&lease.owner.process, &b) && c.host.as_ref().is_none_or(|h| rebooted(h, &b)) => OwnerStatus::DifferentOrDead,
                    _ => OwnerStatus::Unknown,
                };
            }
            None => match current_boot(processes) {
                Some(b) if rebooted(&lease.owner.process, &b) => status = OwnerStatus::DifferentOrDead,
                Some(_) => {}
                None => status = OwnerStatus::Unknown,
            },
        }
    }
    Ok(match status {
        OwnerStatus::ExactLiveOwner => RepairDecision::Active,
        OwnerStatus::Unknown => RepairDecision::Unknown,
        OwnerStatus::DifferentOrDead if tombstone && !recover => RepairDecision::Unknown,
        OwnerStatus::DifferentOrDead if dry_run => RepairDecision::Remove,
        OwnerStatus::DifferentOrDead => {
            if store.remove_if_unchanged(&lease_path(&lease.lease_id), &snapshot.sha256)? {
                RepairDecision::Remove
            } else {
                RepairDecision::RemovalRefused
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispositions::Disposition;

    #[test]
    fn a_survey_s_disposition_follows_the_recovery_s_decision_then_the_owner_s_status() {
        let cases = [
            (Some(RepairDecision::Remove), Some(OwnerStatus::ExactLiveOwner), Some(Disposition::Recoverable)),
            (Some(RepairDecision::Active), None, Some(Disposition::Active)),
            (Some(RepairDecision::Unknown), Some(OwnerStatus::DifferentOrDead), Some(Disposition::Indeterminate)),
            (Some(RepairDecision::RemovalRefused), None, Some(Disposition::Indeterminate)),
            (Some(RepairDecision::Invalid), Some(OwnerStatus::ExactLiveOwner), None),
            (None, None, None),
            (None, Some(OwnerStatus::ExactLiveOwner), Some(Disposition::Active)),
            (None, Some(OwnerStatus::Unknown), Some(Disposition::Indeterminate)),
            (None, Some(OwnerStatus::DifferentOrDead), Some(Disposition::Recoverable)),
        ];
        for (decision, status, expected) in cases {
            assert_eq!(survey_disposition(decision, status), expected, "{decision:?} {status:?}");
        }
    }
}
