//! `proclease recover`: recover leases whose owners are provably gone, saying for each entry
//! what was done and why.

use std::path::Path;
use std::process::ExitCode;

use clap::Args;
use proclease::api::host::set_aside_lease_entry;
use proclease::core::LeaseCode;
use proclease::core::directory_leases::{Action, CreationAction, CreationOutcome, Options, Outcome, Run};
use proclease::core::invocation_leases::RepairDecision;
use serde_json::json;

use super::{Failure, Global};

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
    /// Keep this directory when its lease's owner is proven gone: release the lease and leave
    /// the directory and what is in it (the command `run` prints when it could not release the
    /// lease of a finished run). Repeatable.
    #[arg(long, value_name = "DIR")]
    keep: Vec<std::path::PathBuf>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
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
        Action::KeepDirectory => ("released the lease of", "would release the lease of"),
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
        Action::KeepDirectory => format!("{verb} {what} and {} the directory ({})", if dry_run { "keep" } else { "kept" }, o.reason),
        Action::Skip(error) | Action::Stop(error) => {
            let replaced = matches!(error.lease_code(), Some(LeaseCode::DirectoryLeaseTargetChangedBeforeRecovery | LeaseCode::DirectoryLeaseParentChangedBeforeRecovery));
            let fix = if o.claim.is_none() {
                format!("; proclease never deletes it: check it, then move it aside: {}", set_aside_lease_entry(home, &o.name))
            } else if replaced {
                format!(
                    "; the directory there now is not the one this lease holds (re-created or replaced), so recovery will never remove it: \
                     check that no run uses it, then move the stale lease record aside: {}",
                    set_aside_lease_entry(home, &o.name)
                )
            } else {
                String::new()
            };
            format!("{verb} {what}: {error} ({}){fix}", o.reason)
        }
        _ => format!("{verb} {what} ({})", o.reason),
    }
}

/// One line of text for a directory-creation intent.
fn creation_line(c: &CreationOutcome, dry_run: bool) -> String {
    let what = c.path.clone().unwrap_or_else(|| c.name.clone());
    match &c.action {
        CreationAction::Keep => format!("kept the creation of {what}: {}", c.reason),
        CreationAction::Finish(removed) if removed.is_empty() => {
            format!("{} the intent to create {what} ({}; nothing it created is left empty and unleased)", if dry_run { "would finish" } else { "finished" }, c.reason)
        }
        CreationAction::Finish(removed) => {
            format!("{} {} ({}: a crashed run created it and never leased it)", if dry_run { "would remove" } else { "removed" }, removed.join(", "), c.reason)
        }
        CreationAction::Skip(why) => format!("skipped the creation intent {}: {why} ({})", c.name, c.reason),
    }
}

/// One line of text for an invocation lease's decision.
fn invocation_line(id: &str, decision: RepairDecision, dry_run: bool) -> String {
    match (decision, dry_run) {
        (RepairDecision::Remove, false) => format!("removed invocation lease {id}: its owner and host are provably gone"),
        (RepairDecision::Remove, true) => format!("would remove invocation lease {id}: its owner and host are provably gone"),
        (RepairDecision::Active, _) => format!("kept invocation lease {id}: its owner or host is alive"),
        (RepairDecision::Unknown, _) => {
            format!("kept invocation lease {id}: its owner or host cannot be proven gone (a tombstone of this boot stays until a reboot)")
        }
        (RepairDecision::RemovalRefused, _) => format!("kept invocation lease {id}: it changed while it was being removed"),
        (RepairDecision::Invalid, _) => {
            format!("kept invocation lease {id}: not a valid lease; it blocks acquires until repaired by hand (`proclease validate` on it says why)")
        }
    }
}

