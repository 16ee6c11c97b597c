// Single-component, descriptor-relative file operations the store and the workspace are built
// from — a port of `host/src/imports/fsops.rs` to `node:fs`.
//
// Node has no `openat`/`unlinkat`/`renameat`. Every operation here is made relative to an open
// directory descriptor anyway, through its `/proc/self/fd/<fd>/<name>` path: the kernel resolves
// `/proc/self/fd/<fd>` to the directory the descriptor holds (it never re-resolves the path the
// directory was opened by), and looks `<name>` up in it. A directory renamed, or a component of
// its path swapped for a symbolic link, after it was opened changes nothing: as with `*at(2)`,
// only the one final name is resolved, and it is never followed where the native host never
// follows it (`O_NOFOLLOW`, `lstat`). Names passed here are single entry names (no `/`) the
// caller validated, or raw `Buffer` names read from a directory.
import * as fs from 'node:fs';
import { randomUUID } from 'node:crypto';
import { osError } from './errors.mjs';

const C = fs.constants;
export const S_IFMT = 0o170000;
export const S_IFLNK = 0o120000;

/** The effective uid of this process: "owned" means owned by it. */
export const euid = () => process.geteuid();

/** `S_IFMT` bits of a mode (a number or a BigInt from a `{bigint: true}` stat). */
export const fileKind = (mode) => Number(mode) & S_IFMT;

/** An open directory: every operation on a name in it goes through `/proc/self/fd/<fd>/<name>`. */
export class Dir {
  /** Opens the directory at the absolute `path` (`O_DIRECTORY|O_NOFOLLOW`: a final symbolic link is `ELOOP`/`ENOTDIR`). */
  static open(path) {
    return new Dir(fs.openSync(path, C.O_RDONLY | C.O_DIRECTORY | C.O_NOFOLLOW));
  }

  constructor(fd) {
    this.fd = fd;
  }

  /** The path of the directory itself, as a name the kernel resolves through the descriptor. */
  get self() {
    if (this.fd === null) throw new Error('a closed directory was used');
    return `/proc/self/fd/${this.fd}`;
  }

  /** The path of entry `name` (a string, or a raw `Buffer` name) of this directory. */
  at(name) {
    return typeof name === 'string' ? `${this.self}/${name}` : Buffer.concat([Buffer.from(`${this.self}/`), name]);
  }

  /** `fstat` (BigInt fields: exact device, inode and ns times). */
  stat() {
    return fs.fstatSync(this.fd, { bigint: true });
  }

  /** A second descriptor of the same directory (a walk's starting point that the walk may close). */
  dup() {
    return new Dir(fs.openSync(this.self, C.O_RDONLY | C.O_DIRECTORY));
  }

  close() {
    if (this.fd !== null) {
      try {
        fs.closeSync(this.fd);
      } catch {
        // Already closed: nothing to release.
      }
      this.fd = null;
    }
  }
}

/** Runs `body(dir)` and closes `dir` afterwards, whatever happens. */
export function using(dir, body) {
  try {
    return body(dir);
  } finally {
    dir?.close();
  }
}

/**
 * `fsops::open_dir`: opens directory `name` in `dir` without following a symbolic link. A
 * symbolic link is `ELOOP` (Linux reports `ENOTDIR` for `O_DIRECTORY|O_NOFOLLOW` on a link; an
 * `lstat` tells the two apart), anything else that is not a directory `ENOTDIR`.
 */
export function openDir(dir, name) {
  try {
    return new Dir(fs.openSync(dir.at(name), C.O_RDONLY | C.O_DIRECTORY | C.O_NOFOLLOW));
  } catch (error) {
    if (error.code === 'ENOTDIR') {
      const stat = lstat(dir, name);
      throw osError(stat && fileKind(stat.mode) === S_IFLNK ? 'ELOOP' : 'ENOTDIR');
    }
    throw error;
  }
}

/** `lstat` of `name` in `dir` (BigInt fields); `null` when absent. */
export function lstat(dir, name) {
  try {
    return fs.lstatSync(dir.at(name), { bigint: true });
  } catch (error) {
    if (error.code === 'ENOENT') return null;
    throw error;
  }
}

/** The fields whose change between two `fstat`s means a file changed while it was read (§3.2). */
function sameFingerprint(a, b) {
  return a.dev === b.dev && a.ino === b.ino && a.size === b.size && a.mtimeNs === b.mtimeNs && a.ctimeNs === b.ctimeNs && a.mode === b.mode;
}

