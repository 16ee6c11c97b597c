// Leasing a directory that `run` (or `withDirectoryLease`) may create: the component's
// `directory-leases.lease-new-directory`, which every host calls (the native `Host::lease_new_directory`,
// Python's `take_directory_lease(create=True)`). It checks — not the state home, not a file or a
// link, empty, claimed by no other lease — under the lease-creation lock
// (`.proclease/locks/directory-lease-creation.lock`, taken by the artifact through `sys.mjs`),
// creates the directory when absent and leases it, and words every refusal; this module only
// turns its answer into a `Refusal` or a `ProcleaseError`.
import { call, ComponentError, ProcleaseError } from './calls.mjs';

/** A refusal before anything was leased or run (`Refusal`, kind `refused`): its message; nothing is left behind. */
export class Refusal extends ProcleaseError {
  constructor(message, options = {}) {
    super(message, { kind: 'refused', ...options });
  }
}

/**
 * Leases the directory `dir` (absolute), creating it (0700, with its missing ancestors) when
 * absent: the `raw-working` lease resource, and `created`, the directories this call found absent
 * (innermost first) — for the caller to remove again, if still empty, when nothing ran. Throws a
 * `Refusal` (its `code` is the component's `new-directory-refusal`: `already-leased`, `not-empty`,
 * …) or a `ComponentError` (a wait for the lease-creation lock past the host's bound: kind
 * `storage`, `failure.kind` `contended`, its message `waited N ms for …` naming the holder);
 * nothing is left behind then.
 */
export function leaseNewDirectory(host, dir, { recoverAfterMs = 60_000 } = {}) {
  // What the lease will create: the directory and its missing ancestors (the artifact's
  // workspace cannot tell outside the granted roots; the lease then refuses in its own words).
  const kind = (path) => {
    try {
      return host.exports.workspace.kind(path);
    } catch {
      return null;
    }
  };
  const created = [];
  for (let p = dir; p !== '/' && kind(p) === 'absent'; p = p.slice(0, p.lastIndexOf('/')) || '/') created.push(p);
  const now = Date.now();
  const request = { role: 'raw-working', path: dir, outputRoot: undefined, recoverAfterMs: now + recoverAfterMs, nowMs: now };
  let resource;
  try {
    resource = call(() => host.exports.directoryLeases.leaseNewDirectory(request, host.stateHome));
  } catch (error) {
    // jco throws the err case of `new-directory-error` as is: `{tag: 'refused', val: {kind, message}}`,
    // or `{tag: 'failed', val: <the WIT error>}`.
    const value = error?.payload ?? error;
    if (value?.tag === 'refused') throw new Refusal(value.val.message, { code: value.val.kind });
    // The wait past the bound that failed it, if one did (`operationBound` marks what it throws).
    if (value?.tag === 'failed') throw Object.assign(new ComponentError(value.val), { lockTimeout: error.lockTimeout ?? value.lockTimeout });
    throw error;
  }
  return { resource, created };
}
