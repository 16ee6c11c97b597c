//! Leasing a directory the lease itself creates (proclease's extension; the reference leases
//! only existing directories): the intent is recorded before `mkdir`, so that a crash between
//! creating the directory and leasing it leaves nothing a later recovery cannot clean up
//! (`docs/deviations.md`).
//!
//! 1. `recovery/proclease-directory-creations/<id>.json` records the owner and the directory
//!    ([`CreationIntent`]);
//! 2. the directory and its missing ancestors are created (0700), and the intent is updated with
//!    what was created and its identities;
//! 3. the lease is created (§6A.6);
//! 4. the intent is removed.
//!
//! [`recover_creations`] finishes the intents of provably dead owners: it removes each
//! directory they created that is still empty, still the same directory, and claimed by no
//! lease (innermost first), then the intent. It never removes a directory with anything in it.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use super::{DIRECTORY, Effects, Handle, MAX_CLAIM_BYTES, MAX_CLAIMS, MightClaim, Request, check_request, create_lease};
use crate::effects::{BatchStatus, EntryKind, Processes, Store, Workspace, uuid_v4};
use crate::liveness::{self, OwnerStatus, Spawned};
use crate::records::creation_intent::{self, CreationIntent};
use crate::records::{DirectoryIdentity, directory_lease};
use crate::{Error, Failure, FailureKind, digest, js};

/// The collection of creation intents.
pub const INTENTS: &str = "recovery/proclease-directory-creations";
/// The largest intent file read.
const MAX_INTENT_BYTES: u32 = 65_536;
/// The most intents one recovery looks at.
const MAX_INTENTS: usize = 1_000;

fn storage(context: &str, error: impl Into<Error>) -> Error {
    match error.into() {
        Error::Storage(failure) | Error::System(failure) => Error::Storage(failure.in_context(context)),
        other => Error::Storage(Failure::new(FailureKind::Refusal, format!("{context}: {}", other.message()))),
    }
}

/// Creates `request.path` (mode 0700, with its missing ancestors, under the granted roots) and
/// leases it (§6A.6 create), recording the intent first. An existing directory is leased as
/// [`create`] leases it. If the lease cannot be created, what was created is removed again.
///
/// Errors: those of [`check_request`] and [`create`]; a storage error naming the intent or the
/// directory when either cannot be written.
pub fn create_with_directory(request: &Request, mut fx: Effects<'_>) -> Result<Handle, Error> {
    check_request(request, fx.clock)?;
    super::check_room(fx.store)?;
    let owner = fx.processes.self_identity().map_err(Error::unavailable)?;
    let id = uuid_v4(fx.entropy);
    // The directories to create, known before `mkdir`: a crash right after it must still find
    // them in the intent (their identities follow once they exist).
    let planned = missing_directories(&request.path, fx.workspace)?;
    let intent = CreationIntent { id: id.clone(), owner, path: request.path.clone(), created: planned.iter().map(|p| (p.clone(), None)).collect() }.parsed();
    let record = format!("{INTENTS}/{id}.json");
    fx.store.ensure_private_directory(INTENTS).map_err(|e| storage(INTENTS, e))?;
    if !fx.store.create_if_absent(&record, &intent.canonical).map_err(|e| storage(&record, e))? {
        return Err(Error::Storage(Failure::contended(format!("{record}: a creation intent with this id exists already; retry"))));
    }
    let mut sha = intent.sha256;
    let created = match fx.workspace.create_private_directory(&request.path) {
        Ok(created) => created,
        Err(error) => {
            let _ = fx.store.remove_if_unchanged(&record, &sha);
            return Err(error.into());
        }
    };
    let mut made = Vec::with_capacity(created.len());
    for path in &created {
        let identity = fx.workspace.inspect(path).ok().flatten().map(|facts| facts.identity);
        made.push((path.clone(), identity));
    }
    let intended: Vec<(String, Option<DirectoryIdentity>)> = planned.iter().map(|p| (p.clone(), None)).collect();
    // What was made is removed again; the intent goes only once none of it is left, so that a
    // directory the undo could not remove (something was put in it, `rmdir` failed) stays in
    // the intent, for `recover` to finish once this process has exited (keeping it if it is not
    // empty), and for a signal's message to name (`docs/deviations.md` 11, 21).
    let undo = |store: &mut dyn Store, workspace: &mut dyn Workspace, made: &[(String, Option<DirectoryIdentity>)], sha: &str| {
        let mut left = false;
        for (path, identity) in made.iter().rev() {
            if !matches!(workspace.remove_empty_directory(path, identity.as_ref()), Ok(true)) {
                left |= still_made(workspace, path, identity.as_ref());
            }
        }
        if !left {
            let _ = store.remove_if_unchanged(&record, sha);
        }
    };
    if made != intended {
        let updated = CreationIntent { created: made.clone(), ..intent.record.clone() }.parsed();
        match fx.store.replace_if_unchanged(&record, &sha, &updated.canonical) {
            Ok(true) => sha = updated.sha256,
            Ok(false) => {
                undo(fx.store, fx.workspace, &made, &sha);
                return Err(Error::Storage(Failure::contended(format!("{record}: changed while the directory was created; retry"))));
            }
            Err(error) => {
                undo(fx.store, fx.workspace, &made, &sha);
                return Err(storage(&record, error));
            }
        }
    }
    match create_lease(request, fx.reborrow()) {
        Ok(handle) => {
            // The lease claims the directory now: the intent has nothing left to prove. Should
            // this removal fail, recovery finds the intent and leaves the leased directory.
            let _ = fx.store.remove_if_unchanged(&record, &sha);
            let _ = adopt(&handle.claim, Some(&intent.record.file_name()), fx.store, fx.processes);
            Ok(handle)
        }
        Err(error) => {
            undo(fx.store, fx.workspace, &made, &sha);
            Err(error)
        }
    }
}