/// Runs `recover`.
pub fn run(global: &Global, args: &RecoverArgs) -> Result<ExitCode, Failure> {
    let host = super::open(global)?;
    let home = host.state_home().to_path_buf();
    // Recoverers take turns (the library's recovery lock), so each reports exactly what it did;
    // a lease another program recovered meanwhile is reported as already recovered.
    // Leases record canonical absolute paths.
    let keep = args.keep.iter().map(|dir| std::fs::canonicalize(dir).or_else(|_| std::path::absolute(dir)).map(|p| p.to_string_lossy().into_owned()));
    let keep = keep.collect::<Result<Vec<_>, _>>().map_err(|e| Failure::new(format!("--keep: {e}")))?;
    let options = Options { dry_run: args.dry_run, skip_invalid: args.skip_invalid, concurrent: true, keep, past_bound: true };
    let recovery = host.recover(options).map_err(|error| match error {
        proclease::Error::File { .. } => Failure::from(error).hint(
            "recover writes to the state home (its locks and lease records), so the state home must be writable; \
             `proclease doctor` shows the same decisions without writing",
        ),
        other => Failure::from(other),
    })?;
    let run = recovery.directory_leases;
    let tombstones = recovery.invocations;
    let report = run.report();
    let count = |action: fn(&Action) -> bool| run.outcomes.iter().filter(|o| action(&o.action)).count();
    let already = count(|a| matches!(a, Action::AlreadyRecovered));
    let skipped = count(|a| matches!(a, Action::Skip(_)));
    let kept = count(|a| matches!(a, Action::KeepDirectory));
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
                    "setAside": (o.claim.is_none() && o.action.refusal().is_some()).then(|| set_aside_lease_entry(&home, &o.name)),
                })
            })
            .collect();
        let mut doc = json!({
            "schemaVersion": super::JSON_SCHEMA_VERSION,
            "dryRun": args.dry_run,
            "directoryLeases": {
                "recovered": report.recovered, "published": report.published,
                "active": report.active, "indeterminate": report.indeterminate,
                "alreadyRecovered": already, "skipped": skipped, "releasedKept": kept,
                "stopped": run.stopped.as_ref().map(|e| e.message().to_string()),
                "cause": run.cause,
                "entries": outcomes,
            },
        });
        if let Some((t, decisions)) = &tombstones {
            let entries: Vec<_> = decisions.iter().map(|(id, d)| json!({"leaseId": id, "decision": d.name()})).collect();
            doc["invocationLeases"] = json!({
                "inspected": t.inspected, "removed": t.removed, "active": t.active, "unknown": t.unknown, "invalid": t.invalid,
                "entries": entries,
            });
        }
        super::print_json(&doc);
    } else {
        for o in &run.outcomes {
            println!("{}", line(&home, o, args.dry_run));
        }
        for c in &recovery.creations {
            println!("{}", creation_line(c, args.dry_run));
        }
        if let Some((_, decisions)) = &tombstones {
            for (id, decision) in decisions {
                println!("{}", invocation_line(id, *decision, args.dry_run));
            }
        }
        if args.dry_run {
            let invocations = tombstones.as_ref().map_or(0, |(t, _)| t.inspected);
            if run.outcomes.is_empty() && recovery.creations.is_empty() && invocations == 0 {
                println!("nothing to recover: no directory leases and no invocation leases");
            }
        } else {
            println!("recovered: {}", report.recovered);
            println!("published: {}", report.published);
            println!("active: {}", report.active);
            println!("indeterminate: {}", report.indeterminate);
            if kept > 0 {
                println!("released, directory kept: {kept}");
            }
            if already > 0 {
                println!("already recovered: {already}");
            }
            if skipped > 0 {
                println!("skipped: {skipped}");
            }
            if let Some((t, _)) = &tombstones
                && t.inspected > 0
            {
                println!("invocation leases removed: {} (active {}, unknown {}, invalid {})", t.removed, t.active, t.unknown, t.invalid);
            }
        }
    }
    stopped(&run, args)
}

/// Exit status: 0, or — when recovery stopped (or a dry run would stop) — the stop as the error,
/// with its cause and how to go on.
fn stopped(run: &Run, args: &RecoverArgs) -> Result<ExitCode, Failure> {
    let Some(error) = &run.stopped else { return Ok(ExitCode::SUCCESS) };
    if args.json {
        return Ok(ExitCode::from(1));
    }
    let cause = run.cause.as_ref().map(|c| format!(" ({c})")).unwrap_or_default();
    let hint = if args.skip_invalid { "" } else { "; `proclease recover --skip-invalid` recovers the other leases and leaves this one as it is" };
    let verb = if args.dry_run { "recovery would stop" } else { "recovery stopped" };
    Err(Failure::new(format!("{verb}: {error}{cause}{hint}")))
}
