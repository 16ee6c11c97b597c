// proclease for Node: a host of the proclease component on `node:fs`, and a small API over it.
//
//   import { Host } from 'proclease-node';
//   const host = await Host.open({ stateHome, workspaceRoots });
//   await host.withDirectoryLease('/home/me/jobs/build', { create: true }, async (lease) => { … });
//   await host.withAdmission(async (admission) => { … });
//   const recovery = host.recover({ dryRun: true });
//
// The counterpart of the native facade `proclease::Host` (`host/src/api/host.rs`): the same
// defaults (state home `$PROCLEASE_STATE_HOME`, `$GHOSTGET_STATE_HOME`, `$XDG_DATA_HOME/proclease`,
// `~/.local/share/proclease`; workspace roots the home directory and the temporary directory),
// and `survey` / `recover` as `doctor` / `recover` use them. Every lease rule is the component's.
import { call, ComponentError, drop, isWitError, ProcleaseError } from './calls.mjs';
import { IdentityError, StateHomeError, StoreError, WorkspaceError } from './errors.mjs';
import { assemble } from './host.mjs';
import { spawn as spawnProcess } from 'node:child_process';
import { isAbsolute } from 'node:path';
import { hold } from './held.mjs';
import { leaseNewDirectory, Refusal } from './lease-new-directory.mjs';

export { ComponentError, IdentityError, ProcleaseError, Refusal, StateHomeError, StoreError, WorkspaceError, call };

export { doctorReport, doctorText } from './reports/doctor.mjs';
export { recoveryReport, recoveryText } from './reports/recovery.mjs';
export { toJson } from './reports/format.mjs';

/** An argument this API cannot take: a `ProcleaseError` of kind `invalid-argument`, thrown before anything is done. */
const invalid = (message) => new ProcleaseError(message, { kind: 'invalid-argument' });
const describe = (value) => (typeof value === 'function' ? 'a function' : typeof value === 'string' ? JSON.stringify(value) : String(value));

/** A held directory lease (the component's `directory-lease` resource), pids as numbers or BigInts. */
export class DirectoryLease {
  constructor(resource) {
    this.resource = resource;
  }
  /** The claim as the lease file records it (WIT `directory-lease-claim`). */
  claim() {
    return this.resource.claim();
  }
  get path() {
    return this.claim().path;
  }
  get id() {
    return this.claim().id;
  }
  contentSha256() {
    return this.resource.contentSha256();
  }
  released() {
    return this.resource.released();
  }
  /** Raw lifecycle step: `preparing` → `launching` → `running` (with the child's pid) → `settled` → `launching` … */
  update(phase, childPid) {
    call(() => this.resource.update(phase, childPid === undefined || childPid === null ? undefined : BigInt(childPid)));
  }
  /** Removes the claim (never the directory); idempotent. */
  release() {
    call(() => this.resource.release());
  }
}

/**
 * A held export admission (the component's `admission` resource): `spawnHelper` starts and
 * records its helper under a witness; `beginHelperLaunch` / `bindHelper` / `settleHelper` are the
 * raw steps (§6A.5), `release`.
 */
export class Admission {
  constructor(resource, parts = null) {
    this.resource = resource;
    this.parts = parts;
  }

