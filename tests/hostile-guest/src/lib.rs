//! A deliberately hostile WebAssembly component for proclease's guest-sandbox tests
//! (`tests/tests/guest_sandbox.rs`): it spins, hoards memory and calls the state-store and
//! workspace imports with paths outside what they grant. World: `wit/hostile.wit`.
//!
//! Built like the real guest (`guest/component`): `no_std`, so the component imports exactly
//! what its world names (a std guest on wasm32-wasip2 imports the `wasi:cli` and `wasi:io`
//! families). On any other target the crate is empty.
#![no_std]

#[cfg(target_arch = "wasm32")]
extern crate alloc;

#[cfg(target_arch = "wasm32")]
mod guest;
/// The allocator, `cabi_realloc` and panic handler, as the real guest has them.
#[cfg(target_arch = "wasm32")]
#[path = "../../../guest/component/src/no_std_runtime.rs"]
mod no_std_runtime;
