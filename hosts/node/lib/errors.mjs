// The failures this host's imports report, as the native host words them.
//
// Ports `host/src/imports/state_store/mod.rs` (`StoreError`, `failure_of`),
// `host/src/imports/workspace/mod.rs` (`WorkspaceError`, `failure_of`) and `host/src/error.rs`
// (`io_failure`, `errno_name`), with the errno→kind rule of proclease-core's
// `FailureKind::of_errno`. A failure crosses the WIT boundary as the `types.failure` record
// `{kind, message, errno, path, operation}`; an import fails by throwing `{ payload: failure }`.
import { constants as osConstants } from 'node:os';
import { getSystemErrorMap } from 'node:util';

/**
 * glibc's `strerror` for the errors file operations give, so that a message reads as the native
 * host's (`Read-only file system (os error 30)`); any other errno uses libuv's words, capitalised.
 */
const STRERROR = {
  EPERM: 'Operation not permitted',
  ENOENT: 'No such file or directory',
  ESRCH: 'No such process',
  EINTR: 'Interrupted system call',
  EIO: 'Input/output error',
  EBADF: 'Bad file descriptor',
  EAGAIN: 'Resource temporarily unavailable',
  ENOMEM: 'Cannot allocate memory',
  EACCES: 'Permission denied',
  EBUSY: 'Device or resource busy',
  EEXIST: 'File exists',
  EXDEV: 'Invalid cross-device link',
  ENOTDIR: 'Not a directory',
  EISDIR: 'Is a directory',
  EINVAL: 'Invalid argument',
  ENFILE: 'Too many open files in system',
  EMFILE: 'Too many open files',
  EFBIG: 'File too large',
  ENOSPC: 'No space left on device',
  EROFS: 'Read-only file system',
  EMLINK: 'Too many links',
  ENAMETOOLONG: 'File name too long',
  ENOTEMPTY: 'Directory not empty',
  ELOOP: 'Too many levels of symbolic links',
  EDQUOT: 'Disk quota exceeded',
  ENOTSUP: 'Operation not supported',
  EOPNOTSUPP: 'Operation not supported',
  ENOLCK: 'No locks available',
  ESTALE: 'Stale file handle',
};

/** The errno's number (`EROFS` → 30), or undefined. */
export function errnoNumber(code) {
  return typeof code === 'string' ? osConstants.errno[code] : undefined;
}

/** An operating-system error as Rust's `std::io::Error` displays it: `Read-only file system (os error 30)`. */
export function osErrorText(error) {
  const code = error?.code;
  const number = errnoNumber(code);
  if (number === undefined) return String(error?.message ?? error);
  let words = STRERROR[code];
  if (!words) {
    const described = getSystemErrorMap().get(-number)?.[1] ?? code;
    words = described.charAt(0).toUpperCase() + described.slice(1);
  }
  return `${words} (os error ${number})`;
}

/** Whether `error` carries an errno (a Node system error, or one of ours made by `osError`). */
export const isOsError = (error) => error !== null && typeof error === 'object' && errnoNumber(error.code) !== undefined;

/** An errno-carrying error (as Node's own fs errors are), for a failure a host check detects itself. */
export function osError(code) {
  const error = new Error(code);
  error.code = code;
  return error;
}

/**
 * The root of every error this package throws to its users: `catch (e) { if (e instanceof
 * ProcleaseError) … }` catches them all. `kind`: `lease` (a lease rule refused; `code` is its
 * code, e.g. `another-export-is-active`), `storage`, `system`, `refused` (`Refusal`: nothing was
 * leased or created), `invalid-argument`, `state-home`, `identity`, or a store or workspace
 * failure's kind (`io`, `permission`, `contended`, `unsafe`, `refused`, `identity-changed`).
 * `cause` is what caused it, where something did.
 */
export class ProcleaseError extends Error {
  constructor(message, { kind, code, failure: failed, cause } = {}) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = new.target.name;
    this.kind = kind;
    this.code = code;
    this.failure = failed;
  }
}

/**
 * A failure of this host's own store work (the native `StoreError`). Nothing throws it since the
 * store and the lease-creation lock moved into the portable artifact (a store failure is a
 * `ComponentError` of kind `storage`); still exported, so that code naming it keeps working.
 */
export class StoreError extends ProcleaseError {
  /** `Contended`: another writer held the record's mutation claim past the wait. */
  static contended(path) {
    return new StoreError('contended', path, `${path}: state file mutation is already active (another process, proclease or ghostget, is writing this record); retry in a moment`);
  }
  /** `Refused`: not a safe path of the state layout. */
  static refused(path, reason) {
    return new StoreError('refused', path, `${path}: refused: ${reason}`);
  }
  /** `Unsafe`: something on disk is not safe to trust; nothing was changed. */
  static unsafe(path, reason) {
    return new StoreError('unsafe', path, `${path}: unsafe: ${reason}`);
  }
  /** `Claim`: the reference's mutation-claim protocol refused (§3.5). */
  static claim(path, reason) {
    return new StoreError('unsafe', path, `${path}: ${reason}`);
  }
  /** `Io`: an operating-system error of `operation`. */
  static io(path, operation, source) {
    const error = new StoreError('io', path, `${path}: ${operation} failed: ${osErrorText(source)}`);
    error.operation = operation;
    error.source = source;
    return error;
  }

  constructor(kind, path, message) {
    super(message, { kind });
    this.path = path;
  }
}

/** A workspace failure (`WorkspaceError`). */
export class WorkspaceError extends ProcleaseError {
  static refused(path, reason) {
    return new WorkspaceError('refused', path, `${path}: refused: ${reason}`);
  }
  /** The identity-bound removal refused with the reference's `message`. */
  static identityChanged(path, message) {
    return new WorkspaceError('identity-changed', path, `${path}: ${message}`);
  }
  static io(path, operation, source) {
    const error = new WorkspaceError('io', path, `${path}: ${operation} failed: ${osErrorText(source)}`);
    error.operation = operation;
    error.source = source;
    return error;
  }

  constructor(kind, path, message) {
    super(message, { kind });
    this.path = path;
  }
}

/** A state home that cannot be used (`host/src/imports/state_store/home.rs` `StateHomeError`). */
export class StateHomeError extends ProcleaseError {
  constructor(message, options = {}) {
    super(message, { kind: 'state-home', ...options });
  }
}

/** A process identity that cannot be established (`IdentityError`): the reference's message where it fixes one. */
export class IdentityError extends ProcleaseError {
  constructor(message, options = {}) {
    super(message, { kind: 'identity', ...options });
  }
}

/** Runs an import whose error case is a string: its message. */
export function importCallText(body) {
  try {
    return body();
  } catch (error) {
    if (error instanceof IdentityError || error instanceof StoreError || error instanceof WorkspaceError || error instanceof StateHomeError) throw { payload: error.message };
    if (isOsError(error)) throw { payload: osErrorText(error) };
    throw error;
  }
}

/** The message of a WIT `error` value (`{tag: 'lease' | 'storage' | 'system', val}`), of a thrown `{payload}`, or of anything else. */
export function errorMessage(error) {
  if (error === null || error === undefined) return String(error);
  if (typeof error === 'string') return error;
  if (typeof error === 'object') {
    if ('payload' in error) return errorMessage(error.payload);
    if (error.val && typeof error.val.message === 'string') return error.val.message;
    if (typeof error.message === 'string') return error.message;
  }
  return String(error);
}
