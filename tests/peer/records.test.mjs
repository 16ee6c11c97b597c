// Exact bytes and names: Appendix A items 5 and 6, the §3.5 claim and stage names, the §5 lock
// claim and lock file, the §3.1 marker — as literals, and as a live peer leaves them on disk.

import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import test from "node:test";
import { captureProcessOwnerIdentity, sha256 } from "./identity.mjs";
import { mutationClaimName, mutationClaimText, mutationTargetSha256 } from "./ghostget-store.mjs";
import { catalogLockRecordText, lockClaimName, lockClaimText, lockTargetSha256 } from "./catalog-lock.mjs";
import { listNames, runPeer, startPeer, temporaryStateHome } from "./support.mjs";

const a = "a".repeat(64);
const b = "b".repeat(64);
const d = "d".repeat(64);
const UUID = "[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}";
const ACTIVE_TARGET = "7090835e861362df23825dadcaeccaa91ec32490e69ec9f97b7f74b3c43a797e";

function mode(file) {
  return fs.lstatSync(file).mode & 0o777;
}

test("Appendix A item 6: the state mutation claim, insertion order, not canonical", () => {
  const text = mutationClaimText({
    targetSha256: d,
    claimId: "77777777-7777-4777-8777-777777777777",
    pid: 4242,
    bootId: a,
    processStartId: b,
  });
  assert.equal(
    text,
    `{"kind":"io-state-mutation-claim","schemaVersion":1,"targetSha256":"${d}","claimId":"77777777-7777-4777-8777-777777777777","pid":4242,"bootId":"${a}","processStartId":"${b}"}\n`,
  );
});

test("Appendix A item 5: the catalog lock record, canonical JSON", () => {
  const text = catalogLockRecordText({ acquiredAt: "2026-07-25T12:00:00.000Z", pid: 4242, bootId: a, processStartId: b });
  assert.equal(
    text,
    `{"acquiredAt":"2026-07-25T12:00:00.000Z","bootId":"${a}","pid":4242,"processStartId":"${b}","schemaVersion":1,"scope":"catalog-mutation"}\n`,
  );
});

test("§3.5 and §5 names and targets", () => {
  assert.equal(mutationTargetSha256("active.json"), ACTIVE_TARGET);
  assert.equal(mutationTargetSha256("active.json"), sha256("io-state-mutation\u0000active.json"));
  assert.equal(
    mutationClaimName(ACTIVE_TARGET, "held", "77777777-7777-4777-8777-777777777777"),
    `.io-mutation-${ACTIVE_TARGET}-held-77777777-7777-4777-8777-777777777777.lock`,
  );
  const lockPath = "/s/provider-plugins/locks/.catalog-mutation.lock";
  assert.equal(lockTargetSha256(lockPath), sha256(`portable-provider-plugin-lock\u0000${lockPath}`));
  assert.equal(lockClaimName(d, "waiting", "77777777-7777-4777-8777-777777777777"), `.lock-claim-${d}-waiting-77777777-7777-4777-8777-777777777777.json`);
  assert.equal(
    lockClaimText({ targetSha256: d, claimId: "77777777-7777-4777-8777-777777777777", pid: 4242, bootId: a, processStartId: b }),
    `{"bootId":"${a}","claimId":"77777777-7777-4777-8777-777777777777","kind":"portable-provider-plugin-lock-claim","pid":4242,"processStartId":"${b}","schemaVersion":1,"targetSha256":"${d}"}\n`,
  );
});

