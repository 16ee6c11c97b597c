//! `proclease run`: run a command in a leased directory, as the lease's recorded child.
//!
//! The order of writes is what makes a crash at any instant recoverable exactly:
//! lease (preparing) → launching → spawn → running(child identity) → wait → settled → release;
//! with `--exclusive` the admission goes parent-owned → helper-launching → helper-active(child)
//! → parent-owned → released around it. While the child lives, its recorded identity keeps the
//! lease active; the launch window (between spawn and recording the child) is bounded by
//! `--recover-after`.

use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use proclease::core::directory_leases::Request;
use proclease::core::records::directory_lease::{Phase, Role};
use proclease::supervisor::Launch;
use proclease::{Admission, DirectoryLease, Runtime};

use super::{Context, Global};

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
    Exit status: the command's (128+N if it died of signal N); before the command ran: 1 error, 2 usage, \
    3 blocked by a live owner (--exclusive), 4 a prior owner cannot be proven dead.";

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
    /// How long a crash between launching the command and recording it keeps the directory
    /// from recovery (e.g. 30s, 5m).
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = humantime::parse_duration)]
    recover_after: std::time::Duration,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<String>,
}

/// An absolute, lexically normalised path (symbolic links are not resolved: the lease refuses
/// a path that is not its own realpath).
fn absolute(path: &Path) -> Result<PathBuf, String> {
    proclease::state_home::lexical_absolute(path).map_err(|e| format!("cannot read the working directory: {e}"))
}

fn text(path: &Path) -> Result<String, String> {
    path.to_str().map(String::from).ok_or_else(|| format!("{}: paths must be UTF-8", path.display()))
}

fn now_ms() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_millis() as f64)
}

/// Whether a failed identity capture means the child already exited (then the lifecycle
/// settles directly: nothing of it lives).
fn child_gone(error: &proclease::Error) -> bool {
    error.to_string().contains("exact live process identity is unavailable")
}

