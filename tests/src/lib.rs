//! Conformance runner and shared helpers for proclease's integration tests.
//!
//! [`conformance`] runs the vectors of `shared/vectors/` (format:
//! `shared/vectors/README.md`) against two backends: the guest logic linked natively, and the
//! embedded component through the wasmtime host. The test suite and (later) the `conformance`
//! command use this one implementation.

pub mod cluster_timing;
pub mod conformance;
pub mod crash_world;
#[cfg(feature = "cluster")]
pub mod etcd_server;
pub mod fakes;
pub mod fs_fixtures;
pub mod hostile;
pub mod interleavings;
pub mod interposed_fs;
pub mod linearizability;
pub mod portable;
pub mod portable_artifact;
pub mod sim_disk;
pub mod store_fixtures;
