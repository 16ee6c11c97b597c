#!/usr/bin/env node
// peer.mjs — an independent ghostget 0.17.2 peer for stress tests: it takes part in ghostget's
// per-leaf mutation claims (§3.5), create/replace/remove primitives (§3.3), crash recovery (§3.9),
// the catalog lock (§5) and export admission (§6A.5) on a real state home, as a running ghostget
// would. Written from /work/shared/spec/reference-behaviour.md alone.
//
// Usage (paths: <stateHome> absolute or relative to the cwd; <path>/<dir> relative to it):
//   node peer.mjs increment <stateHome> <path> <count>
//       count times: read the record {"value":N} (absent → create {"value":0}), replace it if
//       unchanged with N+1, retrying lost compare-and-swaps, lost arbitrations and reads that
//       overlapped a replace ("state file changed while it was read").
//       → {"outcome":"done","successes":S,"retries":R,"changedReads":C,"value":V}
//       (R: lost compare-and-swaps or arbitrations; C: reads retried because they overlapped a replace)
//   node peer.mjs create <stateHome> <path> <json>          → {"outcome":"created"|"not-created"}
//   node peer.mjs replace <stateHome> <path> <json> <sha256> → {"outcome":"replaced"|"unchanged"}
//   node peer.mjs remove <stateHome> <path> <sha256>         → {"outcome":"removed"|"unchanged"}
//   node peer.mjs read <stateHome> <path>                    → {"outcome":"present","text","sha256"}|{"outcome":"absent"}
//   node peer.mjs recover <stateHome> <dir>
//       the §3.9 recovery of <dir>, dead mutation claims included → {"outcome":"recovered",...counts}
//   node peer.mjs acquire-admission <stateHome> [holdMs]
//       → {"outcome":"acquired","id","contentSha256","pid","atMs"} | {"outcome":"blocked","error","cause"}
//       (cause: the underlying error of a wrapped "…could not be acquired safely"); with
//       holdMs it prints {"event":"acquired",...} instead, keeps the admission that long, releases
//       it and prints {"outcome":"released","id","acquiredAtMs","releasingAtMs"}
//   node peer.mjs release-admission <stateHome> <contentSha256> → {"outcome":"released"}
//   node peer.mjs lock-catalog <stateHome> <holdMs>
//       → {"event":"acquired",...} then, after holdMs, {"outcome":"released"};
//         or {"outcome":"locked","error":"portable plugin catalog mutation is already locked"}
//   node peer.mjs lock-catalog-increment <stateHome> <counterFile> <count>
//       count times: under the catalog lock, read the plain counter file (absent → 0), wait
//       PEER_CRITICAL_MS (default 1), write value+1 (temp + rename); "already locked" → retry.
//       → {"outcome":"done","successes":S,"locked":L,"value":V}
//   node peer.mjs identity                                   → {"pid","bootId","processStartId"}
//
// Environment:
//   PEER_START_AT=<epoch ms>  wait until then before the command (to synchronise racing peers)
//   PEER_EVENTS=1             increment commands print {"event":"incremented","value":V} per success
//   PEER_BACKOFF_MS=<ms>      upper bound of the random pause after a lost attempt (default 2)
//   PEER_PAUSE_AT / PEER_PAUSE_COUNT / PEER_PAUSE_MS   fault injection (faults.mjs, README.md)
//
// Output: JSON lines on stdout; the last line is the outcome.
// Exit codes: 0 outcome reached (including "blocked", "not-created", "unchanged");
//             1 error (the line {"outcome":"error","error":"<exact message>"});
//             2 usage error; 3 the catalog lock was held by a live process ("locked").

import fs from "node:fs";
import path from "node:path";
import { randomUUID } from "node:crypto";
import { canonicalFile, ownIdentity, sha256, sleepSync } from "./identity.mjs";
import { STATE_MUTATION_ACTIVE, StateStore } from "./ghostget-store.mjs";
import { CATALOG_LOCKED, withCatalogLock } from "./catalog-lock.mjs";
import { PREFIX, acquireExportAdmission, releaseExportAdmission } from "./admission.mjs";

