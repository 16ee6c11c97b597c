//! The one error type of the lease logic.
//!
//! The reference (spec §8 item 3) needs callers to tell a *lease error* — a rule of the protocol
//! refused, with the reference's exact message — from an underlying *storage* or *system*
//! failure. The three cases below map one to one onto the `error` variant of the WIT contract.

use alloc::string::String;
use core::fmt;

/// The message prefix of every error of the `beeper-message-like-me-recovery` module (§6A.1).
pub const BEEPER_PREFIX: &str = "Beeper Message Like Me recovery: ";

/// An error of the lease logic.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// A lease rule refused. The string is the reference's exact message, prefix included
    /// (e.g. `Beeper Message Like Me recovery: another export is active`).
    Lease(String),
    /// The state store or workspace failed (I/O, an unsafe file, a bound); the message names the
    /// path and what the user can do.
    Storage(String),
    /// A system fact was unavailable (boot id, process identity, clock); where the reference fixes
    /// the message (e.g. `exact live process identity is unavailable`) it is that message.
    System(String),
}

impl Error {
    /// A lease error of the Beeper module: `Beeper Message Like Me recovery: <message>`.
    pub fn beeper(message: &str) -> Self {
        let mut text = String::with_capacity(BEEPER_PREFIX.len() + message.len());
        text.push_str(BEEPER_PREFIX);
        text.push_str(message);
        Error::Lease(text)
    }

    /// A lease error with no prefix (invocation-lease module, portable identity parser).
    pub fn lease(message: impl Into<String>) -> Self {
        Error::Lease(message.into())
    }

    /// The message, whatever the case.
    pub fn message(&self) -> &str {
        match self {
            Error::Lease(m) | Error::Storage(m) | Error::System(m) => m,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

impl core::error::Error for Error {}
