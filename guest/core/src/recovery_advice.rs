//! The words of a `recover` that did not finish: recovery stopped at a lease it could not judge
//! or change, a wait for another process's lock reached its bound, or the invocation leases
//! could not be recovered after the directory leases were; and of a survey
//! (`doctor`, a dry recovery) whose wait reached its bound.
//!
//! Every host's `recover` command (`proclease recover`, the Python and Node hosts' command lines)
//! says these with the functions here (the native host links this crate; the Python and Node
//! hosts call the component's `recovery-advice` export, `wit/proclease.wit`), so that a stop
//! reads the same whichever host recovered, and its advice is right for its cause: a lease that
//! is not recoverable as it is can be skipped (`--skip-invalid`), a lock another process holds
//! cannot — skipping would only leave every lease as it is (exit status 5 in every host,
//! `docs/deviations.md` 21).
//!
//! ```
//! use proclease_core::recovery_advice::{stopped, waited_out};
//! assert_eq!(
//!     stopped("a lease file is invalid", Some("bad JSON"), false, false),
//!     "recovery stopped: a lease file is invalid (bad JSON); \
//!      `proclease recover --skip-invalid` recovers the other leases and leaves this one as it is"
//! );
//! assert_eq!(
//!     waited_out(Some("directory lease recovery failed safely"), "waited 1000 ms for L, held by pid 7", true),
//!     "recovery would stop: directory lease recovery failed safely: waited 1000 ms for L, held by pid 7"
//! );
//! ```

use alloc::format;
use alloc::string::String;

/// Recovery stopped (`dry_run`: would stop) at `error`, the stop's own words (§6A.6's
/// `directory lease recovery failed safely`, a lease file that is invalid, …), with the
/// `cause` recovery gave, if any. Unless `skip_invalid` was asked, says that
/// `--skip-invalid` recovers the other leases. Not for a stop a lock wait caused: see
/// [`waited_out`].
pub fn stopped(error: &str, cause: Option<&str>, dry_run: bool, skip_invalid: bool) -> String {
    let cause = cause.map(|c| format!(" ({c})")).unwrap_or_default();
    let hint = if skip_invalid { "" } else { "; `proclease recover --skip-invalid` recovers the other leases and leaves this one as it is" };
    format!("{}: {error}{cause}{hint}", verb(dry_run))
}

/// A wait for another process's lock reached the host's lock timeout during recovery;
/// `timeout` is that wait's own words (`waited N ms for LOCK, held by pid P (…): …`). With
/// `error`, recovery stopped (`dry_run`: would stop) for it; without, it went on and left a
/// lease as it is. Never advises `--skip-invalid`: nothing is wrong with an entry, the lock's
/// holder must finish (the host exits with status 5).
pub fn waited_out(error: Option<&str>, timeout: &str, dry_run: bool) -> String {
    match error {
        Some(error) => format!("{}: {error}: {timeout}", verb(dry_run)),
        None => format!("recovery left a lease as it is because a wait reached its bound: {timeout}"),
    }
}

/// A step of `recover` after the directory leases, at which it may fail with what came before
/// it done ([`stopped_at`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The directory-creation intents of crashed creators.
    CreationIntents,
    /// The invocation leases (§6B.9), under the plugin catalog's lock.
    InvocationLeases,
}

impl Step {
    /// What the step deals with: `the creation intents`, `the invocation leases`.
    pub fn name(self) -> &'static str {
        match self {
            Step::CreationIntents => "the creation intents",
            Step::InvocationLeases => "the invocation leases",
        }
    }
}

/// Recovery failed (`dry_run`: would fail) at `step`, with `error` (e.g. the reference's
/// `portable plugin catalog mutation is already locked` while a plugin mutation runs), after
/// what came before it was dealt with: that step and those after it are left as they are, and
/// what the host listed before this line was done. No advice to run again: the error says what
/// stands in the way, which may not pass by itself.
pub fn stopped_at(step: Step, error: &str, dry_run: bool) -> String {
    match (dry_run, step) {
        (true, _) => format!("{} at {}: {error}", verb(dry_run), step.name()),
        (false, Step::CreationIntents) => format!(
            "{} at the creation intents, which are left as they are with the invocation leases: {error}; the directory leases, listed above, were dealt with",
            verb(dry_run)
        ),
        (false, Step::InvocationLeases) => {
            format!("{} at the invocation leases, which are left as they are: {error}; the rest of the recovery, listed above, was done", verb(dry_run))
        }
    }
}

/// What a survey (`doctor`) says when a wait for another process's lock reached its bound while
/// it looked: it fails rather than show a held collection as refused or invalid (exit status 5,
/// `docs/deviations.md` 21). Followed by `: ` and the wait's words.
pub const SURVEY_INCOMPLETE: &str = "the survey could not read everything";

/// [`SURVEY_INCOMPLETE`] with the wait's words (`waited N ms for LOCK, held by pid P …`).
pub fn survey_waited_out(timeout: &str) -> String {
    format!("{SURVEY_INCOMPLETE}: {timeout}")
}

fn verb(dry_run: bool) -> &'static str {
    if dry_run { "recovery would stop" } else { "recovery stopped" }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_names_its_cause_and_the_skip_only_when_it_was_not_asked() {
        assert_eq!(stopped("E", None, true, true), "recovery would stop: E");
        assert_eq!(stopped("E", Some("C"), false, true), "recovery stopped: E (C)");
    }

    #[test]
    fn a_wait_that_reached_its_bound_never_advises_skipping() {
        assert_eq!(waited_out(Some("E"), "waited 5 ms for L", false), "recovery stopped: E: waited 5 ms for L");
        assert_eq!(waited_out(None, "waited 5 ms for L", true), "recovery left a lease as it is because a wait reached its bound: waited 5 ms for L");
    }

    #[test]
    fn a_failure_after_the_directory_leases_says_what_came_before_it_was_done() {
        assert_eq!(stopped_at(Step::InvocationLeases, "E", true), "recovery would stop at the invocation leases: E");
        assert_eq!(
            stopped_at(Step::InvocationLeases, "E", false),
            "recovery stopped at the invocation leases, which are left as they are: E; the rest of the recovery, listed above, was done"
        );
        assert_eq!(
            stopped_at(Step::CreationIntents, "E", false),
            "recovery stopped at the creation intents, which are left as they are with the invocation leases: E; the directory leases, listed above, were dealt with"
        );
    }
}
