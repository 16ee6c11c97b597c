// §6A.5 with real processes: synchronised peers race export admission acquires (exactly one wins,
// the others are told another export is active), a SIGKILLed holder's parent-owned admission is
// taken over, and a release by content hash works from another process.

import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import test from "node:test";
import { canonicalFile, captureProcessOwnerIdentity, sha256 } from "./identity.mjs";
import { ADMISSION_PATH, PREFIX, parseExportAdmissionText } from "./admission.mjs";
import { runPeer, startPeer, temporaryStateHome } from "./support.mjs";

test("synchronised peers race admission acquires: holds never overlap, losers are blocked", async (t) => {
  const { stateHome } = temporaryStateHome(t);
  const file = path.join(stateHome, ...ADMISSION_PATH.split("/"));
  const rounds = Number(process.env.PEER_ADMISSION_ROUNDS ?? 10);
  const racers = 4;
  const errors = {};
  let singleWinnerRounds = 0;
  for (let round = 0; round < rounds; round += 1) {
    const at = String(Date.now() + 400);
    const peers = Array.from({ length: racers }, () => startPeer(["acquire-admission", stateHome, "1500"], { PEER_START_AT: at }));
    const results = await Promise.all(peers.map((peer) => peer.exited));
    for (const result of results) assert.equal(result.code, 0, JSON.stringify(result));
    // A racer whose node start-up overran the winner's hold may acquire after the release: that
    // is sequential, not a second admission. Safety is that no two holds overlap.
    const holds = results
      .filter((result) => result.last.outcome === "released")
      .map((result) => result.last)
      .sort((a, b) => a.acquiredAtMs - b.acquiredAtMs);
    assert.ok(holds.length >= 1);
    for (let i = 1; i < holds.length; i += 1) {
      assert.ok(holds[i].acquiredAtMs >= holds[i - 1].releasingAtMs, `overlapping admissions: ${JSON.stringify(holds)}`);
    }
    if (holds.length === 1) singleWinnerRounds += 1;
    for (const result of results.filter((result) => result.last.outcome !== "released")) {
      assert.equal(result.last.outcome, "blocked");
      const key = result.last.cause === undefined ? result.last.error : `${result.last.error} (${result.last.cause})`;
      errors[key] = (errors[key] ?? 0) + 1;
    }
    assert.equal(fs.existsSync(file), false, "the winners released their admissions");
  }
  // A loser is told another export is active — or, when its read of active.json overlapped a
  // writer (the creator unlinking its temporary, the winner's release renaming the file), the
  // spec's stable-read rule fails the read and §6A.5 wraps it (README, ambiguity 13).
  const overlapped = new RegExp(
    `^${PREFIX}export admission could not be acquired safely \\(could not safely open optional Beeper Message Like Me export admission: .*/active\\.json \\(state file changed while it was read\\)\\)$`,
  );
  for (const key of Object.keys(errors)) {
    assert.ok(key === `${PREFIX}another export is active` || overlapped.test(key), key);
  }
  t.diagnostic(`${rounds} rounds × ${racers} racers, ${singleWinnerRounds} with a single winner: ${JSON.stringify(errors)}`);
});

test("the admission file is the exact canonical v2 record of the live winner", async (t) => {
  const { stateHome } = temporaryStateHome(t);
  const file = path.join(stateHome, ...ADMISSION_PATH.split("/"));
  const holder = startPeer(["acquire-admission", stateHome, "60000"]);
  const acquired = await holder.waitFor((line) => line.event === "acquired");
  const text = fs.readFileSync(file, "utf8");
  const { variant, claim } = parseExportAdmissionText(text);
  assert.equal(variant, "v2");
  assert.equal(text, canonicalFile(claim));
  assert.equal(sha256(text), acquired.contentSha256);
  assert.equal(claim.id, acquired.id);
  assert.deepEqual(claim.owner, captureProcessOwnerIdentity(holder.pid));
  assert.deepEqual([claim.phase, claim.helperOwner], ["parent-owned", null]);
  assert.equal(fs.lstatSync(file).mode & 0o777, 0o600);
  assert.equal(fs.lstatSync(path.dirname(file)).mode & 0o777, 0o700);

  const blocked = await runPeer(["acquire-admission", stateHome]);
  assert.deepEqual(blocked.last, { outcome: "blocked", error: `${PREFIX}another export is active` });
  assert.equal(fs.readFileSync(file, "utf8"), text, "a refused acquire leaves the file unchanged");

  // The holder dies: its parent-owned admission is recoverable (§6A.5 row 8).
  await holder.kill();
  const next = await runPeer(["acquire-admission", stateHome]);
  assert.equal(next.last.outcome, "acquired", JSON.stringify(next));
  assert.notEqual(next.last.id, claim.id);

  // Release from another process by content hash; a stale hash is refused.
  const stale = await runPeer(["release-admission", stateHome, acquired.contentSha256]);
  assert.deepEqual([stale.code, stale.last.error], [1, `${PREFIX}export admission changed before release`]);
  assert.deepEqual((await runPeer(["release-admission", stateHome, next.last.contentSha256])).last, { outcome: "released" });
  assert.equal(fs.existsSync(file), false);
});
