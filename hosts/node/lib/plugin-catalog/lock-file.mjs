// The reference's catalog mutation lock (spec §5): a lock file, published under an arbitration
// claim, that a running ghostget 0.17.2, the native host and this host all honour. Port of
// `host/src/imports/plugin_catalog/lock_file.rs`.
//
// On disk, in the plugin store's `locks/` (`<state home>/provider-plugins/locks/`, created with
// `artifacts/`, `trust/` and `active/`, all 0700):
// * the lock `.catalog-mutation.lock`, holding the canonical
//   `{"acquiredAt":…,"bootId":…,"pid":…,"processStartId":…,"schemaVersion":1,"scope":"catalog-mutation"}`
//   and a newline (Appendix A item 5);
// * while a process acquires it, its arbitration claim
//   `.lock-claim-<target>-<waiting|candidate|held>-<claim id>.json`, where
//   `target = sha256("portable-provider-plugin-lock" ‖ 0x00 ‖ <physical path of the lock>)`,
//   holding the canonical `{"bootId","claimId","kind":"portable-provider-plugin-lock-claim","pid","processStartId","schemaVersion":1,"targetSha256"}`
//   and a newline, arbitrated as §3.5 claims are (`state-store/arbitration.mjs`);
// * publication stages `.lock-publication-<pid>-<boot id>-<process start id>-<uuid>.tmp`, from which
//   claims and the lock are hard-linked into place, and `.lock-reclaim-<pid>-<uuid>`, the name a lock
//   is renamed to before it is unlinked (at release, or when its holder is gone).
//
// Acquiring fails fast: while a live process holds the lock the answer is `portable plugin catalog
// mutation is already locked`, at once. A lock whose holder is provably gone is taken over
// (renamed away, its inode checked, unlinked); a holder that cannot be judged is an error, never
// a guess. Release removes exactly the inode this process published.
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import { join } from 'node:path';
import { osErrorText } from '../errors.mjs';
import { fsyncDir, lstat, nameText, namesWhere, openRead, readStable, sleepMs, unlinkQuietly, unsafeFileReason, uuid, writeNewFile } from '../fsops.mjs';
import { ArbitrationError, arbitrate, failed, ownerMembers, release, status } from '../state-store/arbitration.mjs';
import { MAX_ENTRIES, ownIdentity, pidGone } from '../state-store/mutation-claim.mjs';
import { isUuidV4 } from '../state-store/path.mjs';

/** The reference's message when a live process holds the lock (§5). */
export const ALREADY_LOCKED = 'portable plugin catalog mutation is already locked';
/** The lock's file name in `locks/`. */
export const LOCK_NAME = '.catalog-mutation.lock';
/** The plugin store's root below the state home (§6B.1). */
export const STORE_ROOT = 'provider-plugins';
/** The plugin store's directories (§5 `ensureStore`). */
export const STORE_DIRECTORIES = ['artifacts', 'trust', 'active', 'locks'];

const ROUNDS = 64;
const PUBLISH_ATTEMPTS = 4;
const MAX_LOCK_BYTES = 64 * 1024;
const PUBLICATION_PREFIX = '.lock-publication-';
const RECLAIM_PREFIX = '.lock-reclaim-';

/** A §5 failure: its message is the reference's. */
export class LockError extends Error {}

/** The arbitration claims of one lock path: a claim kind for `arbitration.mjs`. */
class LockClaim {
  constructor(target) {
    this.target = target;
  }

  prefix() {
    return `.lock-claim-${this.target}-`;
  }

  name(phase, claimId) {
    return `.lock-claim-${this.target}-${phase}-${claimId}.json`;
  }

  parseName(name) {
    const match = /^\.lock-claim-(.{64})-(waiting|candidate|held)-(.*)\.json$/s.exec(name);
    return match && match[1] === this.target && isUuidV4(match[3]) ? [match[2], match[3]] : null;
  }

  content(claimId, owner) {
    return `{"bootId":"${owner.bootId}","claimId":"${claimId}","kind":"portable-provider-plugin-lock-claim","pid":${owner.pid},"processStartId":"${owner.processStartId}","schemaVersion":1,"targetSha256":"${this.target}"}\n`;
  }

