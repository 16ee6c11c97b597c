//! Builds the proclease WebAssembly component from `guest/component` and embeds it
//! (`build-support/wasm_guest.rs` says how). The component and its sha256 are handed to the
//! crate as `OUT_DIR/proclease.wasm` and `PROCLEASE_COMPONENT_SHA256`, and its native code,
//! precompiled with the runtime's engine configuration, as `OUT_DIR/proclease.cwasm`; the WIT package (name and version)
//! as `PROCLEASE_WIT_PACKAGE`.

#[path = "../build-support/wasm_guest.rs"]
mod wasm_guest;
#[path = "../build-support/engine_config.rs"]
mod engine_config;

use std::env;
use std::path::PathBuf;

use sha2::{Digest, Sha256};

fn main() {
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let root = manifest_dir.parent().expect("host/ lives in the workspace root").to_path_buf();
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    for watched in ["guest", "wit", "Cargo.lock", "build-support"] {
        println!("cargo:rerun-if-changed={}", root.join(watched).display());
    }
    // A stripped component, optimised for speed: the bytes users load into other runtimes.
    // opt-level 3 rather than "s": 572 KB instead of 411 KB, and listing 1,000 invocation
    // leases 24% faster (bench/README.md).
    let profile = [("DEBUG", "false"), ("STRIP", "true"), ("OPT_LEVEL", "3"), ("LTO", "true"), ("CODEGEN_UNITS", "1"), ("PANIC", "abort")];
    let bytes = wasm_guest::build(&root, "proclease-component", "proclease_component", &out_dir.join("guest-target"), &profile);
    wasm_guest::write_if_changed(&out_dir.join("proclease.wasm"), &bytes);
    let digest = Sha256::digest(&bytes);
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    println!("cargo:rustc-env=PROCLEASE_COMPONENT_SHA256={hex}");
    // The component compiled to native code by the runtime's own engine configuration, so the
    // binary loads it without running Cranelift (a host whose CPU or wasmtime build differs is
    // refused by wasmtime's header check, and the runtime compiles instead).
    let engine = wasmtime::Engine::new(&engine_config::engine_config()).expect("a wasmtime engine to precompile the component");
    let precompiled = engine.precompile_component(&bytes).expect("the component compiles with Cranelift");
    wasm_guest::write_if_changed(&out_dir.join("proclease.cwasm"), &precompiled);
    // The contract's package and version (`package proclease:lease@0.1.0;`), for `--version`.
    let wit = std::fs::read_to_string(root.join("wit/proclease.wit")).expect("wit/proclease.wit is readable");
    let package = wit
        .lines()
        .find_map(|line| line.trim().strip_prefix("package ").and_then(|rest| rest.strip_suffix(';')))
        .expect("wit/proclease.wit declares its package");
    println!("cargo:rustc-env=PROCLEASE_WIT_PACKAGE={package}");
}
