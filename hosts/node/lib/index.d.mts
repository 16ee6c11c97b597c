// TypeScript declarations of the package's public API (`lib/index.mjs`). The records are the
// component's WIT types, as jco declares them in `component/interfaces/` (transpiled by `npm ci`'s
// `prepare`, and carried by the `npm pack` tarball); pids are BigInts there.
import type { ChildProcess, SpawnOptions } from 'node:child_process';
import type { AdmissionClaim, DirectoryLeaseClaim, Failure, Owner, RawPhase } from '../component/interfaces/proclease-lease-types.js';
import type { CreationOutcome, RecoveryRun } from '../component/interfaces/proclease-lease-directory-leases.js';
import type { AdmissionSurvey } from '../component/interfaces/proclease-lease-export-admission.js';
import type { RepairOutcome } from '../component/interfaces/proclease-lease-invocation-leases.js';
import type * as directoryLeases from '../component/interfaces/proclease-lease-directory-leases.js';
import type * as dispositions from '../component/interfaces/proclease-lease-dispositions.js';
import type * as exportAdmission from '../component/interfaces/proclease-lease-export-admission.js';
import type * as invocationLeases from '../component/interfaces/proclease-lease-invocation-leases.js';
import type * as records from '../component/interfaces/proclease-lease-records.js';
import type * as recoveryAdvice from '../component/interfaces/proclease-lease-recovery-advice.js';
import type * as runRefusals from '../component/interfaces/proclease-lease-run-refusals.js';

export type { AdmissionClaim, AdmissionSurvey, CreationOutcome, DirectoryLeaseClaim, Failure, Owner, RawPhase, RecoveryRun, RepairOutcome };

/** What kind of failure a `ProcleaseError` is. */
export type ErrorKind = 'lease' | 'storage' | 'system' | 'refused' | 'invalid-argument' | 'helper-may-run' | (string & {});

/** Every error the package throws: `kind`, the lease rule's `code` (kind `lease`), the storage `failure`, `cause`. */
export class ProcleaseError extends Error {
  constructor(message: string, options?: { kind?: ErrorKind; code?: string; failure?: Failure; cause?: unknown });
  readonly kind: ErrorKind | undefined;
  readonly code: string | undefined;
  readonly failure: Failure | undefined;
  /** The words of a wait for another process's lock that reached `lockTimeoutMs` in the call that failed (`waited N ms for …, held by pid P …`), if one did: the command line exits 5. */
  readonly lockTimeout?: string;
  /** Set when `Host.recover` failed at the creation intents or the invocation leases (e.g. `portable plugin catalog mutation is already locked` while another process mutates the plugin catalog) after the directory leases were dealt with: what was done (its `invocations` null). */
  readonly recovery?: Recovery;
  /** With `recovery`: the step that failed. */
  readonly recoveryStep?: 'creation-intents' | 'invocation-leases';
}
/** A component export's refusal: `kind` `lease` (with its `code`, e.g. `another-export-is-active`), `storage` or `system`. */
export class ComponentError extends ProcleaseError {}
/** A directory refused before anything was leased (kind `refused`): nothing is left behind. */
export class Refusal extends ProcleaseError {}
/** A state home that cannot be used safely (the message says what to fix). */
export class StateHomeError extends ProcleaseError {}
/** A state-store failure of this host's own (no longer thrown: the artifact's store fails with a `ComponentError` of kind `storage`). */
export class StoreError extends ProcleaseError {
  toFailure(): Failure;
}
/** A workspace failure. */
export class WorkspaceError extends ProcleaseError {
  toFailure(): Failure;
}
/** A process identity that cannot be read or recorded. */
export class IdentityError extends ProcleaseError {}

/** Runs `body`, turning a component error into a `ComponentError`. */
export function call<T>(body: () => T): T;

/** A held directory lease (the component's `directory-lease` resource). */
export class DirectoryLease {
  /** The claim as the lease file records it. */
  claim(): DirectoryLeaseClaim;
  readonly path: string;
  readonly id: string;
  contentSha256(): string;
  released(): boolean;
  /** Raw lifecycle step: `preparing` → `launching` → `running` (with the child's pid) → `settled` → `launching` … */
  update(phase: RawPhase, childPid?: number | bigint | null): void;
  /** Removes the claim (never the directory); idempotent. */
  release(): void;
}

/** A held export admission (§6A.5). */
export class Admission {
  claim(): AdmissionClaim;
  released(): boolean;
  /**
   * Starts the helper under a witness and records it (`helper-active`); resolves once it runs.
   * The witness reaches it as one more descriptor after `options.stdio` (fd 3 by default).
   */
  spawnHelper(command: string, args?: readonly string[], options?: SpawnOptions): Promise<ChildProcess>;
  beginHelperLaunch(): void;
  bindHelper(pid: number | bigint): void;
  settleHelper(): void;
  markCleanupUnsafe(): void;
  /** Why a helper may still run, or null. */
  helperMayRun(): string | null;
  /** Releases, settling first a helper provably gone with all it started; throws kind `helper-may-run` while one may run. */
  release(): void;
}

