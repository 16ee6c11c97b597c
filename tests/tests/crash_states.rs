//! Crash-state enumeration and I/O-fault injection over every short history of lease
//! operations (issue #9, items 1–2), on the simulated disk (`proclease_tests::sim_disk`), under
//! the production store's and workspace's protocols (`guest/protocols/src/state_store/protocol.rs`,
//! `guest/protocols/src/workspace/protocol.rs`) over the disk's `SimFs`.
//!
//! For every sequence of up to three operations of the actor (11 operations across the three
//! lease kinds, recovery included: 1,463 sequences):
//! * **crashes** — after every step k (0 ≤ k ≤ all steps), as a process crash and as a power
//!   loss: every record is absent, old-complete or new-complete (the state before or after the
//!   operation in flight, from the same run without a crash); then, with the actor dead (and its
//!   command and plugin host either dead too or still running), recovery by another process
//!   succeeds, deletes no directory of a live owner or live child and no unleased directory,
//!   leaves no temporary or quarantine, removes every recoverable lease of the actor, and a
//!   second recovery changes nothing;
//! * **I/O errors** — ENOSPC, EIO, EXDEV and EACCES injected at every step of the last
//!   operation: it fails with an error (or succeeds when the fault hit only a best-effort
//!   clean-up), leaves every record old- or new-complete, and a retry after the fault clears
//!   succeeds and leaves the same shape of state as a run without the fault; recovery after the
//!   actor's death then leaves no temporary or quarantine.
//!
//! * **the end of a finished run** — the run journal (`run_journal.rs`, the production code on
//!   the same disk: begun before launch, overwritten in place when the command ends, forgotten
//!   after the release): recovery never deletes the directory of a run the journal says finished, in any
//!   crash state above; and every fault or crash at its release, with no retry, leaves the
//!   directory and its output and takes the claim (issue #27, deviation 19).
//!
//! The totals are printed (run with `--nocapture` to see them).

use std::collections::{BTreeMap, BTreeSet};

use proclease::core::directory_leases;
use proclease::core::records::directory_lease;
use proclease_tests::crash_world::{ACTOR, ACTOR_CHILD, ACTOR_HOST, LIVE, LIVE_CHILD, OLD, Op, RECOVERER, RECOVERY_DELAY_MS, Session, World, creation_intents, directory_claims};
use proclease_tests::sim_disk::{CrashKind, Errno, Listing, Plan, parse_journal};

fn sequences(max_len: usize) -> Vec<Vec<Op>> {
    let mut all: Vec<Vec<Op>> = vec![vec![]];
    let mut frontier: Vec<Vec<Op>> = vec![vec![]];
    for _ in 0..max_len {
        let mut next = Vec::new();
        for prefix in &frontier {
            for op in Op::ALL {
                let mut seq = prefix.clone();
                seq.push(op);
                next.push(seq);
            }
        }
        all.extend(next.iter().cloned());
        frontier = next;
    }
    all.retain(|s| !s.is_empty());
    all
}

/// A run without faults: the listing before each operation and after the last, and the step
/// count at the end of each operation.
struct Reference {
    listings: Vec<Listing>,
    /// The complete contents each operation published (including intermediate versions of a
    /// record it writes more than once).
    published: Vec<BTreeSet<Vec<u8>>>,
    /// The record paths each operation removed at some point (and perhaps wrote again).
    unlinked: Vec<BTreeSet<String>>,
    step_ends: Vec<u64>,
    outcomes: Vec<Result<(), String>>,
}

fn reference(base: &World, ops: &[Op]) -> Reference {
    let mut world = base.fork();
    world.disk.act_as(ACTOR);
    world.disk.plan(Plan::default());
    let mut session = Session::default();
    let mut listings = vec![world.disk.listing()];
    let mut step_ends = Vec::new();
    let mut outcomes = Vec::new();
    let mut published = Vec::new();
    let mut unlinked = Vec::new();
    for op in ops {
        let (already, already_unlinked) = {
            let s = world.disk.state();
            (s.published.len(), s.unlinked.len())
        };
        outcomes.push(world.run(&mut session, ACTOR, *op));
        let state = world.disk.state();
        published.push(state.published[already..].iter().cloned().collect());
        unlinked.push(state.unlinked[already_unlinked..].iter().cloned().collect());
        drop(state);
        step_ends.push(world.disk.steps());
        listings.push(world.disk.listing());
    }
    Reference { listings, published, unlinked, step_ends, outcomes }
}

