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
