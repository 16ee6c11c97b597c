// The reference's per-leaf state mutation claim (spec §3.5) and the crash recovery its helper
// operations perform in the directory they work in (§3.9) — how this host, the native host and a
// running ghostget 0.17.2 keep out of each other's way on one record. Port of
// `guest/protocols/src/state_store/mutation_claim.rs`.
//
// **Claim.** Before it creates, replaces or removes the file `<leaf>` of a collection, a writer
// publishes `.io-mutation-<target>-waiting-<claim id>.lock` in that collection, where
// `target = sha256("io-state-mutation" ‖ 0x00 ‖ leaf)`, holding exactly
// `{"kind":"io-state-mutation-claim","schemaVersion":1,"targetSha256":…,"claimId":…,"pid":…,"bootId":…,"processStartId":…}`
// and a newline (keys in this insertion order, not canonical). It is written as
// `.io-mutation-stage-<claim id>-<pid>.tmp` (mode 0600, fsynced) and renamed into place, then
// moves through `candidate` to `held` (`arbitration.mjs`). The writer mutates the record only
// while its claim is `held`, and unlinks the claim afterwards.
//
// **Recovery** (`recoverDirectory`), before every write and every listing of a collection: write
// temporaries `.io-write-<pid>-<uuid>.tmp` whose pid is gone (`kill(pid, 0)` → ESRCH); mutation
// stages whose owner is provably gone (their full identity when the stage is an exact claim text,
// else their file-name pid); the state helper's tree quarantines
// `.io-remove-tree-<pid>-<ms>-<32 hex>.quarantine` of a gone pid; with `claims`, every claim of a
// gone owner; and (as the native host does, `docs/deviations.md` item 14)
// `.io-remove-file-<claim id>.quarantine` once no claim with that id is left.
//
// A pid above 2³¹−1 cannot be asked with `kill` and is never counted as gone.
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import { S_IFDIR, euid, fileKind, fsyncDir, lstat, namesStartingWith, removeTreeAt, sleepMs, unlinkQuietly, unsafeFileReason, writeNewFile } from '../fsops.mjs';
import { ArbitrationError, failed, liveClaims, ownerIn, readClaim, status } from './arbitration.mjs';
import { isDigest, isHex, isUuidV4, namePid } from './path.mjs';

/** The reference's message when this process cannot read its own identity (§3.5 step 1). */
export const IDENTITY_UNAVAILABLE = 'state mutation process identity is unavailable';
/** The reference's message when more claim targets are found than a recovery reviews (§3.5). */
export const TOO_MANY_TARGETS = 'state mutation recovery exceeds its target bound';
/** The most claim targets one recovery reviews (§3.5). */
export const MAX_TARGETS = 10_000;
/** The most entries a listing looks at (§3.3). */
export const MAX_ENTRIES = 10_000;

const CLAIM_PREFIX = '.io-mutation-';
const STAGE_PREFIX = '.io-mutation-stage-';

/** `sha256("io-state-mutation" ‖ 0x00 ‖ leaf)` in hex (§3.5). */
export function targetSha256(leaf) {
  return createHash('sha256').update(Buffer.concat([Buffer.from('io-state-mutation\0'), Buffer.from(leaf, 'utf8')])).digest('hex');
}

/** The exact text of a mutation claim (§3.5; Appendix A item 6). */
export function claimText(target, claimId, owner) {
  return `{"kind":"io-state-mutation-claim","schemaVersion":1,"targetSha256":"${target}","claimId":"${claimId}","pid":${owner.pid},"bootId":"${owner.bootId}","processStartId":"${owner.processStartId}"}\n`;
}

/** `[target, phase, claim id]` of an exact claim name `.io-mutation-<64 hex>-<waiting|candidate|held>-<uuid v4>.lock`. */
export function parseClaimName(name) {
  const match = /^\.io-mutation-([0-9a-f]{64})-(waiting|candidate|held)-(.*)\.lock$/.exec(name);
  return match && isUuidV4(match[3]) ? [match[1], match[2], match[3]] : null;
}

/** The mutation claims of one leaf (or one target) of a collection: a claim kind for `arbitration.mjs`. */
export class MutationClaim {
  /** The claims of the file named `leaf`. */
  static forLeaf(leaf) {
    return new MutationClaim(targetSha256(leaf));
  }

  constructor(target) {
    this.target = target;
  }

