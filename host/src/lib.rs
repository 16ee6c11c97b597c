//! proclease: crash-safe, process-owned leases on shared local state — the wasmtime host.
//!
//! The lease logic is a WebAssembly component (`guest/`, WIT contract in `wit/proclease.wit`)
//! embedded in this crate. This crate runs it with wasmtime and gives it its effects through
//! capability-scoped imports; it is also the library plugin hosts embed, and the home of the
//! `proclease` command-line tool.
//!
//! ```no_run
//! # fn main() -> Result<(), proclease::Error> {
//! let runtime = proclease::Runtime::shared()?;
//! let mut instance = runtime.instantiate()?;
//! let verdict = instance.records().inspect_file("active.json", "{}\n")?;
//! assert!(verdict.error.is_some());
//! # Ok(()) }
//! ```
//!
//! Modules: [`component`] (the embedded bytes), [`runtime`] (engine, compiled-component cache,
//! limits), [`records`] (the typed API over the `records` export), [`error`].
#![warn(missing_docs)]

pub mod admission;
mod bindings;
pub mod component;
mod convert;
pub mod directory_lease;
pub mod dispositions;
pub mod effects;
mod imports;
pub mod invocation_lease;
pub mod plugin_catalog;
pub mod error;
mod fsops;
pub mod process_identity;
pub mod records;
pub mod state_home;
pub mod state_store;
pub mod supervisor;
pub mod witness;
pub mod workspace;
pub mod runtime;

pub use error::{Error, Limit};
pub use proclease_core as core;
pub use admission::{Admission, survey_admission};
pub use directory_lease::{DirectoryLease, recover_directory_creations, recover_directory_leases, recover_each_directory_lease};
pub use dispositions::Dispositions;
pub use invocation_lease::{
    ContainmentController, acquire_invocation_lease, invocation_lease_status, list_invocation_leases, release_invocation_lease,
    repair_invocation_leases,
};
pub use records::Records;
pub use runtime::{HostState, Instance, Runtime, RuntimeConfig};
/// The wasmtime this host is built on, for embedders of [`Runtime::instantiate_component`]
/// (whose components, stores and instances are its types).
pub use wasmtime;
