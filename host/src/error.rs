//! The host library's error type.

use std::path::PathBuf;
use std::time::Duration;

pub use proclease_core::{Failure, FailureKind};
use proclease_core::{LeaseCode, LeaseError};

use crate::cluster::ClusterError;
use crate::process_identity::IdentityError;
use crate::state_home::StateHomeError;
use crate::state_store::StoreError;
use crate::workspace::WorkspaceError;

/// An error of the host library: what failed, typed down to its cause, each message saying what
/// the user can do. Callers branch on the variant (and a refusal's [`LeaseCode`]), never on the
/// text.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A lease rule refused: its code and the reference's exact message (e.g.
    /// `Beeper Message Like Me recovery: another export is active`).
    /// The failure a refusal wraps, if any, is its [`std::error::Error::source`]
    /// ([`LeaseError::cause`]).
    #[error(transparent)]
    Lease(LeaseError),
    /// The component reported a storage failure: the store's or the workspace's, with its
    /// [`FailureKind`] (e.g. [`FailureKind::Permission`] for a read-only state home,
    /// [`FailureKind::Unreachable`] for etcd) and, where the system gave them, its errno's name,
    /// path and operation.
    #[error("{0}")]
    Storage(Failure),
    /// A system fact was unavailable (boot id, process identity, clock, catalog, a command's
    /// wait), with the reference's message where it fixes one.
    #[error("{0}")]
    System(Failure),
    /// The component could not be compiled or instantiated, or trapped (a bug in it, or an
    /// import it needs that the host does not provide). Never a lease rule; the message says
    /// what failed.
    #[error("the proclease component failed: {0}")]
    Component(String),
    /// The component hit one of the runtime's limits ([`RuntimeConfig`](crate::RuntimeConfig))
    /// and was stopped: it computed past its call deadline, made too many import calls, or tried
    /// to grow past its memory cap. The call did not complete; its instance cannot be used
    /// again, the runtime can.
    #[error("{0}")]
    Limit(Limit),
    /// A file the host was asked to read or write could not be.
    #[error("{}: {message}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// What went wrong and what to do.
        message: String,
    },
    /// The state home could not be selected or opened.
    #[error(transparent)]
    StateHome(#[from] StateHomeError),
    /// Another process held a kernel lock of the state home past the wait's bound
    /// ([`HostBuilder::lock_timeout`](crate::HostBuilder::lock_timeout)); the error names the
    /// holder (its pid, command and state: a stopped holder keeps the lock until continued).
    #[error(transparent)]
    LockTimeout(#[from] crate::imports::lock_wait::LockTimeout),
    /// The state store failed outside a component call (its own bookkeeping, a lock).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The workspace failed outside a component call.
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
    /// A process identity could not be established, or its witness taken.
    #[error(transparent)]
    Identity(#[from] IdentityError),
    /// The supervisor refused to lease or to start a command: what, and what to do instead.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// Cluster mode: a malformed store address, a build without it, or a lost presence session.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// A process could not be started (not found, not executable, …): the program and the
    /// system's error, kept as the source.
    #[error("cannot start {program}: {source}")]
    Start {
        /// The program asked for.
        program: String,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// [`Host::recover`](crate::Host::recover) dealt with the directory leases, then failed at
    /// `step` (the creation intents, or the invocation leases): `done` is what it did (`dry_run`:
    /// would do) — directory leases recovered, their directories removed, and, failing at the
    /// invocation leases, creation intents finished — and `error` why it could not go on, e.g.
    /// another process holding the plugin catalog's mutation lock (the reference's `portable
    /// plugin catalog mutation is already locked`, §5). Displayed as `recovery stopped at the
    /// invocation leases` (or `… the creation intents`), with `error` as its
    /// [`source`](std::error::Error::source); [`Error::failure`], [`Error::lease_code`] and
    /// [`Error::to_core`] are `error`'s. (A caller that matched `error`'s own variant, e.g.
    /// `Error::Lease`, on `recover` before finds it here.)
    #[error("recovery stopped at {}", step.name())]
    RecoveryIncomplete {
        /// The step that failed.
        step: proclease_core::recovery_advice::Step,
        /// What was recovered before the failure (its `invocations` is `None`, and its
        /// `creations` empty when they failed).
        done: Box<crate::Recovery>,
        /// Why recovery stopped there.
        #[source]
        error: Box<Error>,
    },
}

impl From<proclease_core::Error> for Error {
    /// The component's error, case for case.
    fn from(error: proclease_core::Error) -> Self {
        match error {
            proclease_core::Error::Lease(lease) => Error::Lease(lease),
            proclease_core::Error::Storage(failure) => Error::Storage(failure),
            proclease_core::Error::System(failure) => Error::System(failure),
            other => Error::system(other.message()),
        }
    }
}

impl Error {
    /// A system failure of kind [`FailureKind::Unavailable`] with `message`.
    pub fn system(message: impl Into<String>) -> Error {
        Error::System(Failure::unavailable(message))
    }

    /// The structured failure behind this error, if it has one, for a program to branch on
    /// (`failure.kind`, `failure.errno`) where the message is for a person:
    /// - a storage or system failure: itself;
    /// - a refusal: the failure it wraps ([`LeaseError::cause`]), `None` for a plain refusal;
    /// - the store or workspace failing outside a component call (e.g. etcd unreachable when
    ///   the host is built: [`FailureKind::Unreachable`]): as the component would have seen it;
    /// - a lock wait that reached its bound: the failure of the operation it interrupted, or
    ///   [`FailureKind::Contended`];
    /// - a process identity or witness that could not be had: [`FailureKind::Unavailable`].
    pub fn failure(&self) -> Option<Failure> {
        match self {
            Error::Storage(failure) | Error::System(failure) => Some(failure.clone()),
            Error::Lease(lease) => lease.cause().cloned(),
            Error::Store(error) => Some(error.failure()),
            Error::Workspace(error) => Some(error.failure()),
            Error::LockTimeout(timeout) => Some(
                timeout
                    .during
                    .as_ref()
                    .and_then(|during| during.error.downcast_ref::<Error>())
                    .and_then(Error::failure)
                    .unwrap_or_else(|| Failure::new(FailureKind::Contended, timeout.to_string())),
            ),
            Error::Identity(error) => Some(Failure::unavailable(error.to_string())),
            Error::RecoveryIncomplete { error, .. } => error.failure(),
            _ => None,
        }
    }

    /// The refusal's code, when a lease rule refused.
    pub fn lease_code(&self) -> Option<LeaseCode> {
        match self {
            Error::Lease(lease) => Some(lease.code()),
            Error::RecoveryIncomplete { error, .. } => error.lease_code(),
            _ => None,
        }
    }

    /// This error as proclease-core's (the component's three cases; everything the host adds
    /// is a system failure with its message).
    pub fn to_core(&self) -> proclease_core::Error {
        match self {
            Error::RecoveryIncomplete { error, .. } => error.to_core(),
            Error::Lease(lease) => proclease_core::Error::Lease(lease.clone()),
            Error::Storage(failure) => proclease_core::Error::Storage(failure.clone()),
            Error::System(failure) => proclease_core::Error::System(failure.clone()),
            other => proclease_core::Error::System(other.failure().map_or_else(|| Failure::unavailable(other.to_string()), |f| Failure { message: other.to_string(), ..f })),
        }
    }
}

/// What the supervisor refused, before anything ran (`run`'s checks, in the library).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// The directory cannot be leased as a new one (`run`'s lease): it is the state home, holds
    /// it or lies inside it; it exists and is not a directory; it is not empty; or another lease,
    /// live or not, claims it (or an entry that is not a valid lease may). The component decides
    /// and words it (`directory-leases.lease-new-directory`, `docs/deviations.md` 22–24); the
    /// message names the directory and what to do.
    #[error("{message}")]
    NewDirectory {
        /// Which check refused.
        kind: proclease_core::directory_leases::RefusalKind,
        /// The component's message, e.g. `/w/job: refused: not empty. …`.
        message: String,
    },
    /// A stage's output exists already (publication never overwrites).
    #[error("{}: the output already exists; publishing never overwrites", output.display())]
    OutputExists {
        /// The output.
        output: PathBuf,
    },
    /// A stage's output is not a sibling of the stage.
    #[error("{}: --output must be a sibling of --stage ({})", output.display(), stage.display())]
    OutputNotSibling {
        /// The output.
        output: PathBuf,
        /// The stage.
        stage: PathBuf,
    },
    /// A path is not UTF-8 (records hold UTF-8 paths).
    #[error("{}: paths must be UTF-8", path.display())]
    NotUtf8 {
        /// The path.
        path: PathBuf,
    },
    /// The command could not be started; nothing ran and everything was released.
    #[error("{}", proclease_core::run_refusals::unstartable(command, reason))]
    Unstartable {
        /// The program.
        command: String,
        /// Why (the operating system's error).
        reason: String,
    },
    /// A signal (SIGINT, SIGTERM, SIGHUP or SIGQUIT) arrived before the command started: it was
    /// not started, and everything leased or created for it was released and removed.
    #[error("{}", proclease_core::run_refusals::interrupted_before_start(*signal, &[]))]
    Interrupted {
        /// The signal's number.
        signal: i32,
    },
    /// A signal arrived before the command started, as [`Refusal::Interrupted`], but what was
    /// taken for the command could not all be released within the signal's grace (a lock held
    /// by a hung process, a state home that stopped taking writes): nothing was started, and
    /// `left` names each thing left behind with what becomes of it (as after a crash: the next
    /// run or `proclease recover` takes it over once this process has exited).
    ///
    /// Worded by proclease-core's `run_refusals`, as every host's supervisor words it.
    #[error("{}", proclease_core::run_refusals::interrupted_before_start(*signal, left))]
    InterruptedLeavingClaims {
        /// The signal's number.
        signal: i32,
        /// What is left, in the order it was found, each item as `run_refusals::left_*` words
        /// it, e.g. "the export admission (…): the next `run --exclusive` takes it over once
        /// this process has exited".
        left: Vec<String>,
    },
    /// A box was required (`--containment required`, [`Containment::Required`]) and none can be
    /// made here; nothing was leased (`docs/containment.md`).
    ///
    /// [`Containment::Required`]: crate::supervisor::Containment::Required
    #[error("the command cannot be contained: {reason}; without --containment required it runs uncontained")]
    NoContainment {
        /// Why (e.g. creating a PID namespace was refused).
        reason: String,
    },
    /// In cluster mode, an exclusive run with `--containment auto` (the default) where no box
    /// can be made: its command's tree must die with its supervisor before its presence can
    /// expire and another machine take the admission over (`docs/cluster.md`), and without a
    /// box it may not. `--containment none` runs it anyway, with a warning.
    #[error(
        "in cluster mode an exclusive run's command must die with its supervisor, which needs a box, and none can be made here: {reason}; \
         nothing was leased. Run where a PID namespace can be made (as root, or with unprivileged user namespaces allowed), \
         or pass --containment none to run without one (a supervisor that is stopped or killed may then leave processes running \
         beside the next holder)"
    )]
    ClusterWithoutBox {
        /// Why no box can be made.
        reason: String,
    },
}

