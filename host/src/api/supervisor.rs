//! Starting the processes a lease records — a directory lease's child, an export admission's
//! helper, an invocation lease's containment host — so that their death can be proven later in
//! any namespace: each is started holding a spawn witness (`docs/witness.md`) that it hands on
//! to everything it starts in turn.
//!
//! Take the witness before the lease records that a launch begins (`launching`,
//! `helper-launching`, `host-starting`), so that a crash between that write and the spawn leaves
//! a free witness (nothing was started) rather than none (nothing known).

use std::process::{Child, Command};

use crate::process_identity::{IdentityError, ProcessIdentity};
use crate::witness::SpawnWitness;

/// A failure to start a recorded process.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SpawnError {
    /// The witness could not be taken; nothing was started.
    #[error("{0}")]
    Witness(IdentityError),
    /// The command could not be started (not found, not executable, …).
    #[error("cannot start the command: {0}")]
    Start(std::io::Error),
}

/// A spawn witness taken before a launch, to be used by one [`Launch::spawn`].
pub struct Launch<'a> {
    witness: Option<SpawnWitness<'a>>,
}

impl<'a> Launch<'a> {
    /// Takes a spawn witness of this process (none when `identity` has no witness directory:
    /// the child is then judged by `/proc` alone).
    ///
    /// Errors: [`SpawnError::Witness`].
    pub fn prepare(identity: &'a ProcessIdentity) -> Result<Launch<'a>, SpawnError> {
        Ok(Launch { witness: identity.spawn_witness().map_err(SpawnError::Witness)? })
    }

    /// Starts `command` holding the witness. On success this process keeps no copy of it: the
    /// child (and what it starts) holds it alone. On failure the witness is removed.
    ///
    /// Errors: [`SpawnError::Start`].
    pub fn spawn(mut self, command: &mut Command) -> Result<Child, SpawnError> {
        if let Some(witness) = &self.witness {
            witness.attach(command);
        }
        match command.spawn() {
            Ok(child) => {
                if let Some(witness) = self.witness.take() {
                    witness.started(child.id());
                }
                Ok(child)
            }
            Err(e) => {
                if let Some(witness) = self.witness.take() {
                    witness.abandon();
                }
                Err(SpawnError::Start(e))
            }
        }
    }
}

/// Gives up this process's witness and its spawn witnesses that are free, once it holds no
/// lease any more (every record naming it was released).
pub fn retire(identity: &ProcessIdentity) {
    if let (Some(witnesses), Ok(own)) = (identity.witnesses(), identity.self_identity()) {
        witnesses.retire(&own);
    }
}
