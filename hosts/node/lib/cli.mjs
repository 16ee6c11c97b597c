// The command line of the Node host (`bin/proclease.mjs` runs `main`): `run`, `doctor`,
// `recover`, with the native binary's options, output formats and exit statuses
// (`host/src/cli/{mod,run,doctor,recover}.rs`).
//
// Exit status: 0 ok; 1 error; 2 usage; 3 another export is active; 4 a prior export owner cannot
// be inspected safely; 5 another process held a lock of the state home past `--lock-timeout`;
// `run` exits with the command's status once it ran (128+N when signal N ended it), or 6 when its
// lease could not be released.
import { readFileSync, realpathSync } from 'node:fs';
import { constants as osConstants } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Host, ProcleaseError, doctorReport, doctorText, recoveryReport, recoveryText, toJson } from './index.mjs';
import { Refusal, runCommand } from './supervisor.mjs';
import { readStamp } from './transpile.mjs';

/** Exit status when a live owner holds what was asked for (`… another export is active`). */
const EXIT_BLOCKED = 3;
/** Exit status when a prior owner cannot be proven dead (`… cannot be inspected safely`). */
const EXIT_INDETERMINATE = 4;
/** Exit status when another process held a lock of the state home past `--lock-timeout` (the message names it). */
const EXIT_LOCK_TIMEOUT = 5;
/** Exit status of a run whose command finished but whose lease could not be released. */
const UNRELEASED = 6;

const HELP = `proclease (Node host) — crash-safe, process-owned leases on shared local state (ghostget 0.17.2 compatible)

Usage: proclease [OPTIONS] <COMMAND>

Commands:
  run      Run a command in a leased directory, recording it as the lease's child
  recover  Recover leases whose owners are provably gone
  doctor   List the admission claim, every directory lease and every invocation lease, and why

Options:
  --state-home DIR       The state home (default: $PROCLEASE_STATE_HOME, $GHOSTGET_STATE_HOME,
                         $XDG_DATA_HOME/proclease, ~/.local/share/proclease)
  --workspace-root DIR   A directory under which leased directories may be created, inspected and
                         removed; repeatable (default: your home directory and the temporary directory)
  --lock-timeout DURATION
                         How long one wait for a lock of the state home another process holds may
                         last before failing with exit status 5 and the holder's pid; after 1 s the
                         wait says who it waits for [default: 10s]
  -h, --help             Print help
  -V, --version          Print version

Examples:
  proclease run --workdir ~/jobs/build -- make
  proclease doctor --json
  proclease recover --dry-run

Exit status: 0 ok; 1 error; 2 usage error; 3 blocked by a live owner; 4 a prior owner cannot be
proven dead; 5 another process held a lock of the state home past --lock-timeout. \`run\` exits
with the command's status once it ran (128+N if signal N ended it), or 6 when the lease could not
be released after the command ran.
`;

const RUN_HELP = `Usage: proclease run --workdir DIR [--recover-after DURATION] -- CMD...

  --workdir DIR             Lease this working directory (created 0700 if absent; an existing one must
                            be empty, yours, mode 0700) and run the command in it
  --recover-after DURATION  How long a crash between launching the command and recording it keeps the
                            directory from recovery (default 60s)

The Node host runs the command without a box, cgroup or witness (README, "Kernel locks"). It has no
--exclusive: a killed holder of the export admission whose helper no witness covers can never be
proven gone, and would block every later --exclusive run until a reboot (README).
`;

const RECOVER_HELP = `Usage: proclease recover [--dry-run] [--skip-invalid] [--keep DIR]... [--json]
`;
const DOCTOR_HELP = `Usage: proclease doctor [--json]
`;

class Usage extends Error {}

