"""The `proclease` command of the Python host: `run`, `doctor [--json]`, `recover [--dry-run]
[--json]`, with the native binary's output formats and exit statuses.

Exit status: 0 ok; 1 error; 2 usage error; 3 blocked by a live owner (`another export is
active`); 4 a prior owner cannot be proven dead; 5 a lock of the state home stayed held past
the bound. `run` exits with the command's status once it ran (128+N for signal N).
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import re
import signal
import sys
import time
from typing import List, Optional, Tuple

from . import reports
from ._binding import ComponentError
from ._wit import HostError
from .host import Host, LockTimeout, RecoveryIncomplete, Refused
from ._errors import Error
from .state_home import StateHomeError
from .supervisor import Interrupted, StartError
from .supervisor import run as supervise

EXIT_BLOCKED = 3
EXIT_INDETERMINATE = 4
EXIT_LOCK_TIMEOUT = 5


#: The units of a duration, in seconds: humantime's (`humantime::parse_duration`, which the
#: native binary's options use), so that one `--lock-timeout` means the same to every host.
_UNITS = {
    **dict.fromkeys(("nanos", "nsec", "ns"), 1e-9),
    **dict.fromkeys(("usec", "us", "\u00b5s"), 1e-6),
    **dict.fromkeys(("millis", "msec", "ms"), 1e-3),
    **dict.fromkeys(("seconds", "second", "secs", "sec", "s"), 1.0),
    **dict.fromkeys(("minutes", "minute", "min", "mins", "m"), 60.0),
    **dict.fromkeys(("hours", "hour", "hr", "hrs", "h"), 3600.0),
    **dict.fromkeys(("days", "day", "d"), 86400.0),
    **dict.fromkeys(("weeks", "week", "wk", "wks", "w"), 604800.0),
    **dict.fromkeys(("months", "month", "M"), 2630016.0),
    **dict.fromkeys(("years", "year", "yr", "yrs", "y"), 31557600.0),
}
_TERM = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z\u00b5]+)")


def duration(text: str) -> float:
    """A duration as the native binary reads it (`60s`, `1.5s`, `1m30s`, `250ms`, `0`), or plain
    seconds (`2`), as seconds: finite and not negative (`inf`, `nan`, `-1` are usage errors,
    not "for ever" or "no wait")."""
    stripped = text.strip()
    seconds: Optional[float] = float(stripped) if re.fullmatch(r"\d+(?:\.\d+)?", stripped) else None
    if seconds is None and stripped:
        terms = list(_TERM.finditer(stripped))
        if terms and "".join(t.group(0) for t in terms).strip() == stripped and all(t.group(2) in _UNITS for t in terms):
            seconds = sum(float(t.group(1)) * _UNITS[t.group(2)] for t in terms)
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r} (e.g. 60s, 1m30s, 250ms)")
    return seconds


def _common(suppress: bool) -> argparse.ArgumentParser:
    """The options every subcommand takes, before or after its name (as the native binary's
    global options). A subcommand's copy has no defaults, so that it does not overwrite a value
    given before the subcommand."""
    default = (lambda value: argparse.SUPPRESS) if suppress else (lambda value: value)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--state-home", metavar="DIR", default=default(None), help="the state home (default: $PROCLEASE_STATE_HOME, $GHOSTGET_STATE_HOME, $XDG_DATA_HOME/proclease, ~/.local/share/proclease)")
    common.add_argument("--workspace-root", metavar="DIR", action="append", default=default([]), help="a directory under which leased directories may be inspected and removed; repeatable (default: your home directory and the temporary directory)")
    common.add_argument("--lock-timeout", type=duration, metavar="DURATION", default=default(10.0), help="how long one operation may wait, in all, for locks of the state home another process holds (a stopped proclease, a long recovery), before failing with exit status 5 and the holder's pid; after 1 s the wait says who it waits for (default 10s)")
    return common


def parser() -> argparse.ArgumentParser:
    common = _common(suppress=True)
    top = argparse.ArgumentParser(prog="proclease", parents=[_common(suppress=False)], description="Crash-safe, process-owned leases on shared local state (the Python host of the proclease component).")
    sub = top.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", parents=[common], help="run a command in a leased directory")
    run.add_argument("--workdir", required=True, metavar="DIR", help="the directory to lease and run in (created 0700 if absent; an existing one must be yours, mode 0700)")
    run.add_argument("--exclusive", action="store_true", help="also hold the export admission while the command runs")
    run.add_argument("--recover-after", type=duration, default=60.0, metavar="DURATION", help="a lease whose supervisor died while launching becomes recoverable this long after it was taken (default 60s)")
    run.add_argument("--grace", type=duration, default=5.0, metavar="DURATION", help="after the command exits, what it left running gets SIGTERM and, after this long, SIGKILL (default 5s)")
    run.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- CMD", help="the command")
    doctor = sub.add_parser("doctor", parents=[common], help="every claim and lease in the state home, with its disposition and why")
    doctor.add_argument("--json", action="store_true", help="print JSON instead of a table")
    recover = sub.add_parser("recover", parents=[common], help="recover leases whose owners are provably gone")
    recover.add_argument("--dry-run", action="store_true", help="show what would be done, and why, without changing anything")
    recover.add_argument("--skip-invalid", action="store_true", help="leave every lease file that cannot be recovered where it is, report it, and recover the rest")
    recover.add_argument("--keep", action="append", default=[], metavar="DIR", help="keep this directory when its lease's owner is proven gone (release only the lease); repeatable")
    recover.add_argument("--json", action="store_true", help="print JSON instead of text")
    return top


def failure_text(error: ComponentError) -> str:
    """The message, then each cause on a line of its own (`  caused by: …`), as the native CLI."""
    message = error.message
    cause = error.failure if error.kind == "lease" else None
    if cause is not None and cause.message not in message:
        message += f"\n  caused by: {cause.message}"
    return message


def _failure(error: Error, attribute_wait: bool = True) -> Tuple[str, int]:
    """What the command line says of `error` (without `proclease: `) and its exit status. A
    `ComponentError` whose operation had a wait reach its bound gets that wait's words and exit
    status 5; with `attribute_wait` false, only when its own message is the wait's."""
    if isinstance(error, LockTimeout):
        return str(error), EXIT_LOCK_TIMEOUT
    if isinstance(error, HostError):
        # An effect failed outside a component call: its failure record's words.
        payload = error.payload
        return str(payload.message if hasattr(payload, "message") else payload), 1
    if not isinstance(error, ComponentError):
        return str(error), 1
    message, status = failure_text(error), exit_status(error)
    if error.lock_timeout is not None and (attribute_wait or error.lock_timeout in message):
        # A wait for another process's lock reached the bound and the call failed for it: the
        # holder is named, as the native binary names it.
        if error.lock_timeout not in message:
            message += f": {error.lock_timeout}"
        status = EXIT_LOCK_TIMEOUT
    return message, status


