// Process identity on Linux (`process-identity` import; spec §2): the boot id, this process's own
// identity, capture of a live pid, and the facts a recorded owner is judged on. Port of
// `host/src/imports/process_identity/mod.rs` (and, for `finished-run`, the read side of
// `run_journal.rs`).
//
// This module only observes: it reads `/proc/sys/kernel/random/boot_id`, `/proc/<pid>/stat` and
// `/proc/<pid>/task` (both through the pid's `/proc` directory, opened once), `/proc/self`'s
// namespaces and time offsets, asks the kernel whether a pid exists (`kill(pid, 0)`), and tests
// witnesses' locks (`witness.mjs`, through util-linux's `flock(1)`). The rules that turn observations into identities and
// statuses are the component's: §2.2's boot-id digest is `records.linux-boot-id`, §2.3's stat
// parser `records.parse-proc-stat`, the process start id `records.process-start-id`, and every
// liveness judgement `dispositions.judge-owner` — all pure exports, called on a second component
// instance (`pure`), since an instance cannot be entered again from inside its own import call.
//
// Deviations from the native host: this host takes no witness for itself, nor for the command
// its `run` starts (only for an admission's helper, `Admission.spawnHelper`), so its own identity
// and its `run`'s children are probed `witness: absent`; and it keeps no run journal of its own
// (it reads the native host's, `finishedRun`).
import * as fs from 'node:fs';
import { execFileSync } from 'node:child_process';
import { IdentityError, osErrorText } from '../errors.mjs';
import { Dir, euid, openDir, readUpTo, using } from '../fsops.mjs';
import { WitnessObserver } from './witness.mjs';

/** The reference's message for a pid that is not a safe integer ≥ 1 (§2.4). */
export const PID_MALFORMED = 'process identity PID is malformed';
/** The reference's message when the pid is not a live process (§2.4). */
export const NOT_LIVE = 'exact live process identity is unavailable';
/** The kernel's `PROC_PID_INIT_INO`: the initial PID namespace's nsfs inode. */
export const INITIAL_PID_NAMESPACE = 0xeffffffcn;

const MAX_SAFE = 9007199254740991n;

/** The run journal's record size (`run_journal::RECORD_BYTES`). */
const JOURNAL_RECORD_BYTES = 512;

const inode = (path) => {
  try {
    return fs.statSync(path, { bigint: true }).ino;
  } catch {
    return undefined;
  }
};

/**
 * What this process's `/proc` shows and which namespaces it lives in (`Host::read`): the view the
 * component judges with (`proc-view`), and this process's PID and time namespaces.
 */
export function readHostView() {
  const pidNamespace = inode('/proc/self/ns/pid');
  const timeNamespace = inode('/proc/self/ns/time');
  // `/proc` shows this PID namespace when it lists this process with one pid (NSpid has one entry
  // per namespace level from /proc's down to the process's own), and that pid is the one the
  // kernel gives this process.
  let ownProc = false;
  try {
    const status = fs.readFileSync('/proc/self/status', 'utf8');
    const line = status.split('\n').find((l) => l.startsWith('NSpid:'));
    if (line !== undefined) {
      const pids = line.slice('NSpid:'.length).trim().split(/\s+/);
      ownProc = pids.length === 1 && pids[0] === String(process.pid);
    } else {
      // A kernel without NSpid: /proc/self must at least name this pid.
      ownProc = fs.readlinkSync('/proc/self') === String(process.pid);
    }
  } catch {
    ownProc = false;
  }
  let boottimeOffsetNs = 0n;
  try {
    for (const line of fs.readFileSync('/proc/self/timens_offsets', 'utf8').split('\n')) {
      const fields = line.trim().split(/\s+/);
      if (fields[0] === 'boottime' && /^-?[0-9]+$/.test(fields[1] ?? '') && /^-?[0-9]+$/.test(fields[2] ?? '')) {
        boottimeOffsetNs = BigInt(fields[1]) * 1_000_000_000n + BigInt(fields[2]);
        break;
      }
    }
  } catch {
    boottimeOffsetNs = 0n;
  }
  return {
    view: { pidNamespace: ownProc ? pidNamespace : undefined, boottimeOffsetNs, clockTicksPerSecond: clockTicks(boottimeOffsetNs) },
    pidNamespace,
    timeNamespace,
  };
}

/**
 * USER_HZ, the unit of `/proc/<pid>/stat`'s start time: 100 on every Linux this runs on. It only
 * matters inside a time namespace (to bring start times back to the initial one), where it is
 * read once with `getconf CLK_TCK`.
 */