/** A humantime-like duration (`60s`, `5m`, `1h30m`, `500ms`) in ms. */
export function parseDuration(text) {
  // humantime's units and grammar (`humantime::parse_duration`, which the native binary's options
  // use): terms of a number (with an optional fraction) and a unit, or `0` alone.
  const units = {
    ...Object.fromEntries(['nanos', 'nsec', 'ns'].map((u) => [u, 1e-6])),
    ...Object.fromEntries(['usec', 'us', 'µs'].map((u) => [u, 1e-3])),
    ...Object.fromEntries(['millis', 'msec', 'ms'].map((u) => [u, 1])),
    ...Object.fromEntries(['seconds', 'second', 'secs', 'sec', 's'].map((u) => [u, 1000])),
    ...Object.fromEntries(['minutes', 'minute', 'min', 'mins', 'm'].map((u) => [u, 60_000])),
    ...Object.fromEntries(['hours', 'hour', 'hr', 'hrs', 'h'].map((u) => [u, 3_600_000])),
    ...Object.fromEntries(['days', 'day', 'd'].map((u) => [u, 86_400_000])),
    ...Object.fromEntries(['weeks', 'week', 'wk', 'wks', 'w'].map((u) => [u, 604_800_000])),
    ...Object.fromEntries(['months', 'month', 'M'].map((u) => [u, 2_630_016_000])),
    ...Object.fromEntries(['years', 'year', 'yr', 'yrs', 'y'].map((u) => [u, 31_557_600_000])),
  };
  const trimmed = String(text).trim();
  if (trimmed === '0') return 0;
  const parts = /^(?:\d+(?:\.\d+)?\s*[A-Za-zµ]+\s*)+$/.test(trimmed) ? [...trimmed.matchAll(/(\d+(?:\.\d+)?)\s*([A-Za-zµ]+)/g)] : null;
  if (!parts) throw new Usage(`invalid duration ${JSON.stringify(text)}: give a number and a unit, e.g. 60s, 1m30s, 250ms`);
  let ms = 0;
  for (const [, n, unit] of parts) {
    if (!(unit in units)) throw new Usage(`invalid duration ${JSON.stringify(text)}: unknown unit ${JSON.stringify(unit)}`);
    ms += Number(n) * units[unit];
  }
  return Math.round(ms);
}

/** Splits the arguments: global options, the subcommand, its options, and (for `run`) the command after `--`. */
export function parseArguments(argv) {
  const global = { stateHome: undefined, workspaceRoots: [], pluginCatalog: undefined, lockTimeoutMs: 10_000 };
  const options = {};
  let command = null;
  let rest = null;
  const takes = { '--state-home': 'stateHome', '--workspace-root': 'workspaceRoots', '--plugin-catalog': 'pluginCatalog', '--lock-timeout': 'lockTimeoutMs' };
  const flags = {
    run: { '--workdir': 'value', '--recover-after': 'value' },
    doctor: { '--json': 'flag' },
    recover: { '--dry-run': 'flag', '--json': 'flag', '--skip-invalid': 'flag', '--keep': 'list' },
  };
  for (let i = 0; i < argv.length; i += 1) {
    let arg = argv[i];
    if (arg === '--') {
      rest = argv.slice(i + 1);
      break;
    }
    let inline;
    if (arg.startsWith('--') && arg.includes('=')) [arg, inline] = [arg.slice(0, arg.indexOf('=')), arg.slice(arg.indexOf('=') + 1)];
    const value = () => {
      if (inline !== undefined) return inline;
      if (i + 1 >= argv.length) throw new Usage(`a value is required for '${arg} <${arg === '--keep' ? 'DIR' : 'VALUE'}>' but none was supplied`);
      return argv[++i];
    };
    if (arg === '-h' || arg === '--help') return { help: command ?? 'main' };
    if (arg === '-V' || arg === '--version') return { version: true };
    if (arg === '-v' || arg === '-vv' || arg === '--verbose' || arg === '-q' || arg === '--quiet') continue;
    if (arg in takes) {
      const key = takes[arg];
      if (key === 'workspaceRoots') global.workspaceRoots.push(value());
      else if (key === 'lockTimeoutMs') global.lockTimeoutMs = parseDuration(value());
      else global[key] = value();
      continue;
    }
    if (command === null) {
      if (arg.startsWith('-')) throw new Usage(`unexpected argument '${arg}' found`);
      if (!(arg in flags)) {
        if (['invocations', 'fence', 'cluster', 'identity', 'validate', 'component', 'completions', 'man'].includes(arg)) {
          throw new Usage(`'${arg}' is a command of the native proclease binary; the Node host has run, recover and doctor`);
        }
        throw new Usage(`unrecognized subcommand '${arg}'`);
      }
      command = arg;
      continue;
    }
    const kind = flags[command][arg];
    if (kind === undefined) {
      if (command === 'run' && arg === '--exclusive') {
        throw new Usage("'--exclusive' is an option of the native proclease binary's run: the Node host has no witness, so a killed holder of the export admission could never be proven gone (README)");
      }
      if (command === 'run' && (arg === '--stage' || arg === '--output' || arg === '--containment' || arg === '--stragglers' || arg === '--wait')) {
        throw new Usage(`'${arg}' is an option of the native proclease binary's run; the Node host runs a command in a --workdir only`);
      }
      throw new Usage(`unexpected argument '${arg}' found`);
    }
    const key = arg.slice(2).replace(/-([a-z])/g, (_, c) => c.toUpperCase());
    if (kind === 'flag') {
      if (inline !== undefined) throw new Usage(`unexpected value '${inline}' for '${arg}' found; no more were expected`);
      options[key] = true;
    } else if (kind === 'list') (options[key] ??= []).push(value());
    else options[key] = value();
  }
  if (command === null) throw new Usage('a subcommand is required: run, recover or doctor');
  if (command === 'run') {
    if (options.workdir === undefined) throw new Usage("the following required arguments were not provided:\n  --workdir <DIR>");
    if (rest === null || rest.length === 0) throw new Usage("the following required arguments were not provided:\n  <CMD>...");
    options.recoverAfterMs = options.recoverAfter === undefined ? 60_000 : parseDuration(options.recoverAfter);
  } else if (rest !== null) throw new Usage(`unexpected argument '--' found`);
  return { global, command, options, rest };
}

