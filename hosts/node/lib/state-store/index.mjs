// The private state store (`state-store` import; spec §3.3 contracts, adapted to paths relative
// to the state home). Port of `host/src/imports/state_store/mod.rs`, with the reference's own
// temporaries instead of the native host's staging directory and kernel locks.
//
// Guarantees:
// * **Durable and atomic**: a record is written to a temporary `.io-write-<pid>-<uuid>.tmp` in its
//   collection (`O_CREAT|O_EXCL|O_NOFOLLOW`, 0600, fsynced — §3.3), then published by `link`
//   (create: never overwrites) or `rename` (replace), and the collection directory is fsynced.
//   A removal renames the record to `.io-remove-file-<claim id>.quarantine`, checks it is still
//   the inode that was read, fsyncs, unlinks and fsyncs (§3.3). A change whose collection fsync
//   fails is undone before the error is returned (the old bytes are put back), as the native
//   host does.
// * **Compare-and-swap across processes** — this host's, the native host's and ghostget's: every
//   mutation holds the reference's per-leaf mutation claim (§3.5, `mutation-claim.mjs`); a
//   replace or remove happens only if the bytes on disk hash to the expected sha256 at that
//   instant. Node has no `flock`: unlike the native host, this host takes no collection kernel
//   lock, so its writers contend through the claims alone (as ghostget's do). A lost claim is
//   retried with a short pause for `CLAIM_WAIT_MS`, then the create fails `contended` and a
//   replace or remove answers false (the reference's `state file content no longer matches`).
// * **Crash recovery** before every write and listing of a collection (§3.9, `recoverDirectory`):
//   what crashed writers of any of the three programs left there is removed once its writer is
//   provably dead.
// * **No escape**: paths are relative (`path.mjs`); every directory is opened component by
//   component from the state home's descriptor without following a symbolic link, and must be
//   owned by the user with mode 0700; every file must be a regular, private, owned file.
// * **Bounded**: records ≤ 2 MiB; listings ≤ 10 000 entries; batches ≤ 1 000 names, ≤ 2 MiB a file,
//   ≤ 64 MiB in all.
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import { StoreError, isOsError } from '../errors.mjs';
import {
  S_IFDIR,
  S_IFLNK,
  S_IFREG,
  createPrivateDir,
  euid,
  fileKind,
  fsyncDir,
  lstat,
  nameText,
  namesWhere,
  openDir,
  openRead,
  readStable,
  sleepMs,
  unlinkQuietly,
  unsafeFileReason,
  using,
  uuid,
  writeNewFile,
} from '../fsops.mjs';
import { ArbitrationError, arbitrate, release } from './arbitration.mjs';
import { LeasingLock } from './leasing-lock.mjs';
import { MAX_ENTRIES, MutationClaim, ownIdentity, recoverDirectory } from './mutation-claim.mjs';
import { RefusedPath, cmpUtf16, isDigest, isSafeName, segments as pathSegments } from './path.mjs';

/** The most names one batch read takes (§3.3 batch). */
export const MAX_BATCH_NAMES = 1_000;
/** The largest record the store writes or reads for a compare-and-swap: 2 MiB (§3.2). */
export const MAX_RECORD_BYTES = 2 << 20;
/** The largest per-file bound of a batch read: 2 MiB; aggregate: 64 MiB (§3.3). */
export const MAX_BATCH_FILE_BYTES = 2 << 20;
export const MAX_BATCH_TOTAL_BYTES = 64 << 20;
/**
 * How long one write waits for another writer's mutation claim on the same record before it
 * gives up (the native host's `lock::CLAIM_WAIT`): the component's callers retry a contended
 * write (an admission's 8 attempts), so a claim that stays is refused in about a second.
 */
export const CLAIM_WAIT_MS = 125;

const sha256 = (bytes) => createHash('sha256').update(bytes).digest('hex');

