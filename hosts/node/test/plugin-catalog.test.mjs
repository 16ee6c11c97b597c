// The plugin catalog as this host runs it: the portable artifact's `plugin-catalog` export (the
// Rust protocol every host runs) over this host's system calls (`lib/sys.mjs`). The installed
// identity from catalog.json, and the reference's catalog mutation lock (§5) across processes —
// this host's and the native one's.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { NATIVE, PACKAGE, freshHost, nativeSkip } from '../testing/helpers.mjs';

/** The reference's refusal while another live process holds the lock (§5). */
const ALREADY_LOCKED = 'portable plugin catalog mutation is already locked';

/** The reference's exact lock record (§5), as a fixture. */
const lockText = (acquiredAt, owner) =>
  `{"acquiredAt":"${acquiredAt}","bootId":"${owner.bootId}","pid":${owner.pid},"processStartId":"${owner.processStartId}","schemaVersion":1,"scope":"catalog-mutation"}\n`;

/** The artifact's catalog, answering plain values: the installation or null. */
const catalogOf = (h) => ({
  installed: (id) => h.parts.root.pluginCatalog.installed(id).plugin ?? null,
  lock: () => h.parts.root.pluginCatalog.lock(),
});

const LOCK = 'provider-plugins/locks/.catalog-mutation.lock';

/** A child process holding the lock: resolves once it says `locked`. */
async function holder(h) {
  const child = spawn(process.execPath, [join(PACKAGE, 'testing/fixtures/hold-catalog-lock.mjs'), h.parts.home.path, h.ws], { stdio: ['pipe', 'pipe', 'inherit'] });
  let out = '';
  await new Promise((resolve, reject) => {
    child.stdout.on('data', (d) => {
      out += d;
      if (out.includes('locked\n')) resolve();
      if (out.includes('refused')) reject(new Error(out));
    });
    child.once('exit', () => reject(new Error(`the holder exited: ${out}`)));
  });
  return child;
}

test('installed reads the enabled installation from <state home>/provider-plugins/catalog.json', async () => {
  const h = await freshHost();
  try {
    const catalog = catalogOf(h);
    const store = h.parts.root.stateStore;
    assert.equal(catalog.installed('portable-test'), null, 'no catalog: nothing installed');
    const plugin = { pluginId: 'portable-test', version: '1.0.0', hostApiVersion: 1, bundleSha256: 'a'.repeat(64), manifestSha256: 'b'.repeat(64), enabled: true };
    store.createIfAbsent('provider-plugins/catalog.json', JSON.stringify({ schemaVersion: 1, plugins: [plugin, { ...plugin, pluginId: 'off', enabled: false }] }));
    assert.deepEqual(catalog.installed('portable-test'), { pluginId: 'portable-test', version: '1.0.0', hostApiVersion: 1, bundleSha256: 'a'.repeat(64), manifestSha256: 'b'.repeat(64) });
    assert.equal(catalog.installed('off'), null);
    assert.equal(catalog.installed('absent'), null);
    const text = fs.readFileSync(join(h.parts.home.path, 'provider-plugins/catalog.json'), 'utf8');
    store.replaceIfUnchanged('provider-plugins/catalog.json', createHash('sha256').update(text).digest('hex'), '{"schemaVersion":2}');
    assert.throws(() => catalog.installed('x'), (e) => e === 'provider-plugins/catalog.json: the plugin catalog must have "schemaVersion": 1; see `proclease --help` for the catalog format');
  } finally {
    h.cleanup();
  }
});

test('the lock is the reference lock file, re-entrant in one process, released at the last level', async () => {
  const h = await freshHost();
  try {
    const imports = catalogOf(h);
    const file = join(h.parts.home.path, LOCK);
    const before = Date.now();
    const outer = imports.lock();
    const text = fs.readFileSync(file, 'utf8');
    const acquiredAt = JSON.parse(text).acquiredAt;
    assert.ok(Date.parse(acquiredAt) >= before - 1 && Date.parse(acquiredAt) <= Date.now());
    assert.equal(text, lockText(acquiredAt, h.parts.processes.selfIdentity()), 'canonical record of this process');
    assert.equal(fs.statSync(file).mode & 0o777, 0o600);
    for (const d of ['artifacts', 'trust', 'active', 'locks']) assert.equal(fs.statSync(join(h.parts.home.path, 'provider-plugins', d)).mode & 0o777, 0o700, d);
    const inner = imports.lock();
    inner[Symbol.dispose]();
    assert.ok(fs.existsSync(file), 'one level is still held');
    outer[Symbol.dispose]();
    assert.equal(fs.existsSync(file), false, 'the last level removes it');
    assert.deepEqual(fs.readdirSync(join(h.parts.home.path, 'provider-plugins/locks')), [], 'no claim, stage or reclaim file is left');
  } finally {
    h.cleanup();
  }
});

