// An independent implementation of ghostget 0.17.2's private state store primitives, written from
// the reference spec (/work/shared/spec/reference-behaviour.md) alone, to stand in for a running
// ghostget in stress tests of proclease. It shares no code with proclease.
//
//   §3.1  minimal state-root claiming (marker `.io-state.json` published by stage + link)
//   §3.2  state-path rules (recognised first segment, private 0700 directories, private files)
//   §3.3  createPrivateJsonIfAbsent / writePrivateJsonIfUnchanged /
//         removePrivateStateFileIfUnchanged / readPrivateStateFileIfPresent
//   §3.5  per-leaf mutation claims (waiting → candidate → held), "list live claims",
//         recoverOrphanedMutationClaims
//   §3.7  temp + fsync + link/rename + directory fsync; removal through a quarantine name
//   §3.9  crash recovery of dead write temporaries, mutation stages and tree quarantines
//
// Every function is synchronous. Errors carry the spec's exact messages where it fixes one; the
// few messages the spec leaves open are listed in README.md ("Ambiguities").

import fs from "node:fs";
import path from "node:path";
import { randomUUID } from "node:crypto";
import {
  DIGEST,
  UUID_V4_SOURCE,
  canonicalFile,
  currentProcessStartIdentity,
  pidDefinitelyAbsent,
  processOwnerStatus,
  sha256,
  sleepSync,
} from "./identity.mjs";
import { pausePoint } from "./faults.mjs";

const { O_RDONLY, O_WRONLY, O_CREAT, O_EXCL, O_NOFOLLOW, O_NONBLOCK, O_DIRECTORY } = fs.constants;

const MIB = 1024 * 1024;
export const MAX_WRITTEN_BYTES = 2 * MIB; // §3.2
export const DEFAULT_EXPECTED_CURRENT_BYTES = 2 * MIB; // §3.2
export const MAX_EXPECTED_CURRENT_BYTES = 4 * MIB; // §3.3
export const MAX_CLAIM_BYTES = 4096; // §3.5
export const MAX_CLAIMS_PER_TARGET = 1024; // §3.5
export const MAX_CLAIM_SNAPSHOT_ATTEMPTS = 8; // §3.5
export const MAX_RECOVERY_TARGETS = 10_000; // §3.5
export const MAX_STATE_PATH_SEGMENTS = 32; // §3.2

/** §3.1: the recognised state directory names of 0.17.2 (the newer bracketed ones excluded). */
export const STATE_DIRECTORY_NAMES = new Set([
  "adapter-generations", "adapters", "auth", "browser-snapshots", "captures", "derivations",
  "idempotency", "linked-device-stores", "messaging", "omni-read-projections", "plan-assets",
  "plans", "provider-plugin-state", "provider-plugins", "read-projection-control",
  "read-projections", "recovery", "run-journals", "runs", "session-secrets", "tools",
]);

export const STATE_MARKER = ".io-state.json";
export const STATE_MARKER_TEXT = '{"kind":"io-state","schemaVersion":1}\n';

export const STATE_MUTATION_ACTIVE = "state file mutation is already active"; // §3.4

const PID_SOURCE = "([1-9][0-9]{0,9})";
const WRITE_TEMPORARY = new RegExp(`^\\.io-write-${PID_SOURCE}-${UUID_V4_SOURCE}\\.tmp$`);
const MUTATION_STAGE = new RegExp(`^\\.io-mutation-stage-(${UUID_V4_SOURCE})-${PID_SOURCE}\\.tmp$`);
const MUTATION_CLAIM = new RegExp(
  `^\\.io-mutation-([a-f0-9]{64})-(waiting|candidate|held)-(${UUID_V4_SOURCE})\\.lock$`,
);
const TREE_QUARANTINE = /^\.io-remove-tree-([1-9][0-9]{0,9})-(\d+)-([0-9a-f]{12}4[0-9a-f]{3}[89ab][0-9a-f]{15})\.quarantine$/;

// ---------------------------------------------------------------------------------------------
// Filesystem helpers.

const uid = process.getuid();

function lstatOrNull(target) {
  try {
    return fs.lstatSync(target, { bigint: true });
  } catch (error) {
    if (error.code === "ENOENT") return null;
    throw error;
  }
}

