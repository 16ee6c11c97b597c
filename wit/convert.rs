//! The one conversion layer between the generated WIT types (`proclease.wit`) and the
//! `proclease-core` types, both ways: pure data mapping, no rule.
//!
//! It is compiled into both sides of the boundary — the component (`guest/component`, over
//! wit-bindgen's types) and the host (`host/`, over wasmtime's) — with `#[path]`: both
//! generators give every WIT type the same Rust path under `crate::bindings`, so one source
//! serves both. Names say the direction: `x_to_wit` (core → WIT) and `x_from_wit` (WIT → core).
//! Values that enter the component are re-validated by the guest after conversion; the host
//! trusts what the component returns.
#![allow(dead_code)]

use alloc::string::String;
use alloc::vec::Vec;

use proclease_core::dispositions::{Disposition, Probe};
use proclease_core::effects::{BatchInvalid, BatchStatus, CollectionEntry, CollectionIdentity, CollectionSnapshot, DirectoryFacts, EntryKind, FinishedRun, InstalledPlugin};
use proclease_core::liveness::{OwnerFacts, OwnerStatus, ProcRead, ProcView, RemotePresence, TreeState, WitnessState};
use proclease_core::records::{DirectoryIdentity, Owner, Parsed, directory_lease as dl, export_admission as ea, invocation_lease as il, portable_identity as pid};
use proclease_core::{Error, Failure, FailureKind, LeaseCode, LeaseError};

use crate::bindings::exports::proclease::lease::records as rec;
use crate::bindings::proclease::lease::{plugin_catalog as pc, process_identity as pi, state_store as ss, types as t, workspace as ws};

include!("convert_macros.rs");

// ---------- errors ----------

macro_rules! lease_code_map {
    ($($v:ident),* $(,)?) => {
        /// The WIT code of a core code; `None` for a code the contract does not know (a newer
        /// core), which then crosses as a system error with its message.
        pub(crate) fn lease_code_to_wit(code: LeaseCode) -> Option<t::LeaseCode> {
            match code {
                $(LeaseCode::$v => Some(t::LeaseCode::$v),)*
                #[allow(unreachable_patterns)]
                _ => None,
            }
        }
        pub(crate) fn lease_code_from_wit(code: t::LeaseCode) -> LeaseCode {
            match code { $(t::LeaseCode::$v => LeaseCode::$v,)* }
        }
    };
}

