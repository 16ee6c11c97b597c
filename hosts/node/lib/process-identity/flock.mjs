// `flock(2)` for a runtime that has none: Node exposes no `flock`, so this host asks util-linux's
// `flock(1)` to take the lock on a descriptor this process holds (`flock -n 3`, with the
// descriptor as the child's fd 3). A `flock` lock belongs to the open file description, which
// the child shares with this process: the lock the child took stays held, by this process's
// descriptor, after the child exits — as `exec 9>f; flock 9` works in a shell — and goes when
// the last descriptor of that open file closes. That is all a witness needs (`docs/witness.md`):
// testing a lock (a shared lock, refused while a holder keeps its exclusive one) and taking one.
//
// One `flock(1)` is one fork and exec (about 2 ms). Where util-linux's `flock` is missing, nothing
// can be tested (`untestable`, the answer this host gave before) and nothing can be taken.
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';

/** The exit status `flock -E` is told to use for "held by another" (EX_TEMPFAIL). */
const CONFLICT = 75;

/** Where util-linux installs `flock(1)`; `PATH` is not consulted (a directory in it may be anyone's). */
const CANDIDATES = ['/usr/bin/flock', '/bin/flock', '/usr/local/bin/flock'];

let found;
/** The `flock(1)` binary, or null when there is none. */
export function flockBinary() {
  if (found === undefined) found = CANDIDATES.find((path) => fs.existsSync(path)) ?? null;
  return found;
}

/**
 * `flock(fd, mode | LOCK_NB)` through `flock(1)`: `'locked'` (the open file description of `fd`
 * now holds the lock), `'conflict'` (another holds a lock that excludes it), `'unsupported'` (no
 * `flock(1)` on this machine), or `'failed'` (it could not be run or did not answer: a failed fork,
 * a filesystem without `flock`, a descriptor it cannot use — nothing is known of the lock).
 */
export function tryLock(fd, mode) {
  const binary = flockBinary();
  if (binary === null) return 'unsupported';
  const done = spawnSync(binary, [mode === 'shared' ? '--shared' : '--exclusive', '--nonblock', '--conflict-exit-code', String(CONFLICT), '3'], {
    stdio: ['ignore', 'ignore', 'ignore', fd],
    env: {},
    timeout: 10_000,
  });
  if (done.error || done.signal) return 'failed';
  if (done.status === 0) return 'locked';
  return done.status === CONFLICT ? 'conflict' : 'failed';
}

/**
 * The state of the lock on the open file `fd` (`witness.rs::test`): `held` when a shared lock is
 * refused (a holder keeps its exclusive one), `free` when it is granted, `untestable` when it
 * cannot be tried. The shared lock a `free` answer took stays on `fd`'s open file until the
 * caller closes it: close `fd` at once.
 */
export function testLock(fd) {
  const tried = tryLock(fd, 'shared');
  return tried === 'locked' ? 'free' : tried === 'conflict' ? 'held' : 'untestable';
}
