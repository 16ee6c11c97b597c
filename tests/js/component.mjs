// Loads the proclease component in Node: transpiles the exact bytes `proclease component`
// writes (build/proclease.wasm, or $PROCLEASE_WASM) with jco, and instantiates it with imports
// written in JavaScript (see host.mjs). jco looks imports up by interface name; both the
// versioned and unversioned names are given.
import { transpileBytes } from '@bytecodealliance/jco-transpile';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
export const WASM = process.env.PROCLEASE_WASM ?? join(here, 'build', 'proclease.wasm');
const OUT = join(here, 'build', 'transpiled');

let transpiled;

/** Transpiles the component once per process; returns the generated module. */
async function transpile() {
  if (!transpiled) {
    transpiled = (async () => {
      const bytes = await readFile(WASM).catch(() => {
        throw new Error(`${WASM}: no component; run: cargo run -p proclease -- component -o tests/js/build/proclease.wasm`);
      });
      const out = await transpileBytes(bytes, { name: 'proclease', instantiation: 'async' });
      for (const [name, data] of Object.entries(out.files)) {
        const path = join(OUT, name);
        await mkdir(dirname(path), { recursive: true });
        await writeFile(path, data);
      }
      return import(pathToFileURL(join(OUT, 'proclease.js')).href);
    })();
  }
  return transpiled;
}

/** A fresh instance whose imports are the host's (an object from host.mjs). */
export async function instantiate(host) {
  const module = await transpile();
  const imports = {};
  for (const [name, impl] of Object.entries(host.imports())) {
    imports[`proclease:lease/${name}`] = impl;
    imports[`proclease:lease/${name}@0.2.0`] = impl;
  }
  imports['proclease:lease/types'] = {};
  imports['proclease:lease/types@0.2.0'] = {};
  const getCoreModule = async (path) => WebAssembly.compile(await readFile(join(OUT, path)));
  return module.instantiate(getCoreModule, imports);
}