test("a live peer's stage, held claim and write temporary have the exact names and bytes", async (t) => {
  const { stateHome } = temporaryStateHome(t);
  const dir = path.join(stateHome, "recovery", "peer");
  assert.equal((await runPeer(["create", stateHome, "recovery/peer/active.json", '{"value":0}'])).last.outcome, "created");
  assert.equal(fs.readFileSync(path.join(stateHome, ".io-state.json"), "utf8"), '{"kind":"io-state","schemaVersion":1}\n');
  assert.equal(mode(path.join(stateHome, ".io-state.json")), 0o600);
  for (const directory of [stateHome, path.join(stateHome, "recovery"), dir]) assert.equal(mode(directory), 0o700);
  assert.equal(mode(path.join(dir, "active.json")), 0o600);
  const expected = sha256('{"value":0}\n');

  for (const step of ["stage", "held"]) {
    const peer = startPeer(["replace", stateHome, "recovery/peer/active.json", '{"value":1}', expected], { PEER_PAUSE_AT: step });
    await peer.paused(step);
    const owner = captureProcessOwnerIdentity(peer.pid);
    const names = listNames(dir);
    const temp = names.filter((name) => new RegExp(`^\\.io-write-${peer.pid}-${UUID}\\.tmp$`).test(name));
    assert.equal(temp.length, 1, `${step}: ${names}`);
    assert.equal(fs.readFileSync(path.join(dir, temp[0]), "utf8"), '{"value":1}\n');
    const pattern = step === "stage"
      ? new RegExp(`^\\.io-mutation-stage-(${UUID})-${peer.pid}\\.tmp$`)
      : new RegExp(`^\\.io-mutation-${ACTIVE_TARGET}-held-(${UUID})\\.lock$`);
    const claims = names.filter((name) => pattern.test(name));
    assert.equal(claims.length, 1, `${step}: ${names}`);
    const claimId = pattern.exec(claims[0])[1];
    const file = path.join(dir, claims[0]);
    assert.equal(fs.readFileSync(file, "utf8"), mutationClaimText({ targetSha256: ACTIVE_TARGET, claimId, ...owner }));
    assert.equal(mode(file), 0o600);
    assert.equal(mode(path.join(dir, temp[0])), 0o600);
    await peer.kill();
  }
});

test("a live peer's lock claim and lock file have the exact names and bytes", async (t) => {
  const { stateHome } = temporaryStateHome(t);
  const locks = path.join(stateHome, "provider-plugins", "locks");
  const lockPath = path.join(fs.realpathSync(path.dirname(stateHome)), "ghostget-state", "provider-plugins", "locks", ".catalog-mutation.lock");
  const target = lockTargetSha256(lockPath);

  const claiming = startPeer(["lock-catalog", stateHome, "0"], { PEER_PAUSE_AT: "lock-claim-held" });
  await claiming.paused("lock-claim-held");
  const claimant = captureProcessOwnerIdentity(claiming.pid);
  const pattern = new RegExp(`^\\.lock-claim-${target}-held-(${UUID})\\.json$`);
  const claims = listNames(locks).filter((name) => pattern.test(name));
  assert.deepEqual(listNames(locks), claims);
  assert.equal(claims.length, 1);
  const claimId = pattern.exec(claims[0])[1];
  assert.equal(fs.readFileSync(path.join(locks, claims[0]), "utf8"), lockClaimText({ targetSha256: target, claimId, ...claimant }));
  assert.equal(mode(path.join(locks, claims[0])), 0o600);
  await claiming.kill();

  const holder = startPeer(["lock-catalog", stateHome, "60000"]);
  await holder.waitFor((line) => line.event === "acquired");
  const owner = captureProcessOwnerIdentity(holder.pid);
  assert.deepEqual(listNames(locks), [".catalog-mutation.lock"], "the dead claim was removed, the lock's claim released");
  const text = fs.readFileSync(lockPath, "utf8");
  const acquiredAt = JSON.parse(text).acquiredAt;
  assert.match(acquiredAt, /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/);
  assert.equal(text, catalogLockRecordText({ acquiredAt, ...owner }));
  assert.equal(mode(lockPath), 0o600);
  for (const name of ["provider-plugins", "provider-plugins/artifacts", "provider-plugins/trust", "provider-plugins/active", "provider-plugins/locks"]) {
    assert.equal(mode(path.join(stateHome, name)), 0o700, name);
  }
  await holder.kill();
});
