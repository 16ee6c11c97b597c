//! Conversions between the generated WIT types and `proclease-core` types, both ways. Pure data
//! mapping: no rule lives here.

use alloc::string::String;

use proclease_core::records::{
    DirectoryIdentity, Owner, Parsed, directory_lease as dl, export_admission as ea,
    invocation_lease as il, portable_identity as pi,
};
use proclease_core::{Error, liveness::OwnerStatus};

use super::bindings::exports::proclease::lease::records as wit;
use super::bindings::proclease::lease::types as t;

pub(crate) fn error(e: Error) -> t::Error {
    match e {
        Error::Lease(m) => t::Error::Lease(m),
        Error::Storage(m) => t::Error::Storage(m),
        Error::System(m) => t::Error::System(m),
        _ => t::Error::System(String::from(e.message())),
    }
}

pub(crate) fn owner(o: Owner) -> t::Owner {
    t::Owner { pid: o.pid, boot_id: o.boot_id, process_start_id: o.process_start_id }
}

pub(crate) fn owner_in(o: t::Owner) -> Owner {
    Owner { pid: o.pid, boot_id: o.boot_id, process_start_id: o.process_start_id }
}

pub(crate) fn status(s: OwnerStatus) -> t::OwnerStatus {
    match s {
        OwnerStatus::ExactLiveOwner => t::OwnerStatus::ExactLiveOwner,
        OwnerStatus::DifferentOrDead => t::OwnerStatus::DifferentOrDead,
        OwnerStatus::Unknown => t::OwnerStatus::Unknown,
    }
}

pub(crate) fn status_in(s: t::OwnerStatus) -> OwnerStatus {
    match s {
        t::OwnerStatus::ExactLiveOwner => OwnerStatus::ExactLiveOwner,
        t::OwnerStatus::DifferentOrDead => OwnerStatus::DifferentOrDead,
        t::OwnerStatus::Unknown => OwnerStatus::Unknown,
    }
}

fn directory_identity(d: DirectoryIdentity) -> t::DirectoryIdentity {
    t::DirectoryIdentity { device: d.device, inode: d.inode, birthtime_ns: d.birthtime_ns }
}

fn directory_identity_in(d: t::DirectoryIdentity) -> DirectoryIdentity {
    DirectoryIdentity { device: d.device, inode: d.inode, birthtime_ns: d.birthtime_ns }
}

pub(crate) fn form<T>(p: &Parsed<T>) -> wit::CanonicalForm {
    wit::CanonicalForm { canonical: p.canonical.clone(), sha256: p.sha256.clone() }
}

pub(crate) fn admission_phase(p: ea::Phase) -> t::AdmissionPhase {
    match p {
        ea::Phase::ParentOwned => t::AdmissionPhase::ParentOwned,
        ea::Phase::HelperLaunching => t::AdmissionPhase::HelperLaunching,
        ea::Phase::HelperActive => t::AdmissionPhase::HelperActive,
        ea::Phase::CleanupUnsafe => t::AdmissionPhase::CleanupUnsafe,
    }
}

pub(crate) fn admission_phase_in(p: t::AdmissionPhase) -> ea::Phase {
    match p {
        t::AdmissionPhase::ParentOwned => ea::Phase::ParentOwned,
        t::AdmissionPhase::HelperLaunching => ea::Phase::HelperLaunching,
        t::AdmissionPhase::HelperActive => ea::Phase::HelperActive,
        t::AdmissionPhase::CleanupUnsafe => ea::Phase::CleanupUnsafe,
    }
}

pub(crate) fn admission_claim(c: ea::ExportAdmission) -> t::AdmissionClaim {
    t::AdmissionClaim {
        schema: match c.schema {
            ea::Schema::V1 => t::AdmissionSchema::V1,
            ea::Schema::V2PreRevision => t::AdmissionSchema::V2PreRevision,
            ea::Schema::V2 => t::AdmissionSchema::V2,
        },
        id: c.id,
        owner: owner(c.owner),
        helper_owner: c.helper_owner.map(owner),
        phase: c.phase.map(admission_phase),
        revision: c.revision,
    }
}