  publish(dir, claimId, owner) {
    let published;
    try {
      published = publishLinked(dir, owner, this.content(claimId, owner), this.name('waiting', claimId));
    } catch (error) {
      throw failed(this, 'io', error);
    }
    if (!published) throw failed(this, 'name-present');
  }

  message(failure) {
    return {
      unstable: 'portable plugin lock arbitration did not reach a stable snapshot',
      'too-many': 'portable plugin lock arbitration claim count exceeds its bound',
      'owner-unknown': 'portable plugin lock arbitration owner cannot be inspected safely',
      'two-owners': 'portable plugin lock arbitration admitted two owners',
      malformed: 'portable plugin lock arbitration claim is malformed',
      'name-present': 'portable plugin lock arbitration claim name is already present',
      io: 'portable plugin lock arbitration claim could not be written',
    }[failure];
  }
}

/**
 * Writes `text` to a fresh publication stage `.lock-publication-<pid>-<boot>-<start>-<uuid>.tmp`
 * (0600, fsynced), hard-links it to `name` and removes the stage; fsyncs `dir`. False when `name`
 * already exists.
 */
function publishLinked(dir, owner, text, name) {
  const stage = `${PUBLICATION_PREFIX}${owner.pid}-${owner.bootId}-${owner.processStartId}-${uuid()}.tmp`;
  try {
    writeNewFile(dir, stage, text);
  } catch (error) {
    unlinkQuietly(dir, stage);
    throw error;
  }
  let linked = true;
  try {
    fs.linkSync(dir.at(stage), dir.at(name));
  } catch (error) {
    unlinkQuietly(dir, stage);
    if (error.code === 'EEXIST') return false;
    throw error;
  }
  unlinkQuietly(dir, stage);
  try {
    fsyncDir(dir);
  } catch (error) {
    unlinkQuietly(dir, name);
    throw error;
  }
  return linked;
}

/** The canonical lock record of `owner` acquired at `acquiredAt` (§5; Appendix A item 5). */
export function lockText(acquiredAt, owner) {
  return `{"acquiredAt":"${acquiredAt}","bootId":"${owner.bootId}","pid":${owner.pid},"processStartId":"${owner.processStartId}","schemaVersion":1,"scope":"catalog-mutation"}\n`;
}

/** `invocation_lease::is_iso_timestamp`: `YYYY-MM-DDTHH:MM:SS.mmmZ` naming a real instant. */
export function isIsoTimestamp(text) {
  const match = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})\.\d{3}Z$/.exec(text);
  if (!match) return false;
  const [year, month, day, hour, minute, second] = match.slice(1, 7).map(Number);
  const leap = (year % 4 === 0 && year % 100 !== 0) || year % 400 === 0;
  const days = month === 2 ? (leap ? 29 : 28) : [4, 6, 9, 11].includes(month) ? 30 : 31;
  return month >= 1 && month <= 12 && day >= 1 && day <= days && hour <= 23 && minute <= 59 && second <= 59;
}

/** `invocation_lease::iso_timestamp`: ms since the epoch as ISO-8601 UTC with ms; null outside years 0..9999. */
export function isoTimestamp(ms) {
  const date = new Date(ms);
  if (Number.isNaN(date.getTime())) return null;
  const text = date.toISOString();
  return isIsoTimestamp(text) ? text : null;
}

/** The holder a lock text records, when `text` is exactly a lock record. */
function holderIn(text) {
  let value;
  try {
    value = JSON.parse(text);
  } catch {
    return null;
  }
  const acquiredAt = value?.acquiredAt;
  if (typeof acquiredAt !== 'string' || !isIsoTimestamp(acquiredAt)) return null;
  const owner = ownerMembers(value);
  return owner !== null && lockText(acquiredAt, owner) === text ? owner : null;
}

/** `sha256("portable-provider-plugin-lock" ‖ 0x00 ‖ lock path)` in hex (§5). */
export function lockTarget(lockPath) {
  return createHash('sha256').update(Buffer.concat([Buffer.from('portable-provider-plugin-lock\0'), Buffer.from(lockPath)])).digest('hex');
}

