//! The wasmtime engine configuration of the proclease runtime, shared by the build scripts (which
//! precompile the components with it: the shipped binary has no compiler) and the runtime (which
//! loads that artifact). A precompiled component loads only into an engine configured the same
//! way; wasmtime checks this (version, compiler flags, target CPU features) and refuses a
//! mismatch, which the runtime reports (`runtime::code_image`). The test
//! `component_contract::a_start_loads_the_precompiled_component_where_the_binary_holds_it`
//! fails if the two ever differ.

/// The engine configuration: epoch interruption for the per-call deadline; everything else
/// wasmtime's defaults.
pub fn engine_config() -> wasmtime::Config {
    let mut config = wasmtime::Config::new();
    config.epoch_interruption(true);
    config
}
