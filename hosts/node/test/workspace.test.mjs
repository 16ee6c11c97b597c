// The workspace on real directories, as this host runs it: the portable artifact's `workspace`
// export (the Rust protocol every host runs) over this host's system calls (`lib/sys.mjs`).
// Facts, identity-bound removal with the reference's quarantine (§3.3
// removePrivateDirectoryTree), creation and removal of empty directories, confinement to the
// granted roots.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import { join } from 'node:path';
import { assemble } from '../lib/host.mjs';
import { privateTemp } from '../testing/helpers.mjs';

/** The WIT `failure` a workspace call throws. */
function failureOf(call) {
  try {
    call();
  } catch (error) {
    assert.ok(!(error instanceof Error) && typeof error.kind === 'string', `a failure record, not ${error?.stack ?? error}`);
    return error;
  }
  assert.fail('the call did not fail');
}

const identity = (path) => {
  const s = fs.lstatSync(path, { bigint: true });
  return { device: String(s.dev), inode: String(s.ino), birthtimeNs: String(s.birthtimeNs) };
};

/** A workspace root granted to a host (its state home elsewhere), and the artifact's `workspace` answering plain values. */
async function setup() {
  const root = privateTemp();
  const home = privateTemp();
  const parts = await assemble({ stateHome: join(home, 'home'), workspaceRoots: [root] });
  const exported = parts.root.workspace;
  const ws = {
    ...exported,
    inspect: (path) => exported.inspect(path).facts ?? null,
    removeEmptyDirectory: (path, expected) => exported.removeEmptyDirectory(path, expected ?? undefined),
  };
  const cleanup = () => {
    parts.sys.close();
    parts.home.close();
    for (const dir of [root, home]) fs.rmSync(dir, { recursive: true, force: true });
  };
  return { root, ws, cleanup };
}

test('inspect reports the physical facts lstat gives, birth time included', async () => {
  const { root, ws, cleanup } = await setup();
  try {
    const dir = join(root, 'job');
    fs.mkdirSync(dir, { mode: 0o700 });
    const facts = ws.inspect(dir);
    assert.deepEqual(facts, { canonical: true, isDirectory: true, owned: true, mode: 0o700, identity: identity(dir) });
    assert.notEqual(facts.identity.birthtimeNs, '0', 'this filesystem records birth times');
    assert.equal(ws.inspect(join(root, 'absent')), null);
    assert.equal(ws.inspect(join(root, 'absent/deeper')), null);
    fs.symlinkSync(dir, join(root, 'link'));
    assert.equal(ws.inspect(join(root, 'link')).canonical, false, 'a symbolic link is not followed');
    assert.equal(ws.inspect(join(root, 'link/inner')).canonical, false, 'nor is one on the way');
    assert.equal(ws.inspect(root).isDirectory, true, 'the root itself');
    const outside = failureOf(() => ws.inspect('/etc'));
    assert.equal(outside.kind, 'refused');
    assert.match(outside.message, /outside the granted workspace roots/);
    assert.equal(failureOf(() => ws.inspect(`${root}/../x`)).kind, 'refused');
    assert.equal(failureOf(() => ws.inspect('relative/path')).kind, 'refused');
  } finally {
    cleanup();
  }
});

test('create-private-directory creates 0700 directories outermost first; remove-empty-directory removes only the expected empty one', async () => {
  const { root, ws, cleanup } = await setup();
  try {
    const deep = join(root, 'a/b/c');
    // A umask that would narrow mkdir's 0700 to 0500: the directories are chmodded back.
    const old = process.umask(0o277);
    try {
      assert.deepEqual(ws.createPrivateDirectory(deep), [join(root, 'a'), join(root, 'a/b'), deep]);
    } finally {
      process.umask(old);
    }
    for (const p of ['a', 'a/b', 'a/b/c']) assert.equal(fs.statSync(join(root, p)).mode & 0o777, 0o700, p);
    assert.deepEqual(ws.createPrivateDirectory(deep), [], 'nothing to create');
    fs.symlinkSync('/etc', join(root, 'l'));
    assert.match(failureOf(() => ws.createPrivateDirectory(join(root, 'l/x'))).message, /is a symbolic link; give the real path/);
    assert.deepEqual(fs.readdirSync('/etc').includes('x'), false);
    const wrong = { ...identity(deep), inode: '1' };
    assert.equal(ws.removeEmptyDirectory(deep, wrong), false, 'another directory is left');
    fs.writeFileSync(join(deep, 'f'), '');
    assert.equal(ws.removeEmptyDirectory(deep, identity(deep)), false, 'a directory with something in it is left');
    fs.rmSync(join(deep, 'f'));
    assert.equal(ws.removeEmptyDirectory(deep, identity(deep)), true);
    assert.equal(fs.existsSync(deep), false);
    assert.equal(ws.removeEmptyDirectory(deep, null), false, 'absent');
  } finally {
    cleanup();
  }
});

