//! The command line: argument parsing, the shared context (state home, workspace, process
//! identity), exit codes, and one module per subcommand.

/// Prints to standard output as `print!` does, but a reader that went away (`doctor | head -1`)
/// ends the program quietly with status 141, as SIGPIPE ends a Unix tool, instead of a panic
/// ([`output::write`]).
macro_rules! out {
    ($($arg:tt)*) => { $crate::cli::output::write(format_args!($($arg)*), false) };
}

/// [`out!`] with a newline, as `println!`.
macro_rules! outln {
    ($($arg:tt)*) => { $crate::cli::output::write(format_args!($($arg)*), true) };
}

mod cluster;
mod component;
mod doctor;
mod fence;
mod identity;
mod invocations;
mod logging;
mod output;
mod recover;
mod run;
mod validate;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, CommandFactory as _, Parser, Subcommand};
use proclease::Host;
use proclease::core::LeaseCode;

/// Exit status when a live owner holds what was asked for (`… another export is active`).
pub const EXIT_BLOCKED: u8 = 3;
/// Exit status when a prior owner cannot be proven dead (`… cannot be inspected safely`).
pub const EXIT_INDETERMINATE: u8 = 4;
/// Exit status: another process held a lock of the state home past `--lock-timeout` (the
/// message names it).
pub const EXIT_LOCK_TIMEOUT: u8 = 5;
/// Exit status of a run (or plugin invocation) that lost its lease while its command ran
/// ("lock lost", cluster mode: its presence lapsed, was lost with etcd's state, or overran):
/// the command was stopped, its work interrupted, nothing published; the message gives the
/// command's own status.
pub const EXIT_LOCK_LOST: u8 = 7;

/// How a command ended, in words ("exited 0", "died of signal 15").
pub fn how_it_ended(status: &std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt as _;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited {code}"),
        (None, Some(signal)) => format!("died of signal {signal}"),
        _ => "ended".to_string(),
    }
}

pub use proclease::report::JSON_SCHEMA_VERSION;

/// `--version`: the crate version, the embedded component's sha256 and the WIT package it
/// implements.
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (component sha256 ", env!("PROCLEASE_COMPONENT_SHA256"), ", WIT ", env!("PROCLEASE_WIT_PACKAGE"), ")");

/// Prints a `--json` document the one way every command does (pretty, one trailing newline).
pub fn print_json(document: &serde_json::Value) {
    outln!("{}", serde_json::to_string_pretty(document).unwrap_or_default());
}

/// Prints a report as its `--json` document (through a `Value`, so that every document's keys
/// are in one order: sorted).
pub fn print_serialized(report: &impl serde::Serialize) {
    print_json(&serde_json::to_value(report).unwrap_or_default());
}

#[derive(Parser)]
#[command(
    name = "proclease",
    version = VERSION,
    about = "Crash-safe, process-owned leases on shared local state (ghostget 0.17.2 compatible)",
    long_about = "Crash-safe, process-owned leases on shared local state (ghostget 0.17.2 compatible).\n\n\
        proclease leases working directories and the export admission to live processes, and after a crash \
        tells with proof (boot id, process start time, directory identity) whether their owner is gone, \
        cleaning up only what provably belongs to a dead owner.",
    after_help = "Examples:\n  \
        proclease run --workdir ~/jobs/build -- make\n  \
        proclease doctor\n  \
        proclease recover --dry-run\n  \
        proclease validate examples/records\n  \
        proclease identity 1234\n\n\
        Logging: -v shows what was probed and which proof decided (-vv more), -q only errors; RUST_LOG \
        (e.g. RUST_LOG=proclease=debug) overrides both. Logs go to standard error.\n\n\
        Exit status: 0 ok; 1 error or invalid record; 2 usage error; 3 blocked by a live owner; \
        4 a prior owner cannot be proven dead. `run` exits with the command's status once it ran."
)]
struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Command,
}