/// Whether the directory this creation made at `path` (`identity`, when known) may still be there
/// after an undo did not remove it: anything at `path` that is not provably another directory
/// (or nothing), including a path that cannot be inspected.
fn still_made(workspace: &mut dyn Workspace, path: &str, identity: Option<&DirectoryIdentity>) -> bool {
    match workspace.inspect(path) {
        Ok(None) => false,
        Ok(Some(facts)) => identity.is_none_or(|made| *made == facts.identity),
        Err(_) => true,
    }
}

/// Takes what `lease` now holds out of the creation intents of provably dead creators (all but
/// the intent file `own`, the caller's): an entry of `created` inside the leased directory, or
/// inside a stage's output root, is dropped, and so is one at either path whose identity is
/// unknown or the leased directory's (a stage keeps its identity when it is published to its
/// output). An intent left with nothing created is removed. Each change is a compare-and-swap
/// against the text judged; one another process changed first is read and judged again (at most
/// [`ADOPT_ATTEMPTS`] times). Returns how many intents were changed.
///
/// Why: a creator that died between `mkdir` and its lease leaves an intent naming what it made;
/// a later lease of that (empty) directory, or of one around it, is released with the directory
/// kept as its result, and the intent's recovery would then remove an empty directory of that
/// result as half-made. Once a lease has held it, it is that lease's, and its fate is the
/// lease's recovery's (`docs/deviations.md` 27). A live creator's intent, or one whose creator
/// cannot be proven gone, is left alone: that creator is still between `mkdir` and its own
/// lease, or its undo.
///
/// Errors: a store failure listing or reading the intents.
pub(super) fn adopt(lease: &crate::records::directory_lease::DirectoryLease, own: Option<&str>, store: &mut dyn Store, processes: &mut dyn Processes) -> Result<usize, Error> {
    if crate::mutations::active(crate::mutations::Mutation::LeaseLeavesDeadCreatorsIntent) {
        return Ok(0);
    }
    let held: Vec<&str> = core::iter::once(lease.path.as_str()).chain(lease.output_root.as_deref()).collect();
    let adopts = |(path, identity): &(String, Option<DirectoryIdentity>)| {
        held.iter().any(|root| super::is_inside(path, root) || (path == root && identity.as_ref().is_none_or(|i| *i == lease.directory_identity)))
    };
    let mut changed = 0;
    for (name, status) in read_intents(store, false, own)? {
        let record = format!("{INTENTS}/{name}");
        let mut read = status;
        for _ in 0..ADOPT_ATTEMPTS {
            let BatchStatus::Present(text) = read else { break };
            let Ok(parsed) = creation_intent::parse_file(&text, &name) else { break };
            let intent = parsed.record;
            if intent.owner == lease.owner || !intent.created.iter().any(adopts) {
                break;
            }
            let Ok(creator) = liveness::probe(processes, &intent.owner) else { break };
            if creator.status != OwnerStatus::DifferentOrDead || creator.spawned == Spawned::SomeAlive {
                break;
            }
            let sha = digest::sha256_hex(text.as_bytes());
            let left: Vec<(String, Option<DirectoryIdentity>)> = intent.created.iter().filter(|entry| !adopts(entry)).cloned().collect();
            let done = if left.is_empty() {
                store.remove_if_unchanged(&record, &sha)?
            } else {
                store.replace_if_unchanged(&record, &sha, &CreationIntent { created: left, ..intent }.parsed().canonical)?
            };
            if done {
                changed += 1;
                break;
            }
            // Changed since it was read (another lease adopting from it, or its recovery): as it
            // is now.
            read = match store.read_if_present(&record, MAX_INTENT_BYTES)? {
                Some(text) => BatchStatus::Present(text),
                None => BatchStatus::Absent,
            };
        }
    }
    Ok(changed)
}

