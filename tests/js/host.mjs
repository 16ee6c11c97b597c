// A second, independent implementation of the component's import contract, in JavaScript and
// in memory: a state store with compare-and-swap semantics, a scripted process table with a
// fixed boot id, a workspace of directory facts, a plugin catalog with its lock, a clock and
// counting entropy.
import { createHash } from 'node:crypto';

export const sha256 = (text) => createHash('sha256').update(text, 'utf8').digest('hex');
/** A thrown import `failure` record (WIT `types.failure`): its kind and message, no OS facts. */
const fail = (kind, message) => ({ payload: { kind, message, errno: undefined, path: undefined, operation: undefined } });

/** The initial PID namespace's inode (the kernel's PROC_PID_INIT_INO). */
const INITIAL_PID_NAMESPACE = 0xeffffffcn;

/**
 * The facts a host would observe that prove `status` as the reference's injected `inspect`
 * answers it: no witness file and nothing of spawned processes; a live owner as a held witness,
 * a dead one as a pid the kernel says is gone, an unknown one as an unreadable stat.
 */
export function factsImplying(owner, status) {
  const witness = status === 'exact-live-owner' ? 'held' : 'absent';
  const stat = status === 'different-or-dead' ? { tag: 'missing' } : { tag: 'unreadable' };
  return {
    bootId: owner.bootId,
    witness,
    recordedPidNamespace: undefined,
    spawned: 'absent',
    spawnedUncontained: false,
    stat,
    tasks: 0,
    view: { pidNamespace: INITIAL_PID_NAMESPACE, boottimeOffsetNs: 0n, clockTicksPerSecond: 100n },
    // No cluster (docs/cluster.md): another boot id is a previous boot.
    remote: 'not-clustered',
    // No cgroup recorded (docs/containment.md).
    tree: 'absent',
  };
}

export class MemoryHost {
  constructor({ bootId = 'a'.repeat(64), status = () => 'unknown' } = {}) {
    this.files = new Map();
    this.dirs = new Map();
    this.nextInode = 1000;
    this.failNextCas = false;
    this.bootId = bootId;
    this.bootLookups = 0;
    this.status = status;
    this.probed = [];
    this.own = { pid: 4242n, bootId, processStartId: 'f'.repeat(64) };
    this.capture = undefined; // undefined: must not be reached; null: not alive; owner: alive
    this.workspace = new Map();
    this.plugins = new Map();
    this.lockDepth = 0;
    this.lockedElsewhere = false;
    this.now = 0n;
    this.counter = 0;
  }

  ensureDirs(path) {
    let prefix = '';
    let identity = { device: '1', inode: '1' };
    for (const part of path.split('/').filter(Boolean)) {
      prefix = prefix ? `${prefix}/${part}` : part;
      if (!this.dirs.has(prefix)) this.dirs.set(prefix, { device: '1', inode: String(this.nextInode++) });
      identity = this.dirs.get(prefix);
    }
    return identity;
  }

  put(path, text) {
    this.ensureDirs(path.split('/').slice(0, -1).join('/'));
    this.files.set(path, text);
  }

  takeCasFailure() {
    const fail = this.failNextCas;
    this.failNextCas = false;
    return fail;
  }

