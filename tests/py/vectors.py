"""The conformance vectors (`shared/vectors/README.md`) through the component in Python.

Each suite turns a vector into export calls on one component instance, against a fresh
in-memory `World`, and its outcome into the JSON shape of the suite's `expect`. The rules for
comparing, for what counts as a skipped `dynamic-type` vector and for what a suite's result
looks like are the vectors README's; `SuiteReport.summary` prints the Rust runner's format.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from component import ComponentError, Proclease, Rec, error_message
from memory_host import STATUSES, UNSCRIPTED, World, owner, same_owner

SKIPPED = "skipped: dynamic-type"
ADMISSION_CLAIM = "recovery/beeper-message-like-me-export-admission/active.json"
DIRECTORY_LEASES = "recovery/beeper-message-like-me-directory-leases"
INVOCATIONS = "provider-plugin-state/.invocations"
UUID_V4 = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")
MAX_I64 = 2**63 - 1
MIN_I64 = -(2**63)


class Malformed(Exception):
    """The vector itself is not usable (an infrastructure failure, never a pass)."""


# --- Comparison -----------------------------------------------------------------------------


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def json_eq(a: Any, b: Any) -> bool:
    """JSON values compared as values: member order ignored, numbers as numbers (`4242` equals
    `4242.0`), booleans never equal to numbers, strings byte for byte."""
    if _is_number(a) and _is_number(b):
        return float(a) == float(b) if isinstance(a, float) or isinstance(b, float) else a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_eq(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_eq(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def matches(expected: Any, actual: Any) -> bool:
    """`expect` against a result. `error_class` is not compared; a vector with `alt_error`
    accepts it in place of `error`."""
    if isinstance(expected, dict):
        expected = dict(expected)
        expected.pop("error_class", None)
        if "alt_error" in expected:
            alternative = expected.pop("alt_error")
            if isinstance(actual, dict) and actual.get("error") == alternative:
                expected["error"] = alternative
    return json_eq(expected, actual)


# --- Conversions between vector JSON and WIT values -----------------------------------------


def value_text(value: Any) -> str:
    """The JSON text a value-mode parser is handed: the vector's value re-serialised."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def camel(name: str) -> str:
    head, *rest = name.split("-")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def record_json(value: Any) -> Any:
    """A lifted WIT record as the JSON the reference writes: camelCase members."""
    if isinstance(value, Rec):
        return {camel(k): record_json(v) for k, v in value.fields().items()}
    if isinstance(value, list):
        return [record_json(v) for v in value]
    return value


def owner_json(o: Optional[Rec]) -> Any:
    return None if o is None else {"pid": o.pid, "bootId": o.boot_id, "processStartId": o.process_start_id}


def owner_arg(value: Any) -> Optional[Rec]:
    """An owner argument the typed API can express: integer pid >= 0, string digests."""
    if not isinstance(value, dict):
        return None
    pid, boot, start = value.get("pid"), value.get("bootId"), value.get("processStartId")
    if not (isinstance(pid, int) and not isinstance(pid, bool) and 0 <= pid < 2**64):
        return None
    if not (isinstance(boot, str) and isinstance(start, str)):
        return None
    return owner(pid, boot, start)


def i64_arg(value: Any) -> Optional[int]:
    if isinstance(value, int) and not isinstance(value, bool) and MIN_I64 <= value <= MAX_I64:
        return value
    return None


def js_number(value: Any) -> float:
    """A JavaScript-number argument (`f64`): a JSON value that is not a number becomes NaN,
    which no time rule accepts (the reference rejects non-numbers)."""
    return float(value) if _is_number(value) else float("nan")


def status_arg(value: Any) -> str:
    if value not in STATUSES:
        raise Malformed(f"not an owner status: {value!r}")
    return value


def failure(error: ComponentError) -> Dict[str, Any]:
    return {"ok": False, "error": error.message}


