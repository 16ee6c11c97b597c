// #43 case 8 (Node part): the `npm pack` tarball carries the transpiled component, so that a fresh
// npm project that installs the tarball runs the README's example without the repository (before,
// the tarball had no `component/` and the first Host.open failed).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import { join } from 'node:path';
import { PACKAGE, freshDirs, runToEnd } from '../testing/helpers.mjs';

test('a fresh npm project that installs the npm pack tarball runs the README example', async () => {
  const d = freshDirs();
  try {
    const packed = await runToEnd('npm', ['pack', PACKAGE, '--pack-destination', d.dir, '--silent']);
    assert.equal(packed.code, 0, packed.stderr);
    const tarball = join(d.dir, packed.stdout.trim().split('\n').pop());
    const app = join(d.dir, 'app');
    fs.mkdirSync(app);
    fs.writeFileSync(join(app, 'package.json'), '{"name":"app","version":"1.0.0","private":true,"type":"module"}\n');
    const installed = await runToEnd('npm', ['install', '--no-audit', '--no-fund', '--silent', tarball], { cwd: app });
    assert.equal(installed.code, 0, installed.stderr);
    const example = `
      import { Host } from 'proclease-node';
      const host = await Host.open({ stateHome: ${JSON.stringify(d.home)}, workspaceRoots: [${JSON.stringify(d.ws)}] });
      await host.withDirectoryLease(${JSON.stringify(join(d.ws, 'build'))}, { create: true }, async (lease) => console.log('leased', lease.path));
      host.close();`;
    fs.writeFileSync(join(app, 'example.mjs'), example);
    // PROCLEASE_WASM unset: the installed copy finds its component beside itself, not in the repository.
    const env = { ...process.env };
    delete env.PROCLEASE_WASM;
    delete env.PROCLEASE_PORTABLE_WASM;
    const ran = await runToEnd(process.execPath, ['example.mjs'], { cwd: app, env });
    assert.equal(ran.code, 0, ran.stderr);
    assert.equal(ran.stdout, `leased ${join(d.ws, 'build')}\n`);
    assert.ok(fs.existsSync(join(app, 'node_modules', 'proclease-node', 'portable', 'proclease.js')), 'the tarball carries the transpilation');
  } finally {
    d.cleanup();
  }
});
