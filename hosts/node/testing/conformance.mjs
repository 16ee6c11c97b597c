// The public conformance vectors (`shared/vectors/README.md`) through this package's loader, on a
// component instance whose imports are this package's REAL host (a temporary state home on disk,
// real /proc). The suite-to-export mapping is `tests/js/conformance.mjs`'s (itself the Rust
// runner's, `tests/src/conformance/suites.rs`); what differs is the host:
//
// - suites of pure exports (parsers, digests, decision tables, request checks) are evaluated in
//   full;
// - transition suites run their steps against real files (the claim is written to the real
//   store, each step's compare-and-swap goes through it). A step whose compare-and-swap must fail
//   (`cas_ok: false`) runs while the file on disk really differs (its bytes changed for the step,
//   then put back); a capture that must find nothing (`child_capture: null`) is run on a pid that
//   is really not alive here. Vectors whose capture must find a live process of a given identity
//   are counted as `scripted`;
// - `admission-disposition`'s `acquire` part and `repair-decision` need scripted liveness answers
//   for made-up owners (a real probe judges them by this machine's /proc and boot id): the former
//   is checked on its pure part (`disposition`, `calls`), the latter counted as `scripted`.
// The in-memory test double `tests/js/` evaluates every vector in full with scripted effects.
import { readFile } from 'node:fs/promises';
import * as fs from 'node:fs';
import { join } from 'node:path';

export const SKIPPED = Symbol('skipped: dynamic-type');
export const SCRIPTED = Symbol('scripted');

const ADMISSION_DIR = 'recovery/beeper-message-like-me-export-admission';
const LEASES_DIR = 'recovery/beeper-message-like-me-directory-leases';
const INVOCATIONS_DIR = 'provider-plugin-state/.invocations';

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