def captured(step: Dict[str, Any]) -> Any:
    """What the identity capture answers during `step`."""
    if "child_capture" not in step:
        return UNSCRIPTED
    if step["child_capture"] is None:
        return None
    o = owner_arg(step["child_capture"])
    if o is None:
        raise Malformed("child_capture is not an owner")
    return o


# --- Suites ---------------------------------------------------------------------------------


class Harness:
    """One component instance; each vector gets a fresh `World` behind it."""

    def __init__(self, wasm: Path) -> None:
        self.wasm = wasm
        self.world = World()
        self.p = Proclease(wasm, self.world)

    def fresh(self, **kw: Any) -> World:
        self.world = World(**kw)
        self.p.host = self.world
        return self.world

    def reinstantiate(self) -> None:
        """After a trap the instance may refuse further calls: start a new one."""
        self.p = Proclease(self.wasm, self.world)

    def evaluate(self, v: Dict[str, Any]) -> Any:
        handler = SUITES.get(v.get("suite", ""))
        if handler is None:
            return {"unknown suite": v.get("suite")}
        return handler(self, v)

    # Parsing helpers used by several suites: a record given in a vector must parse.

    def parsed(self, export: str, *args: Any) -> tuple:
        try:
            return self.p.call("records", export, *args)
        except ComponentError as error:
            raise Malformed(f"{export}: {error}") from None


def canonical_json(h: Harness, v: Dict[str, Any]) -> Any:
    source = text(v["input"]) if v.get("input_kind") == "text" else value_text(v["input"])
    try:
        return {"ok": True, "text": h.p.records.canonicalize(source)}
    except ComponentError as error:
        return failure(error)


def sha256(h: Harness, v: Dict[str, Any]) -> Any:
    return {"hex": h.p.records.sha256(text(v["input"]).encode("utf-8"))}


def identity_digest(h: Harness, v: Dict[str, Any]) -> Any:
    r = h.p.records
    op = v.get("op")
    if op == "digest":
        return {"hex": r.identity_digest(text(v["kind"]), text(v["value"]))}
    if op == "process-start":
        return {"processStartId": r.process_start_id(text(v["bootId"]), text(v["rawStart"]))}
    if op in ("linux-boot", "darwin-boot"):
        try:
            boot = r.linux_boot_id(text(v["raw"])) if op == "linux-boot" else r.darwin_boot_id(text(v["raw"]))
            return {"ok": True, "bootId": boot}
        except ComponentError as error:
            return failure(error)
    return {"unknown op": op}


def proc_stat(h: Harness, v: Dict[str, Any]) -> Any:
    result = h.p.records.parse_proc_stat(text(v["input"]), text(v["boot_id"]))
    if result.tag == "alive":
        return {"status": "alive", "rawStart": result.payload.raw_start, "processStartId": result.payload.process_start_id}
    return {"status": result.tag}


def _mode(v: Dict[str, Any]) -> tuple:
    if v.get("input_kind") == "text":
        return text(v["input"]), "file"
    return value_text(v["input"]), "value"


def _parsed_json(key: str, form: Rec) -> Dict[str, Any]:
    return {"ok": True, key: json.loads(form.canonical), "canonical": form.canonical, "sha256": form.sha256}


def export_admission_parse(h: Harness, v: Dict[str, Any]) -> Any:
    source, mode = _mode(v)
    try:
        claim, form = h.p.records.parse_export_admission(source, mode)
    except ComponentError as error:
        return failure(error)
    return {**_parsed_json("claim", form), "variant": claim.schema}


def directory_lease_parse(h: Harness, v: Dict[str, Any]) -> Any:
    source, mode = _mode(v)
    try:
        _, form = h.p.records.parse_directory_lease(source, mode, text(v.get("file_name")) if mode == "file" else "")
    except ComponentError as error:
        return failure(error)
    return _parsed_json("claim", form)