const identityOf = (stat) => ({ device: String(stat.dev), inode: String(stat.ino) });

/** Splits and checks a store path (a `refused` failure otherwise). */
function segmentsOf(path) {
  try {
    return pathSegments(path);
  } catch (error) {
    if (error instanceof RefusedPath) throw StoreError.refused(path, error.message);
    throw error;
  }
}

/** Splits a record path into its parent directory segments and file name. */
export function split(path) {
  const segments = segmentsOf(path);
  if (segments.length < 2) throw StoreError.refused(path, 'a record must be nested inside a state directory');
  const name = segments.pop();
  return [segments, name];
}

function checkHash(path, expected) {
  if (!isDigest(expected)) throw StoreError.refused(path, 'expected private state content hash is invalid');
}

function checkSize(path, content) {
  if (Buffer.byteLength(content, 'utf8') > MAX_RECORD_BYTES) throw StoreError.refused(path, `content exceeds ${MAX_RECORD_BYTES} bytes`);
}

/** Whether `a` and `b` in `dir` are the same inode. */
function sameInode(dir, a, b) {
  try {
    const x = lstat(dir, a);
    const y = lstat(dir, b);
    return x !== null && y !== null && x.ino === y.ino && x.dev === y.dev;
  } catch {
    return false;
  }
}

/**
 * Reads a record file: null when absent; an error when unsafe or oversized. A file that changed
 * while it was read is read again, a few times (a reader racing a writer sees the old file, the
 * new one, or none); only a file that keeps changing is an error.
 */
function readRecord(dir, name, path, maxBytes) {
  for (let attempt = 0; attempt < 4; attempt += 1) {
    let fd;
    try {
      fd = openRead(dir, name);
    } catch (error) {
      if (error.code === 'ENOENT') return null;
      if (error.code === 'ELOOP') throw StoreError.unsafe(path, 'is a symbolic link; the store never follows them');
      throw StoreError.io(path, 'open', error);
    }
    try {
      let stat;
      try {
        stat = fs.fstatSync(fd, { bigint: true });
      } catch (error) {
        throw StoreError.io(path, 'fstat', error);
      }
      const reason = unsafeFileReason(stat);
      if (reason !== null) throw StoreError.unsafe(path, reason);
      let read;
      try {
        read = readStable(fd, stat, maxBytes);
      } catch (error) {
        throw StoreError.io(path, 'read', error);
      }
      if (read.bytes) return read.bytes;
      if (read.tooLarge) throw StoreError.unsafe(path, `larger than ${maxBytes} bytes`);
    } finally {
      fs.closeSync(fd);
    }
  }
  throw StoreError.unsafe(path, 'state file changed while it was read, again and again; retry when its writers are done');
}

const UTF8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
const decode = (bytes) => {
  try {
    return UTF8.decode(bytes);
  } catch {
    return null;
  }
};

function batchReadOne(dir, name, perFile, remaining) {
  let fd;
  try {
    fd = openRead(dir, name);
  } catch (error) {
    if (error.code === 'ENOENT') return { tag: 'absent' };
    if (error.code === 'ELOOP') return { tag: 'invalid', val: 'unsafe-file' };
    return { tag: 'invalid', val: 'unreadable' };
  }
  try {
    let stat;
    try {
      stat = fs.fstatSync(fd, { bigint: true });
    } catch {
      return { tag: 'invalid', val: 'unreadable' };
    }
    if (unsafeFileReason(stat) !== null) return { tag: 'invalid', val: 'unsafe-file' };
    if (stat.size > BigInt(perFile)) return { tag: 'invalid', val: 'file-byte-bound' };
    if (stat.size > BigInt(remaining.bytes)) return { tag: 'invalid', val: 'aggregate-byte-bound' };
    let read;
    try {
      read = readStable(fd, stat, perFile);
    } catch {
      return { tag: 'invalid', val: 'unreadable' };
    }
    if (read.tooLarge) return { tag: 'invalid', val: 'file-byte-bound' };
    if (read.changed) return { tag: 'invalid', val: 'changed-during-read' };
    // The name must still be this inode.
    let now;
    try {
      now = lstat(dir, name);
    } catch {
      now = null;
    }
    if (now === null || now.ino !== stat.ino || now.dev !== stat.dev) return { tag: 'invalid', val: 'changed-during-read' };
    remaining.bytes -= read.bytes.length;
    const text = decode(read.bytes);
    return text === null ? { tag: 'invalid', val: 'invalid-utf8' } : { tag: 'present', val: text };
  } finally {
    fs.closeSync(fd);
  }
}

