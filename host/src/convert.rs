//! Conversions from the generated WIT types to the `proclease-core` types the library exposes.
//! Pure data mapping: no rule lives here.

use proclease_core::records::{
    DirectoryIdentity, Owner, Parsed, directory_lease as dl, export_admission as ea, invocation_lease as il,
    portable_identity as pi,
};

use crate::bindings::exports::proclease::lease::records as wit;
use crate::bindings::proclease::lease::process_identity as pid;
use crate::bindings::proclease::lease::types as t;

pub(crate) fn error(e: t::Error) -> proclease_core::Error {
    match e {
        t::Error::Lease(m) => proclease_core::Error::Lease(m),
        t::Error::Storage(m) => proclease_core::Error::Storage(m),
        t::Error::System(m) => proclease_core::Error::System(m),
    }
}

pub(crate) fn owner(o: t::Owner) -> Owner {
    Owner { pid: o.pid, boot_id: o.boot_id, process_start_id: o.process_start_id }
}

pub(crate) fn owner_out(o: Owner) -> t::Owner {
    t::Owner { pid: o.pid, boot_id: o.boot_id, process_start_id: o.process_start_id }
}

pub(crate) fn status_out(s: proclease_core::liveness::OwnerStatus) -> t::OwnerStatus {
    use proclease_core::liveness::OwnerStatus as S;
    match s {
        S::ExactLiveOwner => t::OwnerStatus::ExactLiveOwner,
        S::DifferentOrDead => t::OwnerStatus::DifferentOrDead,
        S::Unknown => t::OwnerStatus::Unknown,
    }
}

pub(crate) fn status(s: t::OwnerStatus) -> proclease_core::liveness::OwnerStatus {
    use proclease_core::liveness::OwnerStatus as S;
    match s {
        t::OwnerStatus::ExactLiveOwner => S::ExactLiveOwner,
        t::OwnerStatus::DifferentOrDead => S::DifferentOrDead,
        t::OwnerStatus::Unknown => S::Unknown,
    }
}

pub(crate) fn admission_claim_out(c: ea::ExportAdmission) -> t::AdmissionClaim {
    t::AdmissionClaim {
        schema: match c.schema {
            ea::Schema::V1 => t::AdmissionSchema::V1,
            ea::Schema::V2PreRevision => t::AdmissionSchema::V2PreRevision,
            ea::Schema::V2 => t::AdmissionSchema::V2,
        },
        id: c.id,
        owner: owner_out(c.owner),
        helper_owner: c.helper_owner.map(owner_out),
        phase: c.phase.map(admission_phase_out),
        revision: c.revision,
    }
}

pub(crate) fn admission_phase_out(p: ea::Phase) -> t::AdmissionPhase {
    match p {
        ea::Phase::ParentOwned => t::AdmissionPhase::ParentOwned,
        ea::Phase::HelperLaunching => t::AdmissionPhase::HelperLaunching,
        ea::Phase::HelperActive => t::AdmissionPhase::HelperActive,
        ea::Phase::CleanupUnsafe => t::AdmissionPhase::CleanupUnsafe,
    }
}

pub(crate) fn directory_identity(d: t::DirectoryIdentity) -> DirectoryIdentity {
    DirectoryIdentity { device: d.device, inode: d.inode, birthtime_ns: d.birthtime_ns }
}

pub(crate) fn parsed<T>(record: T, form: wit::CanonicalForm) -> Parsed<T> {
    Parsed { record, canonical: form.canonical, sha256: form.sha256 }
}

pub(crate) fn admission_claim(c: t::AdmissionClaim) -> ea::ExportAdmission {
    ea::ExportAdmission {
        schema: match c.schema {
            t::AdmissionSchema::V1 => ea::Schema::V1,
            t::AdmissionSchema::V2PreRevision => ea::Schema::V2PreRevision,
            t::AdmissionSchema::V2 => ea::Schema::V2,
        },
        id: c.id,
        owner: owner(c.owner),
        helper_owner: c.helper_owner.map(owner),
        phase: c.phase.map(|p| match p {
            t::AdmissionPhase::ParentOwned => ea::Phase::ParentOwned,
            t::AdmissionPhase::HelperLaunching => ea::Phase::HelperLaunching,
            t::AdmissionPhase::HelperActive => ea::Phase::HelperActive,
            t::AdmissionPhase::CleanupUnsafe => ea::Phase::CleanupUnsafe,
        }),
        revision: c.revision,
    }
}

pub(crate) fn directory_lease_claim(c: t::DirectoryLeaseClaim) -> dl::DirectoryLease {
    dl::DirectoryLease {
        id: c.id,
        role: match c.role {
            t::LeaseRole::RawWorking => dl::Role::RawWorking,
            t::LeaseRole::BundleStage => dl::Role::BundleStage,
        },
        path: c.path,
        parent_path: c.parent_path,
        parent_identity: directory_identity(c.parent_identity),
        directory_identity: directory_identity(c.directory_identity),
        output_root: c.output_root,
        owner: owner(c.owner),
        child_owner: c.child_owner.map(owner),
        phase: match c.phase {
            t::RawPhase::Preparing => dl::Phase::Preparing,
            t::RawPhase::Launching => dl::Phase::Launching,
            t::RawPhase::Running => dl::Phase::Running,
            t::RawPhase::Settled => dl::Phase::Settled,
        },
        created_at_ms: c.created_at_ms,
        recover_after_ms: c.recover_after_ms,
    }
}

