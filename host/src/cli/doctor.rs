//! `proclease doctor`: every claim and lease in the state home, with its disposition and why
//! (the library's [`DoctorReport`], as a table or as JSON).

use std::process::ExitCode;

use clap::Args;
use proclease::report::DoctorReport;

use super::{Failure, Global};

/// Arguments of `doctor`.
#[derive(Args)]
pub struct DoctorArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// Runs `doctor`.
pub fn run(global: &Global, args: &DoctorArgs) -> Result<ExitCode, Failure> {
    let host = super::open(global)?;
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
    let report = DoctorReport::build(&host, now_ms)?;
    if args.json {
        super::print_serialized(&report);
    } else {
        out!("{}", report.text());
    }
    Ok(ExitCode::SUCCESS)
}
