//! The plugin catalog's file (spec §5 `loadInstalledPortableProviderPlugin`, as proclease reads
//! it): which plugin is installed and enabled, from a JSON file the plugin host writes. Written
//! once: the native host reads the state home's catalog or a file given with
//! `--plugin-catalog`, the portable store the state home's, and both parse it here.
//!
//! ```json
//! {"schemaVersion": 1, "plugins": [
//!   {"pluginId": "portable-test", "version": "1.0.0", "hostApiVersion": 1,
//!    "bundleSha256": "<64 hex>", "manifestSha256": "<64 hex>", "enabled": true}
//! ]}
//! ```
//!
//! A plugin that is absent or `"enabled": false` is not installed; a missing file installs
//! nothing (every plugin is then "changed or disabled", as in the reference).

use proclease_core::effects::InstalledPlugin;
use serde_json::Value;

use crate::prelude::*;
use crate::seam::{Fs, Kernel};
use crate::state_store::StoreProtocol;

/// The catalog file inside the state home.
pub const DEFAULT_PATH: &str = "provider-plugins/catalog.json";
/// The largest catalog file read (bytes).
pub const MAX_CATALOG_BYTES: u32 = 1 << 20;

/// The enabled installation of `plugin_id` in the state home's catalog ([`DEFAULT_PATH`], read
/// through `store`: a private file of this user's), or `None`.
///
/// Errors: the store's (an unsafe or unreadable file, worded by the store); a malformed catalog
/// ([`describe`]'s words, naming the file).
pub fn installed_in_state_home<F: Fs, K: Kernel + ?Sized>(store: &StoreProtocol<F, K>, plugin_id: &str) -> Result<Option<InstalledPlugin>, String> {
    let text = store.read_if_present(DEFAULT_PATH, MAX_CATALOG_BYTES).map_err(|e| e.to_string())?;
    let Some(text) = text else { return Ok(None) };
    find(&text, plugin_id).map_err(|problem| describe(DEFAULT_PATH, &problem))
}

/// The error for a catalog `label` (a path) that says `problem`: names the file and where the
/// format is described.
pub fn describe(label: &str, problem: &str) -> String {
    format!("{label}: {problem}; see `proclease --help` for the catalog format")
}

/// The enabled installation of `plugin_id` in the catalog `text`, `None` when it is absent or
/// disabled.
///
/// Errors (what is wrong, without the file's name): not JSON; `schemaVersion` not 1; no
/// `plugins` array; a field of this plugin's entry of the wrong type.
pub fn find(text: &str, plugin_id: &str) -> Result<Option<InstalledPlugin>, String> {
    let doc: Value = serde_json::from_str(text).map_err(|e| format!("the plugin catalog is not valid JSON ({e})"))?;
    if doc["schemaVersion"] != 1 {
        return Err("the plugin catalog must have \"schemaVersion\": 1".into());
    }
    let plugins = doc["plugins"].as_array().ok_or("the plugin catalog needs a \"plugins\" array")?;
    for plugin in plugins {
        if plugin["pluginId"] != plugin_id {
            continue;
        }
        let field = |name: &str| plugin[name].as_str().map(String::from).ok_or(format!("plugin {plugin_id}: \"{name}\" must be a string"));
        let host_api_version = plugin["hostApiVersion"].as_u64().and_then(|v| u32::try_from(v).ok()).ok_or(format!("plugin {plugin_id}: \"hostApiVersion\" must be a number"))?;
        let enabled = plugin["enabled"].as_bool().ok_or(format!("plugin {plugin_id}: \"enabled\" must be true or false"))?;
        let installed = InstalledPlugin {
            plugin_id: plugin_id.into(),
            version: field("version")?,
            host_api_version,
            bundle_sha256: field("bundleSha256")?,
            manifest_sha256: field("manifestSha256")?,
        };
        return Ok(enabled.then_some(installed));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_enabled_plugin_is_installed_and_a_disabled_or_absent_one_is_not() {
        let entry = |enabled: bool| {
            format!(
                "{{\"schemaVersion\":1,\"plugins\":[{{\"pluginId\":\"p\",\"version\":\"1.0.0\",\"hostApiVersion\":1,\"bundleSha256\":\"b\",\"manifestSha256\":\"m\",\"enabled\":{enabled}}}]}}"
            )
        };
        let installed = find(&entry(true), "p").expect("parses").expect("installed");
        assert_eq!((installed.version.as_str(), installed.host_api_version, installed.bundle_sha256.as_str()), ("1.0.0", 1, "b"));
        assert_eq!(find(&entry(false), "p"), Ok(None));
        assert_eq!(find(&entry(true), "q"), Ok(None));
        assert_eq!(find("{\"schemaVersion\":2,\"plugins\":[]}", "p"), Err("the plugin catalog must have \"schemaVersion\": 1".into()));
        assert_eq!(find("{\"schemaVersion\":1}", "p"), Err("the plugin catalog needs a \"plugins\" array".into()));
    }
}