/// Every record path of `now` (and of either side) holds the bytes it held `before` or `after`
/// the operation, or a complete version the operation published on the way (`during`: an
/// operation that writes a record twice, or creates one it then removes); it may be absent only
/// where it was absent before or after, or where the operation removed it on the way
/// (`unlinked`: a takeover removes the old claim before it creates its own). A replace is a
/// rename: the record is never missing part-way through it.
///
/// After a power loss, a record the store replaced lazily (a directory lease's phase update,
/// `docs/durability.md`) may also hold any complete version it had before (`earlier`).
fn old_or_new(
    now: &Listing,
    before: &Listing,
    after: &Listing,
    during: &BTreeSet<Vec<u8>>,
    unlinked: &BTreeSet<String>,
    earlier: &BTreeMap<String, BTreeSet<Vec<u8>>>,
) -> Result<(), String> {
    let (now, before, after) = (now.records(), before.records(), after.records());
    let paths: BTreeSet<&str> = now.keys().chain(before.keys()).chain(after.keys()).copied().collect();
    for path in paths {
        let value = now.get(path);
        let may_be_absent = !before.contains_key(path) || !after.contains_key(path) || unlinked.contains(path);
        let allowed = match value {
            None => may_be_absent,
            Some(v) => during.contains(*v) || Some(v) == before.get(path) || Some(v) == after.get(path) || reverted(earlier, path, v),
        };
        if !allowed {
            return Err(format!(
                "{path} is neither old nor new nor (where allowed) absent: {:?} (old {:?}, new {:?})",
                value.map(|v| String::from_utf8_lossy(v).into_owned()),
                before.get(path).map(|v| String::from_utf8_lossy(v).into_owned()),
                after.get(path).map(|v| String::from_utf8_lossy(v).into_owned()),
            ));
        }
    }
    Ok(())
}

/// Whether the store replaces the record at `path` lazily (no collection fsync): a directory
/// lease, whose phase updates a power loss may undo (`directory_leases::update`).
fn lazily_replaced(path: &str) -> bool {
    path.contains(&format!("/{}/", directory_leases::DIRECTORY))
}

/// Every complete version of each lazily replaced record (path → versions) that the reference
/// run had written before the crash: those in the listings before operations `0..=inflight`
/// and, when the crash fell inside operation `inflight` (not on its boundary), what that
/// operation published on the way. What a power loss may leave of such a record.
fn earlier_versions(reference: &Reference, inflight: usize, boundary: bool) -> BTreeMap<String, BTreeSet<Vec<u8>>> {
    let mut versions: BTreeMap<String, BTreeSet<Vec<u8>>> = BTreeMap::new();
    for listing in reference.listings.iter().take(inflight + 1) {
        for (path, v) in listing.records() {
            if lazily_replaced(path) {
                versions.entry(path.to_owned()).or_default().insert(v.to_vec());
            }
        }
    }
    if !boundary && let Some(during) = reference.published.get(inflight) {
        // A version published part-way belongs to the record whose id it names.
        for (path, set) in versions.iter_mut() {
            let id = path.rsplit('/').next().and_then(|name| name.strip_suffix(".json")).unwrap_or_default();
            set.extend(during.iter().filter(|v| String::from_utf8_lossy(v).contains(&format!("\"id\":\"{id}\""))).cloned());
        }
    }
    versions
}

/// Whether `value` at `path` is one of the earlier versions a power loss may leave there.
fn reverted(earlier: &BTreeMap<String, BTreeSet<Vec<u8>>>, path: &str, value: &[u8]) -> bool {
    earlier.get(path).is_some_and(|set| set.contains(value))
}

/// `now` and `before` hold the same records, except that a lazily replaced one may hold one of
/// its `earlier` versions (none after a process crash: the kernel keeps every rename).
fn completed_work_kept(now: &Listing, before: &Listing, earlier: &BTreeMap<String, BTreeSet<Vec<u8>>>) -> bool {
    let (now, before) = (now.records(), before.records());
    now.keys().eq(before.keys()) && now.iter().all(|(path, v)| before.get(path) == Some(v) || reverted(earlier, path, v))
}