  /**
   * Starts the helper `command` with `args` (`child_process.spawn(command, args, options)`)
   * holding a witness, and records it (`helper-active`): the native `Admission::launch_helper`.
   * Resolves to the `ChildProcess` once it runs. Once this process and the helper — with every
   * process that kept the witness it inherited — are gone, the next acquirer on any host proves
   * the helper gone by its free witness and takes the admission over; until then every acquirer
   * is refused. The witness reaches the helper as one more descriptor (fd 3 with the default
   * `stdio`, else the next after `options.stdio`); a helper that closes it drops its coverage
   * (`docs/witness.md` "Uncontained runs").
   *
   * Errors (`ProcleaseError`): `invalid-argument` (before anything is done); `system` when the
   * witness cannot be taken (util-linux's `flock(1)` is needed) or the helper cannot start (the
   * spawn error as its `cause`; the admission is back to `parent-owned`); a lease rule's refusal
   * of the launch.
   */
  async spawnHelper(command, args = [], options = {}) {
    if (typeof command !== 'string' || command === '') throw invalid(`spawnHelper: the command must be a non-empty string, not ${describe(command)}`);
    if (!Array.isArray(args) || !args.every((a) => typeof a === 'string')) throw invalid('spawnHelper: args must be an array of strings');
    if (options === null || typeof options !== 'object') throw invalid(`spawnHelper: options must be an object, not ${describe(options)}`);
    if (this.parts === null) throw invalid('spawnHelper: this admission has no host to take a witness with; use host.withAdmission()');
    const { processes } = this.parts;
    if (processes.witnesses === null) throw new ProcleaseError('no witness directory in the state home: the helper could not be covered', { kind: 'system' });
    let witness;
    try {
      const own = processes.selfIdentity();
      const host = processes.ownView();
      witness = processes.witnesses.spawn(own, { pidNamespace: host.pidNamespace, timeNamespace: host.timeNamespace, boottimeOffsetNs: host.view.boottimeOffsetNs });
    } catch (error) {
      throw error instanceof ProcleaseError ? error : new ProcleaseError(`a witness for the helper cannot be taken: ${error.message}`, { kind: 'system', cause: error });
    }
    try {
      this.beginHelperLaunch();
    } catch (error) {
      witness.discard();
      throw error;
    }
    const given = options.stdio ?? 'pipe';
    const stdio = typeof given === 'string' ? [given, given, given] : [...given];
    while (stdio.length < 3) stdio.push('pipe');
    stdio.push(witness.fd);
    let child;
    let started;
    try {
      child = spawnProcess(command, args, { ...options, stdio });
      started = await new Promise((resolve) => {
        child.once('spawn', () => resolve(null));
        child.once('error', (error) => resolve(error));
      });
    } catch (error) {
      // `spawn` throws at once on options it refuses and on some errors of the system call.
      started = error;
    }
    if (started !== null) {
      // Nothing started: back to parent-owned, the witness removed.
      witness.discard();
      this.settleHelper();
      throw new ProcleaseError(`cannot start the helper ${command}: ${started.message}`, { kind: 'system', cause: started });
    }
    try {
      witness.recordUncontained();
    } catch (error) {
      process.emitWarning(`the helper runs uncontained, and its witness cannot say so: ${error.message}`, { code: 'PROCLEASE_UNCONTAINED' });
    }
    try {
      // Linked under the helper's identity before it is recorded, so probing it tests the lock.
      witness.bind(processes.capture(child.pid));
    } catch {
      // It exited already (nothing to bind), or the link failed: its record is judged by /proc
      // and by the spawn witness, which stays held while it runs.
    }
    witness.started();
    try {
      this.bindHelper(child.pid);
    } catch (error) {
      // Not recorded: a helper that exited already (Node may not have seen its exit yet, so it
      // is given a moment) is no failure — the admission stays `helper-launching`, and its
      // spawn witness proves when all it started is gone. One still alive must not run beside
      // an admission that does not name it.
      const ended = () => child.exitCode !== null || child.signalCode !== null;
      if (!ended()) await new Promise((resolve) => {
        const timer = setTimeout(resolve, 1_000);
        child.once('exit', () => {
          clearTimeout(timer);
          resolve();
        });
      });
      if (!ended()) {
        child.kill('SIGKILL');
        await new Promise((resolve) => (ended() ? resolve() : child.once('exit', resolve)));
        this.settleHelper();
        throw error;
      }
    }
    return child;
  }

  claim() {
    return this.resource.claim();
  }
  released() {
    return this.resource.released();
  }
  beginHelperLaunch() {
    call(() => this.resource.beginHelperLaunch());
  }
  bindHelper(pid) {
    call(() => this.resource.bindHelper(BigInt(pid)));
  }
  settleHelper() {
    call(() => this.resource.settleHelper());
  }
  markCleanupUnsafe() {
    call(() => this.resource.markCleanupUnsafe());
  }

  /**
   * Why a helper may still run, or null (the Python host's `Admission.helper_may_run`):
   * `helper-launching` unless every spawn witness this process took is free (a helper that exited
   * before it could be recorded, and all it started, are gone); `helper-active` unless its
   * helper is gone with all it started (its witness free).
   */
  helperMayRun() {
    const claim = this.claim();
    if (claim.phase === 'helper-launching') {
      let spawned = 'held';
      try {
        const processes = this.parts?.processes;
        if (processes?.witnesses) [spawned] = processes.witnesses.testSpawned(processes.selfIdentity());
      } catch {
        spawned = 'held';
      }
      return spawned === 'free' ? null : 'a helper launch began and no helper was recorded: one may run unrecorded';
    }
    if (claim.phase === 'helper-active' && claim.helperOwner) {
      const seen = this.parts ? this.parts.liveness.liveness(claim.helperOwner) : { status: 'unknown', lineageGone: false };
      if (seen.status !== 'different-or-dead' || !seen.lineageGone) return `its helper (pid ${claim.helperOwner.pid}) is not provably gone with all it started`;
    }
    return null;
  }

