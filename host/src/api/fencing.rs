//! Fencing tokens on the file store (issue #28; `docs/cluster.md`, "Fencing tokens"): what an
//! exclusive run's command gets as `PROCLEASE_FENCING_TOKEN` when the admission lives in the
//! state home, and whether a token is still current. The counter itself is
//! [`crate::state_store::fencing`]; cluster mode's tokens are etcd revisions
//! ([`crate::cluster::check_fence`]).

use crate::Error;
use crate::admission::Admission;
use crate::cluster::Fence;
use crate::records::InputMode;
use crate::runtime::Runtime;
use crate::state_store::StateStore;
use crate::state_store::fencing::{FileFence, Issued};

/// The address form `PROCLEASE_FENCING_STORE` takes on the file store: `file:` and the state
/// home's absolute path, so that `proclease fence check` in the command reads the same state
/// home whatever the command's own `PROCLEASE_STATE_HOME`.
pub const FILE_PREFIX: &str = "file:";

/// The fencing counter's path in `store`'s state home, for a failure's `path`.
fn counter_path(store: &StateStore) -> String {
    store.home().path().join(crate::state_store::fencing::ROOT).join(crate::state_store::fencing::COUNTER).display().to_string()
}

/// Hands the holder of `admission` (just acquired, its command not started yet) the next token
/// of `store`'s state home.
///
/// Errors: [`Error::System`] naming the counter file when it cannot be read or written; the run
/// must not start then.
pub fn issue_file_token(store: &StateStore, admission: &mut Admission) -> Result<i64, Error> {
    let claim = admission.claim()?;
    FileFence::open(store.home()).and_then(|fence| fence.advance(&claim.id)).map_err(|e| {
        let message = format!(
            "cannot hand out a fencing token for the export admission (state home {}): {e}; if the counter is unreadable, \
             set it aside while no exclusive run holds the admission (tokens then start again from 1: tell what compares them)",
            store.home().path().display()
        );
        Error::System(crate::seam::IoError::from(e).failure(&counter_path(store), "handing out a fencing token", message))
    })
}

/// Whether fencing token `token` of `store`'s state home is still its holder's: it is the last
/// token handed out there, and the export admission's claim is still the one it was handed out
/// for (a release, a takeover, or a ghostget holder, which does not count, makes it stale).
/// The admission is read by the component (`runtime`).
///
/// Writes nothing. Errors: the counter or the admission cannot be read, or the admission is a
/// record the reference's readers refuse. Treat any error as "not current".
pub fn check_file_fence(runtime: &Runtime, store: &StateStore, token: i64) -> Result<Fence, Error> {
    let home = store.home().path().display();
    let counter = counter_path(store);
    let unreadable = |e: std::io::Error| {
        let message = format!("cannot read the fencing counter of the state home {home}: {e}");
        Error::System(crate::seam::IoError::from(e).failure(&counter, "reading the fencing counter", message))
    };
    let issued = match FileFence::open_existing(store.home()).map_err(unreadable)? {
        Some(fence) => fence.current().map_err(unreadable)?,
        None => None,
    };
    let issued = match against_counter(token, issued.as_ref(), &home.to_string()) {
        Ok(issued) => issued,
        Err(stale) => return Ok(stale),
    };
    let text = store.read_if_present(proclease_core::admission::CLAIM_PATH, proclease_core::admission::MAX_CLAIM_BYTES)?;
    let holder = match text {
        Some(text) => Some(runtime.instantiate()?.records().parse_export_admission(&text, InputMode::File)?.record),
        None => None,
    };
    Ok(against_claim(issued, holder.as_ref().map(|claim| (claim.id.as_str(), claim.owner.pid))))
}

/// The first half of the file fence's rule, without IO: `token` against the last token handed
/// out in the state home `home` (`issued`). `Err(Fence::Stale)` when that decides it; the last
/// token's record when `token` is it (then the admission's claim decides).
fn against_counter<'a>(token: i64, issued: Option<&'a Issued>, home: &str) -> Result<&'a Issued, Fence> {
    let Some(issued) = issued else { return Err(Fence::Stale(format!("no fencing token was handed out in the state home {home}"))) };
    if token < 1 || token > issued.token {
        return Err(Fence::Stale(format!("{token} is no token of this export admission (the last handed out is {})", issued.token)));
    }
    if token < issued.token {
        return Err(Fence::Stale(format!("another holder acquired the export admission since (token {})", issued.token)));
    }
    Ok(issued)
}

/// The second half, without IO: the last token handed out (`issued`) against the admission's
/// claim now (`holder`: its id and owner pid; `None` when released). Current only while the
/// claim is the one the token was handed out for.
fn against_claim(issued: &Issued, holder: Option<(&str, u64)>) -> Fence {
    match holder {
        None => Fence::Stale("the export admission was released".into()),
        Some((id, pid)) if id == issued.claim_id => Fence::Current { holder_pid: pid },
        Some((_, pid)) => Fence::Stale(format!("another holder acquired the export admission since (pid {pid})")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn issued(token: i64) -> Issued {
        Issued { token, claim_id: "11111111-1111-4111-9111-111111111111".into() }
    }

    #[test]
    fn only_the_last_token_handed_out_goes_on_to_the_claim() {
        let stale = |fence: Result<&Issued, Fence>| match fence {
            Err(Fence::Stale(why)) => why,
            other => panic!("{other:?}"),
        };
        assert_eq!(stale(against_counter(1, None, "/s")), "no fencing token was handed out in the state home /s");
        assert_eq!(stale(against_counter(0, Some(&issued(3)), "/s")), "0 is no token of this export admission (the last handed out is 3)");
        assert_eq!(stale(against_counter(4, Some(&issued(3)), "/s")), "4 is no token of this export admission (the last handed out is 3)");
        assert_eq!(stale(against_counter(2, Some(&issued(3)), "/s")), "another holder acquired the export admission since (token 3)");
        assert_eq!(against_counter(3, Some(&issued(3)), "/s").map(|i| i.token), Ok(3), "the last token: the claim decides");
    }

    #[test]
    fn the_last_token_is_current_only_while_its_claim_is_held() {
        assert!(matches!(against_claim(&issued(3), Some(("11111111-1111-4111-9111-111111111111", 42))), Fence::Current { holder_pid: 42 }));
        assert!(matches!(against_claim(&issued(3), None), Fence::Stale(why) if why == "the export admission was released"));
        assert!(
            matches!(against_claim(&issued(3), Some(("22222222-2222-4222-9222-222222222222", 9))), Fence::Stale(why) if why == "another holder acquired the export admission since (pid 9)")
        );
    }
}
