// The state store on real files, as this host runs it: the portable artifact's store (the Rust
// protocol every host runs) over this host's system calls (`lib/sys.mjs`). Compare-and-swap
// semantics, exact bytes and modes, no leftovers, refused paths, the reference's crash recovery
// of dead writers' leftovers (§3.9), the mutation claims (§3.5) and concurrent writers in several
// processes.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomUUID } from 'node:crypto';
import { execFile, spawn } from 'node:child_process';
import * as fs from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { freshHost as openHost, PACKAGE, tree } from '../testing/helpers.mjs';
import { File } from '../lib/sys.mjs';

const sha = (text) => createHash('sha256').update(text).digest('hex');
const RECORD = 'recovery/test-collection/record.json';
const mode = (path) => fs.lstatSync(path).mode & 0o7777;

/** A fresh host whose `parts.store` is the artifact's `state-store` export, answering plain values. */
async function freshHost() {
  const h = await openHost();
  const exported = h.parts.root.stateStore;
  h.parts.store = {
    ...exported,
    readIfPresent: (path, max) => exported.readIfPresent(path, max).text ?? null,
    snapshot: (path, orphans) => exported.snapshot(path, orphans).snapshot ?? null,
  };
  return h;
}

/** The WIT `failure` a store call throws. */
function failureOf(call) {
  try {
    call();
  } catch (error) {
    assert.ok(!(error instanceof Error) && typeof error.kind === 'string', `a failure record, not ${error}`);
    return error;
  }
  assert.fail('the call did not fail');
}

/** The reference's `targetSha256` of a mutation claim (§3.5): sha256 of `io-state-mutation\0<leaf>`. */
const targetSha256 = (leaf) => createHash('sha256').update(Buffer.concat([Buffer.from('io-state-mutation\0'), Buffer.from(leaf, 'utf8')])).digest('hex');

/** The reference's exact text of a mutation claim (§3.5; Appendix A item 6), as a fixture. */
const claimText = (target, claimId, owner) =>
  `{"kind":"io-state-mutation-claim","schemaVersion":1,"targetSha256":"${target}","claimId":"${claimId}","pid":${owner.pid},"bootId":"${owner.bootId}","processStartId":"${owner.processStartId}"}\n`;

test('create-if-absent writes the exact bytes, 0600 in 0700 directories, never overwrites, and leaves nothing else', async () => {
  const h = await freshHost();
  try {
    const { store } = h.parts;
    const home = h.parts.home.path;
    assert.equal(store.createIfAbsent(RECORD, '{"a":1}\n'), true);
    assert.equal(fs.readFileSync(join(home, RECORD), 'utf8'), '{"a":1}\n');
    assert.equal(mode(join(home, RECORD)), 0o600);
    assert.equal(mode(join(home, 'recovery/test-collection')), 0o700);
    assert.equal(store.createIfAbsent(RECORD, '{"a":2}\n'), false, 'a second create finds it');
    assert.equal(fs.readFileSync(join(home, RECORD), 'utf8'), '{"a":1}\n', 'and never overwrites');
    assert.deepEqual(fs.readdirSync(join(home, 'recovery/test-collection')), ['record.json'], 'no temporary, claim or stage is left');
    assert.equal(store.readIfPresent(RECORD, 100), '{"a":1}\n');
    assert.equal(store.readIfPresent('recovery/test-collection/absent.json', 100), null);
    assert.equal(store.readIfPresent('recovery/absent-collection/x.json', 100), null);
  } finally {
    h.cleanup();
  }
});

test('replace-if-unchanged and remove-if-unchanged act only on the expected bytes', async () => {
  const h = await freshHost();
  try {
    const { store } = h.parts;
    const file = join(h.parts.home.path, RECORD);
    store.createIfAbsent(RECORD, 'one\n');
    assert.equal(store.replaceIfUnchanged(RECORD, sha('other\n'), 'two\n'), false, 'another hash: no swap');
    assert.equal(fs.readFileSync(file, 'utf8'), 'one\n');
    assert.equal(store.replaceIfUnchanged(RECORD, sha('one\n'), 'two\n'), true);
    assert.equal(fs.readFileSync(file, 'utf8'), 'two\n');
    assert.equal(mode(file), 0o600);
    assert.equal(store.replaceIfUnchanged('recovery/test-collection/absent.json', sha('x'), 'y'), false, 'absent: false');
    assert.equal(store.removeIfUnchanged(RECORD, sha('one\n')), false, 'a stale hash removes nothing');
    assert.ok(fs.existsSync(file));
    assert.equal(store.removeIfUnchanged(RECORD, sha('two\n')), true);
    assert.equal(fs.existsSync(file), false);
    assert.equal(store.removeIfUnchanged(RECORD, sha('two\n')), false, 'idempotent: gone is false');
    assert.deepEqual(fs.readdirSync(join(h.parts.home.path, 'recovery/test-collection')), [], 'no quarantine, temporary or claim is left');
    const bad = failureOf(() => store.replaceIfUnchanged(RECORD, 'ABC', 'x'));
    assert.equal(bad.kind, 'refused');
    assert.match(bad.message, /expected private state content hash is invalid/);
  } finally {
    h.cleanup();
  }
});

