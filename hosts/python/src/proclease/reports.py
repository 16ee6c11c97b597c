"""The reports of `doctor` and `recover`, as the native binary prints them.

One model per report (a `dict` that is the `--json` document, keys as the native binary's), and
a text printer of it. Ported from the native host's `host/src/api/report/{doctor,recovery}.rs`;
`tests/test_cli.py` compares both printers with the native binary's on the same state home.
Every decision and reason in them is the component's: these only arrange them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from ._binding import ComponentError, Variant

#: The `--json` documents' schema (the native `JSON_SCHEMA_VERSION`).
JSON_SCHEMA_VERSION = 1
#: The directory-lease collection (§6A.6) and the reference's bound on it.
LEASES = "recovery/beeper-message-like-me-directory-leases"
MAX_CLAIMS = 64
ADMISSION_CLAIM = "recovery/beeper-message-like-me-export-admission/active.json"

#: A recovery action's words (proclease-core `Action::words`), by the WIT case.
ACTION_WORDS = {
    "keep": "keep",
    "remove-directory": "remove directory",
    "count-published": "count as published",
    "remove-claim": "remove claim",
    "keep-directory": "release, keep directory",
    "already-recovered": "already recovered",
    "skip": "skip",
    "stop": "stop",
}


def dumps(document: Dict[str, Any]) -> str:
    """A `--json` document as the native binary prints it: pretty, keys sorted, 2 spaces."""
    return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False)


def error_message(error: Any) -> str:
    """The message of a WIT `error` value (`Variant(lease | storage | system, record)`)."""
    return error.payload.message if isinstance(error, Variant) else str(error)


def set_aside(home: Path, path: Path, name: str) -> str:
    return f"mv -- '{path}' '{home / '.proclease' / f'set-aside-{name}'}'"


def set_aside_lease_entry(home: Path, name: str) -> str:
    return set_aside(home, home / LEASES / name, name)


def age(now_ms: int, created_ms: int) -> str:
    seconds = max(0, now_ms - created_ms) // 1000
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    if seconds < 172_800:
        return f"{seconds // 3600}h"
    return f"{seconds // 86_400}d"


# --- recover ----------------------------------------------------------------------------------


def recovery_report(home: Path, recovery: Any) -> Dict[str, Any]:
    """`recover --json`'s document for a `host.Recovery`."""
    run = recovery.run
    outcomes = run.outcomes
    t = run.report
    counts = {"recovered": t.recovered, "published": t.published, "active": t.active, "indeterminate": t.indeterminate}
    rows = []
    for o in outcomes:
        refusal = o.action.payload if o.action.tag in ("skip", "stop") else None
        rows.append(
            {
                "file": o.file_name,
                "path": o.claim.path if o.claim is not None else None,
                "leaseId": o.claim.id if o.claim is not None else None,
                "disposition": o.disposition,
                "action": ACTION_WORDS[o.action.tag],
                "done": o.done,
                "error": error_message(refusal) if refusal is not None else None,
                "reason": o.reason,
                "setAside": set_aside_lease_entry(home, o.file_name) if o.claim is None and refusal is not None else None,
            }
        )
    creations = []
    for c in recovery.creations:
        tag, payload = creation_action(c.action)
        creations.append(
            {
                "file": c.file_name,
                "path": c.path,
                "action": tag,
                "removed": list(payload) if tag == "finish" else [],
                "error": payload if tag == "skip" else None,
                "done": c.done,
                "reason": c.reason,
            }
        )
    document: Dict[str, Any] = {
        "schemaVersion": JSON_SCHEMA_VERSION,
        "dryRun": recovery.dry_run,
        "directoryLeases": {
            **counts,
            "alreadyRecovered": sum(1 for o in outcomes if o.action.tag == "already-recovered"),
            "skipped": sum(1 for o in outcomes if o.action.tag == "skip"),
            "releasedKept": sum(1 for o in outcomes if o.action.tag == "keep-directory"),
            "stopped": error_message(run.stopped) if run.stopped is not None else None,
            "cause": run.cause,
            "entries": rows,
        },
        "directoryCreations": creations,
    }
    if recovery.invocations is not None:
        t = recovery.invocations.report
        document["invocationLeases"] = {
            "inspected": t.inspected,
            "removed": t.removed,
            "active": t.active,
            "unknown": t.unknown,
            "invalid": t.invalid,
            "entries": [{"leaseId": lease_id, "decision": decision} for lease_id, decision in recovery.invocations.decisions],
        }
    return document