/// Recovery as another process once the actor is dead (its command and host alive when
/// `survivors`): checks every recovery invariant against the state it started from.
/// `claimed`: directory leases that held before the operation in flight and that no operation
/// of the actor released since: recovery must remove their directories once their owners
/// (and, without `survivors`, the actor's children) are dead.
fn recover_and_check(world: &mut World, survivors: bool, claimed: &[directory_lease::DirectoryLease]) -> Result<(), String> {
    world.disk.set_dead(ACTOR, true);
    world.disk.set_dead(ACTOR_CHILD, !survivors);
    world.disk.set_dead(ACTOR_HOST, !survivors);
    world.clock.0 += RECOVERY_DELAY_MS;
    world.disk.act_as(RECOVERER);
    world.disk.plan(Plan::default());
    let before = world.disk.listing();
    world.recover(RECOVERER).map_err(|e| format!("recovery failed: {e}"))?;
    let after = world.disk.listing();
    // No directory of a live owner or child, and no unleased directory, was deleted.
    let claims = directory_claims(&before);
    let intents = creation_intents(&before);
    // Runs whose command finished (the journal says so for the claim's own directory): their
    // directory is their result and stays, whatever recovery does with the claim.
    let journal = before.journal();
    let finished: BTreeSet<&str> = claims
        .iter()
        .filter(|(_, c)| journal.get(&c.id).and_then(|bytes| parse_journal(bytes, &c.id)).is_some_and(|run| run.directory_identity == c.directory_identity))
        .map(|(_, c)| c.id.as_str())
        .collect();
    for (_, claim) in claims.iter().filter(|(_, c)| finished.contains(c.id.as_str())) {
        if after.directories.get(&claim.path) != before.directories.get(&claim.path) {
            return Err(format!("{}: the directory of a finished run was deleted by recovery", claim.path));
        }
        let output = format!("{}/out.txt", claim.path);
        if before.files.contains_key(&output) && after.files.get(&output) != before.files.get(&output) {
            return Err(format!("{output}: the result of a finished run was lost"));
        }
    }
    for (dir, inode) in &before.directories {
        if !dir.starts_with("/ws/") || dir.contains("/.io-remove-") || after.directories.get(dir) == Some(inode) {
            continue;
        }
        let top = dir.split('/').take(3).collect::<Vec<_>>().join("/");
        let claim = claims.iter().find(|(_, c)| c.path == top).map(|(_, c)| c);
        let Some(claim) = claim else {
            // An empty directory a dead creator made before it could lease it goes too.
            let emptied = !before.files.keys().chain(before.directories.keys()).any(|p| p.starts_with(&format!("{dir}/")));
            let intended = intents.iter().any(|(pid, created)| (*pid == ACTOR || *pid == OLD) && created.contains(dir));
            if emptied && intended {
                continue;
            }
            return Err(format!("{dir} was deleted but no lease claimed it"));
        };
        let owner_dead = claim.owner.pid != LIVE && claim.owner.pid != RECOVERER;
        let child_alive = claim.child_owner.as_ref().is_some_and(|c| c.pid == LIVE_CHILD || (survivors && c.pid == ACTOR_CHILD));
        if !owner_dead || child_alive {
            return Err(format!("{dir} was deleted while its owner or child lives ({claim:?})"));
        }
    }
    for (path, bytes) in &before.files {
        if path.starts_with("/ws/") && !path.contains("/.io-remove-") && !after.files.contains_key(path) {
            let top = path.split('/').take(3).collect::<Vec<_>>().join("/");
            if !claims.iter().any(|(_, c)| c.path == top) {
                return Err(format!("{path} ({} bytes) was deleted but no lease claimed it", bytes.len()));
            }
        }
    }
    if !after.directories.contains_key("/ws/job-200-0") || !after.files.contains_key("/ws/job-200-0/out.txt") {
        return Err("the live owner's directory or its output is gone".into());
    }
    if !after.temporaries().is_empty() {
        return Err(format!("temporaries left after recovery: {:?}", after.temporaries()));
    }
    if !after.quarantines().is_empty() {
        return Err(format!("quarantines left after recovery: {:?}", after.quarantines()));
    }
    // A dead writer's mutation claims may stay in other collections until the next write of
    // their leaf or a recovering listing (as ghostget's do), but never in the directory-lease
    // collection, where the reference's recovery would refuse the whole collection.
    if let Some(claim) = after.claims().into_iter().find(|c| c.contains(directory_leases::DIRECTORY)) {
        return Err(format!("a mutation claim left in the directory-lease collection after recovery: {claim}"));
    }
    // Every recoverable lease of the dead is gone: nothing of the long-dead owner, and with the
    // actor's children dead, none of its directory or invocation leases and no parent-owned
    // admission of it (a helper-launching one needs a reboot, as the reference says).
    for (path, bytes) in after.records() {
        let text = String::from_utf8_lossy(bytes);
        if text.contains(&format!("\"pid\":{OLD},")) {
            return Err(format!("{path}: a lease of the long-dead owner survived recovery"));
        }
        if !survivors && path.ends_with("export-admission/active.json") && text.contains(&format!("\"pid\":{ACTOR},")) && text.contains("\"phase\":\"parent-owned\"") {
            return Err(format!("{path}: a dead actor's parent-owned admission survived recovery"));
        }
    }
    if !survivors {
        for (path, claim) in directory_claims(&after) {
            if claim.owner.pid == ACTOR {
                return Err(format!("{path}: a dead actor's directory lease survived recovery"));
            }
        }
        let invocations = format!("/home/{}/", proclease::core::invocation_leases::DIRECTORY);
        for (path, bytes) in after.records() {
            if path.starts_with(&invocations) && String::from_utf8_lossy(bytes).contains("\"pid\":100,") {
                return Err(format!("{path}: a dead actor's invocation lease survived recovery"));
            }
        }
    }
    // Recovery did its job: every directory leased by a dead owner without a live child is gone.
    let dead_owner = |pid: u64| pid == OLD || (pid == ACTOR && !survivors);
    for claim in claimed.iter().chain(claims.iter().map(|(_, c)| c)) {
        if dead_owner(claim.owner.pid) && !finished.contains(claim.id.as_str()) && after.directories.contains_key(&claim.path) {
            return Err(format!("{}: the directory of a dead owner's lease was left after recovery", claim.path));
        }
    }
    // A crashed creation leaves nothing: no intent of a dead creator, and no directory of the
    // actor's that no lease claims and nothing is in.
    if creation_intents(&after).iter().any(|(pid, _)| *pid == ACTOR || *pid == OLD) {
        return Err("a dead creator's directory-creation intent survived recovery".into());
    }
    let claims_after = directory_claims(&after);
    let crashed = intents.iter().filter(|(pid, _)| *pid == ACTOR || *pid == OLD).flat_map(|(_, created)| created.iter());
    for dir in crashed.filter(|d| after.directories.contains_key(*d)) {
        let leased = claims_after.iter().any(|(_, c)| c.path == *dir);
        let used = after.files.keys().chain(after.directories.keys()).any(|p| p.starts_with(&format!("{dir}/")));
        if !leased && !used {
            return Err(format!("{dir}: an empty, unleased directory of a crashed creation was left after recovery"));
        }
    }
    // The journal entry of every claim recovery removed is gone with it.
    let claims_now: BTreeSet<&str> = claims_after.iter().map(|(_, c)| c.id.as_str()).collect();
    let journal_after = after.journal();
    for (_, claim) in claims.iter().filter(|(_, c)| !claims_now.contains(c.id.as_str())) {
        if journal_after.contains_key(&claim.id) {
            return Err(format!("the run journal entry of {} outlived its recovered lease", claim.path));
        }
    }
    // Convergence: a second recovery changes nothing.
    world.recover(RECOVERER).map_err(|e| format!("second recovery failed: {e}"))?;
    let again = world.disk.listing();
    if again != after {
        return Err(format!("a second recovery changed the disk:\n{after:#?}\n→\n{again:#?}"));
    }
    Ok(())
}