  /**
   * Releases the admission, settling first a helper that is provably gone with all it started;
   * idempotent. Throws a `ProcleaseError` of kind `helper-may-run` while a helper may run (the
   * admission stays held): wait for it to end, then release.
   */
  release() {
    if (this.resource.released()) return;
    const why = this.helperMayRun();
    if (why !== null) throw new ProcleaseError(`the export admission is not released: ${why}; wait for it to end, then release`, { kind: 'helper-may-run' });
    const phase = this.claim().phase;
    if (phase === 'helper-launching' || phase === 'helper-active') call(() => this.resource.settleHelper());
    call(() => this.resource.release());
  }
}

/**
 * Takes the recovery turn (`recovery-turn.take`); its err case, a `failure` record (a wait past
 * the bound: `contended`, naming the holder), is thrown as a `ProcleaseError` of kind `storage`
 * that keeps the wait's `lockTimeout`.
 */
function takeRecoveryTurn(turns) {
  try {
    return turns.take();
  } catch (error) {
    const failure = error?.payload ?? error;
    if (failure !== null && typeof failure === 'object' && typeof failure.kind === 'string' && typeof failure.message === 'string') {
      throw Object.assign(new ProcleaseError(failure.message, { kind: 'storage', failure }), { lockTimeout: error.lockTimeout });
    }
    throw error;
  }
}

/** The recovery options of `recover`: the command line's (`concurrent`, `pastBound`) with `dryRun`, `skipInvalid`, `keep`. */
const recoveryOptions = ({ dryRun = false, skipInvalid = false, keep = [], concurrent = true, pastBound = true } = {}) => ({ dryRun, skipInvalid, concurrent, keep, pastBound });

export class Host {
  /**
   * Opens a host. Options: `stateHome` (default: `$PROCLEASE_STATE_HOME`, `$GHOSTGET_STATE_HOME`,
   * `$XDG_DATA_HOME/proclease`, `~/.local/share/proclease`), `workspaceRoots` (directories under
   * which leased directories may be created, inspected and removed; default: the home directory
   * and `os.tmpdir()`), `lockTimeoutMs` (how long the waits for other processes' kernel locks of
   * one call into the component may last all together, ms, default 10 000: an admission's eight
   * attempts share it), `onWarning` (what a long wait says; default `process.emitWarning`). The
   * plugin catalog is `<state home>/provider-plugins/catalog.json`. The state home is created
   * (0700) and claimed when absent; one that cannot be used safely is refused (the error says
   * what to fix).
   */
  static async open(options = {}) {
    return new Host(await assemble(options));
  }

  constructor(parts) {
    this.parts = parts;
    /** The component's exports (`records`, `dispositions`, `exportAdmission`, `directoryLeases`, `invocationLeases`, `runRefusals`, `recoveryAdvice`), for what this API does not wrap. */
    this.exports = parts.root;
  }

  /** The state home's path. */
  get stateHome() {
    return this.parts.home.path;
  }

  /** The granted workspace roots, resolved. */
  get workspaceRoots() {
    return this.parts.workspace.rootPaths();
  }

  /** This process's identity (`{pid, bootId, processStartId}`, pid a BigInt). */
  selfIdentity() {
    return this.parts.processes.selfIdentity();
  }

  /** What probing `owner` proves (`{status, lineageGone, proof}`), judged by the component. */
  liveness(owner) {
    return this.parts.liveness.liveness(owner);
  }

