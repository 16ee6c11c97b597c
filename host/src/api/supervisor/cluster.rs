//! Cluster mode's hold on a supervised command (`docs/cluster.md`, "Self-fencing";
//! `docs/containment.md`): while this process's presence in etcd is what keeps its leases held
//! on other machines, no process of its command's tree may outlive that presence.

use std::process::ExitStatus;

use super::Tree;
use crate::api::host::Host;
use crate::error::Error;

/// The presence session the command is bound to.
#[cfg(feature = "cluster")]
pub(super) type Session = std::sync::Arc<crate::cluster::presence::PresenceSession>;
#[cfg(not(feature = "cluster"))]
pub(super) type Session = std::convert::Infallible;

/// The hold on the session's dead-man timer while a command runs, and its record in the state
/// home ([`super::dead_man_record`]).
#[cfg(feature = "cluster")]
pub(super) type DeadMan = (crate::cluster::presence::DeadManHold, Option<super::dead_man_record::Record>);
#[cfg(not(feature = "cluster"))]
pub(super) enum DeadMan {}

/// The fencing token of the export admission `host` just acquired (`admission`), recorded
/// beside it while it holds the content this handle wrote ([`crate::cluster::fencing::issue`];
/// `None` in file mode).
///
/// Errors: etcd unreachable, or the claim is no longer this handle's ([`Error::System`]):
/// the run must not start.
#[cfg(feature = "cluster")]
pub(super) fn fencing_token(host: &Host, admission: Option<&mut crate::Admission>) -> Option<Result<i64, Error>> {
    let (cluster, admission) = (host.cluster()?, admission?);
    let token = admission
        .content_sha256()
        .and_then(|sha| Ok((sha, admission.claim()?.id)))
        .and_then(|(sha, id)| crate::cluster::fencing::issue(cluster.store(), &sha, &id).map_err(Error::from))
        .and_then(|token| token.ok_or_else(|| Error::system("the export admission changed right after it was acquired: no fencing token; retry")));
    Some(token.map_err(|e| {
        let message = format!("cannot hand out the fencing token of the export admission: {e}");
        Error::System(e.failure().map_or_else(|| crate::Failure::unavailable(message.clone()), |cause| crate::Failure { message: message.clone(), ..cause }))
    }))
}

#[cfg(not(feature = "cluster"))]
pub(super) fn fencing_token(_: &Host, _: Option<&mut crate::Admission>) -> Option<Result<i64, Error>> {
    None
}

/// The presence session of `host`, when it holds one (it wrote a shared record): the
/// command's box then dies with this process (`PR_SET_PDEATHSIG` on its init).
#[cfg(feature = "cluster")]
pub(super) fn session(host: &Host) -> Option<Session> {
    host.cluster()?.open_session()
}

#[cfg(not(feature = "cluster"))]
pub(super) fn session(_: &Host) -> Option<Session> {
    None
}

/// Arms the kernel dead-man timer of this process for as long as the command runs: a
/// supervisor that cannot run (stopped, frozen) is killed before its presence can expire,
/// and its box with it.
///
/// Errors: the kernel refused the timer ([`Error::System`]); nothing was started.
#[cfg(feature = "cluster")]
pub(super) fn hold_dead_man(host: &Host, session: Option<&Session>) -> Result<Option<DeadMan>, Error> {
    session
        .map(|session| {
            let hold = session.hold_dead_man().map_err(|e| {
                let message = format!("cannot arm the cluster dead-man timer (timer_create): {e}");
                Error::System(crate::Failure { operation: Some("timer_create".into()), errno: crate::error::errno_name(&e), ..crate::Failure::unavailable(message) })
            })?;
            // Said beforehand, since a SIGKILL leaves no instant to say it (best effort: the
            // timer kills all the same).
            let record =
                host.process_identity().self_identity().ok().and_then(|own| {
                    super::dead_man_record::Record::write(host.state_home(), &own, session.ttl()).map_err(|e| tracing::debug!(error = %e, "no dead-man record")).ok()
                });
            Ok((hold, record))
        })
        .transpose()
}

#[cfg(not(feature = "cluster"))]
pub(super) fn hold_dead_man(_: &Host, _: Option<&Session>) -> Result<Option<DeadMan>, Error> {
    Ok(None)
}

/// Registers the started command `child` under `session` before a record names it, so
/// that other machines — containers sharing this boot id too — judge it by this process's
/// presence.
#[cfg(feature = "cluster")]
pub(super) fn register_child(session: Option<&Session>, child: &proclease_core::records::Owner) -> Option<Error> {
    session?.register(child).err().map(Error::from)
}

