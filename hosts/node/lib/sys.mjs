// The system-call contract (`wit/sys.wit`: `sys-fs`, `sys-kernel`) in Node, for the portable
// artifact (`host/component/proclease-portable.wasm`, issue #41): one system call per function,
// failures as Linux errno numbers. No protocol step and no message is here: the store's
// compare-and-swap, the mutation claims, the workspace's identity-bound removal and the plugin
// catalog's lock run inside the artifact, the same Rust the native host runs. The Python host's
// `_sys.py` is the same contract; `tests/src/portable.rs` the reference in Rust.
//
// What `node:fs` lacks, and how this host does without it (`docs/deviations.md` 31):
// - No `*at` calls: a directory handle is an open descriptor, and a name in it is reached as
//   `/proc/self/fd/N/NAME`. The kernel resolves `/proc/self/fd/N` to the open directory itself
//   (wherever it was moved), and the last component is never followed (`O_NOFOLLOW`, `lstat`,
//   `link`, `rename`, `unlink`), as with `openat`.
// - No `renameat2(RENAME_NOREPLACE)`: a rename that must not replace looks first (`lstat`) and
//   answers `EEXIST` for a present name. Every such rename of the protocols targets a fresh name
//   (a claim's, a quarantine's, a reclaim's, with a v4 uuid), or puts a directory back where it
//   was a moment before; only a name made there in between, by a process of this user, would be
//   replaced.
// - No `flock`: a kernel lock is taken by util-linux's `flock(1)` on a descriptor this process
//   shares with it (`process-identity/flock.mjs`; about 2 ms each); where `flock(1)` is missing,
//   `try-lock` answers `unsupported`, and the reference's mutation claims alone serialise writers.
import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import { constants as osConstants } from 'node:os';
import { realpathSync } from 'node:fs';
import { sleepMs } from './fsops.mjs';
import { tryLock } from './process-identity/flock.mjs';

const { O_RDONLY, O_RDWR, O_CREAT, O_EXCL, O_NOFOLLOW, O_NONBLOCK, O_DIRECTORY } = fs.constants;
const OPEN_DIR = O_RDONLY | O_DIRECTORY | O_NOFOLLOW;
const S_IFMT = 0o170000;
const S_IFLNK = 0o120000;
const { EINVAL, EIO, ENOENT, EEXIST, ELOOP, ENOTDIR, EROFS, EBADF } = osConstants.errno;
const BILLION = 1_000_000_000n;

/** The errno number of a failed `node:fs` call (EIO when it carries none). */
function errnoOf(error) {
  if (typeof error?.errno === 'number' && error.errno !== 0) return Math.abs(error.errno);
  const number = typeof error?.code === 'string' ? osConstants.errno[error.code] : undefined;
  return number ?? EIO;
}

/** A failure of a `result<T, errno>` import: jco lowers `payload` as the error case. */
const fail = (errno) => {
  throw { payload: errno };
};

/** A `result<T, errno>`: `body()`'s value, or its errno as the error case. */
function result(body) {
  try {
    return body();
  } catch (error) {
    if (error && typeof error === 'object' && 'payload' in error) throw error;
    return fail(errnoOf(error));
  }
}

/** An `outcome`: undefined when `body` succeeded, else its errno. */
function outcome(body) {
  try {
    body();
    return undefined;
  } catch (error) {
    return errnoOf(error);
  }
}

/** `name` when it is one directory entry; `EINVAL` otherwise (a `/` would walk out of it). */
function entry(name) {
  const bytes = Buffer.from(name.buffer, name.byteOffset, name.byteLength);
  if (bytes.length === 0 || bytes.includes(0) || bytes.includes(0x2f)) {
    const error = new Error('not a directory entry name');
    error.errno = EINVAL;
    throw error;
  }
  return bytes;
}

/** The path that reaches `name` in the open directory `fd`. */
const at = (fd, name) => Buffer.concat([Buffer.from(`/proc/self/fd/${fd}/`), entry(name)]);

/** (s, ns) of a BigInt of ns. */
const split = (ns) => [ns / BILLION, ns % BILLION];

let statxGivesBirthTimes;
/**
 * Whether `node:fs` reports birth times from `statx`. libuv reads `stx_btime` (0 where the file
 * system records none); where `statx` is unavailable (`ENOSYS` or `EPERM`: a kernel before 4.11,
 * a seccomp filter) it falls back to `lstat` and reports the change time as the birth time, which
 * would make a directory's identity change with its contents. procfs records no birth time, so a
 * nonzero one for `/proc/self` is that fallback: then no birth time is reported at all, as the
 * native host does without `statx`.
 */
