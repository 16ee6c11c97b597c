// Interoperation with the native binary (`$PROCLEASE_BIN`, default
// target/debug/proclease) on one state home: a lease taken by this package's `run` is
// active for the native `doctor` while its child lives and recovered by the native `recover` once
// its supervisor and child are killed; and the reverse. Both hosts print the same documents for
// the same state home. Skipped, saying why, when the binary is absent.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import { join } from 'node:path';
import { spawn, spawnSync } from 'node:child_process';
import { freshDirs, killAll, native, nativeSkip, node, startRun } from '../testing/helpers.mjs';

const skip = nativeSkip();
const json = (r) => {
  assert.equal(r.code, 0, `exit status ${r.code}: ${r.stderr}`);
  return JSON.parse(r.stdout);
};
const without = (entry, ...keys) => Object.fromEntries(Object.entries(entry).filter(([k]) => !keys.includes(k)));

test('a lease taken by this package is active for the native doctor while its child lives, and removed by the native recover once both are killed', { skip }, async () => {
  const d = freshDirs();
  const workdir = join(d.ws, 'job');
  const { child, lease } = await startRun('node', d, workdir);
  try {
    assert.equal(lease.owner.pid, child.pid, 'the supervisor owns the lease');
    const doctor = json(await native(d.home, d.ws, ['doctor', '--json']));
    assert.equal(doctor.entries.length, 1);
    const [entry] = doctor.entries;
    assert.deepEqual(without(entry, 'age', 'reason'), {
      childPid: lease.childOwner.pid,
      disposition: 'active',
      kind: 'raw-working',
      ownerHost: null,
      ownerPid: child.pid,
      phase: 'running',
      recoverAction: 'keep',
      target: workdir,
    });
    // The same document from this package, but for what this host cannot do (contain a command).
    const ours = json(await node(d.home, d.ws, ['doctor', '--json']));
    assert.deepEqual(
      ours.entries.map((e) => without(e, 'age')),
      doctor.entries.map((e) => without(e, 'age')),
    );
    assert.deepEqual(without(ours, 'entries', 'containment', 'cgroup'), without(doctor, 'entries', 'containment', 'cgroup'));
    assert.deepEqual(json(await node(d.home, d.ws, ['recover', '--dry-run', '--json'])), json(await native(d.home, d.ws, ['recover', '--dry-run', '--json'])));
    // Kill the supervisor and its child: nothing releases the lease.
    await killAll([child.pid, lease.childOwner.pid]);
    assert.ok(fs.existsSync(workdir));
    const recovered = json(await native(d.home, d.ws, ['recover', '--json']));
    assert.equal(recovered.directoryLeases.recovered, 1, JSON.stringify(recovered));
    assert.equal(recovered.directoryLeases.entries[0].action, 'remove directory');
    assert.equal(recovered.directoryLeases.entries[0].done, true);
    assert.equal(fs.existsSync(workdir), false, 'the directory is gone');
    assert.deepEqual(fs.readdirSync(join(d.home, 'recovery/beeper-message-like-me-directory-leases')), [], 'and its lease');
  } finally {
    child.kill('SIGKILL');
    d.cleanup();
  }
});