pub(crate) fn portable_identity(i: t::PortableIdentity) -> pi::PortableIdentity {
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

pub(crate) fn invocation_lease(l: t::InvocationLease) -> il::InvocationLease {
    il::InvocationLease {
        schema_version: l.schema_version,
        lease_id: l.lease_id,
        run_id: l.run_id,
        identity: portable_identity(l.identity),
        owner: il::LeaseOwner { process: owner(l.owner.process), token: l.owner.token },
        acquired_at: l.acquired_at,
        containment: l.containment.map(|c| il::Containment {
            status: match c.status {
                t::ContainmentStatus::ParentOwned => il::ContainmentStatus::ParentOwned,
                t::ContainmentStatus::HostStarting => il::ContainmentStatus::HostStarting,
                t::ContainmentStatus::HostActive => il::ContainmentStatus::HostActive,
                t::ContainmentStatus::CleanupComplete => il::ContainmentStatus::CleanupComplete,
                t::ContainmentStatus::CleanupUnsafe => il::ContainmentStatus::CleanupUnsafe,
            },
            host: c.host.map(owner),
        }),
    }
}

pub(crate) fn directory_identity_out(d: DirectoryIdentity) -> t::DirectoryIdentity {
    t::DirectoryIdentity { device: d.device, inode: d.inode, birthtime_ns: d.birthtime_ns }
}

pub(crate) fn directory_lease_claim_out(c: dl::DirectoryLease) -> t::DirectoryLeaseClaim {
    t::DirectoryLeaseClaim {
        id: c.id,
        role: match c.role {
            dl::Role::RawWorking => t::LeaseRole::RawWorking,
            dl::Role::BundleStage => t::LeaseRole::BundleStage,
        },
        path: c.path,
        parent_path: c.parent_path,
        parent_identity: directory_identity_out(c.parent_identity),
        directory_identity: directory_identity_out(c.directory_identity),
        output_root: c.output_root,
        owner: owner_out(c.owner),
        child_owner: c.child_owner.map(owner_out),
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

pub(crate) fn invocation_lease_out(l: il::InvocationLease) -> t::InvocationLease {
    t::InvocationLease {
        schema_version: l.schema_version,
        lease_id: l.lease_id,
        run_id: l.run_id,
        identity: portable_identity_out(l.identity),
        owner: t::LeaseOwner { process: owner_out(l.owner.process), token: l.owner.token },
        acquired_at: l.acquired_at,
        containment: l.containment.map(|c| t::Containment {
            status: match c.status {
                il::ContainmentStatus::ParentOwned => t::ContainmentStatus::ParentOwned,
                il::ContainmentStatus::HostStarting => t::ContainmentStatus::HostStarting,
                il::ContainmentStatus::HostActive => t::ContainmentStatus::HostActive,
                il::ContainmentStatus::CleanupComplete => t::ContainmentStatus::CleanupComplete,
                il::ContainmentStatus::CleanupUnsafe => t::ContainmentStatus::CleanupUnsafe,
            },
            host: c.host.map(owner_out),
        }),
    }
}

pub(crate) fn disposition(d: t::Disposition) -> proclease_core::dispositions::Disposition {
    use proclease_core::dispositions::Disposition as D;
    match d {
        t::Disposition::Active => D::Active,
        t::Disposition::Indeterminate => D::Indeterminate,
        t::Disposition::Recoverable => D::Recoverable,
    }
}

pub(crate) fn portable_identity_out(i: pi::PortableIdentity) -> t::PortableIdentity {
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

fn witness_out(w: proclease_core::liveness::WitnessState) -> pid::WitnessState {
    use proclease_core::liveness::WitnessState as W;
    match w {
        W::Absent => pid::WitnessState::Absent,
        W::Held => pid::WitnessState::Held,
        W::Free => pid::WitnessState::Free,
        W::Untestable => pid::WitnessState::Untestable,
    }
}

pub(crate) fn facts_out(f: proclease_core::liveness::OwnerFacts) -> pid::OwnerFacts {
    use proclease_core::liveness::ProcRead;
    pid::OwnerFacts {
        boot_id: f.boot_id,
        witness: witness_out(f.witness),
        recorded_pid_namespace: f.recorded_pid_namespace,
        spawned: witness_out(f.spawned),
        stat: match f.stat {
            ProcRead::Stat(text) => pid::ProcRead::Stat(text),
            ProcRead::Missing => pid::ProcRead::Missing,
            ProcRead::Unreadable => pid::ProcRead::Unreadable,
        },
        tasks: f.tasks,
        view: pid::ProcView {
            pid_namespace: f.view.pid_namespace,
            boottime_offset_ns: f.view.boottime_offset_ns,
            clock_ticks_per_second: f.view.clock_ticks_per_second,
        },
    }
}