/// Writes every violation to `$PROCLEASE_VIOLATIONS` when set (for study).
fn dump(violations: &[String]) {
    if let Ok(path) = std::env::var("PROCLEASE_VIOLATIONS") {
        let name = std::thread::current().name().unwrap_or("test").to_string();
        let _ = std::fs::write(format!("{path}.{name}"), violations.join("\n"));
    }
}

#[test]
fn every_crash_state_of_every_short_history_recovers() {
    let all = sequences(3);
    // The histories are independent: one share of them per core.
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let shares: Vec<(u64, u64, Vec<String>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|w| {
                let mine: Vec<&Vec<Op>> = all.iter().skip(w).step_by(workers).collect();
                scope.spawn(move || crash_states_of(&mine, false))
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("a crash-state worker panicked")).collect()
    });
    let states: u64 = shares.iter().map(|s| s.0).sum();
    let recoveries: u64 = shares.iter().map(|s| s.1).sum();
    let violations: Vec<String> = shares.into_iter().flat_map(|s| s.2).collect();
    println!("crash states: {} sequences, {states} crash states (process crash + power loss), {recoveries} recoveries checked, {} violations", all.len(), violations.len());
    dump(&violations);
    assert!(violations.is_empty(), "{} violations, first ones:\n{}", violations.len(), violations.iter().take(5).cloned().collect::<Vec<_>>().join("\n"));
    assert!(states > 10_000, "the enumeration is smaller than it should be: {states}");
}