export function birthTimesAreReal() {
  if (statxGivesBirthTimes === undefined) {
    try {
      statxGivesBirthTimes = fs.lstatSync('/proc/self', { bigint: true }).birthtimeNs === 0n;
    } catch {
      statxGivesBirthTimes = false;
    }
  }
  return statxGivesBirthTimes;
}

/**
 * A `file-stat` from a BigInt `fs.Stats`: no birth time where the file system records none
 * (libuv's 0) or `statx` is unavailable (`birthTimesAreReal`), as the native host reports.
 */
function fileStat(s) {
  return {
    dev: s.dev,
    ino: s.ino,
    size: s.size,
    mtime: split(s.mtimeNs),
    ctime: split(s.ctimeNs),
    mode: Number(s.mode),
    uid: Number(s.uid),
    birth: s.birthtimeNs > 0n && birthTimesAreReal() ? split(s.birthtimeNs) : undefined,
  };
}

/** Writes all of `bytes` to `fd`, at byte `offset` (`pwrite`), or at the file's position when `offset` is null. */
function writeFully(fd, bytes, offset) {
  const data = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  for (let done = 0; done < data.length; ) done += fs.writeSync(fd, data, done, data.length - done, offset === null ? null : offset + done);
}

/** `fchmod(fd, mode)`, closing `fd` when it fails (umask may have narrowed a new file's mode). */
function chmodOrClose(fd, mode) {
  try {
    fs.fchmodSync(fd, mode);
  } catch (error) {
    closeQuietly(fd);
    throw error;
  }
}

