//! Parsing and validation of every record kind, with the reference's exact messages in the
//! reference's check order.
//!
//! Each record kind has a module with the same three entry points:
//! * `parse_value(&Value)` — structural validation of a decoded JSON value;
//! * `parse_json(text)` — the same from JSON text (value mode: no canonical check);
//! * `parse_file(text, …)` — what a reader of the state home does with a file's text: JSON
//!   parse, structural validation, then the byte-canonical check (§1.5).
//!
//! A successful parse returns [`Parsed`]: the typed record, its canonical file text and the
//! sha256 of that text (the record's `contentSha256`).

use alloc::string::String;
use serde_json::{Map, Value};

use crate::{canonical_json, digest, js};

pub mod creation_intent;
pub mod detect;
pub mod directory_lease;
pub mod export_admission;
pub mod invocation_lease;
pub mod portable_identity;

/// A validated record with its canonical file text (canonical JSON + `\n`) and that text's
/// lowercase hex sha256.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed<T> {
    /// The typed record.
    pub record: T,
    /// `canonicalJson(record) + "\n"`: the exact bytes a state file holds.
    pub canonical: String,
    /// sha256 of `canonical` (the record's `contentSha256`).
    pub sha256: String,
}

impl<T> Parsed<T> {
    /// Wraps a record whose JSON value is `value`.
    pub(crate) fn new(record: T, value: &Value) -> Self {
        // Records hold only strings, safe integers, booleans and null: always representable.
        let canonical = canonical_json::to_canonical_file(value).unwrap_or_default();
        let sha256 = digest::sha256_hex(canonical.as_bytes());
        Parsed { record, canonical, sha256 }
    }
}

/// A process owner identity `{pid, bootId, processStartId}` (spec §2).
///
/// `pid` is 1..=2 147 483 647 in Beeper records and any safe integer ≥ 1 in invocation leases.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Owner {
    /// Process id.
    pub pid: u64,
    /// `identityDigest("io-boot", raw boot id)`, 64 lowercase hex.
    pub boot_id: String,
    /// `identityDigest("io-process-start", bootId ‖ 0 ‖ starttime)`, 64 lowercase hex.
    pub process_start_id: String,
}

impl Owner {
    /// The record's JSON value.
    pub fn to_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("pid".into(), Value::from(self.pid));
        m.insert("bootId".into(), Value::from(self.boot_id.as_str()));
        m.insert("processStartId".into(), Value::from(self.process_start_id.as_str()));
        Value::Object(m)
    }
}

/// A physical directory identity `{device, inode, birthtimeNs}` as decimal strings (§6A.2).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DirectoryIdentity {
    /// `st_dev`, decimal (`^\d{1,40}$`).
    pub device: String,
    /// `st_ino`, decimal (`^\d{1,40}$`).
    pub inode: String,
    /// statx birth time in ns since the epoch, decimal (`^[1-9]\d{0,39}$`).
    pub birthtime_ns: String,
}

impl DirectoryIdentity {
    /// The record's JSON value.
    pub fn to_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("device".into(), Value::from(self.device.as_str()));
        m.insert("inode".into(), Value::from(self.inode.as_str()));
        m.insert("birthtimeNs".into(), Value::from(self.birthtime_ns.as_str()));
        Value::Object(m)
    }
}

/// The value as a JSON object (a "plain object" of the reference), if it is one.
pub(crate) fn object(value: &Value) -> Option<&Map<String, Value>> {
    value.as_object()
}

/// `exactKeys`: the member names are exactly `keys`.
pub(crate) fn has_exact_keys(members: &Map<String, Value>, keys: &[&str]) -> bool {
    members.len() == keys.len() && keys.iter().all(|k| members.contains_key(*k))
}

/// The member `key` as a string, if it is one.
pub(crate) fn string<'a>(members: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    members.get(key).and_then(Value::as_str)
}

/// The member `key` as a digest (`^[a-f0-9]{64}$`).
pub(crate) fn digest_member(members: &Map<String, Value>, key: &str) -> Option<String> {
    string(members, key).filter(|s| js::is_digest(s)).map(String::from)
}

/// The member `key` as a lowercase UUID v4.
pub(crate) fn uuid_member(members: &Map<String, Value>, key: &str) -> Option<String> {
    string(members, key).filter(|s| js::is_uuid_v4(s)).map(String::from)
}
