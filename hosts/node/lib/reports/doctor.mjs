// The report of `proclease doctor`: every claim and lease in the state home, with its disposition
// and why, built once from a survey (`Host.survey`) and printed as a table or as JSON. Port of
// `host/src/api/report/doctor.rs`: every disposition and reason is the component's; this only
// arranges them, in the native binary's words and layout.
import { ACTION_WORDS, CLAIM_PATH, JSON_SCHEMA_VERSION, MAX_CLAIMS, LEASES, age, columns, errorMessage, leaseErrorText, refusal } from './format.mjs';

/** Why this host cannot contain a command, for the `containment` and `cgroup` fields. */
export const NO_CONTAINMENT = 'the Node host runs commands without a box: it makes no PID namespace, cgroup or witness (Node has no fork/unshare or flock)';

/** proclease-core's `invocation_leases::survey_disposition`. */
function surveyDisposition(decision, status) {
  switch (decision) {
    case 'remove':
      return 'recoverable';
    case 'active':
      return 'active';
    case 'unknown':
    case 'removal-refused':
      return 'indeterminate';
    case 'invalid':
      return null;
    default:
      if (status === 'exact-live-owner') return 'active';
      if (status === 'unknown') return 'indeterminate';
      if (status === 'different-or-dead') return 'recoverable';
      return null;
  }
}

/** A row for what is not a valid record. */
const invalidRow = (kind, target, reason, recoverAction) => ({
  kind,
  target,
  ownerPid: null,
  childPid: null,
  phase: '-',
  age: '-',
  disposition: 'invalid',
  reason,
  recoverAction,
  ownerHost: null,
});

/** The admission's row: its claim, or the file a reader refuses. */
function admissionRows(home, admission, rows) {
  if (admission.invalid) {
    const invalid = admission.invalid;
    rows.push(
      invalidRow(
        'admission',
        'active.json',
        `${invalid.path} is not a valid export admission (${leaseErrorText(invalid.error)}): no --exclusive run can start while it is there, and proclease never deletes it; ` +
          `check that no export runs, then move it aside: ${invalid.setAside}`,
        null,
      ),
    );
    return;
  }
  const s = admission.survey;
  if (!s) return;
  const reason =
    s.disposition === 'indeterminate'
      ? `${s.reason}; new --exclusive runs are refused until a reboot proves it gone, or until you remove ${home}/${CLAIM_PATH} by hand after checking no helper runs`
      : s.reason;
  rows.push({
    kind: 'admission',
    target: s.claim.id,
    ownerPid: s.claim.owner.pid,
    childPid: s.claim.helperOwner ? s.claim.helperOwner.pid : null,
    phase: s.claim.phase ?? 'v1',
    age: '-',
    disposition: s.disposition,
    reason,
    recoverAction: null,
    ownerHost: null,
  });
}

/**
 * The `doctor --json` document of `survey` (`Host.survey`) of the state home `home`, at `nowMs`.
 * `containment` says why this host cannot box a command (`NO_CONTAINMENT`).
 */
