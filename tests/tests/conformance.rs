//! The public conformance vectors, run natively (proclease-core linked in) and through the
//! embedded component in wasmtime. Every suite file found must be a known suite and pass 100%
//! on both paths (vectors tagged `dynamic-type` that the typed API cannot express are counted
//! as skipped, as the vectors README allows); an unknown suite fails the test.

use proclease_tests::conformance::{self, Backend, ComponentBackend, Native, SuiteReport};

fn run_all(backend: &mut dyn Backend) -> Vec<SuiteReport> {
    let dir = conformance::public_vectors_dir();
    let files = conformance::vector_files(&dir).unwrap_or_else(|e| panic!("cannot read the vectors at {}: {e} (set PROCLEASE_VECTORS)", dir.display()));
    assert!(!files.is_empty(), "no *.jsonl vectors in {}", dir.display());
    let mut reports = Vec::new();
    for file in files {
        reports.push(conformance::run_file(&file, backend).unwrap_or_else(|e| panic!("{e}")));
    }
    reports
}

fn assert_all_pass(reports: &[SuiteReport]) {
    let mut problems = Vec::new();
    for report in reports {
        eprintln!("{}", report.summary());
        if !report.known {
            problems.push(format!("{}: unknown suite", report.suite));
        }
        for failure in report.failures.iter().take(20) {
            problems.push(format!("{} [{}]\n  expected: {}\n  actual:   {}", failure.name, report.backend, failure.expected, failure.actual));
        }
    }
    let handled: Vec<&str> = reports.iter().map(|r| r.suite.as_str()).collect();
    for suite in conformance::HANDLED {
        if !handled.contains(suite) {
            problems.push(format!("{suite}: no vector file found"));
        }
    }
    assert!(problems.is_empty(), "{} problem(s):\n{}", problems.len(), problems.join("\n"));
}

#[test]
fn public_vectors_pass_natively() {
    assert_all_pass(&run_all(&mut Native));
}

#[test]
fn public_vectors_pass_through_the_component() {
    let mut backend = ComponentBackend::new().expect("the component instantiates");
    assert_all_pass(&run_all(&mut backend));
}

/// The runner itself can fail: a copied vector file with one altered expectation is reported
/// with that vector's name, and the others still pass.
#[test]
fn an_altered_expectation_is_reported_by_name() {
    let source = conformance::public_vectors_dir().join("sha256.jsonl");
    let text = std::fs::read_to_string(&source).expect("sha256 vectors");
    let mut lines: Vec<String> = text.lines().take(3).map(String::from).collect();
    let mut altered: serde_json::Value = serde_json::from_str(&lines[1]).expect("a vector");
    altered["expect"]["hex"] = serde_json::json!("0".repeat(64));
    let name = altered["name"].as_str().expect("named").to_string();
    lines[1] = altered.to_string();
    let dir = tempfile::tempdir().expect("tempdir");
    let copy = dir.path().join("sha256.jsonl");
    std::fs::write(&copy, lines.join("\n") + "\n").expect("write copy");
    for backend in [&mut Native as &mut dyn Backend, &mut ComponentBackend::new().expect("component")] {
        let report = conformance::run_file(&copy, backend).expect("runs");
        assert_eq!((report.passed, report.total), (2, 3), "{}", report.backend);
        assert_eq!(report.failures.len(), 1);
        assert_eq!(report.failures[0].name, name);
    }
}

/// A suite the runner does not know is a failure of every vector in it, never a pass.
#[test]
fn an_unknown_suite_fails() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("no-such-suite.jsonl");
    std::fs::write(&path, "{\"suite\":\"no-such-suite\",\"name\":\"no-such-suite:x\",\"expect\":{}}\n").expect("write");
    let report = conformance::run_file(&path, &mut Native).expect("runs");
    assert!(!report.known);
    assert_eq!((report.passed, report.total), (0, 1));
    assert_eq!(report.summary(), "no-such-suite native: 0/1 (unknown suite)");
}

/// The `conformance` command: exit 0 when every vector passes on both paths; an altered
/// expectation makes it exit non-zero and name the vector.
#[test]
fn the_conformance_command_reports_and_fails_by_vector_name() {
    let public = conformance::public_vectors_dir();
    let good =
        std::process::Command::new(env!("CARGO_BIN_EXE_conformance")).arg(public.join("sha256.jsonl")).arg(public.join("proc-stat.jsonl")).output().expect("conformance runs");
    let text = String::from_utf8_lossy(&good.stdout);
    assert!(good.status.success(), "{text}");
    assert!(text.contains("sha256 native: 99/99") && text.contains("sha256 component: 99/99"), "{text}");

    let dir = tempfile::tempdir().expect("tempdir");
    let source = std::fs::read_to_string(public.join("proc-stat.jsonl")).expect("vectors");
    let mut lines: Vec<String> = source.lines().map(String::from).collect();
    let mut altered: serde_json::Value = serde_json::from_str(&lines[3]).expect("vector");
    altered["expect"] = serde_json::json!({"status": "alive", "rawStart": "1", "processStartId": "0"});
    let name = altered["name"].as_str().expect("name").to_string();
    lines[3] = altered.to_string();
    std::fs::write(dir.path().join("proc-stat.jsonl"), lines.join("\n") + "\n").expect("write");
    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_conformance")).arg(dir.path()).arg("--json").output().expect("runs");
    assert_eq!(bad.status.code(), Some(1));
    let doc: serde_json::Value = serde_json::from_slice(&bad.stdout).expect("--json");
    assert_eq!(doc["ok"], false);
    for suite in doc["suites"].as_array().expect("suites") {
        assert_eq!(suite["failureCount"], 1);
        assert_eq!(suite["failures"][0]["name"], name.as_str());
    }
}
