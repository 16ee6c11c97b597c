// The lease-creation lock (`.proclease/locks/directory-lease-creation.lock`, an exclusive `flock`):
// the lock the native and Python hosts take while they check that a directory is free and lease
// it, and that a recovery holds from its last look at the lease collection until the directory it
// removes is out of its path (`docs/deviations.md` 24; the native `state_store::take_leasing_lock`).
// Node has no `flock`; this host takes it through util-linux's `flock(1)` on a descriptor it shares
// with it (`process-identity/flock.mjs`: the lock belongs to the open file, so it stays held by
// this process's descriptor), polling a non-blocking attempt, so that its `recover` and `run`
// exclude the other hosts' as theirs exclude each other. Where `flock(1)` is missing it takes
// nothing and says so (`held: false`), as before.
import * as fs from 'node:fs';
import { afterOutermostCall } from '../calls.mjs';
import { StoreError, isOsError } from '../errors.mjs';
import { createPrivateDir, openDir, sleepMs, using } from '../fsops.mjs';
import { tryLock } from '../process-identity/flock.mjs';

/** The lock file's name in `.proclease/locks/` (`state_store::LEASING_LOCK`). */
export const LEASING_LOCK = 'directory-lease-creation.lock';

/** How long a taker waits for another holder (`state_store::lock::WAIT`), ms. */
export const WAIT_MS = 10_000;

/** What a lock's long wait tells the user (`state_store::LOCK_HINT`). */
export const LOCK_HINT = 'continue a stopped holder (`kill -CONT PID`, or `fg` in its terminal) or end it; a holder that dies releases the lock';

/**
 * The pid `/proc/locks` shows holding a lock on the open file `fd`'s inode (not a waiter), if any
 * (`lock_wait::holder`); null when none is shown or `/proc/locks` cannot be read.
 */
export function lockHolder(fd) {
  let stat;
  let text;
  try {
    stat = fs.fstatSync(fd, { bigint: true });
    text = fs.readFileSync('/proc/locks', 'latin1');
  } catch {
    return null;
  }
  // Linux's `new_encode_dev`: MAJ:MIN as /proc/locks prints them, in hex.
  const major = ((stat.dev >> 8n) & 0xfffn).toString(16).padStart(2, '0');
  const minor = ((stat.dev & 0xffn) | ((stat.dev >> 12n) & 0xfff00n)).toString(16).padStart(2, '0');
  const inode = stat.ino.toString();
  for (const line of text.split('\n')) {
    // `N: FLOCK ADVISORY WRITE PID MAJ:MIN:INODE 0 EOF`; waiters have `->` after `N:`.
    const fields = line.trim().split(/\s+/);
    if (fields.length < 6 || fields[1] === '->') continue;
    const [maj, min, ino] = fields[5].split(':');
    if (ino === inode && maj === major && min === minor) {
      const pid = Number(fields[4]);
      if (Number.isSafeInteger(pid) && pid > 0 && pid !== process.pid) return pid;
    }
  }
  return null;
}

/** Scheduler states as `lock_wait::process` words them. */
const STATES = { T: 'stopped', t: 'stopped', R: 'running', S: 'sleeping', D: 'in uninterruptible sleep', Z: 'a zombie' };

/** `pid` as a lock's holder: `pid P (COMMAND, STATE)` from `/proc` (`waits::Holder`). */
function processWords(pid) {
  const read = (name) => {
    try {
      return fs.readFileSync(`/proc/${pid}/${name}`, 'utf8');
    } catch {
      return '';
    }
  };
  const command = read('comm').trimEnd() || '?';
  const stat = read('stat');
  const at = stat.lastIndexOf(') ');
  const state = (at >= 0 && STATES[stat[at + 2]]) || 'state unknown';
  return `pid ${pid} (${command}, ${state})`;
}