def _outcome_line(home: Path, row: Dict[str, Any], outcome: Any, dry_run: bool) -> str:
    what = row["path"] or row["file"]
    tag = outcome.action.tag
    did, would = {
        "remove-directory": ("removed", "would remove"),
        "count-published": ("released the claim of", "would release the claim of"),
        "remove-claim": ("released the claim of", "would release the claim of"),
        "keep-directory": ("released the lease of", "would release the lease of"),
        "keep": ("kept", "would keep"),
        "already-recovered": ("already recovered by another recoverer:", "already recovered:"),
        "skip": ("skipped", "would skip"),
        "stop": ("stopped at", "would stop at"),
    }[tag]
    verb = would if dry_run else did
    reason = outcome.reason
    if tag == "keep":
        return f"{verb} {what}: {outcome.disposition or '?'} ({reason})"
    if tag == "count-published":
        return f"{verb} {what}: it was already published to {outcome.claim.output_root or ''} ({reason})"
    if tag == "remove-claim":
        return f"{verb} {what}: its directory was already gone ({reason})"
    if tag == "keep-directory":
        return f"{verb} {what} and {'keep' if dry_run else 'kept'} the directory ({reason})"
    if tag in ("skip", "stop"):
        error = outcome.action.payload
        code = getattr(error.payload, "code", None) if isinstance(error, Variant) else None
        replaced = code in ("directory-lease-target-changed-before-recovery", "directory-lease-parent-changed-before-recovery")
        fix = ""
        if outcome.claim is None:
            fix = f"; proclease never deletes it: check it, then move it aside: {set_aside_lease_entry(home, outcome.file_name)}"
        elif replaced:
            fix = (
                "; the directory there now is not the one this lease holds (re-created or replaced), so recovery will never remove it: "
                f"check that no run uses it, then move the stale lease record aside: {set_aside_lease_entry(home, outcome.file_name)}"
            )
        return f"{verb} {what}: {error_message(error)} ({reason}){fix}"
    return f"{verb} {what} ({reason})"


def creation_action(action: Any) -> Tuple[str, Any]:
    """A `creation-action` as `(tag, payload)`. wasmtime-py lifts this variant without tags —
    its cases' payloads differ in type: `keep` is None, `finish` the list of removed
    directories, `skip` the reason string — or, should it tag it, as a `Variant`."""
    if isinstance(action, Variant):
        return action.tag, action.payload
    if action is None or action == "keep":
        return "keep", None
    if isinstance(action, (list, tuple)):
        return "finish", list(action)
    return "skip", action


def _creation_line(c: Any, dry_run: bool) -> str:
    what = c.path or c.file_name
    tag, payload = creation_action(c.action)
    if tag == "keep":
        return f"kept the creation of {what}: {c.reason}"
    if tag == "finish" and not payload:
        return f"{'would finish' if dry_run else 'finished'} the intent to create {what} ({c.reason}; nothing it created is left empty and unleased)"
    if tag == "finish":
        return f"{'would remove' if dry_run else 'removed'} {', '.join(payload)} ({c.reason}: a crashed run created it and never leased it)"
    return f"skipped the creation intent {c.file_name}: {payload} ({c.reason})"


def _invocation_line(lease_id: str, decision: str, dry_run: bool) -> str:
    if decision == "remove":
        return f"{'would remove' if dry_run else 'removed'} invocation lease {lease_id}: its owner and host are provably gone"
    if decision == "active":
        return f"kept invocation lease {lease_id}: its owner or host is alive"
    if decision == "unknown":
        return f"kept invocation lease {lease_id}: its owner or host cannot be proven gone (a tombstone of this boot stays until a reboot)"
    if decision == "removal-refused":
        return f"kept invocation lease {lease_id}: it changed while it was being removed"
    return f"kept invocation lease {lease_id}: not a valid lease; it blocks acquires until repaired by hand (`proclease validate` on it says why)"


