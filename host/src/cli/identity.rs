//! `proclease identity [PID]`: a process's identity as leases record it.

use std::process::ExitCode;

use clap::Args;
use proclease::core::liveness::OwnerStatus;
use proclease::process_identity::ProcessIdentity;
use serde_json::json;

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

/// Runs `identity`: a live process's identity and status; for a pid that is gone or hidden,
/// its status alone (`different-or-dead`, `unknown`) and exit 0.
pub fn run(args: &IdentityArgs) -> Result<ExitCode, Failure> {
    let identity = ProcessIdentity::new();
    let (owner, status) = match args.pid {
        Some(pid) => identity.identify(pid).map_err(|e| Failure::new(format!("pid {pid}: {e}")))?,
        None => {
            let own = identity.self_identity().map_err(|e| Failure::new(e.to_string()))?;
            let status = identity.owner_status(&own).map_err(|e| Failure::new(e.to_string()))?;
            (Some(own), status)
        }
    };
    let pid = owner.as_ref().map(|o| o.pid).or(args.pid).unwrap_or_default();
    let meaning = match (owner.is_some(), status) {
        (true, _) => None,
        (false, OwnerStatus::Unknown) => Some("the pid exists but cannot be read (another user's process, or /proc mounted with hidepid)"),
        (false, _) => Some("no live process has this pid"),
    };
    if args.json {
        super::print_json(&json!({
            "schemaVersion": super::JSON_SCHEMA_VERSION,
            "pid": pid,
            "bootId": owner.as_ref().map(|o| o.boot_id.clone()),
            "processStartId": owner.as_ref().map(|o| o.process_start_id.clone()),
            "status": status.name(),
        }));
    } else {
        outln!("pid               {pid}");
        if let Some(owner) = &owner {
            outln!("boot id           {}", owner.boot_id);
            outln!("process start id  {}", owner.process_start_id);
        }
        match meaning {
            Some(meaning) => outln!("owner status      {} ({meaning})", status.name()),
            None => outln!("owner status      {}", status.name()),
        }
    }
    Ok(ExitCode::SUCCESS)
}
