//! The protocols of proclease that keep users' data safe, written once (issue #41,
//! `docs/architecture.md`), over a system-call-thin seam that every host implements
//! ([`seam::Fs`], [`seam::Kernel`]):
//!
//! - [`state_store`]: the state store's compare-and-swap of records (temporary, sync,
//!   link/rename, directory sync, orphan recovery), ghostget's mutation claims and their
//!   arbitration (§3.5), the collection recovery (§3.9) and the store's path rules;
//! - [`workspace`]: directory facts, private directory creation and the identity-bound
//!   quarantine removal (§6A.4, §3.3 `removePrivateDirectoryTree`);
//! - [`run_journal`]: the journal that keeps a finished run's results (`docs/deviations.md` 19);
//! - [`catalog_lock`]: the reference's catalog mutation lock (§5), shared with ghostget, and
//!   [`plugin_catalog`] the catalog file it guards;
//! - [`files`]: the file-level steps they are built from, [`waits`] what a wait reports.
//!
//! No system call is made here: `proclease` (the native host) runs these protocols over rustix,
//! and its crash-state suite over a simulated disk that crashes or fails at every call. An
//! implementation of the seam words no message (errors are errnos); every message is worded
//! here or in the caller.
//!
//! Nothing of `std` is used either (`no_std + alloc`; the `std` feature only adds conversions
//! from and to `std::io::Error`): time, randomness and pauses come through [`seam::Kernel`], so
//! a WebAssembly build of the crate imports nothing but the seam. Errnos are Linux's, worded by
//! [`os_error`] as glibc words them.

#![no_std]
#![warn(missing_docs)]
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

extern crate alloc;
#[cfg(any(feature = "std", test))]
extern crate std;

/// What `std`'s prelude would give, from `alloc`.
mod prelude {
    pub use alloc::borrow::ToOwned;
    pub use alloc::boxed::Box;
    pub use alloc::format;
    pub use alloc::string::{String, ToString};
    pub use alloc::vec;
    pub use alloc::vec::Vec;
}

pub mod catalog_lock;
pub mod files;
pub mod os_error;
pub mod plugin_catalog;
pub mod run_journal;
pub mod seam;
pub mod state_store;
pub mod waits;
pub mod workspace;
