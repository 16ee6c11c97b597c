// The lease-creation lock (`lib/state-store/leasing-lock.mjs`): this host takes the native host's
// `.proclease/locks/directory-lease-creation.lock` through flock(1), so that its `run` and
// `recover` and the native ones exclude each other. Needs util-linux's flock(1), and the native
// binary for the cross-host half (skipped, saying why, without it).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import { join } from 'node:path';
import { flockBinary } from '../lib/process-identity/flock.mjs';
import { LEASING_LOCK } from '../lib/state-store/leasing-lock.mjs';
import { Host } from '../lib/index.mjs';
import { NATIVE, freshDirs, killAll, nativeSkip, runToEnd, until } from '../testing/helpers.mjs';

const skip = flockBinary() === null ? "util-linux's flock(1) is absent: this host takes no lock" : nativeSkip();

test('the lease-creation lock excludes across hosts: a native run waits while this host holds it and goes on once it is released; this host waits for another holder and names it', { skip }, async () => {
  const d = freshDirs();
  const host = await Host.open({ stateHome: d.home, workspaceRoots: [d.ws] });
  const h = { parts: host.parts, ws: d.ws };
  const home = host.stateHome;
  const lock = join(home, '.proclease/locks', LEASING_LOCK);
  const nativeRun = (workdir) => runToEnd(NATIVE, ['--state-home', home, '--workspace-root', h.ws, 'run', '--lock-timeout', '1s', '--workdir', workdir, '--', 'true']);
  let holder;
  try {
    const { store } = h.parts;
    assert.equal(store.leasing.take(), true);
    assert.equal(store.leasing.take(), true, 'taken again by its holder: no wait');
    const stat = fs.lstatSync(lock);
    assert.ok(stat.isFile() && (stat.mode & 0o777) === 0o600, 'the native host\'s lock file, private');

    // A native run cannot lease a new directory meanwhile: it waits its bound, creates nothing.
    const refused = await nativeRun(join(h.ws, 'a'));
    assert.equal(refused.code, 5, `exit 5 (lock timeout): ${refused.stderr}`);
    assert.match(refused.stderr, /directory-lease-creation\.lock/);
    assert.equal(fs.existsSync(join(h.ws, 'a')), false, 'nothing was created');
    store.leasing.release();
    const ran = await nativeRun(join(h.ws, 'a'));
    assert.equal(ran.code, 0, ran.stderr);

    // The other way round: another process holds it (as a native run does while it leases;
    // `--no-fork`: flock(1) becomes the command, one process that holds it).
    holder = spawn(flockBinary(), ['--exclusive', '--no-fork', lock, 'sh', '-c', 'echo held; exec sleep 60'], { stdio: ['ignore', 'pipe', 'inherit'] });
    await new Promise((r) => holder.stdout.once('data', r));
    assert.throws(
      () => store.leasing.take(300),
      (error) => {
        assert.equal(error.kind, 'contended');
        assert.match(error.message, new RegExp(`^waited for ${lock.replace(/[/.]/g, '\\$&')}, held by pid ${holder.pid} \\((sh|sleep), sleeping\\): continue a stopped holder`));
        return true;
      },
    );
    // This host's own lease of a new directory (`withDirectoryLease`, `run`) takes it too: once
    // its holder is gone the lock is free, and the lease goes ahead.
    holder.kill('SIGKILL');
    await new Promise((r) => holder.once('exit', r));
    let inside;
    await host.withDirectoryLease(join(h.ws, 'b'), { create: true }, async () => {
      inside = fs.existsSync(join(h.ws, 'b'));
    });
    assert.equal(inside, true);
    assert.equal(store.leasing.fd, null, 'released once the lease was made');
    // It is free for a native run again.
    const again = await nativeRun(join(h.ws, 'c'));
    assert.equal(again.code, 0, again.stderr);
  } finally {
    holder?.kill('SIGKILL');
    host.parts.store.leasing.release();
    host.close();
    d.cleanup();
  }
});

test("a component call that fails while it holds the lease-creation lock leaves it released (as the native host releases it after every call)", { skip }, async () => {
  const d = freshDirs();
  const host = await Host.open({ stateHome: d.home, workspaceRoots: [d.ws] });
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
    // The workspace's removal fails with an error no import turns into a WIT failure: the
    // component traps with the lock held.
    const removeTree = host.parts.workspace.removeTree;
    host.parts.workspace.removeTree = () => {
      throw new TypeError('an unexpected failure inside the removal');
    };
    assert.throws(() => host.recover(), /an unexpected failure inside the removal/);
    assert.equal(host.parts.store.leasing.fd, null, 'released when the outermost call ended');
    assert.ok(fs.existsSync(workdir), 'nothing removed');
    // Another host can lease at once, and the recovery, once the removal works, goes ahead.
    const ran = await runToEnd(NATIVE, ['--state-home', d.home, '--workspace-root', d.ws, 'run', '--lock-timeout', '1s', '--workdir', join(d.ws, 'other'), '--', 'true']);
    assert.equal(ran.code, 0, ran.stderr);
    host.parts.workspace.removeTree = removeTree;
    const done = host.recover();
    assert.equal(done.directoryLeases.report.recovered, 1);
    assert.equal(fs.existsSync(workdir), false);
  } finally {
    host.close();
    d.cleanup();
  }
});