def recovery_text(home: Path, recovery: Any, document: Dict[str, Any]) -> str:
    """`recover`'s text: a line per entry, then the counts (a real run)."""
    dry_run = recovery.dry_run
    leases = document["directoryLeases"]
    lines = [_outcome_line(home, row, o, dry_run) for row, o in zip(leases["entries"], recovery.run.outcomes)]
    lines += [_creation_line(c, dry_run) for c in recovery.creations]
    invocations = document.get("invocationLeases")
    if invocations is not None:
        lines += [_invocation_line(e["leaseId"], e["decision"], dry_run) for e in invocations["entries"]]
    inspected = invocations["inspected"] if invocations else 0
    if dry_run:
        # A stop (a held lock, an unreadable collection) is not "nothing": its error follows.
        if not leases["entries"] and leases["stopped"] is None and not document["directoryCreations"] and inspected == 0:
            lines.append("nothing to recover: no directory leases and no invocation leases")
    else:
        for key in ("recovered", "published", "active", "indeterminate"):
            lines.append(f"{key}: {leases[key]}")
        for count, words in ((leases["releasedKept"], "released, directory kept"), (leases["alreadyRecovered"], "already recovered"), (leases["skipped"], "skipped")):
            if count > 0:
                lines.append(f"{words}: {count}")
        if invocations and inspected > 0:
            lines.append(f"invocation leases removed: {invocations['removed']} (active {invocations['active']}, unknown {invocations['unknown']}, invalid {invocations['invalid']})")
    return "".join(f"{line}\n" for line in lines)


# --- doctor -----------------------------------------------------------------------------------


def _row(kind: str, target: str, owner_pid: Optional[int], child_pid: Optional[int], phase: str, age_text: str, disposition: str, reason: str, action: Optional[str]) -> Dict[str, Any]:
    return {
        "kind": kind,
        "target": target,
        "ownerPid": owner_pid,
        "childPid": child_pid,
        "phase": phase,
        "age": age_text,
        "disposition": disposition,
        "reason": reason,
        "recoverAction": action,
        "ownerHost": None,
    }


def doctor_report(host: Any, now_ms: int) -> Dict[str, Any]:
    """`doctor --json`'s document: the admission, every directory lease (a recovery dry run's
    decisions) and every invocation lease, changing nothing. Its waits for other processes'
    locks share one bound (`Host.lock_timeout`); one that reached it fails the survey with
    `LockTimeout` naming the holder, rather than show a held collection as refused (the native
    `Host::survey`; exit status 5)."""
    from .host import LockTimeout

    kernel = host.effects.sys_kernel
    with kernel.operation():
        document = _doctor_report(host, now_ms)
        timed_out = kernel.timed_out()
    if timed_out is not None:
        raise LockTimeout(host.component.recovery_advice.survey_waited_out(timed_out))
    return document


