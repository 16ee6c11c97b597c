// The native host's kernel-lock witnesses (`docs/witness.md`) as this host sees and takes them —
// `host/src/imports/process_identity/witness.rs`, with `flock` through util-linux's `flock(1)`
// (`flock.mjs`).
//
// A witness is a file `<state home>/.proclease/witnesses/<boot id>/<pid>-<process start id>.witness`
// on which its holder keeps an exclusive `flock`; spawn witnesses are `<pid>-<start>.spawn-<uuid>`.
// - `test`: no witness file → `absent`; a lock refused → `held`; granted → `free`, unless the
//   witness records a lock domain (device, inode) other than the file this host opened (then
//   `untestable`: its lock says nothing here); without `flock(1)`, `untestable`.
//   With it, what the cgroup recorded beside the witness (`<identity>.cgroup`) shows now
//   (`cgroup.mjs`, `cgroup_tree::observe`): a `populated` one keeps the owner alive whatever the
//   witness says; `absent` when none was recorded.
// - `testSpawned`: `held` if any spawn witness is held or cannot be tested, or the cgroup recorded
//   with one (`<spawner>.cgroup-<uuid>`) is populated, or the directory cannot be read;
//   `untestable` if such a cgroup cannot be read here; `free` when there are some and all are
//   free; `absent` when there are none.
// - `spawn`: a spawn witness for a process this one is about to start (`Witnesses::spawn`), locked
//   before it gets its name, so no prober ever finds it free while its child may run.
// Anything that makes the witness directory unreadable other than its absence (not a private
// directory of the user, a symbolic link, an I/O error) is `untestable` (spawned: `held`).
import * as fs from 'node:fs';
import { createPrivateDir, euid, namesStartingWith, openDir, readUpTo, unlinkQuietly, using, uuid, writeAll } from '../fsops.mjs';
import { isDigest } from '../state-store/path.mjs';
import { readCgroupRecord } from './cgroup.mjs';
import { testLock, tryLock } from './flock.mjs';

/** The largest witness file read (`MAX_WITNESS_BYTES`). */
const MAX_WITNESS_BYTES = 4096;

/** The content of an uncontained record (`witness.rs::UNCONTAINED_RECORD`). */
export const UNCONTAINED_RECORD = '{"kind":"proclease-uncontained","schemaVersion":1}\n';

/** Whether `owner`'s digests can name witness files (64 lowercase hex each). */
const nameable = (owner) => isDigest(owner.bootId) && isDigest(owner.processStartId);

/** `<pid>-<start>`: the witness name of an identity, without its suffix. */
const identityOf = (owner) => `${owner.pid}-${owner.processStartId}`;

/** What a witness file says, canonical JSON + `\n`, byte for byte the native host's (`witness.rs::content`). */
export function witnessContent(holder, role, namespaces, [device, inode]) {
  return (
    `{"bootId":"${holder.bootId}","boottimeOffsetNs":${namespaces.boottimeOffsetNs},"device":"${device}","inode":"${inode}",` +
    `"kind":"proclease-witness","pid":${holder.pid},` +
    `"pidNamespace":"${namespaces.pidNamespace}","processStartId":"${holder.processStartId}","role":"${role}","schemaVersion":1,"timeNamespace":"${namespaces.timeNamespace}"}\n`
  );
}

/** A witness that could not be taken: its path under the state home and what failed. */
export class WitnessError extends Error {
  constructor(path, message) {
    super(`${path}: ${message}`);
    this.name = 'WitnessError';
  }
}

/** The witness directory of one state home (its `.proclease/witnesses`). */
export class WitnessObserver {
  /** @param home the `StateHome` (its open directory) */
  constructor(home) {
    this.home = home;
  }

  /**
   * This boot's witness directory, opened without following a symbolic link and checked to be a
   * private directory of the user: `{dir}`, `{absent: true}`, or `{unreadable: true}`. With
   * `create`, the missing directories are created (0700).
   */
  bootDir(bootId, { create = false } = {}) {
    let current = null;
    try {
      current = this.home.dir.dup();
      for (const name of ['.proclease', 'witnesses', bootId]) {
        if (create) createPrivateDir(current, name);
        const next = openDir(current, name);
        current.close();
        current = next;
        const stat = current.stat();
        if (Number(stat.uid) !== euid() || (Number(stat.mode) & 0o777) !== 0o700) {
          current.close();
          return { unreadable: true };
        }
      }
      return { dir: current };
    } catch (error) {
      current?.close();
      return error.code === 'ENOENT' ? { absent: true } : { unreadable: true, error };
    }
  }

