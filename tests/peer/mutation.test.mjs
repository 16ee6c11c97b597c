// §3.3/§3.5/§3.9 with real processes on a real state home: concurrent peers lose no update, a live
// claim holder excludes the others per leaf, a peer SIGKILLed at each protocol step leaves
// leftovers that the next operation (or `recover`) removes, and random kills never tear the
// record or lose a reported increment.

import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import test from "node:test";
import { sha256 } from "./identity.mjs";
import { listNames, runPeer, startPeer, temporaryStateHome } from "./support.mjs";

const RECORD = "recovery/peer/counter.json";
const UUID = "[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}";
const TARGET = sha256("io-state-mutation\u0000counter.json");
const WRITE_TEMP = new RegExp(`^\\.io-write-\\d+-${UUID}\\.tmp$`);
const STAGE = new RegExp(`^\\.io-mutation-stage-${UUID}-\\d+\\.tmp$`);
const CLAIM = (phase) => new RegExp(`^\\.io-mutation-${TARGET}-${phase}-${UUID}\\.lock$`);
const QUARANTINE = new RegExp(`^\\.io-remove-file-${UUID}\\.quarantine$`);

const counter = (value) => `{"value":${value}}\n`;

function recordDir(stateHome) {
  return path.join(stateHome, "recovery", "peer");
}

async function seed(stateHome, value = 0) {
  const created = await runPeer(["create", stateHome, RECORD, JSON.stringify({ value })]);
  assert.equal(created.last.outcome, "created", JSON.stringify(created));
}

function readValue(stateHome) {
  const text = fs.readFileSync(path.join(recordDir(stateHome), "counter.json"), "utf8");
  assert.match(text, /^\{"value":\d+\}\n$/);
  return JSON.parse(text).value;
}

test("4 peers × 500 increments of one record lose no update", async (t) => {
  const { stateHome } = temporaryStateHome(t);
  const processes = Number(process.env.PEER_STRESS_PROCESSES ?? 4);
  const count = Number(process.env.PEER_STRESS_INCREMENTS ?? 500);
  const started = Date.now();
  const results = await Promise.all(
    Array.from({ length: processes }, () => runPeer(["increment", stateHome, RECORD, String(count)], { PEER_START_AT: String(Date.now() + 300) })),
  );
  const successes = results.reduce((sum, result) => {
    assert.equal(result.code, 0, JSON.stringify(result));
    return sum + result.last.successes;
  }, 0);
  const retries = results.reduce((sum, result) => sum + result.last.retries, 0);
  const changedReads = results.reduce((sum, result) => sum + result.last.changedReads, 0);
  assert.equal(successes, processes * count);
  assert.equal(readValue(stateHome), successes);
  assert.deepEqual(listNames(recordDir(stateHome)), ["counter.json"], "no temporary, stage or claim is left");
  t.diagnostic(`${processes} processes × ${count}: value ${successes}, ${retries} lost attempts, ${changedReads} reads overlapped a replace, ${Date.now() - started} ms`);
});

test("a live holder of a leaf's claim: create fails, replace and remove return false; other leaves proceed", async (t) => {
  const { stateHome } = temporaryStateHome(t);
  await seed(stateHome, 5);
  const sha = sha256(counter(5));
  const holder = startPeer(["replace", stateHome, RECORD, '{"value":6}', sha], { PEER_PAUSE_AT: "held" });
  await holder.paused("held");

  const create = await runPeer(["create", stateHome, RECORD, '{"value":0}']);
  assert.deepEqual([create.code, create.last], [1, { outcome: "error", error: "state file mutation is already active" }]);
  assert.equal((await runPeer(["replace", stateHome, RECORD, '{"value":7}', sha])).last.outcome, "unchanged");
  assert.equal((await runPeer(["remove", stateHome, RECORD, sha])).last.outcome, "unchanged");
  assert.equal((await runPeer(["create", stateHome, "recovery/peer/other.json", '{"value":1}'])).last.outcome, "created");
  assert.equal(readValue(stateHome), 5);
  const held = listNames(recordDir(stateHome)).filter((name) => CLAIM("held").test(name));
  assert.equal(held.length, 1, "the losers released their own claims; the holder's stays");

  // A live claim is never recovered.
  const recovered = await runPeer(["recover", stateHome, "recovery/peer"]);
  assert.equal(recovered.last.mutationClaims, 0);
  assert.equal(recovered.last.writeTemporaries, 0);
  assert.deepEqual(listNames(recordDir(stateHome)).filter((name) => CLAIM("held").test(name)), held);

  await holder.kill();
  assert.equal((await runPeer(["replace", stateHome, RECORD, '{"value":7}', sha])).last.outcome, "replaced");
  assert.deepEqual(listNames(recordDir(stateHome)), ["counter.json", "other.json"]);
});