/// A runtime limit a component exceeded (see [`Error::Limit`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Limit {
    /// One call into the component computed for longer than the call deadline
    /// ([`RuntimeConfig::call_deadline`](crate::RuntimeConfig::call_deadline); time inside
    /// imports does not count) and was interrupted (within about one 50 ms engine tick of it).
    #[error("the component computed past its {} call deadline and was interrupted", humantime::format_duration(*deadline))]
    Deadline {
        /// The deadline it ran past.
        deadline: Duration,
    },
    /// One call into the component made more import calls than the runtime allows
    /// ([`RuntimeConfig::max_import_calls`](crate::RuntimeConfig::max_import_calls)): a guest
    /// spinning on imports, whose own time the deadline would hardly count.
    #[error("the component made more than {cap} import calls in one call and was stopped")]
    ImportCalls {
        /// The cap.
        cap: u64,
    },
    /// The component tried to grow its linear memory (all its memories together) past the
    /// cap ([`RuntimeConfig::max_memory_bytes`](crate::RuntimeConfig::max_memory_bytes)).
    #[error(
        "the component tried to grow its memory to {} ({requested_bytes} bytes), past its {} cap, and was stopped",
        mib(*requested_bytes),
        mib(*cap_bytes)
    )]
    Memory {
        /// The cap, in bytes.
        cap_bytes: usize,
        /// The total size the growth asked for, in bytes.
        requested_bytes: usize,
    },
    /// The component tried to grow its tables (all together) past the runtime's element cap
    /// ([`MAX_TABLE_ELEMENTS`](crate::runtime::MAX_TABLE_ELEMENTS)).
    #[error("the component tried to grow its tables to {requested} elements, past its cap of {cap}, and was stopped")]
    TableElements {
        /// The cap, in elements.
        cap: usize,
        /// The total number of elements the growth asked for.
        requested: usize,
    },
}

