// Store paths: relative, `/`-separated paths below the state home (spec §3.2, adapted).
// Port of `guest/protocols/src/state_store/path.rs`, plus the small text predicates of
// proclease-core's `js` module that the store's name patterns use.
//
// A store path has 1..=32 segments; each is non-empty, not `.` or `..`, has no `/`, `\`, NUL or
// control character, and is at most 255 bytes. The first segment must be one of the state
// directory names the reference recognises (§3.1), so the store can never reach its own
// bookkeeping (`.proclease/`) or anything else in the state home.

/** The state directory names of the reference (§3.1, newer list), the only first segments a store path may have. */
export const STATE_DIRECTORIES = [
  'adapter-generations',
  'adapters',
  'auth',
  'browser-snapshots',
  'captures',
  'control',
  'derivations',
  'idempotency',
  'linked-device-stores',
  'menubar',
  'messaging',
  'omni-read-projections',
  'operation-permissions',
  'plan-assets',
  'plans',
  'provider-plugin-state',
  'provider-plugins',
  'read-projection-control',
  'read-projections',
  'recovery',
  'repair-signals',
  'run-journals',
  'runs',
  'session-secrets',
  'tools',
];

/** The most segments a store path may have. */
export const MAX_SEGMENTS = 32;

/**
 * Whether `name` is a safe single directory entry name (§3.3 snapshot rules): non-empty, not
 * `.`/`..`, no `/`, `\`, U+FFFD or control characters (≤ U+001F, U+007F), ≤ 255 bytes.
 */
export function isSafeName(name) {
  if (typeof name !== 'string' || name === '' || name === '.' || name === '..' || Buffer.byteLength(name, 'utf8') > 255) return false;
  for (const c of name) {
    const code = c.codePointAt(0);
    if (c === '/' || c === '\\' || code === 0xfffd || code === 0x7f || code < 0x20) return false;
    // A lone surrogate is not UTF-8: it cannot name a file the native host would name.
    if (code >= 0xd800 && code <= 0xdfff) return false;
  }
  return true;
}

/** Splits and checks a store path; throws the reason (for a `refused` store error). */
export function segments(path) {
  if (path.startsWith('/')) throw new RefusedPath('absolute paths are refused: give a path relative to the state home');
  const parts = path.split('/');
  if (parts.length > MAX_SEGMENTS) throw new RefusedPath(`more than ${MAX_SEGMENTS} path segments`);
  const bad = parts.find((s) => !isSafeName(s));
  if (bad !== undefined) throw new RefusedPath(`unsafe path segment ${JSON.stringify(bad)} (empty, \`.\`, \`..\`, a separator or a control character)`);
  if (!STATE_DIRECTORIES.includes(parts[0])) {
    throw new RefusedPath(`state path is outside the owned state layout: ${JSON.stringify(parts[0])} is not a state directory name`);
  }
  return parts;
}

/** Why a store path is refused. */
export class RefusedPath extends Error {}

/** `^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$` (§6A.1, §6B.1). */
export const isUuidV4 = (text) => typeof text === 'string' && /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/.test(text);

/** 64 lowercase hex characters. */
export const isDigest = (text) => typeof text === 'string' && /^[0-9a-f]{64}$/.test(text);

/** Lowercase hex only (`[0-9a-f]*`). */
export const isHex = (text) => /^[0-9a-f]*$/.test(text);

/** A pid as the reference's name patterns write it: `[1-9][0-9]{0,9}`; null otherwise. */
export function namePid(text) {
  return /^[1-9][0-9]{0,9}$/.test(text) ? BigInt(text) : null;
}

/** The largest safe integer of JavaScript (2^53 - 1). */
export const MAX_SAFE_INTEGER = 9007199254740991n;

/** Compares by UTF-16 code units, as JavaScript's `<` on strings does (`js::cmp_utf16`). */
export const cmpUtf16 = (a, b) => (a < b ? -1 : a > b ? 1 : 0);