const EXIT_ERROR = 1;
const EXIT_USAGE = 2;
const EXIT_LOCKED = 3;

function emit(value) {
  fs.writeSync(1, `${JSON.stringify(value)}\n`);
}

class UsageError extends Error {}

function integer(text, name) {
  const value = Number(text);
  if (text === undefined || !Number.isSafeInteger(value) || value < 0) throw new UsageError(`${name} must be a non-negative integer`);
  return value;
}

function required(text, name) {
  if (text === undefined || text.length === 0) throw new UsageError(`${name} is required`);
  return text;
}

const events = process.env.PEER_EVENTS === "1";
const backoffMs = Number(process.env.PEER_BACKOFF_MS ?? "2");
const backoff = () => sleepSync(Math.floor(Math.random() * (backoffMs + 1)));

/** The record of `increment`: exactly canonical {"value":N} + "\n". */
function counterValue(text) {
  const value = JSON.parse(text);
  if (!Number.isSafeInteger(value?.value) || canonicalFile({ value: value.value }) !== text) {
    throw new Error(`counter record is not canonical: ${JSON.stringify(text)}`);
  }
  return value.value;
}

function increment(stateHome, relative, count) {
  const store = new StateStore(stateHome);
  let successes = 0;
  let retries = 0;
  let changedReads = 0;
  let value = null;
  for (let done = 0; done < count; ) {
    let text;
    try {
      text = store.readPrivateStateFileIfPresent(relative, 1024, "peer counter");
    } catch (error) {
      // A replace that lands while we read unlinks the inode we hold: its ctime moves (§3.2).
      if (!error.message.includes("state file changed while it was read")) throw error;
      changedReads += 1;
      continue;
    }
    if (text === null) {
      try {
        store.createPrivateJsonIfAbsent(relative, { value: 0 });
      } catch (error) {
        if (!error.message.includes(STATE_MUTATION_ACTIVE)) throw error;
        retries += 1;
        backoff();
      }
      continue;
    }
    const current = counterValue(text);
    if (store.writePrivateJsonIfUnchanged(relative, { value: current + 1 }, { expectedCurrentContentSha256: sha256(text) })) {
      successes += 1;
      done += 1;
      value = current + 1;
      if (events) emit({ event: "incremented", value });
    } else {
      retries += 1;
      backoff();
    }
  }
  return { outcome: "done", successes, retries, changedReads, value };
}

function lockCatalogIncrement(stateHome, counterFile, count) {
  const criticalMs = Number(process.env.PEER_CRITICAL_MS ?? "1");
  let successes = 0;
  let locked = 0;
  let value = null;
  while (successes < count) {
    try {
      value = withCatalogLock(stateHome, Date.now(), () => {
        let current = 0;
        try {
          current = Number.parseInt(fs.readFileSync(counterFile, "utf8"), 10);
        } catch (error) {
          if (error.code !== "ENOENT") throw error;
        }
        sleepSync(criticalMs);
        const temp = `${counterFile}.${process.pid}-${randomUUID()}.tmp`;
        fs.writeFileSync(temp, `${current + 1}\n`, { mode: 0o600 });
        fs.renameSync(temp, counterFile);
        return current + 1;
      });
      successes += 1;
      if (events) emit({ event: "incremented", value });
    } catch (error) {
      if (error.message !== CATALOG_LOCKED) throw error;
      locked += 1;
      backoff();
    }
  }
  return { outcome: "done", successes, locked, value };
}

function waitForStart() {
  const at = process.env.PEER_START_AT;
  if (at === undefined) return;
  const delay = Number(at) - Date.now();
  if (delay > 0) sleepSync(delay);
}

