//! The Python host (`hosts/python/`, issue #31): installed from the repository with the command
//! its README gives (`bash hosts/python/setup.sh`), its own suite (`hosts/python/tests`: the
//! public vectors through its loader, its store, workspace and process identity on real files
//! and processes) passes, and so does its interop suite against this binary (`PROCLEASE_BIN`):
//! a lease it takes is active in the native `doctor --json` and recovered by the native
//! `recover` once killed, and the reverse. Needs `python3` 3.11 or newer (or `$PYTHON`) with
//! `venv`, and PyPI for the pinned wheels on first run.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn vectors() -> PathBuf {
    std::env::var_os("PROCLEASE_VECTORS").map_or_else(|| repository().join("../shared/vectors/public"), PathBuf::from)
}

#[test]
fn the_python_host_installs_from_its_readme_and_passes_its_suite_and_the_interop_suite() {
    let package = repository().join("hosts/python");
    let setup = Command::new("bash").arg(package.join("setup.sh")).output().expect("bash runs hosts/python/setup.sh");
    assert!(
        setup.status.success(),
        "hosts/python/setup.sh failed (it needs python3 >= 3.11 with venv, and PyPI):\n{}{}",
        String::from_utf8_lossy(&setup.stdout),
        String::from_utf8_lossy(&setup.stderr)
    );
    let command = package.join(".venv/bin/proclease");
    assert!(command.is_file(), "setup.sh installed no console command at {}", command.display());
    let run = Command::new(package.join(".venv/bin/python"))
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"])
        .current_dir(&package)
        .env("PROCLEASE_BIN", env!("CARGO_BIN_EXE_proclease"))
        .env("PROCLEASE_VECTORS", vectors())
        .output()
        .expect("pytest runs in hosts/python/.venv");
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    eprintln!("{stdout}");
    assert!(run.status.success(), "the Python host's suite failed:\n{stdout}\n{stderr}");
    let last = stdout.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or_default();
    assert!(last.contains(" passed") && !last.contains("failed") && !last.contains("error") && !last.contains("skipped"), "pytest's closing line: {last}");
}
