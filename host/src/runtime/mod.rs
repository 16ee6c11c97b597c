//! The wasmtime runtime of the component: one [`Engine`], the precompiled component, and cheap per-use [`Instance`]s, each in its own [`Store`] with a memory cap and an
//! epoch deadline.
//!
//! The sandbox: a component gets no authority but the imports of world `proclease` (no WASI),
//! each confined to what the host was granted (store paths inside the state home, workspace
//! paths under the granted roots). Every call the host makes into it may run for at most
//! [`RuntimeConfig::call_deadline`] of its own computation (time in imports is the host's) and
//! make at most [`RuntimeConfig::max_import_calls`] import calls, and all of its linear memory
//! together may grow to at most
//! [`RuntimeConfig::max_memory_bytes`] (tables to [`MAX_TABLE_ELEMENTS`]); a component that goes
//! past either is stopped with [`Error::Limit`] and the host carries on.
//! [`Runtime::instantiate_component`] applies the same imports and limits to another component.
//!
//! The component's native code is compiled at build time (`host/build.rs`, with the engine
//! configuration of `host/build-support/engine_config.rs`) and embedded
//! (`component::PRECOMPILED`); the runtime has no compiler. A start makes that code executable
//! where the binary holds it ([`LoadedFrom::InPlace`], `code_image`), or copies it where that
//! cannot be done ([`LoadedFrom::Copied`]). A binary copied to a machine whose CPU lacks features
//! of the build machine's is refused with [`Error::Component`], which says to build it there.
//! Within one process, [`Runtime::shared`] loads at most once.
//!
//! Instances are pooled: [`Runtime::instantiate_with`] takes an idle instance of this runtime
//! when there is one (well under a microsecond: its effects are swapped in) and a dropped [`Instance`] goes
//! back to the pool, holding no effects (`Effects::detached`) while idle. An instance that
//! trapped or was stopped by a limit is never reused, nor one that still holds a catalog lock
//! level or whose memory grew past [`POOLED_MEMORY_BYTES`]. The component keeps no state
//! between calls (no globals; its resources are dropped with their handles), and the budget of
//! each call — deadline, import calls — is counted afresh, so a reused instance behaves as a
//! fresh one.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use wasmtime::component::{Component, Linker};
use wasmtime::{CallHook, Engine, ResourceLimiter, Store, UpdateDeadline};

pub(crate) mod bindings;
mod code_image;
pub mod component;

/// The engine configuration the component is precompiled with, and that every runtime uses:
/// what a component given to [`Runtime::instantiate_component`] must be precompiled with.
#[path = "../../build-support/engine_config.rs"]
pub mod engine_config;

use crate::Error;
use crate::effects::Effects;
use crate::error::Limit;
use crate::process_identity::ProcessIdentity;
use bindings::{Proclease, ProcleasePre};

/// How the runtime limits the component.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// The most linear memory one instance (all the memories of its store together) may grow
    /// to, in bytes (default 64 MiB). Growing past it traps with [`Error::Limit`]
    /// ([`Limit::Memory`]); so does instantiating a component whose initial memory exceeds it.
    pub max_memory_bytes: usize,
    /// How long one call from the host into the component may compute before it is
    /// interrupted with [`Error::Limit`] ([`Limit::Deadline`]) (default 10 s). Counted afresh
    /// for each call, in 50 ms engine ticks (at least one). Only the component's own execution
    /// counts: time inside imports (removing a huge tree, waiting for a store lock) is the
    /// host's, and the deadline exists to stop a spinning guest, not a slow disk.
    pub call_deadline: Duration,
    /// How many import calls one call from the host into the component may make before it is
    /// stopped with [`Error::Limit`] ([`Limit::ImportCalls`]) (default 1 000 000: a repair of
    /// 10 000 invocation leases makes about 50 000). Bounds a guest that spins on imports,
    /// whose own time the deadline hardly counts.
    pub max_import_calls: u64,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig { max_memory_bytes: 64 << 20, call_deadline: Duration::from_secs(10), max_import_calls: 1_000_000 }
    }
}

