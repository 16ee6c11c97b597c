// The conformance vectors (shared/vectors/README.md) through the component in Node, with the
// JavaScript host of host.mjs. Each suite maps a vector to export calls and the result to the
// suite's `expect` shape, as the Rust runner does (tests/src/conformance/suites.rs).
import { readFile } from 'node:fs/promises';
import { MemoryHost } from './host.mjs';
import { instantiate } from './component.mjs';

export const SKIPPED = 'skipped: dynamic-type';
const CLAIM_PATH = 'recovery/beeper-message-like-me-export-admission/active.json';

/** JSON equality with numbers compared as numbers (BigInts included). */
export function jsonEq(a, b) {
  if (typeof a === 'bigint') a = Number(a);
  if (typeof b === 'bigint') b = Number(b);
  if (a === null || b === null || typeof a !== 'object' || typeof b !== 'object') return a === b;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  if (Array.isArray(a)) return a.length === b.length && a.every((x, i) => jsonEq(x, b[i]));
  const ka = Object.keys(a);
  return ka.length === Object.keys(b).length && ka.every((k) => k in b && jsonEq(a[k], b[k]));
}

/** The `expect` comparison of the vectors README (RangeError vectors accept `alt_error`). */
export function matches(expected, actual) {
  const e = { ...expected };
  delete e.error_class;
  if ('alt_error' in e) {
    if (actual && actual.error === e.alt_error) e.error = e.alt_error;
    delete e.alt_error;
  }
  return jsonEq(e, actual);
}

/** The message of a thrown export error: an `error` variant `{tag, val}`, a string, or either
 * wrapped as a ComponentError's `payload`. */
const message = (e) => {
  if (typeof e === 'string') return e;
  if (e && typeof e === 'object') {
    if ('payload' in e) return message(e.payload);
    if (typeof e.val === 'string') return e.val;
    // A lease error: `{tag: 'lease', val: {code, message}}`.
    if (e.val && typeof e.val.message === 'string') return e.val.message;
  }
  return String(e);
};
const failure = (e) => ({ ok: false, error: message(e) });
const owner = (o) => o && { pid: Number(o.pid), bootId: o.bootId, processStartId: o.processStartId };
const ownerIn = (o) => ({ pid: BigInt(o.pid), bootId: o.bootId, processStartId: o.processStartId });
const isOwnerShape = (o) =>
  o && typeof o === 'object' && Object.keys(o).length === 3 && Number.isSafeInteger(o.pid) && o.pid >= 0 && typeof o.bootId === 'string' && typeof o.processStartId === 'string';
const jsNumber = (v) => (typeof v === 'number' ? v : NaN);
const valueText = (v) => JSON.stringify(v);

/** One component instance and the host behind it, swapped per vector. */
export class Harness {
  static async create() {
    const harness = new Harness();
    harness.host = new MemoryHost();
    // jco reads the import functions once, at instantiation: each one forwards to the host
    // of the vector being evaluated (`fresh`) at call time. The resource class stays one class.
    const imports = {};
    for (const [name, impl] of Object.entries(harness.host.imports())) {
      imports[name] = {};
      for (const [prop, value] of Object.entries(impl)) {
        imports[name][prop] = prop === 'CatalogLock' ? value : (...args) => harness.host.imports()[name][prop](...args);
      }
    }
    harness.root = await instantiate({ imports: () => imports });
    return harness;
  }

  fresh(options) {
    this.host = new MemoryHost(options);
    return this.host;
  }

  evaluate(v) {
    const fn = SUITES[v.suite];
    if (!fn) return { 'unknown suite': v.suite };
    return fn.call(this, v, this.root);
  }
}

function parsed(call) {
  try {
    const [record, form] = call();
    return { record, form };
  } catch (e) {
    return { error: e };
  }
}

