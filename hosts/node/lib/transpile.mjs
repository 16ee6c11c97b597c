// Transpiles the proclease component for Node: `host/component/proclease.wasm` (the bytes the
// native host embeds; `$PROCLEASE_WASM` overrides) → `component/` of this package, with
// `@bytecodealliance/jco-transpile` (`instantiation: 'async'`, as `tests/js/component.mjs` does).
//
// Run by `npm ci` (the `prepare` script) and, when `component/` is missing or was made from other
// bytes, by the loader (`component.mjs`) on first use. `component/stamp.json` records the sha256
// of the bytes it was made from, and the bytes are kept beside it (`component/proclease.wasm`),
// so that an installed copy of this package works without the repository.
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));

/** This package's directory. */
export const PACKAGE = dirname(here);
/** Where the transpiled component goes. */
export const OUT = join(PACKAGE, 'component');
/** The component bytes of the repository (the native host's `host/component/proclease.wasm`). */
export const REPOSITORY_WASM = join(PACKAGE, '..', '..', 'host', 'component', 'proclease.wasm');
/** The jco-transpile version the package pins (package.json). */
export const JCO_VERSION = '0.15.0';

/** The component bytes to use: `$PROCLEASE_WASM`, else the repository's, else the copy in `component/`. */
export function sourceWasm() {
  if (process.env.PROCLEASE_WASM) return process.env.PROCLEASE_WASM;
  if (existsSync(REPOSITORY_WASM)) return REPOSITORY_WASM;
  return join(OUT, 'proclease.wasm');
}

const sha256 = (bytes) => createHash('sha256').update(bytes).digest('hex');

/** The stamp of the current transpilation, or null. */
export function readStamp() {
  try {
    return JSON.parse(readFileSync(join(OUT, 'stamp.json'), 'utf8'));
  } catch {
    return null;
  }
}

/** Whether `component/` holds a transpilation of `bytes`. */
export function isCurrent(bytes) {
  const stamp = readStamp();
  return stamp !== null && stamp.sha256 === sha256(bytes) && stamp.jco === JCO_VERSION && existsSync(join(OUT, 'proclease.js'));
}

/**
 * Transpiles `wasmPath` into `component/` unless it already holds it; returns the sha256 of the
 * bytes. The new files are written to a fresh directory and renamed into place, so that a
 * concurrent reader never sees half a transpilation.
 */
export async function transpile(wasmPath = sourceWasm()) {
  let bytes;
  try {
    bytes = readFileSync(wasmPath);
  } catch (e) {
    throw new Error(`${wasmPath}: the proclease component cannot be read (${e.code ?? e.message}); set PROCLEASE_WASM to a component file`);
  }
  if (isCurrent(bytes)) return sha256(bytes);
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
  const wasm = sourceWasm();
  transpile(wasm).then(
    (digest) => console.log(`proclease component ${digest.slice(0, 12)}… transpiled into ${OUT}`),
    (error) => {
      console.error(`proclease: ${error.message}`);
      process.exit(1);
    },
  );
}
