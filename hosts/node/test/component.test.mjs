// The loader: the transpiled portable artifact (what `Host` loads), the import keys jco reads,
// the pure instance.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { PORTABLE_IMPORTS as IMPORTS, PACKAGE, VERSION, generatedSource, instantiatePure } from '../lib/component.mjs';
import { ARTIFACTS, readStamp, sourceWasm } from '../lib/transpile.mjs';

const OUT = ARTIFACTS.portable.out;
import { createHash } from 'node:crypto';

test('portable/ holds a transpilation of the portable artifact, stamped with its sha256', async () => {
  await generatedSource('portable');
  const stamp = readStamp('portable');
  const bytes = readFileSync(sourceWasm('portable'));
  assert.equal(stamp.sha256, createHash('sha256').update(bytes).digest('hex'));
  assert.equal(stamp.jco, '0.15.0');
  assert.deepEqual(readFileSync(join(OUT, 'proclease.wasm')), bytes, 'the bytes are kept beside the transpilation');
});

test("jco's generated JS reads the unversioned import keys while its .d.ts names the versioned ones (both are passed)", async () => {
  const js = await generatedSource('portable');
  const read = [...js.matchAll(/imports\['([^']+)'\]/g)].map((m) => m[1]).sort();
  // The world's imports with functions (`types` has none, so jco reads no key for it).
  const expected = IMPORTS.filter((name) => name !== 'types').map((name) => `${PACKAGE}/${name}`).sort();
  assert.deepEqual([...new Set(read)], expected, 'jco 0.15.0 reads `proclease:lease/<name>` — if this fails, jco changed which key it reads: check lib/component.mjs importObject');
  const dts = readFileSync(join(OUT, 'proclease.d.ts'), 'utf8');
  for (const name of IMPORTS.filter((n) => n !== 'types')) {
    assert.match(dts, new RegExp(`'${PACKAGE}/${name}@${VERSION.replace(/\./g, '\\.')}'`), `the .d.ts names ${name} with the version`);
  }
});

test('the pure instance answers pure exports and traps on any import', async () => {
  const pure = await instantiatePure();
  assert.equal(pure.records.sha256(new Uint8Array()), 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855');
  // An export that needs an effect traps with this host's message (never silently answers).
  assert.throws(() => pure.exportAdmission.survey(), /pure component instance called the \w+ import: only pure exports may be called on it/);
});

test('judge-owner (new in 0.2.0) judges observed facts: another boot is gone, a held witness alive', async () => {
  const pure = await instantiatePure();
  const owner = { pid: 42n, bootId: 'a'.repeat(64), processStartId: 'b'.repeat(64) };
  const view = { pidNamespace: 0xeffffffcn, boottimeOffsetNs: 0n, clockTicksPerSecond: 100n };
  const facts = (over) => ({ bootId: 'a'.repeat(64), witness: 'absent', recordedPidNamespace: undefined, spawned: 'absent', stat: { tag: 'missing' }, tasks: 0, view, remote: 'not-clustered', tree: 'absent', ...over });
  assert.equal(pure.dispositions.judgeOwner(owner, facts({ bootId: 'c'.repeat(64) })).status, 'different-or-dead');
  assert.equal(pure.dispositions.judgeOwner(owner, facts({})).status, 'different-or-dead');
  assert.equal(pure.dispositions.judgeOwner(owner, facts({ stat: { tag: 'unreadable' } })).status, 'unknown');
  // An untestable witness recorded in another PID namespace: /proc proves nothing.
  assert.equal(pure.dispositions.judgeOwner(owner, facts({ witness: 'untestable', recordedPidNamespace: 4026532000n })).status, 'unknown');
  // The same in the namespace /proc shows: /proc decides.
  assert.equal(pure.dispositions.judgeOwner(owner, facts({ witness: 'untestable', recordedPidNamespace: 0xeffffffcn })).status, 'different-or-dead');
  const held = pure.dispositions.judgeOwner(owner, facts({ witness: 'held' }));
  assert.equal(held.status, 'exact-live-owner');
  assert.equal(typeof held.proof, 'string');
  assert.equal(typeof held.lineageGone, 'boolean');
});
