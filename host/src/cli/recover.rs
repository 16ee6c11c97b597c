//! `proclease recover`: recover leases whose owners are provably gone, saying for each entry
//! what was done and why (the library's [`RecoveryReport`], as text or as JSON).

use std::process::ExitCode;

use clap::Args;
use proclease::core::directory_leases::{Options, Run};
use proclease::core::recovery_advice;
use proclease::report::RecoveryReport;

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

/// Runs `recover`.
pub fn run(global: &Global, args: &RecoverArgs) -> Result<ExitCode, Failure> {
    let host = super::open(global)?;
    // Recoverers take turns (the library's recovery lock), so each reports exactly what it did;
    // a lease another program recovered meanwhile is reported as already recovered.
    // Leases record canonical absolute paths.
    let keep = args.keep.iter().map(|dir| std::fs::canonicalize(dir).or_else(|_| std::path::absolute(dir)).map(|p| p.to_string_lossy().into_owned()));
    let keep = keep.collect::<Result<Vec<_>, _>>().map_err(|e| Failure::new(format!("--keep: {e}")))?;
    let options = Options { dry_run: args.dry_run, skip_invalid: args.skip_invalid, concurrent: true, keep, past_bound: true };
    let (recovery, failed) = match host.recover(options) {
        Ok(recovery) => (recovery, None),
        // What was done is reported before why the rest was not.
        Err(proclease::Error::RecoveryIncomplete { step, done, error }) => (*done, Some((step, *error))),
        Err(error) => return Err(unwritable_hint(error)),
    };
    // Its calls are done, and none left a record naming this process: its witness would only
    // pile up in the state home, one per `recover` (`docs/witness.md`).
    host.retire();
    let report = RecoveryReport::new(host.state_home(), &recovery, args.dry_run);
    if args.json {
        super::print_serialized(&report);
    } else {
        out!("{}", report.text());
    }
    // A wait that reached its bound and stopped recovery, or left a lease as it is: in the
    // words of the stop, if there was one.
    let waited_out = recovery.lock_timeout.as_ref().map(|timeout| {
        let error = recovery.directory_leases.stopped.as_ref().map(ToString::to_string);
        recovery_advice::waited_out(error.as_deref(), &timeout.to_string(), args.dry_run)
    });
    if let Some((step, error)) = failed {
        let mut failure = unwritable_hint(error);
        // Its first line is the error; the lines after it (causes, a hint) stay after the advice.
        let (first, rest) = failure.message.split_once('\n').unwrap_or((failure.message.as_str(), ""));
        let rest = if rest.is_empty() { String::new() } else { format!("\n{rest}") };
        failure.message = format!("{}{rest}", recovery_advice::stopped_at(step, first, args.dry_run));
        if let Some(waited_out) = waited_out {
            // A wait before it reached its bound too: said on its own line, exit 5.
            failure.message = format!("{}\nproclease: {waited_out}", failure.message);
            failure.status = super::EXIT_LOCK_TIMEOUT;
        }
        return Err(failure);
    }
    if let Some(waited_out) = waited_out {
        // A wait that reached its bound, not something wrong with an entry: retry once the
        // holder is done (exit 5, with or without --skip-invalid).
        return Err(Failure::lock_timeout(waited_out));
    }
    stopped(&recovery.directory_leases, args)
}

/// `error` as the command's failure; a file it could not write says that the state home must be
/// writable.
fn unwritable_hint(error: proclease::Error) -> Failure {
    match error {
        proclease::Error::File { .. } => Failure::from(error).hint(
            "recover writes to the state home (its locks and lease records), so the state home must be writable; \
             `proclease doctor` shows the same decisions without writing",
        ),
        other => Failure::from(other),
    }
}

/// Exit status: 0, or — when recovery stopped (or a dry run would stop) — the stop as the error,
/// with its cause and how to go on.
fn stopped(run: &Run, args: &RecoverArgs) -> Result<ExitCode, Failure> {
    let Some(error) = &run.stopped else { return Ok(ExitCode::SUCCESS) };
    if args.json {
        return Ok(ExitCode::from(1));
    }
    Err(Failure::new(recovery_advice::stopped(&error.to_string(), run.cause.as_deref(), args.dry_run, args.skip_invalid)))
}
