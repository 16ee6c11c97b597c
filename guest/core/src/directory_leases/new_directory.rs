//! Leasing a directory that nothing else uses, creating it when absent — what `proclease run`
//! leases (proclease's own: one lease per directory, `docs/deviations.md` 11, 22–24). Every host
//! runs this one algorithm, and its refusals are worded here once.
//!
//! The directory may be neither the state home nor hold it or lie inside it; it must be absent
//! or an empty directory (not a file, not a symbolic link); and no other lease, live or not, may
//! claim it ([`Run::conflict`](super::Run::conflict)). The checks and the creation hold the
//! lease-creation lock ([`Store::lock_leasing`](crate::effects::Store::lock_leasing)), so that two
//! leasers never both lease one directory and no recovery removes it meanwhile.
//!
//! The order is what makes the checks hold: another lease's release is not under the lock, so
//! the directory must be seen empty *after* no lease was seen claiming it — seen empty before, a
//! run that finished and released in between would leave its results in a directory this call
//! then leases (and a later `recover` deletes). The same two checks follow the creation, for a
//! leaser that takes no lock (a store without kernel locks, or a peer): of two leasers that each
//! write, then look, the later to look sees the other, so at most one goes on.

use alloc::format;
use alloc::string::String;

use super::{Conflict, Effects, Handle, Request, create_with_directory, is_inside, release, settled_run};
use crate::Error;
use crate::effects::PathKind;
use crate::records::DirectoryIdentity;

/// Why a new directory was refused (the refusal's message says the rest).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalKind {
    /// It is the state home, inside it, or holds it.
    StateHome,
    /// It exists and is not a directory (a file, a device, a symbolic link).
    NotADirectory,
    /// It is a directory with entries.
    NotEmpty,
    /// Another lease (live or not) claims it.
    AlreadyLeased,
    /// It is inside another lease's directory that a recovery removes, or may.
    InsideLeased,
    /// An entry of the lease collection that is not a valid lease may claim it.
    UndecidedLease,
}

/// A refusal before anything was leased or created: what, and the whole message (names the
/// directory and what the user can do).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// Which check refused.
    pub kind: RefusalKind,
    /// The message, e.g. `/w/job: refused: not empty. …`.
    pub message: String,
}

/// What [`lease_new_directory`] failed with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NewDirectoryError {
    /// A check refused; nothing was leased, and nothing is left behind.
    Refused(Refusal),
    /// Anything else: an error of the lease's creation, of a read, or of the lock (a
    /// `contended` failure naming the holder when its wait reached the bound).
    Failed(Error),
}

impl From<Error> for NewDirectoryError {
    fn from(error: Error) -> Self {
        NewDirectoryError::Failed(error)
    }
}

impl From<crate::Failure> for NewDirectoryError {
    fn from(failure: crate::Failure) -> Self {
        NewDirectoryError::Failed(Error::Storage(failure))
    }
}

fn refused(kind: RefusalKind, message: String) -> NewDirectoryError {
    NewDirectoryError::Refused(Refusal { kind, message })
}

/// `path` is `ancestor` or lies below it (component-wise).
fn within(path: &str, ancestor: &str) -> bool {
    let ancestor = ancestor.trim_end_matches('/');
    ancestor.is_empty() || path == ancestor || is_inside(path, ancestor)
}

/// The path of entry `name` of the directory-lease collection under `state_home`.
pub fn lease_entry_path(state_home: &str, name: &str) -> String {
    format!("{}/{}/{name}", state_home.trim_end_matches('/'), super::DIRECTORY)
}

/// The shell command that moves `path` (an entry named `name`) aside into the state home's
/// `.proclease/` as `set-aside-<name>`: what a user runs to set aside a stale or broken record.
pub fn set_aside(state_home: &str, path: &str, name: &str) -> String {
    format!("mv -- '{path}' '{}/.proclease/set-aside-{name}'", state_home.trim_end_matches('/'))
}

/// [`set_aside`] for entry `name` of the directory-lease collection.
pub fn set_aside_lease_entry(state_home: &str, name: &str) -> String {
    set_aside(state_home, &lease_entry_path(state_home, name), name)
}

/// The refusal of `state home` relations (`dir` is the home, inside it, or holds it).
fn state_home_refusal(dir: &str, state_home: &str) -> NewDirectoryError {
    refused(
        RefusalKind::StateHome,
        format!("{dir}: refused: a leased directory may be removed by `recover`, so it can be neither the state home ({state_home}), inside it, nor hold it"),
    )
}

fn not_a_directory(dir: &str) -> NewDirectoryError {
    refused(RefusalKind::NotADirectory, format!("{dir}: refused: it exists and is not a directory; give a directory path (proclease creates it if absent)"))
}

fn not_empty(dir: &str) -> NewDirectoryError {
    refused(
        RefusalKind::NotEmpty,
        format!(
            "{dir}: refused: not empty. `run` leases only a directory it creates or an empty one, because after a crash \
             `recover` deletes the leased directory with everything in it; give a new path and proclease creates it"
        ),
    )
}