/// The engine tick: the deadline is counted in these.
const EPOCH_TICK: Duration = Duration::from_millis(50);

/// The most table elements (all the tables of one store together) a component may have: a
/// table element costs the host a pointer, so an unbounded `table.grow` would be an unbounded
/// host allocation. Growing past it traps with [`Error::Limit`] ([`Limit::TableElements`]).
pub const MAX_TABLE_ELEMENTS: usize = 1 << 20;

/// The most core module instances one store may create (a component's main module and its
/// glue modules).
pub const MAX_CORE_INSTANCES: usize = 4;

/// The engine and the compiled, pre-linked component.
pub struct Runtime {
    engine: Engine,
    component: Component,
    loaded_from: LoadedFrom,
    linker: Linker<HostState>,
    pre: ProcleasePre<HostState>,
    config: RuntimeConfig,
    pool: Arc<InstancePool>,
}

/// The most idle instances a runtime keeps for reuse (instances held by handles do not count).
pub const POOL_CAPACITY: usize = 8;

/// An instance whose linear memory grew past this (in bytes) is dropped instead of pooled, so
/// that one large scan does not keep its memory for the life of the process.
pub const POOLED_MEMORY_BYTES: usize = 16 << 20;

/// The idle instances of one runtime.
struct InstancePool {
    idle: Mutex<Vec<Parts>>,
}

/// What an instance is made of: its store and the bindings of its exports.
struct Parts {
    store: Store<HostState>,
    bindings: Proclease,
}

impl InstancePool {
    /// An idle instance, if any.
    fn take(&self) -> Option<Parts> {
        self.idle.lock().ok()?.pop()
    }

    /// Keeps `parts` for reuse unless it must not be reused; otherwise drops it.
    fn recycle(&self, mut parts: Parts) {
        let state = parts.store.data_mut();
        // Inside a call (its budget still armed), holding a catalog lock level, or grown large:
        // dropped, not pooled (dropping the store releases what it holds).
        if state.budget.wasm_depth != 0 || !state.catalog_levels.is_empty() || state.limits.memory_bytes > POOLED_MEMORY_BYTES {
            return;
        }
        state.effects = Effects::detached();
        state.served_texts = None;
        if let Ok(mut idle) = self.idle.lock()
            && idle.len() < POOL_CAPACITY
        {
            idle.push(parts);
        }
    }
}

/// What each [`Store`] of this runtime holds: the effects behind its imports, its resource
/// accounting and its call depth. Opaque: it is only named so that an embedder of
/// [`Runtime::instantiate_component`] can hold the store.
pub struct HostState {
    limits: Limits,
    pub(crate) effects: Effects,
    /// Catalog lock levels the guest holds, by resource rep.
    pub(crate) catalog_levels: std::collections::HashSet<u32>,
    pub(crate) next_catalog_level: u32,
    /// The current outermost call's budget.
    budget: Budget,
    /// When `Some`, the texts `read-batch` served, by store path: a listing keeps them so that
    /// the canonical text of each valid lease it returns is the file's own (a valid record *is*
    /// its canonical text) instead of being re-serialised from the structured record.
    pub(crate) served_texts: Option<std::collections::HashMap<String, String>>,
}

/// What one outermost call into the component may still spend: the deadline counts only the
/// component's own execution (the epoch deadline is pushed out while an import runs and
/// re-armed with what is left when it returns), and import calls are counted.
struct Budget {
    /// How many host-to-wasm entries are active: a new budget starts only on the outermost
    /// one (the host calls back into wasm during imports, e.g. `cabi_realloc`).
    wasm_depth: u32,
    /// Computation time left.
    remaining: Duration,
    /// When the component last resumed computing (entered, or returned from an import).
    resumed: Instant,
    /// Import calls made.
    import_calls: u64,
}

