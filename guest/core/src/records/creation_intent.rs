//! The directory-creation intent (proclease's own record, not the reference's): written before a
//! lease creates the directory it will lease, so that a crash between `mkdir` and the lease
//! leaves a record of what was created and by whom (`docs/deviations.md`).
//!
//! `recovery/proclease-directory-creations/<id>.json`, canonical JSON + `\n`:
//! `{"created":[{"identity":{…}|null,"path":…}],"id":…,"kind":"proclease-directory-creation","owner":{…},"path":…,"schemaVersion":1}`
//! — `path` the directory to lease, `created` the directories this creation made, outermost
//! first, with their physical identities once known.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use serde_json::{Map, Value};

use super::directory_lease::bounded_path;
use super::{DirectoryIdentity, Owner, Parsed, digest_member, has_exact_keys, object, string, uuid_member};
use crate::{canonical_json, js};

/// The record's `kind`.
pub const KIND: &str = "proclease-directory-creation";

/// A directory-creation intent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreationIntent {
    /// Lowercase UUID v4: the file is `<id>.json`.
    pub id: String,
    /// The process creating the directory.
    pub owner: Owner,
    /// The directory to lease.
    pub path: String,
    /// The directories this creation made, outermost first, with their identities once known.
    pub created: Vec<(String, Option<DirectoryIdentity>)>,
}

impl CreationIntent {
    /// The record as a JSON value.
    pub fn to_value(&self) -> Value {
        let created: Vec<Value> = self
            .created
            .iter()
            .map(|(path, identity)| {
                let mut m = Map::new();
                m.insert("path".into(), Value::from(path.as_str()));
                m.insert("identity".into(), identity.as_ref().map_or(Value::Null, DirectoryIdentity::to_value));
                Value::Object(m)
            })
            .collect();
        let mut m = Map::new();
        m.insert("schemaVersion".into(), Value::from(1));
        m.insert("kind".into(), Value::from(KIND));
        m.insert("id".into(), Value::from(self.id.as_str()));
        m.insert("owner".into(), self.owner.to_value());
        m.insert("path".into(), Value::from(self.path.as_str()));
        m.insert("created".into(), Value::Array(created));
        Value::Object(m)
    }

    /// The record with its canonical file text and sha256.
    pub fn parsed(self) -> Parsed<Self> {
        let value = self.to_value();
        Parsed::new(self, &value)
    }

    /// `<id>.json`.
    pub fn file_name(&self) -> String {
        format!("{}.json", self.id)
    }
}

fn owner(value: &Value) -> Option<Owner> {
    let m = object(value)?;
    if !has_exact_keys(m, &["bootId", "pid", "processStartId"]) {
        return None;
    }
    let pid = m.get("pid").and_then(js::number).filter(|p| *p >= 1.0 && *p <= js::MAX_SAFE_INTEGER && *p == (*p as u64) as f64)?;
    Some(Owner { pid: pid as u64, boot_id: digest_member(m, "bootId")?, process_start_id: digest_member(m, "processStartId")? })
}

fn identity(value: &Value) -> Option<Option<DirectoryIdentity>> {
    if value.is_null() {
        return Some(None);
    }
    let m = object(value)?;
    if !has_exact_keys(m, &["birthtimeNs", "device", "inode"]) {
        return None;
    }
    let field = |key| string(m, key).filter(|s| !s.is_empty() && s.len() <= 40 && js::is_ascii_digits(s)).map(String::from);
    Some(Some(DirectoryIdentity { device: field("device")?, inode: field("inode")?, birthtime_ns: field("birthtimeNs")? }))
}

/// Parses an intent file: JSON, the exact shape above, `<id>.json` as its name, canonical text.
///
/// Errors: why it is not a valid intent, in words.
pub fn parse_file(text: &str, file_name: &str) -> Result<Parsed<CreationIntent>, String> {
    let value = canonical_json::parse(text).map_err(|_| String::from("directory creation intent is not valid JSON"))?;
    let invalid = || String::from("directory creation intent is invalid");
    let m = object(&value).ok_or_else(invalid)?;
    if !has_exact_keys(m, &["created", "id", "kind", "owner", "path", "schemaVersion"])
        || m.get("schemaVersion").and_then(js::number) != Some(1.0)
        || string(m, "kind") != Some(KIND)
    {
        return Err(invalid());
    }
    let id = uuid_member(m, "id").ok_or_else(invalid)?;
    let owner = owner(&m["owner"]).ok_or_else(invalid)?;
    let path = bounded_path(&m["path"]).ok_or_else(invalid)?.into();
    let entries = m["created"].as_array().filter(|a| a.len() <= 64).ok_or_else(invalid)?;
    let mut created = Vec::with_capacity(entries.len());
    for entry in entries {
        let e = object(entry).filter(|e| has_exact_keys(e, &["identity", "path"])).ok_or_else(invalid)?;
        let path = bounded_path(&e["path"]).ok_or_else(invalid)?;
        created.push((String::from(path), identity(&e["identity"]).ok_or_else(invalid)?));
    }
    let parsed = CreationIntent { id, owner, path, created }.parsed();
    if parsed.record.file_name() != file_name || parsed.canonical != text {
        return Err(String::from("directory creation intent is not canonical"));
    }
    Ok(parsed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_anything_else() {
        let intent = CreationIntent {
            id: "11111111-1111-4111-8111-111111111111".into(),
            owner: Owner { pid: 7, boot_id: "a".repeat(64), process_start_id: "b".repeat(64) },
            path: "/w/jobs/a".into(),
            created: alloc::vec![("/w/jobs".into(), None), ("/w/jobs/a".into(), Some(DirectoryIdentity { device: "1".into(), inode: "2".into(), birthtime_ns: "3".into() })),],
        }
        .parsed();
        assert_eq!(parse_file(&intent.canonical, "11111111-1111-4111-8111-111111111111.json"), Ok(intent.clone()));
        assert!(parse_file(&intent.canonical, "x.json").is_err());
        assert!(parse_file(&intent.canonical.replace("/w/jobs/a\"}", "/w/../a\"}"), "11111111-1111-4111-8111-111111111111.json").is_err());
        assert!(parse_file("", "a.json").is_err());
    }
}
