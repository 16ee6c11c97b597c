// What a native run's recorded cgroup shows now — the reading half of
// `host/src/imports/process_identity/cgroup_tree.rs` (`observe`), as the Python host has it
// (`witness.py`, `observe_cgroup`). This host makes no cgroup; it reads the records the native
// supervisor leaves beside a spawn witness (`<identity>.cgroup`, `<spawner>.cgroup-<uuid>`) so that
// its `doctor` and `recover` judge a native run by the same facts as the native host: a cgroup
// whose `cgroup.events` says `populated 1` keeps the lease alive whatever its witness says, and an
// empty or removed one leaves the witness to decide (`proclease-core`'s `liveness::judge`, rule 2).
//
// A record is canonical JSON: `{"cgroupId":N,"cgroupNamespace":N,"kind":"proclease-cgroup",
// "path":"/…","schemaVersion":1}` — the cgroup's path as `/proc/self/cgroup` shows it, the cgroup
// namespace (nsfs inode) that path is relative to, and the cgroup's id (its directory's inode).
import * as fs from 'node:fs';
import { readUpTo } from '../fsops.mjs';

/** The largest record or `cgroup.events` read (`MAX_READ`), bytes. */
const MAX_READ = 4096;

/** `path` relative to `root` (both cgroup paths, `/`-rooted), if it is `root` or below it. */
export function within(path, root) {
  if (root === '/') return path.replace(/^\/+/, '');
  if (!path.startsWith(root)) return null;
  const rest = path.slice(root.length);
  return rest === '' || rest.startsWith('/') ? rest.replace(/^\/+/, '') : null;
}

/** The kernel escapes space, tab, newline and backslash in mountinfo as `\ooo`. */
const unescapeMountinfo = (field) => field.replace(/\\([0-7]{3})/g, (_, octal) => String.fromCharCode(parseInt(octal, 8)));

let hierarchy;

/**
 * This process's cgroup v2 hierarchy (`Hierarchy::find`), read once: `{mount, root, own, namespace}`
 * (where cgroup2 is mounted, the cgroup path of that mount's root, this process's cgroup path, its
 * cgroup namespace's nsfs inode as a BigInt), or null when there is none to use (cgroup v1 only, no
 * mount showing this process's cgroup, `/proc` unreadable).
 */
function ownHierarchy() {
  if (hierarchy === undefined) hierarchy = findHierarchy();
  return hierarchy;
}

function findHierarchy() {
  let lines;
  let mounts;
  try {
    lines = fs.readFileSync('/proc/self/cgroup', 'utf8').split('\n');
    mounts = fs.readFileSync('/proc/self/mountinfo', 'utf8').split('\n');
  } catch {
    return null;
  }
  let own = null;
  for (const line of lines) {
    const first = line.indexOf(':');
    const second = line.indexOf(':', first + 1);
    if (first < 0 || second < 0) continue;
    if (line.slice(0, first) === '0' && line.slice(first + 1, second).split(',').every((c) => c === '')) {
      own = line.slice(second + 1);
      break;
    }
  }
  if (own === null) return null;
  for (const line of mounts) {
    const fields = line.split(' ');
    const separator = fields.indexOf('-', 6);
    if (separator < 0 || fields[separator + 1] !== 'cgroup2' || fields.length < 5) continue;
    const root = unescapeMountinfo(fields[3]);
    const mount = unescapeMountinfo(fields[4]);
    if (within(own, root) === null) continue;
    try {
      return { mount, root, own, namespace: fs.statSync('/proc/self/ns/cgroup', { bigint: true }).ino };
    } catch {
      // No namespace to match a record against: nothing can be read (as natively).
      return null;
    }
  }
  return null;
}

/**
 * serde_json's `as_u64` of field `key`: a non-negative integer, as a BigInt; else undefined. One
 * past 2^53 is undefined too (a double would round it): cgroup ids and nsfs inodes are far below.
 */
function u64(fields, key) {
  const value = fields[key];
  return Number.isSafeInteger(value) && value >= 0 ? BigInt(value) : undefined;
}

/**
 * `populated` of the `cgroup.events` of the open cgroup directory `fd`: true, false, or null when
 * it cannot be read or does not say.
 */
function populated(fd) {
  let events;
  try {
    events = fs.openSync(`/proc/self/fd/${fd}/cgroup.events`, fs.constants.O_RDONLY);
  } catch {
    return null;
  }
  try {
    for (const line of readUpTo(events, MAX_READ).toString('utf8').split('\n')) {
      if (line.startsWith('populated ')) {
        const value = line.slice('populated '.length).trim();
        return value === '1' ? true : value === '0' ? false : null;
      }
    }
    return null;
  } catch {
    return null;
  } finally {
    fs.closeSync(events);
  }
}

/**
 * What a cgroup record shows now (`cgroup_tree::observe`): `populated`, `empty` (also when its
 * cgroup was removed or replaced by another of the same name: a removed cgroup can never be
 * joined again), or `unreadable` (a malformed record, no cgroup v2 mount that shows it, another
 * cgroup namespace, an unreadable `cgroup.events`). WIT `tree-state` names.
 */
export function observeCgroup(record) {
  let fields;
  try {
    fields = JSON.parse(record);
  } catch {
    return 'unreadable';
  }
  if (fields === null || typeof fields !== 'object' || Array.isArray(fields)) return 'unreadable';
  const cgroupId = u64(fields, 'cgroupId');
  const namespace = u64(fields, 'cgroupNamespace');
  const { kind, path } = fields;
  if (cgroupId === undefined || namespace === undefined || typeof kind !== 'string' || typeof path !== 'string') return 'unreadable';
  if (kind !== 'proclease-cgroup' || !path.startsWith('/') || path.split('/').includes('..')) return 'unreadable';
  const own = ownHierarchy();
  if (own === null || own.namespace !== namespace) return 'unreadable';
  const rest = within(path, own.root);
  if (rest === null) return 'unreadable';
  const dirPath = rest === '' ? own.mount : `${own.mount.replace(/\/+$/, '')}/${rest}`;
  let fd;
  try {
    fd = fs.openSync(dirPath, fs.constants.O_RDONLY | fs.constants.O_DIRECTORY | fs.constants.O_NOFOLLOW);
  } catch (error) {
    // Removed: it was empty then, and nothing can join it any more.
    return error.code === 'ENOENT' ? 'empty' : 'unreadable';
  }
  try {
    const stat = fs.fstatSync(fd, { bigint: true });
    // Another cgroup of the same name: the recorded one was removed.
    if (stat.ino !== cgroupId) return 'empty';
    const state = populated(fd);
    return state === null ? 'unreadable' : state ? 'populated' : 'empty';
  } catch {
    return 'unreadable';
  } finally {
    fs.closeSync(fd);
  }
}

/**
 * What cgroup record `name` in the open directory `dir` shows (`witness.rs::read_cgroup_record`):
 * `absent` when there is no such file, `unreadable` when it cannot be opened or read, else
 * `observeCgroup` of its content.
 */
export function readCgroupRecord(dir, name) {
  let fd;
  try {
    fd = fs.openSync(dir.at(name), fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK);
  } catch (error) {
    return error.code === 'ENOENT' ? 'absent' : 'unreadable';
  }
  try {
    const text = new TextDecoder('utf-8', { fatal: true }).decode(readUpTo(fd, MAX_READ));
    return observeCgroup(text);
  } catch {
    return 'unreadable';
  } finally {
    fs.closeSync(fd);
  }
}
