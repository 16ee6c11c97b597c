//! Building a WebAssembly component from a workspace package inside a build script: shared by
//! `host/build.rs` (the proclease component) and `tests/build.rs` (the hostile test component)
//! through `#[path]`.
//!
//! The guest is built by a nested `cargo build --target wasm32-wasip2 --release --locked` with
//! its own target directory (sharing the outer one deadlocks under `cargo build --release`) and
//! an environment cleaned of everything the outer cargo set for the build script (rustflags,
//! profile and target settings), in the manner of wasmtime's test-programs artifacts.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::{env, fs};

/// The target every guest is built for.
pub const TARGET: &str = "wasm32-wasip2";

/// Builds `package` of the workspace at `root` into `target_dir` with the release profile
/// overridden by `profile` (`CARGO_PROFILE_RELEASE_*` variables), and returns the bytes of
/// `<artifact>.wasm`. Panics with a one-line explanation when the build fails.
pub fn build(root: &Path, package: &str, artifact: &str, target_dir: &Path, profile: &[(&str, &str)]) -> Vec<u8> {
    ensure_target_installed();
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .arg("build")
        .arg("--release")
        .arg("--locked")
        .args(["--target", TARGET, "-p", package])
        .arg("--manifest-path")
        .arg(root.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(target_dir);
    for (key, _) in env::vars_os() {
        let Some(key) = key.to_str() else { continue };
        if is_build_script_variable(key) {
            command.env_remove(key);
        }
    }
    for (key, value) in profile {
        command.env(format!("CARGO_PROFILE_RELEASE_{key}"), value);
    }
    let status = command.status().unwrap_or_else(|e| panic!("could not start cargo to build {package}: {e}"));
    if !status.success() {
        panic!("building {package} for {TARGET} failed; see the cargo output above");
    }
    let built: PathBuf = target_dir.join(TARGET).join("release").join(format!("{artifact}.wasm"));
    fs::read(&built).unwrap_or_else(|e| panic!("reading {}: {e}", built.display()))
}

/// Variables cargo sets for a build script, or that would change how the guest compiles.
/// `CARGO_HOME` and the network/registry settings are kept.
fn is_build_script_variable(key: &str) -> bool {
    let kept = ["CARGO_HOME", "CARGO_NET_", "CARGO_HTTP_", "CARGO_REGISTRIES_", "CARGO_REGISTRY_"];
    if kept.iter().any(|k| key.starts_with(k)) {
        return false;
    }
    key.starts_with("CARGO_")
        || key.starts_with("RUSTC")
        || key.starts_with("DEP_")
        || matches!(key, "RUSTFLAGS" | "RUSTDOCFLAGS" | "RUSTDOC" | "OUT_DIR" | "TARGET" | "HOST" | "PROFILE" | "OPT_LEVEL" | "DEBUG" | "NUM_JOBS")
}

/// The wasm target must be installed for the active toolchain. `rust-toolchain.toml` lists it,
/// and rustup installs it with the toolchain; if it is still missing, try `rustup target add`
/// and otherwise say in one line how to fix it.
fn ensure_target_installed() {
    let rustc = env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let sysroot = Command::new(&rustc).args(["--print", "sysroot"]).output().ok().filter(|o| o.status.success()).map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
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

/// Writes `bytes` to `path` unless it already holds them (so dependents do not rebuild).
pub fn write_if_changed(path: &Path, bytes: &[u8]) {
    if fs::read(path).ok().as_deref() != Some(bytes) {
        fs::write(path, bytes).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    }
}
