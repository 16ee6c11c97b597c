//! `conformance`: runs directories (or files) of conformance vectors — the format of
//! `shared/vectors/README.md` — natively (proclease-core linked in) and through the embedded
//! component in wasmtime, with the same in-memory fakes the test suite uses.
//!
//! Usage: `cargo run --release -p proclease-tests --bin conformance -- [--json] PATH…`
//!
//! Prints `<suite> <native|component>: <passed>/<total>` per suite file and path, then each
//! failure (at most 20 per suite) with its vector name, expected and actual result. A suite the
//! runner does not know counts as failed. Exit status 0 only if every vector passed on both
//! paths (vectors tagged `dynamic-type` that the typed API cannot express are counted as
//! skipped, as the vectors README allows); 1 otherwise; 2 for a usage error.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use proclease_tests::conformance::{self, Backend, ComponentBackend, Native, SuiteReport};
use serde_json::json;

const MAX_SHOWN: usize = 20;

fn main() -> ExitCode {
    let mut as_json = false;
    let mut paths = Vec::new();
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--json" => as_json = true,
            "-h" | "--help" => {
                println!("usage: conformance [--json] PATH...\n\nRuns every <suite>.jsonl vector file under each PATH natively and through the component.");
                return ExitCode::SUCCESS;
            }
            flag if flag.starts_with('-') => {
                eprintln!("conformance: unknown option {flag}\nusage: conformance [--json] PATH...");
                return ExitCode::from(2);
            }
            path => paths.push(PathBuf::from(path)),
        }
    }
    if paths.is_empty() {
        eprintln!("usage: conformance [--json] PATH...");
        return ExitCode::from(2);
    }
    let mut component = match ComponentBackend::new() {
        Ok(backend) => backend,
        Err(error) => {
            eprintln!("conformance: the component cannot be loaded: {error}");
            return ExitCode::from(1);
        }
    };
    let mut backends: [&mut dyn Backend; 2] = [&mut Native, &mut component];
    let reports = match conformance::run_paths(&paths, &mut backends) {
        Ok(reports) => reports,
        Err(error) => {
            eprintln!("conformance: {error}");
            return ExitCode::from(1);
        }
    };
    let ok = reports.iter().all(|r| r.known && r.failures.is_empty());
    if as_json {
        let _ = writeln!(std::io::stdout().lock(), "{}", serde_json::to_string_pretty(&document(&reports, ok)).unwrap_or_default());
    } else {
        let _ = print_text(&reports);
    }
    if ok { ExitCode::SUCCESS } else { ExitCode::from(1) }
}

/// Prints the text report; a closed pipe (`| head`) ends the output quietly.
fn print_text(reports: &[SuiteReport]) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    for report in reports {
        writeln!(out, "{}  ({})", report.summary(), report.path.display())?;
    }
    for report in reports.iter().filter(|r| !r.failures.is_empty()) {
        writeln!(out, "\n{} {}: {} failure(s)", report.suite, report.backend, report.failures.len())?;
        for failure in report.failures.iter().take(MAX_SHOWN) {
            writeln!(out, "  {}\n    expected: {}\n    actual:   {}", failure.name, failure.expected, failure.actual)?;
        }
        if report.failures.len() > MAX_SHOWN {
            writeln!(out, "  … and {} more", report.failures.len() - MAX_SHOWN)?;
        }
    }
    Ok(())
}

fn document(reports: &[SuiteReport], ok: bool) -> serde_json::Value {
    let suites: Vec<_> = reports
        .iter()
        .map(|r| {
            json!({
                "suite": r.suite,
                "path": r.path.display().to_string(),
                "backend": r.backend,
                "known": r.known,
                "passed": r.passed,
                "total": r.total,
                "skipped": r.skipped,
                "failures": r.failures.iter().take(MAX_SHOWN).map(|f| json!({
                    "name": f.name, "expected": f.expected, "actual": f.actual,
                })).collect::<Vec<_>>(),
                "failureCount": r.failures.len(),
            })
        })
        .collect();
    json!({ "ok": ok, "suites": suites })
}