/** The lock's holder and inode, or null when it vanished or changed while read. */
function readLock(dir) {
  const malformed = () => new LockError('portable plugin catalog mutation lock is malformed');
  let fd;
  try {
    fd = openRead(dir, LOCK_NAME);
  } catch (error) {
    if (error.code === 'ENOENT') return null;
    throw malformed();
  }
  try {
    let before;
    try {
      before = fs.fstatSync(fd, { bigint: true });
    } catch (error) {
      throw new LockError(`${LOCK_NAME}: ${osErrorText(error)}`);
    }
    if (unsafeFileReason(before) !== null || before.size < 2n) throw malformed();
    let read;
    try {
      read = readStable(fd, before, MAX_LOCK_BYTES);
    } catch (error) {
      throw new LockError(`${LOCK_NAME}: ${osErrorText(error)}`);
    }
    if (read.tooLarge) throw malformed();
    if (read.changed) return null;
    let now;
    try {
      now = lstat(dir, LOCK_NAME);
    } catch {
      return null;
    }
    if (now === null || now.ino !== before.ino || now.dev !== before.dev) return null;
    const text = nameText(read.bytes);
    const holder = text === null ? null : holderIn(text);
    if (holder === null) throw malformed();
    return { holder, dev: before.dev, ino: before.ino };
  } finally {
    fs.closeSync(fd);
  }
}

/**
 * Removes the lock if it is still inode `(dev, ino)`: renames it to `.lock-reclaim-<own pid>-<uuid>`,
 * checks the inode, unlinks it and fsyncs. Another inode is linked back (never over a file) and
 * reported with `changed`.
 */
function removeExact(dir, own, dev, ino, changed) {
  const reclaim = `${RECLAIM_PREFIX}${own.pid}-${uuid()}`;
  try {
    fs.renameSync(dir.at(LOCK_NAME), dir.at(reclaim));
  } catch (error) {
    if (error.code === 'ENOENT') throw new LockError(changed);
    throw new LockError(`${LOCK_NAME}: ${osErrorText(error)}`);
  }
  let moved;
  try {
    moved = lstat(dir, reclaim);
  } catch {
    moved = null;
  }
  if (moved === null || moved.dev !== dev || moved.ino !== ino) {
    try {
      fs.linkSync(dir.at(reclaim), dir.at(LOCK_NAME));
    } catch {
      // Another lock appeared meanwhile: it stays.
    }
    unlinkQuietly(dir, reclaim);
    throw new LockError(changed);
  }
  try {
    fs.unlinkSync(dir.at(reclaim));
  } catch (error) {
    throw new LockError(`${reclaim}: ${osErrorText(error)}`);
  }
  try {
    fsyncDir(dir);
  } catch {
    // Best effort, as the native host's.
  }
}

/** The owner a publication stage `.lock-publication-<pid>-<boot>-<start>-<uuid>.tmp` names. */
function publicationOwner(name) {
  const match = /^\.lock-publication-([0-9]+)-([0-9a-f]{64})-([0-9a-f]{64})-(.*)\.tmp$/.exec(name);
  if (!match || match[1].startsWith('0') || !isUuidV4(match[4])) return null;
  return { pid: BigInt(match[1]), bootId: match[2], processStartId: match[3] };
}

/** The pid of a reclaim name `.lock-reclaim-<pid>-<uuid v4>`. */
function reclaimPid(name) {
  const match = /^\.lock-reclaim-([0-9]+)-(.*)$/.exec(name);
  if (!match || match[1].startsWith('0') || !isUuidV4(match[2])) return null;
  return BigInt(match[1]);
}

/**
 * Removes publication stages whose owner (named in the stage) is provably gone, and reclaim names
 * whose pid is gone (§5; the latter a deviation of the native host's, kept). An owner that cannot
 * be judged is an error.
 */