const SUITES = {
  'canonical-json'(v, { records }) {
    const input = v.input_kind === 'text' ? v.input : valueText(v.input);
    try {
      return { ok: true, text: records.canonicalize(input) };
    } catch (e) {
      return failure(e);
    }
  },
  sha256(v, { records }) {
    return { hex: records.sha256(new TextEncoder().encode(v.input)) };
  },
  'identity-digest'(v, { records }) {
    const boot = (f) => {
      try {
        return { ok: true, bootId: f() };
      } catch (e) {
        return failure(e);
      }
    };
    switch (v.op) {
      case 'digest':
        return { hex: records.identityDigest(v.kind, v.value) };
      case 'linux-boot':
        return boot(() => records.linuxBootId(v.raw));
      case 'darwin-boot':
        return boot(() => records.darwinBootId(v.raw));
      case 'process-start':
        return { processStartId: records.processStartId(v.bootId, v.rawStart) };
    }
    return { 'unknown op': v.op };
  },
  'proc-stat'(v, { records }) {
    const r = records.parseProcStat(v.input, v.boot_id);
    return r.tag === 'alive' ? { status: 'alive', rawStart: r.val.rawStart, processStartId: r.val.processStartId } : { status: r.tag };
  },
  'export-admission-parse'(v, { records }) {
    const text = v.input_kind === 'text' ? v.input : valueText(v.input);
    const p = parsed(() => records.parseExportAdmission(text, v.input_kind === 'text' ? 'file' : 'value'));
    if (p.error) return failure(p.error);
    return { ok: true, variant: p.record.schema, claim: JSON.parse(p.form.canonical), canonical: p.form.canonical, sha256: p.form.sha256 };
  },
  'directory-lease-parse'(v, { records }) {
    const text = v.input_kind === 'text' ? v.input : valueText(v.input);
    const p = parsed(() => records.parseDirectoryLease(text, v.input_kind === 'text' ? 'file' : 'value', v.file_name ?? ''));
    if (p.error) return failure(p.error);
    return { ok: true, claim: JSON.parse(p.form.canonical), canonical: p.form.canonical, sha256: p.form.sha256 };
  },
  'invocation-lease-parse'(v, { records }) {
    if (v.input_kind !== 'text') {
      const p = parsed(() => records.parseInvocationLease(valueText(v.input)));
      if (p.error) return failure(p.error);
      return { ok: true, lease: JSON.parse(p.form.canonical), canonical: p.form.canonical, sha256: p.form.sha256 };
    }
    const r = records.classifyInvocationEntry(v.file_name, v.input);
    if (r.tag === 'ignored') return { listed: 'ignored' };
    if (r.tag === 'invalid') {
      const [leaseId, reason] = r.val;
      const out = { listed: 'invalid', leaseId, reason: reason.tag };
      if (reason.tag === 'parse-error') out.error = message(reason.val);
      return out;
    }
    const [, form] = r.val;
    const lease = JSON.parse(form.canonical);
    return { listed: 'valid', leaseId: lease.leaseId, lease, canonical: form.canonical, sha256: form.sha256 };
  },
  'portable-identity-parse'(v, { records }) {
    try {
      return { ok: true, identity: records.parsePortableIdentity(valueText(v.input)) };
    } catch (e) {
      return failure(e);
    }
  },
  'admission-disposition'(v, { records, dispositions, exportAdmission }) {
    const [claim, form] = records.parseExportAdmission(valueText(v.claim), 'value');
    const verdict = dispositions.admission(claim, v.current_boot_id, v.owner_status, v.helper_status);
    const host = this.fresh({ bootId: v.current_boot_id, status: (_, n) => (n === 1 ? v.owner_status : v.helper_status) });
    host.put(CLAIM_PATH, form.canonical);
    let acquire;
    try {
      exportAdmission.acquire();
      acquire = { ok: true };
    } catch (e) {
      acquire = failure(e);
    }
    return { disposition: verdict.disposition, calls: verdict.consulted, acquire };
  },
  'admission-transition'(v, { records, exportAdmission }) {
    const phases = ['parent-owned', 'helper-launching', 'helper-active', 'cleanup-unsafe'];
    for (const s of v.steps) {
      if (s.op === 'update' && (!phases.includes(s.phase) || (s.helper !== null && !isOwnerShape(s.helper)))) return SKIPPED;
      if (s.op === 'bind' && !Number.isSafeInteger(s.child_pid)) return SKIPPED;
    }
    const [claim, form] = records.parseExportAdmission(valueText(v.claim), 'value');
    const host = this.fresh();
    host.put(CLAIM_PATH, form.canonical);
    const handle = exportAdmission.Admission.resume(claim, v.released);
    const results = v.steps.map((s) => {
      host.capture = !('child_capture' in s) ? undefined : s.child_capture === null ? null : ownerIn(s.child_capture);
      host.failNextCas = s.cas_ok === false;
      const before = { sha: handle.contentSha256(), revision: handle.claim().revision };
      try {
        if (s.op === 'update') handle.update(s.phase, s.helper === null ? undefined : ownerIn(s.helper));
        else if (s.op === 'begin') handle.beginHelperLaunch();
        else if (s.op === 'bind') handle.bindHelper(BigInt(s.child_pid));
        else if (s.op === 'settle') handle.settleHelper();
        else if (s.op === 'mark-cleanup-unsafe') handle.markCleanupUnsafe();
        else if (s.op === 'release') handle.release();
      } catch (e) {
        host.failNextCas = false;
        return failure(e);
      }
      host.failNextCas = false;
      const after = handle.claim();
      return {
        ok: true,
        changed: handle.contentSha256() !== before.sha,
        released: handle.released(),
        phase: after.phase,
        helperOwner: owner(after.helperOwner) ?? null,
        revision_rotated: after.revision !== before.revision,
      };
    });
    return { results };
  },
  'invocation-owner-status'(v, { records, dispositions }) {
    const [lease, form] = records.parseInvocationLease(valueText(v.lease));
    try {
      const s = dispositions.invocationOwnerStatus(lease, v.content_sha256 ?? form.sha256, v.parent_status, v.host_status);
      return { ok: true, combined: s.combined, reported: s.reported, calls: s.consulted };
    } catch (e) {
      return { ...failure(e), calls: [] };
    }
  },
  'directory-lease-request'(v, { directoryLeases }) {
    if (!['raw-working', 'bundle-stage'].includes(v.role) || typeof v.path !== 'string') return SKIPPED;
    if ('output_root' in v && typeof v.output_root !== 'string') return SKIPPED;
    this.fresh();
    try {
      directoryLeases.checkRequest({
        role: v.role,
        path: v.path,
        outputRoot: v.output_root,
        recoverAfterMs: jsNumber(v.recover_after_ms),
        nowMs: jsNumber(v.now_ms),
      });
      return { ok: true };
    } catch (e) {
      return failure(e);
    }
  },
  'raw-lease-disposition'(v, { records, dispositions, directoryLeases }) {
    if (v.op === 'disposition') {
      const [claim] = records.parseDirectoryLease(valueText(v.claim), 'value', '');
      const verdict = dispositions.rawLease(claim, BigInt(v.now_ms), v.child_status);
      return { disposition: verdict.disposition, calls: verdict.consulted };
    }
    this.fresh();
    try {
      const r = directoryLeases.recover(jsNumber(v.now_ms));
      return { ok: true, report: { recovered: r.recovered, published: r.published, active: r.active, indeterminate: r.indeterminate } };
    } catch (e) {
      return failure(e);
    }
  },
  'raw-lease-transition'(v, { records, directoryLeases }) {
    const phases = ['preparing', 'launching', 'running', 'settled'];
    for (const s of v.steps) {
      if (s.op === 'update' && (!phases.includes(s.phase) || ('child_pid' in s && !Number.isSafeInteger(s.child_pid)))) return SKIPPED;
    }
    const [claim, form] = records.parseDirectoryLease(valueText(v.claim), 'value', '');
    const host = this.fresh();
    host.put(`recovery/beeper-message-like-me-directory-leases/${claim.id}.json`, form.canonical);
    const lease = directoryLeases.DirectoryLease.resume(claim, v.released);
    const results = v.steps.map((s) => {
      host.capture = !('child_capture' in s) ? undefined : s.child_capture === null ? null : ownerIn(s.child_capture);
      host.failNextCas = s.cas_ok === false;
      const before = lease.contentSha256();
      try {
        if (s.op === 'update') lease.update(s.phase, 'child_pid' in s ? BigInt(s.child_pid) : undefined);
        else lease.release();
      } catch (e) {
        host.failNextCas = false;
        return failure(e);
      }
      host.failNextCas = false;
      const after = lease.claim();
      return { ok: true, changed: lease.contentSha256() !== before, released: lease.released(), phase: after.phase, childOwner: owner(after.childOwner) ?? null, sha256: lease.contentSha256() };
    });
    return { results };
  },
  'admission-entry-decision'(v, { records, invocationLeases }) {
    const entry = invocationEntry(v, records);
    const verdict = invocationLeases.admissionEntry(v.plugin_id, entry.wit, v.parent_status, v.host_status);
    const out = { decision: verdict.decision, calls: verdict.consulted };
    if (verdict.error) out.error = message(verdict.error);
    return out;
  },
  'repair-decision'(v, { records, invocationLeases }) {
    const entry = invocationEntry(v, records);
    const lease = entry.wit.tag === 'valid' ? entry.wit.val.lease : null;
    const isOwner = (o) => lease && o.pid === lease.owner.process.pid && o.bootId === lease.owner.process.bootId && o.processStartId === lease.owner.process.processStartId;
    const host = this.fresh({ bootId: v.current_boot_id, status: (o) => (isOwner(o) ? v.parent_status : v.host_status) });
    host.bootLookups = 0;
    host.put(`provider-plugin-state/.invocations/${entry.name}`, entry.text);
    host.failNextCas = v.removal_succeeds === false;
    try {
      const outcome = invocationLeases.repair(v.recover);
      const r = outcome.report;
      return {
        decision: outcome.decisions[0]?.[1] ?? 'none',
        calls: host.probed.map((o) => (isOwner(o) ? 'owner' : 'host')),
        boot_lookups: host.bootLookups,
        report: { inspected: r.inspected, removed: r.removed, active: r.active, unknown: r.unknown, invalid: r.invalid },
      };
    } catch (e) {
      return failure(e);
    }
  },
  'containment-transition'(v, { records, invocationLeases }) {
    const methods = ['hostStarting', 'hostStarted', 'cleanupComplete', 'cleanupUnsafe', 'release'];
    for (const s of v.steps) {
      if (!methods.includes(s.method)) return SKIPPED;
      if ((s.method === 'hostStarting' || s.method === 'hostStarted') && !isOwnerShape(s.host)) return SKIPPED;
    }
    const [lease, form] = records.parseInvocationLease(valueText(v.lease));
    const host = this.fresh();
    host.put(`provider-plugin-state/.invocations/${lease.leaseId}.json`, form.canonical);
    let controller;
    try {
      controller = invocationLeases.ContainmentController.create({ lease, contentSha256: v.content_sha256 ?? form.sha256 });
    } catch (e) {
      return { constructed: failure(e), results: [] };
    }
    let released = false;
    const results = v.steps.map((s) => {
      host.failNextCas = s.cas_ok === false;
      const before = controller.current().contentSha256;
      try {
        if (s.method === 'release') invocationLeases.release(controller.current());
        else if (s.method === 'hostStarting') controller.hostStarting(ownerIn(s.host));
        else if (s.method === 'hostStarted') controller.hostStarted(ownerIn(s.host));
        else if (s.method === 'cleanupComplete') controller.cleanupComplete();
        else controller.cleanupUnsafe();
      } catch (e) {
        host.failNextCas = false;
        return failure(e);
      }
      host.failNextCas = false;
      released ||= s.method === 'release';
      const current = controller.current();
      const c = current.lease.containment;
      const containment = c === undefined ? null : c.status === 'parent-owned' ? { status: c.status } : { host: owner(c.host) ?? null, status: c.status };
      return { ok: true, changed: current.contentSha256 !== before, released, containment, sha256: current.contentSha256 };
    });
    return { constructed: { ok: true }, results };
  },
};

