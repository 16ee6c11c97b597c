//! The pure lease logic of proclease: everything that decides, nothing that acts.
//!
//! This crate is the brain of the proclease WebAssembly component (see `guest/component`), and
//! is also linked natively by the host for the conformance runner and unit tests. It performs no
//! I/O: file bytes, owner statuses, boot ids and clocks come in as arguments (or, for the
//! operations of later modules, through small traits that the component implements over its
//! WIT imports), and decisions come back as values.
//!
//! It implements the reference behaviour of ghostget 0.17.2
//! (`shared/spec/reference-behaviour.md`):
//!
//! * [`canonical_json`] — §1: canonical JSON text and the "canonical file" check;
//! * [`digest`] — §1.2 and §2.1–2.3: sha256, identity digests, boot ids, process start ids;
//! * [`proc_stat`] — §2.3: the `/proc/<pid>/stat` line parser;
//! * [`liveness`] — §2.4: owner status from what a host observed;
//! * [`records`] — §4, §6A.2–6A.3, §6B.1–6B.3: parsing and validation of every record kind with
//!   the reference's exact messages, in the reference's check order;
//! * [`dispositions`] — §6A.5, §6A.6, §6B.4: the pure decision tables;
//! * [`effects`] — the traits the operations use for their effects (mirroring the WIT imports);
//! * [`admission`] — §6A.5: acquire, helper lifecycle and release of the export admission;
//! * [`directory_leases`] — §6A.6: create, update, release and recovery of directory leases;
//! * [`invocation_leases`] — §6B.5–6B.9: acquire, containment, release, list and repair of
//!   plugin invocation leases;
//! * [`run_refusals`] — the words of a run refused before its command started, for every host;
//! * [`recovery_advice`] — the words of a `recover` that stopped or whose wait reached its bound.
//!
//! ```
//! use proclease_core::records::export_admission;
//! let text = "{\"id\":\"11111111-1111-4111-8111-111111111111\",\"kind\":\"beeper-message-like-me-export-admission\",\"owner\":{\"bootId\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\",\"pid\":4242,\"processStartId\":\"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\"},\"schemaVersion\":1}\n";
//! let parsed = export_admission::parse_file(text).unwrap();
//! assert_eq!(parsed.sha256, "4a1fab41d79d1f49836cd1cdfbc26db778b62f1e95a189d91e5512b131a8c9ee");
//! ```
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]
// Data from the state home, /proc or the guest boundary is never unwrapped (the brief); tests may.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

extern crate alloc;

pub mod admission;
pub mod canonical_json;
pub mod digest;
pub mod directory_leases;
pub mod dispositions;
pub mod effects;
pub mod error;
pub mod invocation_leases;
pub mod js;
pub mod liveness;
pub mod mutations;
pub mod proc_stat;
pub mod records;
pub mod recovery_advice;
pub mod run_refusals;

pub use error::{Error, Failure, FailureKind, LeaseCode, LeaseError};
