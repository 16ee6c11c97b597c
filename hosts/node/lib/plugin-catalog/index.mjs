// The plugin catalog (`plugin-catalog` import; spec §5): the installed identity of a plugin, and
// the catalog mutation lock. Port of `host/src/imports/plugin_catalog/mod.rs`.
//
// **Catalog file.** Like the native host, this host does not install plugins; it reads what the
// plugin host says is installed from a JSON file — `<state home>/provider-plugins/catalog.json`
// (read through the state store: a private file of yours), or the file given with
// `pluginCatalog` (the command line's `--plugin-catalog`):
//
//   {"schemaVersion": 1, "plugins": [
//     {"pluginId": "portable-test", "version": "1.0.0", "hostApiVersion": 1,
//      "bundleSha256": "<64 hex>", "manifestSha256": "<64 hex>", "enabled": true}]}
//
// A plugin that is absent or `"enabled": false` is not installed.
//
// **Lock.** The reference's catalog mutation lock (§5, `lock-file.mjs`). It fails fast while
// another live process holds it, is re-entrant within one process (a depth count per lock file),
// and dropping the last level removes exactly the inode this process published. The component
// holds a level as the imported resource `catalog-lock`: `CatalogLock`, whose `Symbol.dispose`
// (called by jco when the component drops it) releases one level.
import * as fs from 'node:fs';
import { join } from 'node:path';
import { LOCK_NAME, STORE_ROOT, acquire } from './lock-file.mjs';

/** The catalog file inside the state home. */
export const DEFAULT_PATH = 'provider-plugins/catalog.json';
/** The largest catalog file read (bytes). */
export const MAX_CATALOG_BYTES = 1 << 20;

/** Process-wide lock levels per lock file, so that the lock is re-entrant within a process. */
const HELD = new Map();

/** The installed identity of `pluginId` in catalog `text`, null when absent or disabled; throws the problem. */
function find(text, pluginId) {
  let doc;
  try {
    doc = JSON.parse(text);
  } catch (error) {
    throw new Error(`the plugin catalog is not valid JSON (${error.message})`);
  }
  if (doc === null || typeof doc !== 'object' || doc.schemaVersion !== 1) throw new Error('the plugin catalog must have "schemaVersion": 1');
  if (!Array.isArray(doc.plugins)) throw new Error('the plugin catalog needs a "plugins" array');
  for (const plugin of doc.plugins) {
    if (plugin === null || typeof plugin !== 'object' || plugin.pluginId !== pluginId) continue;
    const field = (name) => {
      if (typeof plugin[name] !== 'string') throw new Error(`plugin ${pluginId}: "${name}" must be a string`);
      return plugin[name];
    };
    const hostApiVersion = plugin.hostApiVersion;
    if (!Number.isInteger(hostApiVersion) || hostApiVersion < 0 || hostApiVersion > 0xffffffff) throw new Error(`plugin ${pluginId}: "hostApiVersion" must be a number`);
    if (typeof plugin.enabled !== 'boolean') throw new Error(`plugin ${pluginId}: "enabled" must be true or false`);
    const installed = {
      pluginId,
      version: field('version'),
      hostApiVersion,
      bundleSha256: field('bundleSha256'),
      manifestSha256: field('manifestSha256'),
    };
    return plugin.enabled ? installed : null;
  }
  return null;
}

/** The plugin catalog of one state home. */
export class PluginCatalog {
  /**
   * @param store the `StateStore`
   * @param processes the `ProcessIdentity`
   * @param liveness the `Liveness`
   * @param file a catalog file to read instead of the state home's (`--plugin-catalog`)
   * @param clock `() => ms since the epoch`
   */
  constructor(store, processes, liveness, file = null, clock = () => Date.now()) {
    this.store = store;
    this.processes = processes;
    this.liveness = liveness;
    this.file = file;
    this.clock = clock;
  }

  lockKey() {
    return join(this.store.home.path, STORE_ROOT, 'locks', LOCK_NAME);
  }

  /** The enabled installation of `pluginId` (a WIT `installed-plugin`), or null. Throws the problem's message. */
  installed(pluginId) {
    let label;
    let text;
    if (this.file === null) {
      label = DEFAULT_PATH;
      try {
        text = this.store.readIfPresent(DEFAULT_PATH, MAX_CATALOG_BYTES);
      } catch (error) {
        throw new Error(error.message);
      }
    } else {
      label = this.file;
      try {
        const bytes = fs.readFileSync(this.file);
        if (bytes.length > MAX_CATALOG_BYTES) throw new Error(`${this.file}: the plugin catalog is larger than ${MAX_CATALOG_BYTES} bytes`);
        try {
          text = new TextDecoder('utf-8', { fatal: true }).decode(bytes);
        } catch {
          throw new Error(`${this.file}: the plugin catalog is not UTF-8`);
        }
      } catch (error) {
        if (error.code === 'ENOENT') text = null;
        else if (error.code) throw new Error(`${this.file}: cannot read the plugin catalog: ${error.message}`);
        else throw error;
      }
    }
    if (text === null) return null;
    try {
      return find(text, pluginId);
    } catch (error) {
      throw new Error(`${label}: ${error.message}; see \`proclease --help\` for the catalog format`);
    }
  }

  /** Takes one level of the catalog mutation lock (§5), failing fast. Throws the reference's message. */
  lock() {
    const key = this.lockKey();
    const held = HELD.get(key);
    if (held) {
      held.depth += 1;
      return;
    }
    const lock = acquire(this.store, this.processes, this.liveness, this.clock());
    HELD.set(key, { lock, depth: 1 });
  }

  /** Releases one level; the last one removes the lock file. A lock that changed meanwhile is left as found. */
  unlock() {
    const key = this.lockKey();
    const held = HELD.get(key);
    if (!held) return;
    held.depth -= 1;
    if (held.depth === 0) {
      HELD.delete(key);
      try {
        held.lock.release();
      } catch {
        // Left as found (`… changed before release`): never another process's lock.
      }
    }
  }
}
