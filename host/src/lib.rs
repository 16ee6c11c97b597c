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
//! Layout, by role:
//! - [`api`]: the typed library — the admission, directory leases, invocation leases, records,
//!   dispositions and the supervisor of a recorded process;
//! - [`runtime`]: the wasmtime engine, the embedded component ([`component`]), its limits;
//! - [`imports`]: one module per imported WIT interface — its native implementation and its glue;
//!   every file-system effect of the facade is there (the facade in [`api`] does none itself);
//! - [`containment`]: the kernel's box around a supervised command (PID namespace, cgroup v2,
//!   its `/proc` mount), a mechanism of its own;
//! - [`error`]: the library's error type.
#![warn(missing_docs)]
// Data from the state home, /proc or the guest boundary is never unwrapped (the brief): an
// invariant of our own is an `expect` that says which; tests may unwrap.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

extern crate alloc;

pub mod api;
pub mod containment;
pub mod error;
pub mod imports;
pub mod runtime;

/// The one conversion layer between the generated WIT types and proclease-core's, shared with
/// the component (`wit/convert.rs`).
#[path = "../wit/convert.rs"]
mod convert;

pub(crate) use imports::fsops;
pub(crate) use runtime::bindings;

// Stable paths to the parts an embedder wires by hand.
pub use api::{admission, directory_lease, dispositions, invocation_lease, records, report, supervisor, wait_queue};
pub use imports as effects;
pub use imports::process_identity::witness;
pub use imports::state_store::home as state_home;
pub use imports::{cluster, lock_wait, plugin_catalog, process_identity, seam, state_store, workspace};
pub use runtime::component;

pub use admission::{Admission, survey_admission};
pub use api::host::{Host, HostBuilder, InvalidFile, InvalidReason, InvocationSurvey, Recovery, Survey};
pub use cluster::Fence;
pub use directory_lease::{DirectoryLease, recover_directory_creations, recover_directory_leases, recover_each_directory_lease};
pub use dispositions::Dispositions;
pub use error::{Error, Failure, FailureKind, Limit, Refusal};
pub use invocation_lease::{ContainmentController, acquire_invocation_lease, invocation_lease_status, list_invocation_leases, release_invocation_lease, repair_invocation_leases};
/// `proclease-core`, the pure lease logic the component is built from: the types the library's
/// methods take and return (`core::directory_leases::Request`,
/// `core::records::directory_lease::Role`, …), documented here in full.
#[doc(inline)]
pub use proclease_core as core;
/// The protocols that keep data safe, written once over the system-call seam (issue #41).
pub use proclease_protocols as protocols;
pub use records::Records;
pub use runtime::{HostState, Instance, LoadedFrom, Runtime, RuntimeConfig};

/// The README's code blocks, run as doc-tests (its library example must work as printed).
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeExamples;
/// docs/embedding.md's Rust code blocks, run as doc-tests (its end-to-end example must work as
/// printed).
#[cfg(doctest)]
#[doc = include_str!("../../docs/embedding.md")]
pub struct EmbeddingExamples;
/// The wasmtime this host is built on, for embedders of [`Runtime::instantiate_component`]
/// (whose components, stores and instances are its types).
pub use wasmtime;