  /**
   * `[witness state, recorded PID namespace, tree]` of `owner`'s witness (`Witnesses::test` and
   * `Witnesses::test_tree`): `absent`, `held`, `free` or `untestable` (module comment), with the
   * `pidNamespace` its content records (a BigInt, or undefined when there is no witness or its
   * content does not say), and what the cgroup recorded beside it shows (`absent` when none was
   * recorded, and when the witness is held: a held witness decides alone).
   */
  test(owner) {
    if (!nameable(owner)) return ['absent', undefined, 'absent'];
    const boot = this.bootDir(owner.bootId);
    if (boot.absent) return ['absent', undefined, 'absent'];
    if (boot.unreadable) return ['untestable', undefined, 'unreadable'];
    return using(boot.dir, (dir) => {
      const identity = identityOf(owner);
      const state = testAt(dir, `${identity}.witness`);
      const tree = state.state === 'held' ? 'absent' : readCgroupRecord(dir, `${identity}.cgroup`);
      if (state.absent) return ['absent', undefined, tree];
      return [state.state, state.pidNamespace, tree];
    });
  }

  /**
   * `[aggregate state, uncontained]` of the spawn witnesses `owner` took (`Witnesses::test_spawned`,
   * module comment); `uncontained`: one of them has an uncontained record beside it.
   */
  testSpawned(owner) {
    if (!nameable(owner)) return ['absent', false];
    const boot = this.bootDir(owner.bootId);
    if (boot.absent) return ['absent', false];
    if (boot.unreadable) return ['held', false];
    return using(boot.dir, (dir) => {
      try {
        const identity = `${identityOf(owner)}.`;
        const listed = namesStartingWith(dir, identity, 100_000);
        if (listed.over) return ['held', false];
        const trees = listed.names.filter((name) => name.startsWith(`${identity}cgroup-`)).map((name) => readCgroupRecord(dir, name));
        // A process it started, whatever it closed, still runs in its cgroup.
        if (trees.includes('populated')) return ['held', false];
        const names = new Set(listed.names);
        const spawns = listed.names.filter((name) => name.startsWith(`${identity}spawn-`));
        if (spawns.length === 0) return ['absent', false];
        const uncontained = spawns.some((name) => names.has(name.replace('.spawn-', '.uncontained-')));
        let aggregate = 'absent';
        for (const name of spawns) {
          const { state } = testAt(dir, name);
          // One whose lock cannot be tested here (no working flock(1)) may cover a process that
          // runs: held, as this host answered before it could test locks. (The native host says
          // `untestable` only for a filesystem without flock, which it documents.)
          if (state === 'held' || state === 'untestable') return ['held', uncontained];
          if (state === 'free' && aggregate === 'absent') aggregate = 'free';
        }
        // Unseen is not gone: one that closed its spawn witness may run in a cgroup that cannot
        // be read here (another cgroup namespace), as natively.
        if (trees.includes('unreadable')) return ['untestable', uncontained];
        return [aggregate, uncontained];
      } catch {
        return ['held', false];
      }
    });
  }

  /**
   * Takes a spawn witness for a process `spawner` (this process's identity) is about to start
   * (`Witnesses::spawn`): `<spawner>.spawn-<uuid>`, created as `.tmp-<uuid>`, its content
   * written, locked exclusively, then linked under its name. Returns a `SpawnWitness`. Throws a
   * `WitnessError` when it cannot be created or locked (no `flock(1)`: a witness that is not
   * held would prove its child gone while it runs).
   */
  spawn(spawner, namespaces) {
    if (!nameable(spawner)) throw new WitnessError('.proclease/witnesses', 'not a process identity');
    const where = `.proclease/witnesses/${spawner.bootId}`;
    const boot = this.bootDir(spawner.bootId, { create: true });
    if (!boot.dir) throw new WitnessError(where, boot.error ? boot.error.message : 'not a private directory of the user');
    const dir = boot.dir;
    const name = `${identityOf(spawner)}.spawn-${uuid()}`;
    const temp = `.tmp-${uuid()}`;
    let fd;
    try {
      fd = fs.openSync(dir.at(temp), fs.constants.O_RDWR | fs.constants.O_CREAT | fs.constants.O_EXCL | fs.constants.O_NOFOLLOW, 0o600);
    } catch (error) {
      dir.close();
      throw new WitnessError(`${where}/${name}`, `create: ${error.message}`);
    }
    try {
      const stat = fs.fstatSync(fd, { bigint: true });
      writeAll(fd, Buffer.from(witnessContent(spawner, 'spawn', namespaces, [stat.dev, stat.ino]), 'utf8'));
      const locked = tryLock(fd, 'exclusive');
      if (locked !== 'locked') {
        throw new WitnessError(`${where}/${name}`, locked === 'conflict' ? 'a fresh file was locked' : "it cannot be locked (util-linux's flock(1) is needed, and a filesystem with flock)");
      }
      fs.linkSync(dir.at(temp), dir.at(name));
      unlinkQuietly(dir, temp);
      return new SpawnWitness(dir, where, name, fd);
    } catch (error) {
      unlinkQuietly(dir, temp);
      fs.closeSync(fd);
      dir.close();
      throw error instanceof WitnessError ? error : new WitnessError(`${where}/${name}`, error.message);
    }
  }
}

/**
 * A spawn witness between its creation and its child's start (`witness.rs::SpawnWitness`): `fd`
 * holds the lock; give it to the child alone (an entry of `spawn`'s `stdio`), then `started()`,
 * which closes this process's copy — never an unlock, which would release the child's too. Or
 * `discard()` when no child started: the witness is removed.
 */
