//! `proclease`: crash-safe, process-owned leases on shared local state.
//!
//! Exit codes: 0 success; 1 a record is invalid or an operation failed; 2 usage error.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use proclease::core::records::detect::FileVerdict;
use proclease::{Error, Runtime};
use serde_json::json;

/// The largest file `validate` reads (the largest record the reference allows is 32 KiB).
const MAX_VALIDATE_BYTES: u64 = 4 << 20;

#[derive(Parser)]
#[command(
    name = "proclease",
    version,
    about = "Crash-safe, process-owned leases on shared local state (ghostget 0.17.2 compatible)",
    after_help = "Examples:\n  \
        proclease validate ~/.local/share/ghostget/recovery/beeper-message-like-me-export-admission/active.json\n  \
        proclease validate --json lease.json other.json\n  \
        proclease validate examples/records\n  \
        proclease component -o proclease.wasm\n\n\
        Exit status: 0 ok, 1 invalid record or failure, 2 usage error."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Check record files as ghostget's readers would: kind, schema, canonical bytes, sha256,
    /// or the exact reason a reader refuses them.
    #[command(after_help = "Examples:\n  proclease validate active.json\n  proclease validate --json *.json\n\n\
        Exit status: 0 when every file is valid, 1 when any is invalid or unreadable.")]
    Validate {
        /// Record files (export admission, directory lease, invocation lease, portable identity),
        /// or directories whose `*.json` files (recursively) are checked.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Print one JSON document (an array with one object per file) instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Write the embedded WebAssembly component, for other runtimes (Node/jco, Python/wasmtime).
    #[command(after_help = "Examples:\n  proclease component -o proclease.wasm\n  proclease component > proclease.wasm\n  proclease component --interfaces")]
    Component {
        /// Where to write it; standard output when absent.
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Instead of the bytes, print the component's sha256, size, and the interfaces it
        /// imports (what a host must provide) and exports.
        #[arg(long, conflicts_with = "output")]
        interfaces: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Validate { files, json } => validate(&files, json),
        Command::Component { interfaces: true, .. } => describe_component(),
        Command::Component { output, .. } => write_component(output.as_deref()),
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("proclease: {error}");
            ExitCode::from(1)
        }
    }
}

/// One file's outcome: a verdict, or why it could not be read.
enum Outcome {
    Verdict(FileVerdict),
    Unreadable(String),
}

fn validate(files: &[PathBuf], as_json: bool) -> Result<ExitCode, Error> {
    let runtime = Runtime::shared()?;
    let mut instance = runtime.instantiate()?;
    let mut all_valid = true;
    let mut documents = Vec::new();
    for path in &expand_directories(files) {
        let outcome = match read_record_text(path) {
            Ok(text) => {
                let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
                Outcome::Verdict(instance.records().inspect_file(name, &text)?)
            }
            Err(message) => Outcome::Unreadable(message),
        };
        let valid = matches!(&outcome, Outcome::Verdict(v) if v.error.is_none());
        all_valid &= valid;
        if as_json {
            documents.push(verdict_json(path, &outcome));
        } else {
            println!("{}", verdict_line(path, &outcome));
        }
    }
    if as_json {
        let text = serde_json::to_string_pretty(&documents).unwrap_or_default();
        println!("{text}");
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
                None => format!(
                    "{path}: valid {kind} {}, {canonical}, sha256 {}",
                    v.schema.as_deref().unwrap_or("?"),
                    v.sha256
                ),
                Some(error) => format!("{path}: invalid {kind}: {error} ({canonical}, sha256 {})", v.sha256),
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
        }),
    }
}

fn describe_component() -> Result<ExitCode, Error> {
    let runtime = Runtime::shared()?;
    println!("sha256  {}", proclease::component::SHA256);
    println!("bytes   {}", proclease::component::BYTES.len());
    for name in runtime.import_names() {
        println!("import  {name}");
    }
    for name in runtime.export_names() {
        println!("export  {name}");
    }
    Ok(ExitCode::SUCCESS)
}

fn write_component(output: Option<&Path>) -> Result<ExitCode, Error> {
    let bytes = proclease::component::BYTES;
    match output {
        Some(path) => std::fs::write(path, bytes).map_err(|e| Error::File {
            path: path.to_path_buf(),
            message: format!("cannot write the component: {e}"),
        })?,
        None => {
            let mut stdout = std::io::stdout().lock();
            stdout.write_all(bytes).and_then(|()| stdout.flush()).map_err(|e| Error::File {
                path: PathBuf::from("<stdout>"),
                message: format!("cannot write the component: {e}"),
            })?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