#[cfg(not(feature = "cluster"))]
pub(super) fn register_child(_: Option<&Session>, _: &proclease_core::records::Owner) -> Option<Error> {
    None
}

/// Cluster mode, `run --exclusive --wait`: a watch of the export admission's record and of its
/// holders' presence keys, opened before an attempt and kept for the whole wait, so that a
/// release, a new holder, or a holder's presence revoked or expired after the attempt wakes the
/// waiter at once (a watch opened after the attempt, from the revision it read, can be served
/// up to 100 ms late: `EtcdStore::watch_from_now`).
#[cfg(feature = "cluster")]
pub(super) struct TurnWatch<'h> {
    store: &'h crate::state_store::etcd::EtcdStore,
    identity: &'h crate::process_identity::ProcessIdentity,
    watch: Option<crate::state_store::etcd::EtcdWatch<'h>>,
    /// The presence keys watched so far.
    presences: Vec<String>,
}

#[cfg(feature = "cluster")]
impl<'h> TurnWatch<'h> {
    /// Opens the watch of the admission's record; `None` without cluster mode. A watch etcd
    /// refuses is opened again before the next wait.
    pub(super) fn open(host: &'h Host) -> Option<TurnWatch<'h>> {
        let store = host.cluster()?.store();
        let mut turn = TurnWatch { store, identity: host.process_identity(), watch: None, presences: Vec::new() };
        turn.reopen();
        Some(turn)
    }

    fn reopen(&mut self) {
        let keys: Vec<String> = std::iter::once(self.store.key_of(proclease_core::admission::CLAIM_PATH)).chain(self.presences.iter().cloned()).collect();
        self.watch = match self.store.watch_from_now(&keys, false, self.store.timeouts().command) {
            Ok(watch) => Some(watch),
            Err(error) => {
                tracing::debug!(%error, "cannot watch the export admission; pausing instead");
                None
            }
        };
    }

    /// After a refused attempt: waits until the admission's record or the presence of one of
    /// `holders` (the claim's owner and helper) changes, or one of them that runs on this
    /// machine exits (a pidfd) — or for at most 1 s, so that what neither shows (an epoch's
    /// grace ending, a holder of this machine in another PID namespace) is tried again as soon as
    /// a poll would, and a signal to stop is heeded within a second —, bounded by `left`. `false` when there is no watch (the
    /// caller pauses instead).
    pub(super) fn await_turn(&mut self, holders: &[&proclease_core::records::Owner], left: std::time::Duration) -> bool {
        for owner in holders {
            let key = crate::cluster::presence::presence_key(self.store, owner);
            if !self.presences.contains(&key) {
                let added = self.watch.as_mut().map(|watch| watch.add(&key, self.store.timeouts().command));
                self.presences.push(key);
                if let Some(Err(error)) = added {
                    tracing::debug!(%error, "cannot watch the holder's presence");
                    self.watch = None;
                }
            }
        }
        if self.watch.is_none() {
            self.reopen();
        }
        let Some(watch) = self.watch.as_mut() else { return false };
        // A holder of this machine: its exit wakes the wait at once (its presence would stay for
        // the TTL; this machine's /proc proves it gone sooner).
        let boot_id = self.identity.current_boot_id().ok();
        let exits: Vec<_> = holders.iter().filter_map(|owner| crate::cluster::queue::local_pidfd(self.identity, boot_id.as_deref(), owner)).collect();
        let exits: Vec<_> = exits.iter().map(std::os::fd::AsFd::as_fd).collect();
        match watch.wait(left.min(std::time::Duration::from_secs(1)), &exits) {
            Ok(changed) => {
                tracing::debug!(changed, "the export admission's watch ended");
                true
            }
            Err(error) => {
                tracing::debug!(%error, "cannot watch the export admission; pausing instead");
                self.watch = None;
                false
            }
        }
    }
}

/// Without cluster mode there is nothing to watch.
#[cfg(not(feature = "cluster"))]
pub(super) struct TurnWatch<'h>(std::marker::PhantomData<&'h ()>);

