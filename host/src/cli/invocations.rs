//! `proclease invocations`: plugin invocation leases — list, repair, and run a command as the
//! containment host of a lease.

use std::os::unix::process::ExitStatusExt as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use proclease::Host;
use proclease::report::{InvocationList, InvocationRepair};

use super::{Failure, Global};

/// Help text of `invocations`.
pub const HELP: &str = "Examples:\n  \
    proclease invocations list\n  \
    proclease invocations repair --recover-tombstones\n  \
    proclease invocations run --identity op.json -- ./plugin-host --op records.read\n\n\
    The plugin catalog is read from <state home>/provider-plugins/catalog.json or --plugin-catalog FILE:\n  \
    {\"schemaVersion\":1,\"plugins\":[{\"pluginId\":\"…\",\"version\":\"1.0.0\",\"hostApiVersion\":1,\n  \
    \"bundleSha256\":\"<64 hex>\",\"manifestSha256\":\"<64 hex>\",\"enabled\":true}]}";

/// `invocations` subcommands.
#[derive(Subcommand)]
pub enum InvocationsCommand {
    /// List the invocation leases with their containment and owner status.
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Remove leases whose owner and host are provably gone.
    Repair {
        /// Also clear tombstones (leases that never completed cleanup) once their owner is dead,
        /// or, after plugin code ran, once the machine rebooted.
        #[arg(long)]
        recover_tombstones: bool,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Acquire a lease for the operation in --identity, run CMD as its containment host,
    /// then record cleanup and release.
    Run(RunArgs),
}

/// Arguments of `invocations run`.
#[derive(Args)]
pub struct RunArgs {
    /// The portable operation identity of the plugin operation to run (a JSON file: pluginId,
    /// pluginVersion, hostApiVersion, bundleSha256, manifestSha256, adapterId, transport,
    /// surfaceId, operation, contractVersion, descriptorSha256; see examples/records).
    #[arg(long, value_name = "FILE")]
    identity: PathBuf,
    /// The run id (a lowercase UUID v4; default: a fresh one).
    #[arg(long, value_name = "UUID")]
    run_id: Option<String>,
    /// The command (the plugin host) and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<String>,
}

/// Runs an `invocations` subcommand.
pub fn run(global: &Global, command: InvocationsCommand) -> Result<ExitCode, Failure> {
    let host = super::open(global)?;
    match command {
        InvocationsCommand::List { json } => list(&host, json),
        InvocationsCommand::Repair { recover_tombstones, json } => repair(&host, recover_tombstones, json),
        InvocationsCommand::Run(args) => invoke(&host, args),
    }
}

fn list(host: &Host, as_json: bool) -> Result<ExitCode, Failure> {
    let list = InvocationList::build(host)?;
    if as_json {
        super::print_serialized(&list);
    } else {
        out!("{}", list.text());
    }
    Ok(ExitCode::SUCCESS)
}

fn repair(host: &Host, recover: bool, as_json: bool) -> Result<ExitCode, Failure> {
    let (report, decisions) = host.repair_invocations(recover)?;
    // As `recover`: nothing names this process any more, so its witness goes with it.
    host.retire();
    let repair = InvocationRepair::new(report, &decisions);
    if as_json {
        super::print_serialized(&repair);
    } else {
        out!("{}", repair.text());
    }
    Ok(ExitCode::SUCCESS)
}

fn invoke(host: &Host, args: RunArgs) -> Result<ExitCode, Failure> {
    let text = std::fs::read_to_string(&args.identity).map_err(|e| Failure::new(format!("{}: {e}", args.identity.display())))?;
    let mut instance = host.runtime().instantiate()?;
    let identity = instance.records().parse_portable_identity(&text).map_err(|e| Failure::new(format!("{}: {e}", args.identity.display())))?;
    let run_id = args.run_id.unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let mut command = std::process::Command::new(&args.command[0]);
    command.args(&args.command[1..]);
    let finished = match proclease::supervisor::run_plugin_host(host, &identity, &run_id, &mut command, true) {
        Ok(finished) => finished,
        Err(error) if error.lease_code() == Some(proclease::core::LeaseCode::PluginChangedOrDisabled) => {
            let (catalog, exists) = host.catalog().location();
            let hint = if exists {
                format!("{} has no enabled entry for plugin {} with exactly this version, host API version and bundle and manifest digests", catalog.display(), identity.plugin_id)
            } else {
                format!(
                    "the plugin catalog {} does not exist, so no plugin is installed: create it, or name another with --plugin-catalog FILE \
                     (format: `proclease invocations --help`)",
                    catalog.display()
                )
            };
            return Err(Failure::from(error).hint(hint));
        }
        Err(error) => return Err(error.into()),
    };
    if finished.stragglers > 0 {
        let noun = if finished.stragglers == 1 { "process" } else { "processes" };
        eprintln!("proclease: stopped {} {noun} the plugin host left running", finished.stragglers);
    }
    for problem in &finished.problems {
        eprintln!("proclease: {problem} (the lease stays; `proclease invocations repair` shows it)");
    }
    let status = finished.status;
    if finished.lock_lost.is_some() {
        // Lock lost (cluster mode): the plugin host was stopped, whatever its own status.
        let how = super::how_it_ended(&status);
        eprintln!(
            "proclease: the invocation lost its lease while the plugin host ran, so the host was stopped and {how}: its work was interrupted (exit status {}: lock lost)",
            super::EXIT_LOCK_LOST
        );
        return Ok(ExitCode::from(super::EXIT_LOCK_LOST));
    }
    Ok(match (status.code(), status.signal()) {
        (Some(code), _) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        (None, Some(signal)) => ExitCode::from(u8::try_from(128 + signal).unwrap_or(1)),
        _ => ExitCode::from(1),
    })
}
