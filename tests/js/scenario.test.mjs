// Lease scenarios through the component in Node, against the in-memory JavaScript host.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Harness } from './conformance.mjs';

const harness = await Harness.create();
const { exportAdmission, directoryLeases } = harness.root;
const CLAIM = 'recovery/beeper-message-like-me-export-admission/active.json';

test('an admission is acquired, walks its helper lifecycle and is released', () => {
  const host = harness.fresh({ status: () => 'exact-live-owner' });
  const admission = exportAdmission.acquire();
  assert.ok(host.files.has(CLAIM));
  assert.throws(
    () => exportAdmission.acquire(),
    (e) => e.val.code === 'another-export-is-active' && e.val.message === 'Beeper Message Like Me recovery: another export is active',
  );
  const revision = admission.claim().revision;
  admission.beginHelperLaunch();
  host.capture = { pid: 777n, bootId: host.bootId, processStartId: 'd'.repeat(64) };
  admission.bindHelper(777n);
  assert.equal(admission.claim().phase, 'helper-active');
  assert.equal(admission.claim().helperOwner.pid, 777n);
  admission.settleHelper();
  assert.notEqual(admission.claim().revision, revision, 'every write rotates the revision');
  admission.release();
  assert.equal(admission.released(), true);
  assert.ok(!host.files.has(CLAIM), 'the claim file is gone');
});

test('directory recovery removes exactly the directories of dead owners', () => {
  const host = harness.fresh({ status: (owner) => (owner.pid === 1n ? 'exact-live-owner' : 'different-or-dead') });
  host.now = 1000n;
  host.addDirectory('/work', 10);
  host.addDirectory('/work/live', 11);
  host.addDirectory('/work/dead', 12);
  host.own = { pid: 1n, bootId: host.bootId, processStartId: 'f'.repeat(64) };
  directoryLeases.create({ role: 'raw-working', path: '/work/live', recoverAfterMs: 2000 });
  host.own = { pid: 2n, bootId: host.bootId, processStartId: 'f'.repeat(64) };
  directoryLeases.create({ role: 'raw-working', path: '/work/dead', recoverAfterMs: 2000 });
  const dryRun = directoryLeases.recoverEach(undefined, { dryRun: true, skipInvalid: false, concurrent: false, keep: [], pastBound: false });
  assert.equal(dryRun.stopped, undefined);
  assert.deepEqual(dryRun.outcomes.map((o) => o.action.tag).sort(), ['keep', 'remove-directory']);
  assert.ok(dryRun.outcomes.every((o) => !o.done), 'a dry run does nothing');
  assert.ok(host.workspace.has('/work/dead'), 'a dry run removes nothing');
  const report = directoryLeases.recover(undefined);
  assert.deepEqual({ ...report }, { recovered: 1, published: 0, active: 1, indeterminate: 0 });
  assert.ok(host.workspace.has('/work/live'));
  assert.ok(!host.workspace.has('/work/dead'));
  assert.equal([...host.files.keys()].filter((k) => k.startsWith('recovery/beeper-message-like-me-directory-leases/')).length, 1);
});