def invocation_lease_parse(h: Harness, v: Dict[str, Any]) -> Any:
    if v.get("input_kind") != "text":
        try:
            _, form = h.p.records.parse_invocation_lease(value_text(v["input"]))
        except ComponentError as error:
            return failure(error)
        return _parsed_json("lease", form)
    listed = h.p.records.classify_invocation_entry(text(v.get("file_name")), text(v["input"]))
    if listed.tag == "ignored":
        return {"listed": "ignored"}
    if listed.tag == "invalid":
        lease_id, reason = listed.payload
        out = {"listed": "invalid", "leaseId": lease_id, "reason": reason.tag}
        if reason.tag == "parse-error":
            out["error"] = error_message(reason.payload.payload)
        return out
    lease, form = listed.payload
    return {"listed": "valid", "leaseId": lease.lease_id, "lease": json.loads(form.canonical), "canonical": form.canonical, "sha256": form.sha256}


def portable_identity_parse(h: Harness, v: Dict[str, Any]) -> Any:
    try:
        identity = h.p.records.parse_portable_identity(value_text(v["input"]))
    except ComponentError as error:
        return failure(error)
    return {"ok": True, "identity": record_json(identity)}


def admission_disposition(h: Harness, v: Dict[str, Any]) -> Any:
    claim, form = h.parsed("parse-export-admission", value_text(v["claim"]), "value")
    owner_status, helper_status = status_arg(v["owner_status"]), status_arg(v["helper_status"])
    boot = text(v["current_boot_id"])
    verdict = h.p.dispositions.admission(claim, boot, owner_status, helper_status)
    # Acquire over the same claim with the same answers: the first probe is the owner's.
    world = h.fresh(boot_id=boot, status=lambda _o, n: owner_status if n == 1 else helper_status)
    world.store.put(ADMISSION_CLAIM, form.canonical)
    try:
        h.p.resource("export-admission", "admission", h.p.export_admission.acquire()).drop()
        acquire = {"ok": True}
    except ComponentError as error:
        acquire = failure(error)
    return {"disposition": verdict.disposition, "calls": verdict.consulted, "acquire": acquire}


PHASES = ("parent-owned", "helper-launching", "helper-active", "cleanup-unsafe")
RAW_PHASES = ("preparing", "launching", "running", "settled")


def _admission_step(step: Dict[str, Any]) -> Optional[Callable[[Any], Any]]:
    """The call a step makes on a held admission, or None when the typed API cannot say it."""
    op = step.get("op")
    if op == "update":
        phase, helper = step.get("phase"), step.get("helper")
        helper_owner = None if helper is None else owner_arg(helper)
        if phase not in PHASES or (helper is not None and helper_owner is None):
            return None
        return lambda a: a.update(phase, helper_owner)
    if op == "bind":
        pid = i64_arg(step.get("child_pid"))
        return None if pid is None else (lambda a: a.bind_helper(pid))
    simple = {"begin": "begin_helper_launch", "settle": "settle_helper", "mark-cleanup-unsafe": "mark_cleanup_unsafe", "release": "release"}
    if op in simple:
        return lambda a: getattr(a, simple[op])()
    return None


def admission_transition(h: Harness, v: Dict[str, Any]) -> Any:
    steps = v.get("steps") or []
    calls = [_admission_step(s) for s in steps]
    if any(c is None for c in calls):
        return SKIPPED
    claim, form = h.parsed("parse-export-admission", value_text(v["claim"]), "value")
    world = h.fresh()
    world.store.put(ADMISSION_CLAIM, form.canonical)
    handle = h.p.resource("export-admission", "admission", h.p.export_admission.static("admission", "resume", claim, v.get("released") is True))
    results = []
    try:
        for step, call in zip(steps, calls):
            world.processes.captured = captured(step)
            world.store.fail_next_cas = step.get("cas_ok") is False
            before_sha, before_revision = handle.content_sha256(), handle.claim().revision
            try:
                call(handle)
            except ComponentError as error:
                results.append(failure(error))
                continue
            finally:
                world.store.fail_next_cas = False
            after = handle.claim()
            rotated = after.revision != before_revision
            rotation_ok = not rotated or (isinstance(after.revision, str) and UUID_V4.fullmatch(after.revision) is not None)
            results.append(
                {
                    "ok": True,
                    "changed": handle.content_sha256() != before_sha,
                    "released": handle.released(),
                    "phase": after.phase,
                    "helperOwner": owner_json(after.helper_owner),
                    "revision_rotated": rotated if rotation_ok else "not a lowercase UUID v4",
                }
            )
    finally:
        handle.drop()
    return {"results": results}