lease_code_map!(
    AnotherExportIsActive,
    CurrentBootIdentityIsInvalid,
    DirectoryLeaseIdWasAlreadyPresent,
    DirectoryLeaseChangedBeforeItsLifecycleUpdate,
    DirectoryLeaseChangedBeforeRecoveryRelease,
    DirectoryLeaseChangedBeforeRelease,
    DirectoryLeaseChangedDuringRecoveryInspection,
    DirectoryLeaseCollectionContainsAnUnsupportedEntry,
    DirectoryLeaseCollectionExceededItsReviewedBound,
    DirectoryLeaseCoordinatesAreInconsistent,
    DirectoryLeaseCouldNotBeCreatedSafely,
    DirectoryLeaseCouldNotBeReleasedSafely,
    DirectoryLeaseCreationTimeIsInvalid,
    DirectoryLeaseHasAnUnsupportedShape,
    DirectoryLeaseIdentityIsInvalid,
    DirectoryLeaseIsNotCanonical,
    DirectoryLeaseIsNotValidJson,
    DirectoryLeaseLifecycleCouldNotBeUpdatedSafely,
    DirectoryLeaseMustBeAPlainObject,
    DirectoryLeaseOutputChangedBeforeRecovery,
    DirectoryLeaseOutputIsInvalid,
    DirectoryLeaseParentChangedBeforeRecovery,
    DirectoryLeaseParentIsInvalid,
    DirectoryLeasePathIsInvalid,
    DirectoryLeaseRecoveryFailedSafely,
    DirectoryLeaseRecoveryTimeIsInvalid,
    DirectoryLeaseRequestIsInvalid,
    DirectoryLeaseTargetChangedBeforeRecovery,
    DirectoryLeaseTargetIsNotAnOwnedPhysicalDirectory,
    DirectoryRecoveryTimeIsInvalid,
    ExportAdmissionCannotReleaseAnUnsettledHelperLifecycle,
    ExportAdmissionChangedBeforeLifecycleUpdate,
    ExportAdmissionChangedBeforeRelease,
    ExportAdmissionCouldNotBeAcquiredAfterBoundedContention,
    ExportAdmissionCouldNotBeAcquiredSafely,
    ExportAdmissionCouldNotBeReleasedSafely,
    ExportAdmissionHasAnUnsupportedShape,
    ExportAdmissionHelperPidIsInvalid,
    ExportAdmissionIdentityIsInvalid,
    ExportAdmissionIsNotCanonical,
    ExportAdmissionIsNotValidJson,
    ExportAdmissionLifecycleCouldNotBeUpdatedSafely,
    ExportAdmissionLifecycleIsInvalid,
    ExportAdmissionLifecycleTransitionIsInvalid,
    ExportAdmissionMustBeAPlainObject,
    ExportAdmissionRevisionIsInvalid,
    OnlyARunningDirectoryLeaseAcceptsAChildProcessIdentity,
    OnlyAnActiveRawDirectoryLeaseCanChangePhase,
    PriorExportOwnerCannotBeInspectedSafely,
    RawDirectoryLeaseLifecycleTransitionIsInvalid,
    ReleasedExportAdmissionCannotChangeLifecycle,
    RunningDirectoryLeaseRequiresAChildProcessIdentity,
    LegacyPortableInvocationLeaseCleanupIsUnverifiable,
    LegacyPortableInvocationLeasesCannotBindContainment,
    LegacyPortableInvocationLeasesCannotStartAHost,
    PortableInvocationLeaseIdCollided,
    PortableInvocationLeaseIdIsMalformed,
    PortableInvocationLeaseAcquisitionTimeIsMalformed,
    PortableInvocationLeaseCannotBeReleasedBeforeDurableCleanupCompletion,
    PortableInvocationLeaseChangedOrDisappearedBeforeContainmentUpdate,
    PortableInvocationLeaseChangedOrDisappearedBeforeRelease,
    PortableInvocationLeaseCleanupBecameUnsafeAfterCompletion,
    PortableInvocationLeaseCleanupCannotCompleteAfterBecomingUnsafe,
    PortableInvocationLeaseHasUnsupportedFields,
    PortableInvocationLeaseHostAdmissionChanged,
    PortableInvocationLeaseHostStartedOutOfOrder,
    PortableInvocationLeaseIsNotCanonicalAListingReportsItInvalid,
    PortableInvocationLeaseIsNotValidJson,
    PortableInvocationLeaseSchemaIsUnsupported,
    PortableInvocationLeaseSnapshotIsNotContentBound,
    PortableInvocationRunIdIsMalformed,
    PortableOperationIdentityHasUnsupportedFields,
    PortableOperationIdentityIsMalformed,
    PortableOperationIdentityIsNotValidJson,
    PortableOperationIdentityMustBeAnObject,
    PortablePluginCatalogMutationIsAlreadyLocked,
    PluginChangedOrDisabled,
    InvocationBlockedByMalformedLease,
    InvocationBlockedByCleanupUnsafeLease,
    InvocationBlockedByUnverifiableLease,
    FieldMustBeAPlainObject,
    FieldHasAnUnsupportedShape,
    FieldIsInvalid,
    FieldMustBeAnObject,
    FieldHasUnsupportedFields,
    FieldIsMalformed,
    FileIsNotValidJson,
    NotAProcleaseRecord,
    InvocationLeaseFileNameMismatch,
    InvocationLeaseListedInvalid,
    StateHomeMarkerIsInvalid,
);