#[cfg(not(feature = "cluster"))]
impl<'h> TurnWatch<'h> {
    pub(super) fn open(_: &'h Host) -> Option<TurnWatch<'h>> {
        None
    }

    pub(super) fn await_turn(&mut self, _: &[&proclease_core::records::Owner], _: std::time::Duration) -> bool {
        false
    }
}

/// Waits for the command of `tree`. Bound to a session, it also watches the session: once
/// it is no longer live (no renewal acknowledged for three quarters of the TTL), the command
/// gets SIGTERM, then the whole tree SIGKILL after an eighth of the TTL, all before etcd can
/// expire the presence — and the error saying so comes back with the status.
#[cfg(feature = "cluster")]
pub(super) fn wait(host: &Host, session: Option<&Session>, tree: &mut Tree) -> std::io::Result<(ExitStatus, Option<Error>)> {
    use crate::cluster::self_fencing::Standing;
    use std::time::{Duration, Instant};
    let (Some(session), Some(cluster)) = (session, host.cluster()) else { return tree.wait().map(|status| (status, None)) };
    // Silent past the TTL (this process was stopped or the machine suspended), or etcd said the
    // lease or its state is gone: another machine may already run; no grace, before or during
    // the lapse's.
    let end_now = |tree: &mut Tree, standing: Standing| -> std::io::Result<Option<(ExitStatus, Option<Error>)>> {
        let error: Error = match standing {
            Standing::Live | Standing::Lapsing { .. } => return Ok(None),
            Standing::Lost => {
                tracing::warn!(pid = tree.id(), "the cluster presence is lost: killing the command");
                cluster.state_lost(session.lost().unwrap_or_else(|| "etcd no longer has its lease".into())).into()
            }
            Standing::Overran => {
                tracing::warn!(pid = tree.id(), "the cluster presence overran its TTL: killing the command");
                cluster.session_overran(session.silence()).into()
            }
        };
        tree.kill();
        Ok(Some((tree.wait()?, Some(error))))
    };
    let grace = loop {
        if let Some(status) = tree.wait_command(Some(Duration::from_millis(50)))? {
            return Ok((status, None));
        }
        match session.standing() {
            Standing::Live => continue,
            Standing::Lapsing { grace } => break grace,
            other => {
                if let Some(ended) = end_now(tree, other)? {
                    return Ok(ended);
                }
            }
        }
    };
    tracing::warn!(pid = tree.id(), "the cluster presence lapsed: stopping the command");
    tree.signal_command(rustix::process::Signal::TERM);
    let grace = Instant::now() + grace;
    while Instant::now() < grace {
        if let Some(status) = tree.wait_command(Some(Duration::from_millis(20)))? {
            // Nothing of the tree may run on: what the command left is killed at once.
            tree.kill();
            return Ok((status, Some(cluster.session_lost("it exited on SIGTERM").into())));
        }
        if let Some(ended) = end_now(tree, session.standing())? {
            return Ok(ended);
        }
    }
    tree.kill();
    let status = tree.wait()?;
    Ok((status, Some(cluster.session_lost("it was killed with SIGKILL").into())))
}

#[cfg(not(feature = "cluster"))]
pub(super) fn wait(_: &Host, _: Option<&Session>, tree: &mut Tree) -> std::io::Result<(ExitStatus, Option<Error>)> {
    tree.wait().map(|status| (status, None))
}

/// [`Tree::finish`]; bound to a session, what the command left running is killed at once
/// when the session lapses (and the error saying so comes back with the count).
#[cfg(feature = "cluster")]
pub(super) fn finish(host: &Host, session: Option<&Session>, tree: &mut Tree, policy: super::Stragglers) -> (std::io::Result<usize>, Option<Error>) {
    let (Some(session), Some(cluster)) = (session, host.cluster()) else { return (tree.finish(policy, &|| false), None) };
    let finished = tree.finish(policy, &|| !session.is_live());
    let lost = (!session.is_live()).then(|| cluster.session_lost("what the command left running was killed with SIGKILL").into());
    (finished, lost)
}

/// Whether the session of `host` lapsed by now (after the command ended), with the error
/// saying so: a stage is not published then.
#[cfg(feature = "cluster")]
pub(super) fn lapsed(host: &Host, session: Option<&Session>) -> Option<Error> {
    let (session, cluster) = (session?, host.cluster()?);
    (!session.is_live()).then(|| cluster.session_lost("after the command ended, before its stage was published: nothing was published").into())
}

#[cfg(not(feature = "cluster"))]
pub(super) fn lapsed(_: &Host, _: Option<&Session>) -> Option<Error> {
    None
}

#[cfg(not(feature = "cluster"))]
pub(super) fn finish(_: &Host, _: Option<&Session>, tree: &mut Tree, policy: super::Stragglers) -> (std::io::Result<usize>, Option<Error>) {
    (tree.finish(policy, &|| false), None)
}
