//! The words of a run refused before its command started: a signal that cut it short, what it
//! could not release in the signal's grace, a command that cannot be started.
//!
//! A run (`proclease run`, the Python host's `proclease.run`, the Node host's `runCommand`)
//! leases its directory and, with `--exclusive`, the export admission, and then starts its
//! command. Every host's supervisor words these refusals with the functions here (the native
//! host links this crate; the Python and Node hosts call the component's `run-refusals` export,
//! `wit/proclease.wit`), so that they read the same whichever host ran, and a change of wording
//! is made once. The rules they describe are in `docs/deviations.md` 21 (a signal before the
//! command ends the run cleanly within a grace of 500 ms) and 27 (creation intents).
//!
//! ```
//! use proclease_core::run_refusals::{interrupted_before_start, left_export_admission};
//! assert_eq!(
//!     interrupted_before_start(2, &[]),
//!     "interrupted by signal 2 before the command started; nothing was started and nothing is left behind"
//! );
//! let left = [left_export_admission("waited 500 ms for the lock")];
//! assert!(interrupted_before_start(15, &left).ends_with(
//!     "but not all it held could be released in time: the export admission (waited 500 ms for the lock): \
//!      the next `run --exclusive` takes it over once this process has exited"
//! ));
//! ```

use alloc::format;
use alloc::string::String;

/// A signal (SIGINT, SIGTERM, SIGHUP or SIGQUIT, by its number) arrived before the command
/// started, so it was not started. `left` is what could not be released or removed within the
/// signal's grace, each worded by one of the `left_*` functions below, in the order the run
/// found them; empty when everything leased or created for the command was undone.
///
/// Never says "nothing is left behind" when `left` names something.
pub fn interrupted_before_start(signal: i32, left: &[String]) -> String {
    let prefix = format!("interrupted by signal {signal} before the command started; nothing was started");
    if left.is_empty() {
        return format!("{prefix} and nothing is left behind");
    }
    let mut message = format!("{prefix}, but not all it held could be released in time: ");
    for (i, item) in left.iter().enumerate() {
        if i > 0 {
            message.push_str("; ");
        }
        message.push_str(item);
    }
    message
}

/// An item of [`interrupted_before_start`]'s `left`: the export admission (§6A.5), whose
/// release failed with `failure` (the error's message). The next acquirer takes over a dead
/// owner's admission (§6A.5 rows 7–12), so nothing needs an operator.
pub fn left_export_admission(failure: &str) -> String {
    format!("the export admission ({failure}): the next `run --exclusive` takes it over once this process has exited")
}

/// An item of [`interrupted_before_start`]'s `left`: the directory lease of `path` (§6A.6),
/// whose release failed with `failure`; `proclease recover` removes a dead owner's lease.
pub fn left_directory_lease(path: &str, failure: &str) -> String {
    format!("the lease of {path} ({failure}): `proclease recover` removes it once this process has exited")
}

/// An item of [`interrupted_before_start`]'s `left`: this process's creation intent for `path`
/// (`docs/deviations.md` 27), at `entry` (its path in the state home, e.g.
/// `recovery/proclease-directory-creations/ID.json`), which the creation's undo could not
/// remove; `proclease recover` finishes a dead creator's creation.
pub fn left_creation_intent(entry: &str, path: &str) -> String {
    format!("the creation intent {entry} of {path}: `proclease recover` finishes it once this process has exited")
}

/// An item of [`interrupted_before_start`]'s `left` when the creation intents' collection
/// (`collection`, its path) could not be read (`failure`): an intent for `path` may be left.
pub fn left_creation_intent_unknown(path: &str, collection: &str, failure: &str) -> String {
    format!("perhaps the creation intent of {path} ({collection}: {failure}): `proclease recover` finishes it once this process has exited")
}

/// The command `program` cannot be started (not found, not executable, …): `reason` is the
/// system's error as the host words it (`No such file or directory (os error 2)`). Everything
/// leased or created for it was undone. An empty program name (`run -- ""`) is said as such,
/// not with the error each system call gives it (ENOENT, EACCES, a runtime's own words).
pub fn unstartable(program: &str, reason: &str) -> String {
    if program.is_empty() {
        return "cannot start the command: its program name is empty".into();
    }
    format!("{program}: cannot start the command: {reason}")
}

/// The hint after a run was refused because the directory-lease collection holds the
/// reference's bound of leases (`directory lease collection exceeded its reviewed bound`,
/// [`MAX_CLAIMS`](crate::directory_leases::MAX_CLAIMS), §6A.6): why, and what frees a place.
pub fn lease_collection_full() -> String {
    format!(
        "the state home holds {} directory leases, the reference's bound (ghostget's recovery refuses a collection over it), \
         so no new lease is taken and nothing was created; `proclease recover` releases the leases of runs that are gone \
         (`proclease doctor` lists them), or give another state home (--state-home)",
        crate::directory_leases::MAX_CLAIMS
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    #[test]
    fn an_interrupted_run_names_everything_it_left_in_order() {
        let left = vec![left_creation_intent("recovery/proclease-directory-creations/a.json", "/w/job"), left_directory_lease("/w/job", "EIO")];
        assert_eq!(
            interrupted_before_start(2, &left),
            "interrupted by signal 2 before the command started; nothing was started, but not all it held could be released in time: \
             the creation intent recovery/proclease-directory-creations/a.json of /w/job: `proclease recover` finishes it once this process has exited; \
             the lease of /w/job (EIO): `proclease recover` removes it once this process has exited"
        );
        assert_eq!(interrupted_before_start(1, &[]), "interrupted by signal 1 before the command started; nothing was started and nothing is left behind");
    }

    #[test]
    fn a_command_that_cannot_start_is_named() {
        assert_eq!(unstartable("/nope", "No such file or directory (os error 2)"), "/nope: cannot start the command: No such file or directory (os error 2)");
        assert_eq!(unstartable("", "Permission denied (os error 13)"), "cannot start the command: its program name is empty");
        assert_eq!(
            left_creation_intent_unknown("/w", "/home/recovery/proclease-directory-creations", "Permission denied (os error 13)"),
            "perhaps the creation intent of /w (/home/recovery/proclease-directory-creations: Permission denied (os error 13)): `proclease recover` finishes it once this process has exited"
        );
    }
}
