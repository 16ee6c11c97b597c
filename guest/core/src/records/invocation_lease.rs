//! The plugin invocation lease (`provider-plugin-state/.invocations/<leaseId>.json`), spec §6B.1
//! `parsePortableProviderPluginInvocationLease` (§6B.2) and the listing rule for one directory
//! entry (§6B.3). Messages carry no prefix.

use crate::error::LeaseCode;
use alloc::format;
use alloc::string::String;
use serde_json::{Map, Value};

use super::portable_identity::{self, PortableIdentity};
use super::{Owner, Parsed, has_exact_keys, object, string};
use crate::{Error, canonical_json, js};

/// The owner of an invocation lease: a process identity plus a per-lease token.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LeaseOwner {
    /// The process (pid any safe integer ≥ 1).
    pub process: Owner,
    /// A fresh lowercase UUID v4 per lease.
    pub token: String,
}

/// The containment status of a schema-2 lease (§6B.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ContainmentStatus {
    /// No plugin host started yet.
    ParentOwned,
    /// A host process is starting (recorded before it runs plugin code).
    HostStarting,
    /// The host process runs plugin code.
    HostActive,
    /// Cleanup durably completed; the lease may be released.
    CleanupComplete,
    /// Cleanup could not be confirmed (terminal).
    CleanupUnsafe,
}

impl ContainmentStatus {
    /// The status's name as records store it.
    pub fn name(self) -> &'static str {
        match self {
            ContainmentStatus::ParentOwned => "parent-owned",
            ContainmentStatus::HostStarting => "host-starting",
            ContainmentStatus::HostActive => "host-active",
            ContainmentStatus::CleanupComplete => "cleanup-complete",
            ContainmentStatus::CleanupUnsafe => "cleanup-unsafe",
        }
    }

    fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "parent-owned" => ContainmentStatus::ParentOwned,
            "host-starting" => ContainmentStatus::HostStarting,
            "host-active" => ContainmentStatus::HostActive,
            "cleanup-complete" => ContainmentStatus::CleanupComplete,
            "cleanup-unsafe" => ContainmentStatus::CleanupUnsafe,
            _ => return None,
        })
    }
}

/// Containment: a status and, except for `parent-owned`, the recorded host (required for
/// host-starting / host-active, optional for the cleanup states).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Containment {
    /// The status.
    pub status: ContainmentStatus,
    /// The recorded host process.
    pub host: Option<Owner>,
}

impl Containment {
    /// The record's JSON value (`{status}` for parent-owned, `{status, host}` otherwise).
    pub fn to_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("status".into(), Value::from(self.status.name()));
        if self.status != ContainmentStatus::ParentOwned {
            m.insert("host".into(), self.host.as_ref().map_or(Value::Null, Owner::to_value));
        }
        Value::Object(m)
    }
}

/// A plugin invocation lease, schema 1 (legacy) or 2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvocationLease {
    /// 1 or 2.
    pub schema_version: u8,
    /// Lowercase UUID v4; the file is `<leaseId>.json`.
    pub lease_id: String,
    /// Lowercase UUID v4 of the run.
    pub run_id: String,
    /// The exact plugin build and operation.
    pub identity: PortableIdentity,
    /// The invoking process and its token.
    pub owner: LeaseOwner,
    /// ISO-8601 UTC with milliseconds (`2026-07-25T12:00:00.000Z`).
    pub acquired_at: String,
    /// Schema 2 only.
    pub containment: Option<Containment>,
}

impl InvocationLease {
    /// The record's JSON value.
    pub fn to_value(&self) -> Value {
        let mut owner = Map::new();
        owner.insert("pid".into(), Value::from(self.owner.process.pid));
        owner.insert("token".into(), Value::from(self.owner.token.as_str()));
        owner.insert("bootId".into(), Value::from(self.owner.process.boot_id.as_str()));
        owner.insert("processStartId".into(), Value::from(self.owner.process.process_start_id.as_str()));
        let mut m = Map::new();
        m.insert("schemaVersion".into(), Value::from(self.schema_version));
        m.insert("leaseId".into(), Value::from(self.lease_id.as_str()));
        m.insert("runId".into(), Value::from(self.run_id.as_str()));
        m.insert("identity".into(), self.identity.to_value());
        m.insert("owner".into(), Value::Object(owner));
        m.insert("acquiredAt".into(), Value::from(self.acquired_at.as_str()));
        if let Some(containment) = &self.containment {
            m.insert("containment".into(), containment.to_value());
        }
        Value::Object(m)
    }