def invocation_owner_status(h: Harness, v: Dict[str, Any]) -> Any:
    lease, form = h.parsed("parse-invocation-lease", value_text(v["lease"]))
    parent, host = status_arg(v["parent_status"]), status_arg(v["host_status"])
    sha = v["content_sha256"] if isinstance(v.get("content_sha256"), str) else form.sha256
    try:
        s = h.p.dispositions.invocation_owner_status(lease, sha, parent, host)
    except ComponentError as error:
        return {**failure(error), "calls": []}
    return {"ok": True, "combined": s.combined, "reported": s.reported, "calls": s.consulted}


def directory_lease_request(h: Harness, v: Dict[str, Any]) -> Any:
    role, path = v.get("role"), v.get("path")
    if role not in ("raw-working", "bundle-stage") or not isinstance(path, str):
        return SKIPPED
    if "output_root" in v and not isinstance(v["output_root"], str):
        return SKIPPED
    request = Rec(
        role=role,
        path=path,
        output_root=v.get("output_root"),
        recover_after_ms=js_number(v.get("recover_after_ms")),
        now_ms=js_number(v.get("now_ms")),
    )
    h.fresh()
    try:
        h.p.directory_leases.check_request(request)
        return {"ok": True}
    except ComponentError as error:
        return failure(error)


def raw_lease_disposition(h: Harness, v: Dict[str, Any]) -> Any:
    op = v.get("op")
    if op == "disposition":
        claim, _ = h.parsed("parse-directory-lease", value_text(v["claim"]), "value", "")
        now = v.get("now_ms")
        if not (isinstance(now, int) and not isinstance(now, bool) and 0 <= now < 2**64):
            raise Malformed("now_ms")
        verdict = h.p.dispositions.raw_lease(claim, now, status_arg(v["child_status"]))
        return {"disposition": verdict.disposition, "calls": verdict.consulted}
    if op == "recovery-time":
        h.fresh()
        try:
            r = h.p.directory_leases.recover(js_number(v.get("now_ms")))
        except ComponentError as error:
            return failure(error)
        return {"ok": True, "report": {k: getattr(r, k) for k in ("recovered", "published", "active", "indeterminate")}}
    raise Malformed(f"op {op}")


def _lease_step(step: Dict[str, Any]) -> Optional[Callable[[Any], Any]]:
    op = step.get("op")
    if op == "update":
        phase = step.get("phase")
        if phase not in RAW_PHASES:
            return None
        if "child_pid" not in step:
            return lambda lease: lease.update(phase, None)
        pid = i64_arg(step["child_pid"])
        return None if pid is None else (lambda lease: lease.update(phase, pid))
    if op == "release":
        return lambda lease: lease.release()
    return None


def raw_lease_transition(h: Harness, v: Dict[str, Any]) -> Any:
    steps = v.get("steps") or []
    calls = [_lease_step(s) for s in steps]
    if any(c is None for c in calls):
        return SKIPPED
    claim, form = h.parsed("parse-directory-lease", value_text(v["claim"]), "value", "")
    world = h.fresh()
    world.store.put(f"{DIRECTORY_LEASES}/{claim.id}.json", form.canonical)
    lease = h.p.resource("directory-leases", "directory-lease", h.p.directory_leases.static("directory-lease", "resume", claim, v.get("released") is True))
    results = []
    try:
        for step, call in zip(steps, calls):
            world.processes.captured = captured(step)
            world.store.fail_next_cas = step.get("cas_ok") is False
            before = lease.content_sha256()
            try:
                call(lease)
            except ComponentError as error:
                results.append(failure(error))
                continue
            finally:
                world.store.fail_next_cas = False
            after, sha = lease.claim(), lease.content_sha256()
            results.append(
                {"ok": True, "changed": sha != before, "released": lease.released(), "phase": after.phase, "childOwner": owner_json(after.child_owner), "sha256": sha}
            )
    finally:
        lease.drop()
    return {"results": results}


