//! Builds the hostile test component (`tests/hostile-guest`, world `wit/hostile.wit` there) for
//! the guest-sandbox tests and hands it to the crate as `OUT_DIR/hostile.wasm`
//! ([`proclease_tests::hostile::BYTES`]) and precompiled as `OUT_DIR/hostile.cwasm`, the way
//! `host/build.rs` builds the real guest (`host/build-support/wasm_guest.rs`); and the portable
//! store (`guest/portable`, world `portable-store` of `wit/`) as `OUT_DIR/portable.cwasm`, for
//! `tests/tests/portable_store.rs`; and the shipped portable artifact
//! (`host/component/proclease-portable.wasm`) as `OUT_DIR/proclease-portable.cwasm`, for
//! `tests/tests/portable_artifact.rs`. A cold build takes ~35 s (the wit-bindgen macro stack);
//! later builds only rerun when a guest, the WIT files or `Cargo.lock` change.

#[path = "../host/build-support/engine_config.rs"]
mod engine_config;
#[path = "../host/build-support/wasm_guest.rs"]
mod wasm_guest;

use std::env;
use std::path::PathBuf;

fn main() {
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let root = manifest_dir.parent().expect("tests/ lives in the workspace root").to_path_buf();
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let shared_runtime = root.join("guest/component/src/no_std_runtime.rs");
    let portable = [root.join("guest/portable"), root.join("guest/protocols"), root.join("guest/core")];
    for watched in [manifest_dir.join("hostile-guest"), root.join("wit"), root.join("Cargo.lock"), root.join("host/build-support"), shared_runtime].into_iter().chain(portable) {
        println!("cargo:rerun-if-changed={}", watched.display());
    }
    // Small and quick: no debug info, no LTO (one tiny crate), panics abort.
    let profile = [("DEBUG", "false"), ("STRIP", "true"), ("OPT_LEVEL", "1"), ("PANIC", "abort")];
    let bytes = wasm_guest::build(&root, "proclease-hostile-guest", "proclease_hostile_guest", &out_dir.join("hostile-target"), &profile);
    wasm_guest::write_if_changed(&out_dir.join("hostile.wasm"), &bytes);
    // Precompiled with the runtime's engine configuration: the runtime has no compiler.
    let engine = wasmtime::Engine::new(&engine_config::engine_config()).expect("a wasmtime engine to precompile the hostile component");
    let precompiled = engine.precompile_component(&bytes).expect("the hostile component compiles with Cranelift");
    wasm_guest::write_if_changed(&out_dir.join("hostile.cwasm"), &precompiled);
    // The portable store: optimised as the shipped component is, but without LTO's minute.
    let profile = [("DEBUG", "false"), ("STRIP", "true"), ("OPT_LEVEL", "2"), ("LTO", "false"), ("PANIC", "abort")];
    let bytes = wasm_guest::build(&root, "proclease-portable", "proclease_portable", &out_dir.join("portable-target"), &profile);
    wasm_guest::write_if_changed(&out_dir.join("portable.wasm"), &bytes);
    let precompiled = engine.precompile_component(&bytes).expect("the portable store compiles with Cranelift");
    wasm_guest::write_if_changed(&out_dir.join("portable.cwasm"), &precompiled);
    // The portable artifact as shipped (`host/component/`, the bytes other runtimes load;
    // `component_contract` holds it to the build from source), for `tests/tests/portable_artifact.rs`.
    let shipped = root.join("host/component/proclease-portable.wasm");
    println!("cargo:rerun-if-changed={}", shipped.display());
    let bytes = std::fs::read(&shipped).unwrap_or_else(|e| panic!("{}: {e} (it is checked in)", shipped.display()));
    let precompiled = engine.precompile_component(&bytes).expect("the portable artifact compiles with Cranelift");
    wasm_guest::write_if_changed(&out_dir.join("proclease-portable.cwasm"), &precompiled);
}