/// How many times [`adopt`] judges one intent that others keep changing.
const ADOPT_ATTEMPTS: usize = 4;

/// The directories of `path` and its ancestors that do not exist, outermost first (stopping at
/// the first that exists, or that the workspace will not look at).
fn missing_directories(path: &str, workspace: &mut dyn Workspace) -> Result<Vec<String>, Error> {
    let mut missing = Vec::new();
    let mut current = path;
    while current.len() > 1 {
        match workspace.inspect(current) {
            Ok(None) => missing.push(String::from(current)),
            Ok(Some(_)) => break,
            Err(error) if missing.is_empty() => return Err(error.into()),
            Err(_) => break,
        }
        current = directory_lease::dirname(current);
    }
    missing.reverse();
    Ok(missing)
}

/// What recovery does (or would do) with one creation intent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreationAction {
    /// Its owner (or a process it started) is alive, or nothing proves it gone: left alone.
    Keep,
    /// Its owner is gone: these directories (empty, unleased) were removed, then the intent.
    Finish(Vec<String>),
    /// Not a valid intent: left in place and reported.
    Skip(String),
}

/// One intent's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreationOutcome {
    /// The intent's file name.
    pub name: String,
    /// The directory it was creating, when the intent is valid.
    pub path: Option<String>,
    /// What was (or would be) done.
    pub action: CreationAction,
    /// Why, in words.
    pub reason: String,
    /// Whether it was carried out (never in a dry run).
    pub done: bool,
}

