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
    /// Boxed: a refusal stays small in every `Result` (most have no cause).
    cause: Option<alloc::boxed::Box<Failure>>,
}

/// What kind of failure a storage or system error is (WIT `failure-kind`), for a program to
/// branch on; the message says the rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureKind {
    /// The operating system failed an operation ([`Failure::errno`] names it: `EIO`, `ENOSPC`, …).
    Io,
    /// The operating system refused for want of permission, or the file system is read-only
    /// (`EACCES`, `EPERM`, `EROFS`).
    Permission,
    /// The store could not be reached or did not answer in time (cluster mode's etcd).
    Unreachable,
    /// Another writer of the record is mid-mutation (the reference's `state file mutation is
    /// already active`): retry in a moment.
    Contended,
    /// The path is outside the state layout or outside every granted workspace root.
    Refused,
    /// Something on disk is not safe to trust (a symbolic link, an owner or mode, a bound, a
    /// file that changed while read); nothing was changed.
    Unsafe,
    /// An identity-bound removal found another directory at the path (the reference's
    /// `recursive removal target changed identity`).
    IdentityChanged,
    /// A system fact was unavailable: boot id, process identity, clock, plugin catalog.
    Unavailable,
    /// A lease rule refused, reported inside another failure: the cause of a refusal that
    /// wraps it, or a storage failure a refusal stopped (a creation intent's).
    Refusal,
}

impl FailureKind {
    /// Every kind, in WIT order.
    pub const ALL: [FailureKind; 9] = [
        FailureKind::Io,
        FailureKind::Permission,
        FailureKind::Unreachable,
        FailureKind::Contended,
        FailureKind::Refused,
        FailureKind::Unsafe,
        FailureKind::IdentityChanged,
        FailureKind::Unavailable,
        FailureKind::Refusal,
    ];

    /// The kind's WIT name (kebab-case).
    pub fn name(self) -> &'static str {
        match self {
            FailureKind::Io => "io",
            FailureKind::Permission => "permission",
            FailureKind::Unreachable => "unreachable",
            FailureKind::Contended => "contended",
            FailureKind::Refused => "refused",
            FailureKind::Unsafe => "unsafe",
            FailureKind::IdentityChanged => "identity-changed",
            FailureKind::Unavailable => "unavailable",
            FailureKind::Refusal => "refusal",
        }
    }

    /// The kind of an operating-system error named `errno` (`EACCES`, `EPERM` and `EROFS` are
    /// [`FailureKind::Permission`], every other [`FailureKind::Io`]).
    pub fn of_errno(errno: &str) -> FailureKind {
        match errno {
            "EACCES" | "EPERM" | "EROFS" => FailureKind::Permission,
            _ => FailureKind::Io,
        }
    }
}

/// A storage or system failure as it crosses every boundary (WIT `failure`): its kind, its
/// whole message (naming the path and what the user can do), and — when the operating system
/// reported it — the errno's symbolic name, the path and the operation. Two failures are equal
/// when every field is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// What kind of failure.
    pub kind: FailureKind,
    /// The whole message (e.g. `recovery/…/active.json: writing the record failed: Read-only
    /// file system (os error 30)`).
    pub message: String,
    /// The errno's symbolic name (`EROFS`), when the operating system reported one.
    pub errno: Option<String>,
    /// The path it concerns: a store path relative to the state home, or an absolute workspace
    /// path.
    pub path: Option<String>,
    /// What was being done (`writing the record`, `taking the collection lock`).
    pub operation: Option<String>,
}

impl Failure {
    /// A failure of `kind` with `message` and no operating-system facts.
    pub fn new(kind: FailureKind, message: impl Into<String>) -> Failure {
        Failure { kind, message: message.into(), errno: None, path: None, operation: None }
    }

    /// An operating-system error `errno` (its symbolic name) while doing `operation` on
    /// `path`; the kind follows from the errno ([`FailureKind::of_errno`]).
    pub fn os(errno: &str, path: &str, operation: &str, message: impl Into<String>) -> Failure {
        Failure {
            kind: FailureKind::of_errno(errno),
            message: message.into(),
            errno: Some(String::from(errno)),
            path: Some(String::from(path)),
            operation: Some(String::from(operation)),
        }
    }

    /// [`FailureKind::Io`] with `message`.
    pub fn io(message: impl Into<String>) -> Failure {
        Failure::new(FailureKind::Io, message)
    }

    /// [`FailureKind::Contended`] with `message`.
    pub fn contended(message: impl Into<String>) -> Failure {
        Failure::new(FailureKind::Contended, message)
    }

    /// [`FailureKind::Refused`] with `message`.
    pub fn refused(message: impl Into<String>) -> Failure {
        Failure::new(FailureKind::Refused, message)
    }

    /// [`FailureKind::Unsafe`] with `message`.
    pub fn unsafe_(message: impl Into<String>) -> Failure {
        Failure::new(FailureKind::Unsafe, message)
    }

    /// [`FailureKind::IdentityChanged`] with `message`.
    pub fn identity_changed(message: impl Into<String>) -> Failure {
        Failure::new(FailureKind::IdentityChanged, message)
    }

    /// [`FailureKind::Unavailable`] with `message`.
    pub fn unavailable(message: impl Into<String>) -> Failure {
        Failure::new(FailureKind::Unavailable, message)
    }