test('paths outside the state layout are refused, symbolic links and foreign modes are unsafe', async () => {
  const h = await freshHost();
  try {
    const { store } = h.parts;
    const home = h.parts.home.path;
    for (const path of ['/etc/passwd', '../x/y', 'recovery/../x', 'recovery//x', '.proclease/locks/x', 'etc/x', 'recovery', 'recovery/a\nb']) {
      const f = failureOf(() => store.createIfAbsent(path, 'x'));
      assert.equal(f.kind, 'refused', path);
      assert.equal(f.path, path);
    }
    // A symbolic link on the way is never followed.
    const outside = join(h.dir, 'outside');
    fs.mkdirSync(outside, { mode: 0o700 });
    fs.mkdirSync(join(home, 'runs'), { mode: 0o700 });
    fs.symlinkSync(outside, join(home, 'runs', 'linked'));
    const linked = failureOf(() => store.createIfAbsent('runs/linked/x.json', 'x'));
    assert.equal(linked.kind, 'unsafe');
    assert.match(linked.message, /linked is a symbolic link; the store never follows them/);
    assert.deepEqual(fs.readdirSync(outside), [], 'nothing was written through the link');
    // A record that is a symbolic link is never read through.
    fs.mkdirSync(join(home, 'runs', 'c'), { mode: 0o700 });
    fs.symlinkSync('/etc/hostname', join(home, 'runs', 'c', 'r.json'));
    assert.equal(failureOf(() => store.readIfPresent('runs/c/r.json', 4096)).kind, 'unsafe');
    // A directory of another mode, a file readable by others.
    fs.mkdirSync(join(home, 'runs', 'open'), { mode: 0o755 });
    fs.chmodSync(join(home, 'runs', 'open'), 0o755);
    assert.match(failureOf(() => store.createIfAbsent('runs/open/x.json', 'x')).message, /must be owned by you with mode 0700/);
    fs.writeFileSync(join(home, 'runs', 'c', 'loose.json'), 'x', { mode: 0o644 });
    fs.chmodSync(join(home, 'runs', 'c', 'loose.json'), 0o644);
    assert.match(failureOf(() => store.readIfPresent('runs/c/loose.json', 10)).message, /readable or writable by group or others/);
    // Bounds.
    store.createIfAbsent('runs/c/big.json', 'x'.repeat(100));
    assert.match(failureOf(() => store.readIfPresent('runs/c/big.json', 10)).message, /larger than 10 bytes/);
    assert.equal(failureOf(() => store.createIfAbsent('runs/c/huge.json', 'x'.repeat((2 << 20) + 1))).kind, 'refused');
  } finally {
    h.cleanup();
  }
});

test('snapshot lists sorted entries with their kinds and directory identities; read-batch reads them', async () => {
  const h = await freshHost();
  try {
    const { store } = h.parts;
    const home = h.parts.home.path;
    assert.equal(store.snapshot('recovery/none', false), null);
    store.createIfAbsent('recovery/c/b.json', 'B');
    store.createIfAbsent('recovery/c/a.json', 'A');
    store.ensurePrivateDirectory('recovery/c/sub');
    fs.symlinkSync('/etc', join(home, 'recovery/c/z-link'));
    const snap = store.snapshot('recovery/c', true);
    const st = fs.statSync(join(home, 'recovery/c'), { bigint: true });
    assert.deepEqual(snap.identity, { device: String(st.dev), inode: String(st.ino) });
    assert.deepEqual(
      snap.entries.map((e) => [e.name, e.kind]),
      [
        ['a.json', 'file'],
        ['b.json', 'file'],
        ['sub', 'directory'],
        ['z-link', 'symbolic-link'],
      ],
    );
    assert.equal(snap.entries[2].identity.inode, String(fs.statSync(join(home, 'recovery/c/sub'), { bigint: true }).ino));
    fs.writeFileSync(join(home, 'recovery/c/bad.json'), Buffer.from([0xff, 0xfe]), { mode: 0o600 });
    const batch = store.readBatch('recovery/c', ['b.json', 'missing.json', 'z-link', 'bad.json', 'a.json'], 10, 1000, snap.identity);
    assert.deepEqual(
      batch.map((r) => [r.name, r.status]),
      [
        ['b.json', { tag: 'present', val: 'B' }],
        ['missing.json', { tag: 'absent' }],
        ['z-link', { tag: 'invalid', val: 'unsafe-file' }],
        ['bad.json', { tag: 'invalid', val: 'invalid-utf8' }],
        ['a.json', { tag: 'present', val: 'A' }],
      ],
    );
    assert.match(failureOf(() => store.readBatch('recovery/c', ['a.json'], 10, 10, { device: snap.identity.device, inode: '1' })).message, /private state batch directory changed identity/);
    assert.match(failureOf(() => store.readBatch('recovery/c', ['a.json', 'a.json'], 10, 10, snap.identity)).message, /names must be unique/);
    fs.writeFileSync(join(home, 'recovery/c/bad\x01name'), 'x', { mode: 0o600 });
    assert.match(failureOf(() => store.snapshot('recovery/c', false)).message, /unsafe entry name \("bad\\x01name"\)/);
  } finally {
    h.cleanup();
  }
});

