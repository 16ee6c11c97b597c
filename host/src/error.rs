//! The host library's error type.

use std::path::PathBuf;

/// An error of the host library.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The component refused or failed: a lease rule (the reference's exact message), a storage
    /// or a system failure, as it reported it.
    #[error("{0}")]
    Rule(#[from] proclease_core::Error),
    /// The component could not be compiled or instantiated, trapped, ran past its deadline or
    /// exceeded its memory cap. This is a bug or a limit, never a lease rule; the message says
    /// which.
    #[error("the proclease component failed: {0}")]
    Component(String),
    /// A file the host was asked to read or write could not be.
    #[error("{}: {message}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// What went wrong and what to do.
        message: String,
    },
}

impl Error {
    pub(crate) fn component(error: impl std::fmt::Display) -> Self {
        // `{:#}` prints an anyhow chain on one line ("a: b: c").
        Error::Component(format!("{error:#}"))
    }
}