  /**
   * Leases the directory `path` (a `raw-working` lease), runs `fn(lease)` and releases the lease
   * however `fn` ends — a `running` lease whose recorded command has ended is settled first —
   * unless a command may still run in the directory (`launching`, or `running` with its command
   * alive): then it stays held, with a warning (`PROCLEASE_LEASE_LEFT`), as the native handle's
   * drop leaves it, since releasing would let another run lease the directory beside that
   * command; recovery judges it once this process and the command are gone. With `create`
   * (default) the directory is created (0700, with missing ancestors) when absent — recording
   * the intent first (`create-with-directory`) — and refused, as `run` refuses it, when it is the
   * state home, not empty, or claimed by another lease (`lease-new-directory.mjs`); without
   * `create` it must exist (the reference's `create`). `recoverAfterMs`: how long a `launching`
   * lease of a dead owner is kept (default 60 s).
   */
  async withDirectoryLease(path, options, fn) {
    // `withDirectoryLease(path, fn)`: the options are optional. Everything is checked before
    // anything is created.
    if (typeof options === 'function' && fn === undefined) [options, fn] = [{}, options];
    const { create = true, recoverAfterMs = 60_000 } = options ?? {};
    if (typeof path !== 'string' || !isAbsolute(path)) throw invalid(`withDirectoryLease: the path must be an absolute path string, not ${describe(path)}`);
    if (typeof fn !== 'function') throw invalid(`withDirectoryLease: the last argument must be the function to run while the lease is held, not ${describe(fn)}`);
    if (typeof create !== 'boolean') throw invalid(`withDirectoryLease: options.create must be true or false, not ${describe(create)}`);
    if (!Number.isFinite(recoverAfterMs) || recoverAfterMs < 0) throw invalid(`withDirectoryLease: options.recoverAfterMs must be a number of milliseconds, not ${describe(recoverAfterMs)}`);
    let resource;
    if (create) {
      ({ resource } = leaseNewDirectory(this, path, { recoverAfterMs }));
    } else {
      const now = Date.now();
      const request = { role: 'raw-working', path, outputRoot: undefined, recoverAfterMs: now + recoverAfterMs, nowMs: now };
      resource = call(() => this.exports.directoryLeases.create(request));
    }
    const lease = new DirectoryLease(resource);
    // Should the process end before the `finally` (process.exit(), an un-awaited callback,
    // SIGINT): released while no command can run in the directory, else left for recovery.
    const unhold = hold(() => {
      if (resource.released()) return;
      if (['preparing', 'settled'].includes(resource.claim().phase)) resource.release();
    });
    try {
      return await fn(lease);
    } finally {
      unhold();
      try {
        if (!resource.released()) {
          const claim = resource.claim();
          const mayRun = (claim.phase === 'launching') || (claim.phase === 'running' && (!claim.childOwner || this.liveness(claim.childOwner).status !== 'different-or-dead'));
          if (mayRun) {
            // A command may still work in the directory: releasing would let another run
            // lease it beside that command. Left held, as the native handle's drop leaves it:
            // this process's lease, judged by recovery once it and the command are gone.
            process.emitWarning(
              `the directory lease of ${claim.path} ends in phase ${claim.phase} while its command may still run: it stays held (recover judges it once this process and the command are gone); wait for the command, lease.update('settled'), then return`,
              { code: 'PROCLEASE_LEASE_LEFT' },
            );
          } else {
            if (claim.phase === 'running') {
              try {
                resource.update('settled', undefined);
              } catch {
                // Released below all the same; a refusal here changes nothing on disk.
              }
            }
            call(() => resource.release());
          }
        }
      } finally {
        drop(resource);
      }
    }
  }

  /**
   * Acquires the export admission (§6A.5), runs `fn(admission)`, and releases it when `fn`
   * ends — settling first a helper that is provably gone with all it started (its witness free)
   * — unless a helper may still run: then it stays held while this process lives, with a
   * warning (`PROCLEASE_ADMISSION_LEFT`); `admission.release()` releases it once the helper
   * ended, and once this process and the helper are gone the next acquirer takes it over. A
   * `cleanup-unsafe` admission is left as it is, as the native host's handle leaves it.
   */
  async withAdmission(fn) {
    if (typeof fn !== 'function') throw invalid(`withAdmission: the argument must be the function to run while the admission is held, not ${describe(fn)}`);
    const resource = call(() => this.exports.exportAdmission.acquire());
    const admission = new Admission(resource, this.parts);
    const unhold = hold(() => {
      if (!resource.released() && resource.claim().phase === 'parent-owned') resource.release();
    });
    try {
      return await fn(admission);
    } finally {
      unhold();
      let left = false;
      try {
        if (!resource.released() && resource.claim().phase !== 'cleanup-unsafe') {
          const why = admission.helperMayRun();
          if (why === null) {
            admission.release();
          } else {
            // The handle stays usable: `admission.release()` once the helper ended.
            left = true;
            process.emitWarning(
              `the export admission stays held: ${why}; it is held while this process lives — call admission.release() once the helper ended (the next acquirer takes it over once this process and the helper are gone)`,
              { code: 'PROCLEASE_ADMISSION_LEFT' },
            );
          }
        }
      } finally {
        if (!left) drop(resource);
      }
    }
  }


  /** `withAdmission`, by the name the README's API sketch uses. */
  admission(fn) {
    return this.withAdmission(fn);
  }