/** What a failure prints and its exit status (the native `Failure::from`). */
function failure(error, { attributeWait = true } = {}) {
  if (error instanceof ProcleaseError) {
    // A wait for another process's kernel lock that reached its bound in the call that failed
    // (`operationBound` gives the error its words): exit 5, naming the holder, as natively.
    // Without `attributeWait`, only when the error's own message is the wait's.
    const ownMessage = error.kind === 'lease' ? error.reference : error.message;
    const timedOut = typeof error.lockTimeout === 'string' && (attributeWait || ownMessage.includes(error.lockTimeout));
    const status = timedOut
      ? EXIT_LOCK_TIMEOUT
      : error.code === 'another-export-is-active'
        ? EXIT_BLOCKED
        : error.code === 'prior-export-owner-cannot-be-inspected-safely'
          ? EXIT_INDETERMINATE
          : 1;
    let message = ownMessage;
    if (error.kind === 'lease' && error.failure && !message.includes(error.failure.message)) message += `\n  caused by: ${error.failure.message}`;
    if (timedOut && !message.includes(error.lockTimeout)) message += `: ${error.lockTimeout}`;
    return { message, status };
  }
  return { message: error.message, status: 1 };
}

function version() {
  const here = dirname(fileURLToPath(import.meta.url));
  const pkg = JSON.parse(readFileSync(join(here, '..', 'package.json'), 'utf8'));
  const stamp = readStamp();
  return `proclease ${pkg.version} (Node host; component sha256 ${stamp ? stamp.sha256 : 'not transpiled yet'}, WIT proclease:lease@0.3.0)`;
}

/** Runs `run`: exits with the command's status. */
async function run(host, options, command) {
  let finished;
  try {
    finished = await runCommand(host, options.workdir, command, { recoverAfterMs: options.recoverAfterMs });
  } catch (error) {
    const interrupted = error instanceof Refusal && /^interrupted by signal (\d+)/.exec(error.message);
    if (interrupted) {
      process.stderr.write(`proclease: ${error.message}\n`);
      return 128 + Number(interrupted[1]);
    }
    const told = failure(error);
    if (error instanceof ProcleaseError && error.code === 'directory-lease-target-is-not-an-owned-physical-directory') {
      told.message += `\n${host.exports.workspaceAdvice.whyNotPhysical(resolve(options.workdir))}`;
    } else if (error instanceof ProcleaseError && error.code === 'directory-lease-collection-exceeded-its-reviewed-bound') {
      told.message += `\n${host.exports.runRefusals.leaseCollectionFull()}`;
    }
    throw Object.assign(new Error(told.message), { status: told.status });
  }
  const { code, signal } = finished.status;
  if (finished.unreleased) {
    for (const problem of finished.problems) process.stderr.write(`proclease: ${failure(problem).message}\n`);
    const how = code !== null ? `exited ${code}` : signal ? `died of signal ${osConstants.signals[signal]}` : 'ended';
    const quote = (word) => (/^[A-Za-z0-9/._\-+=:,@%]+$/.test(word) ? word : `'${word.replace(/'/g, "'\\''")}'`);
    const finish = `proclease --state-home ${quote(host.stateHome)} recover --keep ${quote(finished.unreleased.directory)}`;
    process.stderr.write(
      `proclease: the command ${how}; its results in ${finished.unreleased.directory} are intact, but its lease could not be released and stays in ${host.stateHome} ` +
        '(this host keeps no run journal, so a plain `proclease recover` would remove the directory: use --keep). ' +
        `Once the state home takes writes again (free space, \`chattr -i\`, remount read-write), finish the release with: ${finish}\n`,
    );
    return UNRELEASED;
  }
  if (code !== null) return code;
  if (signal) return 128 + (osConstants.signals[signal] ?? 0);
  return 1;
}

