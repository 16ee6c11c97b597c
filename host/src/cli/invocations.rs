//! `proclease invocations`: plugin invocation leases — list, repair, and run a command as the
//! containment host of a lease.

use std::os::unix::process::ExitStatusExt as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use proclease::core::invocation_leases::{Entry, RepairDecision};
use proclease::supervisor::Launch;
use proclease::{ContainmentController, Runtime, acquire_invocation_lease, invocation_lease_status, list_invocation_leases, release_invocation_lease, repair_invocation_leases};
use serde_json::json;

use super::{Context, Global};

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
    /// Remove leases whose owner and host are provably gone (§6B.9).
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
    /// The portable operation identity (JSON, §4) of the plugin operation to run.
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
pub fn run(global: &Global, command: InvocationsCommand) -> Result<ExitCode, String> {
    let ctx = Context::open(global)?;
    let runtime = Runtime::shared().map_err(|e| e.to_string())?;
    match command {
        InvocationsCommand::List { json } => list(&ctx, runtime, json),
        InvocationsCommand::Repair { recover_tombstones, json } => repair(&ctx, runtime, recover_tombstones, json),
        InvocationsCommand::Run(args) => invoke(&ctx, runtime, args),
    }
}

fn list(ctx: &Context, runtime: &Runtime, as_json: bool) -> Result<ExitCode, String> {
    let entries = list_invocation_leases(runtime, ctx.effects()).map_err(|e| e.to_string())?;
    let mut rows = Vec::new();
    for entry in &entries {
        rows.push(match entry {
            Entry::Invalid(id) => json!({"leaseId": id, "invalid": true}),
            Entry::Valid(s) => {
                let l = &s.record;
                let status = invocation_lease_status(runtime, ctx.effects(), s).map_err(|e| e.to_string())?;
                json!({
                    "leaseId": l.lease_id, "pluginId": l.identity.plugin_id, "operation": l.identity.operation,
                    "runId": l.run_id, "ownerPid": l.owner.process.pid, "acquiredAt": l.acquired_at,
                    "schemaVersion": l.schema_version,
                    "containment": l.containment.as_ref().map(|c| c.status.name()),
                    "hostPid": l.containment.as_ref().and_then(|c| c.host.as_ref()).map(|h| h.pid),
                    "ownerStatus": status.name(),
                })
            }
        });
    }
    if as_json {
        println!("{}", serde_json::to_string_pretty(&json!({"invocationLeases": rows})).unwrap_or_default());
        return Ok(ExitCode::SUCCESS);
    }
    if rows.is_empty() {
        println!("no invocation leases");
        return Ok(ExitCode::SUCCESS);
    }
    println!("{:<36}  {:<20} {:<18} {:>7} {:<16} {:>7} {:<24} STATUS", "LEASE", "PLUGIN", "OPERATION", "OWNER", "CONTAINMENT", "HOST", "ACQUIRED");
    for r in &rows {
        if r["invalid"] == true {
            println!("{:<36}  invalid: not a valid canonical lease (run `proclease validate` on it)", r["leaseId"].as_str().unwrap_or("?"));
            continue;
        }
        let text = |k: &str| r[k].as_str().map(String::from).unwrap_or_else(|| "-".into());
        let number = |k: &str| r[k].as_u64().map_or("-".into(), |n| n.to_string());
        println!(
            "{:<36}  {:<20} {:<18} {:>7} {:<16} {:>7} {:<24} {}",
            text("leaseId"), text("pluginId"), text("operation"), number("ownerPid"),
            r["containment"].as_str().unwrap_or("(v1)"), number("hostPid"), text("acquiredAt"), text("ownerStatus")
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn repair(ctx: &Context, runtime: &Runtime, recover: bool, as_json: bool) -> Result<ExitCode, String> {
    let (report, decisions) = repair_invocation_leases(runtime, ctx.effects(), recover).map_err(|e| e.to_string())?;
    if as_json {
        let decisions: Vec<_> = decisions.iter().map(|(id, d)| json!({"leaseId": id, "decision": d.name()})).collect();
        let doc = json!({"report": {
            "inspected": report.inspected, "removed": report.removed, "active": report.active,
            "unknown": report.unknown, "invalid": report.invalid,
        }, "decisions": decisions});
        println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
    } else {
        for (id, decision) in &decisions {
            let verb = match decision {
                RepairDecision::Remove => "removed",
                RepairDecision::Active => "kept: owner or host alive",
                RepairDecision::Unknown => "kept: not provably gone",
                RepairDecision::RemovalRefused => "kept: changed while it was removed",
                RepairDecision::Invalid => "kept: invalid (inspect it by hand)",
            };
            println!("{id}: {verb}");
        }
        print_report(&report);
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints a repair report as `name: count` lines.
pub fn print_report(report: &proclease::core::invocation_leases::RepairReport) {
    println!("inspected: {}", report.inspected);
    println!("removed: {}", report.removed);
    println!("active: {}", report.active);
    println!("unknown: {}", report.unknown);
    println!("invalid: {}", report.invalid);
}

fn invoke(ctx: &Context, runtime: &Runtime, args: RunArgs) -> Result<ExitCode, String> {
    let text = std::fs::read_to_string(&args.identity).map_err(|e| format!("{}: {e}", args.identity.display()))?;
    let mut instance = runtime.instantiate().map_err(|e| e.to_string())?;
    let identity = instance.records().parse_portable_identity(&text).map_err(|e| format!("{}: {e}", args.identity.display()))?;
    let run_id = args.run_id.unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let snapshot = acquire_invocation_lease(runtime, ctx.effects(), &identity, &run_id).map_err(|e| e.to_string())?;
    let mut controller = ContainmentController::create(runtime, ctx.effects(), &snapshot).map_err(|e| e.to_string())?;

    let abandon = |controller: &mut ContainmentController| {
        // Nothing ran: cleanup is trivially complete.
        let _ = controller.cleanup_complete();
        if let Ok(current) = controller.current() {
            let _ = release_invocation_lease(runtime, ctx.effects(), &current);
        }
    };
    // The host's witness (docs/witness.md) is taken before it starts and handed to it.
    let launch = match Launch::prepare(&ctx.identity) {
        Ok(launch) => launch,
        Err(e) => {
            abandon(&mut controller);
            return Err(e.to_string());
        }
    };
    let mut command = std::process::Command::new(&args.command[0]);
    command.args(&args.command[1..]);
    let mut child = match launch.spawn(&mut command) {
        Ok(child) => child,
        Err(e) => {
            abandon(&mut controller);
            return Err(format!("{}: {e}", args.command[0]));
        }
    };
    // Record the host process before waiting on it; a host that already exited is reaped below.
    match ctx.identity.capture(u64::from(child.id())) {
        Ok(host) => {
            if let Err(e) = controller.host_starting(&host).and_then(|()| controller.host_started(&host)) {
                eprintln!("proclease: could not record the plugin host: {e}");
            }
        }
        Err(_) => {}
    }
    let status = child.wait();
    // Reaped: the host process is confirmed gone. Anything else leaves the lease unsafe.
    let cleanup = match &status {
        Ok(_) => controller.cleanup_complete(),
        Err(_) => controller.cleanup_unsafe(),
    };
    let released = cleanup
        .and_then(|()| controller.current())
        .and_then(|current| if status.is_ok() { release_invocation_lease(runtime, ctx.effects(), &current) } else { Ok(()) });
    match released {
        Err(e) => eprintln!("proclease: {e} (the lease stays; `proclease invocations repair` shows it)"),
        Ok(()) if status.is_ok() => proclease::supervisor::retire(&ctx.identity),
        Ok(()) => {}
    }
    let status = status.map_err(|e| format!("waiting for the command: {e}"))?;
    Ok(match (status.code(), status.signal()) {
        (Some(code), _) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        (None, Some(signal)) => ExitCode::from(u8::try_from(128 + signal).unwrap_or(1)),
        _ => ExitCode::from(1),
    })
}
