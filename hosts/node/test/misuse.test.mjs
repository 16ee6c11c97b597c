// The library misused the way people misuse locks (#43 case 3): a process that ends inside
// `withDirectoryLease` / `withAdmission` without reaching its `finally` — `process.exit()`, a
// callback nobody awaited, Ctrl-C with no handler of its own. Before, the lease stayed behind and
// the next `recover` deleted the directory with the results in it. Each case runs in a real
// child process; the results and the state home are checked afterwards.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Host } from '../lib/index.mjs';
import { PACKAGE, freshDirs, until } from '../testing/helpers.mjs';

const INDEX = pathToFileURL(join(PACKAGE, 'lib', 'index.mjs')).href;
const LEASES = 'recovery/beeper-message-like-me-directory-leases';
const ADMISSION = 'recovery/beeper-message-like-me-export-admission/active.json';

/** Runs `body` (an ES module's text, given `host`, `dir` and `done(path)` that writes a marker) in a child node. */
function child(d, body) {
  const script = `
    import { Host } from ${JSON.stringify(INDEX)};
    import * as fs from 'node:fs';
    const host = await Host.open({ stateHome: ${JSON.stringify(d.home)}, workspaceRoots: [${JSON.stringify(d.ws)}] });
    const dir = ${JSON.stringify(join(d.ws, 'job'))};
    const done = (path) => fs.writeFileSync(path, 'built');
    ${body}
  `;
  const proc = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  proc.stderr.on('data', (c) => (stderr += c));
  const ended = new Promise((resolve) => proc.once('close', (code, signal) => resolve({ code, signal, stderr })));
  return { proc, ended };
}

/** The leases left, and whether `recover` keeps the results in `job`. */
async function afterwards(d) {
  const leases = fs.existsSync(join(d.home, LEASES)) ? fs.readdirSync(join(d.home, LEASES)) : [];
  const host = await Host.open({ stateHome: d.home, workspaceRoots: [d.ws] });
  try {
    host.recover();
  } finally {
    host.close();
  }
  return { leases, kept: fs.existsSync(join(d.ws, 'job', 'result.txt')) };
}

test('process.exit() inside withDirectoryLease releases the lease, and recover keeps the results', async () => {
  const d = freshDirs();
  try {
    const { ended } = child(d, `await host.withDirectoryLease(dir, {}, async () => { done(dir + '/result.txt'); process.exit(3); });`);
    const end = await ended;
    assert.equal(end.code, 3, end.stderr);
    assert.deepEqual(await afterwards(d), { leases: [], kept: true });
  } finally {
    d.cleanup();
  }
});

test('a withDirectoryLease nobody awaited, left when the event loop drains, releases the lease', async () => {
  const d = freshDirs();
  try {
    // The callback waits on a promise that never settles: the loop drains and the process exits.
    const { ended } = child(d, `host.withDirectoryLease(dir, {}, async () => { done(dir + '/result.txt'); await new Promise(() => {}); });`);
    const end = await ended;
    assert.equal(end.code, 0, end.stderr);
    assert.deepEqual(await afterwards(d), { leases: [], kept: true });
  } finally {
    d.cleanup();
  }
});

test('Ctrl-C (SIGINT) inside withDirectoryLease releases the lease and still ends the process by the signal', async () => {
  const d = freshDirs();
  try {
    const marker = join(d.ws, 'job', 'result.txt');
    const { proc, ended } = child(d, `await host.withDirectoryLease(dir, {}, async () => { done(dir + '/result.txt'); await new Promise((r) => setTimeout(r, 60_000)); });`);
    await until(() => fs.existsSync(marker), 30_000, 'the callback to run');
    proc.kill('SIGINT');
    const end = await ended;
    assert.equal(end.signal, 'SIGINT', `ended by the signal, as without proclease: ${end.code} ${end.stderr}`);
    assert.deepEqual(await afterwards(d), { leases: [], kept: true });
  } finally {
    d.cleanup();
  }
});