  /**
   * Everything a `proclease recover` does (`Host::recover` of the native host): the directory
   * leases (with the command line's options: `concurrent`, `pastBound`; `dryRun`, `skipInvalid`,
   * `keep` as given), the creation intents of crashed creators, and — when directory recovery did
   * not stop — the invocation tombstones whose owners are provably gone (§6B.9 recover mode;
   * dry: the component's `preview-repair`). Recoverers take turns (the artifact's `recovery-turn`:
   * the native host's kernel lock, where this runtime has one), and the waits of one recovery
   * share one bound of `lockTimeoutMs`. Returns `{dryRun, directoryLeases, creations, invocations,
   * lockTimeout}`: `lockTimeout` is the words of a wait for another process's lock that reached the
   * bound and stopped recovery or made it leave a lease as it is (the native
   * `Recovery::lock_timeout`, exit status 5), else null. Throws a `ProcleaseError` (kind
   * `storage`, its `lockTimeout` set) when another recoverer kept its turn past the bound.
   */
  recover(options = {}) {
    const opts = recoveryOptions(options);
    const leases = this.exports.directoryLeases;
    return this.parts.asOperation(() => {
      const turn = opts.dryRun ? null : takeRecoveryTurn(this.exports.recoveryTurn);
      let recovery;
      try {
        const directoryLeases = call(() => leases.recoverEach(undefined, opts));
        const refused = Boolean(directoryLeases.stopped) || directoryLeases.outcomes.some((o) => o.action.tag === 'skip');
        recovery = { dryRun: opts.dryRun, directoryLeases, creations: [], invocations: null, lockTimeout: refused ? this.parts.operation.timedOut : null };
        // The directories removed (and the intents finished) stay reported when a later step
        // fails (the native `Error::RecoveryIncomplete`).
        let step = 'creation-intents';
        try {
          recovery.creations = call(() => leases.recoverCreations(opts.dryRun));
          if (!directoryLeases.stopped) {
            step = 'invocation-leases';
            recovery.invocations = call(() => (opts.dryRun ? this.exports.invocationLeases.previewRepair(true) : this.exports.invocationLeases.repair(true)));
          }
        } catch (error) {
          if (error !== null && typeof error === 'object') Object.assign(error, { recovery, recoveryStep: step });
          throw error;
        }
      } finally {
        if (turn !== null) {
          try {
            this.exports.recoveryTurn.end();
          } catch {
            // A trapped instance released every lock it held already; what failed is reported.
          }
        }
      }
      return recovery;
    });
  }

  /**
   * What is in the state home and what would become of it, changing nothing (`doctor`; the
   * native `Host::survey`): `{admission: {survey} | {invalid}, recovery, invocations}`. Its waits
   * for other processes' locks share one bound of `lockTimeoutMs`; one that reached it fails the
   * survey with a `ProcleaseError` (kind `storage`, `lockTimeout` set: exit status 5) rather than
   * show a held collection as refused.
   */
  survey() {
    const operation = this.parts.operation;
    const survey = this.parts.asOperation(() => {
      let admission;
      try {
        admission = { survey: this.exports.exportAdmission.survey() };
      } catch (error) {
        if (!isWitError(error) || error.tag !== 'lease') throw isWitError(error) ? new ComponentError(error) : error;
        const path = `${this.stateHome}/recovery/beeper-message-like-me-export-admission/active.json`;
        admission = { invalid: { path, error: error.val, setAside: `mv -- '${path}' '${this.stateHome}/.proclease/set-aside-active.json'` } };
      }
      let recovery;
      try {
        recovery = this.recover({ dryRun: true, concurrent: false, pastBound: true });
      } catch (error) {
        // The survey shows no partial recovery: it fails as the step did (the native survey).
        if (error !== null && typeof error === 'object') {
          delete error.recovery;
          delete error.recoveryStep;
        }
        throw error;
      }
      const decisions = new Map(recovery.invocations ? recovery.invocations.decisions : []);
      const invocations = call(() => this.exports.invocationLeases.list()).map((entry) => {
        if (entry.tag === 'invalid') return { entry, status: null, decision: decisions.get(entry.val) ?? null };
        const status = call(() => this.exports.invocationLeases.leaseStatus(entry.val));
        return { entry, status, decision: decisions.get(entry.val.lease.leaseId) ?? null };
      });
      return { admission, recovery, invocations };
    });
    if (operation.timedOut !== null) {
      const lockTimeout = operation.timedOut;
      throw Object.assign(new ProcleaseError(this.exports.recoveryAdvice.surveyWaitedOut(lockTimeout), { kind: 'storage' }), { lockTimeout });
    }
    return survey;
  }

  /** Closes the state home's and the workspace roots' descriptors. */
  close() {
    this.parts.sys.close();
    this.parts.home.close();
  }
}
