//! The plugin catalog (`plugin-catalog` import; spec §5): the installed identity of a plugin,
//! and the catalog mutation lock.
//!
//! **Catalog file.** proclease does not install plugins; it reads what the plugin host says is
//! installed from a JSON file — `<state home>/provider-plugins/catalog.json` (read through the
//! state store: a private file of yours), or the file given with `--plugin-catalog`:
//!
//! ```json
//! {"schemaVersion": 1, "plugins": [
//!   {"pluginId": "portable-test", "version": "1.0.0", "hostApiVersion": 1,
//!    "bundleSha256": "<64 hex>", "manifestSha256": "<64 hex>", "enabled": true}
//! ]}
//! ```
//!
//! A plugin that is absent or `"enabled": false` is not installed. Embedders supply their own
//! catalog through the `Catalog` effect trait instead.
//!
//! **Lock.** The reference's catalog mutation lock (§5, [`lock_file`]): the lock file
//! `<state home>/provider-plugins/locks/.catalog-mutation.lock`, published under an arbitration
//! claim, which a running ghostget honours as proclease honours ghostget's. It fails fast with
//! the reference's `portable plugin catalog mutation is already locked` while another live
//! process (proclease or ghostget) holds it, is re-entrant within one process (a depth count),
//! is released on every path (dropping the last level removes exactly the inode this process
//! published), and a crashed holder's lock is taken over by the next process once the holder is
//! provably gone.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use proclease_core::effects::InstalledPlugin;
use serde_json::Value;

use crate::state_store::StateStore;

pub mod lock_file;
mod wit;

pub use lock_file::ALREADY_LOCKED;
/// The catalog file inside the state home.
pub const DEFAULT_PATH: &str = "provider-plugins/catalog.json";
/// The largest catalog file read (bytes).
pub const MAX_CATALOG_BYTES: u32 = 1 << 20;

/// Where the catalog is read from.
#[derive(Debug, Clone)]
pub enum Source {
    /// `provider-plugins/catalog.json` in the state home.
    StateHome,
    /// A file given explicitly.
    File(PathBuf),
}

/// The plugin catalog of one state home.
pub struct PluginCatalog {
    store: Arc<StateStore>,
    source: Source,
}

/// Process-wide lock levels per lock file, so that the lock is re-entrant within a process.
fn held() -> &'static Mutex<HashMap<PathBuf, (lock_file::HeldLock, usize)>> {
    static HELD: std::sync::OnceLock<Mutex<HashMap<PathBuf, (lock_file::HeldLock, usize)>>> = std::sync::OnceLock::new();
    HELD.get_or_init(Mutex::default)
}

impl PluginCatalog {
    /// The catalog of `store`'s state home, read from `source`.
    pub fn new(store: Arc<StateStore>, source: Source) -> Self {
        PluginCatalog { store, source }
    }

    fn lock_key(&self) -> PathBuf {
        self.store.home().path().join(lock_file::STORE_ROOT).join("locks").join(lock_file::LOCK_NAME)
    }

    /// Where the catalog is read from, and whether a file is there now (for messages: a
    /// missing catalog makes every plugin "changed or disabled", as in the reference).
    pub fn location(&self) -> (PathBuf, bool) {
        let path = match &self.source {
            Source::StateHome => self.store.home().path().join(DEFAULT_PATH),
            Source::File(path) => path.clone(),
        };
        let exists = std::fs::symlink_metadata(&path).is_ok();
        (path, exists)
    }

    /// The enabled installation of `plugin_id`, or `None`.
    ///
    /// Errors: the catalog file cannot be read or is malformed (the message names it).
    pub fn installed(&self, plugin_id: &str) -> Result<Option<InstalledPlugin>, String> {
        let (label, text) = match &self.source {
            Source::StateHome => {
                let text = self.store.read_if_present(DEFAULT_PATH, MAX_CATALOG_BYTES).map_err(|e| e.to_string())?;
                (DEFAULT_PATH.to_string(), text)
            }
            Source::File(path) => {
                let text = match std::fs::read(path) {
                    Ok(bytes) if bytes.len() as u64 > u64::from(MAX_CATALOG_BYTES) => {
                        return Err(format!("{}: the plugin catalog is larger than {MAX_CATALOG_BYTES} bytes", path.display()));
                    }
                    Ok(bytes) => Some(String::from_utf8(bytes).map_err(|_| format!("{}: the plugin catalog is not UTF-8", path.display()))?),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                    Err(e) => return Err(format!("{}: cannot read the plugin catalog: {e}", path.display())),
                };
                (path.display().to_string(), text)
            }
        };
        let Some(text) = text else { return Ok(None) };
        find(&text, plugin_id).map_err(|problem| format!("{label}: {problem}; see `proclease --help` for the catalog format"))
    }

    /// Takes one level of the catalog mutation lock (§5), failing fast.
    ///
    /// Errors: [`ALREADY_LOCKED`] while another live process holds it; the other §5 refusals
    /// (`lock_file::acquire`); an I/O error naming the path.
    pub fn lock(&self) -> Result<(), String> {
        let key = self.lock_key();
        let mut held = held().lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, depth)) = held.get_mut(&key) {
            *depth += 1;
            return Ok(());
        }
        let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
        let lock = lock_file::acquire(&self.store, now_ms)?;
        held.insert(key, (lock, 1));
        Ok(())
    }

    /// Releases one level; the last one removes the lock file. A lock that changed meanwhile
    /// (another process removed or replaced it) is left as found.
    pub fn unlock(&self) {
        let key = self.lock_key();
        let mut held = held().lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, depth)) = held.get_mut(&key) {
            *depth -= 1;
            if *depth == 0
                && let Some((lock, _)) = held.remove(&key)
            {
                let _ = lock_file::release(&self.store, lock);
            }
        }
    }
}

fn find(text: &str, plugin_id: &str) -> Result<Option<InstalledPlugin>, String> {
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

/// The plugin catalog as the component's effect ([`proclease_core::effects::Catalog`]), shared by
/// several instances.
pub struct SharedCatalog(pub Arc<PluginCatalog>);

impl proclease_core::effects::Catalog for SharedCatalog {
    fn installed(&mut self, plugin_id: &str) -> Result<Option<InstalledPlugin>, String> {
        self.0.installed(plugin_id)
    }

    fn lock(&mut self) -> Result<(), String> {
        self.0.lock()
    }

    fn unlock(&mut self) {
        self.0.unlock()
    }
}
