//! `proclease run`: run a command in a leased directory, as the lease's recorded child — the
//! library's [`Supervisor`] with the command line's arguments.

use std::os::unix::process::ExitStatusExt as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use proclease::core::LeaseCode;
use proclease::supervisor::{Containment, Stragglers, Supervisor, Target};

use super::{Failure, Global};

/// Help text after the options.
pub const HELP: &str = "Examples:\n  \
    proclease run --workdir ~/jobs/build -- sh -c 'make > build.log'\n  \
    proclease run --stage ~/exports/.stage --output ~/exports/v2 -- ./build-bundle\n  \
    proclease run --exclusive --workdir ~/jobs/export -- ./export\n\n\
    The directory is created (mode 0700, with missing parents) if absent; an existing one must be empty, yours, \
    mode 0700 — `run` never leases a directory with content, nor the state home. After a \
    normal exit the working directory stays (the lease is released); a --stage directory is renamed to \
    --output when the command succeeds and removed when it fails. If proclease itself is killed, \
    `proclease recover` removes the directory once the command is gone too — never while it runs. \
    A --stage lease records no child (as in the reference), but its command holds a witness: it is recoverable once \
    both the supervisor and the command are gone.\n\n\
    The command runs in a box (docs/containment.md): pid 2 of a new PID namespace (with its own /proc) whose init \
    holds the lease's witness, so everything it starts — daemons, setsid, closed descriptors, su — is covered by the \
    lease. When the command exits, what it left running gets SIGTERM and, after --grace, SIGKILL, before anything is \
    released (--stragglers wait keeps them and the lease until they end). Where no PID namespace can be made \
    (not root), it runs without a box and `-v` says why; --containment required refuses then, and so does an \
    --exclusive run in cluster mode unless --containment none is given.\n\n\
    Exit status: the command's (128+N if it died of signal N, or if signal N interrupted the run and the command exited 0); \
    before the command ran: 1 error, 2 usage, \
    3 blocked by a live owner (--exclusive), 4 a prior owner cannot be proven dead; after it ran: 6 its lease could not be released \
    (the results are intact; the message gives the command that finishes the release), 7 lock lost (cluster mode: the run lost its \
    leases while the command ran, so the command was stopped and nothing was published; the message gives its own status).";

/// Arguments of `run`.
#[derive(Args)]
pub struct RunArgs {
    /// Lease this working directory and run the command in it.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["stage", "output"], required_unless_present = "stage")]
    workdir: Option<PathBuf>,
    /// Lease this staging directory, run the command in it, and publish it to --output on success.
    #[arg(long, value_name = "DIR", requires = "output")]
    stage: Option<PathBuf>,
    /// Where a successful --stage is published (a sibling of the stage; must not exist yet).
    #[arg(long, value_name = "DIR", requires = "stage")]
    output: Option<PathBuf>,
    /// Also hold the export admission (one such run at a time), recording the command as its helper.
    #[arg(long)]
    exclusive: bool,
    /// With --exclusive: while another export holds the admission, wait up to this long for its
    /// turn (e.g. 30s, 10m) instead of refusing at once (exit 3 at the bound).
    #[arg(long, value_name = "DURATION", requires = "exclusive", value_parser = humantime::parse_duration)]
    wait: Option<std::time::Duration>,
    /// How long a crash between launching the command and recording it keeps the directory
    /// from recovery (e.g. 30s, 5m).
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = humantime::parse_duration)]
    recover_after: std::time::Duration,
    /// Run the command in a box (a PID namespace: auto where the kernel allows it), always
    /// (required: refuse where it cannot), or never (none). In cluster mode an --exclusive run
    /// treats auto as required.
    #[arg(long, value_enum, default_value_t = ContainmentArg::Auto)]
    containment: ContainmentArg,
    /// What happens to processes the command leaves running: stop them (SIGTERM, then SIGKILL
    /// after --grace) or wait for them, holding the lease, until they end.
    #[arg(long, value_enum, default_value_t = StragglersArg::Stop)]
    stragglers: StragglersArg,
    /// How long left-running processes may take to exit after SIGTERM (e.g. 5s, 1m).
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = humantime::parse_duration)]
    grace: std::time::Duration,
    /// How long settling and releasing the lease are retried after the command ran, when the
    /// state home refuses writes (full, read-only, immutable).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
    release_retry: std::time::Duration,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<String>,
}

