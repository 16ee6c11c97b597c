// Loads the proclease component in Node through the Node host package's loader
// (`hosts/node/lib/component.mjs`: jco 0.15.0's transpilation, both import keys), so that the
// vectors and scenarios here run through the same loader the package's users get; only the
// imports differ (in memory, `host.mjs`). The component is `$PROCLEASE_WASM` (tests/tests/node_jco.rs
// sets it to the bytes `proclease component` writes), else the repository's
// host/component/proclease.wasm. Needs `npm ci` in hosts/node.
import { instantiate as load } from '../../hosts/node/lib/component.mjs';

/** A fresh instance whose imports are the host's (an object from host.mjs). */
export async function instantiate(host) {
  return load(host.imports());
}
