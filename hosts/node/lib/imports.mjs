// The WIT imports of the component, in the JS shapes jco gives them (`tests/js/host.mjs` shows
// each): records are objects with camelCase fields, enums strings, `option` `undefined` or the
// value, variants `{tag, val}`, u64/s64 BigInt; an import fails by throwing `{ payload: E }`
// (`E` a `failure` record for `state-store` and `workspace`, a string for the others). Each
// function forwards to this host's implementation (the `node:fs` store, workspace, process
// identity and catalog) — the counterparts of the native host's `host/src/imports/*/wit.rs`.
import { randomBytes } from 'node:crypto';
import { importCall, importCallText } from './errors.mjs';

/**
 * The import object of one host: `{'state-store': {...}, workspace, 'process-identity',
 * 'plugin-catalog', clock, entropy}`.
 */
export function hostImports({ store, workspace, processes, catalog, clock = () => Date.now() }) {
  /** The imported `catalog-lock` resource: one level of the catalog lock, released when the component drops it. */
  class CatalogLock {
    constructor() {
      this.held = true;
    }
    [Symbol.dispose]() {
      if (this.held) {
        this.held = false;
        catalog.unlock();
      }
    }
  }

  const ownerOut = (owner) => ({ pid: BigInt(owner.pid), bootId: owner.bootId, processStartId: owner.processStartId });

  return {
    'state-store': {
      readIfPresent: (path, maxBytes) => importCall(path, 'read', () => ({ text: store.readIfPresent(path, maxBytes) ?? undefined })),
      createIfAbsent: (path, content) => importCall(path, 'create', () => store.createIfAbsent(path, content)),
      replaceIfUnchanged: (path, expected, content) => importCall(path, 'replace', () => store.replaceIfUnchanged(path, expected, content)),
      // This host fsyncs the collection anyway (the WIT allows it): only slower than native.
      replaceIfUnchangedLazily: (path, expected, content) => importCall(path, 'replace', () => store.replaceIfUnchanged(path, expected, content)),
      removeIfUnchanged: (path, expected) => importCall(path, 'remove', () => store.removeIfUnchanged(path, expected)),
      ensurePrivateDirectory: (path) => importCall(path, 'mkdir', () => store.ensurePrivateDirectory(path)),
      snapshot: (path, recoverOrphans) => importCall(path, 'list', () => ({ snapshot: store.snapshot(path, recoverOrphans) ?? undefined })),
      readBatch: (path, names, maxPerFile, maxTotal, expected) => importCall(path, 'batch read', () => store.readBatch(path, names, maxPerFile, maxTotal, expected)),
      // The lease-creation lock, through flock(1) (`state-store/leasing-lock.mjs`); `held: false`
      // where there is no working flock(1).
      lockLeasing: () => importCall('.proclease/locks', 'lock', () => ({ held: store.leasing.take() })),
      unlockLeasing: () => store.leasing.release(),
    },
    workspace: {
      inspect: (path) => importCall(path, 'inspect', () => ({ facts: workspace.inspect(path) ?? undefined })),
      removeTree: (path, expected) => importCall(path, 'removal', () => workspace.removeTree(path, expected)),
      createPrivateDirectory: (path) => importCall(path, 'mkdir', () => workspace.createPrivateDirectory(path)),
      removeEmptyDirectory: (path, expected) => importCall(path, 'rmdir', () => workspace.removeEmptyDirectory(path, expected ?? null)),
    },
    'process-identity': {
      currentBootId: () => importCallText(() => processes.currentBootId()),
      selfIdentity: () => importCallText(() => ownerOut(processes.selfIdentity())),
      capture: (pid) => importCallText(() => ownerOut(processes.capture(pid))),
      probe: (owner) => importCallText(() => processes.probe(owner)),
      finishedRun: (leaseId) => importCallText(() => ({ outcome: processes.finishedRun(leaseId) })),
      forgetRun: (leaseId) => {
        processes.forgetRun(leaseId);
      },
    },
    'plugin-catalog': {
      installed: (pluginId) => {
        try {
          return { plugin: catalog.installed(pluginId) ?? undefined };
        } catch (error) {
          throw { payload: error.message };
        }
      },
      lock: () => {
        try {
          catalog.lock();
        } catch (error) {
          throw { payload: error.message };
        }
        return new CatalogLock();
      },
      CatalogLock,
    },
    clock: {
      nowMs: () => BigInt(clock()),
    },
    entropy: {
      randomBytes: (len) => new Uint8Array(randomBytes(len)),
    },
  };
}
