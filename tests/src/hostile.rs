//! The hostile test component (`tests/hostile-guest`, built by `tests/build.rs`): a guest that
//! spins, hoards memory and calls the `state-store` and `workspace` imports with paths outside
//! what they grant, for the guest-sandbox tests. World `proclease:hostile/hostile`
//! (`tests/hostile-guest/wit/hostile.wit`); it imports `proclease:lease/state-store`,
//! `proclease:lease/workspace` and `proclease:lease/types` (all `@0.1.0`) and nothing else.

/// The component's bytes (a WebAssembly component, not a core module).
pub const BYTES: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/hostile.wasm"));