/// Ticks of [`EPOCH_TICK`] for `duration`, rounded up, at least one.
fn ticks(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos().div_ceil(EPOCH_TICK.as_nanos())).unwrap_or(u64::MAX / 2).max(1)
}

/// An epoch deadline no import outlasts (about 1 700 years of 50 ms ticks).
const WHILE_IN_AN_IMPORT: u64 = 1 << 40;

/// The store's resource limiter: memory and table growth counted over the whole store.
struct Limits {
    max_memory_bytes: usize,
    memory_bytes: usize,
    /// The growth last allowed, taken back if the growth then failed.
    pending_memory_bytes: usize,
    table_elements: usize,
    pending_table_elements: usize,
}

impl ResourceLimiter for Limits {
    fn memory_growing(&mut self, current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        let growth = desired.saturating_sub(current);
        let total = self.memory_bytes.saturating_add(growth);
        if total > self.max_memory_bytes {
            return Err(wasmtime::Error::new(Limit::Memory { cap_bytes: self.max_memory_bytes, requested_bytes: total }));
        }
        self.memory_bytes = total;
        self.pending_memory_bytes = growth;
        Ok(true)
    }

    fn memory_grow_failed(&mut self, _error: wasmtime::Error) -> wasmtime::Result<()> {
        self.memory_bytes = self.memory_bytes.saturating_sub(std::mem::take(&mut self.pending_memory_bytes));
        Ok(())
    }

    fn table_growing(&mut self, current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        let growth = desired.saturating_sub(current);
        let total = self.table_elements.saturating_add(growth);
        if total > MAX_TABLE_ELEMENTS {
            return Err(wasmtime::Error::new(Limit::TableElements { cap: MAX_TABLE_ELEMENTS, requested: total }));
        }
        self.table_elements = total;
        self.pending_table_elements = growth;
        Ok(true)
    }

    fn table_grow_failed(&mut self, _error: wasmtime::Error) -> wasmtime::Result<()> {
        self.table_elements = self.table_elements.saturating_sub(std::mem::take(&mut self.pending_table_elements));
        Ok(())
    }