/** Whether `f` is a class (jco's resources), which is passed or wrapped method by method, never called. */
export const isClass = (f) => typeof f === 'function' && /^class[\s{]/.test(Function.prototype.toString.call(f));

/** Closes `fd` once (a handle the component dropped, or one that failed half way). */
function closeQuietly(fd) {
  try {
    fs.closeSync(fd);
  } catch {
    // Already closed, or EBADF: nothing is held.
  }
}

/**
 * An open descriptor handed to the component, closed when the component drops its handle, or
 * when its host (`sys`, a `SysFs`) is closed or its instance trapped (`SysFs.releaseAll`).
 */
class Handle {
  constructor(fd, sys) {
    this.fd = fd;
    this.sys = sys;
    sys.handles.add(this);
  }
  [Symbol.dispose]() {
    this.sys.handles.delete(this);
    if (this.fd !== null) {
      closeQuietly(this.fd);
      this.fd = null;
    }
  }
}

/** `sys-fs.lock`: a held `flock`, released when the component drops it (its descriptor closes). */
export class Lock extends Handle {
  note(note) {
    return outcome(() => writeFully(this.fd, note, 0));
  }
  noted(length) {
    return result(() => {
      const buffer = Buffer.alloc(length);
      let done = 0;
      while (done < length) {
        const n = fs.readSync(this.fd, buffer, done, length - done, done);
        if (n === 0) break;
        done += n;
      }
      return new Uint8Array(buffer.subarray(0, done));
    });
  }
}

/**
 * A `lock-attempt` on the open file `fd`: `taken` (the lock keeps `fd`), `held`, or
 * `unsupported` (no `flock(1)`); `EIO` when `flock(1)` could not be run or did not answer.
 */
function attempt(fd, sys) {
  const tried = tryLock(fd, 'exclusive');
  if (tried === 'locked') return { tag: 'taken', val: new sys.Lock(fd, sys) };
  closeQuietly(fd);
  if (tried === 'conflict') return { tag: 'held' };
  if (tried === 'unsupported') return { tag: 'unsupported' };
  return fail(EIO);
}

/** `sys-fs.file`: an open regular file. */
export class File extends Handle {
  stat() {
    return result(() => fileStat(fs.fstatSync(this.fd, { bigint: true })));
  }
  readUpTo(limit, expected) {
    return result(() => {
      const chunks = [];
      let left = Number(limit);
      const size = Math.min(Math.max(Number(expected) + 1, 65536), Math.max(left, 1));
      while (left > 0) {
        const buffer = Buffer.alloc(Math.min(left, size));
        const n = fs.readSync(this.fd, buffer, 0, buffer.length, null);
        if (n === 0) break;
        chunks.push(buffer.subarray(0, n));
        left -= n;
      }
      return new Uint8Array(Buffer.concat(chunks));
    });
  }
  writeAll(bytes) {
    return outcome(() => writeFully(this.fd, bytes, null));
  }
  writeAt(bytes, offset) {
    return outcome(() => writeFully(this.fd, bytes, Number(offset)));
  }
  sync() {
    return outcome(() => fs.fsyncSync(this.fd));
  }
  syncData() {
    return outcome(() => fs.fdatasyncSync(this.fd));
  }
}

/** `sys-fs.directory`: an open directory; every name is one entry in it, never followed. */
export class Directory extends Handle {
  /** The open descriptor, `EBADF` once the component dropped this handle. */
  get open() {
    if (this.fd === null) {
      const error = new Error('a dropped directory handle');
      error.errno = EBADF;
      throw error;
    }
    return this.fd;
  }
  duplicate() {
    // No `dup` in `node:fs`: a new open of the same directory, through its descriptor.
    return result(() => new this.sys.Directory(fs.openSync(`/proc/self/fd/${this.open}/.`, O_RDONLY | O_DIRECTORY), this.sys));
  }
  stat() {
    return result(() => fileStat(fs.fstatSync(this.open, { bigint: true })));
  }
  openDir(name) {
    return result(() => {
      const path = at(this.open, name);
      try {
        return new this.sys.Directory(fs.openSync(path, OPEN_DIR), this.sys);
      } catch (error) {
        if (errnoOf(error) !== ENOTDIR) throw error;
        const found = fs.lstatSync(path, { bigint: true, throwIfNoEntry: false });
        if (found !== undefined && (Number(found.mode) & S_IFMT) === S_IFLNK) return fail(ELOOP);
        throw error;
      }
    });
  }
  lstat(name) {
    return result(() => {
      const found = fs.lstatSync(at(this.open, name), { bigint: true, throwIfNoEntry: false });
      return { stat: found === undefined ? undefined : fileStat(found) };
    });
  }
  openFile(name) {
    return result(() => new this.sys.File(fs.openSync(at(this.open, name), O_RDONLY | O_NOFOLLOW | O_NONBLOCK), this.sys));
  }
  /** Up to `atMost` names starting with `prefix` (the listing stops there). */
  names(atMost, prefix) {
    const want = Buffer.from(prefix.buffer, prefix.byteOffset, prefix.byteLength);
    const names = [];
    const listing = fs.opendirSync(`/proc/self/fd/${this.open}`, { encoding: 'buffer' });
    try {
      for (let dirent = listing.readSync(); dirent !== null; dirent = listing.readSync()) {
        const name = dirent.name;
        if (name.subarray(0, want.length).equals(want)) {
          if (names.length === atMost) break;
          names.push(new Uint8Array(name));
        }
      }
    } finally {
      listing.closeSync();
    }
    return names;
  }
  readNames(prefix, bound) {
    let names;
    try {
      names = this.names(bound + 1, prefix);
    } catch (error) {
      return fail({ tag: 'failed', val: errnoOf(error) });
    }
    if (names.length > bound) return fail({ tag: 'too-many' });
    return names;
  }
  firstNames(atMost) {
    return result(() => this.names(atMost, new Uint8Array()));
  }
  createFile(name) {
    return result(() => {
      const fd = fs.openSync(at(this.open, name), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW, 0o600);
      chmodOrClose(fd, 0o600);
      return new this.sys.File(fd, this.sys);
    });
  }
  makeDir(name) {
    return result(() => {
      const path = at(this.open, name);
      fs.mkdirSync(path, { mode: 0o700 });
      try {
        const fd = fs.openSync(path, OPEN_DIR);
        chmodOrClose(fd, 0o700);
        return new this.sys.Directory(fd, this.sys);
      } catch (error) {
        try {
          fs.rmdirSync(path);
        } catch {
          // Left empty: the protocols remove an empty directory they do not know.
        }
        throw error;
      }
    });
  }
  sync() {
    return outcome(() => fs.fsyncSync(this.open));
  }
  link(source, targetDir, target) {
    return outcome(() => fs.linkSync(at(this.open, source), at(targetDir.open, target)));
  }
  rename(source, targetDir, target, replace) {
    return outcome(() => {
      const to = at(targetDir.open, target);
      // No RENAME_NOREPLACE in `node:fs`: look first (the head of this file says what remains).
      if (!replace && fs.lstatSync(to, { throwIfNoEntry: false }) !== undefined) {
        const error = new Error('the target name exists');
        error.errno = EEXIST;
        throw error;
      }
      fs.renameSync(at(this.open, source), to);
    });
  }
  unlink(name) {
    return outcome(() => fs.unlinkSync(at(this.open, name)));
  }
  removeDir(name) {
    return outcome(() => fs.rmdirSync(at(this.open, name)));
  }
  tryLock(name) {
    return result(() => {
      const path = at(this.open, name);
      let fd;
      try {
        fd = fs.openSync(path, O_RDWR | O_CREAT | O_NOFOLLOW, 0o600);
      } catch (error) {
        if (errnoOf(error) !== EROFS) throw error;
        // A read-only file system: an existing lock file still serialises readers.
        try {
          fd = fs.openSync(path, O_RDONLY | O_NOFOLLOW);
        } catch (again) {
          if (errnoOf(again) === ENOENT) throw error;
          throw again;
        }
      }
      return attempt(fd, this.sys);
    });
  }
  tryLockDirectory() {
    return result(() => attempt(fs.openSync(`/proc/self/fd/${this.open}/.`, O_RDONLY | O_DIRECTORY), this.sys));
  }
}

/**
 * The handle classes of one host: subclasses whose every method records an exception that is no
 * error value (`sys.recording`), so that the host can tell a call that trapped inside an import
 * from one that jco refused before entering the component.
 */
function recordingClass(Base, sys) {
  const Recording = class extends Base {};
  for (const name of Object.getOwnPropertyNames(Base.prototype)) {
    const method = Object.getOwnPropertyDescriptor(Base.prototype, name).value;
    if (name === 'constructor' || typeof method !== 'function') continue;
    Recording.prototype[name] = function (...args) {
      // Looked up at each call, so that a test's replacement of a method is recorded too.
      return sys.recording(() => Base.prototype[name].apply(this, args));
    };
  }
  Object.defineProperty(Recording, 'name', { value: Base.name });
  return Recording;
}

/**
 * `sys-fs`: the state home and the workspace roots this host grants, and the effective uid.
 * Each is opened once (throws when one cannot be) and handed out as a new handle on each call:
 * `stateHome` a directory the caller validated, each root by its realpath, without following a
 * symbolic link. Every handle the component holds is this host's (`handles`): `close()` and
 * `releaseAll()` close them all.
 */
export class SysFs {
  constructor(stateHome, workspaceRoots) {
    /** The handles the component holds (directories, files, locks). */
    this.handles = new Set();
    /** An exception an import threw during the current call (not an error value), or null. */
    this.importError = null;
    this.closed = false;
    this.Directory = recordingClass(Directory, this);
    this.File = recordingClass(File, this);
    this.Lock = recordingClass(Lock, this);
    this.opened = [];
    try {
      this.home = this.keep(fs.openSync(stateHome, O_RDONLY | O_DIRECTORY));
      this.homePath = new Uint8Array(Buffer.from(realpathSync.native(stateHome, { encoding: 'buffer' })));
      this.roots = workspaceRoots.map((root) => {
        const resolved = realpathSync.native(root);
        return [resolved, this.keep(fs.openSync(resolved, OPEN_DIR))];
      });
    } catch (error) {
      this.close();
      throw error;
    }
  }
  keep(fd) {
    this.opened.push(fd);
    return fd;
  }
  /** Runs an import's `body`, recording an exception that is no error value (`importError`). */
  recording(body) {
    try {
      return body();
    } catch (error) {
      if (!(error !== null && typeof error === 'object' && 'payload' in error)) this.importError = error;
      throw error;
    }
  }
  /** `body`'s functions (not its classes), each run through `recording`. */
  recorded(body) {
    const out = {};
    for (const [name, member] of Object.entries(body)) {
      out[name] = typeof member === 'function' && !isClass(member) ? (...args) => this.recording(() => member(...args)) : member;
    }
    return out;
  }
  /** A new handle on the open directory `fd` (EBADF once this host is closed). */
  again(fd) {
    if (this.closed) {
      const error = new Error('the host is closed');
      error.errno = EBADF;
      throw error;
    }
    return new this.Directory(fs.openSync(`/proc/self/fd/${fd}/.`, O_RDONLY | O_DIRECTORY), this);
  }
  /**
   * Closes every handle the component holds, kernel locks included: after a call into the artifact
   * trapped, whose handles will never be dropped (the native host releases what a call left
   * held after every call, the Python host forgets a trapped instance's handles), and at close.
   */
  releaseAll() {
    for (const handle of [...this.handles]) handle[Symbol.dispose]();
  }
  /** The import object's `sys-fs`, classes included. */
  imports() {
    return this.recorded({
      euid: () => process.geteuid(),
      stateHome: () => this.again(this.home),
      stateHomePath: () => this.homePath,
      grantedRoots: () => this.roots.map(([path, fd]) => [path, this.again(fd)]),
      Directory: this.Directory,
      File: this.File,
      Lock: this.Lock,
    });
  }
  close() {
    this.closed = true;
    this.releaseAll();
    for (const fd of this.opened.splice(0)) closeQuietly(fd);
  }
}

/**
 * `sys-kernel`: this process's pid, a monotonic clock, randomness, sleep, `kill(pid, 0)`, the
 * bound of a wait for a kernel lock (`lockTimeoutMs`), the warnings a wait gives (`warn`, the
 * host's choice of where they go), and `/proc/locks` and `/proc/<pid>/stat` for naming a lock's
 * holder. `operation` (`{ depth, deadlineNs, timedOut }`, kept by the host's entry into the component:
 * `operationBound`) makes the waits of one call share one bound, as the native host's do
 * (`docs/deviations.md` 21): `lockWaitNs` is what is left of it; `timedOut` keeps the words of the
 * operation's first wait that reached the bound (`waited N ms for …, held by pid P …`), said once.
 */
export function sysKernel({ lockTimeoutMs = () => 10_000, warn = (message) => process.emitWarning(message, 'ProcleaseWait'), operation = { depth: 0, deadlineNs: 0n, timedOut: null } } = {}) {
  const readOrNone = (path) => {
    try {
      return new Uint8Array(fs.readFileSync(path));
    } catch {
      return undefined;
    }
  };
  return {
    pid: () => process.pid,
    monotonicNs: () => process.hrtime.bigint(),
    randomBytes: () => new Uint8Array(randomBytes(16)),
    pause: (ns) => sleepMs(Math.max(0, Math.ceil(Number(ns) / 1e6))),
    pidGone: (pid) => {
      try {
        process.kill(Number(pid), 0);
        return false;
      } catch (error) {
        return error?.code === 'ESRCH';
      }
    },
    lockWaitNs: () => {
      if (operation.depth === 0) return wholeBoundNs(lockTimeoutMs());
      const left = operation.deadlineNs - process.hrtime.bigint();
      return left > 0n ? left : 0n;
    },
    warn: (message) => {
      // The first lock timeout of an operation only (`sys-kernel.warn`): its later waits, the
      // bound spent, time out at once and would say it again.
      if (message.startsWith('waited ') && operation.depth > 0) {
        if (operation.timedOut !== null) return;
        operation.timedOut = message;
      }
      warn(message);
    },
    // A wait whose failure carries its words (`sys-kernel.lock-timed-out`): kept as the
    // operation's first timeout, shown by whoever reports the failure.
    lockTimedOut: (message) => {
      if (operation.depth > 0 && operation.timedOut === null) operation.timedOut = message;
    },
    procLocks: () => readOrNone('/proc/locks'),
    procStat: (pid) => readOrNone(`/proc/${pid}/stat`),
    procPids: () => {
      try {
        return new Uint32Array(fs.readdirSync('/proc').filter((name) => /^[0-9]+$/.test(name)).map(Number));
      } catch {
        return new Uint32Array();
      }
    },
    procFdinfos: (pid) => {
      const where = `/proc/${pid}/fdinfo`;
      let names;
      try {
        names = fs.readdirSync(where);
      } catch {
        return undefined;
      }
      return names.map((name) => readOrNone(`${where}/${name}`)).filter((text) => text !== undefined);
    },
  };
}

/** `ms` (a lock timeout) as a wait's whole bound, ns. */
const wholeBoundNs = (ms) => {
  if (!(ms > 0)) return 0n; // 0, negative, NaN
  if (!Number.isFinite(ms) || ms >= 9.2e15) return 2n ** 63n - 1n; // as long as a u64 of ns says
  return BigInt(Math.round(ms)) * 1_000_000n;
};

/**
 * Runs `call` as one operation of `operation` (see `sysKernel`): the outermost entry sets the
 * deadline, `lockTimeoutMs` from now, and forgets the last operation's timeout; entries it makes
 * (another instance judging an owner from inside an import, the calls of one `recover`) share
 * it. What `call` throws carries the operation's first timeout as `lockTimeout` (its caller can
 * tell the failure was that wait's: exit status 5, naming the holder).
 */
export function operationBound(operation, lockTimeoutMs, call) {
  if (operation.depth === 0) {
    operation.deadlineNs = process.hrtime.bigint() + wholeBoundNs(lockTimeoutMs);
    operation.timedOut = null;
  }
  operation.depth += 1;
  try {
    return call();
  } catch (error) {
    if (operation.timedOut !== null && error !== null && typeof error === 'object' && error.lockTimeout === undefined) error.lockTimeout = operation.timedOut;
    throw error;
  } finally {
    operation.depth -= 1;
  }
}