test('a program with its own SIGTERM handler keeps the signal and the lease until it exits', async () => {
  const d = freshDirs();
  try {
    const marker = join(d.ws, 'job', 'result.txt');
    const body = `
      process.on('SIGTERM', () => { done(dir + '/saw-term'); setTimeout(() => process.exit(0), 200); });
      await host.withDirectoryLease(dir, {}, async () => { done(dir + '/result.txt'); await new Promise((r) => setTimeout(r, 60_000)); });`;
    const { proc, ended } = child(d, body);
    await until(() => fs.existsSync(marker), 30_000, 'the callback to run');
    proc.kill('SIGTERM');
    await until(() => fs.existsSync(join(d.ws, 'job', 'saw-term')), 10_000, 'the program to handle SIGTERM');
    assert.equal(fs.readdirSync(join(d.home, LEASES)).length, 1, "the lease is held while the program's handler runs");
    const end = await ended;
    assert.equal(end.code, 0, end.stderr);
    assert.deepEqual(await afterwards(d), { leases: [], kept: true });
  } finally {
    d.cleanup();
  }
});

test('process.exit() inside withAdmission releases a parent-owned admission', async () => {
  const d = freshDirs();
  try {
    const { ended } = child(d, `await host.withAdmission(async () => { process.exit(0); });`);
    const end = await ended;
    assert.equal(end.code, 0, end.stderr);
    assert.equal(fs.existsSync(join(d.home, ADMISSION)), false, 'the admission was released');
  } finally {
    d.cleanup();
  }
});

test('every error is a ProcleaseError, exported by name; wrong arguments are refused before anything is created (#43 case 7)', async () => {
  const { ComponentError, ProcleaseError, Refusal, StateHomeError } = await import('../lib/index.mjs');
  const d = freshDirs();
  const host = await Host.open({ stateHome: d.home, workspaceRoots: [d.ws] });
  try {
    const job = join(d.ws, 'job');
    for (const [call, what] of [
      [() => host.withDirectoryLease(job, {}, 'not a function'), 'a missing callback'],
      [() => host.withDirectoryLease('relative/job', {}, async () => {}), 'a relative path'],
      [() => host.withDirectoryLease(job, { create: 'yes' }, async () => {}), 'a create that is not a boolean'],
      [() => host.withAdmission(undefined), 'withAdmission without a callback'],
    ]) {
      await assert.rejects(call(), (e) => e instanceof ProcleaseError && e.kind === 'invalid-argument', what);
      assert.equal(fs.existsSync(job), false, `${what}: nothing was created`);
    }
    assert.equal(fs.existsSync(join(d.home, LEASES)) ? fs.readdirSync(join(d.home, LEASES)).length : 0, 0, 'nothing was leased');

    // The options may be left out.
    assert.equal(await host.withDirectoryLease(job, async (lease) => lease.path), job);

    await assert.rejects(host.withDirectoryLease(join(d.home, 'inside'), async () => {}), (e) => e instanceof Refusal && e instanceof ProcleaseError && e.kind === 'refused');
    await host.withAdmission(async () => {
      await assert.rejects(host.withAdmission(async () => {}), (e) => e instanceof ComponentError && e instanceof ProcleaseError && e.code === 'another-export-is-active');
    });
    const shared = join(d.ws, 'shared');
    fs.mkdirSync(shared, { mode: 0o700 });
    fs.chmodSync(shared, 0o777);
    await assert.rejects(Host.open({ stateHome: shared, workspaceRoots: [d.ws] }), (e) => e instanceof StateHomeError && e instanceof ProcleaseError, 'a state home others may write');
  } finally {
    host.close();
    d.cleanup();
  }
});

