// The peer's pure rules against the shared public vectors (canonical JSON, sha256, identity
// digests, /proc stat parsing, export admission parsing and dispositions), its export admission
// acquire against the admission-disposition vectors on a real state home, and process identity
// with real processes (§2.4: own, altered, zombie, exited, other boot).

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import readline from "node:readline";
import test from "node:test";
import { fileURLToPath } from "node:url";
import {
  canonicalFile,
  canonicalJson,
  captureProcessOwnerIdentity,
  identityDigest,
  linuxBootIdFromRaw,
  ownIdentity,
  parseProcStat,
  processOwnerStatus,
  processStartId,
  sha256,
} from "./identity.mjs";
import { ADMISSION_PATH, acquireExportAdmission, admissionDisposition, parseExportAdmission, parseExportAdmissionText, releaseExportAdmission } from "./admission.mjs";
import { deadPid, temporaryStateHome } from "./support.mjs";

const repository = fileURLToPath(new URL("../..", import.meta.url));
const vectors = process.env.PROCLEASE_VECTORS ?? path.join(repository, "..", "shared", "vectors", "public");

function suite(name) {
  const file = path.join(vectors, `${name}.jsonl`);
  if (!fs.existsSync(file)) return null;
  return fs.readFileSync(file, "utf8").split("\n").filter((line) => line.length > 0).map((line) => JSON.parse(line));
}

function outcome(run) {
  try {
    return { ok: true, value: run() };
  } catch (error) {
    return { ok: false, error: error.message };
  }
}

function vectorTest(name, check) {
  test(`vectors: ${name}`, (t) => {
    const lines = suite(name);
    if (lines === null) {
      t.skip(`no vectors at ${vectors} (set PROCLEASE_VECTORS)`);
      return;
    }
    let checked = 0;
    for (const vector of lines) {
      if (check(vector) !== "skipped") checked += 1;
    }
    assert.ok(checked > 0);
    t.diagnostic(`${checked} of ${lines.length} vectors checked`);
  });
}

vectorTest("canonical-json", (v) => {
  const input = v.input_kind === "text" ? JSON.parse(v.input) : v.input;
  assert.equal(canonicalJson(input), v.expect.text, v.name);
});

vectorTest("sha256", (v) => {
  assert.equal(sha256(v.input), v.expect.hex, v.name);
});

vectorTest("identity-digest", (v) => {
  if (v.op === "digest") {
    assert.equal(identityDigest(v.kind, v.value), v.expect.hex, v.name);
  } else if (v.op === "linux-boot") {
    const result = outcome(() => linuxBootIdFromRaw(v.raw));
    assert.deepEqual(result.ok ? { ok: true, bootId: result.value } : result, v.expect, v.name);
  } else if (v.op === "process-start") {
    assert.equal(processStartId(v.bootId, v.rawStart), v.expect.processStartId, v.name);
  } else {
    return "skipped"; // darwin-boot: the peer is Linux-only
  }
  return "checked";
});

vectorTest("proc-stat", (v) => {
  const parsed = parseProcStat(v.input);
  const result = parsed.status === "alive"
    ? { status: "alive", rawStart: parsed.rawStart, processStartId: processStartId(v.boot_id, parsed.rawStart) }
    : parsed;
  assert.deepEqual(result, v.expect, v.name);
});

vectorTest("export-admission-parse", (v) => {
  const result = outcome(() => (v.input_kind === "text" ? parseExportAdmissionText(v.input) : parseExportAdmission(v.input)));
  if (!v.expect.ok) {
    assert.deepEqual(result, { ok: false, error: v.expect.error }, v.name);
    return;
  }
  assert.ok(result.ok, `${v.name}: ${result.error}`);
  const canonical = canonicalFile(result.value.claim);
  assert.equal(result.value.variant, v.expect.variant, v.name);
  assert.deepEqual(result.value.claim, v.expect.claim, v.name);
  assert.equal(canonical, v.expect.canonical, v.name);
  assert.equal(sha256(canonical), v.expect.sha256, v.name);
});

