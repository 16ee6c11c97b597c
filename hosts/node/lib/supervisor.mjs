// Running a command as a directory lease's recorded child — what `proclease run` does, for this
// host. A port of the native supervisor's order of writes (`host/src/api/supervisor/mod.rs`,
// `steps.rs`, and the refusals of `host/src/error.rs` `Refusal` and `Host::lease_new_directory`),
// without what Node cannot do:
//
//   [admission: acquire] → lease (create-with-directory, preparing) → launching
//   [→ helper-launching] → spawn → running(child identity) [→ helper-active(child)] → wait →
//   settled [→ parent-owned] → release [→ admission released]
//
// so that a crash at any instant leaves what `recover` recovers exactly: while the child lives,
// its recorded identity keeps the lease active; the launch window (between spawn and recording
// the child) is bounded by `recoverAfterMs`. Differences from the native `run` (README, "Kernel
// locks"): the command runs without a box (no PID namespace, no cgroup) and without a spawn
// witness, so a process it leaves running is not covered once the command has exited, and
// nothing proves a launch window's command gone before `recoverAfterMs`; no run journal is kept;
// two runs started at once on one new directory are kept apart by looking again once the lease is
// written instead of by a kernel lock (`lease-new-directory.mjs`).
import { spawn } from 'node:child_process';
import { resolve } from 'node:path';
import { osErrorText } from './errors.mjs';
import { NOT_LIVE } from './process-identity/index.mjs';
import { ProcleaseError, call } from './calls.mjs';
import { Refusal, leaseNewDirectory } from './lease-new-directory.mjs';

export { Refusal };

/** The signals forwarded to the command (the native supervisor's set). */
const SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGQUIT'];
const SIGNAL_NUMBERS = { SIGHUP: 1, SIGINT: 2, SIGQUIT: 3, SIGTERM: 15 };

/** Whether `error` is the component saying a child that already exited cannot be captured. */
const gone = (error) => error instanceof ProcleaseError && error.kind === 'system' && error.reference === NOT_LIVE;

/**
 * Runs `step` until it succeeds or `boundMs` has passed (pauses 50 ms doubling to 1 s), as the
 * native `retrying`: the steps retried are compare-and-swap writes of this run's own records, so
 * a retry after a failure that left the record unchanged repeats the same write, and one after a
 * change it cannot see fails the swap.
 */
async function retrying(boundMs, step) {
  const start = Date.now();
  let pause = 50;
  for (;;) {
    try {
      return step();
    } catch (error) {
      if (Date.now() - start + pause >= boundMs) throw error;
      await new Promise((r) => setTimeout(r, pause));
      pause = Math.min(pause * 2, 1000);
    }
  }
}

/**
 * Runs `command` (an argv array) in the leased directory `workdir` (created 0700 when absent; an
 * existing one must be empty). Resolves `{status: {code, signal}, problems, unreleased}` once the
 * command ran; rejects (a `Refusal` or a `ProcleaseError`) when nothing ran. Options:
 * `recoverAfterMs` (60 s), `exclusive` (also hold the export admission, recording the command as
 * its helper), `forwardSignals` (true), `releaseRetryMs` (10 s).
 */
