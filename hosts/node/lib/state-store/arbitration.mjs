// The reference's claim arbitration (spec §3.5 steps 2–5 and "list live claims"), shared by the
// per-leaf state mutation claims (`mutation-claim.mjs`) and the catalog lock's arbitration
// claims (§5, `plugin-catalog/lock-file.mjs`), which differ only in names, content, publication
// and messages (a "claim kind"). Port of `guest/protocols/src/state_store/arbitration.rs`.
//
// Each contender publishes a claim file in the `waiting` phase, then looks at the live claims of
// the same target: it gives up ("lost") if any other claim is past `waiting` or has a smaller
// claim id; else it renames its claim to `candidate` and looks again (lost if another is `held`
// or smaller); else it renames it to `held` and looks once more — a second `held` claim is an
// error (`… admitted two owners`). A claim whose owner is provably gone is removed by whoever
// lists it; an owner that cannot be judged makes the listing fail rather than guess.
//
// Whether an owner is alive is never decided here: `liveness.ownerStatus` probes it and asks the
// component's `dispositions.judge-owner` (`lib/liveness.mjs`).
import * as fs from 'node:fs';
import { readStable, lstat, namesStartingWith, openRead, sleepMs, unlinkQuietly, unsafeFileReason, uuid } from '../fsops.mjs';
import { MAX_SAFE_INTEGER, isDigest } from './path.mjs';

/** How many listings may see claims vanish, move or die before arbitration gives up (§3.5). */
export const SNAPSHOT_ATTEMPTS = 8;
/** The most claim files of one target a listing accepts (§3.5). */
export const MAX_CLAIMS = 1024;
/** How many more times an owner whose status is `unknown` is probed, 10 ms apart (§3.5). */
export const UNKNOWN_RETRIES = 3;
/** The largest claim file read (bytes). */
export const MAX_CLAIM_BYTES = 4096;

/** A claim's phases (§3.5), as the words of its file name. */
export const PHASES = ['waiting', 'candidate', 'held'];

/**
 * What each arbitration failure is, by kind (the messages are the kind's: `kind.message(failure)`):
 * `unstable`, `too-many`, `owner-unknown`, `two-owners`, `malformed`, `name-present`, `io`.
 */
export class ArbitrationError extends Error {
  /** `kind.message(failure)`, with the system call's error when one failed. */
  constructor(message, io) {
    super(io ? `${message} (${io.message})` : message);
    /** The reference's (or, where the spec gives none, the peer's) message. */
    this.reference = message;
    /** The operating-system error, if one caused it. */
    this.io = io;
  }
}

/** `kind.error(failure, io)`. */
export const failed = (kind, failure, io) => new ArbitrationError(kind.message(failure), io);

/**
 * `arbitration::step`: the arbitration's decision, a function of one listing — the own claim in
 * `phase` with id `own`, against the other live claims `others` (`[phase, id]` pairs; dead
 * owners' claims already removed). Claim ids order contenders (the smaller goes first):
 * - `waiting`: lose to any claim past `waiting` or with a smaller id; else become `candidate`;
 * - `candidate`: lose to a `held` claim or a smaller id; else become `held`;
 * - `held`: another `held` claim is two owners; else won.
 * Returns `{advance: phase}`, `'lose'`, `'win'` or `'two-owners'`.
 */
export function step(phase, own, others) {
  const smaller = (id) => id < own;
  switch (phase) {
    case 'waiting':
      return others.some(([p, id]) => p !== 'waiting' || smaller(id)) ? 'lose' : { advance: 'candidate' };
    case 'candidate':
      return others.some(([p, id]) => p === 'held' || smaller(id)) ? 'lose' : { advance: 'held' };
    case 'held':
      return others.some(([p]) => p === 'held') ? 'two-owners' : 'win';
    default:
      throw new TypeError(`not a claim phase: ${phase}`);
  }
}

/** The owner a claim text records, when `text` is exactly `kind`'s text for `claimId`. */
export function ownerIn(kind, claimId, text) {
  let value;
  try {
    value = JSON.parse(text);
  } catch {
    return null;
  }
  const owner = ownerMembers(value);
  return owner !== null && kind.content(claimId, owner) === text ? owner : null;
}

/**
 * The `pid`, `bootId` and `processStartId` members of a claim or lock record (§3.5, §5): a safe
 * integer ≥ 1 and two lowercase 64-hex digests; null when any is missing or malformed.
 */
export function ownerMembers(value) {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return null;
  const { pid, bootId, processStartId } = value;
  if (typeof pid !== 'number' || !Number.isSafeInteger(pid) || pid < 1 || BigInt(pid) > MAX_SAFE_INTEGER) return null;
  if (!isDigest(bootId) || !isDigest(processStartId)) return null;
  return { pid: BigInt(pid), bootId, processStartId };
}

const sameOwner = (a, b) => a !== null && b !== null && a !== undefined && b !== undefined && a.pid === b.pid && a.bootId === b.bootId && a.processStartId === b.processStartId;

/**
 * Runs the arbitration for one fresh claim of `own` in `dir`: the held claim's file name when
 * this process holds the target, null when it lost (its claim is already gone again).
 */
export function arbitrate(dir, kind, liveness, own) {
  const claimId = uuid();
  kind.publish(dir, claimId, own);
  let name = kind.name('waiting', claimId);
  let phase = 'waiting';
  try {
    // At most three listings: waiting, candidate, held.
    for (;;) {
      const others = liveClaims(dir, kind, liveness, claimId, own);
      const next = step(phase, claimId, others);
      if (next === 'lose') {
        release(dir, name);
        return null;
      }
      if (next === 'win') return { name, claimId };
      if (next === 'two-owners') throw failed(kind, 'two-owners');
      name = advance(dir, kind, name, next.advance, claimId);
      phase = next.advance;
    }
  } catch (error) {
    release(dir, name);
    throw error;
  }
}