/** The message of a thrown export error: an `error` variant `{tag, val}`, a string, or either wrapped as `payload`. */
const message = (e) => {
  if (typeof e === 'string') return e;
  if (e && typeof e === 'object') {
    if ('payload' in e) return message(e.payload);
    if (typeof e.val === 'string') return e.val;
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
const drop = (resource) => resource?.[Symbol.dispose]?.();

function parsed(call) {
  try {
    const [record, form] = call();
    return { record, form };
  } catch (e) {
    return { error: e };
  }
}

/** The vectors against one real host (`lib/host.mjs` `assemble`): its state home is reset around each stateful vector. */
export class RealHarness {
  constructor(parts) {
    this.parts = parts;
    this.root = parts.root;
  }

  /** Empties the collections a stateful vector uses. */
  reset() {
    for (const dir of [ADMISSION_DIR, LEASES_DIR, INVOCATIONS_DIR]) {
      this.root.stateStore.ensurePrivateDirectory(dir);
      const abs = join(this.parts.home.path, dir);
      for (const name of fs.readdirSync(abs)) fs.rmSync(join(abs, name), { recursive: true, force: true });
    }
  }

  /** Empties the collections and writes `text` at store path `path` (0600), as the vector's file on disk. */
  put(path, text) {
    this.reset();
    const file = join(this.parts.home.path, path);
    fs.writeFileSync(file, text, { mode: 0o600 });
    fs.chmodSync(file, 0o600);
  }

  /**
   * Runs `step` with the file at store path `path` really changed for its duration, when `casFails`:
   * a compare-and-swap of it then fails because the bytes on disk differ (the vectors'
   * `cas_ok: false`), and the file is put back afterwards. Nothing is scripted: the store sees a
   * real change.
   */
  withChangedFile(path, casFails, step) {
    if (!casFails) return step();
    const file = join(this.parts.home.path, path);
    let original = null;
    try {
      original = fs.readFileSync(file);
      fs.writeFileSync(file, Buffer.concat([original, Buffer.from(' ')]));
    } catch {
      original = null; // absent: every compare-and-swap of it fails anyway
    }
    try {
      return step();
    } finally {
      if (original !== null) fs.writeFileSync(file, original);
    }
  }

  /** Whether pid `pid` is certainly not a live process here (a scripted "not alive" capture a real host reproduces). */
  static notAlive(pid) {
    if (!Number.isSafeInteger(pid) || pid < 1 || pid > 2147483647) return true;
    try {
      process.kill(pid, 0);
      return false;
    } catch (error) {
      return error.code === 'ESRCH';
    }
  }

  evaluate(v) {
    const fn = SUITES[v.suite];
    if (!fn) return { 'unknown suite': v.suite };
    return fn.call(this, v, this.root);
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
  'admission-disposition'(v, { records, dispositions }) {
    const [claim] = records.parseExportAdmission(valueText(v.claim), 'value');
    const verdict = dispositions.admission(claim, v.current_boot_id, v.owner_status, v.helper_status);
    // `acquire` needs scripted liveness answers for made-up owners: only the pure part is checked.
    return { partial: ['disposition', 'calls'], actual: { disposition: verdict.disposition, calls: verdict.consulted } };
  },
  'admission-transition'(v, { records, exportAdmission }) {
    const phases = ['parent-owned', 'helper-launching', 'helper-active', 'cleanup-unsafe'];
    for (const s of v.steps) {
      if (s.op === 'update' && (!phases.includes(s.phase) || (s.helper !== null && !isOwnerShape(s.helper)))) return SKIPPED;
      if (s.op === 'bind' && !Number.isSafeInteger(s.child_pid)) return SKIPPED;
    }
    // A capture that must find a live process with a given identity cannot be reproduced.
    if (v.steps.some((s) => 'child_capture' in s && !(s.child_capture === null && RealHarness.notAlive(s.child_pid)))) return SCRIPTED;
    const [claim, form] = records.parseExportAdmission(valueText(v.claim), 'value');
    const path = `${ADMISSION_DIR}/active.json`;
    this.put(path, form.canonical);
    const handle = exportAdmission.Admission.resume(claim, v.released);
    try {
      const results = v.steps.map((s) => {
        const before = { sha: handle.contentSha256(), revision: handle.claim().revision };
        try {
          this.withChangedFile(path, s.cas_ok === false, () => {
            if (s.op === 'update') handle.update(s.phase, s.helper === null ? undefined : ownerIn(s.helper));
            else if (s.op === 'begin') handle.beginHelperLaunch();
            else if (s.op === 'bind') handle.bindHelper(BigInt(s.child_pid));
            else if (s.op === 'settle') handle.settleHelper();
            else if (s.op === 'mark-cleanup-unsafe') handle.markCleanupUnsafe();
            else if (s.op === 'release') handle.release();
          });
        } catch (e) {
          return failure(e);
        }
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
    } finally {
      drop(handle);
    }
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
    try {
      directoryLeases.checkRequest({ role: v.role, path: v.path, outputRoot: v.output_root, recoverAfterMs: jsNumber(v.recover_after_ms), nowMs: jsNumber(v.now_ms) });
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
    // A recovery over an empty lease collection of the real state home.
    this.reset();
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
    if (v.steps.some((s) => 'child_capture' in s && !(s.child_capture === null && RealHarness.notAlive(s.child_pid)))) return SCRIPTED;
    const [claim, form] = records.parseDirectoryLease(valueText(v.claim), 'value', '');
    const path = `${LEASES_DIR}/${claim.id}.json`;
    this.put(path, form.canonical);
    const lease = directoryLeases.DirectoryLease.resume(claim, v.released);
    try {
      const results = v.steps.map((s) => {
        const before = lease.contentSha256();
        try {
          this.withChangedFile(path, s.cas_ok === false, () => {
            if (s.op === 'update') lease.update(s.phase, 'child_pid' in s ? BigInt(s.child_pid) : undefined);
            else lease.release();
          });
        } catch (e) {
          return failure(e);
        }
        const after = lease.claim();
        return { ok: true, changed: lease.contentSha256() !== before, released: lease.released(), phase: after.phase, childOwner: owner(after.childOwner) ?? null, sha256: lease.contentSha256() };
      });
      return { results };
    } finally {
      drop(lease);
    }
  },
  'admission-entry-decision'(v, { records, invocationLeases }) {
    const entry = invocationEntry(v, records);
    const verdict = invocationLeases.admissionEntry(v.plugin_id, entry.wit, v.parent_status, v.host_status);
    const out = { decision: verdict.decision, calls: verdict.consulted };
    if (verdict.error) out.error = message(verdict.error);
    return out;
  },
  'repair-decision'() {
    // Scripted liveness answers for made-up owners, a scripted boot-id lookup and removal.
    return SCRIPTED;
  },
  'containment-transition'(v, { records, invocationLeases }) {
    const methods = ['hostStarting', 'hostStarted', 'cleanupComplete', 'cleanupUnsafe', 'release'];
    for (const s of v.steps) {
      if (!methods.includes(s.method)) return SKIPPED;
      if ((s.method === 'hostStarting' || s.method === 'hostStarted') && !isOwnerShape(s.host)) return SKIPPED;
    }
    const [lease, form] = records.parseInvocationLease(valueText(v.lease));
    const path = `${INVOCATIONS_DIR}/${lease.leaseId}.json`;
    this.put(path, form.canonical);
    let controller;
    try {
      controller = invocationLeases.ContainmentController.create({ lease, contentSha256: v.content_sha256 ?? form.sha256 });
    } catch (e) {
      return { constructed: failure(e), results: [] };
    }
    try {
      let released = false;
      const results = v.steps.map((s) => {
        const before = controller.current().contentSha256;
        try {
          this.withChangedFile(path, s.cas_ok === false, () => {
            if (s.method === 'release') invocationLeases.release(controller.current());
            else if (s.method === 'hostStarting') controller.hostStarting(ownerIn(s.host));
            else if (s.method === 'hostStarted') controller.hostStarted(ownerIn(s.host));
            else if (s.method === 'cleanupComplete') controller.cleanupComplete();
            else controller.cleanupUnsafe();
          });
        } catch (e) {
          return failure(e);
        }
        released ||= s.method === 'release';
        const current = controller.current();
        const c = current.lease.containment;
        const containment = c === undefined ? null : c.status === 'parent-owned' ? { status: c.status } : { host: owner(c.host) ?? null, status: c.status };
        return { ok: true, changed: current.contentSha256 !== before, released, containment, sha256: current.contentSha256 };
      });
      return { constructed: { ok: true }, results };
    } finally {
      drop(controller);
    }
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

/** Runs one suite file: `{suite, passed, total, skipped, scripted, partial, failures}`. */
export async function runFile(path, harness) {
  const lines = (await readFile(path, 'utf8')).split('\n').filter((l) => l.trim());
  const report = { suite: path.split('/').pop().replace(/\.jsonl$/, ''), passed: 0, total: 0, skipped: 0, scripted: 0, partial: 0, failures: [] };
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
    else if (actual === SCRIPTED) report.scripted += 1;
    else if (actual && actual.partial) {
      const expected = Object.fromEntries(actual.partial.map((k) => [k, v.expect[k]]));
      if (jsonEq(expected, actual.actual)) {
        report.passed += 1;
        report.partial += 1;
      } else report.failures.push({ name: v.name, expected, actual: actual.actual });
    } else if (matches(v.expect, actual)) report.passed += 1;
    else report.failures.push({ name: v.name, expected: v.expect, actual });
  }
  return report;
}
