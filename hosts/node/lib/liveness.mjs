// Whether a recorded process is alive, as this host's own bookkeeping needs to know it: the
// writer of a mutation claim or a temporary (§3.5, §3.9), the holder of the catalog lock (§5).
//
// No liveness rule is written here. `ownerStatus` probes the owner exactly as the
// `process-identity` import does for the component (`ProcessIdentity.probe`) and asks the
// component's pure export `dispositions.judge-owner` (proclease-core's `liveness::judge`, the
// function the native host calls in `ProcessIdentity::liveness`) on a second component instance:
// the instance whose import call is running cannot be entered again. Port of
// `host/src/imports/process_identity/mod.rs` `liveness` / `owner_status`.

/** WIT owner (`pid` a BigInt) of an internal owner. */
export const witOwner = (owner) => ({ pid: BigInt(owner.pid), bootId: owner.bootId, processStartId: owner.processStartId });

export class Liveness {
  /**
   * @param processes the host's `ProcessIdentity`
   * @param pure exports of the component instance used for pure functions only
   */
  constructor(processes, pure) {
    this.processes = processes;
    this.pure = pure;
  }

  /** What probing `owner` proves: `{status, lineageGone, proof}`. Throws when the boot id cannot be read. */
  liveness(owner) {
    const wit = witOwner(owner);
    return this.pure.dispositions.judgeOwner(wit, this.processes.probe(wit));
  }

  /** `processOwnerStatus(owner)` (§2.4) with the component's witness and namespace rules. */
  ownerStatus(owner) {
    return this.liveness(owner).status;
  }
}