def _doctor_report(host: Any, now_ms: int) -> Dict[str, Any]:
    from .host import RecoveryIncomplete

    home = host.state_home
    entries: List[Dict[str, Any]] = []
    try:
        survey = host.survey_admission()
    except ComponentError as error:
        if error.kind != "lease":
            raise
        path = home / ADMISSION_CLAIM
        entries.append(_row("admission", "active.json", None, None, "-", "-", "invalid", f"{path}: {error.message}; no --exclusive run can start while it is there, and proclease never deletes it; check that no export runs, then move it aside: {set_aside(home, path, 'active.json')}", None))
        survey = None
    if survey is not None:
        reason = survey.reason
        if survey.disposition == "indeterminate":
            reason = f"{reason}; new --exclusive runs are refused until a reboot proves it gone, or until you remove {home / ADMISSION_CLAIM} by hand after checking no helper runs"
        claim = survey.claim
        entries.append(_row("admission", claim.id, claim.owner.pid, claim.helper_owner.pid if claim.helper_owner is not None else None, claim.phase or "v1", "-", survey.disposition, reason, None))
    try:
        recovery = host.recover(dry_run=True)
    except RecoveryIncomplete as incomplete:
        # The survey shows no partial recovery: it fails as the step did (the native survey).
        raise incomplete.error from incomplete.error.__cause__
    run = recovery.run
    over_bound = None
    if len(run.outcomes) > MAX_CLAIMS:
        over_bound = (
            f"directory leases: {len(run.outcomes)} entries, over the reference's bound of {MAX_CLAIMS}: ghostget's recovery refuses the whole collection and "
            "new leases are refused; `proclease recover` recovers the dead ones, oldest first"
        )
    if run.stopped is not None and not any(o.action.tag in ("skip", "stop") for o in run.outcomes):
        cause = f" ({run.cause})" if run.cause else ""
        entries.append(_row("lease-entry", LEASES, None, None, "-", "-", "invalid", f"recover would stop: {error_message(run.stopped)}{cause}", "stop"))
    for o in run.outcomes:
        reason = o.reason
        if o.action.tag in ("skip", "stop"):
            reason += f"; recover would stop: {error_message(o.action.payload)} (`recover --skip-invalid` recovers the others)"
        if o.claim is not None:
            c = o.claim
            entries.append(
                _row(
                    "bundle-stage" if c.role == "bundle-stage" else "raw-working",
                    c.path,
                    c.owner.pid,
                    c.child_owner.pid if c.child_owner is not None else None,
                    c.phase,
                    age(now_ms, c.created_at_ms),
                    o.disposition or "invalid",
                    reason,
                    ACTION_WORDS[o.action.tag],
                )
            )
        else:
            entries.append(_row("lease-entry", o.file_name, None, None, "-", "-", "invalid", reason, ACTION_WORDS[o.action.tag]))
    decisions = dict(recovery.invocations.decisions) if recovery.invocations is not None else {}
    for entry in host.invocation_leases():
        # `entry` is `valid(snapshot) | invalid(lease id)`: wasmtime-py lifts it untagged (a
        # record or a string).
        if isinstance(entry, str):
            entries.append(_row("invocation", entry, None, None, "-", "-", "invalid", "not a valid canonical lease: blocks every plugin's acquire until repaired by hand", None))
            continue
        snapshot = entry
        lease = snapshot.lease
        status = host.component.invocation_leases.lease_status(snapshot)
        decision = decisions.get(lease.lease_id)
        acquired = lease.acquired_at
        if decision == "remove":
            reason = f"its owner (pid {lease.owner.process.pid}) and host are provably gone; `proclease recover` removes it (acquired {acquired})"
        elif decision == "active":
            reason = f"its owner or host is alive (owner status {status}; acquired {acquired})"
        elif decision == "unknown":
            reason = (
                f"its owner or host cannot be proven gone (owner status {status}): kept; a tombstone of this boot (cleanup never completed "
                f"after plugin code ran) stays until a reboot (acquired {acquired})"
            )
        else:
            reason = f"owner status {status} (acquired {acquired})"
        disposition = host.component.invocation_leases.survey_disposition(decision, status) or "invalid"
        host_owner = lease.containment.host if lease.containment is not None else None
        entries.append(
            _row(
                "invocation",
                f"{lease.identity.plugin_id} {lease.identity.operation} ({lease.lease_id})",
                lease.owner.process.pid,
                host_owner.pid if host_owner is not None else None,
                lease.containment.status if lease.containment is not None else "v1",
                "-",
                disposition,
                reason,
                decision,
            )
        )
    return {
        "schemaVersion": JSON_SCHEMA_VERSION,
        "stateHome": str(home),
        "store": "file",
        "containment": {"available": False, "reason": "the Python host runs commands without a PID namespace"},
        "cgroup": {"available": False, "reason": "the Python host puts no command in a cgroup"},
        "entries": entries,
        "overBound": over_bound,
        "clusterState": None,
        # No cluster mode here, so no supervisor with a dead-man timer (docs/cluster.md).
        "deadManKills": [],
    }


def _columns(header: List[str], rows: List[List[str]], right: List[bool]) -> List[str]:
    widths = [len(h) for h in header]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row)]
    out = []
    for cells in [header] + rows:
        line = ""
        for cell, width, r in zip(cells, widths, right):
            pad = " " * (width - len(cell))
            line += (pad + cell if r else cell + pad) + "  "
        out.append(line)
    return out


def doctor_text(document: Dict[str, Any]) -> str:
    """`doctor`'s table (`KIND TARGET OWNER CHILD PHASE AGE DISPOSITION WHY`)."""
    out = f"state home: {document['stateHome']}\n"
    containment = document["containment"]
    if containment["reason"]:
        out += f"containment: none, because {containment['reason']} (docs/containment.md: a command's detached processes are covered only while they keep its witness)\n"
    if document["overBound"]:
        out += f"{document['overBound']}\n"
    entries = document["entries"]
    if not entries:
        return out + "no admission claim, directory leases or invocation leases\n"

    def pid(p: Optional[int]) -> str:
        return "-" if p is None else str(p)

    rows = [[e["kind"], e["target"], pid(e["ownerPid"]), pid(e["childPid"]), e["phase"], e["age"], e["disposition"]] for e in entries]
    header = ["KIND", "TARGET", "OWNER", "CHILD", "PHASE", "AGE", "DISPOSITION"]
    reasons = ["WHY"] + [e["reason"] for e in entries]
    for line, why in zip(_columns(header, rows, [False, False, True, True, False, True, False]), reasons):
        out += f"{line}{why}\n"
    return out