def _invocation_entry(h: Harness, v: Dict[str, Any]) -> tuple:
    """The one entry of an invocation-lease vector as the WIT `entry` (a snapshot record when
    valid, the lease id when not), its file name and its text."""
    if "lease" in v:
        lease, form = h.parsed("parse-invocation-lease", value_text(v["lease"]))
        return Rec(lease=lease, content_sha256=form.sha256), f"{lease.lease_id}.json", form.canonical
    lease_id, entry_text = v.get("lease_id"), v.get("entry_text")
    if not isinstance(lease_id, str) or not isinstance(entry_text, str):
        raise Malformed("entry")
    name = f"{lease_id}.json"
    listed = h.p.records.classify_invocation_entry(name, entry_text)
    if listed.tag == "valid":
        lease, form = listed.payload
        return Rec(lease=lease, content_sha256=form.sha256), name, entry_text
    return lease_id, name, entry_text


def admission_entry_decision(h: Harness, v: Dict[str, Any]) -> Any:
    entry, _, _ = _invocation_entry(h, v)
    verdict = h.p.invocation_leases.admission_entry(text(v.get("plugin_id")), entry, status_arg(v["parent_status"]), status_arg(v["host_status"]))
    out = {"decision": verdict.decision, "calls": verdict.consulted}
    if verdict.error is not None:
        out["error"] = error_message(verdict.error.payload)
    return out


def repair_decision(h: Harness, v: Dict[str, Any]) -> Any:
    entry, name, entry_text = _invocation_entry(h, v)
    recorded = entry.lease.owner.process if isinstance(entry, Rec) else None
    parent, host = status_arg(v["parent_status"]), status_arg(v["host_status"])

    def is_owner(o: Rec) -> bool:
        return recorded is not None and same_owner(o, recorded)

    boot = v.get("current_boot_id")
    world = h.fresh(boot_id=boot if isinstance(boot, str) else None, status=lambda o, _n: parent if is_owner(o) else host)
    world.store.put(f"{INVOCATIONS}/{name}", entry_text)
    world.store.fail_next_cas = v.get("removal_succeeds") is False
    try:
        outcome = h.p.invocation_leases.repair(v.get("recover") is True)
    except ComponentError as error:
        return failure(error)
    r = outcome.report
    return {
        "decision": outcome.decisions[0][1] if outcome.decisions else "none",
        "calls": ["owner" if is_owner(o) else "host" for o in world.processes.probed],
        "boot_lookups": world.processes.boot_lookups,
        "report": {k: getattr(r, k) for k in ("inspected", "removed", "active", "unknown", "invalid")},
    }


CONTAINMENT_METHODS = {"hostStarting": "host_starting", "hostStarted": "host_started", "cleanupComplete": "cleanup_complete", "cleanupUnsafe": "cleanup_unsafe"}


def _containment_step(h: Harness, step: Dict[str, Any]) -> Optional[Callable[[Any], Any]]:
    method = step.get("method")
    if method == "release":
        return lambda c: h.p.invocation_leases.release(c.current())
    if method in ("hostStarting", "hostStarted"):
        host = step.get("host")
        # Exactly the three owner members: an extra or missing one is a dynamic-type argument.
        if not isinstance(host, dict) or len(host) != 3:
            return None
        o = owner_arg(host)
        return None if o is None else (lambda c: getattr(c, CONTAINMENT_METHODS[method])(o))
    if method in CONTAINMENT_METHODS:
        return lambda c: getattr(c, CONTAINMENT_METHODS[method])()
    return None


def containment_json(c: Optional[Rec]) -> Any:
    if c is None:
        return None
    if c.status == "parent-owned":
        return {"status": c.status}
    return {"status": c.status, "host": owner_json(c.host)}


