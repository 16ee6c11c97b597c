//! The typed library: the facade [`Host`](host::Host) an embedder opens, the
//! [`Supervisor`](supervisor::Supervisor) of a recorded command, and — underneath — each
//! export's functions and resources as Rust types taking [`Effects`](crate::effects::Effects)
//! and returning `proclease-core` types.

pub mod admission;
pub mod directory_lease;
pub mod dispositions;
pub mod fencing;
pub mod host;
pub mod invocation_lease;
pub mod records;
pub mod report;
pub mod supervisor;
pub mod wait_queue;

/// Says what a handle's drop could not do: to the program's `tracing` subscriber when it
/// installed a global one, else on standard error as `proclease: warning: …`, so that a claim
/// left behind is never left in silence (a drop has no caller to return an error to).
pub(crate) fn drop_warning(message: std::fmt::Arguments<'_>) {
    if tracing::dispatcher::has_been_set() {
        tracing::warn!("{message}");
    } else {
        // Never `eprintln!`: it panics when standard error is gone (a closed pipe), and a drop
        // may run while its thread unwinds, where a second panic aborts the process.
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), "proclease: warning: {message}");
    }
}