// Kill an `increment` (a replace) at each step; the record held {"value":0}.
const KILL_STEPS = [
  { step: "write-temp", left: [WRITE_TEMP], value: 0 },
  { step: "stage-empty", left: [WRITE_TEMP, STAGE], value: 0 },
  { step: "stage", left: [WRITE_TEMP, STAGE], value: 0 },
  { step: "waiting", left: [WRITE_TEMP, CLAIM("waiting")], value: 0 },
  { step: "candidate", left: [WRITE_TEMP, CLAIM("candidate")], value: 0 },
  { step: "held", left: [WRITE_TEMP, CLAIM("held")], value: 0 },
  { step: "published", left: [CLAIM("held")], value: 1 },
];

for (const { step, left, value } of KILL_STEPS) {
  test(`SIGKILL at ${step}: the next peer's operation removes the leftovers`, async (t) => {
    const { stateHome } = temporaryStateHome(t);
    await seed(stateHome);
    const victim = startPeer(["increment", stateHome, RECORD, "1"], { PEER_PAUSE_AT: step });
    await victim.paused(step);
    await victim.kill();
    const names = listNames(recordDir(stateHome));
    const leftovers = names.filter((name) => name !== "counter.json");
    assert.equal(leftovers.length, left.length, `${names}`);
    for (const pattern of left) assert.ok(leftovers.some((name) => pattern.test(name)), `${pattern} in ${names}`);
    assert.equal(readValue(stateHome), value);

    const next = await runPeer(["increment", stateHome, RECORD, "1"]);
    assert.deepEqual(next.last, { outcome: "done", successes: 1, retries: 0, changedReads: 0, value: value + 1 });
    assert.deepEqual(listNames(recordDir(stateHome)), ["counter.json"]);
  });
}

test("SIGKILL at create's link: the record is there, the next create reports not-created and cleans up", async (t) => {
  const { stateHome } = temporaryStateHome(t);
  const victim = startPeer(["create", stateHome, RECORD, '{"value":0}'], { PEER_PAUSE_AT: "published" });
  await victim.paused("published");
  await victim.kill();
  const leftovers = listNames(recordDir(stateHome)).filter((name) => name !== "counter.json");
  assert.equal(leftovers.length, 2);
  assert.equal(readValue(stateHome), 0);
  assert.equal((await runPeer(["create", stateHome, RECORD, '{"value":9}'])).last.outcome, "not-created");
  assert.deepEqual(listNames(recordDir(stateHome)), ["counter.json"]);
});

test("SIGKILL between remove's quarantine rename and unlink: the claim is recovered, the quarantine stays (§3.9 names no recovery for it)", async (t) => {
  const { stateHome } = temporaryStateHome(t);
  await seed(stateHome, 3);
  const victim = startPeer(["remove", stateHome, RECORD, sha256(counter(3))], { PEER_PAUSE_AT: "remove-quarantine" });
  await victim.paused("remove-quarantine");
  await victim.kill();
  let names = listNames(recordDir(stateHome));
  assert.equal(names.length, 2, `${names}`);
  assert.ok(names.some((name) => QUARANTINE.test(name)));
  assert.ok(names.some((name) => CLAIM("held").test(name)));

  assert.equal((await runPeer(["create", stateHome, RECORD, '{"value":0}'])).last.outcome, "created");
  names = listNames(recordDir(stateHome));
  assert.deepEqual(names.filter((name) => name !== "counter.json").map((name) => QUARANTINE.test(name)), [true]);
  assert.equal(fs.readFileSync(path.join(recordDir(stateHome), names.find((name) => QUARANTINE.test(name))), "utf8"), counter(3));
});

