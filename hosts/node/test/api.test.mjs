// The library API (lib/index.mjs): Host.open's defaults, withDirectoryLease, withAdmission,
// survey and recover.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Host, ProcleaseError, Refusal } from '../lib/index.mjs';
import { Directory } from '../lib/sys.mjs';
import { selectStateHome } from '../lib/state-store/home.mjs';
import { freshDirs } from '../testing/helpers.mjs';

test('the state home is chosen as the native binary chooses it', () => {
  const env = { HOME: '/home/me', XDG_DATA_HOME: '/data', GHOSTGET_STATE_HOME: '/g', PROCLEASE_STATE_HOME: '/p' };
  assert.deepEqual(selectStateHome('/flag', env), { path: '/flag', source: 'flag' });
  assert.deepEqual(selectStateHome(undefined, env), { path: '/p', source: 'PROCLEASE_STATE_HOME' });
  assert.deepEqual(selectStateHome(undefined, { ...env, PROCLEASE_STATE_HOME: '  ' }), { path: '/g', source: 'GHOSTGET_STATE_HOME' });
  assert.deepEqual(selectStateHome(undefined, { HOME: '/home/me', XDG_DATA_HOME: '/data' }), { path: '/data/proclease', source: 'default' });
  assert.deepEqual(selectStateHome(undefined, { HOME: '/home/me' }), { path: '/home/me/.local/share/proclease', source: 'default' });
});

test('Host.open defaults: $PROCLEASE_STATE_HOME, and the home and temporary directories as workspace roots', async () => {
  const d = freshDirs();
  const saved = process.env.PROCLEASE_STATE_HOME;
  process.env.PROCLEASE_STATE_HOME = d.home;
  try {
    const host = await Host.open();
    try {
      assert.equal(host.stateHome, d.home);
      assert.ok(fs.existsSync(join(d.home, '.io-state.json')), 'claimed with the reference marker');
      assert.deepEqual(host.workspaceRoots, [fs.realpathSync(process.env.HOME), fs.realpathSync(tmpdir())]);
    } finally {
      host.close();
    }
  } finally {
    if (saved === undefined) delete process.env.PROCLEASE_STATE_HOME;
    else process.env.PROCLEASE_STATE_HOME = saved;
    d.cleanup();
  }
});

test('withDirectoryLease leases, records a child, and releases however the callback ends', async () => {
  const d = freshDirs();
  const host = await Host.open({ stateHome: d.home, workspaceRoots: [d.ws] });
  try {
    const dir = join(d.ws, 'job');
    const seen = await host.withDirectoryLease(dir, { create: true }, async (lease) => {
      assert.equal(lease.path, dir);
      assert.equal(lease.claim().phase, 'preparing');
      lease.update('launching');
      const child = spawn('sleep', ['5'], { cwd: dir });
      await new Promise((r) => child.once('spawn', r));
      lease.update('running', child.pid);
      const survey = host.survey();
      child.kill();
      await new Promise((r) => child.once('exit', r));
      return survey.recovery.directoryLeases.outcomes.map((o) => [o.claim.path, o.disposition, o.claim.childOwner.pid]);
    });
    assert.equal(seen.length, 1);
    assert.deepEqual(seen[0].slice(0, 2), [dir, 'active']);
    assert.equal(host.survey().recovery.directoryLeases.outcomes.length, 0, 'released (a running lease is settled first)');
    await assert.rejects(
      host.withDirectoryLease(dir, {}, async () => {
        throw new Error('the work failed');
      }),
      /the work failed/,
    );
    assert.equal(host.survey().recovery.directoryLeases.outcomes.length, 0, 'released after a failure too');
    // A callback that fails while the command it started still runs: the lease stays, or another
    // run could lease the directory beside that command.
    const warnings = [];
    const onWarning = (w) => warnings.push(w);
    process.on('warning', onWarning);
    let left;
    try {
      await assert.rejects(
        host.withDirectoryLease(dir, {}, async (lease) => {
          lease.update('launching');
          left = spawn('sleep', ['30'], { cwd: dir, stdio: 'ignore' });
          await new Promise((r) => left.once('spawn', r));
          lease.update('running', left.pid);
          throw new Error('the work failed while its command runs');
        }),
        /the work failed while its command runs/,
      );
      await new Promise((r) => setImmediate(r));
      const [kept] = host.survey().recovery.directoryLeases.outcomes;
      assert.equal(kept.claim.phase, 'running', 'still held while its command runs');
      assert.equal(kept.disposition, 'active');
      assert.ok(warnings.some((w) => w.code === 'PROCLEASE_LEASE_LEFT' && /while its command may still run: it stays held/.test(w.message)), warnings.map(String).join('\n'));
      await assert.rejects(host.withDirectoryLease(dir, {}, async () => assert.fail('leased beside a running command')), /already leased|not empty/);
    } finally {
      process.off('warning', onWarning);
      left?.kill('SIGKILL');
    }
    await assert.rejects(host.withDirectoryLease(join(d.ws, 'absent'), { create: false }, async () => {}), (e) => e instanceof ProcleaseError && /no such directory \(ENOENT\); create it first/.test(e.message));
    const refusal = await host.withDirectoryLease('/etc/x', {}, async () => {}).catch((e) => e);
    assert.ok(refusal instanceof ProcleaseError);
    assert.equal(refusal.kind, 'storage');
    assert.equal(refusal.failure.kind, 'refused');
  } finally {
    host.close();
    d.cleanup();
  }
});