export function doctorReport(home, survey, nowMs, containment = NO_CONTAINMENT) {
  const entries = [];
  admissionRows(home, survey.admission, entries);
  const run = survey.recovery.directoryLeases;
  const overBound =
    run.outcomes.length > MAX_CLAIMS
      ? `directory leases: ${run.outcomes.length} entries, over the reference's bound of ${MAX_CLAIMS}: ghostget's recovery refuses the whole collection and ` +
        'new leases are refused; `proclease recover` recovers the dead ones, oldest first'
      : null;
  if (run.stopped && !run.outcomes.some((o) => refusal(o.action) !== null)) {
    // Stopped before any entry (the collection itself).
    const cause = run.cause ? ` (${run.cause})` : '';
    entries.push(invalidRow('lease-entry', LEASES, `recover would stop: ${errorMessage(run.stopped)}${cause}`, 'stop'));
  }
  for (const e of run.outcomes) {
    const refused = refusal(e.action);
    const stop = refused ? `; recover would stop: ${errorMessage(refused)} (\`recover --skip-invalid\` recovers the others)` : '';
    const reason = `${e.reason}${stop}`;
    const c = e.claim;
    entries.push(
      c
        ? {
            kind: c.role === 'bundle-stage' ? 'bundle-stage' : 'raw-working',
            target: c.path,
            ownerPid: c.owner.pid,
            childPid: c.childOwner ? c.childOwner.pid : null,
            phase: c.phase,
            age: age(nowMs, c.createdAtMs),
            disposition: e.disposition ?? 'invalid',
            reason,
            recoverAction: ACTION_WORDS[e.action.tag],
            ownerHost: null,
          }
        : invalidRow('lease-entry', e.fileName, reason, ACTION_WORDS[e.action.tag]),
    );
  }
  for (const i of survey.invocations) {
    if (i.entry.tag === 'invalid') {
      entries.push(invalidRow('invocation', i.entry.val, 'not a valid canonical lease: blocks every plugin\'s acquire until repaired by hand', null));
      continue;
    }
    const l = i.entry.val.lease;
    const status = i.status ?? 'unknown';
    const acquired = l.acquiredAt;
    let reason;
    if (i.decision === 'remove') reason = `its owner (pid ${l.owner.process.pid}) and host are provably gone; \`proclease recover\` removes it (acquired ${acquired})`;
    else if (i.decision === 'active') reason = `its owner or host is alive (owner status ${status}; acquired ${acquired})`;
    else if (i.decision === 'unknown') {
      reason =
        `its owner or host cannot be proven gone (owner status ${status}): kept; a tombstone of this boot (cleanup never completed ` +
        `after plugin code ran) stays until a reboot (acquired ${acquired})`;
    } else reason = `owner status ${status} (acquired ${acquired})`;
    entries.push({
      kind: 'invocation',
      target: `${l.identity.pluginId} ${l.identity.operation} (${l.leaseId})`,
      ownerPid: l.owner.process.pid,
      childPid: l.containment?.host ? l.containment.host.pid : null,
      phase: l.containment ? l.containment.status : 'v1',
      age: '-',
      disposition: surveyDisposition(i.decision, i.status) ?? 'invalid',
      reason,
      recoverAction: i.decision ?? null,
      ownerHost: null,
    });
  }
  return {
    schemaVersion: JSON_SCHEMA_VERSION,
    stateHome: home,
    store: 'file',
    containment: { available: false, reason: containment },
    cgroup: { available: false, reason: containment },
    entries,
    overBound,
    clusterState: null,
    // No cluster mode here, so no supervisor with a dead-man timer (docs/cluster.md).
    deadManKills: [],
  };
}

/**
 * The table `doctor` prints: what the state home is, what limits this machine's containment, then
 * one row per entry (`KIND TARGET OWNER CHILD PHASE AGE DISPOSITION WHY`), or a line saying there
 * is nothing. Ends with a newline.
 */
export function doctorText(report) {
  let out = `state home: ${report.stateHome}\n`;
  if (report.containment.reason !== null) {
    out += report.cgroup.available
      ? `containment: cgroup only, because ${report.containment.reason} (docs/containment.md: the lease stays active while any process of the command's tree runs; in cluster mode, a killed supervisor's grandchildren are not stopped)\n`
      : `containment: none, because ${report.containment.reason} (docs/containment.md: a command's detached processes are covered only while they keep its witness)\n`;
  }
  if (report.overBound !== null) out += `${report.overBound}\n`;
  if (report.entries.length === 0) return `${out}no admission claim, directory leases or invocation leases\n`;
  const pid = (p) => (p === null || p === undefined ? '-' : String(p));
  const rows = report.entries.map((r) => [r.kind, r.target, pid(r.ownerPid), pid(r.childPid), r.phase, r.age, r.disposition]);
  const header = ['KIND', 'TARGET', 'OWNER', 'CHILD', 'PHASE', 'AGE', 'DISPOSITION'];
  // Text columns left-aligned, numbers right-aligned; WHY last, unpadded.
  const right = [false, false, true, true, false, true, false];
  const reasons = ['WHY', ...report.entries.map((r) => r.reason)];
  columns(header, rows, right).forEach((line, i) => (out += `${line}${reasons[i]}\n`));
  return out;
}
