//! The Python and Node packages (`hosts/python`, `hosts/node`), installed the way their READMEs
//! say, for the tests that run them beside the native host. Shared by `host/tests` and, through
//! `#[path]`, by `tests/tests/mixed_hosts.rs`.
#![allow(dead_code)] // each test crate uses part of it

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The package `hosts/<name>`.
pub fn package(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../hosts").join(name)
}

/// Asserts that `output` (of `what`) succeeded, showing its output when it did not.
pub fn checked(what: &str, output: std::io::Result<Output>) {
    let output = output.unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(output.status.success(), "{what} failed:\n{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
}

/// Installs both packages once per test binary: `hosts/python/setup.sh` (a venv with the
/// package and its pinned wheels; needs python3 >= 3.11), and `npm ci` in `hosts/node` unless
/// its packages and transpiled component are there (Node 20).
pub fn installed() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        checked("hosts/python/setup.sh", Command::new("bash").arg(package("python").join("setup.sh")).output());
        let node = package("node");
        if !node.join("node_modules/.package-lock.json").is_file() || !node.join("component").is_dir() {
            checked("npm ci in hosts/node", Command::new("npm").args(["ci", "--no-audit", "--no-fund"]).current_dir(&node).output());
        }
    });
}