/// Finishes the creation intents of provably dead owners (see the module docs); with
/// `dry_run`, only says what it would do.
///
/// Errors: a store failure listing or reading the intents or the lease collection.
pub fn recover_creations(store: &mut dyn Store, processes: &mut dyn Processes, workspace: &mut dyn Workspace, dry_run: bool) -> Result<Vec<CreationOutcome>, Error> {
    let intents = read_intents(store, !dry_run, None)?;
    if intents.is_empty() {
        return Ok(Vec::new());
    }
    let claims = if dry_run { collection_claims(store)? } else { Vec::new() };
    let mut outcomes = Vec::new();
    for (name, status) in intents {
        let text = match status {
            BatchStatus::Present(text) => text,
            BatchStatus::Absent => continue,
            BatchStatus::Invalid(_) => {
                let skip = CreationAction::Skip(String::from("the intent file is not a readable private file"));
                outcomes.push(CreationOutcome { name, path: None, action: skip, reason: String::from("inspect it by hand"), done: false });
                continue;
            }
        };
        let intent = match creation_intent::parse_file(&text, &name) {
            Ok(parsed) => parsed.record,
            Err(why) => {
                outcomes.push(CreationOutcome { name, path: None, action: CreationAction::Skip(why), reason: String::from("inspect it by hand"), done: false });
                continue;
            }
        };
        let owner = liveness::probe(processes, &intent.owner).map_err(Error::unavailable)?;
        let reason = liveness::describe("creator", &intent.owner, &owner);
        if owner.status != OwnerStatus::DifferentOrDead || owner.spawned == Spawned::SomeAlive {
            outcomes.push(CreationOutcome { name, path: Some(intent.path), action: CreationAction::Keep, reason, done: false });
            continue;
        }
        let mut removed = Vec::new();
        if dry_run {
            for (path, identity) in intent.created.iter().rev() {
                if !claimed(&claims, path)
                    && workspace.inspect(path)?.is_some_and(|facts| facts.is_directory && identity.as_ref().is_none_or(|i| *i == facts.identity))
                    && would_be_empty(workspace, path, &removed)
                {
                    removed.push(path.clone());
                }
            }
        } else {
            // Under the lock new leases take, with the leases as they are now: an empty
            // directory leased since this recovery began is not removed (docs/deviations.md 24).
            if let Err(failure) = store.lock_leasing() {
                let skip = CreationAction::Skip(format!("the lease-creation lock could not be taken: {}", failure.message));
                outcomes.push(CreationOutcome { name, path: Some(intent.path), action: skip, reason, done: false });
                continue;
            }
            // The intent was read before its owner was probed: a creator that leased what it
            // made, removed its intent, released the lease (the directory stays, its result)
            // and exited in between looks dead with a stale intent in hand. So the intent must
            // still be there, unchanged, after the probe (only its owner changes it, and that
            // owner is gone) before anything is removed.
            let sha = digest::sha256_hex(text.as_bytes());
            let record = format!("{INTENTS}/{name}");
            let stale = match store.read_if_present(&record, MAX_INTENT_BYTES) {
                _ if crate::mutations::active(crate::mutations::Mutation::CreationRecoveryTrustsStaleIntent) => None,
                Ok(Some(now)) if digest::sha256_hex(now.as_bytes()) == sha => None,
                Ok(None) => Some(None),
                Ok(Some(_)) => Some(Some(CreationAction::Keep)),
                Err(failure) => Some(Some(CreationAction::Skip(format!("the intent could not be read again: {}", failure.message)))),
            };
            if let Some(action) = stale {
                store.unlock_leasing();
                // Gone: its creator finished it. Changed: a later recovery looks again.
                if let Some(action) = action {
                    outcomes.push(CreationOutcome {
                        name,
                        path: Some(intent.path),
                        action,
                        reason: format!("{reason}; but its intent changed while it was looked at"),
                        done: false,
                    });
                }
                continue;
            }
            let finished = finish_intent(store, workspace, &intent.created, &mut removed).and_then(|()| store.remove_if_unchanged(&record, &sha).map_err(Error::from));
            store.unlock_leasing();
            finished?;
        }
        outcomes.push(CreationOutcome { name, path: Some(intent.path), action: CreationAction::Finish(removed), reason, done: !dry_run });
    }
    Ok(outcomes)
}

/// Whether [`finish_intent`] would find the directory `path` empty, for a dry run: empty now, or
/// holding a directory `removed` (innermost first) says it would remove first. In the second case
/// a dry run cannot tell whether something else is in it too (the workspace import only answers
/// "empty or not"), and counts it as the real run would find it if nothing were. A directory whose
/// entries cannot be read is not counted. A directory with anything in it and no such directory
/// inside is never counted: until 2026-12-07 a dry run said it "would remove" a non-empty
/// directory, or a file put where a creation's directory was, which the real run keeps.
fn would_be_empty(workspace: &mut dyn Workspace, path: &str, removed: &[String]) -> bool {
    let holds_removed = removed.iter().any(|inner| inner.strip_prefix(path).and_then(|rest| rest.strip_prefix('/')).is_some_and(|name| !name.is_empty() && !name.contains('/')));
    holds_removed || workspace.is_empty_directory(path).unwrap_or(false)
}

/// Removes, innermost first, each directory of `created` that is still empty, still the same
/// directory and claimed by no lease of the collection as it is now; what was removed is added
/// to `removed`.
fn finish_intent(store: &mut dyn Store, workspace: &mut dyn Workspace, created: &[(String, Option<DirectoryIdentity>)], removed: &mut Vec<String>) -> Result<(), Error> {
    let claims = collection_claims(store)?;
    for (path, identity) in created.iter().rev() {
        if !claimed(&claims, path) && workspace.remove_empty_directory(path, identity.as_ref())? {
            removed.push(path.clone());
        }
    }
    Ok(())
}