test('another live process holding the lock refuses at once; a dead holder\'s lock is taken over', async () => {
  const h = await freshHost();
  const child = await holder(h);
  try {
    const imports = catalogOf(h);
    assert.throws(() => imports.lock(), (e) => e === ALREADY_LOCKED);
    child.kill('SIGKILL');
    await new Promise((r) => child.once('exit', r));
    assert.ok(fs.existsSync(join(h.parts.home.path, LOCK)), 'a killed holder leaves its lock');
    const lock = imports.lock();
    assert.equal(JSON.parse(fs.readFileSync(join(h.parts.home.path, LOCK), 'utf8')).pid, process.pid, 'taken over');
    lock[Symbol.dispose]();
  } finally {
    child.kill('SIGKILL');
    h.cleanup();
  }
});

test('the native binary honours a lock this host holds, and takes it over once the holder is dead', { skip: nativeSkip() }, async () => {
  const h = await freshHost();
  const child = await holder(h);
  try {
    const run = promisify(execFile);
    const repair = () => run(NATIVE, ['--state-home', h.parts.home.path, '--workspace-root', h.ws, 'invocations', 'repair'], { timeout: 60_000 });
    await assert.rejects(repair(), (e) => e.stderr.includes(ALREADY_LOCKED));
    child.kill('SIGKILL');
    await new Promise((r) => child.once('exit', r));
    await repair();
    assert.equal(fs.existsSync(join(h.parts.home.path, LOCK)), false, 'taken over and released by the native host');
  } finally {
    child.kill('SIGKILL');
    h.cleanup();
  }
});

test('a catalog lock left by a call that trapped is released with its guard, and the native binary takes it over at once', { skip: nativeSkip() }, async () => {
  const h = await freshHost();
  const { Directory } = await import('../lib/sys.mjs');
  const openDir = Directory.prototype.openDir;
  try {
    const lock = catalogOf(h).lock();
    assert.ok(fs.existsSync(join(h.parts.home.path, LOCK)), 'held');
    // A bug of this host inside an import call: the instance traps with the lock held.
    Directory.prototype.openDir = () => {
      throw new TypeError('an unexpected failure inside an import');
    };
    assert.throws(() => h.parts.root.stateStore.readIfPresent('recovery/c/r.json', 10), /an unexpected failure inside an import/);
    Directory.prototype.openDir = openDir;
    assert.throws(() => catalogOf(h).lock(), /failed unexpectedly .*open a new Host/);
    // This process lives and its lock file stays, but the guard it held was released, with the
    // note naming that lock: the native host takes it over instead of `already locked`.
    assert.ok(fs.existsSync(join(h.parts.home.path, LOCK)), 'the lock file is still there');
    const run = promisify(execFile);
    await run(NATIVE, ['--state-home', h.parts.home.path, '--workspace-root', h.ws, 'invocations', 'repair'], { timeout: 60_000 });
    assert.equal(fs.existsSync(join(h.parts.home.path, LOCK)), false, 'taken over and released by the native host');
    lock[Symbol.dispose]?.();
  } finally {
    Directory.prototype.openDir = openDir;
    h.cleanup();
  }
});

test('a call jco refuses before it enters the component (a wrong argument type) is no trap: the catalog lock and its guard stay held', async () => {
  const h = await freshHost();
  let other;
  try {
    const lock = catalogOf(h).lock();
    assert.throws(() => h.parts.root.stateStore.readIfPresent(42, 10), (e) => e instanceof TypeError);
    // Another process is still refused: the guard was not released by that error.
    other = spawn(process.execPath, [join(PACKAGE, 'testing/fixtures/hold-catalog-lock.mjs'), h.parts.home.path, h.ws], { stdio: ['pipe', 'pipe', 'inherit'] });
    const said = await new Promise((r) => other.stdout.once('data', (d) => r(String(d))));
    assert.equal(said.trim(), `refused: ${ALREADY_LOCKED}`);
    assert.equal(JSON.parse(fs.readFileSync(join(h.parts.home.path, LOCK), 'utf8')).pid, process.pid, 'still this process\'s lock');
    // And this host goes on: the instance was never entered.
    assert.equal(h.parts.root.stateStore.readIfPresent('recovery/c/r.json', 10).text, undefined);
    lock[Symbol.dispose]();
    assert.equal(fs.existsSync(join(h.parts.home.path, LOCK)), false, 'released at its drop');
  } finally {
    other?.kill('SIGKILL');
    h.cleanup();
  }
});