/** The checks of a batch read's request, before anything is read (§3.3): the directory's segments. */
function checkBatch(path, names, maxBytesPerFile, maxTotalBytes) {
  const segments = segmentsOf(path);
  if (maxBytesPerFile > MAX_BATCH_FILE_BYTES) throw StoreError.refused(path, 'private state batch per-file byte bound is invalid');
  if (maxTotalBytes > MAX_BATCH_TOTAL_BYTES) throw StoreError.refused(path, 'private state batch aggregate byte bound is invalid');
  if (names.length > MAX_BATCH_NAMES) throw StoreError.refused(path, 'private state batch file count is invalid');
  if (names.some((n) => !isSafeName(n))) throw StoreError.refused(path, 'private state batch contains an invalid file name');
  if (new Set(names).size !== names.length) throw StoreError.refused(path, 'private state batch file names must be unique');
  return segments;
}

/** The private state store on one state home. */
export class StateStore {
  /**
   * @param home a `StateHome` (its path and open directory)
   * @param processes this host's `ProcessIdentity` (its own identity, for claims)
   * @param liveness `lib/liveness.mjs` (whether a claim's or a temporary's writer is alive)
   */
  constructor(home, processes, liveness) {
    this.home = home;
    this.processes = processes;
    this.liveness = liveness;
    /** The lease-creation lock (`leasing-lock.mjs`): `lock-leasing` takes it, `unlock-leasing` releases it. */
    this.leasing = new LeasingLock(this, { afterCalls: true });
  }

  /**
   * Opens the directory of `segments` below the state home, one component at a time without
   * following symbolic links, checking each is owned with mode 0700; creates missing ones when
   * `create`. Null when one is absent (and not created). The caller closes the result.
   */
  walk(path, segments, create) {
    let current;
    try {
      current = this.home.dir.dup();
    } catch (error) {
      throw StoreError.io(path, 'dup', error);
    }
    try {
      for (const segment of segments) {
        // Open first: the directory nearly always exists.
        let next = null;
        let error = null;
        try {
          next = openDir(current, segment);
        } catch (e) {
          error = e;
        }
        if (next === null && create && error.code === 'ENOENT') {
          try {
            createPrivateDir(current, segment);
          } catch (mkdirError) {
            throw StoreError.io(path, 'mkdir', mkdirError);
          }
          try {
            next = openDir(current, segment);
          } catch (e) {
            error = e;
          }
        }
        if (next === null) {
          if (error.code === 'ENOENT') {
            current.close();
            return null;
          }
          if (error.code === 'ELOOP') throw StoreError.unsafe(path, `${segment} is a symbolic link; the store never follows them`);
          if (error.code === 'ENOTDIR') throw StoreError.unsafe(path, `${segment} is not a directory`);
          throw StoreError.io(path, 'open directory', error);
        }
        current.close();
        current = next;
        let stat;
        try {
          stat = current.stat();
        } catch (error) {
          throw StoreError.io(path, 'fstat', error);
        }
        if (Number(stat.uid) !== euid() || (Number(stat.mode) & 0o777) !== 0o700) {
          throw StoreError.unsafe(path, `directory ${segment} must be owned by you with mode 0700 (chmod 700 it if it is yours)`);
        }
      }
      return current;
    } catch (error) {
      current.close();
      throw error;
    }
  }