function invocationEntry(v, records) {
  if (v.lease) {
    const [lease, form] = records.parseInvocationLease(valueText(v.lease));
    return { wit: { tag: 'valid', val: { lease, contentSha256: form.sha256 } }, name: `${lease.leaseId}.json`, text: form.canonical };
  }
  const name = `${v.lease_id}.json`;
  const r = records.classifyInvocationEntry(name, v.entry_text);
  const wit = r.tag === 'valid' ? { tag: 'valid', val: { lease: r.val[0], contentSha256: r.val[1].sha256 } } : { tag: 'invalid', val: v.lease_id };
  return { wit, name, text: v.entry_text };
}

/** Runs one suite file: `{suite, passed, total, skipped, failures}`. */
export async function runFile(path, harness) {
  const lines = (await readFile(path, 'utf8')).split('\n').filter((l) => l.trim());
  const report = { suite: path.split('/').pop().replace(/\.jsonl$/, ''), passed: 0, total: 0, skipped: 0, failures: [] };
  for (const line of lines) {
    const v = JSON.parse(line);
    report.total += 1;
    let actual;
    try {
      actual = harness.evaluate(v);
    } catch (e) {
      actual = { infrastructure: String(e?.stack ?? e) };
    }
    if (actual === SKIPPED && (v.tags ?? []).includes('dynamic-type')) report.skipped += 1;
    else if (matches(v.expect, actual)) report.passed += 1;
    else report.failures.push({ name: v.name, expected: v.expect, actual });
  }
  return report;
}
