//! Gives the crate the proclease WebAssembly component and its native code.
//!
//! - **In the workspace** (a checkout, with `../guest/component` beside this crate): builds the
//!   component from `guest/component` (`build-support/wasm_guest.rs` says how). The test
//!   `component_contract::the_shipped_component_is_the_one_built_from_source` requires
//!   [`PREBUILT`] to hold the same bytes, so that a package carries the component its source
//!   builds.
//! - **From a package** (`cargo package`, `cargo install`): no guest source comes with it, and
//!   building it would need the `wasm32-wasip2` target; the component is [`PREBUILT`].
//!
//! The same holds for the portable artifact (`component/proclease-portable.wasm`, world
//! `proclease-portable` of `wit/sys.wit`): in the workspace, the portable store
//! (`guest/portable`) is built and plugged into the component's `state-store` and `workspace`
//! imports with `wac-graph` (`docs/architecture.md` says why it is composed here rather than
//! linked by each runtime); from a package, the prebuilt bytes. It is handed over as
//! `OUT_DIR/proclease-portable.wasm`, `PROCLEASE_PORTABLE_SHA256`, and its interfaces as
//! `OUT_DIR/proclease-portable.interfaces` (lines `import NAME` and `export NAME`).
//!
//! Either way the component and its sha256 are handed to the crate as `OUT_DIR/proclease.wasm`
//! and `PROCLEASE_COMPONENT_SHA256`, and its native code, precompiled with the runtime's engine
//! configuration (`build-support/engine_config.rs`), as `OUT_DIR/proclease.cwasm`; the WIT
//! package (name and version) as `PROCLEASE_WIT_PACKAGE`.
//!
//! Precompiling needs Cranelift, so this script's wasmtime is built a second time with it (the
//! binary's has none, and a build script runs on the building machine): that is the price of a
//! binary with no compiler inside (issue #30).

#[path = "build-support/engine_config.rs"]
mod engine_config;
#[path = "build-support/portable_artifact.rs"]
mod portable_artifact;
#[path = "build-support/wasm_guest.rs"]
mod wasm_guest;

use std::env;
use std::path::PathBuf;

use sha2::{Digest, Sha256};

/// The component as shipped in a package, relative to this crate.
const PREBUILT: &str = "component/proclease.wasm";

/// The portable artifact as shipped in a package, relative to this crate.
const PREBUILT_PORTABLE: &str = "component/proclease-portable.wasm";

/// A stripped guest optimised for speed: the bytes users load into other runtimes. opt-level 3
/// rather than "s": 572 KB instead of 411 KB for the component, and listing 1,000 invocation
/// leases 24% faster (bench/README.md).
const SHIPPED_PROFILE: [(&str, &str); 6] = [("DEBUG", "false"), ("STRIP", "true"), ("OPT_LEVEL", "3"), ("LTO", "true"), ("CODEGEN_UNITS", "1"), ("PANIC", "abort")];

fn main() {
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let root = manifest_dir.parent().expect("a crate directory has a parent").to_path_buf();
    for watched in ["wit", "build-support", PREBUILT, PREBUILT_PORTABLE] {
        println!("cargo:rerun-if-changed={}", manifest_dir.join(watched).display());
    }
    let in_workspace = root.join("guest/component/Cargo.toml").is_file() && root.join("Cargo.lock").is_file();
    let prebuilt = |name: &str| {
        let path = manifest_dir.join(name);
        std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e} (a package of proclease ships it there)", path.display()))
    };
    let (bytes, portable) = if in_workspace {
        for watched in ["guest", "Cargo.lock"] {
            println!("cargo:rerun-if-changed={}", root.join(watched).display());
        }
        let target_dir = out_dir.join("guest-target");
        let component = wasm_guest::build(&root, "proclease-component", "proclease_component", &target_dir, &SHIPPED_PROFILE);
        let store = wasm_guest::build(&root, "proclease-portable", "proclease_portable", &target_dir, &SHIPPED_PROFILE);
        let portable = portable_artifact::compose(&component, &store);
        (component, portable)
    } else {
        (prebuilt(PREBUILT), prebuilt(PREBUILT_PORTABLE))
    };
    wasm_guest::write_if_changed(&out_dir.join("proclease-portable.wasm"), &portable);
    println!("cargo:rustc-env=PROCLEASE_PORTABLE_SHA256={}", hex_sha256(&portable));
    wasm_guest::write_if_changed(&out_dir.join("proclease-portable.interfaces"), portable_artifact::interfaces(&portable).as_bytes());
    wasm_guest::write_if_changed(&out_dir.join("proclease.wasm"), &bytes);
    println!("cargo:rustc-env=PROCLEASE_COMPONENT_SHA256={}", hex_sha256(&bytes));
    // The component compiled to native code by the runtime's own engine configuration: the
    // binary loads it and has no compiler (wasmtime refuses it on a machine whose CPU features
    // or wasmtime build differ, and the binary then says to build it there).
    // For the target being built: a cross build gets code for its target's baseline CPU, a
    // native one for this machine's CPU (wasmtime's default, its features detected).
    let mut config = engine_config::engine_config();
    let (target, host) = (env::var("TARGET").unwrap_or_default(), env::var("HOST").unwrap_or_default());
    if target != host {
        config.target(&target).unwrap_or_else(|e| panic!("wasmtime cannot precompile for {target}: {e}"));
    }
    let engine = wasmtime::Engine::new(&config)
        .unwrap_or_else(|e| panic!("wasmtime cannot precompile the component for {target}: {e} (this build script's Cranelift is for this machine's architecture)"));
    let precompiled = engine.precompile_component(&bytes).expect("the component compiles with Cranelift");
    wasm_guest::write_if_changed(&out_dir.join("proclease.cwasm"), &precompiled);
    // The contract's package and version (`package proclease:lease@0.3.0;`), for `--version`.
    let wit = std::fs::read_to_string(manifest_dir.join("wit/proclease.wit")).expect("wit/proclease.wit is readable");
    let package = wit.lines().find_map(|line| line.trim().strip_prefix("package ").and_then(|rest| rest.strip_suffix(';'))).expect("wit/proclease.wit declares its package");
    println!("cargo:rustc-env=PROCLEASE_WIT_PACKAGE={package}");
}

/// Lowercase hex sha256 of `bytes`.
fn hex_sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}