/// The suite checks the store that ships, and notices when it loses durability: with the
/// collection's fsync after a create's `link` made ineffective (what deleting that one line of
/// `protocol.rs` does; tried too, and reverted), power losses lose completed records.
#[test]
fn a_store_whose_create_skips_the_collection_sync_is_caught() {
    let all = sequences(1);
    let histories: Vec<&Vec<Op>> = all.iter().collect();
    let (states, _, violations) = crash_states_of(&histories, true);
    assert!(states > 100, "the enumeration is smaller than it should be: {states}");
    assert!(violations.iter().any(|v| v.contains("(PowerLoss)") && v.contains("completed work lost")), "the broken store went unnoticed: {violations:?}");
}

/// A run's phase updates are replaced lazily (no collection fsync, `docs/durability.md` steps 6,
/// 7 and 9), so a power loss right after its command finished can take the lease back to
/// `preparing`. Nothing is lost by it: the run journal, synced, says the command finished, and
/// recovery keeps the directory with its output and takes the lease.
#[test]
fn a_power_loss_may_undo_a_runs_phase_updates_and_recovery_keeps_its_results() {
    let mut world = World::initial();
    world.disk.act_as(ACTOR);
    world.disk.plan(Plan::default());
    let mut session = Session::default();
    let actors = |listing: &Listing| directory_claims(listing).into_iter().filter(|(_, c)| c.owner.pid == ACTOR).collect::<Vec<_>>();
    world.run(&mut session, ACTOR, Op::DirectoryCreate).expect("create");
    // The working directory made durable (the model syncs no directory a command makes: a
    // command syncs its own output); the lease's phase updates that follow are not.
    world.disk.sync_all();
    let created = actors(&world.disk.listing());
    world.run(&mut session, ACTOR, Op::DirectoryLaunch).expect("launch");
    world.run(&mut session, ACTOR, Op::DirectoryRun).expect("run");
    let finished = world.disk.listing();
    let ran = actors(&finished);
    assert_eq!(ran.len(), 1, "one lease: {ran:?}");
    assert_eq!(ran[0].1.phase, directory_lease::Phase::Running, "the reference run ends running");
    world.disk.crash(CrashKind::PowerLoss);
    let after = world.disk.listing();
    let kept = actors(&after);
    assert_eq!(kept.len(), 1, "the lease itself was created durably: {kept:?}");
    assert_eq!(kept[0].1.phase, directory_lease::Phase::Preparing, "the lazy phase updates were lost with the power (the disk model keeps only synced entries)");
    assert_eq!(kept[0].1, created[0].1, "the record is the created one, complete");
    assert_eq!(after.journal(), finished.journal(), "the journal's `finished` was synced");
    let dir = &ran[0].1.path;
    assert!(after.directories.contains_key(dir.as_str()), "the power loss kept the directory: {dir} not in {:?}", after.directories.keys().collect::<Vec<_>>());
    assert!(!after.journal().is_empty(), "the run was journaled");
    recover_and_check(&mut world, false, &[]).expect("recovery after the power loss");
    let recovered = world.disk.listing();
    assert!(actors(&recovered).is_empty(), "recovery took the lease");
    assert!(recovered.directories.contains_key(dir.as_str()), "the finished run's directory stays: {dir} not in {:?}", recovered.directories.keys().collect::<Vec<_>>());
}

