//! The wasmtime engine configuration of the proclease runtime, shared by the build scripts (which
//! precompile the components with it: the shipped binary has no compiler) and the runtime (which
//! loads that artifact). A precompiled component loads only into an engine configured the same
//! way; wasmtime checks this (version, compiler flags, target CPU features) and refuses a
//! mismatch, which the runtime reports (`runtime::code_image`). The test
//! `component_contract::a_start_loads_the_precompiled_component_where_the_binary_holds_it`
//! fails if the two ever differ.

/// The engine configuration: epoch interruption for the per-call deadline, and, pinned, the
/// one setting whose default follows a Cargo feature of wasmtime: no async component model
/// (`component-model-async`). proclease does not enable that feature, but a program that embeds
/// it and enables it for its own use of wasmtime turns it on in the runtime's wasmtime too (Cargo
/// unifies features), not in the build script's; unpinned, wasmtime would then refuse the
/// precompiled component (its tunables must match exactly). And no copy-on-write memory image
/// (below). Everything else is wasmtime's defaults.
pub fn engine_config() -> wasmtime::Config {
    let mut config = wasmtime::Config::new();
    config.epoch_interruption(true);
    config.concurrency_support(false);
    // No copy-on-write memory image: with it, every process start made a memfd, wrote the
    // component's data segments into it, sealed it and mapped it, to instantiate the component
    // once or a few times (the runtime keeps its instances). Copying the segments at
    // instantiation is cheaper for that: warm `doctor` 4.06 -> 3.59 ms, `run -- true` on tmpfs
    // 9.01 -> 8.39 ms (issue #44, `bench/compare_binaries.py`, 41 pairs). A setting of the
    // compiled artifact too, so it lives here, where the build script sees it.
    config.memory_init_cow(false);
    config
}
