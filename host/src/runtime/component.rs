//! The component embedded in this crate: the exact bytes that `proclease component` writes and
//! that other runtimes (Node through jco, Python through `wasmtime`) load.

/// The component (`guest/component` built for `wasm32-wasip2`, stripped).
pub const BYTES: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/proclease.wasm"));

/// Lowercase hex sha256 of [`BYTES`], computed at build time.
pub const SHA256: &str = env!("PROCLEASE_COMPONENT_SHA256");

/// The WIT package the component implements, name and version (`proclease:lease@0.1.0`), read
/// from `wit/proclease.wit` at build time.
pub const WIT_PACKAGE: &str = env!("PROCLEASE_WIT_PACKAGE");
