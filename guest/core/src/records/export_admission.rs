//! The export admission record (`recovery/beeper-message-like-me-export-admission/active.json`),
//! spec §6A.2–6A.3 `parseExportAdmission`.

use crate::error::LeaseCode;
use alloc::format;
use alloc::string::String;
use serde_json::{Map, Value};

use super::{Owner, Parsed, has_exact_keys, object, string, uuid_member};
use crate::{Error, canonical_json, js};

/// The `kind` of every export admission record.
pub const KIND: &str = "beeper-message-like-me-export-admission";

/// Which of the three readable schemas a record has (§6A.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Schema {
    /// `{schemaVersion:1, kind, id, owner}` (legacy, readable only).
    V1,
    /// Schema 2 without `revision` (legacy, readable only).
    V2PreRevision,
    /// Schema 2 with `revision` (current; the only one written).
    V2,
}

impl Schema {
    /// The name used by the vectors and the CLI: `v1`, `v2-pre-revision`, `v2`.
    pub fn name(self) -> &'static str {
        match self {
            Schema::V1 => "v1",
            Schema::V2PreRevision => "v2-pre-revision",
            Schema::V2 => "v2",
        }
    }
}

/// The lifecycle phase of a schema-2 admission (§6A.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    /// The supervising process holds the slot; no helper.
    ParentOwned,
    /// A helper is being launched; its identity is not known yet.
    HelperLaunching,
    /// A helper runs; `helperOwner` names it.
    HelperActive,
    /// Cleanup could not be confirmed; only a proved reboot clears it.
    CleanupUnsafe,
}

impl Phase {
    /// The phase's name as records store it.
    pub fn name(self) -> &'static str {
        match self {
            Phase::ParentOwned => "parent-owned",
            Phase::HelperLaunching => "helper-launching",
            Phase::HelperActive => "helper-active",
            Phase::CleanupUnsafe => "cleanup-unsafe",
        }
    }

    /// The phase named `name`, if any.
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "parent-owned" => Phase::ParentOwned,
            "helper-launching" => Phase::HelperLaunching,
            "helper-active" => Phase::HelperActive,
            "cleanup-unsafe" => Phase::CleanupUnsafe,
            _ => return None,
        })
    }
}

/// An export admission claim of any readable schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportAdmission {
    /// Which schema the record has.
    pub schema: Schema,
    /// The claim id (lowercase UUID v4).
    pub id: String,
    /// The supervising process.
    pub owner: Owner,
    /// The helper process (schema 2 only; `None` for v1 and when no helper is recorded).
    pub helper_owner: Option<Owner>,
    /// The lifecycle phase (`None` for v1).
    pub phase: Option<Phase>,
    /// The revision, rotated on every write (current v2 only).
    pub revision: Option<String>,
}

impl ExportAdmission {
    /// The record's JSON value, with exactly the members of its schema.
    pub fn to_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("schemaVersion".into(), Value::from(if self.schema == Schema::V1 { 1 } else { 2 }));
        m.insert("kind".into(), Value::from(KIND));
        m.insert("id".into(), Value::from(self.id.as_str()));
        m.insert("owner".into(), self.owner.to_value());
        if self.schema != Schema::V1 {
            let helper = self.helper_owner.as_ref().map_or(Value::Null, Owner::to_value);
            m.insert("helperOwner".into(), helper);
            let phase = self.phase.unwrap_or(Phase::ParentOwned);
            m.insert("phase".into(), Value::from(phase.name()));
        }
        if let (Schema::V2, Some(revision)) = (self.schema, &self.revision) {
            m.insert("revision".into(), Value::from(revision.as_str()));
        }
        Value::Object(m)
    }

    /// The record with its canonical file text and sha256.
    pub fn parsed(self) -> Parsed<Self> {
        let value = self.to_value();
        Parsed::new(self, &value)
    }
}

const V1_KEYS: &[&str] = &["id", "kind", "owner", "schemaVersion"];
const V2_KEYS: &[&str] = &["helperOwner", "id", "kind", "owner", "phase", "revision", "schemaVersion"];
const V2_PRE_REVISION_KEYS: &[&str] = &["helperOwner", "id", "kind", "owner", "phase", "schemaVersion"];

