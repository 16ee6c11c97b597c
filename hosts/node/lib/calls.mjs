// Calling the component's exports from this package's API: the error value an export throws
// (the WIT `error` variant) becomes a `ComponentError` (a `ProcleaseError`); resource handles are dropped with
// `Symbol.dispose` (jco gives exported resources one).
import { ProcleaseError } from './errors.mjs';
import { leaseErrorText } from './reports/format.mjs';

/**
 * An error a component export returned: `error` is the WIT `error` value (`{tag: 'lease' |
 * 'storage' | 'system', val}`), `code` a lease refusal's code (`another-export-is-active`, …),
 * `reference` the refusal's own message, `failure` the storage or system failure (or the failure a
 * refusal wraps).
 */
export class ComponentError extends ProcleaseError {
  constructor(error) {
    const lease = error.tag === 'lease' ? error.val : null;
    super(lease ? leaseErrorText(lease) : error.val.message, { kind: error.tag, code: lease ? lease.code : undefined, failure: lease ? lease.cause : error.val });
    this.error = error;
    this.reference = error.val.message;
    /** The words of the wait for another process's lock that reached its bound in the call that failed (`waited N ms for …, held by pid P …`), if one did. */
    this.lockTimeout = error.lockTimeout;
  }
}

export { ProcleaseError };

/** Whether `value` is a WIT `error` value an export threw. */
export const isWitError = (value) =>
  value !== null && typeof value === 'object' && ['lease', 'storage', 'system'].includes(value.tag) && value.val && typeof value.val.message === 'string';

/** Calls an export, turning the error value it throws into a `ComponentError`. */
export function call(body) {
  try {
    return body();
  } catch (error) {
    if (isWitError(error)) throw new ComponentError(error);
    throw error;
  }
}

/** Drops a component resource handle. */
export function drop(resource) {
  try {
    resource?.[Symbol.dispose]?.();
  } catch {
    // Already dropped.
  }
}
