//! `proclease component`, `proclease man`: the embedded WebAssembly component for other
//! runtimes, and the manual pages.

use std::io::{IsTerminal as _, Write as _};
use std::path::Path;
use std::process::ExitCode;

use proclease::Runtime;
use serde_json::json;

use super::Failure;

/// Prints the component's sha256, size, WIT package, imports and exports (text or JSON).
pub fn describe_component(as_json: bool) -> Result<ExitCode, Failure> {
    let runtime = Runtime::shared()?;
    let (imports, exports) = (runtime.import_names(), runtime.export_names());
    if as_json {
        super::print_json(&json!({
            "schemaVersion": super::JSON_SCHEMA_VERSION,
            "sha256": proclease::component::SHA256,
            "bytes": proclease::component::BYTES.len(),
            "witPackage": proclease::component::WIT_PACKAGE,
            "imports": imports,
            "exports": exports,
        }));
        return Ok(ExitCode::SUCCESS);
    }
    outln!("sha256  {}", proclease::component::SHA256);
    outln!("bytes   {}", proclease::component::BYTES.len());
    outln!("wit     {}", proclease::component::WIT_PACKAGE);
    for name in imports {
        outln!("import  {name}");
    }
    for name in exports {
        outln!("export  {name}");
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes the component bytes to `output` (an existing file only with `force`) or to standard
/// output (never a terminal).
pub fn write_component(output: Option<&Path>, force: bool) -> Result<ExitCode, Failure> {
    let bytes = proclease::component::BYTES;
    match output {
        Some(path) => {
            let mut options = std::fs::OpenOptions::new();
            options.write(true);
            if force {
                options.create(true).truncate(true);
            } else {
                options.create_new(true);
            }
            let mut file = options.open(path).map_err(|e| {
                let failure = Failure::new(format!("{}: cannot write the component: {e}", path.display()));
                if e.kind() == std::io::ErrorKind::AlreadyExists { failure.hint("it exists and was kept; add --force to replace it") } else { failure }
            })?;
            file.write_all(bytes).map_err(|e| Failure::new(format!("{}: cannot write the component: {e}", path.display())))?;
        }
        None => {
            let mut stdout = std::io::stdout().lock();
            if stdout.is_terminal() {
                return Err(Failure::new("standard output is a terminal: the component is binary")
                    .hint("write it to a file with -o proclease.wasm, or redirect: proclease component > proclease.wasm"));
            }
            stdout.write_all(bytes).and_then(|()| stdout.flush()).map_err(|e| Failure::new(format!("cannot write the component: {e}")))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints the manual page of proclease, or writes proclease.1 and one page per subcommand
/// (`proclease-run.1`, …) into `dir`.
pub fn man_pages(command: clap::Command, dir: Option<&Path>) -> Result<ExitCode, Failure> {
    let io = |path: &Path, e: std::io::Error| Failure::new(format!("{}: {e}", path.display()));
    match dir {
        None => {
            match clap_mangen::Man::new(command).render(&mut std::io::stdout()) {
                // The reader stopped early (`proclease man | head`): nothing to report.
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
                other => other.map_err(|e| Failure::new(format!("cannot write the manual page: {e}")))?,
            }
        }
        Some(dir) => {
            std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
            clap_mangen::generate_to(command, dir).map_err(|e| io(dir, e))?;
            outln!("wrote the manual pages to {}", dir.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}