  /** The directory at store path `path` (checked like every store directory); null when absent. The caller closes it. */
  openDirectory(path) {
    return this.walk(path, segmentsOf(path), false);
  }

  /**
   * Writes `content` to a fresh, fsynced write temporary of the reference in the collection
   * `dir`, `.io-write-<pid>-<uuid>.tmp` (§3.3), so that a later operation can prove its writer
   * dead (§3.9). Returns its name.
   */
  stage(path, dir, content) {
    const name = `.io-write-${process.pid}-${uuid()}.tmp`;
    try {
      writeNewFile(dir, name, content);
    } catch (error) {
      unlinkQuietly(dir, name);
      throw StoreError.io(path, 'write of the temporary', error);
    }
    return name;
  }

  /**
   * Runs `mutate(claimId)` holding the reference's mutation claim on `name` in `dir` (§3.5), after
   * the crash recovery of `dir` (§3.9). A lost claim is retried after a short pause for at most
   * `CLAIM_WAIT_MS`; then `{lost: true}`. Otherwise `{value}`.
   */
  withClaim(path, dir, name, mutate) {
    const claimError = (error) => {
      if (!(error instanceof ArbitrationError)) return error;
      if (error.io && isOsError(error.io)) return StoreError.io(path, 'taking the mutation claim', error.io);
      return StoreError.claim(path, error.reference);
    };
    let own;
    try {
      own = ownIdentity(this.processes);
      recoverDirectory(dir, this.liveness, false);
    } catch (error) {
      throw claimError(error);
    }
    const kind = MutationClaim.forLeaf(name);
    const start = Date.now();
    let pause = 1;
    let held;
    for (;;) {
      try {
        held = arbitrate(dir, kind, this.liveness, own);
      } catch (error) {
        throw claimError(error);
      }
      if (held) break;
      if (Date.now() - start >= CLAIM_WAIT_MS) return { lost: true };
      sleepMs(pause);
      pause = Math.min(pause * 2, 20);
    }
    try {
      return { value: mutate(held.claimId) };
    } finally {
      release(dir, held.name);
    }
  }

  /**
   * Puts `old` back at `name` after a visible change whose collection fsync failed (the caller
   * is told the change failed, so it must not stay): a fresh temporary with the old bytes,
   * published over the name (`rename`, after a replace) or at the emptied name (`link`, after a
   * removal: never over a file that appeared meanwhile), and the collection fsynced again. Best
   * effort.
   */
  restore(path, dir, name, old, overTheName) {
    let back;
    try {
      back = this.stage(path, dir, old);
    } catch {
      return;
    }
    try {
      if (overTheName) fs.renameSync(dir.at(back), dir.at(name));
      else fs.linkSync(dir.at(back), dir.at(name));
      fsyncDir(dir);
    } catch {
      // Best effort: the name holds the old or the new complete version (or, after a removal, none).
    }
    unlinkQuietly(dir, back);
  }

  /**
   * The file's text, or null when it or a parent directory is absent
   * (`readPrivateStateFileIfPresent`, §3.3). The file must be a private, owned, regular file of
   * at most `maxBytes`, unchanged while read, and UTF-8.
   */
  readIfPresent(path, maxBytes) {
    const [segments, name] = split(path);
    const dir = this.walk(path, segments, false);
    if (dir === null) return null;
    return using(dir, () => {
      const bytes = readRecord(dir, name, path, maxBytes);
      if (bytes === null) return null;
      const text = decode(bytes);
      if (text === null) throw StoreError.unsafe(path, 'not valid UTF-8');
      return text;
    });
  }

