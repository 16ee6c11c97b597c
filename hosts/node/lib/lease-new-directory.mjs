// Leasing a directory that `run` (or `withDirectoryLease`) may create: the checks of the native
// `Host::lease_new_directory` (`host/src/api/host.rs`: not the state home, not a file or a link,
// empty, claimed by no other lease — `Refusal` of `host/src/error.rs`, the component's
// `directory-leases.conflict`), then the component's `create-with-directory`.
//
// Every host takes the lease-creation lock (`.proclease/locks/directory-lease-creation.lock`)
// around the check and the creation, so that two runs cannot both lease one new directory and no
// recovery removes it meanwhile; this host through `flock(1)` (`state-store/leasing-lock.mjs`),
// as the portable artifact's own `lock-leasing` (`sys.mjs`).
// Where it has none (no util-linux), it still lists the leases again once its lease is written and
// gives its own up if another lease claims the same directory — as the native host also does
// after its creation. Each lease is written before its writer looks, so of two concurrent leasers
// (of either host) the later to look always sees the other: at most one goes on (both may give up).
//
// The directory must be seen empty *after* no other lease was seen claiming it, and again once
// this lease is written: a run that finished and released between an emptiness check and a
// conflict check would otherwise leave its results in a directory this host then leases (and a
// later `recover` deletes).
import { call, drop, ProcleaseError } from './calls.mjs';
import { setAsideLeaseEntry } from './reports/format.mjs';
import { LeasingLock } from './state-store/leasing-lock.mjs';

/** A refusal before anything was leased or run (`Refusal`, kind `refused`): its message; nothing is left behind. */
export class Refusal extends ProcleaseError {
  constructor(message, options = {}) {
    super(message, { kind: 'refused', ...options });
  }
}

/** `path` is `ancestor` or below it (component-wise). */
const within = (path, ancestor) => path === ancestor || ancestor === '/' || path.startsWith(`${ancestor}/`);

/**
 * The lease that claims the directory at `path` — by path, or by `identity` when it exists — and
 * what it is (`{kind, outcome}`), or null: the component's `directory-leases.conflict`
 * (proclease-core's `Run::conflict` over a recovery dry run). `except` is a lease id that does
 * not count (this host's own).
 */
const conflict = (exports, path, identity, except = undefined) =>
  call(() => exports.directoryLeases.conflict(path, identity ?? undefined, except ?? undefined)) ?? null;

/** Whether `path` lies strictly inside the directory `outer` (proclease-core's `is_inside`). */
const inside = (path, outer) => path.length > outer.length + 1 && path.startsWith(`${outer.replace(/\/+$/, '')}/`);

/**
 * The refusal of a directory another lease claims (`Refusal::AlreadyLeased`), that lies inside a
 * directory whose lease's owner is not alive (`Refusal::InsideLeased`), or that an entry which
 * is not a valid lease may claim (`Refusal::UndecidedLease`; `docs/deviations.md` 24).
 */
function alreadyLeased(home, dir, found) {
  const entry = found.outcome;
  if (!entry.claim) {
    const file = `${home}/recovery/beeper-message-like-me-directory-leases/${entry.fileName}`;
    return new Refusal(
      `${dir}: refused: the lease collection holds an entry that may claim it, ${file}: ${entry.reason}; ` +
        `fix it, or if no run uses what it claims, move it aside: ${setAsideLeaseEntry(home, entry.fileName)}`,
    );
  }
  if (entry.claim.path !== dir && inside(dir, entry.claim.path)) {
    const why =
      found.kind === 'active'
        ? 'it is a stage, which its run publishes (renames) or removes whole when its command ends: use a directory elsewhere'
        : found.kind === 'recoverable'
          ? 'its owner is gone, so `proclease recover` removes that directory with everything in it: run it first, or use a directory elsewhere'
          : `${entry.reason}; recovery would remove that directory with everything in it once its owner is proven gone: see \`proclease doctor\``;
    return new Refusal(`${dir}: refused: it is inside ${entry.claim.path}, leased by pid ${entry.claim.owner.pid} (lease ${entry.claim.id}): ${why}`);
  }
  const what = {
    active: () => 'its owner is alive: wait for that run to finish, or use another directory',
    recoverable: () => 'its owner is gone: run `proclease recover` first (it removes the directory)',
    replaced: () =>
      `${entry.reason}; this directory is not the one that lease holds (it was re-created or replaced), so \`recover\` will never remove it: ` +
      `check that no run uses it, then move the stale lease record aside: ${setAsideLeaseEntry(home, entry.fileName)}`,
    undecided: () => `${entry.reason}; see \`proclease doctor\``,
  }[found.kind]();
  return new Refusal(`${dir}: refused: already leased by pid ${entry.claim.owner.pid} (lease ${entry.claim.id}): ${what}`);
}