    /// The record with its canonical file text and sha256 (a *snapshot*, §6B.1).
    pub fn parsed(self) -> Parsed<Self> {
        let value = self.to_value();
        Parsed::new(self, &value)
    }
}

const V1_KEYS: &[&str] = &["acquiredAt", "identity", "leaseId", "owner", "runId", "schemaVersion"];
const V2_KEYS: &[&str] = &["acquiredAt", "containment", "identity", "leaseId", "owner", "runId", "schemaVersion"];

/// `parsePortableProviderPluginInvocationLease(value)` (§6B.2).
///
/// Errors (no prefix): `portable invocation lease must be an object`, `… has unsupported
/// fields`, `… schema is unsupported`, `… ID is malformed`, `portable invocation run ID is
/// malformed`, the §4 identity messages, `… owner …`, `… acquisition time is malformed`,
/// `… containment …`, `… host …`. An impossible calendar time (month 13, second 60), where the
/// reference's engine throws a `RangeError`, is reported as `… acquisition time is malformed`
/// as the spec recommends (§8 item 4).
pub fn parse_value(value: &Value) -> Result<InvocationLease, Error> {
    let m = record(value, "portable invocation lease")?;
    let legacy = m.get("schemaVersion").and_then(js::number) == Some(1.0);
    if legacy {
        if !has_exact_keys(m, V1_KEYS) {
            return Err(Error::lease(LeaseCode::PortableInvocationLeaseHasUnsupportedFields));
        }
    } else {
        if !has_exact_keys(m, V2_KEYS) {
            return Err(Error::lease(LeaseCode::PortableInvocationLeaseHasUnsupportedFields));
        }
        if m.get("schemaVersion").and_then(js::number) != Some(2.0) {
            return Err(Error::lease(LeaseCode::PortableInvocationLeaseSchemaIsUnsupported));
        }
    }
    let lease_id = uuid(m, "leaseId", LeaseCode::PortableInvocationLeaseIdIsMalformed)?;
    let run_id = uuid(m, "runId", LeaseCode::PortableInvocationRunIdIsMalformed)?;
    let identity = portable_identity::parse_value(&m["identity"])?;
    let owner = lease_owner(&m["owner"])?;
    let acquired_at = string(m, "acquiredAt").filter(|s| is_iso_timestamp(s)).ok_or_else(|| Error::lease(LeaseCode::PortableInvocationLeaseAcquisitionTimeIsMalformed))?;
    let containment = if legacy { None } else { Some(containment(&m["containment"])?) };
    Ok(InvocationLease { schema_version: if legacy { 1 } else { 2 }, lease_id, run_id, identity, owner, acquired_at: acquired_at.into(), containment })
}

/// Value mode from JSON text: [`parse_value`] of the decoded text, no canonical check.
///
/// Errors: `portable invocation lease is not valid JSON`, then those of [`parse_value`].
pub fn parse_json(text: &str) -> Result<Parsed<InvocationLease>, Error> {
    let value = canonical_json::parse(text).map_err(|_| Error::lease(LeaseCode::PortableInvocationLeaseIsNotValidJson))?;
    Ok(parse_value(&value)?.parsed())
}

/// Why a candidate entry of the lease collection lists as invalid (§6B.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InvalidReason {
    /// The entry is not a regular file or could not be read as present.
    Unreadable,
    /// The text is not JSON.
    InvalidJson,
    /// The JSON is not a valid lease; the reference's message.
    ParseError(Error),
    /// `lease.leaseId` differs from the file name.
    LeaseIdMismatch,
    /// The text is not the canonical file of the lease.
    NotCanonical,
}

impl InvalidReason {
    /// The diagnostic name used by the vectors: `unreadable`, `invalid-json`, `parse-error`,
    /// `lease-id-mismatch`, `not-canonical`.
    pub fn name(&self) -> &'static str {
        match self {
            InvalidReason::Unreadable => "unreadable",
            InvalidReason::InvalidJson => "invalid-json",
            InvalidReason::ParseError(_) => "parse-error",
            InvalidReason::LeaseIdMismatch => "lease-id-mismatch",
            InvalidReason::NotCanonical => "not-canonical",
        }
    }
}