/// A claim that came in through the boundary, re-validated by the reference's parser so that no
/// malformed record can enter through a typed argument.
pub(crate) fn admission_claim_in(c: t::AdmissionClaim) -> Result<ea::ExportAdmission, Error> {
    let claim = ea::ExportAdmission {
        schema: match c.schema {
            t::AdmissionSchema::V1 => ea::Schema::V1,
            t::AdmissionSchema::V2PreRevision => ea::Schema::V2PreRevision,
            t::AdmissionSchema::V2 => ea::Schema::V2,
        },
        id: c.id,
        owner: owner_in(c.owner),
        helper_owner: c.helper_owner.map(owner_in),
        phase: c.phase.map(admission_phase_in),
        revision: c.revision,
    };
    ea::parse_value(&claim.to_value())
}

pub(crate) fn directory_lease_claim(c: dl::DirectoryLease) -> t::DirectoryLeaseClaim {
    t::DirectoryLeaseClaim {
        id: c.id,
        role: match c.role {
            dl::Role::RawWorking => t::LeaseRole::RawWorking,
            dl::Role::BundleStage => t::LeaseRole::BundleStage,
        },
        path: c.path,
        parent_path: c.parent_path,
        parent_identity: directory_identity(c.parent_identity),
        directory_identity: directory_identity(c.directory_identity),
        output_root: c.output_root,
        owner: owner(c.owner),
        child_owner: c.child_owner.map(owner),
        phase: match c.phase {
            dl::Phase::Preparing => t::RawPhase::Preparing,
            dl::Phase::Launching => t::RawPhase::Launching,
            dl::Phase::Running => t::RawPhase::Running,
            dl::Phase::Settled => t::RawPhase::Settled,
        },
        created_at_ms: c.created_at_ms,
        recover_after_ms: c.recover_after_ms,
    }
}

/// A directory lease claim from the boundary, re-validated by `parseClaim`.
pub(crate) fn directory_lease_claim_in(c: t::DirectoryLeaseClaim) -> Result<dl::DirectoryLease, Error> {
    let claim = dl::DirectoryLease {
        id: c.id,
        role: match c.role {
            t::LeaseRole::RawWorking => dl::Role::RawWorking,
            t::LeaseRole::BundleStage => dl::Role::BundleStage,
        },
        path: c.path,
        parent_path: c.parent_path,
        parent_identity: directory_identity_in(c.parent_identity),
        directory_identity: directory_identity_in(c.directory_identity),
        output_root: c.output_root,
        owner: owner_in(c.owner),
        child_owner: c.child_owner.map(owner_in),
        phase: match c.phase {
            t::RawPhase::Preparing => dl::Phase::Preparing,
            t::RawPhase::Launching => dl::Phase::Launching,
            t::RawPhase::Running => dl::Phase::Running,
            t::RawPhase::Settled => dl::Phase::Settled,
        },
        created_at_ms: c.created_at_ms,
        recover_after_ms: c.recover_after_ms,
    };
    dl::parse_value(&claim.to_value())
}

pub(crate) fn portable_identity(i: pi::PortableIdentity) -> t::PortableIdentity {
    t::PortableIdentity {
        plugin_id: i.plugin_id,
        plugin_version: i.plugin_version,
        host_api_version: i.host_api_version,
        bundle_sha256: i.bundle_sha256,
        manifest_sha256: i.manifest_sha256,
        descriptor_sha256: i.descriptor_sha256,
        adapter_id: i.adapter_id,
        transport: match i.transport {
            pi::Transport::ProviderApi => t::Transport::ProviderApi,
            pi::Transport::WebSessionApi => t::Transport::WebSessionApi,
            pi::Transport::LinkedDevice => t::Transport::LinkedDevice,
        },
        surface_id: i.surface_id,
        operation: i.operation,
        contract_version: i.contract_version,
    }
}

pub(crate) fn portable_identity_in(i: t::PortableIdentity) -> pi::PortableIdentity {
    pi::PortableIdentity {
        plugin_id: i.plugin_id,
        plugin_version: i.plugin_version,
        host_api_version: i.host_api_version,
        bundle_sha256: i.bundle_sha256,
        manifest_sha256: i.manifest_sha256,
        descriptor_sha256: i.descriptor_sha256,
        adapter_id: i.adapter_id,
        transport: match i.transport {
            t::Transport::ProviderApi => pi::Transport::ProviderApi,
            t::Transport::WebSessionApi => pi::Transport::WebSessionApi,
            t::Transport::LinkedDevice => pi::Transport::LinkedDevice,
        },
        surface_id: i.surface_id,
        operation: i.operation,
        contract_version: i.contract_version,
    }
}