/**
 * Renames the own claim `from` to `phase`; the new name. Node has no `renameat2(NOREPLACE)`: the
 * new name carries this contender's own fresh claim id, which no other process writes, so a
 * plain rename cannot replace another claim. Not fsynced (see the native `advance`: a claim
 * excludes live processes only, and after a power loss every claim is a dead owner's).
 */
function advance(dir, kind, from, phase, claimId) {
  const to = kind.name(phase, claimId);
  if (lstat(dir, to) !== null) throw failed(kind, 'name-present');
  try {
    fs.renameSync(dir.at(from), dir.at(to));
  } catch (error) {
    throw failed(kind, 'io', error);
  }
  return to;
}

/** Releases a claim: unlinks it; a failure is ignored (a claim left behind is a dead owner's once this process is gone). */
export function release(dir, name) {
  unlinkQuietly(dir, name);
}

/**
 * "List live claims" (§3.5): `[phase, id]` of every live claim of the target except `skip`,
 * after removing the claims of provably gone owners. Retries until one pass sees no claim
 * vanish, move or die. With `own`, a claim of this very process other than `skip` is removed as
 * stale (a failed release of this process's: left in place it would block its own later writes).
 */
export function liveClaims(dir, kind, liveness, skip, own) {
  for (let attempt = 0; attempt < SNAPSHOT_ATTEMPTS; attempt += 1) {
    let listed;
    try {
      listed = namesStartingWith(dir, kind.prefix(), MAX_CLAIMS);
    } catch (error) {
      throw failed(kind, 'too-many', error);
    }
    if (listed.over) throw failed(kind, 'too-many');
    const claims = [];
    for (const name of listed.names) {
      const parsed = kind.parseName(name);
      if (parsed) claims.push([name, parsed[0], parsed[1]]);
    }
    claims.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
    let stable = true;
    const live = [];
    for (const [name, phase, id] of claims) {
      if (id === skip) continue;
      const text = readClaim(dir, name, kind);
      if (text === null) {
        stable = false; // vanished or moved while read
        continue;
      }
      if (/^\0*$/.test(text)) {
        // Empty or zeros: a claim whose content an OS crash lost (every writer writes the text
        // before it names the claim), so its owner died with that boot (docs/deviations.md 26;
        // the native host's `arbitration::lost_in_a_crash`).
        unlinkQuietly(dir, name);
        stable = false;
        continue;
      }
      const owner = ownerIn(kind, id, text);
      if (owner === null) throw failed(kind, 'malformed');
      if (own && sameOwner(own, owner)) {
        unlinkQuietly(dir, name);
        stable = false;
        continue;
      }
      const found = status(liveness, owner);
      if (found === 'exact-live-owner') live.push([phase, id]);
      else if (found === 'unknown') throw failed(kind, 'owner-unknown');
      else {
        unlinkQuietly(dir, name);
        stable = false;
      }
    }
    if (stable) return live;
  }
  throw failed(kind, 'unstable');
}

/** The pid of a live holder of `kind`'s claims in `dir`, if one is seen (for a message). */
export function liveHolder(dir, kind, liveness) {
  let listed;
  try {
    listed = namesStartingWith(dir, kind.prefix(), MAX_CLAIMS);
  } catch {
    return null;
  }
  for (const name of listed.names) {
    const parsed = kind.parseName(name);
    if (!parsed) continue;
    let text;
    try {
      text = readClaim(dir, name, kind);
    } catch {
      continue;
    }
    const owner = text === null ? null : ownerIn(kind, parsed[1], text);
    if (owner !== null && status(liveness, owner) === 'exact-live-owner') return owner.pid;
  }
  return null;
}

/** An owner's status, probed up to `UNKNOWN_RETRIES` more times 10 ms apart while `unknown`. */
export function status(liveness, owner) {
  const once = () => {
    try {
      return liveness.ownerStatus(owner);
    } catch {
      return 'unknown';
    }
  };
  let found = once();
  for (let retry = 0; retry < UNKNOWN_RETRIES && found === 'unknown'; retry += 1) {
    sleepMs(10);
    found = once();
  }
  return found;
}

/**
 * A claim file's text: null when it vanished or was replaced while read; a file that is not a
 * private regular file of this user, too large, or not UTF-8 is malformed (thrown with `kind`'s
 * message, or as the string `'malformed'` when no kind is given).
 */
export function readClaim(dir, name, kind) {
  const malformed = () => (kind ? failed(kind, 'malformed') : new ArbitrationError('malformed'));
  let fd;
  try {
    fd = openRead(dir, name);
  } catch (error) {
    if (error.code === 'ENOENT') return null;
    throw malformed();
  }
  try {
    let before;
    try {
      before = fs.fstatSync(fd, { bigint: true });
    } catch {
      throw malformed();
    }
    if (unsafeFileReason(before) !== null) throw malformed();
    let read;
    try {
      read = readStable(fd, before, MAX_CLAIM_BYTES);
    } catch {
      throw malformed();
    }
    if (read.tooLarge) throw malformed();
    if (read.changed) return null;
    let now;
    try {
      now = lstat(dir, name);
    } catch {
      throw malformed();
    }
    if (now === null || now.ino !== before.ino || now.dev !== before.dev) return null;
    try {
      return new TextDecoder('utf-8', { fatal: true }).decode(read.bytes);
    } catch {
      throw malformed();
    }
  } finally {
    fs.closeSync(fd);
  }
}
