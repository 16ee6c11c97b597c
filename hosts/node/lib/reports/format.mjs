// What the reports share: the `--json` convention of the native command line (pretty, two
// spaces, keys sorted, pids as numbers, absent values as `null`; `print_serialized` in
// `host/src/cli/mod.rs`), the table layout (`columns` in `host/src/api/report/mod.rs`), and the
// words of WIT values the reports print.

/** The `schemaVersion` of every `--json` document (the native `JSON_SCHEMA_VERSION`). */
export const JSON_SCHEMA_VERSION = 1;
/** The directory-lease collection (§6A.6) and the reference's bound on it. */
export const LEASES = 'recovery/beeper-message-like-me-directory-leases';
export const MAX_CLAIMS = 64;
/** The export admission's claim (§6A.5). */
export const CLAIM_PATH = 'recovery/beeper-message-like-me-export-admission/active.json';

/** A value with every object's keys sorted (recursively), BigInts as numbers, undefined as null. */
function sorted(value) {
  if (typeof value === 'bigint') return Number(value);
  if (value === undefined) return null;
  if (Array.isArray(value)) return value.map(sorted);
  if (value !== null && typeof value === 'object') {
    const out = {};
    for (const key of Object.keys(value).sort()) out[key] = sorted(value[key]);
    return out;
  }
  return value;
}

/** A `--json` document as the native binary prints it (without the trailing newline). */
export const toJson = (document) => JSON.stringify(sorted(document), null, 2);

/**
 * Lays `rows` out in columns under `header`, each cell padded to its column's width (right-aligned
 * where `right` says) and followed by two spaces: one line per row, the header first.
 */
export function columns(header, rows, right) {
  const width = (text) => [...text].length;
  const widths = header.map(width);
  for (const row of rows) row.forEach((cell, i) => (widths[i] = Math.max(widths[i], width(cell))));
  return [header, ...rows].map((cells) =>
    cells
      .map((cell, i) => {
        const pad = ' '.repeat(widths[i] - width(cell));
        return `${right[i] ? pad + cell : cell + pad}  `;
      })
      .join(''),
  );
}

/** The message of a WIT `error` value (`{tag, val}`): the reference's text, without its cause. */
export const errorMessage = (error) => (error && error.val && typeof error.val.message === 'string' ? error.val.message : String(error));

/**
 * A lease error as proclease-core's `LeaseError` displays it: its message, then `: <cause>` when it
 * wraps a failure.
 */
export const leaseErrorText = (lease) => (lease.cause ? `${lease.message}: ${lease.cause.message}` : lease.message);

/** A recovery action's words (proclease-core `Action::words`), by the WIT case. */
export const ACTION_WORDS = {
  keep: 'keep',
  'remove-directory': 'remove directory',
  'count-published': 'count as published',
  'remove-claim': 'remove claim',
  'keep-directory': 'release, keep directory',
  'already-recovered': 'already recovered',
  skip: 'skip',
  stop: 'stop',
};

/** The refusal of a skipped or stopping recovery action, or null (`Action::refusal`). */
export const refusal = (action) => (action.tag === 'skip' || action.tag === 'stop' ? action.val : null);

/** The shell command that moves `path` out of the way into the state home's `.proclease/` (`set_aside`). */
export const setAside = (home, path, name) => `mv -- '${path}' '${home}/.proclease/set-aside-${name}'`;

/** The shell command that sets entry `name` of the directory-lease collection aside. */
export const setAsideLeaseEntry = (home, name) => setAside(home, `${home}/${LEASES}/${name}`, name);

/** How long ago `createdMs` was: `42s`, `5m`, `3h`, `2d`. */
export function age(nowMs, createdMs) {
  const seconds = Math.floor(Math.max(0, Number(nowMs) - Number(createdMs)) / 1000);
  if (seconds < 120) return `${seconds}s`;
  if (seconds < 7200) return `${Math.floor(seconds / 60)}m`;
  if (seconds < 172_800) return `${Math.floor(seconds / 3600)}h`;
  return `${Math.floor(seconds / 86_400)}d`;
}
