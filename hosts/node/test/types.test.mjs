// The README's examples type-check against the package's declarations (`lib/index.d.mts`) with
// `tsc --strict --noEmit` (#43 case 8): what a TypeScript user of the package compiles. Each
// ```js block of the README's "Example" section is checked as a module beside the package, its
// import of `./lib/index.mjs` pointed at the package; a call the declarations do not allow fails.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import { join } from 'node:path';
import { PACKAGE } from '../testing/helpers.mjs';

const TSC = join(PACKAGE, 'node_modules', 'typescript', 'bin', 'tsc');
const skip = fs.existsSync(TSC) ? false : `TypeScript is not installed (${TSC}): run npm ci in hosts/node`;

/** The ```js blocks of the README's "Example" section. */
function examples() {
  const readme = fs.readFileSync(join(PACKAGE, 'README.md'), 'utf8');
  const section = readme.slice(readme.indexOf('\n## Example\n'), readme.indexOf('\n## ', readme.indexOf('\n## Example\n') + 1));
  return [...section.matchAll(/```js\n([\s\S]*?)```/g)].map((m) => m[1]);
}

/** `tsc --strict --noEmit` on `sources` (module texts) placed in the package's `test/`; its output and status. */
function typeCheck(sources) {
  const files = sources.map((text, i) => {
    const file = join(PACKAGE, 'test', `.example-${process.pid}-${i}.mts`);
    fs.writeFileSync(file, text.replaceAll("'./lib/index.mjs'", "'../lib/index.mjs'"));
    return file;
  });
  try {
    const args = [TSC, '--strict', '--noEmit', '--module', 'nodenext', '--moduleResolution', 'nodenext', '--target', 'es2022', '--types', 'node', ...files];
    const done = spawnSync(process.execPath, args, { cwd: PACKAGE, encoding: 'utf8' });
    return { status: done.status, output: `${done.stdout}${done.stderr}` };
  } finally {
    for (const file of files) fs.rmSync(file, { force: true });
  }
}

test("the README's examples pass tsc --strict --noEmit against the package's declarations", { skip }, () => {
  const blocks = examples();
  assert.ok(blocks.length >= 2, `the README's Example section has its examples (${blocks.length})`);
  const checked = typeCheck(blocks);
  assert.equal(checked.status, 0, checked.output);
});

test('a misuse of the API is a type error: a phase that does not exist, a helper without its command', { skip }, () => {
  const wrong = `
    import { Host } from './lib/index.mjs';
    const host = await Host.open();
    await host.withDirectoryLease('/tmp/x', async (lease) => lease.update('runnin'));
    await host.withAdmission(async (admission) => admission.spawnHelper());
  `;
  const checked = typeCheck([wrong]);
  assert.equal(checked.status, 2, checked.output);
  assert.match(checked.output, /Argument of type '"runnin"' is not assignable to parameter of type 'RawPhase'/);
  assert.match(checked.output, /Expected 1-3 arguments, but got 0/);
});