/**
 * Leases the directory `dir` (absolute), creating it (0700, with its missing ancestors) when
 * absent: the `raw-working` lease resource, and `created`, the directories this call found absent
 * (innermost first) — for the caller to remove again, if still empty, when nothing ran. Throws a
 * `Refusal` or a `ProcleaseError`; nothing is left behind then.
 */
export function leaseNewDirectory(host, dir, options = {}) {
  // Under the lease-creation lock, as the native and Python hosts lease a new directory: no other
  // host's run leases it, and no recovery removes a directory, between the checks and the lease.
  // Throws a `StoreError` (`contended`, naming the holder) when another process holds it past
  // the bound; nothing was leased or created then.
  // A lock of its own (not the one the component's `lock-leasing` takes, which is released after
  // each component call): the checks and the lease are several calls.
  const lock = new LeasingLock(host.parts.home);
  lock.take(host.parts.lockTimeoutMs, host.parts.warn);
  try {
    return leaseNewDirectoryLocked(host, dir, options);
  } finally {
    lock.release();
  }
}

/** `leaseNewDirectory` once the lease-creation lock is held (or cannot be had: no `flock(1)`). */
function leaseNewDirectoryLocked(host, dir, { recoverAfterMs = 60_000 } = {}) {
  const { workspace } = host.parts;
  const exports = host.exports;
  const home = host.stateHome;
  if (within(dir, home) || within(home, dir)) {
    throw new Refusal(`${dir}: refused: a leased directory may be removed by \`recover\`, so it can be neither the state home (${home}), inside it, nor hold it`);
  }
  // What the workspace cannot tell (outside the granted roots, behind a symbolic link) is left to
  // the component's creation, which refuses it in its own words.
  const quiet = (f) => {
    try {
      return f();
    } catch {
      return null;
    }
  };
  const kind = (path) => quiet(() => workspace.kind(path));
  const here = kind(dir);
  if (here === 'symbolic-link' || here === 'other') throw new Refusal(`${dir}: refused: it exists and is not a directory; give a directory path (proclease creates it if absent)`);
  // Whether `dir` holds anything: 'empty' (also when absent or not a directory: refused elsewhere),
  // 'not-empty', or 'unknown' (it could not be read). Before this lease exists an unknown
  // emptiness is left to the creation; after, it is not taken for empty.
  const emptiness = () => {
    if (kind(dir) !== 'directory') return 'empty';
    const empty = quiet(() => workspace.isEmptyDirectory(dir));
    return empty === true ? 'empty' : empty === false ? 'not-empty' : 'unknown';
  };
  const notEmptyRefusal = () =>
    new Refusal(
      `${dir}: refused: not empty. \`run\` leases only a directory it creates or an empty one, because after a crash ` +
        '`recover` deletes the leased directory with everything in it; give a new path and proclease creates it',
    );
  if (here === 'directory' && emptiness() === 'not-empty') throw notEmptyRefusal();
  const created = [];
  for (let p = dir; p !== '/' && kind(p) === 'absent'; p = p.slice(0, p.lastIndexOf('/')) || '/') created.push(p);
  const facts = quiet(() => call(() => exports.workspace.inspect(dir)).facts);
  const before = conflict(exports, dir, facts ? facts.identity : null);
  if (before) throw alreadyLeased(home, dir, before);
  // Seen empty before a lease that since released would not say that its run left nothing.
  if (emptiness() === 'not-empty') throw notEmptyRefusal();
  const now = Date.now();
  const request = { role: 'raw-working', path: dir, outputRoot: undefined, recoverAfterMs: now + recoverAfterMs, nowMs: now };
  const resource = call(() => exports.directoryLeases.createWithDirectory(request));
  // Another leaser of the same directory that looked before this lease existed has written its
  // lease by now, or will see this one when it looks.
  let refusal;
  try {
    const claim = resource.claim();
    const after = conflict(exports, dir, claim.directoryIdentity, claim.id);
    refusal = after ? alreadyLeased(home, dir, after) : emptiness() !== 'empty' ? notEmptyRefusal() : null;
  } catch (error) {
    refusal = error;
  }
  if (refusal) {
    try {
      resource.release();
    } catch {
      // Left for `recover` once this process is gone (its owner is this process).
    }
    drop(resource);
    // The directory is the other lease's now, or holds what another run left: it is not removed.
    throw refusal;
  }
  return { resource, created };
}
