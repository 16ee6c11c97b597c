//! The typed library over the component's exports: each export's functions and resources as
//! Rust types and functions taking [`Effects`](crate::effects::Effects), returning
//! `proclease-core` types.

pub mod admission;
pub mod directory_lease;
pub mod dispositions;
pub mod invocation_lease;
pub mod records;
pub mod supervisor;
