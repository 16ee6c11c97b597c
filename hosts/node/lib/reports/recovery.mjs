// The report of `proclease recover`: what a recovery did (or, dry, would do) to each directory
// lease, creation intent and invocation lease, and why — built once from a recovery
// (`Host.recover`), printed as lines of text or as JSON. Port of
// `host/src/api/report/recovery.rs`: the decisions and reasons are the component's.
import { ACTION_WORDS, JSON_SCHEMA_VERSION, errorMessage, refusal, setAsideLeaseEntry } from './format.mjs';

/** The `recover --json` document of `recovery` (`Host.recover`) run on the state home `home`. */
export function recoveryReport(home, recovery) {
  const run = recovery.directoryLeases;
  const count = (tag) => run.outcomes.filter((o) => o.action.tag === tag).length;
  const entries = run.outcomes.map((o) => {
    const refused = refusal(o.action);
    return {
      file: o.fileName,
      path: o.claim ? o.claim.path : null,
      leaseId: o.claim ? o.claim.id : null,
      disposition: o.disposition ?? null,
      action: ACTION_WORDS[o.action.tag],
      done: o.done,
      error: refused ? errorMessage(refused) : null,
      reason: o.reason,
      setAside: !o.claim && refused ? setAsideLeaseEntry(home, o.fileName) : null,
    };
  });
  const creations = recovery.creations.map((c) => ({
    file: c.fileName,
    path: c.path ?? null,
    action: c.action.tag,
    removed: c.action.tag === 'finish' ? [...c.action.val] : [],
    error: c.action.tag === 'skip' ? c.action.val : null,
    done: c.done,
    reason: c.reason,
  }));
  const document = {
    schemaVersion: JSON_SCHEMA_VERSION,
    dryRun: recovery.dryRun,
    directoryLeases: {
      recovered: run.report.recovered,
      published: run.report.published,
      active: run.report.active,
      indeterminate: run.report.indeterminate,
      alreadyRecovered: count('already-recovered'),
      skipped: count('skip'),
      releasedKept: count('keep-directory'),
      stopped: run.stopped ? errorMessage(run.stopped) : null,
      cause: run.cause ?? null,
      entries,
    },
    directoryCreations: creations,
  };
  if (recovery.invocations) {
    const { report: t, decisions } = recovery.invocations;
    document.invocationLeases = {
      inspected: t.inspected,
      removed: t.removed,
      active: t.active,
      unknown: t.unknown,
      invalid: t.invalid,
      entries: decisions.map(([leaseId, decision]) => ({ leaseId, decision })),
    };
  }
  return document;
}

/** What an outcome is about: the leased path, or the entry's name. */
const target = (o) => (o.claim ? o.claim.path : o.fileName);

/** One line of text for a directory-lease outcome. */
function line(home, o, dryRun) {
  const what = target(o);
  const [did, would] = {
    'remove-directory': ['removed', 'would remove'],
    'count-published': ['released the claim of', 'would release the claim of'],
    'remove-claim': ['released the claim of', 'would release the claim of'],
    'keep-directory': ['released the lease of', 'would release the lease of'],
    keep: ['kept', 'would keep'],
    'already-recovered': ['already recovered by another recoverer:', 'already recovered:'],
    skip: ['skipped', 'would skip'],
    stop: ['stopped at', 'would stop at'],
  }[o.action.tag];
  const verb = dryRun ? would : did;
  switch (o.action.tag) {
    case 'keep':
      return `${verb} ${what}: ${o.disposition ?? '?'} (${o.reason})`;
    case 'count-published':
      return `${verb} ${what}: it was already published to ${o.claim?.outputRoot ?? ''} (${o.reason})`;
    case 'remove-claim':
      return `${verb} ${what}: its directory was already gone (${o.reason})`;
    case 'keep-directory':
      return `${verb} ${what} and ${dryRun ? 'keep' : 'kept'} the directory (${o.reason})`;
    case 'skip':
    case 'stop': {
      const error = o.action.val;
      const code = error.tag === 'lease' ? error.val.code : null;
      const replaced = code === 'directory-lease-target-changed-before-recovery' || code === 'directory-lease-parent-changed-before-recovery';
      let fix = '';
      if (!o.claim) fix = `; proclease never deletes it: check it, then move it aside: ${setAsideLeaseEntry(home, o.fileName)}`;
      else if (replaced) {
        fix =
          '; the directory there now is not the one this lease holds (re-created or replaced), so recovery will never remove it: ' +
          `check that no run uses it, then move the stale lease record aside: ${setAsideLeaseEntry(home, o.fileName)}`;
      }
      return `${verb} ${what}: ${errorMessage(error)} (${o.reason})${fix}`;
    }
    default:
      return `${verb} ${what} (${o.reason})`;
  }
}

