// Every public conformance vector through the component in Node (node --test).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdir } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Harness, runFile } from './conformance.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const VECTORS = process.env.PROCLEASE_VECTORS ?? join(here, '..', '..', '..', 'shared', 'vectors', 'public');
const files = (await readdir(VECTORS)).filter((f) => f.endsWith('.jsonl')).sort();

test('vector files are present', () => assert.ok(files.length > 0, `no vectors in ${VECTORS}`));

const harness = await Harness.create();
for (const file of files) {
  test(file.replace('.jsonl', ''), async () => {
    const report = await runFile(join(VECTORS, file), harness);
    const skipped = report.skipped ? ` (${report.skipped} skipped: dynamic-type)` : '';
    console.log(`${report.suite} node: ${report.passed}/${report.total}${skipped}`);
    const shown = report.failures.slice(0, 5).map((f) => `${f.name}\n  expected: ${JSON.stringify(f.expected)}\n  actual:   ${JSON.stringify(f.actual, (_, x) => (typeof x === 'bigint' ? Number(x) : x))}`);
    assert.equal(report.failures.length, 0, shown.join('\n'));
    assert.equal(report.passed + report.skipped, report.total);
  });
}