/// Every crash state of each of `histories`: (crash states, recoveries checked, violations).
/// With `lose_sync_after_link`, on a disk where a directory fsync right after a `link` makes
/// nothing durable.
fn crash_states_of(histories: &[&Vec<Op>], lose_sync_after_link: bool) -> (u64, u64, Vec<String>) {
    let base = World::initial();
    base.disk.lose_directory_syncs_after_links(lose_sync_after_link);
    let mut states = 0u64;
    let mut recoveries = 0u64;
    let mut violations = Vec::new();
    for ops in histories.iter().copied() {
        let reference = reference(&base, ops);
        let total = *reference.step_ends.last().unwrap_or(&0);
        for k in 0..=total {
            for kind in [CrashKind::Process, CrashKind::PowerLoss] {
                let mut world = base.fork();
                world.disk.act_as(ACTOR);
                world.disk.plan(Plan { crash_after: Some(k), fail_at: None });
                let mut session = Session::default();
                for op in ops {
                    if world.disk.crashed() {
                        break;
                    }
                    let _ = world.run(&mut session, ACTOR, *op);
                }
                world.disk.crash(kind);
                states += 1;
                // The operation in flight: the first whose steps reach past k.
                let inflight = reference.step_ends.iter().position(|end| *end > k).unwrap_or(ops.len());
                let before = &reference.listings[inflight.min(ops.len())];
                let after = &reference.listings[(inflight + 1).min(ops.len())];
                let crashed = world.disk.listing();
                // Between operations, everything completed is there: durable once it returned.
                let boundary = k == 0 || reference.step_ends.contains(&k);
                let earlier = if kind == CrashKind::PowerLoss { earlier_versions(&reference, inflight, boundary) } else { BTreeMap::new() };
                if boundary && !completed_work_kept(&crashed, before, &earlier) {
                    violations.push(format!("{ops:?} crash after step {k} ({kind:?}), between operations: completed work lost"));
                    continue;
                }
                let (empty, none) = (BTreeSet::new(), BTreeSet::new());
                let during = reference.published.get(inflight).unwrap_or(&empty);
                let unlinked = reference.unlinked.get(inflight).unwrap_or(&none);
                if let Err(e) = old_or_new(&crashed, before, after, during, unlinked, &earlier) {
                    violations.push(format!("{ops:?} crash after step {k} ({kind:?}): {e}"));
                    continue;
                }
                // Leases recovery must finish: those held before the operation in flight, unless
                // that operation is the actor's own release.
                let claimed: Vec<_> = if ops.get(inflight) == Some(&Op::DirectoryRelease) { vec![] } else { directory_claims(before).into_iter().map(|(_, c)| c).collect() };
                // No process outlives a power loss: its children are dead too (with them alive,
                // a lease a lazy update left a phase behind would be judged on the wrong facts).
                let cases: &[bool] = if kind == CrashKind::PowerLoss { &[false] } else { &[false, true] };
                for &survivors in cases {
                    let mut recovering = world.fork();
                    recoveries += 1;
                    if let Err(e) = recover_and_check(&mut recovering, survivors, &claimed) {
                        violations.push(format!("{ops:?} crash after step {k} ({kind:?}, children alive: {survivors}): {e}"));
                    }
                }
            }
        }
    }
    (states, recoveries, violations)
}

/// What a retried operation must leave, whatever ids it drew: the same records per collection
/// and the same workspace entries as a run without the fault.
fn shape(listing: &Listing) -> (Vec<(String, usize)>, Vec<String>) {
    let mut per_collection = std::collections::BTreeMap::<String, usize>::new();
    // Directory-creation intents are transient bookkeeping: one left by a failed clean-up is
    // finished by recovery (which `recover_and_check` verifies), so they are not part of it.
    for path in listing.records().keys().filter(|p| !p.contains(directory_leases::INTENTS)) {
        let collection = path.rsplit_once('/').map_or("", |(c, _)| c);
        *per_collection.entry(collection.into()).or_default() += 1;
    }
    let workspace = listing.directories.keys().chain(listing.files.keys()).filter(|p| p.starts_with("/ws/")).cloned().collect();
    (per_collection.into_iter().collect(), workspace)
}