    /// The whole message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// This failure with `context: ` put before its message (kind and facts kept).
    pub fn in_context(mut self, context: &str) -> Failure {
        self.message = alloc::format!("{context}: {}", self.message);
        self
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl core::error::Error for Failure {}

impl core::error::Error for LeaseError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        self.cause.as_deref().map(|cause| cause as &(dyn core::error::Error + 'static))
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

    /// This refusal with `cause`: the failure it wraps.
    pub fn with_cause(mut self, cause: Failure) -> LeaseError {
        self.cause = Some(alloc::boxed::Box::new(cause));
        self
    }

    /// The failure this refusal wraps (e.g. the store's `… Read-only file system`, kind
    /// [`FailureKind::Permission`], errno `EROFS`), if any. Never part of
    /// [`LeaseError::message`], which stays the reference's.
    pub fn cause(&self) -> Option<&Failure> {
        self.cause.as_deref()
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

/// The reference's message, then — for a refusal that wraps a failure — `: ` and the cause's
/// message (`… export admission could not be acquired safely: recovery/…: … Read-only file
/// system`), so that a refusal printed alone says why. [`LeaseError::message`] is the
/// reference's message alone; the cause is also the [`core::error::Error::source`] (a printer
/// of the whole chain skips a cause its line already shows).
impl fmt::Display for LeaseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        match &self.cause {
            Some(cause) => write!(f, ": {}", cause.message),
            None => Ok(()),
        }
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
    /// path and what the user can do, the kind and facts what a program branches on.
    Storage(Failure),
    /// A system fact was unavailable (boot id, process identity, clock); where the reference fixes
    /// the message (e.g. `exact live process identity is unavailable`) it is that message.
    System(Failure),
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

    /// A system fact unavailable: [`Error::System`] of kind [`FailureKind::Unavailable`].
    pub fn unavailable<M: Into<String>>(message: M) -> Self {
        Error::System(Failure::unavailable(message))
    }

    /// The refusal `code`, wrapping `cause` (the reference's "…safely" wrappings): the
    /// message stays the reference's; `cause`'s message is kept as the refusal's cause.
    ///
    /// A wrapped refusal that has a cause of its own becomes that cause (its kind and facts)
    /// with the refusal's message before it; one without becomes a [`FailureKind::Refusal`].
    pub fn wrapping(code: LeaseCode, cause: &Error) -> Self {
        let inner = match cause {
            Error::Lease(lease) => match lease.cause() {
                Some(deeper) => deeper.clone().in_context(lease.message()),
                None => Failure::new(FailureKind::Refusal, lease.message()),
            },
            Error::Storage(failure) | Error::System(failure) => failure.clone(),
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
            Error::Storage(f) | Error::System(f) => f.message(),
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

    #[test]
    fn a_wrapping_refusal_keeps_the_reference_message_and_the_cause_s_kind_and_facts() {
        let store = Failure::os("EROFS", "recovery/x/active.json", "writing the record", "recovery/x/active.json: writing the record failed: Read-only file system");
        assert_eq!(store.kind, FailureKind::Permission, "EROFS is a permission failure");
        let wrapped = Error::wrapping(LeaseCode::ExportAdmissionCouldNotBeAcquiredSafely, &Error::Storage(store.clone()));
        let Error::Lease(refusal) = &wrapped else { panic!("a refusal") };
        assert_eq!(refusal.message(), "Beeper Message Like Me recovery: export admission could not be acquired safely");
        assert_eq!(wrapped.message(), refusal.message(), "the error's message is the reference's");
        assert_eq!(refusal.cause(), Some(&store), "the cause is the store's failure, kind and facts kept");
        assert_eq!(
            alloc::format!("{refusal}"),
            "Beeper Message Like Me recovery: export admission could not be acquired safely: recovery/x/active.json: writing the record failed: Read-only file system",
            "shown alone, the refusal says why"
        );
        let source = core::error::Error::source(refusal).map(alloc::string::ToString::to_string);
        assert_eq!(source.as_deref(), Some(store.message()), "the cause is the source");

        // Wrapped again: the deeper cause, the inner refusal's message before it.
        let twice = Error::wrapping(LeaseCode::ExportAdmissionCouldNotBeReleasedSafely, &wrapped);
        let Error::Lease(outer) = &twice else { panic!("a refusal") };
        let cause = outer.cause().expect("a cause");
        assert_eq!((cause.kind, cause.errno.as_deref(), cause.path.as_deref()), (FailureKind::Permission, Some("EROFS"), Some("recovery/x/active.json")));
        assert!(cause.message.starts_with("Beeper Message Like Me recovery: export admission could not be acquired safely: recovery/x/active.json"), "{cause}");

        // A refusal without a cause of its own becomes a cause of kind refusal.
        let bare = Error::wrapping(LeaseCode::ExportAdmissionCouldNotBeAcquiredSafely, &Error::lease(LeaseCode::AnotherExportIsActive));
        let Error::Lease(bare) = bare else { panic!("a refusal") };
        assert_eq!(bare.cause().map(|c| (c.kind, c.message.as_str())), Some((FailureKind::Refusal, "Beeper Message Like Me recovery: another export is active")));
    }

    #[test]
    fn errno_names_decide_the_kind_and_every_kind_has_its_wit_name() {
        for errno in ["EACCES", "EPERM", "EROFS"] {
            assert_eq!(FailureKind::of_errno(errno), FailureKind::Permission, "{errno}");
        }
        for errno in ["EIO", "ENOSPC", "EXDEV", "errno 4095"] {
            assert_eq!(FailureKind::of_errno(errno), FailureKind::Io, "{errno}");
        }
        let names: alloc::vec::Vec<&str> = FailureKind::ALL.iter().map(|k| k.name()).collect();
        assert_eq!(names, ["io", "permission", "unreachable", "contended", "refused", "unsafe", "identity-changed", "unavailable", "refusal"]);
    }
}