    fn instances(&self) -> usize {
        MAX_CORE_INSTANCES
    }
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
    /// The process-wide runtime with the default configuration, loaded on first use. Every
    /// later call returns the same one.
    ///
    /// Errors: [`Error::Component`] if the component cannot be loaded (a binary built on a
    /// machine whose CPU differs) or linked.
    pub fn shared() -> Result<&'static Runtime, Error> {
        static SHARED: OnceLock<Result<Runtime, String>> = OnceLock::new();
        SHARED.get_or_init(|| Runtime::new(RuntimeConfig::default()).map_err(|e| e.to_string())).as_ref().map_err(|e| Error::Component(e.clone()))
    }

    /// A new runtime: its own limits and instance pool, on the process's one engine and loaded
    /// component (loaded by the first runtime; their limits are per store).
    ///
    /// Errors: [`Error::Component`] if the component cannot be loaded (a binary built on a
    /// machine whose CPU differs) or linked.
    pub fn new(config: RuntimeConfig) -> Result<Runtime, Error> {
        let (engine, component, loaded_from) = code_image::shared()?;
        let mut linker: Linker<HostState> = Linker::new(&engine);
        Proclease::add_to_linker::<HostState, wasmtime::component::HasSelf<HostState>>(&mut linker, |state| state).map_err(Error::component)?;
        let pre = linker.instantiate_pre(&component).map_err(Error::component)?;
        let pre = ProcleasePre::new(pre).map_err(Error::component)?;
        let pool = Arc::new(InstancePool { idle: Mutex::new(Vec::new()) });
        Ok(Runtime { engine, component, loaded_from, linker, pre, config, pool })
    }

    /// An instance of the component (an idle one of this runtime's pool, else a new one, ~25 µs)
    /// with no state home: for the pure exports (records, dispositions). Its process identity
    /// is this host's; store calls are refused.
    ///
    /// Errors: [`Error::Component`] if instantiation fails.
    pub fn instantiate(&self) -> Result<Instance, Error> {
        static PROCESSES: OnceLock<std::sync::Arc<ProcessIdentity>> = OnceLock::new();
        let processes = PROCESSES.get_or_init(|| std::sync::Arc::new(ProcessIdentity::new())).clone();
        self.instantiate_with(Effects::native(None, processes))
    }

    /// An instance whose imports are served by `effects`: an idle one of this runtime's pool
    /// (see the module documentation), else a new one. Dropping it returns it to the pool.
    ///
    /// Errors: [`Error::Component`] if instantiation fails; [`Error::Limit`] if the component
    /// needs more memory than the cap to start.
    pub fn instantiate_with(&self, effects: Effects) -> Result<Instance, Error> {
        let parts = match self.pool.take() {
            Some(mut parts) => {
                parts.store.data_mut().effects = effects;
                parts
            }
            None => {
                let mut store = self.new_store(effects);
                let bindings = self.pre.instantiate(&mut store).map_err(Error::component)?;
                Parts { store, bindings }
            }
        };
        Ok(Instance { parts: Some(parts), pool: Arc::clone(&self.pool), stopped: false, in_call: false })
    }

    /// How many idle instances this runtime's pool holds (at most [`POOL_CAPACITY`]).
    pub fn idle_instances(&self) -> usize {
        self.pool.idle.lock().map(|idle| idle.len()).unwrap_or(0)
    }

    /// Instantiates another component against the same imports (world `proclease`'s
    /// interfaces, served by `effects`) and under the same limits as
    /// [`instantiate_with`](Runtime::instantiate_with): the memory cap and the call deadline
    /// of this runtime's [`RuntimeConfig`], counted afresh for each call made through the
    /// returned store.
    ///
    /// `component` must be compiled for this runtime's [`engine`](Runtime::engine): the runtime
    /// has no compiler, so precompile it where wasmtime has Cranelift (a build script, as
    /// `host/build.rs` does) with an engine configured by [`engine_config::engine_config`], then
    /// `Component::deserialize(runtime.engine(), precompiled)`. It may import any subset of the
    /// world's interfaces
    /// (`proclease:lease/…@0.3.0`), nothing else: there is no WASI. Call its exports with the
    /// returned store (`instance.get_typed_func(&mut store, "name")`); a failed call converts to
    /// an [`Error`] with `Error::from`, which is [`Error::Limit`] when the component hit the
    /// deadline or the memory cap.
    ///
    /// Errors: [`Error::Component`] if `component` imports anything else, or was compiled for
    /// another engine, or its start-up traps; [`Error::Limit`] if it needs more memory than the
    /// cap to start.
    pub fn instantiate_component(&self, component: &Component, effects: Effects) -> Result<(Store<HostState>, wasmtime::component::Instance), Error> {
        let mut store = self.new_store(effects);
        let instance = self.linker.instantiate(&mut store, component).map_err(Error::component)?;
        Ok((store, instance))
    }

    /// A store with this runtime's limits: the resource limiter, and each outermost call's
    /// budget — a deadline on the component's own computation, re-armed on each outermost entry
    /// into wasm and paused while an import runs, that traps with [`Limit::Deadline`] when it
    /// passes, and a cap on its import calls ([`Limit::ImportCalls`]).
    fn new_store(&self, effects: Effects) -> Store<HostState> {
        let limits = Limits { max_memory_bytes: self.config.max_memory_bytes, memory_bytes: 0, pending_memory_bytes: 0, table_elements: 0, pending_table_elements: 0 };
        let deadline = self.config.call_deadline;
        let max_import_calls = self.config.max_import_calls;
        let budget = Budget { wasm_depth: 0, remaining: deadline, resumed: Instant::now(), import_calls: 0 };
        let state = HostState { limits, effects, catalog_levels: Default::default(), next_catalog_level: 0, budget, served_texts: None };
        let mut store = Store::new(&self.engine, state);
        store.limiter(|state| &mut state.limits);
        store.set_epoch_deadline(ticks(deadline));
        store.call_hook(move |mut context, hook| {
            let budget = &mut context.data_mut().budget;
            match hook {
                CallHook::CallingWasm => {
                    budget.wasm_depth = budget.wasm_depth.saturating_add(1);
                    if budget.wasm_depth == 1 {
                        *budget = Budget { wasm_depth: 1, remaining: deadline, resumed: Instant::now(), import_calls: 0 };
                        context.set_epoch_deadline(ticks(deadline));
                    }
                }
                CallHook::ReturningFromWasm => budget.wasm_depth = budget.wasm_depth.saturating_sub(1),
                // The component calls an import (or a libcall): its computation pauses.
                CallHook::CallingHost if budget.wasm_depth == 1 => {
                    budget.remaining = budget.remaining.saturating_sub(budget.resumed.elapsed());
                    budget.import_calls += 1;
                    if budget.import_calls > max_import_calls {
                        return Err(wasmtime::Error::new(Limit::ImportCalls { cap: max_import_calls }));
                    }
                    context.set_epoch_deadline(WHILE_IN_AN_IMPORT);
                }
                CallHook::ReturningFromHost if budget.wasm_depth == 1 => {
                    if budget.remaining.is_zero() {
                        return Err(wasmtime::Error::new(Limit::Deadline { deadline }));
                    }
                    budget.resumed = Instant::now();
                    let left = ticks(budget.remaining);
                    context.set_epoch_deadline(left);
                }
                _ => {}
            }
            Ok(())
        });
        store.epoch_deadline_callback(move |_| -> wasmtime::Result<UpdateDeadline> { Err(wasmtime::Error::new(Limit::Deadline { deadline })) });
        store
    }

    /// How this runtime loaded the precompiled component: [`LoadedFrom::InPlace`] on x86-64
    /// Linux with 4 KiB pages, else (or where the kernel refused to make those pages
    /// executable) [`LoadedFrom::Copied`].
    pub fn loaded_from(&self) -> LoadedFrom {
        self.loaded_from
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
    /// (`proclease:lease/state-store@0.3.0`, …), sorted.
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

/// Calls export function `$method` of the interface reached through the accessors (e.g.
/// `[proclease_lease_records]`, or `[proclease_lease_export_admission, admission]` for a
/// resource's methods) on `$instance`'s store, a trap becoming [`Error::Component`] — the one
/// piece of glue every typed export wrapper shares.
macro_rules! export_call {
    ($instance:expr, [$($accessor:ident),+] $method:ident($($arg:expr),*)) => {{
        let instance = &mut $instance;
        let result = {
            let (bindings, store) = instance.parts();
            bindings$(.$accessor())+.$method(store $(, $arg)*)
        };
        instance.trapped(result)
    }};
}
pub(crate) use export_call;

/// One instance of the component and its store. Calls on it are sequential; take one per
/// thread or per operation ([`Runtime::instantiate_with`]). Dropping it returns it to its
/// runtime's pool, unless a call on it trapped or was stopped.
pub struct Instance {
    /// `Some` until the instance is dropped.
    parts: Option<Parts>,
    pool: Arc<InstancePool>,
    /// A call trapped or was stopped by a limit: the instance must not be entered again.
    stopped: bool,
    /// A call was begun ([`Instance::parts`]) and has not ended ([`Instance::trapped`]).
    in_call: bool,
}

impl Instance {
    /// The bindings and the store, to call into the component: every call made with them must
    /// end in [`Instance::trapped`]. Until it does, the instance counts as stopped, so that a
    /// call that never returns normally — a host import that panicked, whose unwinding skips
    /// wasmtime's return hooks and leaves the call's budget armed — never puts it back in the
    /// pool.
    pub(crate) fn parts(&mut self) -> (&Proclease, &mut Store<HostState>) {
        self.in_call = true;
        let parts = self.parts.as_mut().expect("an instance holds its parts until it is dropped");
        (&parts.bindings, &mut parts.store)
    }

    /// Whether the component may be entered again: no call on it trapped, was stopped, or was
    /// abandoned mid-way (a panic unwinding out of a host import). A handle dropped while its
    /// thread panics checks this, not the panic: a panic in the embedder's own code leaves the
    /// instance whole, and its claims are released as on any drop.
    pub(crate) fn usable(&self) -> bool {
        !self.stopped && !self.in_call
    }

    /// The store, to read or set host state between calls (not to call into the component).
    pub(crate) fn store(&mut self) -> &mut Store<HostState> {
        &mut self.parts.as_mut().expect("an instance holds its parts until it is dropped").store
    }

    /// Ends a call begun with [`Instance::parts`]: turns a trap or a stopped guest into
    /// [`Error::Component`] / [`Error::Limit`], remembering that this instance must not be
    /// reused.
    pub(crate) fn trapped<T>(&mut self, result: wasmtime::Result<T>) -> Result<T, Error> {
        self.in_call = false;
        result.map_err(|e| {
            self.stopped = true;
            Error::component(e)
        })
    }

    /// Drops the guest resource `resource` of this instance (a handle going away).
    pub(crate) fn drop_resource(&mut self, resource: wasmtime::component::ResourceAny) {
        if !self.usable() {
            // A call was abandoned mid-way: the component is not entered again, and the
            // instance never goes back to the pool.
            self.stopped = true;
            return;
        }
        let result = resource.resource_drop(self.parts().1);
        let _ = self.trapped(result);
    }

    /// Calls an export through `f` (given the bindings and the store) and turns both layers of
    /// failure into one [`Error`]: a trap or a stopped guest ([`Error::Component`],
    /// [`Error::Limit`]) and the export's own error (a lease rule, storage, system).
    pub(crate) fn call<T>(
        &mut self,
        f: impl FnOnce(&Proclease, &mut Store<HostState>) -> wasmtime::Result<Result<T, bindings::proclease::lease::types::Error>>,
    ) -> Result<T, Error> {
        let result = {
            let (bindings, store) = self.parts();
            f(bindings, store)
        };
        // A call that trapped (or was stopped) between the component's `lock-leasing` and its
        // `unlock-leasing` must not leave this thread holding the lease-creation lock: every
        // process's next lease would wait for it (a completed call has released it already).
        crate::state_store::release_leasing_lock();
        self.trapped(result)?.map_err(|e| crate::convert::error_from_wit(e).into())
    }

    /// The typed API over the `records` export.
    pub fn records(&mut self) -> crate::Records<'_> {
        crate::Records { instance: self }
    }

    /// The typed API over the `dispositions` export.
    pub fn dispositions(&mut self) -> crate::Dispositions<'_> {
        crate::Dispositions { instance: self }
    }
}

impl Drop for Instance {
    /// Back to the pool, unless a call on it trapped, was stopped, or never returned (a panic
    /// unwinding through it).
    fn drop(&mut self) {
        if let Some(parts) = self.parts.take()
            && !self.stopped
            && !self.in_call
            && !std::thread::panicking()
        {
            self.pool.recycle(parts);
        }
    }
}

/// One background thread per engine advances its epoch every [`EPOCH_TICK`], so that a call
/// that runs past its deadline traps instead of hanging the host. The thread ends when the
/// engine is dropped (the process's shared engine never is).
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

/// How a runtime loaded the component's native code, which is always the code compiled at build
/// time and embedded in the binary (`component::PRECOMPILED`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadedFrom {
    /// Made executable where the binary holds it: no copy (x86-64 Linux).
    InPlace,
    /// Copied into fresh memory first (other targets, or where the kernel refused the former).
    Copied,
}