function run(argv) {
  const [command, ...args] = argv;
  const stateHome = () => path.resolve(required(args[0], "stateHome"));
  switch (command) {
    case "identity":
      return ownIdentity();
    case "increment": {
      const home = stateHome();
      const relative = required(args[1], "path");
      const count = integer(args[2], "count");
      waitForStart();
      return increment(home, relative, count);
    }
    case "create": {
      const store = new StateStore(stateHome());
      const value = JSON.parse(required(args[2], "json"));
      waitForStart();
      return { outcome: store.createPrivateJsonIfAbsent(required(args[1], "path"), value).created ? "created" : "not-created" };
    }
    case "replace": {
      const store = new StateStore(stateHome());
      const value = JSON.parse(required(args[2], "json"));
      const expected = required(args[3], "sha256");
      waitForStart();
      const replaced = store.writePrivateJsonIfUnchanged(required(args[1], "path"), value, { expectedCurrentContentSha256: expected });
      return { outcome: replaced ? "replaced" : "unchanged" };
    }
    case "remove": {
      const store = new StateStore(stateHome());
      const expected = required(args[2], "sha256");
      waitForStart();
      const removed = store.removePrivateStateFileIfUnchanged(required(args[1], "path"), { expectedCurrentContentSha256: expected });
      return { outcome: removed ? "removed" : "unchanged" };
    }
    case "read": {
      const text = new StateStore(stateHome()).readPrivateStateFileIfPresent(required(args[1], "path"), 2 * 1024 * 1024, "peer record");
      return text === null ? { outcome: "absent" } : { outcome: "present", text, sha256: sha256(text) };
    }
    case "recover": {
      const store = new StateStore(stateHome());
      const relative = required(args[1], "dir");
      waitForStart();
      return { outcome: "recovered", ...store.recoverDirectory(relative) };
    }
    case "acquire-admission": {
      const home = stateHome();
      const holdMs = args[1] === undefined ? null : integer(args[1], "holdMs");
      waitForStart();
      let handle;
      try {
        handle = acquireExportAdmission(home);
      } catch (error) {
        if (!error.message.startsWith(PREFIX)) throw error;
        return { outcome: "blocked", error: error.message, cause: error.cause?.message };
      }
      const acquired = { id: handle.claimId, contentSha256: handle.contentSha256, pid: process.pid, atMs: Date.now() };
      if (holdMs === null) return { outcome: "acquired", ...acquired };
      emit({ event: "acquired", ...acquired });
      sleepSync(holdMs);
      const releasingAtMs = Date.now();
      releaseExportAdmission(handle);
      return { outcome: "released", id: handle.claimId, acquiredAtMs: acquired.atMs, releasingAtMs };
    }
    case "release-admission": {
      const store = new StateStore(stateHome());
      const contentSha256 = required(args[1], "contentSha256");
      releaseExportAdmission({ store, claimPath: "recovery/beeper-message-like-me-export-admission/active.json", contentSha256, released: false });
      return { outcome: "released" };
    }
    case "lock-catalog": {
      const home = stateHome();
      const holdMs = integer(args[1], "holdMs");
      waitForStart();
      withCatalogLock(home, Date.now(), () => {
        emit({ event: "acquired", pid: process.pid });
        sleepSync(holdMs);
      });
      return { outcome: "released" };
    }
    case "lock-catalog-increment": {
      const home = stateHome();
      const counterFile = path.resolve(required(args[1], "counterFile"));
      const count = integer(args[2], "count");
      waitForStart();
      return lockCatalogIncrement(home, counterFile, count);
    }
    default:
      throw new UsageError(`unknown command: ${command ?? "(none)"}`);
  }
}

try {
  emit(run(process.argv.slice(2)));
  process.exitCode = 0;
} catch (error) {
  if (error instanceof UsageError) {
    process.stderr.write(`peer.mjs: ${error.message}\n`);
    process.exitCode = EXIT_USAGE;
  } else if (error instanceof Error && error.message === CATALOG_LOCKED) {
    emit({ outcome: "locked", error: error.message });
    process.exitCode = EXIT_LOCKED;
  } else {
    emit({ outcome: "error", error: error instanceof Error ? error.message : String(error), cause: error?.cause?.message });
    process.exitCode = EXIT_ERROR;
  }
}