  prefix() {
    return `${CLAIM_PREFIX}${this.target}-`;
  }

  name(phase, claimId) {
    return `${CLAIM_PREFIX}${this.target}-${phase}-${claimId}.lock`;
  }

  parseName(name) {
    const parsed = parseClaimName(name);
    return parsed && parsed[0] === this.target ? [parsed[1], parsed[2]] : null;
  }

  content(claimId, owner) {
    return claimText(this.target, claimId, owner);
  }

  /**
   * Publishes claim `claimId` of `owner` in the `waiting` phase: the stage
   * `.io-mutation-stage-<claim id>-<pid>.tmp` (0600, fsynced), then — the claim name being absent,
   * as the reference requires — renamed into place.
   */
  publish(dir, claimId, owner) {
    const stage = `${STAGE_PREFIX}${claimId}-${owner.pid}.tmp`;
    try {
      writeNewFile(dir, stage, this.content(claimId, owner));
    } catch (error) {
      unlinkQuietly(dir, stage);
      throw failed(this, 'io', error);
    }
    const name = this.name('waiting', claimId);
    if (lstat(dir, name) !== null) {
      unlinkQuietly(dir, stage);
      throw failed(this, 'name-present');
    }
    try {
      fs.renameSync(dir.at(stage), dir.at(name));
    } catch (error) {
      unlinkQuietly(dir, stage);
      throw failed(this, 'io', error);
    }
  }

  message(failure) {
    return {
      unstable: 'state mutation claims did not reach a stable snapshot',
      'too-many': 'state mutation claim count exceeds its bound',
      'owner-unknown': 'state mutation claim owner cannot be inspected safely',
      'two-owners': 'state mutation arbitration admitted two owners',
      malformed: 'state mutation claim is malformed',
      'name-present': 'state mutation claim name is already present',
      io: 'state mutation claim could not be written',
    }[failure];
  }
}

/** This process's identity for its claims: four attempts 10 ms apart (§3.5 step 1). */
export function ownIdentity(processes) {
  for (let attempt = 0; attempt < 4; attempt += 1) {
    try {
      return processes.selfIdentity();
    } catch {
      if (attempt < 3) sleepMs(10);
    }
  }
  throw new ArbitrationError(IDENTITY_UNAVAILABLE);
}

/** Whether `pid` is definitely gone (`kill(pid, 0)` → ESRCH); never for a pid `kill` cannot address. */
export function pidGone(pid) {
  const n = BigInt(pid);
  if (n < 1n || n > 2147483647n) return false;
  try {
    process.kill(Number(n), 0);
    return false;
  } catch (error) {
    return error.code === 'ESRCH';
  }
}

/** Whether `name` in `dir` is a private regular file of this user. */
function privateFile(dir, name) {
  try {
    const stat = lstat(dir, name);
    return stat !== null && unsafeFileReason(stat) === null;
  } catch {
    return false;
  }
}

/** The pid of a write temporary `.io-write-<pid>-<uuid v4>.tmp`. */
export function writeTemporaryPid(name) {
  const match = /^\.io-write-([^-]*)-(.*)\.tmp$/.exec(name);
  return match && isUuidV4(match[2]) ? namePid(match[1]) : null;
}

/** `[claim id, pid]` of a mutation stage `.io-mutation-stage-<uuid v4>-<pid>.tmp`. */
function stageName(name) {
  if (!name.startsWith(STAGE_PREFIX) || !name.endsWith('.tmp')) return null;
  const rest = name.slice(STAGE_PREFIX.length, -'.tmp'.length);
  const id = rest.slice(0, 36);
  if (rest.length < 37 || rest[36] !== '-' || !isUuidV4(id)) return null;
  const pid = namePid(rest.slice(37));
  return pid === null ? null : [id, pid];
}

/** The pid of a tree quarantine `.io-remove-tree-<pid>-<ms>-<32 hex, a v4 uuid>.quarantine`. */
function treeQuarantinePid(name) {
  const match = /^\.io-remove-tree-([^-]*)-([^-]*)-(.*)\.quarantine$/.exec(name);
  if (!match) return null;
  const [, pid, ms, id] = match;
  const v4 = id.length === 32 && isHex(id) && id[12] === '4' && '89ab'.includes(id[16]);
  return /^[0-9]+$/.test(ms) && v4 ? namePid(pid) : null;
}

