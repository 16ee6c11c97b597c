//! The wasmtime runtime of the component: one [`Engine`], the compiled component (cached on
//! disk), and cheap per-use [`Instance`]s, each in its own [`Store`] with a memory cap and an
//! epoch deadline.
//!
//! Compiling the component with Cranelift takes ~0.2 s in a release host and seconds in a debug
//! one, so the compiled artifact is cached in `$PROCLEASE_CACHE_DIR`, else
//! `$XDG_CACHE_HOME/proclease`, else `~/.cache/proclease` (created 0700), keyed by the
//! component's sha256 and the engine's compatibility hash; a warm start deserializes it instead
//! of running Cranelift. Within one process, [`Runtime::shared`] compiles at most once.

use std::hash::{Hash, Hasher};
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Engine, Store, StoreLimits, StoreLimitsBuilder};

use crate::bindings::{Proclease, ProcleasePre};
use crate::effects::Effects;
use crate::process_identity::ProcessIdentity;
use crate::{Error, component};

/// How the runtime limits and caches the component.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// The most linear memory one instance may grow to, in bytes (default 64 MiB).
    pub max_memory_bytes: usize,
    /// How long one call into the component may run before it is interrupted (default 10 s).
    pub call_deadline: Duration,
    /// Where compiled components are cached; `None` disables the cache.
    pub cache_dir: Option<PathBuf>,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            max_memory_bytes: 64 << 20,
            call_deadline: Duration::from_secs(10),
            cache_dir: default_cache_dir(),
        }
    }
}

/// The engine tick: the deadline is counted in these.
const EPOCH_TICK: Duration = Duration::from_millis(50);

/// The engine and the compiled, pre-linked component.
pub struct Runtime {
    engine: Engine,
    component: Component,
    pre: ProcleasePre<HostState>,
    config: RuntimeConfig,
}

/// What each store holds: its resource limits and the effects behind its imports.
pub(crate) struct HostState {
    limits: StoreLimits,
    pub(crate) effects: Effects,
    /// Catalog lock levels the guest holds, by resource rep.
    pub(crate) catalog_levels: std::collections::HashSet<u32>,
    pub(crate) next_catalog_level: u32,
}

impl Drop for HostState {
    fn drop(&mut self) {
        // An instance that goes away releases every catalog lock level it still holds.
        for _ in self.catalog_levels.drain() {
            self.effects.catalog.unlock();
        }
    }
}

impl Runtime {
    /// The process-wide runtime with the default configuration, compiled (or loaded from the
    /// cache) on first use. Every later call returns the same one.
    ///
    /// Errors: [`Error::Component`] if the component cannot be compiled or linked.
    pub fn shared() -> Result<&'static Runtime, Error> {
        static SHARED: OnceLock<Result<Runtime, String>> = OnceLock::new();
        SHARED
            .get_or_init(|| Runtime::new(RuntimeConfig::default()).map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|e| Error::Component(e.clone()))
    }

    /// A new runtime with its own engine.
    ///
    /// Errors: [`Error::Component`] if the component cannot be compiled or linked.
    pub fn new(config: RuntimeConfig) -> Result<Runtime, Error> {
        let mut wasm_config = Config::new();
        wasm_config.epoch_interruption(true);
        let engine = Engine::new(&wasm_config).map_err(Error::component)?;
        start_epoch_ticker(&engine);
        let component = load_component(&engine, config.cache_dir.as_ref())?;
        let mut linker: Linker<HostState> = Linker::new(&engine);
        Proclease::add_to_linker::<HostState, wasmtime::component::HasSelf<HostState>>(&mut linker, |state| state)
            .map_err(Error::component)?;
        let pre = linker.instantiate_pre(&component).map_err(Error::component)?;
        let pre = ProcleasePre::new(pre).map_err(Error::component)?;
        Ok(Runtime { engine, component, pre, config })
    }

    /// A fresh instance of the component (~0.2 ms) with no state home: for the pure exports
    /// (records, dispositions). Its process identity is this host's; store calls are refused.
    ///
    /// Errors: [`Error::Component`] if instantiation fails.
    pub fn instantiate(&self) -> Result<Instance, Error> {
        static PROCESSES: OnceLock<std::sync::Arc<ProcessIdentity>> = OnceLock::new();
        let processes = PROCESSES.get_or_init(|| std::sync::Arc::new(ProcessIdentity::new())).clone();
        self.instantiate_with(Effects::native(None, processes))
    }

    /// A fresh instance whose imports are served by `effects`.
    ///
    /// Errors: [`Error::Component`] if instantiation fails.
    pub fn instantiate_with(&self, effects: Effects) -> Result<Instance, Error> {
        let limits = StoreLimitsBuilder::new().memory_size(self.config.max_memory_bytes).instances(4).build();
        let state = HostState { limits, effects, catalog_levels: Default::default(), next_catalog_level: 0 };
        let mut store = Store::new(&self.engine, state);
        store.limiter(|state| &mut state.limits);
        let ticks = self.config.call_deadline.as_millis() / EPOCH_TICK.as_millis();
        store.set_epoch_deadline(u64::try_from(ticks).unwrap_or(u64::MAX).max(1));
        let bindings = self.pre.instantiate(&mut store).map_err(Error::component)?;
        Ok(Instance { store, bindings })
    }

    /// The engine (to inspect the component's type, for example).
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The compiled component.
    pub fn component(&self) -> &Component {
        &self.component
    }

    /// The names of the component's imports, as the component model spells them
    /// (`proclease:lease/state-store@0.1.0`, …), sorted.
    pub fn import_names(&self) -> Vec<String> {
        let ty = self.component.component_type();
        let mut names: Vec<String> = ty.imports(&self.engine).map(|(name, _)| name.to_string()).collect();
        names.sort();
        names
    }

    /// The names of the component's exports, sorted.
    pub fn export_names(&self) -> Vec<String> {
        let ty = self.component.component_type();
        let mut names: Vec<String> = ty.exports(&self.engine).map(|(name, _)| name.to_string()).collect();
        names.sort();
        names
    }
}

