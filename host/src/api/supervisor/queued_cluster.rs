//! `run --exclusive --wait` in cluster mode: the export admission taken in arrival order,
//! through etcd's wait queue (`cluster::queue`; issue #44, "a fair wait that wakes on death").
//! A waiter takes a place, waits for the nearest waiter ahead of it to leave (a watch), and, at
//! the head, waits for the admission as an unqueued run does (a watch of the admission and its
//! holder's presence, `Supervisor::admission_polled`). It keeps its place until it holds the
//! admission, gives up at its bound, or is interrupted.
//!
//! The waiters ahead are judged where this machine can prove something: one of this machine
//! (its boot id) that `/proc` shows gone loses its place at once, and one stopped where it waits
//! (Ctrl-Z, SIGSTOP) is passed over while it is stopped, as on the file store. A waiter of
//! another machine that dies keeps its place until its presence expires (one TTL).

use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

use super::Supervisor;
use super::queued::{announce, deadline, last_attempt};
use crate::Admission;
use crate::api::host::Host;
use crate::cluster::Cluster;
use crate::cluster::queue::{Ahead, EtcdQueue, EtcdTicket, QueuedWaiter, judge};
use crate::error::Error;
use crate::lock_wait::Operation;

/// How long one watch of the place ahead lasts before the waiters ahead are judged again (a
/// waiter stopped since, or continued, or of this machine and dead without a pidfd to show it).
const REJUDGE_AFTER: Duration = Duration::from_secs(1);

/// Takes the admission in this process's turn among the waiters of every machine (see the
/// module docs), waiting at most the supervisor's `--wait` bound in all: the admission, and the
/// acquisition's operation (begun again for the attempt that succeeded). A run that cannot
/// take a place (etcd refused the write) waits without one, with a warning.
///
/// Errors: at the bound, the last attempt's refusal (`another export is active`, exit 3); the
/// interruption `interrupted` reports; any other refusal of an attempt, at once.
pub(super) fn admission(supervisor: &Supervisor<'_>, cluster: &Cluster, operation: Operation, interrupted: &dyn Fn() -> Option<Error>) -> Result<(Admission, Operation), Error> {
    let host = supervisor.host;
    let start = Instant::now();
    let deadline = deadline(start, supervisor.admission_wait);
    let queue = EtcdQueue::new(cluster.store(), crate::wait_queue::EXPORT_ADMISSION);
    let ticket = match join(host, cluster, &queue) {
        Ok(ticket) => ticket,
        Err(why) => {
            tracing::warn!("cannot join the export admission's wait queue in etcd ({why}): waiting without a place in it");
            return supervisor.admission_polled(operation, supervisor.admission_wait, false, interrupted);
        }
    };
    let mut operation = Some(operation);
    let mut told = false;
    match await_head(host, &queue, &ticket, deadline, interrupted, &mut |ahead| {
        // Nothing is held while this waits for others.
        drop(operation.take());
        if !std::mem::replace(&mut told, true) {
            announce(ahead, &host.survey_admission().ok().flatten(), deadline);
        }
    })? {
        Turn::Head => {
            let operation = operation.take().unwrap_or_else(|| Operation::begin(host.lock_timeout()));
            let taken = supervisor.admission_polled(operation, deadline.saturating_duration_since(Instant::now()), told, interrupted);
            // Leaves the queue only now: the next waiter becomes the head once this one holds the
            // admission (or gave up), so that the two never race for it.
            drop(ticket);
            taken
        }
        Turn::Deadline { ahead } => {
            drop(ticket);
            last_attempt(host, operation.take(), start, ahead)
        }
    }
}

/// Takes a place for this process, under its presence lease (registering the presence first).
fn join<'s>(host: &Host, cluster: &'s Cluster, queue: &EtcdQueue<'s>) -> Result<EtcdTicket<'s>, String> {
    let owner = host.process_identity().self_identity().map_err(|e| e.0)?;
    let session = cluster.session().map_err(|e| e.to_string())?;
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let ticket = queue.join(&owner, session.lease_id(), now_ms).map_err(|e| e.to_string())?;
    tracing::debug!(key = ticket.key(), revision = ticket.create_revision(), "joined the export admission's wait queue in etcd");
    Ok(ticket)
}

/// Where [`await_head`] ended.
enum Turn {
    /// No waiter ahead waits any more: this one may try the admission.
    Head,
    /// The bound passed with `ahead` waiters still ahead.
    Deadline { ahead: usize },
}