test("`recover` removes dead write temporaries, stages and claims of every target, and keeps live ones", async (t) => {
  const { stateHome } = temporaryStateHome(t);
  const dir = recordDir(stateHome);
  const steps = ["write-temp", "stage-empty", "stage", "waiting", "candidate", "held"];
  for (const index of steps.keys()) {
    assert.equal((await runPeer(["create", stateHome, `recovery/peer/r${index}.json`, '{"value":0}'])).last.outcome, "created");
  }
  // All victims pause before any dies: otherwise a later victim's own operation would already
  // recover an earlier victim's temporary and stage (§3.9), leaving `recover` nothing to do.
  const victims = steps.map((step, index) => startPeer(["increment", stateHome, `recovery/peer/r${index}.json`, "1"], { PEER_PAUSE_AT: step }));
  const live = startPeer(["increment", stateHome, "recovery/peer/live.json", "1"], { PEER_PAUSE_AT: "held" });
  await Promise.all([...victims.map((victim, index) => victim.paused(steps[index])), live.paused("held")]);
  await Promise.all(victims.map((victim) => victim.kill()));

  const recovered = await runPeer(["recover", stateHome, "recovery/peer"]);
  assert.deepEqual(recovered.last, {
    outcome: "recovered",
    present: true,
    writeTemporaries: 6,
    mutationStages: 2,
    treeQuarantines: 0,
    mutationClaims: 3,
  });
  const remaining = listNames(dir).filter((name) => name.startsWith("."));
  assert.equal(remaining.length, 2, `the live peer's temporary and held claim: ${remaining}`);
  assert.ok(remaining.some((name) => name.startsWith(`.io-write-${live.pid}-`)));
  assert.ok(remaining.some((name) => fs.readFileSync(path.join(dir, name), "utf8").includes(`"pid":${live.pid},`)));
  await live.kill();
  const after = await runPeer(["recover", stateHome, "recovery/peer"]);
  assert.deepEqual([after.last.writeTemporaries, after.last.mutationStages, after.last.mutationClaims], [1, 0, 1]);
  assert.deepEqual(listNames(dir).filter((name) => name.startsWith(".")), []);
});

test("SIGKILLs at random protocol steps and instants during concurrent increments never tear the record or lose a reported increment", async (t) => {
  const { stateHome } = temporaryStateHome(t);
  await seed(stateHome);
  const slots = 4;
  const kills = Number(process.env.PEER_STRESS_KILLS ?? 200);
  const steps = ["write-temp", "stage-empty", "stage", "waiting", "candidate", "held", "published"];
  const byStep = {};
  const failures = [];
  let reported = 0;
  let killed = 0;
  const started = Date.now();

  // Each slot runs peers one after another; each peer is killed at a random step after a random
  // number of passes (PEER_PAUSE_COUNT), or at a random instant.
  async function slot() {
    while (killed < kills && failures.length === 0) {
      killed += 1;
      const step = Math.random() < 0.75 ? steps[Math.floor(Math.random() * steps.length)] : null;
      const env = { PEER_EVENTS: "1" };
      if (step !== null) Object.assign(env, { PEER_PAUSE_AT: step, PEER_PAUSE_COUNT: String(1 + Math.floor(Math.random() * 8)) });
      const peer = startPeer(["increment", stateHome, RECORD, "1000000"], env);
      const instant = new Promise((resolve) => setTimeout(resolve, step === null ? 50 + Math.random() * 250 : 3_000));
      await Promise.race([instant, step === null ? instant : peer.paused(step).catch(() => {})]);
      const result = await peer.kill();
      const paused = result.lines.some((line) => line.event === "paused");
      const key = paused ? step : "instant";
      byStep[key] = (byStep[key] ?? 0) + 1;
      reported += result.lines.filter((line) => line.event === "incremented").length;
      if (result.signal !== "SIGKILL") failures.push(`${JSON.stringify(result.last)} ${result.stderr}`);
    }
  }
  await Promise.all(Array.from({ length: slots }, slot));
  assert.deepEqual(failures, [], "every peer ran until it was killed");

  const value = readValue(stateHome);
  assert.ok(value >= reported, `value ${value} < reported ${reported}`);
  // Only a kill after the rename (at "published", or at a random instant) can leave a durable
  // increment unreported: a kill at any earlier step leaves the record as it was.
  const mayBeUnreported = (byStep.published ?? 0) + (byStep.instant ?? 0);
  assert.ok(value - reported <= mayBeUnreported, `value ${value} - reported ${reported} > ${mayBeUnreported}`);

  // One more increment (arbitration on the same target) plus `recover` leave only the record.
  const next = await runPeer(["increment", stateHome, RECORD, "1"]);
  assert.equal(next.last.value, value + 1, JSON.stringify(next));
  await runPeer(["recover", stateHome, "recovery/peer"]);
  assert.deepEqual(listNames(recordDir(stateHome)), ["counter.json"]);
  t.diagnostic(`${killed} kills (${JSON.stringify(byStep)}) of ${slots} concurrent peers in ${Date.now() - started} ms: value ${value}, reported ${reported}`);
});