test('withAdmission holds the export admission; another acquirer is refused while it is held', async () => {
  const d = freshDirs();
  const host = await Host.open({ stateHome: d.home, workspaceRoots: [d.ws] });
  try {
    await host.withAdmission(async (admission) => {
      assert.equal(admission.claim().phase, 'parent-owned');
      const other = await host.withAdmission(async () => 'not reached').catch((e) => e);
      // This very process holds it: its own live claim is `active` for a new acquirer.
      assert.ok(other instanceof ProcleaseError);
      assert.equal(other.code, 'another-export-is-active');
      assert.equal(other.message, 'Beeper Message Like Me recovery: another export is active');
      assert.equal(host.survey().admission.survey.disposition, 'active');
    });
    assert.equal(host.survey().admission.survey, undefined, 'released');
    const recovery = host.recover({ dryRun: true });
    assert.equal(recovery.dryRun, true);
    assert.deepEqual(recovery.directoryLeases.outcomes, []);
    assert.equal(recovery.invocations.report.inspected, 0);
  } finally {
    host.close();
    d.cleanup();
  }
});

test("an operation's lock waits share one lockTimeoutMs: an admission's eight attempts behind a held lock say the timeout once", async () => {
  const d = freshDirs();
  const warnings = [];
  const open = (lockTimeoutMs) => Host.open({ stateHome: d.home, workspaceRoots: [d.ws], lockTimeoutMs, onWarning: (w) => warnings.push(w) });
  let holder;
  try {
    // No bound at all is a bound too (a BigInt of Infinity used to throw).
    const unbounded = await open(Infinity);
    try {
      await unbounded.withAdmission(async () => {});
    } finally {
      unbounded.close();
    }
    const digest = createHash('sha256').update('proclease-collection-lock\0recovery/beeper-message-like-me-export-admission').digest('hex');
    const lock = join(d.home, '.proclease/locks', `${digest}.lock`);
    assert.ok(fs.existsSync(lock), 'the admission collection lock file is where the test expects it');
    holder = spawn('flock', ['-o', '-x', lock, '-c', 'echo locked; exec sleep 60'], { stdio: ['ignore', 'pipe', 'ignore'], detached: true });
    await new Promise((resolve) => holder.stdout.once('data', resolve));
    // With a bound, and with none (every wait tries once): the timeout is said once either way.
    for (const timeout of [500, 0]) {
      const host = await open(timeout);
      warnings.length = 0;
      try {
        const refused = await host.withAdmission(async () => assert.fail('acquired behind a held lock')).catch((e) => e);
        assert.ok(refused instanceof ProcleaseError, String(refused));
        assert.match(refused.message, /export admission could not be acquired after bounded contention/);
      } finally {
        host.close();
      }
      // Before, each of the acquire's eight attempts waited the whole bound again, and said so.
      const timedOut = warnings.map(String).filter((w) => w.startsWith('waited '));
      assert.equal(timedOut.length, 1, `${timeout} ms: ${warnings.join('\n')}`);
      assert.match(timedOut[0], new RegExp(`^waited \\d+ ms for \\.proclease/locks/${digest}\\.lock, held by pid ${holder.pid} \\(flock, sleeping\\)`));
    }
  } finally {
    if (holder) process.kill(-holder.pid, 'SIGKILL');
    d.cleanup();
  }
});

