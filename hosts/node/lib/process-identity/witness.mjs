// What this host can observe of the native host's kernel-lock witnesses (`docs/witness.md`) —
// the read-only part of `host/src/imports/process_identity/witness.rs`.
//
// A witness is a file `<state home>/.proclease/witnesses/<boot id>/<pid>-<process start id>.witness`
// on which its holder keeps an exclusive `flock`; spawn witnesses are `<pid>-<start>.spawn-<uuid>`.
// Node cannot `flock`, so this host can test no lock. (`/proc/locks` would not do: it omits a lock
// whose taker died while a process that inherited it holds it — a spawn witness after its
// supervisor was killed; a scan of every `/proc/<pid>/fd` is refused for some processes even to
// root.) What it can say, and says:
// - no witness file → `absent` (a record of ghostget, of this host, of a process that took none):
//   the component then judges by `/proc` in the initial PID namespace, as the reference does;
// - a witness file → `untestable`, with the PID namespace its content records: the component
//   consults `/proc` only when it shows that namespace — a native child recorded in another PID
//   namespace is never judged dead from this `/proc` (`docs/deviations.md` item 1);
// - spawn witnesses → `held` when there are any, `absent` when there are none. Their locks cannot
//   be tested, and what they cover may still run (a native `--stage` command, a command not yet
//   recorded, what a command left running): the component would treat `untestable` as `absent`
//   (the reference's rule) and let this host's `recover` delete a directory such a process works
//   in. So this host keeps such leases; the native host, which tests the locks, recovers them.
// Anything that makes the witness directory unreadable other than its absence (not a private
// directory of the user, a symbolic link, an I/O error) is `untestable` (spawned: `held`).
import * as fs from 'node:fs';
import { euid, namesStartingWith, openDir, using } from '../fsops.mjs';
import { isDigest } from '../state-store/path.mjs';

/** The largest witness file read (`MAX_WITNESS_BYTES`). */
const MAX_WITNESS_BYTES = 4096;

/** Whether `owner`'s digests can name witness files (64 lowercase hex each). */
const nameable = (owner) => isDigest(owner.bootId) && isDigest(owner.processStartId);

/** The witness observer of one state home (its `.proclease/witnesses`). */
export class WitnessObserver {
  /** @param home the `StateHome` (its open directory) */
  constructor(home) {
    this.home = home;
  }

  /**
   * This boot's witness directory, opened without following a symbolic link and checked to be a
   * private directory of the user: `{dir}`, `{absent: true}`, or `{unreadable: true}`.
   */
  bootDir(bootId) {
    let current = null;
    try {
      current = this.home.dir.dup();
      for (const name of ['.proclease', 'witnesses', bootId]) {
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
      return error.code === 'ENOENT' ? { absent: true } : { unreadable: true };
    }
  }

  /**
   * `[witness state, recorded PID namespace]` of `owner`'s witness (`Witnesses::test`): `absent`,
   * or `untestable` with the `pidNamespace` its content records (a BigInt, or undefined when the
   * content does not say).
   */
  test(owner) {
    if (!nameable(owner)) return ['absent', undefined];
    const boot = this.bootDir(owner.bootId);
    if (boot.absent) return ['absent', undefined];
    if (boot.unreadable) return ['untestable', undefined];
    return using(boot.dir, (dir) => {
      const name = `${owner.pid}-${owner.processStartId}.witness`;
      let fd;
      try {
        fd = fs.openSync(dir.at(name), fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK);
      } catch (error) {
        return error.code === 'ENOENT' ? ['absent', undefined] : ['untestable', undefined];
      }
      try {
        return ['untestable', recordedPidNamespace(fd)];
      } finally {
        fs.closeSync(fd);
      }
    });
  }

  /**
   * The aggregate state of the spawn witnesses `owner` took (`Witnesses::test_spawned`), as far
   * as this host can tell: `held` when there are any (or the directory cannot be read: nothing
   * proves them gone, and a process they cover may run), `absent` when there are none.
   */
  testSpawned(owner) {
    if (!nameable(owner)) return ['absent', false];
    const boot = this.bootDir(owner.bootId);
    if (boot.absent) return ['absent', false];
    if (boot.unreadable) return ['held', false];
    return using(boot.dir, (dir) => {
      try {
        // One listing of this identity's files: its spawn witnesses, and the uncontained
        // records beside them (witness.rs, record_uncontained), which make explanations say
        // that their processes ran without a box or a cgroup.
        const identity = `${owner.pid}-${owner.processStartId}.`;
        const listed = namesStartingWith(dir, identity, 100_000);
        const names = new Set(listed.names);
        const spawns = listed.names.filter((name) => name.startsWith(`${identity}spawn-`));
        if (spawns.length === 0 && !listed.over) return ['absent', false];
        const uncontained = spawns.some((name) => names.has(name.replace('.spawn-', '.uncontained-')));
        return ['held', uncontained];
      } catch {
        return ['held', false];
      }
    });
  }
}

/** The `pidNamespace` a witness file records (its content, bounded): a BigInt, or undefined. */
function recordedPidNamespace(fd) {
  try {
    const buffer = Buffer.alloc(MAX_WITNESS_BYTES);
    let length = 0;
    for (let n; length < buffer.length && (n = fs.readSync(fd, buffer, length, buffer.length - length, null)) > 0; ) length += n;
    const value = JSON.parse(buffer.subarray(0, length).toString('utf8'));
    const text = value?.pidNamespace;
    return typeof text === 'string' && /^[0-9]+$/.test(text) && BigInt(text) < 2n ** 64n ? BigInt(text) : undefined;
  } catch {
    return undefined;
  }
}