vectorTest("admission-disposition", (v) => {
  const calls = [];
  const answers = { owner: v.owner_status, helper: v.helper_status };
  const inspect = () => {
    const role = calls.length === 0 ? "owner" : "helper";
    calls.push(role);
    return answers[role];
  };
  const parsed = parseExportAdmission(v.claim);
  assert.equal(admissionDisposition(parsed, inspect, v.current_boot_id), v.expect.disposition, v.name);
  assert.deepEqual(calls, v.expect.calls, v.name);
});

test("vectors: admission-disposition acquire outcomes, on a real state home", (t) => {
  const lines = suite("admission-disposition");
  if (lines === null) {
    t.skip(`no vectors at ${vectors}`);
    return;
  }
  const { stateHome } = temporaryStateHome(t);
  const file = path.join(stateHome, ...ADMISSION_PATH.split("/"));
  let acquired = 0;
  for (const v of lines) {
    fs.mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
    const text = canonicalFile(v.claim);
    fs.writeFileSync(file, text, { mode: 0o600 });
    const calls = [];
    const inspect = () => {
      const role = calls.length === 0 ? "owner" : "helper";
      calls.push(role);
      return role === "owner" ? v.owner_status : v.helper_status;
    };
    const result = outcome(() => acquireExportAdmission(stateHome, { inspect, currentBoot: v.current_boot_id }));
    if (v.expect.acquire.ok) {
      assert.ok(result.ok, `${v.name}: ${result.error}`);
      assert.notEqual(result.value.claimId, v.claim.id);
      assert.equal(sha256(fs.readFileSync(file)), result.value.contentSha256);
      releaseExportAdmission(result.value);
      assert.equal(fs.existsSync(file), false);
      acquired += 1;
    } else {
      assert.deepEqual(result, v.expect.acquire, v.name);
      assert.equal(fs.readFileSync(file, "utf8"), text, `${v.name}: a refused acquire leaves the file unchanged`);
      fs.unlinkSync(file);
    }
  }
  t.diagnostic(`${lines.length} acquires: ${acquired} took over, ${lines.length - acquired} refused`);
});

test("process identity: own, altered, exited, zombie, other boot", async () => {
  const own = ownIdentity();
  assert.deepEqual(captureProcessOwnerIdentity(process.pid), own);
  assert.equal(processOwnerStatus(own), "exact-live-owner");
  assert.equal(processOwnerStatus({ ...own, processStartId: "0".repeat(64) }), "different-or-dead");
  assert.equal(processOwnerStatus({ ...own, bootId: "0".repeat(64) }), "different-or-dead");
  assert.equal(processOwnerStatus({ ...own, pid: await deadPid() }), "different-or-dead");
  assert.throws(() => captureProcessOwnerIdentity(0), /^Error: process identity PID is malformed$/);

  // `sleep 0` exits as a child of a process that never waits: a zombie until the parent exits.
  const parent = spawn("sh", ["-c", 'sleep 0 & echo $!; exec sleep 30'], { stdio: ["ignore", "pipe", "ignore"] });
  try {
    const zombie = Number(await new Promise((resolve) => readline.createInterface({ input: parent.stdout }).once("line", resolve)));
    const stat = () => fs.readFileSync(`/proc/${zombie}/stat`, "utf8");
    const identity = { pid: zombie, bootId: own.bootId, processStartId: processStartId(own.bootId, stat().split(" ")[21]) };
    for (let wait = 0; parseProcStat(stat()).status !== "dead" && wait < 100; wait += 1) {
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    assert.equal(parseProcStat(stat()).status, "dead");
    assert.equal(processOwnerStatus(identity), "different-or-dead");
    assert.throws(() => captureProcessOwnerIdentity(zombie), /^Error: exact live process identity is unavailable$/);
  } finally {
    parent.kill("SIGKILL");
  }
});
