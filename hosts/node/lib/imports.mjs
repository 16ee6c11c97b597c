// The WIT imports of the portable artifact that are this host's own facts, in the JS shapes jco
// gives them (`tests/js/host.mjs` shows each): records are objects with camelCase fields, enums
// strings, `option` `undefined` or the value, variants `{tag, val}`, u64/s64 BigInt; an import
// fails by throwing `{ payload: E }` (a string for these). The system calls (`sys-fs`,
// `sys-kernel`) are `sys.mjs`'s. The counterparts of the native host's
// `host/src/imports/{process_identity,clock,entropy}` WIT glue.
import { randomBytes } from 'node:crypto';
import { importCallText } from './errors.mjs';

/** The import object's `process-identity`, `clock` and `entropy`. */
export function hostImports({ processes, clock = () => Date.now() }) {
  const ownerOut = (owner) => ({ pid: BigInt(owner.pid), bootId: owner.bootId, processStartId: owner.processStartId });
  return {
    'process-identity': {
      currentBootId: () => importCallText(() => processes.currentBootId()),
      selfIdentity: () => importCallText(() => ownerOut(processes.selfIdentity())),
      capture: (pid) => importCallText(() => ownerOut(processes.capture(pid))),
      probe: (owner) => importCallText(() => processes.probe(owner)),
      finishedRun: (leaseId) => importCallText(() => ({ outcome: processes.finishedRun(leaseId) })),
      forgetRun: (leaseId) => {
        processes.forgetRun(leaseId);
      },
    },
    clock: {
      nowMs: () => BigInt(clock()),
    },
    entropy: {
      randomBytes: (len) => new Uint8Array(randomBytes(len)),
    },
  };
}