/// Options every subcommand that touches state takes.
#[derive(Args, Clone)]
pub struct Global {
    /// The state home (default: $PROCLEASE_STATE_HOME, $GHOSTGET_STATE_HOME,
    /// $XDG_DATA_HOME/proclease, ~/.local/share/proclease).
    #[arg(long, global = true, value_name = "DIR")]
    state_home: Option<PathBuf>,
    /// A directory under which leased directories may be inspected and removed; repeatable
    /// (default: your home directory and the temporary directory).
    #[arg(long = "workspace-root", global = true, value_name = "DIR")]
    workspace_roots: Vec<PathBuf>,
    /// The plugin catalog file (default: <state home>/provider-plugins/catalog.json).
    #[arg(long, global = true, value_name = "FILE")]
    plugin_catalog: Option<PathBuf>,
    /// Where the export admission and the plugin invocation leases live: `file` (the state
    /// home) or etcd://HOST:PORT/PREFIX, shared by every machine using that prefix (cluster
    /// mode; directory leases stay in this machine's state home).
    #[arg(long, global = true, value_name = "ADDRESS", env = "PROCLEASE_STORE")]
    store: Option<String>,
    /// In cluster mode: how long after a crash this process's leases stay held before other
    /// machines may take them over (e.g. 10s; at least 2s). Cut off from etcd, `run` stops its
    /// command after three quarters of it.
    #[arg(long, global = true, value_name = "DURATION", value_parser = humantime::parse_duration)]
    cluster_ttl: Option<std::time::Duration>,
    /// In cluster mode: speak TLS to etcd, trusting the members' certificates signed by this CA
    /// (PEM).
    #[arg(long, global = true, value_name = "FILE", env = "PROCLEASE_ETCD_CA")]
    etcd_ca: Option<PathBuf>,
    /// In cluster mode, with --etcd-ca: this machine's client certificate (PEM), for an etcd
    /// that requires one (--client-cert-auth).
    #[arg(long, global = true, value_name = "FILE", env = "PROCLEASE_ETCD_CERT")]
    etcd_cert: Option<PathBuf>,
    /// In cluster mode: the client certificate's private key (PEM, mode 0600).
    #[arg(long, global = true, value_name = "FILE", env = "PROCLEASE_ETCD_KEY")]
    etcd_key: Option<PathBuf>,
    /// In cluster mode: how long one etcd member may take to connect or to answer one attempt
    /// of a request before the request goes to another member (a hung member costs this much).
    #[arg(long, global = true, value_name = "DURATION", env = "PROCLEASE_ETCD_DIAL_TIMEOUT")]
    dial_timeout: Option<String>,
    /// In cluster mode: how long one store operation may take in all, every member and retry
    /// included, before it fails closed.
    #[arg(long, global = true, value_name = "DURATION", env = "PROCLEASE_ETCD_COMMAND_TIMEOUT")]
    command_timeout: Option<String>,
    /// How long one operation may wait, in all, for locks of the state home another process
    /// holds (a stopped proclease, a long recovery) and for other programs' mutation claims,
    /// before failing with exit status 5 and the holder's pid; after 1 s the wait says who it
    /// waits for.
    #[arg(long, global = true, value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
    lock_timeout: std::time::Duration,
    /// Say more on standard error: -v what was probed and which proof decided, -vv every
    /// store and /proc step.
    #[arg(short, long, global = true, action = clap::ArgAction::Count, conflicts_with = "quiet")]
    verbose: u8,
    /// Say nothing on standard error but errors.
    #[arg(short, long, global = true)]
    quiet: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Run a command in a leased directory, recording it as the lease's child (and, with
    /// --exclusive, as the export admission's helper), so a crash at any instant can be
    /// recovered exactly.
    #[command(after_help = run::HELP)]
    Run(run::RunArgs),
    /// Recover leases whose owners are provably gone: remove their directories by identity,
    /// count published stages, remove their claims.
    #[command(after_help = "Examples:\n  proclease recover\n  proclease recover --dry-run\n  proclease recover --json\n\n\
        A lease whose owner (or recorded child) is alive is kept; one whose owner cannot be proven dead is kept and \
        counted as indeterminate.")]
    Recover(recover::RecoverArgs),
    /// List the admission claim, every directory lease and every plugin invocation lease with
    /// its owner, recorded child, phase, age and disposition (active / indeterminate /
    /// recoverable / invalid), and why.
    #[command(after_help = "Examples:\n  proclease doctor\n  proclease doctor --json\n\n\
        CHILD is the recorded child of a directory lease (the command `run` started), the helper of the export \
        admission, or the containment host of an invocation lease. Doctor changes nothing; `recover` acts on the \
        rows it marks recoverable.")]
    Doctor(doctor::DoctorArgs),
    /// Plugin invocation leases: list, repair, or run a plugin host under a lease.
    #[command(subcommand, after_help = invocations::HELP)]
    Invocations(invocations::InvocationsCommand),
    /// Fencing tokens of exclusive runs (etcd revisions in cluster mode, the state home's counter
    /// otherwise): whether one is still its holder's.
    #[command(subcommand, after_help = fence::HELP)]
    Fence(fence::FenceCommand),
    /// Cluster mode's presence history on etcd: list it by boot, and delete it for a boot that
    /// ended.
    #[command(subcommand, after_help = cluster::HELP)]
    Cluster(cluster::ClusterCommand),
    /// Print the boot id, process start id and owner status of a process (default: this one).
    #[command(after_help = "Examples:\n  proclease identity\n  proclease identity 1234")]
    Identity(identity::IdentityArgs),
    /// Check record files as ghostget's readers would: kind, schema, canonical bytes, sha256,
    /// or the exact reason a reader refuses them.
    #[command(after_help = "Examples:\n  proclease validate active.json\n  proclease validate --json *.json\n  proclease validate examples/records\n\n\
        Exit status: 0 when every file is valid, 1 when any is invalid or unreadable.")]
    Validate {
        /// Record files (export admission, directory lease, invocation lease, portable identity),
        /// or directories whose `*.json` files (recursively) are checked.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Print one JSON document (an array with one object per file) instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Write the embedded WebAssembly component, for other runtimes (Node/jco, Python/wasmtime).
    #[command(after_help = "Examples:\n  proclease component -o proclease.wasm\n  proclease component > proclease.wasm\n  \
        proclease component --interfaces\n  proclease component --interfaces --json\n  \
        proclease component --portable -o proclease-portable.wasm\n\n\
        The bytes are not written to a terminal, and an existing -o file is kept unless --force is given.")]
    Component {
        /// Where to write it; standard output when absent (not a terminal).
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Replace the -o file if it exists.
        #[arg(long, requires = "output")]
        force: bool,
        /// Instead of the bytes, print the component's sha256, size, WIT package, and the
        /// interfaces it imports (what a host must provide) and exports.
        #[arg(long, conflicts_with = "output")]
        interfaces: bool,
        /// With --interfaces: print JSON instead of text.
        #[arg(long, requires = "interfaces")]
        json: bool,
        /// The portable artifact instead (`proclease-portable.wasm`): the component with the
        /// portable store inside, importing system calls (`wit/sys.wit`) instead of a state
        /// store and a workspace, for a runtime that implements those.
        #[arg(long)]
        portable: bool,
    },
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    #[command(after_help = "Examples:\n  proclease completions bash > ~/.local/share/bash-completion/completions/proclease\n  \
        proclease completions zsh > ~/.zfunc/_proclease")]
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff) of proclease and each subcommand, or write them to a
    /// directory.
    #[command(after_help = "Examples:\n  proclease man | man -l -\n  proclease man --dir ~/.local/share/man/man1")]
    Man {
        /// Write proclease.1 and proclease-<subcommand>.1 into this directory instead.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

/// Opens the facade on the global options.
pub fn open(global: &Global) -> Result<Host, Failure> {
    let mut builder = Host::builder();
    if let Some(home) = &global.state_home {
        builder = builder.state_home(home);
    }
    for root in &global.workspace_roots {
        builder = builder.workspace_root(root);
    }
    if let Some(catalog) = &global.plugin_catalog {
        builder = builder.plugin_catalog(catalog);
    }
    // Always explicit: `file` when neither --store nor PROCLEASE_STORE says otherwise (an
    // empty value, `PROCLEASE_STORE=`, is unset, as for the library).
    builder = builder.store(global.store.as_deref().filter(|address| !address.is_empty()).unwrap_or("file"));
    if let Some(ttl) = global.cluster_ttl {
        builder = builder.cluster_ttl(ttl);
    }
    let tls = proclease::cluster::EtcdTlsFiles::from_parts(global.etcd_ca.clone(), global.etcd_cert.clone(), global.etcd_key.clone()).map_err(Failure::new)?;
    if let Some(tls) = tls {
        builder = builder.etcd_tls(tls);
    }
    builder = builder.lock_timeout(global.lock_timeout);
    Ok(builder.build()?)
}

/// Why a subcommand failed: what to print, and the exit status (3 and 4 for the two refusals a
/// script can act on: a live owner holds the admission; a prior owner cannot be proven dead).
#[derive(Debug)]
pub struct Failure {
    message: String,
    status: u8,
}

impl Failure {
    /// A failure with exit status 1.
    pub fn new(message: impl Into<String>) -> Self {
        Failure { message: message.into(), status: 1 }
    }

    /// A failure with the exit status of a wait that reached its bound (5).
    pub fn lock_timeout(message: impl Into<String>) -> Self {
        Failure { message: message.into(), status: EXIT_LOCK_TIMEOUT }
    }

    /// The same failure with `hint` on a line of its own.
    pub fn hint(mut self, hint: impl std::fmt::Display) -> Self {
        self.message = format!("{}\n{hint}", self.message);
        self
    }
}

impl From<proclease::Error> for Failure {
    fn from(error: proclease::Error) -> Self {
        let status = match error.lease_code() {
            _ if matches!(error, proclease::Error::LockTimeout(_)) => EXIT_LOCK_TIMEOUT,
            Some(LeaseCode::AnotherExportIsActive) => EXIT_BLOCKED,
            Some(LeaseCode::PriorExportOwnerCannotBeInspectedSafely) => EXIT_INDETERMINATE,
            _ => 1,
        };
        // The reference's message, then what it wrapped (a store's `Read-only file system`, an
        // unreachable etcd), one cause a line.
        let mut message = match &error {
            proclease::Error::Lease(lease) => lease.message().to_string(),
            other => other.to_string(),
        };
        let mut source = std::error::Error::source(&error);
        while let Some(cause) = source {
            let text = cause.to_string();
            if !message.contains(&text) {
                message.push_str(&format!("\n  caused by: {text}"));
            }
            source = cause.source();
        }
        Failure { message, status }
    }
}

impl From<String> for Failure {
    fn from(message: String) -> Self {
        Failure::new(message)
    }
}

/// Parses the arguments and runs the subcommand.
pub fn main() -> ExitCode {
    // SAFETY: first thing, before any thread of this program starts. The password must not
    // stay readable in this process's environment block, which a box's init inherits.
    unsafe {
        proclease::cluster::take_password_from_environment();
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => return usage_error(&error),
    };
    logging::init(cli.global.verbose, cli.global.quiet);
    // The etcd timeouts reach the store, and every proclease the command runs (`fence check`),
    // through their variables (as the TLS files do), checked where the store connects.
    for (variable, value) in [(proclease::cluster::DIAL_TIMEOUT_VARIABLE, &cli.global.dial_timeout), (proclease::cluster::COMMAND_TIMEOUT_VARIABLE, &cli.global.command_timeout)] {
        if let Some(value) = value {
            // SAFETY: before any thread of this program starts.
            unsafe { std::env::set_var(variable, value) };
        }
    }
    // SIGPIPE stays ignored, as the Rust runtime leaves it, for every command: a socket to etcd
    // that the server closed (a TLS handshake it refused) must be an error with a message, not
    // a silent death (exit 141). A reader of the output that went away ends a report quietly
    // all the same ([`output::write`]); a supervisor (`run`, `invocations run`) prints nothing
    // to standard output while it holds leases.
    let result: Result<ExitCode, Failure> = match cli.command {
        Command::Validate { files, json } => validate::run(&files, json).map_err(|e| Failure::new(e.to_string())),
        Command::Component { interfaces: true, json, portable, .. } => component::describe_component(artifact(portable), json),
        Command::Component { output, force, portable, .. } => component::write_component(artifact(portable), output.as_deref(), force),
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "proclease", &mut std::io::stdout());
            Ok(ExitCode::SUCCESS)
        }
        Command::Man { dir } => component::man_pages(Cli::command(), dir.as_deref()),
        Command::Run(args) => run::run(&cli.global, args),
        Command::Recover(args) => recover::run(&cli.global, &args),
        Command::Doctor(args) => doctor::run(&cli.global, &args),
        Command::Identity(args) => identity::run(&args),
        Command::Fence(command) => fence::run(&cli.global, command),
        Command::Cluster(command) => cluster::run(&cli.global, command),
        Command::Invocations(command) => invocations::run(&cli.global, command),
    };
    // Revoke this process's cluster presence now rather than a TTL after it exits.
    #[cfg(feature = "cluster")]
    proclease::cluster::end_presence();
    match result {
        Ok(code) => code,
        Err(failure) => {
            eprintln!("proclease: {}", failure.message);
            ExitCode::from(failure.status)
        }
    }
}

/// The artifact `proclease component` is about: `--portable` or the component.
fn artifact(portable: bool) -> component::Artifact {
    if portable { component::Artifact::Portable } else { component::Artifact::Component }
}

/// Prints a usage error (exit 2), or help and version (exit 0); a command given to `run` or
/// `invocations run` without the `--` before it gets the hint that fixes it.
fn usage_error(error: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    let _ = error.print();
    let args: Vec<String> = std::env::args().collect();
    let runs_a_command = args.iter().any(|a| a == "run") && !args.iter().any(|a| a == "--");
    if runs_a_command && matches!(error.kind(), ErrorKind::UnknownArgument | ErrorKind::MissingRequiredArgument) {
        eprintln!("hint: put the command after `--`, e.g. proclease run --workdir DIR -- make -j4");
    }
    ExitCode::from(u8::try_from(error.exit_code()).unwrap_or(2))
}
