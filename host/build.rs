//! Builds the proclease WebAssembly component from `guest/component` and embeds it.
//!
//! The guest is built by a nested `cargo build --target wasm32-wasip2 --release` with its own
//! target directory (sharing the outer one deadlocks under `cargo build --release`) and an
//! environment cleaned of everything the outer cargo set for this build script (rustflags,
//! profile and target settings), in the manner of wasmtime's test-programs artifacts. The
//! component and its sha256 are handed to the crate as `OUT_DIR/proclease.wasm` and
//! `PROCLEASE_COMPONENT_SHA256`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::{env, fs};

use sha2::{Digest, Sha256};

const TARGET: &str = "wasm32-wasip2";

fn main() {
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let root = manifest_dir.parent().expect("host/ lives in the workspace root").to_path_buf();
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    for watched in ["guest", "wit", "Cargo.lock"] {
        println!("cargo:rerun-if-changed={}", root.join(watched).display());
    }

    ensure_target_installed();
    let target_dir = out_dir.join("guest-target");
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .arg("build")
        .arg("--release")
        .arg("--locked")
        .args(["--target", TARGET, "-p", "proclease-component"])
        .arg("--manifest-path")
        .arg(root.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target_dir)
        // A small, stripped component: the bytes users load into other runtimes.
        .env("CARGO_PROFILE_RELEASE_DEBUG", "false")
        .env("CARGO_PROFILE_RELEASE_STRIP", "true")
        .env("CARGO_PROFILE_RELEASE_OPT_LEVEL", "s")
        .env("CARGO_PROFILE_RELEASE_LTO", "true")
        .env("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "1")
        .env("CARGO_PROFILE_RELEASE_PANIC", "abort");
    for (key, _) in env::vars_os() {
        let Some(key) = key.to_str() else { continue };
        if is_build_script_variable(key) {
            command.env_remove(key);
        }
    }
    let status = command.status().expect("could not start cargo to build the guest component");
    if !status.success() {
        panic!("building the guest component (guest/component for {TARGET}) failed; see the cargo output above");
    }

    let built = target_dir.join(TARGET).join("release").join("proclease_component.wasm");
    let bytes = fs::read(&built).unwrap_or_else(|e| panic!("reading {}: {e}", built.display()));
    let embedded = out_dir.join("proclease.wasm");
    write_if_changed(&embedded, &bytes);
    let digest = Sha256::digest(&bytes);
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    println!("cargo:rustc-env=PROCLEASE_COMPONENT_SHA256={hex}");
}

/// Variables cargo sets for this build script, or that would change how the guest compiles.
/// `CARGO_HOME` and the network/registry settings are kept.
fn is_build_script_variable(key: &str) -> bool {
    let kept = ["CARGO_HOME", "CARGO_NET_", "CARGO_HTTP_", "CARGO_REGISTRIES_", "CARGO_REGISTRY_"];
    if kept.iter().any(|k| key.starts_with(k)) {
        return false;
    }
    key.starts_with("CARGO_")
        || key.starts_with("RUSTC")
        || key.starts_with("DEP_")
        || matches!(
            key,
            "RUSTFLAGS" | "RUSTDOCFLAGS" | "RUSTDOC" | "OUT_DIR" | "TARGET" | "HOST" | "PROFILE" | "OPT_LEVEL" | "DEBUG" | "NUM_JOBS"
        )
}

/// The wasm target must be installed for the active toolchain. `rust-toolchain.toml` lists it,
/// and rustup installs it with the toolchain; if it is still missing, try `rustup target add`
/// and otherwise say in one line how to fix it.
fn ensure_target_installed() {
    let rustc = env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let sysroot = Command::new(&rustc)
        .args(["--print", "sysroot"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    let installed = |sysroot: &Path| sysroot.join("lib/rustlib").join(TARGET).join("lib").is_dir();
    if sysroot.as_deref().is_some_and(installed) {
        return;
    }
    let mut rustup = Command::new("rustup");
    rustup.args(["target", "add", TARGET]);
    if let Ok(toolchain) = env::var("RUSTUP_TOOLCHAIN") {
        rustup.args(["--toolchain", &toolchain]);
    }
    match rustup.status() {
        Ok(status) if status.success() => {}
        _ => panic!("the {TARGET} target is missing; install it with `rustup target add {TARGET}` and build again"),
    }
}

fn write_if_changed(path: &Path, bytes: &[u8]) {
    if fs::read(path).ok().as_deref() != Some(bytes) {
        fs::write(path, bytes).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    }
}
