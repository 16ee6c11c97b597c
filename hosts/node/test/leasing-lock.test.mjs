// The lease-creation lock: the portable artifact takes the native host's
// `.proclease/locks/directory-lease-creation.lock` through this host's `sys-kernel` (flock(1),
// `lib/sys.mjs`), so that its `run` and `recover` and the native ones exclude each other. Needs util-linux's flock(1), and the native
// binary for the cross-host half (skipped, saying why, without it).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import { join } from 'node:path';
import { flockBinary } from '../lib/process-identity/flock.mjs';
import { Directory } from '../lib/sys.mjs';
import { ComponentError, Host } from '../lib/index.mjs';
import { leaseNewDirectory } from '../lib/lease-new-directory.mjs';
import { NATIVE, freshDirs, killAll, nativeSkip, runToEnd, until } from '../testing/helpers.mjs';

const skip = flockBinary() === null ? "util-linux's flock(1) is absent: this host takes no lock" : nativeSkip();

test('the lease-creation lock excludes across hosts: this host waits for another holder, names it and creates nothing; once it is gone the lease goes ahead and leaves the lock free for a native run', { skip }, async () => {
  const d = freshDirs();
  const host = await Host.open({ stateHome: d.home, workspaceRoots: [d.ws], lockTimeoutMs: 300, onWarning: () => {} });
  const lock = join(host.stateHome, '.proclease/locks/directory-lease-creation.lock');
  const nativeRun = (workdir) => runToEnd(NATIVE, ['--state-home', host.stateHome, '--workspace-root', d.ws, 'run', '--lock-timeout', '1s', '--workdir', workdir, '--', 'true']);
  let holder;
  try {
    // Another process holds it, as a native run does while it leases (`--no-fork`: flock(1)
    // becomes the command, one process that holds it).
    fs.mkdirSync(join(host.stateHome, '.proclease/locks'), { recursive: true, mode: 0o700 });
    holder = spawn(flockBinary(), ['--exclusive', '--no-fork', lock, 'sh', '-c', 'echo held; exec sleep 60'], { stdio: ['ignore', 'pipe', 'inherit'] });
    await new Promise((r) => holder.stdout.once('data', r));
    const waited = await host.withDirectoryLease(join(d.ws, 'a'), { create: true }, async () => assert.fail('leased while another process held the lock')).catch((e) => e);
    assert.ok(waited instanceof ComponentError && waited.kind === 'storage' && waited.failure?.kind === 'contended', String(waited));
    assert.match(waited.message, new RegExp(`^waited \\d+ ms for ${lock.replace(/[/.]/g, '\\$&')}, held by pid ${holder.pid} \\((sh|sleep), sleeping\\): continue a stopped holder`));
    assert.equal(fs.existsSync(join(d.ws, 'a')), false, 'nothing was created');
    // Once its holder is gone the lock is free, and the lease goes ahead.
    holder.kill('SIGKILL');
    await new Promise((r) => holder.once('exit', r));
    let inside;
    await host.withDirectoryLease(join(d.ws, 'b'), { create: true }, async () => {
      inside = fs.existsSync(join(d.ws, 'b'));
      // Held only while the component leases: a native run leases another directory meanwhile.
      const meanwhile = await nativeRun(join(d.ws, 'c'));
      assert.equal(meanwhile.code, 0, meanwhile.stderr);
    });
    assert.equal(inside, true);
  } finally {
    holder?.kill('SIGKILL');
    host.close();
    d.cleanup();
  }
});

test("a component call that fails while it holds the lease-creation lock leaves it released (as the native host releases it after every call)", { skip }, async () => {
  const d = freshDirs();
  let host = await Host.open({ stateHome: d.home, workspaceRoots: [d.ws] });
  const workdir = join(d.ws, 'crashed');
  try {
    // A crashed run to recover: recovery takes the lock before it removes the directory.
    const run = spawn(NATIVE, ['--state-home', d.home, '--workspace-root', d.ws, 'run', '--containment', 'none', '--workdir', workdir, '--', 'sleep', '60'], { stdio: 'ignore' });
    let lease;
    await until(() => {
      const dir = join(d.home, 'recovery/beeper-message-like-me-directory-leases');
      const name = fs.existsSync(dir) && fs.readdirSync(dir).find((n) => n.endsWith('.json'));
      lease = name && JSON.parse(fs.readFileSync(join(dir, name), 'utf8'));
      return lease?.phase === 'running';
    }, 20_000, 'the native run to record its child');
    await killAll([lease.owner.pid, lease.childOwner.pid]);
    // The rename to the quarantine fails with an error no system call gives (a bug of this
    // host): the component traps with the lease-creation lock held.
    const rename = Directory.prototype.rename;
    Directory.prototype.rename = () => {
      throw new TypeError('an unexpected failure inside the removal');
    };
    assert.throws(() => host.recover(), /an unexpected failure inside the removal/);
    Directory.prototype.rename = rename;
    assert.ok(fs.existsSync(workdir), 'nothing removed');
    // Another host can lease at once, and the recovery, once the removal works, goes ahead.
    const ran = await runToEnd(NATIVE, ['--state-home', d.home, '--workspace-root', d.ws, 'run', '--lock-timeout', '1s', '--workdir', join(d.ws, 'other'), '--', 'true']);
    assert.equal(ran.code, 0, ran.stderr);
    // The instance that trapped is not called again: this host says so, and a new one recovers.
    assert.throws(() => host.recover(), /a previous call into the proclease component failed unexpectedly/);
    host.close();
    host = await Host.open({ stateHome: d.home, workspaceRoots: [d.ws] });
    const done = host.recover();
    assert.equal(done.directoryLeases.report.recovered, 1);
    assert.equal(fs.existsSync(workdir), false);
  } finally {
    host.close();
    d.cleanup();
  }
});

test('a trap inside a resource method (a lease\'s release) releases every kernel lock at once, and the host refuses every later call', { skip }, async () => {
  const d = freshDirs();
  const host = await Host.open({ stateHome: d.home, workspaceRoots: [d.ws] });
  const rename = Directory.prototype.rename;
  try {
    const { resource } = leaseNewDirectory(host, join(d.ws, 'job'));
    // An import that throws while the lease's release holds the collection's kernel lock.
    Directory.prototype.rename = () => {
      throw new TypeError('an unexpected failure inside the release');
    };
    assert.throws(() => resource.release(), /an unexpected failure inside the release/);
    Directory.prototype.rename = rename;
    const locks = fs.readFileSync('/proc/locks', 'utf8');
    for (const name of fs.readdirSync(join(d.home, '.proclease/locks'))) {
      const { ino } = fs.statSync(join(d.home, '.proclease/locks', name));
      assert.ok(!locks.split('\n').some((line) => line.split(/\s+/)[5]?.endsWith(`:${ino}`)), `${name} is not locked any more`);
    }
    // A native run writes to the same collection at once (no wait for a lock this process left).
    const ran = await runToEnd(NATIVE, ['--state-home', d.home, '--workspace-root', d.ws, 'run', '--lock-timeout', '2s', '--workdir', join(d.ws, 'other'), '--', 'true']);
    assert.equal(ran.code, 0, ran.stderr);
    assert.throws(() => resource.update('settled', undefined), /failed unexpectedly .*open a new Host/);
    assert.throws(() => host.recover(), /failed unexpectedly .*open a new Host/);
    resource[Symbol.dispose](); // a drop after the trap is not made, and does not throw
  } finally {
    Directory.prototype.rename = rename;
    host.close();
    d.cleanup();
  }
});
