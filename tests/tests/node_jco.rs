//! The same component in another runtime: the exact bytes `proclease component` writes,
//! transpiled with jco and run in Node with imports written in JavaScript (`tests/js/`), must
//! pass every public conformance vector with the same results as in wasmtime, and the Node
//! scenario tests, through the Node host package's loader (`hosts/node/lib/component.mjs`).
//! Needs `node` and `npm` (Node 20); the package's pinned packages are installed from
//! `hosts/node/package-lock.json` on first run.

use std::path::Path;
use std::process::Command;

#[test]
fn the_component_passes_the_vectors_and_scenarios_in_node() {
    let js = Path::new(env!("CARGO_MANIFEST_DIR")).join("js");
    let build = js.join("build");
    std::fs::create_dir_all(&build).expect("tests/js/build");
    let wasm = build.join("proclease.wasm");
    std::fs::write(&wasm, proclease::component::BYTES).expect("write the component");

    // tests/js loads the component with the Node host package's loader (hosts/node).
    let package = js.join("../../hosts/node");
    if !package.join("node_modules/@bytecodealliance/jco-transpile").is_dir() {
        let install = Command::new("npm").args(["ci", "--no-audit", "--no-fund"]).current_dir(&package).output().expect("npm must be installed (Node 20) to run the Node suite");
        assert!(install.status.success(), "npm ci in hosts/node failed:\n{}", String::from_utf8_lossy(&install.stderr));
    }
    let vectors = proclease_tests::conformance::public_vectors_dir();
    let run = Command::new("node")
        .arg("--test")
        .current_dir(&js)
        .env("PROCLEASE_WASM", &wasm)
        .env("PROCLEASE_VECTORS", &vectors)
        .output()
        .expect("node must be installed (Node 20) to run the Node suite");
    let stdout = String::from_utf8_lossy(&run.stdout);
    for line in stdout.lines().filter(|l| l.contains(" node: ")) {
        eprintln!("{}", line.trim_start_matches("# "));
    }
    assert!(run.status.success(), "node --test failed:\n{stdout}\n{}", String::from_utf8_lossy(&run.stderr));
    assert!(stdout.contains("# fail 0"), "{stdout}");
    assert!(stdout.lines().filter(|l| l.contains(" node: ")).count() >= 17, "every suite ran in Node:\n{stdout}");
}
