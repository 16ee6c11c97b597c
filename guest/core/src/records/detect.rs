//! Telling which record a file holds and whether it is valid, for `proclease validate`.
//!
//! The reference readers know which record they expect from the path they read, so a file in a
//! known collection is of that collection's kind whatever it says (a file under
//! `beeper-message-like-me-directory-leases/` is read as a directory lease even with another
//! `kind`). Elsewhere the kind is told from the content: the `kind` member of the Beeper records
//! and the state-home marker, `leaseId` for invocation leases, `pluginId` for a portable
//! identity; then from the name (`active.json`, `.io-state.json`). Once the kind is known the
//! file is checked exactly as the reference's reader of that kind would.

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
    /// The state home's ownership marker `.io-state.json` (§3.2).
    StateHomeMarker,
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
            RecordKind::StateHomeMarker => "state-home-marker",
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
    /// What the error means for this file and how to fix it, where the reference's message
    /// alone does not say.
    pub hint: Option<String>,
}

/// The state home's ownership marker's name and its only valid content (§3.2).
pub const STATE_HOME_MARKER: (&str, &str) = (".io-state.json", "{\"kind\":\"io-state\",\"schemaVersion\":1}\n");

/// Judges the text of the file named `file_name` (its last path component), its kind told from
/// its content, else its name.
pub fn inspect_file(file_name: &str, text: &str) -> FileVerdict {
    inspect_file_in("", file_name, text)
}

/// Judges the text of the file named `file_name` in the directory named `collection` (empty
/// when unknown): a known collection decides the kind, as it does for the reference's readers.
pub fn inspect_file_in(collection: &str, file_name: &str, text: &str) -> FileVerdict {
    let sha256 = digest::sha256_hex(text.as_bytes());
    let mut verdict = FileVerdict { kind: None, schema: None, sha256, canonical: false, error: None, hint: None };
    let from_place = kind_from_collection(collection).or_else(|| kind_from_name(file_name));
    let value = match canonical_json::parse(text) {
        Ok(value) => value,
        Err(error) => {
            verdict.kind = from_place;
            verdict.error = Some(match verdict.kind {
                Some(RecordKind::ExportAdmission) => Error::lease(LeaseCode::ExportAdmissionIsNotValidJson),
                Some(RecordKind::DirectoryLease) => match directory_lease::parse_file(text, file_name) {
                    Err(reader) => reader,
                    Ok(_) => Error::lease_with(LeaseCode::FileIsNotValidJson, &format!("file is not valid JSON ({error})")),
                },
                Some(RecordKind::StateHomeMarker) => Error::lease(LeaseCode::StateHomeMarkerIsInvalid),
                _ => Error::lease_with(LeaseCode::FileIsNotValidJson, &format!("file is not valid JSON ({error})")),
            });
            return verdict;
        }
    };
    verdict.canonical = canonical_json::is_canonical_file(text, &value);
    let kind = kind_from_collection(collection).or_else(|| kind_from_value(&value)).or_else(|| kind_from_name(file_name));
    let Some(kind) = kind else {
        verdict.error = Some(Error::lease(LeaseCode::NotAProcleaseRecord));
        return verdict;
    };
    verdict.kind = Some(kind);
    let outcome = match kind {
        RecordKind::ExportAdmission => export_admission::parse_file(text).map(|p| p.record.schema.name().to_string()),
        RecordKind::DirectoryLease => directory_lease::parse_file(text, file_name).map(|_| "v2".to_string()),
        RecordKind::PortableIdentity => portable_identity::parse_value(&value).map(|_| "v1".to_string()),
        RecordKind::InvocationLease => invocation_file(file_name, text, &value),
        RecordKind::StateHomeMarker if text == STATE_HOME_MARKER.1 => Ok("v1".to_string()),
        RecordKind::StateHomeMarker => Err(Error::lease(LeaseCode::StateHomeMarkerIsInvalid)),
    };
    match outcome {
        Ok(schema) => verdict.schema = Some(schema),
        Err(error) => {
            verdict.hint = hint(kind, file_name, text, &error);
            verdict.error = Some(error);
        }
    }
    verdict
}

/// What a refusal means for this very file, where the reference's message is shared by several
/// causes: a directory lease's `… is not canonical` covers both a name that is not `<id>.json`
/// and bytes that are not the canonical form.
fn hint(kind: RecordKind, file_name: &str, text: &str, error: &Error) -> Option<String> {
    if kind != RecordKind::DirectoryLease || error.lease_code() != Some(LeaseCode::DirectoryLeaseIsNotCanonical) {
        return None;
    }
    let parsed = directory_lease::parse_json(text).ok()?;
    let expected = parsed.record.file_name();
    if expected != file_name {
        Some(format!("its file name must be {expected} (the lease's id): a reader refuses it under any other name"))
    } else {
        Some("its bytes are not the canonical form (sorted keys, no spaces, one trailing newline) of the record they hold".to_string())
    }
}

fn kind_from_collection(collection: &str) -> Option<RecordKind> {
    let last = |path: &'static str| path.rsplit('/').next().unwrap_or(path);
    if collection == last(crate::directory_leases::DIRECTORY) {
        Some(RecordKind::DirectoryLease)
    } else if collection == last(crate::admission::DIRECTORY) {
        Some(RecordKind::ExportAdmission)
    } else if collection == last(crate::invocation_leases::DIRECTORY) {
        Some(RecordKind::InvocationLease)
    } else {
        None
    }
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
        Listed::Invalid { reason: InvalidReason::NotCanonical, .. } => Err(Error::lease(LeaseCode::PortableInvocationLeaseIsNotCanonicalAListingReportsItInvalid)),
        Listed::Invalid { reason, .. } => {
            Err(Error::lease_with(LeaseCode::InvocationLeaseListedInvalid, &format!("portable invocation lease is invalid ({}): a listing reports it invalid", reason.name())))
        }
        Listed::Ignored => Err(Error::lease(LeaseCode::PortableInvocationLeaseIdIsMalformed)),
    }
}

fn kind_from_value(value: &Value) -> Option<RecordKind> {
    let m = value.as_object()?;
    match m.get("kind").and_then(Value::as_str) {
        Some(export_admission::KIND) => return Some(RecordKind::ExportAdmission),
        Some(directory_lease::KIND) => return Some(RecordKind::DirectoryLease),
        Some("io-state") => return Some(RecordKind::StateHomeMarker),
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
    match file_name {
        "active.json" => Some(RecordKind::ExportAdmission),
        name if name == STATE_HOME_MARKER.0 => Some(RecordKind::StateHomeMarker),
        _ => None,
    }
}