test('remove-tree removes a tree only while it is the expected directory, never following a link out of it', async () => {
  const { root, ws, cleanup } = await setup();
  try {
    const dir = join(root, 'job');
    fs.mkdirSync(join(dir, 'sub/deeper'), { recursive: true, mode: 0o700 });
    fs.chmodSync(dir, 0o700);
    fs.writeFileSync(join(dir, 'sub/deeper/file'), 'data');
    const precious = join(root, 'precious');
    fs.mkdirSync(precious);
    fs.writeFileSync(join(precious, 'keep'), 'keep');
    fs.symlinkSync(precious, join(dir, 'sub/link-out'));
    const expected = identity(dir);
    // Replaced by another directory at the same path: refused, nothing removed.
    fs.renameSync(dir, join(root, 'moved'));
    fs.mkdirSync(dir, { mode: 0o700 });
    const changed = failureOf(() => ws.removeTree(dir, expected));
    assert.equal(changed.kind, 'identity-changed');
    assert.equal(changed.message, `${dir}: recursive removal target changed identity`);
    assert.ok(fs.existsSync(dir));
    fs.rmdirSync(dir);
    fs.renameSync(join(root, 'moved'), dir);
    assert.equal(ws.removeTree(dir, expected), true);
    assert.equal(fs.existsSync(dir), false);
    assert.equal(fs.readFileSync(join(precious, 'keep'), 'utf8'), 'keep', 'what a link in the tree points to is untouched');
    assert.deepEqual(fs.readdirSync(root).sort(), ['precious'], 'no quarantine is left');
    assert.equal(ws.removeTree(dir, expected), false, 'gone: nothing left to remove');
    assert.equal(failureOf(() => ws.removeTree(join(root, 'no/such'), expected)).message, `${join(root, 'no/such')}: recursive removal parent is absent for an identity-bound target`);
    assert.match(failureOf(() => ws.removeTree('/x', expected)).message, /too broad/);
  } finally {
    cleanup();
  }
});

test("remove-tree completes the interrupted quarantine of a dead remover, and refuses a live remover's", async () => {
  const { root, ws, cleanup } = await setup();
  const sleeper = spawn('sleep', ['30']);
  try {
    const dir = join(root, 'job');
    fs.mkdirSync(join(dir, 'x'), { recursive: true, mode: 0o700 });
    fs.chmodSync(dir, 0o700);
    const expected = identity(dir);
    // A remover that is alive renamed it to quarantine and is deleting it.
    const live = join(root, `.io-remove-${sleeper.pid}-${randomUUID()}.quarantine`);
    fs.renameSync(dir, live);
    assert.equal(failureOf(() => ws.removeTree(dir, expected)).message, `${dir}: recursive removal quarantine owner is live or cannot be proven dead`);
    assert.ok(fs.existsSync(live));
    // Its remover died: the next removal finishes it.
    sleeper.kill('SIGKILL');
    await new Promise((r) => sleeper.once('exit', r));
    assert.equal(ws.removeTree(dir, expected), true);
    assert.deepEqual(fs.readdirSync(root), [], 'the quarantine is gone');
    // A quarantine of another identity is not this lease's.
    fs.mkdirSync(join(root, `.io-remove-${sleeper.pid}-${randomUUID()}.quarantine`), { mode: 0o700 });
    assert.equal(ws.removeTree(dir, expected), false);
  } finally {
    sleeper.kill('SIGKILL');
    cleanup();
  }
});

test('remove-tree deletes deep trees and names that are not UTF-8, and refuses a tree that is not private to the user', async () => {
  const { root, ws, cleanup } = await setup();
  try {
    const dir = join(root, 'deep');
    fs.mkdirSync(dir, { mode: 0o700 });
    fs.chmodSync(dir, 0o700);
    // Deeper than the descriptors a removal keeps open (64): subtrees are moved up first.
    let p = dir;
    for (let i = 0; i < 150; i += 1) {
      p = join(p, 'd');
      fs.mkdirSync(p);
      fs.writeFileSync(join(p, `f\u00e9${i}`), 'x');
    }
    fs.writeFileSync(Buffer.from(`${dir}/\xff\xfe-not-utf8`, 'latin1'), 'x');
    assert.equal(ws.removeTree(dir, identity(dir)), true);
    assert.deepEqual(fs.readdirSync(root), []);
    const open = join(root, 'open');
    fs.mkdirSync(open, { mode: 0o755 });
    fs.chmodSync(open, 0o755);
    assert.equal(failureOf(() => ws.removeTree(open, identity(open))).kind, 'identity-changed');
    assert.ok(fs.existsSync(open));
  } finally {
    cleanup();
  }
});