export class SpawnWitness {
  constructor(dir, where, name, fd) {
    this.dir = dir;
    this.where = where;
    this.name = name;
    this.fd = fd;
  }

  /**
   * Records, beside the witness, that its child runs uncontained (no box, no cgroup:
   * `<spawner>.uncontained-<uuid>`, `docs/witness.md` "Uncontained runs"), while this process
   * still holds the lock, so no prober finds the witness free without it.
   */
  recordUncontained() {
    const name = this.name.replace('.spawn-', '.uncontained-');
    const fd = fs.openSync(this.dir.at(name), fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_TRUNC | fs.constants.O_NOFOLLOW, 0o600);
    try {
      writeAll(fd, Buffer.from(UNCONTAINED_RECORD, 'utf8'));
    } finally {
      fs.closeSync(fd);
    }
  }

  /**
   * Links the witness under the identity of the child it covers, `<child pid>-<child start>.witness`
   * (`Witnesses::bind`): the same inode, the same lock, so probing the child tests it.
   */
  bind(child) {
    if (!nameable(child)) return;
    const name = `${identityOf(child)}.witness`;
    try {
      fs.linkSync(this.dir.at(this.name), this.dir.at(name));
    } catch (error) {
      if (error.code !== 'EEXIST') throw new WitnessError(`${this.where}/${name}`, `link: ${error.message}`);
      const here = fs.statSync(this.dir.at(this.name), { bigint: true });
      const there = fs.lstatSync(this.dir.at(name), { bigint: true });
      if (here.ino === there.ino && here.dev === there.dev) return;
      // An earlier holder of this identity name that is gone left it: take its place.
      if (testAt(this.dir, name).state !== 'free') throw new WitnessError(`${this.where}/${name}`, 'another live process holds the witness of this identity');
      const temp = `.tmp-${uuid()}`;
      fs.linkSync(this.dir.at(this.name), this.dir.at(temp));
      fs.renameSync(this.dir.at(temp), this.dir.at(name));
    }
  }

  /** The child runs and holds its copy: this process's copy closes (the lock stays with the child). */
  started() {
    this.close();
  }

  /** No child started: the witness (and an uncontained record) is removed, then closed. */
  discard() {
    unlinkQuietly(this.dir, this.name);
    unlinkQuietly(this.dir, this.name.replace('.spawn-', '.uncontained-'));
    this.close();
  }

  close() {
    if (this.fd !== null) fs.closeSync(this.fd);
    this.fd = null;
    if (this.dir.fd !== null) this.dir.close();
  }
}

/** Whether entry `name` of `dir` exists (an error other than its absence counts as existing). */
function exists(dir, name) {
  try {
    fs.lstatSync(dir.at(name));
    return true;
  } catch (error) {
    return error.code !== 'ENOENT';
  }
}

/**
 * The lock of witness `name` in `dir` (`witness.rs::test`): `{absent: true}`, or `{state, pidNamespace}`
 * with `state` `held`, `free` or `untestable` — `free` only in this witness's lock domain.
 */
function testAt(dir, name) {
  let fd;
  try {
    fd = fs.openSync(dir.at(name), fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK);
  } catch (error) {
    return error.code === 'ENOENT' ? { absent: true } : { state: 'untestable', pidNamespace: undefined };
  }
  try {
    const content = readContent(fd);
    const pidNamespace = recordedPidNamespace(content);
    let state = testLock(fd);
    if (state === 'free' && inAnotherLockDomain(fd, content)) state = 'untestable';
    return { state, pidNamespace };
  } finally {
    // Also lets go of the shared lock a `free` test took.
    fs.closeSync(fd);
  }
}

/** A witness file's content (bounded), parsed; undefined when it is no JSON object. */
function readContent(fd) {
  try {
    const value = JSON.parse(readUpTo(fd, MAX_WITNESS_BYTES).toString('utf8'));
    return value !== null && typeof value === 'object' && !Array.isArray(value) ? value : undefined;
  } catch {
    return undefined;
  }
}

const u64 = (text) => (typeof text === 'string' && /^[0-9]+$/.test(text) && BigInt(text) < 2n ** 64n ? BigInt(text) : undefined);

/** The `pidNamespace` a witness's content records: a BigInt, or undefined. */
function recordedPidNamespace(content) {
  return u64(content?.pidNamespace);
}

/**
 * Whether the witness open as `fd` records a `(device, inode)` other than the one this process
 * sees for it (`witness.rs::in_another_lock_domain`): false when it records none, true when a
 * recorded domain does not parse.
 */
function inAnotherLockDomain(fd, content) {
  let stat;
  try {
    stat = fs.fstatSync(fd, { bigint: true });
  } catch {
    return true;
  }
  if (content === undefined) return false;
  const { device, inode } = content;
  if (device === undefined && inode === undefined) return false;
  const recorded = [u64(device), u64(inode)];
  return recorded[0] !== stat.dev || recorded[1] !== stat.ino;
}