function clockTicks(boottimeOffsetNs) {
  if (boottimeOffsetNs === 0n) return 100n;
  try {
    const text = execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'], timeout: 2000 }).trim();
    if (/^[1-9][0-9]*$/.test(text)) return BigInt(text);
  } catch {
    // The Linux value.
  }
  return 100n;
}

/**
 * `/proc/<entry>/stat` as text and the count of `/proc/<entry>/task`, through the entry's `/proc`
 * directory (one process, even if the pid is reused meanwhile); null when the stat cannot be read.
 */
function readProc(entry) {
  let dir;
  try {
    // `/proc/self` is a (magic) symbolic link: followed here, unlike every other directory.
    dir = new Dir(fs.openSync(`/proc/${entry}`, fs.constants.O_RDONLY | fs.constants.O_DIRECTORY));
  } catch {
    return null;
  }
  return using(dir, () => {
    let text;
    try {
      text = fs.readFileSync(dir.at('stat'), 'utf8');
    } catch {
      return null;
    }
    let tasks = 0;
    try {
      tasks = using(openDir(dir, 'task'), (taskDir) => fs.readdirSync(taskDir.self).length);
    } catch {
      tasks = 0;
    }
    return { text, tasks };
  });
}

/**
 * `/proc/<pid>/stat` and the task count, or why they cannot be read (`observe`): only the kernel's
 * answer to `kill(pid, 0)` proves a pid absent (`ESRCH`). `EPERM`, or an unreadable stat, proves
 * nothing. Returns `[proc-read, tasks]` in the WIT shape.
 */
function observe(pid) {
  if (pid < 1n || pid > 2147483647n) return [{ tag: 'missing' }, 0];
  const read = readProc(String(pid));
  if (read !== null) return [{ tag: 'stat', val: read.text }, read.tasks];
  try {
    process.kill(Number(pid), 0);
  } catch (error) {
    if (error.code === 'ESRCH') return [{ tag: 'missing' }, 0];
  }
  return [{ tag: 'unreadable' }, 0];
}

/** `proc_stat::start_field`: stat field 22 (`starttime`) of a stat text, or null. */
function startField(stat) {
  const text = stat.trim();
  const close = text.lastIndexOf(')');
  if (close < 1) return null;
  const fields = text.slice(close + 1).trim().split(/\s+/);
  const start = fields[19];
  return start !== undefined && /^[0-9]+$/.test(start) ? start : null;
}

/**
 * `ProcView::offset_ticks` and `liveness::normalized_start`: a start time as the initial time
 * namespace shows it (the reader's value less its boottime offset in ticks); null when the offset
 * is not whole ticks or the result is negative.
 */
function normalizedStart(rawStart, view) {
  const ticks = view.clockTicksPerSecond;
  if (ticks === 0n || 1_000_000_000n % ticks !== 0n) return null;
  const tickNs = 1_000_000_000n / ticks;
  if (view.boottimeOffsetNs % tickNs !== 0n) return null;
  const offset = view.boottimeOffsetNs / tickNs;
  if (offset === 0n) return rawStart;
  const corrected = BigInt(rawStart) - offset;
  return corrected >= 0n ? String(corrected) : null;
}

/** Process identity for this host, with the boot id and own identity cached after first success (§2.2, §2.3). */
export class ProcessIdentity {
  /**
   * @param pure the exports of a component instance used for pure functions only (`records`,
   *   `dispositions`): never the instance whose imports this object serves
   * @param home the `StateHome`, whose native witnesses and run journal are read; null for none
   */
  constructor(pure, home) {
    this.pure = pure;
    this.witnesses = home ? new WitnessObserver(home) : null;
    this.home = home;
    this.bootId = null;
    this.own = null;
    this.hostView = null;
  }

  /** This process's namespaces and `/proc` view (read once). */
  host() {
    this.hostView ??= readHostView();
    return this.hostView;
  }

  /** The current boot id (64 lowercase hex), §2.2. Throws `system boot identity is malformed` or `… is unavailable: …`. */
  currentBootId() {
    if (this.bootId !== null) return this.bootId;
    let raw;
    try {
      raw = fs.readFileSync('/proc/sys/kernel/random/boot_id', 'utf8');
    } catch (error) {
      throw new IdentityError(`system boot identity is unavailable: ${osErrorText(error)}`);
    }
    let bootId;
    try {
      bootId = this.pure.records.linuxBootId(raw);
    } catch (error) {
      throw new IdentityError(typeof error?.payload === 'string' ? error.payload : 'system boot identity is malformed');
    }
    this.bootId = bootId;
    return bootId;
  }

