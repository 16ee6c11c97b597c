// What this host still checks of the state home's names itself (`home.mjs`, the witnesses):
// the reference's state directory names (§3.1), which a state home that is not empty must hold
// to be taken for one, and the digest predicate of the witness names. The store's own path rules
// are the portable artifact's (`guest/protocols/src/state_store/path.rs`).

/** The state directory names of the reference (§3.1, newer list). */
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

/** 64 lowercase hex characters. */
export const isDigest = (text) => typeof text === 'string' && /^[0-9a-f]{64}$/.test(text);