/// Runs `run`.
pub fn run(global: &Global, args: RunArgs) -> Result<ExitCode, String> {
    let (role, dir, output) = match (&args.workdir, &args.stage, &args.output) {
        (Some(workdir), _, _) => (Role::RawWorking, absolute(workdir)?, None),
        (None, Some(stage), Some(output)) => (Role::BundleStage, absolute(stage)?, Some(absolute(output)?)),
        _ => return Err("give --workdir DIR, or --stage DIR with --output DIR".into()),
    };
    if let Some(output) = &output {
        if output.parent() != dir.parent() {
            return Err(format!("{}: --output must be a sibling of --stage ({})", output.display(), dir.display()));
        }
        if std::fs::symlink_metadata(output).is_ok() {
            return Err(format!("{}: the output already exists; publishing never overwrites", output.display()));
        }
    }
    // Everything that can be slow or fail (state home, compiling the component on a cold
    // start, the admission) comes before the directory is created, so that a crash or a refusal
    // leaves no unleased directory behind.
    let ctx = Context::open(global)?;
    let runtime = Runtime::shared().map_err(|e| e.to_string())?;
    let dir_text = text(&dir)?;
    let home = ctx.store.home().path();
    if dir.starts_with(home) || home.starts_with(&dir) {
        return Err(format!(
            "{}: refused: a leased directory may be removed by `recover`, so it can be neither the state home ({}), inside it, nor hold it",
            dir.display(),
            home.display()
        ));
    }
    let existed = std::fs::symlink_metadata(&dir).is_ok();
    if existed && !ctx.workspace.is_empty_directory(&dir_text).map_err(|e| e.to_string())? {
        return Err(format!(
            "{}: refused: not empty. `run` leases only a directory it creates or an empty one, because after a crash \
             `recover` deletes the leased directory with everything in it; give a new path and proclease creates it",
            dir.display()
        ));
    }
    let mut admission = match args.exclusive {
        true => Some(Admission::acquire(runtime, ctx.effects()).map_err(|e| match super::invalid_admission_hint(&ctx, runtime) {
            Some(hint) => format!("{e}\n{hint}"),
            None => e.to_string(),
        })?),
        false => None,
    };
    let release_admission = |admission: &mut Option<Admission>| {
        if let Some(admission) = admission.as_mut() {
            let _ = admission.release();
        }
    };
    // Two leases on one directory would let the recovery of one (its owner gone) delete the
    // directory the other is still using: the check that no lease claims this directory and
    // the creation of ours hold one lock, so that concurrent runs cannot both pass the check.
    let creation_lock = match lock_lease_creation(&ctx) {
        Ok(lock) => lock,
        Err(e) => {
            release_admission(&mut admission);
            return Err(e);
        }
    };
    if let Err(e) = refuse_if_claimed(&ctx, runtime, &dir_text) {
        release_admission(&mut admission);
        return Err(e);
    }
    // What the lease creates (the directory and its missing ancestors), to remove again if the
    // command never runs.
    let created: Vec<String> = dir.ancestors().take_while(|p| std::fs::symlink_metadata(p).is_err()).filter_map(|p| p.to_str().map(String::from)).collect();
    let undo_created = || {
        for path in &created {
            let _ = ctx.workspace.remove_empty_directory(path, None);
        }
    };
    let now = now_ms();
    let request = Request {
        role,
        path: dir_text.clone(),
        output_root: output.as_deref().map(text).transpose()?,
        recover_after_ms: now + args.recover_after.as_millis() as f64,
        now_ms: Some(now),
    };
    // The lease creates the directory, its intent recorded first: a crash between `mkdir` and
    // the lease leaves nothing `recover` cannot clean up.
    let mut lease = match DirectoryLease::create_with_directory(runtime, ctx.effects(), &request) {
        Ok(lease) => lease,
        Err(error) => {
            release_admission(&mut admission);
            let hint = if error.to_string().ends_with("not an owned physical directory") { physical_hint(&dir) } else { String::new() };
            return Err(format!("{error}{hint}"));
        }
    };
    drop(creation_lock);
    // The command's witness is taken before the lease says a launch begins: a crash from here
    // on leaves it free (nothing started) or held by the command (docs/witness.md).
    let launch = match Launch::prepare(&ctx.identity) {
        Ok(launch) => launch,
        Err(e) => {
            let _ = lease.release();
            undo_created();
            release_admission(&mut admission);
            return Err(e.to_string());
        }
    };
    let step = |result: Result<(), proclease::Error>| result.map_err(|e| e.to_string());
    if role == Role::RawWorking {
        step(lease.update(Phase::Launching, None))?;
    }
    if let Some(admission) = admission.as_mut() {
        step(admission.begin_helper_launch())?;
    }

    let mut command = std::process::Command::new(&args.command[0]);
    command.args(&args.command[1..]).current_dir(&dir);
    let mut child = match launch.spawn(&mut command) {
        Ok(child) => child,
        Err(e) => {
            // Nothing ran: settle and release everything, and remove what this run created.
            if role == Role::RawWorking {
                let _ = lease.update(Phase::Settled, None);
            }
            if let Some(admission) = admission.as_mut() {
                let _ = admission.settle_helper();
                let _ = admission.release();
            }
            let _ = lease.release();
            undo_created();
            return Err(format!("{}: {e}", args.command[0]));
        }
    };
    let pid = i64::from(child.id());
    let forwarder = forward_signals(child.id());

    // Record the child; if it already exited (a capture finds no live process), the lifecycle
    // goes straight from launching to settled.
    if role == Role::RawWorking {
        match lease.update(Phase::Running, Some(pid)) {
            Ok(()) => {}
            Err(e) if child_gone(&e) => {}
            Err(e) => eprintln!("proclease: could not record the command in the lease: {e}"),
        }
    }
    if let Some(admission) = admission.as_mut() {
        match admission.bind_helper(pid) {
            Ok(()) => {}
            Err(e) if child_gone(&e) => {}
            Err(e) => eprintln!("proclease: could not record the command in the admission: {e}"),
        }
    }

    let status = child.wait().map_err(|e| format!("waiting for the command: {e}"))?;
    drop(forwarder);

    let mut problems = Vec::new();
    if role == Role::RawWorking {
        if let Err(e) = lease.update(Phase::Settled, None) {
            problems.push(e.to_string());
        }
    }
    if let Some(admission) = admission.as_mut() {
        if let Err(e) = admission.settle_helper() {
            problems.push(e.to_string());
        }
    }
    if let (Role::BundleStage, Some(output)) = (role, &output) {
        if status.success() {
            if let Err(e) = publish(&dir, output) {
                problems.push(e);
            }
        } else if let Ok(claim) = lease.claim() {
            // A failed stage is garbage: remove it by its leased identity.
            if let Err(e) = ctx.workspace.remove_tree(&claim.path, &claim.directory_identity) {
                problems.push(e.to_string());
            }
        }
    }
    if problems.is_empty() {
        if let Err(e) = lease.release() {
            problems.push(e.to_string());
        }
        if let Some(admission) = admission.as_mut() {
            if let Err(e) = admission.release() {
                problems.push(e.to_string());
            }
        }
    }
    for problem in &problems {
        eprintln!("proclease: {problem} (the lease stays; `proclease recover` will clean it up once this run is gone)");
    }
    if problems.is_empty() {
        // Nothing names this run any more: its witnesses have nothing left to prove.
        proclease::supervisor::retire(&ctx.identity);
    }
    Ok(exit_code(status))
}

