// Canonical JSON, sha256 and Linux process identity, written from the reference spec
// (/work/shared/spec/reference-behaviour.md §1 and §2) for the independent ghostget peer.
// No code is shared with proclease.

import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";

// ---------------------------------------------------------------------------------------------
// §1.1 canonicalJson: keys sorted by UTF-16 code units (JS `<`), JSON.stringify escaping,
// members whose value is undefined are omitted, non-finite numbers rejected.

export function canonicalJson(value) {
  if (value === null || typeof value === "boolean" || typeof value === "string") {
    return JSON.stringify(value);
  }
  if (typeof value === "number") {
    if (!Number.isFinite(value)) throw new Error("canonical JSON cannot represent a non-finite number");
    // JSON.stringify prints ECMAScript Number-to-String and -0 as 0.
    return JSON.stringify(value);
  }
  if (Array.isArray(value)) {
    return `[${value.map((element) => canonicalJson(element)).join(",")}]`;
  }
  if (typeof value === "object") {
    const keys = Object.keys(value).filter((key) => value[key] !== undefined);
    keys.sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${keys.map((key) => `${JSON.stringify(key)}:${canonicalJson(value[key])}`).join(",")}}`;
  }
  throw new Error("canonical JSON supports only JSON-compatible values");
}

/** The bytes of a state file: canonical JSON + "\n" (§1.1). */
export function canonicalFile(value) {
  return `${canonicalJson(value)}\n`;
}

// §1.2 sha256 over UTF-8 (a Buffer is hashed as is), 64 lowercase hex.
export function sha256(text) {
  return createHash("sha256").update(text).digest("hex");
}

// §2.1 identityDigest(kind, value) = sha256(kind ‖ 0x00 ‖ value).
export function identityDigest(kind, value) {
  return sha256(`${kind}\u0000${value}`);
}

export const DIGEST = /^[a-f0-9]{64}$/;
export const UUID_V4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
export const UUID_V4_SOURCE = "[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}";

// ---------------------------------------------------------------------------------------------
// §2.2 boot identity (Linux), cached after the first success.

export function linuxBootIdFromRaw(raw) {
  const trimmed = raw.trim();
  if (!/^[a-f0-9-]{36}$/i.test(trimmed)) throw new Error("system boot identity is malformed");
  return identityDigest("io-boot", trimmed);
}

let cachedBootId = null;
export function currentBootId() {
  if (cachedBootId === null) {
    if (process.platform !== "linux") {
      throw new Error(`system boot identity is unsupported on ${process.platform}`);
    }
    cachedBootId = linuxBootIdFromRaw(readFileSync("/proc/sys/kernel/random/boot_id", "utf8"));
  }
  return cachedBootId;
}

// §2.3 process start identity.
export function processStartId(bootId, rawStart) {
  return identityDigest("io-process-start", `${bootId}\u0000${rawStart}`);
}

const LIVE_STATES = new Set(["R", "S", "D", "T", "t", "W", "K", "P", "I"]);

/** Parses /proc/<pid>/stat text: {status:"alive", rawStart} | {status:"dead"} | {status:"unknown"}. */
export function parseProcStat(text) {
  const trimmed = text.trim();
  const close = trimmed.lastIndexOf(")");
  if (close < 1) return { status: "unknown" };
  const rest = trimmed.slice(close + 1).trim();
  const fields = rest.length === 0 ? [] : rest.split(/\s+/);
  const state = fields[0];
  if (state === "Z" || state === "X" || state === "x") return { status: "dead" };
  if (!LIVE_STATES.has(state)) return { status: "unknown" };
  const start = fields[19];
  if (start === undefined || !/^\d+$/.test(start)) return { status: "unknown" };
  return { status: "alive", rawStart: start };
}

/**
 * kill(pid, 0) reports ESRCH: the pid names no process (zombies still exist). Pids outside
 * 1..2^31-1 are never "definitely absent": kill() could not even address them.
 */
export function pidDefinitelyAbsent(pid) {
  if (!Number.isSafeInteger(pid) || pid < 1 || pid > 0x7fffffff) return false;
  try {
    process.kill(pid, 0);
    return false;
  } catch (error) {
    return error.code === "ESRCH";
  }
}

let cachedOwnStart = null; // {bootId, processStartId}

/** §2.3 inspectProcessStartId(pid, bootId): alive (with processStartId) | dead | missing | unknown. */
export function inspectProcessStartId(pid, bootId) {
  const self = pid === process.pid;
  if (self && cachedOwnStart !== null && cachedOwnStart.bootId === bootId) {
    return { status: "alive", processStartId: cachedOwnStart.processStartId };
  }
  let text;
  try {
    text = readFileSync(self ? "/proc/self/stat" : `/proc/${pid}/stat`, "utf8");
  } catch (error) {
    if (error.code === "ENOENT" || pidDefinitelyAbsent(pid)) return { status: "missing" };
    return { status: "unknown" };
  }
  const parsed = parseProcStat(text);
  if (parsed.status !== "alive") return parsed;
  const id = processStartId(bootId, parsed.rawStart);
  if (self) cachedOwnStart = { bootId, processStartId: id };
  return { status: "alive", processStartId: id };
}

// §2.4
export function captureProcessOwnerIdentity(pid) {
  if (!Number.isSafeInteger(pid) || pid < 1) throw new Error("process identity PID is malformed");
  const bootId = currentBootId();
  const inspected = inspectProcessStartId(pid, bootId);
  if (inspected.status !== "alive") throw new Error("exact live process identity is unavailable");
  return { pid, bootId, processStartId: inspected.processStartId };
}

export function currentProcessStartIdentity() {
  const { bootId, processStartId: id } = captureProcessOwnerIdentity(process.pid);
  return { bootId, processStartId: id };
}

/** The own {pid, bootId, processStartId}. */
export function ownIdentity() {
  return { pid: process.pid, ...currentProcessStartIdentity() };
}

export function processOwnerStatus(owner) {
  const bootId = currentBootId();
  if (owner.bootId !== bootId) return "different-or-dead";
  const inspected = inspectProcessStartId(owner.pid, bootId);
  if (inspected.status === "unknown") return "unknown";
  if (inspected.status === "dead" || inspected.status === "missing") return "different-or-dead";
  return inspected.processStartId === owner.processStartId ? "exact-live-owner" : "different-or-dead";
}

// ---------------------------------------------------------------------------------------------
// Small shared helpers.

const sleepCell = new Int32Array(new SharedArrayBuffer(4));
/** Blocks the thread for `ms` milliseconds (every protocol step here is synchronous). */
export function sleepSync(ms) {
  if (ms > 0) Atomics.wait(sleepCell, 0, 0, ms);
}