fn containment_status(s: il::ContainmentStatus) -> t::ContainmentStatus {
    match s {
        il::ContainmentStatus::ParentOwned => t::ContainmentStatus::ParentOwned,
        il::ContainmentStatus::HostStarting => t::ContainmentStatus::HostStarting,
        il::ContainmentStatus::HostActive => t::ContainmentStatus::HostActive,
        il::ContainmentStatus::CleanupComplete => t::ContainmentStatus::CleanupComplete,
        il::ContainmentStatus::CleanupUnsafe => t::ContainmentStatus::CleanupUnsafe,
    }
}

fn containment_status_in(s: t::ContainmentStatus) -> il::ContainmentStatus {
    match s {
        t::ContainmentStatus::ParentOwned => il::ContainmentStatus::ParentOwned,
        t::ContainmentStatus::HostStarting => il::ContainmentStatus::HostStarting,
        t::ContainmentStatus::HostActive => il::ContainmentStatus::HostActive,
        t::ContainmentStatus::CleanupComplete => il::ContainmentStatus::CleanupComplete,
        t::ContainmentStatus::CleanupUnsafe => il::ContainmentStatus::CleanupUnsafe,
    }
}

pub(crate) fn invocation_lease(l: il::InvocationLease) -> t::InvocationLease {
    t::InvocationLease {
        schema_version: l.schema_version,
        lease_id: l.lease_id,
        run_id: l.run_id,
        identity: portable_identity(l.identity),
        owner: t::LeaseOwner { process: owner(l.owner.process), token: l.owner.token },
        acquired_at: l.acquired_at,
        containment: l.containment.map(|c| t::Containment { status: containment_status(c.status), host: c.host.map(owner) }),
    }
}

/// An invocation lease from the boundary, re-validated by the lease parser.
pub(crate) fn invocation_lease_in(l: t::InvocationLease) -> Result<il::InvocationLease, Error> {
    let lease = il::InvocationLease {
        schema_version: l.schema_version,
        lease_id: l.lease_id,
        run_id: l.run_id,
        identity: portable_identity_in(l.identity),
        owner: il::LeaseOwner { process: owner_in(l.owner.process), token: l.owner.token },
        acquired_at: l.acquired_at,
        containment: l
            .containment
            .map(|c| il::Containment { status: containment_status_in(c.status), host: c.host.map(owner_in) }),
    };
    il::parse_value(&lease.to_value())
}

pub(crate) fn invocation_parsed(p: Parsed<il::InvocationLease>) -> (t::InvocationLease, wit::CanonicalForm) {
    let f = form(&p);
    (invocation_lease(p.record), f)
}


pub(crate) fn disposition(d: proclease_core::dispositions::Disposition) -> t::Disposition {
    use proclease_core::dispositions::Disposition as D;
    match d {
        D::Active => t::Disposition::Active,
        D::Indeterminate => t::Disposition::Indeterminate,
        D::Recoverable => t::Disposition::Recoverable,
    }
}

pub(crate) fn probe(p: proclease_core::dispositions::Probe) -> t::Probe {
    use proclease_core::dispositions::Probe as P;
    match p {
        P::Owner => t::Probe::Owner,
        P::Helper => t::Probe::Helper,
        P::Child => t::Probe::Child,
        P::Host => t::Probe::Host,
    }
}

pub(crate) fn snapshot(p: Parsed<il::InvocationLease>) -> super::bindings::exports::proclease::lease::invocation_leases::Snapshot {
    super::bindings::exports::proclease::lease::invocation_leases::Snapshot { content_sha256: p.sha256, lease: invocation_lease(p.record) }
}

/// A snapshot from the boundary: the lease re-validated, with the hash it was given (the
/// content-bound check then compares it with the lease's own).
pub(crate) fn snapshot_in(s: super::bindings::exports::proclease::lease::invocation_leases::Snapshot) -> Result<Parsed<il::InvocationLease>, Error> {
    let lease = invocation_lease_in(s.lease)?;
    let canonical = proclease_core::canonical_json::to_canonical_file(&lease.to_value()).unwrap_or_default();
    Ok(Parsed { record: lease, canonical, sha256: s.content_sha256 })
}
