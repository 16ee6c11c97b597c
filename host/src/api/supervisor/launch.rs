//! Starting a recorded process: [`Launch`] takes its spawn witness before the lease records that
//! a launch begins, then spawns the command (in a containment box, or plain), so that a crash in
//! between leaves a free witness (nothing was started) rather than none (nothing known).

use std::process::{Child, Command};
use std::sync::Arc;

use crate::containment::{self, BoxOptions, Containment, Tree};
use crate::error::Error;
use crate::process_identity::cgroup_tree::CgroupTree;
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

impl SpawnError {
    /// The library's error for a failure to start `command`: [`Error::Identity`] for the
    /// witness, [`Error::Start`] naming the program (the system's error kept as its source).
    pub fn for_command(self, command: &Command) -> Error {
        match self {
            SpawnError::Witness(e) => Error::Identity(e),
            SpawnError::Start(source) => Error::Start { program: command.get_program().to_string_lossy().into_owned(), source },
        }
    }
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

    /// Starts `command` in a box (`containment`, `docs/containment.md`) holding the
    /// witness: the box's init keeps it open while any process of the tree lives, whatever the
    /// command's processes close. The pid to record is [`Tree::id`] (the init's). On failure the
    /// witness is removed.
    ///
    /// Errors: [`SpawnError::Start`] (with [`Containment::Required`] and no box possible, of
    /// kind [`std::io::ErrorKind::Unsupported`]).
    pub fn spawn_tree(self, command: &mut Command, mut options: BoxOptions) -> Result<Tree, SpawnError> {
        options.keep.extend(self.witness.as_ref().and_then(SpawnWitness::raw_fd));
        if options.containment != Containment::None {
            options.cgroup = match options.cgroup.take() {
                // The caller's own cgroup is recorded as one made here would be.
                Some(given) => self.record_cgroup(given),
                None => CgroupTree::create().map_err(|reason| tracing::info!(%reason, "no cgroup for the command's tree")).ok().and_then(|made| self.record_cgroup(Arc::new(made))),
            };
        }
        let cgroup = options.cgroup.clone();
        let started = self.start(command, |command| containment::spawn(command, &options), Tree::id, Tree::uncontained);
        if let (Err(_), Some(cgroup)) = (&started, cgroup) {
            cgroup.remove();
        }
        started
    }

    /// Records `cgroup` (the cgroup v2 of the command's tree: `docs/containment.md`, "The
    /// cgroup") beside the spawn witness, so that probes of the child see it; `None` (and the
    /// cgroup removed) when it cannot be recorded.
    fn record_cgroup(&self, cgroup: Arc<CgroupTree>) -> Option<Arc<CgroupTree>> {
        if let Some(witness) = &self.witness
            && let Err(e) = witness.record_cgroup(&cgroup.record())
        {
            tracing::warn!(error = %e, "the command's cgroup cannot be recorded: it runs without one");
            cgroup.remove();
            return None;
        }
        Some(cgroup)
    }

    /// Starts `command` holding the witness, without a box (the witness records that it is
    /// uncontained). On success this process keeps no copy of it: the child (and what it starts)
    /// holds it alone. On failure the witness is removed.
    ///
    /// Errors: [`SpawnError::Start`].
    pub fn spawn(self, command: &mut Command) -> Result<Child, SpawnError> {
        self.start(command, Command::spawn, Child::id, |_| true)
    }

    /// `spawn` with the witness attached to `command`, handed on to the process `pid` names;
    /// `uncontained` tells whether what was started runs without a box and a cgroup.
    fn start<T>(
        mut self,
        command: &mut Command,
        spawn: impl FnOnce(&mut Command) -> std::io::Result<T>,
        pid: impl Fn(&T) -> u32,
        uncontained: impl Fn(&T) -> bool,
    ) -> Result<T, SpawnError> {
        if let Some(witness) = &self.witness {
            witness.attach(command);
        }
        match spawn(command) {
            Ok(started) => {
                if let Some(witness) = self.witness.take() {
                    // Before `started`: this process still holds the witness, so no probe finds
                    // it free without the record.
                    if uncontained(&started)
                        && let Err(e) = witness.record_uncontained()
                    {
                        tracing::warn!(error = %e, "the command runs uncontained, and its witness cannot say so");
                    }
                    witness.started(pid(&started));
                }
                Ok(started)
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