test('a helper started with spawnHelper keeps every exporter out while it runs after its holder failed and exited, and lets the next one in once it is gone (#43 case 5)', async () => {
  const { native, nativeSkip } = await import('../testing/helpers.mjs');
  const d = freshDirs();
  let helper = null;
  try {
    // The holder starts its helper, then fails: a plain exception out of withAdmission, and a
    // normal exit. The admission must stay (the helper runs), and be taken over once it ends.
    const { proc, ended } = child(
      d,
      `await host.withAdmission(async (admission) => {
         const helper = await admission.spawnHelper('sleep', ['300'], { stdio: 'ignore', detached: true });
         helper.unref();
         console.log(helper.pid);
         throw new Error('the export failed');
       }).catch((e) => console.error(e.message));
       host.close();`,
    );
    let out = '';
    proc.stdout.on('data', (c) => (out += c));
    const end = await ended;
    assert.equal(end.code, 0, end.stderr);
    assert.match(end.stderr, /the export failed/);
    helper = Number(out.trim());
    assert.ok(helper > 0, `the helper's pid: ${out}`);
    process.kill(helper, 0);
    const claim = JSON.parse(fs.readFileSync(join(d.home, ADMISSION), 'utf8'));
    assert.equal(claim.phase, 'helper-active');
    assert.equal(claim.helperOwner.pid, helper, 'the helper is recorded');

    // Its holder is gone and the helper runs: every acquirer is refused.
    const host = await Host.open({ stateHome: d.home, workspaceRoots: [d.ws] });
    try {
      await assert.rejects(host.withAdmission(async () => assert.fail('acquired beside a live helper')), /another export is active/);
    } finally {
      host.close();
    }
    if (!nativeSkip()) {
      const refused = await native(d.home, d.ws, ['run', '--exclusive', '--workdir', join(d.ws, 'a'), '--', 'true']);
      assert.equal(refused.code, 3, refused.stderr);
    }

    // The helper ends: its witness is free, and the next exporter takes the admission over.
    process.kill(helper, 'SIGKILL');
    await until(() => {
      try {
        process.kill(helper, 0);
        return false;
      } catch {
        return true;
      }
    }, 10_000, 'the helper to end');
    helper = null;
    const again = await Host.open({ stateHome: d.home, workspaceRoots: [d.ws] });
    try {
      assert.equal(await again.withAdmission(async (admission) => admission.claim().phase), 'parent-owned', 'taken over in this package');
    } finally {
      again.close();
    }
    if (!nativeSkip()) {
      const ran = await native(d.home, d.ws, ['run', '--exclusive', '--workdir', join(d.ws, 'b'), '--', 'true']);
      assert.equal(ran.code, 0, ran.stderr);
    }
  } finally {
    if (helper !== null) process.kill(helper, 'SIGKILL');
    d.cleanup();
  }
});

// Ctrl-C before the command started, when what was taken cannot all be released (a lock held for
// ever, a state home that stopped taking writes): the message names what is left and what takes
// it over, never "nothing is left behind". The signal's instant and the failing release are what
// a test cannot make a real run meet on demand: the signal is emitted as `runCommand` starts, and
// the admission's release is made to fail.
test('a signal before the command started names what could not be released', async () => {
  const { runCommand } = await import('../lib/supervisor.mjs');
  const { Refusal } = await import('../lib/lease-new-directory.mjs');
  const d = freshDirs();
  const host = await Host.open({ stateHome: d.home, workspaceRoots: [d.ws], onWarning: () => {} });
  const { Admission } = host.exports.exportAdmission;
  const release = Admission.prototype.release;
  Admission.prototype.release = function refused() {
    throw new Error('waited 10000 ms for the lock');
  };
  try {
    const job = join(d.ws, 'job');
    const running = runCommand(host, job, ['touch', 'ran'], { exclusive: true });
    process.emit('SIGTERM', 'SIGTERM');
    const error = await running.catch((e) => e);
    assert.ok(error instanceof Refusal, String(error));
    assert.equal(
      error.message,
      'interrupted by signal 15 before the command started; nothing was started, but not all it held could be released in time: the export admission (waited 10000 ms for the lock): the next `run --exclusive` takes it over once this process has exited',
    );
    assert.ok(!fs.existsSync(job), 'nothing was leased or created');
    assert.ok(fs.existsSync(join(host.stateHome, ADMISSION)), 'the admission it names is there');
  } finally {
    Admission.prototype.release = release;
  }
});