test('an invocation lease is acquired under the catalog lock (the imported resource, released when the component drops it)', async () => {
  const d = freshDirs();
  const host = await Host.open({ stateHome: d.home, workspaceRoots: [d.ws] });
  try {
    const [a, b, c] = ['a'.repeat(64), 'b'.repeat(64), 'c'.repeat(64)];
    host.exports.stateStore.createIfAbsent(
      'provider-plugins/catalog.json',
      JSON.stringify({ schemaVersion: 1, plugins: [{ pluginId: 'portable-test', version: '1.0.0', hostApiVersion: 1, bundleSha256: a, manifestSha256: b, enabled: true }] }),
    );
    const { invocationLeases, records } = host.exports;
    const identity = records.parsePortableIdentity(
      JSON.stringify({ pluginId: 'portable-test', pluginVersion: '1.0.0', hostApiVersion: 1, bundleSha256: a, manifestSha256: b, adapterId: 'portable-test', transport: 'provider-api', surfaceId: 'portable-test', operation: 'records.read', contractVersion: 1, descriptorSha256: c }),
    );
    const snapshot = invocationLeases.acquire(identity, '3f1c9a52-8d2e-4b7a-9c1d-2e5f6a7b8c9d');
    assert.deepEqual(fs.readdirSync(join(d.home, 'provider-plugins/locks')), [], 'the catalog lock was released when the component dropped it');
    assert.equal(invocationLeases.list().length, 1);
    assert.equal(invocationLeases.leaseStatus(snapshot), 'exact-live-owner');
    const controller = invocationLeases.ContainmentController.create(snapshot);
    controller.cleanupComplete();
    invocationLeases.release(controller.current());
    controller[Symbol.dispose]();
    assert.deepEqual(invocationLeases.list(), []);
    // A disabled plugin cannot be acquired: the reference's refusal.
    host.exports.stateStore.replaceIfUnchanged(
      'provider-plugins/catalog.json',
      createHash('sha256').update(fs.readFileSync(join(d.home, 'provider-plugins/catalog.json'))).digest('hex'),
      JSON.stringify({ schemaVersion: 1, plugins: [] }),
    );
    assert.throws(() => invocationLeases.acquire(identity, '3f1c9a52-8d2e-4b7a-9c1d-2e5f6a7b8c9e'), (e) => /portable provider plugin portable-test changed or was disabled/.test(e.val.message));
  } finally {
    host.close();
    d.cleanup();
  }
});

test('a directory another run filled between the checks is refused "not empty", however late it is seen, and its lease given up', async () => {
  // The race a run that finishes and releases opens: this leaser saw the directory empty, that
  // run wrote its results and released, and no lease claims the directory any more. Leasing it
  // would let a later `recover` delete those results. The other run's writes are made here,
  // through this host's own system calls, at the two instants the race allows: after the check
  // that no lease claims the directory, just before the component looks at its entries again
  // (`conflict`); and once this leaser's own lease has landed in the collection (`create`).
  const LEASES = 'recovery/beeper-message-like-me-directory-leases';
  const d = freshDirs();
  const host = await Host.open({ stateHome: d.home, workspaceRoots: [d.ws] });
  const { firstNames, link, rename } = Directory.prototype;
  const where = (directory) => fs.readlinkSync(`/proc/self/fd/${directory.fd}`);
  try {
    for (const instant of ['conflict', 'create']) {
      const dir = join(d.ws, `job-${instant}`);
      fs.mkdirSync(dir, { mode: 0o700 });
      let wrote = false;
      let looks = 0;
      const otherRunFinishes = () => {
        if (!wrote) fs.writeFileSync(join(dir, 'result'), 'the other run finished');
        wrote = true;
      };
      Directory.prototype.firstNames = function (atMost) {
        // The first look is the one before the lease-creation lock; the second follows the check
        // that no lease claims the directory.
        if (where(this) === dir && ++looks === 2 && instant === 'conflict') otherRunFinishes();
        return firstNames.call(this, atMost);
      };
      // A lease file (`<id>.json`) landing in the collection; not a mutation claim (`.io-mutation-…`).
      const landed = (outcome, targetDir, target) => {
        const name = Buffer.from(target).toString();
        if (instant === 'create' && outcome === undefined && where(targetDir) === join(d.home, LEASES) && !name.startsWith('.') && name.endsWith('.json')) otherRunFinishes();
        return outcome;
      };
      Directory.prototype.link = function (source, targetDir, target) {
        return landed(link.call(this, source, targetDir, target), targetDir, target);
      };
      Directory.prototype.rename = function (source, targetDir, target, replace) {
        return landed(rename.call(this, source, targetDir, target, replace), targetDir, target);
      };
      const error = await host.withDirectoryLease(dir, {}, async () => assert.fail('the callback ran in a directory holding another run\'s results')).catch((e) => e);
      Object.assign(Directory.prototype, { firstNames, link, rename });
      assert.ok(wrote, `the race was staged at ${instant} (looks at the directory: ${looks})`);
      assert.ok(error instanceof Refusal && error.code === 'not-empty', String(error));
      assert.match(error.message, /refused: not empty\. `run` leases only a directory it creates or an empty one/);
      assert.equal(fs.readFileSync(join(dir, 'result'), 'utf8'), 'the other run finished', 'the results stay');
      const leases = fs.existsSync(join(d.home, LEASES)) ? fs.readdirSync(join(d.home, LEASES)) : [];
      assert.deepEqual(leases, [], `no lease is left (${instant})`);
    }
  } finally {
    Object.assign(Directory.prototype, { firstNames, link, rename });
    host.close();
    d.cleanup();
  }
});

