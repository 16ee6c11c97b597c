//! The Node host (`hosts/node/`, issue #31): installed from the repository with the command its
//! README gives (`npm ci` in `hosts/node`, whose `prepare` transpiles the component), its own
//! suite (`node --test`: the public vectors with its real imports, its store, workspace and
//! process identity on real files and processes) passes, and so does its interop suite against
//! this binary (`PROCLEASE_BIN`). Needs Node 20 and npm, and the npm registry on first run.

use std::path::Path;
use std::process::Command;

#[test]
fn the_node_host_installs_from_its_readme_and_passes_its_suite_and_the_interop_suite() {
    let package = Path::new(env!("CARGO_MANIFEST_DIR")).join("../hosts/node");
    let install = Command::new("npm").args(["ci", "--no-audit", "--no-fund"]).current_dir(&package).output().expect("npm runs `npm ci` in hosts/node");
    assert!(
        install.status.success(),
        "npm ci in hosts/node failed (it needs Node 20, npm and the registry):\n{}{}",
        String::from_utf8_lossy(&install.stdout),
        String::from_utf8_lossy(&install.stderr)
    );
    let vectors = std::env::var_os("PROCLEASE_VECTORS").map_or_else(|| package.join("../../../shared/vectors/public"), std::path::PathBuf::from);
    let run = Command::new("node")
        .args(["--test"])
        .current_dir(&package)
        .env("PROCLEASE_BIN", env!("CARGO_BIN_EXE_proclease"))
        .env("PROCLEASE_VECTORS", vectors)
        .output()
        .expect("node --test runs in hosts/node");
    let stdout = String::from_utf8_lossy(&run.stdout);
    let summary: Vec<&str> = stdout.lines().filter(|l| l.starts_with("# ")).collect();
    eprintln!("{}", summary.join("\n"));
    assert!(run.status.success(), "the Node host's suite failed:\n{stdout}\n{}", String::from_utf8_lossy(&run.stderr));
    let count = |key: &str| summary.iter().find_map(|l| l.strip_prefix(&format!("# {key} "))).and_then(|n| n.trim().parse::<u32>().ok());
    assert_eq!(count("fail"), Some(0), "{stdout}");
    assert_eq!(count("skipped"), Some(0), "nothing may be skipped here (PROCLEASE_BIN is set):\n{stdout}");
    assert!(count("pass").is_some_and(|n| n > 0), "{stdout}");
}