/** fsync a directory (durability of the names in it, §3.7). */
export function fsyncDirectory(dir) {
  const fd = fs.openSync(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
  try {
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}

function unlinkIfPresent(target) {
  try {
    fs.unlinkSync(target);
    return true;
  } catch (error) {
    if (error.code === "ENOENT") return false;
    throw error;
  }
}

function writeAll(fd, bytes) {
  let offset = 0;
  while (offset < bytes.length) offset += fs.writeSync(fd, bytes, offset, bytes.length - offset);
}

/**
 * Creates `target` exclusively (O_CREAT|O_EXCL|O_NOFOLLOW, 0600, fchmod 0600), writes `bytes` and
 * fsyncs it. `beforeWrite` runs between the creation and the write (fault injection). Returns
 * the file's stat (bigint).
 */
export function writeExclusiveFile(target, bytes, beforeWrite = () => {}) {
  const fd = fs.openSync(target, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0o600);
  let written = false;
  try {
    fs.fchmodSync(fd, 0o600);
    beforeWrite();
    writeAll(fd, bytes);
    fs.fsyncSync(fd);
    written = true;
    return fs.fstatSync(fd, { bigint: true });
  } finally {
    fs.closeSync(fd);
    if (!written) unlinkIfPresent(target);
  }
}

function sameStat(a, b) {
  return (
    a.dev === b.dev &&
    a.ino === b.ino &&
    a.size === b.size &&
    a.mtimeNs === b.mtimeNs &&
    a.ctimeNs === b.ctimeNs &&
    a.mode === b.mode
  );
}

function isPrivateOwnedRegular(st) {
  return st.isFile() && Number(st.uid) === uid && (Number(st.mode) & 0o077) === 0;
}

/**
 * Reads a private, current-user regular file without following symlinks (O_NOFOLLOW|O_NONBLOCK),
 * bounded by `maxBytes`, checking that dev, ino, size, mtime, ctime and mode did not change while
 * it was read (§3.2). Returns {status, bytes?, stat?} with status one of "present", "absent",
 * "unsafe" (symlink, not regular, not owned, group/other bits), "oversized", "changed".
 */
export function inspectStableFile(target, maxBytes) {
  let fd;
  try {
    fd = fs.openSync(target, O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
  } catch (error) {
    if (error.code === "ENOENT") return { status: "absent" };
    if (error.code === "ELOOP") return { status: "unsafe" };
    throw error;
  }
  try {
    const before = fs.fstatSync(fd, { bigint: true });
    if (!isPrivateOwnedRegular(before)) return { status: "unsafe" };
    if (before.size > BigInt(maxBytes)) return { status: "oversized" };
    const buffer = Buffer.alloc(Number(before.size) + 1);
    let length = 0;
    while (length < buffer.length) {
      const count = fs.readSync(fd, buffer, length, buffer.length - length, null);
      if (count === 0) break;
      length += count;
    }
    const after = fs.fstatSync(fd, { bigint: true });
    if (!sameStat(before, after) || length !== Number(before.size)) return { status: "changed" };
    return { status: "present", bytes: buffer.subarray(0, length), stat: after };
  } finally {
    fs.closeSync(fd);
  }
}

/** `inspectStableFile` for state files: {bytes, stat}, null when absent, else the §3.2 errors. */
export function readStableFile(target, maxBytes) {
  const read = inspectStableFile(target, maxBytes);
  switch (read.status) {
    case "present":
      return read;
    case "absent":
      return null;
    case "unsafe":
      throw new Error("state file is not a private current-user regular file");
    case "oversized":
      throw new Error("state file exceeds its byte bound");
    default:
      throw new Error("state file changed while it was read");
  }
}

const strictUtf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
export function decodeUtf8(bytes) {
  return strictUtf8.decode(bytes);
}

// ---------------------------------------------------------------------------------------------
// §3.1 state root (minimal) and §3.2 path rules.

const validatedRoots = new Map(); // absolute root → "dev:ino"

function createMissingDirectories(target) {
  const missing = [];
  let current = target;
  while (lstatOrNull(current) === null) {
    missing.unshift(current);
    const parent = path.dirname(current);
    if (parent === current) break;
    current = parent;
  }
  for (const dir of missing) makePrivateDirectory(dir);
}

/** mkdir 0700 + chmod 0700 + fsync + fsync parent (§3.7). EEXIST is left to the caller's checks. */
function makePrivateDirectory(dir) {
  try {
    fs.mkdirSync(dir, { mode: 0o700 });
  } catch (error) {
    if (error.code === "EEXIST") return false;
    throw error;
  }
  fs.chmodSync(dir, 0o700);
  fsyncDirectory(dir);
  fsyncDirectory(path.dirname(dir));
  return true;
}

/**
 * True when the marker is present and exact. Its bytes never change, but another process that
 * publishes it (link, then unlink of its stage) moves its ctime: a read overlapping that is retried.
 */
function validateMarker(root) {
  let read = inspectStableFile(path.join(root, STATE_MARKER), 256);
  for (let retry = 0; retry < 8 && read.status === "changed"; retry += 1) {
    read = inspectStableFile(path.join(root, STATE_MARKER), 256);
  }
  if (read.status === "absent") return false;
  if (read.status !== "present" || read.bytes.toString("latin1") !== STATE_MARKER_TEXT) {
    throw new Error(`GHOSTGET_STATE_HOME ownership marker is invalid: ${root}`);
  }
  return true;
}

/**
 * §3.1 ensureClaimedStateRoot, kept minimal: create the root (0700) if absent, require an owned
 * real directory, and publish the marker through `.io-state.stage-<pid>-<uuid>.json` + link when
 * it is absent. A claimed root must be mode 0700. The identity is pinned per process.
 */
export function claimStateRoot(root) {
  if (!path.isAbsolute(root)) throw new Error(`GHOSTGET_STATE_HOME must be absolute: ${root}`);
  createMissingDirectories(root);
  const st = fs.lstatSync(root, { bigint: true });
  if (!st.isDirectory() || Number(st.uid) !== uid) {
    throw new Error(`GHOSTGET_STATE_HOME must be an owned real directory: ${root}`);
  }
  const identity = `${st.dev}:${st.ino}`;
  const pinned = validatedRoots.get(root);
  if (pinned !== undefined && pinned !== identity) {
    throw new Error(`GHOSTGET_STATE_HOME changed identity after validation: ${root}`);
  }
  if (validateMarker(root)) {
    if ((Number(st.mode) & 0o777) !== 0o700) {
      throw new Error(`GHOSTGET_STATE_HOME must be private (mode 0700) before trusted state is read: ${root}`);
    }
  } else {
    fs.chmodSync(root, 0o700);
    fsyncDirectory(root);
    const stage = path.join(root, `.io-state.stage-${process.pid}-${randomUUID()}.json`);
    writeExclusiveFile(stage, Buffer.from(STATE_MARKER_TEXT));
    try {
      fs.linkSync(stage, path.join(root, STATE_MARKER));
    } catch (error) {
      if (error.code !== "EEXIST") throw error;
      validateMarker(root);
    } finally {
      fsyncDirectory(root);
      unlinkIfPresent(stage);
    }
  }
  validatedRoots.set(root, identity);
  return root;
}

function safeSegment(segment) {
  return (
    segment.length > 0 &&
    segment !== "." &&
    segment !== ".." &&
    !/[/\\\u0000]/.test(segment) &&
    Buffer.byteLength(segment, "utf8") <= 255
  );
}

/** Splits a path relative to the root into validated segments (§3.2). */
function stateSegments(relative, kind) {
  const message = kind === "directory"
    ? "state directory is outside the owned state layout"
    : "state path is outside the owned state layout";
  const segments = relative.split("/");
  if (
    segments.length === 0 ||
    segments.length > MAX_STATE_PATH_SEGMENTS ||
    !segments.every(safeSegment) ||
    !STATE_DIRECTORY_NAMES.has(segments[0])
  ) {
    throw new Error(message);
  }
  return segments;
}

function checkStateDirectory(dir, st) {
  if (st.isSymbolicLink()) throw new Error(`ghostget state path contains a symbolic link: ${dir}`);
  if (!st.isDirectory()) throw new Error(`ghostget state ancestor is not a directory: ${dir}`);
  if (Number(st.uid) !== uid || (Number(st.mode) & 0o777) !== 0o700) {
    throw new Error(`ghostget state directory must be owned and private (mode 0700): ${dir}`);
  }
}

function identityOf(st) {
  return { device: String(st.dev), inode: String(st.ino) };
}

/**
 * Walks the directory segments below the root; creates missing ones (0700) when `create`, else
 * returns null at the first missing one. Returns {dir, identity} of the final directory.
 */
function walkStateDirectory(root, segments, create) {
  let dir = root;
  let st = null;
  for (const segment of segments) {
    dir = path.join(dir, segment);
    st = lstatOrNull(dir);
    if (st === null) {
      if (!create) return null;
      makePrivateDirectory(dir);
      st = fs.lstatSync(dir, { bigint: true });
    }
    checkStateDirectory(dir, st);
  }
  return { dir, identity: identityOf(st) };
}

function verifyDirectoryIdentity(dir, identity) {
  const st = lstatOrNull(dir);
  if (st === null || !st.isDirectory() || String(st.dev) !== identity.device || String(st.ino) !== identity.inode) {
    throw new Error("state directory identity does not match its expectation");
  }
}

// ---------------------------------------------------------------------------------------------
// §3.9 crash recovery in a bound directory.

/** Dead write temporaries: pid ESRCH and a private owned regular file. Returns the count removed. */
export function recoverWriteTemporaries(dir, names = fs.readdirSync(dir)) {
  let removed = 0;
  for (const name of names) {
    const match = WRITE_TEMPORARY.exec(name);
    if (match === null || !pidDefinitelyAbsent(Number(match[1]))) continue;
    const st = lstatOrNull(path.join(dir, name));
    if (st === null || !isPrivateOwnedRegular(st)) continue;
    if (unlinkIfPresent(path.join(dir, name))) removed += 1;
  }
  if (removed > 0) fsyncDirectory(dir);
  return removed;
}

/** One snapshot of a stage: its bytes and stat, or null when absent, unsafe or unstable. */
function stageSnapshot(target) {
  const read = inspectStableFile(target, MAX_CLAIM_BYTES);
  if (read.status !== "present") return null;
  const now = lstatOrNull(target);
  return now !== null && sameStat(now, read.stat) ? read : null;
}

/**
 * Dead mutation stages: two stable snapshots agree, and the owner is gone — a canonical stage
 * (an exact claim text for the claimId and pid of its name) needs its full identity to be
 * different-or-dead, a malformed or empty stage needs kill(pid, 0) → ESRCH.
 */
export function recoverMutationStages(dir, names = fs.readdirSync(dir)) {
  let removed = 0;
  for (const name of names) {
    const match = MUTATION_STAGE.exec(name);
    if (match === null) continue;
    const [, claimId, pidText] = match;
    const target = path.join(dir, name);
    const first = stageSnapshot(target);
    const second = first === null ? null : stageSnapshot(target);
    if (second === null || !sameStat(first.stat, second.stat) || !first.bytes.equals(second.bytes)) continue;
    const claim = parseMutationClaimText(second.bytes.toString("utf8"), null, claimId);
    let gone;
    if (claim !== null && claim.pid === Number(pidText)) {
      gone = processOwnerStatus(claim) === "different-or-dead";
    } else {
      gone = pidDefinitelyAbsent(Number(pidText));
    }
    if (gone && unlinkIfPresent(target)) removed += 1;
  }
  if (removed > 0) fsyncDirectory(dir);
  return removed;
}

/** Tree-removal quarantines of a dead pid that are private, owned directories. */
export function recoverTreeQuarantines(dir, names = fs.readdirSync(dir)) {
  let removed = 0;
  for (const name of names) {
    const match = TREE_QUARANTINE.exec(name);
    if (match === null || !pidDefinitelyAbsent(Number(match[1]))) continue;
    const target = path.join(dir, name);
    const st = lstatOrNull(target);
    if (st === null || !st.isDirectory() || Number(st.uid) !== uid || (Number(st.mode) & 0o777) !== 0o700) continue;
    fs.rmSync(target, { recursive: true, force: true });
    removed += 1;
  }
  if (removed > 0) fsyncDirectory(dir);
  return removed;
}

// ---------------------------------------------------------------------------------------------
// §3.5 per-leaf mutation claims.

export function mutationTargetSha256(leaf) {
  return sha256(`io-state-mutation\u0000${leaf}`);
}

export function mutationClaimName(targetSha256, phase, claimId) {
  return `.io-mutation-${targetSha256}-${phase}-${claimId}.lock`;
}

export function mutationStageName(claimId, pid = process.pid) {
  return `.io-mutation-stage-${claimId}-${pid}.tmp`;
}

/** The claim text: JSON.stringify in insertion order (not canonical) + "\n" (Appendix A item 6). */
export function mutationClaimText({ targetSha256, claimId, pid, bootId, processStartId }) {
  return `${JSON.stringify({
    kind: "io-state-mutation-claim",
    schemaVersion: 1,
    targetSha256,
    claimId,
    pid,
    bootId,
    processStartId,
  })}\n`;
}

/**
 * Parses a claim text; null unless it is exactly the text `mutationClaimText` writes for its
 * fields, with the expected target (when given) and claimId, pid a safe integer ≥ 1 and 64-hex
 * digests.
 */
export function parseMutationClaimText(text, targetSha256, claimId) {
  let value;
  try {
    value = JSON.parse(text);
  } catch {
    return null;
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) return null;
  const { pid, bootId, processStartId } = value;
  if (
    value.kind !== "io-state-mutation-claim" ||
    value.schemaVersion !== 1 ||
    typeof value.targetSha256 !== "string" ||
    !DIGEST.test(value.targetSha256) ||
    (targetSha256 !== null && value.targetSha256 !== targetSha256) ||
    value.claimId !== claimId ||
    !Number.isSafeInteger(pid) ||
    pid < 1 ||
    typeof bootId !== "string" ||
    !DIGEST.test(bootId) ||
    typeof processStartId !== "string" ||
    !DIGEST.test(processStartId)
  ) {
    return null;
  }
  const claim = { targetSha256: value.targetSha256, claimId, pid, bootId, processStartId };
  return mutationClaimText(claim) === text ? claim : null;
}

/**
 * An arbitration claim family. §3.5 defines the protocol for state mutation claims; §5 reuses it
 * ("same waiting→candidate→held protocol") for the catalog lock's claims, with its own names,
 * content and messages.
 *   match(name)                   → {targetSha256, phase, claimId} | null
 *   name(targetSha256, phase, id) → file name
 *   parse(text, targetSha256, id) → owner {pid, bootId, processStartId} | null (malformed)
 *   pause                         → prefix of the pause-point names of the phases
 *   messages                      → {malformed, unknownOwner, unstable, bound, twoOwners}
 */
export const MUTATION_CLAIMS = {
  match(name) {
    const match = MUTATION_CLAIM.exec(name);
    return match === null ? null : { targetSha256: match[1], phase: match[2], claimId: match[3] };
  },
  name: mutationClaimName,
  parse: parseMutationClaimText,
  pause: "",
  messages: {
    malformed: "state mutation claim is malformed",
    unknownOwner: "state mutation claim owner cannot be inspected safely",
    unstable: "state mutation claims did not reach a stable snapshot",
    bound: "state mutation claim count exceeds its bound",
    twoOwners: "state mutation arbitration admitted two owners",
  },
};

/** Reads one claim file; null when it vanished or moved (was renamed) while read. */
function readClaimFile(target, scheme) {
  const read = inspectStableFile(target, MAX_CLAIM_BYTES);
  if (read.status === "absent" || read.status === "changed") return null;
  if (read.status !== "present") throw new Error(scheme.messages.malformed);
  const now = lstatOrNull(target);
  if (now === null || now.ino !== read.stat.ino || now.dev !== read.stat.dev) return null;
  try {
    return decodeUtf8(read.bytes);
  } catch {
    throw new Error(scheme.messages.malformed);
  }
}

function ownerStatusWithRetries(owner, unknownMessage) {
  let status = processOwnerStatus(owner);
  for (let extra = 0; extra < 3 && status === "unknown"; extra += 1) {
    sleepSync(10);
    status = processOwnerStatus(owner);
  }
  if (status === "unknown") throw new Error(unknownMessage);
  return status;
}

/**
 * "List live claims" for one target (§3.5): a stable snapshot in at most 8 attempts — a claim
 * that vanished or moved while read forces another attempt, and so does removing a claim whose
 * owner is different-or-dead; an owner still unknown after 3 more probes (10 ms apart) fails.
 * Returns [{name, phase, claimId, owner}] sorted by name.
 */
export function listLiveClaims(dir, targetSha256, scheme = MUTATION_CLAIMS) {
  for (let attempt = 0; attempt < MAX_CLAIM_SNAPSHOT_ATTEMPTS; attempt += 1) {
    const claims = fs
      .readdirSync(dir)
      .map((name) => ({ name, parsed: scheme.match(name) }))
      .filter(({ parsed }) => parsed !== null && parsed.targetSha256 === targetSha256)
      .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    if (claims.length > MAX_CLAIMS_PER_TARGET) throw new Error(scheme.messages.bound);
    let stable = true;
    let removed = false;
    const live = [];
    for (const { name, parsed } of claims) {
      const text = readClaimFile(path.join(dir, name), scheme);
      if (text === null) {
        stable = false;
        continue;
      }
      const owner = scheme.parse(text, targetSha256, parsed.claimId);
      if (owner === null) throw new Error(scheme.messages.malformed);
      if (ownerStatusWithRetries(owner, scheme.messages.unknownOwner) === "different-or-dead") {
        unlinkIfPresent(path.join(dir, name));
        removed = true;
        stable = false;
        continue;
      }
      live.push({ name, phase: parsed.phase, claimId: parsed.claimId, owner });
    }
    if (removed) fsyncDirectory(dir);
    if (stable) return live;
  }
  throw new Error(scheme.messages.unstable);
}

/** recoverOrphanedMutationClaims (§3.5): list live claims of every target that has a claim file. */
export function recoverOrphanedMutationClaims(dir, names = fs.readdirSync(dir)) {
  const targets = new Set();
  let before = 0;
  for (const name of names) {
    const parsed = MUTATION_CLAIMS.match(name);
    if (parsed === null) continue;
    targets.add(parsed.targetSha256);
    before += 1;
  }
  if (targets.size > MAX_RECOVERY_TARGETS) throw new Error("state mutation recovery exceeds its target bound");
  let after = 0;
  for (const target of [...targets].sort()) after += listLiveClaims(dir, target).length;
  return before - after;
}

/**
 * The arbitration of §3.5 steps 2–4 once `publishWaiting(path)` has published the own claim
 * under its `waiting` name. Returns a held claim {claimId, release()} or null when lost (the own
 * claim is then already released). Release = unlink the current name + fsync, ENOENT ignored.
 */
export function arbitrate(dir, targetSha256, claimId, scheme, publishWaiting) {
  let current = path.join(dir, scheme.name(targetSha256, "waiting", claimId));
  publishWaiting(current);

  const release = () => {
    unlinkIfPresent(current);
    fsyncDirectory(dir);
  };
  const others = () => listLiveClaims(dir, targetSha256, scheme).filter((claim) => claim.claimId !== claimId);
  const advance = (phase) => {
    const next = path.join(dir, scheme.name(targetSha256, phase, claimId));
    fs.renameSync(current, next);
    current = next;
    fsyncDirectory(dir);
  };

  let held = false;
  let failed = false;
  try {
    pausePoint(`${scheme.pause}waiting`);
    // 2. waiting: lose to any other claim past waiting, or waiting with a smaller claimId.
    if (others().some((claim) => claim.phase !== "waiting" || claim.claimId < claimId)) return null;
    advance("candidate");
    pausePoint(`${scheme.pause}candidate`);
    // 3. candidate: lose to a held claim or any smaller claimId.
    if (others().some((claim) => claim.phase === "held" || claim.claimId < claimId)) return null;
    advance("held");
    // 4. held: another held claim means the protocol failed.
    if (others().some((claim) => claim.phase === "held")) throw new Error(scheme.messages.twoOwners);
    pausePoint(`${scheme.pause}held`);
    held = true;
  } catch (error) {
    failed = true;
    throw error;
  } finally {
    if (!held) {
      try {
        release();
      } catch (error) {
        // A lost arbitration must not leave a claim behind; an earlier error is the one to report.
        if (!failed) throw error;
      }
    }
  }
  return { claimId, release };
}

function ownIdentityForMutation() {
  for (let attempt = 0; attempt < 4; attempt += 1) {
    try {
      return { pid: process.pid, ...currentProcessStartIdentity() };
    } catch {
      if (attempt < 3) sleepSync(10);
    }
  }
  throw new Error("state mutation process identity is unavailable");
}

/**
 * Arbitrates the per-leaf mutation claim for `leaf` in `dir` (§3.5): recover dead stages, publish
 * `waiting` through `.io-mutation-stage-<claimId>-<pid>.tmp` + rename, then `arbitrate`.
 * Returns a held claim {claimId, release()} or null when arbitration is lost.
 */
export function acquireMutationClaim(dir, leaf, claimId = randomUUID()) {
  recoverMutationStages(dir);
  const owner = ownIdentityForMutation();
  const targetSha256 = mutationTargetSha256(leaf);
  const text = mutationClaimText({ targetSha256, claimId, ...owner });
  return arbitrate(dir, targetSha256, claimId, MUTATION_CLAIMS, (waiting) => {
    const stage = path.join(dir, mutationStageName(claimId));
    writeExclusiveFile(stage, Buffer.from(text), () => pausePoint("stage-empty"));
    pausePoint("stage");
    if (lstatOrNull(waiting) !== null) {
      unlinkIfPresent(stage);
      throw new Error("state mutation claim name is already present");
    }
    fs.renameSync(stage, waiting);
    fsyncDirectory(dir);
  });
}

// ---------------------------------------------------------------------------------------------
// §3.3 the store.

function validateExpectedHash(hash) {
  if (typeof hash !== "string" || !/^[0-9a-f]{64}$/.test(hash)) {
    throw new Error("expected private state content hash is invalid");
  }
}

function encodeRecord(value) {
  const bytes = Buffer.from(canonicalFile(value), "utf8");
  if (bytes.length > MAX_WRITTEN_BYTES) throw new Error("state file content exceeds its byte bound");
  return bytes;
}

/** A write temporary `.io-write-<pid>-<uuid>.tmp` in `dir` (§3.3). */
function writeTemporary(dir, bytes) {
  const temp = path.join(dir, `.io-write-${process.pid}-${randomUUID()}.tmp`);
  writeExclusiveFile(temp, bytes);
  pausePoint("write-temp");
  return temp;
}

function discardTemporary(dir, temp) {
  if (unlinkIfPresent(temp)) fsyncDirectory(dir);
}

/** Releases a claim; after a durable mutation its failures are ignored (§3.5 step 5). */
function releaseClaim(claim, durable) {
  if (claim === null) return;
  try {
    claim.release();
  } catch (error) {
    if (!durable) throw error;
  }
}

export class StateStore {
  /** `stateHome`: the absolute state root (§3.1); claimed on first use. */
  constructor(stateHome) {
    this.root = path.resolve(stateHome);
  }

  /** Resolves a state-relative file path: {segments, leaf, dirSegments}. */
  #file(relative) {
    const segments = stateSegments(relative, "file");
    if (segments.length < 2) throw new Error("state path is outside the owned state layout");
    return { segments, leaf: segments[segments.length - 1], dirSegments: segments.slice(0, -1) };
  }

  /** Path of a state-relative name. */
  resolve(relative) {
    return path.join(this.root, ...relative.split("/"));
  }

  /** ensurePrivateStateDirectory (§3.3): creates missing directories 0700, returns {device, inode}. */
  ensurePrivateStateDirectory(relative) {
    claimStateRoot(this.root);
    return walkStateDirectory(this.root, stateSegments(relative, "directory"), true).identity;
  }

  /** readPrivateStateFileIfPresent (§3.3): text, or null when the file or a parent is absent. */
  readPrivateStateFileIfPresent(relative, maxBytes, label) {
    const segments = relative.split("/");
    if (segments.length < 2) throw new Error(`${label} must be nested inside an ghostget state directory`);
    const { leaf, dirSegments } = this.#file(relative);
    claimStateRoot(this.root);
    const full = this.resolve(relative);
    let read;
    try {
      const walked = walkStateDirectory(this.root, dirSegments, false);
      if (walked === null) return null;
      read = readStableFile(path.join(walked.dir, leaf), maxBytes);
    } catch (error) {
      throw new Error(`could not safely open optional ${label}: ${full} (${error.message})`);
    }
    if (read === null) return null;
    try {
      return decodeUtf8(read.bytes);
    } catch {
      throw new Error(`optional ${label} is not valid UTF-8`);
    }
  }

  /**
   * createPrivateJsonIfAbsent (§3.3): temp + mutation claim + link. Never overwrites.
   * Lost arbitration → error "state file mutation is already active".
   */
  createPrivateJsonIfAbsent(relative, value) {
    const bytes = encodeRecord(value);
    const { leaf, dirSegments } = this.#file(relative);
    claimStateRoot(this.root);
    const { dir, identity } = walkStateDirectory(this.root, dirSegments, true);
    recoverWriteTemporaries(dir);
    const temp = writeTemporary(dir, bytes);
    let claim = null;
    let durable = false;
    try {
      claim = acquireMutationClaim(dir, leaf);
      if (claim === null) throw new Error(STATE_MUTATION_ACTIVE);
      verifyDirectoryIdentity(dir, identity);
      let created = true;
      try {
        fs.linkSync(temp, path.join(dir, leaf));
      } catch (error) {
        if (error.code !== "EEXIST") throw error;
        created = false;
      }
      pausePoint("published");
      unlinkIfPresent(temp);
      fsyncDirectory(dir);
      durable = true;
      return { created };
    } finally {
      if (!durable) discardTemporary(dir, temp);
      releaseClaim(claim, durable);
    }
  }

  /**
   * writePrivateJsonIfUnchanged (§3.3): replaces the file by rename only when sha256 of its
   * current bytes equals `expectedCurrentContentSha256`. Lost arbitration, an absent file or a
   * different hash → false.
   */
  writePrivateJsonIfUnchanged(relative, value, { expectedCurrentContentSha256, maximumExpectedCurrentBytes } = {}) {
    validateExpectedHash(expectedCurrentContentSha256);
    const bound = maximumExpectedCurrentBytes ?? DEFAULT_EXPECTED_CURRENT_BYTES;
    if (!Number.isSafeInteger(bound) || bound < 0 || bound > MAX_EXPECTED_CURRENT_BYTES) {
      throw new Error("expected private state content byte bound is invalid");
    }
    const bytes = encodeRecord(value);
    const { leaf, dirSegments } = this.#file(relative);
    claimStateRoot(this.root);
    const walked = walkStateDirectory(this.root, dirSegments, false);
    if (walked === null) return false;
    const { dir, identity } = walked;
    recoverWriteTemporaries(dir);
    const temp = writeTemporary(dir, bytes);
    let claim = null;
    let durable = false;
    try {
      claim = acquireMutationClaim(dir, leaf);
      if (claim === null) return false;
      const current = readStableFile(path.join(dir, leaf), bound);
      if (current === null || sha256(current.bytes) !== expectedCurrentContentSha256) return false;
      verifyDirectoryIdentity(dir, identity);
      fs.renameSync(temp, path.join(dir, leaf));
      pausePoint("published");
      fsyncDirectory(dir);
      durable = true;
      return true;
    } finally {
      if (!durable) discardTemporary(dir, temp);
      releaseClaim(claim, durable);
    }
  }

  /**
   * removePrivateStateFileIfUnchanged (§3.3): under the mutation claim, removes the file only when
   * its bytes hash to the expected sha256, through `.io-remove-file-<uuid>.quarantine`, verifying
   * the moved inode. Lost arbitration, absent file or parent, or a different hash → false.
   */
  removePrivateStateFileIfUnchanged(relative, { expectedCurrentContentSha256 } = {}) {
    validateExpectedHash(expectedCurrentContentSha256);
    if (relative.split("/").length < 2) throw new Error("conditional state-file removal requires a nested state path");
    const { leaf, dirSegments } = this.#file(relative);
    claimStateRoot(this.root);
    const walked = walkStateDirectory(this.root, dirSegments, false);
    if (walked === null) return false;
    const { dir, identity } = walked;
    const requestId = randomUUID();
    const claim = acquireMutationClaim(dir, leaf, requestId);
    if (claim === null) return false;
    let durable = false;
    try {
      const target = path.join(dir, leaf);
      const current = readStableFile(target, DEFAULT_EXPECTED_CURRENT_BYTES);
      if (current === null || sha256(current.bytes) !== expectedCurrentContentSha256) return false;
      const now = lstatOrNull(target);
      if (now === null || !sameStat(now, current.stat)) return false;
      verifyDirectoryIdentity(dir, identity);
      const quarantine = path.join(dir, `.io-remove-file-${requestId}.quarantine`);
      fs.renameSync(target, quarantine);
      durable = true;
      pausePoint("remove-quarantine");
      const moved = lstatOrNull(quarantine);
      if (moved === null || moved.dev !== current.stat.dev || moved.ino !== current.stat.ino || !isPrivateOwnedRegular(moved)) {
        throw new Error("conditional state-file removal lost its inode claim");
      }
      fsyncDirectory(dir);
      fs.unlinkSync(quarantine);
      fsyncDirectory(dir);
      return true;
    } finally {
      releaseClaim(claim, durable);
    }
  }

  /**
   * The §3.9 recovery of one state directory, as a snapshot with
   * `recoverOrphanedMutationClaims: true` runs it. Returns what was removed.
   */
  recoverDirectory(relative) {
    claimStateRoot(this.root);
    const walked = walkStateDirectory(this.root, stateSegments(relative, "directory"), false);
    if (walked === null) return { present: false, writeTemporaries: 0, mutationStages: 0, treeQuarantines: 0, mutationClaims: 0 };
    const { dir } = walked;
    return {
      present: true,
      writeTemporaries: recoverWriteTemporaries(dir),
      mutationStages: recoverMutationStages(dir),
      treeQuarantines: recoverTreeQuarantines(dir),
      mutationClaims: recoverOrphanedMutationClaims(dir),
    };
  }
}