/** Runs the command line `argv` (without the program); resolves the exit status. */
export async function main(argv) {
  let parsed;
  try {
    parsed = parseArguments(argv);
  } catch (error) {
    if (!(error instanceof Usage)) throw error;
    process.stderr.write(`error: ${error.message}\n\nFor more information, try '--help'.\n`);
    if (argv.includes('run') && !argv.includes('--') && /unexpected argument|required arguments/.test(error.message)) {
      process.stderr.write('hint: put the command after `--`, e.g. proclease run --workdir DIR -- make -j4\n');
    }
    return 2;
  }
  if (parsed.version) {
    process.stdout.write(`${version()}\n`);
    return 0;
  }
  if (parsed.help) {
    process.stdout.write({ run: RUN_HELP, recover: RECOVER_HELP, doctor: DOCTOR_HELP }[parsed.help] ?? HELP);
    return 0;
  }
  const { global, command, options, rest } = parsed;
  let host;
  try {
    host = await Host.open({ ...global, onWarning: (message) => process.stderr.write(`proclease: ${message}\n`) });
  } catch (error) {
    const told = failure(error);
    process.stderr.write(`proclease: ${told.message}\n`);
    return told.status;
  }
  try {
    if (command === 'run') return await run(host, options, rest);
    if (command === 'doctor') {
      const report = doctorReport(host.stateHome, host.survey(), Date.now());
      process.stdout.write(options.json ? `${toJson(report)}\n` : doctorText(report));
      return 0;
    }
    // recover: leases record canonical absolute paths.
    const keep = (options.keep ?? []).map((dir) => {
      try {
        return realpathSync(resolve(dir));
      } catch {
        return resolve(dir);
      }
    });
    const dryRun = options.dryRun === true;
    let recovery, failed;
    try {
      recovery = host.recover({ dryRun, skipInvalid: options.skipInvalid === true, keep });
    } catch (error) {
      if (error?.recovery === undefined) throw error;
      // What was done is reported before why the rest was not.
      [recovery, failed] = [error.recovery, error];
    }
    process.stdout.write(options.json ? `${toJson(recoveryReport(host.stateHome, recovery))}\n` : recoveryText(host.stateHome, recovery));
    const advice = host.exports.recoveryAdvice;
    const stopped = recovery.directoryLeases.stopped ? recovery.directoryLeases.stopped.val.message : undefined;
    if (failed !== undefined) {
      // Its own words, the wait's only when it is the wait's failure (an earlier wait that left a
      // lease as it is is said on its own line below, as natively).
      const told = failure(failed, { attributeWait: false });
      const newline = told.message.indexOf('\n');
      const [first, rest] = newline < 0 ? [told.message, ''] : [told.message.slice(0, newline), told.message.slice(newline)];
      process.stderr.write(`proclease: ${advice.stoppedAt(failed.recoveryStep, first, dryRun)}${rest}\n`);
      if (!recovery.lockTimeout) return told.status;
      process.stderr.write(`proclease: ${advice.waitedOut(stopped, recovery.lockTimeout, dryRun)}\n`);
      return EXIT_LOCK_TIMEOUT;
    }
    if (recovery.lockTimeout) {
      // A wait that reached its bound, not something wrong with an entry: retry once the holder
      // is done (exit 5, with or without --skip-invalid).
      process.stderr.write(`proclease: ${advice.waitedOut(stopped, recovery.lockTimeout, options.dryRun === true)}\n`);
      return EXIT_LOCK_TIMEOUT;
    }
    if (stopped === undefined) return 0;
    if (options.json) return 1;
    process.stderr.write(`proclease: ${advice.stopped(stopped, recovery.directoryLeases.cause ?? undefined, options.dryRun === true, options.skipInvalid === true)}\n`);
    return 1;
  } catch (error) {
    const told = error.status !== undefined ? { message: error.message, status: error.status } : failure(error);
    process.stderr.write(`proclease: ${told.message}\n`);
    return told.status;
  } finally {
    host.close();
  }
}

