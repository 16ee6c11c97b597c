//! `run --exclusive --wait` on the file store: the export admission taken in arrival order,
//! through the state home's wait queue (`wait_queue`; issue #44, "a fair wait that wakes on
//! death"). A waiter joins the queue, waits for the waiters ahead of it, and, at the head, tries
//! the admission; refused because a live owner holds it, it sleeps until the admission's record
//! changes or the holder's witness closes (it died), then tries again. It leaves the queue once
//! it holds the admission, gives up at its bound, or is interrupted.

use std::path::Path;
use std::time::{Duration, Instant};

use proclease_core::LeaseCode;

use crate::Admission;
use crate::api::host::Host;
use crate::error::Error;
use crate::lock_wait::Operation;
use crate::wait_queue::{NotYet, Ticket, Watch};

/// The first fallback pause of the head's wait (where no event comes); it doubles up to 1 s.
const FIRST_PAUSE: Duration = Duration::from_millis(50);

/// Takes the admission in `ticket`'s turn, waiting at most `bound` in all (see the module
/// docs): the admission, and the acquisition's operation (begun again for the attempt that
/// succeeded). A state home whose queue cannot be joined waits without it
/// (`Supervisor::admission_polled`).
///
/// Errors: at the bound, the last attempt's refusal (`another export is active`, exit 3);
/// the interruption `interrupted` reports; any other refusal of an attempt, at once.
pub(super) fn admission(host: &Host, ticket: Ticket<'_>, operation: Operation, bound: Duration, interrupted: &dyn Fn() -> Option<Error>) -> Result<(Admission, Operation), Error> {
    let start = Instant::now();
    let deadline = deadline(start, bound);
    let mut operation = Some(operation);
    let mut told = false;
    // Says once that this run waits, for whom, and behind how many.
    let mut tell = |ahead: usize, holder: &Option<proclease_core::admission::Survey>| {
        if !std::mem::replace(&mut told, true) {
            announce(ahead, holder, deadline);
        }
    };
    let claim_directory = Path::new(proclease_core::admission::CLAIM_PATH).parent().map(|dir| host.state_home().join(dir));
    let mut pause = FIRST_PAUSE;
    // One watch for the whole wait (see `Watch`).
    let mut watch = Watch::new();
    // Whether the last attempt was made at once because the holder's witnesses were found
    // free: refused again (the claim is kept active by what its witnesses do not show — a
    // spawn witness, a helper's /proc), the next one waits, so that this never spins.
    let mut retried_at_once = false;
    loop {
        // The waiters ahead first: only the head tries the admission.
        let ahead = ticket.await_head(&mut watch, deadline, &|| interrupted().is_some(), &mut |ahead| {
            drop(operation.take());
            tell(ahead, &host.survey_admission().ok().flatten());
        });
        match ahead {
            Ok(()) => {}
            Err(NotYet::Interrupted) => return Err(interrupted().unwrap_or_else(|| crate::error::Refusal::Interrupted { signal: 0 }.into())),
            Err(NotYet::Deadline { ahead }) => {
                drop(ticket);
                return last_attempt(host, operation.take(), start, ahead);
            }
        }
        // At the head: watch the admission's record before trying, so that a release between
        // the attempt and the sleep still wakes it.
        watch.clear();
        if let Some(dir) = &claim_directory {
            watch.directory(dir);
        }
        let attempt = operation.take().unwrap_or_else(|| Operation::begin(host.lock_timeout()));
        match host.acquire_admission() {
            Ok(admission) => return Ok((admission, attempt)),
            Err(error) if error.lease_code() == Some(LeaseCode::AnotherExportIsActive) && Instant::now() < deadline => {
                drop(attempt);
                let holder = host.survey_admission().ok().flatten();
                tell(0, &holder);
                if let Some(error) = interrupted() {
                    return Err(error);
                }
                // And the holder's witnesses (its death closes them), looked at after the watch
                // is set: a holder that died since the attempt is tried again at once.
                let died = holder.as_ref().is_some_and(|survey| holder_died_or_watched(host, &mut watch, &survey.claim));
                if died && !std::mem::replace(&mut retried_at_once, true) {
                    pause = FIRST_PAUSE;
                    continue;
                }
                retried_at_once = false;
                if !watch.wait(pause.min(deadline.saturating_duration_since(Instant::now()))) {
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
            }
            Err(error) if error.lease_code() == Some(LeaseCode::AnotherExportIsActive) => {
                tracing::warn!("gave up waiting for the export admission after {:.1} s", start.elapsed().as_secs_f64());
                return Err(error);
            }
            Err(error) => return Err(error),
        }
    }
}

/// A queued waiter's attempt at its bound, still behind `ahead` earlier waiters (having left
/// the queue): the admission if it is free after all, else the refusal, which says why (the
/// holder still holds it), after a line saying the wait that began at `start` ended.
pub(super) fn last_attempt(host: &Host, operation: Option<Operation>, start: Instant, ahead: usize) -> Result<(Admission, Operation), Error> {
    let operation = operation.unwrap_or_else(|| Operation::begin(host.lock_timeout()));
    match host.acquire_admission() {
        Ok(admission) => Ok((admission, operation)),
        Err(error) => {
            tracing::warn!("gave up waiting for the export admission after {:.1} s, with {ahead} earlier waiters still ahead", start.elapsed().as_secs_f64());
            Err(error)
        }
    }
}

/// The moment a wait of `bound` from `start` ends; a bound past what an `Instant` can hold
/// (`--wait 18446744073709551615s`) is a century.
pub(super) fn deadline(start: Instant, bound: Duration) -> Instant {
    start.checked_add(bound).unwrap_or_else(|| start + Duration::from_secs(100 * 365 * 86_400))
}

/// What a waiter says once, when it starts to wait: for whom (`holder`), behind how many, and
/// for how long at most (until `deadline`).
pub(super) fn announce(ahead: usize, holder: &Option<proclease_core::admission::Survey>, deadline: Instant) {
    let holding = match holder {
        Some(survey) => format!(" (pid {} holds it: {})", survey.claim.owner.pid, survey.reason),
        None => String::new(),
    };
    let queued = match ahead {
        0 => String::new(),
        1 => ", behind 1 earlier waiter".into(),
        n => format!(", behind {n} earlier waiters"),
    };
    tracing::warn!("another export is active{holding}: waiting for its turn{queued}, for at most {:.1} s", deadline.saturating_duration_since(Instant::now()).as_secs_f64());
}

/// Watches the witnesses of `claim`'s owner and helper; true when all of them are already free
/// (every process the claim names died since the attempt was refused, so the next attempt may
/// take it over). A live helper keeps the claim active (§6A.5 row 11) whatever its owner.
fn holder_died_or_watched(host: &Host, watch: &mut Watch, claim: &proclease_core::records::export_admission::ExportAdmission) -> bool {
    let witnesses = host.process_identity().witnesses();
    let mut all_free = witnesses.is_some();
    for owner in std::iter::once(&claim.owner).chain(claim.helper_owner.as_ref()) {
        if let Some(path) = crate::witness::path_in(host.state_home(), owner) {
            watch.closed_for_writing(&path);
        }
        if let Some(witnesses) = witnesses {
            all_free &= witnesses.test(owner).is_ok_and(|(state, _)| state == proclease_core::liveness::WitnessState::Free);
        }
    }
    all_free
}