/// The valid creation intents of the collection: `(file name, directory being created, its
/// creator)`. Recovery does not remove a directory in which one is in flight
/// (`recovery.rs`, `held_elsewhere`). Unreadable intents are left out: an intent only ever
/// creates empty directories, and its creator leases what it made before using it.
///
/// Errors: a store failure listing or reading the intents.
pub(super) fn intents_in_flight(store: &mut dyn Store) -> Result<Vec<(String, String, crate::records::Owner)>, Error> {
    let mut intents = Vec::new();
    for (name, status) in read_intents(store, false, None)? {
        if let BatchStatus::Present(text) = status
            && let Ok(parsed) = creation_intent::parse_file(&text, &name)
        {
            intents.push((name, parsed.record.path, parsed.record.owner));
        }
    }
    Ok(intents)
}

/// The files of the intent collection (at most [`MAX_INTENTS`] `<uuid>.json` entries) and
/// what reading each gave; empty when there is no collection. `recover_orphans`: the listing
/// removes what provably dead writers left (§3.9). `except`: a file name left out (the caller's
/// own intent).
fn read_intents(store: &mut dyn Store, recover_orphans: bool, except: Option<&str>) -> Result<Vec<(String, BatchStatus)>, Error> {
    let Some(snapshot) = store.snapshot(INTENTS, recover_orphans)? else { return Ok(Vec::new()) };
    let names: Vec<String> = snapshot
        .entries
        .iter()
        .filter(|e| e.kind == EntryKind::File && Some(e.name.as_str()) != except && e.name.strip_suffix(".json").is_some_and(js::is_uuid_v4))
        .take(MAX_INTENTS)
        .map(|e| e.name.clone())
        .collect();
    if names.is_empty() {
        return Ok(Vec::new());
    }
    let total = MAX_INTENT_BYTES.saturating_mul(names.len() as u32);
    Ok(store.read_batch(INTENTS, &names, MAX_INTENT_BYTES, total, &snapshot.identity)?)
}

/// What every entry of the lease collection claims, all of it (past the bound too): a valid
/// lease its path; an entry that is not one what it may claim ([`MightClaim`]: the path its
/// text names, or anything when it cannot be read or is not a regular file).
fn collection_claims(store: &mut dyn Store) -> Result<Vec<MightClaim>, Error> {
    let Some(snapshot) = store.snapshot(DIRECTORY, false)? else { return Ok(Vec::new()) };
    let leaseish = |name: &str| name.strip_suffix(".json").is_some_and(js::is_uuid_v4);
    let mut claims: Vec<MightClaim> = snapshot.entries.iter().filter(|e| e.kind != EntryKind::File && leaseish(&e.name)).map(|_| MightClaim::Anything).collect();
    let names: Vec<String> = snapshot.entries.iter().filter(|e| e.kind == EntryKind::File && leaseish(&e.name)).map(|e| e.name.clone()).collect();
    for batch in names.chunks(MAX_CLAIMS) {
        let total = MAX_CLAIM_BYTES.saturating_mul(batch.len() as u32);
        for (name, status) in store.read_batch(DIRECTORY, batch, MAX_CLAIM_BYTES, total, &snapshot.identity)? {
            let claim = match status {
                BatchStatus::Present(text) => match directory_lease::parse_file(&text, &name) {
                    Ok(parsed) => {
                        // A stage's run publishes it to its output root: that is the lease's too.
                        if let Some(output) = parsed.record.output_root.clone() {
                            claims.push(MightClaim::Path(output));
                        }
                        MightClaim::Path(parsed.record.path)
                    }
                    Err(_) => MightClaim::of_text(&text),
                },
                BatchStatus::Absent => MightClaim::Nothing,
                BatchStatus::Invalid(_) => MightClaim::Anything,
            };
            claims.push(claim);
        }
    }
    Ok(claims)
}

/// Whether an entry of `claims` claims the directory `path`, or one it is inside (what is in a
/// leased directory is that lease's: its run may have made it), or may (an entry that may claim
/// anything). A lease inside `path` makes it non-empty, which `rmdir` refuses anyway.
fn claimed(claims: &[MightClaim], path: &str) -> bool {
    claims.iter().any(|claim| match claim {
        MightClaim::Path(named) => named == path || super::is_inside(path, named),
        MightClaim::Anything => true,
        MightClaim::Nothing => false,
    })
}