/// `bytes` for a message: `16 MiB`, `64 KiB`, or `16.06 MiB`.
fn mib(bytes: usize) -> String {
    const MIB: usize = 1 << 20;
    if bytes.is_multiple_of(MIB) {
        format!("{} MiB", bytes / MIB)
    } else if bytes < MIB && bytes.is_multiple_of(1024) {
        format!("{} KiB", bytes / 1024)
    } else {
        format!("{:.2} MiB", bytes as f64 / MIB as f64)
    }
}

impl From<wasmtime::Error> for Error {
    /// A wasmtime failure: [`Error::Limit`] when it is (or wraps) a runtime limit the component
    /// hit, else [`Error::Component`] with the whole cause chain on one line.
    fn from(error: wasmtime::Error) -> Self {
        match error.downcast_ref::<Limit>() {
            Some(limit) => Error::Limit(limit.clone()),
            // `{:#}` prints a cause chain on one line ("a: b: c").
            None => Error::Component(format!("{error:#}")),
        }
    }
}

impl Error {
    pub(crate) fn component(error: wasmtime::Error) -> Self {
        Error::from(error)
    }
}

/// The symbolic name of an operating-system error (`EROFS`), when `error` carries an errno.
pub(crate) fn errno_name(error: &std::io::Error) -> Option<String> {
    error.raw_os_error().map(|code| crate::seam::Errno::from_raw(code).symbol())
}

#[cfg(test)]
mod tests {
    /// The names that cross the boundary (`Failure::os`) are the ones nix gives, for every
    /// number: the protocols' table words them now, and the wording must not move.
    #[test]
    fn errno_names_are_the_ones_nix_gives() {
        for code in 0..=140 {
            let nix = match nix::errno::Errno::from_raw(code) {
                nix::errno::Errno::UnknownErrno => format!("errno {code}"),
                known => format!("{known:?}"),
            };
            assert_eq!(crate::seam::Errno::from_raw(code).symbol(), nix, "errno {code}");
        }
    }
}