test("a lease taken by the native binary is active for this package's doctor and kept by its recover while it runs, and removed by this package's recover once its supervisor and box are SIGKILLed (its cgroup read as the native host reads it)", { skip }, async () => {
  const d = freshDirs();
  const workdir = join(d.ws, 'job');
  const { child, lease } = await startRun('native', d, workdir);
  try {
    const doctor = json(await node(d.home, d.ws, ['doctor', '--json']));
    assert.equal(doctor.entries.length, 1);
    assert.equal(doctor.entries[0].disposition, 'active', doctor.entries[0].reason);
    assert.equal(doctor.entries[0].ownerPid, lease.owner.pid);
    assert.equal(doctor.entries[0].childPid, lease.childOwner.pid);
    // The native run holds witnesses, whose locks this host tests (flock(1)).
    assert.match(doctor.entries[0].reason, /^owner pid \d+ is alive \(its witness lock is held\)/);
    const text = await node(d.home, d.ws, ['doctor']);
    assert.match(text.stdout, new RegExp(`raw-working +${workdir.replace(/[/.]/g, '\\$&')} +${lease.owner.pid} +${lease.childOwner.pid} +running +\\d+s +active +owner pid`));
    // A recovery now keeps it.
    const kept = json(await node(d.home, d.ws, ['recover', '--json']));
    assert.equal(kept.directoryLeases.active, 1);
    assert.ok(fs.existsSync(workdir));
    await killAll([lease.owner.pid, lease.childOwner.pid]);
    // The box's processes die with its init; its cgroup (recorded beside the spawn witness) is
    // populated until the last of them has exited, and is then empty: this host reads it, as the
    // native host does, and proves the run gone by its free witnesses.
    let recovered;
    for (const deadline = Date.now() + 10_000; ; ) {
      recovered = await node(d.home, d.ws, ['recover']);
      if (!recovered.stdout.startsWith('kept ') || Date.now() > deadline) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.equal(recovered.code, 0, recovered.stderr);
    assert.match(recovered.stdout, /^removed .*\nrecovered: 1\npublished: 0\nactive: 0\nindeterminate: 0\n$/);
    assert.equal(fs.existsSync(workdir), false, 'the directory is gone');
    assert.deepEqual(fs.readdirSync(join(d.home, 'recovery/beeper-message-like-me-directory-leases')), []);
    // The native host agrees that nothing is left.
    assert.deepEqual(json(await native(d.home, d.ws, ['doctor', '--json'])).entries, []);
  } finally {
    child.kill('SIGKILL');
    d.cleanup();
  }
});

test("a native run without a box or a cgroup whose supervisor and command were SIGKILLed is proven gone by its free witnesses, and this package's recover removes it", { skip }, async () => {
  const d = freshDirs();
  const workdir = join(d.ws, 'job');
  const { child, lease } = await startRun('native', d, workdir, ['--containment', 'none']);
  try {
    const doctor = json(await node(d.home, d.ws, ['doctor', '--json']));
    assert.equal(doctor.entries[0].disposition, 'active', doctor.entries[0].reason);
    await killAll([lease.owner.pid, lease.childOwner.pid]);
    const seen = json(await node(d.home, d.ws, ['doctor', '--json']));
    assert.equal(seen.entries[0].disposition, 'recoverable', seen.entries[0].reason);
    assert.match(seen.entries[0].reason, /witness lock is free/);
    const recovered = await node(d.home, d.ws, ['recover']);
    assert.equal(recovered.code, 0, recovered.stderr);
    assert.match(recovered.stdout, /^removed .*\nrecovered: 1\n/);
    assert.equal(fs.existsSync(workdir), false, 'the directory is gone');
    assert.deepEqual(json(await native(d.home, d.ws, ['doctor', '--json'])).entries, [], 'the native host agrees that nothing is left');
  } finally {
    child.kill('SIGKILL');
    d.cleanup();
  }
});

test('the export admission excludes across hosts: exit 3 while the other holds it', { skip }, async () => {
  const d = freshDirs();
  const go = join(d.home, '..', 'go');
  const release = join(d.home, '..', 'release');
  fs.writeFileSync(go, '');
  // This host holds it through its API (its `run` has no --exclusive: README).
  const holder = spawn(process.execPath, [new URL('../testing/worker.mjs', import.meta.url).pathname, 'race', d.home, go, release], { stdio: ['ignore', 'pipe', 'inherit'] });
  let theirs;
  try {
    const first = await new Promise((resolve) => holder.stdout.once('data', (b) => resolve(String(b))));
    assert.equal(first, 'acquired\n');
    const refused = await native(d.home, d.ws, ['run', '--exclusive', '--workdir', join(d.ws, 'b'), '--', 'true']);
    assert.equal(refused.code, 3, refused.stderr);
    assert.match(refused.stderr, /another export is active/);
    assert.equal(fs.existsSync(join(d.ws, 'b')), false, 'a refusal creates nothing');
    fs.writeFileSync(release, '');
    await new Promise((resolve) => holder.once('exit', resolve));
    assert.equal(fs.existsSync(join(d.home, 'recovery/beeper-message-like-me-export-admission/active.json')), false, 'released');
    theirs = await startRun('native', d, join(d.ws, 'c'), ['--exclusive']);
    const blocked = spawnSync(process.execPath, [new URL('../testing/worker.mjs', import.meta.url).pathname, 'race', d.home, go, release], { encoding: 'utf8' });
    assert.equal(blocked.stdout, 'blocked: Beeper Message Like Me recovery: another export is active\n', blocked.stderr);
    const usage = await node(d.home, d.ws, ['run', '--exclusive', '--workdir', join(d.ws, 'd'), '--', 'true']);
    assert.equal(usage.code, 2, 'run has no --exclusive here');
  } finally {
    holder.kill('SIGKILL');
    if (theirs) await killAll([theirs.lease.owner.pid, theirs.lease.childOwner.pid]).catch(() => {});
    d.cleanup();
  }
});

test('both hosts print the same reports and exit statuses for a state home recovery refuses', { skip }, async () => {
  const d = freshDirs();
  try {
    await node(d.home, d.ws, ['doctor']);
    const put = (path, text) => {
      fs.mkdirSync(join(d.home, path, '..'), { recursive: true, mode: 0o700 });
      fs.writeFileSync(join(d.home, path), text, { mode: 0o600 });
    };
    put('recovery/beeper-message-like-me-export-admission/active.json', '{"x":1}\n');
    put('recovery/beeper-message-like-me-directory-leases/not-a-lease.txt', 'junk\n');
    const same = async (args) => {
      const [theirs, ours] = [await native(d.home, d.ws, args), await node(d.home, d.ws, args)];
      assert.equal(ours.code, theirs.code, `${args.join(' ')}: exit status`);
      assert.equal(ours.stderr, theirs.stderr, `${args.join(' ')}: standard error`);
      return [theirs.stdout, ours.stdout];
    };
    for (const args of [['recover', '--dry-run'], ['recover', '--dry-run', '--json'], ['recover', '--skip-invalid', '--json'], ['recover'], ['recover', '--json']]) {
      const [theirs, ours] = await same(args);
      assert.equal(ours, theirs, args.join(' '));
    }
    const [theirs, ours] = await same(['doctor', '--json']);
    const [a, b] = [JSON.parse(theirs), JSON.parse(ours)];
    assert.deepEqual(without(b, 'containment', 'cgroup'), without(a, 'containment', 'cgroup'));
    assert.equal(b.entries.length, 2);
    const [theirText, ourText] = await same(['doctor']);
    assert.equal(ourText.split('\n').filter((l) => !l.startsWith('containment: ')).join('\n'), theirText);
  } finally {
    d.cleanup();
  }
});
