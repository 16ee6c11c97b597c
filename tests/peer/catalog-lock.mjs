// The portable plugin catalog lock of ghostget 0.17.2 (reference spec §5), written from the spec
// alone for the independent peer: `<store root>/locks/.catalog-mutation.lock`, taken under an
// arbitration claim (the §3.5 waiting → candidate → held protocol with its own claim files),
// published by hard link from a `.lock-publication-…` stage, fail-fast against a live holder,
// reclaimed from a dead one, released by removing the exact inode. Re-entrant in one process.

import fs from "node:fs";
import path from "node:path";
import { randomUUID } from "node:crypto";
import {
  DIGEST,
  UUID_V4_SOURCE,
  canonicalFile,
  currentProcessStartIdentity,
  processOwnerStatus,
  sha256,
  sleepSync,
} from "./identity.mjs";
import { StateStore, arbitrate, decodeUtf8, fsyncDirectory, inspectStableFile, writeExclusiveFile } from "./ghostget-store.mjs";
import { pausePoint } from "./faults.mjs";

export const CATALOG_LOCKED = "portable plugin catalog mutation is already locked";
export const LOCK_FILE_NAME = ".catalog-mutation.lock";
export const STORE_SUBDIRECTORIES = ["artifacts", "trust", "active", "locks"];
const MAX_ROUNDS = 64;
const MAX_PUBLISH_ATTEMPTS = 4;
const MIN_LOCK_BYTES = 2;
const MAX_LOCK_BYTES = 64 * 1024;

const LOCK_CLAIM = new RegExp(
  `^\\.lock-claim-([a-f0-9]{64})-(waiting|candidate|held)-(${UUID_V4_SOURCE})\\.json$`,
);
const PUBLICATION_STAGE = new RegExp(
  `^\\.lock-publication-([1-9][0-9]{0,9})-([a-f0-9]{64})-([a-f0-9]{64})-${UUID_V4_SOURCE}\\.tmp$`,
);
const TIMESTAMP = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

/** sha256("portable-provider-plugin-lock\0" + lockPath): the target of the lock's claims. */
export function lockTargetSha256(lockPath) {
  return sha256(`portable-provider-plugin-lock\u0000${lockPath}`);
}

export function lockClaimName(targetSha256, phase, claimId) {
  return `.lock-claim-${targetSha256}-${phase}-${claimId}.json`;
}

/** A lock arbitration claim: canonical JSON + "\n". */
export function lockClaimText({ targetSha256, claimId, pid, bootId, processStartId }) {
  return canonicalFile({
    bootId,
    claimId,
    kind: "portable-provider-plugin-lock-claim",
    pid,
    processStartId,
    schemaVersion: 1,
    targetSha256,
  });
}

function exactKeys(value, keys) {
  return (
    value !== null &&
    typeof value === "object" &&
    !Array.isArray(value) &&
    Object.keys(value).sort().join(",") === [...keys].sort().join(",")
  );
}

function validOwner({ pid, bootId, processStartId }) {
  return (
    Number.isSafeInteger(pid) &&
    pid >= 1 &&
    typeof bootId === "string" &&
    DIGEST.test(bootId) &&
    typeof processStartId === "string" &&
    DIGEST.test(processStartId)
  );
}