test('a helper that cannot start leaves the admission parent-owned and no witness behind', async () => {
  const d = freshDirs();
  const host = await Host.open({ stateHome: d.home, workspaceRoots: [d.ws] });
  try {
    await host.withAdmission(async (admission) => {
      // Refused by spawn at once (an option it does not take), and by the system (no such program).
      for (const [command, options] of [['sleep', { stdio: 'bogus' }], ['/nonexistent/helper', { stdio: 'ignore' }]]) {
        const error = await admission.spawnHelper(command, ['1'], options).catch((e) => e);
        assert.ok(error instanceof ProcleaseError, String(error));
        assert.equal(error.kind, 'system');
        assert.match(error.message, /^cannot start the helper /);
        assert.equal(admission.claim().phase, 'parent-owned', `back to parent-owned (${command})`);
      }
    });
    assert.equal(fs.existsSync(join(d.home, 'recovery/beeper-message-like-me-export-admission/active.json')), false, 'released');
    const boot = fs.readdirSync(join(d.home, '.proclease/witnesses'));
    const left = boot.flatMap((b) => fs.readdirSync(join(d.home, '.proclease/witnesses', b)));
    assert.deepEqual(left.filter((n) => /\.(spawn|uncontained)-/.test(n)), [], 'no spawn witness left');
  } finally {
    host.close();
    d.cleanup();
  }
});

test("withAdmission releases once its helper is gone with all it started, and keeps the admission, saying so, while it runs", async () => {
  const d = freshDirs();
  const host = await Host.open({ stateHome: d.home, workspaceRoots: [d.ws] });
  const active = join(d.home, 'recovery/beeper-message-like-me-export-admission/active.json');
  const warnings = [];
  const onWarning = (w) => warnings.push(w);
  process.on('warning', onWarning);
  let running;
  try {
    // The helper ended before the callback did (no settleHelper): its witness is free, released.
    await host.withAdmission(async (admission) => {
      const helper = await admission.spawnHelper('true', [], { stdio: 'ignore' });
      if (helper.exitCode === null) await new Promise((r) => helper.once('exit', r));
    });
    assert.equal(fs.existsSync(active), false, 'released once the helper was gone');
    // The helper still runs when the callback ends: the admission stays, with a warning.
    let kept;
    await host.withAdmission(async (admission) => {
      kept = admission;
      running = await admission.spawnHelper('sleep', ['30'], { stdio: 'ignore' });
    });
    await new Promise((r) => setImmediate(r));
    assert.equal(JSON.parse(fs.readFileSync(active, 'utf8')).phase, 'helper-active', 'held while its helper runs');
    assert.ok(warnings.some((w) => w.code === 'PROCLEASE_ADMISSION_LEFT' && /the export admission stays held: its helper \(pid \d+\) is not provably gone/.test(w.message)), warnings.map(String).join('\n'));
    await assert.rejects(host.withAdmission(async () => assert.fail('acquired beside a running helper')), /another export is active/);
    assert.throws(() => kept.release(), (e) => e instanceof ProcleaseError && e.kind === 'helper-may-run');
    running.kill('SIGKILL');
    await new Promise((r) => running.once('exit', r));
    running = null;
    // Once the helper is gone (its witness free), the kept handle releases it.
    kept.release();
    assert.equal(fs.existsSync(active), false, 'released by the kept handle');
    assert.equal(await host.withAdmission(async (admission) => admission.claim().phase), 'parent-owned');
  } finally {
    process.off('warning', onWarning);
    running?.kill('SIGKILL');
    host.close();
    d.cleanup();
  }
});

test('a closed Host refuses every call and closes every descriptor it opened; a new one on the same directories works', async () => {
  const d = freshDirs();
  const fds = () => fs.readdirSync('/proc/self/fd').length;
  try {
    const before = fds();
    for (let i = 0; i < 3; i++) {
      const host = await Host.open({ stateHome: d.home, workspaceRoots: [d.ws] });
      await host.withDirectoryLease(join(d.ws, `job-${i}`), { create: true }, async () => {});
      host.recover();
      host.close();
      // Its descriptor numbers may be another Host's by now: a closed Host never reaches them.
      assert.throws(() => host.exports.stateStore.createIfAbsent('recovery/c/x.json', 'x'), /this Host is closed/);
      assert.throws(() => host.exports.workspace.inspect(join(d.ws, `job-${i}`)), /this Host is closed/);
    }
    assert.equal(fds(), before, 'no descriptor is left open');
    assert.equal(fs.existsSync(join(d.home, 'recovery/c')), false, 'nothing was written by a closed Host');
  } finally {
    d.cleanup();
  }
});
