//! The component embedded in this crate: the exact bytes that `proclease component` writes and
//! that other runtimes (Node through jco, Python through `wasmtime`) load.

/// The component (`guest/component` built for `wasm32-wasip2`, stripped).
pub const BYTES: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/proclease.wasm"));

/// [`BYTES`] compiled to native code at build time by an engine configured as the runtime's
/// (`Engine::precompile_component`); loaded with `Component::deserialize`, which wasmtime
/// refuses on a host whose CPU features or wasmtime build differ.
pub const PRECOMPILED: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/proclease.cwasm"));

/// Lowercase hex sha256 of [`BYTES`], computed at build time.
pub const SHA256: &str = env!("PROCLEASE_COMPONENT_SHA256");

/// The WIT package the component implements, name and version (`proclease:lease@0.1.0`), read
/// from `wit/proclease.wit` at build time.
pub const WIT_PACKAGE: &str = env!("PROCLEASE_WIT_PACKAGE");
