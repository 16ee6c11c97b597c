//! Builds the hostile test component (`tests/hostile-guest`, world `wit/hostile.wit` there) for
//! the guest-sandbox tests and hands it to the crate as `OUT_DIR/hostile.wasm`
//! ([`proclease_tests::hostile::BYTES`]).
//!
//! Built as `host/build.rs` builds the real guest: a nested `cargo build --target wasm32-wasip2
//! --release --locked` with its own target directory under `OUT_DIR` (sharing the outer one
//! deadlocks under `cargo build --release`) and an environment cleaned of everything the outer
//! cargo set for this build script. A cold build takes ~35 s (the wit-bindgen macro stack);
//! later builds only rerun when the guest, the WIT files or `Cargo.lock` change.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::{env, fs};

const TARGET: &str = "wasm32-wasip2";

fn main() {
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let root = manifest_dir.parent().expect("tests/ lives in the workspace root").to_path_buf();
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    for watched in [manifest_dir.join("hostile-guest"), root.join("wit"), root.join("Cargo.lock")] {
        println!("cargo:rerun-if-changed={}", watched.display());
    }

    let target_dir = out_dir.join("hostile-target");
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .arg("build")
        .arg("--release")
        .arg("--locked")
        .args(["--target", TARGET, "-p", "proclease-hostile-guest"])
        .arg("--manifest-path")
        .arg(root.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target_dir)
        // Small and quick: no debug info, no LTO (one tiny crate), panics abort.
        .env("CARGO_PROFILE_RELEASE_DEBUG", "false")
        .env("CARGO_PROFILE_RELEASE_STRIP", "true")
        .env("CARGO_PROFILE_RELEASE_OPT_LEVEL", "1")
        .env("CARGO_PROFILE_RELEASE_PANIC", "abort");
    for (key, _) in env::vars_os() {
        let Some(key) = key.to_str() else { continue };
        if is_build_script_variable(key) {
            command.env_remove(key);
        }
    }
    let status = command.status().expect("could not start cargo to build the hostile test component");
    if !status.success() {
        panic!(
            "building the hostile test component (tests/hostile-guest for {TARGET}) failed; see the cargo output above \
             (if the target is missing: `rustup target add {TARGET}`)"
        );
    }

    let built = target_dir.join(TARGET).join("release").join("proclease_hostile_guest.wasm");
    let bytes = fs::read(&built).unwrap_or_else(|e| panic!("reading {}: {e}", built.display()));
    write_if_changed(&out_dir.join("hostile.wasm"), &bytes);
}

/// Variables cargo sets for this build script, or that would change how the guest compiles
/// (the same list as `host/build.rs`). `CARGO_HOME` and the network/registry settings are kept.
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

fn write_if_changed(path: &Path, bytes: &[u8]) {
    if fs::read(path).ok().as_deref() != Some(bytes) {
        fs::write(path, bytes).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    }
}
