//! `proclease component`, `proclease man`: the embedded WebAssembly component for other
//! runtimes, and the manual pages.

use std::io::{IsTerminal as _, Write as _};
use std::path::Path;
use std::process::ExitCode;

use proclease::Runtime;
use serde_json::json;

use super::Failure;

/// Which artifact `proclease component` writes or describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Artifact {
    /// `proclease.wasm`: the lease logic, importing `state-store` and `workspace` (what this
    /// binary, the Python and the Node hosts load today).
    Component,
    /// `proclease-portable.wasm`: the component with the portable store plugged in, importing
    /// the system-call contract instead (`wit/sys.wit`, world `proclease-portable`).
    Portable,
}

impl Artifact {
    fn bytes(self) -> &'static [u8] {
        match self {
            Artifact::Component => proclease::component::BYTES,
            Artifact::Portable => proclease::component::PORTABLE_BYTES,
        }
    }

    fn sha256(self) -> &'static str {
        match self {
            Artifact::Component => proclease::component::SHA256,
            Artifact::Portable => proclease::component::PORTABLE_SHA256,
        }
    }

    /// The file name the hint suggests.
    fn file_name(self) -> &'static str {
        match self {
            Artifact::Component => "proclease.wasm",
            Artifact::Portable => "proclease-portable.wasm",
        }
    }
}

/// Prints the artifact's sha256, size, WIT package, imports and exports (text or JSON).
pub fn describe_component(artifact: Artifact, as_json: bool) -> Result<ExitCode, Failure> {
    let (imports, exports): (Vec<String>, Vec<String>) = match artifact {
        Artifact::Component => {
            let runtime = Runtime::shared()?;
            (runtime.import_names(), runtime.export_names())
        }
        Artifact::Portable => (proclease::component::portable_imports().map(String::from).collect(), proclease::component::portable_exports().map(String::from).collect()),
    };
    if as_json {
        super::print_json(&json!({
            "schemaVersion": super::JSON_SCHEMA_VERSION,
            "sha256": artifact.sha256(),
            "bytes": artifact.bytes().len(),
            "witPackage": proclease::component::WIT_PACKAGE,
            "imports": imports,
            "exports": exports,
        }));
        return Ok(ExitCode::SUCCESS);
    }
    outln!("sha256  {}", artifact.sha256());
    outln!("bytes   {}", artifact.bytes().len());
    outln!("wit     {}", proclease::component::WIT_PACKAGE);
    for name in imports {
        outln!("import  {name}");
    }
    for name in exports {
        outln!("export  {name}");
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes the artifact's bytes to `output` (an existing file only with `force`) or to standard
/// output (never a terminal).
pub fn write_component(artifact: Artifact, output: Option<&Path>, force: bool) -> Result<ExitCode, Failure> {
    let bytes = artifact.bytes();
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
                let (name, flag) = (artifact.file_name(), if artifact == Artifact::Portable { " --portable" } else { "" });
                return Err(Failure::new("standard output is a terminal: the component is binary")
                    .hint(format!("write it to a file with -o {name}, or redirect: proclease component{flag} > {name}")));
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
