// Loads the proclease component in Node: the transpilation `component/` of this package holds
// (made by `npm ci`'s `prepare`, or on first use — `transpile.mjs`), instantiated with the import
// object a host gives it. Mirrors `tests/js/component.mjs`.
//
// The import object is keyed by interface name. jco 0.15.0's generated `.d.ts` name the keys with
// the package version (`proclease:lease/state-store@0.3.0`) while its generated JS reads them
// without it (`imports['proclease:lease/state-store']`); both are given
// (`test/component.test.mjs` checks which one the JS reads, to notice when jco changes it).
import { readFile } from 'node:fs/promises';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { OUT, isCurrent, sourceWasm, transpile } from './transpile.mjs';

/** The WIT package the component implements. */
export const PACKAGE = 'proclease:lease';
export const VERSION = '0.3.0';
/** The interfaces the component imports (the world `proclease`), `types` included. */
export const IMPORTS = ['state-store', 'workspace', 'process-identity', 'plugin-catalog', 'clock', 'entropy', 'types'];

let loaded = null;

/** The generated module and a cache of its compiled core modules (once per process). */
async function load() {
  loaded ??= (async () => {
    const wasm = sourceWasm();
    let bytes = null;
    try {
      bytes = readFileSync(wasm);
    } catch {
      bytes = null;
    }
    if (bytes === null || !isCurrent(bytes)) await transpile(wasm);
    const module = await import(pathToFileURL(join(OUT, 'proclease.js')).href);
    const cores = new Map();
    const getCoreModule = (path) => {
      if (!cores.has(path)) cores.set(path, readFile(join(OUT, path)).then((b) => WebAssembly.compile(b)));
      return cores.get(path);
    };
    return { module, getCoreModule };
  })();
  return loaded;
}

/**
 * The import object jco reads for `interfaces` (`{'state-store': {...}, ...}`): each under its
 * unversioned and its versioned key.
 */
export function importObject(interfaces) {
  const imports = {};
  for (const name of IMPORTS) {
    const impl = interfaces[name] ?? {};
    imports[`${PACKAGE}/${name}`] = impl;
    imports[`${PACKAGE}/${name}@${VERSION}`] = impl;
  }
  return imports;
}

/** A fresh component instance whose imports are `interfaces`; its exports (`records`, `dispositions`, …). */
export async function instantiate(interfaces) {
  const { module, getCoreModule } = await load();
  return module.instantiate(getCoreModule, importObject(interfaces));
}

/** The generated JS's source (for the key check). */
export async function generatedSource() {
  await load();
  return readFile(join(OUT, 'proclease.js'), 'utf8');
}

/** The catalog-lock class of an instance that must never take the lock (the pure instance's). */
class NoCatalogLock {
  [Symbol.dispose]() {}
}

/**
 * Imports for an instance used only for pure exports (`records`, `dispositions`): any call into
 * them is a bug of this host and traps the calling export.
 */
export function pureImports() {
  const refuse = (name) => () => {
    throw new Error(`the pure component instance called the ${name} import: only pure exports may be called on it`);
  };
  const trap = (names) => Object.fromEntries(names.map((n) => [n, refuse(n)]));
  return {
    'state-store': trap(['readIfPresent', 'createIfAbsent', 'replaceIfUnchanged', 'replaceIfUnchangedLazily', 'removeIfUnchanged', 'ensurePrivateDirectory', 'snapshot', 'readBatch', 'lockLeasing', 'unlockLeasing']),
    workspace: trap(['inspect', 'removeTree', 'createPrivateDirectory', 'removeEmptyDirectory']),
    'process-identity': trap(['currentBootId', 'selfIdentity', 'capture', 'probe', 'finishedRun', 'forgetRun']),
    'plugin-catalog': { ...trap(['installed', 'lock']), CatalogLock: NoCatalogLock },
    clock: trap(['nowMs']),
    entropy: trap(['randomBytes']),
  };
}

/** A component instance for pure exports only. */
export async function instantiatePure() {
  return instantiate(pureImports());
}
