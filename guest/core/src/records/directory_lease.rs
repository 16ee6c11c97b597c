//! The directory lease claim (`recovery/beeper-message-like-me-directory-leases/<id>.json`),
//! spec §6A.2–6A.3 `parseClaim`, and the path rules it shares with lease creation.

use crate::error::LeaseCode;
use alloc::format;
use alloc::string::String;
use serde_json::{Map, Value};

use super::export_admission::beeper_owner;
use super::{DirectoryIdentity, Owner, Parsed, has_exact_keys, object, string, uuid_member};
use crate::{Error, canonical_json, js};

/// The `kind` of every directory lease record.
pub const KIND: &str = "beeper-message-like-me-directory-lease";

/// The longest accepted path, in UTF-16 code units (§6A.3 `boundedPath`, §8 item 5).
pub const MAX_PATH_UTF16: usize = 4096;

/// What a leased directory is for (§6A.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// A working directory for a helper; has the raw lifecycle.
    RawWorking,
    /// A staging directory that a successful run publishes to `outputRoot`; stays `preparing`.
    BundleStage,
}

impl Role {
    /// The role's name as records store it.
    pub fn name(self) -> &'static str {
        match self {
            Role::RawWorking => "raw-working",
            Role::BundleStage => "bundle-stage",
        }
    }

    /// The role named `name`, if any.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "raw-working" => Some(Role::RawWorking),
            "bundle-stage" => Some(Role::BundleStage),
            _ => None,
        }
    }
}

/// The raw lifecycle phase of a directory lease (§6A.1, §6A.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Created; no helper launched yet.
    Preparing,
    /// A helper is being launched; `recoverAfterMs` bounds how long that may take.
    Launching,
    /// A helper runs; `childOwner` names it.
    Running,
    /// The helper finished.
    Settled,
}

impl Phase {
    /// The phase's name as records store it.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Preparing => "preparing",
            Phase::Launching => "launching",
            Phase::Running => "running",
            Phase::Settled => "settled",
        }
    }

    /// The phase named `name`, if any.
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "preparing" => Phase::Preparing,
            "launching" => Phase::Launching,
            "running" => Phase::Running,
            "settled" => Phase::Settled,
            _ => return None,
        })
    }
}

/// A directory lease claim (schema 2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectoryLease {
    /// The lease id (lowercase UUID v4); the file is `<id>.json`.
    pub id: String,
    /// What the directory is for.
    pub role: Role,
    /// The leased directory (absolute, normalised).
    pub path: String,
    /// `dirname(path)`.
    pub parent_path: String,
    /// Physical identity of the parent at creation.
    pub parent_identity: DirectoryIdentity,
    /// Physical identity of the leased directory at creation.
    pub directory_identity: DirectoryIdentity,
    /// Where a bundle-stage directory is published (`None` for raw-working).
    pub output_root: Option<String>,
    /// The process that holds the lease.
    pub owner: Owner,
    /// The helper running in the directory (phase `running` only).
    pub child_owner: Option<Owner>,
    /// The raw lifecycle phase.
    pub phase: Phase,
    /// Creation time, ms since the epoch.
    pub created_at_ms: u64,
    /// A `launching` lease whose owner is dead becomes recoverable at this time (ms).
    pub recover_after_ms: u64,
}

impl DirectoryLease {
    /// The record's JSON value.
    pub fn to_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("schemaVersion".into(), Value::from(2));
        m.insert("kind".into(), Value::from(KIND));
        m.insert("id".into(), Value::from(self.id.as_str()));
        m.insert("role".into(), Value::from(self.role.name()));
        m.insert("path".into(), Value::from(self.path.as_str()));
        m.insert("parentPath".into(), Value::from(self.parent_path.as_str()));
        m.insert("parentIdentity".into(), self.parent_identity.to_value());
        m.insert("directoryIdentity".into(), self.directory_identity.to_value());
        m.insert("outputRoot".into(), self.output_root.as_deref().map_or(Value::Null, Value::from));
        m.insert("owner".into(), self.owner.to_value());
        m.insert("childOwner".into(), self.child_owner.as_ref().map_or(Value::Null, Owner::to_value));
        m.insert("phase".into(), Value::from(self.phase.name()));
        m.insert("createdAtMs".into(), Value::from(self.created_at_ms));
        m.insert("recoverAfterMs".into(), Value::from(self.recover_after_ms));
        Value::Object(m)
    }

    /// The record with its canonical file text and sha256.
    pub fn parsed(self) -> Parsed<Self> {
        let value = self.to_value();
        Parsed::new(self, &value)
    }

    /// The file name of this lease inside the lease collection: `<id>.json`.
    pub fn file_name(&self) -> String {
        format!("{}.json", self.id)
    }
}

