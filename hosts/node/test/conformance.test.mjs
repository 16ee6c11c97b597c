// The public conformance vectors through this package's loader, against the component
// instantiated with this package's real host imports (`conformance.mjs` says which parts of
// which suites a real host can evaluate). `PROCLEASE_VECTORS` overrides the vectors' directory.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { RealHarness, runFile } from '../testing/conformance.mjs';
import { freshHost } from '../testing/helpers.mjs';

// The repository's sibling `shared/` (as CI lays it out), unless PROCLEASE_VECTORS says otherwise.
const VECTORS = process.env.PROCLEASE_VECTORS ?? fileURLToPath(new URL('../../../../shared/vectors/public', import.meta.url));
/** Suites whose every vector a real host evaluates in full (nothing scripted, nothing partial). */
const PURE = ['canonical-json', 'sha256', 'identity-digest', 'proc-stat', 'export-admission-parse', 'directory-lease-parse', 'invocation-lease-parse', 'portable-identity-parse', 'invocation-owner-status', 'admission-entry-decision', 'directory-lease-request', 'raw-lease-disposition'];

const files = existsSync(VECTORS) ? readdirSync(VECTORS).filter((f) => f.endsWith('.jsonl')).sort() : [];

test('the public vectors are there', { skip: existsSync(VECTORS) ? false : `${VECTORS} is absent (set PROCLEASE_VECTORS)` }, () => {
  assert.ok(files.length >= 17, `${files.length} suites in ${VECTORS}`);
});

for (const file of files) {
  test(`conformance: ${file.replace(/\.jsonl$/, '')}`, async (t) => {
    const host = await freshHost();
    try {
      const report = await runFile(join(VECTORS, file), new RealHarness(host.parts));
      const evaluated = report.total - report.skipped - report.scripted;
      t.diagnostic(`${report.suite}: ${report.passed}/${evaluated} passed (${report.partial} on their pure part only), ${report.skipped} dynamic-type skipped, ${report.scripted} need a scripted host`);
      assert.deepEqual(report.failures.slice(0, 3), [], `${report.failures.length} failures`);
      if (PURE.includes(report.suite)) assert.equal(report.scripted + report.partial, 0, 'a pure suite is evaluated in full');
      if (report.suite !== 'repair-decision') assert.ok(report.passed > 0, 'some vectors were evaluated');
    } finally {
      host.cleanup();
    }
  });
}