/// Says which of the §6A.4 conditions the directory or its parent misses.
/// Takes the lock that serialises `run`'s claim check and lease creation (a kernel `flock` on
/// `.proclease/locks/directory-lease-creation.lock`, released when dropped or when the process
/// dies; ghostget does not take it).
fn lock_lease_creation(ctx: &Context) -> Result<std::fs::File, String> {
    let file = ctx.store.lock_file("directory-lease-creation.lock").map_err(|e| format!("directory lease creation lock: {e}"))?;
    rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive).map_err(|e| format!("directory lease creation lock: {e}"))?;
    Ok(file)
}

/// Refuses a directory (by path, or by identity when it exists) that a lease already claims,
/// live or not: saying whose, and what to do.
fn refuse_if_claimed(ctx: &Context, runtime: &Runtime, dir: &str) -> Result<(), String> {
    let identity = ctx.workspace.inspect(dir).map_err(|e| e.to_string())?.map(|facts| facts.identity);
    let dry_run = proclease::core::directory_leases::Options { dry_run: true, ..Default::default() };
    let run = proclease::recover_each_directory_lease(runtime, ctx.effects(), None, dry_run).map_err(|e| e.to_string())?;
    for entry in run.outcomes {
        let Some(claim) = entry.claim else { continue };
        if claim.path != dir && identity.as_ref() != Some(&claim.directory_identity) {
            continue;
        }
        let what = match entry.disposition.map(|d| d.name()) {
            Some("active") => "its owner is alive: wait for that run to finish, or use another directory".to_string(),
            Some("recoverable") => "its owner is gone: run `proclease recover` first (it removes the directory)".to_string(),
            _ => format!("{}; see `proclease doctor`", entry.reason),
        };
        return Err(format!("{dir}: refused: already leased by pid {} (lease {}): {what}", claim.owner.pid, claim.id));
    }
    Ok(())
}

fn physical_hint(dir: &Path) -> String {
    use std::os::unix::fs::MetadataExt as _;
    let euid = rustix::process::geteuid().as_raw();
    if let Some(parent) = dir.parent() {
        if let Ok(meta) = std::fs::metadata(parent) {
            if meta.uid() != euid || meta.mode() & 0o022 != 0 {
                return format!(
                    " (its parent {} must be a directory you own that group and others cannot write; a shared directory \
                     such as /tmp cannot hold leased directories: use a private one, e.g. mkdir -m 700 /tmp/$USER-jobs)",
                    parent.display()
                );
            }
        }
    }
    format!(" ({} must be a real directory you own with mode 0700, reached without symbolic links: chmod 700 it)", dir.display())
}

/// Renames the stage to the output (never overwriting) and makes it durable.
fn publish(stage: &Path, output: &Path) -> Result<(), String> {
    let parent = stage.parent().ok_or("the stage has no parent")?;
    let parent_fd = rustix::fs::open(parent, rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC, rustix::fs::Mode::empty())
        .map_err(|e| format!("{}: {e}", parent.display()))?;
    let (Some(from), Some(to)) = (stage.file_name(), output.file_name()) else {
        return Err("stage and output need names".into());
    };
    rustix::fs::renameat_with(&parent_fd, from, &parent_fd, to, rustix::fs::RenameFlags::NOREPLACE)
        .map_err(|e| format!("{}: cannot publish to {}: {e}", stage.display(), output.display()))?;
    rustix::fs::fsync(&parent_fd).map_err(|e| format!("{}: fsync: {e}", parent.display()))
}

fn exit_code(status: std::process::ExitStatus) -> ExitCode {
    match (status.code(), status.signal()) {
        (Some(code), _) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        (None, Some(signal)) => ExitCode::from(u8::try_from(128 + signal).unwrap_or(1)),
        _ => ExitCode::from(1),
    }
}

/// Forwards SIGINT, SIGTERM, SIGHUP and SIGQUIT to the child while it runs.
struct Forwarder {
    handle: signal_hook::iterator::Handle,
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.handle.close();
    }
}

fn forward_signals(child: u32) -> Option<Forwarder> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP, SIGQUIT]).ok()?;
    let handle = signals.handle();
    let pid = rustix::process::Pid::from_raw(i32::try_from(child).ok()?)?;
    std::thread::spawn(move || {
        for signal in signals.forever() {
            if let Some(signal) = rustix::process::Signal::from_named_raw(signal) {
                let _ = rustix::process::kill_process(pid, signal);
            }
        }
    });
    Some(Forwarder { handle })
}
