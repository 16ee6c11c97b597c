//! The one error type of the lease logic, and the typed refusals of the lease rules.
//!
//! The reference (spec §8 item 3) needs callers to tell a *lease error* — a rule of the protocol
//! refused, with the reference's exact message — from an underlying *storage* or *system*
//! failure. The three cases below map one to one onto the `error` variant of the WIT contract.
//! A lease error carries a [`LeaseCode`] — one per message the reference raises (in the manner
//! of rustls' error enums: callers branch on the code, never on the text) — and the exact
//! message, whose text the code fixes (for a few, the code fixes a template and the message
//! fills it: a field's name, a plugin or lease id).

use alloc::string::String;
use core::fmt;

/// The message prefix of every error of the `beeper-message-like-me-recovery` module (§6A.1).
pub const BEEPER_PREFIX: &str = "Beeper Message Like Me recovery: ";

/// Which reference module raises a refusal, which decides its prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Module {
    /// `beeper-message-like-me-recovery` (§6A): messages carry [`BEEPER_PREFIX`].
    Beeper,
    /// `provider-plugin-invocation-lease` (§6B) and the portable identity parser (§4): no prefix.
    Invocation,
}

macro_rules! lease_codes {
    ($( $(#[$doc:meta])* $variant:ident = $name:literal, $module:ident, $text:expr; )*) => {
        /// What a lease rule refused: one code per message of the reference (spec §4, §6A, §6B).
        /// Each code's documentation is its message (`<…>`: filled in by the message).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum LeaseCode {
            $( $(#[$doc])* $variant, )*
        }

        impl LeaseCode {
            /// Every code, in the order of the WIT enum `lease-code`.
            pub const ALL: &'static [LeaseCode] = &[$(LeaseCode::$variant),*];

            /// The code's name, as the WIT enum `lease-code` spells it (kebab-case).
            pub fn name(self) -> &'static str {
                match self { $(LeaseCode::$variant => $name,)* }
            }

            /// The module that raises it.
            pub fn module(self) -> Module {
                match self { $(LeaseCode::$variant => Module::$module,)* }
            }

            /// The message without prefix, when the code fixes it entirely.
            pub fn text(self) -> Option<&'static str> {
                match self { $(LeaseCode::$variant => $text,)* }
            }
        }
    };
}

lease_codes! {
    /// `another export is active`
    AnotherExportIsActive = "another-export-is-active", Beeper, Some("another export is active");
    /// `current boot identity is invalid`
    CurrentBootIdentityIsInvalid = "current-boot-identity-is-invalid", Beeper, Some("current boot identity is invalid");
    /// `directory lease ID was already present`
    DirectoryLeaseIdWasAlreadyPresent = "directory-lease-id-was-already-present", Beeper, Some("directory lease ID was already present");
    /// `directory lease changed before its lifecycle update`
    DirectoryLeaseChangedBeforeItsLifecycleUpdate = "directory-lease-changed-before-its-lifecycle-update", Beeper, Some("directory lease changed before its lifecycle update");
    /// `directory lease changed before recovery release`
    DirectoryLeaseChangedBeforeRecoveryRelease = "directory-lease-changed-before-recovery-release", Beeper, Some("directory lease changed before recovery release");
    /// `directory lease changed before release`
    DirectoryLeaseChangedBeforeRelease = "directory-lease-changed-before-release", Beeper, Some("directory lease changed before release");
    /// `directory lease changed during recovery inspection`
    DirectoryLeaseChangedDuringRecoveryInspection = "directory-lease-changed-during-recovery-inspection", Beeper, Some("directory lease changed during recovery inspection");
    /// `directory lease collection contains an unsupported entry`
    DirectoryLeaseCollectionContainsAnUnsupportedEntry = "directory-lease-collection-contains-an-unsupported-entry", Beeper, Some("directory lease collection contains an unsupported entry");
    /// `directory lease collection exceeded its reviewed bound`
    DirectoryLeaseCollectionExceededItsReviewedBound = "directory-lease-collection-exceeded-its-reviewed-bound", Beeper, Some("directory lease collection exceeded its reviewed bound");
    /// `directory lease coordinates are inconsistent`
    DirectoryLeaseCoordinatesAreInconsistent = "directory-lease-coordinates-are-inconsistent", Beeper, Some("directory lease coordinates are inconsistent");
    /// `directory lease could not be created safely`
    DirectoryLeaseCouldNotBeCreatedSafely = "directory-lease-could-not-be-created-safely", Beeper, Some("directory lease could not be created safely");
    /// `directory lease could not be released safely`
    DirectoryLeaseCouldNotBeReleasedSafely = "directory-lease-could-not-be-released-safely", Beeper, Some("directory lease could not be released safely");
    /// `directory lease creation time is invalid`
    DirectoryLeaseCreationTimeIsInvalid = "directory-lease-creation-time-is-invalid", Beeper, Some("directory lease creation time is invalid");
    /// `directory lease has an unsupported shape`
    DirectoryLeaseHasAnUnsupportedShape = "directory-lease-has-an-unsupported-shape", Beeper, Some("directory lease has an unsupported shape");
    /// `directory lease identity is invalid`
    DirectoryLeaseIdentityIsInvalid = "directory-lease-identity-is-invalid", Beeper, Some("directory lease identity is invalid");
    /// `directory lease is not canonical`
    DirectoryLeaseIsNotCanonical = "directory-lease-is-not-canonical", Beeper, Some("directory lease is not canonical");
    /// `directory lease is not valid JSON`
    DirectoryLeaseIsNotValidJson = "directory-lease-is-not-valid-json", Beeper, Some("directory lease is not valid JSON");
    /// `directory lease lifecycle could not be updated safely`
    DirectoryLeaseLifecycleCouldNotBeUpdatedSafely = "directory-lease-lifecycle-could-not-be-updated-safely", Beeper, Some("directory lease lifecycle could not be updated safely");
    /// `directory lease must be a plain object`
    DirectoryLeaseMustBeAPlainObject = "directory-lease-must-be-a-plain-object", Beeper, Some("directory lease must be a plain object");
    /// `directory lease output changed before recovery`
    DirectoryLeaseOutputChangedBeforeRecovery = "directory-lease-output-changed-before-recovery", Beeper, Some("directory lease output changed before recovery");
    /// `directory lease output is invalid`
    DirectoryLeaseOutputIsInvalid = "directory-lease-output-is-invalid", Beeper, Some("directory lease output is invalid");
    /// `directory lease parent changed before recovery`
    DirectoryLeaseParentChangedBeforeRecovery = "directory-lease-parent-changed-before-recovery", Beeper, Some("directory lease parent changed before recovery");
    /// `directory lease parent is invalid`
    DirectoryLeaseParentIsInvalid = "directory-lease-parent-is-invalid", Beeper, Some("directory lease parent is invalid");
    /// `directory lease path is invalid`
    DirectoryLeasePathIsInvalid = "directory-lease-path-is-invalid", Beeper, Some("directory lease path is invalid");
    /// `directory lease recovery failed safely`
    DirectoryLeaseRecoveryFailedSafely = "directory-lease-recovery-failed-safely", Beeper, Some("directory lease recovery failed safely");
    /// `directory lease recovery time is invalid`
    DirectoryLeaseRecoveryTimeIsInvalid = "directory-lease-recovery-time-is-invalid", Beeper, Some("directory lease recovery time is invalid");
    /// `directory lease request is invalid`
    DirectoryLeaseRequestIsInvalid = "directory-lease-request-is-invalid", Beeper, Some("directory lease request is invalid");
    /// `directory lease target changed before recovery`
    DirectoryLeaseTargetChangedBeforeRecovery = "directory-lease-target-changed-before-recovery", Beeper, Some("directory lease target changed before recovery");
    /// `directory lease target is not an owned physical directory`
    DirectoryLeaseTargetIsNotAnOwnedPhysicalDirectory = "directory-lease-target-is-not-an-owned-physical-directory", Beeper, Some("directory lease target is not an owned physical directory");
    /// `directory recovery time is invalid`
    DirectoryRecoveryTimeIsInvalid = "directory-recovery-time-is-invalid", Beeper, Some("directory recovery time is invalid");
    /// `export admission cannot release an unsettled helper lifecycle`
    ExportAdmissionCannotReleaseAnUnsettledHelperLifecycle = "export-admission-cannot-release-an-unsettled-helper-lifecycle", Beeper, Some("export admission cannot release an unsettled helper lifecycle");
    /// `export admission changed before lifecycle update`
    ExportAdmissionChangedBeforeLifecycleUpdate = "export-admission-changed-before-lifecycle-update", Beeper, Some("export admission changed before lifecycle update");
    /// `export admission changed before release`
    ExportAdmissionChangedBeforeRelease = "export-admission-changed-before-release", Beeper, Some("export admission changed before release");
    /// `export admission could not be acquired after bounded contention`
    ExportAdmissionCouldNotBeAcquiredAfterBoundedContention = "export-admission-could-not-be-acquired-after-bounded-contention", Beeper, Some("export admission could not be acquired after bounded contention");
    /// `export admission could not be acquired safely`
    ExportAdmissionCouldNotBeAcquiredSafely = "export-admission-could-not-be-acquired-safely", Beeper, Some("export admission could not be acquired safely");
    /// `export admission could not be released safely`
    ExportAdmissionCouldNotBeReleasedSafely = "export-admission-could-not-be-released-safely", Beeper, Some("export admission could not be released safely");
    /// `export admission has an unsupported shape`
    ExportAdmissionHasAnUnsupportedShape = "export-admission-has-an-unsupported-shape", Beeper, Some("export admission has an unsupported shape");
    /// `export admission helper PID is invalid`
    ExportAdmissionHelperPidIsInvalid = "export-admission-helper-pid-is-invalid", Beeper, Some("export admission helper PID is invalid");
    /// `export admission identity is invalid`
    ExportAdmissionIdentityIsInvalid = "export-admission-identity-is-invalid", Beeper, Some("export admission identity is invalid");
    /// `export admission is not canonical`
    ExportAdmissionIsNotCanonical = "export-admission-is-not-canonical", Beeper, Some("export admission is not canonical");
    /// `export admission is not valid JSON`
    ExportAdmissionIsNotValidJson = "export-admission-is-not-valid-json", Beeper, Some("export admission is not valid JSON");
    /// `export admission lifecycle could not be updated safely`
    ExportAdmissionLifecycleCouldNotBeUpdatedSafely = "export-admission-lifecycle-could-not-be-updated-safely", Beeper, Some("export admission lifecycle could not be updated safely");
    /// `export admission lifecycle is invalid`
    ExportAdmissionLifecycleIsInvalid = "export-admission-lifecycle-is-invalid", Beeper, Some("export admission lifecycle is invalid");
    /// `export admission lifecycle transition is invalid`
    ExportAdmissionLifecycleTransitionIsInvalid = "export-admission-lifecycle-transition-is-invalid", Beeper, Some("export admission lifecycle transition is invalid");
    /// `export admission must be a plain object`
    ExportAdmissionMustBeAPlainObject = "export-admission-must-be-a-plain-object", Beeper, Some("export admission must be a plain object");
    /// `export admission revision is invalid`
    ExportAdmissionRevisionIsInvalid = "export-admission-revision-is-invalid", Beeper, Some("export admission revision is invalid");
    /// `only a running directory lease accepts a child process identity`
    OnlyARunningDirectoryLeaseAcceptsAChildProcessIdentity = "only-a-running-directory-lease-accepts-a-child-process-identity", Beeper, Some("only a running directory lease accepts a child process identity");
    /// `only an active raw directory lease can change phase`
    OnlyAnActiveRawDirectoryLeaseCanChangePhase = "only-an-active-raw-directory-lease-can-change-phase", Beeper, Some("only an active raw directory lease can change phase");
    /// `prior export owner cannot be inspected safely`
    PriorExportOwnerCannotBeInspectedSafely = "prior-export-owner-cannot-be-inspected-safely", Beeper, Some("prior export owner cannot be inspected safely");
    /// `raw directory lease lifecycle transition is invalid`
    RawDirectoryLeaseLifecycleTransitionIsInvalid = "raw-directory-lease-lifecycle-transition-is-invalid", Beeper, Some("raw directory lease lifecycle transition is invalid");
    /// `released export admission cannot change lifecycle`
    ReleasedExportAdmissionCannotChangeLifecycle = "released-export-admission-cannot-change-lifecycle", Beeper, Some("released export admission cannot change lifecycle");
    /// `running directory lease requires a child process identity`
    RunningDirectoryLeaseRequiresAChildProcessIdentity = "running-directory-lease-requires-a-child-process-identity", Beeper, Some("running directory lease requires a child process identity");
    /// `legacy portable invocation lease cleanup is unverifiable`
    LegacyPortableInvocationLeaseCleanupIsUnverifiable = "legacy-portable-invocation-lease-cleanup-is-unverifiable", Invocation, Some("legacy portable invocation lease cleanup is unverifiable");
    /// `legacy portable invocation leases cannot bind containment`
    LegacyPortableInvocationLeasesCannotBindContainment = "legacy-portable-invocation-leases-cannot-bind-containment", Invocation, Some("legacy portable invocation leases cannot bind containment");
    /// `legacy portable invocation leases cannot start a host`
    LegacyPortableInvocationLeasesCannotStartAHost = "legacy-portable-invocation-leases-cannot-start-a-host", Invocation, Some("legacy portable invocation leases cannot start a host");
    /// `portable invocation lease ID collided`
    PortableInvocationLeaseIdCollided = "portable-invocation-lease-id-collided", Invocation, Some("portable invocation lease ID collided");
    /// `portable invocation lease ID is malformed`
    PortableInvocationLeaseIdIsMalformed = "portable-invocation-lease-id-is-malformed", Invocation, Some("portable invocation lease ID is malformed");
    /// `portable invocation lease acquisition time is malformed`
    PortableInvocationLeaseAcquisitionTimeIsMalformed = "portable-invocation-lease-acquisition-time-is-malformed", Invocation, Some("portable invocation lease acquisition time is malformed");
    /// `portable invocation lease cannot be released before durable cleanup completion`
    PortableInvocationLeaseCannotBeReleasedBeforeDurableCleanupCompletion = "portable-invocation-lease-cannot-be-released-before-durable-cleanup-completion", Invocation, Some("portable invocation lease cannot be released before durable cleanup completion");
    /// `portable invocation lease changed or disappeared before containment update`
    PortableInvocationLeaseChangedOrDisappearedBeforeContainmentUpdate = "portable-invocation-lease-changed-or-disappeared-before-containment-update", Invocation, Some("portable invocation lease changed or disappeared before containment update");
    /// `portable invocation lease changed or disappeared before release`
    PortableInvocationLeaseChangedOrDisappearedBeforeRelease = "portable-invocation-lease-changed-or-disappeared-before-release", Invocation, Some("portable invocation lease changed or disappeared before release");
    /// `portable invocation lease cleanup became unsafe after completion`
    PortableInvocationLeaseCleanupBecameUnsafeAfterCompletion = "portable-invocation-lease-cleanup-became-unsafe-after-completion", Invocation, Some("portable invocation lease cleanup became unsafe after completion");
    /// `portable invocation lease cleanup cannot complete after becoming unsafe`
    PortableInvocationLeaseCleanupCannotCompleteAfterBecomingUnsafe = "portable-invocation-lease-cleanup-cannot-complete-after-becoming-unsafe", Invocation, Some("portable invocation lease cleanup cannot complete after becoming unsafe");
    /// `portable invocation lease has unsupported fields`
    PortableInvocationLeaseHasUnsupportedFields = "portable-invocation-lease-has-unsupported-fields", Invocation, Some("portable invocation lease has unsupported fields");
    /// `portable invocation lease host admission changed`
    PortableInvocationLeaseHostAdmissionChanged = "portable-invocation-lease-host-admission-changed", Invocation, Some("portable invocation lease host admission changed");
    /// `portable invocation lease host started out of order`
    PortableInvocationLeaseHostStartedOutOfOrder = "portable-invocation-lease-host-started-out-of-order", Invocation, Some("portable invocation lease host started out of order");
    /// `portable invocation lease is not canonical: a listing reports it invalid`
    PortableInvocationLeaseIsNotCanonicalAListingReportsItInvalid = "portable-invocation-lease-is-not-canonical-a-listing-reports-it-invalid", Invocation, Some("portable invocation lease is not canonical: a listing reports it invalid");
    /// `portable invocation lease is not valid JSON`
    PortableInvocationLeaseIsNotValidJson = "portable-invocation-lease-is-not-valid-json", Invocation, Some("portable invocation lease is not valid JSON");
    /// `portable invocation lease schema is unsupported`
    PortableInvocationLeaseSchemaIsUnsupported = "portable-invocation-lease-schema-is-unsupported", Invocation, Some("portable invocation lease schema is unsupported");
    /// `portable invocation lease snapshot is not content-bound`
    PortableInvocationLeaseSnapshotIsNotContentBound = "portable-invocation-lease-snapshot-is-not-content-bound", Invocation, Some("portable invocation lease snapshot is not content-bound");
    /// `portable invocation run ID is malformed`
    PortableInvocationRunIdIsMalformed = "portable-invocation-run-id-is-malformed", Invocation, Some("portable invocation run ID is malformed");
    /// `portable operation identity has unsupported fields`
    PortableOperationIdentityHasUnsupportedFields = "portable-operation-identity-has-unsupported-fields", Invocation, Some("portable operation identity has unsupported fields");
    /// `portable operation identity is malformed`
    PortableOperationIdentityIsMalformed = "portable-operation-identity-is-malformed", Invocation, Some("portable operation identity is malformed");
    /// `portable operation identity is not valid JSON` (its text given to `parse-portable-identity`)
    PortableOperationIdentityIsNotValidJson = "portable-operation-identity-is-not-valid-json", Invocation, Some("portable operation identity is not valid JSON");
    /// `portable operation identity must be an object`
    PortableOperationIdentityMustBeAnObject = "portable-operation-identity-must-be-an-object", Invocation, Some("portable operation identity must be an object");
    /// `portable plugin catalog mutation is already locked`
    PortablePluginCatalogMutationIsAlreadyLocked = "portable-plugin-catalog-mutation-is-already-locked", Invocation, Some("portable plugin catalog mutation is already locked");
    /// `portable provider plugin <plugin id> changed or was disabled before execution; retry from current capabilities`
    PluginChangedOrDisabled = "plugin-changed-or-disabled", Invocation, None;
    /// `portable provider plugin invocation is blocked by malformed lease <lease id>; run ghostget plugin doctor before retrying`
    InvocationBlockedByMalformedLease = "invocation-blocked-by-malformed-lease", Invocation, None;
    /// `portable provider plugin <plugin id> invocation is blocked by cleanup-unsafe lease <lease id>; run ghostget plugin doctor before retrying`
    InvocationBlockedByCleanupUnsafeLease = "invocation-blocked-by-cleanup-unsafe-lease", Invocation, None;
    /// `portable provider plugin <plugin id> invocation is blocked by unverifiable non-complete lease <lease id>; run ghostget plugin doctor before retrying`
    InvocationBlockedByUnverifiableLease = "invocation-blocked-by-unverifiable-lease", Invocation, None;
    /// `<field> must be a plain object`
    FieldMustBeAPlainObject = "field-must-be-a-plain-object", Beeper, None;
    /// `<field> has an unsupported shape`
    FieldHasAnUnsupportedShape = "field-has-an-unsupported-shape", Beeper, None;
    /// `<field> is invalid`
    FieldIsInvalid = "field-is-invalid", Beeper, None;
    /// `<field> must be an object`
    FieldMustBeAnObject = "field-must-be-an-object", Invocation, None;
    /// `<field> has unsupported fields`
    FieldHasUnsupportedFields = "field-has-unsupported-fields", Invocation, None;
    /// `<field> is malformed`
    FieldIsMalformed = "field-is-malformed", Invocation, None;
    /// `file is not valid JSON (<parser's description>)` (proclease's `validate`)
    FileIsNotValidJson = "file-is-not-valid-json", Invocation, None;
    /// `not a proclease record: expected an export admission, a directory lease, an invocation lease or a portable operation identity` (proclease's `validate`)
    NotAProcleaseRecord = "not-a-proclease-record", Invocation, Some("not a proclease record: expected an export admission, a directory lease, an invocation lease or a portable operation identity");
    /// `portable invocation lease file name must be <id>.json: a listing ignores or rejects this file` (proclease's `validate`)
    InvocationLeaseFileNameMismatch = "invocation-lease-file-name-mismatch", Invocation, None;
    /// `portable invocation lease is invalid (<reason>): a listing reports it invalid` (proclease's `validate`)
    InvocationLeaseListedInvalid = "invocation-lease-listed-invalid", Invocation, None;
    /// `state-home marker must be exactly {"kind":"io-state","schemaVersion":1} and a newline (§3.2): a reader refuses the state home` (proclease's `validate`)
    StateHomeMarkerIsInvalid = "state-home-marker-is-invalid", Invocation, Some("state-home marker must be exactly {\"kind\":\"io-state\",\"schemaVersion\":1} and a newline (§3.2): a reader refuses the state home");
}

impl LeaseCode {
    /// The code named `name` (kebab-case), if any.
    pub fn from_name(name: &str) -> Option<LeaseCode> {
        LeaseCode::ALL.iter().copied().find(|c| c.name() == name)
    }
}

/// A refusal of a lease rule: its code and the reference's exact message (prefix included),
/// and — where the refusal wraps another failure (the reference's "…safely" wrappings) — that
/// failure's message as its cause. The cause is context, not identity: two refusals are equal
/// when their codes and messages are.
#[derive(Debug, Clone)]
pub struct LeaseError {
    code: LeaseCode,
    message: String,
    cause: Option<Cause>,
}

/// The failure a refusal wraps (its message): the refusal's [`core::error::Error::source`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause(String);

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl core::error::Error for Cause {}

impl core::error::Error for LeaseError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        self.cause.as_ref().map(|cause| cause as &(dyn core::error::Error + 'static))
    }
}

impl PartialEq for LeaseError {
    fn eq(&self, other: &LeaseError) -> bool {
        self.code == other.code && self.message == other.message
    }
}

impl Eq for LeaseError {}

impl LeaseError {
    /// The refusal `code` with `text` (the message without prefix); the prefix is the code's
    /// module's.
    pub fn with_text(code: LeaseCode, text: &str) -> LeaseError {
        let mut message = String::new();
        if code.module() == Module::Beeper {
            message.push_str(BEEPER_PREFIX);
        }
        message.push_str(text);
        LeaseError { code, message, cause: None }
    }

    /// The refusal `code` with its fixed message (a templated code without its filling shows
    /// the template).
    pub fn new(code: LeaseCode) -> LeaseError {
        LeaseError::with_text(code, code.text().unwrap_or_else(|| code.name()))
    }

    /// A refusal as it crossed a boundary: `message` exactly as given.
    pub fn from_parts(code: LeaseCode, message: String) -> LeaseError {
        LeaseError { code, message, cause: None }
    }

    /// This refusal with `cause`: the message of the failure it wraps.
    pub fn with_cause(mut self, cause: impl Into<String>) -> LeaseError {
        self.cause = Some(Cause(cause.into()));
        self
    }

    /// The message of the failure this refusal wraps (e.g. the store's `… Read-only file
    /// system`), if any. Never part of [`LeaseError::message`], which stays the reference's.
    pub fn cause(&self) -> Option<&str> {
        self.cause.as_ref().map(|cause| cause.0.as_str())
    }

    /// What was refused.
    pub fn code(&self) -> LeaseCode {
        self.code
    }

    /// The reference's exact message, prefix included.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for LeaseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// An error of the lease logic.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// A lease rule refused: its code and the reference's exact message, prefix included (e.g.
    /// `Beeper Message Like Me recovery: another export is active`).
    Lease(LeaseError),
    /// The state store or workspace failed (I/O, an unsafe file, a bound); the message names the
    /// path and what the user can do.
    Storage(String),
    /// A system fact was unavailable (boot id, process identity, clock); where the reference fixes
    /// the message (e.g. `exact live process identity is unavailable`) it is that message.
    System(String),
}

impl Error {
    /// The refusal `code` with its fixed message.
    pub fn lease(code: LeaseCode) -> Self {
        Error::Lease(LeaseError::new(code))
    }

    /// The refusal `code` with `text` filling its template (the message without prefix).
    pub fn lease_with(code: LeaseCode, text: &str) -> Self {
        Error::Lease(LeaseError::with_text(code, text))
    }

    /// The refusal `code`, wrapping `cause` (the reference's "…safely" wrappings): the
    /// message stays the reference's; `cause`'s message is kept as the refusal's cause.
    pub fn wrapping(code: LeaseCode, cause: &Error) -> Self {
        let inner = match cause {
            Error::Lease(lease) => match lease.cause() {
                Some(deeper) => alloc::format!("{}: {deeper}", lease.message()),
                None => String::from(lease.message()),
            },
            other => String::from(other.message()),
        };
        Error::Lease(LeaseError::new(code).with_cause(inner))
    }

    /// The refusal's code, when this is one.
    pub fn lease_code(&self) -> Option<LeaseCode> {
        match self {
            Error::Lease(e) => Some(e.code()),
            _ => None,
        }
    }

    /// Whether this is a refusal of the Beeper module (its message carries [`BEEPER_PREFIX`]).
    pub fn is_beeper_refusal(&self) -> bool {
        matches!(self, Error::Lease(e) if e.code().module() == Module::Beeper)
    }

    /// The message, whatever the case.
    pub fn message(&self) -> &str {
        match self {
            Error::Lease(e) => e.message(),
            Error::Storage(m) | Error::System(m) => m,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

impl core::error::Error for Error {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_a_unique_name_and_the_reference_text() {
        for (i, code) in LeaseCode::ALL.iter().enumerate() {
            assert_eq!(LeaseCode::from_name(code.name()), Some(*code));
            assert!(LeaseCode::ALL[..i].iter().all(|c| c.name() != code.name()));
        }
        assert_eq!(Error::lease(LeaseCode::AnotherExportIsActive).message(), "Beeper Message Like Me recovery: another export is active");
        assert_eq!(Error::lease(LeaseCode::PortableInvocationLeaseIdCollided).message(), "portable invocation lease ID collided");
        let field = Error::lease_with(LeaseCode::FieldIsInvalid, "export admission owner is invalid");
        assert_eq!(field.message(), "Beeper Message Like Me recovery: export admission owner is invalid");
        assert_eq!(field.lease_code(), Some(LeaseCode::FieldIsInvalid));
    }
}