include!("convert_effects.rs");

pub(crate) fn error_to_wit(e: Error) -> t::Error {
    match e {
        Error::Lease(lease) => match lease_code_to_wit(lease.code()) {
            Some(code) => t::Error::Lease(t::LeaseError { code, message: String::from(lease.message()), cause: lease.cause().cloned().map(failure_to_wit) }),
            None => t::Error::System(failure_to_wit(Failure::unavailable(lease.message()))),
        },
        Error::Storage(f) => t::Error::Storage(failure_to_wit(f)),
        Error::System(f) => t::Error::System(failure_to_wit(f)),
        other => t::Error::System(failure_to_wit(Failure::unavailable(other.message()))),
    }
}

pub(crate) fn error_from_wit(e: t::Error) -> Error {
    match e {
        t::Error::Lease(l) => {
            let lease = LeaseError::from_parts(lease_code_from_wit(l.code), l.message);
            Error::Lease(match l.cause {
                Some(cause) => lease.with_cause(failure_from_wit(cause)),
                None => lease,
            })
        }
        t::Error::Storage(f) => Error::Storage(failure_from_wit(f)),
        t::Error::System(f) => Error::System(failure_from_wit(f)),
    }
}

// ---------- records ----------

pub(crate) fn form_to_wit<T>(p: &Parsed<T>) -> rec::CanonicalForm {
    rec::CanonicalForm { canonical: p.canonical.clone(), sha256: p.sha256.clone() }
}

/// A record with the canonical form the component computed for it.
pub(crate) fn parsed_from_wit<T>(record: T, form: rec::CanonicalForm) -> Parsed<T> {
    Parsed { record, canonical: form.canonical, sha256: form.sha256 }
}

enum_map!(admission_schema_to_wit, admission_schema_from_wit, ea::Schema, t::AdmissionSchema, {
    V1 <=> V1, V2PreRevision <=> V2PreRevision, V2 <=> V2,
});

enum_map!(admission_phase_to_wit, admission_phase_from_wit, ea::Phase, t::AdmissionPhase, {
    ParentOwned <=> ParentOwned, HelperLaunching <=> HelperLaunching, HelperActive <=> HelperActive, CleanupUnsafe <=> CleanupUnsafe,
});

pub(crate) fn admission_claim_to_wit(c: ea::ExportAdmission) -> t::AdmissionClaim {
    t::AdmissionClaim {
        schema: admission_schema_to_wit(c.schema),
        id: c.id,
        owner: owner_to_wit(c.owner),
        helper_owner: c.helper_owner.map(owner_to_wit),
        phase: c.phase.map(admission_phase_to_wit),
        revision: c.revision,
    }
}

pub(crate) fn admission_claim_from_wit(c: t::AdmissionClaim) -> ea::ExportAdmission {
    ea::ExportAdmission {
        schema: admission_schema_from_wit(c.schema),
        id: c.id,
        owner: owner_from_wit(c.owner),
        helper_owner: c.helper_owner.map(owner_from_wit),
        phase: c.phase.map(admission_phase_from_wit),
        revision: c.revision,
    }
}

enum_map!(role_to_wit, role_from_wit, dl::Role, t::LeaseRole, { RawWorking <=> RawWorking, BundleStage <=> BundleStage });

enum_map!(raw_phase_to_wit, raw_phase_from_wit, dl::Phase, t::RawPhase, {
    Preparing <=> Preparing, Launching <=> Launching, Running <=> Running, Settled <=> Settled,
});

pub(crate) fn directory_lease_claim_to_wit(c: dl::DirectoryLease) -> t::DirectoryLeaseClaim {
    t::DirectoryLeaseClaim {
        id: c.id,
        role: role_to_wit(c.role),
        path: c.path,
        parent_path: c.parent_path,
        parent_identity: directory_identity_to_wit(c.parent_identity),
        directory_identity: directory_identity_to_wit(c.directory_identity),
        output_root: c.output_root,
        owner: owner_to_wit(c.owner),
        child_owner: c.child_owner.map(owner_to_wit),
        phase: raw_phase_to_wit(c.phase),
        created_at_ms: c.created_at_ms,
        recover_after_ms: c.recover_after_ms,
    }
}

