//! The plugin catalog (`plugin-catalog` import; spec §5): the installed identity of a plugin,
//! and the catalog mutation lock.
//!
//! **Catalog file.** proclease does not install plugins; it reads what the plugin host says is
//! installed from a JSON file — `<state home>/provider-plugins/catalog.json` (read through the
//! state store: a private file of yours), or the file given with `--plugin-catalog` — in the
//! format of `proclease_protocols::plugin_catalog`, which parses it. Embedders supply their own
//! catalog through the `Catalog` effect trait instead.
//!
//! **Lock.** The reference's catalog mutation lock (§5, [`lock_file`]): the lock file
//! `<state home>/provider-plugins/locks/.catalog-mutation.lock`, published under an arbitration
//! claim, which a running ghostget honours as proclease honours ghostget's. It fails fast with
//! the reference's `portable plugin catalog mutation is already locked` while another live
//! process (proclease or ghostget) holds it, is re-entrant within one process (a depth count),
//! is released on every path (dropping the last level removes exactly the inode this process
//! published), and a crashed holder's lock is taken over by the next process once the holder is
//! provably gone. It is acquired and held under the guard every proclease takes
//! (`.proclease/locks/catalog-mutation.lock`, `docs/deviations.md` 30), which also lets it take
//! over a lock a trapped portable instance of another, live process left.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use proclease_core::effects::InstalledPlugin;
use proclease_protocols::plugin_catalog::{describe, find, installed_in_state_home};

use crate::state_store::StateStore;

pub mod lock_file;
mod wit;

pub use lock_file::ALREADY_LOCKED;
pub use proclease_protocols::plugin_catalog::{DEFAULT_PATH, MAX_CATALOG_BYTES};

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
        let path = match &self.source {
            Source::StateHome => return installed_in_state_home(self.store.protocol(), plugin_id),
            Source::File(path) => path,
        };
        let text = match std::fs::read(path) {
            Ok(bytes) if bytes.len() as u64 > u64::from(MAX_CATALOG_BYTES) => {
                return Err(format!("{}: the plugin catalog is larger than {MAX_CATALOG_BYTES} bytes", path.display()));
            }
            Ok(bytes) => String::from_utf8(bytes).map_err(|_| format!("{}: the plugin catalog is not UTF-8", path.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("{}: cannot read the plugin catalog: {e}", path.display())),
        };
        find(&text, plugin_id).map_err(|problem| describe(&path.display().to_string(), &problem))
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