const KEYS: &[&str] = &[
    "childOwner",
    "createdAtMs",
    "directoryIdentity",
    "id",
    "kind",
    "outputRoot",
    "owner",
    "parentIdentity",
    "parentPath",
    "path",
    "phase",
    "recoverAfterMs",
    "role",
    "schemaVersion",
];

/// `parseClaim(value)` (§6A.3), in the reference's check order.
///
/// Errors (prefixed `Beeper Message Like Me recovery: directory lease `): `must be a plain
/// object`, `has an unsupported shape`, `identity is invalid`, `path is invalid`, `parent is
/// invalid`, `output is invalid`, `creation time is invalid`, `recovery time is invalid`,
/// `coordinates are inconsistent`, `parent identity …`, `directory identity …`, `owner …`,
/// `child owner …`.
pub fn parse_value(value: &Value) -> Result<DirectoryLease, Error> {
    let m = object(value).ok_or_else(|| Error::lease(LeaseCode::DirectoryLeaseMustBeAPlainObject))?;
    if !has_exact_keys(m, KEYS) {
        return Err(Error::lease(LeaseCode::DirectoryLeaseHasAnUnsupportedShape));
    }
    let identity = (
        m.get("schemaVersion").and_then(js::number) == Some(2.0) && string(m, "kind") == Some(KIND),
        uuid_member(m, "id"),
        string(m, "role").and_then(Role::from_name),
        string(m, "phase").and_then(Phase::from_name),
    );
    let (id, role, phase) = match identity {
        (true, Some(id), Some(role), Some(phase)) => (id, role, phase),
        _ => return Err(Error::lease(LeaseCode::DirectoryLeaseIdentityIsInvalid)),
    };
    let path = bounded_path(&m["path"]).ok_or_else(|| Error::lease(LeaseCode::DirectoryLeasePathIsInvalid))?;
    let parent_path = bounded_path(&m["parentPath"]).ok_or_else(|| Error::lease(LeaseCode::DirectoryLeaseParentIsInvalid))?;
    let output_root = match &m["outputRoot"] {
        Value::Null => None,
        v => Some(bounded_path(v).ok_or_else(|| Error::lease(LeaseCode::DirectoryLeaseOutputIsInvalid))?),
    };
    let created_at_ms = milliseconds(&m["createdAtMs"]).ok_or_else(|| Error::lease(LeaseCode::DirectoryLeaseCreationTimeIsInvalid))?;
    let recover_after_ms = milliseconds(&m["recoverAfterMs"]).ok_or_else(|| Error::lease(LeaseCode::DirectoryLeaseRecoveryTimeIsInvalid))?;
    let child_value = &m["childOwner"];
    let consistent = dirname(path) == parent_path
        && recover_after_ms >= created_at_ms
        && (role == Role::BundleStage) == output_root.is_some()
        && output_root.is_none_or(|out| dirname(out) == parent_path)
        && (role != Role::BundleStage || (phase == Phase::Preparing && child_value.is_null()))
        && (phase == Phase::Running) != child_value.is_null();
    if !consistent {
        return Err(Error::lease(LeaseCode::DirectoryLeaseCoordinatesAreInconsistent));
    }
    let parent_identity = directory_identity(&m["parentIdentity"], "directory lease parent identity")?;
    let directory_identity = directory_identity(&m["directoryIdentity"], "directory lease directory identity")?;
    let owner = beeper_owner(&m["owner"], "directory lease owner")?;
    let child_owner = if child_value.is_null() { None } else { Some(beeper_owner(child_value, "directory lease child owner")?) };
    Ok(DirectoryLease {
        id,
        role,
        path: path.into(),
        parent_path: parent_path.into(),
        parent_identity,
        directory_identity,
        output_root: output_root.map(String::from),
        owner,
        child_owner,
        phase,
        created_at_ms,
        recover_after_ms,
    })
}