pub(crate) fn directory_lease_claim_from_wit(c: t::DirectoryLeaseClaim) -> dl::DirectoryLease {
    dl::DirectoryLease {
        id: c.id,
        role: role_from_wit(c.role),
        path: c.path,
        parent_path: c.parent_path,
        parent_identity: directory_identity_from_wit(c.parent_identity),
        directory_identity: directory_identity_from_wit(c.directory_identity),
        output_root: c.output_root,
        owner: owner_from_wit(c.owner),
        child_owner: c.child_owner.map(owner_from_wit),
        phase: raw_phase_from_wit(c.phase),
        created_at_ms: c.created_at_ms,
        recover_after_ms: c.recover_after_ms,
    }
}

enum_map!(transport_to_wit, transport_from_wit, pid::Transport, t::Transport, {
    ProviderApi <=> ProviderApi, WebSessionApi <=> WebSessionApi, LinkedDevice <=> LinkedDevice,
});

struct_map!(portable_identity_to_wit, portable_identity_from_wit, pid::PortableIdentity, t::PortableIdentity, {
    plugin_id, plugin_version, host_api_version, bundle_sha256, manifest_sha256, descriptor_sha256, adapter_id,
    transport => (transport_to_wit, transport_from_wit), surface_id, operation, contract_version,
});

enum_map!(containment_status_to_wit, containment_status_from_wit, il::ContainmentStatus, t::ContainmentStatus, {
    ParentOwned <=> ParentOwned, HostStarting <=> HostStarting, HostActive <=> HostActive,
    CleanupComplete <=> CleanupComplete, CleanupUnsafe <=> CleanupUnsafe,
});

fn host_to_wit(host: Option<Owner>) -> Option<t::Owner> {
    host.map(owner_to_wit)
}

fn host_from_wit(host: Option<t::Owner>) -> Option<Owner> {
    host.map(owner_from_wit)
}

struct_map!(containment_to_wit, containment_from_wit, il::Containment, t::Containment, {
    status => (containment_status_to_wit, containment_status_from_wit), host => (host_to_wit, host_from_wit),
});

fn containment_option_to_wit(c: Option<il::Containment>) -> Option<t::Containment> {
    c.map(containment_to_wit)
}

fn containment_option_from_wit(c: Option<t::Containment>) -> Option<il::Containment> {
    c.map(containment_from_wit)
}

struct_map!(lease_owner_to_wit, lease_owner_from_wit, il::LeaseOwner, t::LeaseOwner, { process => (owner_to_wit, owner_from_wit), token });

struct_map!(invocation_lease_to_wit, invocation_lease_from_wit, il::InvocationLease, t::InvocationLease, {
    schema_version, lease_id, run_id, identity => (portable_identity_to_wit, portable_identity_from_wit),
    owner => (lease_owner_to_wit, lease_owner_from_wit), acquired_at, containment => (containment_option_to_wit, containment_option_from_wit),
});

// ---------- decisions ----------

enum_map!(disposition_to_wit, disposition_from_wit, Disposition, t::Disposition, {
    Active <=> Active, Indeterminate <=> Indeterminate, Recoverable <=> Recoverable,
});

enum_map!(probe_to_wit, probe_from_wit, Probe, t::Probe, { Owner <=> Owner, Helper <=> Helper, Child <=> Child, Host <=> Host });

// ---------- plugin catalog ----------

struct_map!(installed_to_wit, installed_from_wit, InstalledPlugin, pc::InstalledPlugin, { plugin_id, version, host_api_version, bundle_sha256, manifest_sha256 });
