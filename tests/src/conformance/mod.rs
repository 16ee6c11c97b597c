//! The conformance runner: reads `<suite>.jsonl` vector files, runs every vector through a
//! [`Backend`], and compares the result with `expect` by the rules of
//! `shared/vectors/README.md` (JSON values compared as values, numbers numerically; strings
//! byte for byte).

mod backend;
mod suites;

use std::path::{Path, PathBuf};

use serde_json::Value;

pub use backend::{Backend, ComponentBackend, Infra, Native};
pub use suites::HANDLED;

/// One vector that did not give the expected result.
#[derive(Debug, Clone)]
pub struct Failure {
    /// The vector's `name`.
    pub name: String,
    /// Its `expect`.
    pub expected: Value,
    /// What the backend gave (or `{"infrastructure": message}` if the backend broke).
    pub actual: Value,
}

/// The outcome of one suite file on one backend.
#[derive(Debug, Clone)]
pub struct SuiteReport {
    /// The suite name (the file name without `.jsonl`).
    pub suite: String,
    /// The file it came from.
    pub path: PathBuf,
    /// `native` or `component`.
    pub backend: &'static str,
    /// Vectors that passed.
    pub passed: usize,
    /// Vectors in the file.
    pub total: usize,
    /// Every failure, in file order.
    pub failures: Vec<Failure>,
    /// Vectors tagged `dynamic-type` whose arguments the typed API cannot express (the vectors
    /// README allows skipping exactly these); they count neither as passed nor as failed.
    pub skipped: usize,
    /// False when the runner does not know the suite (every vector then counts as failed).
    pub known: bool,
}

impl SuiteReport {
    /// `<suite> <backend>: <passed>/<total>`, with `unknown suite` for a suite the runner does
    /// not handle.
    pub fn summary(&self) -> String {
        let unknown = if self.known { "" } else { " (unknown suite)" };
        let skipped = if self.skipped > 0 { format!(" ({} skipped: dynamic-type)", self.skipped) } else { String::new() };
        format!("{} {}: {}/{}{unknown}{skipped}", self.suite, self.backend, self.passed, self.total)
    }
}

/// Where the public vectors are: `$PROCLEASE_VECTORS`, else `../shared/vectors/public` beside
/// the repository (where CI puts it).
pub fn public_vectors_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("PROCLEASE_VECTORS") {
        return PathBuf::from(dir);
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/vectors/public")
}

/// The `*.jsonl` files of a directory (or the file itself), sorted.
pub fn vector_files(path: &Path) -> std::io::Result<Vec<PathBuf>> {
    if path.is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(path)?.filter_map(|entry| entry.ok().map(|e| e.path())).filter(|p| p.extension().is_some_and(|e| e == "jsonl")).collect();
    files.sort();
    Ok(files)
}

/// Runs every vector of one suite file through `backend`.
///
/// Errors: the file cannot be read or a line is not a JSON object (the line number is named).
pub fn run_file(path: &Path, backend: &mut dyn Backend) -> Result<SuiteReport, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let suite = path.file_stem().and_then(|s| s.to_str()).unwrap_or_default().to_string();
    let mut report = SuiteReport {
        known: suites::HANDLED.contains(&suite.as_str()),
        suite,
        path: path.to_path_buf(),
        backend: backend.label(),
        passed: 0,
        total: 0,
        failures: Vec::new(),
        skipped: 0,
    };
    for (index, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let vector: Value = serde_json::from_str(line).map_err(|e| format!("{}:{}: not JSON: {e}", path.display(), index + 1))?;
        report.total += 1;
        let name = vector["name"].as_str().unwrap_or("<unnamed>").to_string();
        let expected = vector["expect"].clone();
        let suite = vector["suite"].as_str().unwrap_or(&report.suite).to_string();
        let actual = match suites::evaluate(&suite, &vector, backend) {
            Some(Ok(actual)) => actual,
            Some(Err(infra)) => serde_json::json!({ "infrastructure": infra }),
            None => serde_json::json!({ "unknown suite": suite }),
        };
        let dynamic = vector["tags"].as_array().is_some_and(|tags| tags.iter().any(|t| t == "dynamic-type"));
        if actual == suites::SKIPPED && dynamic {
            report.skipped += 1;
        } else if suites::matches(&expected, &actual) {
            report.passed += 1;
        } else {
            report.failures.push(Failure { name, expected, actual });
        }
    }
    Ok(report)
}

/// JSON equality as the vectors README asks: member order ignored, numbers compared as
/// numbers (`4242` equals `4242.0`), everything else exactly.
pub fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_eq(p, q)),
        (Value::Object(x), Value::Object(y)) => x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w))),
        _ => a == b,
    }
}

/// Runs every `*.jsonl` file found in `paths` (directories or files) through each backend, in
/// order: one report per suite file and backend.
///
/// Errors: a path cannot be read, or a vector line is not JSON.
pub fn run_paths(paths: &[PathBuf], backends: &mut [&mut dyn Backend]) -> Result<Vec<SuiteReport>, String> {
    let mut reports = Vec::new();
    for path in paths {
        let files = vector_files(path).map_err(|e| format!("{}: {e}", path.display()))?;
        if files.is_empty() {
            return Err(format!("{}: no *.jsonl vector files", path.display()));
        }
        for file in files {
            for backend in backends.iter_mut() {
                reports.push(run_file(&file, &mut **backend)?);
            }
        }
    }
    Ok(reports)
}