/// How one directory entry of the lease collection lists (§6B.3).
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(clippy::large_enum_variant)] // almost every entry is a valid lease: boxing it would cost each one an allocation
pub enum Listed {
    /// Not `<lowercase uuid v4>.json`: not a lease candidate (e.g. a writer's temporary).
    Ignored,
    /// A candidate that is not a valid lease: listed as `{leaseId, invalid: true}`.
    Invalid {
        /// The file name without `.json`.
        lease_id: String,
        /// Why (diagnostic only; the listing exposes just `invalid`).
        reason: InvalidReason,
    },
    /// A valid lease snapshot.
    Valid(Parsed<InvocationLease>),
}

/// The lease id a directory entry name stands for, if it is a lease candidate
/// (`<lowercase uuid v4>.json`).
pub fn candidate_lease_id(file_name: &str) -> Option<&str> {
    file_name.strip_suffix(".json").filter(|id| js::is_uuid_v4(id))
}

/// Classifies one entry of the lease collection from its name and text (§6B.3 step 4).
pub fn classify_entry(file_name: &str, text: &str) -> Listed {
    let Some(lease_id) = candidate_lease_id(file_name) else {
        return Listed::Ignored;
    };
    let invalid = |reason| Listed::Invalid { lease_id: lease_id.into(), reason };
    let Ok(value) = canonical_json::parse(text) else {
        return invalid(InvalidReason::InvalidJson);
    };
    let lease = match parse_value(&value) {
        Ok(lease) => lease,
        Err(error) => return invalid(InvalidReason::ParseError(error)),
    };
    if lease.lease_id != lease_id {
        return invalid(InvalidReason::LeaseIdMismatch);
    }
    let parsed = lease.parsed();
    if parsed.canonical != text {
        return invalid(InvalidReason::NotCanonical);
    }
    Listed::Valid(parsed)
}

/// The helper `record(value, label)` of §6B.2 for JSON values: only the "must be an object"
/// case can arise (JSON has no prototypes, symbols or accessors).
fn record<'a>(value: &'a Value, label: &str) -> Result<&'a Map<String, Value>, Error> {
    object(value).ok_or_else(|| Error::lease_with(LeaseCode::FieldMustBeAnObject, &format!("{label} must be an object")))
}

fn uuid(m: &Map<String, Value>, key: &str, code: LeaseCode) -> Result<String, Error> {
    super::uuid_member(m, key).ok_or_else(|| Error::lease(code))
}

fn lease_owner(value: &Value) -> Result<LeaseOwner, Error> {
    const LABEL: &str = "portable invocation lease owner";
    let m = record(value, LABEL)?;
    if !has_exact_keys(m, &["bootId", "pid", "processStartId", "token"]) {
        return Err(Error::lease_with(LeaseCode::FieldHasUnsupportedFields, &format!("{LABEL} has unsupported fields")));
    }
    let malformed = || Error::lease_with(LeaseCode::FieldIsMalformed, &format!("{LABEL} is malformed"));
    let token = super::uuid_member(m, "token").ok_or_else(malformed)?;
    let process = process_fields(m).ok_or_else(malformed)?;
    Ok(LeaseOwner { process, token })
}

/// `parseProcessOwner(value, label)` (§6B.2): pid a safe integer ≥ 1 (no upper bound),
/// lowercase hex digests.
fn process_owner(value: &Value, label: &str) -> Result<Owner, Error> {
    let m = record(value, label)?;
    if !has_exact_keys(m, &["bootId", "pid", "processStartId"]) {
        return Err(Error::lease_with(LeaseCode::FieldHasUnsupportedFields, &format!("{label} has unsupported fields")));
    }
    process_fields(m).ok_or_else(|| Error::lease_with(LeaseCode::FieldIsMalformed, &format!("{label} is malformed")))
}

fn process_fields(m: &Map<String, Value>) -> Option<Owner> {
    let pid = m.get("pid").and_then(js::safe_integer).filter(|p| *p >= 1)?;
    Some(Owner { pid: pid as u64, boot_id: super::digest_member(m, "bootId")?, process_start_id: super::digest_member(m, "processStartId")? })
}

