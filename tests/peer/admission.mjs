// The export admission of ghostget 0.17.2's `beeper-message-like-me-recovery` module, as far as
// racing acquires and releases needs it (reference spec §6A.1–6A.3 and §6A.5), written from the
// spec alone for the independent peer. Lifecycle transitions other than release are left out.

import { randomUUID } from "node:crypto";
import {
  DIGEST,
  UUID_V4,
  canonicalFile,
  currentProcessStartIdentity,
  processOwnerStatus,
  sha256,
} from "./identity.mjs";
import { STATE_MUTATION_ACTIVE, StateStore } from "./ghostget-store.mjs";

export const PREFIX = "Beeper Message Like Me recovery: ";
export const ADMISSION_PATH = "recovery/beeper-message-like-me-export-admission/active.json";
export const ADMISSION_KIND = "beeper-message-like-me-export-admission";
const ADMISSION_DIRECTORY = "recovery/beeper-message-like-me-export-admission";
const ADMISSION_LABEL = "Beeper Message Like Me export admission";
const MAX_ADMISSION_BYTES = 16_384;
const MAX_ACQUIRE_ATTEMPTS = 8;
const PHASES = new Set(["parent-owned", "helper-launching", "helper-active", "cleanup-unsafe"]);

function fail(message) {
  throw new Error(`${PREFIX}${message}`);
}

const isModuleError = (error) => error instanceof Error && error.message.startsWith(PREFIX);

// §6A.3 validation helpers.

function record(value, label) {
  if (value === null || typeof value !== "object" || Array.isArray(value) || Object.getPrototypeOf(value) !== Object.prototype) {
    fail(`${label} must be a plain object`);
  }
}

function exactKeys(value, keys, label) {
  const own = Object.keys(value).sort();
  const expected = [...keys].sort();
  if (own.length !== expected.length || own.some((key, index) => key !== expected[index])) {
    fail(`${label} has an unsupported shape`);
  }
}

function owner(value, label) {
  record(value, label);
  exactKeys(value, ["bootId", "pid", "processStartId"], label);
  const { pid, bootId, processStartId } = value;
  if (
    typeof pid !== "number" ||
    !Number.isSafeInteger(pid) ||
    pid < 1 ||
    pid > 2_147_483_647 ||
    typeof bootId !== "string" ||
    !DIGEST.test(bootId) ||
    typeof processStartId !== "string" ||
    !DIGEST.test(processStartId)
  ) {
    fail(`${label} is invalid`);
  }
  return { pid, bootId, processStartId };
}

/** §6A.3 parseExportAdmission → {variant: "v1"|"v2-pre-revision"|"v2", claim}. */
export function parseExportAdmission(value) {
  record(value, "export admission");
  const legacy = value.schemaVersion === 1;
  const currentV2 = value.schemaVersion === 2 && Object.prototype.hasOwnProperty.call(value, "revision");
  exactKeys(
    value,
    legacy
      ? ["id", "kind", "owner", "schemaVersion"]
      : currentV2
        ? ["helperOwner", "id", "kind", "owner", "phase", "revision", "schemaVersion"]
        : ["helperOwner", "id", "kind", "owner", "phase", "schemaVersion"],
    "export admission",
  );
  if (
    (value.schemaVersion !== 1 && value.schemaVersion !== 2) ||
    value.kind !== ADMISSION_KIND ||
    typeof value.id !== "string" ||
    !UUID_V4.test(value.id)
  ) {
    fail("export admission identity is invalid");
  }
  if (legacy) {
    const parsedOwner = owner(value.owner, "export admission owner");
    return { variant: "v1", claim: { schemaVersion: 1, kind: value.kind, id: value.id, owner: parsedOwner } };
  }
  const { phase, helperOwner } = value;
  if (
    !PHASES.has(phase) ||
    (phase === "helper-active" && helperOwner === null) ||
    ((phase === "parent-owned" || phase === "helper-launching") && helperOwner !== null)
  ) {
    fail("export admission lifecycle is invalid");
  }
  const parsedOwner = owner(value.owner, "export admission owner");
  const parsedHelper = helperOwner === null ? null : owner(helperOwner, "export admission helper owner");
  const claim = { schemaVersion: 2, kind: value.kind, id: value.id, owner: parsedOwner, helperOwner: parsedHelper, phase };
  if (!currentV2) return { variant: "v2-pre-revision", claim };
  if (typeof value.revision !== "string" || !UUID_V4.test(value.revision)) fail("export admission revision is invalid");
  return { variant: "v2", claim: { ...claim, revision: value.revision } };
}

/** Parses the text of `active.json` (§6A.5 a): JSON, structure, canonical bytes. */
export function parseExportAdmissionText(text) {
  let value;
  try {
    value = JSON.parse(text);
  } catch {
    fail("export admission is not valid JSON");
  }
  const parsed = parseExportAdmission(value);
  if (canonicalFile(parsed.claim) !== text) fail("export admission is not canonical");
  return parsed;
}

