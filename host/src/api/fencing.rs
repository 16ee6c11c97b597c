//! Fencing tokens on the file store (issue #28; `docs/cluster.md`, "Fencing tokens"): what an
//! exclusive run's command gets as `PROCLEASE_FENCING_TOKEN` when the admission lives in the
//! state home, and whether a token is still current. The counter itself is
//! [`crate::state_store::fencing`]; cluster mode's tokens are etcd revisions
//! ([`crate::api::cluster::check_fence`]).

use crate::Error;
use crate::admission::Admission;
use crate::api::cluster::Fence;
use crate::records::InputMode;
use crate::runtime::Runtime;
use crate::state_store::StateStore;
use crate::state_store::fencing::FileFence;

/// The address form `PROCLEASE_FENCING_STORE` takes on the file store: `file:` and the state
/// home's absolute path, so that `proclease fence check` in the command reads the same state
/// home whatever the command's own `PROCLEASE_STATE_HOME`.
pub const FILE_PREFIX: &str = "file:";

/// Hands the holder of `admission` (just acquired, its command not started yet) the next token
/// of `store`'s state home.
///
/// Errors: [`Error::System`] naming the counter file when it cannot be read or written; the run
/// must not start then.
pub fn issue_file_token(store: &StateStore, admission: &mut Admission) -> Result<i64, Error> {
    let claim = admission.claim()?;
    FileFence::open(store.home()).and_then(|fence| fence.advance(&claim.id)).map_err(|e| {
        Error::System(format!(
            "cannot hand out a fencing token for the export admission (state home {}): {e}; if the counter is unreadable, \
             set it aside while no exclusive run holds the admission (tokens then start again from 1: tell what compares them)",
            store.home().path().display()
        ))
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
    let unreadable = |e: std::io::Error| Error::System(format!("cannot read the fencing counter of the state home {home}: {e}"));
    let issued = match FileFence::open_existing(store.home()).map_err(unreadable)? {
        Some(fence) => fence.current().map_err(unreadable)?,
        None => None,
    };
    let Some(issued) = issued else {
        return Ok(Fence::Stale(format!("no fencing token was handed out in the state home {home}")));
    };
    if token < 1 || token > issued.token {
        return Ok(Fence::Stale(format!("{token} is no token of this export admission (the last handed out is {})", issued.token)));
    }
    if token < issued.token {
        return Ok(Fence::Stale(format!("another holder acquired the export admission since (token {})", issued.token)));
    }
    let text = store.read_if_present(proclease_core::admission::CLAIM_PATH, proclease_core::admission::MAX_CLAIM_BYTES)?;
    let Some(text) = text else {
        return Ok(Fence::Stale("the export admission was released".into()));
    };
    let claim = runtime.instantiate()?.records().parse_export_admission(&text, InputMode::File)?.record;
    Ok(if claim.id == issued.claim_id {
        Fence::Current { holder_pid: claim.owner.pid }
    } else {
        Fence::Stale(format!("another holder acquired the export admission since (pid {})", claim.owner.pid))
    })
}
