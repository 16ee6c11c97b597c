//! The wasmtime engine configuration of the proclease runtime, shared by the build script (which
//! precompiles the component with it, so that the shipped binary never runs Cranelift on a
//! matching host) and the runtime (which loads that artifact). A precompiled component loads
//! only into an engine configured the same way; wasmtime checks this (version, compiler flags,
//! target CPU features) and refuses a mismatch, after which the runtime compiles instead.

/// The engine configuration: epoch interruption for the per-call deadline; everything else
/// wasmtime's defaults.
pub fn engine_config() -> wasmtime::Config {
    let mut config = wasmtime::Config::new();
    config.epoch_interruption(true);
    config
}
