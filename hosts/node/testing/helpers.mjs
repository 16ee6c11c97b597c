// Shared by the tests: private temporary directories, a host on one, the native binary.
import * as fs from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { assemble } from '../lib/host.mjs';

export const PACKAGE = dirname(dirname(fileURLToPath(import.meta.url)));
export const BIN = join(PACKAGE, 'bin', 'proclease.mjs');
/** The native binary the interop tests use (`$PROCLEASE_BIN`, default the repository's `target/debug/proclease`). */
export const NATIVE = process.env.PROCLEASE_BIN ?? join(PACKAGE, '..', '..', 'target', 'debug', 'proclease');
export const nativeAvailable = () => {
  try {
    fs.accessSync(NATIVE, fs.constants.X_OK);
    return true;
  } catch {
    return false;
  }
};
/** The reason interop tests skip, or false. */
export const nativeSkip = () => (nativeAvailable() ? false : `the native binary ${NATIVE} is absent (build it, or set PROCLEASE_BIN): interop not tested`);

/** A fresh private (0700) temporary directory, removed by `cleanup`. */
export function privateTemp(prefix = 'proclease-node-') {
  const dir = fs.realpathSync(fs.mkdtempSync(join(tmpdir(), prefix)));
  fs.chmodSync(dir, 0o700);
  return dir;
}

/** A host (`assemble`'s parts) on a fresh state home, with a workspace root `ws` beside it. */
export async function freshHost() {
  const dir = privateTemp();
  const ws = join(dir, 'ws');
  fs.mkdirSync(ws, { mode: 0o700 });
  const parts = await assemble({ stateHome: join(dir, 'home'), workspaceRoots: [ws] });
  return { dir, ws, parts, cleanup: () => { parts.sys.close(); parts.home.close(); fs.rmSync(dir, { recursive: true, force: true }); } };
}

/** The names below `dir`, recursively (relative paths). */
export function tree(dir) {
  const out = [];
  const walk = (d, prefix) => {
    for (const e of fs.readdirSync(d, { withFileTypes: true })) {
      const rel = prefix ? `${prefix}/${e.name}` : e.name;
      out.push(rel);
      if (e.isDirectory()) walk(join(d, e.name), rel);
    }
  };
  walk(dir, '');
  return out.sort();
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Waits until `predicate()` holds (polling), at most `ms`. */
export async function until(predicate, ms = 10_000, what = 'a condition') {
  const start = Date.now();
  for (;;) {
    if (await predicate()) return;
    if (Date.now() - start > ms) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

import { spawn as spawnProcess } from 'node:child_process';

/** Runs a program to its end: `{code, signal, stdout, stderr}` (never rejects). */
export function runToEnd(program, args, options = {}) {
  return new Promise((resolve) => {
    const child = spawnProcess(program, args, { stdio: ['ignore', 'pipe', 'pipe'], ...options });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    child.once('error', (error) => resolve({ code: null, signal: null, stdout, stderr: String(error) }));
    child.once('close', (code, signal) => resolve({ code, signal, stdout, stderr }));
  });
}

/** This package's `proclease` on the state home `home` with the workspace root `ws`. */
export const node = (home, ws, args, options) => runToEnd(process.execPath, [BIN, '--state-home', home, '--workspace-root', ws, ...args], options);

/** The native `proclease` on the state home `home` with the workspace root `ws`. */
export const native = (home, ws, args, options) => runToEnd(NATIVE, ['--state-home', home, '--workspace-root', ws, ...args], options);

/** A fresh state home path and workspace root (nothing created in the home yet). */
export function freshDirs() {
  const dir = privateTemp();
  const ws = join(dir, 'ws');
  fs.mkdirSync(ws, { mode: 0o700 });
  return { dir, home: join(dir, 'home'), ws, cleanup: () => fs.rmSync(dir, { recursive: true, force: true }) };
}

/** Starts a long-running `run` (`program`: node or native) of `sleep 30` in `workdir`; resolves `{child, lease}` once its lease records the child. */
export async function startRun(program, d, workdir, extra = []) {
  const args = ['--state-home', d.home, '--workspace-root', d.ws, 'run', ...extra, '--workdir', workdir, '--', 'sleep', '30'];
  const child = program === 'node' ? spawnProcess(process.execPath, [BIN, ...args], { stdio: 'ignore' }) : spawnProcess(NATIVE, args, { stdio: 'ignore' });
  const leases = join(d.home, 'recovery/beeper-message-like-me-directory-leases');
  let lease = null;
  await until(() => {
    try {
      for (const name of fs.readdirSync(leases)) {
        if (!name.endsWith('.json')) continue;
        const claim = JSON.parse(fs.readFileSync(join(leases, name), 'utf8'));
        if (claim.path === workdir && claim.phase === 'running') {
          lease = claim;
          return true;
        }
      }
    } catch {
      // Not there yet.
    }
    return false;
  }, 20_000, `the run in ${workdir} to record its child`);
  return { child, lease };
}

/** SIGKILLs `pids` and waits until they are gone. */
export async function killAll(pids) {
  for (const pid of pids) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // Gone already.
    }
  }
  await until(() => pids.every((pid) => {
    try {
      process.kill(pid, 0);
      // A zombie of ours counts as gone once reaped; others are gone when ESRCH.
      return fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.startsWith('Z');
    } catch {
      return true;
    }
  }), 10_000, `pids ${pids} to die`);
}