  /**
   * Creates the file with `content` unless it exists (`createPrivateJsonIfAbsent`, §3.3): true
   * when created, false when a file was already there. Never overwrites. Missing parent
   * directories are created (0700).
   */
  createIfAbsent(path, content) {
    const [segments, name] = split(path);
    checkSize(path, content);
    const dir = this.walk(path, segments, true);
    if (dir === null) throw StoreError.unsafe(path, 'parent vanished');
    return using(dir, () => {
      const temp = this.stage(path, dir, content);
      let outcome;
      try {
        outcome = this.withClaim(path, dir, name, () => this.linkNew(path, dir, name, temp));
      } finally {
        unlinkQuietly(dir, temp);
      }
      if (outcome.lost) throw StoreError.contended(path);
      // The temporary's name is gone again: made durable with the record.
      try {
        fsyncDir(dir);
      } catch {
        // The record itself is durable already (`linkNew` fsynced); a leftover name is recovered.
      }
      return outcome.value;
    });
  }

  /** The create's critical section: links the temporary at `name` and fsyncs `dir`. */
  linkNew(path, dir, name, temp) {
    try {
      fs.linkSync(dir.at(temp), dir.at(name));
    } catch (error) {
      if (error.code === 'EEXIST') return false;
      throw StoreError.io(path, 'link into the collection', error);
    }
    try {
      fsyncDir(dir);
    } catch (error) {
      // The caller is told the create failed, so it must not stay visible: unlink the name
      // again (it is still our inode: the record's claim is held).
      if (sameInode(dir, temp, name)) unlinkQuietly(dir, name);
      throw StoreError.io(path, 'fsync of the collection', error);
    }
    return true;
  }

  /**
   * Replaces the file with `content` only if its bytes hash to `expectedSha256` at the instant of
   * the swap (`writePrivateJsonIfUnchanged`, §3.3): false when the file is absent or differs (or
   * when another writer's claim stays).
   */
  replaceIfUnchanged(path, expectedSha256, content) {
    const [segments, name] = split(path);
    checkHash(path, expectedSha256);
    checkSize(path, content);
    const dir = this.walk(path, segments, false);
    if (dir === null) return false;
    return using(dir, () => {
      const temp = this.stage(path, dir, content);
      let outcome;
      try {
        outcome = this.withClaim(path, dir, name, () => {
          const old = readRecord(dir, name, path, MAX_RECORD_BYTES);
          if (old === null || sha256(old) !== expectedSha256) return false;
          try {
            fs.renameSync(dir.at(temp), dir.at(name));
          } catch (error) {
            throw StoreError.io(path, 'rename into the collection', error);
          }
          try {
            fsyncDir(dir);
          } catch (error) {
            this.restore(path, dir, name, old, true);
            throw StoreError.io(path, 'fsync of the collection', error);
          }
          return true;
        });
      } finally {
        // Gone when it was renamed into place; otherwise it is removed here.
        unlinkQuietly(dir, temp);
      }
      return outcome.lost ? false : outcome.value;
    });
  }

  /**
   * Removes the file only if its bytes hash to `expectedSha256` at the instant of removal
   * (`removePrivateStateFileIfUnchanged`, §3.3): false when absent or different.
   */
  removeIfUnchanged(path, expectedSha256) {
    const [segments, name] = split(path);
    checkHash(path, expectedSha256);
    const dir = this.walk(path, segments, false);
    if (dir === null) return false;
    return using(dir, () => {
      const outcome = this.withClaim(path, dir, name, (claimId) => this.removeRead(path, dir, name, expectedSha256, claimId));
      return outcome.lost ? false : outcome.value;
    });
  }

