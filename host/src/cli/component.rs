//! `proclease component`: the embedded WebAssembly component for other runtimes.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use proclease::{Error, Runtime};

/// Prints the component's sha256, size, imports and exports.
pub fn describe_component() -> Result<ExitCode, Error> {
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

/// Writes the component bytes to `output` or standard output.
pub fn write_component(output: Option<&Path>) -> Result<ExitCode, Error> {
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
