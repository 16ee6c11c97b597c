// Transpiles the proclease artifacts for Node with `@bytecodealliance/jco-transpile`
// (`instantiation: 'async'`, as `tests/js/component.mjs` does):
// - `portable` (what this package's `Host` loads): `host/component/proclease-portable.wasm`, the
//   component with the portable store composed in (`wit/sys.wit`, world `proclease-portable`;
//   `$PROCLEASE_PORTABLE_WASM` overrides) → `portable/`;
// - `component` (for embedders and `tests/js`, which give the store's imports themselves):
//   `host/component/proclease.wasm` (`$PROCLEASE_WASM` overrides) → `component/`.
//
// Run by `npm ci` (the `prepare` script) and, when the directory is missing or was made from
// other bytes, by the loader (`component.mjs`) on first use. `stamp.json` records the sha256 of
// the bytes it was made from, and the bytes are kept beside it (`proclease.wasm`), so that an
// installed copy of this package works without the repository.
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));

/** This package's directory. */
export const PACKAGE = dirname(here);
/** The jco-transpile version the package pins (package.json). */
export const JCO_VERSION = '0.15.0';

/** The two artifacts: where each comes from and where its transpilation goes. */
export const ARTIFACTS = {
  portable: { env: 'PROCLEASE_PORTABLE_WASM', repository: join(PACKAGE, '..', '..', 'host', 'component', 'proclease-portable.wasm'), out: join(PACKAGE, 'portable') },
  component: { env: 'PROCLEASE_WASM', repository: join(PACKAGE, '..', '..', 'host', 'component', 'proclease.wasm'), out: join(PACKAGE, 'component') },
};

/** Where the transpiled component goes (the plain component's, for `tests/js`). */
export const OUT = ARTIFACTS.component.out;
/** The component bytes of the repository (the native host's `host/component/proclease.wasm`). */
export const REPOSITORY_WASM = ARTIFACTS.component.repository;

/** The bytes of `artifact` to use: its environment variable, else the repository's, else the copy kept beside its transpilation. */
export function sourceWasm(artifact = 'component') {
  const { env, repository, out } = ARTIFACTS[artifact];
  if (process.env[env]) return process.env[env];
  if (existsSync(repository)) return repository;
  return join(out, 'proclease.wasm');
}

const sha256 = (bytes) => createHash('sha256').update(bytes).digest('hex');

/** The stamp of `artifact`'s current transpilation, or null. */
export function readStamp(artifact = 'component') {
  try {
    return JSON.parse(readFileSync(join(ARTIFACTS[artifact].out, 'stamp.json'), 'utf8'));
  } catch {
    return null;
  }
}

/** Whether `artifact`'s directory holds a transpilation of `bytes`. */
export function isCurrent(bytes, artifact = 'component') {
  const stamp = readStamp(artifact);
  return stamp !== null && stamp.sha256 === sha256(bytes) && stamp.jco === JCO_VERSION && existsSync(join(ARTIFACTS[artifact].out, 'proclease.js'));
}

/**
 * Transpiles `wasmPath` into `artifact`'s directory unless it already holds it; returns the
 * sha256 of the bytes. The new files are written to a fresh directory and renamed into place, so
 * that a concurrent reader never sees half a transpilation.
 */
export async function transpile(wasmPath = sourceWasm(), artifact = 'component') {
  const OUT = ARTIFACTS[artifact].out;
  let bytes;
  try {
    bytes = readFileSync(wasmPath);
  } catch (e) {
    throw new Error(`${wasmPath}: the proclease ${artifact === 'portable' ? 'portable artifact' : 'component'} cannot be read (${e.code ?? e.message}); set ${ARTIFACTS[artifact].env} to a component file`);
  }
  if (isCurrent(bytes, artifact)) return sha256(bytes);
  const { transpileBytes } = await import('@bytecodealliance/jco-transpile');
  const out = await transpileBytes(bytes, { name: 'proclease', instantiation: 'async' });
  const staging = `${OUT}.tmp-${process.pid}-${Date.now()}`;
  rmSync(staging, { recursive: true, force: true });
  for (const [name, data] of Object.entries(out.files)) {
    const path = join(staging, name);
    mkdirSync(dirname(path), { recursive: true });
    writeFileSync(path, data);
  }
  writeFileSync(join(staging, 'proclease.wasm'), bytes);
  writeFileSync(join(staging, 'stamp.json'), `${JSON.stringify({ sha256: sha256(bytes), jco: JCO_VERSION, source: wasmPath })}\n`);
  const old = `${OUT}.old-${process.pid}-${Date.now()}`;
  if (existsSync(OUT)) renameSync(OUT, old);
  renameSync(staging, OUT);
  rmSync(old, { recursive: true, force: true });
  return sha256(bytes);
}

// `node lib/transpile.mjs` (the `prepare` script).
if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  (async () => {
    for (const artifact of ['portable', 'component']) {
      const digest = await transpile(sourceWasm(artifact), artifact);
      console.log(`proclease ${artifact} ${digest.slice(0, 12)}… transpiled into ${ARTIFACTS[artifact].out}`);
    }
  })().catch((error) => {
    console.error(`proclease: ${error.message}`);
    process.exit(1);
  });
}
