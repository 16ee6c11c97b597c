//! The portable operation identity v1 (`parsePortableOperationIdentityV1`, spec §4): which
//! exact plugin build and operation an invocation lease is for.

use crate::error::LeaseCode;
use alloc::string::String;
use serde_json::{Map, Value};

use super::{has_exact_keys, object, string};
use crate::{Error, js};

/// How a plugin reaches its service (§4 `transport`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// `provider-api`
    ProviderApi,
    /// `web-session-api`
    WebSessionApi,
    /// `linked-device`
    LinkedDevice,
}

impl Transport {
    /// The transport's name as records store it.
    pub fn name(self) -> &'static str {
        match self {
            Transport::ProviderApi => "provider-api",
            Transport::WebSessionApi => "web-session-api",
            Transport::LinkedDevice => "linked-device",
        }
    }

    fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "provider-api" => Transport::ProviderApi,
            "web-session-api" => Transport::WebSessionApi,
            "linked-device" => Transport::LinkedDevice,
            _ => return None,
        })
    }
}

/// A validated portable operation identity (§4): exactly these eleven fields.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PortableIdentity {
    /// `^[a-z][a-z0-9]*(?:-[a-z0-9]+)*$`, ≤ 128 characters.
    pub plugin_id: String,
    /// Strict SemVer 2.0, ≤ 128 characters.
    pub plugin_version: String,
    /// Always 1.
    pub host_api_version: u32,
    /// Lowercase hex sha256 of the plugin bundle.
    pub bundle_sha256: String,
    /// Lowercase hex sha256 of the manifest.
    pub manifest_sha256: String,
    /// Lowercase hex sha256 of the operation descriptor.
    pub descriptor_sha256: String,
    /// `^[a-z][a-z0-9-]{0,47}$`.
    pub adapter_id: String,
    /// How the plugin reaches its service.
    pub transport: Transport,
    /// Same rules as `plugin_id`.
    pub surface_id: String,
    /// 2–4 dot-separated labels `[a-z][a-z0-9-]{0,39}`.
    pub operation: String,
    /// 1..=1 000 000.
    pub contract_version: u32,
}

impl PortableIdentity {
    /// The record's JSON value.
    pub fn to_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("pluginId".into(), Value::from(self.plugin_id.as_str()));
        m.insert("pluginVersion".into(), Value::from(self.plugin_version.as_str()));
        m.insert("hostApiVersion".into(), Value::from(self.host_api_version));
        m.insert("bundleSha256".into(), Value::from(self.bundle_sha256.as_str()));
        m.insert("manifestSha256".into(), Value::from(self.manifest_sha256.as_str()));
        m.insert("descriptorSha256".into(), Value::from(self.descriptor_sha256.as_str()));
        m.insert("adapterId".into(), Value::from(self.adapter_id.as_str()));
        m.insert("transport".into(), Value::from(self.transport.name()));
        m.insert("surfaceId".into(), Value::from(self.surface_id.as_str()));
        m.insert("operation".into(), Value::from(self.operation.as_str()));
        m.insert("contractVersion".into(), Value::from(self.contract_version));
        Value::Object(m)
    }
}

const KEYS: &[&str] =
    &["adapterId", "bundleSha256", "contractVersion", "descriptorSha256", "hostApiVersion", "manifestSha256", "operation", "pluginId", "pluginVersion", "surfaceId", "transport"];

/// `parsePortableOperationIdentityV1(value)` (§4).
///
/// Errors (no prefix): `portable operation identity must be an object`, `… has unsupported
/// fields`, `… is malformed`.
pub fn parse_value(value: &Value) -> Result<PortableIdentity, Error> {
    let m = object(value).ok_or_else(|| Error::lease(LeaseCode::PortableOperationIdentityMustBeAnObject))?;
    if !has_exact_keys(m, KEYS) {
        return Err(Error::lease(LeaseCode::PortableOperationIdentityHasUnsupportedFields));
    }
    fields(m).ok_or_else(|| Error::lease(LeaseCode::PortableOperationIdentityIsMalformed))
}