export async function runCommand(host, workdir, command, { recoverAfterMs = 60_000, exclusive = false, forwardSignals = true, releaseRetryMs = 10_000 } = {}) {
  const exports = host.exports;
  // Signals are caught from the start: one that arrives before the command started stops the run
  // cleanly (nothing started, nothing left) instead of killing it mid-lease.
  let pending = null;
  let child = null;
  const handlers = new Map();
  if (forwardSignals) {
    for (const signal of SIGNALS) {
      const handler = () => {
        if (child !== null && child.exitCode === null && child.signalCode === null) {
          try {
            child.kill(signal);
          } catch {
            // It is already gone.
          }
        } else pending ??= signal;
      };
      handlers.set(signal, handler);
      process.on(signal, handler);
    }
  }
  // What `left` names could not be released (the native `Refusal::InterruptedLeavingClaims`):
  // never "nothing is left behind" when something is. Worded by the component (`run-refusals`),
  // as every host words it.
  const words = exports.runRefusals;
  const interrupted = (left = []) => {
    if (pending === null) return null;
    return new Refusal(words.interruptedBeforeStart(SIGNAL_NUMBERS[pending], left), { code: 'interrupted' });
  };
  // The error to report once what was taken is undone: the signal's when one came. A wait for
  // another process's lock that reached its bound with a signal pending is the signal's too:
  // this host cannot end a wait early (it blocks the event loop, so the signal is seen only once
  // the wait is over), and the native and Python hosts would have cut that wait short for it.
  // A creation intent the lease's creation could not remove in the grace is named first.
  const leaving = (error, left) =>
    (error instanceof Refusal && error.code === 'interrupted') || (pending !== null && typeof error?.lockTimeout === 'string')
      ? interrupted([...exports.storeAdvice.creationIntentsLeft(resolve(String(workdir))), ...left])
      : error;
  const stopForwarding = () => {
    for (const [signal, handler] of handlers) process.off(signal, handler);
    handlers.clear();
  };
  // Let a signal that arrived during a synchronous step be seen.
  const tick = () => new Promise((r) => setImmediate(r));
  try {
    const dir = resolve(String(workdir));
    let admission = null;
    // Each returns what it could not release, worded for `interrupted`.
    const releaseAdmission = () => {
      const left = [];
      if (admission !== null) {
        try {
          admission.settleHelper();
        } catch {
          // Not launching: nothing to settle.
        }
        try {
          admission.release();
        } catch (error) {
          // Left for the next acquirer once this process is gone.
          left.push(words.leftExportAdmission(error.message));
        }
        admission[Symbol.dispose]?.();
        admission = null;
      }
      return left;
    };
    // The admission comes before the directory, so that a refusal creates nothing.
    if (exclusive) {
      try {
        admission = call(() => exports.exportAdmission.acquire());
      } catch (error) {
        await tick();
        throw leaving(error, []);
      }
    }
    let lease;
    let created;
    try {
      await tick();
      const stop = interrupted();
      if (stop) throw stop;
      ({ resource: lease, created } = leaseNewDirectory(host, dir, { recoverAfterMs }));
    } catch (error) {
      await tick();
      throw leaving(error, releaseAdmission());
    }
    // What the lease created (the directory and its missing ancestors), removed again if still
    // empty when the command never ran.
    const undoCreated = () => {
      for (const path of created) {
        try {
          call(() => exports.workspace.removeEmptyDirectory(path, undefined));
        } catch {
          // Best effort: what is left is an empty directory recovery finishes.
        }
      }
    };
    const abandon = () => {
      const left = [];
      try {
        lease.update('settled', undefined);
      } catch {
        // From preparing: nothing to settle.
      }
      try {
        lease.release();
      } catch (error) {
        // Left for `recover` once this process is gone.
        left.push(words.leftDirectoryLease(dir, error.message));
      }
      lease[Symbol.dispose]?.();
      undoCreated();
      return left.concat(releaseAdmission());
    };
    try {
      await tick();
      const stop = interrupted();
      if (stop) throw stop;
      call(() => lease.update('launching', undefined));
      if (admission !== null) call(() => admission.beginHelperLaunch());
    } catch (error) {
      await tick();
      throw leaving(error, abandon());
    }
    // Start the command; `spawn` reports a command that cannot start asynchronously.
    const started = await new Promise((resolveStart) => {
      let spawned;
      try {
        spawned = spawn(command[0], command.slice(1), { cwd: dir, stdio: 'inherit' });
      } catch (error) {
        resolveStart({ error });
        return;
      }
      spawned.once('spawn', () => resolveStart({ child: spawned }));
      spawned.once('error', (error) => resolveStart({ error }));
    });
    if (started.error) {
      abandon();
      throw new Refusal(words.unstartable(String(command[0]), osErrorText(started.error)));
    }
    child = started.child;
    const exited = new Promise((r) => child.once('exit', (code, signal) => r({ code, signal })));
    // A signal that came while the command was being started goes to it now.
    if (pending !== null) {
      try {
        child.kill(pending);
      } catch {
        // It is already gone.
      }
    }
    const problems = [];
    // Record the child; if it already exited (a capture finds no live process), the lifecycle
    // goes from launching straight to settled.
    try {
      call(() => lease.update('running', BigInt(child.pid)));
    } catch (error) {
      if (!gone(error)) problems.push(error);
    }
    if (admission !== null) {
      try {
        call(() => admission.bindHelper(BigInt(child.pid)));
      } catch (error) {
        if (!gone(error)) problems.push(error);
      }
    }
    const status = await exited;
    // The handlers stay until the end: a signal now must not kill this process while it settles
    // and releases (the command is gone; there is nothing to forward it to).
    try {
      await retrying(releaseRetryMs, () => call(() => lease.update('settled', undefined)));
    } catch (error) {
      problems.push(error);
    }
    if (admission !== null) {
      try {
        await retrying(releaseRetryMs, () => call(() => admission.settleHelper()));
      } catch (error) {
        problems.push(error);
      }
    }
    if (problems.length === 0) {
      try {
        await retrying(releaseRetryMs, () => call(() => lease.release()));
      } catch (error) {
        problems.push(error);
      }
      if (admission !== null) {
        try {
          await retrying(releaseRetryMs, () => call(() => admission.release()));
        } catch (error) {
          problems.push(error);
        }
      }
    }
    lease[Symbol.dispose]?.();
    admission?.[Symbol.dispose]?.();
    return { status, problems, unreleased: problems.length > 0 ? { directory: dir } : null };
  } finally {
    stopForwarding();
  }
}