#[test]
fn every_io_error_at_every_step_fails_cleanly_and_a_retry_succeeds() {
    let base = World::initial();
    let mut faults = 0u64;
    let mut failed = 0u64;
    let mut violations = Vec::new();
    for ops in sequences(2) {
        let reference = reference(&base, &ops);
        let last = ops.len() - 1;
        let first_step = if last == 0 { 0 } else { reference.step_ends[last - 1] };
        let steps = reference.step_ends[last] - first_step;
        for step in 1..=steps {
            for errno in Errno::ALL {
                faults += 1;
                let mut world = base.fork();
                world.disk.act_as(ACTOR);
                let mut session = Session::default();
                for op in &ops[..last] {
                    let _ = world.run(&mut session, ACTOR, *op);
                }
                world.disk.plan(Plan { crash_after: None, fail_at: Some((step, errno)) });
                let outcome = world.run(&mut session, ACTOR, ops[last]);
                let trace = world.disk.state().trace.clone();
                let at = trace.get(step as usize - 1).copied().unwrap_or("?");
                let label = format!("{ops:?} {errno:?} at step {step} ({at})");
                let now = world.disk.listing();
                if let Err(e) = old_or_new(&now, &reference.listings[last], &reference.listings[last + 1], &reference.published[last], &reference.unlinked[last], &BTreeMap::new())
                {
                    violations.push(format!("{label}: {e}"));
                    continue;
                }
                // Only a best-effort clean-up may fail without failing the operation: a
                // swallowed error anywhere else (a failed fsync above all) is a lie to the caller.
                // The run journal's end is best effort too: the supervisor warns and `run`
                // prints `recover --keep` when it could not be recorded.
                let best_effort = at.ends_with("(undo)")
                    || matches!(
                        at,
                        "unlink temporary" | "unlink claim" | "fsync after recovery" | "unlink journal" | "journal overwrite" | "fdatasync journal" | "fsync journal directory"
                    );
                // The removal of a directory-creation intent once the lease claims the directory
                // is a clean-up too: an intent left behind is finished by recovery.
                let intent_left = || {
                    let without = |l: &Listing| {
                        let (records, workspace) = shape(l);
                        (records.into_iter().filter(|(c, _)| !c.ends_with(directory_leases::INTENTS)).collect::<Vec<_>>(), workspace)
                    };
                    now.records().keys().any(|p| p.contains(directory_leases::INTENTS)) && without(&now) == without(&reference.listings[last + 1])
                };
                let best_effort = best_effort || (outcome.is_ok() && intent_left());
                if outcome.is_ok() && !best_effort {
                    violations.push(format!("{label}: the operation succeeded although a step it needs failed"));
                    continue;
                }
                world.disk.plan(Plan::default());
                if let Err(error) = outcome {
                    failed += 1;
                    if error.is_empty() {
                        violations.push(format!("{label}: an empty error"));
                    }
                    if let Err(e) = world.run(&mut session, ACTOR, ops[last]) {
                        violations.push(format!("{label}: the retry failed: {e} (first error: {error})"));
                        continue;
                    }
                }
                let retried = world.disk.listing();
                if shape(&retried) != shape(&reference.listings[last + 1]) && reference.outcomes[last].is_ok() {
                    violations.push(format!("{label}: after the retry {:?}, without the fault {:?}", shape(&retried), shape(&reference.listings[last + 1])));
                    continue;
                }
                if !retried.quarantines().is_empty() {
                    violations.push(format!("{label}: quarantines left: {:?}", retried.quarantines()));
                }
                if let Err(e) = recover_and_check(&mut world, false, &[]) {
                    violations.push(format!("{label}: after the actor's death: {e}"));
                }
            }
        }
    }
    println!(
        "I/O faults: {faults} fault points injected (4 errnos × every step of the last operation of 132 histories), {failed} made the operation fail, {} violations",
        violations.len()
    );
    dump(&violations);
    assert!(violations.is_empty(), "{} violations, first ones:\n{}", violations.len(), violations.iter().take(8).cloned().collect::<Vec<_>>().join("\n"));
    assert!(failed > 500, "too few faults reached a failure: {failed}");
}