/** A pid that is certainly not running (a child that exited and was reaped). */
async function deadPid() {
  const child = spawn('true');
  await new Promise((r) => child.once('exit', r));
  return child.pid;
}

test("crash recovery removes what dead writers left (§3.9) and nothing of live ones", async () => {
  const h = await freshHost();
  const sleeper = spawn('sleep', ['30']);
  try {
    const { store, processes } = h.parts;
    const dir = join(h.parts.home.path, 'recovery/c');
    store.createIfAbsent('recovery/c/r.json', 'x');
    const dead = await deadPid();
    const gone = { pid: BigInt(dead), bootId: processes.currentBootId(), processStartId: 'f'.repeat(64) };
    const otherBoot = { pid: 1n, bootId: 'e'.repeat(64), processStartId: 'f'.repeat(64) };
    assert.ok(sleeper.pid > 0);
    const live = processes.capture(BigInt(sleeper.pid));
    const write = (name, text) => fs.writeFileSync(join(dir, name), text, { mode: 0o600 });
    const target = targetSha256('r.json');
    const [deadTemp, liveTemp] = [`.io-write-${dead}-${randomUUID()}.tmp`, `.io-write-${sleeper.pid}-${randomUUID()}.tmp`];
    write(deadTemp, 'partial');
    write(liveTemp, 'partial');
    const stageId = randomUUID();
    const deadStage = `.io-mutation-stage-${stageId}-${dead}.tmp`;
    write(deadStage, claimText(target, stageId, gone));
    const [deadClaimId, liveClaimId] = [randomUUID(), randomUUID()];
    const deadClaim = `.io-mutation-${target}-held-${deadClaimId}.lock`;
    const liveClaim = `.io-mutation-${target}-held-${liveClaimId}.lock`;
    write(deadClaim, claimText(target, deadClaimId, otherBoot));
    write(liveClaim, claimText(target, liveClaimId, live));
    const orphanQuarantine = `.io-remove-file-${randomUUID()}.quarantine`;
    write(orphanQuarantine, 'removed record');
    store.snapshot('recovery/c', false);
    let names = fs.readdirSync(dir);
    assert.ok(!names.includes(deadTemp) && !names.includes(deadStage) && !names.includes(orphanQuarantine), `dead leftovers removed: ${names}`);
    assert.ok(names.includes(liveTemp), "a live writer's temporary stays");
    assert.ok(names.includes(deadClaim), 'claims are only recovered with recover-orphans');
    store.snapshot('recovery/c', true);
    names = fs.readdirSync(dir);
    assert.ok(!names.includes(deadClaim), "a claim of another boot's owner is removed");
    assert.ok(names.includes(liveClaim), "a live owner's claim stays");
    // A live writer's claim holds the record: a create fails `contended`, a replace answers false.
    const started = Date.now();
    assert.equal(store.replaceIfUnchanged('recovery/c/r.json', sha('x'), 'y'), false);
    assert.ok(Date.now() - started >= 100, 'after waiting for the claim a while');
    assert.equal(fs.readFileSync(join(dir, 'r.json'), 'utf8'), 'x');
    fs.rmSync(join(dir, 'r.json'));
    const contended = failureOf(() => store.createIfAbsent('recovery/c/r.json', 'z'));
    assert.equal(contended.kind, 'contended');
    assert.match(contended.message, /state file mutation is already active/);
    // Once its owner is gone, the claim is removed by the next writer, which goes through.
    sleeper.kill('SIGKILL');
    await new Promise((r) => sleeper.once('exit', r));
    assert.equal(store.createIfAbsent('recovery/c/r.json', 'z'), true);
    // Its temporary too: its writer is gone now.
    assert.deepEqual(fs.readdirSync(dir), ['r.json']);
  } finally {
    sleeper.kill('SIGKILL');
    h.cleanup();
  }
});