/// `--containment`.
#[derive(Clone, Copy, clap::ValueEnum)]
enum ContainmentArg {
    Auto,
    Required,
    None,
}

/// `--stragglers`.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum StragglersArg {
    Stop,
    Wait,
}

/// Runs `run`.
pub fn run(global: &Global, args: RunArgs) -> Result<ExitCode, Failure> {
    let target = match (args.workdir, args.stage, args.output) {
        (Some(workdir), _, _) => Target::Workdir(workdir),
        (None, Some(stage), Some(output)) => Target::Stage { stage, output },
        _ => return Err(Failure::new("give --workdir DIR, or --stage DIR with --output DIR")),
    };
    let dir = match &target {
        Target::Workdir(dir) | Target::Stage { stage: dir, .. } => dir.clone(),
    };
    let host = super::open(global)?;
    let mut command = std::process::Command::new(&args.command[0]);
    command.args(&args.command[1..]);
    let containment = match args.containment {
        ContainmentArg::Auto => Containment::Auto,
        ContainmentArg::Required => Containment::Required,
        ContainmentArg::None => Containment::None,
    };
    let stragglers = match args.stragglers {
        StragglersArg::Stop => Stragglers::Stop { grace: args.grace },
        StragglersArg::Wait => Stragglers::Wait,
    };
    let supervisor = Supervisor::new(&host, target)
        .exclusive(args.exclusive)
        .wait_for_turn(args.wait.unwrap_or_default())
        .recover_after(args.recover_after)
        .forward_signals(true)
        .containment(containment)
        .stragglers(stragglers)
        .release_retry(args.release_retry);
    let finished = match supervisor.run(&mut command) {
        Ok(finished) => finished,
        Err(proclease::Error::Refused(refusal @ (proclease::Refusal::Interrupted { signal } | proclease::Refusal::InterruptedLeavingClaims { signal, .. }))) => {
            // As a shell reports a command a signal ended: 128+N.
            eprintln!("proclease: {refusal}");
            return Ok(ExitCode::from(u8::try_from(128 + signal).unwrap_or(1)));
        }
        Err(error) => {
            let code = error.lease_code();
            let failure = Failure::from(error);
            return Err(match code {
                Some(LeaseCode::DirectoryLeaseTargetIsNotAnOwnedPhysicalDirectory) => failure.hint(host.why_not_physical(&dir)),
                Some(LeaseCode::DirectoryLeaseCollectionExceededItsReviewedBound) => failure.hint(proclease::core::run_refusals::lease_collection_full()),
                Some(_) => match host.invalid_admission_file() {
                    Some(invalid) => failure.hint(format_args!(
                        "{} is not a valid export admission ({}): no --exclusive run can start while it is there, and proclease never deletes it; \
                         check that no export runs, then move it aside: {}",
                        invalid.path.display(),
                        invalid.error,
                        invalid.set_aside
                    )),
                    None => failure,
                },
                None => failure,
            });
        }
    };
    if finished.stragglers > 0 {
        let noun = if finished.stragglers == 1 { "process" } else { "processes" };
        let verb = if args.stragglers == StragglersArg::Wait { "waited for" } else { "stopped" };
        eprintln!("proclease: {verb} {} {noun} the command left running", finished.stragglers);
    }
    if let Some(why) = &finished.lock_lost {
        // The leases were lost while the command ran (#45 case 4): an interruption, whatever
        // the command's own status, never "results intact".
        for problem in finished.problems.iter().filter(|problem| problem.to_string() != *why) {
            eprintln!("proclease: {problem}");
        }
        eprintln!("proclease: {why}");
        eprintln!("{}", lock_lost_words(host.state_home(), &finished.status, finished.unreleased.as_ref()));
        return Ok(ExitCode::from(super::EXIT_LOCK_LOST));
    }
    if let Some(unreleased) = &finished.unreleased {
        for problem in &finished.problems {
            eprintln!("proclease: {problem}");
        }
        eprintln!("{}", unreleased_words(host.state_home(), &finished.status, unreleased, host.cluster().is_some()));
        return Ok(ExitCode::from(UNRELEASED));
    }
    Ok(match (finished.status.code(), finished.status.signal(), finished.interrupted) {
        // Interrupted, but the command caught the signal and exited 0: the work may be cut
        // short, so the status says the run was interrupted, as `su` does (128+N).
        (Some(0), _, Some(signal)) => {
            eprintln!("proclease: the run was interrupted by signal {signal}; the command exited 0 all the same, but its work may be incomplete (exit status {})", 128 + signal);
            ExitCode::from(u8::try_from(128 + signal).unwrap_or(1))
        }
        (Some(code), _, _) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        (None, Some(signal), _) => ExitCode::from(u8::try_from(128 + signal).unwrap_or(1)),
        _ => ExitCode::from(1),
    })
}