/// The end of a supervised run whose command finished (issue #27, "full at release"): every
/// I/O error and every crash at every step of the release that follows, then the actor gone
/// without a retry (`run` exited 6 with the state home full, or was killed), after a process
/// crash or a power loss: recovery removes the claim and the journal entry, and keeps the
/// directory with the command's output.
#[test]
fn a_finished_runs_results_survive_every_fault_and_crash_of_its_release() {
    let base = World::initial();
    let ops = [Op::DirectoryCreate, Op::DirectoryLaunch, Op::DirectoryRun, Op::DirectoryRelease];
    let reference = reference(&base, &ops);
    assert!(reference.outcomes.iter().all(Result::is_ok), "{:?}", reference.outcomes);
    let finished = reference.listings[3].journal().iter().filter(|(id, bytes)| parse_journal(bytes, id).is_some()).count();
    assert_eq!(finished, 1, "the run's end is not in the journal before its release");
    let steps = reference.step_ends[3] - reference.step_ends[2];
    let faults = (1..=steps).flat_map(|step| Errno::ALL.map(|errno| Plan { crash_after: None, fail_at: Some((step, errno)) }));
    let crashes = (0..steps).map(|k| Plan { crash_after: Some(k), fail_at: None });
    let (mut cases, mut failed, mut violations) = (0u64, 0u64, Vec::new());
    for plan in faults.chain(crashes) {
        for kind in [CrashKind::Process, CrashKind::PowerLoss] {
            cases += 1;
            let mut world = base.fork();
            world.disk.act_as(ACTOR);
            let mut session = Session::default();
            for op in &ops[..3] {
                world.run(&mut session, ACTOR, *op).expect("the run before its release");
            }
            // The command's results are on the disk when it ends (it synced them, or the
            // filesystem committed them): a power loss tests what the release itself made
            // durable. (The leased directory's own creation is not fsynced, as in the host.)
            world.disk.sync_all();
            world.disk.plan(plan);
            let at = |world: &World| plan.fail_at.and_then(|(step, _)| world.disk.state().trace.get(step as usize - 1).copied()).unwrap_or("crash");
            if world.run(&mut session, ACTOR, Op::DirectoryRelease).is_err() {
                failed += 1;
            }
            let label = format!("{plan:?} at {} then {kind:?}", at(&world));
            world.disk.crash(kind);
            if let Err(e) = recover_and_check(&mut world, false, &[]) {
                violations.push(format!("{label}: {e}"));
                continue;
            }
            let after = world.disk.listing();
            // The directory stays, and so does the output.
            if !after.directories.contains_key("/ws/job-100-0") {
                violations.push(format!("{label}: the finished run's directory is gone"));
            }
            if after.files.get("/ws/job-100-0/out.txt").map(Vec::as_slice) != Some(b"built".as_slice()) {
                violations.push(format!("{label}: the finished run's output is gone"));
            }
            // (`recover_and_check` has checked that the journal entry went with the claim; a
            // crash between the release and the forget leaves an entry that names no claim.)
            if directory_claims(&after).iter().any(|(_, c)| c.owner.pid == ACTOR) {
                violations.push(format!("{label}: the finished run's claim stayed"));
            }
        }
    }
    println!("finished runs: {cases} faults and crashes at the release of a finished run, {failed} releases failed, {} violations", violations.len());
    assert!(violations.is_empty(), "{} violations, first ones:\n{}", violations.len(), violations.iter().take(8).cloned().collect::<Vec<_>>().join("\n"));
    assert!(failed > 10, "too few faults made the release fail: {failed}");
}

#[test]
fn the_reference_runs_exercise_every_operation() {
    // Guards the enumeration itself: each operation does real work somewhere.
    let base = World::initial();
    for op in Op::ALL {
        let prefix: &[Op] = match op {
            Op::AdmissionUpdate | Op::AdmissionRelease => &[Op::AdmissionAcquire],
            Op::DirectoryLaunch => &[Op::DirectoryCreate],
            Op::DirectoryRun => &[Op::DirectoryCreate, Op::DirectoryLaunch],
            Op::DirectoryRelease => &[Op::DirectoryCreate],
            Op::InvocationUpdate | Op::InvocationRelease => &[Op::InvocationAcquire],
            _ => &[],
        };
        let mut ops = prefix.to_vec();
        ops.push(op);
        let r = reference(&base, &ops);
        assert!(r.outcomes.iter().all(Result::is_ok), "{ops:?}: {:?}", r.outcomes);
        let last = ops.len() - 1;
        let before = if last == 0 { 0 } else { r.step_ends[last - 1] };
        assert!(r.step_ends[last] > before, "{op:?} took no step");
        assert_ne!(r.listings[last].records(), r.listings[last + 1].records(), "{op:?} changed no record");
    }
}