fn fields(m: &Map<String, Value>) -> Option<PortableIdentity> {
    let plugin_id = string(m, "pluginId").filter(|s| is_slug(s))?;
    let plugin_version = string(m, "pluginVersion").filter(|s| js::utf16_len(s) <= 128 && is_semver(s))?;
    if m.get("hostApiVersion").and_then(js::number) != Some(1.0) {
        return None;
    }
    let bundle_sha256 = super::digest_member(m, "bundleSha256")?;
    let manifest_sha256 = super::digest_member(m, "manifestSha256")?;
    let descriptor_sha256 = super::digest_member(m, "descriptorSha256")?;
    let adapter_id = string(m, "adapterId").filter(|s| is_label(s, 48))?;
    let transport = string(m, "transport").and_then(Transport::from_name)?;
    let surface_id = string(m, "surfaceId").filter(|s| is_slug(s))?;
    let operation = string(m, "operation").filter(|s| is_operation(s))?;
    let contract_version = m.get("contractVersion").and_then(js::safe_integer).filter(|n| (1..=1_000_000).contains(n))?;
    Some(PortableIdentity {
        plugin_id: plugin_id.into(),
        plugin_version: plugin_version.into(),
        host_api_version: 1,
        bundle_sha256,
        manifest_sha256,
        descriptor_sha256,
        adapter_id: adapter_id.into(),
        transport,
        surface_id: surface_id.into(),
        operation: operation.into(),
        contract_version: contract_version as u32,
    })
}

fn is_lower_alnum(c: u8) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

/// `^[a-z][a-z0-9]*(?:-[a-z0-9]+)*$`, at most 128 characters.
fn is_slug(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() <= 128 && b.first().is_some_and(u8::is_ascii_lowercase) && s.split('-').all(|part| !part.is_empty() && part.bytes().all(is_lower_alnum))
}

/// `^[a-z][a-z0-9-]{0,max-1}$`.
fn is_label(s: &str, max: usize) -> bool {
    let b = s.as_bytes();
    !b.is_empty() && b.len() <= max && b[0].is_ascii_lowercase() && b.iter().all(|&c| is_lower_alnum(c) || c == b'-')
}

/// `^[a-z][a-z0-9-]{0,39}(?:\.[a-z][a-z0-9-]{0,39}){1,3}$`.
fn is_operation(s: &str) -> bool {
    let labels = s.split('.').count();
    (2..=4).contains(&labels) && s.split('.').all(|label| is_label(label, 40))
}

/// Strict SemVer 2.0 as the reference's pattern (§4): `MAJOR.MINOR.PATCH` without leading
/// zeros, optional `-` prerelease and `+` build of dot-separated `[0-9A-Za-z-]+` identifiers
/// (leading zeros in numeric prerelease identifiers are accepted, as the pattern does).
fn is_semver(s: &str) -> bool {
    let (rest, build) = match s.split_once('+') {
        Some((rest, build)) => (rest, Some(build)),
        None => (s, None),
    };
    let (core, pre) = match rest.split_once('-') {
        Some((core, pre)) => (core, Some(pre)),
        None => (rest, None),
    };
    let numeric = |n: &str| !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit()) && (n == "0" || !n.starts_with('0'));
    let idents = |text: &str| text.split('.').all(|id| !id.is_empty() && id.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-'));
    let parts: alloc::vec::Vec<&str> = core.split('.').collect();
    parts.len() == 3 && parts.iter().all(|p| numeric(p)) && pre.is_none_or(idents) && build.is_none_or(idents)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn semver_rules() {
        for ok in ["1.0.0", "0.0.0", "1.2.3-alpha.01", "1.2.3-a-b+c.d", "10.20.30+build-1"] {
            assert!(is_semver(ok), "{ok}");
        }
        for bad in ["1.0", "01.0.0", "1.0.0-", "1.0.0+", "1.0.0-a..b", "1.0.0+a+b", "v1.0.0"] {
            assert!(!is_semver(bad), "{bad}");
        }
    }

    #[test]
    fn operation_rules() {
        assert!(is_operation("records.read"));
        assert!(is_operation("a.b.c.d"));
        assert!(!is_operation("a"));
        assert!(!is_operation("a.b.c.d.e"));
        assert!(!is_operation("a..b"));
    }
}