function parseJson(text) {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

export function parseLockClaimText(text, targetSha256, claimId) {
  const value = parseJson(text);
  if (
    !exactKeys(value, ["bootId", "claimId", "kind", "pid", "processStartId", "schemaVersion", "targetSha256"]) ||
    value.kind !== "portable-provider-plugin-lock-claim" ||
    value.schemaVersion !== 1 ||
    value.targetSha256 !== targetSha256 ||
    value.claimId !== claimId ||
    !validOwner(value) ||
    canonicalFile(value) !== text
  ) {
    return null;
  }
  return { pid: value.pid, bootId: value.bootId, processStartId: value.processStartId };
}

export const LOCK_CLAIMS = {
  match(name) {
    const match = LOCK_CLAIM.exec(name);
    return match === null ? null : { targetSha256: match[1], phase: match[2], claimId: match[3] };
  },
  name: lockClaimName,
  parse: parseLockClaimText,
  pause: "lock-claim-",
  messages: {
    malformed: "portable plugin lock arbitration claim is malformed",
    unknownOwner: "portable plugin lock arbitration owner cannot be inspected safely",
    unstable: "portable plugin lock arbitration did not reach a stable snapshot",
    bound: "portable plugin lock arbitration claim count exceeds its bound",
    twoOwners: "portable plugin lock arbitration admitted two owners",
  },
};

function roundTripsAsTimestamp(text) {
  return typeof text === "string" && TIMESTAMP.test(text) && !Number.isNaN(Date.parse(text)) && new Date(text).toISOString() === text;
}

/** ISO-8601 UTC with milliseconds, which must round-trip (§5 step 3). */
export function acquisitionTime(now) {
  const date = new Date(now);
  const text = Number.isNaN(date.getTime()) ? "" : date.toISOString();
  if (!roundTripsAsTimestamp(text)) throw new Error("portable plugin catalog mutation lock time is invalid");
  return text;
}

/** The catalog lock record: canonical JSON + "\n" (Appendix A item 5). */
export function catalogLockRecordText({ acquiredAt, pid, bootId, processStartId }) {
  return canonicalFile({ schemaVersion: 1, scope: "catalog-mutation", acquiredAt, pid, bootId, processStartId });
}

/** Validates lock-file text; its owner, or null when it is not an exact, canonical record. */
export function parseCatalogLockRecordText(text) {
  const value = parseJson(text);
  if (
    !exactKeys(value, ["acquiredAt", "bootId", "pid", "processStartId", "schemaVersion", "scope"]) ||
    value.schemaVersion !== 1 ||
    value.scope !== "catalog-mutation" ||
    !roundTripsAsTimestamp(value.acquiredAt) ||
    !validOwner(value) ||
    canonicalFile(value) !== text
  ) {
    return null;
  }
  return { pid: value.pid, bootId: value.bootId, processStartId: value.processStartId };
}

/**
 * §5 step 1 ensureStore for the store root `<stateHome>/provider-plugins` (§6B.1): the root and
 * its four sub-directories as private state directories. Returns the physical `locks` directory
 * and lock path.
 */
export function ensureCatalogStore(stateHome) {
  const store = new StateStore(stateHome);
  store.ensurePrivateStateDirectory("provider-plugins");
  for (const name of STORE_SUBDIRECTORIES) store.ensurePrivateStateDirectory(`provider-plugins/${name}`);
  const locksDir = path.join(fs.realpathSync(store.resolve("provider-plugins")), "locks");
  return { locksDir, lockPath: path.join(locksDir, LOCK_FILE_NAME) };
}

/**
 * Publishes `bytes` under `name` exclusively: stage `.lock-publication-<pid>-<bootId>-
 * <processStartId>-<uuid>.tmp` (0600, fsync), hard link to the name, unlink the stage, fsync the
 * directory. Returns the published inode's stat, or null when the name existed (EEXIST).
 */
function publishExclusively(dir, name, bytes, owner, pause) {
  const stage = path.join(dir, `.lock-publication-${owner.pid}-${owner.bootId}-${owner.processStartId}-${randomUUID()}.tmp`);
  const stat = writeExclusiveFile(stage, bytes);
  pausePoint(`${pause}-stage`);
  let published = true;
  try {
    fs.linkSync(stage, path.join(dir, name));
    pausePoint(`${pause}-linked`);
  } catch (error) {
    if (error.code !== "EEXIST") throw error;
    published = false;
  } finally {
    fs.unlinkSync(stage);
    fsyncDirectory(dir);
  }
  return published ? stat : null;
}

/**
 * Removes publication stages whose owner (encoded in the name) is not live; an owner that cannot
 * be inspected fails.
 */
export function removeStalePublicationStages(dir) {
  let removed = 0;
  for (const name of fs.readdirSync(dir)) {
    const match = PUBLICATION_STAGE.exec(name);
    if (match === null) continue;
    const status = processOwnerStatus({ pid: Number(match[1]), bootId: match[2], processStartId: match[3] });
    if (status === "unknown") throw new Error("portable plugin lock publication owner cannot be inspected safely");
    if (status === "exact-live-owner") continue;
    try {
      fs.unlinkSync(path.join(dir, name));
      removed += 1;
    } catch (error) {
      if (error.code !== "ENOENT") throw error;
    }
  }
  if (removed > 0) fsyncDirectory(dir);
  return removed;
}

/**
 * Removes the exact inode `expected` (a bigint stat) at `target`: rename to
 * `.lock-reclaim-<pid>-<uuid>`, verify dev/ino, unlink, fsync. Returns false when `target` is
 * absent. On a different inode the file is put back (link, never over another file) and
 * `mismatch` is thrown.
 */
function removeExactInode(dir, target, expected, mismatch, pause) {
  const reclaim = path.join(dir, `.lock-reclaim-${process.pid}-${randomUUID()}`);
  try {
    fs.renameSync(target, reclaim);
  } catch (error) {
    if (error.code === "ENOENT") return false;
    throw error;
  }
  pausePoint(pause);
  const moved = fs.lstatSync(reclaim, { bigint: true });
  if (moved.dev !== expected.dev || moved.ino !== expected.ino) {
    try {
      fs.linkSync(reclaim, target);
    } catch {
      // another lock was published meanwhile; the moved file stays under the reclaim name
    }
    throw new Error(mismatch);
  }
  fs.unlinkSync(reclaim);
  fsyncDirectory(dir);
  return true;
}

/** Reads the existing lock: {owner, stat}, null when it vanished or changed while read. */
function readCatalogLock(lockPath) {
  const read = inspectStableFile(lockPath, MAX_LOCK_BYTES);
  if (read.status === "absent" || read.status === "changed") return null;
  if (read.status !== "present" || read.bytes.length < MIN_LOCK_BYTES) {
    throw new Error("portable plugin catalog mutation lock is malformed");
  }
  let owner = null;
  try {
    owner = parseCatalogLockRecordText(decodeUtf8(read.bytes));
  } catch {
    // invalid UTF-8
  }
  if (owner === null) throw new Error("portable plugin catalog mutation lock is malformed");
  return { owner, stat: read.stat };
}

/**
 * §5 step 3: acquire the lock file. Returns {locksDir, lockPath, stat} of the published lock.
 * Throws CATALOG_LOCKED at once when a live process holds it.
 */
export function acquireCatalogLock(locksDir, lockPath, now) {
  const owner = { pid: process.pid, ...currentProcessStartIdentity() };
  const record = Buffer.from(catalogLockRecordText({ acquiredAt: acquisitionTime(now), ...owner }));
  const targetSha256 = lockTargetSha256(lockPath);
  for (let round = 0; round < MAX_ROUNDS; round += 1) {
    removeStalePublicationStages(locksDir);
    const claimId = randomUUID();
    const claimText = Buffer.from(lockClaimText({ targetSha256, claimId, ...owner }));
    const claim = arbitrate(locksDir, targetSha256, claimId, LOCK_CLAIMS, (waiting) => {
      if (publishExclusively(locksDir, path.basename(waiting), claimText, owner, "lock-claim") === null) {
        throw new Error("portable plugin lock arbitration claim name is already present");
      }
    });
    if (claim === null) {
      sleepSync(5);
      continue;
    }
    try {
      for (let attempt = 0; attempt < MAX_PUBLISH_ATTEMPTS; attempt += 1) {
        const stat = publishExclusively(locksDir, LOCK_FILE_NAME, record, owner, "lock");
        if (stat !== null) return { locksDir, lockPath, stat };
        const existing = readCatalogLock(lockPath);
        if (existing === null) continue;
        const status = processOwnerStatus(existing.owner);
        if (status === "exact-live-owner") throw new Error(CATALOG_LOCKED);
        if (status === "unknown") throw new Error("portable plugin catalog mutation lock owner cannot be inspected safely");
        removeExactInode(locksDir, lockPath, existing.stat, "portable plugin catalog mutation lock changed before reclaim", "lock-reclaim");
      }
    } finally {
      claim.release();
    }
  }
  throw new Error("portable plugin catalog mutation lock could not be acquired");
}

/** §5 step 5: remove the exact lock inode. */
export function releaseCatalogLock({ locksDir, lockPath, stat }) {
  const message = "portable plugin catalog mutation lock changed before release";
  if (!removeExactInode(locksDir, lockPath, stat, message, "lock-release")) throw new Error(message);
}

const heldLocks = new Set(); // lock paths held by this process (§5 step 2)

/**
 * withPortableProviderPluginCatalogLock for the store under `stateHome`: ensure the store, take
 * the lock (or run directly when this process already holds it), run `operation` synchronously,
 * release in `finally`.
 */
export function withCatalogLock(stateHome, now, operation) {
  const { locksDir, lockPath } = ensureCatalogStore(stateHome);
  if (heldLocks.has(lockPath)) return runSynchronously(operation);
  const lock = acquireCatalogLock(locksDir, lockPath, now);
  heldLocks.add(lockPath);
  try {
    pausePoint("lock-acquired");
    return runSynchronously(operation);
  } finally {
    heldLocks.delete(lockPath);
    releaseCatalogLock(lock);
  }
}

function runSynchronously(operation) {
  const result = operation();
  if (result !== null && typeof result === "object" && typeof result.then === "function") {
    result.then(
      () => {},
      () => {},
    );
    throw new Error("portable plugin catalog lock callback must complete synchronously");
  }
  return result;
}