/**
 * §6A.5 disposition of an observed claim: "active" | "indeterminate" | "recoverable". `inspect`
 * is called for the owner first, for the helper only in rows 11–12.
 */
export function admissionDisposition({ variant, claim }, inspect, currentBoot) {
  const ownerStatus = inspect(claim.owner);
  if (ownerStatus === "exact-live-owner") return "active";
  if (ownerStatus === "unknown") return "indeterminate";
  const sameBoot = claim.owner.bootId === currentBoot;
  if (variant === "v1") return sameBoot ? "indeterminate" : "recoverable";
  const helper = claim.helperOwner;
  if (helper !== null && helper.bootId !== claim.owner.bootId) return "indeterminate";
  if (claim.phase === "cleanup-unsafe") return sameBoot ? "indeterminate" : "recoverable";
  if (claim.phase === "parent-owned") return "recoverable";
  if (!sameBoot) return "recoverable";
  if (helper === null) return "indeterminate";
  return inspect(helper) === "exact-live-owner" ? "active" : "indeterminate";
}

/**
 * §6A.5 acquireBeeperMessageLikeMeExportAdmission on the state home `stateHome`. Returns the
 * handle {store, claimPath, claimId, claim, contentSha256, released}. `inspect` and `currentBoot`
 * default to the real ones (the peer has no test-only gate: it is a test tool).
 */
export function acquireExportAdmission(stateHome, { inspect = processOwnerStatus, currentBoot } = {}) {
  const own = currentProcessStartIdentity();
  const boot = currentBoot ?? own.bootId;
  if (typeof boot !== "string" || !DIGEST.test(boot)) fail("current boot identity is invalid");
  const store = new StateStore(stateHome);
  try {
    store.ensurePrivateStateDirectory(ADMISSION_DIRECTORY);
    for (let attempt = 0; attempt < MAX_ACQUIRE_ATTEMPTS; attempt += 1) {
      const text = store.readPrivateStateFileIfPresent(ADMISSION_PATH, MAX_ADMISSION_BYTES, ADMISSION_LABEL);
      if (text !== null) {
        const observed = parseExportAdmissionText(text);
        const disposition = admissionDisposition(observed, inspect, boot);
        if (disposition === "active") fail("another export is active");
        if (disposition === "indeterminate") fail("prior export owner cannot be inspected safely");
        if (!store.removePrivateStateFileIfUnchanged(ADMISSION_PATH, { expectedCurrentContentSha256: sha256(text) })) {
          continue;
        }
      }
      const claim = {
        schemaVersion: 2,
        kind: ADMISSION_KIND,
        id: randomUUID(),
        owner: { pid: process.pid, bootId: own.bootId, processStartId: own.processStartId },
        helperOwner: null,
        phase: "parent-owned",
        revision: randomUUID(),
      };
      const contentSha256 = sha256(canonicalFile(claim));
      let created;
      try {
        created = store.createPrivateJsonIfAbsent(ADMISSION_PATH, claim).created;
      } catch (error) {
        const now = store.readPrivateStateFileIfPresent(ADMISSION_PATH, MAX_ADMISSION_BYTES, ADMISSION_LABEL);
        if (now !== null && sha256(now) === contentSha256) {
          created = true;
        } else if (error instanceof Error && error.message.includes(STATE_MUTATION_ACTIVE)) {
          created = false;
        } else {
          throw error;
        }
      }
      if (created) return { store, claimPath: ADMISSION_PATH, claimId: claim.id, claim, contentSha256, released: false };
    }
    fail("export admission could not be acquired after bounded contention");
  } catch (error) {
    if (isModuleError(error)) throw error;
    const wrapped = new Error(`${PREFIX}export admission could not be acquired safely`);
    wrapped.cause = error;
    throw wrapped;
  }
}

/**
 * §6A.5 releaseBeeperMessageLikeMeExportAdmission. `handle` may also be rebuilt by another process
 * from {stateHome, contentSha256} (the peer's `release-admission`): the phase check then relies on
 * the peer having written a parent-owned claim.
 */
export function releaseExportAdmission(handle) {
  if (handle.released) return;
  if (handle.claim !== undefined && (handle.claim.phase !== "parent-owned" || handle.claim.helperOwner !== null)) {
    fail("export admission cannot release an unsettled helper lifecycle");
  }
  let removed;
  try {
    removed = handle.store.removePrivateStateFileIfUnchanged(handle.claimPath, {
      expectedCurrentContentSha256: handle.contentSha256,
    });
  } catch (error) {
    const wrapped = new Error(`${PREFIX}export admission could not be released safely`);
    wrapped.cause = error;
    throw wrapped;
  }
  if (!removed) fail("export admission changed before release");
  handle.released = true;
}
