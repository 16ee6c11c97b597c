//! The host library's error type.

use std::path::PathBuf;
use std::time::Duration;

/// An error of the host library.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The component refused or failed: a lease rule (the reference's exact message), a storage
    /// or a system failure, as it reported it.
    #[error("{0}")]
    Rule(#[from] proclease_core::Error),
    /// The component could not be compiled or instantiated, or trapped (a bug in it, or an
    /// import it needs that the host does not provide). Never a lease rule; the message says
    /// what failed.
    #[error("the proclease component failed: {0}")]
    Component(String),
    /// The component hit one of the runtime's limits ([`RuntimeConfig`](crate::RuntimeConfig))
    /// and was stopped: it computed past its call deadline, made too many import calls, or tried
    /// to grow past its memory cap. The
    /// call did not complete; its instance cannot be used again, the runtime can.
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
    if bytes % MIB == 0 {
        format!("{} MiB", bytes / MIB)
    } else if bytes < MIB && bytes % 1024 == 0 {
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