  /** The `/proc` view, required to show this process's own PID namespace before an identity is recorded. */
  ownView() {
    const host = this.host();
    if (host.view.pidNamespace === undefined) {
      throw new IdentityError(
        "/proc does not show this process's own PID namespace (started with `unshare --pid --fork` but without " +
          '`--mount-proc`?): a pid recorded here would name another process; mount a /proc for this namespace ' +
          '(unshare --pid --fork --mount-proc …) or run outside it',
      );
    }
    // Without a witness, a record says nothing of the PID namespace its pid belongs to: every
    // prober judges it by its own `/proc`, as the initial namespace's. A process of another PID
    // namespace (a container) would be judged dead by a host outside it while it runs, and its
    // directory removed (`docs/deviations.md` item 1): such a record is refused.
    if (host.view.pidNamespace !== INITIAL_PID_NAMESPACE) {
      throw new IdentityError(
        `this process runs in a PID namespace other than the initial one (nsfs inode ${host.view.pidNamespace}): the Node host takes no witness, ` +
          'so a pid it recorded would be judged by other hosts in their own namespace; run it in the initial PID namespace, or use the native ' +
          'or Python host, whose witnesses record the namespace',
      );
    }
    return host;
  }

  /**
   * The identity of a live process from its stat and task count (`liveness::start_id`): the
   * candidate start id is computed with the component's parser and digest, and the component's
   * judgement must then find exactly that process alive in these facts. Null otherwise.
   */
  startId(pid, read, view, bootId) {
    if (read === null) return null;
    const parsed = this.pure.records.parseProcStat(read.text, bootId);
    let raw;
    if (parsed.tag === 'alive') raw = parsed.val.rawStart;
    else if (parsed.tag === 'dead' && read.tasks > 1) raw = startField(read.text);
    else return null;
    if (raw === null) return null;
    const start = normalizedStart(raw, view);
    if (start === null) return null;
    const candidate = { pid, bootId, processStartId: this.pure.records.processStartId(bootId, start) };
    const facts = this.facts(bootId, 'absent', undefined, ['absent', false], { tag: 'stat', val: read.text }, read.tasks, view);
    const judged = this.pure.dispositions.judgeOwner(candidate, facts);
    return judged.status === 'exact-live-owner' ? candidate : null;
  }

  /**
   * This process's own identity, from `/proc/self` (computed once). No witness is taken for it
   * (its records are judged by `/proc` alone, as ghostget's are).
   */
  selfIdentity() {
    if (this.own !== null) return this.own;
    const host = this.ownView();
    const bootId = this.currentBootId();
    const own = this.startId(BigInt(process.pid), readProc('self'), host.view, bootId);
    if (own === null) throw new IdentityError(NOT_LIVE);
    this.own = own;
    return own;
  }

  /** The identity of the live process `pid` (a BigInt) of this process's PID namespace (`captureProcessOwnerIdentity`, §2.4). */
  capture(pid) {
    pid = BigInt(pid);
    if (pid === 0n || pid < 0n || pid > MAX_SAFE) throw new IdentityError(PID_MALFORMED);
    const host = this.ownView();
    const bootId = this.currentBootId();
    if (pid > 2147483647n) throw new IdentityError(NOT_LIVE);
    const owner = this.startId(pid, readProc(String(pid)), host.view, bootId);
    if (owner === null) throw new IdentityError(NOT_LIVE);
    return owner;
  }

  /** A WIT `owner-facts` record. */
  facts(bootId, witness, recordedPidNamespace, [spawned, spawnedUncontained], stat, tasks, view, tree = 'absent') {
    return { bootId, witness, recordedPidNamespace, spawned, spawnedUncontained, stat, tasks, view, remote: 'not-clustered', tree };
  }

