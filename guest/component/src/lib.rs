//! The proclease WebAssembly component: the thin glue between the WIT contract
//! (`wit/proclease.wit`, world `proclease`) and the pure logic of `proclease-core`.
//!
//! Everything here is conversion between generated binding types and core types; no rule lives
//! in this crate. It is `no_std` so that the component imports exactly what its world names
//! (a std guest on wasm32-wasip2 silently imports the `wasi:cli` and `wasi:io` families).
//! On any other target the crate is empty, so a native `cargo build --workspace` still works.
#![no_std]

#[cfg(target_arch = "wasm32")]
extern crate alloc;

#[cfg(target_arch = "wasm32")]
mod glue;
#[cfg(target_arch = "wasm32")]
use glue::bindings;
/// The one conversion layer between the WIT types and proclease-core's, shared with the host.
#[cfg(target_arch = "wasm32")]
#[path = "../../../wit/convert.rs"]
mod convert;
#[cfg(target_arch = "wasm32")]
mod no_std_runtime;