  /**
   * The removal's critical section (§3.3): reads the record, compares, checks the name is still
   * the inode read, renames it to `.io-remove-file-<claim id>.quarantine`, checks the moved inode,
   * fsyncs, unlinks the quarantine and fsyncs (putting the bytes back if the first fsync fails).
   */
  removeRead(path, dir, name, expectedSha256, claimId) {
    let fd;
    try {
      fd = openRead(dir, name);
    } catch (error) {
      if (error.code === 'ENOENT') return false;
      if (error.code === 'ELOOP') throw StoreError.unsafe(path, 'is a symbolic link; remove it by hand after checking it');
      throw StoreError.io(path, 'open', error);
    }
    let before;
    let bytes;
    try {
      try {
        before = fs.fstatSync(fd, { bigint: true });
      } catch (error) {
        throw StoreError.io(path, 'fstat', error);
      }
      const reason = unsafeFileReason(before);
      if (reason !== null) throw StoreError.unsafe(path, reason);
      let read;
      try {
        read = readStable(fd, before, MAX_RECORD_BYTES);
      } catch (error) {
        throw StoreError.io(path, 'read', error);
      }
      if (read.tooLarge) throw StoreError.unsafe(path, 'larger than a record may be');
      if (read.changed) return false;
      bytes = read.bytes;
    } finally {
      fs.closeSync(fd);
    }
    if (sha256(bytes) !== expectedSha256) return false;
    const same = (stat) => stat !== null && stat.ino === before.ino && stat.dev === before.dev;
    let now;
    try {
      now = lstat(dir, name);
    } catch (error) {
      throw StoreError.io(path, 'lstat', error);
    }
    if (!same(now) || now.size !== before.size || now.mtimeNs !== before.mtimeNs || now.ctimeNs !== before.ctimeNs || now.mode !== before.mode) return false;
    const quarantine = `.io-remove-file-${claimId}.quarantine`;
    try {
      fs.renameSync(dir.at(name), dir.at(quarantine));
    } catch (error) {
      throw StoreError.io(path, 'rename to quarantine', error);
    }
    let moved;
    try {
      moved = lstat(dir, quarantine);
    } catch {
      moved = null;
    }
    if (!same(moved) || unsafeFileReason(moved) !== null) {
      throw StoreError.claim(path, 'conditional state-file removal lost its inode claim');
    }
    try {
      fsyncDir(dir);
    } catch (error) {
      // Not durably gone: the record goes back under its name, as it was.
      try {
        fs.renameSync(dir.at(quarantine), dir.at(name));
      } catch {
        // The quarantine stays; the recovery of §3.9 removes it once the claim is gone.
      }
      throw StoreError.io(path, 'fsync of the collection', error);
    }
    try {
      fs.unlinkSync(dir.at(quarantine));
      fsyncDir(dir);
    } catch (error) {
      // The record is durably out of its collection already; its quarantine is removed by a
      // later recovery (no claim with its id is left then).
      if (lstat(dir, quarantine) === null) return true;
      throw StoreError.io(path, 'unlink of the quarantine', error);
    }
    return true;
  }

  /**
   * Creates (mode 0700) each missing directory of `path` and verifies the existing ones (owned,
   * mode 0700, not a symbolic link); returns the identity of the last
   * (`ensurePrivateStateDirectory`, §3.3).
   */
  ensurePrivateDirectory(path) {
    const segments = segmentsOf(path);
    const dir = this.walk(path, segments, true);
    if (dir === null) throw StoreError.unsafe(path, 'vanished while created');
    return using(dir, () => {
      try {
        return identityOf(dir.stat());
      } catch (error) {
        throw StoreError.io(path, 'fstat', error);
      }
    });
  }