/** One state home's lease-creation lock, as this process holds it (or not). */
export class LeasingLock {
  /**
   * @param home the `StateHome` (`.proclease/locks` in it is created 0700 when absent)
   * @param afterCalls true for a lock released at the latest when the outermost component call
   *   returns (`HELD_FOR_CALLS`). False for a lock held across component calls
   *   (`leaseNewDirectory`).
   */
  constructor(home, { afterCalls = false } = {}) {
    this.home = home;
    this.afterCalls = afterCalls;
    this.fd = null;
  }

  /**
   * Takes the lock, waiting at most `waitMs` for another holder (saying who it is through `warn`
   * after 1 s): true when held (also when this
   * process held it already), false when this host cannot take it (no working `flock(1)`).
   * Throws a `StoreError`: `contended` at the bound, naming the holder; `io` when the lock file
   * cannot be opened.
   */
  take(waitMs = WAIT_MS, warn = () => {}) {
    if (this.fd !== null) return true;
    const label = `${this.home.path}/.proclease/locks/${LEASING_LOCK}`;
    let fd;
    try {
      createPrivateDir(this.home.dir, '.proclease');
      fd = using(openDir(this.home.dir, '.proclease'), (internal) => {
        createPrivateDir(internal, 'locks');
        return using(openDir(internal, 'locks'), (locks) => fs.openSync(locks.at(LEASING_LOCK), fs.constants.O_RDWR | fs.constants.O_CREAT | fs.constants.O_NOFOLLOW, 0o600));
      });
    } catch (error) {
      throw isOsError(error) ? StoreError.io(label, 'open of the lease-creation lock', error) : error;
    }
    const start = performance.now();
    let taken = false;
    let warned = false;
    try {
      for (let pause = 1; ; pause = Math.min(pause * 2, 50)) {
        const tried = tryLock(fd, 'exclusive');
        if (tried === 'locked') {
          taken = true;
          this.fd = fd;
          if (this.afterCalls) HELD_FOR_CALLS.add(this);
          return true;
        }
        // No flock(1) on this machine: this host takes no lock (README, "Kernel locks").
        if (tried === 'unsupported') return false;
        // Anything else says nothing of the lock: never go on as if it were held or absent.
        if (tried === 'failed') {
          throw new StoreError('io', label, `${label}: lock of the lease-creation lock failed: util-linux's flock(1) could not take or test it (a failed fork, or a filesystem without flock); retry, or use the native host`);
        }
        if (!warned && performance.now() - start >= 1000 && waitMs > 1000) {
          // As the native host's waits: after 1 s, who it waits for.
          warned = true;
          const holder = lockHolder(fd);
          const left = Math.max(0, (waitMs - (performance.now() - start)) / 1000).toFixed(1);
          warn(`waiting for ${holder === null ? 'another process (not shown in /proc/locks)' : processWords(holder)} holding ${label} (for at most ${left} s more)`);
        }
        if (performance.now() - start >= waitMs) {
          const holder = lockHolder(fd);
          const words = holder === null ? 'another process (not shown in /proc/locks)' : processWords(holder);
          throw new StoreError('contended', label, `waited for ${label}, held by ${words}: ${LOCK_HINT}`);
        }
        sleepMs(pause);
      }
    } finally {
      if (!taken) fs.closeSync(fd);
    }
  }

  /** Releases the lock (closing this process's only descriptor of the open file); nothing when not held. */
  release() {
    const fd = this.fd;
    this.fd = null;
    HELD_FOR_CALLS.delete(this);
    if (fd !== null) fs.closeSync(fd);
  }
}

/**
 * The locks component calls took (`lock-leasing`) and still hold. A component call that traps (or
 * whose import throws) between `lock-leasing` and `unlock-leasing` must not leave them held: every
 * host's next lease would wait for them. `calls.mjs` releases them once the outermost component
 * call returns (the native `runtime::Instance::call` does the same after every call); a completed
 * call has released them already.
 */
const HELD_FOR_CALLS = new Set();
afterOutermostCall(() => {
  for (const lock of [...HELD_FOR_CALLS]) lock.release();
});
