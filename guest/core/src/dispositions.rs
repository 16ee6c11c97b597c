//! The pure decision tables (spec §6A.5, §6A.6, §6B.4): given a record and the answers of the
//! liveness probe, what may be done. Answers that carry only a status
//! ([`Liveness::reference`], as the vectors and the WIT `dispositions` export give them) yield the
//! reference's tables exactly; witness proofs extend them only towards safety or towards a
//! proof the reference could not make (`docs/deviations.md`). The probe is a closure so that it is consulted exactly
//! where the reference consults it, in the same order; callers that already hold the answers
//! pass a closure that returns them (and records the calls).

use crate::error::LeaseCode;

use crate::Error;
use crate::liveness::{Liveness, OwnerStatus, Spawned};
use crate::records::directory_lease::{DirectoryLease, Phase as RawPhase};
use crate::records::export_admission::{ExportAdmission, Phase, Schema};
use crate::records::invocation_lease::{ContainmentStatus, InvocationLease};
use crate::records::{Owner, Parsed};

/// What may be done with observed state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Disposition {
    /// A live owner holds it.
    Active,
    /// Liveness cannot be proven either way.
    Indeterminate,
    /// The owner is provably gone.
    Recoverable,
}

impl Disposition {
    /// `active`, `indeterminate` or `recoverable`.
    pub fn name(self) -> &'static str {
        match self {
            Disposition::Active => "active",
            Disposition::Indeterminate => "indeterminate",
            Disposition::Recoverable => "recoverable",
        }
    }
}

/// Which recorded process a probe asks about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Probe {
    /// The record's owner.
    Owner,
    /// An export admission's helper.
    Helper,
    /// A raw directory lease's child.
    Child,
    /// An invocation lease's containment host.
    Host,
}

impl Probe {
    /// `owner`, `helper`, `child` or `host` (the vectors' names).
    pub fn name(self) -> &'static str {
        match self {
            Probe::Owner => "owner",
            Probe::Helper => "helper",
            Probe::Child => "child",
            Probe::Host => "host",
        }
    }
}

/// The liveness probe: what is proven of the process `owner` recorded in role `probe`.
pub type Inspect<'a, E> = &'a mut dyn FnMut(Probe, &Owner) -> Result<Liveness, E>;

/// §6A.5 rows 1–12: the disposition of an observed export admission, with `boot_id` the current
/// boot. The owner is inspected first; the helper only where rows 11–12 need it.
///
/// Beyond the reference (`docs/deviations.md`), for owners that took witnesses: a process the
/// owner started that still holds its witness keeps the admission `active`; and where the
/// reference must give up (row 10, a helper launched but never recorded; row 12, a dead helper
/// whose descendants might run) a free witness proves every such process gone, so the claim is
/// `recoverable`. Without witnesses the table is the reference's.
pub fn admission<E>(claim: &ExportAdmission, boot_id: &str, inspect: Inspect<'_, E>) -> Result<Disposition, E> {
    use Disposition::*;
    let owner = inspect(Probe::Owner, &claim.owner)?;
    match owner.status {
        OwnerStatus::ExactLiveOwner => return Ok(Active),
        OwnerStatus::Unknown => return Ok(Indeterminate),
        OwnerStatus::DifferentOrDead => {}
    }
    if owner.spawned == Spawned::SomeAlive {
        return Ok(Active);
    }
    let same_boot = claim.owner.boot_id == boot_id;
    if claim.schema == Schema::V1 {
        return Ok(if same_boot { Indeterminate } else { Recoverable });
    }
    if claim.helper_owner.as_ref().is_some_and(|h| h.boot_id != claim.owner.boot_id) {
        return Ok(Indeterminate);
    }
    match claim.phase {
        Some(Phase::CleanupUnsafe) => return Ok(if same_boot { Indeterminate } else { Recoverable }),
        Some(Phase::ParentOwned) => return Ok(Recoverable),
        _ => {}
    }
    if !same_boot {
        return Ok(Recoverable);
    }
    let Some(helper) = &claim.helper_owner else {
        return Ok(if owner.spawned == Spawned::AllGone { Recoverable } else { Indeterminate });
    };
    let helper = inspect(Probe::Helper, helper)?;
    Ok(match helper.status {
        OwnerStatus::ExactLiveOwner => Active,
        OwnerStatus::DifferentOrDead if helper.lineage_gone() => Recoverable,
        _ => Indeterminate,
    })
}