  imports() {
    const host = this;
    const replace = (path, expected, content) => {
      if (host.takeCasFailure()) return false;
      const current = host.files.get(path);
      if (current === undefined || sha256(current) !== expected) return false;
      host.files.set(path, content);
      return true;
    };
    return {
      'state-store': {
        readIfPresent(path, maxBytes) {
          const text = host.files.get(path);
          if (text !== undefined && Buffer.byteLength(text) > maxBytes) throw fail('unsafe', `${path}: too large`);
          return { text };
        },
        createIfAbsent(path, content) {
          host.ensureDirs(path.split('/').slice(0, -1).join('/'));
          if (host.files.has(path)) return false;
          host.files.set(path, content);
          return true;
        },
        replaceIfUnchanged: replace,
        // Nothing here is ever synced: the lazy replace is the same replace.
        replaceIfUnchangedLazily: replace,
        removeIfUnchanged(path, expected) {
          if (host.takeCasFailure()) return false;
          const current = host.files.get(path);
          if (current === undefined || sha256(current) !== expected) return false;
          host.files.delete(path);
          return true;
        },
        ensurePrivateDirectory(path) {
          return host.ensureDirs(path);
        },
        snapshot(path, _recoverOrphans) {
          const identity = host.dirs.get(path);
          if (!identity) return { snapshot: undefined };
          const prefix = `${path}/`;
          const entries = [];
          for (const name of host.files.keys()) {
            const rest = name.startsWith(prefix) ? name.slice(prefix.length) : null;
            if (rest && !rest.includes('/')) entries.push({ name: rest, kind: 'file' });
          }
          for (const [name, id] of host.dirs) {
            const rest = name.startsWith(prefix) ? name.slice(prefix.length) : null;
            if (rest && !rest.includes('/')) entries.push({ name: rest, kind: 'directory', identity: id });
          }
          entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
          return { snapshot: { identity, entries } };
        },
        readBatch(path, names, maxPerFile, _maxTotal, expected) {
          const identity = host.dirs.get(path);
          if (!identity || identity.inode !== expected.inode) throw fail('unsafe', `${path}: private state batch directory changed identity`);
          return names.map((name) => {
            const text = host.files.get(`${path}/${name}`);
            if (text === undefined) return { name, status: { tag: 'absent' } };
            if (Buffer.byteLength(text) > maxPerFile) return { name, status: { tag: 'invalid', val: 'file-byte-bound' } };
            return { name, status: { tag: 'present', val: text } };
          });
        },
        // One process shares this store: there is no other leaser to exclude.
        lockLeasing() {
          return { held: false };
        },
        unlockLeasing() {},
      },
      'process-identity': {
        currentBootId() {
          host.bootLookups += 1;
          if (host.bootId === null) throw { payload: 'system boot identity is unavailable' };
          return host.bootId;
        },
        selfIdentity() {
          return host.own;
        },
        capture(pid) {
          if (host.capture === undefined) throw { payload: `test script: capture(${pid}) must not be reached` };
          if (host.capture === null) throw { payload: 'exact live process identity is unavailable' };
          return host.capture;
        },
        probe(owner) {
          host.probed.push(owner);
          return factsImplying(owner, host.status(owner, host.probed.length));
        },
        // This host keeps no run journal: no run is known to have finished.
        finishedRun(_leaseId) {
          return { outcome: undefined };
        },
        forgetRun(_leaseId) {},
      },
      workspace: {
        inspect(path) {
          return { facts: host.workspace.get(path) };
        },
        removeTree(path, expected) {
          const facts = host.workspace.get(path);
          if (!facts) return false;
          const id = facts.identity;
          if (id.device !== expected.device || id.inode !== expected.inode || id.birthtimeNs !== expected.birthtimeNs) {
            throw fail('identity-changed', `${path}: recursive removal target changed identity`);
          }
          for (const key of [...host.workspace.keys()]) if (key === path || key.startsWith(`${path}/`)) host.workspace.delete(key);
          return true;
        },
        createPrivateDirectory(path) {
          const created = [];
          let walked = '';
          for (const part of path.split('/').filter(Boolean)) {
            walked = `${walked}/${part}`;
            if (!host.workspace.has(walked)) {
              host.addDirectory(walked, host.nextInode++);
              created.push(walked);
            }
          }
          return created;
        },
        removeEmptyDirectory(path, expected) {
          const facts = host.workspace.get(path);
          if (!facts) return false;
          const id = facts.identity;
          const same = !expected || (id.device === expected.device && id.inode === expected.inode && id.birthtimeNs === expected.birthtimeNs);
          const empty = ![...host.workspace.keys()].some((key) => key.startsWith(`${path}/`));
          if (!same || !empty) return false;
          host.workspace.delete(path);
          return true;
        },
        // This workspace holds only directories.
        kind(path) {
          return host.workspace.has(path) ? 'directory' : 'absent';
        },
        isEmptyDirectory(path) {
          return ![...host.workspace.keys()].some((key) => key.startsWith(`${path}/`));
        },
      },
      'plugin-catalog': {
        installed(pluginId) {
          return { plugin: host.plugins.get(pluginId) };
        },
        lock() {
          if (host.lockedElsewhere) throw { payload: 'portable plugin catalog mutation is already locked' };
          host.lockDepth += 1;
          return new CatalogLock(host);
        },
        CatalogLock,
      },
      clock: {
        nowMs() {
          return host.now;
        },
      },
      entropy: {
        randomBytes(len) {
          host.counter += 1;
          return Uint8Array.from({ length: len }, (_, i) => (host.counter * 31 + i * 7) & 0xff);
        },
      },
    };
  }

  /** A private, owned, physical directory in the workspace. */
  addDirectory(path, inode) {
    this.workspace.set(path, {
      canonical: true,
      isDirectory: true,
      owned: true,
      mode: 0o700,
      identity: { device: '2049', inode: String(inode), birthtimeNs: String(1700000000000000000n + BigInt(inode)) },
    });
  }
}

/** The imported `catalog-lock` resource: one level of the catalog lock, released on drop. */
export class CatalogLock {
  constructor(host) {
    this.host = host;
  }
  [Symbol.dispose ?? Symbol.for("dispose")]() {
    this.host.lockDepth -= 1;
  }
}