  /**
   * Everything observable about a recorded process (WIT `probe`): the current boot id, what can
   * be told of its witness and spawn witnesses, `/proc/<pid>/stat` and its task count, and this
   * host's `/proc` view, and what the cgroup a native supervisor recorded for it shows (`tree`).
   * Nothing of this machine is read for an owner of another boot. No cluster
   * (`remote: not-clustered`). Throws only when the boot id cannot be read.
   */
  probe(owner) {
    const bootId = this.currentBootId();
    const view = this.host().view;
    if (owner.bootId !== bootId) return this.facts(bootId, 'absent', undefined, ['absent', false], { tag: 'unreadable' }, 0, view);
    const [witness, recorded, tree] = this.witnesses ? this.witnesses.test(owner) : ['absent', undefined, 'absent'];
    const spawned = this.witnesses ? this.witnesses.testSpawned(owner) : ['absent', false];
    const [stat, tasks] = observe(BigInt(owner.pid));
    return this.facts(bootId, witness, recorded, spawned, stat, tasks, view, tree);
  }

  /**
   * What the native host's run journal says of the command run under lease `leaseId`
   * (`RunJournal::finished_run`): a WIT `run-outcome` only for a complete, valid `finished` entry.
   * Throws (a string message) when the journal's directory or an entry exists but cannot be opened,
   * is not a private regular file, or cannot be read.
   */
  finishedRun(leaseId) {
    if (!this.home || !/^[0-9a-fA-F-]{1,64}$/.test(leaseId)) return undefined;
    const name = `${leaseId}.run`;
    const label = `.proclease/runs/${name}`;
    let runs;
    try {
      runs = using(openDir(this.home.dir, '.proclease'), (internal) => openDir(internal, 'runs'));
    } catch (error) {
      // No journal: nothing finished is recorded. One that is there but cannot be opened (a
      // symbolic link, no permission) proves nothing either way: recovery must keep the run's
      // directory rather than take it for a crashed start.
      if (error.code === 'ENOENT') return undefined;
      throw new IdentityError(`.proclease/runs: open failed: ${osErrorText(error)}`);
    }
    return using(runs, () => {
      let fd;
      try {
        fd = fs.openSync(runs.at(name), fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK);
      } catch (error) {
        if (error.code === 'ENOENT') return undefined;
        throw new IdentityError(`${label}: open failed: ${osErrorText(error)}`);
      }
      try {
        const stat = fs.fstatSync(fd);
        if (!stat.isFile() || stat.uid !== euid() || (stat.mode & 0o077) !== 0) throw new IdentityError(`${label}: not a private regular file of yours`);
        let content;
        try {
          content = readUpTo(fd, JOURNAL_RECORD_BYTES + 1);
        } catch (error) {
          throw new IdentityError(`${label}: read failed: ${osErrorText(error)}`);
        }
        return parseJournal(content, leaseId);
      } finally {
        fs.closeSync(fd);
      }
    });
  }

  /** Removes the native run journal's entry of `leaseId` once its lease is gone (`RunJournal::forget`, best effort). */
  forgetRun(leaseId) {
    if (!this.home || !/^[0-9a-fA-F-]{1,64}$/.test(leaseId)) return;
    try {
      using(openDir(this.home.dir, '.proclease'), (internal) =>
        using(openDir(internal, 'runs'), (runs) => {
          fs.unlinkSync(runs.at(`${leaseId}.run`));
        }),
      );
    } catch {
      // Best effort: a leftover entry of a released lease names no claim and keeps nothing.
    }
  }
}

/** `run_journal::parse`: a `finished` record for `leaseId`, or undefined for anything else. */
function parseJournal(bytes, leaseId) {
  if (bytes.length !== JOURNAL_RECORD_BYTES || bytes[bytes.length - 1] !== 0x0a) return undefined;
  let value;
  try {
    value = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes));
  } catch {
    return undefined;
  }
  if (value === null || typeof value !== 'object' || value.version !== 1 || value.leaseId !== leaseId || value.state !== 'finished') return undefined;
  const directory = value.directory;
  const text = (v, key) => (v !== null && typeof v === 'object' && typeof v[key] === 'string' ? v[key] : null);
  const identity = { device: text(directory, 'device'), inode: text(directory, 'inode'), birthtimeNs: text(directory, 'birthtimeNs') };
  if (identity.device === null || identity.inode === null || identity.birthtimeNs === null) return undefined;
  const code = (key) => {
    const v = value[key];
    if (v === null || v === undefined) return { ok: true, value: undefined };
    return Number.isInteger(v) && v >= -2147483648 && v <= 2147483647 ? { ok: true, value: v } : { ok: false };
  };
  const exit = code('exitCode');
  const signal = code('signal');
  if (!exit.ok || !signal.ok || (exit.value === undefined && signal.value === undefined)) return undefined;
  return { directoryIdentity: identity, exitCode: exit.value, signal: signal.value };
}
