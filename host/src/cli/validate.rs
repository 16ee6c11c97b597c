//! `proclease validate`: check record files as ghostget's readers would.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use proclease::core::records::detect::FileVerdict;
use proclease::{Error, Runtime};
use serde_json::json;

/// The largest file `validate` reads (the largest record the reference allows is 32 KiB).
const MAX_VALIDATE_BYTES: u64 = 4 << 20;

/// One file's outcome: a verdict, or why it could not be read.
enum Outcome {
    Verdict(FileVerdict),
    Unreadable(String),
}

/// Runs `validate`.
pub fn run(files: &[PathBuf], as_json: bool) -> Result<ExitCode, Error> {
    let runtime = Runtime::shared()?;
    let mut instance = runtime.instantiate()?;
    let mut all_valid = true;
    let mut documents = Vec::new();
    let expanded = expand_directories(files);
    if expanded.is_empty() {
        eprintln!("proclease: no *.json files under {}", files.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "));
        return Ok(ExitCode::from(1));
    }
    for path in &expanded {
        let outcome = match read_record_text(path) {
            Ok(text) => {
                let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
                // The directory a file lives in decides its kind, as for the reference's readers.
                let absolute = std::path::absolute(path).unwrap_or_else(|_| path.clone());
                let collection = absolute.parent().and_then(|p| p.file_name()).and_then(|n| n.to_str()).unwrap_or("");
                Outcome::Verdict(instance.records().inspect_file_in(collection, name, &text)?)
            }
            Err(message) => Outcome::Unreadable(message),
        };
        let valid = matches!(&outcome, Outcome::Verdict(v) if v.error.is_none());
        all_valid &= valid;
        if as_json {
            documents.push(verdict_json(path, &outcome));
        } else {
            outln!("{}", verdict_line(path, &outcome));
        }
    }
    if as_json {
        super::print_json(&json!({"schemaVersion": super::JSON_SCHEMA_VERSION, "files": documents}));
    }
    Ok(if all_valid { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// The files to check: each named file, and the `*.json` files below each named directory
/// (sorted; symbolic links are not followed into directories).
fn expand_directories(paths: &[PathBuf]) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            out.push(dir.to_path_buf());
            return;
        };
        let mut children: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        children.sort();
        for child in children {
            let is_dir = std::fs::symlink_metadata(&child).is_ok_and(|m| m.is_dir());
            // proclease's own bookkeeping in a state home (witnesses, locks, intents) holds no
            // records.
            if is_dir && child.file_name().is_some_and(|n| n == ".proclease") {
                continue;
            }
            if is_dir {
                walk(&child, out);
            } else if child.extension().is_some_and(|e| e == "json") {
                out.push(child);
            }
        }
    }
    let mut out = Vec::new();
    for path in paths {
        if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir()) {
            walk(path, &mut out);
        } else {
            out.push(path.clone());
        }
    }
    out
}

/// Reads a record file as text: bounded, strict UTF-8 (a BOM is kept, and makes the file
/// non-canonical, as in the reference).
fn read_record_text(path: &Path) -> Result<String, String> {
    use std::io::Read as _;
    // A FIFO or device would block or never end: only regular files are records.
    let meta = std::fs::metadata(path).map_err(|e| format!("cannot open: {e}"))?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    let file = std::fs::File::open(path).map_err(|e| format!("cannot open: {e}"))?;
    let mut bytes = Vec::new();
    file.take(MAX_VALIDATE_BYTES + 1).read_to_end(&mut bytes).map_err(|e| format!("cannot read: {e}"))?;
    if bytes.len() as u64 > MAX_VALIDATE_BYTES {
        return Err(format!("larger than {MAX_VALIDATE_BYTES} bytes: not a lease record"));
    }
    String::from_utf8(bytes).map_err(|e| format!("not valid UTF-8 (first bad byte at offset {})", e.utf8_error().valid_up_to()))
}

fn verdict_line(path: &Path, outcome: &Outcome) -> String {
    let path = path.display();
    match outcome {
        Outcome::Unreadable(message) => format!("{path}: unreadable: {message}"),
        Outcome::Verdict(v) => {
            let kind = v.kind.map_or("unknown kind", |k| k.name());
            let canonical = if v.canonical { "canonical" } else { "not canonical" };
            match &v.error {
                None => format!("{path}: valid {kind} {}, {canonical}, sha256 {}", v.schema.as_deref().unwrap_or("?"), v.sha256),
                Some(error) => {
                    let hint = v.hint.as_ref().map(|h| format!("; {h}")).unwrap_or_default();
                    format!("{path}: invalid {kind}: {error}{hint} ({canonical}, sha256 {})", v.sha256)
                }
            }
        }
    }
}

fn verdict_json(path: &Path, outcome: &Outcome) -> serde_json::Value {
    let path = path.display().to_string();
    match outcome {
        Outcome::Unreadable(message) => json!({"path": path, "valid": false, "error": message}),
        Outcome::Verdict(v) => json!({
            "path": path,
            "valid": v.error.is_none(),
            "kind": v.kind.map(|k| k.name()),
            "schema": v.schema,
            "canonical": v.canonical,
            "sha256": v.sha256,
            "error": v.error.as_ref().map(|e| e.message().to_string()),
            "hint": v.hint,
        }),
    }
}