/** The claim id of a file quarantine `.io-remove-file-<uuid v4>.quarantine`. */
function fileQuarantineId(name) {
  const match = /^\.io-remove-file-(.*)\.quarantine$/.exec(name);
  return match && isUuidV4(match[1]) ? match[1] : null;
}

/**
 * Whether a mutation stage's owner is provably gone (§3.9): two reads must agree; an exact claim
 * text for the stage's claim id and pid is judged by its full identity, anything else (empty,
 * cut short, malformed) by the pid in its name.
 */
function stageOwnerGone(dir, name, claimId, pid, liveness) {
  let first;
  let second;
  try {
    first = readClaim(dir, name);
    second = readClaim(dir, name);
  } catch {
    return false;
  }
  if (first === null || second === null || first !== second) return false;
  let exact = null;
  try {
    const target = JSON.parse(first)?.targetSha256;
    if (isDigest(target)) exact = ownerIn(new MutationClaim(target), claimId, first);
  } catch {
    exact = null;
  }
  if (exact !== null && exact.pid === pid) return status(liveness, exact) === 'different-or-dead';
  return pidGone(pid);
}

/**
 * The crash recovery of §3.9 in the collection `dir` (module docs); with `claims`, also the claims
 * of gone owners of every target (§3.5 `recoverOrphanedMutationClaims`). Returns what it removed.
 * Throws (an `ArbitrationError`), with `claims`, those of listing a target's live claims, or
 * more than `MAX_TARGETS` targets.
 */
export function recoverDirectory(dir, liveness, claims) {
  const recovered = { writeTemporaries: 0, stages: 0, treeQuarantines: 0, fileQuarantines: 0, claims: 0 };
  // Every name this recovery concerns starts with `.io-`.
  const names = () => {
    try {
      return namesStartingWith(dir, '.io-', MAX_ENTRIES).names;
    } catch {
      return [];
    }
  };
  // Dead claims first: a file quarantine is orphaned once its remover's claim is gone.
  if (claims) {
    const before = names();
    const targets = [...new Set(before.map(parseClaimName).filter(Boolean).map(([target]) => target))].sort();
    if (targets.length > MAX_TARGETS) throw new ArbitrationError(TOO_MANY_TARGETS);
    for (const target of targets) liveClaims(dir, new MutationClaim(target), liveness, null, null);
    const count = (list) => list.filter((n) => parseClaimName(n) !== null).length;
    recovered.claims = Math.max(0, count(before) - count(names()));
  }
  const current = names();
  const claimIds = current.map(parseClaimName).filter(Boolean).map(([, , id]) => id);
  let removed = false;
  for (const name of current) {
    const writePid = writeTemporaryPid(name);
    const stage = writePid === null ? stageName(name) : null;
    const treePid = writePid === null && stage === null ? treeQuarantinePid(name) : null;
    if (writePid !== null) {
      if (pidGone(writePid) && privateFile(dir, name) && unlinkQuietly(dir, name)) {
        recovered.writeTemporaries += 1;
        removed = true;
      }
    } else if (stage !== null) {
      if (stageOwnerGone(dir, name, stage[0], stage[1], liveness) && unlinkQuietly(dir, name)) {
        recovered.stages += 1;
        removed = true;
      }
    } else if (treePid !== null) {
      let privateDir = false;
      try {
        const stat = lstat(dir, name);
        privateDir = stat !== null && fileKind(stat.mode) === S_IFDIR && Number(stat.uid) === euid() && (Number(stat.mode) & 0o077) === 0;
      } catch {
        privateDir = false;
      }
      if (pidGone(treePid) && privateDir) {
        try {
          removeTreeAt(dir, name);
          recovered.treeQuarantines += 1;
          removed = true;
        } catch {
          // Left for a later recovery.
        }
      }
    } else {
      const id = fileQuarantineId(name);
      if (id !== null && !claimIds.includes(id) && privateFile(dir, name) && unlinkQuietly(dir, name)) {
        recovered.fileQuarantines += 1;
        removed = true;
      }
    }
  }
  // Rare (only crashed writers leave anything): made durable, so that what was removed here does
  // not come back after a power loss under a pid that a new boot may reuse.
  if (removed) {
    try {
      fsyncDir(dir);
    } catch {
      // Best effort.
    }
  }
  return recovered;
}
