//! Telling which record a file holds and whether it is valid, for `proclease validate`.
//!
//! The reference readers know which record they expect from the path they read. A user pointing
//! the CLI at a file does not, so the kind is told from the content: the `kind` member of the
//! Beeper records, `leaseId` for invocation leases, `pluginId` for a portable identity. Once the
//! kind is known the file is checked exactly as the reference's reader of that kind would.

use crate::error::LeaseCode;
use alloc::format;
use alloc::string::{String, ToString};
use serde_json::Value;

use super::invocation_lease::{self, InvalidReason, Listed};
use super::{directory_lease, export_admission, portable_identity};
use crate::{Error, canonical_json, digest};

/// The record kinds proclease reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecordKind {
    /// `recovery/beeper-message-like-me-export-admission/active.json` (§6A.2).
    ExportAdmission,
    /// `recovery/beeper-message-like-me-directory-leases/<id>.json` (§6A.2).
    DirectoryLease,
    /// `provider-plugin-state/.invocations/<leaseId>.json` (§6B.1).
    InvocationLease,
    /// A portable operation identity document (§4).
    PortableIdentity,
}

impl RecordKind {
    /// The kind's name: `export-admission`, `directory-lease`, `invocation-lease`,
    /// `portable-identity`.
    pub fn name(self) -> &'static str {
        match self {
            RecordKind::ExportAdmission => "export-admission",
            RecordKind::DirectoryLease => "directory-lease",
            RecordKind::InvocationLease => "invocation-lease",
            RecordKind::PortableIdentity => "portable-identity",
        }
    }
}

/// What a record file is and whether a reference reader accepts it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileVerdict {
    /// The record kind, when it can be told.
    pub kind: Option<RecordKind>,
    /// The schema (`v1`, `v2-pre-revision`, `v2`) when the record is structurally valid.
    pub schema: Option<String>,
    /// sha256 of the file's bytes as they are (its `contentSha256` if it is valid).
    pub sha256: String,
    /// Whether the text is exactly canonical JSON + `\n` of what it decodes to.
    pub canonical: bool,
    /// Why a reader refuses the file: the reference's exact message where it has one. `None`
    /// means valid.
    pub error: Option<Error>,
}

/// Judges the text of the file named `file_name` (its last path component).
pub fn inspect_file(file_name: &str, text: &str) -> FileVerdict {
    let sha256 = digest::sha256_hex(text.as_bytes());
    let mut verdict = FileVerdict { kind: None, schema: None, sha256, canonical: false, error: None };
    let value = match canonical_json::parse(text) {
        Ok(value) => value,
        Err(error) => {
            verdict.kind = kind_from_name(file_name);
            verdict.error = Some(match verdict.kind {
                Some(RecordKind::ExportAdmission) => Error::lease(LeaseCode::ExportAdmissionIsNotValidJson),
                _ => Error::lease_with(LeaseCode::FileIsNotValidJson, &format!("file is not valid JSON ({error})")),
            });
            return verdict;
        }
    };
    verdict.canonical = canonical_json::is_canonical_file(text, &value);
    let Some(kind) = kind_from_value(&value).or_else(|| kind_from_name(file_name)) else {
        verdict.error = Some(Error::lease(LeaseCode::NotAProcleaseRecord));
        return verdict;
    };
    verdict.kind = Some(kind);
    let outcome = match kind {
        RecordKind::ExportAdmission => {
            export_admission::parse_file(text).map(|p| p.record.schema.name().to_string())
        }
        RecordKind::DirectoryLease => directory_lease::parse_file(text, file_name).map(|_| "v2".to_string()),
        RecordKind::PortableIdentity => portable_identity::parse_value(&value).map(|_| "v1".to_string()),
        RecordKind::InvocationLease => invocation_file(file_name, text, &value),
    };
    match outcome {
        Ok(schema) => verdict.schema = Some(schema),
        Err(error) => verdict.error = Some(error),
    }
    verdict
}

/// An invocation lease file, judged as the listing does (§6B.3), with a message for each reason
/// the listing would mark it invalid.
fn invocation_file(file_name: &str, text: &str, value: &Value) -> Result<String, Error> {
    let lease = invocation_lease::parse_value(value)?;
    let schema = format!("v{}", lease.schema_version);
    let expected_name = format!("{}.json", lease.lease_id);
    let name = if file_name == expected_name { file_name } else { expected_name.as_str() };
    match invocation_lease::classify_entry(name, text) {
        Listed::Valid(_) if file_name == expected_name => Ok(schema),
        Listed::Valid(_) => Err(Error::lease_with(
            LeaseCode::InvocationLeaseFileNameMismatch,
            &format!("portable invocation lease file name must be {expected_name}: a listing ignores or rejects this file"),
        )),
        Listed::Invalid { reason: InvalidReason::NotCanonical, .. } => {
            Err(Error::lease(LeaseCode::PortableInvocationLeaseIsNotCanonicalAListingReportsItInvalid))
        }
        Listed::Invalid { reason, .. } => Err(Error::lease_with(
            LeaseCode::InvocationLeaseListedInvalid,
            &format!("portable invocation lease is invalid ({}): a listing reports it invalid", reason.name()),
        )),
        Listed::Ignored => Err(Error::lease(LeaseCode::PortableInvocationLeaseIdIsMalformed)),
    }
}

fn kind_from_value(value: &Value) -> Option<RecordKind> {
    let m = value.as_object()?;
    match m.get("kind").and_then(Value::as_str) {
        Some(export_admission::KIND) => return Some(RecordKind::ExportAdmission),
        Some(directory_lease::KIND) => return Some(RecordKind::DirectoryLease),
        _ => {}
    }
    if m.contains_key("leaseId") || m.contains_key("runId") {
        Some(RecordKind::InvocationLease)
    } else if m.contains_key("pluginId") {
        Some(RecordKind::PortableIdentity)
    } else {
        None
    }
}

fn kind_from_name(file_name: &str) -> Option<RecordKind> {
    (file_name == "active.json").then_some(RecordKind::ExportAdmission)
}