/// The exit status of a run whose command finished but whose lease could not be released.
pub const UNRELEASED: u8 = 6;

/// What a user is told when the run lost its leases while the command ran: the command's own
/// status, that its work was interrupted and nothing published, and what stays for `recover`.
fn lock_lost_words(home: &std::path::Path, status: &std::process::ExitStatus, unreleased: Option<&proclease::supervisor::Unreleased>) -> String {
    let how = super::how_it_ended(status);
    let home = shell_word(&home.to_string_lossy());
    let stays = match unreleased {
        Some(unreleased) if unreleased.scratch && !unreleased.directory.exists() => {
            format!("its stage {} is scratch and was removed; its lease stays for `proclease --state-home {home} recover`", unreleased.directory.display())
        }
        Some(unreleased) if unreleased.scratch => {
            format!("its stage {} is scratch: `proclease --state-home {home} recover` removes it once this run is gone", unreleased.directory.display())
        }
        Some(unreleased) => format!(
            "its working directory {} keeps what the command wrote, and its lease stays: check the work, then finish with \
             `proclease --state-home {home} recover --keep {}`",
            unreleased.directory.display(),
            shell_word(&unreleased.directory.to_string_lossy())
        ),
        None => "nothing of it stays leased".to_string(),
    };
    format!(
        "proclease: the run lost its hold on its leases while the command ran, so the command was stopped and {how}: its work was \
         interrupted and nothing was published; {stays} (exit status {}: lock lost)",
        super::EXIT_LOCK_LOST
    )
}

/// What a user is told when a finished run's lease stays: where the results are, that they are
/// intact, and the command that finishes the release.
fn unreleased_words(home: &std::path::Path, status: &std::process::ExitStatus, unreleased: &proclease::supervisor::Unreleased, cluster: bool) -> String {
    let again = if cluster {
        "Once etcd is reachable again and the state home takes writes"
    } else {
        "Once the state home takes writes again (free space, `chattr -i`, remount read-write)"
    };
    let how = super::how_it_ended(status);
    let dir = unreleased.directory.display();
    let finish = format!("proclease --state-home {} recover --keep {}", shell_word(&home.to_string_lossy()), shell_word(&unreleased.directory.to_string_lossy()));
    if unreleased.scratch {
        return format!(
            "proclease: the command {how} and its lease could not be released; its stage {dir} is scratch (the command failed), \
             and `proclease --state-home {} recover` removes it once the state home takes writes again",
            shell_word(&home.to_string_lossy())
        );
    }
    if unreleased.published {
        return format!(
            "proclease: the command {how} and its results were published to {dir}, intact; only the lease record stays in {}. \
             {again}, finish the release with: {finish}",
            home.display(),
        );
    }
    let journal = match (&unreleased.marker, unreleased.journaled) {
        (_, true) => "the run journal recorded that the command finished, so `proclease recover` keeps the directory too".to_string(),
        (Some(marker), false) => format!(
            "the state home took no write at all (not even the run journal), so the finish is marked by {} beside it: `proclease recover` keeps the directory too",
            marker.display()
        ),
        (None, false) => "the state home took no write at all (not even the run journal), so a plain `proclease recover` would remove the directory: use --keep".to_string(),
    };
    format!(
        "proclease: the command {how}; its results in {dir} are intact, but its lease could not be released and stays in {} ({journal}). \
         {again}, finish the release with: {finish}",
        home.display()
    )
}

/// `word` as one shell word: as it is when it needs no quoting, else in single quotes.
fn shell_word(word: &str) -> String {
    let plain = !word.is_empty() && word.bytes().all(|b| b.is_ascii_alphanumeric() || b"/._-+=:,@%".contains(&b));
    if plain { word.to_string() } else { format!("'{}'", word.replace('\'', "'\\''")) }
}