/** Reads `fd` from its current offset until end of file or `max` bytes, whichever comes first. */
export function readUpTo(fd, max) {
  const buffer = Buffer.alloc(max);
  let length = 0;
  for (let n; length < max && (n = fs.readSync(fd, buffer, length, max - length, null)) > 0; ) length += n;
  return buffer.subarray(0, length);
}

/** Writes all of `bytes` to `fd`. */
export function writeAll(fd, bytes) {
  let offset = 0;
  while (offset < bytes.length) offset += fs.writeSync(fd, bytes, offset, bytes.length - offset);
}

/** `fsops::write_new_file`: creates `name` in `dir` exclusively (`O_CREAT|O_EXCL|O_NOFOLLOW`, 0600), writes `bytes`, fsyncs it. */
export function writeNewFile(dir, name, bytes) {
  const fd = fs.openSync(dir.at(name), C.O_WRONLY | C.O_CREAT | C.O_EXCL | C.O_NOFOLLOW, 0o600);
  try {
    fs.fchmodSync(fd, 0o600);
    writeAll(fd, typeof bytes === 'string' ? Buffer.from(bytes, 'utf8') : bytes);
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}

/** fsync of a directory, making the entries created, renamed or removed in it durable. */
export function fsyncDir(dir) {
  fs.fsyncSync(dir.fd);
}

/**
 * `fsops::create_private_dir`: creates directory `name` in `dir` with mode 0700 (`mkdir` then
 * `fchmod`, as the umask may have narrowed it), fsyncs it and `dir`; false when it existed. If
 * anything after the `mkdir` fails, the directory is removed again before the error is thrown.
 */
export function createPrivateDir(dir, name) {
  try {
    fs.mkdirSync(dir.at(name), { mode: 0o700 });
  } catch (error) {
    if (error.code === 'EEXIST') return false;
    throw error;
  }
  try {
    const fd = fs.openSync(dir.at(name), C.O_RDONLY | C.O_DIRECTORY | C.O_NOFOLLOW);
    try {
      fs.fchmodSync(fd, 0o700);
      fs.fsyncSync(fd);
    } finally {
      fs.closeSync(fd);
    }
    fsyncDir(dir);
  } catch (error) {
    try {
      fs.rmdirSync(dir.at(name));
    } catch {
      // Best effort: the error below is what the caller needs.
    }
    throw error;
  }
  return true;
}

/** `unlink` of `name` in `dir`; false when it failed (best effort). */
export function unlinkQuietly(dir, name) {
  try {
    fs.unlinkSync(dir.at(name));
    return true;
  } catch {
    return false;
  }
}

/**
 * The raw names (`Buffer`s) of `dir` that `keep` accepts, at most `bound` of them; `{over: true}`
 * beyond (`fsops::names_where`). The others are never copied.
 */
export function namesWhere(dir, bound, keep = () => true) {
  const reader = fs.opendirSync(dir.self, { encoding: 'buffer' });
  const names = [];
  try {
    for (let entry = reader.readSync(); entry !== null; entry = reader.readSync()) {
      const name = entry.name;
      if (!keep(name)) continue;
      if (names.length === bound) return { over: true, names };
      names.push(name);
    }
  } finally {
    reader.closeSync();
  }
  return { over: false, names };
}

const UTF8 = new TextDecoder('utf-8', { fatal: true });

/** A raw name as text, or null when it is not UTF-8. */
export function nameText(raw) {
  try {
    return UTF8.decode(raw);
  } catch {
    return null;
  }
}

/** The UTF-8 names of `dir` starting with `prefix`, at most `bound` (`fsops::names_starting_with`); `{over}` beyond. */
export function namesStartingWith(dir, prefix, bound) {
  const start = Buffer.from(prefix, 'utf8');
  const listed = namesWhere(dir, bound, (name) => name.length >= start.length && name.subarray(0, start.length).equals(start) && nameText(name) !== null);
  return { over: listed.over, names: listed.names.map((name) => nameText(name)) };
}

/** A fresh UUID v4 (lowercase), for temporaries and claims. */
export const uuid = () => randomUUID();

/** Sleeps synchronously (the component calls imports synchronously; a wait inside one blocks). */
export function sleepMs(ms) {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}