def exit_status(error: ComponentError) -> int:
    if error.code == "another-export-is-active":
        return EXIT_BLOCKED
    if error.code == "prior-export-owner-cannot-be-inspected-safely":
        return EXIT_INDETERMINATE
    return 1


def _show_warnings() -> None:
    """Shows the package's warnings (a wait for another process's lock says who it waits for)
    on stderr, once per process, as the native binary does."""
    logger = logging.getLogger("proclease")
    if not any(getattr(h, "_proclease_cli", False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("proclease: %(message)s"))
        handler._proclease_cli = True  # type: ignore[attr-defined]
        logger.addHandler(handler)


def _run_hint(host: Host, workdir: str, code: Optional[str]) -> str:
    """What to do after `run` was refused with `code`, on a line of its own, as the native
    binary says it (worded by the artifact: `workspace-advice`, `run-refusals`); empty when
    there is nothing to add."""
    try:
        if code == "directory-lease-target-is-not-an-owned-physical-directory":
            return "\n" + host.component.exports("workspace-advice").why_not_physical(os.path.realpath(workdir))
        if code == "directory-lease-collection-exceeded-its-reviewed-bound":
            return "\n" + host.component.run_refusals.lease_collection_full()
    except Exception:  # noqa: BLE001 (a hint that cannot be worded is left out; the error stands)
        pass
    return ""


def main(args: Optional[List[str]] = None) -> int:
    options = parser().parse_args(args)
    _show_warnings()
    try:
        host = Host(options.state_home, options.workspace_root or None, lock_timeout=options.lock_timeout)
        if options.command == "doctor":
            document = reports.doctor_report(host, time.time_ns() // 1_000_000)
            print(reports.dumps(document) if options.json else reports.doctor_text(document), end="\n" if options.json else "")
            return 0
        if options.command == "recover":
            keep = [os.path.realpath(d) for d in options.keep]
            failed: Optional[RecoveryIncomplete] = None
            try:
                recovery = host.recover(dry_run=options.dry_run, skip_invalid=options.skip_invalid, keep=keep)
            except RecoveryIncomplete as incomplete:
                # What was done is reported before why the rest was not.
                recovery, failed = incomplete.done, incomplete
            # Its calls are done and no record names this process: its witness would only pile
            # up in the state home, one per `recover` (docs/witness.md), as the native CLI says.
            host.effects.process_identity.retire()
            document = reports.recovery_report(host.state_home, recovery)
            print(reports.dumps(document) if options.json else reports.recovery_text(host.state_home, recovery, document), end="\n" if options.json else "")
            advice = host.component.recovery_advice
            stopped = None if recovery.stopped is None else reports.error_message(recovery.stopped)
            if failed is not None:
                # Its own words, the wait's only when it is the wait's failure (an earlier wait
                # that left a lease as it is is said on its own line below, as natively).
                message, status = _failure(failed.error, attribute_wait=False)
                first, newline, rest = message.partition("\n")
                print(f"proclease: {advice.stopped_at(failed.step, first, options.dry_run)}{newline}{rest}", file=sys.stderr)
                if recovery.lock_timeout is not None:
                    print(f"proclease: {advice.waited_out(stopped, recovery.lock_timeout, options.dry_run)}", file=sys.stderr)
                    return EXIT_LOCK_TIMEOUT
                return status
            if recovery.lock_timeout is not None:
                # A wait that reached its bound, not something wrong with an entry: retry once
                # the holder is done (exit 5, with or without --skip-invalid).
                print(f"proclease: {advice.waited_out(stopped, recovery.lock_timeout, options.dry_run)}", file=sys.stderr)
                return EXIT_LOCK_TIMEOUT
            if stopped is not None:
                if not options.json:
                    print(f"proclease: {advice.stopped(stopped, recovery.run.cause, options.dry_run, options.skip_invalid)}", file=sys.stderr)
                return 1
            return 0
        argv = options.argv[1:] if options.argv[:1] == ["--"] else options.argv
        if not argv:
            print("proclease: run needs a command\nhint: put the command after `--`, e.g. proclease run --workdir DIR -- make -j4", file=sys.stderr)
            return 2
        return supervise(host, argv, options.workdir, exclusive=options.exclusive, recover_after=options.recover_after, grace=options.grace, log=lambda m: print(f"proclease: {m}", file=sys.stderr))
    except ComponentError as error:
        message, status = _failure(error)
        if options.command == "run":
            message += _run_hint(host, options.workdir, error.code)
        print(f"proclease: {message}", file=sys.stderr)
        return status
    except (LockTimeout, HostError) as error:
        # A lock held past the bound; an effect that failed outside a component call (opening
        # the state home, a witness).
        message, status = _failure(error)
        print(f"proclease: {message}", file=sys.stderr)
        return status
    except Interrupted as error:
        print(f"proclease: {error}", file=sys.stderr)
        return 128 + error.signal
    except KeyboardInterrupt:
        # Ctrl-C in `recover` or `doctor` (a `run` reports its own, above): it ends there, as
        # the native binary does, without a traceback; a recovery turn or lock this process
        # took is released with it.
        return 128 + signal.SIGINT
    except (Refused, StartError, StateHomeError, OSError, Error) as error:
        print(f"proclease: {error}", file=sys.stderr)
        return 1


def entry() -> None:
    """The console script `proclease`."""
    sys.exit(main())


if __name__ == "__main__":
    entry()