fn containment(value: &Value) -> Result<Containment, Error> {
    const LABEL: &str = "portable invocation lease containment";
    const HOST: &str = "portable invocation lease host";
    let m = record(value, LABEL)?;
    let unsupported = || Error::lease_with(LeaseCode::FieldHasUnsupportedFields, &format!("{LABEL} has unsupported fields"));
    let status = string(m, "status").and_then(ContainmentStatus::from_name);
    match status {
        Some(ContainmentStatus::ParentOwned) => {
            if !has_exact_keys(m, &["status"]) {
                return Err(unsupported());
            }
            Ok(Containment { status: ContainmentStatus::ParentOwned, host: None })
        }
        Some(status @ (ContainmentStatus::HostStarting | ContainmentStatus::HostActive)) => {
            if !has_exact_keys(m, &["host", "status"]) {
                return Err(unsupported());
            }
            Ok(Containment { status, host: Some(process_owner(&m["host"], HOST)?) })
        }
        Some(status @ (ContainmentStatus::CleanupComplete | ContainmentStatus::CleanupUnsafe)) => {
            if !has_exact_keys(m, &["host", "status"]) {
                return Err(unsupported());
            }
            let host = match &m["host"] {
                Value::Null => None,
                host => Some(process_owner(host, HOST)?),
            };
            Ok(Containment { status, host })
        }
        None => Err(Error::lease_with(LeaseCode::FieldIsMalformed, &format!("{LABEL} is malformed"))),
    }
}

/// `timestamp(value)` (§6B.2): `^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$` naming a real
/// UTC instant that `Date` would print back identically: month 1–12, a day that exists in that
/// month (proleptic Gregorian), hour 0–23, minute and second 0–59.
pub fn is_iso_timestamp(s: &str) -> bool {
    let b = s.as_bytes();
    let shape = b.len() == 24
        && b.iter().enumerate().all(|(i, &c)| match i {
            4 | 7 => c == b'-',
            10 => c == b'T',
            13 | 16 => c == b':',
            19 => c == b'.',
            23 => c == b'Z',
            _ => c.is_ascii_digit(),
        });
    if !shape {
        return false;
    }
    let num = |from: usize, to: usize| s[from..to].bytes().fold(0u32, |n, c| n * 10 + u32::from(c - b'0'));
    let (year, month, day) = (num(0, 4), num(5, 7), num(8, 10));
    let (hour, minute, second) = (num(11, 13), num(14, 16), num(17, 19));
    (1..=12).contains(&month) && (1..=days_in_month(year, month)).contains(&day) && hour <= 23 && minute <= 59 && second <= 59
}

fn days_in_month(year: u32, month: u32) -> u32 {
    match month {
        2 if (year.is_multiple_of(4) && !year.is_multiple_of(100)) || year.is_multiple_of(400) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Formats ms since the Unix epoch as `Date.prototype.toISOString` does for years 0–9999
/// (`YYYY-MM-DDTHH:mm:ss.sssZ`); `None` outside that range.
pub fn iso_timestamp(ms: i64) -> Option<String> {
    const DAY_MS: i64 = 86_400_000;
    let days = ms.div_euclid(DAY_MS);
    let in_day = ms.rem_euclid(DAY_MS);
    // Civil-from-days (H. Hinnant), valid for the whole proleptic Gregorian calendar.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    if !(0..=9999).contains(&year) {
        return None;
    }
    Some(format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z", in_day / 3_600_000, in_day / 60_000 % 60, in_day / 1000 % 60, in_day % 1000))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_round_trip_like_date() {
        assert!(is_iso_timestamp("2026-07-25T12:00:00.000Z"));
        assert!(is_iso_timestamp("2024-02-29T23:59:59.999Z"));
        assert!(!is_iso_timestamp("2026-02-29T00:00:00.000Z"));
        assert!(!is_iso_timestamp("2026-13-01T00:00:00.000Z"));
        assert!(!is_iso_timestamp("2026-01-01T24:00:00.000Z"));
        assert!(!is_iso_timestamp("2026-01-01T00:00:60.000Z"));
        assert_eq!(iso_timestamp(0).unwrap(), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso_timestamp(1_785_067_200_000).unwrap(), "2026-07-26T12:00:00.000Z");
    }
}