/// Waits until `ticket` is the head of the queue (every waiter ahead left, is gone, or is
/// stopped), `deadline` passes, or `interrupted` reports something. `on_wait(ahead)` is called
/// before each wait with the number of waiters ahead.
///
/// Errors: the interruption. A queue that etcd stops answering ends the wait as the head: the
/// waiter then competes as an unqueued run does (the admission's compare-and-swap decides).
fn await_head(
    host: &Host,
    queue: &EtcdQueue<'_>,
    ticket: &EtcdTicket<'_>,
    deadline: Instant,
    interrupted: &dyn Fn() -> Option<Error>,
    on_wait: &mut dyn FnMut(usize),
) -> Result<Turn, Error> {
    let boot_id = host.process_identity().current_boot_id().ok();
    let mut pause = Duration::from_millis(50);
    // Opened before the first read of the queue, kept for the whole wait.
    let mut leaves = queue.watch_leaves().map_err(|error| tracing::debug!(%error, "cannot watch the wait queue; pausing instead")).ok();
    loop {
        if let Some(error) = interrupted() {
            return Err(error);
        }
        let (waiters, _) = match queue.waiters() {
            Ok(read) => read,
            Err(error) => {
                tracing::warn!("cannot read the export admission's wait queue in etcd ({error}): trying the admission out of turn");
                return Ok(Turn::Head);
            }
        };
        let Some(mine) = waiters.iter().position(|waiter| waiter.key == ticket.key()) else {
            // Its place is gone: its presence expired (this process was stopped, or cut off from
            // etcd, for longer than the TTL: it may no longer take part, and its attempt says
            // so), or etcd was restored to a state before it joined (it competes out of turn
            // rather than wait behind waiters that may be gone too).
            let lapsed = host.cluster().and_then(|cluster| cluster.open_session()).is_some_and(|session| !session.is_live());
            if lapsed {
                tracing::warn!(
                    "this run's cluster presence lapsed while it waited (stopped or cut off from etcd for longer than the TTL), and its place in the wait queue with it"
                );
            } else {
                tracing::warn!("this run's place in the export admission's wait queue is gone from etcd: trying the admission out of turn");
            }
            return Ok(Turn::Head);
        };
        // Judged from the nearest place back to the first that waits: a waiter waits only for
        // that one (so a wake costs one judgement, not one per waiter ahead); the places ahead of
        // it are counted, for the message, and judged by the waiters just behind them.
        let mut nearest: Option<(&QueuedWaiter, Option<OwnedFd>)> = None;
        let mut ahead = 0;
        for waiter in waiters[..mine].iter().rev().filter(|waiter| waiter.is_place()) {
            if nearest.is_some() {
                ahead += 1;
                continue;
            }
            match judge(host.process_identity(), boot_id.as_deref(), waiter) {
                (Ahead::Gone, _) => match queue.remove_if_dead(waiter) {
                    Ok(_) => tracing::debug!(key = waiter.key, "removed the place of a waiter this machine proves gone"),
                    Err(error) => tracing::debug!(key = waiter.key, %error, "could not remove a gone waiter's place"),
                },
                (Ahead::Stopped, _) => {}
                (Ahead::Waiting, exits) => {
                    ahead += 1;
                    nearest = Some((waiter, exits));
                }
            }
        }
        let Some((nearest, exits)) = nearest else { return Ok(Turn::Head) };
        let now = Instant::now();
        if now >= deadline {
            return Ok(Turn::Deadline { ahead });
        }
        on_wait(ahead);
        let timeout = REJUDGE_AFTER.min(deadline - now);
        tracing::trace!(key = nearest.key, "waiting for the waiter ahead");
        let exits: Vec<_> = exits.iter().map(AsFd::as_fd).collect();
        match leaves.as_mut().map(|watch| watch.wait(timeout, &exits)) {
            Some(Ok(_)) => pause = Duration::from_millis(50),
            failed => {
                if let Some(Err(error)) = failed {
                    tracing::debug!(%error, "the wait queue's watch failed; pausing instead");
                    leaves = None;
                }
                std::thread::sleep(pause.min(timeout));
                pause = (pause * 2).min(REJUDGE_AFTER);
                leaves = leaves.or_else(|| queue.watch_leaves().ok());
            }
        }
    }
}