def containment_transition(h: Harness, v: Dict[str, Any]) -> Any:
    steps = v.get("steps") or []
    calls = [_containment_step(h, s) for s in steps]
    if any(c is None for c in calls):
        return SKIPPED
    lease, form = h.parsed("parse-invocation-lease", value_text(v["lease"]))
    world = h.fresh()
    world.store.put(f"{INVOCATIONS}/{lease.lease_id}.json", form.canonical)
    sha = v["content_sha256"] if isinstance(v.get("content_sha256"), str) else form.sha256
    try:
        handle = h.p.invocation_leases.static("containment-controller", "create", Rec(lease=lease, content_sha256=sha))
    except ComponentError as error:
        return {"constructed": failure(error), "results": []}
    controller = h.p.resource("invocation-leases", "containment-controller", handle)
    released = False
    results = []
    try:
        for step, call in zip(steps, calls):
            world.store.fail_next_cas = step.get("cas_ok") is False
            before = controller.current().content_sha256
            try:
                call(controller)
            except ComponentError as error:
                results.append(failure(error))
                continue
            finally:
                world.store.fail_next_cas = False
            released = released or step.get("method") == "release"
            current = controller.current()
            results.append(
                {
                    "ok": True,
                    "changed": current.content_sha256 != before,
                    "released": released,
                    "containment": containment_json(current.lease.containment),
                    "sha256": current.content_sha256,
                }
            )
    finally:
        controller.drop()
    return {"constructed": {"ok": True}, "results": results}


SUITES: Dict[str, Callable[[Harness, Dict[str, Any]], Any]] = {
    "canonical-json": canonical_json,
    "sha256": sha256,
    "identity-digest": identity_digest,
    "proc-stat": proc_stat,
    "export-admission-parse": export_admission_parse,
    "directory-lease-parse": directory_lease_parse,
    "invocation-lease-parse": invocation_lease_parse,
    "portable-identity-parse": portable_identity_parse,
    "admission-disposition": admission_disposition,
    "admission-transition": admission_transition,
    "invocation-owner-status": invocation_owner_status,
    "directory-lease-request": directory_lease_request,
    "raw-lease-disposition": raw_lease_disposition,
    "raw-lease-transition": raw_lease_transition,
    "admission-entry-decision": admission_entry_decision,
    "repair-decision": repair_decision,
    "containment-transition": containment_transition,
}


# --- Running a suite file -------------------------------------------------------------------


@dataclass
class Failure:
    name: str
    expected: Any
    actual: Any


@dataclass
class SuiteReport:
    suite: str
    passed: int = 0
    total: int = 0
    skipped: int = 0
    failures: List[Failure] = field(default_factory=list)

    @property
    def known(self) -> bool:
        return self.suite in SUITES

    def summary(self) -> str:
        """`<suite> python: <passed>/<total>`, with the Rust runner's notes."""
        unknown = "" if self.known else " (unknown suite)"
        skipped = f" ({self.skipped} skipped: dynamic-type)" if self.skipped else ""
        return f"{self.suite} python: {self.passed}/{self.total}{unknown}{skipped}"


def run_file(path: Path, harness: Harness) -> SuiteReport:
    report = SuiteReport(suite=Path(path).stem)
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").split("\n"), start=1):
        if not line.strip():
            continue
        try:
            v = json.loads(line)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}:{number}: not JSON: {error}") from None
        report.total += 1
        try:
            actual = harness.evaluate(v)
        except Malformed as error:
            actual = {"infrastructure": f"malformed vector: {error}"}
        except Exception as error:  # a trap or a host bug: the vector fails, the run goes on
            actual = {"infrastructure": f"{type(error).__name__}: {error}"}
            harness.reinstantiate()
        dynamic = "dynamic-type" in (v.get("tags") or [])
        if actual == SKIPPED and dynamic:
            report.skipped += 1
        elif matches(v.get("expect"), actual):
            report.passed += 1
        else:
            report.failures.append(Failure(v.get("name", "<unnamed>"), v.get("expect"), actual))
    return report