/// Value mode from JSON text: [`parse_value`] of the decoded text, no canonical check.
///
/// Errors: `directory lease is not valid JSON`, then those of [`parse_value`].
pub fn parse_json(text: &str) -> Result<Parsed<DirectoryLease>, Error> {
    let value = canonical_json::parse(text).map_err(|_| Error::lease(LeaseCode::DirectoryLeaseIsNotValidJson))?;
    Ok(parse_value(&value)?.parsed())
}

/// File mode (§6A.6 recovery step e.2): JSON parse, [`parse_value`], then `file_name` must be
/// `<id>.json` **and** the text exactly the canonical file, else `directory lease is not
/// canonical`.
pub fn parse_file(text: &str, file_name: &str) -> Result<Parsed<DirectoryLease>, Error> {
    let parsed = parse_json(text)?;
    if parsed.record.file_name() != file_name || parsed.canonical != text {
        return Err(Error::lease(LeaseCode::DirectoryLeaseIsNotCanonical));
    }
    Ok(parsed)
}

/// `boundedPath(value)` (§6A.3): a string that is absolute, already normalised (equal to its
/// POSIX `resolve`: no trailing `/` except the root, no `//`, `.` or `..` segment), at most
/// 4096 UTF-16 code units, with no NUL, CR or LF.
pub fn bounded_path(value: &Value) -> Option<&str> {
    let path = value.as_str()?;
    is_bounded_path(path).then_some(path)
}

/// The string form of [`bounded_path`].
pub fn is_bounded_path(path: &str) -> bool {
    let normalised = path == "/" || (path.starts_with('/') && !path.ends_with('/') && path[1..].split('/').all(|seg| !seg.is_empty() && seg != "." && seg != ".."));
    normalised && js::utf16_len(path) <= MAX_PATH_UTF16 && !path.contains(['\0', '\r', '\n'])
}

/// POSIX `dirname` of a normalised absolute path (`dirname("/")` is `"/"`).
pub fn dirname(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) | None => "/",
        Some(index) => &path[..index],
    }
}

/// `milliseconds(value)` (§6A.3): a safe integer ≥ 0.
pub fn milliseconds(value: &Value) -> Option<u64> {
    js::safe_integer(value).filter(|n| *n >= 0).map(|n| n as u64)
}

/// `identity(value, label)` (§6A.3): exactly `birthtimeNs, device, inode`, decimal strings
/// (`^\d{1,40}$`, `^\d{1,40}$`, `^[1-9]\d{0,39}$`).
fn directory_identity(value: &Value, label: &str) -> Result<DirectoryIdentity, Error> {
    let m = object(value).ok_or_else(|| Error::lease_with(LeaseCode::FieldMustBeAPlainObject, &format!("{label} must be a plain object")))?;
    if !has_exact_keys(m, &["birthtimeNs", "device", "inode"]) {
        return Err(Error::lease_with(LeaseCode::FieldHasAnUnsupportedShape, &format!("{label} has an unsupported shape")));
    }
    let decimal = |s: &&str| s.len() <= 40 && js::is_ascii_digits(s);
    let device = string(m, "device").filter(decimal);
    let inode = string(m, "inode").filter(decimal);
    let birth = string(m, "birthtimeNs").filter(decimal).filter(|s| !s.starts_with('0'));
    match (device, inode, birth) {
        (Some(device), Some(inode), Some(birth)) => Ok(DirectoryIdentity { device: device.into(), inode: inode.into(), birthtime_ns: birth.into() }),
        _ => Err(Error::lease_with(LeaseCode::FieldIsInvalid, &format!("{label} is invalid"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_rules() {
        assert!(is_bounded_path("/"));
        assert!(is_bounded_path("/a/b"));
        for bad in ["", "a", "/a/", "//a", "/a//b", "/a/./b", "/a/..", "/a\nb"] {
            assert!(!is_bounded_path(bad), "{bad:?}");
        }
        assert_eq!(dirname("/a"), "/");
        assert_eq!(dirname("/"), "/");
        assert_eq!(dirname("/a/b"), "/a");
    }
}