function removeStaleStages(dir, liveness) {
  let listed;
  try {
    listed = namesWhere(dir, MAX_ENTRIES);
  } catch (error) {
    throw new LockError(`${STORE_ROOT}/locks: ${osErrorText(error)}`);
  }
  if (listed.over) throw new LockError(`${STORE_ROOT}/locks has more than ${MAX_ENTRIES} entries`);
  for (const raw of listed.names) {
    const name = nameText(raw);
    if (name === null) continue;
    const owner = publicationOwner(name);
    if (owner !== null) {
      const found = status(liveness, owner);
      if (found === 'unknown') throw new LockError('portable plugin lock publication owner cannot be inspected safely');
      if (found === 'different-or-dead') unlinkQuietly(dir, name);
      continue;
    }
    const pid = reclaimPid(name);
    if (pid !== null) {
      let privateFile = false;
      try {
        const stat = lstat(dir, name);
        privateFile = stat !== null && unsafeFileReason(stat) === null;
      } catch {
        privateFile = false;
      }
      if (privateFile && pidGone(pid)) unlinkQuietly(dir, name);
    }
  }
}

/** Holding the arbitration claim: up to four attempts to publish the lock, taking over one whose holder is provably gone. */
function publishLock(dir, own, record, liveness) {
  for (let attempt = 0; attempt < PUBLISH_ATTEMPTS; attempt += 1) {
    let published;
    try {
      published = publishLinked(dir, own, record, LOCK_NAME);
    } catch (error) {
      throw new LockError(`${LOCK_NAME}: ${osErrorText(error)}`);
    }
    if (published) {
      const stat = lstat(dir, LOCK_NAME);
      if (stat === null) throw new LockError('the catalog mutation lock vanished');
      return { dev: stat.dev, ino: stat.ino };
    }
    const lock = readLock(dir);
    if (lock === null) continue;
    const found = status(liveness, lock.holder);
    if (found === 'exact-live-owner') throw new LockError(ALREADY_LOCKED);
    if (found === 'unknown') throw new LockError('portable plugin catalog mutation lock owner cannot be inspected safely');
    removeExact(dir, own, lock.dev, lock.ino, 'portable plugin catalog mutation lock changed before reclaim');
  }
  return null;
}

/** A lock this process published: its directory and the identity of its inode. */
export class HeldLock {
  constructor(dir, dev, ino, own) {
    this.dir = dir;
    this.dev = dev;
    this.ino = ino;
    this.own = own;
  }

  /** Releases the lock (§5 step 5): removes exactly the inode this process published. */
  release() {
    try {
      removeExact(this.dir, this.own, this.dev, this.ino, 'portable plugin catalog mutation lock changed before release');
    } finally {
      this.dir.close();
    }
  }
}

/**
 * Acquires the catalog mutation lock of `store`'s state home (§5 step 3), failing fast. Throws a
 * `LockError` (the reference's messages), or a store failure.
 */
export function acquire(store, processes, liveness, nowMs) {
  for (const name of STORE_DIRECTORIES) store.ensurePrivateDirectory(`${STORE_ROOT}/${name}`);
  const dir = store.openDirectory(`${STORE_ROOT}/locks`);
  if (dir === null) throw new LockError("the plugin store's locks directory vanished");
  try {
    let physical;
    try {
      physical = fs.realpathSync(join(store.home.path, STORE_ROOT));
    } catch (error) {
      throw new LockError(`${STORE_ROOT}: ${osErrorText(error)}`);
    }
    const kind = new LockClaim(lockTarget(join(physical, 'locks', LOCK_NAME)));
    let own;
    try {
      own = ownIdentity(processes);
    } catch (error) {
      throw new LockError(error.message);
    }
    const acquiredAt = isoTimestamp(nowMs);
    if (acquiredAt === null) throw new LockError('the clock is outside the dates a lock can record');
    const record = lockText(acquiredAt, own);
    for (let round = 0; round < ROUNDS; round += 1) {
      removeStaleStages(dir, liveness);
      let claim;
      try {
        claim = arbitrate(dir, kind, liveness, own);
      } catch (error) {
        if (error instanceof ArbitrationError) throw new LockError(error.message);
        throw error;
      }
      if (claim === null) {
        sleepMs(5);
        continue;
      }
      let published;
      try {
        published = publishLock(dir, own, record, liveness);
      } finally {
        release(dir, claim.name);
      }
      if (published !== null) {
        const held = new HeldLock(dir, published.dev, published.ino, own);
        return held;
      }
    }
    throw new LockError('portable plugin catalog mutation lock could not be acquired');
  } catch (error) {
    dir.close();
    throw error;
  }
}
