// Loads the proclease artifacts in Node: the transpilations `portable/` and `component/` of this
// package hold (made by `npm ci`'s `prepare`, or on first use — `transpile.mjs`), instantiated
// with the import object a host gives it. `Host` loads the portable artifact (the store,
// workspace and plugin catalog composed in, over `lib/sys.mjs`); `tests/js` the plain component,
// whose store it gives itself.
//
// The import object is keyed by interface name. jco 0.15.0's generated `.d.ts` name the keys with
// the package version (`proclease:lease/state-store@0.3.0`) while its generated JS reads them
// without it (`imports['proclease:lease/state-store']`); both are given
// (`test/component.test.mjs` checks which one the JS reads, to notice when jco changes it).
import { readFile } from 'node:fs/promises';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { ARTIFACTS, isCurrent, sourceWasm, transpile } from './transpile.mjs';

/** The WIT package the component implements. */
export const PACKAGE = 'proclease:lease';
export const VERSION = '0.3.0';
/** The interfaces the component imports (the world `proclease`), `types` included. */
export const IMPORTS = ['state-store', 'workspace', 'process-identity', 'plugin-catalog', 'clock', 'entropy', 'types'];
/** The interfaces the portable artifact imports (the world `proclease-portable`), `types` included. */
export const PORTABLE_IMPORTS = ['sys-fs', 'sys-kernel', 'process-identity', 'clock', 'entropy', 'types'];

const loaded = new Map();

/** `artifact`'s generated module and a cache of its compiled core modules (once per process). */
async function load(artifact = 'component') {
  if (!loaded.has(artifact)) {
    loaded.set(
      artifact,
      (async () => {
        const out = ARTIFACTS[artifact].out;
        const wasm = sourceWasm(artifact);
        let bytes = null;
        try {
          bytes = readFileSync(wasm);
        } catch {
          bytes = null;
        }
        if (bytes === null || !isCurrent(bytes, artifact)) await transpile(wasm, artifact);
        const module = await import(pathToFileURL(join(out, 'proclease.js')).href);
        const cores = new Map();
        const getCoreModule = (path) => {
          if (!cores.has(path)) cores.set(path, readFile(join(out, path)).then((b) => WebAssembly.compile(b)));
          return cores.get(path);
        };
        return { module, getCoreModule };
      })(),
    );
  }
  return loaded.get(artifact);
}

/**
 * The import object jco reads for `interfaces` (`{'state-store': {...}, ...}`): each of `names`
 * under its unversioned and its versioned key.
 */
export function importObject(interfaces, names = IMPORTS) {
  const imports = {};
  for (const name of names) {
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

/** A fresh portable-artifact instance whose imports are `interfaces` (`sys-fs`, `sys-kernel`, …); its exports. */
export async function instantiatePortable(interfaces) {
  const { module, getCoreModule } = await load('portable');
  return module.instantiate(getCoreModule, importObject(interfaces, PORTABLE_IMPORTS));
}

/** The generated JS's source of `artifact` (for the key check). */
export async function generatedSource(artifact = 'portable') {
  await load(artifact);
  return readFile(join(ARTIFACTS[artifact].out, 'proclease.js'), 'utf8');
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
    workspace: trap(['inspect', 'removeTree', 'createPrivateDirectory', 'removeEmptyDirectory', 'kind', 'isEmptyDirectory']),
    'process-identity': trap(['currentBootId', 'selfIdentity', 'capture', 'probe', 'finishedRun', 'forgetRun']),
    'plugin-catalog': { ...trap(['installed', 'lock']), CatalogLock: NoCatalogLock },
    clock: trap(['nowMs']),
    entropy: trap(['randomBytes']),
  };
}

/**
 * A component instance for pure exports only: the plain component (the same core as the portable
 * artifact's, without the store), which jco's generated JS instantiates in about two thirds of
 * the portable artifact's time.
 */
export async function instantiatePure() {
  return instantiate(pureImports());
}
