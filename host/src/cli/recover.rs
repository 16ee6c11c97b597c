//! `proclease recover`: recover leases whose owners are provably gone.

use std::process::ExitCode;

use clap::Args;
use proclease::{Runtime, recover_directory_leases, repair_invocation_leases, survey_directory_leases};
use serde_json::json;

use super::{Context, Global};

/// Arguments of `recover`.
#[derive(Args)]
pub struct RecoverArgs {
    /// Show what would be done, and why, without changing anything.
    #[arg(long)]
    dry_run: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// Runs `recover`.
pub fn run(global: &Global, args: &RecoverArgs) -> Result<ExitCode, String> {
    let ctx = Context::open(global)?;
    let runtime = Runtime::shared().map_err(|e| e.to_string())?;
    if args.dry_run {
        let entries = survey_directory_leases(runtime, ctx.effects(), None).map_err(|e| e.to_string())?;
        if args.json {
            let items: Vec<_> = entries
                .iter()
                .map(|e| {
                    json!({
                        "file": e.name,
                        "path": e.claim.as_ref().map(|c| c.path.clone()),
                        "disposition": e.disposition.map(|d| d.name()),
                        "action": e.action,
                        "reason": e.reason,
                    })
                })
                .collect();
            println!("{}", serde_json::to_string_pretty(&json!({ "dryRun": true, "directoryLeases": items })).unwrap_or_default());
        } else if entries.is_empty() {
            println!("nothing to recover: no directory leases");
        } else {
            for e in &entries {
                let what = e.claim.as_ref().map_or(e.name.clone(), |c| c.path.clone());
                match e.action.strip_prefix("stop: ") {
                    Some(stop) => println!("{what}: recovery would stop here: {stop} ({})", e.reason),
                    None => println!("{what}: would {} ({})", e.action, e.reason),
                }
            }
        }
        let stops = entries.iter().any(|e| e.action.starts_with("stop: "));
        return Ok(if stops { ExitCode::from(1) } else { ExitCode::SUCCESS });
    }
    let report = match recover_directory_leases(runtime, ctx.effects(), None) {
        Ok(report) => report,
        Err(error) => {
            // The reference's message is deliberately general; say which lease stops it and why.
            if let Ok(entries) = survey_directory_leases(runtime, ctx.effects(), None) {
                for e in entries.iter().filter(|e| e.action.starts_with("stop: ")) {
                    let what = e.claim.as_ref().map_or(e.name.clone(), |c| c.path.clone());
                    eprintln!("proclease: {what}: {} ({})", e.action.trim_start_matches("stop: "), e.reason);
                }
            }
            return Err(error.to_string());
        }
    };
    let (tombstones, _) = repair_invocation_leases(runtime, ctx.effects(), true).map_err(|e| e.to_string())?;
    if args.json {
        let doc = json!({
            "directoryLeases": {
                "recovered": report.recovered, "published": report.published,
                "active": report.active, "indeterminate": report.indeterminate,
            },
            "invocationLeases": {
                "inspected": tombstones.inspected, "removed": tombstones.removed, "active": tombstones.active,
                "unknown": tombstones.unknown, "invalid": tombstones.invalid,
            },
        });
        println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
    } else {
        println!("recovered: {}", report.recovered);
        println!("published: {}", report.published);
        println!("active: {}", report.active);
        println!("indeterminate: {}", report.indeterminate);
        if tombstones.inspected > 0 {
            println!("invocation leases removed: {} (active {}, unknown {}, invalid {})", tombstones.removed, tombstones.active, tombstones.unknown, tombstones.invalid);
        }
    }
    Ok(ExitCode::SUCCESS)
}
