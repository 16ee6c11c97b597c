//! The hostile test component (`tests/hostile-guest`, built by `tests/build.rs`): a guest that
//! spins, hoards memory and calls the `state-store` and `workspace` imports with paths outside
//! what they grant, for the guest-sandbox tests. World `proclease:hostile/hostile`
//! (`tests/hostile-guest/wit/hostile.wit`); it imports `proclease:lease/state-store`,
//! `proclease:lease/workspace` and `proclease:lease/types` (all `@0.3.0`) and nothing else.

/// The component's bytes (a WebAssembly component, not a core module).
pub const BYTES: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/hostile.wasm"));

/// [`BYTES`] compiled to native code by `tests/build.rs` with the runtime's engine configuration
/// (`host/build-support/engine_config.rs`), as `host/build.rs` precompiles the real component: the
/// runtime has no compiler (issue #30).
pub const PRECOMPILED: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/hostile.cwasm"));

/// The hostile component loaded into `engine` (a [`proclease::Runtime`]'s).
///
/// Panics if wasmtime refuses the precompiled bytes (an engine configured otherwise than the
/// build script's): a test setup error.
pub fn component(engine: &proclease::wasmtime::Engine) -> proclease::wasmtime::component::Component {
    // SAFETY: the bytes were produced by `Engine::precompile_component` in this crate's build
    // script and embedded in this binary; wasmtime checks their header against `engine`.
    unsafe { proclease::wasmtime::component::Component::deserialize(engine, PRECOMPILED) }.expect("the precompiled hostile component loads")
}