/// `parseExportAdmission(value)` (§6A.3), in the reference's check order.
///
/// Errors (all prefixed `Beeper Message Like Me recovery: export admission `): `must be a plain
/// object`, `has an unsupported shape`, `identity is invalid`, `lifecycle is invalid`,
/// `owner …`, `helper owner …`, `revision is invalid`.
pub fn parse_value(value: &Value) -> Result<ExportAdmission, Error> {
    let m = object(value).ok_or_else(|| Error::lease(LeaseCode::ExportAdmissionMustBeAPlainObject))?;
    let schema_number = m.get("schemaVersion").and_then(js::number);
    let legacy = schema_number == Some(1.0);
    let current_v2 = schema_number == Some(2.0) && m.contains_key("revision");
    let keys = if legacy {
        V1_KEYS
    } else if current_v2 {
        V2_KEYS
    } else {
        V2_PRE_REVISION_KEYS
    };
    if !has_exact_keys(m, keys) {
        return Err(Error::lease(LeaseCode::ExportAdmissionHasAnUnsupportedShape));
    }
    let id = uuid_member(m, "id");
    let identity_ok = (legacy || schema_number == Some(2.0)) && string(m, "kind") == Some(KIND);
    let id = match (identity_ok, id) {
        (true, Some(id)) => id,
        _ => return Err(Error::lease(LeaseCode::ExportAdmissionIdentityIsInvalid)),
    };
    if legacy {
        let owner = beeper_owner(&m["owner"], "export admission owner")?;
        return Ok(ExportAdmission { schema: Schema::V1, id, owner, helper_owner: None, phase: None, revision: None });
    }
    let helper_value = &m["helperOwner"];
    let phase = string(m, "phase").and_then(Phase::from_name);
    let lifecycle_ok = match phase {
        Some(Phase::HelperActive) => !helper_value.is_null(),
        Some(Phase::ParentOwned | Phase::HelperLaunching) => helper_value.is_null(),
        Some(Phase::CleanupUnsafe) => true,
        None => false,
    };
    let phase = match (lifecycle_ok, phase) {
        (true, Some(phase)) => phase,
        _ => return Err(Error::lease(LeaseCode::ExportAdmissionLifecycleIsInvalid)),
    };
    let owner = beeper_owner(&m["owner"], "export admission owner")?;
    let helper_owner = if helper_value.is_null() { None } else { Some(beeper_owner(helper_value, "export admission helper owner")?) };
    let (schema, revision) = if current_v2 {
        let revision = uuid_member(m, "revision").ok_or_else(|| Error::lease(LeaseCode::ExportAdmissionRevisionIsInvalid))?;
        (Schema::V2, Some(revision))
    } else {
        (Schema::V2PreRevision, None)
    };
    Ok(ExportAdmission { schema, id, owner, helper_owner, phase: Some(phase), revision })
}

/// Value mode from JSON text: [`parse_value`] of the decoded text, no canonical check.
///
/// Errors: `export admission is not valid JSON`, then those of [`parse_value`].
pub fn parse_json(text: &str) -> Result<Parsed<ExportAdmission>, Error> {
    let value = canonical_json::parse(text).map_err(|_| Error::lease(LeaseCode::ExportAdmissionIsNotValidJson))?;
    Ok(parse_value(&value)?.parsed())
}

/// File mode (§6A.5 step 4a): JSON parse, [`parse_value`], then the text must be exactly the
/// canonical file, else `export admission is not canonical`.
pub fn parse_file(text: &str) -> Result<Parsed<ExportAdmission>, Error> {
    let parsed = parse_json(text)?;
    if parsed.canonical != text {
        return Err(Error::lease(LeaseCode::ExportAdmissionIsNotCanonical));
    }
    Ok(parsed)
}

/// `owner(value, label)` of §6A.3 for Beeper records: a plain object with exactly
/// `bootId, pid, processStartId`; pid a safe integer in 1..=2 147 483 647; digests lowercase hex.
///
/// Errors: `<label> must be a plain object`, `<label> has an unsupported shape`, `<label> is
/// invalid` (prefixed).
pub(crate) fn beeper_owner(value: &Value, label: &str) -> Result<Owner, Error> {
    let m = object(value).ok_or_else(|| Error::lease_with(LeaseCode::FieldMustBeAPlainObject, &format!("{label} must be a plain object")))?;
    if !has_exact_keys(m, &["bootId", "pid", "processStartId"]) {
        return Err(Error::lease_with(LeaseCode::FieldHasAnUnsupportedShape, &format!("{label} has an unsupported shape")));
    }
    let pid = m.get("pid").and_then(js::safe_integer).filter(|p| (1..=2_147_483_647).contains(p));
    let boot_id = super::digest_member(m, "bootId");
    let start = super::digest_member(m, "processStartId");
    match (pid, boot_id, start) {
        (Some(pid), Some(boot_id), Some(process_start_id)) => Ok(Owner { pid: pid as u64, boot_id, process_start_id }),
        _ => Err(Error::lease_with(LeaseCode::FieldIsInvalid, &format!("{label} is invalid"))),
    }
}