  /**
   * Lists a collection directory; null when it (or a parent) is absent
   * (`snapshotPrivateStateDirectory`, §3.3). Every listing first performs the crash recovery of
   * §3.9 in the collection; with `recoverOrphans`, also the claims of gone owners (§3.5).
   * Returns `{identity, entries}`, entries sorted by name (UTF-16 order).
   */
  snapshot(path, recoverOrphans) {
    const segments = segmentsOf(path);
    const dir = this.walk(path, segments, false);
    if (dir === null) return null;
    return using(dir, () => {
      try {
        recoverDirectory(dir, this.liveness, recoverOrphans);
      } catch (error) {
        if (error instanceof ArbitrationError) throw StoreError.claim(path, error.message);
        throw error;
      }
      let stat;
      try {
        stat = dir.stat();
      } catch (error) {
        throw StoreError.io(path, 'fstat', error);
      }
      let listed;
      try {
        listed = namesWhere(dir, MAX_ENTRIES);
      } catch (error) {
        throw StoreError.io(path, 'list', error);
      }
      if (listed.over) throw StoreError.unsafe(path, `the collection has more than ${MAX_ENTRIES} entries`);
      const entries = [];
      for (const raw of listed.names) {
        const name = nameText(raw);
        if (name === null || !isSafeName(name)) {
          throw StoreError.unsafe(path, `state directory contains an unsafe entry name ("${shown(raw)}"): rename or remove it by hand`);
        }
        let entryStat;
        try {
          entryStat = lstat(dir, name);
        } catch (error) {
          throw StoreError.io(path, 'lstat', error);
        }
        if (entryStat === null) continue; // removed while listed
        const kind = fileKind(entryStat.mode);
        if (kind === S_IFREG) entries.push({ name, kind: 'file', identity: undefined });
        else if (kind === S_IFLNK) entries.push({ name, kind: 'symbolic-link', identity: undefined });
        else if (kind === S_IFDIR) {
          if (Number(entryStat.uid) !== euid() || (Number(entryStat.mode) & 0o777) !== 0o700) {
            throw StoreError.unsafe(path, `sub-directory ${name} must be owned by you with mode 0700`);
          }
          entries.push({ name, kind: 'directory', identity: identityOf(entryStat) });
        } else entries.push({ name, kind: 'other', identity: undefined });
      }
      entries.sort((a, b) => cmpUtf16(a.name, b.name));
      return { identity: identityOf(stat), entries };
    });
  }

  /**
   * Reads files of a collection whose identity must be `expected` before and after
   * (`readPrivateStateFilesBatch`, §3.3); results in request order, `{name, status}` with the
   * WIT `batch-status` variant.
   */
  readBatch(path, names, maxBytesPerFile, maxTotalBytes, expected) {
    const segments = checkBatch(path, names, maxBytesPerFile, maxTotalBytes);
    const dir = this.walk(path, segments, false);
    if (dir === null) throw StoreError.unsafe(path, 'private state batch directory is absent');
    return using(dir, () => {
      const changed = () => StoreError.unsafe(path, 'private state batch directory changed identity');
      const identity = (d) => {
        try {
          return identityOf(d.stat());
        } catch (error) {
          throw StoreError.io(path, 'fstat', error);
        }
      };
      const same = (a, b) => a.device === b.device && a.inode === b.inode;
      if (!same(identity(dir), expected)) throw changed();
      const remaining = { bytes: maxTotalBytes };
      const results = names.map((name) => ({ name, status: batchReadOne(dir, name, maxBytesPerFile, remaining) }));
      // The directory must still be the same one at the same path.
      const reopened = this.walk(path, segments, false);
      if (reopened === null) throw changed();
      using(reopened, () => {
        if (!same(identity(reopened), expected) || !same(identity(dir), expected)) throw changed();
      });
      return results;
    });
  }
}

/** A raw name for a message: its bytes, non-printable ones escaped as Rust's `escape_ascii` does. */
function shown(raw) {
  let out = '';
  for (const byte of raw) {
    if (byte === 0x5c) out += '\\\\';
    else if (byte === 0x22) out += '\\"';
    else if (byte === 0x27) out += "\\'";
    else if (byte === 0x09) out += '\\t';
    else if (byte === 0x0a) out += '\\n';
    else if (byte === 0x0d) out += '\\r';
    else if (byte >= 0x20 && byte < 0x7f) out += String.fromCharCode(byte);
    else out += `\\x${byte.toString(16).padStart(2, '0')}`;
  }
  return out;
}