/** Options of `Host.open`. */
export interface HostOptions {
  /** Default: `$PROCLEASE_STATE_HOME`, `$GHOSTGET_STATE_HOME`, `$XDG_DATA_HOME/proclease`, `~/.local/share/proclease`. */
  stateHome?: string;
  /** Directories under which leased directories may be created, inspected and removed. Default: the home directory and `os.tmpdir()`. */
  workspaceRoots?: readonly string[];
  /** How long a wait for another process's kernel lock lasts before it fails `contended`, naming the holder, ms. Default 10 000. */
  lockTimeoutMs?: number;
  /** Where what a long wait says goes (who holds the lock). Default: `process.emitWarning`. */
  onWarning?: (message: string) => void;
  env?: NodeJS.ProcessEnv;
}

/** Options of `withDirectoryLease`. */
export interface DirectoryLeaseOptions {
  /** Create the directory (0700) as `run` does, refusing one that is not empty or another lease claims (default true). */
  create?: boolean;
  /** How long a `launching` lease of a dead owner is kept, in ms (default 60 000). */
  recoverAfterMs?: number;
}

/** Options of `recover`. */
export interface RecoverOptions {
  dryRun?: boolean;
  skipInvalid?: boolean;
  /** Directories whose leases are released and kept, not removed. */
  keep?: readonly string[];
  concurrent?: boolean;
  pastBound?: boolean;
}

/** What `recover` did (or, dry, would do). */
export interface Recovery {
  dryRun: boolean;
  directoryLeases: RecoveryRun;
  creations: CreationOutcome[];
  /** Null when directory recovery stopped. */
  invocations: RepairOutcome | null;
  /** The words of a wait for another process's lock that reached `lockTimeoutMs` and stopped recovery or made it leave a lease as it is (`waited N ms for …, held by pid P …`), else null: the command line exits 5. */
  lockTimeout: string | null;
}

/** What `survey` (`doctor`) finds, changing nothing. */
export interface Survey {
  admission: { survey: AdmissionSurvey | undefined } | { invalid: { path: string; error: unknown; setAside: string } };
  recovery: Recovery;
  invocations: Array<{ entry: unknown; status: unknown; decision: unknown }>;
}

/** What probing an owner proves. */
export type Liveness = dispositions.Liveness;

/** The component's exports, for what this API does not wrap. */
export interface Exports {
  records: typeof records;
  dispositions: typeof dispositions;
  exportAdmission: typeof exportAdmission;
  directoryLeases: typeof directoryLeases;
  invocationLeases: typeof invocationLeases;
  /** The words of a run refused before its command started, as every host words them. */
  runRefusals: typeof runRefusals;
  /** The words of a `recover` that stopped or whose wait reached its bound, as every host words them. */
  recoveryAdvice: typeof recoveryAdvice;
}

export class Host {
  /** Opens a host; the state home is created (0700) when absent, and refused when it cannot be used safely. */
  static open(options?: HostOptions): Promise<Host>;
  readonly exports: Exports;
  readonly stateHome: string;
  readonly workspaceRoots: string[];
  selfIdentity(): Owner;
  liveness(owner: Owner): Liveness;
  /** Leases `path` for the callback; settled and released however it ends, unless a command it started may still run there (then held, with a warning). */
  withDirectoryLease<T>(path: string, options: DirectoryLeaseOptions, fn: (lease: DirectoryLease) => T | Promise<T>): Promise<T>;
  withDirectoryLease<T>(path: string, fn: (lease: DirectoryLease) => T | Promise<T>): Promise<T>;
  /** Holds the export admission for the callback; released when it ends, unless a helper may still run (then held, with a warning: `admission.release()` once it ended). */
  withAdmission<T>(fn: (admission: Admission) => T | Promise<T>): Promise<T>;
  admission<T>(fn: (admission: Admission) => T | Promise<T>): Promise<T>;
  /** Recovers what provably belongs to dead owners; recoverers take turns. Throws a `ProcleaseError` (its `lockTimeout` set) when another recoverer kept its turn past `lockTimeoutMs`; one whose `recovery` (and `recoveryStep`) is set when a later step failed after the directory leases were dealt with. */
  recover(options?: RecoverOptions): Recovery;
  /** What `doctor` shows, changing nothing. Throws a `ProcleaseError` (kind `storage`, its `lockTimeout` set) when a wait for another process's lock reached `lockTimeoutMs`, rather than show a held collection as refused. */
  survey(): Survey;
  close(): void;
}

export function doctorReport(home: string, survey: Survey, nowMs: number, containment?: string): unknown;
export function doctorText(report: unknown): string;
export function recoveryReport(home: string, recovery: Recovery): unknown;
export function recoveryText(home: string, recovery: Recovery): string;
/** JSON text as the native host prints it (BigInts as numbers). */
export function toJson(value: unknown): string;
