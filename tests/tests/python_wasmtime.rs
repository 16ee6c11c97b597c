//! The same component in a third host: the exact bytes `proclease component` writes, loaded in
//! Python by PyPI's `wasmtime` with every import written in Python (`tests/py/`), must pass
//! every public conformance vector with the same per-suite counts as the Rust runner's, natively
//! and through the component in wasmtime, and the Python scenario and contract tests. Needs
//! `python3` (3.11 or newer, or `$PYTHON`); `tests/py/setup.sh` makes `tests/py/.venv` from the
//! hash-pinned `hosts/python/requirements.txt` on first run.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use proclease_tests::conformance::{self, Backend, ComponentBackend, Native, SuiteReport};

/// `(passed, total, skipped)` of one suite.
type Counts = (usize, usize, usize);

/// Parses `<suite> python: <passed>/<total>[ (<n> skipped: dynamic-type)]`.
fn python_line(line: &str) -> Option<(String, Counts)> {
    let (suite, rest) = line.trim().split_once(" python: ")?;
    let (counts, skipped) = match rest.split_once(" (") {
        Some((counts, note)) => (counts, note.strip_suffix(" skipped: dynamic-type)")?.parse().ok()?),
        None => (rest, 0),
    };
    let (passed, total) = counts.split_once('/')?;
    Some((suite.to_string(), (passed.parse().ok()?, total.parse().ok()?, skipped)))
}

fn rust_counts(backend: &mut dyn Backend) -> BTreeMap<String, Counts> {
    let dir = conformance::public_vectors_dir();
    let files = conformance::vector_files(&dir).unwrap_or_else(|e| panic!("cannot read the vectors at {}: {e}", dir.display()));
    assert!(!files.is_empty(), "no *.jsonl vectors in {}", dir.display());
    files
        .iter()
        .map(|file| {
            let report: SuiteReport = conformance::run_file(file, backend).unwrap_or_else(|e| panic!("{e}"));
            assert!(report.known && report.failures.is_empty(), "the Rust runner itself fails: {}", report.summary());
            (report.suite, (report.passed, report.total, report.skipped))
        })
        .collect()
}

#[test]
fn the_component_passes_the_vectors_and_scenarios_in_python() {
    let py = Path::new(env!("CARGO_MANIFEST_DIR")).join("py");
    let build = py.join("build");
    std::fs::create_dir_all(&build).expect("tests/py/build");
    let wasm = build.join("proclease.wasm");
    std::fs::write(&wasm, proclease::component::BYTES).expect("write the component");

    let setup = Command::new("bash").arg(py.join("setup.sh")).output().expect("bash must be installed to prepare the Python suite");
    assert!(
        setup.status.success(),
        "tests/py/setup.sh failed (it needs python3 >= 3.11 with venv, and PyPI):\n{}{}",
        String::from_utf8_lossy(&setup.stdout),
        String::from_utf8_lossy(&setup.stderr)
    );

    let vectors = conformance::public_vectors_dir();
    let run = Command::new(py.join(".venv/bin/python"))
        .args(["-m", "pytest", "-q"])
        .current_dir(&py)
        .env("PROCLEASE_WASM", &wasm)
        .env("PROCLEASE_VECTORS", &vectors)
        .output()
        .expect("run pytest in tests/py/.venv");
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    for line in stdout.lines().filter(|l| l.contains(" python: ")) {
        eprintln!("{line}");
    }
    assert!(run.status.success(), "pytest failed:\n{stdout}\n{stderr}");
    let last = stdout.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or_default();
    assert!(last.contains(" passed") && !last.contains("failed") && !last.contains("error"), "pytest's closing line: {last}\n{stdout}");

    let mut python = BTreeMap::new();
    for line in stdout.lines().filter(|l| l.contains(" python: ")) {
        let (suite, counts) = python_line(line).unwrap_or_else(|| panic!("unreadable suite line: {line}"));
        assert!(python.insert(suite.clone(), counts).is_none(), "{suite} reported twice");
    }

    let native = rust_counts(&mut Native);
    let component = rust_counts(&mut ComponentBackend::new().expect("the component instantiates"));
    assert_eq!(native, component, "the Rust runner's native and component counts differ");
    let handled: Vec<&str> = native.keys().map(String::as_str).collect();
    for suite in conformance::HANDLED {
        assert!(handled.contains(suite), "{suite}: no vector file in {}", vectors.display());
    }
    assert_eq!(python, native, "per-suite (passed, total, skipped) in Python differ from the Rust runner's");
}

#[test]
fn suite_lines_are_read_as_the_python_runner_prints_them() {
    assert_eq!(python_line("proc-stat python: 145/145"), Some(("proc-stat".into(), (145, 145, 0))));
    assert_eq!(python_line("raw-lease-transition python: 467/690 (223 skipped: dynamic-type)"), Some(("raw-lease-transition".into(), (467, 690, 223))));
    assert_eq!(python_line("x python: 1/2 (unknown suite)"), None);
    assert_eq!(python_line("proc-stat node: 145/145"), None);
}