/// §6A.6: the disposition of a raw-working lease whose owner is known dead, at `now_ms`;
/// `spawned` is what probing that owner proved of the processes it started.
///
/// Beyond the reference (`docs/deviations.md`): a process the owner started that still holds
/// its witness keeps the lease `active` in every phase (a settled lease's directory may still be
/// the working directory of something its child left running); and a `launching` lease whose
/// owner's spawned processes are all proven gone is `recoverable` before its launch window ends.
pub fn raw_lease<E>(claim: &DirectoryLease, spawned: Spawned, now_ms: u64, inspect: Inspect<'_, E>) -> Result<Disposition, E> {
    if spawned == Spawned::SomeAlive {
        return Ok(Disposition::Active);
    }
    Ok(match (claim.phase, &claim.child_owner) {
        (RawPhase::Preparing | RawPhase::Settled, _) => Disposition::Recoverable,
        (RawPhase::Running, Some(child)) => match inspect(Probe::Child, child)?.status {
            OwnerStatus::ExactLiveOwner => Disposition::Active,
            OwnerStatus::Unknown => Disposition::Indeterminate,
            OwnerStatus::DifferentOrDead => Disposition::Recoverable,
        },
        _ if spawned == Spawned::AllGone => Disposition::Recoverable,
        _ if now_ms >= claim.recover_after_ms => Disposition::Recoverable,
        _ => Disposition::Indeterminate,
    })
}

/// What probing an invocation lease's recorded processes proved (§6B.4): the owner, and the
/// host when the lease records one past parent-owned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvocationProbes {
    /// The lease's owner.
    pub parent: Liveness,
    /// Its containment host, when consulted.
    pub host: Option<Liveness>,
}

impl InvocationProbes {
    /// §6B.4 `combinedOwnerStatus` over these answers. A process the owner started that still
    /// holds its witness counts as the owner alive.
    pub fn combined(&self) -> OwnerStatus {
        let parent = if self.parent.spawned == Spawned::SomeAlive { OwnerStatus::ExactLiveOwner } else { self.parent.status };
        let Some(host) = self.host else { return parent };
        let host = host.status;
        if parent == OwnerStatus::ExactLiveOwner || host == OwnerStatus::ExactLiveOwner {
            OwnerStatus::ExactLiveOwner
        } else if parent == OwnerStatus::Unknown || host == OwnerStatus::Unknown {
            OwnerStatus::Unknown
        } else {
            OwnerStatus::DifferentOrDead
        }
    }

    /// Whether every recorded process and everything they started are proven gone by free
    /// witnesses or a reboot (the proof a reboot gives the reference's tombstone recovery).
    pub fn lineage_gone(&self) -> bool {
        self.parent.lineage_gone() && self.parent.spawned != Spawned::SomeAlive && self.host.is_none_or(|h| h.lineage_gone())
    }
}

/// §6B.4: probes the owner first, then the host (when recorded and the lease is past
/// parent-owned), always both.
pub fn invocation_probes<E>(lease: &InvocationLease, inspect: Inspect<'_, E>) -> Result<InvocationProbes, E> {
    let parent = inspect(Probe::Owner, &lease.owner.process)?;
    let host = match &lease.containment {
        Some(c) if c.status != ContainmentStatus::ParentOwned => c.host.as_ref(),
        _ => None,
    };
    let host = match host {
        Some(host) => Some(inspect(Probe::Host, host)?),
        None => None,
    };
    Ok(InvocationProbes { parent, host })
}

/// §6B.4 `combinedOwnerStatus`: the owner is always inspected first; the host (when recorded
/// and the lease is past parent-owned) always next.
pub fn invocation_combined<E>(lease: &InvocationLease, inspect: Inspect<'_, E>) -> Result<OwnerStatus, E> {
    Ok(invocation_probes(lease, inspect)?.combined())
}

/// Whether a lease is a *tombstone* (§6B.9): schema 1, or a containment status other than
/// cleanup-complete.
pub fn is_tombstone(lease: &InvocationLease) -> bool {
    lease.containment.as_ref().is_none_or(|c| c.status != ContainmentStatus::CleanupComplete)
}

/// The owner status §6B.4 reports for a combined status: a tombstone is live or `unknown`,
/// never provably dead; cleanup-complete reports the combination as is.
pub fn invocation_reported(lease: &InvocationLease, combined: OwnerStatus) -> OwnerStatus {
    if is_tombstone(lease) && combined != OwnerStatus::ExactLiveOwner { OwnerStatus::Unknown } else { combined }
}

/// The reference's message when a snapshot's hash is not its lease's (§6B.4).
pub const NOT_CONTENT_BOUND: &str = "portable invocation lease snapshot is not content-bound";

/// Re-snapshots `lease` and checks it is bound to `content_sha256` (§6B.4, §6B.6–6B.8).
pub fn content_bound(lease: &InvocationLease, content_sha256: &str) -> Result<Parsed<InvocationLease>, Error> {
    let parsed = lease.clone().parsed();
    if parsed.sha256 == content_sha256 { Ok(parsed) } else { Err(Error::lease(LeaseCode::PortableInvocationLeaseSnapshotIsNotContentBound)) }
}

/// §6B.4 `portableProviderPluginInvocationLeaseOwnerStatus`: `(combined, reported)`.
///
/// Errors: [`NOT_CONTENT_BOUND`] (before any probe), or the probe's.
pub fn invocation_owner_status<E: From<Error>>(lease: &InvocationLease, content_sha256: &str, inspect: Inspect<'_, E>) -> Result<(OwnerStatus, OwnerStatus), E> {
    content_bound(lease, content_sha256)?;
    let combined = invocation_combined(lease, inspect)?;
    Ok((combined, invocation_reported(lease, combined)))
}
