//! `proclease identity [PID]`: a process's identity as leases record it.

use std::process::ExitCode;

use clap::Args;
use proclease::process_identity::ProcessIdentity;

use super::Failure;

/// Arguments of `identity`.
#[derive(Args)]
pub struct IdentityArgs {
    /// The process (default: proclease itself).
    pid: Option<u64>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// Runs `identity`.
pub fn run(args: &IdentityArgs) -> Result<ExitCode, Failure> {
    let identity = ProcessIdentity::new();
    let owner = match args.pid {
        Some(pid) => identity.capture(pid).map_err(|e| Failure::new(format!("pid {pid}: {e}")))?,
        None => identity.self_identity().map_err(|e| Failure::new(e.to_string()))?,
    };
    let status = identity.owner_status(&owner).map_err(|e| Failure::new(e.to_string()))?;
    if args.json {
        let doc = serde_json::json!({
            "pid": owner.pid,
            "bootId": owner.boot_id,
            "processStartId": owner.process_start_id,
            "status": status.name(),
        });
        println!("{doc}");
    } else {
        println!("pid               {}", owner.pid);
        println!("boot id           {}", owner.boot_id);
        println!("process start id  {}", owner.process_start_id);
        println!("owner status      {}", status.name());
    }
    Ok(ExitCode::SUCCESS)
}