test('a claim that cannot be judged stops the write, and a malformed claim is refused with the reference message', async () => {
  const h = await freshHost();
  try {
    const { store } = h.parts;
    const dir = join(h.parts.home.path, 'recovery/c');
    store.createIfAbsent('recovery/c/r.json', 'x');
    const target = targetSha256('r.json');
    const id = randomUUID();
    fs.writeFileSync(join(dir, `.io-mutation-${target}-held-${id}.lock`), '{"not":"a claim"}\n', { mode: 0o600 });
    const f = failureOf(() => store.replaceIfUnchanged('recovery/c/r.json', sha('x'), 'y'));
    assert.equal(f.kind, 'unsafe');
    assert.equal(f.message, 'recovery/c/r.json: state mutation claim is malformed');
    assert.equal(fs.readFileSync(join(dir, 'r.json'), 'utf8'), 'x');
  } finally {
    h.cleanup();
  }
});

test('a claim whose content an OS crash lost (empty, or zeros) is removed and the write goes on (docs/deviations.md 26)', async () => {
  const h = await freshHost();
  try {
    const { store } = h.parts;
    const dir = join(h.parts.home.path, 'recovery/c');
    store.createIfAbsent('recovery/c/r.json', 'x');
    const target = targetSha256('r.json');
    let content = 'x';
    for (const lost of ['', '\0'.repeat(300)]) {
      const claim = join(dir, `.io-mutation-${target}-held-${randomUUID()}.lock`);
      fs.writeFileSync(claim, lost, { mode: 0o600 });
      assert.equal(store.replaceIfUnchanged('recovery/c/r.json', sha(content), content + 'y'), true);
      content += 'y';
      assert.equal(fs.existsSync(claim), false);
    }
    assert.deepEqual(fs.readdirSync(dir), ['r.json']);
  } finally {
    h.cleanup();
  }
});

test('concurrent writers in several node processes lose no update', async (t) => {
  const h = await freshHost();
  try {
    const { store } = h.parts;
    const path = 'recovery/counter/count.json';
    store.createIfAbsent(path, '{"count":0}\n');
    const [writers, each] = [4, 50];
    const run = promisify(execFile);
    const outputs = await Promise.all(
      Array.from({ length: writers }, () => run(process.execPath, [join(PACKAGE, 'testing/fixtures/increment.mjs'), h.parts.home.path, h.ws, path, String(each)], { timeout: 120_000 })),
    );
    const retries = outputs.map((o) => JSON.parse(o.stdout).retries).reduce((a, b) => a + b, 0);
    t.diagnostic(`${writers} writers × ${each} increments: ${retries} compare-and-swaps lost and retried`);
    assert.equal(store.readIfPresent(path, 4096), `{"count":${writers * each}}\n`, `${writers} × ${each} increments (${retries} compare-and-swaps retried)`);
    assert.deepEqual(fs.readdirSync(join(h.parts.home.path, 'recovery/counter')), ['count.json'], 'no temporary, claim or quarantine is left');
    assert.deepEqual(tree(h.parts.home.path).filter((p) => p.includes('.io-') && !p.endsWith('.io-state.json')), []);
  } finally {
    h.cleanup();
  }
});

test('a record replaced while it is read is read as it was at the open (docs/deviations.md 32)', async () => {
  // Each read of the record overlaps a rename over it, made through this host's own system
  // calls between the artifact's open and its read; §3.2 would fail every attempt.
  const h = await freshHost();
  const { readUpTo } = File.prototype;
  try {
    const { store } = h.parts;
    const path = join(h.parts.home.path, RECORD);
    assert.equal(store.createIfAbsent(RECORD, 'one\n'), true);
    let replaces = 0;
    File.prototype.readUpTo = function (limit, expected) {
      if (fs.readlinkSync(`/proc/self/fd/${this.fd}`) === path) {
        replaces += 1;
        const staged = `${path}.staged`;
        fs.writeFileSync(staged, `v${replaces}\n`, { mode: 0o600, flag: 'wx' });
        fs.renameSync(staged, path);
      }
      return readUpTo.call(this, limit, expected);
    };
    assert.equal(store.readIfPresent(RECORD, 1024), 'one\n', 'the record at the open');
    assert.equal(replaces, 1, 'read once');
    assert.equal(fs.readFileSync(path, 'utf8'), 'v1\n');
    assert.equal(store.readIfPresent(RECORD, 1024), 'v1\n');
  } finally {
    File.prototype.readUpTo = readUpTo;
    h.cleanup();
  }
});
