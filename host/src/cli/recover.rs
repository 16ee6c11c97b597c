//! `proclease recover`: recover leases whose owners are provably gone, saying for each entry
//! what was done and why.

use std::path::Path;
use std::process::ExitCode;

use clap::Args;
use proclease::core::directory_leases::{Action, DIRECTORY, Options, Outcome, Run};
use proclease::{Runtime, recover_each_directory_lease, repair_invocation_leases};
use serde_json::json;

use super::{Context, Global};

/// Arguments of `recover`.
#[derive(Args)]
pub struct RecoverArgs {
    /// Show what would be done, and why, without changing anything.
    #[arg(long)]
    dry_run: bool,
    /// Leave every lease file that cannot be recovered (not a lease, unreadable, invalid, or
    /// whose directory changed) where it is, report it with what to do, and recover the rest.
    #[arg(long)]
    skip_invalid: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// The path of entry `name` of the lease collection.
fn entry_path(home: &Path, name: &str) -> std::path::PathBuf {
    home.join(DIRECTORY).join(name)
}

/// The shell command that moves a bad entry out of the collection (proclease never deletes it).
fn set_aside(home: &Path, name: &str) -> String {
    let from = entry_path(home, name);
    let to = home.join(".proclease").join(format!("set-aside-{name}"));
    format!("mv -- '{}' '{}'", from.display(), to.display())
}

/// What an outcome is about: the leased path, or the entry's name.
fn target(outcome: &Outcome) -> String {
    outcome.claim.as_ref().map_or_else(|| outcome.name.clone(), |c| c.path.clone())
}

/// One line of text for an outcome.
fn line(home: &Path, o: &Outcome, dry_run: bool) -> String {
    let what = target(o);
    let (did, would) = match &o.action {
        Action::RemoveDirectory => ("removed", "would remove"),
        Action::CountPublished => ("released the claim of", "would release the claim of"),
        Action::RemoveClaim => ("released the claim of", "would release the claim of"),
        Action::Keep => ("kept", "would keep"),
        Action::AlreadyRecovered => ("already recovered by another recoverer:", "already recovered:"),
        Action::Skip(_) => ("skipped", "would skip"),
        Action::Stop(_) => ("stopped at", "would stop at"),
    };
    let verb = if dry_run { would } else { did };
    match &o.action {
        Action::Keep => format!("{verb} {what}: {} ({})", o.disposition.map_or("?", |d| d.name()), o.reason),
        Action::CountPublished => {
            let output = o.claim.as_ref().and_then(|c| c.output_root.clone()).unwrap_or_default();
            format!("{verb} {what}: it was already published to {output} ({})", o.reason)
        }
        Action::RemoveClaim => format!("{verb} {what}: its directory was already gone ({})", o.reason),
        Action::Skip(error) | Action::Stop(error) => {
            let fix = if o.claim.is_none() {
                format!("; proclease never deletes it: check it, then move it aside: {}", set_aside(home, &o.name))
            } else {
                String::new()
            };
            format!("{verb} {what}: {error} ({}){fix}", o.reason)
        }
        _ => format!("{verb} {what} ({})", o.reason),
    }
}

/// Runs `recover`.
pub fn run(global: &Global, args: &RecoverArgs) -> Result<ExitCode, String> {
    let ctx = Context::open(global)?;
    let runtime = Runtime::shared().map_err(|e| e.to_string())?;
    let home = ctx.store.home().path().to_path_buf();
    // Recoverers take turns: each reports exactly what it did, and none trips over another's
    // removal in progress. A lease another program (ghostget) recovered meanwhile is reported
    // as already recovered.
    let _turn = if args.dry_run { None } else { Some(lock_recovery(&ctx)?) };
    let options = Options { dry_run: args.dry_run, skip_invalid: args.skip_invalid, concurrent: true };
    let run = recover_each_directory_lease(runtime, ctx.effects(), None, options).map_err(|e| e.to_string())?;
    let tombstones = match (args.dry_run, &run.stopped) {
        (false, None) => Some(repair_invocation_leases(runtime, ctx.effects(), true).map_err(|e| e.to_string())?),
        _ => None,
    };
    let report = run.report();
    let count = |action: fn(&Action) -> bool| run.outcomes.iter().filter(|o| action(&o.action)).count();
    let already = count(|a| matches!(a, Action::AlreadyRecovered));
    let skipped = count(|a| matches!(a, Action::Skip(_)));
    if args.json {
        let outcomes: Vec<_> = run
            .outcomes
            .iter()
            .map(|o| {
                json!({
                    "file": o.name,
                    "path": o.claim.as_ref().map(|c| c.path.clone()),
                    "leaseId": o.claim.as_ref().map(|c| c.id.clone()),
                    "disposition": o.disposition.map(|d| d.name()),
                    "action": o.action.words(),
                    "done": o.done,
                    "error": o.action.refusal().map(|e| e.message().to_string()),
                    "reason": o.reason,
                    "setAside": (o.claim.is_none() && o.action.refusal().is_some()).then(|| set_aside(&home, &o.name)),
                })
            })
            .collect();
        let mut doc = json!({
            "schemaVersion": 1,
            "dryRun": args.dry_run,
            "directoryLeases": {
                "recovered": report.recovered, "published": report.published,
                "active": report.active, "indeterminate": report.indeterminate,
                "alreadyRecovered": already, "skipped": skipped,
                "stopped": run.stopped.as_ref().map(|e| e.message().to_string()),
                "cause": run.cause,
                "entries": outcomes,
            },
        });
        if let Some((t, _)) = &tombstones {
            doc["invocationLeases"] = json!({
                "inspected": t.inspected, "removed": t.removed, "active": t.active, "unknown": t.unknown, "invalid": t.invalid,
            });
        }
        println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
    } else {
        for o in &run.outcomes {
            println!("{}", line(&home, o, args.dry_run));
        }
        if args.dry_run {
            if run.outcomes.is_empty() {
                println!("nothing to recover: no directory leases");
            }
        } else {
            println!("recovered: {}", report.recovered);
            println!("published: {}", report.published);
            println!("active: {}", report.active);
            println!("indeterminate: {}", report.indeterminate);
            if already > 0 {
                println!("already recovered: {already}");
            }
            if skipped > 0 {
                println!("skipped: {skipped}");
            }
            if let Some((t, _)) = &tombstones {
                if t.inspected > 0 {
                    println!("invocation leases removed: {} (active {}, unknown {}, invalid {})", t.removed, t.active, t.unknown, t.invalid);
                }
            }
        }
    }
    stopped(&run, args)
}

/// Exit status: 0, or — when recovery stopped (or a dry run would stop) — the stop as the error,
/// with its cause and how to go on.
fn stopped(run: &Run, args: &RecoverArgs) -> Result<ExitCode, String> {
    let Some(error) = &run.stopped else { return Ok(ExitCode::SUCCESS) };
    if args.json {
        return Ok(ExitCode::from(1));
    }
    let cause = run.cause.as_ref().map(|c| format!(" ({c})")).unwrap_or_default();
    let hint = if args.skip_invalid { "" } else { "; `proclease recover --skip-invalid` recovers the other leases and leaves this one as it is" };
    let verb = if args.dry_run { "recovery would stop" } else { "recovery stopped" };
    Err(format!("{verb}: {error}{cause}{hint}"))
}

/// Takes the recovery turn: a kernel `flock` on `.proclease/locks/directory-lease-recovery.lock`
/// (waiting for another recoverer), released when dropped or when the process dies; ghostget
/// does not take it.
fn lock_recovery(ctx: &Context) -> Result<std::fs::File, String> {
    let file = ctx.store.lock_file("directory-lease-recovery.lock").map_err(|e| format!("recovery lock: {e}"))?;
    file.lock().map_err(|e| format!("recovery lock: {e}"))?;
    Ok(file)
}