/** One line of text for a directory-creation intent. */
function creationLine(c, dryRun) {
  const what = c.path ?? c.fileName;
  switch (c.action.tag) {
    case 'keep':
      return `kept the creation of ${what}: ${c.reason}`;
    case 'finish':
      if (c.action.val.length === 0) return `${dryRun ? 'would finish' : 'finished'} the intent to create ${what} (${c.reason}; nothing it created is left empty and unleased)`;
      return `${dryRun ? 'would remove' : 'removed'} ${c.action.val.join(', ')} (${c.reason}: a crashed run created it and never leased it)`;
    default:
      return `skipped the creation intent ${c.fileName}: ${c.action.val} (${c.reason})`;
  }
}

/** One line of text for an invocation lease's decision. */
function invocationLine(id, decision, dryRun) {
  switch (decision) {
    case 'remove':
      return `${dryRun ? 'would remove' : 'removed'} invocation lease ${id}: its owner and host are provably gone`;
    case 'active':
      return `kept invocation lease ${id}: its owner or host is alive`;
    case 'unknown':
      return `kept invocation lease ${id}: its owner or host cannot be proven gone (a tombstone of this boot stays until a reboot)`;
    case 'removal-refused':
      return `kept invocation lease ${id}: it changed while it was being removed`;
    default:
      return `kept invocation lease ${id}: not a valid lease; it blocks acquires until repaired by hand (\`proclease validate\` on it says why)`;
  }
}

/**
 * What `recover` prints: one line per directory lease, creation intent and invocation lease
 * saying what was done and why; then the counts (or, dry, a line when there is nothing). Ends
 * with a newline unless empty.
 */
export function recoveryText(home, recovery) {
  const dryRun = recovery.dryRun;
  const run = recovery.directoryLeases;
  const lines = run.outcomes.map((o) => line(home, o, dryRun));
  for (const c of recovery.creations) lines.push(creationLine(c, dryRun));
  if (recovery.invocations) for (const [id, decision] of recovery.invocations.decisions) lines.push(invocationLine(id, decision, dryRun));
  const inspected = recovery.invocations ? recovery.invocations.report.inspected : 0;
  if (dryRun) {
    // A stop (a held lock, an unreadable collection) is not "nothing": its error follows.
    if (run.outcomes.length === 0 && !run.stopped && recovery.creations.length === 0 && inspected === 0) lines.push('nothing to recover: no directory leases and no invocation leases');
  } else {
    const r = run.report;
    lines.push(`recovered: ${r.recovered}`, `published: ${r.published}`, `active: ${r.active}`, `indeterminate: ${r.indeterminate}`);
    const count = (tag) => run.outcomes.filter((o) => o.action.tag === tag).length;
    for (const [n, words] of [
      [count('keep-directory'), 'released, directory kept'],
      [count('already-recovered'), 'already recovered'],
      [count('skip'), 'skipped'],
    ]) {
      if (n > 0) lines.push(`${words}: ${n}`);
    }
    if (inspected > 0) {
      const t = recovery.invocations.report;
      lines.push(`invocation leases removed: ${t.removed} (active ${t.active}, unknown ${t.unknown}, invalid ${t.invalid})`);
    }
  }
  return lines.map((l) => `${l}\n`).join('');
}