/// Leases `request.path` as [`create_with_directory`] does (creating it, with its missing
/// ancestors, when absent), after the checks of the module docs, under the lease-creation lock.
/// `state_home` is the state home's absolute path (for the state-home check and the commands
/// the refusals give).
///
/// Errors: [`NewDirectoryError::Refused`] for a check (nothing leased or created; a lease this
/// call wrote and then had to give up is released); [`NewDirectoryError::Failed`] with the
/// errors of [`create_with_directory`], of the workspace's reads, and of the lock.
pub fn lease_new_directory(request: &Request, state_home: &str, mut fx: Effects<'_>) -> Result<Handle, NewDirectoryError> {
    let dir = request.path.as_str();
    if within(dir, state_home) || within(state_home, dir) {
        return Err(state_home_refusal(dir, state_home));
    }
    // Absent, or not reachable physically (behind a symbolic link, an ancestor that is a file):
    // the lease's creation refuses what it cannot create, in its own words.
    refuse_unless_empty_or_absent(dir, fx.workspace)?;
    fx.store.lock_leasing()?;
    let leased = lease_locked(request, state_home, fx.reborrow());
    fx.store.unlock_leasing();
    leased
}

/// [`lease_new_directory`] once the lease-creation lock is held.
fn lease_locked(request: &Request, state_home: &str, mut fx: Effects<'_>) -> Result<Handle, NewDirectoryError> {
    let dir = request.path.as_str();
    let identity = fx.workspace.inspect(dir)?.map(|facts| facts.identity);
    refuse_if_claimed(dir, identity.as_ref(), None, state_home, fx.reborrow())?;
    refuse_unless_empty_or_absent(dir, fx.workspace)?;
    let mut handle = create_with_directory(request, fx.reborrow())?;
    let own = (handle.claim.id.clone(), handle.claim.directory_identity.clone());
    let after = refuse_if_claimed(dir, Some(&own.1), Some(&own.0), state_home, fx.reborrow()).and_then(|()| refuse_unless_empty_or_absent(dir, fx.workspace));
    if let Err(refusal) = after {
        // Nothing ran in it: the claim goes; the directory stays (it is another's, or holds
        // what another left). Should the release fail, the claim is this live process's, and
        // `recover` judges it once this process is gone.
        let _ = release(&mut handle, fx.store);
        return Err(refusal);
    }
    Ok(handle)
}

/// Refuses a path that exists and is not a directory, or a directory with entries.
fn refuse_unless_empty_or_absent(dir: &str, workspace: &mut dyn crate::effects::Workspace) -> Result<(), NewDirectoryError> {
    match workspace.kind(dir)? {
        PathKind::SymbolicLink | PathKind::Other => Err(not_a_directory(dir)),
        PathKind::Directory if !workspace.is_empty_directory(dir)? => Err(not_empty(dir)),
        PathKind::Directory | PathKind::Absent | PathKind::Unreachable => Ok(()),
    }
}

/// Refuses a directory (by path, or by `identity` when it exists) that a lease other than
/// `except` (a lease id) claims, live or not; one inside a directory whose lease's owner is not
/// alive (recovery removes that directory whole); and one an entry that is not a valid lease
/// may claim — saying whose and what to do.
fn refuse_if_claimed(dir: &str, identity: Option<&DirectoryIdentity>, except: Option<&str>, state_home: &str, fx: Effects<'_>) -> Result<(), NewDirectoryError> {
    let run = settled_run(except, fx)?;
    let Some(conflict) = run.conflict(dir, identity) else { return Ok(()) };
    Err(conflict_refusal(dir, &conflict, state_home))
}

/// The refusal of `dir` for `conflict`.
fn conflict_refusal(dir: &str, conflict: &Conflict<'_>, state_home: &str) -> NewDirectoryError {
    let (Conflict::Active(entry) | Conflict::Recoverable(entry) | Conflict::Replaced(entry) | Conflict::Undecided(entry)) = *conflict;
    let Some(claim) = &entry.claim else {
        // Not a valid lease: it may claim this directory.
        return refused(
            RefusalKind::UndecidedLease,
            format!(
                "{dir}: refused: the lease collection holds an entry that may claim it, {}: {}; fix it, or if no run uses what it claims, move it aside: {}",
                lease_entry_path(state_home, &entry.name),
                entry.reason,
                set_aside_lease_entry(state_home, &entry.name)
            ),
        );
    };
    if claim.path != dir && is_inside(dir, &claim.path) {
        let what = match conflict {
            Conflict::Active(_) => String::from("it is a stage, which its run publishes (renames) or removes whole when its command ends: use a directory elsewhere"),
            Conflict::Recoverable(_) => {
                String::from("its owner is gone, so `proclease recover` removes that directory with everything in it: run it first, or use a directory elsewhere")
            }
            _ => format!("{}; recovery would remove that directory with everything in it once its owner is proven gone: see `proclease doctor`", entry.reason),
        };
        return refused(RefusalKind::InsideLeased, format!("{dir}: refused: it is inside {}, leased by pid {} (lease {}): {what}", claim.path, claim.owner.pid, claim.id));
    }
    let what = match conflict {
        Conflict::Active(_) => String::from("its owner is alive: wait for that run to finish, or use another directory"),
        Conflict::Recoverable(_) => String::from("its owner is gone: run `proclease recover` first (it removes the directory)"),
        Conflict::Replaced(_) => format!(
            "{}; this directory is not the one that lease holds (it was re-created or replaced), so `recover` will never remove it: \
             check that no run uses it, then move the stale lease record aside: {}",
            entry.reason,
            set_aside_lease_entry(state_home, &entry.name)
        ),
        Conflict::Undecided(_) => format!("{}; see `proclease doctor`", entry.reason),
    };
    refused(RefusalKind::AlreadyLeased, format!("{dir}: refused: already leased by pid {} (lease {}): {what}", claim.owner.pid, claim.id))
}