/// One instance of the component and its store. Calls on it are sequential; create one per
/// thread or per operation.
pub struct Instance {
    pub(crate) store: Store<HostState>,
    pub(crate) bindings: Proclease,
}

impl Instance {
    /// The typed API over the `records` export.
    pub fn records(&mut self) -> crate::Records<'_> {
        crate::Records { instance: self }
    }

    /// The typed API over the `dispositions` export.
    pub fn dispositions(&mut self) -> crate::Dispositions<'_> {
        crate::Dispositions { instance: self }
    }
}

/// One background thread per engine advances its epoch every [`EPOCH_TICK`], so that a call
/// that runs past its deadline traps instead of hanging the host. The thread ends when the
/// engine is dropped.
fn start_epoch_ticker(engine: &Engine) {
    let weak = engine.weak();
    std::thread::Builder::new()
        .name("proclease-epoch".into())
        .spawn(move || {
            while let Some(engine) = weak.upgrade() {
                engine.increment_epoch();
                drop(engine);
                std::thread::sleep(EPOCH_TICK);
            }
        })
        .ok();
}

fn default_cache_dir() -> Option<PathBuf> {
    let from_env = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(dir) = from_env("PROCLEASE_CACHE_DIR") {
        return Some(dir);
    }
    let base = from_env("XDG_CACHE_HOME").or_else(|| from_env("HOME").map(|home| home.join(".cache")))?;
    Some(base.join("proclease"))
}

/// The compiled component: from the cache when a matching entry exists, else compiled with
/// Cranelift and written to the cache (best effort: a cache that cannot be written only costs
/// time).
fn load_component(engine: &Engine, cache_dir: Option<&PathBuf>) -> Result<Component, Error> {
    let Some(dir) = cache_dir else {
        return Component::new(engine, component::BYTES).map_err(Error::component);
    };
    let mut hasher = std::hash::DefaultHasher::new();
    component::SHA256.hash(&mut hasher);
    engine.precompile_compatibility_hash().hash(&mut hasher);
    let path = dir.join(format!("proclease-{}-{:016x}.cwasm", &component::SHA256[..16], hasher.finish()));
    if path.is_file() {
        // SAFETY: the file was written by `precompile_component` below into a private (0700)
        // directory of this user, under a name bound to this component and this engine's
        // compatibility hash; wasmtime also checks its header and version. A user who can
        // write there can already run code as this user.
        if let Ok(component) = unsafe { Component::deserialize_file(engine, &path) } {
            return Ok(component);
        }
    }
    let compiled = engine.precompile_component(component::BYTES).map_err(Error::component)?;
    let _ = write_cache_entry(dir, &path, &compiled);
    // SAFETY: `compiled` was produced by this engine's `precompile_component` just now.
    unsafe { Component::deserialize(engine, &compiled) }.map_err(Error::component)
}

fn write_cache_entry(dir: &PathBuf, path: &PathBuf, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    let temp = dir.join(format!(".tmp-{}-{}", std::process::id(), path.file_name().and_then(|n| n.to_str()).unwrap_or("cwasm")));
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&temp)?;
    let written = file.write_all(bytes).and_then(|()| file.sync_all());
    drop(file);
    match written.and_then(|()| std::fs::rename(&temp, path)) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = std::fs::remove_file(&temp);
            Err(e)
        }
    }
}
